"""Write tinygrad's dtype promotion results as the JSON fixture of test/test_dtype_promotion.py.

Run with tinygrad 0.14 installed (only dtypes are asked for, nothing is computed):

    DEV=PYTHON python scripts/tinygrad_promotion.py > test/fixtures/tinygrad_promotion.json

For every pair of dtypes it records ``least_upper_dtype`` and the dtype of ``a + b`` for tensors,
and for every dtype the dtypes of ``t + literal`` and ``literal + t`` for the literals 1, 1.5, True.
"""
import json
from tinygrad import Tensor, dtypes
from tinygrad.dtype import least_upper_dtype

NAMES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
         "fp8e4m3", "fp8e5m2", "fp8e4m3fnuz", "fp8e5m2fnuz", "float16", "bfloat16", "float32", "float64"]
LITERALS = {"1": 1, "1.5": 1.5, "True": True}

def name_of(dtype) -> str:
    """The canonical name (tinygrad's repr prefers aliases such as ``char`` and ``long``)."""
    return next(n for n in NAMES + ["weakint", "weakfloat"] if getattr(dtypes, n) == dtype)

def tensor(name: str) -> Tensor: return Tensor.empty(1, dtype=getattr(dtypes, name))

def table() -> dict:
    return {
        "_about": "tinygrad 0.14.0 promotion results (least_upper_dtype, tensor + tensor dtype, tensor + python "
                  "scalar dtype as [t + s, s + t]); weak results (weakint/weakfloat) are tinygrad's lazy dtypes, "
                  "realized as default_int/default_float. Written by scripts/tinygrad_promotion.py.",
        "dtypes": NAMES,
        "least_upper_dtype": {a: {b: name_of(least_upper_dtype(getattr(dtypes, a), getattr(dtypes, b))) for b in NAMES} for a in NAMES},
        "tensor_add": {a: {b: name_of((tensor(a) + tensor(b)).dtype) for b in NAMES} for a in NAMES},
        "scalar_add": {a: {key: [name_of((tensor(a) + value).dtype), name_of((value + tensor(a)).dtype)]
                           for key, value in LITERALS.items()} for a in NAMES},
    }

def to_text(data: dict) -> str:
    """JSON with one line per table row, so the checked-in file stays short and diffs read well."""
    parts = []
    for key, value in data.items():
        if isinstance(value, dict) and key != "dtypes":
            rows = ",\n".join(f"  {json.dumps(row)}: {json.dumps(cells)}" for row, cells in value.items())
            parts.append(f" {json.dumps(key)}: {{\n{rows}\n }}")
        else: parts.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(parts) + "\n}"

if __name__ == "__main__":
    print(to_text(table()))
