"""Kernel optimization: small named actions on a kernel's ranges, a heuristic that picks them, and BEAM
search over them.

- ``actions.py``: ``Opt``, ``OptOps``, ``KernelOptError``, ``apply_opt`` and each action's rewrite
  (the table of actions and their legality is its module doc);
- ``heuristic.py``: ``hand_coded_optimizations``, the defaults without search (CPU register tiles, lanes,
  threads), handing workgroup renderers to ``gpu_heuristic.py`` and tensor-core kernels to ``tc.py``;
- ``search.py``: ``beam_search``, timing candidate action lists on the device;
- ``tc.py``: ``OptOps.TC``, a reduce on a matrix instruction the renderer declares;
- the kernel helpers they share with lowering (axes, range sizes, free ranges, ...) are in codegen/kernel.py.

``optimize_kernel(ast, renderer, opts)`` returns the rewritten AST and the applied opts. This package
re-exports the public names (and the older private helper names tests use) from its modules.
"""
from __future__ import annotations
from fusegrad.helpers import NOOPT, BEAM, DEBUG
from fusegrad.uop.ops import UOp
from fusegrad.codegen.kernel import KernelInfo, kernel_info, range_size, kernel_axes, colored_shape, local_axes, grouped_partial_slots, \
    shared_memory_bytes, free_ranges, ranges_in, loads_depending_on, address_stride
from fusegrad.codegen.opt.actions import Opt, OptOps, KernelOptError, apply_opt
from fusegrad.codegen.opt.heuristic import hand_coded_optimizations, cpu_count
from fusegrad.codegen.opt.search import beam_search

# the helper names from before codegen/kernel.py (tests and gpu_heuristic.py's first version used them)
_size, _loads_depending_on, _stride = range_size, loads_depending_on, address_stride

__all__ = ["Opt", "OptOps", "KernelOptError", "apply_opt", "optimize_kernel", "hand_coded_optimizations", "beam_search",
           "cpu_count", "KernelInfo", "kernel_info", "range_size", "kernel_axes", "colored_shape", "local_axes", "grouped_partial_slots",
           "shared_memory_bytes", "free_ranges", "ranges_in", "loads_depending_on", "address_stride"]

def optimize_kernel(ast: UOp, renderer, opts: list | None = None) -> tuple[UOp, tuple]:
    """Apply ``opts`` (or the heuristic's choice, or BEAM's with ``BEAM>=1``)."""
    if NOOPT and opts is None: return ast, ()
    if opts is None and BEAM >= 1:
        opts = beam_search(ast, renderer, int(BEAM.value))
    if opts is None:
        opts = hand_coded_optimizations(ast, renderer)
        applied = []
        for opt in opts:
            try:
                ast = apply_opt(ast, opt, renderer)
                applied.append(opt)
            except KernelOptError:
                if DEBUG >= 3: print(f"opt: skipped {opt} (not applicable)")
    else:
        applied = []
        for opt in opts:
            ast = apply_opt(ast, opt, renderer)
            applied.append(opt)
    if DEBUG >= 3: print(f"opt: {colored_shape(ast)}  applied {applied}")
    return ast, tuple(applied)
