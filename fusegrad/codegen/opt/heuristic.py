"""The hand-coded heuristic: the actions a kernel gets without search (``hand_coded_optimizations``).

CPU renderers get register tiles, partial-sum lanes, vector lanes and threads (docs/decisions.md, "Codegen
on the CPU", has the measurements); workgroup renderers (OpenCL) their own defaults from gpu_heuristic.py;
a renderer with tensor cores uses them for a reduce they compute. Hardware numbers (vector width, register
budget, staging memory) come from the renderer (renderer/__init__.py), not from literals here.
"""
from __future__ import annotations
from typing import Any
from fusegrad.helpers import USE_TC, TC_OPT, prod, getenv, cpu_count
from fusegrad.uop.ops import UOp, Ops, AxisType, GroupOp
from fusegrad.codegen.kernel import range_size, kernel_axes, ranges_in, loads_depending_on, address_stride
from fusegrad.codegen.opt.actions import Opt, OptOps, KernelOptError, apply_opt, staged_loads
from fusegrad.codegen.opt.tc import tensor_core_choices, under_pad_gate
from fusegrad.codegen.opt.gpu_heuristic import gpu_optimizations

def _largest_divisor(size, options: tuple[int, ...]) -> int | None:
    if not isinstance(size, int): return None
    for amount in options:
        if size % amount == 0 and size >= amount: return amount
    return None

def float_lanes(renderer) -> int:
    """float32 lanes of the renderer's widest vector register (16 on AVX-512), at least 4: the unit of the
    vector widths below (their measurements were taken at 16)."""
    return max(4, renderer.max_vector_bytes // 4)

def widths(top: int) -> tuple[int, ...]:
    """Vector widths from ``top`` lanes down to 4, halving: ``widths(32)`` is (32, 16, 8, 4)."""
    return tuple(top >> i for i in range(top.bit_length()) if top >> i >= 4)

def _tile_amount(size, preferred: tuple[int, ...], limit: int) -> int | None:
    """A preferred divisor of ``size``, else its largest divisor in 2..limit."""
    if not isinstance(size, int): return None
    if (amount := _largest_divisor(size, preferred)) is not None: return amount
    return next((d for d in range(min(limit, size), 1, -1) if size % d == 0), None)

def _column_amount(size, lanes: int) -> int | None:
    """How many columns a register tile takes. A vector width (two registers' lanes down to 4) that splits the axis comes
    first: a split keeps the column the innermost loop (a whole-axis upcast nests outside the split
    ones) and codegen/vectorize.py can emit it as vector code (MNIST step 720 -> 672 ms). A whole
    small window (a weight gradient's 3 or 5 kernel columns) is taken whole; a longer odd axis (10)
    is still split in two or more, to stay innermost (2x on a 10-wide conv row's input gradient)."""
    if not isinstance(size, int) or size < 2: return None
    if (width := next((w for w in widths(2 * lanes) if size % w == 0 and w < size), None)) is not None: return width
    if size <= lanes // 2: return size
    return _tile_amount(size, (), min(lanes, size // 2)) or size

def _tile_axes(globals_: list[UOp], loads: list[UOp]) -> tuple[dict[UOp, frozenset], UOp | None, list[UOp]]:
    """(each constant-size output axis's loads, the column, the row candidates) of a register tile, as
    ``_register_tile`` describes them: the column is the innermost output axis that some load doesn't depend on, a row
    one that none of the column's loads depend on."""
    depends = {g: loads_depending_on(loads, g) for g in globals_ if isinstance(range_size(g), int)}
    column = next((g for g in reversed(globals_) if g in depends and depends[g] and frozenset(loads) - depends[g]), None)
    rows = [] if column is None else [g for g in reversed(globals_) if g in depends and g is not column and not (depends[g] & depends[column])]
    return depends, column, rows

def _register_tile(globals_: list[UOp], loads: list[UOp], renderer) -> list[tuple[UOp, int]]:
    """Pick the axes of a register tile for a reduce that reads several buffers (matmul, conv and
    their gradients): (axis, amount) pairs, the innermost (vector) axis last.

    An output element costs one multiply-add per reduce step; a tile of R x C outputs needs only
    R + C loads per step when each load is broadcast along one tile axis. So:
    - the column (vector) axis is the innermost output axis that some load doesn't depend on (the
      loads that do depend on it are read contiguously);
    - a neighbour axis with the same loads (a conv's output row next to its column, or the kernel
      row next to the kernel column in a weight gradient) adds a few rows: their input windows
      overlap, so the compiler reuses loads between them;
    - the row axis is one that the column's loads don't depend on (output channels).
    Tile sizes were measured on AVX-512 (2 cores): about 16 vector registers of accumulators when the
    column is a multiple of 8 lanes, about 100-160 scalars otherwise. gcc unrolls a tile loop into registers only up to
    16 iterations, so odd column sizes stay at or below 16; 32 columns are two AVX-512 registers."""
    lanes = float_lanes(renderer)
    depends, column, rows = _tile_axes(globals_, loads)
    if column is None or (column_amount := _column_amount(range_size(column), lanes)) is None: return []
    # about ``renderer.vector_registers`` (16) vector registers of accumulators (rows x neighbour x vectors per column): 8 rows of a
    # 32-wide column, 16 of a 16- or 8-wide one (8 x 2 neighbours: 16 rows x 2 spilled, 7.1 -> 2.7 ms)
    budget = renderer.vector_registers // (column_amount // min(column_amount, lanes)) if column_amount % (lanes // 2) == 0 \
        else renderer.scalar_accumulators // column_amount
    # split upcasts nest in the order applied (rows, neighbour, column innermost; the other order of
    # rows and neighbour measured 2-4x slower); a whole-axis upcast keeps its axis position, outside
    # the split ones (measured: weight gradients, whose whole 3x3 or 5x5 window is the tile, want the
    # output channels innermost)
    tile: list[tuple[UOp, int]] = []
    neighbour = next((g for g in reversed(globals_) if g in depends and g is not column and depends[g] == depends[column]), None)
    # a whole small window (a weight gradient's 5 kernel columns) takes a whole neighbour too (5x5)
    window = column_amount == range_size(column) and column_amount < 6
    if neighbour is not None and (amount := _tile_amount(range_size(neighbour), (), 5 if window else 2)) is not None \
            and amount <= budget // 4:
        budget //= amount
    else: neighbour = None
    row_options = widths(lanes) if column_amount % (lanes // 2) == 0 else widths(lanes // 2)
    if rows:
        size = range_size(rows[0])
        row_amount = next((a for a in row_options if a <= budget and size % a == 0), None) or _tile_amount(size, (), min(budget, 8))
        if row_amount is not None: tile.append((rows[0], row_amount))
    if neighbour is not None: tile.append((neighbour, amount))
    return tile + [(column, column_amount)]

def _dot_product_tile(globals_: list[UOp], reduces: list[UOp], loads: list[UOp], lanes: int, renderer) -> tuple[list[tuple[UOp, int]], int] | None:
    """An output tile whose accumulators are vectors of partial sums along the reduce, when every input
    is contiguous along the innermost reduce axis and it fills vectors (a weight gradient over 32-wide
    image rows, ``a @ b.T``): each step loads one vector per tile row and per tile column and does
    rows x columns vector FMAs; the lanes are added up once at the end. Tile sizes are the usual
    tile's (``_register_tile``) cut to about 20 accumulators, which fit in registers (64-channel 32x32
    conv weight gradient: 40 -> 10 ms). 8 lanes where 16 don't divide the reduce (MNIST's 8-wide rows:
    8 -> 5.4 ms). Returns (tile, lanes), or None."""
    reduce = reduces[-1]
    along = loads_depending_on(loads, reduce)
    width = next((w for w in (lanes, lanes // 2) if w >= lanes // 2 >= 4 and isinstance(range_size(reduce), int) and range_size(reduce) % w == 0), None)
    if width is None or len(along) < 2 or any(address_stride(ld.src[0], reduce) != 1 for ld in along): return None
    full = _register_tile(globals_, loads, renderer)
    tile = list(full)
    while tile and prod(amount for _, amount in tile) > 20:
        # shrink the entry with the most rows to its next smaller divisor (a 3x3 window stays whole)
        i = max(range(len(tile)), key=lambda j: tile[j][1])
        rng, amount = tile[i]
        smaller = next((d for d in range(amount - 1, 1, -1) if range_size(rng) % d == 0 and amount % d == 0), None)
        if smaller is None: tile.pop(i)
        else: tile[i] = (rng, smaller)
    # with half-width vectors, a dropped tile axis (each of its values re-reads the inputs) costs more
    # than the dot product saves (a 1-channel conv's 5x5 weight gradient: 2.1 -> 5.6 ms)
    if not tile or (width < lanes and len(tile) < len(full)): return None
    return tile, width

# a channel tile's image positions: at most 12 along a row and 24 in all (24 accumulators, a weight vector and a
# broadcast fit AVX-512's 32 registers). MNIST's 5x5 input gradient (24-wide rows): 3x6 81 ms, 2x6 81, 2x12 70,
# 1x12 72; its forward (20-wide rows) measures the same at 2x5, 2x10 and 1x10 (50-52 ms)
MAX_TILE_COLUMNS, MAX_TILE_POSITIONS = 12, 24

def _channel_tile(globals_: list[UOp], loads: list[UOp], lanes: int) -> list[tuple[UOp, int]]:
    """A register tile whose vector axis is a channel axis of ``lanes`` elements (conv and its gradients).

    The usual tile takes its vector from the innermost axis (a conv's output row); 20 or 24 wide rows
    make 4 or 8 lane vectors, a quarter or half of AVX-512. Output channels (32, 64) fill whole vectors,
    and every load is then either along the channels (weights; staged to be contiguous, see ``STAGE``)
    or broadcast along them (the image). The image axes become the tile's positions: up to 24 of them, at most
    12 along a row (``MAX_TILE_POSITIONS``, ``MAX_TILE_COLUMNS``), or a whole 3x3/5x5 window in
    a weight gradient, where each position reuses the channel vector that was gathered once per step.
    Returns [] when the usual tile already fills vectors or no channel axis fits."""
    depends = {g: loads_depending_on(loads, g) for g in globals_ if isinstance(range_size(g), int)}
    column = next((g for g in reversed(globals_) if g in depends and depends[g] and frozenset(loads) - depends[g]), None)
    if column is None or (column_amount := _column_amount(range_size(column), lanes)) is None: return []
    # a column that fills vectors is better, unless its loads are gated along it (a padded conv's
    # input: before masked vector loads its loop stayed scalar, 16 GFLOPS on a 64-channel 32x32 conv;
    # with them the two tiles measure within this machine's noise, and the channel tile stays)
    if column_amount % lanes == 0 and not any(len(ld.src[0].src) > 2 and column in ranges_in(ld.src[0].src[2]) for ld in depends[column]):
        return []
    channel = next((g for g in reversed(globals_) if g in depends and depends[g] and not (depends[g] & depends[column])
                    and range_size(g) % lanes == 0), None)
    if channel is None: return []
    neighbour = next((g for g in reversed(globals_) if g in depends and g is not column and depends[g] == depends[column]), None)
    if column_amount == range_size(column) and column_amount < 6:   # a whole small window (weight gradient)
        tile = [(column, column_amount)]
        if neighbour is not None and range_size(neighbour) <= 5: tile.insert(0, (neighbour, range_size(neighbour)))
        # a 3x3 window reuses the gathered channel vector only 9 times: two input channels at once make 18 (MNIST's
        # 64x64 3x3 weight gradient: 84 -> 170 GFLOPS); a 5x5 window's 25 accumulators leave no room for more
        window = prod(amount for _, amount in tile)
        other = next((g for g in reversed(globals_) if g in depends and depends[g] == depends[column] and g not in (column, neighbour)), None)
        if other is not None and (more := next((a for a in range(18 // window, 1, -1) if range_size(other) % a == 0), None)):
            tile.append((other, more))
    else:
        amount = next(a for a in range(min(MAX_TILE_COLUMNS, range_size(column)), 0, -1) if range_size(column) % a == 0)
        tile = [(column, amount)] if amount > 1 else []
        if neighbour is not None and (more := next((a for a in range(MAX_TILE_POSITIONS // amount, 1, -1) if range_size(neighbour) % a == 0), None)):
            tile.insert(0, (neighbour, more))
    return tile + [(channel, lanes)]

def _one_vector(size: int, lanes: int) -> int:
    """The vector width (4, 8, .. ``lanes``) that a short axis of 3..``lanes`` elements is padded to."""
    return next(w for w in reversed(widths(lanes)) if w >= size)

def _elementwise_vector(ast: UOp, innermost: UOp, lanes: int) -> tuple[int, bool] | None:
    """(lanes, padded) for an elementwise kernel's innermost axis: 16, 8 or 4 when one divides it, else a
    short axis (3..16: a 6-wide image row) padded to one vector (masked lanes), when every load is
    contiguous along it, broadcast, or irregular (a pooling window's ``x // 2``: gathered lane by lane,
    which beats gcc's scalar loop and its branching selects: MNIST's max-pool gradients 23 -> 2.3 ms
    and, padded, 2.6 -> 0.3 ms). A strided load (a transpose) keeps gcc's own scalar loop, which is
    faster for it."""
    loads = [x for x in ast.toposort if x.op is Ops.LOAD and x.src[0].op is Ops.INDEX]
    if any(address_stride(ld.src[0], innermost) not in (0, 1, None) for ld in loads): return None
    if (width := _largest_divisor(range_size(innermost), widths(lanes))) is not None: return width, False
    if isinstance(range_size(innermost), int) and 2 < range_size(innermost) <= lanes: return _one_vector(range_size(innermost), lanes), True
    return None

def _reads_along_rows(column: UOp, reduce: UOp, loads: list[UOp]) -> bool:
    """Is this a reduce down the columns of a row-major matrix (``v @ A``, ``x.sum(0)``): loads contiguous along the
    output axis and strided along the reduce?"""
    along = loads_depending_on(loads, column)
    if not along or any(address_stride(ld.src[0], column) != 1 for ld in along): return False
    return not all(address_stride(ld.src[0], reduce) in (0, 1) for ld in loads_depending_on(loads, reduce))

def _column_sums(column: UOp, reduce: UOp, loads: list[UOp], lanes: int) -> tuple[int, bool] | None:
    """(outputs per vector, padded?) for a reduce down the columns of a row-major matrix: the loads move
    contiguously along the output axis and with a stride along the reduce, so 64 outputs at a time read a row's
    piece as four vectors, where partial sums along the reduce would walk down columns (4096x4096 ``v @ A``
    kernel: 72 ms -> 2.4 ms; 32 outputs: 4.1 ms; numpy 1.6-3.4 ms). A column count no vector width divides is
    padded to whole vectors (masked lanes) where that adds at most an eighth (x.sum(0) of 4095 x 4097: 20 ms
    read down the columns, 3.4 padded)."""
    if not _reads_along_rows(column, reduce, loads): return None
    size = range_size(column)
    if (amount := _largest_divisor(size, widths(4 * lanes))) is not None: return amount, False
    if not isinstance(size, int) or size < 8 * lanes: return None
    return next(w for w in widths(4 * lanes) if -(-size // w) * w <= size * 9 // 8), True

def _pooling_row_vector(globals_: list[UOp], reduces: list[UOp], loads: list[UOp], lanes: int) -> int | None:
    """Lanes for a pooling window's short output row: a small reduce (at most 4x4) over a row of 3 to 16
    outputs that no vector width divides (a 2x2 max-pool of 20-wide rows has 10) is padded to one vector
    (masked lanes), so the data-dependent max runs as vector selects, not branches (MNIST 9.7 -> 0.8 ms)."""
    row = globals_[-1] if globals_ else None
    if row is None or not loads_depending_on(loads, row) or not all(isinstance(range_size(r), int) for r in reduces + [row]): return None
    if prod(range_size(r) for r in reduces) > 16 or not 2 < range_size(row) <= lanes or range_size(row) % 4 == 0: return None
    return _one_vector(range_size(row), lanes)

def _as_opts(axes: list[UOp], choices: list[tuple[UOp, Any, OptOps]]) -> list[Opt]:
    """Turn (axis, amount, op) choices into Opts, following how axis numbers shift: a full-size
    UPCAST/UNROLL removes its axis from the list. For SWAP the 'amount' is the other axis."""
    remaining, opts = list(axes), []
    for rng, amount, op in choices:
        index = remaining.index(rng)
        if op is OptOps.SWAP:
            opts.append(Opt(op, index, remaining.index(amount)))
            continue
        if op is OptOps.STAGE:
            opts.append(Opt(op, index))
            continue
        if op is OptOps.PACK:   # (per iteration of the outermost loop, whichever axis a SWAP put there)
            opts.append(Opt(op, 0))
            continue
        opts.append(Opt(op, index, amount))
        if amount == range_size(rng): remaining.pop(index)
    return opts

def _columns_outside(globals_: list[UOp], tile: list[tuple[UOp, int]]) -> bool:
    """Should a 2-d tile's column loop run outside its row loop? Rows outside stream the column
    operand (B of a matmul) from memory once per row tile, columns outside stream the row operand
    once per column tile: the wider tile side means fewer passes (measured at 8 x 32: 1024 matmul
    231 -> 304 GFLOPS, 2048 152 -> 221 GFLOPS)."""
    if len(globals_) != 2 or len(tile) != 2: return False
    (row, rows), (column, columns) = tile
    return [row, column] == globals_ and rows < range_size(row) and columns < range_size(column) and columns > rows

def _longer_columns_outside(globals_: list[UOp], tile: list[tuple[UOp, int]]) -> bool:
    """Should a dot-product tile's column loop run outside its row loop? Each operand of ``a @ b.T`` is
    its axis times the reduce, so the longer axis has the bigger operand. With that loop outside, its
    tile of rows is read once from memory and the smaller operand streams again per tile, from cache;
    the other order streams the big operand from memory once per row tile (GPT-2's 128x768 @ 768x3072
    Linear, whose 9.4 MB weight doesn't fit L2: 78 -> 25-36 ms on a loaded 2-core machine; a contiguous
    ``x @ w`` register tile measured 16-24 ms in the same runs)."""
    if len(globals_) != 2 or len(tile) != 2: return False
    (row, rows), (column, columns) = tile
    if [row, column] != globals_ or not all(isinstance(range_size(g), int) for g in globals_): return False
    # (a whole-axis upcast leaves no loop to move)
    return rows < range_size(row) and columns < range_size(column) and range_size(column) > range_size(row)

def _packed_tile(ast: UOp, globals_: list[UOp], loads: list[UOp], renderer) -> list[tuple[UOp, Any, OptOps]] | None:
    """A matmul's register tile over packed column panels (``OptOps.PACK``): the usual tile (rows x a vector
    column), the column loop outside, and each column block's slice of the column operand copied into a panel in
    the tile's order. The tile then reads B the same way whatever its layout: ``x @ w.T`` (every Linear layer,
    whose weight rows run along the reduce) no longer needs the dot-product tile, and a big ``x @ w`` no longer
    walks B's rows a matrix width apart. Measured (2 cores, AVX-512): 128x768 @ (3072x768).T 4.9 -> 3.6 ms,
    2048 ``x @ w.T`` 141 -> 80 ms and ``x @ w`` 106 -> 79 ms (205-218 GFLOPS). Only when the panel is reused by
    enough row blocks to repay the copy and fits ``renderer.pack_max_bytes``; else None."""
    if len(globals_) not in (2, 3) or renderer.has_local or not renderer.vector_loops: return None
    tile = _register_tile(globals_, loads, renderer)
    if len(tile) != 2 or [rng for rng, _ in tile] != globals_[-2:]: return None
    (row, rows), (column, columns) = tile
    # a column operand already contiguous along the columns (``x @ w``) gains from its panel only when a big matrix's
    # rows lie far apart (2048: 106 -> 79 ms; 1024: 11.1 -> 10.2 ms): the copy costs more than it saves for 128 rows
    contiguous = all(address_stride(ld.src[0], column) == 1 for ld in loads_depending_on(loads, column))
    if columns % float_lanes(renderer) or not isinstance(range_size(row), int): return None
    if range_size(row) // rows < (64 if contiguous else 8): return None   # (row blocks that reuse each panel)
    # a batch of matmuls (attention's heads) packs per batch element, the outermost loop already: its panel is the
    # whole column operand of one matmul (q @ k.T's 128 keys x 64: 32 KB); a single matmul packs per column block
    choices = [(row, rows, OptOps.UPCAST), (column, columns, OptOps.UPCAST)]
    choices += [(row, column, OptOps.SWAP), (column, 0, OptOps.PACK)] if len(globals_) == 2 else [(globals_[0], 0, OptOps.PACK)]
    try:
        for opt in _as_opts(kernel_axes(ast), choices): ast = apply_opt(ast, opt, renderer)
    except KernelOptError: return None   # (no panel fits)
    return choices

def _register_tile_choices(globals_: list[UOp], loads: list[UOp], renderer) -> list[tuple[UOp, Any, OptOps]]:
    """The usual register tile as choices: its upcasts, then the column loop outside when that pays."""
    tile = _register_tile(globals_, loads, renderer)
    choices = [(rng, amount, OptOps.UPCAST) for rng, amount in tile]
    return choices + ([(tile[0][0], tile[1][0], OptOps.SWAP)] if tile and _columns_outside(globals_, tile) else [])

def _reduce_loads(ast: UOp, reduces: list[UOp]) -> list[UOp]:
    """The loads the (first) reduce loop repeats: one that doesn't move along a reduce (a norm's mean, a bias) is read
    once per output whatever the tile, so it neither makes a register tile pay nor decides its shape (a BatchNorm
    variance's per-channel mean made a 32-row gathered tile: 5.4 ms, where partial sums take 0.9 ms)."""
    first = next(x for x in ast.toposort if x.op is Ops.REDUCE)
    return [ld for ld in dict.fromkeys(x for x in first.src[0].toposort if x.op is Ops.LOAD) if any(r in ranges_in(ld.src[0]) for r in reduces)]

def _reduce_choices(ast: UOp, renderer, globals_: list[UOp], reduces: list[UOp], loads: list[UOp]) -> list[tuple[UOp, int, OptOps]]:
    """The first strategy that fits a reduce kernel, as (axis, amount, action) choices: a register tile over
    packed panels (a big enough matmul), a dot-product tile (inputs contiguous along the reduce), a channel-vector
    tile (convs), the usual register tile (matmul), row tiles for column reductions, or partial-sum lanes for a
    long reduce."""
    lanes = renderer.max_vector_bytes // 4 if renderer.vector_loops else 0
    tiled = len(globals_) >= 2 and len(loads) >= 2
    if lanes and tiled and (packed := _packed_tile(ast, globals_, loads, renderer)): return packed
    if lanes and tiled and (dot := _dot_product_tile(globals_, reduces, loads, lanes, renderer)):
        tile, width = dot
        choices = [(rng, amount, OptOps.UPCAST) for rng, amount in tile] + [(reduces[-1], width, OptOps.UNROLL)]
        return choices + ([(tile[0][0], tile[1][0], OptOps.SWAP)] if _longer_columns_outside(globals_, tile) else [])
    # (a short reduce, like a 1-channel conv's 25 taps, can't pay for storing channel vectors lane by lane)
    long_reduce = all(isinstance(range_size(r), int) for r in reduces) and prod(range_size(r) for r in reduces) >= 64
    if lanes and tiled and long_reduce and (tile := _channel_tile(globals_, loads, lanes)):
        # channel loads that aren't contiguous get a contiguous copy if small enough (else lanes are gathered)
        channel, choices = tile[-1][0], []
        if any(address_stride(ld.src[0], channel) != 1 for ld in loads_depending_on(loads, channel)) and staged_loads(ast, channel, renderer):
            choices.append((channel, 0, OptOps.STAGE))
        return choices + [(rng, amount, OptOps.UPCAST) for rng, amount in tile]
    if lanes and (width := _pooling_row_vector(globals_, reduces, loads, lanes)):
        return [(globals_[-1], width, OptOps.PADTO), (globals_[-1], width, OptOps.UPCAST)]
    if tiled and (choices := _register_tile_choices(globals_, loads, renderer)): return choices
    if len(globals_) == 1 and (sums := _column_sums(globals_[0], reduces[-1], loads, float_lanes(renderer))) and (lanes or not sums[1]):
        columns, padded = sums
        return ([(globals_[0], columns, OptOps.PADTO)] if padded else []) + [(globals_[0], columns, OptOps.UPCAST)]
    # a long reduction: partial sums in lanes (C can't reorder float adds into vectors itself), on the
    # innermost reduce axis with a vector-width size; else that axis padded to a whole vector when it is long (a
    # 4097-long row: no lanes at all, serial adds, 7 ms for 4095 rows; padded, 1.9), else its largest small divisor
    if all(isinstance(range_size(r), int) for r in reduces) and prod(range_size(r) for r in reduces) >= 64:
        partial_sums = widths(float_lanes(renderer))
        lane_axis = next((r for r in reversed(reduces) if _largest_divisor(range_size(r), partial_sums)), None)
        # (the innermost axis is the contiguous one: lanes along an outer one would gather)
        if lane_axis is not reduces[-1] and lanes and range_size(reduces[-1]) >= 8 * partial_sums[0]:
            return [(reduces[-1], partial_sums[0], OptOps.PADTO), (reduces[-1], partial_sums[0], OptOps.UNROLL)]
        if lane_axis is None: lane_axis = reduces[-1]
        if (amount := _tile_amount(range_size(lane_axis), partial_sums, partial_sums[0])) is not None and amount >= 4:
            return [(lane_axis, amount, OptOps.UNROLL)]
    return []

def _tensor_core_opts(ast: UOp, renderer) -> list[Opt]:
    """TC on the first choice (contiguous b rows), then a register tile of instructions, then threads; [] when no
    TC applies.

    Where the b panel is reused by enough row blocks (a CPU renderer, 64+ of them), the tile is 2 column blocks
    (32 columns) by 8 rows, the column loop runs outside and each column block's b rows are packed (``PACK``, one
    panel for an instruction's lanes): 16 accumulators, and b read from a contiguous panel instead of rows a
    matrix width apart. Unpacked, a power-of-two width put those rows in a few cache sets: 2048 ran at 285
    GFLOPS, 2032 at 371-385 (bfloat16 on AVX512-BF16, 2 cores); packed, 2048 runs at 417 and 1024 at 395-402
    (PyTorch/oneDNN 405 and 433). b read along its rows (``x @ w.T``, a Linear layer's layout) packs from 8 row
    blocks (bf16 128x768 @ (3072x768).T: 97 -> 291 GFLOPS, 128x3072 @ (768x3072).T: 26 -> 301), and with fewer
    rows the CPU runs it without the tensor core ([]). Otherwise 4 column blocks by 8 rows, 32 accumulators: the
    choice measured on an earlier host (1024: 417 GFLOPS there, 250-306 on this one, where that tile spills)."""
    choices = tensor_core_choices(ast, renderer, int(TC_OPT.value))
    if not choices: return []
    _, _, a, b, n, m, _ = choices[0]
    opts = [Opt(OptOps.TC, 0, int(TC_OPT.value))]
    try: tiled = apply_opt(ast, opts[0], renderer)
    except KernelOptError: return []
    axes = kernel_axes(tiled)
    column = next(r for r in axes if r.arg[0] == n.arg[0])
    # (TC keeps range ids) the row axis: one that only the a operand depends on, m if the instruction has rows
    a_ids, b_ids = {r.arg[0] for r in ranges_in(a)}, {r.arg[0] for r in ranges_in(b)}
    row = next((r for r in reversed(axes) if r.arg[1] is not AxisType.REDUCE and r.arg[0] in a_ids - b_ids and
                (m is None or r.arg[0] == m.arg[0])), None)
    # (b read along its rows, ``x @ w.T``: each lane a row apart, so a panel pays off from 8 row blocks)
    loaded = under_pad_gate(b)
    contiguous = loaded.op is Ops.LOAD and address_stride(loaded.src[0], n) == 1
    packed = _packed_tensor_core_tile(tiled, axes, row, column, renderer, 64 if contiguous else 8)
    # unpacked, such a b gathers every lane from another row: a few rows (bf16 8x768 @ (3072x768).T: 2.2 ms,
    # 17 GFLOPS) run faster without the tensor core, as dot products along b's rows (0.38 ms)
    if packed is None and not contiguous and not renderer.has_local: return []
    if packed is not None: opts, tiled = opts + packed[0], packed[1]
    else:
        tile = [(column, _largest_divisor(range_size(column), (4, 2)), OptOps.UPCAST)]
        if row is not None: tile.append((row, _largest_divisor(range_size(row), (8, 4, 2)), OptOps.UPCAST))
        opts += _as_opts(axes, [c for c in tile if c[1] is not None])
        for o in opts[1:]: tiled = apply_opt(tiled, o, renderer)
    sizes = [range_size(r) for r in kernel_axes(ast)]
    work = prod(sizes) if all(isinstance(s, int) for s in sizes) else 0
    if renderer.has_threads and cpu_count() > 1 and work >= getenv("THREAD_MIN_WORK", 1 << 20):
        first = kernel_axes(tiled)[0]
        if first.arg[1] in (AxisType.GLOBAL, AxisType.LOOP) and isinstance(range_size(first), int) and range_size(first) >= cpu_count():
            opts.append(Opt(OptOps.THREAD, 0, cpu_count()))
    return opts

def _packed_tensor_core_tile(tiled: UOp, axes: list[UOp], row: UOp | None, column: UOp, renderer,
                             min_row_blocks: int) -> tuple[list[Opt], UOp] | None:
    """The packed tile of ``_tensor_core_opts`` (8 rows x 2 column blocks, columns outside, b packed) as opts after
    TC and the kernel they make, or None where it doesn't apply: a workgroup renderer, a batch of matmuls (more
    than the two global axes), fewer than ``min_row_blocks`` row blocks to reuse each panel, or no panel that fits."""
    globals_ = [r for r in axes if r.arg[1] in (AxisType.GLOBAL, AxisType.LOOP)]
    if renderer.has_local or row is None or globals_ != [row, column] or not all(isinstance(range_size(r), int) for r in globals_): return None
    if range_size(column) % 2 or range_size(row) % 8 or range_size(row) // 8 < min_row_blocks: return None
    choices = [(column, 2, OptOps.UPCAST), (row, 8, OptOps.UPCAST), (row, column, OptOps.SWAP), (column, 0, OptOps.PACK)]
    opts = _as_opts(axes, choices)
    try:
        for opt in opts: tiled = apply_opt(tiled, opt, renderer)
    except KernelOptError: return None
    return opts, tiled

def _matmul_axes(globals_: list[UOp], reduces: list[UOp], loads: list[UOp]) -> tuple[UOp, UOp] | None:
    """(row, column) of a plain matmul (an optional batch axis first): one reduce, two loads, one moving along the
    row and the reduce, the other along the reduce and the column."""
    if len(reduces) != 1 or len(loads) != 2 or len(globals_) not in (2, 3): return None
    row, column = globals_[-2:]
    if not all(isinstance(range_size(r), int) for r in (row, column, reduces[0])): return None
    first, second = (frozenset(r for r in (row, column, reduces[0]) if r in ranges_in(ld.src[0])) for ld in loads)
    return (row, column) if {first, second} == {frozenset((row, reduces[0])), frozenset((reduces[0], column))} else None

def _conv_axes(globals_: list[UOp], loads: list[UOp], lanes: int) -> list[tuple[UOp, tuple[int, ...]]] | None:
    """The axes of a conv-like register tile that odd sizes leave poor, with the multiples to pad them to: the output
    channels (the tile's rows or a channel tile's vector: 16, else 8) and the image row (the tile's column: 16).
    None for a kernel that isn't tiled that way."""
    _, column, rows = _tile_axes(globals_, loads)
    if column is None: return None
    return ([(rows[0], (lanes, 8))] if rows else []) + [(column, (lanes,))]

def _padded_tile_choices(ast: UOp, renderer, globals_: list[UOp], reduces: list[UOp], loads: list[UOp]) -> list | None:
    """A matmul or conv whose tile axes no good tile divides is padded up to sizes one does (PADTO: a matmul's rows to
    a multiple of 8 and columns to one of two vectors or one, a conv's output channels and image row as
    ``_conv_axes`` says), then tiled as usual; the padding's loads read 0 (gated) and its stores are masked. Without it
    the tile was made of divisors: 1023 (3 x 11 x 31) got a 3 x 11 tile, 35-41 GFLOPS, and 999 x 1001 x 997 (997 is
    prime) none at all, 4 GFLOPS. Only where the padding adds at most an eighth of an axis; None where nothing needs
    padding (or it wouldn't pay)."""
    if not renderer.vector_loops or len(globals_) < 2 or len(loads) < 2: return None
    lanes = float_lanes(renderer)
    if (matmul := _matmul_axes(globals_, reduces, loads)) is not None: candidates = list(zip(matmul, ((8,), (2 * lanes, lanes))))
    elif len(globals_) == 4 and (conv := _conv_axes(globals_, loads, lanes)) is not None: candidates = conv
    else: return None
    pads = []
    for rng, multiples in candidates:
        size = range_size(rng)
        if not isinstance(size, int) or size % multiples[-1] == 0: continue
        amount = next((m for m in multiples if -(-size // m) * m <= size * 9 // 8), None)
        if amount is None:
            if matmul is not None: return None
            continue
        pads.append((rng, amount, OptOps.PADTO))
    if not pads: return None
    padded = ast
    try:
        for opt in _as_opts(kernel_axes(ast), pads): padded = apply_opt(padded, opt, renderer)
    except KernelOptError: return None
    # the padded kernel's choices name its ranges: map them back to this kernel's (same ids, new sizes)
    original = {r.arg: r for r in kernel_axes(ast)}
    new_axes = kernel_axes(padded)
    new_globals = [r for r in new_axes if r.arg[1] is not AxisType.REDUCE]
    new_reduces = [r for r in new_axes if r.arg[1] is AxisType.REDUCE]
    new_loads = _reduce_loads(padded, new_reduces)
    if matmul is None: choices = _reduce_choices(padded, renderer, new_globals, new_reduces, new_loads)
    # a matmul's tiles only: the packed one, else the plain register tile (the gates PADTO adds aren't a conv's channels)
    else: choices = _packed_tile(padded, new_globals, new_loads, renderer) or _register_tile_choices(new_globals, new_loads, renderer)
    back = lambda x: original.get(x.arg, x) if isinstance(x, UOp) else x
    return pads + [(back(rng), back(amount), op) for rng, amount, op in choices]

def hand_coded_optimizations(ast: UOp, renderer) -> list[Opt]:
    """Defaults without search: the renderer's tensor core where one computes the reduce (bfloat16
    matmul on the CPU; ``TC=0`` turns that off), register tiles for reduces with several outputs (matmul; conv tiles
    with a channel vector and staged weights), 64-output row tiles for reductions down matrix
    columns, partial-sum lanes for other long reductions, vector lanes for elementwise kernels, and
    threads for big enough kernels (docs/decisions.md, "Codegen on the CPU", has the measurements).

    >>> # (a @ b) on 1024x1024 gets an 8 x 32 register tile and threads:
    >>> # [Opt(UPCAST, 0, 8), Opt(UPCAST, 1, 32), Opt(THREAD, 0, 2)]
    """
    if renderer.gpu_heuristic:   # workgroup renderers (OpenCL, CUDA): their own defaults, tensor cores included
        return gpu_optimizations(ast, renderer)
    if USE_TC and renderer.tensor_cores and (tc_opts := _tensor_core_opts(ast, renderer)): return tc_opts
    axes = kernel_axes(ast)
    globals_ = [r for r in axes if r.arg[1] is not AxisType.REDUCE]
    reduces = [r for r in axes if r.arg[1] is AxisType.REDUCE]
    reduce_nodes = [x for x in ast.toposort if x.op is Ops.REDUCE]
    work = prod(range_size(r) for r in axes) if all(isinstance(range_size(r), int) for r in axes) else 0
    choices: list[tuple[UOp, int, OptOps]] = []
    if reduce_nodes and reduces and len(reduce_nodes) <= 4:
        loads = _reduce_loads(ast, reduces)
        choices = _padded_tile_choices(ast, renderer, globals_, reduces, loads) or _reduce_choices(ast, renderer, globals_, reduces, loads)
    elif not reduce_nodes and globals_ and renderer.vector_loops and work >= 1 << 16 and \
            (vector := _elementwise_vector(ast, globals_[-1], float_lanes(renderer))):
        lanes, padded = vector
        choices += ([(globals_[-1], lanes, OptOps.PADTO)] if padded else []) + [(globals_[-1], lanes, OptOps.UPCAST)]
    opts = _as_opts(axes, choices)
    threads = cpu_count()
    # threads pay off only when a kernel runs well above the cost of waking them (~tens of us). An elementwise
    # kernel's work is its elements times its cost per element: random numbers (threefry: ~100 integer ops per
    # element; Box-Muller's log, sqrt and cos polynomials) are worth threads at a quarter million elements
    if not reduce_nodes: work *= max(1, sum(1 for x in ast.toposort if x.op in GroupOp.ALU) // 16)
    if renderer.has_threads and threads > 1 and globals_ and work >= getenv("THREAD_MIN_WORK", 1 << 20):
        first = next((g for g in globals_ if all(g is not c[0] or c[1] != range_size(g) for c in choices)), None)
        outer = range_size(first) // next((c[1] for c in choices if c[0] is first and c[2] is OptOps.UPCAST), 1) if first is not None and isinstance(range_size(first), int) else 0
        if first is globals_[0] and outer >= threads: opts.append(Opt(OptOps.THREAD, 0, threads))
    return opts
