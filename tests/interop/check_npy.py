"""Interop with numpy's .npy reader and writer.

    check_npy.py check-eagle DIR   checks DIR/eagle_<name>.npy, written by eagle_interop: numpy
                                   loads the same values, and the bytes are exactly what
                                   numpy.save writes for that array
    check_npy.py write DIR         writes DIR/python_<name>.npy with numpy.save, plus layouts that
                                   eagle must convert (Fortran order, big-endian, format 2.0/3.0)
                                   and one dtype it must refuse (int16)
"""

import io
import sys

import numpy as np

from spec import SPECS, Failures, expected

NAMES = [name for name in SPECS if SPECS[name][1] is not None]


def check_eagle(directory):
    failures = Failures("check_npy.py check-eagle")
    for name in NAMES:
        path = f"{directory}/eagle_{name}.npy"
        want = expected(name)
        got = np.load(path, allow_pickle=False)
        failures.check(got.dtype == want.dtype, f"{name}: dtype {got.dtype}, expected {want.dtype}")
        failures.check(got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}")
        failures.check(
            got.shape == want.shape and np.array_equal(got, want), f"{name}: values {got} != {want}"
        )
        reference = io.BytesIO()
        np.save(reference, want, allow_pickle=False)
        with open(path, "rb") as f:
            mine = f.read()
        failures.check(
            mine == reference.getvalue(),
            f"{name}: bytes differ from numpy.save: {mine[:128]!r} vs {reference.getvalue()[:128]!r}",
        )
    failures.finish()


def write(directory):
    for name in NAMES:
        np.save(f"{directory}/python_{name}.npy", expected(name), allow_pickle=False)
    fortran = np.asfortranarray(expected("f32"))
    assert not fortran.flags.c_contiguous
    np.save(f"{directory}/python_fortran.npy", fortran)
    # The transposed view of a C array is Fortran-contiguous: numpy stores it column-major.
    np.save(f"{directory}/python_fortran_transposed.npy",
            np.arange(12, dtype=np.int32).reshape(3, 4).T)
    np.save(f"{directory}/python_bigendian.npy", expected("f64").astype(">f8"))
    np.save(f"{directory}/python_bigendian_f16.npy", expected("f16").astype(">f2"))
    for version, name in (((2, 0), "i32"), ((3, 0), "u8")):
        with open(f"{directory}/python_v{version[0]}.npy", "wb") as f:
            np.lib.format.write_array(f, expected(name), version=version)
    np.save(f"{directory}/python_int16.npy", np.arange(3, dtype=np.int16))
    print("check_npy.py write: ok")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("check-eagle", "write"):
        sys.exit(__doc__)
    (check_eagle if sys.argv[1] == "check-eagle" else write)(sys.argv[2])
