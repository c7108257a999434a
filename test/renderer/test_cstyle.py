"""The C renderer (CPU device): float16 arithmetic rounds to half after every op, as torch and numpy do and as the
other backends do, even where the C compiler would keep an inlined _Float16 chain in float ("excess precision")."""
from __future__ import annotations
import numpy as np
import pytest
import torch
from fusegrad import Tensor, dtypes
from fusegrad.renderer.cstyle import ClangRenderer
from fusegrad.uop.ops import UOp, Ops

def test_fused_half_chain_rounds_after_each_op():
    # a = 1 + 3/1024 (a half); a*a = 1 + 6/1024 + 9/2**20 rounds to 1 + 6/1024, so a*a - 1 is 6/1024 exactly. Kept
    # in float (or fused into an fma), the product would not round: 6/1024 + 9/2**20, a different half.
    a, c = np.full(3, 1 + 3 / 1024, dtype=np.float16), np.full(3, -1, dtype=np.float16)
    got = (Tensor(a, device="CPU") * Tensor(a, device="CPU") + Tensor(c, device="CPU")).numpy()
    want = a * a + c
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)
    assert got[0] == np.float16(6 / 1024)

def test_half_stored_and_recomputed_agree():
    # the same half expression, stored by one kernel and recomputed inside another, must be bit-identical: the
    # max's backward compares them (a mismatch used to give 0/0 = NaN gradients)
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((4, 33)).astype(np.float16), device="CPU", requires_grad=True)
    y = (x.abs() * 1.37 + 0.11).softmax(1)
    y.max().backward()
    grad = x.grad.numpy()
    assert not np.isnan(grad).any()
    xt = torch.tensor(x.numpy(), requires_grad=True)
    (xt.abs() * 1.37 + 0.11).softmax(1).amax().backward()
    np.testing.assert_allclose(grad.astype(np.float64), xt.grad.numpy().astype(np.float64), atol=3e-3)

def test_render_wraps_half_arithmetic_only():
    renderer = ClangRenderer()
    a, b = UOp(Ops.CONST, dtypes.float16, (), 1.0), UOp(Ops.CONST, dtypes.float16, (), 2.0)
    assert renderer.render_alu(a * b, ["a", "b"]) == "((_Float16)(a*b))"
    assert renderer.render_alu(a.alu(Ops.CMPLT, b), ["a", "b"]) == "(a<b)"          # a bool, not a half
    assert renderer.render_alu(a.maximum(b), ["a", "b"]).count("_Float16") == 0    # picks an existing half
    f = UOp(Ops.CONST, dtypes.float32, (), 1.0)
    assert renderer.render_alu(f * f, ["a", "b"]) == "(a*b)"

# ---------------------------------------------------------------- vector code for float16, bfloat16, fp8 and small ints
# (codegen/vectorize.py gives these loops vector lanes; the renderer widens half math to float32 per op)

def _kernel_sources(build) -> list[str]:
    """The C source of every kernel of the graph ``build()`` returns (a fresh graph: scheduling one consumes it)."""
    from fusegrad import Device
    from fusegrad.codegen import get_program
    return [get_program(item.ast, Device["CPU"].renderer).src for item in build().schedule() if item.ast.op is Ops.SINK]

def _half_inputs(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    arrays = [(rng.standard_normal(n) * 3).astype(np.float16) for _ in range(3)]
    arrays[0][:16], arrays[1][:16] = 1 + 3 / 1024, 1 + 3 / 1024   # a*b rounds to half before the add (see above)
    return arrays

def test_vector_half_math_rounds_after_each_op():
    a, b, c = _half_inputs(1 << 16)
    ta, tb, tc = (Tensor(x, device="CPU").realize() for x in (a, b, c))
    build = lambda: ((ta * tb + tc).relu().maximum(tc) - ta / (tb.abs() + 1)) + (ta < tb).where(ta, -tc)
    sources = _kernel_sources(build)
    # one kernel, its loop vector code: half16 loads, math through float32 lanes
    assert len(sources) == 1 and "half16 val" in sources[0] and "FG_FLOAT_TO_HALF_16(" in sources[0], sources
    got = build().numpy()
    want = ((np.maximum(np.maximum(a * b + c, np.float16(0)), c) - a / (np.abs(b) + np.float16(1))) + np.where(a < b, a, -c))
    assert got.dtype == np.float16 and want.dtype == np.float16
    np.testing.assert_array_equal(got, want)

def test_vector_half_sum_matches_scalar_kernel():
    # a half sum accumulates in float32 lanes read from half16 loads; the order of the adds is the scalar kernel's
    from fusegrad import Context
    (a,) = _half_inputs(1 << 16)[:1]
    ta = Tensor(a, device="CPU").realize()
    assert any("half16 val" in src for src in _kernel_sources(lambda: ta.sum()))
    with Context(VECTORIZE=0): scalar = ta.sum().numpy()
    assert scalar.tobytes() == ta.sum().numpy().tobytes()
    np.testing.assert_allclose(float(ta.sum().numpy()), float(a.astype(np.float64).sum()), rtol=2e-3)

@pytest.mark.parametrize("flags", [["-march=native"], ["-march=native", "-mno-avx512f", "-mno-f16c"]])
def test_half_conversion_macros_round_like_numpy(tmp_path, flags):
    """FG_FLOAT_TO_HALF_<n> / FG_HALF_TO_FLOAT_<n> for 4, 8 and 16 lanes, with F16C/AVX-512 instructions and with
    the __builtin_convertvector fallback: round to nearest even like numpy, ties, subnormals, overflow, inf, NaN."""
    import subprocess
    from fusegrad.renderer.cstyle import half_conversion_macros
    renderer = ClangRenderer()
    values = np.array([0.0, -0.0, 1.0, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 65504.0, 65519.99, 65520.0, -1e6, 2 ** -24, 2 ** -25,
                       3 * 2 ** -26, 6e-8, 1e-3, np.inf, -np.inf, np.nan, 0.1, -2.5e-5, 1234.5678], dtype=np.float32)
    values = np.concatenate([values, np.random.default_rng(2).standard_normal(28).astype(np.float32) * 1000])   # 48 values
    types = renderer.vector_typedefs_for({dtypes.float16.vec(n) for n in (4, 8, 16)} | {dtypes.float32.vec(n) for n in (4, 8, 16)})
    program = "#include <stdio.h>\n#include <string.h>\n" + half_conversion_macros({4, 8, 16}) + "int main(void) {\n" + types + \
        "  float in[48] = {" + ", ".join("__builtin_nanf(\"\")" if np.isnan(v) else ("-" if v < 0 else "") + "__builtin_inff()"
                                         if np.isinf(v) else f"{float(v)!r}f" for v in values) + "};\n" + "".join(f"""
  for (int i = 0; i < 48; i += {n}) {{
    float{n} f; memcpy(&f, in + i, sizeof(f));
    half{n} h = FG_FLOAT_TO_HALF_{n}(f); float{n} back = FG_HALF_TO_FLOAT_{n}(h);
    for (int j = 0; j < {n}; j++) {{ unsigned short bits; memcpy(&bits, (_Float16*)&h + j, 2); printf("{n} %u %a\\n", bits, back[j]); }}
  }}""" for n in (4, 8, 16)) + "\n}\n"
    source, binary = tmp_path / "half.c", tmp_path / "half"
    source.write_text(program)
    subprocess.run(["cc", "-O2", *flags, str(source), "-o", str(binary)], check=True)
    lines = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout.splitlines()
    want = values.astype(np.float16)
    for n in (4, 8, 16):
        rows = [line.split() for line in lines if line.split()[0] == str(n)]
        bits = np.array([int(r[1]) for r in rows], dtype=np.uint16)
        back = np.array([float.fromhex(r[2]) for r in rows], dtype=np.float32)
        nan = np.isnan(want)
        assert np.array_equal(bits[~nan], want.view(np.uint16)[~nan]), n
        assert np.isnan(bits.view(np.float16)[nan]).all() and np.isnan(back[nan]).all()
        np.testing.assert_array_equal(back[~nan], want[~nan].astype(np.float32))

def test_bfloat16_and_fp8_vector_code_rounds_like_torch():
    # the emulations' integer encode/decode run on vector lanes (uint16 / uint8 loads and stores): a float32 tensor
    # cast to bfloat16 or fp8 rounds as torch's conversions do (ties to even; 600 saturates to e4m3's 448 in both)
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal((1 << 16) - 8) * 50, [0.0, -0.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 2 ** -9, 400.0, 3e-3, -1e-3]]).astype(np.float32)
    tx = Tensor(x, device="CPU").realize()
    for dtype, torch_dtype, lanes in ((dtypes.bfloat16, torch.bfloat16, "unsigned_short16"), (dtypes.fp8e4m3, torch.float8_e4m3fn, "unsigned_char16")):
        build = lambda: (tx * 1.5).cast(dtype)
        assert any(f"*(({lanes}_u*)(data0+" in src for src in _kernel_sources(build)), dtype   # a vector store of the codes
        bits = dtypes.uint16 if dtype.itemsize == 2 else dtypes.uint8
        got = build().bitcast(bits).numpy()
        want = torch.from_numpy(x * np.float32(1.5)).to(torch_dtype).view(torch.uint16 if dtype.itemsize == 2 else torch.uint8).numpy()
        np.testing.assert_array_equal(got, want, err_msg=str(dtype))

def test_bfloat16_and_fp8_vector_chains_match_scalar_kernels():
    # decode, float32 math and (fp8: per op) rounding on vector lanes give the scalar kernels' bits
    from fusegrad import Context
    rng = np.random.default_rng(4)
    for dtype in (dtypes.bfloat16, dtypes.fp8e4m3, dtypes.fp8e5m2):
        a, b, c = (Tensor(rng.standard_normal(1 << 16).astype(np.float32) * 4, device="CPU").cast(dtype).realize() for _ in range(3))
        build = lambda: (a * b + c).relu().exp().cast(dtypes.float32) + (a > b).where(a, c).cast(dtypes.float32)
        assert any("vector_size" in src and "for (int ridx1" not in src for src in _kernel_sources(build)), dtype
        with Context(VECTORIZE=0): scalar = build().numpy()
        assert build().numpy().tobytes() == scalar.tobytes(), dtype

@pytest.mark.parametrize("np_dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_small_integer_lanes_widen_and_narrow(np_dtype):
    # 8- and 16-bit lanes widen to int32 and float32 (an image's x.float() / 255) and narrow back, on vectors
    info = np.iinfo(np_dtype)
    a = np.random.default_rng(5).integers(info.min, info.max, 1 << 16, dtype=np_dtype, endpoint=True)
    a[:2] = info.min, info.max
    t = Tensor(a, device="CPU").realize()
    build = lambda: t.float() / 255 + t.cast(dtypes.int32).cast(dtypes.float32) * 2
    assert all("vector_size" in src for src in _kernel_sources(build))
    np.testing.assert_array_equal(build().numpy(), a.astype(np.float32) / np.float32(255) + a.astype(np.int32).astype(np.float32) * 2)
    wrap = lambda: (t.cast(dtypes.int32) * 3 - 7).cast(t.dtype)
    assert all("vector_size" in src for src in _kernel_sources(wrap))
    np.testing.assert_array_equal(wrap().numpy(), (a.astype(np.int32) * 3 - 7).astype(np_dtype))

# ---------------------------------------------------------------- gcc's if-conversion, per kernel

IF_CONVERSION_OFF = '"no-tree-loop-if-convert"'

def test_if_conversion_is_off_only_in_kernels_with_gated_accesses():
    """GCC 12 miscompiled a gated load at a negative offset once if-converted, so kernels with gated loads or stores
    turn if-conversion off for themselves; the others keep it (the flag is no longer global), so a scalar loop's
    selects become vector blends."""
    from fusegrad.runtime.ops_cpu import ClangCompiler
    assert "-fno-tree-loop-if-convert" not in ClangCompiler().flags
    rng = np.random.default_rng(6)
    a, b = (Tensor(rng.standard_normal((1021, 1021)).astype(np.float32), device="CPU").realize() for _ in range(2))
    selects = lambda: (a > 0).where(a, b * 2).clip(-1, 1)
    assert not any(IF_CONVERSION_OFF in src for src in _kernel_sources(selects))
    padded = lambda: a.pad(((0, 0), (3, 2))) * 2
    assert all(IF_CONVERSION_OFF in src for src in _kernel_sources(padded))
    x, y = a.numpy(), b.numpy()
    np.testing.assert_array_equal(selects().numpy(), np.clip(np.where(x > 0, x, y * 2), -1, 1))
    np.testing.assert_array_equal(padded().numpy(), np.pad(x, ((0, 0), (3, 2))) * 2)

def test_gated_loads_at_negative_offsets_read_their_elements():
    # the miscompile's shape: a scalar loop (odd sizes: no vector width divides them) whose loads are gated and
    # sit at negative offsets where the gate is off (a pad before the data); forward and through the gradient
    for n in (5, 7, 13, 31, 1021):
        x = np.arange(1, 3 * n + 1, dtype=np.float32).reshape(3, n)
        t = Tensor(x, device="CPU", requires_grad=True)
        out = t.pad(((0, 0), (2, 1))) * Tensor(np.arange(n + 3, dtype=np.float32), device="CPU")
        np.testing.assert_array_equal(out.numpy(), np.pad(x, ((0, 0), (2, 1))) * np.arange(n + 3, dtype=np.float32))
        out.sum().backward()
        np.testing.assert_array_equal(t.grad.numpy(), np.broadcast_to(np.arange(2, n + 2, dtype=np.float32), (3, n)))

def test_both_gcc_guards_share_one_optimize_attribute():
    # gcc 12 keeps only one of several optimize attributes, so a kernel with a flipped sum and a gated load names
    # both options in one
    x = Tensor(np.arange(16, dtype=np.float32), device="CPU").realize()
    (src,) = _kernel_sources(lambda: x.reshape(8, 2).flip(1).pad(((0, 0), (1, 1))).sum(1))
    assert src.count("optimize(") == 1 and '"no-tree-loop-vectorize", "no-tree-loop-if-convert"' in src, src
    assert (x.reshape(8, 2).flip(1).pad(((0, 0), (1, 1))).sum(1)).numpy().tolist() == np.arange(16).reshape(8, 2).sum(1).tolist()

def test_only_backwards_index_math_turns_loop_vectorization_off():
    """The gcc guard is for sums whose *addresses* step backwards (a flip): a kernel with an accumulator whose integer
    math runs on values (an exp polynomial's exponent bits, ``k*(-1)``) keeps gcc's loop vectorizer."""
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((8, 32)).astype(np.float32), device="CPU").realize()
    (src,) = _kernel_sources(lambda: x.exp().sum(1))
    assert "<<23" in src and "no-tree-loop-vectorize" not in src, src   # (exp2's exponent bits are integer math)
    np.testing.assert_allclose(x.exp().sum(1).numpy(), np.exp(x.numpy()).sum(1), rtol=1e-5)
    (flipped,) = _kernel_sources(lambda: x.flip(1).reshape(8, 16, 2).sum(2))
    assert "no-tree-loop-vectorize" in flipped, flipped
    np.testing.assert_array_equal(x.flip(1).reshape(8, 16, 2).sum(2).numpy(), x.numpy()[:, ::-1].reshape(8, 16, 2).sum(2))

def test_predictive_commoning_is_off_only_in_kernels_with_a_staged_copy():
    # a conv forward tiles image positions x a vector of output channels over staged weights: gcc's predictive
    # commoning would carry the tile's image values across kernel columns in registers the accumulators need. A weight
    # gradient whose channel vector is gathered (a big output gradient, 512 x 16 x 6 x 6: no staged copy) keeps it, as do kernels
    # without a register tile.
    rng = np.random.default_rng(2)
    x = Tensor(rng.standard_normal((512, 8, 8, 8)).astype(np.float32), device="CPU", requires_grad=True).realize()
    w = Tensor(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), device="CPU", requires_grad=True).realize()
    off = '"no-predictive-commoning"'
    (forward,) = _kernel_sources(lambda: x.conv2d(w))
    assert "stage0" in forward and off in forward, forward
    weight_gradient = [src for src in _kernel_sources(lambda: x.conv2d(w).square().sum().gradient(w)[0]) if "void r_16_8_3_3_" in src]
    assert len(weight_gradient) == 1 and "stage0" not in weight_gradient[0] and off not in weight_gradient[0], weight_gradient
    assert not any(off in src for src in _kernel_sources(lambda: (x * 2 + 1).sum(1)))
    import torch
    expected = torch.nn.functional.conv2d(torch.from_numpy(x.numpy()), torch.from_numpy(w.numpy())).numpy()
    np.testing.assert_allclose(x.conv2d(w).numpy(), expected, rtol=1e-4, atol=1e-4)


def test_lanes_of_two_vectors_render_as_one_shuffle(tmp_path):
    """A VECTORIZE of single lanes of at most two vectors of its type is one __builtin_shufflevector (a transposing
    copy's network); lanes of three vectors, or bools, stay a lane-by-lane vector. The shuffle's lane numbers count the
    second vector's lanes from V on: checked by compiling and running the C."""
    import ctypes, os, subprocess
    f8 = dtypes.float32.vec(8)
    params = [UOp(Ops.PARAM, dtypes.float32.ptr(8), (), i) for i in range(4)]
    zero = UOp.const(dtypes.int32, 0)
    a, b, c = (UOp(Ops.LOAD, f8, (UOp(Ops.INDEX, dtypes.float32.ptr(8), (p, zero)),)) for p in params[1:])
    def gather(*picks): return UOp(Ops.VECTORIZE, f8, tuple(UOp(Ops.GEP, dtypes.float32, (v,), (i,)) for v, i in picks))
    two = gather((a, 0), (b, 0), (a, 7), (b, 3), (b, 1), (a, 2), (a, 2), (b, 7))
    three = gather((a, 0), (b, 0), (c, 0), (a, 1), (b, 1), (c, 1), (a, 2), (b, 2))
    def kernel(value):
        store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, dtypes.float32.ptr(8), (params[0], zero)), value))
        uops = [u for u in store.toposort]
        return ClangRenderer().render("k", uops)
    assert "FG_SHUFFLE(" in kernel(two) and "FG_SHUFFLE(" not in kernel(three)
    src = tmp_path / "k.c"
    src.write_text(kernel(two))
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-O2", "-fPIC", "-o", str(tmp_path / "k.so"), str(src)], check=True)
    lib = ctypes.CDLL(str(tmp_path / "k.so"))
    xa, xb = np.arange(8, dtype=np.float32), np.arange(8, dtype=np.float32) + 10
    out, unused = np.zeros(8, np.float32), np.zeros(8, np.float32)
    lib.k(*(v.ctypes.data_as(ctypes.c_void_p) for v in (out, xa, xb, unused)))
    np.testing.assert_array_equal(out, [0, 10, 7, 13, 11, 2, 2, 17])

def test_math_functions_of_several_half_arguments_widen_each():
    # (it was one cast around "a, b": C's comma operator, fmodf of one argument)
    renderer = ClangRenderer()
    assert renderer.math_function("fmod", dtypes.float16, "a", "b") == "((_Float16)fmodf((float)(a), (float)(b)))"
    assert renderer.math_function("fma", dtypes.float32, "a", "b", "c") == "fmaf(a, b, c)"
