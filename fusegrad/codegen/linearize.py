"""Linearize: order a kernel's UOp graph into a list with properly nested loops.

Every UOp has a *context*: the set of RANGEs (open loops) it must run inside. It is the union of
its sources' contexts, plus itself for a RANGE, minus the ranges an END closes, plus every loop
those ranges run inside (``loop_nesting`` derives the nest from the graph: a RANGE carries only
its trip count). A context is then exactly the stack of loops that must be open to emit the UOp.

The emitter keeps a stack of open loops and repeats:
  1. emit any ready UOp whose context is exactly the open stack (so work is hoisted out of every
     loop it does not depend on: loop-invariant code motion comes for free);
  2. else close the innermost loop if nothing left needs it;
  3. else open a ready child loop whose body's outside inputs are all emitted.
END nodes in the graph only mark where a reduce's loops must be closed; the emitter writes its
own END when it closes a loop.
"""
from __future__ import annotations
import heapq
from fusegrad.uop.ops import UOp, Ops
from fusegrad.codegen.kernel import loop_nesting, open_ranges

def linearize(sink: UOp) -> list[UOp]:
    """Order ``sink``'s graph for a renderer (see docs/linear_uops.md). The SINK itself is omitted."""
    order = [x for x in sink.toposort if x is not sink]
    position = {x: i for i, x in enumerate(order)}
    try: nesting = loop_nesting(sink)
    except ValueError as e: raise RuntimeError(f"linearize: {e}") from None
    context: dict[UOp, frozenset[UOp]] = {}
    closed_context: dict[frozenset, frozenset] = {}   # (few distinct contexts: close each once)
    for x, ctx in open_ranges(sink).items():
        if ctx not in closed_context: closed_context[ctx] = ctx.union(*(nesting[r] for r in ctx))
        context[x] = closed_context[ctx]

    real = [x for x in order if x.op not in (Ops.END,)]
    # how many UOps still to emit inside each loop
    remaining: dict[UOp, int] = {r: 0 for r in order if r.op is Ops.RANGE}
    for x in real:
        if x.op is Ops.RANGE: continue
        for r in context[x]: remaining[r] += 1
    # UOps outside a loop that its body reads: they must be emitted before the loop opens
    outside_inputs: dict[UOp, set[UOp]] = {r: set() for r in remaining}
    for x in real:
        for s in x.src:
            for r in context[x] - context[s]:
                if s.op is not Ops.RANGE or s is not r: outside_inputs[r].add(s)
    users: dict[UOp, list[UOp]] = {}
    for x in order:
        for s in set(x.src): users.setdefault(s, []).append(x)
    waiting = {x: len(set(x.src)) for x in order}

    emitted: list[UOp] = []
    done: set[UOp] = set()
    stack: list[UOp] = []
    ready_work: dict[frozenset, list[tuple[int, UOp]]] = {}
    ready_ranges: list[tuple[int, UOp]] = []
    ready_ends: list[UOp] = []

    def mark_done(x: UOp) -> None:
        done.add(x)
        for user in users.get(x, []):
            waiting[user] -= 1
            if waiting[user] == 0: make_ready(user)

    def make_ready(x: UOp) -> None:
        if x.op is Ops.END: ready_ends.append(x)
        elif x.op is Ops.RANGE: heapq.heappush(ready_ranges, (position[x], x))
        else: heapq.heappush(ready_work.setdefault(context[x], []), (position[x], x))

    for x in order:
        if waiting[x] == 0: make_ready(x)

    def settle_ends() -> None:
        # an END is satisfied once its sources are done and its loops are closed
        progress = True
        while progress:
            progress = False
            for end in list(ready_ends):
                if not any(s in stack for s in end.src if s.op is Ops.RANGE):
                    ready_ends.remove(end)
                    mark_done(end)
                    progress = True

    while len(done) < len(order):
        settle_ends()
        current = frozenset(stack)
        queue = ready_work.get(current)
        if queue:
            _, x = heapq.heappop(queue)
            emitted.append(x)
            for r in context[x]: remaining[r] -= 1
            mark_done(x)
            continue
        if stack and remaining[stack[-1]] == 0:
            closing = stack.pop()
            emitted.append(UOp(Ops.END, src=(closing,)))
            continue
        openable = [(p, r) for p, r in ready_ranges if context[r] - {r} == current and outside_inputs[r] <= done]
        if openable:
            p, r = min(openable)
            ready_ranges.remove((p, r))
            heapq.heapify(ready_ranges)
            emitted.append(r)
            stack.append(r)
            mark_done(r)
            continue
        if not stack and not ready_ranges and not any(ready_work.values()) and not ready_ends:
            break
        stuck = [x for x in order if x not in done][:5]
        raise RuntimeError(f"linearize is stuck with open loops {[r.arg for r in stack]}; waiting: {[x.op for x in stuck]}")
    while stack: emitted.append(UOp(Ops.END, src=(stack.pop(),)))
    return _drop_virtual_sources(emitted)

def _drop_virtual_sources(emitted: list[UOp]) -> list[UOp]:
    """Graph ENDs only order things and are never emitted: drop them from their users' sources so
    every source in the list appears earlier in the list."""
    mapped: dict[UOp, UOp] = {}
    result = []
    for u in emitted:
        src = tuple(mapped[s] for s in u.src if s in mapped)
        new = u if src == u.src else u.replace(src=src)
        mapped[u] = new
        result.append(new)
    return result
