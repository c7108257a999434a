"""Write test/fixtures/tinygrad_fp8.json: how tinygrad 0.14 converts float32 to each fp8 type and back, and
what its fp8 arithmetic and reductions give, on its PYTHON device. Run where tinygrad is installed:

    DEV=PYTHON python scripts/tinygrad_fp8.py

The float32 sweep covers every fp8 value, the halfway points between neighbours (and one float32 ulp to
either side), the saturation thresholds, infinities, NaNs of both signs, float32 subnormals and random bit
patterns. test/test_fp8.py checks fusegrad against this file bit for bit."""
import json, math, os, random, struct, sys
import numpy as np
from tinygrad import Tensor, dtypes

FP8 = ("fp8e4m3", "fp8e5m2", "fp8e4m3fnuz", "fp8e5m2fnuz")

def f32_bits(x: float) -> int:
    try: return struct.unpack("I", struct.pack("f", x))[0]
    except OverflowError: return 0x7F800000 if x > 0 else 0xFF800000

def bits_f32(b: int) -> float: return struct.unpack("f", struct.pack("I", b))[0]

def neighbours(b: int) -> list[int]: return [b, (b + 1) & 0xFFFFFFFF, (b - 1) & 0xFFFFFFFF]

def decode_all(name: str) -> list[int]:
    codes = Tensor(np.arange(256, dtype=np.uint8)).bitcast(getattr(dtypes, name))
    return codes.cast(dtypes.float32).bitcast(dtypes.uint32).tolist()

def sweep() -> list[int]:
    rng = random.Random(0)
    bits = {0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x00000001, 0x807FFFFF, 0x7F7FFFFF}
    for name in FP8:
        values = sorted({bits_f32(b) for b in decode_all(name) if math.isfinite(bits_f32(b))})
        for v in values: bits.update(neighbours(f32_bits(v)))
        for a, b in zip(values, values[1:]): bits.update(neighbours(f32_bits((a + b) / 2)))
        top = values[-1]
        for v in (top * 1.03125, top * 1.0625, top * 1.09375, top * 1.125, top * 2, 1e10, 3e38): bits.update(neighbours(f32_bits(v)))
    bits.update(rng.getrandbits(32) for _ in range(3000))
    bits.update(f32_bits(rng.uniform(-600, 600)) for _ in range(1000))
    bits.update(f32_bits(rng.uniform(-0.02, 0.02)) for _ in range(1000))
    return sorted(bits)

def main() -> None:
    inputs = sweep()
    out: dict = {"float32_bits": inputs, "encode": {}, "decode": {}, "add": {}, "mul": {}, "dtypes": {}}
    x = Tensor(np.array(inputs, dtype=np.uint32)).bitcast(dtypes.float32)
    rng = random.Random(1)
    pairs = [(rng.getrandbits(8), rng.getrandbits(8)) for _ in range(2000)]
    out["pairs"] = pairs
    for name in FP8:
        dt = getattr(dtypes, name)
        out["encode"][name] = x.cast(dt).bitcast(dtypes.uint8).tolist()
        out["decode"][name] = decode_all(name)
        a = Tensor(np.array([p[0] for p in pairs], dtype=np.uint8)).bitcast(dt)
        b = Tensor(np.array([p[1] for p in pairs], dtype=np.uint8)).bitcast(dt)
        out["add"][name] = (a + b).bitcast(dtypes.uint8).tolist()
        out["mul"][name] = (a * b).bitcast(dtypes.uint8).tolist()
        t = Tensor([1.0, 2.5, -3.25, 0.1]).cast(dt)
        results = {"sum": t.sum(), "sum_axis": t.reshape(2, 2).sum(1), "cumsum": t.cumsum(), "softmax": t.softmax(),
                   "log_softmax": t.log_softmax(), "mean": t.mean(), "var": t.var(), "std": t.std(), "max": t.max(),
                   "prod": t.prod(), "exp": t.exp(), "matmul": t @ t, "add_int": t + 1, "add_float": t + 1.5,
                   "add_half": t + Tensor([1.0], dtype=dtypes.half), "add_bf16": t + Tensor([1.0], dtype=dtypes.bfloat16),
                   "sum_float": t.sum(dtype=dtypes.float32), "cumprod": t.cumprod(0), "cummax": t.cummax(0)[0]}
        out["dtypes"][name] = {k: str(v.dtype) for k, v in results.items()}
    path = os.path.join(os.path.dirname(__file__), "..", "test", "fixtures", "tinygrad_fp8.json")
    with open(path, "w") as f: json.dump(out, f, separators=(",", ":"))
    print(f"wrote {path}: {len(inputs)} float32 inputs", file=sys.stderr)

if __name__ == "__main__": main()
