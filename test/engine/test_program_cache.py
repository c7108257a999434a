"""The disk cache of rendered kernels keyed by their AST (engine/program_cache.py): with a warm disk, a fresh
process's first training step generates no code and compiles nothing; the key tells apart everything that changes
the source (the AST, the renderer's options, the code generator's own code)."""
from __future__ import annotations
import dataclasses, json, os, pathlib, subprocess, sys, textwrap
import pytest
from fusegrad import Tensor, Device, codegen
from fusegrad.helpers import Context
from fusegrad.engine import program_cache
from fusegrad.renderer import ProgramSpec
from fusegrad.uop.ops import UOp, Ops
from fusegrad.dtype import dtypes

REPO = pathlib.Path(__file__).resolve().parents[2]

def kernel_ast(scale: float) -> UOp:
    x = Tensor.ones(16, 8).contiguous().realize()
    (item,) = [i for i in (x * scale).sum(axis=1).schedule() if i.ast.op is Ops.SINK]
    return item.ast

def test_key_is_stable_and_tells_apart_what_changes_the_source(monkeypatch):
    options = Device["CPU"].renderer.options
    ast = kernel_ast(2.5)
    key = program_cache.program_key(ast, options)
    assert key is not None and key == program_cache.program_key(kernel_ast(2.5), options)
    assert program_cache.program_key(kernel_ast(3.5), options) != key
    with Context(NOOPT=1): assert program_cache.program_key(ast, Device["CPU"].renderer.options) != key
    assert program_cache.program_key(ast, dataclasses.replace(options, target="LLVM")) != key
    assert program_cache.program_key(ast, dataclasses.replace(options, max_vector_bytes=32)) != key
    monkeypatch.setattr(program_cache, "_codegen_version", "an edited code generator")
    assert program_cache.program_key(ast, options) != key

def test_record_round_trips_through_json():
    program = codegen.get_program(kernel_ast(1.5), Device["CPU"].renderer)
    record = program_cache.to_record(program)
    assert record is not None
    back = program_cache.from_record(json.loads(json.dumps(record)), "CPU")
    for field in ("name", "src", "global_size", "local_size", "outs", "ins", "op_estimate", "mem_estimate", "applied_opts"):
        assert getattr(back, field) == getattr(program, field), field
    assert back.device == "CPU" and back.vars == []

def test_programs_with_variables_are_not_stored():
    n = UOp(Ops.DEFINE_VAR, dtypes.index, (), ("n", 1, 8))
    program = ProgramSpec("E_n", "void E_n(float* restrict data0, long long n) {}\n", "CPU", [], [1, 1, 1], None, [n], [0], [], n * 2, 4)
    assert program_cache.to_record(program) is None
    assert program_cache.from_record({"name": "x"}, "CPU") is None   # a record of another shape is a miss

# one Adam step of a small MLP, counting what the step generated and compiled
STEP = """
    import json
    from fusegrad import Tensor, Device, codegen, nn
    from fusegrad.engine import program_cache, realize
    from fusegrad.nn.optim import Adam
    from fusegrad.nn.state import get_parameters
    if {edited}: program_cache._codegen_version = "an edited code generator"
    Tensor.manual_seed(0)
    layers = [nn.Linear(12, 16), nn.Linear(16, 4)]
    x, y = Tensor.randn(8, 12).realize(), Tensor([0, 1, 2, 3, 0, 1, 2, 3]).realize()
    params = get_parameters(layers)
    Tensor.realize(*params)
    optimizer = Adam(params, lr=1e-2)
    counts = {{"generated": 0, "compiled": 0}}
    compiler, get_program = Device["CPU"].compiler, codegen.get_program
    def counted(name, fn):
        def wrapper(*args, **kwargs):
            counts[name] += len(args[0]) if isinstance(args[0], list) else 1
            return fn(*args, **kwargs)
        return wrapper
    # (the wrapper calls the real generator: realize is told so, or it would neither use nor fill the program cache)
    realize._genuine_get_program = codegen.get_program = counted("generated", get_program)
    compiler.compile_batch = counted("compiled", compiler.compile_batch)
    original_compile = compiler.compile
    compiler.compile = lambda src: (counts.__setitem__("compiled", counts["compiled"] + 1), original_compile(src))[1]
    with Tensor.train():
        optimizer.zero_grad()
        loss = layers[1](layers[0](x).relu()).sparse_categorical_crossentropy(y).backward()
        optimizer.step()
        loss.realize()
    print(json.dumps({{**counts, "loss": loss.item(), "param": layers[0].weight.numpy().sum().item()}}))
"""

def run_step(cache: pathlib.Path, edited: bool = False) -> dict:
    env = {**os.environ, "FUSEGRAD_CACHE": str(cache), "CACHEDB": str(cache / "cache.db"), "DEV": "CPU"}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(STEP.format(edited=edited))], capture_output=True, text=True,
                            timeout=300, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])

@pytest.mark.hang_guard(600)
def test_warm_first_step_generates_and_compiles_nothing(tmp_path):
    cold = run_step(tmp_path)
    assert cold["generated"] > 5 and cold["compiled"] > 0
    warm = run_step(tmp_path)
    assert warm["generated"] == 0 and warm["compiled"] == 0, warm
    assert warm["loss"] == cold["loss"] and warm["param"] == cold["param"]
    # an edited code generator regenerates every kernel; its sources are unchanged, so their binaries are still found
    edited = run_step(tmp_path, edited=True)
    assert edited["generated"] == cold["generated"] and edited["compiled"] == 0, edited
    assert edited["loss"] == cold["loss"]

def test_put_many_stores_every_value(tmp_path):
    code = """
        from fusegrad.device import diskcache_get, diskcache_put_many
        diskcache_put_many("t", [("a", b"lib"), ("b", {"src": "void k() {}", "sizes": [1, 2]}), ("c", None)])
        diskcache_put_many("t", [("a", b"replaced")])
        print(diskcache_get("t", "a"), diskcache_get("t", "b"), diskcache_get("t", "missing"))
    """
    env = {**os.environ, "FUSEGRAD_CACHE": str(tmp_path), "CACHEDB": str(tmp_path / "cache.db")}
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, cwd=REPO, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "b'replaced' {'src': 'void k() {}', 'sizes': [1, 2]} None"
