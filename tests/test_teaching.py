"""Teaching helpers: Taylor coefficients against ``sympy.series``, the derivative table, and
the plot of a function with its derivatives."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

import symtape as st

X = sp.Symbol("x")


def _f(x):
    return st.exp(st.sin(x)) * st.tanh(x) / (1 + x ** 2)


F = sp.exp(sp.sin(X)) * sp.tanh(X) / (1 + X ** 2)


def _series_coefficients(expr, x0, order):
    h = sp.Symbol("h")
    s = sp.series(expr.subs(X, x0 + h), h, 0, order + 1).removeO()
    return [s.coeff(h, k) for k in range(order + 1)]


def test_taylor_coefficients_equal_sympy_series_exactly_at_zero():
    s = st.taylor(_f, 0, 7)
    assert s.coefficients == _series_coefficients(F, 0, 7)
    assert all(isinstance(c, sp.Rational) for c in s.coefficients)
    np.testing.assert_allclose(s.numbers, [float(c) for c in s.coefficients], rtol=1e-14,
                               atol=1e-16)
    assert sp.expand(s.polynomial() - sp.series(F, X, 0, 8).removeO()) == 0


def test_taylor_coefficients_equal_sympy_series_at_a_rational_point():
    order = 5
    s = st.taylor(_f, Fraction(1, 2), order)
    ref = _series_coefficients(F, sp.Rational(1, 2), order)
    for c, r in zip(s.coefficients, ref):
        assert abs(sp.N(c - r, 50)) < sp.Float("1e-40")
    np.testing.assert_allclose(s.numbers, [float(r) for r in ref], rtol=1e-13)
    # the formulas are f^(k)(x)/k! in SymPy's own x
    for k, formula in enumerate(s.formulas[:3]):
        want = sp.diff(F, X, k) / sp.factorial(k)
        assert abs(sp.N((formula - want).subs(X, sp.Rational(3, 10)), 40)) < 1e-35
    # the polynomial approximates f near x0, to order 6 in the distance
    xs = np.array([0.45, 0.5, 0.55])
    f = np.exp(np.sin(xs)) * np.tanh(xs) / (1 + xs ** 2)
    assert np.max(np.abs(s(xs) - f)) < 1e-6


def test_derivative_table_and_exact_derivatives():
    s = st.taylor(lambda x: st.sin(x) * x, sp.pi / 2, 3)
    assert s.derivatives() == [sp.pi / 2, 1, -sp.pi / 2, -3]
    table = s.latex_table()
    assert table.startswith(r"\begin{tabular}{c|c|c}") and table.count(r"\\") == 5
    assert r"x \sin{\left(x \right)}" in table and r"- \frac{\pi}{2}" in table


def test_taylor_refuses_bad_input():
    with pytest.raises(st.errors.InvalidArgumentError, match="order must be"):
        st.taylor(_f, 0, -1)
    with pytest.raises(st.errors.InvalidArgumentError, match="must return a scalar"):
        st.taylor(lambda x: st.stack([x, x]), 0, 2)
    with pytest.raises(st.errors.InvalidArgumentError, match="x0 must be a number"):
        st.taylor(_f, "zero", 2)
    with pytest.raises(st.errors.InvalidArgumentError, match="x0 must be finite"):
        st.taylor(_f, float("inf"), 2)


def test_plot_draws_the_function_and_its_derivatives():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    ax = st.plot(st.tanh, (-2.0, 2.0), derivatives=2, points=101)
    lines = ax.get_lines()[:3]
    xs = lines[0].get_xdata()
    np.testing.assert_allclose(lines[0].get_ydata(), np.tanh(xs), rtol=1e-15, atol=1e-16)
    np.testing.assert_allclose(lines[1].get_ydata(), 1 - np.tanh(xs) ** 2, rtol=1e-14)
    t = np.tanh(xs)
    np.testing.assert_allclose(lines[2].get_ydata(), -2 * t * (1 - t ** 2), rtol=1e-13,
                               atol=1e-15)
    assert lines[1].get_label() == r"$f^{(1)}(x) = \frac{1}{\cosh^{2}{\left(x \right)}}$"
    with pytest.raises(st.errors.InvalidArgumentError, match="a < b"):
        st.plot(st.tanh, (1.0, -1.0))
