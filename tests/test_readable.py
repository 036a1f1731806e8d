"""Readable exact output: Taylor coefficients at exact points and high-order derivative
formulas come out expanded with common factors pulled out, equal to SymPy's own results;
``st.from_sympy`` writes gamma, sinc and the reciprocal trigonometric functions with st ops
and points to a custom rule for functions it cannot express."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

import symtape as st

X = sp.Symbol("x", real=True)


def test_taylor_coefficients_at_an_exact_point_are_short_and_exact():
    s = st.taylor(lambda x: st.exp(st.sin(x)), sp.pi / 4, 5)
    ref = sp.series(sp.exp(sp.sin(X)), X, sp.pi / 4, 6).removeO()
    for k, c in enumerate(s.coefficients):
        want = ref.diff(X, k).subs(X, sp.pi / 4) / sp.factorial(k)
        assert sp.simplify(c - want) == 0
        assert len(str(c)) <= 40, c
    assert s.coefficients[5] == (3 * sp.sqrt(2) + 8) * sp.exp(sp.sqrt(2) / 2) / 192


def test_a_twelfth_derivative_formula_is_a_hermite_polynomial_times_the_gaussian():
    d = st.derivative(lambda x: st.exp(-x ** 2), order=12, input_signature=[st.TensorSpec(())])
    f = d.formula()
    x = next(iter(f.free_symbols))
    assert sp.expand(f - sp.hermite(12, x) * sp.exp(-x ** 2)) == 0
    assert f.has(sp.exp(-x ** 2)) and sp.count_ops(f) < 40, f  # one polynomial, one Gaussian
    np.testing.assert_allclose(d(0.3), float((sp.hermite(12, x) * sp.exp(-x ** 2)).subs(x, 0.3)),
                               rtol=1e-11)


def test_formulas_in_several_symbols_are_left_as_built():
    h = st.hessian(lambda v: st.reduce_sum(v ** 3) * v[0], input_signature=[st.TensorSpec((2,))])
    f = h.formula()
    v0, v1 = sorted({s for e in f.flat for s in e.free_symbols}, key=str)
    want = sp.hessian((v0 ** 3 + v1 ** 3) * v0, (v0, v1))
    for got, ref in zip(f.flat, want):
        assert sp.expand(got - ref) == 0


@pytest.mark.parametrize("v", [0.7, 3.0, 2.0, -0.5, -1.5, -2.25, 5.5])
def test_from_sympy_gamma(v):
    got = st.from_sympy(sp.gamma(X), {X: v}).numpy()
    np.testing.assert_allclose(got, math.gamma(v), rtol=1e-13)


@pytest.mark.parametrize("v", [0.0, 0.004, -0.009, 0.011, 1.3, -7.0])
def test_from_sympy_sinc_values(v):
    got = st.from_sympy(sp.sinc(X), {X: v}).numpy()
    np.testing.assert_allclose(got, np.sinc(v / np.pi), rtol=1e-15, atol=1e-17)


def test_from_sympy_sinc_derivatives_at_zero_are_exact():
    xv = st.Variable(0.0)
    with st.GradientTape() as t4:
        with st.GradientTape() as t3:
            with st.GradientTape() as t2:
                with st.GradientTape() as t1:
                    y = st.from_sympy(sp.sinc(X), {X: xv})
                d1 = t1.gradient(y, xv)
            d2 = t2.gradient(d1, xv)
        d3 = t3.gradient(d2, xv)
    d4 = t4.gradient(d3, xv)
    for k, d in enumerate([d1, d2, d3, d4], start=1):
        want = float(sp.limit(sp.diff(sp.sin(X) / X, X, k), X, 0))
        assert float(d) == pytest.approx(want, abs=1e-12), k


@pytest.mark.parametrize("fn, ref", [(sp.cot, lambda v: 1 / math.tan(v)),
                                     (sp.sech, lambda v: 1 / math.cosh(v)),
                                     (sp.coth, lambda v: 1 / math.tanh(v)),
                                     (sp.csch, lambda v: 1 / math.sinh(v))])
def test_from_sympy_reciprocal_functions(fn, ref):
    assert float(st.from_sympy(fn(X), {X: 0.8})) == pytest.approx(ref(0.8), rel=1e-14)


def test_from_sympy_names_the_way_to_a_missing_function():
    with pytest.raises(st.errors.InvalidArgumentError, match="besselj.*st.custom_gradient"):
        st.from_sympy(sp.besselj(0, X), {X: 1.0})
