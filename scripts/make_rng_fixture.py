"""Writes test/fixtures/tinygrad_rng.json: tinygrad 0.14's seeded random streams, the reference that
test/test_random_stream.py compares fusegrad against. Run it where tinygrad 0.14 is installed:

    DEV=PYTHON python scripts/make_rng_fixture.py
"""
import json, pathlib
from tinygrad import Tensor, dtypes
from tinygrad.helpers import Context

def draws() -> dict:
    out: dict = {}
    Tensor.manual_seed(42)
    out["rand_float32"] = Tensor.rand(2, 3).numpy().view("uint32").ravel().tolist()
    out["rand_float16"] = Tensor.rand(5, dtype=dtypes.float16).numpy().view("uint16").ravel().tolist()
    out["rand_bfloat16"] = Tensor.rand(5, dtype=dtypes.bfloat16).bitcast(dtypes.uint16).numpy().ravel().tolist()
    out["rand_float64"] = Tensor.rand(3, dtype=dtypes.float64).numpy().view("uint64").ravel().tolist()
    out["randint"] = Tensor.randint(7, low=-3, high=20).numpy().tolist()
    out["uniform_float32"] = Tensor.uniform(4, low=-2.0, high=3.0).numpy().view("uint32").tolist()
    out["randperm"] = Tensor.randperm(9).numpy().tolist()
    with Context(TRAINING=1): out["dropout_kept"] = (Tensor.ones(12).contiguous().dropout(0.5).numpy() != 0).tolist()
    out["multinomial_replacement"] = Tensor([1.0, 2.0, 3.0, 4.0]).multinomial(8, replacement=True).numpy().tolist()
    out["multinomial_no_replacement"] = Tensor([1.0, 2.0, 3.0, 4.0, 5.0]).multinomial(3).numpy().tolist()
    out["randn"] = Tensor.randn(6).numpy().tolist()
    out["normal"] = Tensor.normal(4, mean=3.0, std=0.5).numpy().tolist()
    Tensor.manual_seed(7)
    out["rand_1000_every_97th"] = Tensor.rand(1000).numpy().view("uint32")[::97].tolist()
    # a second device gets the next stream id
    second = Tensor.empty(1).device.split(":")[0] + ":1"
    out["second_device_rand"] = Tensor.rand(4, device=second).numpy().view("uint32").tolist()
    # the 64-bit counter carries into its high word
    Tensor.manual_seed(3)
    Tensor.rand(1).realize()
    device = Tensor.empty(1).device
    Tensor._device_rng_counters[device].assign(Tensor([0xFFFFFFFE, 0], device=device, dtype=dtypes.uint32)).realize()
    out["carry_rand"] = Tensor.rand(4).numpy().view("uint32").tolist()
    return out

if __name__ == "__main__":
    path = pathlib.Path(__file__).resolve().parent.parent / "test" / "fixtures" / "tinygrad_rng.json"
    lines = [f"  {json.dumps(name)}: {json.dumps(values)}" for name, values in draws().items()]
    path.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {path}")
