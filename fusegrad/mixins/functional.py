"""The functional nn API: linear, sequential, norms, dropout, one_hot, attention and losses."""
from __future__ import annotations
from typing import TYPE_CHECKING
if TYPE_CHECKING: from fusegrad.tensor import Tensor

class FunctionalMixin:
    """Mixed into Tensor. Methods here build on the core Tensor ops only."""
    __slots__ = ()
