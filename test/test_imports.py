"""The core's module-level import graph has no cycles and follows DESIGN.md's layering.

Only module-level imports count (what runs when a module is first imported): imports inside functions
(deliberate upward calls, made on use) and under ``if TYPE_CHECKING:`` are skipped. The graph is read
from the source with ``ast``, so a cycle is caught even where import order happens to hide it.
"""
from __future__ import annotations
import ast, pathlib
import pytest

PACKAGE_ROOT = pathlib.Path(__file__).resolve().parents[1] / "fusegrad"
# the core: IR and base modules, then the pipeline's layers (DESIGN.md, "The pipeline")
CORE = ("fusegrad.uop", "fusegrad.dtype", "fusegrad.helpers", "fusegrad.device", "fusegrad.buffers", "fusegrad.schedule",
        "fusegrad.codegen", "fusegrad.renderer", "fusegrad.engine", "fusegrad.runtime", "fusegrad.tensor")

def _module_files() -> dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE_ROOT.rglob("*.py"):
        parts = ("fusegrad",) + path.relative_to(PACKAGE_ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if any(name == c or name.startswith(c + ".") for c in CORE): found[name] = path
    return found

MODULES = _module_files()

def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")

def _module_level_imports(body: list[ast.stmt]):
    """Import statements that run on import: the module body, its classes, and its if/try/with blocks (not functions)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)): yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node): yield from _module_level_imports(node.body)
            yield from _module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)): yield from _module_level_imports(block)
        elif isinstance(node, (ast.With, ast.ClassDef)): yield from _module_level_imports(node.body)

def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The core modules an import statement names (``from pkg import sub`` names the submodule ``pkg.sub``)."""
    if isinstance(node, ast.Import): names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:   # relative: from the module's package
            package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
            base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
    return [n for n in dict.fromkeys(names) if n in MODULES]

def import_graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[module] = {t for node in _module_level_imports(tree.body) for t in _targets(module, node) if t != module}
    return graph

def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}   # 1 on the current path, 2 done
    path: list[str] = []
    def visit(m: str) -> list[str] | None:
        state[m] = 1; path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1: return path[path.index(n):] + [n]
            if n not in state and (cycle := visit(n)): return cycle
        state[m] = 2; path.pop()
        return None
    for m in sorted(graph):
        if m not in state and (cycle := visit(m)): return cycle
    return None

def test_the_graph_is_read():
    graph = import_graph()
    # facts of the layout, so a walk that silently finds nothing fails here
    assert "fusegrad.codegen.opt.actions" in graph["fusegrad.codegen.opt.heuristic"]
    assert "fusegrad.codegen.kernel" in graph["fusegrad.codegen.lowering"]
    assert "fusegrad.buffers" in graph["fusegrad.engine.jit"]
    assert "fusegrad.device" in graph["fusegrad.buffers"]

def test_cycle_finder_finds_a_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None

def test_no_import_cycles_in_the_core():
    assert (cycle := _find_cycle(import_graph())) is None, "module-level import cycle: " + " -> ".join(cycle)

def _layer(module: str) -> str:
    for layer in ("schedule", "codegen", "renderer", "engine", "runtime"):
        if module == f"fusegrad.{layer}" or module.startswith(f"fusegrad.{layer}."): return layer
    return "tensor" if module == "fusegrad.tensor" else "base"

# what each layer may not import at module level (data flows front end -> schedule -> codegen -> renderer -> runtime;
# the engine drives them all; base modules (uop, dtype, helpers, device, buffers) sit below everything)
FORBIDDEN = {
    "base": {"schedule", "codegen", "renderer", "engine", "runtime", "tensor"},
    "schedule": {"codegen", "renderer", "engine", "runtime", "tensor"},
    "codegen": {"schedule", "engine", "runtime", "tensor"},
    "renderer": {"schedule", "codegen", "engine", "runtime", "tensor"},
    "runtime": {"schedule", "codegen", "engine", "tensor"},
    "engine": {"tensor"},
}

@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layering(layer):
    graph = import_graph()
    wrong = sorted(f"{m} -> {t}" for m, targets in graph.items() if _layer(m) == layer for t in targets if _layer(t) in FORBIDDEN[layer])
    assert not wrong, f"{layer} imports a layer above it at module level: {wrong}"

def test_buffer_registry_is_one_object():
    import fusegrad.buffers, fusegrad.schedule
    assert fusegrad.schedule.BUFFERS is fusegrad.buffers.BUFFERS and fusegrad.schedule.buffer_of is fusegrad.buffers.buffer_of

def test_opt_package_keeps_its_names():
    from fusegrad.codegen import opt
    from fusegrad.codegen.opt import actions, heuristic, search, tc
    from fusegrad.codegen import kernel
    assert opt.apply_opt is actions.apply_opt and opt.Opt is actions.Opt and opt.KernelOptError is actions.KernelOptError
    assert opt.hand_coded_optimizations is heuristic.hand_coded_optimizations and opt.beam_search is search.beam_search
    assert opt.search is search and opt.tc is tc
    assert opt.kernel_axes is kernel.kernel_axes and opt._size is kernel.range_size and opt.free_ranges is kernel.free_ranges
