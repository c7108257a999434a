"""``@function``: tinygrad 0.14's decorator for a reusable tensor function.

tinygrad traces the decorated function once per call into a CALL node, so the body becomes one
subgraph (optionally compiled ahead). fusegrad has no CALL node: the function runs eagerly and
its lazy graph fuses into the caller's, which gives the same values and gradients. What tinygrad
checks is kept: the result must be a Tensor or a tuple of Tensors, and a realized tensor the body
reads without receiving it as an argument (an implicit input) is an error unless
``allow_implicit=True``.

>>> from fusegrad import Tensor, function
>>> @function
... def affine(x): return x * 2 + 1
>>> affine(Tensor([1.0, 2.0])).tolist()
[3.0, 5.0]
"""
from __future__ import annotations
import functools
from typing import Any, Callable, Generic, TypeVar
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import UOp, Ops
from fusegrad.nn.state import get_state_dict

ReturnType = TypeVar("ReturnType")

def _buffers(roots: list[UOp]) -> set[UOp]:
    return {u for root in roots for u in root.toposort if u.op is Ops.BUFFER}

class _function(Generic[ReturnType]):
    """The wrapper ``function`` returns; it also works on methods (``__get__`` binds ``self``)."""
    def __init__(self, fxn: Callable[..., ReturnType], *, precompile: bool, precompile_backward: bool, allow_implicit: bool,
                 grad_fxn: Callable | None):
        # precompile / precompile_backward only choose when tinygrad compiles the CALL: no effect here
        if grad_fxn is not None: raise NotImplementedError("function(grad_fxn=...) (a custom gradient) is not supported by fusegrad")
        self.fxn, self.allow_implicit = fxn, allow_implicit
        self.precompile, self.precompile_backward, self.grad_fxn = precompile, precompile_backward, grad_fxn
        functools.update_wrapper(self, fxn)
    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return functools.partial(self.__call__, obj) if obj is not None else self
    def __call__(self, *args: Any, **kwargs: Any) -> ReturnType:
        inputs = [t.uop for t in get_state_dict((args, kwargs)).values()]
        ret = self.fxn(*args, **kwargs)
        outputs = [ret] if isinstance(ret, Tensor) else list(ret) if isinstance(ret, tuple) else None
        name = getattr(self.fxn, "__qualname__", type(self.fxn).__qualname__)
        if outputs is None or not all(isinstance(t, Tensor) for t in outputs):
            raise RuntimeError(f"function {name} must return a Tensor or a tuple of Tensors, got {type(ret).__name__}")
        if not self.allow_implicit:
            implicit = _buffers([t.uop for t in outputs]) - _buffers(inputs)
            if implicit:
                raise RuntimeError(f"function {name} reads {len(implicit)} realized tensor(s) it wasn't given as arguments "
                                   f"(implicit inputs), but allow_implicit=False")
        return ret

def function(fxn: Callable[..., ReturnType] | None = None, *, precompile: bool = False, precompile_backward: bool = False,
             allow_implicit: bool = False, grad_fxn: Callable | None = None) -> Any:
    """Decorate a tensor function: ``@function`` or ``@function(allow_implicit=True)``."""
    def wrap(f: Callable[..., ReturnType]) -> _function[ReturnType]:
        return _function(f, precompile=precompile, precompile_backward=precompile_backward, allow_implicit=allow_implicit, grad_fxn=grad_fxn)
    return wrap if fxn is None else wrap(fxn)
