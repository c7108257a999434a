"""renderer.options: one frozen value per renderer and Context setting, the compiled-kernel cache key."""
import dataclasses
import pytest
from fusegrad import Context
from fusegrad.renderer import Renderer, RendererOptions, CODEGEN_FLAGS
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.renderer.llvmir import LLVMRenderer
from fusegrad.renderer.cuda import CUDARenderer
from fusegrad.renderer.opencl import OpenCLRenderer
from fusegrad.runtime.ops_python import PythonRenderer

def test_options_are_frozen_and_reused():
    r = ClangRenderer(has_threads=True)
    assert r.options is r.options and isinstance(r.options, RendererOptions)
    with pytest.raises(dataclasses.FrozenInstanceError): r.options.has_threads = False
    assert r.options == ClangRenderer(has_threads=True).options and hash(r.options) == hash(ClangRenderer(has_threads=True).options)

@pytest.mark.parametrize("setting, field, value", [("VECTORIZE", "vectorize", 0), ("TC", "use_tc", 0), ("NOOPT", "noopt", 1),
                                                   ("TRANSCENDENTAL", "transcendental", 2), ("BEAM", "beam", 2), ("TC_OPT", "tc_opt", 1)])
def test_every_codegen_flag_is_in_the_options(setting, field, value):
    r = ClangRenderer()
    before = r.options
    with Context(**{setting: value}): during = r.options
    assert getattr(during, field) == value and during != before and r.options == before

def test_flags_and_fields_agree():
    names = {f.name for f in dataclasses.fields(RendererOptions)}
    assert set(CODEGEN_FLAGS) <= names

def test_targets_and_variants_differ():
    assert CUDARenderer("sm_80").options != CUDARenderer("sm_90").options
    assert CUDARenderer("sm_90").options.variant == ("sm_90", 227 * 1024)   # (arch, shared memory per block)
    assert OpenCLRenderer(shared_max=16384).options.shared_max == 16384
    assert ClangRenderer(has_threads=False).options != ClangRenderer(has_threads=True).options
    assert {r.options.target for r in (ClangRenderer(), LLVMRenderer(), PythonRenderer(), CUDARenderer())} == {"CPU", "LLVM", "PYTHON", "CUDA"}

@pytest.mark.parametrize("renderer", [ClangRenderer(), LLVMRenderer(), PythonRenderer(), CUDARenderer(), OpenCLRenderer()], ids=type)
def test_options_mirror_the_renderer(renderer):
    o = renderer.options
    assert (o.has_local, o.has_shared, o.has_threads) == (renderer.has_local, renderer.has_shared, renderer.has_threads)
    assert (o.shared_max, o.local_max_threads, o.max_vector_bytes) == (renderer.shared_max, renderer.local_max_threads, renderer.max_vector_bytes)
    assert list(o.tensor_cores) == list(renderer.tensor_cores) and o.gpu_heuristic == renderer.gpu_heuristic

def test_no_undeclared_capability_reads():
    # capabilities are fields of Renderer (read directly), so a renderer without one gets the declared default
    class Bare(Renderer): device = "BARE"
    o = Bare().options
    assert (o.has_threads, o.gpu_heuristic, o.tensor_cores, o.stage_max_bytes) == (False, False, (), 1 << 20)
