"""Checkpoints as untrusted input: a file truncated after it was loaded, a pickle whose shared objects make a
naive walk exponential, decompression bombs and huge expanded views (refused before allocating), and crafted
GGUF / tar / legacy-pickle headers. Crash-prone cases run in a subprocess, so a SIGBUS or a hang fails the test
instead of killing pytest."""
from __future__ import annotations
import os, pickle, struct, subprocess, sys, tarfile, textwrap, tracemalloc, zipfile, zlib
import numpy as np
import pytest
from fusegrad import Tensor, dtypes
from fusegrad.nn.state import safe_load, safe_save, torch_load, zip_extract, tar_extract, gguf_load

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def run_isolated(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (a crash or a hang there is a failed assertion here, not a dead pytest)."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, cwd=REPO)
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
