"""Kernel optimization: named actions on ranges (UPCAST, UNROLL, LOCAL, GROUP, THREAD, ...),
a hand-written heuristic that picks defaults, and BEAM search.

``optimize_kernel(ast, renderer, opts)`` returns the rewritten AST and the applied opts. With
NOOPT=1, or when no action applies, the AST is returned unchanged.
"""
from __future__ import annotations
from fusegrad.uop.ops import UOp
from fusegrad.helpers import NOOPT

class KernelOptError(Exception):
    """An optimization action that is not legal for this kernel."""

def optimize_kernel(ast: UOp, renderer, opts: list | None = None) -> tuple[UOp, tuple]:
    if NOOPT or not opts: return ast, ()
    raise KernelOptError(f"optimization actions are not implemented yet: {opts}")
