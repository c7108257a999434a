"""The IR: UOp, Ops, patterns and rewrites (see ops.py), symbolic rules (symbolic.py)."""
from fusegrad.uop.ops import UOp, Ops, GroupOp, AxisType, UPat, PatternMatcher, graph_rewrite, Variable, sint
