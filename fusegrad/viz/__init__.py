"""Seeing what the compiler did: ``profile`` (PROFILE=1, a Chrome/Perfetto trace), ``trace`` (VIZ=1, every graph
rewrite and kernel recorded) and ``server`` (the local web page that shows them)."""
