"""TensorFlow ``GradientTape`` semantics, one behaviour per test."""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st
from symtape.base.errors import DTypeError, ShapeError


def test_watch_constant_and_nested_structures():
    a, b = st.constant(2.0), st.constant([1.0, 3.0])
    with st.GradientTape() as t:
        t.watch({"a": a, "rest": [b]})
        y = a * st.reduce_sum(b ** 2)
    g = t.gradient(y, {"a": a, "rest": [b]})
    assert float(g["a"]) == 10.0
    np.testing.assert_allclose(g["rest"][0].numpy(), [4.0, 12.0])


def test_unwatched_constant_is_unconnected():
    x = st.constant(3.0)
    with st.GradientTape() as t:
        y = x * x
    assert t.gradient(y, x) is None


def test_trainable_variables_are_watched_automatically_but_not_untrainable():
    v = st.Variable(2.0)
    frozen = st.Variable(5.0, trainable=False)
    with st.GradientTape() as t:
        y = v * frozen
    gv, gf = t.gradient(y, [v, frozen])
    assert float(gv) == 5.0 and gf is None
    assert t.watched_variables() == (v,) or t.watched_variables()[0] is v


def test_watch_accessed_variables_false():
    v = st.Variable(3.0)
    with st.GradientTape(watch_accessed_variables=False) as t:
        y = v ** 3
    assert t.gradient(y, v) is None
    with st.GradientTape(watch_accessed_variables=False) as t:
        t.watch(v)
        y = v ** 3
    assert float(t.gradient(y, v)) == 27.0


def test_watched_variables_in_creation_order():
    a, b, c = st.Variable(1.0), st.Variable(2.0), st.Variable(3.0)
    with st.GradientTape() as t:
        _ = c * 2
        t.watch(a)
        _ = b + 1
    got = t.watched_variables()
    assert isinstance(got, tuple)
    assert [v.name for v in got] == [a.name, b.name, c.name]
    assert [id(v) for v in got] == [id(a), id(b), id(c)]


def test_non_persistent_tape_is_one_shot():
    x = st.Variable(1.0)
    with st.GradientTape() as t:
        y = x * x
    t.gradient(y, x)
    with pytest.raises(RuntimeError, match="non-persistent"):
        t.gradient(y, x)
    with st.GradientTape() as t:
        y = x * x
    t.jacobian(y, x)
    with pytest.raises(RuntimeError):
        t.jacobian(y, x)


def test_persistent_tape_answers_several_times():
    a, b = st.Variable(6.0), st.Variable(2.0)
    with st.GradientTape(persistent=True) as t:
        y1 = a ** 2
        y2 = b ** 3
    assert float(t.gradient(y1, a)) == 12.0
    assert float(t.gradient(y2, b)) == 12.0
    assert t.gradient(y1, b) is None


def test_stop_recording_and_reset():
    x, y = st.Variable(2.0), st.Variable(3.0)
    with st.GradientTape() as t:
        x_sq = x * x
        with t.stop_recording():
            y_sq = y * y
        z = x_sq + y_sq
    g = t.gradient(z, {"x": x, "y": y})
    assert float(g["x"]) == 4.0 and g["y"] is None
    with st.GradientTape() as t:
        y_sq = y * y
        t.reset()
        z = x * x + y_sq
    g = t.gradient(z, {"x": x, "y": y})
    assert float(g["x"]) == 4.0 and g["y"] is None


def test_stop_recording_requires_recording():
    t = st.GradientTape()
    with pytest.raises(RuntimeError, match="not recording"):
        with t.stop_recording():
            pass


def test_targets_are_summed_and_structure_is_kept():
    x = st.Variable([1.0, 2.0])
    with st.GradientTape(persistent=True) as t:
        y = x ** 2
        z = 3 * x
    g = t.gradient([y, [z]], x)
    np.testing.assert_allclose(g.numpy(), 2 * np.array([1.0, 2.0]) + 3)
    out = t.gradient(y, (x, {"k": [x]}))
    assert isinstance(out, tuple) and isinstance(out[1]["k"], list)
    np.testing.assert_allclose(out[1]["k"][0].numpy(), [2.0, 4.0])


def test_output_gradients_give_vector_jacobian_products():
    x = st.Variable([1.0, 2.0])
    v = st.constant([1.0, 1.0])
    with st.GradientTape() as t:
        y = st.stack([x[0] ** 2, x[1] ** 3])
    np.testing.assert_allclose(t.gradient(y, x, output_gradients=v).numpy(), [2.0, 12.0])
    with st.GradientTape() as t:
        y = st.stack([x[0] ** 2, x[1] ** 3])
    with pytest.raises(ShapeError, match="output_gradients"):
        t.gradient(y, x, output_gradients=st.constant([1.0, 1.0, 1.0]))


@pytest.mark.parametrize("mode", [st.UnconnectedGradients.ZERO, "zero", "ZERO",
                                  st.UnconnectedGradients("zero")])
def test_unconnected_gradients_zero(mode):
    x, y = st.Variable([1.0, 2.0]), st.Variable(3.0)
    with st.GradientTape() as t:
        z = x * 2
    gx, gy = t.gradient(z, [x, y], unconnected_gradients=mode)
    np.testing.assert_allclose(gx.numpy(), [2.0, 2.0])
    assert gy.numpy() == 0.0 and gy.shape == ()


def test_unconnected_gradients_rejects_unknown_values():
    x = st.Variable(1.0)
    with st.GradientTape() as t:
        y = x * x
    with pytest.raises(ValueError, match="unconnected_gradients"):
        t.gradient(y, x, unconnected_gradients="maybe")


def test_jacobian_shapes_and_values():
    x = st.Variable([1.0, 2.0])
    with st.GradientTape(persistent=True) as t:
        y = st.stack([x[0] ** 2, x[1] ** 3, x[0] * x[1]])
        s = st.reduce_sum(y)
    j = t.jacobian(y, x)
    assert j.shape == (3, 2)
    np.testing.assert_allclose(j.numpy(), [[2, 0], [0, 12], [2, 1]])
    js = t.jacobian(s, x)
    assert js.shape == (2,)
    w = st.Variable(np.ones((2, 2)))
    assert t.jacobian(y, w) is None
    assert t.jacobian(y, w, unconnected_gradients="zero").shape == (3, 2, 2)


def test_jacobian_of_scalar_source_and_tensor_source():
    x = st.linspace(-3.0, 3.0, 7)
    delta = st.Variable(0.0)
    with st.GradientTape() as t:
        y = st.nn.sigmoid(x + delta)
    j = t.jacobian(y, delta)
    s = 1 / (1 + np.exp(-np.linspace(-3, 3, 7)))
    np.testing.assert_allclose(j.numpy(), s * (1 - s))


def test_batch_jacobian_equals_the_diagonal_blocks_of_the_jacobian():
    rng = np.random.default_rng(0)
    w1 = st.constant(rng.normal(size=(3, 4)))
    x = st.constant(rng.normal(size=(5, 3)))
    with st.GradientTape(persistent=True) as t:
        t.watch(x)
        y = st.nn.elu(st.matmul(x, w1))
    j = t.jacobian(y, x).numpy()
    jb = t.batch_jacobian(y, x)
    assert jb.shape == (5, 4, 3)
    np.testing.assert_allclose(jb.numpy(), np.einsum("bxby->bxy", j))


def test_hessian_matches_finite_differences():
    x0 = np.array([0.3, -0.7, 1.1])

    def f(v):
        return st.reduce_sum(st.sin(v) * v[0] + v ** 3) + v[1] * v[2]

    x = st.Variable(x0)
    with st.GradientTape() as t:
        y = f(x)
    h = t.hessian(y, x).numpy()
    assert h.shape == (3, 3)

    def grad(p):
        v = st.Variable(p)
        with st.GradientTape() as tt:
            out = f(v)
        return tt.gradient(out, v).numpy()

    eps = 1e-6
    fd = np.stack([(grad(x0 + eps * e) - grad(x0 - eps * e)) / (2 * eps)
                   for e in np.eye(3)], axis=1)
    np.testing.assert_allclose(h, fd, rtol=1e-7, atol=1e-8)


def test_hessian_blocks_for_several_sources():
    a, b = st.Variable(2.0), st.Variable([1.0, 3.0])
    with st.GradientTape() as t:
        y = a ** 2 * st.reduce_sum(b ** 2)
    (haa, hab), (hba, hbb) = t.hessian(y, [a, b])
    assert float(haa) == 2 * 10.0
    np.testing.assert_allclose(hab.numpy(), 4 * a.numpy() * b.numpy())
    np.testing.assert_allclose(hbb.numpy(), 2 * 4.0 * np.eye(2))


def test_nested_tapes_give_any_order():
    x = st.Variable(1.5, name="x")
    tapes = [st.GradientTape() for _ in range(4)]
    for t in tapes:
        t.__enter__()
    y = x ** 5
    d = y
    for t in reversed(tapes):
        t.__exit__(None, None, None)
        d = t.gradient(d, x)
    assert float(d) == pytest.approx(120 * 1.5)
    assert str(d.formula()) == "120*x"


def test_several_tapes_each_cut_where_they_did_not_record():
    x0, x1 = st.constant(0.0), st.constant(0.0)
    with st.GradientTape() as tape0, st.GradientTape() as tape1:
        tape0.watch(x0)
        tape1.watch(x1)
        ys = st.reduce_sum(st.sin(x0) + st.nn.sigmoid(x1))
    assert float(tape0.gradient(ys, x0)) == 1.0
    assert float(tape1.gradient(ys, x1)) == 0.25
    x = st.Variable(2.0)
    u = x * x  # before the tape existed: the tape cannot see it
    with st.GradientTape() as late:
        z = u * x
    assert float(late.gradient(z, x)) == 4.0  # d(u*x)/dx with u held fixed


def test_backward_pass_is_recorded_by_an_outer_tape():
    x = st.Variable([0.5, -1.0])
    with st.GradientTape() as outer:
        with st.GradientTape() as inner:
            y = st.reduce_sum(st.tanh(x) ** 2)
        g = inner.gradient(y, x)
        gnorm = st.reduce_sum(g * g)
    dg = outer.gradient(gnorm, x).numpy()
    xs = np.array([0.5, -1.0])

    def gn(p):
        t = np.tanh(p)
        return np.sum((2 * t * (1 - t * t)) ** 2)

    eps = 1e-6
    fd = [(gn(xs + eps * e) - gn(xs - eps * e)) / (2 * eps) for e in np.eye(2)]
    np.testing.assert_allclose(dg, fd, rtol=1e-7)


def test_gradient_uses_values_at_recording_time():
    v = st.Variable(2.0)
    with st.GradientTape() as t:
        y = v * v
    v.assign(10.0)
    assert float(t.gradient(y, v)) == 4.0


def test_symbols_are_watched_without_watch():
    x = st.symbol("x", 2.0)
    with st.GradientTape(watch_accessed_variables=False) as t:
        y = x ** 3
    g = t.gradient(y, x)
    assert float(g) == 12.0 and str(g.formula()) == "3*x**2"


def test_watched_constant_appears_as_a_symbol():
    c = st.constant(3.0, name="c")
    with st.GradientTape() as t:
        t.watch(c)
        y = c ** 3
    g = t.gradient(y, c)
    assert float(g) == 27.0 and str(g.formula()) == "3*c**2"


def test_tape_without_with_starts_at_watch():
    x, y = st.constant(3.0), st.constant(2.0)
    tape = st.GradientTape()
    tape.watch(x)
    z = x * y
    assert float(tape.gradient(z, x)) == 2.0


def test_gradient_inside_the_context_of_a_persistent_tape():
    a = st.Variable(6.0)
    with st.GradientTape(persistent=True) as t:
        y1 = a ** 2
        with t.stop_recording():
            assert float(t.gradient(y1, a)) == 12.0
        g = t.gradient(y1, a)  # recorded on t itself
    assert float(t.gradient(g, a)) == 2.0


def test_integer_sources_and_targets_are_rejected():
    i = st.constant([1, 2])
    x = st.Variable(1.0)
    with st.GradientTape(persistent=True) as t:
        t.watch(i)
        y = x * 2
        k = i * 2
    with pytest.raises(DTypeError, match="sources\\[0\\]"):
        t.gradient(y, i)
    with pytest.raises(DTypeError, match="target"):
        t.gradient(k, x)


def test_bad_sources_and_targets():
    x = st.Variable(1.0)
    with st.GradientTape(persistent=True) as t:
        y = x * 2
    with pytest.raises(TypeError, match="sources\\[1\\]"):
        t.gradient(y, [x, 3.0])
    with pytest.raises(TypeError, match="target is None"):
        t.gradient(None, x)
    with pytest.raises(ValueError, match="watch"):
        t.watch([x, "x"])
