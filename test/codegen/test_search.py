"""BEAM search: finds opts that compute the right thing, and a second search hits the disk cache."""
import re
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

def test_search_times_a_shrunk_kernel_and_returns_opts_for_the_real_one():
    from fusegrad.codegen.opt import kernel_axes, apply_opt
    from fusegrad.codegen.opt.search import _shrunk
    a = Tensor(np.random.default_rng(2).standard_normal((1024, 16)).astype(np.float32)).realize()
    b = Tensor(np.random.default_rng(3).standard_normal((16, 64)).astype(np.float32)).realize()
    item = (a @ b).schedule()[-1]
    # the outer loop (1024 rows) becomes 256 rows; the other loops stay
    assert [r.src[0].arg for r in kernel_axes(_shrunk(item.ast))] == [256, 64, 16]
    renderer = Device["CPU"].renderer
    with Context(IGNORE_BEAM_CACHE=1): opts = beam_search(item.ast, renderer, 2)
    ast = item.ast
    for opt in opts: ast = apply_opt(ast, opt, renderer)   # every action applies to the real kernel
    with Context(BEAM=2): c = (a @ b).numpy()
    np.testing.assert_allclose(c, a.numpy() @ b.numpy(), rtol=1e-4, atol=1e-4)
    # a kernel too small to shrink is searched as it is
    small = (a[:100] @ b).schedule()[-1].ast
    assert _shrunk(small) is small

def test_search_shows_a_progress_bar_on_a_terminal_only(monkeypatch, capsys):
    import sys
    from fusegrad.codegen.opt import search
    a = Tensor(np.random.default_rng(4).standard_normal((16, 16)).astype(np.float32)).realize()
    ast = (a @ a).schedule()[-1].ast
    renderer = Device["CPU"].renderer
    monkeypatch.setattr(search, "BEAM_BAR_DELAY", 0.0)
    with Context(IGNORE_BEAM_CACHE=1):
        beam_search(ast, renderer, 2)
        assert capsys.readouterr().err == ""             # stderr isn't a terminal under pytest: silent
        monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
        beam_search(ast, renderer, 2)
    drawn = capsys.readouterr().err.split("\r")
    assert any(re.match(r"BEAM r_16_16_16 best [\d.]+ us: [1-9]\d* kernels \[", line) for line in drawn), drawn[:4]
    assert drawn[-1] == "" and drawn[-2].strip() == ""   # erased when done (no ANSI codes)
