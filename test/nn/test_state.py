"""Checkpoint formats and state dicts: safetensors, torch .pt (zip, legacy, tar), GGUF (with quantized blocks
written by a reference numpy quantizer in this file), tar/zip archives, TensorIO, get/load_state_dict."""
from __future__ import annotations
import collections, io, json, os, pickle, re, struct, tarfile, warnings, zipfile
from typing import NamedTuple
import numpy as np
import pytest
from fusegrad import Tensor, dtypes, Device
from fusegrad.dtype import DType
from fusegrad.schedule import buffer_of
from fusegrad.nn.state import (safe_load, safe_save, safe_load_metadata, get_state_dict, get_parameters, load_state_dict,
                               torch_load, tar_extract, zip_extract, gguf_load, TensorIO, safe_dtypes)

torch = pytest.importorskip("torch")

def raw_bits(t: Tensor) -> bytes:
    """The bytes of a tensor exactly as stored (bfloat16 and fp8 included), read from a CPU buffer."""
    from fusegrad.uop.ops import Ops
    cpu = (t.to("CPU") if t.device != "CPU" else t).realize()
    if cpu.numel() == 0: return b""
    u = cpu.uop
    if not (u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)): u = cpu.contiguous().realize().uop
    return bytes(buffer_of(u.base).as_buffer())

def tensor_from_bits(raw: np.ndarray, dtype: DType) -> Tensor:
    """A tensor of ``dtype`` holding exactly the bits of ``raw`` (uint array of the same item size)."""
    # (built 1-d and reshaped: Tensor(0-d array, dtype=...) comes out 1-d, see the report)
    if dtype.fmt is not None: return Tensor(raw.reshape(-1).view(np.dtype(_np_of(dtype))), dtype=dtype).reshape(raw.shape)
    carrier = {1: dtypes.uint8, 2: dtypes.uint16}[dtype.itemsize]
    return Tensor(raw.reshape(-1), dtype=carrier).bitcast(dtype).reshape(raw.shape)

def _np_of(dtype: DType):
    from fusegrad.dtype import to_np_dtype
    return to_np_dtype(dtype)

# ================================================================ safetensors

ALL_SAFE = ["BOOL", "I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64", "F16", "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2"]

def _random_bits(rng, dtype: DType, shape) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype == dtypes.bool: return (rng.random(n) < 0.5).astype(np.uint8).reshape(shape)
    raw = rng.integers(0, 256, size=n * dtype.itemsize, dtype=np.uint8)
    if dtype in (dtypes.float16, dtypes.float32, dtypes.float64):   # avoid NaN payloads so numpy comparisons are meaningful
        vals = rng.standard_normal(n).astype(_np_of(dtype))
        raw = vals.view(np.uint8)
    return raw.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]).reshape(shape)

def test_safe_roundtrip_every_dtype_bit_exact(tmp_path):
    rng = np.random.default_rng(0)
    shapes = [(3, 5), (7,), (), (2, 0, 3), (2, 3, 4)]
    tensors, expected = {}, {}
    for i, name in enumerate(ALL_SAFE):
        dtype = safe_dtypes[name]
        shape = shapes[i % len(shapes)]
        raw = _random_bits(rng, dtype, shape)
        if dtype == dtypes.bool: t = Tensor(raw.reshape(-1).astype(bool), dtype=dtypes.bool).reshape(shape)
        else: t = tensor_from_bits(raw, dtype)
        tensors[f"t.{name}"] = t
        expected[f"t.{name}"] = (raw.tobytes(), shape, dtype)
    path = tmp_path / "all.safetensors"
    safe_save(tensors, path, metadata={"format": "pt", "author": "fusegrad"})
    loaded = safe_load(path)
    assert list(loaded) == list(tensors)
    for k, (raw, shape, dtype) in expected.items():
        assert loaded[k].shape == shape and loaded[k].dtype == dtype, k
        assert loaded[k].device.startswith("DISK:")
        assert raw_bits(loaded[k]) == raw, k
    # the header: 8-byte aligned, offsets contiguous, metadata kept
    t, json_len, header = safe_load_metadata(str(path))
    assert json_len % 8 == 0 and header["__metadata__"] == {"format": "pt", "author": "fusegrad"}
    assert os.path.getsize(path) == 8 + json_len + sum(len(r) for r, _, _ in expected.values())

def test_safe_save_readable_by_safetensors_package(tmp_path):
    from safetensors.torch import load_file
    from safetensors import safe_open
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 6)).astype(np.float32)
    h = rng.standard_normal((5,)).astype(np.float16)
    b16 = (rng.integers(0, 2**16, size=(3, 2), dtype=np.uint16) & 0x7F7F)   # finite bfloat16 values
    path = str(tmp_path / "out.safetensors")
    safe_save({"w": Tensor(w), "h": Tensor(h), "b": tensor_from_bits(b16, dtypes.bfloat16), "i": Tensor(np.arange(5, dtype=np.int64))},
              path, metadata={"k": "v"})
    got = load_file(path)
    np.testing.assert_array_equal(got["w"].numpy(), w)
    np.testing.assert_array_equal(got["h"].numpy(), h)
    assert got["b"].dtype == torch.bfloat16 and got["b"].view(torch.int16).numpy().view(np.uint16).tolist() == b16.tolist()
    assert got["i"].tolist() == list(range(5))
    with safe_open(path, "pt") as f: assert f.metadata() == {"k": "v"}

def test_safe_load_file_from_safetensors_package(tmp_path):
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(0)
    ref = {"layer.weight": torch.randn(8, 3, generator=g), "layer.bias": torch.randn(3, generator=g).half(),
           "emb": torch.randn(4, 5, generator=g).to(torch.bfloat16), "mask": torch.tensor([True, False, True]),
           "ids": torch.tensor([[1, -2], [3, 4]], dtype=torch.int32), "scalar": torch.tensor(3.5, dtype=torch.float64),
           "u8": torch.arange(10, dtype=torch.uint8), "empty": torch.zeros(0, 4)}
    path = tmp_path / "ref.safetensors"
    save_file(ref, str(path), metadata={"hello": "world"})
    loaded = safe_load(str(path))
    assert set(loaded) == set(ref)
    for k, v in ref.items():
        assert loaded[k].shape == tuple(v.shape), k
        assert raw_bits(loaded[k]) == v.contiguous().numpy().tobytes() if v.dtype != torch.bfloat16 else \
            raw_bits(loaded[k]) == v.view(torch.int16).numpy().tobytes(), k
    assert loaded["emb"].dtype == dtypes.bfloat16 and loaded["mask"].dtype == dtypes.bool
    assert safe_load_metadata(str(path))[2]["__metadata__"] == {"hello": "world"}
    # a tensor argument works too (the file as a uint8 tensor on the default device): its tensors stay on that device
    as_tensor = Tensor(np.fromfile(path, dtype=np.uint8))
    from_tensor = safe_load(as_tensor)
    np.testing.assert_array_equal(from_tensor["layer.weight"].numpy(), ref["layer.weight"].numpy())
    assert from_tensor["emb"].device == as_tensor.device == Device.DEFAULT and raw_bits(from_tensor["emb"]) == ref["emb"].view(torch.int16).numpy().tobytes()

def _write_safetensors(path, header: dict | bytes, data: bytes, header_len: int | None = None):
    hb = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(hb) if header_len is None else header_len) + hb + data)
    return str(path)

@pytest.mark.parametrize("case, match", [
    ("short", "too short"),
    ("huge_header_len", "header claims"),
    ("not_json", "not valid UTF-8 JSON"),
    ("not_object", "expected a JSON object"),
    ("offsets_past_end", "outside"),
    ("size_mismatch", "needs"),
    ("unknown_dtype", "unknown dtype"),
    ("bad_shape", "invalid shape"),
    ("missing_field", "needs dtype, shape and data_offsets"),
    ("bad_offsets", "invalid data_offsets"),
    ("reversed_offsets", "outside"),
    ("truncated_data", "outside"),
])
def test_safe_load_rejects_corrupt_files(tmp_path, case, match):
    p = tmp_path / f"{case}.safetensors"
    ok = {"x": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}
    if case == "short": p.write_bytes(b"\x01\x02\x03"); path = str(p)
    elif case == "huge_header_len": path = _write_safetensors(p, ok, bytes(16), header_len=10**12)
    elif case == "not_json": path = _write_safetensors(p, b"{not json!", bytes(16))
    elif case == "not_object": path = _write_safetensors(p, b"[1, 2, 3]", bytes(16))
    elif case == "offsets_past_end": path = _write_safetensors(p, {"x": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}, bytes(16))
    elif case == "size_mismatch": path = _write_safetensors(p, {"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, bytes(16))
    elif case == "unknown_dtype": path = _write_safetensors(p, {"x": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 16]}}, bytes(16))
    elif case == "bad_shape": path = _write_safetensors(p, {"x": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, bytes(16))
    elif case == "missing_field": path = _write_safetensors(p, {"x": {"dtype": "F32", "shape": [4]}}, bytes(16))
    elif case == "bad_offsets": path = _write_safetensors(p, {"x": {"dtype": "F32", "shape": [4], "data_offsets": [0]}}, bytes(16))
    elif case == "reversed_offsets": path = _write_safetensors(p, {"x": {"dtype": "F32", "shape": [0], "data_offsets": [16, 0]}}, bytes(16))
    elif case == "truncated_data":
        good = tmp_path / "good.safetensors"
        safe_save({"a": Tensor(np.arange(100, dtype=np.float32))}, good)
        p.write_bytes(good.read_bytes()[:-10]); path = str(p)
    with pytest.raises(ValueError, match=match):
        safe_load(path)

def test_safe_save_overwrites_while_old_tensors_live(tmp_path):
    path = tmp_path / "w.safetensors"
    safe_save({"a": Tensor([1.0, 2.0])}, path)
    old = safe_load(path)["a"]
    safe_save({"a": Tensor(np.arange(1000, dtype=np.float32)), "b": Tensor([7], dtype=dtypes.int8)}, path)
    new = safe_load(path)
    assert new["a"].shape == (1000,) and new["b"].numpy().tolist() == [7]
    assert old.to("CPU").numpy().tolist() == [1.0, 2.0]   # the old mapping still reads the old file

def test_safe_save_rejects_bad_input(tmp_path):
    with pytest.raises(TypeError): safe_save({"a": np.zeros(3)}, tmp_path / "x")
    with pytest.raises(ValueError): safe_save({"__metadata__": Tensor([1.0])}, tmp_path / "x")

# ================================================================ torch checkpoints

TORCH_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
                torch.uint8, torch.bool, torch.uint16]

def _torch_bits(t) -> bytes:
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16: t = t.view(torch.int16)
    if t.dtype == torch.uint16: t = t.view(torch.int16)
    return t.numpy().tobytes()

def _torch_state():
    g = torch.Generator().manual_seed(0)
    sd = collections.OrderedDict()
    for dt in TORCH_DTYPES:
        base = torch.randn(3, 4, generator=g) * 10
        sd[f"plain.{str(dt)[6:]}"] = base > 0 if dt == torch.bool else base.to(dt)
    big = torch.randn(6, 8, generator=g)
    sd["transposed"] = big.t()                      # non-contiguous: stride (1, 8)
    sd["strided"] = big[:, ::3]                     # non-contiguous: stride (8, 3)
    sd["offset_view"] = big[2:4]                    # contiguous, storage offset 16, shares big's storage
    sd["big"] = big
    sd["scalar"] = torch.tensor(2.5)
    sd["empty"] = torch.zeros(0, 3)
    sd["bf16_t"] = torch.randn(4, 5, generator=g).to(torch.bfloat16).t()
    sd["param"] = torch.nn.Parameter(torch.randn(2, 2, generator=g))
    sd["expanded"] = torch.ones(3, 1).expand(3, 4)  # stride 0
    return sd

@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_torch_load_matches_torch(tmp_path, legacy):
    sd = _torch_state()
    path = tmp_path / "model.pt"
    torch.save(sd, str(path), _use_new_zipfile_serialization=not legacy)
    loaded = torch_load(str(path))
    assert isinstance(loaded, collections.OrderedDict) and list(loaded) == list(sd)
    for k, v in sd.items():
        assert loaded[k].shape == tuple(v.shape), k
        assert raw_bits(loaded[k]) == _torch_bits(v), k
    assert loaded["plain.bfloat16"].dtype == dtypes.bfloat16 and loaded["plain.float16"].dtype == dtypes.float16
    assert loaded["plain.bool"].dtype == dtypes.bool and loaded["plain.uint16"].dtype == dtypes.uint16
    assert loaded["big"].device.startswith("DISK:")   # contiguous tensors are views of the file

def test_torch_load_nested_structures(tmp_path):
    obj = {"model": {"w": torch.arange(4.0)}, "layers": [torch.ones(2), (torch.zeros(1, dtype=torch.int64), 3)], "epoch": 7,
           "name": "run", "lr": 0.1, "flags": {1, 2}, "blob": b"\x00\x01"}
    path = tmp_path / "ckpt.pth"
    torch.save(obj, str(path))
    got = torch_load(path)
    assert got["epoch"] == 7 and got["name"] == "run" and got["lr"] == 0.1 and got["flags"] == {1, 2} and got["blob"] == b"\x00\x01"
    assert got["model"]["w"].numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert got["layers"][0].numpy().tolist() == [1.0, 1.0] and got["layers"][1][1] == 3
    assert got["layers"][1][0].dtype == dtypes.int64
    # also from a uint8 tensor holding the file
    got2 = torch_load(Tensor(np.fromfile(path, dtype=np.uint8)))
    assert got2["model"]["w"].numpy().tolist() == [0.0, 1.0, 2.0, 3.0]

class Evil:
    def __init__(self, target: str): self.target = target
    def __reduce__(self): return (os.system, (f"echo pwned > {self.target}",))

class EvilEval:
    def __reduce__(self): return (eval, ("__import__('os').system('echo pwned')",))

@pytest.mark.parametrize("fmt", ["zip", "legacy", "plain_pickle"])
def test_malicious_pickle_is_refused(tmp_path, fmt):
    target = tmp_path / "pwned.txt"
    path = tmp_path / "evil.pt"
    payload = {"weight": torch.ones(2), "evil": Evil(str(target))}
    if fmt == "zip": torch.save(payload, str(path))
    elif fmt == "legacy": torch.save(payload, str(path), _use_new_zipfile_serialization=False)
    else: path.write_bytes(pickle.dumps(Evil(str(target))))
    with pytest.raises((pickle.UnpicklingError, ValueError), match="refusing|not a torch checkpoint"):
        torch_load(str(path))
    assert not target.exists()
    evil2 = tmp_path / "evil2.pt"
    torch.save({"x": EvilEval()}, str(evil2))
    with pytest.raises(pickle.UnpicklingError, match=r"refusing to load (__builtin__|builtins)\.eval"):
        torch_load(str(evil2))

def test_torch_load_rejects_corrupt_files(tmp_path):
    path = tmp_path / "m.pt"
    torch.save({"w": torch.randn(64, 64)}, str(path))
    raw = path.read_bytes()
    trunc = tmp_path / "trunc.pt"
    trunc.write_bytes(raw[: len(raw) // 2])
    with pytest.raises((ValueError, pickle.UnpicklingError)):
        torch_load(str(trunc))
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"this is not a checkpoint at all" * 10)
    with pytest.raises((ValueError, pickle.UnpicklingError)):
        torch_load(str(junk))
    # a storage smaller than the tensor that uses it
    legacy = tmp_path / "legacy.pt"
    torch.save({"w": torch.arange(8.0)}, str(legacy), _use_new_zipfile_serialization=False)
    data = bytearray(legacy.read_bytes())
    cut = tmp_path / "legacy_cut.pt"
    cut.write_bytes(bytes(data[:-8]))
    with pytest.raises(ValueError, match="truncated|corrupt"):
        torch_load(str(cut))

def _old_tar_checkpoint(path, arrays: dict[str, np.ndarray]):
    """Write the pre-1.0 torch tar format by hand (as torch's _legacy_load reads it)."""
    class StorageType:   # pickles as torch.FloatStorage / torch.LongStorage
        def __init__(self, name): self.name = name
        def __reduce__(self): return (getattr, (None, None))
    def pickle_global(module, name) -> bytes: return b"c" + module.encode() + b"\n" + name.encode() + b"\n"
    def storage_record(key: str, stype: str) -> bytes:   # pickle of (key, 'cpu', torch.<stype>)
        return b"\x80\x02" + b"X" + struct.pack("<I", len(key)) + key.encode() + b"X\x03\x00\x00\x00cpu" + pickle_global("torch", stype) + b"\x87."
    kinds = {np.dtype(np.float32): "FloatStorage", np.dtype(np.int64): "LongStorage"}
    storages, tensors = pickle.dumps(len(arrays), protocol=2), pickle.dumps(len(arrays), protocol=2)
    for i, (name, a) in enumerate(arrays.items()):
        storages += storage_record(f"s{i}", kinds[a.dtype]) + struct.pack("<q", a.size) + a.tobytes()
        tensors += pickle.dumps((f"t{i}", f"s{i}", None), protocol=2) + struct.pack("<i", a.ndim) + b"\0" * 4
        strides = [s // a.itemsize for s in a.strides]
        tensors += struct.pack(f"<{a.ndim}q", *a.shape) + struct.pack(f"<{a.ndim}q", *strides) + struct.pack("<q", 0)
    storages += pickle.dumps([], protocol=2)
    class P(pickle.Pickler):
        def persistent_id(self, obj): return obj.key if isinstance(obj, Ref) else None
    class Ref:
        def __init__(self, key): self.key = key
    buf = io.BytesIO()
    P(buf, protocol=2).dump({name: Ref(f"t{i}") for i, name in enumerate(arrays)})
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for member, data in [("sys_info", pickle.dumps({"little_endian": True}, protocol=2)), ("pickle", buf.getvalue()),
                             ("storages", storages), ("tensors", tensors)]:
            info = tarfile.TarInfo(member); info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

def test_torch_load_old_tar_format(tmp_path):
    arrays = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "ids": np.array([5, -6, 7], dtype=np.int64)}
    path = tmp_path / "old.pt"
    _old_tar_checkpoint(str(path), arrays)
    got = torch_load(str(path))
    np.testing.assert_array_equal(got["w"].numpy(), arrays["w"])
    np.testing.assert_array_equal(got["ids"].numpy(), arrays["ids"])

# ================================================================ tar / zip / TensorIO

def test_tar_extract(tmp_path):
    files = {"a.txt": b"hello", "dir/b.bin": bytes(range(256)) * 3, "empty": b""}
    path = tmp_path / "x.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name); info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    for src in (str(path), Tensor(np.fromfile(path, dtype=np.uint8))):
        got = tar_extract(src)
        assert set(got) == set(files)
        for name, data in files.items():
            assert got[name].dtype == dtypes.uint8 and bytes(got[name].to("CPU").numpy()) == data
    bad = tmp_path / "bad.tar"
    bad.write_bytes(b"\x01" * 700)
    with pytest.raises(ValueError, match="corrupt tar"):
        tar_extract(str(bad))

def test_zip_extract_stored_and_deflated(tmp_path):
    path = tmp_path / "x.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("stored.bin", bytes(range(200)), compress_type=zipfile.ZIP_STORED)
        z.writestr("deflated.txt", b"abc" * 1000, compress_type=zipfile.ZIP_DEFLATED)
    for src in (str(path), Tensor(np.fromfile(path, dtype=np.uint8))):
        got = zip_extract(src)
        assert bytes(got["stored.bin"].to("CPU").numpy()) == bytes(range(200))
        assert bytes(got["deflated.txt"].to("CPU").numpy()) == b"abc" * 1000
    assert zip_extract(str(path))["stored.bin"].device.startswith("DISK:")
    bad = tmp_path / "bad.zip"
    bad.write_bytes(path.read_bytes()[:40])
    with pytest.raises(ValueError, match="corrupt zip"):
        zip_extract(str(bad))

@pytest.mark.parametrize("on_disk", [False, True])
def test_tensor_io(tmp_path, on_disk):
    data = bytes(range(256)) * 4
    if on_disk:
        p = tmp_path / "io.bin"; p.write_bytes(data)
        t = Tensor.empty(len(data), dtype=dtypes.uint8, device=f"disk:{p}")
    else: t = Tensor(data)
    f = TensorIO(t)
    assert f.readable() and f.seekable() and not f.writable()
    assert f.read(10) == data[:10] and f.tell() == 10
    buf = bytearray(5)
    assert f.readinto(buf) == 5 and bytes(buf) == data[10:15]
    assert f.seek(-4, io.SEEK_END) == len(data) - 4 and f.read() == data[-4:]
    assert f.read(10) == b""   # at EOF
    assert f.seek(100) == 100 and f.seek(20, io.SEEK_CUR) == 120 and f.read(3) == data[120:123]
    assert f.seek(-10) == 0 and f.seek(10**6) == len(data)
    f.seek(0)
    assert f.read() == data
    assert io.BufferedReader(TensorIO(t), 64).read(300) == data[:300]
    with pytest.raises(io.UnsupportedOperation): f.write(b"x")
    with pytest.raises(ValueError, match="1d and of dtype uint8"): TensorIO(Tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="1d and of dtype uint8"): TensorIO(Tensor(data).reshape(32, 32))

def test_tensor_io_over_zip(tmp_path):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z: z.writestr("f", b"payload")
    with zipfile.ZipFile(TensorIO(Tensor(b.getvalue()))) as z: assert z.read("f") == b"payload"

# ================================================================ state dicts

class Linear:
    def __init__(self, i, o, bias=True):
        self.weight = Tensor.ones(o, i) * 0.5
        self.bias = Tensor.zeros(o) if bias else None

class Point(NamedTuple):
    x: Tensor
    y: Tensor

class Model:
    def __init__(self):
        self.l1 = Linear(3, 4)
        self.layers = [Linear(4, 4), Linear(4, 2, bias=False)]
        self.extra = {"scale": Tensor([1.0]), "nested": {"a": Tensor([2.0, 3.0])}}
        self.point = Point(Tensor([0.0]), Tensor([1.0]))
        self.not_a_tensor = 3
        self.steps = Tensor([0], dtype=dtypes.int32)

EXPECTED_KEYS = ["l1.weight", "l1.bias", "layers.0.weight", "layers.0.bias", "layers.1.weight", "extra.scale", "extra.nested.a",
                 "point.x", "point.y", "steps"]

def test_get_state_dict_names_like_tinygrad():
    m = Model()
    sd = get_state_dict(m)
    assert list(sd) == EXPECTED_KEYS
    assert sd["layers.1.weight"] is m.layers[1].weight and sd["point.y"] is m.point.y
    assert get_parameters(m) == list(sd.values())
    assert list(get_state_dict(m, prefix="model.")) == ["model." + k for k in EXPECTED_KEYS]
    assert list(get_state_dict(collections.OrderedDict(a=Tensor([1.0]), b=[Tensor([2.0])]))) == ["a", "b.0"]
    # a reference cycle doesn't recurse forever
    m.parent_ref = m
    assert list(get_state_dict(m)) == EXPECTED_KEYS

def _values_for(model) -> dict[str, Tensor]:
    rng = np.random.default_rng(3)
    out = {}
    for k, v in get_state_dict(model).items():
        arr = rng.standard_normal(v.shape).astype(np.float32) if v.dtype == dtypes.float32 else np.full(v.shape, 9, dtype=np.int32)
        out[k] = Tensor(arr)
    return out

def test_load_state_dict_assigns_values(tmp_path):
    m = Model()
    values = _values_for(m)
    path = tmp_path / "m.safetensors"
    safe_save(values, path)
    loaded = load_state_dict(m, safe_load(path), verbose=False)
    assert len(loaded) == len(EXPECTED_KEYS)
    for k, t in get_state_dict(m).items():
        assert t.device == Device.DEFAULT   # assigned into the model's own (default-device) parameters, not left on DISK
        np.testing.assert_array_equal(t.numpy(), values[k].numpy())
    assert m.layers[1].weight.numpy().shape == (2, 4)

def test_load_state_dict_strict_and_warnings():
    m = Model()
    values = _values_for(m)
    partial = {k: v for k, v in values.items() if k != "layers.0.bias"}
    with pytest.raises(KeyError, match="layers.0.bias"):
        load_state_dict(Model(), partial, verbose=False)
    with pytest.warns(UserWarning, match="layers.0.bias"):
        load_state_dict(m, partial, strict=False, verbose=False)
    extra = {**values, "unused.weight": Tensor([1.0])}
    with pytest.warns(UserWarning, match="unused.weight"):
        load_state_dict(Model(), extra, verbose=False)
    bad_shape = {**values, "l1.weight": Tensor.ones(3, 4)}
    with pytest.raises(ValueError, match="l1.weight"):
        load_state_dict(Model(), bad_shape, verbose=False)

def test_load_state_dict_takes_the_loaded_dtype_like_tinygrad(tmp_path):
    # tinygrad replaces the model tensor by the loaded one: a float16 checkpoint makes float16 weights, and an
    # int32 counter saved as float32 becomes a float32 tensor (not a cast into the model's dtype, not an error)
    m = Model()
    values = {**_values_for(m), "steps": Tensor([1.5]), "l1.weight": Tensor(np.arange(12).reshape(4, 3), dtype=dtypes.float16)}
    path = tmp_path / "mixed.safetensors"
    safe_save(values, path)
    load_state_dict(m, safe_load(path), verbose=False)
    assert m.steps.dtype == dtypes.float32 and m.steps.tolist() == [1.5]
    assert m.l1.weight.dtype == dtypes.float16 and m.l1.weight.device == Device.DEFAULT
    assert m.l1.weight.numpy().tolist() == np.arange(12).reshape(4, 3).tolist()
    assert m.l1.bias.dtype == dtypes.float32   # the others keep theirs

def test_load_state_dict_scalar_and_one_element_shapes_load_into_each_other(tmp_path):
    # like tinygrad: () and (1,) hold the same one value (older BatchNorm num_batches_tracked had shape (1,))
    model = {"scalar": Tensor(0.0), "vector": Tensor([0.0])}
    load_state_dict(model, {"scalar": Tensor([2.5]), "vector": Tensor(4.0)}, verbose=False)
    assert model["scalar"].shape == () and model["scalar"].item() == 2.5
    assert model["vector"].shape == (1,) and model["vector"].tolist() == [4.0]
    path = tmp_path / "old_batchnorm.safetensors"   # from DISK too (a checkpoint of fusegrad's old (1,) counter)
    safe_save({"num_batches_tracked": Tensor([7], dtype=dtypes.int64)}, path)
    bn = {"num_batches_tracked": Tensor(0, dtype=dtypes.int64)}
    load_state_dict(bn, safe_load(path), verbose=False)
    assert bn["num_batches_tracked"].shape == () and bn["num_batches_tracked"].item() == 7 and bn["num_batches_tracked"].device == Device.DEFAULT
    with pytest.raises(ValueError, match="Shape mismatch in layer `vector`"):
        load_state_dict(model, {"scalar": Tensor(1.0), "vector": Tensor([1.0, 2.0])}, verbose=False)
    with pytest.raises(ValueError, match="Shape mismatch in layer `scalar`"):
        load_state_dict(model, {"scalar": Tensor([[1.0]]), "vector": Tensor([1.0])}, verbose=False)

def test_load_state_dict_consume_and_torch(tmp_path):
    m = Model()
    sd = {k: torch.from_numpy(v.numpy()) for k, v in _values_for(m).items()}
    sd["l1.weight"] = sd["l1.weight"].t().contiguous().t()   # non-contiguous in the checkpoint
    path = tmp_path / "m.pt"
    torch.save(sd, str(path))
    state = torch_load(str(path))
    load_state_dict(m, state, verbose=False, consume=True)
    assert state == {}
    for k, t in get_state_dict(m).items(): np.testing.assert_array_equal(t.numpy(), sd[k].numpy())

def _many_tensors(count: int) -> dict[str, Tensor]:
    return {f"w{i}": Tensor(np.full((4,), i, np.float32)) for i in range(count)}

def test_load_progress_bar_only_on_a_terminal(tmp_path, monkeypatch, capsys):
    from fusegrad.nn import state as state_module
    path = tmp_path / "many.safetensors"
    safe_save(_many_tensors(state_module.LOAD_BAR_MANY_TENSORS), path)
    model = {k: Tensor.empty(4) for k in _many_tensors(state_module.LOAD_BAR_MANY_TENSORS)}
    load_state_dict(model, safe_load(path))
    assert capsys.readouterr().err == ""                    # a pipe (pytest): no bar, even with verbose=True
    state = safe_load(path)
    monkeypatch.setattr(state_module.sys.stderr, "isatty", lambda: True)
    load_state_dict(model, state, verbose=False)
    assert capsys.readouterr().err == ""                    # verbose=False (and DEBUG=0): no bar
    loaded = load_state_dict(model, safe_load(path))
    captured = capsys.readouterr()
    assert "loaded weights in" in captured.out               # tinygrad's verbose line
    final = captured.err.rstrip("\n").rsplit("\r", 1)[-1]
    assert re.search(rf"\b{len(model)}/{len(model)}\b", final) and "ram used" in final and "\x1b" not in captured.err
    assert "safe_load" in captured.err                        # the file's bar ran too (many tensors) and was erased
    np.testing.assert_equal(loaded[7].numpy(), np.full((4,), 7, np.float32))

def test_small_quick_load_shows_no_bar(tmp_path, monkeypatch, capsys):
    from fusegrad.nn import state as state_module
    monkeypatch.setattr(state_module.sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr(state_module, "LOAD_BAR_DELAY", 3600.0)
    path = tmp_path / "few.safetensors"
    safe_save(_many_tensors(3), path)
    load_state_dict({k: Tensor.empty(4) for k in _many_tensors(3)}, safe_load(path))
    assert capsys.readouterr().err == ""

# ================================================================ GGUF

QK, QK_K = 32, 256

def f16_bytes(x: np.ndarray) -> np.ndarray: return x.astype(np.float16).reshape(-1, 1).view(np.uint8)
def f16_of(b: np.ndarray) -> np.ndarray: return b.copy().view(np.float16).astype(np.float32).reshape(-1)

def _signed_absmax(x: np.ndarray) -> np.ndarray:
    return x[np.arange(len(x)), np.abs(x).argmax(axis=1)]

# --- reference quantizers (numpy, vectorized over blocks), following ggml's quantize_row_*_ref

def quant_q4_0(x):
    x = x.reshape(-1, QK)
    d = _signed_absmax(x) / -8
    idv = np.where(d != 0, 1 / np.where(d == 0, 1, d), 0)
    q = np.minimum(15, np.trunc(x * idv[:, None] + 8.5)).astype(np.uint8)
    return np.concatenate([f16_bytes(d), q[:, :16] | (q[:, 16:] << 4)], axis=1)

def quant_q4_1(x):
    x = x.reshape(-1, QK)
    mn, mx = x.min(axis=1), x.max(axis=1)
    d = (mx - mn) / 15
    idv = np.where(d != 0, 1 / np.where(d == 0, 1, d), 0)
    q = np.minimum(15, np.trunc((x - mn[:, None]) * idv[:, None] + 0.5)).astype(np.uint8)
    return np.concatenate([f16_bytes(d), f16_bytes(mn), q[:, :16] | (q[:, 16:] << 4)], axis=1)

def _qh_bytes(q):   # bit j of a little-endian uint32 = high bit of element j
    bits = (q >> 4).astype(np.uint64) & 1
    qh = (bits << np.arange(32, dtype=np.uint64)).sum(axis=1).astype(np.uint32)
    return qh.reshape(-1, 1).view(np.uint8)

def quant_q5_0(x):
    x = x.reshape(-1, QK)
    d = _signed_absmax(x) / -16
    idv = np.where(d != 0, 1 / np.where(d == 0, 1, d), 0)
    q = np.minimum(31, np.trunc(x * idv[:, None] + 16.5)).astype(np.uint8)
    return np.concatenate([f16_bytes(d), _qh_bytes(q), (q[:, :16] & 0xF) | ((q[:, 16:] & 0xF) << 4)], axis=1)

def quant_q5_1(x):
    x = x.reshape(-1, QK)
    mn, mx = x.min(axis=1), x.max(axis=1)
    d = (mx - mn) / 31
    idv = np.where(d != 0, 1 / np.where(d == 0, 1, d), 0)
    q = np.minimum(31, np.trunc((x - mn[:, None]) * idv[:, None] + 0.5)).astype(np.uint8)
    return np.concatenate([f16_bytes(d), f16_bytes(mn), _qh_bytes(q), (q[:, :16] & 0xF) | ((q[:, 16:] & 0xF) << 4)], axis=1)

def quant_q8_0(x):
    x = x.reshape(-1, QK)
    d = np.abs(x).max(axis=1) / 127
    idv = np.where(d != 0, 1 / np.where(d == 0, 1, d), 0)
    q = np.round(x * idv[:, None]).astype(np.int8)
    return np.concatenate([f16_bytes(d), q.view(np.uint8)], axis=1)

def _k_scales_min(x, levels):
    """Per 32-element sub-block scale/min quantized to 6 bits against the super-block d/dmin."""
    sub = x.reshape(-1, 8, 32)
    mins = np.minimum(sub.min(axis=2), 0)
    scales = (sub.max(axis=2) - mins) / levels
    d = scales.max(axis=1) / 63
    dmin = (-mins).max(axis=1) / 63
    d16, dmin16 = d.astype(np.float16).astype(np.float32), dmin.astype(np.float16).astype(np.float32)
    sc = np.clip(np.round(scales / np.where(d16 == 0, 1, d16)[:, None]), 0, 63).astype(np.uint8)
    m = np.clip(np.round(-mins / np.where(dmin16 == 0, 1, dmin16)[:, None]), 0, 63).astype(np.uint8)
    eff_scale = d16[:, None] * sc
    eff_min = dmin16[:, None] * m
    q = np.clip(np.round((sub + eff_min[:, :, None]) / np.where(eff_scale == 0, 1, eff_scale)[:, :, None]), 0, levels).astype(np.uint8)
    packed = np.zeros((len(x), 12), np.uint8)
    packed[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    packed[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    return f16_bytes(d), f16_bytes(dmin), packed, q.reshape(-1, QK_K)

def quant_q4_k(x):
    x = x.reshape(-1, QK_K)
    d, dmin, scales, q = _k_scales_min(x, 15)
    qc = q.reshape(-1, 4, 64)
    qs = (qc[:, :, :32] | (qc[:, :, 32:] << 4)).reshape(-1, 128)
    return np.concatenate([d, dmin, scales, qs], axis=1)

def quant_q5_k(x):
    x = x.reshape(-1, QK_K)
    d, dmin, scales, q = _k_scales_min(x, 31)
    qc = q.reshape(-1, 4, 64)
    qs = ((qc[:, :, :32] & 0xF) | ((qc[:, :, 32:] & 0xF) << 4)).reshape(-1, 128)
    qh = np.zeros((len(x), 32), np.uint8)
    for c in range(4):
        qh |= ((qc[:, c, :32] >> 4) << (2 * c)).astype(np.uint8) | ((qc[:, c, 32:] >> 4) << (2 * c + 1)).astype(np.uint8)
    return np.concatenate([d, dmin, scales, qh, qs], axis=1)

def quant_q6_k(x):
    x = x.reshape(-1, QK_K)
    sub = x.reshape(-1, 16, 16)
    s = np.abs(sub).max(axis=2) / 31
    d = s.max(axis=1) / 127
    d16 = d.astype(np.float16).astype(np.float32)
    sc = np.clip(np.round(s / np.where(d16 == 0, 1, d16)[:, None]), -128, 127).astype(np.int8)
    eff = d16[:, None] * sc
    L = (np.clip(np.round(sub / np.where(eff == 0, 1, eff)[:, :, None]), -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 128)
    ql = np.zeros((len(x), 2, 64), np.uint8)
    ql[:, :, :32] = (L[:, :, 0:32] & 0xF) | ((L[:, :, 64:96] & 0xF) << 4)
    ql[:, :, 32:] = (L[:, :, 32:64] & 0xF) | ((L[:, :, 96:128] & 0xF) << 4)
    qh = (L[:, :, 0:32] >> 4) | ((L[:, :, 32:64] >> 4) << 2) | ((L[:, :, 64:96] >> 4) << 4) | ((L[:, :, 96:128] >> 4) << 6)
    return np.concatenate([ql.reshape(-1, 128), qh.reshape(-1, 64), sc.view(np.uint8), f16_bytes(d)], axis=1)

# --- reference dequantizers: element-by-element transliterations of ggml's dequantize_row_* (numpy over blocks)

def deq_q4_0(b):
    d, qs = f16_of(b[:, 0:2]), b[:, 2:18].astype(np.int32)
    y = np.zeros((len(b), 32), np.float32)
    for j in range(16):
        y[:, j] = ((qs[:, j] & 0x0F) - 8) * d
        y[:, j + 16] = ((qs[:, j] >> 4) - 8) * d
    return y

def deq_q4_1(b):
    d, m, qs = f16_of(b[:, 0:2]), f16_of(b[:, 2:4]), b[:, 4:20].astype(np.int32)
    y = np.zeros((len(b), 32), np.float32)
    for j in range(16):
        y[:, j] = (qs[:, j] & 0x0F) * d + m
        y[:, j + 16] = (qs[:, j] >> 4) * d + m
    return y

def deq_q5(b, has_min):
    d = f16_of(b[:, 0:2]); o = 2
    m = f16_of(b[:, 2:4]) if has_min else None
    if has_min: o = 4
    qh = b[:, o:o + 4].copy().view(np.uint32).reshape(-1).astype(np.int64)
    qs = b[:, o + 4:o + 20].astype(np.int64)
    y = np.zeros((len(b), 32), np.float32)
    for j in range(16):
        xh0 = ((qh >> j) << 4) & 0x10
        xh1 = (qh >> (j + 12)) & 0x10
        x0, x1 = (qs[:, j] & 0x0F) | xh0, (qs[:, j] >> 4) | xh1
        if has_min: y[:, j], y[:, j + 16] = x0 * d + m, x1 * d + m
        else: y[:, j], y[:, j + 16] = (x0 - 16) * d, (x1 - 16) * d
    return y

def deq_q8_0(b):
    return b[:, 2:34].copy().view(np.int8).astype(np.float32) * f16_of(b[:, 0:2])[:, None]

def _scale_min_k4(j, q):
    if j < 4: return q[:, j] & 63, q[:, j + 4] & 63
    return (q[:, j + 4] & 0xF) | ((q[:, j - 4] >> 6) << 4), (q[:, j + 4] >> 4) | ((q[:, j] >> 6) << 4)

def deq_k(b, five):
    d, dmin = f16_of(b[:, 0:2]), f16_of(b[:, 2:4])
    scales = b[:, 4:16].astype(np.int64)
    qh = b[:, 16:48].astype(np.int64) if five else None
    ql = b[:, 48:176].astype(np.int64) if five else b[:, 16:144].astype(np.int64)
    y = np.zeros((len(b), 256), np.float32)
    pos, u1, u2 = 0, 1, 2
    for j, isb in zip(range(0, 256, 64), range(0, 8, 2)):
        sc, m = _scale_min_k4(isb, scales); d1, m1 = d * sc, dmin * m
        sc, m = _scale_min_k4(isb + 1, scales); d2, m2 = d * sc, dmin * m
        q = ql[:, (j // 64) * 32:(j // 64) * 32 + 32]
        for l in range(32):
            h = np.where(qh[:, l] & u1, 16, 0) if five else 0
            y[:, pos + l] = d1 * ((q[:, l] & 0xF) + h) - m1
        for l in range(32):
            h = np.where(qh[:, l] & u2, 16, 0) if five else 0
            y[:, pos + 32 + l] = d2 * ((q[:, l] >> 4) + h) - m2
        pos += 64; u1 <<= 2; u2 <<= 2
    return y

def deq_q6_k(b):
    d = f16_of(b[:, 208:210])
    ql_all, qh_all = b[:, 0:128].astype(np.int64), b[:, 128:192].astype(np.int64)
    sc_all = b[:, 192:208].copy().view(np.int8).astype(np.int64)
    y = np.zeros((len(b), 256), np.float32)
    for n in range(2):
        ql, qh, sc = ql_all[:, 64 * n:], qh_all[:, 32 * n:], sc_all[:, 8 * n:]
        for l in range(32):
            is_ = l // 16
            q1 = ((ql[:, l] & 0xF) | (((qh[:, l] >> 0) & 3) << 4)) - 32
            q2 = ((ql[:, l + 32] & 0xF) | (((qh[:, l] >> 2) & 3) << 4)) - 32
            q3 = ((ql[:, l] >> 4) | (((qh[:, l] >> 4) & 3) << 4)) - 32
            q4 = ((ql[:, l + 32] >> 4) | (((qh[:, l] >> 6) & 3) << 4)) - 32
            y[:, 128 * n + l] = d * sc[:, is_] * q1
            y[:, 128 * n + l + 32] = d * sc[:, is_ + 2] * q2
            y[:, 128 * n + l + 64] = d * sc[:, is_ + 4] * q3
            y[:, 128 * n + l + 96] = d * sc[:, is_ + 6] * q4
    return y

GGML = {  # name: (type id, block elements, quantize, dequantize, max error relative to the block's |max|; the
        # symmetric formats clip the side opposite the largest value by one step)
    "Q4_0": (2, 32, quant_q4_0, deq_q4_0, 0.13), "Q4_1": (3, 32, quant_q4_1, deq_q4_1, 0.07),
    "Q5_0": (6, 32, quant_q5_0, lambda b: deq_q5(b, False), 0.07), "Q5_1": (7, 32, quant_q5_1, lambda b: deq_q5(b, True), 0.035),
    "Q8_0": (8, 32, quant_q8_0, deq_q8_0, 0.005), "Q4_K": (12, 256, quant_q4_k, lambda b: deq_k(b, False), 0.12),
    "Q5_K": (13, 256, quant_q5_k, lambda b: deq_k(b, True), 0.06), "Q6_K": (14, 256, quant_q6_k, deq_q6_k, 0.03)}

# --- a tiny GGUF writer

GGUF_TYPES = {"u8": (0, "<B"), "i8": (1, "<b"), "u16": (2, "<H"), "i16": (3, "<h"), "u32": (4, "<I"), "i32": (5, "<i"),
              "f32": (6, "<f"), "bool": (7, "<?"), "u64": (10, "<Q"), "i64": (11, "<q"), "f64": (12, "<d")}

def _gguf_str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b

def _gguf_value(kind, value) -> bytes:
    if kind == "str": return struct.pack("<I", 8) + _gguf_str(value)
    if isinstance(kind, tuple):   # ("arr", element kind)
        ek = kind[1]
        out = struct.pack("<I", 9)
        if ek == "str": out += struct.pack("<IQ", 8, len(value)) + b"".join(_gguf_str(v) for v in value)
        elif isinstance(ek, tuple): out += struct.pack("<IQ", 9, len(value)) + b"".join(_gguf_value(ek, v)[4:] for v in value)
        else: out += struct.pack("<IQ", GGUF_TYPES[ek][0], len(value)) + b"".join(struct.pack(GGUF_TYPES[ek][1], v) for v in value)
        return out
    t, fmt = GGUF_TYPES[kind]
    return struct.pack("<I", t) + struct.pack(fmt, value)

def write_gguf(path, kvs, tensors, version=3, alignment=32) -> None:
    """kvs: [(key, kind, value)]; tensors: [(name, dims in ggml order (ne0 first), ggml type, raw bytes)]."""
    if alignment != 32: kvs = kvs + [("general.alignment", "u32", alignment)]
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, kind, value in kvs: out += _gguf_str(key) + _gguf_value(kind, value)
    offset, blobs = 0, []
    for name, dims, gtype, raw in tensors:
        out += _gguf_str(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", gtype, offset)
        blobs.append(raw + b"\0" * (-len(raw) % alignment))
        offset += len(blobs[-1])
    out += b"\0" * (-len(out) % alignment)
    with open(path, "wb") as f: f.write(out + b"".join(blobs))

KVS = [("general.architecture", "str", "llama"), ("general.name", "str", "tiny ünïcode"), ("a.u8", "u8", 200), ("a.i8", "i8", -100),
       ("a.u16", "u16", 60000), ("a.i16", "i16", -30000), ("a.u32", "u32", 4000000000), ("a.i32", "i32", -2000000000),
       ("a.f32", "f32", 1.5), ("a.bool", "bool", True), ("a.u64", "u64", 2**63 + 5), ("a.i64", "i64", -2**62), ("a.f64", "f64", 0.1),
       ("tokenizer.ggml.tokens", ("arr", "str"), ["<s>", "</s>", "hello", ""]), ("a.scores", ("arr", "f32"), [0.5, -1.0, 2.0]),
       ("a.nested", ("arr", ("arr", "i32")), [[1, 2], [3], []]), ("a.flags", ("arr", "bool"), [True, False])]

@pytest.mark.parametrize("version", [2, 3])
def test_gguf_metadata_and_plain_tensors(tmp_path, version):
    rng = np.random.default_rng(0)
    f32 = rng.standard_normal((3, 8)).astype(np.float32)
    f16 = rng.standard_normal((16,)).astype(np.float16)
    bf16 = (rng.integers(0, 2**16, size=(2, 4), dtype=np.uint16) & 0x7F7F).astype(np.uint16)
    i32 = rng.integers(-1000, 1000, size=(2, 2, 5), dtype=np.int32)
    i8 = rng.integers(-100, 100, size=(7,), dtype=np.int8)
    path = tmp_path / "plain.gguf"
    write_gguf(path, KVS, [("f32", (8, 3), 0, f32.tobytes()), ("f16", (16,), 1, f16.tobytes()), ("bf16", (4, 2), 30, bf16.tobytes()),
                           ("i32", (5, 2, 2), 26, i32.tobytes()), ("i8", (7,), 24, i8.tobytes())], version=version, alignment=64)
    kv, sd = gguf_load(str(path))
    for key, kind, value in KVS:
        if kind == "f32": assert kv[key] == pytest.approx(value)
        elif kind == ("arr", "f32"): assert kv[key] == pytest.approx(value)
        else: assert kv[key] == value, key
    assert kv["general.alignment"] == 64
    np.testing.assert_array_equal(sd["f32"].numpy(), f32)
    np.testing.assert_array_equal(sd["f16"].numpy(), f16)
    np.testing.assert_array_equal(sd["i32"].numpy(), i32)
    np.testing.assert_array_equal(sd["i8"].numpy(), i8)
    assert sd["bf16"].dtype == dtypes.bfloat16 and raw_bits(sd["bf16"]) == bf16.tobytes()
    assert sd["f32"].device.startswith("DISK:")
    # the same file as a uint8 tensor
    kv2, sd2 = gguf_load(Tensor(np.fromfile(path, dtype=np.uint8)))
    assert kv2["tokenizer.ggml.tokens"] == ["<s>", "</s>", "hello", ""]
    np.testing.assert_array_equal(sd2["f32"].numpy(), f32)

@pytest.mark.parametrize("qtype", list(GGML))
def test_gguf_quantized_matches_reference(tmp_path, qtype):
    gtype, block, quant, deq, rel_err = GGML[qtype]
    rng = np.random.default_rng(gtype)
    rows, cols = 3, 2 * max(block, 256)
    x = (rng.standard_normal((rows, cols)) * rng.uniform(0.1, 4.0, size=(rows, 1))).astype(np.float32)
    x[0, :block] = 0.0                      # an all-zero block: d = 0 must give zeros, not NaN
    blocks = quant(x.reshape(-1))
    assert blocks.dtype == np.uint8 and blocks.shape[1] == {32: {2: 18, 3: 20, 6: 22, 7: 24, 8: 34}, 256: {12: 144, 13: 176, 14: 210}}[block][gtype]
    reference = deq(blocks).reshape(rows, cols)
    # the reference quantizer round-trips within the format's precision
    err = np.abs(reference - x).reshape(-1, block).max(axis=1)
    scale = np.abs(x).reshape(-1, block).max(axis=1)
    assert np.all(err <= rel_err * scale + 1e-6), f"{qtype}: reference quantization error too large"
    path = tmp_path / f"{qtype}.gguf"
    write_gguf(path, [("general.architecture", "str", "test")], [("w", (cols, rows), gtype, blocks.tobytes()),
                                                               ("bias", (4,), 0, np.arange(4, dtype=np.float32).tobytes())])
    _, sd = gguf_load(path)
    got = sd["w"]
    assert got.shape == (rows, cols) and got.dtype == dtypes.float32
    np.testing.assert_allclose(got.numpy(), reference, rtol=1e-6, atol=1e-6)
    assert np.all(got.numpy()[0, :block] == 0)
    np.testing.assert_array_equal(sd["bias"].numpy(), np.arange(4, dtype=np.float32))

def test_gguf_rejects_corrupt_files(tmp_path):
    good = tmp_path / "good.gguf"
    data = np.arange(64, dtype=np.float32)
    write_gguf(good, KVS, [("w", (64,), 0, data.tobytes())])
    raw = good.read_bytes()
    def bad(name, content):
        p = tmp_path / name
        p.write_bytes(content)
        return str(p)
    with pytest.raises(ValueError, match="not a GGUF file"): gguf_load(bad("magic.gguf", b"GGML" + raw[4:]))
    with pytest.raises(ValueError, match="unsupported GGUF version"): gguf_load(bad("ver.gguf", raw[:4] + struct.pack("<I", 1) + raw[8:]))
    with pytest.raises(ValueError, match="truncated|corrupt"): gguf_load(bad("trunc_data.gguf", raw[:-8]))
    with pytest.raises(ValueError, match="truncated|corrupt"): gguf_load(bad("trunc_header.gguf", raw[:60]))
    # a string length pointing far past the end of the file
    first_key = raw.index(b"general.architecture") - 8
    huge = raw[:first_key] + struct.pack("<Q", 2**60) + raw[first_key + 8:]
    with pytest.raises(ValueError, match="truncated|corrupt"): gguf_load(bad("strlen.gguf", huge))
    # a tensor whose offset points outside the data
    p = tmp_path / "off.gguf"
    write_gguf(p, [], [("w", (64,), 0, data.tobytes())])
    b = bytearray(p.read_bytes())
    off_pos = b.index(b"w") + 1 + 4 + 8 + 4
    b[off_pos:off_pos + 8] = struct.pack("<Q", 1 << 20)
    with pytest.raises(ValueError, match="truncated|corrupt"): gguf_load(bad("offset.gguf", bytes(b)))
    # a row length that isn't a whole number of quantized blocks
    p2 = tmp_path / "rows.gguf"
    write_gguf(p2, [], [("q", (48,), 2, bytes(18 * 2))])
    with pytest.raises(ValueError, match="multiple of 32"): gguf_load(str(p2))
    p3 = tmp_path / "type.gguf"
    write_gguf(p3, [], [("q", (32,), 99, bytes(64))])
    with pytest.raises(NotImplementedError, match="99"): gguf_load(str(p3))
