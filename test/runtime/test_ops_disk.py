"""The DISK device: files read with pread (a truncated file is an error, not SIGBUS), sub-buffers, writes
through copyin, read-only opening for loaders, and the error for anything that would need a kernel."""
import os, subprocess, sys, textwrap
import numpy as np
import pytest
from fusegrad import Tensor, dtypes, Device
from fusegrad.device import Buffer
from fusegrad.schedule import buffer_of
from fusegrad.runtime.ops_disk import DiskDevice, DiskComputeError, disk_view, disk_buffer, disk_file_tensor, DISK_ONLY_MESSAGE

@pytest.fixture
def data_file(tmp_path):
    path = tmp_path / "data.bin"
    payload = np.arange(64, dtype=np.uint8) * 3
    path.write_bytes(payload.tobytes())
    return str(path), payload

def test_registry_opens_disk_device(data_file):
    path, _ = data_file
    dev = Device[f"disk:{path}"]
    assert isinstance(dev, DiskDevice)
    assert dev.device == f"DISK:{path}" and Device.canonicalize(f"disk:{path}") == f"DISK:{path}"
    assert Device[f"DISK:{path}"] is dev

def test_map_file_and_read(data_file):
    path, payload = data_file
    t = Tensor.empty(64, dtype=dtypes.uint8, device=f"disk:{path}")
    assert t.device == f"DISK:{path}"
    np.testing.assert_array_equal(t.numpy(), payload)
    np.testing.assert_array_equal(t.to("CPU").numpy(), payload)

def test_slice_to_cpu_copies_only_that_range(data_file):
    path, payload = data_file
    t = Tensor.empty(64, dtype=dtypes.uint8, device=f"disk:{path}")
    view = disk_view(t[10:30])
    buf = buffer_of(view.uop.base)
    # a sub-buffer of the file's buffer at byte offset 10, 20 bytes long: no copy was made
    assert buf.base is buffer_of(t.uop.base) and buf.offset == 10 and buf.nbytes == 20
    cpu = view.to("CPU")
    assert cpu.device == "CPU"
    np.testing.assert_array_equal(cpu.numpy(), payload[10:30])
    # offset / length form, and nested slices
    np.testing.assert_array_equal(disk_view(t, 5, 7).to("CPU").numpy(), payload[5:12])
    np.testing.assert_array_equal(disk_view(t[8:40][4:12]).to("CPU").numpy(), payload[12:20])
    # 2-d slice of whole rows is contiguous
    np.testing.assert_array_equal(disk_view(t.reshape(8, 8)[2:5]).to("CPU").numpy(), payload.reshape(8, 8)[2:5])

def test_bitcast_changing_itemsize_is_a_view(data_file):
    path, payload = data_file
    t = Tensor.empty(64, dtype=dtypes.uint8, device=f"disk:{path}")
    as_u32 = disk_view(t[16:32], dtype=dtypes.uint32)
    assert as_u32.shape == (4,) and as_u32.dtype == dtypes.uint32
    np.testing.assert_array_equal(as_u32.to("CPU").numpy(), payload[16:32].view(np.uint32))
    as_f16 = disk_view(t.reshape(4, 16), dtype=dtypes.float16)
    assert as_f16.shape == (4, 8)
    np.testing.assert_array_equal(as_f16.to("CPU").numpy(), payload.view(np.float16).reshape(4, 8))
    # and back to bytes
    back = disk_view(as_u32, dtype=dtypes.uint8)
    np.testing.assert_array_equal(back.to("CPU").numpy(), payload[16:32])
    with pytest.raises(RuntimeError, match="doesn't divide"):   # tinygrad's type for a bitcast that doesn't fit
        disk_view(t[0:6], dtype=dtypes.uint32)

def test_reads_see_the_file_at_read_time(data_file):
    path, _ = data_file
    t = Tensor.empty(64, dtype=dtypes.uint8, device=f"disk:{path}")
    buf = disk_buffer(t[4:8])
    with open(path, "r+b") as f:
        f.seek(4)
        f.write(b"\xaa\xbb\xcc\xdd")
    assert bytes(buf.as_buffer(allow_zero_copy=True)) == b"\xaa\xbb\xcc\xdd"   # read from the file now, not earlier

def _run_isolated(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter: a SIGBUS there fails the test instead of killing pytest."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

def test_file_truncated_after_open_raises_instead_of_crashing(tmp_path):
    path = tmp_path / "big.bin"
    path.write_bytes(bytes(range(256)) * 64)   # 16 KiB: several pages
    result = _run_isolated(f"""
        import os
        from fusegrad import Tensor, dtypes
        from fusegrad.runtime.ops_disk import DiskFileError
        t = Tensor.empty(16384, dtype=dtypes.uint8, device="disk:{path}")
        assert t[:16].numpy().tolist() == list(range(16))
        os.truncate("{path}", 100)
        try: t[8192:].numpy()
        except DiskFileError as e: print("raised:", e)
    """)
    assert result.returncode == 0, f"the process died (returncode {result.returncode}): {result.stderr[-2000:]}"
    assert "raised:" in result.stdout and "truncated" in result.stdout

def _open_flags(path: str) -> list[int]:
    """The access modes (os.O_RDONLY / O_WRONLY / O_RDWR) of this process's open descriptors of ``path``."""
    modes = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != path: continue
            flags = next(line for line in open(f"/proc/self/fdinfo/{fd}") if line.startswith("flags:"))
        except OSError: continue
        modes.append(int(flags.split()[1], 8) & os.O_ACCMODE)
    return modes

def test_disk_file_tensor_opens_read_only(data_file):
    path, payload = data_file
    t = disk_file_tensor(path)
    assert t.shape == (64,) and t.device == f"DISK:{path}"
    assert _open_flags(path) == [os.O_RDONLY]
    np.testing.assert_array_equal(t.numpy(), payload)
    assert _open_flags(path) == [os.O_RDONLY]
    # an explicit write still works: it opens a writable descriptor then
    disk_buffer(t[0:2]).copyin(memoryview(b"hi"))
    assert open(path, "rb").read(2) == b"hi"
    with pytest.raises(FileNotFoundError):
        disk_file_tensor(os.path.join(os.path.dirname(path), "missing.bin"))

def test_copyin_writes_the_file(data_file):
    path, payload = data_file
    t = Tensor.empty(64, dtype=dtypes.uint8, device=f"disk:{path}")
    disk_buffer(t[60:64]).copyin(memoryview(b"wxyz"))
    disk_buffer(disk_view(t[0:8], dtype=dtypes.float32)).copyin(memoryview(np.array([1.5, -2.0], np.float32)))
    raw = open(path, "rb").read()
    assert raw[60:64] == b"wxyz"
    assert np.frombuffer(raw[:8], np.float32).tolist() == [1.5, -2.0]
    assert raw[8:60] == payload[8:60].tobytes()
    with pytest.raises(ValueError):
        disk_buffer(t[0:4]).copyin(memoryview(b"toolong"))

def test_new_file_is_created_and_grown(tmp_path):
    path = str(tmp_path / "new.bin")
    t = Tensor.empty(100, dtype=dtypes.uint8, device=f"disk:{path}")
    assert os.path.getsize(path) == 100
    disk_buffer(t).copyin(memoryview(bytes(range(100))))
    assert open(path, "rb").read() == bytes(range(100))

def test_cannot_reopen_larger(data_file):
    path, _ = data_file
    t = Tensor.empty(64, dtype=dtypes.uint8, device=f"disk:{path}")
    small = Tensor.empty(16, dtype=dtypes.uint8, device=f"disk:{path}")   # smaller is fine: same mapping
    assert small.numpy().tolist() == t.numpy()[:16].tolist()
    with pytest.raises(RuntimeError, match="can't reopen"):
        Tensor.empty(128, dtype=dtypes.uint8, device=f"disk:{path}")
    del t, small
    # once released, it may be opened larger (and the file grows)
    big = Tensor.empty(128, dtype=dtypes.uint8, device=f"disk:{path}")
    assert os.path.getsize(path) == 128 and big.shape == (128,)

def test_replaced_file_gets_a_new_mapping(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"a" * 16)
    old = Tensor.empty(16, dtype=dtypes.uint8, device=f"disk:{path}")
    path.unlink()
    path.write_bytes(b"b" * 32)
    new = Tensor.empty(32, dtype=dtypes.uint8, device=f"disk:{path}")
    assert bytes(new.numpy()) == b"b" * 32
    assert bytes(old.numpy()) == b"a" * 16   # old tensors keep the old file

def test_compute_on_disk_raises_clearly(data_file):
    path, _ = data_file
    t = Tensor.empty(64, dtype=dtypes.uint8, device=f"disk:{path}")
    with pytest.raises(DiskComputeError, match=DISK_ONLY_MESSAGE):
        (t + 1).realize()
    with pytest.raises(DiskComputeError, match=DISK_ONLY_MESSAGE):
        t.reshape(8, 8).sum().numpy()
    with pytest.raises(DiskComputeError, match="contiguous"):
        disk_view(t.reshape(8, 8)[:, 2:4])
    with pytest.raises(DiskComputeError, match=DISK_ONLY_MESSAGE):
        disk_view(t.reshape(8, 8).permute(1, 0))
    with pytest.raises(DiskComputeError):
        Device[f"disk:{path}"].compiler.compile("int main(){}")

def test_buffer_view_on_disk(data_file):
    path, payload = data_file
    base = Buffer(f"DISK:{path}", 64, dtypes.uint8).allocate()
    view = base.view(4, dtypes.uint16, 8)
    np.testing.assert_array_equal(np.frombuffer(view.as_buffer(), np.uint16), payload[8:16].view(np.uint16))
    out = memoryview(bytearray(8))
    view.copyout(out)
    assert bytes(out) == payload[8:16].tobytes()
    with pytest.raises(ValueError):
        base.view(100, dtypes.uint8, 0)

def test_empty_disk_tensor_view(data_file):
    path, _ = data_file
    t = Tensor.empty(64, dtype=dtypes.uint8, device=f"disk:{path}")
    e = disk_view(t, 10, 0)
    assert e.shape == (0,) and e.to("CPU").numpy().shape == (0,)

def test_disk_assign_writes_through(tmp_path):
    from fusegrad.runtime.ops_disk import disk_assign
    path = tmp_path / "w.bin"
    t = Tensor.empty(16, dtype=dtypes.uint8, device=f"disk:{path}")
    disk_assign(disk_view(t[0:8], dtype=dtypes.int64), [123456789])
    disk_assign(disk_view(t[8:16], dtype=dtypes.float16), Tensor([1.0, -2.0, 0.5, 4.0], dtype=dtypes.float16))
    raw = path.read_bytes()
    assert struct_unpack("<q", raw[:8]) == 123456789
    assert np.frombuffer(raw[8:], np.float16).tolist() == [1.0, -2.0, 0.5, 4.0]
    with pytest.raises(ValueError, match="shape mismatch"):
        disk_assign(t[0:4], Tensor([1, 2], dtype=dtypes.uint8))

def struct_unpack(fmt, b):
    import struct
    return struct.unpack(fmt, b)[0]

# ---------------------------------------------------------------- tensors over files (mutation task)

def test_tensor_from_path_is_a_uint8_disk_tensor(tmp_path):
    import pathlib
    path = tmp_path / "bytes.bin"
    path.write_bytes(bytes(range(20)))
    t = Tensor(pathlib.Path(path))
    assert t.device.startswith("DISK:") and t.dtype == dtypes.uint8 and t.shape == (20,)
    np.testing.assert_array_equal(t[4:8].to("CPU").numpy(), np.arange(4, 8, dtype=np.uint8))

def test_setitem_through_a_disk_slice_writes_the_file(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(bytes(16))
    t = Tensor.empty(16, dtype=dtypes.uint8, device=f"disk:{path}")
    t[4:8] = Tensor([1, 2, 3, 4], dtype=dtypes.uint8)
    expected = np.zeros(16, np.uint8)
    expected[4:8] = [1, 2, 3, 4]
    assert path.read_bytes() == expected.tobytes()
    with pytest.raises(RuntimeError, match="DISK"): t[Tensor([0, 1])] = 5

def test_cast_on_disk_raises(tmp_path):
    t = Tensor.empty(8, dtype=dtypes.uint8, device=f"disk:{tmp_path / 'c.bin'}")
    with pytest.raises(NotImplementedError, match="DISK"): t.cast(dtypes.float32)
    np.testing.assert_array_equal(t.bitcast(dtypes.int32).to("CPU").numpy(), np.zeros(2, np.int32))

@pytest.mark.parametrize("source, target", [(np.float32, np.uint8), (np.float32, np.float16), (np.uint8, np.float32),
                                            (np.float64, np.int16), (np.int16, np.int64), (np.float32, np.int64)])
def test_bitcast_between_item_sizes_on_cpu(source, target):
    data = np.random.default_rng(0).integers(0, 255, 64, dtype=np.uint8).view(source).reshape(2, -1)
    if np.issubdtype(source, np.floating): data = np.nan_to_num(data)
    from fusegrad.dtype import from_np
    out = Tensor(data).bitcast(from_np(np.dtype(target))).numpy()
    np.testing.assert_array_equal(out.view(np.uint8), data.view(target).view(np.uint8))

def test_assign_of_a_pending_copy_to_disk_is_seen_by_later_reads(tmp_path):
    path = tmp_path / "copy.bin"
    t = Tensor.empty(4, dtype=dtypes.float32, device=f"disk:{path}")
    t.assign(Tensor([1.0, 2.0, 3.0, 4.0]).to(t.device))
    assert t.to("CPU").tolist() == [1.0, 2.0, 3.0, 4.0]
    t[1:3].assign((Tensor([1.0, 1.0]) * 3).to(t.device))      # a computed value, copied to DISK lazily
    assert t.to("CPU").tolist() == [1.0, 3.0, 3.0, 4.0]
    reopened = Tensor.empty(4, dtype=dtypes.float32, device=f"disk:{path}")
    assert reopened.to("CPU").tolist() == [1.0, 3.0, 3.0, 4.0]
    assert np.frombuffer(path.read_bytes(), np.float32).tolist() == [1.0, 3.0, 3.0, 4.0]

def test_reads_after_a_pending_copy_to_disk_see_the_copy(tmp_path):
    # x.to("disk:...") is lazy; reading the DISK tensor (whole, a slice, a bitcast) writes the file first
    values = np.arange(6, dtype=np.float32) * 2
    t = (Tensor(np.arange(6, dtype=np.float32)) * 2).to(f"disk:{tmp_path / 'a.bin'}")
    np.testing.assert_array_equal(t[2:4].to("CPU").numpy(), values[2:4])
    np.testing.assert_array_equal(t.to("CPU").numpy(), values)
    assert (tmp_path / "a.bin").read_bytes() == values.tobytes()
    u = Tensor(np.arange(4, dtype=np.float32)).to(f"disk:{tmp_path / 'b.bin'}")
    np.testing.assert_array_equal(u.bitcast(dtypes.uint8)[4:8].to("CPU").numpy(), np.array([1.0], np.float32).view(np.uint8))
    w = Tensor(np.arange(4, dtype=np.float32)).to(f"disk:{tmp_path / 'c.bin'}")
    w[1:3] = Tensor([9.0, 9.0])                  # a write after the pending copy lands on top of it
    np.testing.assert_array_equal(w.to("CPU").numpy(), [0.0, 9.0, 9.0, 3.0])

def test_bitcast_to_a_size_that_doesnt_divide_raises(tmp_path):
    # tinygrad raises a RuntimeError ("unsupported size in bitcast")
    with pytest.raises(RuntimeError, match="doesn't divide"): Tensor([1, 2, 3], dtype=dtypes.uint8).bitcast(dtypes.uint16)
    t = Tensor.empty(3, dtype=dtypes.uint8, device=f"disk:{tmp_path / 'odd.bin'}")
    with pytest.raises(RuntimeError, match="doesn't divide"): t.bitcast(dtypes.uint16)
