"""Taylor mode: ``st.derivative`` of a scalar argument against ``sympy.diff`` (every scalar op
of the table to order 5, the 10th derivative of a composite function at 100 points), the
quadratic growth of its DAG, and the fall back to nested sweeps for user rules."""

from __future__ import annotations

import importlib
import itertools
import math

import mpmath
import numpy as np
import pytest
import sympy as sp

import symtape as st
from symtape.element import graph as G
from symtape.derivatives import taylor as taylor
from symtape.compile import strategy
from test_ops import ROWS, _sample

X = sp.Symbol("x", real=True)
function_module = importlib.import_module("symtape.compile.transforms")


def _scalar_unary_rows():
    out = []
    for name, r in sorted(ROWS.items()):
        if r.scalar and r.args and r.args[0].dtype == "float64" and 0 not in r.nograd:
            out.append(name)
    return out


#: Heads with no Taylor rule yet: their high derivatives come from nested sweeps (the values
#: above are still checked against sympy.diff); a Taylor rule for each is listed in the limits.
NO_TAYLOR_RULE = {"bessel_i0e", "bessel_i1e"}


@pytest.mark.parametrize("name", _scalar_unary_rows())
def test_every_scalar_op_to_order_five_matches_sympy(name, monkeypatch):
    """The op of the row applied to ``x`` (its other arguments fixed at sample values):
    derivatives of orders 2 to 5 by Taylor mode equal ``sympy.diff`` of its formula."""
    r = ROWS[name]
    others = [float(np.asarray(v).reshape(-1)[0]) for v in _sample(r)[1:]]

    def f(x):
        return r.fn(x, *[st.constant(v) for v in others])

    sym = st.symbol("x")
    formula = f(sym).formula().xreplace({sym.symbols[()]: X})
    used = []
    run = function_module._taylor_derivative
    monkeypatch.setattr(function_module, "_taylor_derivative",
                        lambda *a: used.append(run(*a)) or used[-1])
    rng = np.random.default_rng(4)
    points = [float(np.asarray(r.args[0].sample(rng)).reshape(-1)[0]) for _ in range(4)]
    for k in range(2, 6):
        d = st.derivative(f, order=k, input_signature=[st.TensorSpec(())])
        want = sp.diff(formula, X, k)
        for p in points:
            expected = complex(want.subs(X, sp.Float(p, 30)).evalf(30)).real
            assert d(np.array(p)) == pytest.approx(expected, rel=1e-9, abs=1e-9), (name, k, p)
    kinked = formula.has(*taylor.KINKED) or formula.has(sp.atan2)
    assert kinked or name in NO_TAYLOR_RULE or all(u is not None for u in used), \
        f"{name}: Taylor mode fell back"


def composite(x):
    return st.exp(st.sin(x)) * st.tanh(x) / (1 + x ** 2)


def test_tenth_derivative_matches_sympy_at_100_points():
    d10 = st.derivative(composite, order=10, input_signature=[st.TensorSpec(())])
    points = np.linspace(-3.0, 3.0, 100)
    got = d10(points)
    f = sp.exp(sp.sin(X)) * sp.tanh(X) / (1 + X ** 2)
    ref = sp.lambdify(X, sp.diff(f, X, 10), "mpmath")
    with mpmath.workdps(40):
        want = np.array([float(ref(mpmath.mpf(float(p)))) for p in points])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.max(np.abs(want)))


def _nodes(order: int) -> int:
    x = st.symbol("x")
    y = composite(x)
    (c,) = taylor.coefficients([y._atoms.flat[0]], [x._atoms.flat[0]], [G.ONE], order)
    return len(G.reachable([c[-1]]))


def test_derivative_dag_grows_quadratically_in_the_order():
    sizes = {k: _nodes(k) for k in (4, 8, 16)}
    assert sizes[8] <= 4.5 * sizes[4] and sizes[16] <= 4.5 * sizes[8], sizes
    assert sizes[16] > 2 * sizes[8]  # and it does grow (not a constant)


def test_formulas_of_taylor_mode_are_sympys():
    d4 = st.derivative(lambda x: x ** 3 * st.exp(2 * x), order=4,
                       input_signature=[st.TensorSpec(())])
    x = sp.Symbol("x", real=True)
    want = sp.diff(x ** 3 * sp.exp(2 * x), x, 4)
    got = d4.formula()
    assert sp.simplify(got.xreplace({s: x for s in got.free_symbols}) - want) == 0


def test_directional_coefficients_of_several_leaves():
    """x(t) = x + t u, y(t) = y + t v: the second coefficient of x*y is u*v."""
    x, y, u, v = (G.Leaf.new(n) for n in "xyuv")
    (c,) = taylor.coefficients([G.mul(x, G.call(sp.sin, y))], [x, y], [u, v], 3)
    t = sp.Symbol("t")
    xs, ys, us, vs = sp.symbols("x y u v")
    series = sp.series((xs + t * us) * sp.sin(ys + t * vs), t, 0, 4).removeO()
    env = {x: xs, y: ys, u: us, v: vs}
    for n in range(4):
        got = G.expand(c[n]).xreplace(env)
        assert sp.simplify(got - series.coeff(t, n)) == 0


def test_user_rules_fall_back_to_nested_sweeps():
    @st.custom_gradient
    def doubled_rule(x):
        return st.sin(x), lambda g: 2 * g * st.cos(x)

    d2 = st.derivative(doubled_rule, order=2, input_signature=[st.TensorSpec(())])
    # d/dx of the rule 2 cos x is -2 sin x: the rule, not sin's own derivative
    assert d2(np.array(0.5)) == pytest.approx(-2 * math.sin(0.5))
    with pytest.raises(taylor.Unsupported):
        x = st.symbol("x")
        taylor.coefficients([doubled_rule(x)._atoms.flat[0]], [x._atoms.flat[0]], [G.ONE], 2)


def test_kinks_follow_tensorflow_conventions():
    """relu and abs at 0: the branch of the value at 0, as nested sweeps give."""
    for fn in (lambda x: st.nn.relu(x) ** 3, lambda x: st.abs(x) ** 3 + st.abs(x)):
        taylor_d = st.derivative(fn, order=2, input_signature=[st.TensorSpec(())])
        nested = st.hessian(lambda x: fn(x[0]), input_signature=[st.TensorSpec((1,))])
        for p in (-1.0, 0.0, 2.0):
            assert taylor_d(np.array(p)) == nested(np.array([p]))[0, 0]


@pytest.mark.parametrize("k", [0, 1])
def test_low_orders_unchanged(k):
    d = st.derivative(composite, order=k, input_signature=[st.TensorSpec(())])
    x = 0.3
    f = sp.exp(sp.sin(X)) * sp.tanh(X) / (1 + X ** 2)
    assert d(np.array(x)) == pytest.approx(float(sp.diff(f, X, k).subs(X, x)), rel=1e-13)


def test_vector_outputs_of_a_scalar_argument():
    d3 = st.derivative(lambda x: st.stack([x ** 4, st.sin(x)]), order=3,
                       input_signature=[st.TensorSpec(())])
    x = np.array([0.5, 2.0])
    np.testing.assert_allclose(d3(x), np.stack([24 * x, -np.cos(x)], axis=-1), rtol=1e-14)


def test_orders_are_consistent_with_each_other():
    """The k-th derivative is the derivative of the (k-1)-th: central differences."""
    h = 1e-5
    for k in (2, 3, 6):
        dk = st.derivative(composite, order=k, input_signature=[st.TensorSpec(())])
        dk1 = st.derivative(composite, order=k - 1, input_signature=[st.TensorSpec(())])
        for p in itertools.islice(np.linspace(-2, 2, 7), 7):
            fd = (dk1(np.array(p + h)) - dk1(np.array(p - h))) / (2 * h)
            assert dk(np.array(p)) == pytest.approx(fd, rel=1e-5, abs=1e-5)


def _sympy_directional(expr, xs, x0, v, k):
    t = sp.Symbol("t", real=True)
    line = expr.xreplace({s: a + t * b for s, a, b in zip(xs, x0, v)})
    return float(sp.diff(line, t, k).subs(t, 0))


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_directional_derivatives_match_sympy(k):
    """d^k/dt^k f(x + t v): Taylor mode, and nested sweeps for a function with a kink."""
    a, b, c = sp.symbols("a b c", real=True)
    smooth = sp.exp(a * b) * sp.sin(c) / (1 + a ** 2)
    kinked = sp.Abs(a) ** 3 * b + c ** 2 * a

    def f_smooth(x):
        return st.exp(x[0] * x[1]) * st.sin(x[2]) / (1 + x[0] ** 2)

    def f_kinked(x):
        return st.abs(x[0]) ** 3 * x[1] + x[2] ** 2 * x[0]

    rng = np.random.default_rng(k)
    spec = [st.TensorSpec((3,)), st.TensorSpec((3,))]
    for fn, expr in ((f_smooth, smooth), (f_kinked, kinked)):
        d = st.derivative(fn, order=k, direction=True, input_signature=spec)
        for _ in range(3):
            x0, v = rng.normal(size=3), rng.normal(size=3)
            want = _sympy_directional(expr, (a, b, c), x0, v, k)
            assert float(d(x0, v)) == pytest.approx(want, rel=1e-10, abs=1e-10)


def test_directional_derivative_of_a_vector_function_and_errors():
    d2 = st.derivative(lambda x: st.stack([x[0] * x[1], st.sin(x[0])]), order=2,
                       direction=True)
    x0, v = np.array([0.3, 2.0]), np.array([1.0, -1.0])
    np.testing.assert_allclose(d2(x0, v), [2 * v[0] * v[1], -np.sin(x0[0]) * v[0] ** 2],
                               rtol=1e-14)
    with pytest.raises(st.errors.ShapeError, match="v has shape"):
        d2(x0, np.ones(3))


@pytest.mark.parametrize("n,d", [(1, 3), (2, 4), (3, 3), (3, 5), (4, 2)])
def test_interpolation_weights_recover_every_monomial(n, d):
    """``sum_j w[i][j] j^m = i! [i == m]`` for all multi-indices of order ``d``: the d-th
    directional derivative of ``x^m`` along ``j`` is ``d! j^m``, so the weights turn the
    directions' coefficients into exactly the partials (checked in exact arithmetic)."""
    from fractions import Fraction

    indices, weights = taylor.interpolation(n, d)
    assert len(indices) == math.comb(n + d - 1, d) == len(set(indices))
    assert all(sum(i) == d and len(i) == n for i in indices)
    for i, row in zip(indices, weights):
        for m in indices:
            got = sum(w * math.prod(Fraction(jv) ** mv for jv, mv in zip(j, m))
                      for w, j in zip(row, indices))
            assert got == (math.prod(map(math.factorial, i)) if i == m else 0)


def _mixed(x):
    return st.exp(st.sin(x[0])) * st.tanh(st.reduce_sum(x * x)) / (1 + x[-1] ** 2)


@pytest.mark.parametrize("n,k", [(2, 4), (2, 6), (3, 5)])
def test_mixed_partials_by_interpolation_match_sympy(n, k, monkeypatch):
    """Every partial of order k of a vector argument (interpolated from Taylor series along
    C(n+k-1, k) directions) equals ``sympy.diff`` of the expression at two points."""
    calls = []
    original = taylor.partials
    monkeypatch.setattr(taylor, "partials", lambda *a: calls.append(a) or original(*a))
    syms = sp.symbols(f"a0:{n}", real=True)
    expr = sp.exp(sp.sin(syms[0])) * sp.tanh(sum(s ** 2 for s in syms)) / (1 + syms[-1] ** 2)
    d = st.derivative(_mixed, order=k, input_signature=[st.TensorSpec((n,))])
    assert len(calls) == 1
    rng = np.random.default_rng(n * 10 + k)
    points = 0.4 * rng.normal(size=(2, n))
    got = d(points)
    assert got.shape == (2,) + (n,) * k
    for p, values in zip(points, got):
        env = dict(zip(syms, p))
        for idx in itertools.combinations_with_replacement(range(n), k):
            want = float(sp.diff(expr, *[syms[m] for m in idx]).evalf(30, subs=env))
            scale = max(1.0, np.max(np.abs(values)))
            assert abs(values[idx] - want) <= 1e-12 * scale, idx
            # symmetric: every ordering of the same multi-index holds the same value
            assert all(values[perm] == values[idx] for perm in itertools.permutations(idx))


def test_mixed_partials_of_vector_outputs_and_fallbacks():
    """A vector output keeps its axes in front; order 3 and user rules take nested sweeps,
    which agree with interpolation where both apply."""
    def f(x):
        return st.stack([x[0] ** 3 * x[1] ** 2, st.exp(x[0] - x[1])])

    d4 = st.derivative(f, order=4, input_signature=[st.TensorSpec((2,))])
    x0 = np.array([0.3, -0.7])
    got = d4(x0)
    assert got.shape == (2, 2, 2, 2, 2)
    # d^4 of x^3 y^2: only xxxy-type (3 x, 1 y) = 6 * 2y, and xxyy = 6x * 2
    assert got[0, 0, 0, 0, 1] == pytest.approx(12 * x0[1], rel=1e-13)
    assert got[0, 0, 0, 1, 1] == pytest.approx(12 * x0[0], rel=1e-13)
    assert got[0, 0, 0, 0, 0] == 0.0 and got[0, 1, 1, 1, 1] == 0.0
    e = math.exp(x0[0] - x0[1])
    for idx in itertools.product(range(2), repeat=4):
        assert got[(1,) + idx] == pytest.approx(e * (-1) ** sum(idx), rel=1e-13)

    @st.custom_gradient
    def rule(x):
        return st.sin(x[0]) * x[1], lambda g: g * st.stack([st.cos(x[0]) * x[1], st.sin(x[0])])

    d = st.derivative(rule, order=4, input_signature=[st.TensorSpec((2,))])
    got = d(x0)
    assert got[0, 0, 0, 0] == pytest.approx(math.sin(x0[0]) * x0[1], rel=1e-13)
    assert got[0, 0, 0, 1] == pytest.approx(-math.cos(x0[0]), rel=1e-13)
    assert got[1, 1, 0, 0] == 0.0
    assert not strategy.mixed_worth(2, 3) and strategy.mixed_worth(2, 4)
    assert not strategy.mixed_worth(6, 4) and strategy.mixed_worth(4, 5)
