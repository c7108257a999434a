"""A pytest plugin: every kernel the tests realize is also rendered for CUDA and compiled to PTX by NVRTC.

CI has no GPU, so this is how every kernel of the op tests is checked to compile for CUDA
(test/runtime/test_ops_cuda.py runs it over test/test_tensor_ops.py in a subprocess):

    PYTHONPATH=test python -m pytest -p cuda_compile_check test/test_tensor_ops.py

The hook wraps ``codegen.get_program``, which the engine calls for every kernel it generates (a wrapped
function also bypasses the on-disk program cache, so every kernel is seen). A kernel that fails to render or
compile for CUDA fails the test that realized it, naming the kernel. Each distinct kernel AST compiles once.
"""
from __future__ import annotations
import functools
import pytest

ARCH = "sm_80"

@functools.lru_cache(None)
def _cuda():
    from fusegrad.renderer.cuda import CUDARenderer
    from fusegrad.runtime.ops_cuda import CUDACompiler
    return CUDARenderer(arch=ARCH), CUDACompiler(ARCH)

checked: dict = {}   # kernel AST -> its CUDA kernel name (each AST compiles once per session)

def compile_for_cuda(ast) -> str:
    """Render ``ast`` for CUDA (its own heuristic's actions) and compile it with NVRTC; the kernel's name."""
    from fusegrad.codegen import get_program
    if (name := checked.get(ast)) is not None: return name
    renderer, compiler = _cuda()
    program = get_program(ast, renderer)
    ptx = compiler.compile(program.src).decode()
    if f".entry {program.name}(" not in ptx: raise AssertionError(f"no .entry {program.name} in the PTX of:\n{program.src}")
    checked[ast] = program.name
    return program.name

def pytest_configure(config):
    from fusegrad import codegen
    original = codegen.get_program
    def get_program_and_check_cuda(ast, renderer, opts=None):
        program = original(ast, renderer, opts)
        if not renderer.has_local:   # (a kernel made for a CPU-style device: check it on CUDA too)
            try: compile_for_cuda(ast)
            except Exception as e: raise AssertionError(f"kernel {program.name} doesn't compile for CUDA ({ARCH}): {e}") from e
        return program
    codegen.get_program = get_program_and_check_cuda

def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"cuda_compile_check: {len(checked)} distinct kernels compiled for CUDA ({ARCH})")

def pytest_unconfigure(config):
    checked.clear()   # (let the kernel ASTs go before interpreter shutdown tears down the UOp cache)
