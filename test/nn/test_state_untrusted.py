"""Checkpoints as untrusted input: a file truncated after it was loaded, a pickle whose shared objects make a
naive walk exponential, decompression bombs and huge expanded views (refused before allocating), crafted
GGUF / tar / legacy-pickle headers, pickles that try to change the loader's objects (BUILD, SETITEM, APPEND into
a dtype, a function or a tensor record) and safetensors headers nested too deeply to parse. Crash-prone cases
run in a subprocess, so a SIGBUS, a SIGSEGV or a hang fails the test instead of killing pytest."""
from __future__ import annotations
import collections, json, os, pickle, struct, subprocess, sys, tarfile, textwrap, tracemalloc, zipfile, zlib
import numpy as np
import pytest
from fusegrad import Tensor, dtypes
from fusegrad.nn.state import safe_load, safe_save, torch_load, zip_extract, tar_extract, gguf_load

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def run_isolated(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (a crash or a hang there is a failed assertion here, not a dead pytest). Its
    kernel cache is off: an attack that got through would compile kernels for a corrupted process (a dtype of the
    wrong size), which must not reach the disk cache other processes read."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                              env={**os.environ, "CACHELEVEL": "0"})
    except subprocess.TimeoutExpired: pytest.fail(f"the child process didn't finish in {timeout} s")

def peak_bytes_of(fn) -> tuple[BaseException | None, int]:
    """Run ``fn``; return what it raised and the peak traced memory (numpy and Python allocations) meanwhile."""
    tracemalloc.start()
    error = None
    try: fn()
    except BaseException as e: error = e
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return error, peak

# ================================================================ 1. a file truncated after loading

def test_safetensors_truncated_after_load_raises_instead_of_crashing(tmp_path):
    path = tmp_path / "m.safetensors"
    result = run_isolated(f"""
        import os
        import numpy as np
        from fusegrad import Tensor
        from fusegrad.nn.state import safe_load, safe_save
        safe_save({{"a": Tensor(np.arange(16, dtype=np.float32)), "w": Tensor(np.arange(8192, dtype=np.float32))}}, "{path}")
        loaded = safe_load("{path}")
        assert loaded["a"].numpy().tolist() == list(range(16))
        os.truncate("{path}", 200)   # someone rewrites the checkpoint while we hold its tensors
        try: loaded["w"].to("CPU").numpy()
        except OSError as e: print("raised:", e)
    """)
    assert result.returncode == 0, f"the process died (returncode {result.returncode}): {result.stderr[-2000:]}"
    assert "raised:" in result.stdout and "truncated" in result.stdout, result.stdout + result.stderr[-2000:]

# ================================================================ 2. shared objects in a pickle

def shared_tuples_pickle(depth: int) -> bytes:
    """Protocol-2 opcodes for t0 = (), t_i = (t_{i-1}, t_{i-1}): each level memoizes its tuple (BINPUT) and the
    next level fetches it twice (BINGET). ``depth`` 40 is under 300 bytes and 2**40 paths from the top."""
    ops = b"\x80\x02" + b")" + b"q\x00"   # PROTO 2, EMPTY_TUPLE, BINPUT 0
    for i in range(1, depth + 1): ops += b"h" + bytes([i - 1]) + b"h" + bytes([i - 1]) + b"\x86" + b"q" + bytes([i])  # BINGET x2, TUPLE2, BINPUT
    return ops + b"."

def checkpoint_zip(path, pkl: bytes) -> None:
    """A torch zip checkpoint holding just ``pkl`` as its data.pkl (no storages)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("archive/data.pkl", pkl)
        zf.writestr("archive/byteorder", "little")

def test_shared_tuples_nested_40_deep_load_quickly(tmp_path):
    pkl = shared_tuples_pickle(40)
    assert len(pkl) < 320
    path = tmp_path / "shared.pt"
    checkpoint_zip(path, pkl)
    # without memoizing shared objects this never returns: the child is killed at the timeout and the test fails
    result = run_isolated(f"""
        from fusegrad.nn.state import torch_load
        top = torch_load("{path}")
        depth, node, shared = 0, top, True
        while node != ():
            shared = shared and node[0] is node[1]
            node, depth = node[0], depth + 1
        print("depth", depth, "shared", shared)
    """, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["depth", "40", "shared", "True"]

def test_shared_objects_are_converted_once(tmp_path):
    from fusegrad.nn.state import _Resolver
    pkl = shared_tuples_pickle(40)
    resolver = _Resolver(lambda ref: pytest.fail("no tensors here"))
    top = resolver(pickle.loads(pkl))
    assert resolver.steps == 41   # one conversion per distinct tuple: t0 .. t40
    assert top[0] is top[1]
    torch = pytest.importorskip("torch")
    t = torch.arange(6.0)
    path = tmp_path / "tied.pt"
    torch.save({"a": t, "b": t, "both": [t, t]}, str(path))
    loaded = torch_load(str(path))
    assert loaded["a"] is loaded["b"] is loaded["both"][0] is loaded["both"][1]   # the same tensor, as in torch
    assert loaded["a"].numpy().tolist() == t.tolist()

def test_self_referencing_list_keeps_its_cycle(tmp_path):
    cyclic: list = [1]
    cyclic.append(cyclic)
    path = tmp_path / "cycle.pt"
    checkpoint_zip(path, pickle.dumps(cyclic, protocol=2))
    got = torch_load(str(path))
    assert got[0] == 1 and got[1] is got

def test_deep_nesting_is_a_clear_error(tmp_path):
    path = tmp_path / "deep.pt"
    checkpoint_zip(path, b"\x80\x02" + b"]" * 5000 + b"a" * 4999 + b".")   # EMPTY_LIST x5000 then APPEND x4999: 5000 deep
    with pytest.raises(ValueError, match="deep"):
        torch_load(str(path))

# ================================================================ 3. sizes checked before allocating

def zip_with_deflated_member(path, name: str, deflated: bytes, declared_size: int, crc: int = 0) -> None:
    """A one-member zip written by hand, so the header's uncompressed size can say anything."""
    raw_name = name.encode()
    local = struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, zipfile.ZIP_DEFLATED, 0, 0, crc, len(deflated), declared_size,
                        len(raw_name), 0) + raw_name
    central = struct.pack("<4s6H3I5H2I", b"PK\x01\x02", 20, 20, 0, zipfile.ZIP_DEFLATED, 0, 0, crc, len(deflated), declared_size,
                          len(raw_name), 0, 0, 0, 0, 0, 0) + raw_name
    end = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, 1, 1, len(central), len(local) + len(deflated), 0)
    with open(path, "wb") as f: f.write(local + deflated + central + end)

def zeros_bomb(n_mib: int) -> bytes:
    """A raw deflate stream of ``n_mib`` MiB of zeros, built by repeating one fully flushed 1 MiB block (~1 KB)."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    return block * n_mib + c.flush()

def test_zip_bomb_is_refused_before_inflating(tmp_path):
    path = tmp_path / "bomb.zip"
    deflated = zeros_bomb(1500)
    zip_with_deflated_member(path, "zeros.bin", deflated, 1500 << 20)   # (its CRC is wrong: refused before it is checked)
    assert os.path.getsize(path) < 2 << 20
    error, peak = peak_bytes_of(lambda: zip_extract(str(path)))
    assert isinstance(error, ValueError) and "max_bytes" in str(error) and "zeros.bin" in str(error), error
    assert peak < 64 << 20
    # as a torch checkpoint's pickle
    ckpt = tmp_path / "bomb.pt"
    zip_with_deflated_member(ckpt, "archive/data.pkl", deflated, 1500 << 20)
    error, peak = peak_bytes_of(lambda: torch_load(str(ckpt)))
    assert isinstance(error, ValueError) and "max_bytes" in str(error), error
    assert peak < 64 << 20

def test_zip_header_claiming_a_huge_size_is_refused(tmp_path):
    data = b"hello " * 100
    deflated = zlib.compress(data, 9, wbits=-15)
    path = tmp_path / "liar.zip"
    zip_with_deflated_member(path, "x.txt", deflated, 3_000_000_000, zlib.crc32(data))
    error, peak = peak_bytes_of(lambda: zip_extract(str(path)))
    assert isinstance(error, ValueError) and "max_bytes" in str(error), error
    assert peak < 64 << 20
    # the true size in the header: it loads, and a limit below it is refused
    zip_with_deflated_member(path, "x.txt", deflated, len(data), zlib.crc32(data))
    assert bytes(zip_extract(str(path))["x.txt"].numpy()) == data
    with pytest.raises(ValueError, match="max_bytes"):
        zip_extract(str(path), max_bytes=len(data) - 1)
    # a header claiming less than the member inflates to: an error, and never more than the claim is written
    zip_with_deflated_member(path, "x.txt", deflated, 10, zlib.crc32(data))
    with pytest.raises(ValueError, match="x.txt"):
        zip_extract(str(path))

def test_compressed_storage_is_streamed_within_the_limit(tmp_path):
    torch = pytest.importorskip("torch")
    stored = tmp_path / "m.pt"
    w = torch.arange(4096, dtype=torch.float32)
    torch.save({"w": w}, str(stored))
    recompressed = tmp_path / "deflated.pt"   # what some tools do to checkpoints
    with zipfile.ZipFile(stored) as src, zipfile.ZipFile(recompressed, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist(): dst.writestr(info.filename, src.read(info))
    assert torch_load(str(recompressed))["w"].numpy().tolist() == w.tolist()
    with pytest.raises(ValueError, match="max_bytes"):
        torch_load(str(recompressed), max_bytes=1000)

def test_expanded_one_element_storage_is_refused_before_allocating(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "expand.pt"
    torch.save({"e": torch.ones(1).expand(10**9)}, str(path))   # a 1-element storage, size (1e9,) stride (0,)
    assert os.path.getsize(path) < 4096
    error, peak = peak_bytes_of(lambda: torch_load(str(path)))
    assert isinstance(error, ValueError) and "max_bytes" in str(error) and "stride (0,)" in str(error), error
    assert peak < 64 << 20
    # small expands load (as the values torch shows), and a raised limit allows bigger ones
    small = tmp_path / "small.pt"
    torch.save({"e": torch.full((1,), 2.5).expand(3, 4)}, str(small))
    assert torch_load(str(small))["e"].numpy().tolist() == [[2.5] * 4] * 3
    with pytest.raises(ValueError, match="max_bytes"):
        torch_load(str(small), max_bytes=16)

def test_view_reading_past_its_storage_is_refused(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "view.pt"
    torch.save({"v": torch.arange(8.0)[2:6]}, str(path))
    # the pickle records (storage, offset 2, size (4,), stride (1,)): make the offset 6, so the view ends at 10 > 8
    bad = tmp_path / "bad_view.pt"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("data.pkl"):
                patched = data.replace(b"K\x02K\x04\x85", b"K\x06K\x04\x85", 1)
                assert patched != data
                data = patched
            dst.writestr(info.filename, data)
    with pytest.raises(ValueError, match="past its storage"):
        torch_load(str(bad))

@pytest.mark.parametrize("claim", [1 << 30, 1 << 62])
def test_pickle_length_field_past_the_end_is_an_error(tmp_path, claim):
    # legacy format: magic, protocol, sys_info, then a pickle whose BINBYTES8 opcode claims more than the file has.
    # (CPython's unpickler reserves the claimed length before reading: address space it never touches, freed at
    # the short read, or a MemoryError; both end in this error.)
    path = tmp_path / "legacy.pt"
    head = b"".join(pickle.dumps(x, protocol=2) for x in (0x1950a86a20f9469cfc6c, 1001, {"little_endian": True}))
    path.write_bytes(head + b"\x80\x04\x8e" + struct.pack("<Q", claim) + b"tiny")
    with pytest.raises(pickle.UnpicklingError, match="corrupt checkpoint pickle"):
        torch_load(str(path))

def test_stored_pickle_with_a_bad_crc_is_refused(tmp_path):
    path = tmp_path / "crc.pt"
    checkpoint_zip(path, pickle.dumps({"a": 1}, protocol=2))
    raw = bytearray(path.read_bytes())
    raw[raw.index(b"K\x01")] ^= 0xFF   # the stored pickle's bytes no longer match its CRC-32
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="CRC"):
        torch_load(str(path))

def test_malicious_pickle_never_runs(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pt"
    checkpoint_zip(path, b"\x80\x02cos\nsystem\nX" + struct.pack("<I", len(f"touch {marker}")) + f"touch {marker}".encode() + b"\x85R.")
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        torch_load(str(path))
    assert not marker.exists()

def test_tar_member_claiming_more_than_the_file(tmp_path):
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("big.bin")
        info.size = 1000
        import io
        tar.addfile(info, io.BytesIO(bytes(1000)))
    raw = bytearray(path.read_bytes())
    raw[124:136] = b"%011o\0" % (1 << 33)   # the size field: 8 GiB
    raw[148:156] = b"        "
    raw[148:155] = b"%06o\0" % sum(raw[:512])   # a valid header checksum, so tarfile believes it
    path.write_bytes(bytes(raw[:4096]))
    error, peak = peak_bytes_of(lambda: tar_extract(str(path)))
    assert isinstance(error, ValueError) and ("truncated" in str(error) or "corrupt" in str(error)), error
    assert peak < 64 << 20

def gguf_header(n_tensors: int, n_kv: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)

def gguf_string(s: str) -> bytes:
    return struct.pack("<Q", len(s)) + s.encode()

@pytest.mark.parametrize("case, content", [
    ("tensor count", gguf_header(1 << 60, 0)),
    ("metadata count", gguf_header(0, 1 << 60)),
    ("array length", gguf_header(0, 1) + gguf_string("k") + struct.pack("<IIQ", 9, 0, 1 << 40)),
    ("string array length", gguf_header(0, 1) + gguf_string("k") + struct.pack("<IIQ", 9, 8, 1 << 40)),
    ("string length", gguf_header(0, 1) + gguf_string("k") + struct.pack("<IQ", 8, 1 << 40)),
    ("dims", gguf_header(1, 0) + gguf_string("w") + struct.pack("<I4Q", 4, 1 << 20, 1 << 20, 1 << 20, 1 << 20) + struct.pack("<IQ", 0, 0)),
    ("offset", gguf_header(1, 0) + gguf_string("w") + struct.pack("<IQ", 1, 4) + struct.pack("<IQ", 0, 1 << 62)),
])
def test_gguf_crafted_counts_and_sizes(tmp_path, case, content):
    path = tmp_path / "x.gguf"
    path.write_bytes(content + bytes(64))
    error, peak = peak_bytes_of(lambda: gguf_load(str(path)))
    assert isinstance(error, ValueError) and ("corrupt" in str(error) or "truncated" in str(error)), (case, error)
    assert peak < 64 << 20

def test_max_bytes_must_be_a_non_negative_int(tmp_path):
    path = tmp_path / "m.safetensors"
    safe_save({"w": Tensor([1.0, 2.0])}, str(path))
    with pytest.raises(ValueError, match="max_bytes"):
        safe_load(str(path), max_bytes=-1)
    # a non-DISK source is copied: those copies count
    raw = Tensor(np.frombuffer(path.read_bytes(), np.uint8).copy(), dtype=dtypes.uint8)
    assert safe_load(raw)["w"].numpy().tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="max_bytes"):
        safe_load(raw, max_bytes=8)

# ---------------------------------------------------------------- error types of unreadable archives

@pytest.mark.parametrize("loader, error", [("tar_extract", "tarfile.ReadError"), ("zip_extract", "zipfile.BadZipFile"),
                                           ("torch_load", "pickle.UnpicklingError")])
def test_unreadable_archives_raise_the_formats_own_error(tmp_path, loader, error):
    """tinygrad raises the format's exception type; fusegrad's are also ValueErrors like its other bad-input errors."""
    import pickle, tarfile, zipfile
    from fusegrad.nn import state
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not an archive, just some junk bytes " * 20)
    expected = {"tarfile.ReadError": tarfile.ReadError, "zipfile.BadZipFile": zipfile.BadZipFile,
                "pickle.UnpicklingError": pickle.UnpicklingError}[error]
    for source in (str(junk), Tensor(junk.read_bytes())):
        with pytest.raises(expected) as info: getattr(state, loader)(source)
        assert isinstance(info.value, ValueError)

# ================================================================ 4. pickles that change the loader's objects

def pickle_value(value) -> bytes:
    """The opcodes that push a plain value (ints, strings, tuples, dicts) onto the unpickler's stack."""
    return pickle.dumps(value, protocol=2)[2:-1]   # without PROTO and STOP

def pickle_global(module: str, name: str) -> bytes:
    return b"c" + f"{module}\n{name}\n".encode()

def rebuild_tensor_v2(numel: int = 4) -> bytes:
    """What torch.save writes for a float32 tensor of size (2,) over storage '0' of ``numel`` elements."""
    storage = b"(" + pickle_value("storage") + pickle_global("torch", "FloatStorage") + pickle_value("0") + pickle_value("cpu") \
        + pickle_value(numel) + b"tQ"   # MARK ... TUPLE, BINPERSID
    args = b"(" + storage + pickle_value(0) + pickle_value((2,)) + pickle_value((1,)) + b"\x89}t"   # NEWFALSE, EMPTY_DICT, TUPLE
    return pickle_global("torch._utils", "_rebuild_tensor_v2") + args + b"R"

def checkpoint_with_storage(path, pkl: bytes, values=(1.0, 2.0, 3.0, 4.0)) -> None:
    """A torch zip checkpoint: ``pkl`` as data.pkl and storage '0' holding float32 ``values``."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("archive/data.pkl", pkl)
        zf.writestr("archive/byteorder", "little")
        zf.writestr("archive/data/0", struct.pack(f"<{len(values)}f", *values))

def test_build_cannot_change_a_dtype_for_the_whole_process(tmp_path):
    # GLOBAL torch.float32, BUILD {'itemsize': 1}: the BUILD opcode writes into the object's __dict__, around the frozen
    # dataclass. Before the fix this loaded as {} and left dtypes.float32.itemsize == 1, then buffers were allocated a
    # quarter of their size (a crash later): the check runs in a child process so that can't spread to this one
    path = tmp_path / "dtype.pt"
    checkpoint_zip(path, b"\x80\x02ctorch\nfloat32\n}X\x08\x00\x00\x00itemsizeK\x01sb0}.")
    result = run_isolated(f"""
        from fusegrad import Tensor, dtypes
        from fusegrad.nn.state import torch_load
        try: print("loaded", torch_load("{path}"))
        except Exception as e: print("raised", type(e).__name__, e)
        print("itemsize", dtypes.float32.itemsize)
        print("sum", (Tensor.ones(256, 256) * 2).sum().item())
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("raised UnpicklingError") and "BUILD" in lines[0] and "torch.float32" in lines[0], result.stdout
    assert lines[1:] == ["itemsize 4", "sum 131072.0"], result.stdout

@pytest.mark.parametrize("stride", [(-100000, 100001), (-10**12, 10**12 + 1)])
def test_build_cannot_change_a_tensor_record_after_its_checks(tmp_path, stride):
    # _rebuild_tensor_v2 checks size (2,) stride (1,); a BUILD then sets a negative stride and a size whose elements,
    # before the fix, as_strided read outside the 8 bytes it was given (a wrong value, or a SIGSEGV for big strides)
    path = tmp_path / "stride.pt"
    checkpoint_with_storage(path, b"\x80\x02}" + pickle_value("x") + rebuild_tensor_v2() + pickle_value({"stride": stride, "size": (2, 2)})
                            + b"bs.")   # BUILD, SETITEM
    result = run_isolated(f"""
        from fusegrad.nn.state import torch_load
        try: print("loaded", torch_load("{path}")["x"].numpy().tolist())
        except Exception as e: print("raised", type(e).__name__, e)
    """)
    assert result.returncode == 0, f"the process died (returncode {result.returncode}): {result.stderr[-2000:]}"
    assert result.stdout.startswith("raised UnpicklingError") and "BUILD" in result.stdout, result.stdout

def test_every_object_the_unpickler_gives_refuses_to_change(tmp_path):
    """BUILD (a state dict, or a (None, slots) pair that setattr's), SETITEM and APPEND on each kind of object a
    pickle can get from the loader: a global function, a dtype, a storage type, torch.Tensor, a storage, a tensor
    record. Each is refused with an error naming it, and nothing the loader shares with later loads changes."""
    func, f16 = pickle_global("torch._utils", "_rebuild_tensor_v2"), pickle_global("torch", "float16")
    storage = b"(" + pickle_value("storage") + pickle_global("torch", "FloatStorage") + pickle_value("0") + pickle_value("cpu") \
        + pickle_value(4) + b"tQ"
    cases = {   # name: (opcodes leaving the object and then the state on the stack, what the error names)
        "function defaults": (func + b"N}" + pickle_value("__kwdefaults__") + b"}" + pickle_value("dtype") + f16 + b"ss\x86b",
                              "torch._utils._rebuild_tensor_v2"),
        "function dict": (func + pickle_value({"__defaults__": (1, 2)}) + b"b", "torch._utils._rebuild_tensor_v2"),
        "dtype slots": (pickle_global("torch", "int64") + b"N" + pickle_value({"itemsize": 1}) + b"\x86b", "torch.int64"),
        "storage type": (pickle_global("torch", "FloatStorage") + b"N}" + pickle_value("dtype") + f16 + b"s\x86b", "torch.FloatStorage"),
        "torch.Tensor": (pickle_global("torch", "Tensor") + pickle_value({"name": "Parameter"}) + b"b", "torch.Tensor"),
        "storage": (storage + pickle_value({"numel": 10**9}) + b"b", "storage 0"),
        "tensor slots": (rebuild_tensor_v2() + b"N" + pickle_value({"offset": 10**9}) + b"\x86b", "tensor of size (2,)"),
        "setitem on a dtype": (pickle_global("torch", "float32") + pickle_value("itemsize") + pickle_value(1) + b"s", "torch.float32"),
        "append to a storage": (storage + pickle_value(1) + b"a", "storage 0"),
    }
    paths = {}
    for i, (name, (ops, _)) in enumerate(cases.items()):
        paths[name] = tmp_path / f"case{i}.pt"
        checkpoint_with_storage(paths[name], b"\x80\x02" + ops + b"0}.")   # POP the object, return {}
    result = run_isolated(f"""
        import json
        from fusegrad import dtypes
        from fusegrad.nn import state
        paths = {json.dumps({k: str(v) for k, v in paths.items()})}
        for name, path in paths.items():
            try: print(json.dumps([name, "loaded " + repr(state.torch_load(path))]))
            except Exception as e: print(json.dumps([name, type(e).__name__ + ": " + str(e)]))
        print(json.dumps(["shared", [dtypes.int64.itemsize, dtypes.float32.itemsize, repr(state._rebuild_tensor.__kwdefaults__),
                                     repr(state._rebuild_tensor.__defaults__)]]))
    """)
    assert result.returncode == 0, result.stderr[-2000:]
    outcome = dict(json.loads(line) for line in result.stdout.splitlines())
    for name, (_, names) in cases.items():
        assert outcome[name].startswith("UnpicklingError: torch_load: refusing to") and names in outcome[name], (name, outcome[name])
    assert outcome["shared"] == [8, 4, "{'dtype': None}", "(False, None, None)"]

def test_tensor_layout_is_checked_again_where_it_is_read(tmp_path):
    # the last line of defence: whatever made the record, _build_tensor reads nothing outside the storage
    from fusegrad.nn.state import _Source, _StorageRef, _TensorRef, _build_tensor, _file_tensor
    path = tmp_path / "bytes.bin"
    path.write_bytes(struct.pack("<8f", *range(8)))
    src = _Source(_file_tensor(str(path)), "file")
    storage = _StorageRef("0", dtypes.float32, 8)
    def build(offset, size, stride, storage=storage):
        return _build_tensor(_TensorRef(storage, offset, size, stride, dtypes.float32), src, {"0": 0})
    assert build(1, (2, 2), (1, 4)).numpy().tolist() == [[1.0, 5.0], [2.0, 6.0]]   # a strided view inside: fine
    with pytest.raises(ValueError, match="negative"): build(4, (2, 2), (-4, 1))
    with pytest.raises(ValueError, match="negative"): build(-1, (2,), (1,))
    with pytest.raises(ValueError, match="past its storage"): build(0, (2, 2), (1, 7))
    with pytest.raises(ValueError, match="non-integer"): build(0, (2.0,), (1,))
    with pytest.raises(ValueError, match="outside"): build(0, (2,), (1,), _StorageRef("0", dtypes.float32, 4, 6, storage))

def test_torch_state_dicts_with_metadata_still_load(tmp_path):
    """torch's state_dict() is an OrderedDict whose _metadata attribute is pickled with BUILD: that BUILD is allowed
    (on the OrderedDict the pickle made, with a plain attribute name) and _metadata comes back, as with torch.load."""
    import torch
    torch.manual_seed(0)
    models = {"linear": torch.nn.Linear(3, 2), "batchnorm": torch.nn.BatchNorm2d(3),
              "cnn": torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(),
                                         torch.nn.Linear(4 * 6 * 6, 10))}
    models["batchnorm"].train()(torch.randn(4, 3, 5, 5))   # running stats and num_batches_tracked that aren't the defaults
    for name, model in models.items():
        path = tmp_path / f"{name}.pt"
        torch.save(model.state_dict(), str(path))
        loaded, expected = torch_load(str(path)), model.state_dict()
        assert type(loaded) is collections.OrderedDict and list(loaded) == list(expected), name
        assert loaded._metadata == expected._metadata, name
        for key, value in expected.items():
            assert loaded[key].shape == tuple(value.shape), (name, key)
            np.testing.assert_array_equal(loaded[key].numpy(), value.numpy(), err_msg=f"{name} {key}")
    assert torch_load(str(tmp_path / "batchnorm.pt"))["num_batches_tracked"].dtype == dtypes.int64
    # an attribute that would shadow one of the OrderedDict's methods is refused
    path = tmp_path / "shadow.pt"
    checkpoint_zip(path, b"\x80\x02" + pickle_global("collections", "OrderedDict") + b")R" + pickle_value({"items": 1}) + b"b.")
    with pytest.raises(pickle.UnpicklingError, match="refusing to set attribute 'items'"):
        torch_load(str(path))

# ================================================================ 5. safetensors headers

@pytest.mark.parametrize("header", [b"[" * 100000, b'{"a":' * 100000, b"[" * 100000 + b"]" * 100000])
def test_safetensors_header_nested_too_deeply_is_a_value_error(tmp_path, header):
    path = tmp_path / "deep.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(ValueError, match="nests arrays or objects too deeply"):
        safe_load(str(path))
