"""Runnable programs: ``python -m fusegrad.examples.NAME``.

Shared command-line plumbing: ``parser()`` makes an argparse parser whose ``--help`` shows every
flag's default, and ``run()`` turns the failures a user can fix (missing data, a missing package,
a missing file) into one clear line on stderr instead of a traceback.
"""
from __future__ import annotations
import argparse, sys, urllib.error
from typing import Any, Callable

class ExampleError(Exception):
    """A failure the user can fix (bad arguments, missing input): printed as one line, no traceback."""

def parser(description: str) -> argparse.ArgumentParser:
    """An ArgumentParser whose help lists each flag's default (every flag needs a ``help=``)."""
    return argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)

def expected_failure_message(error: BaseException) -> str | None:
    """The one-line message for an error a user can fix, or None for a real bug (shown as a traceback)."""
    if isinstance(error, ModuleNotFoundError):
        return f"the package {error.name!r} is needed here: pip install -e '.[examples]' (or the example's own extra, README)" if error.name else str(error)
    if isinstance(error, FileNotFoundError):
        return f"file not found: {error.filename}" if error.filename else str(error)
    if isinstance(error, urllib.error.URLError):
        return f"could not download the data ({error.reason}); pass a local copy instead (see --help)"
    if isinstance(error, ExampleError): return str(error)
    return None

def run(main: Callable[[], Any], prog: str | None = None) -> None:
    """Call ``main()``; an expected failure exits with status 1 and one line ``PROG: error: ...``."""
    try: main()
    except (ImportError, OSError, ExampleError) as error:
        message = expected_failure_message(error)
        if message is None: raise
        print(f"{prog or sys.argv[0]}: error: {message}", file=sys.stderr)
        raise SystemExit(1) from None

class StepProgress:
    """``for step in StepProgress(300): ...`` with a progress bar on stderr (``fusegrad.helpers.tqdm``) when stderr
    is a terminal and not ``quiet``. The first ``warmup`` steps compile the kernels and capture the JIT, taking far
    longer than the rest: they are counted in the bar but left out of its speed and ETA, which would otherwise
    start at an hour. ``describe(text)`` labels the bar, or prints the text when there is no bar (a pipe, a log)."""
    def __init__(self, steps: int, quiet: bool = False, warmup: int = 2):
        from fusegrad.helpers import tqdm
        self.steps, self.quiet, self.warmup = steps, quiet, min(warmup, steps)
        self.bar = None if quiet else tqdm(range(steps), total=steps, disable=None, warmup=self.warmup)
        if self.bar is not None and self.bar.disable: self.bar = None
    def __iter__(self):
        if not self.quiet and self.warmup: print(f"compiling and capturing the first {self.warmup} steps ...", flush=True)
        yield from (self.bar if self.bar is not None else range(self.steps))
    def describe(self, text: str) -> None:
        if self.bar is not None: self.bar.set_description(text)
        elif not self.quiet: print(text)
