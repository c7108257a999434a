"""Tensors over existing memory (from_blob) and from URLs (from_url, cached)."""
import gzip
import numpy as np
import pytest
from fusegrad import Tensor, dtypes

def test_from_blob_shares_memory(device):
    # every host-memory device (CPU, LLVM, PYTHON) wraps the array: a later write to it is seen by the kernel
    data = np.arange(6, dtype=np.float32)
    t = Tensor.from_blob(data.ctypes.data, (2, 3), dtype=dtypes.float32, device=device)
    data[0] = 9.0
    np.testing.assert_array_equal((t * 2).numpy(), data.reshape(2, 3) * 2)

def test_from_blob_rejects_null():
    with pytest.raises(ValueError, match="non-null"): Tensor.from_blob(0, (2,))

def test_from_url_reads_and_gunzips(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    from fusegrad import helpers
    helpers.getenv.cache_clear()
    raw = bytes(range(10))
    (tmp_path / "plain.bin").write_bytes(raw)
    (tmp_path / "packed.gz").write_bytes(gzip.compress(raw))
    plain = Tensor.from_url((tmp_path / "plain.bin").as_uri())
    assert plain.dtype == dtypes.uint8 and plain.tolist() == list(raw)
    assert Tensor.from_url((tmp_path / "packed.gz").as_uri(), gunzip=True).tolist() == list(raw)
