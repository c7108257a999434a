"""Small utilities shared by every stage: environment flags, Context, counters, and list helpers.

Flags are read from the environment once (``getenv`` is cached) and can be overridden for a
block with ``Context``::

    with Context(DEBUG=4):
        (Tensor([1, 2]) + 1).realize()     # prints the generated kernel source
"""
from __future__ import annotations
import collections, contextlib, functools, hashlib, os, pathlib, shutil, sys, tempfile, time
from typing import Any, Callable, Generic, Iterable, Iterator, Sequence, TypeVar

T = TypeVar("T")

# ---------------------------------------------------------------- list and number helpers

def prod(xs: Iterable[Any], start: Any = 1) -> Any:
    """Product of an iterable (works with symbolic sizes too): ``prod([2, 3]) == 6``."""
    result = start
    for x in xs: result = result * x
    return result

def flatten(xss: Iterable[Iterable[T]]) -> list[T]:
    """``flatten([[1, 2], [3]]) == [1, 2, 3]``."""
    return [x for xs in xss for x in xs]

def dedup(xs: Iterable[T]) -> list[T]:
    """Remove duplicates, keeping first-seen order: ``dedup([2, 1, 2]) == [2, 1]``."""
    return list(dict.fromkeys(xs))

def all_same(xs: Sequence[Any]) -> bool:
    """True when every item equals the first (and for an empty list)."""
    return all(x == xs[0] for x in xs)

def all_int(xs: Iterable[Any]) -> bool:
    return all(isinstance(x, int) for x in xs)

def argsort(xs: Sequence[Any]) -> list[int]:
    return sorted(range(len(xs)), key=xs.__getitem__)

def argfix(*xs: Any) -> tuple:
    """Accept both ``f(1, 2)`` and ``f((1, 2))`` style arguments."""
    if xs and isinstance(xs[0], (tuple, list)):
        if len(xs) != 1: raise ValueError(f"bad argument: {xs}")
        return tuple(xs[0])
    return tuple(xs)

def round_up(n: int, amount: int) -> int:
    return -(-n // amount) * amount

def ceildiv(a: Any, b: Any) -> Any:
    return -(-a // b)

def merge_dicts(ds: Iterable[dict]) -> dict:
    merged: dict = {}
    for d in ds:
        for k, v in d.items():
            if k in merged and merged[k] != v: raise ValueError(f"cannot merge, {k} has {v} != {merged[k]}")
            merged[k] = v
    return merged

def to_function_name(name: str) -> str:
    """Make a string a valid C identifier (kernel names contain colour codes at DEBUG)."""
    import re
    plain = re.sub(r"\x1b\[[0-9;]*m", "", name)
    return "".join(c if c.isalnum() or c == "_" else f"{ord(c):02X}" for c in plain)

def color_enabled() -> bool:
    """Whether output gets ANSI colours: not when NO_COLOR is set (no-color.org) or stdout isn't a terminal
    (a pipe, a log file); FORCE_COLOR=1 turns them on regardless."""
    if os.environ.get("NO_COLOR", ""): return False
    if os.environ.get("FORCE_COLOR", ""): return True
    return sys.stdout.isatty()

def colored(text: str, color: str | None = None, background: bool = False) -> str:
    """Wrap text in an ANSI colour code (``colored("hi", "red")``); plain text when color is None or colours are
    off (``color_enabled()``: NO_COLOR set, or stdout not a terminal)."""
    if color is None or not color_enabled(): return text
    names = ["black", "red", "green", "yellow", "blue", "magenta", "cyan", "white"]
    bright = color.upper() == color
    code = 10 * background + 60 * bright + 30 + names.index(color.lower())
    return f"\u001b[{code}m{text}\u001b[0m"

def ansistrip(text: str) -> str:
    import re
    return re.sub(r"\x1b\[[0-9;]*m", "", text)

def ansilen(text: str) -> int:
    return len(ansistrip(text))

def strip_parens(text: str) -> str:
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for i, c in enumerate(text):
            depth += {"(": 1, ")": -1}.get(c, 0)
            if depth == 0 and i != len(text) - 1: return text
        return text[1:-1]
    return text

# ---------------------------------------------------------------- environment flags

@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
    """Read an environment variable, converted to the type of ``default``: ``getenv("DEBUG", 0)``."""
    value = os.environ.get(key)
    if value is None: return default
    return type(default)(value)

def cpu_count() -> int:
    """The CPU threads a kernel runs on (OpenMP on the CPU device, the LLVM runtime's pool): THREADS, else the
    CPUs this process may use."""
    return max(1, getenv("THREADS", len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))

class ContextVar:
    """A named flag whose value comes from the environment and can be changed by ``Context``."""
    registry: dict[str, "ContextVar"] = {}
    def __init__(self, key: str, default: Any):
        self.key, self.value = key, getenv(key, default)
        ContextVar.registry[key] = self
    def __bool__(self) -> bool: return bool(self.value)
    def __int__(self) -> int: return int(self.value)
    def __ge__(self, other: Any) -> bool: return self.value >= other
    def __gt__(self, other: Any) -> bool: return self.value > other
    def __le__(self, other: Any) -> bool: return self.value <= other
    def __lt__(self, other: Any) -> bool: return self.value < other
    def __eq__(self, other: Any) -> bool: return self.value == other  # type: ignore[override]
    def __hash__(self) -> int: return hash(self.key)
    def __repr__(self) -> str: return f"ContextVar({self.key}={self.value})"

class Context(contextlib.ContextDecorator):
    """Temporarily set flags: ``with Context(DEBUG=2, BEAM=0): ...``. Unknown keys are an error."""
    def __init__(self, **kwargs: Any):
        unknown = [k for k in kwargs if k not in ContextVar.registry]
        if unknown: raise KeyError(f"unknown Context key(s) {unknown}; known keys: {sorted(ContextVar.registry)}")
        self.kwargs = kwargs
    def __enter__(self) -> "Context":
        self.saved = {k: ContextVar.registry[k].value for k in self.kwargs}
        for k, v in self.kwargs.items(): ContextVar.registry[k].value = v
        return self
    def __exit__(self, *exc: Any) -> None:
        for k, v in self.saved.items(): ContextVar.registry[k].value = v

DEBUG, BEAM, NOOPT, JIT = ContextVar("DEBUG", 0), ContextVar("BEAM", 0), ContextVar("NOOPT", 0), ContextVar("JIT", 1)
IGNORE_BEAM_CACHE, IMAGE, WINO = ContextVar("IGNORE_BEAM_CACHE", 0), ContextVar("IMAGE", 0), ContextVar("WINO", 0)
TRAINING, CAPTURING = ContextVar("TRAINING", 0), ContextVar("CAPTURING", 1)
CHECK_OOB, TRANSCENDENTAL, CACHELEVEL = ContextVar("CHECK_OOB", 0), ContextVar("TRANSCENDENTAL", 1), ContextVar("CACHELEVEL", 2)
RING, ALLREDUCE_CAST, ALL2ALL = ContextVar("RING", 1), ContextVar("ALLREDUCE_CAST", 1), ContextVar("ALL2ALL", 0)
DEFAULT_FLOAT, DEFAULT_INT = ContextVar("DEFAULT_FLOAT", ""), ContextVar("DEFAULT_INT", "")
NO_MEMORY_PLANNER, VIZ = ContextVar("NO_MEMORY_PLANNER", 0), ContextVar("VIZ", 0)
PROFILE = ContextVar("PROFILE", 0)   # 1: write a Chrome/Perfetto trace of the run at exit (fusegrad/viz/profile.py)
VECTORIZE = ContextVar("VECTORIZE", 1)   # 0: keep UPCAST loops scalar on renderers with vector_loops
USE_TC, TC_OPT = ContextVar("TC", 1), ContextVar("TC_OPT", 0)   # TC=0: the heuristic uses no tensor cores
SPLIT_REDUCEOP, LRU = ContextVar("SPLIT_REDUCEOP", 1), ContextVar("LRU", 1)

# Every other key tinygrad 0.14's Context accepts, so code that sets them runs unchanged. They are
# read by nothing in fusegrad: each is listed with why (docs/api_fidelity.md shows the same table).
CONTEXT_KEYS_WITHOUT_EFFECT: dict[str, str] = {
    "DEV": "the default device comes from the DEV environment variable when fusegrad starts",
    "FLOAT16": "tinygrad's image-model half switch; fusegrad has no image kernels",
    "OPENPILOT_HACKS": "openpilot-specific kernel tweaks",
    "JIT_BATCH_SIZE": "TinyJit replays a capture as one call (CPUGraph) with no batching",
    "TRACEMETA": "fusegrad records no per-op source metadata",
    "NO_COLOR": "the NO_COLOR environment variable is read when printing (helpers.color_enabled), not this key",
    "TC_SELECT": "the CPU declares one tensor core, there is nothing to select",
    "NOLOCALS": "NOLOCALS is an action (OptOps.NOLOCALS) chosen per kernel, not a global switch",
    "VALIDATE_WITH_CPU": "no second device is run to cross-check results",
    "DISABLE_FAST_IDIV": "integer division isn't rewritten to multiply-shift",
    "FUSE_OPTIM": "the optimizers' per-param updates already realize together in one schedule",
    "ALLOW_DEVICE_USAGE": "tinygrad's guard for @function tracing; fusegrad.function runs eagerly",
    "MAX_BUFFER_SIZE": "buffers aren't split by size",
    "MAX_KERNEL_BUFFERS": "kernels aren't split by buffer count",
    "EMULATED_DTYPES": "emulation is decided by the renderer (bfloat16/fp8 without native support)",
    "CAPTURE_PROCESS_REPLAY": "tinygrad's CI regression capture",
    "NUM_CPU_THREADS": "the CPU's OpenMP thread count comes from the THREADS environment variable",
    "NULL_ALLOW_COPYOUT": "there is no NULL device",
    "PARALLEL": "BEAM's compile parallelism comes from BEAM_PARALLEL",
    "SPEC": "UOp spec checks aren't switchable",
    "PCONTIG": "tinygrad's partial-contiguous scheduling experiment",
    "DEBUG_RANGEIFY": "tinygrad's rangeify debug printing",
    "TUPLE_ORDER": "tinygrad's kernel-tuple ordering switch",
    "CCACHE": "compiled kernels are cached on disk by content hash (DISABLE_COMPILER_CACHE turns it off)",
    "ALLOW_TF32": "no GPU backend has TF32",
    "SCACHE": "the schedule cache is always on",
    "USE_ATOMICS": "no kernel uses atomics",
    "DISALLOW_BROADCAST": "tinygrad's broadcast-debugging switch",
    "TRACK_MATCH_STATS": "pattern-matcher statistics aren't collected",
    "REWRITE_STACK_LIMIT": "graph_rewrite isn't bounded by a stack limit",
}
# tinygrad's defaults for these keys (a value set here is only stored, see above)
_CONTEXT_DEFAULTS: dict[str, Any] = {"DEV": "", "JIT_BATCH_SIZE": 32, "TRACEMETA": 1, "TC_SELECT": -1, "DISABLE_FAST_IDIV": 1,
                                     "ALLOW_DEVICE_USAGE": 1, "EMULATED_DTYPES": "", "NUM_CPU_THREADS": os.cpu_count() or 1,
                                     "PARALLEL": os.cpu_count() or 1, "SPEC": 1, "TUPLE_ORDER": 1, "CCACHE": 1, "SCACHE": 1,
                                     "REWRITE_STACK_LIMIT": 250000}
for _key in CONTEXT_KEYS_WITHOUT_EFFECT:
    # module-level names too, as in tinygrad (``from fusegrad.helpers import FUSE_OPTIM``)
    if _key not in ContextVar.registry: globals()[_key] = ContextVar(_key, _CONTEXT_DEFAULTS.get(_key, 0))
del _key
CI = bool(getenv("CI", ""))
OSX = sys.platform == "darwin"

# ---------------------------------------------------------------- counters and timing

class GlobalCounters:
    """Process-wide counters updated by every kernel run. ``GlobalCounters.reset()`` zeroes them.

    >>> GlobalCounters.reset(); (Tensor([1.0]) + 1).realize(); GlobalCounters.kernel_count
    1
    """
    global_ops: int = 0
    global_mem: int = 0
    time_sum_s: float = 0.0
    kernel_count: int = 0
    mem_used: int = 0        # bytes currently allocated on devices
    # the same per device name ("CPU", "CPU:1", ...); like mem_used, reset() leaves it alone
    mem_used_per_device: collections.defaultdict[str, int] = collections.defaultdict(int)
    mem_high_water: int = 0  # the most mem_used has been since the last reset
    @staticmethod
    def reset() -> None:
        GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s = 0, 0, 0.0
        GlobalCounters.kernel_count = 0
        GlobalCounters.mem_high_water = GlobalCounters.mem_used

class Timing(contextlib.ContextDecorator):
    """Print how long a block took: ``with Timing("matmul "): ...``."""
    def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True):
        self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled
    def __enter__(self) -> "Timing":
        self.start = time.perf_counter_ns()
        return self
    def __exit__(self, *exc: Any) -> None:
        self.elapsed_ns = time.perf_counter_ns() - self.start
        if self.enabled:
            print(f"{self.prefix}{self.elapsed_ns*1e-6:6.2f} ms" + (self.on_exit(self.elapsed_ns) if self.on_exit else ""))

# ---------------------------------------------------------------- caches on disk

def cache_dir() -> pathlib.Path:
    """The cache folder (FUSEGRAD_CACHE, else $XDG_CACHE_HOME/fusegrad or ~/.cache/fusegrad), created if missing.
    Raises OSError where it can't be (the path is a file, no permission): the caches go through
    ``usable_cache_dir``, which runs without them instead."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = pathlib.Path(getenv("FUSEGRAD_CACHE", os.path.join(base, "fusegrad")))
    path.mkdir(parents=True, exist_ok=True)
    return path

_unusable_cache_warned = False

def usable_cache_dir(*parts: str) -> pathlib.Path | None:
    """``cache_dir() / parts``, created and writable; None where it can't be (a cache path that is a file, a
    read-only or foreign location): the caller runs without the cache. One RuntimeWarning per process says so."""
    global _unusable_cache_warned
    try:
        path = cache_dir().joinpath(*parts)
        path.mkdir(parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK): raise PermissionError(f"{path} isn't writable")
        return path
    except (OSError, ValueError) as error:
        if not _unusable_cache_warned:
            import warnings
            warnings.warn(f"the fusegrad cache folder can't be used ({type(error).__name__}: {error}); running without "
                          f"the disk cache (kernels are compiled in every process)", RuntimeWarning, stacklevel=2)
            _unusable_cache_warned = True
        return None

def content_hash(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts: digest.update(part.encode() if isinstance(part, str) else part)
    return digest.hexdigest()

def atomic_write(path: pathlib.Path, data: bytes) -> None:
    """Write a file so that a concurrent reader sees either nothing or the whole file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp")
    with os.fdopen(fd, "wb") as f: f.write(data)
    os.replace(tmp, path)

def fetch(url: str, name: str | None = None) -> pathlib.Path:
    """Download ``url`` once into the cache directory and return the local path."""
    import urllib.request
    path = cache_dir() / "downloads" / (name or content_hash(url))
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with urllib.request.urlopen(url, timeout=30) as response: atomic_write(path, response.read())
    return path

def unwrap(x: T | None) -> T:
    assert x is not None
    return x

def partition(xs: Iterable[T], predicate: Callable[[T], bool]) -> tuple[list[T], list[T]]:
    yes: list[T] = []
    no: list[T] = []
    for x in xs: (yes if predicate(x) else no).append(x)
    return yes, no

def pairwise(xs: Sequence[T]) -> Iterator[tuple[T, T]]:
    return zip(xs, xs[1:])

# ---------------------------------------------------------------- progress bars

class tqdm(Generic[T]):
    """A progress bar on stderr with tinygrad's (and the tqdm package's common) arguments, so
    ``for x in tqdm(items, desc="train"): ...`` works without the tqdm package.

    - ``disable=None`` shows it only when stderr is a terminal (so it is silent in pipes, logs and under pytest);
      ``rate`` caps the redraws per second.
    - On a terminal the bar is redrawn in place with a carriage return; elsewhere (``disable=False`` into a pipe)
      it prints a plain line at most every ``PLAIN_INTERVAL`` seconds and at the end. It never writes ANSI
      escape codes.
    - ``delay``: nothing is drawn until that many seconds have passed (a quick loop prints nothing).
    - ``leave=False`` erases the bar when it closes.
    - ETA and speed leave out the first ``warmup`` steps: those compile kernels or capture a JIT and take far
      longer than the rest, so counting them would show an ETA of an hour in the first seconds.

    >>> sum(tqdm(range(3), disable=True))
    3
    """
    PLAIN_INTERVAL = 10.0
    _drawn_width = 0   # the width of the last bar drawn on the terminal (write() blanks it)
    def __init__(self, iterable: Iterable[T] | None = None, desc: str = "", disable: bool | None = False, unit: str = "it",
                 unit_scale: bool = False, total: int | None = None, rate: int = 100, delay: float = 0.0, leave: bool = True,
                 warmup: int = 1):
        self.iterable, self.unit, self.unit_scale, self.rate = iterable, unit, unit_scale, rate
        self.delay, self.leave, self.warmup = delay, leave, max(warmup, 0)
        self.terminal = sys.stderr.isatty()
        self.disable = (not self.terminal) if disable is None else disable
        self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else 0)  # type: ignore[arg-type]
        self.n, self.steps, self.drawn_n, self.start, self.shown, self.closed = 0, 0, 0, time.perf_counter(), False, False
        self.last_draw = 0.0 if self.terminal else self.start   # a plain line only after PLAIN_INTERVAL (or at the end)
        self.rate_base: tuple[float, int] | None = (self.start, 0) if self.warmup == 0 else None   # (time, n) after the warm-up
        self.set_description(desc)
    def __iter__(self) -> Iterator[T]:
        if self.iterable is None: raise TypeError("tqdm needs an iterable to iterate over")
        for item in self.iterable:
            yield item
            self.update(1)
        self.update(close=True)
    def __enter__(self) -> "tqdm[T]": return self
    def __exit__(self, *exc: Any) -> None: self.update(close=True)
    def set_description(self, desc: str) -> None:
        """Label the bar (``"desc: "`` in front of it)."""
        self.desc = f"{desc}: " if desc else ""
    def close(self) -> None:
        """Draw the final state (or erase the bar, with ``leave=False``); later updates draw nothing."""
        self.update(close=True)
    def update(self, n: int = 0, close: bool = False) -> None:
        """Count ``n`` more units (one step); redraw at most ``rate`` times a second, and on close."""
        now = time.perf_counter()
        if n:
            self.n, self.steps = self.n + n, self.steps + 1
            if self.steps == self.warmup: self.rate_base = (now, self.n)
        if self.disable or self.closed: return
        if close: self.closed = True
        if now - self.start < self.delay and not self.shown: return   # (a loop that ends within the delay prints nothing)
        interval = 1 / self.rate if self.terminal else self.PLAIN_INTERVAL
        if not close and now - self.last_draw < interval: return
        if self.terminal: self._draw_in_place(self._line(now, shutil.get_terminal_size().columns - 1), close)
        elif (not close or self.leave) and not (close and self.shown and self.n == self.drawn_n):   # no repeated last line
            print(self._line(now), file=sys.stderr, flush=True)
        self.last_draw, self.drawn_n, self.shown = now, self.n, True
    def _draw_in_place(self, line: str, close: bool) -> None:
        # blanks pad the line over a longer previous one (no ANSI "erase line" code: NO_COLOR terminals get none)
        if close and not self.leave: text, end = " " * tqdm._drawn_width + "\r", ""
        else: text, end = line.ljust(tqdm._drawn_width), "\n" if close else ""
        print("\r" + text, end=end, flush=True, file=sys.stderr)
        tqdm._drawn_width = 0 if close else len(line)
    def _line(self, now: float, width: int | None = None) -> str:
        """The bar's text; within ``width`` columns the bar itself shrinks first (to 5 cells), then the description."""
        elapsed = now - self.start
        def amount(x: float) -> str:
            if not self.unit_scale: return str(int(x))
            for prefix in ("", "k", "M", "G", "T"):
                if abs(x) < 1000: return f"{x:.3g}{prefix}"
                x /= 1000
            return f"{x:.3g}P"
        count = f"{amount(self.n)}/{amount(self.total)}" if self.total else f"{amount(self.n)}{self.unit}"
        speed = self.speed(now)
        speed_text = f"{amount(speed) if self.unit_scale else f'{speed:.2f}'}{self.unit}/s" if speed is not None else f"?{self.unit}/s"
        eta, cells = "", 20
        if self.total: eta = "<" + (_minutes(max(self.total - self.n, 0) / speed) if speed else "?")
        suffix = f"{count} [{_minutes(elapsed)}{eta}, {speed_text}]"
        if self.total and width is not None: cells = max(5, min(20, width - len(self.desc) - len(suffix) - 7))
        bar = ""
        if self.total:
            fraction = min(self.n / self.total, 1.0)
            bar = f"{100 * fraction:3.0f}%|{'#' * int(cells * fraction):<{cells}}| "
        line = f"{self.desc}{bar}{suffix}"
        if width is not None and len(line) > width:   # still too wide: cut the description
            line = f"{self.desc[:max(width - len(bar) - len(suffix) - 5, 0)]}...: {bar}{suffix}"[:width]
        return line
    def speed(self, now: float | None = None) -> float | None:
        """Units per second over the steps after the warm-up, or None before two such points in time exist."""
        if self.rate_base is None: return None
        base_time, base_n = self.rate_base
        elapsed = (time.perf_counter() if now is None else now) - base_time
        return (self.n - base_n) / elapsed if self.n > base_n and elapsed > 0 else None
    @classmethod
    def write(cls, text: str) -> None:
        """Print a line above the bar (the bar is redrawn below it on its next update)."""
        if sys.stderr.isatty(): text = "\r" + text.ljust(cls._drawn_width)
        cls._drawn_width = 0
        print(text, flush=True, file=sys.stderr)

def _minutes(seconds: float) -> str:
    """``"01:05"`` (or ``"2:01:05"`` past an hour), as tqdm writes elapsed and remaining time."""
    seconds = int(seconds)
    hours, minutes = divmod(seconds // 60, 60)
    return (f"{hours}:" if hours else "") + f"{minutes:02d}:{seconds % 60:02d}"

def trange(n: int, **kwargs: Any) -> tqdm[int]:
    """``tqdm(range(n))``."""
    return tqdm(range(n), total=n, **kwargs)

# ---------------------------------------------------------------- small helpers tinygrad code imports

START_TIME = time.perf_counter()
BASEDIR = pathlib.Path(__file__).parent
WIN = sys.platform == "win32"

def make_tuple(x: int | Sequence[int], count: int) -> tuple:
    """``make_tuple(3, 2) == (3, 3)``; a sequence is returned as a tuple."""
    return (x,) * count if isinstance(x, int) else tuple(x)

def to_tuple(x: Any) -> tuple:
    """``x`` if it is a tuple, else ``(x,)``."""
    return x if isinstance(x, tuple) else (x,)

def fully_flatten(xs: Any) -> list:
    """Flatten nested lists/tuples (and numpy arrays) to one list of scalars."""
    if hasattr(xs, "shape") and hasattr(xs, "flatten"): return list(xs.flatten()) if xs.shape != () else [xs[()]]
    if not isinstance(xs, (list, tuple)): return [xs]
    return [y for x in xs for y in fully_flatten(x)]

def get_shape(x: Any) -> tuple[int, ...]:
    """The shape of a nested list: ``get_shape([[1, 2, 3]]) == (1, 3)``; ragged lists are an error."""
    if not isinstance(x, (list, tuple)): return ()
    shapes = [get_shape(e) for e in x]
    if not all_same(shapes): raise ValueError(f"inhomogeneous shape: {shapes}")
    return (len(x),) + (shapes[0] if shapes else ())

def flat_to_grouped(padding: Sequence[T]) -> tuple[tuple[T, T], ...]:
    """torch-style flat padding (last dim first) to per-dim pairs: ``(1, 2, 3, 4) -> ((3, 4), (1, 2))``."""
    return tuple((padding[i], padding[i + 1]) for i in range(len(padding) - 2, -1, -2))

def round_down(n: int, amount: int) -> int: return n // amount * amount
def next_power2(x: int) -> int:
    """The smallest power of two >= x (1 for 0)."""
    return 1 if x <= 1 else 1 << (x - 1).bit_length()
def cdiv(x: int, y: int) -> int:
    """C division (truncates toward zero); 0 when y is 0, as in the kernels."""
    if y == 0: return 0
    quotient = abs(x) // abs(y)
    return -quotient if (x < 0) != (y < 0) else quotient
def cmod(x: int, y: int) -> int: return x - cdiv(x, y) * y
def floordiv(x: int, y: int) -> int: return x // y if y != 0 else 0
def floormod(x: int, y: int) -> int: return x - floordiv(x, y) * y
def lo32(x: Any) -> Any: return x & 0xFFFFFFFF
def hi32(x: Any) -> Any: return x >> 32
def data64(x: Any) -> tuple[Any, Any]: return (hi32(x), lo32(x))
def data64_le(x: Any) -> tuple[Any, Any]: return (lo32(x), hi32(x))
def to_be32(x: int) -> int: return int.from_bytes((x & 0xFFFFFFFF).to_bytes(4, "little"), "big")
def to_be64(x: int) -> int: return int.from_bytes((x & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little"), "big")
def getbits(value: int, start: int, end: int) -> int:
    """Bits ``start..end`` (inclusive) of ``value``."""
    return (value >> start) & ((1 << (end - start + 1)) - 1)
def i2u(bits: int, value: int) -> int:
    """A negative ``bits``-wide integer as its unsigned two's complement value."""
    return value if value >= 0 else value + (1 << bits)
def pad_bytes(data: bytes, align: int) -> bytes: return data + b"\x00" * (-len(data) % align)

def get_single_element(xs: Sequence[T]) -> T:
    if len(xs) != 1: raise ValueError(f"expected exactly one element, got {len(xs)}: {xs}")
    return xs[0]

def get_child(obj: Any, key: str) -> Any:
    """Follow a dotted path through attributes, list indexes and dict keys: ``get_child(model, "layers.0.weight")``."""
    for part in key.split("."):
        if isinstance(obj, dict): obj = obj[part]
        elif part.isdigit() and isinstance(obj, (list, tuple)): obj = obj[int(part)]
        else: obj = getattr(obj, part)
    return obj

def strides_for_shape(shape: Sequence[Any]) -> tuple:
    """Row-major strides, 0 for size-1 dims: ``strides_for_shape((2, 1, 3)) == (3, 0, 1)``."""
    strides, running = [], 1
    for size in reversed(shape):
        strides.append(running)
        running = running * size
    return canonicalize_strides(tuple(shape), tuple(reversed(strides)))

def canonicalize_strides(shape: tuple, strides: tuple) -> tuple:
    """Strides of size-1 dims don't matter: make them 0."""
    return tuple(0 if size == 1 else stride for size, stride in zip(shape, strides))

def pluralize(word: str, count: int) -> str: return f"{count} {word}" + ("" if count == 1 else "s")
def polyN(x: Any, coefficients: Sequence[float]) -> Any:
    """Horner evaluation, highest power first: ``polyN(x, [a, b, c]) == a*x*x + b*x + c``."""
    result: Any = 0.0
    for c in coefficients: result = result * x + c
    return result

def word_wrap(text: str, wrap: int = 80) -> str:
    """Break each line of ``text`` every ``wrap`` visible characters (colour codes don't count)."""
    lines = []
    for line in text.split("\n"):
        while ansilen(line) > wrap:
            cut, seen = 0, 0
            while seen < wrap:
                match = __import__("re").match(r"\x1b\[[0-9;]*m", line[cut:])
                if match: cut += len(match.group(0))
                else: cut, seen = cut + 1, seen + 1
            lines.append(line[:cut])
            line = line[cut:]
        lines.append(line)
    return "\n".join(lines)

def ansipad(text: str, width: int) -> str: return text + " " * max(width - ansilen(text), 0)
def time_to_str(seconds: float, width: int = 8) -> str:
    """``"  1.50ms"``-style: seconds above 10 s, milliseconds above 10 ms, else microseconds."""
    if seconds > 10: return f"{seconds:{width}.2f}s "
    if seconds > 10e-3: return f"{seconds * 1e3:{width}.2f}ms"
    return f"{seconds * 1e6:{width}.2f}us"
def size_to_str(size: int) -> str:
    for unit, name in ((1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "KB")):
        if size >= unit: return f"{size / unit:.2f} {name}"
    return f"{size} B"
def colorize_float(x: float) -> str:
    """A speed ratio coloured green (faster, < 0.75), red (slower, > 1.15) or yellow."""
    return colored(f"{x:7.2f}x", "green" if x < 0.75 else "red" if x > 1.15 else "yellow")
def perf_counter_us() -> float: return time.perf_counter_ns() / 1000

class disable_gc(contextlib.ContextDecorator):
    """Turn the garbage collector off inside a block (restored on exit, nesting-safe)."""
    def _recreate_cm(self) -> "disable_gc": return type(self)()
    def __enter__(self) -> None:
        import gc
        self.was_enabled = gc.isenabled()
        gc.disable()
    def __exit__(self, *exc: Any) -> None:
        import gc
        if self.was_enabled: gc.enable()
