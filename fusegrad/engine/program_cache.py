"""Rendered kernels on disk, found by their AST before any code generation runs.

The compile cache (device.py ``Compiler.compile_cached``) maps a kernel's *source* to its binary, so a fresh
process that finds every binary on disk still spent its first step generating every kernel's source (~20-50 ms of
Python per kernel). This cache maps the kernel's *AST* to the rendered ``ProgramSpec`` (source, launch sizes,
buffer slots, estimates), so with a warm disk a first step runs no codegen at all.

The key is a SHA-256 over the AST (every node's op, dtype, source positions and arg, in toposort order), the
renderer's ``options`` (target, limits, codegen flags) and the text of the code that turns ASTs into source
(codegen/, renderer/, uop/, dtype.py, helpers.py): editing the code generator invalidates every entry, never
serves stale source. Kernels with symbolic sizes (variables) aren't stored: their sizes are UOps, not JSON.
"""
from __future__ import annotations
import hashlib, pathlib, sys
from typing import Any
from fusegrad.device import diskcache_get, diskcache_put_many
from fusegrad.helpers import CACHELEVEL
from fusegrad.renderer import ProgramSpec
from fusegrad.uop.ops import UOp

# the parts of the package whose code decides what source an AST renders to
_CODEGEN_SOURCES = ("codegen", "renderer", "uop", "dtype.py", "helpers.py")
_codegen_version: str | None = None

def codegen_version() -> str:
    """A hash of the code generator's own source files (computed once per process, a few ms)."""
    global _codegen_version
    if _codegen_version is None:
        root = pathlib.Path(__file__).resolve().parents[1]
        digest = hashlib.sha256(repr(sys.version_info[:2]).encode())
        for part in _CODEGEN_SOURCES:
            for path in sorted((root / part).rglob("*.py")) if (root / part).is_dir() else [root / part]:
                digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        _codegen_version = digest.hexdigest()
    return _codegen_version

def program_key(ast: UOp, options: Any) -> str | None:
    """The disk key of the program ``ast`` renders to under ``options``; None when something in it has no stable
    text (an object printed with its address), so it can't be looked up across processes."""
    digest = hashlib.sha256(f"{codegen_version()}|{options!r}".encode())
    index: dict[UOp, int] = {}
    for i, node in enumerate(ast.toposort):
        index[node] = i
        line = f"{node.op.name}|{type(node.dtype).__name__}:{node.dtype!r}|{[index[s] for s in node.src]}|{type(node.arg).__name__}:{node.arg!r}\n"
        digest.update(line.encode())
    if " at 0x" in f"{options!r}" or any(" at 0x" in repr(node.arg) for node in index): return None
    return digest.hexdigest()

def _plain(value: Any) -> bool:
    """Is ``value`` built from ints, None and lists/tuples of them (what JSON brings back unchanged, up to tuples)?"""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)): return True
    return isinstance(value, (list, tuple)) and all(_plain(v) for v in value)

def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value

def to_record(program: ProgramSpec) -> dict | None:
    """The JSON form of a program without variables; None for programs this cache doesn't store."""
    opts = [(opt.op.name, opt.axis, opt.arg) for opt in program.applied_opts]
    if program.vars or not all(_plain(v) for v in (program.global_size, program.local_size, program.op_estimate, program.mem_estimate,
                                                   [(axis, arg) for _, axis, arg in opts])):
        return None
    return {"name": program.name, "src": program.src, "global_size": list(program.global_size),
            "local_size": None if program.local_size is None else list(program.local_size), "outs": list(program.outs),
            "ins": list(program.ins), "op_estimate": program.op_estimate, "mem_estimate": program.mem_estimate, "opts": opts}

def from_record(record: Any, device: str) -> ProgramSpec | None:
    """The ProgramSpec stored by ``to_record`` (without its linear uops); None for a record of another shape."""
    from fusegrad.codegen.opt.actions import Opt, OptOps
    try:
        opts = tuple(Opt(OptOps[op], axis, _tuples(arg)) for op, axis, arg in record["opts"])
        return ProgramSpec(record["name"], record["src"], device, [], list(record["global_size"]),
                           None if record["local_size"] is None else list(record["local_size"]), [], list(record["outs"]),
                           list(record["ins"]), record["op_estimate"], record["mem_estimate"], opts)
    except (KeyError, TypeError, ValueError): return None

def load(key: str | None, device: str) -> ProgramSpec | None:
    """The program stored under ``key`` (None when missing or caching is off)."""
    if key is None or CACHELEVEL < 1 or (record := diskcache_get("program", key)) is None: return None
    return from_record(record, device)

def store(key: str | None, program: ProgramSpec) -> None:
    """Keep ``program`` under ``key`` for later processes (programs with variables are skipped)."""
    store_many([(key, program)])

def store_many(programs: list[tuple[str | None, ProgramSpec]]) -> None:
    """``store`` for several programs, written in one transaction."""
    if CACHELEVEL < 1: return
    diskcache_put_many("program", [(key, record) for key, program in programs if key is not None and (record := to_record(program)) is not None])
