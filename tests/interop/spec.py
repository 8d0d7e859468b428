"""The tensors both sides of the interop test build (mirrors the table in eagle_interop.c).

Values by flat row-major index i: f32 0.5 i - 1.25, f64 i / 3 - 1, f16 0.25 i - 0.5, bf16 2 i - 3,
i32 1000003 i - 2000000, i64 3e12 i - 1, u8 60 i, bool i even, scalar 3.25, empty (0, 3),
transposed: arange(12).reshape(3, 4).T as int32.
"""

import numpy as np

# name -> (safetensors dtype, numpy dtype or None for bf16, shape)
SPECS = {
    "f32": ("F32", np.float32, (2, 3)),
    "f64": ("F64", np.float64, (4,)),
    "f16": ("F16", np.float16, (3, 2)),
    "bf16": ("BF16", None, (2, 2)),
    "i32": ("I32", np.int32, (5,)),
    "i64": ("I64", np.int64, (3,)),
    "u8": ("U8", np.uint8, (2, 2)),
    "bool": ("BOOL", np.bool_, (3,)),
    "scalar": ("F32", np.float32, ()),
    "empty": ("F32", np.float32, (0, 3)),
    "transposed": ("I32", np.int32, (4, 3)),
}


def expected(name):
    """The tensor as a C-contiguous numpy array (bf16: float32 holding the exact values)."""
    _, dtype, shape = SPECS[name]
    n = int(np.prod(shape, dtype=np.int64))
    i = np.arange(n, dtype=np.int64)
    if name == "transposed":
        return np.ascontiguousarray(np.arange(12, dtype=np.int32).reshape(3, 4).T)
    if name == "scalar":
        return np.array(3.25, dtype=np.float32)
    values = {
        "f32": lambda: (0.5 * i - 1.25).astype(np.float32),
        "f64": lambda: i / 3.0 - 1.0,
        "f16": lambda: (0.25 * i - 0.5).astype(np.float16),
        "bf16": lambda: (2.0 * i - 3.0).astype(np.float32),
        "i32": lambda: (1000003 * i - 2000000).astype(np.int32),
        "i64": lambda: 3000000000000 * i - 1,
        "u8": lambda: (60 * i).astype(np.uint8),
        "bool": lambda: i % 2 == 0,
        "empty": lambda: np.zeros(0, dtype=np.float32),
    }[name]()
    return np.ascontiguousarray(values.reshape(shape))


def bf16_bytes(values):
    """Little-endian bfloat16 bytes of float32 values that bfloat16 holds exactly."""
    bits = np.ascontiguousarray(values, dtype="<f4").view("<u4") >> 16
    return bits.astype("<u2").tobytes()


class Failures:
    """Collects mismatches so that one run reports all of them."""

    def __init__(self, who):
        self.who = who
        self.messages = []

    def check(self, condition, message):
        if not condition:
            self.messages.append(message)

    def finish(self):
        import sys

        for message in self.messages:
            print(f"{self.who}: {message}", file=sys.stderr)
        if self.messages:
            print(f"{self.who}: {len(self.messages)} failure(s)", file=sys.stderr)
            sys.exit(1)
        print(f"{self.who}: ok")
