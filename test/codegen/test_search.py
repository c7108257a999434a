"""BEAM search: finds opts that compute the right thing, and a second search hits the disk cache."""
import numpy as np
from fusegrad import Tensor, Device, Context
from fusegrad.codegen.opt import Opt
from fusegrad.codegen.opt.search import beam_search

def test_beam_finds_valid_opts_and_caches():
    a = Tensor(np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)).realize()
    b = Tensor(np.random.default_rng(1).standard_normal((32, 32)).astype(np.float32)).realize()
    item = (a @ b).schedule()[-1]
    renderer = Device["CPU"].renderer
    with Context(IGNORE_BEAM_CACHE=1): first = beam_search(item.ast, renderer, 2)
    assert all(isinstance(o, Opt) for o in first)
    second = beam_search(item.ast, renderer, 2)
    assert second == first            # the disk cache returns the same opts
    with Context(BEAM=2): c = (a @ b).numpy()
    np.testing.assert_allclose(c, a.numpy() @ b.numpy(), rtol=1e-4, atol=1e-5)
