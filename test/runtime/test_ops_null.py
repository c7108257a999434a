"""The NULL device: schedules, kernel counts and generated code at any size, with no memory or compiler."""
import pytest
from fusegrad import Tensor, GlobalCounters, TinyJit, Device
from fusegrad.codegen import get_program

def test_huge_matmul_schedules_and_runs_without_memory():
    # 16 GiB for a, 16 GiB for the product: more than this machine has, so this only passes if nothing is allocated
    a = Tensor.empty(65536, 65536, device="NULL")
    GlobalCounters.reset()
    (a @ a).sum().realize()
    assert GlobalCounters.kernel_count >= 1
    assert GlobalCounters.global_ops >= 2 * 65536 ** 3      # the flop estimate is the real one

def test_kernel_counts_match_the_cpu_device():
    def count(device: str) -> int:
        x, w = Tensor.empty(32, 64, device=device), Tensor.empty(64, 16, device=device)
        GlobalCounters.reset()
        ((x @ w).relu().sum(axis=1) + 1).realize()
        return GlobalCounters.kernel_count
    assert count("NULL") == count("CPU")

def test_renders_c_source():
    x = Tensor.empty(8, 8, device="NULL")
    item = (x * 2 + 1).schedule()[-1]
    program = get_program(item.ast, Device["NULL"].renderer)
    assert "void" in program.src and program.name in program.src

def test_reading_back_raises_unless_allowed(monkeypatch):
    x = Tensor.empty(4, device="NULL") + 1
    with pytest.raises(RuntimeError, match="NULL device holds no data"): x.numpy()
    monkeypatch.setenv("NULL_ALLOW_COPYOUT", "1")
    assert (Tensor.empty(4, device="NULL") * 3).tolist() == [0.0, 0.0, 0.0, 0.0]

def test_jit_captures_and_replays_on_null():
    @TinyJit
    def step(x: Tensor) -> Tensor: return (x @ x.T).relu().realize()
    GlobalCounters.reset()
    outputs = [step(Tensor.empty(512, 512, device="NULL").realize()) for _ in range(4)]   # run, capture, replay twice
    assert GlobalCounters.kernel_count >= 2
    assert all(out.shape == (512, 512) and out.device == "NULL" for out in outputs)

def test_only_real_backends_are_advertised():
    with pytest.raises(RuntimeError) as error: Device.canonicalize("METAL")
    message = str(error.value)
    assert "unknown device 'METAL'" in message
    from fusegrad.device import RUNTIMES
    known = message.split("known devices:")[1]
    for missing in ("METAL", "AMD"): assert f"'{missing}'" not in known     # no backend yet
    for name in RUNTIMES: assert f"'{name}'" in known
    assert "'NULL'" in message and "'CPU'" in message
