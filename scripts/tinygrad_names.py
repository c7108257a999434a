"""Write test/fixtures/tinygrad_0_14_names.json: the public names of tinygrad's API, for
test/test_api_names.py (which checks that fusegrad has each one, or allow-lists it with a reason).

Run with tinygrad installed (DEV=PYTHON needs no compiler):  DEV=PYTHON python scripts/tinygrad_names.py

What counts as a public name (no leading underscore):
- classes (Tensor, UOp, dtypes, a DType instance): every attribute, inherited ones included;
- modules: what the module defines itself, and its subpackages; a name it only imports from another
  module (``Tensor`` in nn.state, ``TRAINING`` in nn.optim, stdlib helpers) is not its API. The top-level
  package is the exception: it exists to re-export, so every tinygrad object in it counts.
"""
from __future__ import annotations
import importlib, inspect, json, pathlib, sys, types

OUT = pathlib.Path(__file__).resolve().parent.parent / "test" / "fixtures" / "tinygrad_0_14_names.json"

def public(names) -> list[str]: return sorted(n for n in names if not n.startswith("_"))

def is_tinygrad_module(value) -> bool: return isinstance(value, types.ModuleType) and value.__name__.startswith("tinygrad")

def defined_in(value, module_name: str) -> bool:
    return getattr(value, "__module__", None) == module_name

def imported_from_elsewhere(module: types.ModuleType, name: str, value) -> bool:
    return any(other is not module and other.__name__.startswith("tinygrad") and getattr(other, name, None) is value
               and other.__name__ != module.__name__ and module.__name__ != "tinygrad.helpers"
               for other in list(sys.modules.values()) if isinstance(other, types.ModuleType))

def module_names(module: types.ModuleType, reexports_count: bool) -> dict[str, str]:
    """name -> "module" (a tinygrad submodule) or "attr", with the rules in the docstring."""
    names: dict[str, str] = {}
    for name in public(vars(module)):
        value = getattr(module, name)
        if isinstance(value, types.ModuleType):
            if is_tinygrad_module(value) and value.__name__ == f"{module.__name__}.{name}": names[name] = "module"
            continue
        if reexports_count:
            if (getattr(value, "__module__", "") or "").startswith("tinygrad") or inspect.isfunction(value): names[name] = "attr"
            continue
        if inspect.isclass(value) or inspect.isfunction(value) or inspect.ismethod(value) or callable(value) and hasattr(value, "__module__"):
            if defined_in(value, module.__name__): names[name] = "attr"
        elif not imported_from_elsewhere(module, name, value) and type(value).__module__ != "typing":
            # a constant (a ContextVar, a table): its own unless another tinygrad module has the same object
            names[name] = "attr"
    return names

def main() -> None:
    import tinygrad
    from tinygrad.tensor import Tensor
    from tinygrad.uop.ops import UOp
    from tinygrad.dtype import dtypes
    from tinygrad.helpers import ContextVar
    namespaces = {
        "Tensor": {n: "attr" for n in public(dir(Tensor))},
        "UOp": {n: "attr" for n in public(dir(UOp))},
        "dtypes": {n: "attr" for n in public(dir(dtypes))},
        # an instance, so dataclass fields (itemsize, name, ...) count too
        "DType": {n: "attr" for n in public(dir(dtypes.float32))},
        "top": module_names(tinygrad, reexports_count=True),
    }
    for short in ("nn", "nn.optim", "nn.state", "nn.datasets", "helpers"):
        namespaces[short] = module_names(importlib.import_module(f"tinygrad.{short}"), reexports_count=False)
    from importlib.metadata import version
    fixture = {"tinygrad_version": version("tinygrad"),
               "generated_by": "scripts/tinygrad_names.py", "namespaces": namespaces,
               "context_keys": sorted(ContextVar._cache)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}: " + ", ".join(f"{k} {len(v)}" for k, v in namespaces.items()) + f", {len(fixture['context_keys'])} Context keys")

if __name__ == "__main__":
    main()
