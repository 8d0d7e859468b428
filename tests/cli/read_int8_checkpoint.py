"""Reads an int8 checkpoint of `eagle quantize` with nothing but the Python standard library (and
numpy where it is installed), the way another program would, and checks it against the f32
checkpoint it was made of: each I8 kernel times its NAME.scale is within half a step of the f32
kernel, every other variable is unchanged, and the metadata names the scheme.

    python3 read_int8_checkpoint.py F32.safetensors INT8.safetensors EXPECTED_INT8_KERNELS
"""
import array
import json
import struct
import sys

CODES = {"F32": "f", "I8": "b"}


def read(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    base = 8 + n
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        values = array.array(CODES[entry["dtype"]])
        values.frombytes(blob[base + begin : base + end])
        if sys.byteorder != "little":
            values.byteswap()
        tensors[name] = (entry["dtype"], entry["shape"], values)
    return header.get("__metadata__", {}), tensors, blob, base


def main():
    _, exact, _, _ = read(sys.argv[1])
    meta, quantized, blob, base = read(sys.argv[2])
    want = int(sys.argv[3])
    assert meta.get("eagle.int8", "").startswith("symmetric per output channel"), meta
    kernels = [n for n, (dtype, _, _) in quantized.items() if dtype == "I8"]
    assert len(kernels) == want, (kernels, want)
    assert int(meta["eagle.int8.layers"]) == want, meta
    # the model's variables only (the optimizer's slots stay behind)
    for name in quantized:
        if name.endswith(".scale"):
            continue
        dtype, shape, values = exact[name]
        if name not in kernels:
            assert quantized[name][0] == dtype and quantized[name][2] == values, name
            continue
        q_dtype, q_shape, q = quantized[name]
        s_dtype, s_shape, scale = quantized[name + ".scale"]
        assert (q_dtype, q_shape, s_dtype, s_shape) == ("I8", shape, "F32", [shape[-1]]), name
        outputs = shape[-1]
        worst = 0.0
        for i, w in enumerate(values):
            step = scale[i % outputs]
            worst = max(worst, abs(q[i] * step - w) / step)
        assert worst <= 0.5 + 1e-4, (name, worst)
    try:
        import numpy  # the layout a numpy reader sees: a plain int8 array in row-major order
    except ImportError:
        numpy = None
    if numpy is not None:
        header_len = base - 8
        header = json.loads(blob[8 : 8 + header_len])
        for name in kernels:
            begin, end = header[name]["data_offsets"]
            arr = numpy.frombuffer(blob[base + begin : base + end], dtype=numpy.int8)
            arr = arr.reshape(header[name]["shape"])
            assert arr.ravel().tolist() == list(quantized[name][2]), name
    print(f"read {len(kernels)} int8 kernels and their scales; numpy: {numpy is not None}")


main()
