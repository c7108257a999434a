"""fusegrad: a small deep-learning framework with lazy tensors and fused, compiled kernels.

>>> from fusegrad import Tensor
>>> (Tensor([1.0, 2.0, 3.0]) * 2).sum().item()
12.0
"""
__version__ = "0.1.0"   # keep equal to pyproject.toml's version (test/test_front_door.py checks)
import warnings as _warnings
# `python -m fusegrad.device` lists the backends; the package has imported fusegrad.device by then, which is fine
_warnings.filterwarnings("ignore", message="'fusegrad.device' found in sys.modules", category=RuntimeWarning)
from fusegrad.tensor import Tensor
from fusegrad.dtype import dtypes
from fusegrad.device import Device
from fusegrad.uop.ops import UOp, Variable
from fusegrad.helpers import GlobalCounters, Context, getenv, fetch
from fusegrad import nn  # noqa: F401
# like tinygrad, the name `function` is the decorator (it shadows its module fusegrad.function)
from fusegrad.function import function  # noqa: E402

def __getattr__(name: str):
    if name == "TinyJit":
        from fusegrad.engine.jit import TinyJit
        return TinyJit
    raise AttributeError(f"module 'fusegrad' has no attribute {name!r}")

__all__ = ["__version__", "Tensor", "dtypes", "Device", "UOp", "Variable", "GlobalCounters", "Context", "getenv", "nn", "TinyJit", "fetch", "function"]
