"""Parts of the Tensor API kept in their own files; ``Tensor`` inherits them.

- processing.py: convolution, pooling, cumulative ops, sorting, gather/scatter, einsum, interpolate
- functional.py: the functional nn API (linear, norms, dropout, attention, losses)

Each method uses only the public Tensor API, so these files depend on tensor.py and not the
other way round (tensor.py imports them only to inherit).
"""
