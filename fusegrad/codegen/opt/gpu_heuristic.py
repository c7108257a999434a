"""The default optimizations for GPU-style renderers (workgroups and shared memory: OpenCL, CUDA).

A GPU runs a kernel as many workgroups of threads. Without actions every workgroup is one thread, so the
heuristic's main job is to give threads work in a shape the memory system likes:

0. **Tensor cores.** A half or bfloat16 matmul whose reduce a warp tensor core computes (CUDA's ``mma.sync``;
   ``TC=0`` turns it off) gets TC, then a tile of 2 x 4 instructions per warp (32 x 32 outputs: each loaded
   fragment feeds 2 or 4 instructions) and 2 x 2 warps per workgroup.

1. **Grouped reduces.** A long reduction with few outputs (``x.sum()``, a loss, a norm's statistics) has too few
   output threads to fill the device: GROUPTOP splits the reduce over a workgroup (each thread sums a contiguous
   block, partials combine through local memory). A matrix-vector product (one output axis, a reduce along
   which every input is contiguous) uses GROUP instead: neighbouring threads read neighbouring elements of a row
   (coalesced), several rows share a workgroup (LOCAL) and each thread keeps a few rows (UPCAST).
2. **Register tiles.** A reduce that reads several inputs, each broadcast along some output axis (matmul, conv),
   gets an UPCAST tile of up to ``renderer.thread_accumulators`` accumulators per thread: each loaded value is reused across the tile.
3. **Partial sums.** Otherwise (no tile) a long reduce gets UNROLL 4 (independent adds in flight).
4. **Workgroups.** The remaining output axes are split into LOCAL threads, innermost axis first (consecutive
   threads touch consecutive addresses), up to ``renderer.workgroup_threads`` per workgroup. Kernels without a
   reduce on a renderer with ``flat_elementwise`` (CUDA) get no actions: the runtime launches them in blocks
   of its own choosing.

Every action is tried on the kernel as it is after the previous ones and kept only if it is legal, so the
result always applies. BEAM (codegen/opt/search.py) refines it with timings from the device.
"""
from __future__ import annotations
from fusegrad.helpers import prod, USE_TC, TC_OPT
from fusegrad.uop.ops import UOp, Ops, AxisType
from fusegrad.codegen.kernel import kernel_axes, range_size, loads_depending_on, address_stride
from fusegrad.codegen.opt.actions import Opt, OptOps, KernelOptError, apply_opt
from fusegrad.codegen.opt.tc import tensor_core_choices

# (the hardware numbers, threads per workgroup and accumulators per thread, are the renderer's)
GROUP_MIN_REDUCE = 1024   # reduces at least this long, with at most ``renderer.filling_outputs`` outputs, are grouped

class _Builder:
    """The kernel as optimized so far, and the actions that got it there."""
    def __init__(self, ast: UOp, renderer):
        self.ast, self.renderer, self.opts = ast, renderer, []
    def axis(self, rng_id: int) -> int:
        return next(i for i, r in enumerate(kernel_axes(self.ast)) if r.arg[0] == rng_id)
    def ranges(self, *kinds: AxisType) -> list[UOp]:
        return [r for r in kernel_axes(self.ast) if r.arg[1] in kinds]
    def apply(self, op: OptOps, rng: UOp | None, amount: int | None) -> bool:
        """Apply an action on the range numbered like ``rng``; False (and nothing changes) if it is illegal."""
        try:
            opt = Opt(op, self.axis(rng.arg[0]) if rng is not None else None, amount)
            self.ast = apply_opt(self.ast, opt, self.renderer)
        except (KernelOptError, StopIteration): return False
        self.opts.append(opt)
        return True

def _divisor(size, options: tuple[int, ...]) -> int | None:
    return next((a for a in options if isinstance(size, int) and size % a == 0 and size >= a), None)

def gpu_optimizations(ast: UOp, renderer) -> list[Opt]:
    """The actions for ``ast`` on a GPU-style renderer (see the module doc).

    >>> # a 4096-element sum: [Opt(GROUPTOP, 0, 256)]; a 512x512 matmul: a 4x4 tile, then 8x16 threads
    """
    k = _Builder(ast, renderer)
    if renderer.flat_elementwise and not any(x.op is Ops.REDUCE for x in ast.toposort): return []
    if USE_TC and any(tc.threads > 1 for tc in renderer.tensor_cores) and _warp_tensor_core(k): return k.opts
    globals_ = k.ranges(AxisType.GLOBAL, AxisType.LOOP)
    reduces = k.ranges(AxisType.REDUCE)
    reduce_nodes = [x for x in ast.toposort if x.op is Ops.REDUCE]
    sizes_known = all(isinstance(range_size(r), int) for r in globals_ + reduces)
    loads = list(dict.fromkeys(x for x in reduce_nodes[0].src[0].toposort if x.op is Ops.LOAD)) if reduce_nodes else []
    outputs = prod(range_size(r) for r in globals_) if sizes_known else 0
    reduce_size = prod(range_size(r) for r in reduces) if sizes_known and reduces else 0
    if reduce_nodes and reduces and sizes_known and renderer.has_shared:
        if _matvec(k, globals_, reduces, loads): return k.opts
        if reduce_size >= GROUP_MIN_REDUCE and outputs <= renderer.filling_outputs:
            first = reduces[0]
            amount = _divisor(range_size(first), (256, 128, 64, 32, 16))
            if amount is not None and k.apply(OptOps.GROUPTOP, first, amount):
                _add_locals(k, renderer.workgroup_threads // amount)
                return k.opts
    tile = _register_tile(k, globals_, loads) if reduce_nodes and sizes_known else 1
    if reduce_nodes and reduce_size >= 64 and tile == 1:
        innermost = k.ranges(AxisType.REDUCE)[-1:]
        if innermost and range_size(innermost[0]) % 4 == 0 and range_size(innermost[0]) > 4: k.apply(OptOps.UNROLL, innermost[0], 4)
    if sizes_known: _add_locals(k, renderer.workgroup_threads)
    return k.opts

def _warp_tensor_core(k: _Builder) -> bool:
    """TC on the first choice, an instruction tile per warp (UPCAST n by 4, m by 2) and warps (LOCAL 2 x 2),
    each as far as the axes divide. False (nothing applied) when no warp tensor core computes the reduce."""
    choices = tensor_core_choices(k.ast, k.renderer, int(TC_OPT.value))
    if not choices or choices[0][0].threads == 1: return False
    try: k.ast = apply_opt(k.ast, tc := Opt(OptOps.TC, 0, int(TC_OPT.value)), k.renderer)
    except KernelOptError: return False
    k.opts.append(tc)
    _, _, _, _, n, m, _ = choices[0]   # (TC keeps the ids of n and m)
    def grow(rng: UOp, op: OptOps, amounts: tuple[int, ...]) -> None:
        current = next((r for r in k.ranges(AxisType.GLOBAL, AxisType.LOOP) if r.arg[0] == rng.arg[0]), None)
        if current is not None and (amount := _divisor(range_size(current), amounts)) is not None: k.apply(op, current, amount)
    grow(n, OptOps.UPCAST, (4, 2))   # the warp's tile of instructions
    grow(m, OptOps.UPCAST, (2,))
    grow(n, OptOps.LOCAL, (2,))      # warps per workgroup
    grow(m, OptOps.LOCAL, (2,))
    return True

def _matvec(k: _Builder, globals_: list[UOp], reduces: list[UOp], loads: list[UOp]) -> bool:
    """One output axis and one reduce that every input walks contiguously (``A @ v`` with A row-major): GROUP
    the reduce over neighbouring threads, several rows per workgroup, a few rows per thread."""
    if len(globals_) != 1 or len(reduces) != 1 or len(loads) < 2: return False
    row, reduce = globals_[0], reduces[0]
    along = loads_depending_on(loads, reduce)
    if len(along) < 2 or any(address_stride(ld.src[0], reduce) != 1 for ld in along) or range_size(reduce) < 256: return False
    threads_per_row = _divisor(range_size(reduce), (16, 8, 4))
    if threads_per_row is None or not k.apply(OptOps.GROUP, reduce, threads_per_row): return False
    rows_per_group = _divisor(range_size(row), (8, 4, 2))
    if rows_per_group is not None: k.apply(OptOps.LOCAL, row, rows_per_group)
    if (left := k.ranges(AxisType.GLOBAL, AxisType.LOOP)) and (upcast := _divisor(range_size(left[0]), (4, 2))) is not None:
        k.apply(OptOps.UPCAST, left[0], upcast)
    return True

def _register_tile(k: _Builder, globals_: list[UOp], loads: list[UOp]) -> int:
    """UPCAST output axes that some input is broadcast along (its loaded values are reused across the tile),
    innermost first, by 4 (else 3 or 2), up to ``renderer.thread_accumulators`` accumulators. Returns the tile's
    size. The axes are chosen innermost first but upcast outermost first: the last UPCAST made is the innermost
    loop of the tile, so the innermost axis's lanes (contiguous in memory) become the vector lanes
    (codegen/vectorize.py: float4 loads and stores on OpenCL)."""
    if len(loads) < 2: return 1
    tile, chosen = 1, []
    for rng in reversed(globals_):
        if len(loads_depending_on(loads, rng)) == len(loads): continue   # no input reused along it
        amount = _divisor(range_size(rng), (4, 3, 2))
        if amount is None or tile * amount > k.renderer.thread_accumulators or range_size(rng) < 2 * amount: continue
        chosen.append((rng, amount))
        tile *= amount
    tile = 1
    for rng, amount in reversed(chosen):
        current = next((r for r in k.ranges(AxisType.GLOBAL, AxisType.LOOP) if r.arg[0] == rng.arg[0]), None)
        if current is not None and k.apply(OptOps.UPCAST, current, amount): tile *= amount
    return tile

def _add_locals(k: _Builder, budget: int) -> None:
    """Split output axes into LOCAL threads, innermost first, while the workgroup stays within ``budget``."""
    threads = prod(range_size(r) for r in k.ranges(AxisType.LOCAL, AxisType.GROUP_REDUCE)) if k.ranges(AxisType.LOCAL, AxisType.GROUP_REDUCE) else 1
    for rng in reversed(k.ranges(AxisType.GLOBAL, AxisType.LOOP)):
        room = budget // threads
        if room < 2: break
        amount = _divisor(range_size(rng), tuple(a for a in (32, 16, 8, 4, 2) if a <= room))
        if amount is not None and k.apply(OptOps.LOCAL, rng, amount): threads *= amount
