"""Eager values are snapshots: assigning a variable never changes a value computed before,
nor what later ops compute from it (docs/tensorflow.md, "One rule for values", under mutation)."""

import numpy as np
import pytest
from math import erf

import symtape as st


def test_a_gradient_keeps_its_value_after_the_variable_is_assigned():
    w, b = st.Variable(1.0), st.Variable(0.0)
    with st.GradientTape() as t:
        y = st.maximum(w, b)
    gw, gb = t.gradient(y, [w, b])
    w.assign(-5.0)
    assert float(gb) == 0.0 and float(gw) == 1.0
    assert float(0.1 * gb) == 0.0  # not re-read at the new w (was 0.1)
    assert float(gb * np.inf) == 0.0  # the unselected branch stays an exact zero
    assert float(0.1 * gw) == 0.1


def test_values_of_two_times_do_not_fold_into_each_other():
    w = st.Variable(1.0)
    a = w * 2.0
    w.assign(-5.0)
    b = w * 2.0
    assert float(a - b) == 12.0  # the DAG's a - b = 0 holds only for one value of w
    assert float(a / b) == -0.2
    W = st.Variable([1.0, 2.0])
    s = st.sin(W)
    W.assign([3.0, 4.0])
    np.testing.assert_allclose((s - st.sin(W)).numpy(),
                               np.sin([1.0, 2.0]) - np.sin([3.0, 4.0]), rtol=1e-15)


def test_assignments_in_any_order_give_the_same_training_update():
    """TensorFlow's idiom ``w.assign_sub(lr * gw); b.assign_sub(lr * gb)``: the updates do not
    depend on their order (programs with sqrt, maximum and erf, checked against numpy)."""
    def step(order):
        w, b, W = st.Variable(0.7), st.Variable(-0.3), st.Variable([0.5, 1.5, -2.0])
        x = np.array([0.2, 1.0, 3.0])
        with st.GradientTape() as t:
            z = st.sqrt(st.maximum(W * x + b, 0.1)) + st.math.erf(w * W)
            loss = st.reduce_sum(z * z)
        grads = dict(zip("wbW", t.gradient(loss, [w, b, W])))
        variables = {"w": w, "b": b, "W": W}
        for name in order:
            variables[name].assign_sub(0.1 * grads[name])
        return w.numpy(), b.numpy(), W.numpy()

    # numpy reference of the same step
    w, b, W = 0.7, -0.3, np.array([0.5, 1.5, -2.0])
    x = np.array([0.2, 1.0, 3.0])
    u = W * x + b
    m = np.maximum(u, 0.1)
    e = np.array([erf(w * v) for v in W])
    z = np.sqrt(m) + e
    dz = 2 * z
    dm = dz * 0.5 / np.sqrt(m) * (u >= 0.1)
    de = dz * 2 / np.sqrt(np.pi) * np.exp(-(w * W) ** 2)
    ref = (w - 0.1 * np.sum(de * W), b - 0.1 * np.sum(dm), W - 0.1 * (dm * x + de * w))
    for order in ("wbW", "Wwb", "bWw"):
        got = step(order)
        for g, r in zip(got, ref):
            np.testing.assert_allclose(g, r, rtol=1e-13, atol=1e-15)


def test_a_compiled_step_writing_back_variables_does_not_change_older_values():
    v = st.Variable([1.0, 2.0])

    @st.function
    def bump():
        v.assign_add([1.0, 1.0])

    before = v * 1.0
    s = st.sqrt(v)
    bump()
    np.testing.assert_array_equal((before - v).numpy(), [-1.0, -1.0])
    np.testing.assert_allclose((s * 1.0).numpy(), np.sqrt([1.0, 2.0]), rtol=1e-15)


def test_gradients_through_reads_before_and_after_an_assignment_add_up_as_in_tensorflow():
    w = st.Variable(3.0)
    with st.GradientTape() as t:
        a = w * 2.0
        w.assign(-1.0)
        y = a + w * 3.0
    assert float(y) == 3.0
    assert float(t.gradient(y, w)) == 5.0


@pytest.mark.parametrize("n", [3, 300])
def test_a_selected_zero_stays_exact_after_an_assignment(n):
    x = st.Variable(np.linspace(-1.0, 1.0, n))
    with st.GradientTape() as t:
        y = st.reduce_sum(st.where(x > 0, x * 2.0, st.zeros_like(x)))
    g = t.gradient(y, x)
    x.assign(np.zeros(n))
    np.testing.assert_array_equal((g * 1.0).numpy(), np.where(np.linspace(-1, 1, n) > 0, 2.0,
                                                               0.0))
