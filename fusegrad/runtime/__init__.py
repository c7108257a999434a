"""Runtimes: one module per device (ops_cpu, ops_python, ...), each defining a ``<NAME>Device``."""
