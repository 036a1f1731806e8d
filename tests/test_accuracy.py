"""Derivatives where the textbook formulas cancel (``1 - tanh(x)**2`` where tanh rounds to 1,
``s (1 - s)`` of the logistic ``s``, ``1 - x**2`` next to +-1): every scalar op of the table
to order 3 at tiny, moderate and large arguments and next to the ends of its domain, against
mpmath -- eager, compiled by sweeps and compiled by Taylor mode -- and the Taylor rules of
softplus and atan2 to order 8 (they take Taylor mode, not nested sweeps). The softmax family
(``1 - softmax`` where softmax rounds to 1): every partial to order 3 in the logits."""

from __future__ import annotations

import contextlib
import importlib
import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import sympy as sp

import symtape as st

X, Y = sp.Symbol("x", real=True), sp.Symbol("y", real=True)
function_module = importlib.import_module("symtape.compile.transforms")

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


def _nested(fn, x, order: int, sweep: str = "gradient"):
    """``d^order fn / dx^order`` by ``order`` nested tapes (reverse sweeps over the rules);
    ``sweep="jacobian"``: the whole derivative tensor of a vector ``x``."""
    tapes = [st.GradientTape(persistent=True) for _ in range(order)]
    with contextlib.ExitStack() as stack:
        for t in tapes:
            stack.enter_context(t)
            t.watch(x)
        d = fn(x)
        for t in reversed(tapes):
            d = getattr(t, sweep)(d, x)
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
    """The new forms keep the one rule for values (docs/tensorflow.md): eager and compiled code
    agree, infinities, nan and overflowing arguments included; the limits at +-inf are 0 (tanh,
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


# --------------------------------------------------------------------------------------------
# Taylor rules of softplus and atan2
# --------------------------------------------------------------------------------------------


@pytest.fixture
def taylor_only(monkeypatch):
    """Fails a test whose derivative takes nested sweeps instead of Taylor mode; records
    what the Taylor-mode entry points returned."""
    used = []
    scalar, atoms = function_module._taylor_derivative, function_module._taylor_atoms
    monkeypatch.setattr(function_module, "_taylor_derivative",
                        lambda *a: used.append(scalar(*a)) or used[-1])
    monkeypatch.setattr(function_module, "_taylor_atoms",
                        lambda *a: used.append(atoms(*a)) or used[-1])

    def nested(*a, **k):
        raise AssertionError("nested sweeps were taken")

    monkeypatch.setattr(function_module, "_derivatives", nested)
    return used


def _softplus_series(x0, order: int) -> list:
    f = sp.log(1 + sp.exp(X))
    return [sp.diff(f, X, k).subs(X, x0) / math.factorial(k) for k in range(order + 1)]


def test_taylor_series_of_softplus_is_exact():
    series = st.taylor(st.nn.softplus, 0, 8)
    assert series.coefficients == [sp.log(2), sp.Rational(1, 2), sp.Rational(1, 8), 0,
                                   sp.Rational(-1, 192), 0, sp.Rational(1, 2880), 0,
                                   sp.Rational(-17, 645120)]
    for k, c in enumerate(_softplus_series(sp.Integer(0), 8)):
        assert sp.simplify(series.coefficients[k] - c) == 0
    third = Fraction(1, 3)
    series = st.taylor(st.nn.softplus, third, 8)
    want = _softplus_series(sp.Rational(1, 3), 8)
    for got, w in zip(series.coefficients, want):
        assert float(sp.N(got - w, 40)) == pytest.approx(0, abs=1e-30)
    for got, w in zip(np.asarray(series(np.array(1 / 3))).reshape(-1), want):
        assert float(got) == pytest.approx(float(w), rel=1e-13)


def test_eighth_derivative_of_softplus_takes_taylor_mode(taylor_only):
    d = st.derivative(st.nn.softplus, order=8, input_signature=[st.TensorSpec(())])
    assert taylor_only and all(u is not None for u in taylor_only)
    points = [-30.0, -3.0, -0.5, 0.0, 1e-8, 0.7, 4.0, 20.0]
    f = sp.lambdify(X, sp.diff(sp.log(1 + sp.exp(X)), X, 8), "mpmath")
    got = d(np.array(points))
    for p, g in zip(points, got):
        with mpmath.workdps(200):
            want = float(f(mpmath.mpf(p)))
        assert float(g) == pytest.approx(want, rel=1e-11), p


def test_sigmoid_cross_entropy_takes_taylor_mode(taylor_only):
    """Its stable form holds a softplus too: the 6th derivative in the logits."""
    d = st.derivative(_sce(1.0), order=6, input_signature=[st.TensorSpec(())])
    assert taylor_only and all(u is not None for u in taylor_only)
    f = sp.lambdify(X, sp.diff(sp.log(1 + sp.exp(-X)), X, 6), "mpmath")
    for p, g in zip([-5.0, 0.0, 0.3, 25.0], d(np.array([-5.0, 0.0, 0.3, 25.0]))):
        with mpmath.workdps(200):
            assert float(g) == pytest.approx(float(f(mpmath.mpf(p))), rel=1e-11), p


ATAN2_POINTS = [(0.3, -1.2), (-2.0, 0.5), (1e-3, 4.0), (5.0, 5.0)]


def _atan2_partial(i: int, j: int, y0: float, x0: float) -> float:
    """``d^(i+j) atan2(y, x) / dy^i dx^j`` (sympy.diff, 40 digits)."""
    d = sp.diff(sp.atan2(Y, X), *([Y] * i + [X] * j))
    return float(d.subs({Y: sp.Float(y0, 40), X: sp.Float(x0, 40)}).evalf(40))


@pytest.mark.parametrize("argnum", [0, 1])
def test_eighth_derivative_of_atan2_in_one_argument_takes_taylor_mode(argnum, taylor_only):
    for y0, x0 in ATAN2_POINTS:
        fixed = x0 if argnum == 0 else y0

        def f(t):
            c = st.constant(fixed)
            return st.atan2(t, c) if argnum == 0 else st.atan2(c, t)

        d = st.derivative(f, order=8, input_signature=[st.TensorSpec(())])
        want = _atan2_partial(8, 0, y0, x0) if argnum == 0 else _atan2_partial(0, 8, y0, x0)
        got = float(d(np.array(y0 if argnum == 0 else x0)))
        assert got == pytest.approx(want, rel=1e-11, abs=1e-11 * abs(want) + 1e-300), (y0, x0)
    assert taylor_only and all(u is not None for u in taylor_only)


def test_eighth_derivatives_of_atan2_in_both_arguments_take_taylor_mode(taylor_only):
    """Every mixed partial of order 8 (interpolated from 9 Taylor series) and a directional
    derivative along (vy, vx), against sympy.diff."""
    d = st.derivative(lambda v: st.atan2(v[0], v[1]), order=8,
                      input_signature=[st.TensorSpec((2,))])
    dv = st.derivative(lambda v: st.atan2(v[0], v[1]), order=8, direction=True,
                       input_signature=[st.TensorSpec((2,)), st.TensorSpec((2,))])
    assert taylor_only and all(u is not None for u in taylor_only)
    t = sp.Symbol("t")
    for y0, x0 in ATAN2_POINTS[:3]:
        got = d(np.array([y0, x0]))
        assert got.shape == (2,) * 8
        scale = max(abs(_atan2_partial(8 - j, j, y0, x0)) for j in range(9))
        for j in range(9):  # j derivatives in x, the others in y
            idx = (0,) * (8 - j) + (1,) * j
            want = _atan2_partial(8 - j, j, y0, x0)
            assert float(got[idx]) == pytest.approx(want, rel=1e-10, abs=1e-12 * scale), \
                (y0, x0, j)
        vy, vx = 0.5, -2.0
        line = sp.atan2(sp.Float(y0, 40) + vy * t, sp.Float(x0, 40) + vx * t)
        want = float(sp.diff(line, t, 8).subs(t, 0).evalf(40))
        got = float(dv(np.array([y0, x0]), np.array([vy, vx])))
        assert got == pytest.approx(want, rel=1e-10), (y0, x0)


# --------------------------------------------------------------------------------------------
# The softmax family: 1 - softmax where softmax rounds to 1
# --------------------------------------------------------------------------------------------

XS = sp.symbols("x0:4", real=True)
# rows of 4 logits, the leader ahead by a gap of 0 (a tie), 1, 9, 30, 300 and 1e-8, first or
# second; at a gap of 30, 1 - softmax is 9.36e-14 and the textbook 1 - softmax 9.35e-14
LOGITS = np.array([[0.25, 0.25, -1.0, 0.0], [1.0, 0.0, -0.5, -2.0], [9.0, 0.0, 0.5, -3.0],
                   [30.0, 0.0, -1.0, -2.0], [300.0, 0.0, -1.0, -300.0],
                   [2e-8, 1e-8, 0.0, -1e-8], [-1.0, -31.0, -32.0, -40.0],
                   [0.0, 30.0, -1.0, 2.0], [-7.0, 2.0, -300.0, -1.0]])
_LSE = sp.log(sum(sp.exp(x) for x in XS))


def _xent(labels):
    return lambda x: st.nn.softmax_cross_entropy_with_logits(labels=st.constant(labels),
                                                             logits=x)


# name: (symtape function of the 4 logits, exact formula in XS)
AXIS_OPS = {
    "log_softmax_0": (lambda x: st.nn.log_softmax(x)[0], XS[0] - _LSE),
    "log_softmax_3": (lambda x: st.nn.log_softmax(x)[3], XS[3] - _LSE),
    "xent_one_hot_0": (_xent([1.0, 0.0, 0.0, 0.0]), _LSE - XS[0]),
    "xent_one_hot_1": (_xent([0.0, 1.0, 0.0, 0.0]), _LSE - XS[1]),
    # labels that no softmax of LOGITS comes near (softmax - labels would cancel there for
    # any formula: it is ill-conditioned)
    "xent_soft": (_xent([0.625, 0.0625, 0.3125, 0.0]),
                  _LSE - (sp.Rational(5, 8) * XS[0] + sp.Rational(1, 16) * XS[1]
                          + sp.Rational(5, 16) * XS[2])),
}


def _exact_tensor(expr, order: int) -> np.ndarray:
    """Every ``order``-th partial at every row of LOGITS, as _exact gives them (shape
    ``(rows,) + (4,) * order``, None where not a normal double)."""
    out = np.empty((len(LOGITS),) + (4,) * order, dtype=object)
    for idx in np.ndindex(*(4,) * order):
        f = sp.lambdify(XS, sp.diff(expr, *[XS[i] for i in idx]), "mpmath")
        for r, row in enumerate(LOGITS):
            with mpmath.workdps(1000):
                v = f(*[mpmath.mpf(float(p)) for p in row])
            out[(r,) + idx] = float(v) if 2.3e-308 < abs(v) < 1.7e308 else None
    return out


def _check_rows(name, how, order, got, want):
    got = np.asarray(got).reshape(want.shape)
    bad = [(LOGITS[i[0]].tolist(), i[1:], float(got[i]), want[i]) for i in np.ndindex(*want.shape)
           if want[i] is not None and not abs(float(got[i]) - want[i]) <= RTOL * abs(want[i])]
    assert not bad, f"{name} order {order} {how}: (logits, index, got, exact) {bad}"


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(AXIS_OPS))
def test_softmax_family_derivatives_are_accurate(name, order):
    """log_softmax and the softmax cross entropy in their logits, every partial to order 3,
    against mpmath -- eager, compiled from the sweeps and by st.derivative/st.hessian/st.grad
    (a vector argument: nested sweeps)."""
    fn, expr = AXIS_OPS[name]
    want = _exact_tensor(expr, order)
    eager = [_nested(fn, st.constant(row), order, sweep="jacobian").numpy() for row in LOGITS]
    _check_rows(name, "eager", order, np.stack(eager), want)
    sym = st.symbol("x", shape=(4,))
    sweeps = st.compile(_nested(fn, sym, order, sweep="jacobian"), [sym])
    _check_rows(name, "compiled sweeps", order, sweeps(LOGITS), want)
    spec = [st.TensorSpec((4,))]
    d = st.derivative(fn, order=order, input_signature=spec)
    _check_rows(name, "st.derivative", order, d(LOGITS), want)
    if order < 3:
        d = (st.grad if order == 1 else st.hessian)(fn, input_signature=spec)
        _check_rows(name, "st.grad" if order == 1 else "st.hessian", order, d(LOGITS), want)


def test_log_softmax_gradient_at_a_gap_of_30_is_the_others_share():
    """The example of the defect: 1 - softmax at [30, 0] is 9.3576e-14 (textbook 9.348e-14);
    the softmax of the other element, exp(log_softmax), carries log_softmax's rounding
    (ulp(30) relative)."""
    want = float(1 / (1 + mpmath.exp(30)))
    x = st.Variable([30.0, 0.0])
    with st.GradientTape(persistent=True) as t:
        y = st.nn.log_softmax(x)[0]
        loss = st.nn.softmax_cross_entropy_with_logits(labels=[1.0, 0.0], logits=x)
    assert float(t.gradient(y, x)[0]) == pytest.approx(want, rel=1e-14, abs=0)
    assert float(t.gradient(loss, x)[0]) == pytest.approx(-want, rel=1e-14, abs=0)


def test_jacobian_through_a_reduction_of_a_symbol_alone():
    """A rule's reduction of its primal alone (reduce_max's tie count, the softmax family's
    sums of exps) is the same for every seed of a batched sweep: it is made again, not
    batched (that asked for a reduction over an axis the tensor does not have)."""
    x = st.symbol("x", shape=(2, 3))
    with st.GradientTape() as t:
        t.watch(x)
        y = st.reduce_max(x, axis=1)
    jac = st.compile(t.jacobian(y, x), [x])(np.array([[1.0, 3.0, 2.0], [0.0, -1.0, 0.0]]))
    want = np.zeros((2, 2, 3))
    want[0, 0, 1] = 1.0
    want[1, 1, [0, 2]] = 0.5  # TF: ties share the gradient
    np.testing.assert_array_equal(jac, want)
