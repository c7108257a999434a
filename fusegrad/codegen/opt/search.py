"""BEAM search over optimization actions.

``beam_search(ast, renderer, width)`` starts from the unoptimized kernel and the hand-coded
heuristic's choice, tries every legal action on each of the ``width`` best candidates, compiles
the new candidates in parallel worker processes, times them on real buffers and keeps the best
``width``. It stops when a round improves the best time by less than 1%, so the result is never
slower than the heuristic.
Candidates are timed on the kernel with its outermost loop shrunk to a few hundred iterations
(``_shrunk``), on scratch buffers. Results are cached on disk (sqlite) keyed by the kernel, device, width and compiler, so a
second search of the same kernel costs nothing; ``IGNORE_BEAM_CACHE=1`` searches again.
"""
from __future__ import annotations
import dataclasses, time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from fusegrad.helpers import DEBUG, IGNORE_BEAM_CACHE, content_hash, getenv, tqdm
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops, AxisType, pretty_print
from fusegrad.device import Device, Buffer, diskcache_get, diskcache_put
from fusegrad.codegen.kernel import kernel_axes, range_size
from fusegrad.codegen.opt.actions import Opt, OptOps, KernelOptError, apply_opt
from fusegrad.codegen.opt.heuristic import cpu_count, hand_coded_optimizations
from fusegrad.codegen.opt.tc import tensor_core_choices

def candidate_actions(ast: UOp, renderer) -> list[Opt]:
    """Every action worth trying on this kernel (legality is checked when applying). Workgroup
    actions (LOCAL, GROUP, GROUPTOP, NOLOCALS) are offered only to renderers with locals; PADTO
    only for axes whose size 32 doesn't already divide."""
    axes = kernel_axes(ast)
    n_axes = len(axes)
    actions = [Opt(OptOps.UPCAST, axis, amount) for axis in range(min(n_axes, 6)) for amount in (2, 3, 4, 8, 16, 32)]
    actions += [Opt(OptOps.UNROLL, axis, amount) for axis in range(min(n_axes, 6)) for amount in (4, 8, 16)]
    actions += [Opt(OptOps.SWAP, axis, other) for axis in range(min(n_axes, 4)) for other in range(axis + 1, min(n_axes, 4))]
    actions += [Opt(OptOps.STAGE, axis) for axis in range(min(n_axes, 4))]
    if not renderer.has_local: actions.append(Opt(OptOps.PACK, 0))
    if renderer.tensor_cores: actions += _tensor_core_actions(ast, renderer)
    if renderer.has_threads and cpu_count() > 1: actions.append(Opt(OptOps.THREAD, 0, cpu_count()))
    if renderer.vector_loops and renderer.vector_gathers == "register_tiles": actions.append(Opt(OptOps.GATHER))
    if renderer.has_local:
        actions += [Opt(OptOps.LOCAL, axis, amount) for axis in range(min(n_axes, 5)) for amount in (2, 3, 4, 8, 13, 16, 29, 32)]
        if renderer.has_shared:
            actions += [Opt(OptOps.GROUPTOP, axis, amount) for axis in range(min(n_axes, 5)) for amount in (13, 16, 28, 29, 32, 49, 64, 256)]
            actions += [Opt(OptOps.GROUP, axis, amount) for axis in range(min(n_axes, 5)) for amount in (0, 4, 8, 16)]
        actions.append(Opt(OptOps.NOLOCALS))
    actions += [Opt(OptOps.PADTO, axis, 32) for axis, r in enumerate(axes[:7])
                if isinstance(size := r.src[0].arg if r.src[0].op is Ops.CONST else None, int) and size % 32 != 0 and size > 8]
    return actions

def _tensor_core_actions(ast: UOp, renderer) -> list[Opt]:
    """TC on each of (at most 9) axis choices, with the lowest tc_opt that finds choices, and with tc_opt 2
    where an axis must be padded. (TC is legal only as a kernel's first action.)"""
    for tc_opt in (0, 1):
        if choices := tensor_core_choices(ast, renderer, tc_opt): break
    else: return []
    actions = [Opt(OptOps.TC, choice, tc_opt) for choice in range(min(len(choices), 9))]
    def divides(c) -> bool:
        tc, *_, n, m, k = c
        return all(r is None or (isinstance(size := range_size(r), int) and size % dim == 0) for r, dim in zip((n, m, k), tc.dims))
    return actions + [Opt(OptOps.TC, choice, 2) for choice, c in enumerate(choices[:9]) if not divides(c)]

def _render(ast: UOp, renderer, opts: list[Opt]):
    from fusegrad.codegen import get_program   # (the codegen package imports this one; and tests patch get_program there)
    return get_program(ast, renderer, opts)

def _compile(args: tuple) -> tuple[int, bytes | None]:
    """Worker: compile one candidate's source (returns None if the compiler rejects it)."""
    index, device, src = args
    try: return index, Device[device].compiler.compile_cached(src)
    except Exception: return index, None

def _time_program(program, lib: bytes, buffers: list, repeats: int = 3, give_up_after: float = float("inf")) -> float:
    """Best of ``repeats`` runs; a candidate already 3x slower than ``give_up_after`` isn't repeated."""
    from fusegrad.engine.realize import CompiledRunner   # (an upward call: timing runs a kernel through the engine)
    runner = CompiledRunner(program, precompiled=lib)
    var_vals = {v: v.arg[1] for v in program.vars}
    best = float("inf")
    for _ in range(repeats):
        elapsed = runner(buffers, var_vals, wait=True)
        best = min(best, elapsed if elapsed is not None else float("inf"))
        if best > 3 * give_up_after: break
    return best

def _buffers_for(ast: UOp, device: str) -> list:
    """Random-filled scratch buffers shaped like the kernel's PARAMs (outputs can't clobber real data)."""
    import numpy as np
    params = sorted({x for x in ast.toposort if x.op is Ops.PARAM}, key=lambda p: p.arg)
    buffers = []
    rng = np.random.default_rng(0)
    for p in params:
        buf = Buffer(device, p.dtype.size, p.dtype.base).allocate()
        raw = rng.integers(0, 255, size=buf.nbytes, dtype=np.uint8)
        buf.copyin(memoryview(raw.tobytes()))
        buffers.append(buf)
    return buffers

def _cache_key(ast: UOp, device: str, width: int, renderer) -> str:
    compiler_key = getattr(Device[device].compiler, "cachekey", "") or ""
    # the target and settings that change what a candidate compiles to (VECTORIZE, TC, ...) change the best actions
    # too; BEAM and NOOPT don't (the search picks the actions itself)
    options = dataclasses.replace(renderer.options, beam=0, noopt=0)
    return content_hash(pretty_print(ast, max_nodes=10**9), device, str(width), compiler_key, repr(options))

_pool: ThreadPoolExecutor | None = None
BEAM_BAR_DELAY = 0.5   # seconds a search runs before its progress bar appears (a quick one shows none)

def _workers() -> ThreadPoolExecutor | None:
    """Compiles run in parallel: each one is a separate compiler process, driven from a thread
    (the compiler, not Python, does the work, so threads don't wait on each other)."""
    global _pool
    if getenv("BEAM_PARALLEL", 1) and _pool is None: _pool = ThreadPoolExecutor(max_workers=max(2, cpu_count()))
    return _pool

def beam_search(ast: UOp, renderer, width: int) -> list[Opt]:
    """The best action list found for ``ast`` (see module doc)."""
    device = renderer.device
    key = _cache_key(ast, device, width, renderer)
    if not IGNORE_BEAM_CACHE and (cached := _opts_from_cache(diskcache_get("beam_search", key))) is not None: return cached
    real, ast = ast, _shrunk(ast)
    buffers = _buffers_for(ast, device)
    start = time.perf_counter()
    # kernels timed so far and the best time, on a terminal's stderr once the search has taken a moment; erased
    # when done (DEBUG>=1 prints the result)
    bar = tqdm(disable=None, delay=BEAM_BAR_DELAY, leave=False, unit=" kernels")
    try: return _search(ast, real, renderer, width, device, key, buffers, start, bar)
    finally: bar.close()

def _search(ast: UOp, real: UOp, renderer, width: int, device: str, key: str, buffers: list, start: float, bar: tqdm) -> list[Opt]:
    label = f"BEAM {_render(real, renderer, []).name}" if not bar.disable else "BEAM"   # (the name costs a codegen)
    best_so_far = float("inf")
    def evaluate(candidates: list[list[Opt]]) -> list[tuple[float, list[Opt]]]:
        nonlocal best_so_far
        programs, seen = [], set()
        for opts in candidates:
            try: program = _render(ast, renderer, opts)
            except (KernelOptError, AssertionError, RuntimeError): continue
            if program.src in seen: continue   # different actions, same code
            seen.add(program.src)
            programs.append((opts, program))
        pool = _workers()
        jobs = [(i, device, p.src) for i, (_, p) in enumerate(programs)]
        libs = dict(pool.map(_compile, jobs) if pool is not None and len(jobs) > 1 else map(_compile, jobs))
        results: list[tuple[float, list[Opt]]] = []
        for i, (opts, program) in enumerate(programs):
            if libs.get(i) is None: continue
            fastest = min((r[0] for r in results), default=float("inf"))
            try: results.append((_time_program(program, libs[i], buffers, give_up_after=fastest), opts))
            except Exception: continue
            best_so_far = min(best_so_far, results[-1][0])
            bar.set_description(f"{label} best {best_so_far * 1e6:.2f} us")
            bar.update(1)
        return sorted(results, key=lambda r: r[0])
    # the heuristic's choice is in the first beam: the search refines it instead of rediscovering
    # a register tile one action at a time (that halves a 1024 matmul's search), and the result is
    # never slower than the heuristic
    heuristic = _applicable_prefix(ast, renderer, hand_coded_optimizations(ast, renderer))
    beam = evaluate([[], heuristic])
    if not beam: return []
    best_time, best_opts = beam[0]
    for _ in range(getenv("BEAM_MAX_ROUNDS", 8)):
        actions = candidate_actions(ast, renderer)
        candidates = [opts + [action] for _, opts in beam[:width] for action in actions]
        results = evaluate(candidates)
        if not results or results[0][0] > best_time * 0.99: break
        beam = results[:width]
        best_time, best_opts = beam[0]
        if DEBUG >= 2: print(f"beam: {best_time*1e6:9.2f} us  {best_opts}")
    # (found on the shrunk kernel: keep the actions that apply to the real one, in order)
    if ast is not real: best_opts = _applicable_prefix(real, renderer, best_opts)
    if DEBUG >= 1: print(f"beam search {time.perf_counter() - start:.2f} s: {best_time*1e6:.2f} us with {best_opts}")
    diskcache_put("beam_search", key, [[o.op.name, o.axis, list(o.arg) if isinstance(o.arg, tuple) else o.arg] for o in best_opts])
    return best_opts

def _opts_from_cache(entry: Any) -> list[Opt] | None:
    """The action list of a beam-cache entry (plain JSON: ``[op name, axis, arg]`` per action), or None when the
    entry is missing or malformed (then the search runs again)."""
    if not isinstance(entry, list): return None
    opts = []
    for item in entry:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str) and item[0] in OptOps.__members__): return None
        _, axis, arg = item
        if not (axis is None or isinstance(axis, int)): return None
        if isinstance(arg, list):
            if not all(isinstance(a, int) for a in arg): return None
            arg = tuple(arg)
        elif not (arg is None or isinstance(arg, int)): return None
        opts.append(Opt(OptOps[item[0]], axis, arg))
    return opts

SHRINK_TO = 256

def _shrunk(ast: UOp) -> UOp:
    """The kernel with its outermost global loop cut to a divisor of about ``SHRINK_TO`` (a multiple of 64,
    so every UPCAST, THREAD and PADTO amount BEAM tries means the same on it), so each candidate runs a
    fraction of the work: the candidates' order stays (same loop body, same tiles) while the search of a
    2048 matmul times 8x less work per run. Kernels with symbolic sizes are searched whole."""
    axes = kernel_axes(ast)
    if not axes or axes[0].arg[1] is not AxisType.GLOBAL or axes[0].src[0].op is not Ops.CONST: return ast
    size = axes[0].src[0].arg
    smaller = next((n for n in range(SHRINK_TO, size // 2 + 1, 64) if size % n == 0), None)
    if smaller is None: return ast
    return ast.substitute({axes[0]: axes[0].replace(src=(UOp.const(dtypes.index, smaller),) + axes[0].src[1:])})

def _applicable_prefix(ast: UOp, renderer, opts: list[Opt]) -> list[Opt]:
    """The heuristic's opts that apply in order (it skips illegal ones the same way)."""
    applied, current = [], ast
    for opt in opts:
        try:
            current = apply_opt(current, opt, renderer)
            applied.append(opt)
        except KernelOptError: continue
    return applied
