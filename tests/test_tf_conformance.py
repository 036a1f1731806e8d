"""TensorFlow behaviours checked against TensorFlow's documented formulas and observed results
(values, None-vs-zeros, shapes, error types)."""

import math

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

import symtape as st

SELU_SCALE = 1.0507009873554805
SELU_ALPHA = 1.6732632423543772


# --------------------------------------------------------------------------------------------
# Structures
# --------------------------------------------------------------------------------------------

def test_dict_sources_keep_the_callers_key_order_at_every_depth():
    w, b, c = st.Variable(1.0, name="w"), st.Variable(2.0, name="b"), st.Variable(3.0)
    with st.GradientTape() as t:
        loss = 3 * w + 5 * b + 7 * c
    g = t.gradient(loss, {"w": w, "b": b, "inner": {"z": c, "a": [b, {"y": w, "x": c}]}})
    assert list(g) == ["w", "b", "inner"]
    assert list(g["inner"]) == ["z", "a"]
    assert list(g["inner"]["a"][1]) == ["y", "x"]
    assert [float(g["w"]), float(g["b"]), float(g["inner"]["z"])] == [3.0, 5.0, 7.0]
    assert [float(g["inner"]["a"][0]), float(g["inner"]["a"][1]["y"]),
            float(g["inner"]["a"][1]["x"])] == [5.0, 3.0, 7.0]


# --------------------------------------------------------------------------------------------
# A target that is its own source
# --------------------------------------------------------------------------------------------

def test_gradient_of_a_source_by_itself_is_ones_watched_or_not():
    x = st.constant([1.0, 2.0, 3.0])
    with st.GradientTape() as t:
        pass
    assert_array_equal(t.gradient(x, x).numpy(), np.ones(3))
    v = st.Variable([[1.0, 2.0]])
    with st.GradientTape() as t:
        t.watch(v)
    assert_array_equal(t.gradient(v, v).numpy(), np.ones((1, 2)))


def test_unrecorded_copy_adds_nothing_and_output_gradients_weight_the_seed():
    x = st.constant([1.0, 2.0])
    outside = x * 1.0
    with st.GradientTape(persistent=True) as t:
        t.watch(x)
        inside = x * 1.0
    assert_array_equal(t.gradient([x, outside], x).numpy(), [1.0, 1.0])
    assert_array_equal(t.gradient([x, inside], x).numpy(), [2.0, 2.0])
    assert_array_equal(t.gradient(x, x, output_gradients=st.constant([3.0, 4.0])).numpy(),
                       [3.0, 4.0])


def test_variable_chosen_by_python_control_flow():
    v0, v1 = st.Variable(1.0), st.Variable(2.0)
    x = st.constant(1.0)
    with st.GradientTape() as t:
        result = v0 if float(x) > 0 else v1 ** 2
    g = t.gradient(result, [v0, v1])
    assert float(g[0]) == 1.0 and g[1] is None
    vs = [st.Variable(3.0), st.Variable(5.0), st.Variable(4.0)]
    with st.GradientTape() as t:
        chosen = max(vs, key=float)
    g = t.gradient(chosen, vs)
    assert g[0] is None and float(g[1]) == 1.0 and g[2] is None


def test_jacobian_of_a_source_by_itself_is_the_identity():
    x = st.constant([1.0, 2.0, 3.0])
    with st.GradientTape() as t:
        pass
    assert_array_equal(t.jacobian(x, x).numpy(), np.eye(3))


# --------------------------------------------------------------------------------------------
# batch_jacobian
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["none", "zero"])
def test_batch_jacobian_of_an_unconnected_target_is_zeros(mode):
    x = st.Variable(np.ones((4, 3)))
    with st.GradientTape() as t:
        y = st.constant(np.ones((4, 2, 5)))
    j = t.batch_jacobian(y, x, unconnected_gradients=mode)
    assert j.shape == (4, 2, 5, 3)
    assert_array_equal(j.numpy(), np.zeros((4, 2, 5, 3)))


@pytest.mark.parametrize("tshape,sshape", [((3, 2), (3,)), ((3,), (3, 2)), ((3,), (3,)),
                                           ((4, 2), (3, 2))])
def test_batch_jacobian_needs_rank_two_and_matching_batch(tshape, sshape):
    x = st.Variable(np.ones(sshape))
    with st.GradientTape() as t:
        y = st.reduce_sum(x) * np.ones(tshape)
    with pytest.raises(ValueError, match="batch"):
        t.batch_jacobian(y, x)


# --------------------------------------------------------------------------------------------
# Activations and clipping: TensorFlow's formulas at their edges
# --------------------------------------------------------------------------------------------

def test_selu_derivative_at_zero_is_scale():
    x = st.Variable([0.0, -1.0, 2.0])
    with st.GradientTape() as t:
        y = st.nn.selu(x)
    # TF's SeluGrad: scale where the activation is >= 0, (activation + scale*alpha) below
    act = SELU_SCALE * SELU_ALPHA * np.expm1(-1.0)
    assert_allclose(t.gradient(y, x).numpy(),
                    [SELU_SCALE, act + SELU_SCALE * SELU_ALPHA, SELU_SCALE], rtol=1e-15)


def test_selu_derivative_at_zero_exact_value():
    x = st.Variable(0.0)
    with st.GradientTape() as t:
        y = st.nn.selu(x)
    assert float(t.gradient(y, x)) == 1.0507009873554805


@pytest.mark.parametrize("clip_norm", [0.0, -1.0])
def test_clip_by_norm_with_non_positive_norm_gives_zeros(clip_norm):
    for t in (st.constant([3.0, -4.0]), st.constant([0.0, 0.0])):
        assert_array_equal(st.clip_by_norm(t, clip_norm).numpy(), [0.0, 0.0])
        assert_array_equal(st.clip_by_norm(t, st.constant(clip_norm)).numpy(), [0.0, 0.0])


def test_clip_by_norm_formula():
    t = np.array([[3.0, 4.0], [0.3, 0.4]])
    # TF: t * clip_norm / max(l2norm, clip_norm) over axes
    out = st.clip_by_norm(st.constant(t), 1.0, axes=[1]).numpy()
    norms = np.sqrt((t * t).sum(axis=1, keepdims=True))
    assert_allclose(out, t * 1.0 / np.maximum(norms, 1.0), rtol=1e-15)


def test_clip_by_value_with_min_above_max_gives_min_and_its_gradients():
    t = st.Variable([-3.0, 1.5, 5.0])
    lo, hi = st.Variable(2.0), st.Variable(1.0)
    with st.GradientTape() as tape:
        y = st.clip_by_value(t, lo, hi)
    assert_array_equal(y.numpy(), [2.0, 2.0, 2.0])
    gt, glo, ghi = tape.gradient(y, [t, lo, hi])
    # TF: maximum(minimum(t, hi), lo): every element's gradient goes to lo
    assert_array_equal(gt.numpy(), [0.0, 0.0, 0.0])
    assert float(glo) == 3.0 and float(ghi) == 0.0


def test_clip_by_value_gradients_at_and_between_the_bounds():
    t = st.Variable([-2.0, -1.0, 0.5, 2.0, 3.0])
    lo, hi = st.Variable(-1.0), st.Variable(2.0)
    with st.GradientTape() as tape:
        y = st.clip_by_value(t, lo, hi)
    gt, glo, ghi = tape.gradient(y, [t, lo, hi])
    assert_array_equal(gt.numpy(), [0.0, 1.0, 1.0, 1.0, 0.0])
    assert float(glo) == 1.0 and float(ghi) == 1.0


def test_clip_by_global_norm_with_an_inf_element():
    clipped, norm = st.clip_by_global_norm([st.constant([1.0, np.inf]), st.constant([2.0])],
                                           1.0)
    assert math.isinf(float(norm))
    assert all(np.isnan(c.numpy()).all() for c in clipped)
    clipped, norm = st.clip_by_global_norm([st.constant([3.0]), None, st.constant([np.nan])],
                                           1.0)
    assert math.isnan(float(norm)) and clipped[1] is None
    assert np.isnan(clipped[0].numpy()).all()


def test_clip_by_global_norm_formula():
    a, b = np.array([3.0, 0.0]), np.array([4.0])
    clipped, norm = st.clip_by_global_norm([st.constant(a), st.constant(b)], 2.0)
    # TF: t * clip_norm * min(1/norm, 1/clip_norm)
    assert float(norm) == 5.0
    assert_allclose(clipped[0].numpy(), a * 2.0 * min(1 / 5.0, 1 / 2.0), rtol=1e-15)
    assert_allclose(clipped[1].numpy(), b * 2.0 * min(1 / 5.0, 1 / 2.0), rtol=1e-15)


def test_clip_by_global_norm_needs_a_list():
    with pytest.raises(TypeError, match="list"):
        st.clip_by_global_norm(st.constant([1.0, 2.0]), 1.0)


# --------------------------------------------------------------------------------------------
# custom_gradient with plain numbers and arrays; nested rules for the second derivative
# --------------------------------------------------------------------------------------------

def test_custom_gradient_forward_and_grad_fn_may_return_numbers_and_arrays():
    @st.custom_gradient
    def f(x):
        def grad_fn(dy):
            return np.array([7.0, 8.0]) * float(dy[0])
        return np.array([1.0, 2.0]), grad_fn

    @st.custom_gradient
    def g(x):
        return 2.5, lambda dy: 3.0

    x = st.Variable([1.0, 1.0])
    s = st.Variable(1.0)
    with st.GradientTape(persistent=True) as t:
        y = f(x)
        z = g(s)
    assert isinstance(y, st.Tensor) and y.numpy().tolist() == [1.0, 2.0]
    assert t.gradient(y, x).numpy().tolist() == [7.0, 8.0]
    assert float(z) == 2.5 and float(t.gradient(z, s)) == 3.0


def test_nested_custom_gradients_override_the_second_derivative():
    # TensorFlow's documented pattern: a custom first derivative whose own derivative is
    # given by a custom function called inside grad_fn
    @st.custom_gradient
    def op_with_fused_backprop(x):
        y, x_grad = st.square(x), 2 * x

        def first_order_gradient(dy):
            @st.custom_gradient
            def first_order_custom(unused_x):
                def second_order(ddy):
                    return ddy * 100.0
                return x_grad, second_order
            return dy * first_order_custom(x)

        return y, first_order_gradient

    x = st.Variable(3.0)
    with st.GradientTape() as t2:
        with st.GradientTape() as t1:
            y = op_with_fused_backprop(x)
        g1 = t1.gradient(y, x)
    assert float(g1) == 6.0
    assert float(t2.gradient(g1, x)) == 100.0


def test_custom_gradient_rejects_outputs_that_are_not_numeric():
    @st.custom_gradient
    def f(x):
        return "text", lambda dy: dy

    with pytest.raises(st.errors.InvalidArgumentError, match="output 0"):
        f(st.constant(1.0))


# --------------------------------------------------------------------------------------------
# Error types as TensorFlow raises them
# --------------------------------------------------------------------------------------------

def test_gradient_on_a_tape_never_entered_is_a_runtime_error():
    x = st.Variable(1.0)
    t = st.GradientTape()
    y = x * 2
    with pytest.raises(RuntimeError, match="never recorded"):
        t.gradient(y, x)
    with pytest.raises(RuntimeError):
        t.jacobian(y, x)


def test_watch_on_an_unentered_tape_starts_recording():
    x = st.constant(2.0)
    t = st.GradientTape()
    t.watch(x)
    y = x * x
    assert float(t.gradient(y, x)) == 4.0


def test_gradient_of_none_is_a_type_error():
    x = st.Variable(1.0)
    with st.GradientTape() as t:
        x * 2
    with pytest.raises(TypeError, match="target is None"):
        t.gradient(None, x)


def test_stop_recording_and_reset_need_a_recording_tape():
    x = st.Variable(1.0)
    with st.GradientTape(persistent=True) as t:
        y = x * 2
        t.reset()  # allowed while recording
        y = x * 3
    with pytest.raises(RuntimeError, match="not recording"):  # TensorFlow's error types
        with t.stop_recording():
            pass
    with pytest.raises(ValueError, match="not recording"):
        t.reset()
    assert float(t.gradient(y, x)) == 3.0


def test_jacobian_without_pfor_needs_a_persistent_tape():
    x = st.Variable([1.0, 2.0])
    for method in ("jacobian", "batch_jacobian"):
        with st.GradientTape() as t:
            y = st.reshape(x * x, (1, 2))
        src = x if method == "jacobian" else st.reshape(x, (1, 2))
        with pytest.raises(RuntimeError, match="persistent"):
            getattr(t, method)(y, src, experimental_use_pfor=False)
    with st.GradientTape(persistent=True) as t:
        y = x * x
    assert_array_equal(t.jacobian(y, x, experimental_use_pfor=False).numpy(),
                       [[2.0, 0.0], [0.0, 4.0]])


def test_none_inside_output_gradients_is_a_clear_error():
    x, z = st.Variable(1.0), st.Variable(2.0)
    with st.GradientTape() as t:
        y1, y2 = x * 2, z * 3
    with pytest.raises((ValueError, TypeError), match=r"output_gradients\[1\] is None"):
        t.gradient([y1, y2], [x, z], output_gradients=[st.constant(1.0), None])


def test_integer_sources_get_a_clear_error():
    x = st.constant([1, 2])
    with st.GradientTape() as t:
        t.watch(x)
        y = x * 2
    with pytest.raises(st.errors.DTypeError, match="float"):
        t.gradient(y, x)


@pytest.mark.parametrize("order,error", [(2.5, TypeError), ("2", TypeError), (True, TypeError),
                                         (None, TypeError), (-1, ValueError)])
def test_derivative_order_must_be_a_non_negative_int(order, error):
    with pytest.raises(error, match="order"):
        st.derivative(lambda x: x ** 3, order=order)


def test_derivative_of_order_zero_is_the_function():
    f = st.derivative(lambda x: x ** 3, order=0, input_signature=[st.TensorSpec(())])
    assert_array_equal(f(np.array([2.0, 3.0])), [8.0, 27.0])
    d2 = st.derivative(lambda x: x ** 3, order=np.int64(2), input_signature=[st.TensorSpec(())])
    assert_array_equal(d2(np.array([2.0, 3.0])), [12.0, 18.0])
