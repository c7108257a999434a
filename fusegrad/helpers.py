"""Small utilities shared by every stage: environment flags, Context, counters, and list helpers.

Flags are read from the environment once (``getenv`` is cached) and can be overridden for a
block with ``Context``::

    with Context(DEBUG=4):
        (Tensor([1, 2]) + 1).realize()     # prints the generated kernel source
"""
from __future__ import annotations
import contextlib, functools, hashlib, os, pathlib, sys, tempfile, time
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

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

def colored(text: str, color: str | None = None, background: bool = False) -> str:
    """Wrap text in an ANSI colour code (``colored("hi", "red")``); no colour when color is None."""
    if color is None: return text
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
VECTORIZE = ContextVar("VECTORIZE", 1)   # 0: keep UPCAST loops scalar on renderers with vector_loops
USE_TC, TC_OPT = ContextVar("TC", 1), ContextVar("TC_OPT", 0)   # TC=0: the heuristic uses no tensor cores
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
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = pathlib.Path(getenv("FUSEGRAD_CACHE", os.path.join(base, "fusegrad")))
    path.mkdir(parents=True, exist_ok=True)
    return path

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
