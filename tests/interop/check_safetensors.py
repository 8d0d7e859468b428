"""Interop with the reference safetensors implementation (PyPI `safetensors`, Rust core).

    check_safetensors.py check-eagle DIR   checks DIR/eagle.safetensors and
                                            DIR/eagle_bf16.safetensors, written by eagle_interop
    check_safetensors.py write DIR         writes DIR/python.safetensors with
                                            safetensors.numpy.save_file for eagle_interop to check
"""

import json
import struct
import sys

import numpy as np
from safetensors import deserialize, safe_open
from safetensors.numpy import load_file, save_file

from spec import SPECS, Failures, bf16_bytes, expected


def check_eagle(directory):
    failures = Failures("check_safetensors.py check-eagle")
    path = f"{directory}/eagle.safetensors"

    # The reference loader parses and validates the whole file.
    tensors = load_file(path)
    names = [name for name in SPECS if SPECS[name][1] is not None]
    failures.check(sorted(tensors) == sorted(names), f"tensor names {sorted(tensors)}")
    for name in names:
        want = expected(name)
        got = tensors.get(name)
        if got is None:
            continue
        failures.check(got.dtype == want.dtype, f"{name}: dtype {got.dtype}, expected {want.dtype}")
        failures.check(got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}")
        failures.check(
            got.shape == want.shape and np.array_equal(got, want), f"{name}: values {got} != {want}"
        )

    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata()
        failures.check(metadata.get("format") == "eagle", f"metadata {metadata}")
        failures.check(metadata.get("source") == "eagle interop \u2713", f"metadata {metadata}")
        failures.check("eagle_version" in metadata, f"metadata {metadata}")
        for name in names:
            failures.check(
                np.array_equal(f.get_tensor(name), expected(name)), f"{name}: get_tensor differs"
            )

    # The reference writer's layout: sorted by alignment then name, header padded to 8 bytes.
    with open(path, "rb") as f:
        raw = f.read()
    (header_length,) = struct.unpack("<Q", raw[:8])
    failures.check(header_length % 8 == 0, f"header length {header_length} not a multiple of 8")
    header = json.loads(raw[8 : 8 + header_length])
    entries = sorted((v["data_offsets"][0], k) for k, v in header.items() if k != "__metadata__")
    order = [k for _, k in entries]
    size = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2, "U8": 1, "BOOL": 1}
    want_order = sorted(order, key=lambda k: (-size[header[k]["dtype"]], k))
    failures.check(order == want_order, f"data order {order}, expected {want_order}")

    # bfloat16 has no numpy dtype: check through the generic deserializer.
    with open(f"{directory}/eagle_bf16.safetensors", "rb") as f:
        items = dict(deserialize(f.read()))
    bf16 = items.get("bf16")
    failures.check(bf16 is not None, "bf16 missing")
    if bf16 is not None:
        failures.check(bf16["dtype"].upper() == "BF16", f"bf16 dtype {bf16['dtype']}")
        failures.check(list(bf16["shape"]) == [2, 2], f"bf16 shape {bf16['shape']}")
        failures.check(bytes(bf16["data"]) == bf16_bytes(expected("bf16")), "bf16 bytes differ")
    failures.finish()


def write(directory):
    tensors = {name: expected(name) for name in SPECS if SPECS[name][1] is not None}
    tensors["i16"] = np.arange(3, dtype=np.int16)  # valid, but no eagle dtype
    save_file(tensors, f"{directory}/python.safetensors", metadata={"source": "python \u00e9"})
    print("check_safetensors.py write: ok")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("check-eagle", "write"):
        sys.exit(__doc__)
    (check_eagle if sys.argv[1] == "check-eagle" else write)(sys.argv[2])
