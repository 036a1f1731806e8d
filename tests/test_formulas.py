"""Exact formulas: printing, LaTeX, simplification, CSE form, and agreement with values."""

from __future__ import annotations

import numpy as np
import sympy as sp

import symtape as st
from symtape.element import graph as G


def test_second_derivative_of_cube_prints_6x():
    x = st.Variable(3.0, name="x")
    with st.GradientTape() as t2:
        with st.GradientTape() as t1:
            y = x ** 3
        dy = t1.gradient(y, x)
    d2 = t2.gradient(dy, x)
    assert str(dy.formula()) == "3*x**2"
    assert str(d2.formula()) == "6*x"
    assert d2.latex() == "6 x"
    assert float(d2) == 18.0


def test_sigmoid_derivative_is_name_free_and_simplifies():
    x = st.symbol("x")
    with st.GradientTape() as t:
        y = st.nn.sigmoid(x)
    g = t.gradient(y, x)
    f = g.formula()
    heads = {type(e).__name__ for e in sp.preorder_traversal(f)}
    assert heads <= {"Add", "Mul", "Pow", "exp", "Integer", "NegativeOne", "One", "Symbol"}, heads
    s = sp.Symbol("s", real=True)
    reference = sp.diff(1 / (1 + sp.exp(-s)), s).subs(s, x.symbols[()])
    assert sp.simplify(f - reference) == 0
    simple = g.formula(simplify=True)
    assert sp.count_ops(simple) < sp.count_ops(f)
    assert sp.simplify((simple - reference).rewrite(sp.exp)) == 0


def test_formula_values_agree_with_numeric_values():
    x = st.Variable([0.3, -1.2], name="x")
    with st.GradientTape() as t:
        y = st.reduce_sum(st.tanh(x) * st.exp(x[::-1]))
    g = t.gradient(y, x)
    f = g.formula()
    env = {leaf: sp.Float(v) for leaf, v in zip(x.symbols.flat, x.numpy())}
    got = np.array([float(e.xreplace(env)) for e in f])
    np.testing.assert_allclose(got, g.numpy(), rtol=1e-13)


def test_expr_is_an_object_array_of_leaf_expressions():
    w = st.Variable([[1.0, 2.0]], name="W")
    e = (w * 2).expr
    assert e.shape == (1, 2) and e.dtype == object
    assert str(e[0, 1]) == "2*W_0_1"
    assert w.symbols[0, 1] == sp.Symbol("W_0_1")  # SymPy's own symbol
    assert sp.latex(w._atoms[0, 1]) == "W_{0,1}" and "W_{0,1}" in (w * 2).latex()


def test_custom_names_and_stop_gradient_print_by_name():
    y = st.symbol("y")
    assert str(st.stop_gradient(y ** 2).formula()) == "stop_gradient(y**2)"
    assert "stop\\_gradient" in st.stop_gradient(y).latex() or \
        st.stop_gradient(y).latex() == "y"


def _chain(depth, value=0.3):
    x = st.symbol("x", value)
    with st.GradientTape() as t:
        y = x
        for _ in range(depth):
            y = st.sin(y) + y * y
    return y, t.gradient(y, x)


def test_large_formulas_are_shown_in_cse_form():
    y, dy = _chain(12)
    assert G.tree_size(dy._atoms.flat) > 10_000  # the printed tree is exponential ...
    shown = dy.latex()
    assert shown.startswith(r"\begin{aligned}")  # ... so it is shown with intermediates
    form = dy.cse()
    replacements, result = form
    assert len(replacements) >= 12
    # the CSE form evaluates to the same number as the tensor
    env = {x: sp.Float(0.3) for x in dy._atoms.flat and G.leaves(dy._atoms.flat)}
    values = dict(env)
    for sym, expr in replacements:
        values[sym] = expr.xreplace(values).evalf(30)
    assert float(result.xreplace(values)) == float(dy.numpy()) or abs(
        float(result.xreplace(values)) - float(dy.numpy())) < 1e-9 * abs(float(dy.numpy()))
    _, unbound = _chain(12, value=None)
    assert "\n" in str(unbound)  # printed with intermediates too


def test_small_formulas_print_whole():
    x = st.symbol("x")
    t = st.sin(x) * x
    assert str(t) == "st.Tensor(x*sin(x), shape=(), dtype=float64)"
    assert t._repr_latex_() == r"$\displaystyle x \sin{\left(x \right)}$"


def test_hash_consing_shares_identical_definitions():
    x, y = st.symbol("x"), st.symbol("y")
    a = st.sin(x + y)
    b = st.sin(y + x)
    assert a._atoms[()] is b._atoms[()]


def test_constants_fold_exactly():
    x = st.symbol("x")
    assert str((x * 2 / 4).formula()) == "x/2"
    assert str((x ** 2 * x ** -2).formula()) == "1"
    assert str(st.exp(x * 0).formula()) == "1"


def test_unbound_leaves_are_named():
    import pytest

    from symtape.base.errors import UnboundLeafError

    x, k = st.symbol("x"), st.symbol("k", 2.0)
    y = k * x
    with pytest.raises(UnboundLeafError, match=r"\(x\)"):
        y.numpy()
    assert str(y.formula()) == "k*x"
