"""OptOps.TC: a reduce computed with one of the renderer's matrix instructions (``renderer.TensorCore``).

A kernel qualifies when its only REDUCE is a sum, in the tensor core's ``dtype_out``, of a product
``x * y`` of two ``dtype_in`` values: ``CAST(MUL(x, y))`` (a bfloat16 matmul) or ``MUL(CAST(x), CAST(y))``.
``Opt(OptOps.TC, axis, tc_opt)``: with tc_opt 0 both x and y must be loads (padded or not) under the cast
of the product, with 1 any values (fused elementwise work on the inputs) and casts of the factors, with 2
the axes are also padded (PADTO) up to the instruction's dims.
``axis`` picks one of ``tensor_core_choices``: three axes of the kernel,

- n, a global axis that y depends on and x doesn't (y is the ``b`` operand, N of its elements a row),
- m, a global axis that x depends on and y doesn't (only for instructions with M > 1),
- k, a reduce axis that both depend on,

(the choices whose b rows are contiguous in memory first: vector loads, no gathers). The action splits
n into ``n_out*N + j``, m into ``m_out*M + i`` and k into ``k_out*K + l`` and replaces the reduce by a
reduce of ``WMMA(a, b_0, .., b_{K-1}, 0)`` over k_out (and the reduce's other axes): ``a`` holds
x at the M x K points (i, l), row ``b_l`` holds y at the N points (l, j) (a VECTORIZE of the values with
i, j, l constants; codegen turns contiguous loads into vector loads). The reduce is a vector of the
M x N sums, which ``lower_reduces`` keeps in one register array element and updates with the WMMA
itself (``c`` is the running sum). Every store that used the reduce or n or m (the output and its
epilogue: a bias, an activation, the cast back to bfloat16) is repeated for the M x N lanes, reading
``GEP(sums, i*N + j)``.

TC must come first (other actions split axes the choices are made of); later UPCASTs make register
tiles of instructions (several rows m, several N-wide column blocks), THREAD spreads them over cores.

A warp tensor core (``tc.threads`` 32, CUDA's ``mma.sync``) is spread over the lanes of a warp: the action
also adds a WARP range ``t`` of 32 lanes (local dim x), and lane t's fragments hold the points that
``tc.layout`` gives it: ``a`` is the VECTORIZE of x at (i, l) = layout_a(t, e) for each of its elements e,
``b`` of y at (l, j) = layout_b(t, e), and the stores are repeated for the elements e of lane t's sums,
at (i, j) = layout_c(t, e). Later actions work on whole warps: UPCAST gives a warp a tile of
instructions, LOCAL puts several warps in a workgroup.
"""
from __future__ import annotations
import itertools
from fusegrad.dtype import dtypes
from fusegrad.uop.ops import UOp, Ops, AxisType
from fusegrad.renderer import TensorCore, FragmentLayout
from fusegrad.codegen.kernel import range_size, kernel_axes, ranges_in, address_stride, kernel_info, next_range_id
from fusegrad.codegen.opt.actions import KernelOptError, pad_range

def _name(dtype) -> str: return repr(dtype).removeprefix("dtypes.")

def _operands(value: UOp, tc: TensorCore, tc_opt: int) -> tuple[UOp, UOp] | None:
    """(x, y), the ``dtype_in`` factors of a reduce's value, or None when it isn't such a product."""
    if value.op is Ops.CAST and value.dtype == tc.dtype_out and value.src[0].op is Ops.MUL and value.src[0].dtype == tc.dtype_in:
        value = value.src[0]
    if value.op is not Ops.MUL: return None
    factors = []
    for s in value.src:
        if s.dtype == tc.dtype_in and (tc_opt >= 1 or _loaded(s)): factors.append(s)
        # float32 products of bfloat16 values are exact, so their sum is the tensor core's
        elif tc_opt >= 1 and s.op is Ops.CAST and s.dtype == tc.dtype_out and s.src[0].dtype == tc.dtype_in: factors.append(s.src[0])
        else: return None
    return factors[0], factors[1]

def under_pad_gate(x: UOp) -> UOp:
    """``x`` without the gate of a padded load (``valid.where(load, 0)``, how the scheduler pads an input)."""
    return x.src[1] if x.op is Ops.WHERE and x.src[2].op is Ops.CONST and x.src[2].arg == 0 else x

def _loaded(x: UOp) -> bool:
    """A load, or a padded load."""
    return under_pad_gate(x).op is Ops.LOAD

def tensor_core_choices(ast: UOp, renderer, tc_opt: int) -> list[tuple[TensorCore, UOp, UOp, UOp, UOp, UOp | None, UOp]]:
    """Every way to run the kernel's reduce on a tensor core: (tc, reduce, a operand, b operand, n, m, k),
    the choices whose b operand is contiguous along n (then a along k) first."""
    reduces = [x for x in ast.toposort if x.op is Ops.REDUCE]
    if len(reduces) != 1: return []
    red = reduces[0]
    globals_ = [r for r in kernel_axes(ast) if r.arg[1] in (AxisType.GLOBAL, AxisType.LOOP, AxisType.THREAD)]
    choices = []
    for tc in renderer.tensor_cores:
        if red.arg is not Ops.ADD or red.dtype != tc.dtype_out or (factors := _operands(red.src[0], tc, tc_opt)) is None: continue
        for a, b in (factors, factors[::-1]):
            in_a, in_b = ranges_in(a), ranges_in(b)
            for n in reversed(globals_):
                if n not in in_b or n in in_a: continue
                ms = [g for g in reversed(globals_) if g in in_a and g not in in_b] if tc.dims[1] > 1 else [None]
                for m, k in itertools.product(ms, reversed(red.src[1:])):
                    if k.arg[1] is AxisType.REDUCE and k in in_a and k in in_b: choices.append((tc, red, a, b, n, m, k))
    def contiguous(x: UOp, rng: UOp) -> bool:
        if x.op is Ops.WHERE and _loaded(x): x = x.src[1]
        return x.op is Ops.LOAD and x.src[0].op is Ops.INDEX and address_stride(x.src[0], rng) == 1
    return sorted(choices, key=lambda c: (not contiguous(c[3], c[4]), not contiguous(c[2], c[6])))

def apply_tensor_core(ast: UOp, renderer, choice: int | None, tc_opt) -> UOp:
    """Apply ``Opt(OptOps.TC, choice, tc_opt)`` (see the module doc) or raise KernelOptError."""
    if not renderer.tensor_cores: raise KernelOptError(f"TC needs tensor cores, and the {renderer.device} renderer declares none")
    tc_opt = 0 if tc_opt is None else tc_opt
    if tc_opt not in (0, 1, 2): raise KernelOptError(f"TC's tc_opt is 0, 1 or 2, got {tc_opt}")
    if any(x.op is Ops.RANGE and x.arg[1] not in (AxisType.GLOBAL, AxisType.LOOP, AxisType.THREAD, AxisType.REDUCE) for x in ast.toposort) \
            or any(x.op is Ops.WMMA for x in ast.toposort):
        raise KernelOptError("TC must be the first action on a kernel (before UPCAST, UNROLL, LOCAL, GROUP, STAGE or another TC)")
    if kernel_info(ast).dont_use_locals and any(tc.threads > 1 for tc in renderer.tensor_cores):
        raise KernelOptError("TC after NOLOCALS: the warp tensor cores need a workgroup")
    choices = tensor_core_choices(ast, renderer, tc_opt)
    if not choices:
        wanted = ", ".join(f"{_name(tc.dtype_in)} -> {_name(tc.dtype_out)}" for tc in renderer.tensor_cores)
        raise KernelOptError(f"TC: the kernel has no single sum of products that the {renderer.device} tensor cores ({wanted}) compute"
                                 + ("" if tc_opt else " from loads (tc_opt 1 allows computed operands)"))
    if choice is None or not 0 <= choice < len(choices):
        raise KernelOptError(f"TC axis choice {choice} is out of range ({len(choices)} choices)")
    tc, red, a, b, n, m, k = choices[choice]
    if tc_opt >= 2:   # pad the axes up to the instruction's dims, then find the same choice on the padded kernel
        for rng, dim in ((n, tc.dims[0]), (m, tc.dims[1]), (k, tc.dims[2])):
            if rng is not None and isinstance(size := range_size(rng), int) and size % dim:
                ast = pad_range(ast, next(r for r in ast.toposort if r.op is Ops.RANGE and r.arg == rng.arg), dim)
        ids = (n.arg, m.arg if m is not None else None, k.arg)
        tc, red, a, b, n, m, k = next(c for c in tensor_core_choices(ast, renderer, tc_opt)
                                      if c[0] is tc and (c[4].arg, c[5].arg if c[5] is not None else None, c[6].arg) == ids)
    if tc.threads > 1: return _rewrite_warp(ast, tc, red, a, b, n, m, k)
    return _rewrite(ast, tc, red, a, b, n, m, k)

def _outer_ranges(tc: TensorCore, n: UOp, m: UOp | None, k: UOp) -> dict[UOp, UOp]:
    """n, m and k shrunk to the number of instruction-sized blocks they hold (each keeps its id and kind)."""
    outer: dict[UOp, UOp] = {}
    for rng, dim in ((n, tc.dims[0]), (m, tc.dims[1]), (k, tc.dims[2])):
        if rng is None: continue
        size = range_size(rng)
        if not isinstance(size, int) or size % dim:
            raise KernelOptError(f"TC needs axis {rng.arg[0]} (size {size}) to be a multiple of {dim} (tc_opt 2 pads it)")
        outer[rng] = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, size // dim),), rng.arg)
    return outer

def _repeat_stores(ast: UOp, red: UOp, n: UOp, m: UOp | None, lanes: list[tuple[UOp, UOp, UOp | None]]) -> UOp:
    """The kernel with every store that uses the reduce, n or m repeated once per (sum, n, m) in ``lanes``."""
    stores: list[UOp] = []
    for st in ast.src:
        if not ({red, n, m} & set(st.toposort)):
            stores.append(st)
            continue
        if st.op is not Ops.STORE: raise KernelOptError(f"TC can't repeat a {st.op.name} of the kernel for the fragment lanes")
        for value, n_at, m_at in lanes:
            stores.append(st.substitute({red: value, n: n_at} | ({m: m_at} if m is not None else {})))
    return ast.replace(src=tuple(stores))

def _rewrite(ast: UOp, tc: TensorCore, red: UOp, a: UOp, b: UOp, n: UOp, m: UOp | None, k: UOp) -> UOp:
    N, M, K = tc.dims
    outer = _outer_ranges(tc, n, m, k)
    def at(x: UOp, i: int, j: int, l: int) -> UOp:
        """``x`` at fragment point (i, j, l): m = m_out*M + i, n = n_out*N + j, k = k_out*K + l."""
        points = {n: outer[n] * N + j, k: outer[k] * K + l}
        if m is not None: points[m] = outer[m] * M + i
        return x.substitute(points)
    a_lanes = tuple(at(a, i, 0, l) for i in range(M) for l in range(K))
    b_rows = [UOp(Ops.VECTORIZE, tc.dtype_in.vec(N), tuple(at(b, 0, j, l) for j in range(N))) for l in range(K)]
    zero = UOp(Ops.VECTORIZE, tc.dtype_out.vec(M * N), (UOp.const(tc.dtype_out, 0),) * (M * N))
    wmma = UOp(Ops.WMMA, tc.dtype_out.vec(M * N), (UOp(Ops.VECTORIZE, tc.dtype_in.vec(M * K), a_lanes), *b_rows, zero), tc)
    sums = UOp(Ops.REDUCE, wmma.dtype, (wmma,) + tuple(outer[k] if r is k else r for r in red.src[1:]), Ops.ADD)
    return _repeat_stores(ast, red, n, m, [(UOp(Ops.GEP, red.dtype, (sums,), (i * N + j,)), outer[n] * N + j,
                                            outer[m] * M + i if m is not None else None) for i in range(M) for j in range(N)])

def _coordinate(layout: FragmentLayout, lane: UOp, element: int, which: int) -> UOp:
    """Coordinate ``which`` (0 row, 1 col) of fragment element ``element`` of lane ``lane`` (a UOp), as index
    math: the element's bits are a constant, each run of lane bits that lands on consecutive coordinate bits
    one ``lane // 2**first % 2**length * 2**position`` (``mma``'s layouts have two runs: lane // 4, lane % 4)."""
    value: UOp = UOp.const(dtypes.index, sum(((element >> bit) & 1) << position
                                             for bit, (coordinate, position) in enumerate(layout.element_bits) if coordinate == which))
    bit = 0
    while bit < len(layout.lane_bits):
        coordinate, position = layout.lane_bits[bit]
        length = 1
        while bit + length < len(layout.lane_bits) and layout.lane_bits[bit + length] == (coordinate, position + length): length += 1
        if coordinate == which: value = value + (lane // (1 << bit)) % (1 << length) * (1 << position)
        bit += length
    return value

def _rewrite_warp(ast: UOp, tc: TensorCore, red: UOp, a: UOp, b: UOp, n: UOp, m: UOp | None, k: UOp) -> UOp:
    """TC with a warp instruction (see the module doc): the fragments of lane ``t``, a new WARP range."""
    if m is None: raise KernelOptError(f"{tc.name} needs an m axis (rows of the a operand)")
    N, M, K = tc.dims
    outer = _outer_ranges(tc, n, m, k)
    lane = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, tc.threads),), (next_range_id(ast), AxisType.WARP))
    layout_a, layout_b, layout_c = tc.layout   # type: ignore[misc]
    def at(x: UOp, i: UOp | None, j: UOp | None, l: UOp | None) -> UOp:
        """``x`` at the fragment point (i, j, l): m = m_out*M + i, n = n_out*N + j, k = k_out*K + l."""
        points = {rng: outer[rng] * dim + offset for rng, dim, offset in ((m, M, i), (n, N, j), (k, K, l)) if offset is not None}
        return x.substitute(points)
    def fragment(x: UOp, layout: FragmentLayout, names: tuple[str, str], dtype) -> UOp:
        points = []
        for e in range(layout.elements):
            where = dict(zip(names, (_coordinate(layout, lane, e, 0), _coordinate(layout, lane, e, 1))))
            points.append(at(x, where.get("i"), where.get("j"), where.get("l")))
        return UOp(Ops.VECTORIZE, dtype.vec(len(points)), tuple(points))
    a_fragment = fragment(a, layout_a, ("i", "l"), tc.dtype_in)
    b_fragment = fragment(b, layout_b, ("l", "j"), tc.dtype_in)
    zero = UOp(Ops.VECTORIZE, tc.dtype_out.vec(layout_c.elements), (UOp.const(tc.dtype_out, 0),) * layout_c.elements)
    wmma = UOp(Ops.WMMA, zero.dtype, (a_fragment, b_fragment, zero), tc)
    sums = UOp(Ops.REDUCE, wmma.dtype, (wmma,) + tuple(outer[k] if r is k else r for r in red.src[1:]), Ops.ADD)
    lanes = []
    for e in range(layout_c.elements):
        i, j = _coordinate(layout_c, lane, e, 0), _coordinate(layout_c, lane, e, 1)
        lanes.append((UOp(Ops.GEP, red.dtype, (sums,), (e,)), outer[n] * N + j, outer[m] * M + i))
    return _repeat_stores(ast, red, n, m, lanes)
