"""Fits the polynomial coefficients of src/backend/cpu/vecmath.c (f32 vector math).

Weighted least squares on Chebyshev nodes, reweighted (Lawson) towards minimax relative error,
against mpmath at 50 digits. Prints each polynomial's coefficients (highest degree first, as Horner
uses them) and its relative error in units of 2^-24. Run: bench/.venv/bin/python fit_vecmath.py
"""
import mpmath
import numpy as np

mpmath.mp.dps = 50


def fit(name, variable, target, lo, hi, degree, scale=None, fixed=()):
    """target(x) ~ sum_k c_k variable(x)^k; `fixed` pins the first coefficients."""
    nodes = 4000
    k = np.arange(nodes)
    x = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / nodes)
    y = np.array([float(target(mpmath.mpf(float(v)))) for v in x])
    v = variable(x)
    rest = y - sum(c * v**i for i, c in enumerate(fixed))
    s = scale(x) if scale else np.abs(y)
    cols = np.stack([v**i for i in range(len(fixed), degree + 1)], axis=1)
    w = np.ones(nodes)
    for _ in range(60):
        a = cols * (w / s)[:, None]
        c, *_ = np.linalg.lstsq(a, rest * w / s, rcond=None)
        err = (cols @ c - rest) / s
        w = w * np.sqrt(np.abs(err) / np.abs(err).max() + 1e-3)
        w /= w.max()
    coefficients = list(fixed) + list(c.astype(np.float32).astype(np.float64))
    # relative error of the float32-rounded coefficients, in double
    approx = sum(cf * v**i for i, cf in enumerate(coefficients))
    error = np.abs(approx - y) / (scale(x) if scale else np.abs(y))
    print(f"{name}: degree {degree} on [{lo}, {hi}], max rel error {error.max() * 2**24:.3f} x 2^-24")
    for i, cf in reversed(list(enumerate(coefficients))):
        print(f"    c{i} = {np.float32(cf).item():.9g}f ({float(np.float32(cf)).hex()})")


# exp(r) = 1 + r + r^2 P(r), |r| <= ln2/2 (plus slack for the low part of the argument)
fit("exp", lambda r: r, mpmath.exp, -0.3472, 0.3472, 6, fixed=(1.0, 1.0))
# tanh(x) = x + x^3 P(x^2) on |x| < 0.625
fit("tanh", lambda x: x * x, lambda x: mpmath.tanh(x) / x if x else 1, 1e-6, 0.625, 6, fixed=(1.0,))
# erf(x / sqrt 2) = x Q(x^2) on |x| < 0.7072
fit("erf_scaled", lambda x: x * x, lambda x: mpmath.erf(x / mpmath.sqrt(2)) / x, 1e-6, 0.7072, 5)
# erfc(z) exp(z^2) = R(t), t = 1 / (1 + z / 2), z in [0.5, 10.5]
for degree in (10, 12, 14):
    fit(f"erfcx deg {degree}", lambda z: 1 / (1 + 0.5 * z),
        lambda z: mpmath.erfc(z) * mpmath.exp(z * z), 0.5, 10.5, degree)
