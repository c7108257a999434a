"""Runnable programs: ``python -m fusegrad.examples.NAME``."""
