"""SymPy interop: formulas in SymPy's own symbols (with st.symbol's assumptions) that
simplify against ``sympy.diff``, and ``st.from_sympy`` bringing SymPy expressions in."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from sympy.physics.mechanics import dynamicsymbols

import symtape as st
from symtape.element import graph


def _grad(f, x):
    with st.GradientTape() as t:
        t.watch(x)
        y = f(x)
    return t.gradient(y, x)


def test_formula_minus_sympy_diff_simplifies_to_zero_for_tanh():
    x = st.symbol("x")
    X = sp.Symbol("x")
    g = _grad(st.tanh, x).formula()
    assert g.free_symbols == {X}
    assert sp.simplify(g - sp.diff(sp.tanh(X), X)) == 0


def test_positive_symbols_drop_the_piecewise_of_x_to_the_x():
    X = sp.Symbol("x", positive=True)
    g = _grad(lambda v: v ** v, st.symbol("x", positive=True)).formula()
    assert not g.has(sp.Piecewise)
    assert sp.simplify(g - sp.diff(X ** X, X)) == 0
    # without the assumption: TensorFlow's convention, log(x) only where x > 0
    assert _grad(lambda v: v ** v, st.symbol("x")).formula().has(sp.Piecewise)


def test_symbol_assumptions_are_checked():
    with pytest.raises(st.errors.InvalidArgumentError, match="contradict"):
        st.symbol("x", positive=True, negative=True)
    with pytest.raises(st.errors.InvalidArgumentError, match="unknown arguments"):
        st.symbol("x", prime=True)
    with pytest.raises(st.errors.InvalidArgumentError, match="does not satisfy positive"):
        st.symbol("x", value=np.array([1.0, -2.0]), positive=True)
    with pytest.raises(st.errors.InvalidArgumentError, match="real numbers"):
        st.symbol("x", real=False)
    v = st.symbol("v", shape=(2,), nonnegative=True)
    assert list(v.symbols) == [sp.Symbol("v_0", nonnegative=True),
                               sp.Symbol("v_1", nonnegative=True)]
    assert sp.sqrt(v.symbols[0] ** 2) == v.symbols[0]  # SymPy uses the assumption
    leaves = (v * 2.0).formula(sympy_symbols=False)[0].atoms(graph.Leaf)
    assert len(leaves) == 1  # the graph's own leaf, on request


def test_a_pendulum_lagrangian_from_sympy_differentiates_as_sympy_does():
    """``L(q, q')`` of a pendulum written with sympy.physics.mechanics' dynamicsymbols,
    brought in with st.from_sympy (q(t) and q'(t) mapped to symbols): its gradient and
    Hessian formulas equal SymPy's derivatives exactly, and its compiled Euler-Lagrange
    acceleration equals the hand-derived -g/l sin(q)."""
    t = sp.Symbol("t")
    q = dynamicsymbols("q")
    m, length, g = sp.symbols("m l g", positive=True)
    L = m * length ** 2 * q.diff(t) ** 2 / 2 + m * g * length * sp.cos(q)
    Q, QD = sp.symbols("q qd")
    plain = L.subs(q.diff(t), QD).subs(q, Q)
    xs = st.symbol("q"), st.symbol("qd")
    params = {m: st.symbol("m", positive=True), length: st.symbol("l", positive=True),
              g: st.symbol("g", positive=True)}
    with st.GradientTape(persistent=True) as outer:
        for x in xs:
            outer.watch(x)
        with st.GradientTape() as inner:
            for x in xs:
                inner.watch(x)
            lag = st.from_sympy(L, {q: xs[0], q.diff(t): xs[1], **params})
        dq, dqd = inner.gradient(lag, list(xs))
    assert sp.simplify(lag.formula() - plain) == 0
    assert sp.simplify(dq.formula() - sp.diff(plain, Q)) == 0
    assert sp.simplify(dqd.formula() - sp.diff(plain, QD)) == 0
    mass = outer.gradient(dqd, xs[1]).formula()
    assert sp.simplify(mass - sp.diff(plain, QD, 2)) == 0
    # Euler-Lagrange with q'' from (dL/dq) / (d2L/dqd2), compiled over points
    accel = st.compile(dq / outer.gradient(dqd, xs[1]), [xs[0], xs[1], *params.values()])
    qs = np.linspace(-2.0, 2.0, 7)
    np.testing.assert_allclose(accel(qs, 0.3, 1.5, 0.8, 9.81), -9.81 / 0.8 * np.sin(qs),
                               rtol=1e-14, atol=1e-15)


def test_from_sympy_values_against_lambdify():
    a, b, c = sp.symbols("a b c")
    exprs = [
        a * b ** 3 / 7 + sp.Rational(3, 2) * c, sp.exp(a) * sp.log(c) - sp.sqrt(c),
        sp.atan2(a, b) + sp.Abs(b) * sp.sign(a), sp.Max(a, b, c) - sp.Min(a, 0.5),
        sp.Piecewise((a ** 2, a > b), (b, sp.And(b > 0, c < 2)), (c, True)),
        sp.Heaviside(a) + sp.tanh(b) / sp.cosh(c) + sp.erf(a) + sp.floor(3 * b),
        1 / (1 + a ** 2) ** sp.Rational(3, 2) + sp.pi * sp.cot(c),
    ]
    rng = np.random.default_rng(0)
    pts = rng.uniform(-2, 2, (50, 3))
    pts[:, 2] = np.abs(pts[:, 2]) + 0.1
    x = st.symbol("x", shape=(3,))
    y = st.from_sympy(exprs, {a: x[0], b: x[1], c: x[2]})
    assert y.shape == (len(exprs),)
    f = st.compile(y, [x])
    ref = sp.lambdify([a, b, c], exprs, modules=["numpy", {"Heaviside": lambda v: np.heaviside(
        v, 0.5), "erf": np.vectorize(__import__("math").erf)}])
    want = np.array([ref(*p) for p in pts], dtype=float)
    np.testing.assert_allclose(f(pts), want, rtol=1e-13, atol=1e-13)
    # exact coefficients stay exact in the formula
    assert st.from_sympy(a / 7 + sp.Rational(3, 2) * b, {a: st.symbol("a"), b: st.symbol(
        "b")}).formula() == a / 7 + sp.Rational(3, 2) * b
    m = st.from_sympy(sp.Matrix([[a, 2 * a], [b, 1]]), {a: 1.5, b: -1.0})
    np.testing.assert_array_equal(m.numpy(), [[1.5, 3.0], [-1.0, 1.0]])


def test_from_sympy_refuses_what_it_cannot_translate():
    a, b = sp.symbols("a b")
    f = sp.Function("f")
    with pytest.raises(st.errors.InvalidArgumentError, match="no value for b"):
        st.from_sympy(a + b, {a: 1.0})
    with pytest.raises(st.errors.InvalidArgumentError, match=r"no value for \['f\(a\)'\]"):
        st.from_sympy(f(a), {a: 1.0})
    with pytest.raises(st.errors.InvalidArgumentError, match="no st op for besselj"):
        st.from_sympy(sp.besselj(0, a), {a: 1.0})
    with pytest.raises(st.errors.InvalidArgumentError, match="not a real number"):
        st.from_sympy(a + sp.I, {a: 1.0})
    with pytest.raises(st.errors.InvalidArgumentError, match="must be a dict"):
        st.from_sympy(a, [a])
