"""Generated bad inputs, fixed seeds: random index sets (in and out of range, negative, of mixed kinds) must be
accepted or refused as numpy and PyTorch do, with their values; random mutations of valid tar, zip and torch
checkpoint files must load or raise the loader's own error type (never an OverflowError, IndexError,
struct.error, zlib.error or a crash from inside the parser)."""
from __future__ import annotations
import io, pickle, random, struct, tarfile, zipfile
import numpy as np
import pytest
import torch
from fusegrad import Tensor
from fusegrad.nn.state import tar_extract, zip_extract, torch_load

# ================================================================ index sets against numpy / torch

ADVANCED = ("list", "numpy", "tensor")

def random_index_item(rng: random.Random, size: int, kind: str, length: int):
    """One index item for a dim of ``size``: values drawn from [-size - 2, size + 2), so some are out of range."""
    value = lambda: rng.randrange(-size - 2, size + 2)
    if kind == "int": return value()
    if kind == "slice": return slice(rng.choice([None, value()]), rng.choice([None, value()]), rng.choice([None, 1, 2, -1]))
    values = [value() for _ in range(length)]
    if kind == "list": return values
    if kind == "numpy": return np.array(values, dtype=rng.choice([np.int32, np.int64]))
    return Tensor(values)   # a realized tensor: its values are on the host

def random_index(rng: random.Random, shape: tuple) -> tuple:
    """Ints and slices, with up to two advanced indices (lists, numpy arrays, tensors) of one length, maybe a None."""
    count, length = rng.randint(1, len(shape)), rng.randint(1, 3)
    advanced = set(rng.sample(range(count), min(count, rng.choice([0, 1, 1, 2]))))
    items = [random_index_item(rng, size, rng.choice(ADVANCED) if i in advanced else rng.choice(["int", "slice"]), length)
             for i, size in enumerate(shape[:count])]
    if rng.random() < 0.2: items.insert(rng.randrange(len(items) + 1), None)
    return tuple(items)

def as_numpy_index(index: tuple) -> tuple:
    return tuple(item.numpy() if isinstance(item, Tensor) else item for item in index)

def random_shape(rng: random.Random) -> tuple:
    return tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 3)))

@pytest.mark.parametrize("seed", range(3))
def test_getitem_accepts_and_refuses_what_numpy_does(seed):
    rng = random.Random(seed)
    for _ in range(25):
        shape = random_shape(rng)
        data = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
        index = random_index(rng, shape)
        try: expected = data[as_numpy_index(index)]
        except IndexError:
            with pytest.raises(IndexError): Tensor(data)[index].realize()
            continue
        np.testing.assert_array_equal(Tensor(data)[index].numpy(), expected, err_msg=f"{shape} {index}")

@pytest.mark.parametrize("seed", range(2))
def test_setitem_accepts_and_refuses_what_numpy_does(seed):
    rng = random.Random(100 + seed)
    for _ in range(20):
        shape = random_shape(rng)
        data = np.zeros(shape, dtype=np.int32)
        index = random_index(rng, shape)
        try: data[as_numpy_index(index)] = 7
        except IndexError:
            target = Tensor(np.zeros(shape, dtype=np.int32)).realize()
            with pytest.raises(IndexError): target[index] = 7
            np.testing.assert_array_equal(target.numpy(), np.zeros(shape, np.int32))   # nothing was written
            continue
        target = Tensor(np.zeros(shape, dtype=np.int32)).realize()
        target[index] = 7
        np.testing.assert_array_equal(target.numpy(), data, err_msg=f"{shape} {index}")

@pytest.mark.parametrize("seed", range(2))
def test_gather_and_scatter_refuse_what_torch_does(seed):
    rng = np.random.default_rng(seed)
    for _ in range(15):
        rows, cols = rng.integers(1, 4, size=2)
        x = rng.standard_normal((rows, cols)).astype(np.float32)
        index = rng.integers(-1, rows + 1, size=(int(rng.integers(1, rows + 1)), cols))
        try: expected = torch.tensor(x).gather(0, torch.tensor(index)).numpy()
        except RuntimeError:
            with pytest.raises(RuntimeError, match="out of bounds"): Tensor(x).gather(0, Tensor(index))
            with pytest.raises(RuntimeError, match="out of bounds"): Tensor(x).scatter(0, Tensor(index), 1.0)
            continue
        np.testing.assert_array_equal(Tensor(x).gather(0, Tensor(index)).numpy(), expected)

# ================================================================ mutated checkpoint files

def torch_zip_checkpoint() -> bytes:
    out = io.BytesIO()
    torch.save({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.tensor([1, 2])}, out)
    return out.getvalue()

def torch_legacy_checkpoint() -> bytes:
    out = io.BytesIO()
    torch.save({"w": torch.arange(6, dtype=torch.float32)}, out, _use_new_zipfile_serialization=False)
    return out.getvalue()

def tar_archive(fmt: int) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, data in (("a.bin", b"abcd" * 10), ("dir/b.bin", bytes(range(200)))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            if fmt == tarfile.PAX_FORMAT: info.pax_headers = {"comment": "x" * 20}
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()

def zip_archive(method: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", method) as zf:
        zf.writestr("a.txt", b"hello " * 30)
        zf.writestr("b/c.bin", bytes(range(256)))
    return out.getvalue()

# numbers that break parsers: negative, past 2**31 / 2**63, base-256 tar fields, a PAX record length past sys.maxsize
NASTY_INTS = [-1, 0, 1 << 31, 1 << 33, 1 << 62, -(1 << 40)]
NASTY_FIELDS = [b"99999999999\0", b"\x80" + bytes(10) + b"\x01", b"\xff" * 12, b"777777777777", b"-1         \0"]

def mutate(rng: random.Random, raw: bytes) -> bytes:
    raw = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        if not raw: break
        at, choice = rng.randrange(len(raw)), rng.random()
        if choice < 0.4: raw[at] = rng.randrange(256)
        elif choice < 0.55: raw[at:at + 8] = struct.pack("<q", rng.choice(NASTY_INTS))[:len(raw[at:at + 8])]
        elif choice < 0.7: raw[at:at + 12] = rng.choice(NASTY_FIELDS)[:len(raw[at:at + 12])]
        elif choice < 0.8: del raw[at:]
        elif choice < 0.9: raw[at:at] = bytes(rng.randrange(1, 600))
        else: raw[at:at] = b"99999999999999999999999 path=x\n"
    return bytes(raw)

def loads_or_raises_its_own_error(loader, raw: bytes, allowed: tuple) -> None:
    try: loader(Tensor(raw))
    except allowed: pass
    except Exception as e: pytest.fail(f"{loader.__name__} raised {type(e).__name__}: {e} (not the loader's error type)")

LOADER_ERRORS = {tar_extract: (ValueError,), zip_extract: (ValueError,),
                 # a mutated pickle may name a global the unpickler refuses (UnpicklingError) or say big-endian
                 torch_load: (ValueError, pickle.UnpicklingError, NotImplementedError)}

@pytest.mark.parametrize("name, make, loader", [
    ("torch zip", torch_zip_checkpoint, torch_load), ("torch legacy", torch_legacy_checkpoint, torch_load),
    ("pax tar", lambda: tar_archive(tarfile.PAX_FORMAT), tar_extract), ("gnu tar", lambda: tar_archive(tarfile.GNU_FORMAT), tar_extract),
    ("ustar as torch", lambda: tar_archive(tarfile.USTAR_FORMAT), torch_load),
    ("stored zip", lambda: zip_archive(zipfile.ZIP_STORED), zip_extract), ("deflated zip", lambda: zip_archive(zipfile.ZIP_DEFLATED), zip_extract),
    ("torch zip as zip", torch_zip_checkpoint, zip_extract)])
def test_mutated_archives_raise_the_loaders_own_errors(name, make, loader):
    rng, valid = random.Random(name), make()
    for _ in range(250): loads_or_raises_its_own_error(loader, mutate(rng, valid), LOADER_ERRORS[loader])

def with_checksum(header: bytearray) -> bytes:
    """A tar header with a valid checksum, so tarfile believes the fields."""
    header[148:156] = b" " * 8
    header[148:155] = b"%06o\0" % sum(header)
    return bytes(header)

TAR_FIELDS = {"mode": (100, 8), "uid": (108, 8), "gid": (116, 8), "size": (124, 12), "mtime": (136, 12)}

@pytest.mark.parametrize("field", sorted(TAR_FIELDS))
def test_tar_header_numbers_with_valid_checksums(field):
    """Every header number field set to octal, base-256 (negative too) and junk values, with the checksum fixed."""
    rng, valid = random.Random(field), tar_archive(tarfile.GNU_FORMAT)
    start, width = TAR_FIELDS[field]
    for _ in range(60):
        header = bytearray(valid[:512])
        kind = rng.random()
        if kind < 0.3: header[start:start + width] = (b"%0*o" % (width - 1, rng.randrange(8 ** (width - 1))) + b"\0")
        elif kind < 0.7:   # base 256: the first byte's top bit, the rest a big-endian two's-complement number
            number = rng.choice([rng.randrange(1 << 62), -rng.randrange(1, 1 << 62), (1 << 8 * (width - 1)) - 1])
            header[start:start + width] = bytes([0x80 if number >= 0 else 0xff]) + (number % (1 << 8 * (width - 1))).to_bytes(width - 1, "big")
        else: header[start:start + width] = bytes(rng.randrange(256) for _ in range(width))
        loads_or_raises_its_own_error(tar_extract, with_checksum(header) + valid[512:], (ValueError,))
