"""Running work: realize.py (schedules → kernels → results), jit.py (TinyJit), memory.py (planner)."""
