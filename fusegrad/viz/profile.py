"""PROFILE=1: a Chrome trace (JSON, opens in Perfetto and chrome://tracing) of a run.

Events are "complete" spans (``ph: "X"``, microseconds): Python-side scheduling, code generation and compiles
(the ``python`` track), every kernel launch with its measured duration and every copy (one track per device).
The trace is written at exit to ``PROFILE_PATH`` (default: ``fusegrad_profile.json`` in the temp directory) and
the path printed; ``write_trace(path)`` writes it on demand. When PROFILE is 0 nothing is recorded: callers check
the flag before building an event.

>>> from fusegrad import Context, Tensor
>>> with Context(PROFILE=1): _ = (Tensor([1.0, 2.0]) + 1).realize()
>>> any(e["cat"] == "kernel" for e in chrome_trace()["traceEvents"])
True
"""
from __future__ import annotations
import atexit, contextlib, json, os, tempfile, threading, time
from typing import Any, Iterator
from fusegrad.helpers import PROFILE, getenv

_events: list[dict[str, Any]] = []
_lock = threading.Lock()
_origin = time.perf_counter()
PYTHON_TRACK = "python"

def now() -> float:
    """The profiler clock (seconds, perf_counter)."""
    return time.perf_counter()

def record(name: str, category: str, start: float, duration: float, track: str = PYTHON_TRACK, **args: Any) -> None:
    """Add a span that started at ``start`` (``now()``) and lasted ``duration`` seconds."""
    event = {"name": name, "cat": category, "ph": "X", "ts": (start - _origin) * 1e6, "dur": max(duration, 0.0) * 1e6,
             "pid": 0, "tid": track, "args": args}
    with _lock: _events.append(event)

@contextlib.contextmanager
def span(name: str, category: str, track: str = PYTHON_TRACK, **args: Any) -> Iterator[None]:
    """Record the block as a span when PROFILE is on (``with span("schedule", "schedule"): ...``)."""
    if not PROFILE:
        yield
        return
    start = now()
    try: yield
    finally: record(name, category, start, now() - start, track, **args)

def events() -> list[dict[str, Any]]:
    with _lock: return list(_events)

def clear() -> None:
    with _lock: _events.clear()

def chrome_trace() -> dict[str, Any]:
    """The recorded events in Chrome's trace format; tracks become named threads of one process."""
    recorded = events()
    tracks = list(dict.fromkeys([PYTHON_TRACK] + [e["tid"] for e in recorded]))
    track_ids = {track: i for i, track in enumerate(tracks)}
    metadata = [{"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "fusegrad"}}]
    metadata += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": track_ids[t], "args": {"name": t}} for t in tracks]
    return {"traceEvents": metadata + [{**e, "tid": track_ids[e["tid"]]} for e in recorded], "displayTimeUnit": "ms"}

def trace_path() -> str:
    return getenv("PROFILE_PATH", os.path.join(tempfile.gettempdir(), "fusegrad_profile.json"))

def write_trace(path: str | None = None) -> str:
    """Write the trace JSON to ``path`` (default ``trace_path()``) and return the path."""
    path = path or trace_path()
    with open(path, "w") as f: json.dump(chrome_trace(), f)
    return path

_written_at_exit = False

@atexit.register
def _write_at_exit() -> None:
    global _written_at_exit
    if PROFILE and _events and not _written_at_exit:
        _written_at_exit = True
        path = write_trace()
        print(f"PROFILE: wrote {len(_events)} events to {path} (open it in https://ui.perfetto.dev or the VIZ page)")
