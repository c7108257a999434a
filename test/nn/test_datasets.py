"""fusegrad.nn.datasets: reading IDX files and mnist() from a local directory, the download path
when offline, and clear errors for truncated or corrupt files.

The IDX files are written here by a small independent writer (big-endian header: two zero bytes, a
dtype code, the number of dimensions, then each size as a big-endian uint32), plain and gzipped."""
import gzip, pathlib, struct, urllib.error, urllib.request
import numpy as np
import pytest
from fusegrad import Tensor, dtypes, helpers
from fusegrad.nn import datasets
from fusegrad.nn.datasets import mnist, read_idx

IDX_CODES = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09, np.dtype(">i2"): 0x0B, np.dtype(">i4"): 0x0C,
             np.dtype(">f4"): 0x0D, np.dtype(">f8"): 0x0E}
FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")

def idx_bytes(array: np.ndarray) -> bytes:
    """Encode ``array`` as an IDX file (values big-endian)."""
    big = array.astype(array.dtype.newbyteorder(">")) if array.dtype.itemsize > 1 else array
    header = bytes([0, 0, IDX_CODES[big.dtype], array.ndim]) + b"".join(struct.pack(">I", s) for s in array.shape)
    return header + big.tobytes()

def make_split(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8), rng.integers(0, 10, size=n, dtype=np.uint8)

def write_mnist(directory: pathlib.Path, gz: bool = False, n_train: int = 5, n_test: int = 3, seed: int = 0):
    """Write the four MNIST files (random contents) into ``directory``; return the arrays."""
    rng = np.random.default_rng(seed)
    arrays = (*make_split(rng, n_train), *make_split(rng, n_test))
    directory.mkdir(parents=True, exist_ok=True)
    for name, array in zip(FILES, arrays):
        data = idx_bytes(array)
        if gz: (directory / (name + ".gz")).write_bytes(gzip.compress(data))
        else: (directory / name).write_bytes(data)
    return arrays

def check_mnist_result(result, arrays):
    assert len(result) == 4
    x_train, y_train, x_test, y_test = arrays
    X_train, Y_train, X_test, Y_test = result
    for t in result: assert isinstance(t, Tensor) and t.dtype == dtypes.uint8
    assert X_train.shape == (len(x_train), 1, 28, 28) and X_test.shape == (len(x_test), 1, 28, 28)
    assert Y_train.shape == (len(y_train),) and Y_test.shape == (len(y_test),)
    np.testing.assert_array_equal(X_train.numpy(), x_train[:, None])
    np.testing.assert_array_equal(Y_train.numpy(), y_train)
    np.testing.assert_array_equal(X_test.numpy(), x_test[:, None])
    np.testing.assert_array_equal(Y_test.numpy(), y_test)

# ---------------------------------------------------------------- read_idx

@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_read_idx_dtypes_roundtrip(dtype):
    array = (np.arange(2 * 3 * 4) * 7 - 40).astype(dtype).reshape(2, 3, 4)
    got = read_idx(idx_bytes(array))
    assert got.shape == (2, 3, 4) and got.dtype == np.dtype(dtype)
    assert got.dtype.isnative
    np.testing.assert_array_equal(got, array)

def test_read_idx_big_endian_header_and_values():
    # a hand-written file: int16 code 0x0B, 1 dim of size 3 (big-endian), values 1, 256, -2 big-endian
    data = bytes([0, 0, 0x0B, 1, 0, 0, 0, 3, 0x00, 0x01, 0x01, 0x00, 0xFF, 0xFE])
    np.testing.assert_array_equal(read_idx(data), np.array([1, 256, -2], np.int16))

def test_read_idx_path_plain_and_gzip(tmp_path):
    array = np.random.default_rng(1).integers(0, 256, size=(4, 28, 28), dtype=np.uint8)
    (tmp_path / "plain").write_bytes(idx_bytes(array))
    (tmp_path / "packed.gz").write_bytes(gzip.compress(idx_bytes(array)))
    for source in (tmp_path / "plain", str(tmp_path / "plain"), tmp_path / "packed.gz", (tmp_path / "packed.gz").read_bytes()):
        got = read_idx(source)
        assert got.dtype == np.uint8 and got.shape == (4, 28, 28)
        np.testing.assert_array_equal(got, array)

def test_read_idx_labels_1d():
    labels = np.array([3, 1, 4, 1, 5, 9, 2, 6], np.uint8)
    got = read_idx(bytearray(idx_bytes(labels)))
    assert got.shape == (8,)
    np.testing.assert_array_equal(got, labels)

GOOD = idx_bytes(np.arange(2 * 28 * 28, dtype=np.int32).astype(np.uint8).reshape(2, 28, 28))

@pytest.mark.parametrize("data, message", [
    (b"", "too short"),
    (GOOD[:3], "too short"),
    (b"\x01\x00" + GOOD[2:], "magic"),                 # first byte not zero
    (GOOD[:2] + b"\x07" + GOOD[3:], "dtype code 0x07"),  # unknown dtype code
    (GOOD[:3] + b"\x00", "0 dimensions"),
    (GOOD[:10], "truncated inside its header"),       # 3 dims need a 16-byte header
    (GOOD[:-1], "truncated"),                         # one data byte missing
    (GOOD[:16], "truncated"),                         # header only
    (GOOD + b"\x00", "longer than its header"),       # trailing byte
    (GOOD[:4] + struct.pack(">I", 3) + GOOD[8:], "truncated"),  # header claims 3 images, data has 2
])
def test_read_idx_bad_data_raises(data, message):
    with pytest.raises(ValueError, match=message):
        read_idx(data)

def test_read_idx_truncated_gzip_raises(tmp_path):
    packed = gzip.compress(GOOD)
    (tmp_path / "bad.gz").write_bytes(packed[:len(packed) // 2])
    with pytest.raises(ValueError, match="gzip"):
        read_idx(tmp_path / "bad.gz")
    # a complete gzip stream whose content is a truncated IDX file is caught by the size check
    (tmp_path / "short.gz").write_bytes(gzip.compress(GOOD[:-10]))
    with pytest.raises(ValueError, match="truncated"):
        read_idx(tmp_path / "short.gz")

def test_read_idx_error_names_file(tmp_path):
    (tmp_path / "broken-idx").write_bytes(GOOD[:100])
    with pytest.raises(ValueError, match="broken-idx"):
        read_idx(tmp_path / "broken-idx")

def test_read_idx_rejects_other_types():
    with pytest.raises(TypeError):
        read_idx(12345)

# ---------------------------------------------------------------- mnist()

@pytest.mark.parametrize("gz", [False, True])
def test_mnist_from_path(tmp_path, gz):
    arrays = write_mnist(tmp_path, gz=gz)
    check_mnist_result(mnist(path=tmp_path), arrays)
    check_mnist_result(mnist(path=str(tmp_path)), arrays)

def test_mnist_from_env_var(tmp_path, monkeypatch):
    arrays = write_mnist(tmp_path / "digits", n_train=6, n_test=2, seed=3)
    monkeypatch.setenv("MNIST_PATH", str(tmp_path / "digits"))
    check_mnist_result(mnist(), arrays)
    # Fashion-MNIST has its own variable, and an explicit path wins over the environment
    fashion = write_mnist(tmp_path / "fashion", n_train=4, n_test=4, seed=4)
    monkeypatch.setenv("FASHION_MNIST_PATH", str(tmp_path / "fashion"))
    check_mnist_result(mnist(fashion=True), fashion)
    check_mnist_result(mnist(path=tmp_path / "fashion"), fashion)

def test_mnist_dotted_names_and_device(tmp_path):
    # some mirrors spell the files train-images.idx3-ubyte; mixing plain and gzipped files is fine
    arrays = write_mnist(tmp_path)
    (tmp_path / FILES[0]).rename(tmp_path / "train-images.idx3-ubyte")
    (tmp_path / FILES[3]).rename(tmp_path / (FILES[3] + ".gz"))
    (tmp_path / (FILES[3] + ".gz")).write_bytes(gzip.compress(idx_bytes(arrays[3])))
    result = mnist(device="PYTHON", path=tmp_path)
    assert all(t.device == "PYTHON" for t in result)
    check_mnist_result(result, arrays)

def test_mnist_images_usable_as_model_input(tmp_path):
    write_mnist(tmp_path)
    X_train, Y_train, _, _ = mnist(path=tmp_path)
    idx = Tensor([4, 0, 2])
    np.testing.assert_array_equal(X_train[idx].numpy(), X_train.numpy()[[4, 0, 2]])
    # uint8 images mix with float weights as floats, as in tinygrad's beautiful_mnist
    assert (X_train.float() / 255).dtype == dtypes.float32
    assert (X_train[:2] * Tensor.ones(1, 28, 28)).dtype == dtypes.float32
    assert Y_train.sum().item() == int(Y_train.numpy().astype(np.int64).sum())

def test_mnist_missing_file(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / FILES[2]).unlink()
    with pytest.raises(FileNotFoundError, match="t10k-images-idx3-ubyte"):
        mnist(path=tmp_path)

def test_mnist_missing_directory(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        mnist(path=tmp_path / "nowhere")
    monkeypatch.setenv("MNIST_PATH", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"\$MNIST_PATH"):
        mnist()

def test_mnist_truncated_file_in_directory(tmp_path):
    arrays = write_mnist(tmp_path)
    (tmp_path / FILES[1]).write_bytes(idx_bytes(arrays[1])[:-2])
    with pytest.raises(ValueError, match="train-labels-idx1-ubyte.*truncated"):
        mnist(path=tmp_path)

def test_mnist_corrupt_header_in_directory(tmp_path):
    write_mnist(tmp_path, gz=True)
    data = bytearray(gzip.decompress((tmp_path / (FILES[0] + ".gz")).read_bytes()))
    data[2] = 0x42
    (tmp_path / (FILES[0] + ".gz")).write_bytes(gzip.compress(bytes(data)))
    with pytest.raises(ValueError, match="dtype code 0x42"):
        mnist(path=tmp_path)

def test_mnist_wrong_shapes(tmp_path):
    arrays = write_mnist(tmp_path)
    (tmp_path / FILES[0]).write_bytes(idx_bytes(np.zeros((5, 14, 14), np.uint8)))
    with pytest.raises(ValueError, match=r"\(N, 28, 28\)"):
        mnist(path=tmp_path)
    (tmp_path / FILES[0]).write_bytes(idx_bytes(np.zeros((4, 28, 28), np.uint8)))   # 4 images, 5 labels
    with pytest.raises(ValueError, match="4 images but 5 labels"):
        mnist(path=tmp_path)

@pytest.fixture
def offline(tmp_path, monkeypatch):
    """No network and an empty cache: every download fails the way it does on an offline machine."""
    calls = []
    def no_network(url, *args, **kwargs):
        calls.append(url)
        raise urllib.error.URLError("[Errno -2] Name or service not known")
    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    monkeypatch.setattr(helpers, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.delenv("MNIST_PATH", raising=False)
    monkeypatch.delenv("FASHION_MNIST_PATH", raising=False)
    return calls

@pytest.mark.parametrize("fashion, env_var", [(False, "MNIST_PATH"), (True, "FASHION_MNIST_PATH")])
def test_mnist_offline_error_is_clear(offline, fashion, env_var):
    with pytest.raises(ConnectionError) as info:
        mnist(fashion=fashion)
    message = str(info.value)
    assert env_var in message and "path=" in message                     # says how to point at local files
    assert "train-images-idx3-ubyte" in message and "could not download" in message
    assert isinstance(info.value.__cause__, urllib.error.URLError)
    assert len(offline) == 1 and offline[0].endswith("train-images-idx3-ubyte.gz")
    assert ("fashion" in offline[0]) == fashion

def test_mnist_download_uses_cache(offline, tmp_path):
    """Files already in the download cache are read without touching the network."""
    cached = tmp_path / "cache" / "downloads" / "mnist"
    cached.mkdir(parents=True)
    rng = np.random.default_rng(7)
    arrays = (*make_split(rng, 3), *make_split(rng, 2))
    for name, array in zip(FILES, arrays): (cached / (name + ".gz")).write_bytes(gzip.compress(idx_bytes(array)))
    check_mnist_result(mnist(), arrays)
    assert offline == []

def test_mnist_download_fetches_and_caches(tmp_path, monkeypatch):
    """With a (fake) network the four .gz files are fetched once each and cached."""
    rng = np.random.default_rng(8)
    arrays = (*make_split(rng, 3), *make_split(rng, 2))
    served = {name + ".gz": gzip.compress(idx_bytes(a)) for name, a in zip(FILES, arrays)}
    calls = []
    class Response:
        def __init__(self, data): self.data = data
        def read(self): return self.data
        def __enter__(self): return self
        def __exit__(self, *exc): return False
    def fake_urlopen(url, *args, **kwargs):
        calls.append(url)
        return Response(served[url.rsplit("/", 1)[1]])
    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    monkeypatch.setattr(helpers, "cache_dir", lambda: tmp_path / "cache")
    monkeypatch.delenv("MNIST_PATH", raising=False)
    check_mnist_result(mnist(), arrays)
    assert sorted(u.rsplit("/", 1)[1] for u in calls) == sorted(served)
    assert all(u.startswith(datasets.MNIST_URL) for u in calls)
    check_mnist_result(mnist(), arrays)      # the second call reads the cache
    assert len(calls) == 4

def test_mnist_corrupt_cached_download(offline, tmp_path):
    cached = tmp_path / "cache" / "downloads" / "mnist"
    cached.mkdir(parents=True)
    rng = np.random.default_rng(9)
    arrays = (*make_split(rng, 3), *make_split(rng, 2))
    for name, array in zip(FILES, arrays): (cached / (name + ".gz")).write_bytes(gzip.compress(idx_bytes(array)))
    (cached / (FILES[2] + ".gz")).write_bytes(gzip.compress(idx_bytes(arrays[2]))[:50])
    with pytest.raises(ValueError, match="delete the cached download"):
        mnist()
