"""fusegrad.helpers: Context keys (tinygrad 0.14's set), the progress bar, and fusegrad.function."""
import json, pathlib, re
import numpy as np
import pytest
from fusegrad import Tensor, Context, function
from fusegrad import helpers
from fusegrad.helpers import ContextVar, CONTEXT_KEYS_WITHOUT_EFFECT, tqdm, trange

FIXTURE = json.loads((pathlib.Path(__file__).parent / "fixtures" / "tinygrad_0_14_names.json").read_text())
DOCS = (pathlib.Path(__file__).parent.parent / "docs" / "api_fidelity.md").read_text()

@pytest.mark.parametrize("key", FIXTURE["context_keys"])
def test_context_accepts_every_tinygrad_key(key):
    before = ContextVar.registry[key].value
    with Context(**{key: before}): assert ContextVar.registry[key].value == before
    assert ContextVar.registry[key].value == before

def test_context_sets_and_restores():
    with Context(FUSE_OPTIM=1, DEBUG=0):
        assert helpers.FUSE_OPTIM.value == 1
    assert helpers.FUSE_OPTIM.value == 0

def test_unknown_context_key_names_it():
    with pytest.raises(KeyError, match="NOT_A_FLAG"): Context(NOT_A_FLAG=1)

def test_keys_without_effect_are_documented():
    assert set(CONTEXT_KEYS_WITHOUT_EFFECT) <= set(FIXTURE["context_keys"])
    undocumented = [k for k in CONTEXT_KEYS_WITHOUT_EFFECT if not re.search(rf"\|\s*`{k}`\s*\|", DOCS)]
    assert not undocumented, f"docs/api_fidelity.md lacks rows for {undocumented}"

def test_split_reduceop_key_has_an_effect():
    x = Tensor.ones(1 << 16).contiguous().realize()
    from fusegrad.helpers import GlobalCounters
    counts = []
    for split in (1, 0):
        with Context(SPLIT_REDUCEOP=split):
            GlobalCounters.reset()
            assert x.sum().item() == 1 << 16
            counts.append(GlobalCounters.kernel_count)
    assert counts[0] == 2 and counts[1] == 1   # split in two kernels, or one

def test_trange_and_tqdm(capsys):
    assert sum(trange(5, desc="steps")) == sum(range(5))
    assert "steps" in capsys.readouterr().err
    assert list(tqdm(["a", "b"], disable=True)) == ["a", "b"]
    assert capsys.readouterr().err == ""
    with tqdm(total=3, disable=True) as bar: bar.update(3)
    assert bar.n == 3
    with pytest.raises(TypeError, match="iterable"): list(tqdm())

class _FakeClock:
    """A perf_counter the test moves by hand (so ETA checks don't depend on how fast the machine is)."""
    def __init__(self): self.now = 100.0
    def perf_counter(self) -> float: return self.now

def _bar_with_clock(monkeypatch, **kwargs) -> tuple[tqdm, _FakeClock]:
    import types
    clock = _FakeClock()
    monkeypatch.setattr(helpers, "time", types.SimpleNamespace(perf_counter=clock.perf_counter))
    return tqdm(disable=True, **kwargs), clock

def test_eta_leaves_out_the_slow_first_step(monkeypatch):
    bar, clock = _bar_with_clock(monkeypatch, total=100)
    clock.now += 3600; bar.update(1)            # the first step compiles for an hour
    assert "<?" in bar._line(clock.now)         # no rate yet: no ETA rather than a wrong one
    for _ in range(10): clock.now += 0.5; bar.update(1)
    assert bar.speed(clock.now) == pytest.approx(2.0)
    assert "<00:44" in bar._line(clock.now)     # 89 steps left at 2 steps/s, not 89 hours
    assert "2.00it/s" in bar._line(clock.now)

def test_warmup_steps_are_left_out_of_the_rate(monkeypatch):
    bar, clock = _bar_with_clock(monkeypatch, total=10, warmup=2)
    clock.now += 5; bar.update(1)
    clock.now += 5; bar.update(1)               # compile, then JIT capture
    assert bar.speed(clock.now) is None
    clock.now += 1; bar.update(1)
    assert bar.speed(clock.now) == pytest.approx(1.0) and "<00:07" in bar._line(clock.now)

def test_bar_in_a_pipe_is_plain_lines(capsys):
    # pytest's stderr is not a terminal: disable=None hides the bar, an explicit disable=False prints plain lines
    assert not __import__("sys").stderr.isatty()
    list(tqdm(range(5), desc="hidden", disable=None))
    assert capsys.readouterr().err == ""
    list(tqdm(range(5), desc="shown", disable=False))
    err = capsys.readouterr().err
    assert err == "shown: 100%|####################| 5/5 [00:00<00:00, " + err.split(", ", 1)[1]
    assert "\r" not in err and "\x1b" not in err and err.count("\n") == 1   # one final line, no control codes
    list(tqdm(range(5), disable=False, leave=False))
    assert capsys.readouterr().err == ""          # leave=False: nothing left behind

def test_bar_on_a_terminal_redraws_in_place_without_ansi(monkeypatch, capsys):
    monkeypatch.setattr(helpers.sys.stderr, "isatty", lambda: True)
    list(tqdm(range(3), desc="tty", rate=10**9))
    err = capsys.readouterr().err
    assert err.count("\r") >= 3 and err.endswith("\n") and "\x1b" not in err
    assert err.rstrip().rsplit("\r", 1)[-1].startswith("tty: 100%|")
    list(tqdm(range(3), desc="gone", leave=False, rate=10**9))
    last = capsys.readouterr().err.rsplit("\r", 2)[-2]
    assert last.strip() == ""                     # erased with blanks, not an escape code
    list(tqdm(range(3), desc="late", delay=3600))
    assert capsys.readouterr().err == ""          # finished within the delay: nothing drawn
    tqdm.write("a message")
    assert capsys.readouterr().err.strip() == "a message"

def test_bar_fits_the_terminal_width(monkeypatch):
    bar, clock = _bar_with_clock(monkeypatch, total=40, desc="step    0  loss 2.3028")
    for _ in range(13): clock.now += 1; bar.update(1)
    assert len(bar._line(clock.now)) > 60
    narrow = bar._line(clock.now, 60)
    assert len(narrow) <= 60 and narrow.endswith("13/40 [00:13<00:27, 1.00it/s]")   # the bar shrinks, the numbers stay
    assert len(bar._line(clock.now, 45)) <= 45

def test_function_decorator():
    @function
    def affine(x, y): return x * 2 + y
    a, b = np.array([1.0, 2.0], np.float32), np.array([3.0, 4.0], np.float32)
    np.testing.assert_equal(affine(Tensor(a), Tensor(b)).numpy(), a * 2 + b)
    w = Tensor([1.0, 2.0]).realize()
    @function
    def implicit(x): return x * w
    with pytest.raises(RuntimeError, match="implicit"): implicit(Tensor(a))
    np.testing.assert_equal(function(allow_implicit=True)(lambda x: x * w)(Tensor(a)).numpy(), a * np.array([1.0, 2.0], np.float32))
    with pytest.raises(RuntimeError, match="Tensor"): function(lambda x: 3)(Tensor(a))
    pair = function(lambda x: (x + 1, x * 2))(Tensor(a))
    np.testing.assert_equal([t.numpy() for t in pair], [a + 1, a * 2])
