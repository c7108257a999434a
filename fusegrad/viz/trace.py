"""VIZ=1: record what the compiler did, for the web page (``fusegrad/viz/server.py``).

Recorded per run: every schedule (its kernels, in order) and, per kernel, each stage of ``get_program`` (the UOp
graph after it, the rules that fired in it), the optimizer's actions, the generated source and the linear program.
Graphs are turned into plain JSON-able dicts when recorded, so the trace holds no reference to a UOp: tracing keeps
no graph alive (test/viz/test_trace.py checks with a weak reference). With VIZ=0 nothing is installed and the
callers' ``if VIZ:`` checks are the only cost.
"""
from __future__ import annotations
import itertools
from typing import Any
from fusegrad.helpers import VIZ

MAX_NODES = 400   # a bigger graph is recorded truncated (its first nodes in topological order), so the page stays usable

schedules: list[dict[str, Any]] = []
kernels: list[dict[str, Any]] = []
_current: dict[str, Any] | None = None    # the kernel being generated
_fired: list[str] | None = None            # rules fired in the current stage
_ids = itertools.count()

def graph_json(root: Any) -> dict[str, Any]:
    """A UOp graph as {"nodes": [{id, op, dtype, arg}], "edges": [[src, dst]]} (no reference to the UOps)."""
    nodes = root.toposort if hasattr(root, "toposort") else []
    nodes = list(nodes)[:MAX_NODES]
    index = {node: i for i, node in enumerate(nodes)}
    return {"nodes": [{"id": i, "op": n.op.name, "dtype": repr(n.dtype), "arg": _short(n.arg)} for n, i in index.items()],
            "edges": [[index[s], index[n]] for n in nodes for s in n.src if s in index],
            "truncated": len(index) < len(list(root.toposort)) if hasattr(root, "toposort") else False}

def _short(arg: Any) -> str:
    text = repr(arg) if arg is not None else ""
    return text if len(text) <= 60 else text[:57] + "..."

def _rewrite_traced(self: Any, u: Any, ctx: Any = None) -> Any:
    """PatternMatcher.rewrite while VIZ records: the same search, also noting which rule fired."""
    for pat, fn, wants_ctx in self.by_op[u.op]:
        for captures in pat.match(u, {}):
            result = fn(ctx=ctx, **captures) if wants_ctx else fn(**captures)
            if result is not None and result is not u:
                if _fired is not None: _fired.append(f"{getattr(fn, '__qualname__', repr(fn))}: {u.op.name} -> {result.op.name}")
                return result
    return None

_original_rewrite = None

def enable() -> None:
    """Start recording rule firings (called once VIZ is seen on); the page is served at exit."""
    global _original_rewrite
    from fusegrad.uop.ops import PatternMatcher
    import fusegrad.viz.server  # noqa: F401  (registers the serve-at-exit hook)
    if _original_rewrite is None:
        _original_rewrite = PatternMatcher.rewrite
        PatternMatcher.rewrite = _rewrite_traced   # type: ignore[method-assign]

def disable() -> None:
    """Stop recording rule firings (PatternMatcher.rewrite is the plain one again)."""
    global _original_rewrite
    from fusegrad.uop.ops import PatternMatcher
    if _original_rewrite is not None:
        PatternMatcher.rewrite = _original_rewrite   # type: ignore[method-assign]
        _original_rewrite = None

def record_schedule(items: list) -> None:
    """A schedule: the kernels (by AST) it runs, in order. Kernel names are filled in as they are generated."""
    if not VIZ: return
    schedules.append({"id": len(schedules), "items": [_item_label(item) for item in items]})

def _item_label(item: Any) -> str:
    ast = item.ast
    if ast.op.name == "COPY": return "copy"
    from fusegrad.codegen import kernel_name
    try: return kernel_name(ast)
    except Exception: return ast.op.name

def begin(ast: Any, renderer: Any) -> dict[str, Any]:
    """Start recording the code generation of one kernel (callers check VIZ first); ``ast`` is its first step."""
    global _current, _fired
    enable()
    record = {"id": next(_ids), "name": "", "device": getattr(renderer, "device", ""), "steps": [], "opts": [], "src": "", "uops": []}
    _current, _fired = record, []
    stage("input (the scheduled kernel)", ast)
    return record

def stage(name: str, graph: Any) -> None:
    """The graph after stage ``name`` of the current kernel, with the rules that fired since the last stage."""
    global _fired
    if _current is None: return
    _current["steps"].append({"name": name, "rules": list(_fired or []), "graph": graph_json(graph)})
    _fired = []

def finish(record: dict[str, Any], program: Any) -> None:
    """The kernel's name, optimizer actions, source and linear program; the kernel joins ``kernels``."""
    global _current, _fired
    _current, _fired = None, None
    kernels.append(record)
    record.update(name=program.name, opts=[str(o) for o in program.applied_opts] if hasattr(program, "applied_opts") else [],
                  src=program.src, uops=[f"{i:4d} {u.op.name:12s} {u.dtype!r:24s} {_short(u.arg)}" for i, u in enumerate(program.uops)])

def data() -> dict[str, Any]:
    """Everything recorded, as the page reads it."""
    return {"schedules": schedules, "kernels": kernels}

def clear() -> None:
    schedules.clear(); kernels.clear()
