"""Derivatives where the textbook formulas cancel (``1 - tanh(x)**2`` where tanh rounds to 1,
``s (1 - s)`` of the logistic ``s``, ``1 - x**2`` next to +-1): every scalar op of the table
to order 3 at tiny, moderate and large arguments and next to the ends of its domain, against
mpmath -- eager, compiled by sweeps and compiled by Taylor mode."""

from __future__ import annotations

import contextlib

import mpmath
import numpy as np
import pytest
import sympy as sp

import symtape as st

X = sp.Symbol("x", real=True)

RTOL = 1e-13
SELU_A = sp.Float("1.6732632423543772848170429916717", 50)
SELU_S = sp.Float("1.0507009873554804934193349852946", 50)
EDGE = [1 - 1e-8, -1 + 1e-8]  # next to the ends of (-1, 1)


def _pts(*scales, signs=(1, -1)):
    return [s * v for v in scales for s in signs]


ALL = _pts(1e-8, 0.5, 9.0, 19.0, 30.0, 300.0)
POSITIVE = _pts(1e-8, 0.5, 9.0, 19.0, 30.0, 300.0, signs=(1,))
UNIT = _pts(1e-8, 0.5) + EDGE


def _sce(label: float):
    return lambda x: st.nn.sigmoid_cross_entropy_with_logits(labels=st.constant(label),
                                                             logits=x)


# name: (symtape function, exact formula in X, points)
OPS = {
    "exp": (st.exp, sp.exp(X), ALL),
    "expm1": (st.math.expm1, sp.exp(X) - 1, ALL),
    "log": (st.math.log, sp.log(X), POSITIVE),
    "log1p": (st.math.log1p, sp.log(1 + X), POSITIVE + [-1e-8, -0.5, -1 + 1e-8]),
    "sin": (st.sin, sp.sin(X), ALL),
    "cos": (st.cos, sp.cos(X), ALL),
    "tan": (st.tan, sp.tan(X), ALL),
    "asin": (st.asin, sp.asin(X), UNIT),
    "acos": (st.acos, sp.acos(X), UNIT),
    "atan": (st.atan, sp.atan(X), ALL),
    "sinh": (st.sinh, sp.sinh(X), ALL),
    "cosh": (st.cosh, sp.cosh(X), ALL),
    "tanh": (st.tanh, sp.tanh(X), ALL),
    "asinh": (st.asinh, sp.asinh(X), ALL),
    "acosh": (st.acosh, sp.acosh(X), [1 + 1e-8, 1 + 2.0 ** -20, 1.5, 9.0, 19.0, 30.0, 300.0]),
    "atanh": (st.atanh, sp.atanh(X), UNIT),
    "erf": (st.math.erf, sp.erf(X), ALL),
    "sqrt": (st.sqrt, sp.sqrt(X), POSITIVE),
    "rsqrt": (st.math.rsqrt, 1 / sp.sqrt(X), POSITIVE),
    "sigmoid": (st.nn.sigmoid, 1 / (1 + sp.exp(-X)), ALL),
    "softplus": (st.nn.softplus, sp.log(1 + sp.exp(X)), ALL),
    "elu": (st.nn.elu, sp.Piecewise((X, X > 0), (sp.exp(X) - 1, True)), ALL),
    "selu": (st.nn.selu, SELU_S * sp.Piecewise((X, X > 0), (SELU_A * (sp.exp(X) - 1), True)),
             ALL),
    "sce_label_1": (_sce(1.0), sp.log(1 + sp.exp(-X)), ALL),
    "sce_label_0": (_sce(0.0), sp.log(1 + sp.exp(X)), ALL),
}


def _exact(expr, order: int, points) -> list:
    """The derivative at each point to 50 digits (mpmath with 1,000-digit working precision:
    at +-300 the exact formulas themselves cancel to 1e-261), None where it is not a normal
    double (or not real)."""
    f = sp.lambdify(X, sp.diff(expr, X, order), "mpmath")
    out = []
    for p in points:
        with mpmath.workdps(1000):
            v = f(mpmath.mpf(p))
        if isinstance(v, mpmath.mpc):
            v = v.real if v.imag == 0 else None
        out.append(None if v is None or not 2.3e-308 < abs(v) < 1.7e308 else
                   float(mpmath.mpf(v)))
    return out


def _nested(fn, x, order: int):
    """``d^order fn / dx^order`` by ``order`` nested tapes (reverse sweeps over the rules)."""
    tapes = [st.GradientTape(persistent=True) for _ in range(order)]
    with contextlib.ExitStack() as stack:
        for t in tapes:
            stack.enter_context(t)
            t.watch(x)
        d = fn(x)
        for t in reversed(tapes):
            d = t.gradient(d, x)
    return d


def _check(name, how, order, points, got, want):
    bad = [(p, float(g), w) for p, g, w in zip(points, np.asarray(got).reshape(-1), want)
           if w is not None and not abs(float(g) - w) <= RTOL * abs(w)]
    assert not bad, f"{name} order {order} {how}: (point, got, exact) {bad}"


@pytest.mark.parametrize("name", sorted(OPS))
def test_derivatives_to_order_three_are_accurate(name):
    fn, expr, points = OPS[name]
    pts = np.array(points)
    for order in (1, 2, 3):
        want = _exact(expr, order, points)
        _check(name, "eager", order, points, _nested(fn, st.constant(pts), order).numpy(),
               want)
        sym = st.symbol("x")
        sweeps = st.compile(_nested(fn, sym, order), [sym])
        _check(name, "compiled sweeps", order, points, sweeps(pts), want)
        d = st.derivative(fn, order=order, input_signature=[st.TensorSpec(())])
        _check(name, "st.derivative", order, points, d(pts), want)
    g = st.grad(fn, input_signature=[st.TensorSpec(())])
    _check(name, "st.grad", 1, points, g(pts), _exact(expr, 1, points))


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "softplus", "asin", "acos", "atanh",
                                  "acosh", "sce_label_1"])
def test_eager_and_compiled_derivatives_agree_at_special_points(name):
    """The new forms keep README's one rule for values: eager and compiled code agree,
    infinities, nan and overflowing arguments included; the limits at +-inf are 0 (tanh,
    logistic) and past overflow of cosh the derivative underflows to 0, not nan."""
    fn = OPS[name][0]
    pts = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, 2.0, 360.0, -360.0,
                    710.0, -710.0, 800.0, -800.0, 1e308, -1e308])
    for order in (1, 2, 3):
        eager = _nested(fn, st.constant(pts), order).numpy()
        sym = st.symbol("x")
        compiled = st.compile(_nested(fn, sym, order), [sym])(pts)
        np.testing.assert_allclose(compiled, eager, rtol=1e-13, atol=0, equal_nan=True,
                                   err_msg=f"{name} order {order}")
        if name in ("tanh", "sigmoid"):
            assert np.all(eager[[0, 1, 12, 13, 14, 15]] == 0), (name, order, eager)
            assert not np.isnan(eager[[0, 1] + list(range(3, 16))]).any(), (name, order)


def test_tanh_gradient_at_19_is_sech_squared():
    """The example of the defect: 1 - tanh(19)**2 is 2.2e-16 (or 0), sech(19)**2 1.26e-16."""
    want = float(1 / mpmath.cosh(19) ** 2)
    g = st.grad(st.tanh, input_signature=[st.TensorSpec(())])
    assert float(g(np.array(19.0))) == pytest.approx(want, rel=1e-15, abs=0)
    x = st.Variable(19.0)
    with st.GradientTape() as t:
        y = st.tanh(x)
    assert float(t.gradient(y, x)) == pytest.approx(want, rel=1e-15, abs=0)
