"""Fits the polynomial coefficients of src/backend/cpu/vecmath.c (f32 vector math), and the
rational ones of its fast-math variants (fit_rational).

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


def fit_rational(name, target, lo, hi, m, n, nodes=3000, iterations=40):
    """target(x) ~ P(x^2) / Q(x^2), P of degree m, Q of degree n with Q(0) = 1: linearized
    (P - y Q = 0) least squares of relative error, reweighted with the last Q and (Lawson) towards
    minimax. Coefficients highest degree first, as Horner uses them."""
    k = np.arange(nodes)
    x = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / nodes)
    y = np.array([float(target(mpmath.mpf(float(v)))) for v in x])
    z = x * x
    q_values, w = np.ones(nodes), np.ones(nodes)
    for _ in range(iterations):
        a = np.concatenate([np.stack([z**i for i in range(m + 1)], 1),
                            np.stack([-y * z**i for i in range(1, n + 1)], 1)], 1)
        s = np.abs(y) * np.abs(q_values)
        c, *_ = np.linalg.lstsq(a * (w / s)[:, None], y * w / s, rcond=None)
        p, q = c[:m + 1], np.concatenate([[1.0], c[m + 1:]])
        q_values = sum(q[i] * z**i for i in range(n + 1))
        err = (sum(p[i] * z**i for i in range(m + 1)) / q_values - y) / np.abs(y)
        w = w * np.sqrt(np.abs(err) / np.abs(err).max() + 1e-3)
        w /= w.max()
    p, q = p.astype(np.float32), q.astype(np.float32)
    approx = sum(float(p[i]) * z**i for i in range(m + 1)) / sum(float(q[i]) * z**i for i in range(n + 1))
    error = np.abs(approx - y) / np.abs(y)
    print(f"{name}: P degree {m}, Q degree {n} on [{lo}, {hi}], max rel error {error.max() * 2**24:.3f} x 2^-24")
    print("    P:", ", ".join(f"{float(v).hex()}" for v in p[::-1]))
    print("    Q:", ", ".join(f"{float(v).hex()}" for v in q[::-1]))


# the fast variants: exp of degree 4 (c0 = 1) on the one-constant reduction's range
fit("exp_fast", lambda r: r, mpmath.exp, -0.3467, 0.3467, 4, fixed=(1.0,))
# tanh(x) / x = P(x^2) / Q(x^2) on |x| <= 9; erf(x / sqrt 2) / x likewise on |x| <= 5.6
fit_rational("tanh_fast", lambda x: mpmath.tanh(x) / x, 1e-4, 9.0, 4, 3)
fit_rational("gelu_fast erf", lambda x: mpmath.erf(x / mpmath.sqrt(2)) / x, 1e-4, 5.6, 5, 4)
