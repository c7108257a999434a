"""Convolution, pooling, cumulative ops, sorting, gather/scatter, einsum and friends."""
from __future__ import annotations
from typing import TYPE_CHECKING
if TYPE_CHECKING: from fusegrad.tensor import Tensor

class ProcessingMixin:
    """Mixed into Tensor. Methods here build on the core Tensor ops only."""
    __slots__ = ()
