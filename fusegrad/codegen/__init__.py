"""Codegen: from a kernel AST (a SINK of STOREs over RANGEs) to a rendered ``ProgramSpec``.

    simplify index math (and gated addresses) → optimize (codegen/opt) → bfloat16 emulation → transcendentals
    → grouped reduces to local memory → launch dims → reduces to accumulators → fp8 emulation → vector loads of contiguous lanes
    → index dtype → shifts by any amount → innermost UPCAST loops as vector nodes (renderers with vector types) → linearize → render
"""
from __future__ import annotations
from fusegrad.dtype import dtypes
from fusegrad.helpers import prod, DEBUG, VIZ
from fusegrad.uop.ops import UOp, Ops, GroupOp, graph_rewrite
from fusegrad.uop.symbolic import symbolic
from fusegrad.renderer import Renderer, ProgramSpec
from fusegrad.codegen.kernel import range_size, kernel_info
from fusegrad.codegen.opt import optimize_kernel
from fusegrad.codegen.lowering import lower_reduces, lower_group_reduces, to_launch_dims, narrow_index_dtype, emulate_bfloat16, emulate_fp8, \
    unwrap_gated_indexes, load_contiguous_lanes, collapse_onehot_reduces, guard_shifts
from fusegrad.codegen.linearize import linearize
from fusegrad.codegen.transcendental import decompose_transcendentals
from fusegrad.codegen.threefry import decompose_threefry
from fusegrad.codegen.vectorize import vectorize_upcasts

# (the Context settings get_program reads are listed in renderer/__init__.py, CODEGEN_FLAGS: their values are
# part of ``renderer.options``, the compiled-kernel cache key)

def kernel_name(ast: UOp) -> str:
    """``E_4_16`` for elementwise work, ``r_64_16`` for a reduce: 'E'/'r' then the loop sizes."""
    ranges = sorted([x for x in ast.toposort if x.op is Ops.RANGE], key=lambda r: r.arg[0])
    has_reduce = any(x.op is Ops.REDUCE for x in ast.toposort)
    sizes = "_".join(str(range_size(r)) if isinstance(range_size(r), int) else range_size(r).render().replace(" ", "")
                     for r in ranges)
    name = ("r" if has_reduce else "E") + ("_" + sizes if sizes else "")
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)

def estimate_cost(ast: UOp) -> tuple:
    """(flops, bytes): ALU ops on values (not index math) times their loop trip counts, and the
    bytes of every buffer the kernel touches."""
    context: dict[UOp, frozenset] = {}
    reads_index: dict[UOp, bool] = {}   # does the node's graph below it hold an index value? (one pass, not a walk per node)
    flops = 0
    for x in ast.toposort:
        reads_index[x] = any(s.dtype == dtypes.index or reads_index[s] for s in x.src)
        ctx = frozenset().union(*(context[s] for s in x.src)) if x.src else frozenset()
        if x.op is Ops.RANGE: ctx = ctx | {x}
        if x.op is Ops.REDUCE: ctx = ctx - set(x.src[1:])
        context[x] = ctx
        counts_as = 2 if x.op is Ops.MULACC else 1
        if (x.op in GroupOp.ALU and x.dtype != dtypes.index and not _is_index_math(x, reads_index[x])) or x.op is Ops.REDUCE:
            trips = prod(range_size(r) for r in (context[x.src[0]] if x.op is Ops.REDUCE else ctx))
            flops = flops + counts_as * trips
    params = {x for x in ast.toposort if x.op is Ops.PARAM}
    mem = sum(p.dtype.size * p.dtype.base.itemsize for p in params)
    return flops, mem

def _is_index_math(x: UOp, reads_index: bool) -> bool:
    """Comparisons and boolean logic on index values (validity gates) are not counted as flops. ``reads_index``: does
    some node below ``x`` have the index dtype?"""
    return x.op in GroupOp.Comparison | {Ops.AND, Ops.OR} and all(s.dtype in (dtypes.index, dtypes.bool) for s in x.src) and reads_index

def simplify_kernel(ast: UOp) -> UOp:
    """The kernel AST that optimization actions apply to (BEAM's search space, and the heuristic's input):
    simplified, one-hot lookup reduces collapsed into single reads, gated indexes unwrapped. Actions legal on a raw
    schedule AST may not be legal on this one (a size-1 loop folds away). THREEFRY becomes uint32 arithmetic first."""
    return unwrap_gated_indexes(graph_rewrite(collapse_onehot_reduces(graph_rewrite(decompose_threefry(ast), symbolic)), symbolic))

def get_program(ast: UOp, renderer: Renderer, opts: list | None = None) -> ProgramSpec:
    """Optimize, lower, linearize and render one kernel."""
    # every buffer slot stays a kernel parameter even if simplification drops its last use
    # (c.where(x, x) no longer reads c): callers pass buffers by slot, so a missing one would shift the rest
    params = sorted({x for x in ast.toposort if x.op is Ops.PARAM}, key=lambda p: p.arg)
    options = renderer.options   # the target's capabilities and the codegen flags, read once
    from fusegrad.viz import trace
    viz = trace.begin(ast, renderer) if VIZ else None   # VIZ=1 records each stage's graph and the rules that fired
    ast = simplify_kernel(ast)
    if viz is not None: trace.stage("symbolic", ast)
    name = kernel_name(ast)
    if DEBUG >= 5: print(f"kernel {name}:\n{ast}")
    flops, mem = estimate_cost(ast)
    applied: tuple = ()
    ast, applied = optimize_kernel(ast, renderer, opts)
    if viz is not None: trace.stage(f"optimize {list(map(str, applied))}", ast)
    ast = emulate_bfloat16(ast)
    # exp2/log2/sin as polynomial code, so loops vectorize (libm calls are scalar); e**x (EXP2(x * log2 e))
    # on every renderer, since a native exp2 can't undo the rounding of x * log2 e
    if options.transcendental >= 1:
        ast = decompose_transcendentals(ast, exp_only=options.transcendental < 2 and options.native_transcendentals)
    # after bfloat16 emulation, so the local buffers of grouped reduces hold float32
    ast = lower_group_reduces(ast)
    if viz is not None: trace.stage("bfloat16, transcendentals, grouped reduces", ast)
    if options.has_local: ast, global_size, local_size = to_launch_dims(ast)
    else: global_size, local_size = [1, 1, 1], None
    ast = lower_reduces(ast)
    ast = emulate_fp8(ast)   # after lower_reduces: an fp8 accumulator's every update rounds to fp8, as tinygrad's
    if viz is not None: trace.stage("launch dims, lower reduces", ast)
    ast = graph_rewrite(ast, symbolic)
    if options.vector_loops: ast = load_contiguous_lanes(ast)
    ast = narrow_index_dtype(ast)
    # after narrowing, so a shift's width is its dtype's; before vectorizing, so the guards vectorize too
    ast = guard_shifts(ast)
    # innermost UPCAST loops as vector nodes, where the renderer has vector types
    if options.vector_loops and options.vectorize: ast = vectorize_upcasts(ast, options.max_vector_bytes, "always" if kernel_info(ast).gather_lanes else options.vector_gathers,
                                                                   options.vector_dtypes)
    if viz is not None: trace.stage("symbolic, contiguous loads, narrow indices, shift guards, vectors", ast)
    uops = linearize(ast)
    present = {u.arg for u in uops if u.op is Ops.PARAM}
    # (a dropped buffer's parameter is declared as bytes: its dtype may be one lowering emulates, like bfloat16)
    uops = [UOp(Ops.PARAM, dtypes.uint8.ptr(p.dtype.size * p.dtype.base.itemsize), (), p.arg) for p in params if p.arg not in present] + uops
    if DEBUG >= 6:
        for i, u in enumerate(uops): print(f"{i:4d} {u.op.name:12s} {u.dtype!r:24s} {u.arg!r}")
    src = renderer.render(name, uops)
    variables = [u for u in uops if u.op is Ops.DEFINE_VAR]
    outs = sorted({u.src[0].src[0].arg for u in uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.PARAM})
    ins = sorted({u.src[0].src[0].arg for u in uops if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM})
    program = ProgramSpec(name, src, renderer.device, uops, global_size, local_size, variables, outs, ins, flops, mem, applied)
    if viz is not None: trace.finish(viz, program)
    return program
