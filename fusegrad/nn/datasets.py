"""Datasets: MNIST (and Fashion-MNIST), read from IDX files.

    from fusegrad.nn.datasets import mnist
    X_train, Y_train, X_test, Y_test = mnist()            # downloads once, then reads the cache
    X_train, Y_train, X_test, Y_test = mnist(path="data") # or: MNIST_PATH=data python ...

As in tinygrad, the images come back as uint8 tensors of shape (N, 1, 28, 28) and the labels as
uint8 tensors of shape (N,): 60000 training and 10000 test examples. ``read_idx`` reads any IDX file
(the format of the MNIST files: a big-endian header of magic number, dtype code and dimension
sizes, then the raw values) into a numpy array; gzip-compressed files are recognised by content.
"""
from __future__ import annotations
import gzip, os, pathlib, zlib
from typing import Union
import numpy as np
from fusegrad.tensor import Tensor
from fusegrad import helpers

# IDX dtype codes (the third byte of the magic number) -> big-endian numpy dtype
IDX_DTYPES: dict[int, np.dtype] = {0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"),
                                   0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}
GZIP_MAGIC = b"\x1f\x8b"

MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
# (images, labels) for the training and the test split, by their canonical (uncompressed) names
MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")

def _describe(source: object) -> str:
    return f"IDX file {str(source)!r}" if isinstance(source, (str, os.PathLike)) else "IDX data"

def read_idx(source: Union[str, os.PathLike, bytes, bytearray, memoryview]) -> np.ndarray:
    """Read an IDX file (a path, or its bytes) into a numpy array of the shape and dtype its header
    gives, in native byte order. gzip-compressed input (``*.gz``) is decompressed first; it is
    recognised by its magic bytes, which an IDX header (starting with two zero bytes) never has.
    Raises ValueError when the data is not a well-formed IDX file, including when its size does not
    match the header (a truncated download, say)."""
    what = _describe(source)
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f: data = f.read()
    elif isinstance(source, (bytes, bytearray, memoryview)): data = bytes(source)
    else: raise TypeError(f"read_idx needs a path or bytes, got {type(source).__name__}")
    if data[:2] == GZIP_MAGIC:
        try: data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise ValueError(f"{what} is gzip-compressed but can't be decompressed (truncated or corrupt?): {e}") from None
    if len(data) < 4:
        raise ValueError(f"{what} is too short for an IDX header: {len(data)} bytes, need at least 4")
    if data[0] != 0 or data[1] != 0:
        raise ValueError(f"{what} doesn't start with an IDX magic number (two zero bytes, a dtype code, the number of "
                         f"dimensions): got bytes {data[:4].hex(' ')}")
    code, ndim = data[2], data[3]
    if code not in IDX_DTYPES:
        raise ValueError(f"{what} has unknown IDX dtype code 0x{code:02x}; known codes: "
                         + ", ".join(f"0x{c:02x} ({d.name})" for c, d in IDX_DTYPES.items()))
    if ndim == 0: raise ValueError(f"{what} declares 0 dimensions")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise ValueError(f"{what} is truncated inside its header: {ndim} dimensions need a {header}-byte header, "
                         f"the data has {len(data)} bytes")
    shape = tuple(int(s) for s in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    dtype = IDX_DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    found = len(data) - header
    if found != expected:
        problem = "truncated" if found < expected else "longer than its header says"
        raise ValueError(f"{what} is {problem}: the header declares shape {shape} of {dtype.name}, that is {expected} bytes "
                         f"after the {header}-byte header, but there are {found}")
    return np.frombuffer(data, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))

def _find_local(directory: pathlib.Path, name: str) -> pathlib.Path:
    """``name`` in ``directory``, plain or gzipped, also in the dotted spelling (train-images.idx3-ubyte)
    that some mirrors use."""
    dotted = name.replace("-idx", ".idx")
    candidates = [name, name + ".gz", dotted, dotted + ".gz"]
    for candidate in candidates:
        if (directory / candidate).is_file(): return directory / candidate
    raise FileNotFoundError(f"no MNIST file {name!r} in {str(directory)!r}: looked for {', '.join(candidates)}")

def _download(base_url: str, name: str, dataset: str, env_var: str) -> pathlib.Path:
    url = base_url + name + ".gz"
    try:
        return helpers.fetch(url, name=f"{dataset}/{name}.gz")
    except OSError as e:   # URLError, HTTPError, timeouts and refused connections are all OSErrors
        raise ConnectionError(
            f"could not download {dataset} file {name}.gz from {url} ({e}). If this machine is offline, get the four IDX "
            f"files ({', '.join(MNIST_FILES)}, plain or .gz) another way, put them in one directory DIR and call "
            f"{'mnist(fashion=True, path=DIR)' if dataset == 'fashion-mnist' else 'mnist(path=DIR)'} or set the environment "
            f"variable {env_var}=DIR. Downloads are cached in {helpers.cache_dir() / 'downloads' / dataset}.") from e

def _check(images: np.ndarray, labels: np.ndarray, split: str, where: str) -> None:
    if images.ndim != 3 or images.shape[1:] != (28, 28) or images.dtype != np.uint8:
        raise ValueError(f"MNIST {split} images in {where} should be uint8 of shape (N, 28, 28), got {images.dtype} {images.shape}")
    if labels.ndim != 1 or labels.dtype != np.uint8:
        raise ValueError(f"MNIST {split} labels in {where} should be uint8 of shape (N,), got {labels.dtype} {labels.shape}")
    if len(images) != len(labels):
        raise ValueError(f"MNIST {split} set in {where} has {len(images)} images but {len(labels)} labels")

def mnist(device: str | None = None, fashion: bool = False, path: Union[str, os.PathLike, None] = None
          ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """MNIST (or Fashion-MNIST with ``fashion=True``) as ``(X_train, Y_train, X_test, Y_test)``.

    X are uint8 tensors of shape (N, 1, 28, 28) holding pixel values 0..255, Y uint8 tensors of shape
    (N,) holding the class 0..9, on ``device`` (the default device when None).

    The IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
    t10k-labels-idx1-ubyte, each plain or gzipped) are read from the directory ``path``, or else from
    the directory in the environment variable ``MNIST_PATH`` (``FASHION_MNIST_PATH`` for Fashion-MNIST).
    With neither, they are downloaded once into fusegrad's cache directory (``helpers.fetch``); when
    that fails (no network) a ConnectionError says where to put the files instead."""
    env_var = "FASHION_MNIST_PATH" if fashion else "MNIST_PATH"
    dataset = "fashion-mnist" if fashion else "mnist"
    origin = "path"
    if path is None and os.environ.get(env_var): path, origin = os.environ[env_var], f"${env_var}"
    if path is not None:
        directory = pathlib.Path(path).expanduser()
        if not directory.is_dir():
            raise FileNotFoundError(f"MNIST directory {str(directory)!r} (from {origin}) doesn't exist")
        files = [_find_local(directory, name) for name in MNIST_FILES]
        where = str(directory)
    else:
        files = [_download(FASHION_MNIST_URL if fashion else MNIST_URL, name, dataset, env_var) for name in MNIST_FILES]
        where = str(files[0].parent)
    arrays = []
    for f in files:
        try: arrays.append(read_idx(f))
        except ValueError as e:
            if path is not None: raise
            raise ValueError(f"{e}; delete the cached download {str(f)!r} to fetch it again") from None
    x_train, y_train, x_test, y_test = arrays
    _check(x_train, y_train, "training", where)
    _check(x_test, y_test, "test", where)
    return (Tensor(x_train[:, None], device=device), Tensor(y_train, device=device),
            Tensor(x_test[:, None], device=device), Tensor(y_test, device=device))
