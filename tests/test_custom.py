"""Substitution rules: custom_gradient, define_function / register_gradient, stop_gradient."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import symtape as st
from symtape.base.errors import NonDifferentiableError


@st.custom_gradient
def clip_gradients(y):
    def backward(dy):
        return st.clip_by_norm(dy, 0.5)

    return y, backward


def test_clip_gradients_example_gives_two():
    v = st.Variable(2.0, name="v")
    with st.GradientTape() as t:
        output = clip_gradients(v * v)
    assert float(t.gradient(output, v)) == 2.0  # backward clips 4 to 0.5, times dv = 2v
    assert str(output.formula()) == "clip_gradients(v**2)"
    assert float(output) == 4.0


def test_upstream_nonlinear_rule_on_a_vector():
    x = st.Variable([3.0, 4.0])
    w = st.constant([2.0, 2.0])
    with st.GradientTape() as t:
        y = st.reduce_sum(clip_gradients(x) * w)
    # upstream (2, 2) has norm 2.83 -> clipped to norm 0.5
    np.testing.assert_allclose(t.gradient(y, x).numpy(), [0.5 / np.sqrt(2)] * 2)


def test_symbolic_derivative_of_a_rule_function_says_so():
    x = st.symbol("x")
    f = clip_gradients(x).formula()
    with pytest.raises(NonDifferentiableError, match="GradientTape"):
        sp.diff(f, x.symbols[()])


def test_rule_replaces_the_derivative_at_every_order():
    @st.custom_gradient
    def my_sqrt(x):
        result = st.sqrt(x)

        def grad(upstream):
            return 0.5 / st.sqrt(x) * upstream

        return result, grad

    x = st.Variable(4.0, name="x")
    with st.GradientTape() as t2:
        with st.GradientTape() as t1:
            y = my_sqrt(x)
        dy = t1.gradient(y, x)
    d2 = t2.gradient(dy, x)
    assert float(dy) == 0.25
    assert float(d2) == pytest.approx(-0.25 * 4.0 ** -1.5)
    assert str(y.formula()) == "my_sqrt(x)"


def test_rule_is_the_derivative_even_when_it_is_not_the_true_one():
    @st.custom_gradient
    def straight_through_round(x):
        return st.round(x), lambda dy: dy

    x = st.Variable([0.2, 1.7])
    with st.GradientTape() as t:
        y = st.reduce_sum(straight_through_round(x) * 3)
    np.testing.assert_allclose(t.gradient(y, x).numpy(), [3.0, 3.0])


def test_variables_form():
    w = st.Variable(3.0, name="w")

    @st.custom_gradient
    def scale(x):
        def grad(dy, variables=None):
            return dy * w * 10, [dy * x * 100]

        return x * w, grad

    x = st.Variable(2.0, name="x")
    with st.GradientTape() as t:
        y = scale(x)
    gx, gw = t.gradient(y, [x, w])
    assert float(gx) == 30.0 and float(gw) == 200.0
    assert str(y.formula()) == "scale(w, x)" or str(y.formula()) == "scale(x, w)"


def test_variables_form_requires_the_keyword():
    w = st.Variable(3.0)

    @st.custom_gradient
    def scale(x):
        return x * w, lambda dy: dy

    with pytest.raises(TypeError, match="variables"):
        with st.GradientTape():
            scale(st.constant(1.0))


def test_multiple_inputs_and_outputs():
    @st.custom_gradient
    def pair(a, b):
        def grad(da, db):
            return da + db, 2 * db

        return (a * b, a + b), grad

    a, b = st.Variable(2.0), st.Variable(5.0)
    with st.GradientTape() as t:
        p, s = pair(a, b)
        y = p + 3 * s
    ga, gb = t.gradient(y, [a, b])
    assert (float(ga), float(gb)) == (4.0, 6.0)


def test_wrong_gradient_shape_is_reported():
    @st.custom_gradient
    def bad(x):
        return x * 2, lambda dy: st.reduce_sum(dy)

    x = st.Variable([1.0, 2.0])
    with st.GradientTape() as t:
        y = bad(x)
    with pytest.raises(ValueError, match="bad"):
        t.gradient(y, x)


def test_define_function_and_register_gradient_in_either_order():
    f = st.define_function("softsign_t", lambda x: x / (1 + st.abs(x)))
    x = st.Variable(0.5, name="x")
    with st.GradientTape() as t:
        y = f(x)
    assert str(y.formula()) == "softsign_t(x)"
    with pytest.raises(LookupError, match="softsign_t"):
        t.gradient(y, x)

    @st.register_gradient("softsign_t")
    def _grad(g, ans, x):
        return g / (1 + st.abs(x)) ** 2

    with st.GradientTape() as t:
        y = f(x)
    assert float(t.gradient(y, x)) == pytest.approx(1 / 1.5 ** 2)
    assert st.get_function("softsign_t") is f


def test_register_gradient_refuses_builtin_ops():
    with pytest.raises(ValueError, match="built-in"):
        st.register_gradient("relu")


def test_stop_gradient_zero_mode():
    x = st.Variable([1.0, 2.0])
    with st.GradientTape() as t:
        y = st.stop_gradient(x) * 3
    assert t.gradient(y, x) is None
    with st.GradientTape() as t:
        y = st.stop_gradient(x) * 3
    np.testing.assert_array_equal(t.gradient(y, x, unconnected_gradients="zero").numpy(), 0.0)


@st.custom_gradient
def numpy_rule(y):
    def backward(dy):  # computes in Python on the upstream's values
        return st.constant(3.0 * np.asarray(dy.numpy()))

    return y, backward


def test_jacobian_through_rules_of_every_kind():
    """A rule written with ops is batched with the Jacobian's other rows: clip_by_norm
    clips each row (one-hot seeds have norm 1, clipped to 0.5); a rule computing on the
    upstream's values in Python makes the Jacobian one sweep per row."""
    x = st.Variable([3.0, 4.0])
    with st.GradientTape(persistent=True) as t:
        clipped = clip_gradients(x * x)
        scaled = numpy_rule(x * x)
    np.testing.assert_allclose(t.jacobian(clipped, x).numpy(), np.diag([3.0, 4.0]))
    np.testing.assert_allclose(t.jacobian(scaled, x).numpy(), np.diag([18.0, 24.0]))


def test_jacobian_inside_a_custom_functions_forward_pass():
    """Nothing records there, so a Jacobian of what a tape recorded before is taken one row
    at a time."""
    x = st.Variable([1.0, 3.0])
    with st.GradientTape(persistent=True) as t:
        y = x * x * x

    @st.custom_gradient
    def uses_the_tape(z):
        j = t.jacobian(y, x)
        return z * st.reduce_sum(j, axis=0), lambda g: g

    np.testing.assert_allclose(uses_the_tape(st.constant([1.0, 1.0])).numpy(), [3.0, 27.0])
