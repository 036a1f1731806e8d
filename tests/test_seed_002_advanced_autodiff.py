"""Seed 002, TensorFlow's "Advanced automatic differentiation" guide: every code example run
with ``import symtape as st`` in place of ``import tensorflow as tf``.

``tf.keras.layers.Dense`` / ``BatchNormalization`` and ``tf.Module`` are replaced by the
plain-Python equivalents in tests/seed_helpers.py; matplotlib lines are left out. Where the
seed's numbers come from random data, the test checks them against numpy references written
out by hand or computed by central finite differences.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from seed_helpers import BatchNormalization, Dense, central_differences, np_elu, np_relu

import symtape as st

# --------------------------------------------------------------------------------------------
# Controlling gradient recording
# --------------------------------------------------------------------------------------------


def test_stop_recording():
    x = st.Variable(2.0)
    y = st.Variable(3.0)

    with st.GradientTape() as t:
        x_sq = x * x
        with t.stop_recording():
            y_sq = y * y
        z = x_sq + y_sq

    grad = t.gradient(z, {'x': x, 'y': y})

    assert set(grad) == {'x', 'y'}
    assert grad['x'].numpy() == 4.0  # 2*x => 4
    assert grad['y'] is None
    assert z.numpy() == 13.0


def test_reset_start_recording_from_scratch():
    x = st.Variable(2.0)
    y = st.Variable(3.0)
    reset = True

    with st.GradientTape() as t:
        y_sq = y * y
        if reset:
            # Throw out all the tape recorded so far.
            # (The seed lost this line; the guide calls t.reset() here.)
            t.reset()
        z = x * x + y_sq

    grad = t.gradient(z, {'x': x, 'y': y})

    assert grad['x'].numpy() == 4.0  # 2*x => 4
    assert grad['y'] is None


def test_without_reset_both_gradients_flow():
    # the same block with reset = False records y * y as well
    x = st.Variable(2.0)
    y = st.Variable(3.0)
    reset = False
    with st.GradientTape() as t:
        y_sq = y * y
        if reset:
            t.reset()
        z = x * x + y_sq
    grad = t.gradient(z, {'x': x, 'y': y})
    assert grad['x'].numpy() == 4.0
    assert grad['y'].numpy() == 6.0


def test_stop_gradient():
    x = st.Variable(2.0)
    y = st.Variable(3.0)

    with st.GradientTape() as t:
        y_sq = y**2
        z = x**2 + st.stop_gradient(y_sq)

    grad = t.gradient(z, {'x': x, 'y': y})

    assert grad['x'].numpy() == 4.0  # 2*x => 4
    assert grad['y'] is None
    assert z.numpy() == 13.0


# --------------------------------------------------------------------------------------------
# Custom gradients
# --------------------------------------------------------------------------------------------


# Establish an identity operation, but clip during the gradient pass.
# (The seed lost the decorator; the guide's function is a @tf.custom_gradient.)
@st.custom_gradient
def clip_gradients(y):
    def backward(dy):
        return st.clip_by_norm(dy, 0.5)
    return y, backward


def test_custom_gradient_clip_by_norm():
    v = st.Variable(2.0)
    with st.GradientTape() as t:
        output = clip_gradients(v * v)
    grad = t.gradient(output, v)
    assert output.numpy() == 4.0  # the identity forward
    assert grad.numpy() == 2.0  # calls "backward", which clips 4 to 2


@pytest.mark.parametrize("v0, expected", [(0.1, 0.1), (-3.0, -3.0), (0.25, 0.25)])
def test_custom_gradient_clip_by_norm_other_values(v0, expected):
    # the upstream gradient 1 is clipped to 0.5 and multiplied by d(v*v)/dv = 2v
    v = st.Variable(v0)
    with st.GradientTape() as t:
        output = clip_gradients(v * v)
    assert output.numpy() == pytest.approx(v0 * v0)
    assert t.gradient(output, v).numpy() == pytest.approx(expected, rel=1e-15)


# Custom gradients in SavedModel
class MyModule(st.Module):

    def call_custom_grad(self, x):
        return clip_gradients(x)


def test_custom_gradient_through_module_method():
    model = MyModule()
    v = st.Variable(2.0)
    with st.GradientTape() as t:
        output = model.call_custom_grad(v * v)
    assert t.gradient(output, v).numpy() == 2.0


class SavedModule(st.Module):
    # As in the guide: only tf.function methods are saved (the seed lost this line).
    @st.function(input_signature=[st.TensorSpec(None)])
    def call_custom_grad(self, x):
        return clip_gradients(x)


def test_custom_gradient_saved_model(tmp_path):
    model = SavedModule()
    path = str(tmp_path / 'saved_model')
    # The seed lost the save call; the guide saves the module with custom gradients:
    st.saved_model.save(model, path,
                        options=st.saved_model.SaveOptions(experimental_custom_gradients=True))

    # The loaded gradients will be the same as the above example.
    v = st.Variable(2.0)
    loaded = st.saved_model.load(path)
    with st.GradientTape() as t:
        output = loaded.call_custom_grad(v * v)
    assert t.gradient(output, v).numpy() == 2.0


# --------------------------------------------------------------------------------------------
# Multiple tapes
# --------------------------------------------------------------------------------------------


def test_multiple_tapes():
    x0 = st.constant(0.0)
    x1 = st.constant(0.0)

    with st.GradientTape() as tape0, st.GradientTape() as tape1:
        # The seed lost these two lines; in the guide each tape watches its own tensor.
        tape0.watch(x0)
        tape1.watch(x1)

        y0 = st.math.sin(x0)
        y1 = st.nn.sigmoid(x1)

        y = y0 + y1

        ys = st.reduce_sum(y)
    assert tape0.gradient(ys, x0).numpy() == 1.0   # cos(x) => 1.0
    assert tape1.gradient(ys, x1).numpy() == 0.25  # sigmoid(x1)*(1-sigmoid(x1)) => 0.25


def test_multiple_tapes_each_sees_only_its_own_source():
    x0 = st.constant(0.0)
    x1 = st.constant(0.0)
    with st.GradientTape(persistent=True) as tape0, st.GradientTape(persistent=True) as tape1:
        tape0.watch(x0)
        tape1.watch(x1)
        ys = st.reduce_sum(st.math.sin(x0) + st.nn.sigmoid(x1))
    assert tape0.gradient(ys, x1) is None
    assert tape1.gradient(ys, x0) is None


def test_multiple_tapes_as_printed_watch_nothing():
    # As printed (without the watch calls) neither constant is watched, so both gradients
    # are None, as in TensorFlow.
    x0 = st.constant(0.0)
    x1 = st.constant(0.0)
    with st.GradientTape() as tape0, st.GradientTape() as tape1:
        y0 = st.math.sin(x0)
        y1 = st.nn.sigmoid(x1)
        y = y0 + y1
        ys = st.reduce_sum(y)
    assert tape0.gradient(ys, x0) is None
    assert tape1.gradient(ys, x1) is None


# --------------------------------------------------------------------------------------------
# Higher-order gradients
# --------------------------------------------------------------------------------------------


def test_higher_order_gradients():
    x = st.Variable(1.0)  # Create a Tensorflow variable initialized to 1.0

    with st.GradientTape() as t2:
        with st.GradientTape() as t1:
            y = x * x * x

        # Compute the gradient inside the outer `t2` context manager
        # which means the gradient computation is differentiable as well.
        dy_dx = t1.gradient(y, x)
    d2y_dx2 = t2.gradient(dy_dx, x)

    assert dy_dx.numpy() == 3.0  # 3 * x**2 => 3.0
    assert d2y_dx2.numpy() == 6.0  # 6 * x => 6.0


def test_input_gradient_regularization():
    rng = np.random.default_rng(3)
    st.random.set_seed(3)
    x = st.random.normal([7, 5])

    layer = Dense(10, activation=st.nn.relu, rng=rng)
    with st.GradientTape() as t2:
        # The inner tape only takes the gradient with respect to the input,
        # not the variables.
        with st.GradientTape(watch_accessed_variables=False) as t1:
            # The seed lost this line; the guide watches the input here.
            t1.watch(x)
            y = layer(x)
            out = st.reduce_sum(layer(x)**2)
        # 1. Calculate the input gradient.
        g1 = t1.gradient(out, x)
        # 2. Calculate the magnitude of the input gradient.
        g1_mag = st.norm(g1)

    # 3. Calculate the gradient of the magnitude with respect to the model.
    dg1_mag = t2.gradient(g1_mag, layer.trainable_variables)
    assert [var.shape for var in dg1_mag] == [(5, 10), (10,)]

    # numpy: out = sum(relu(x W + b)^2), so d out/dx = 2 relu(x W + b) W^T
    xn = x.numpy()
    kernel, bias = layer.kernel.numpy(), layer.bias.numpy()
    assert_allclose(y.numpy(), np_relu(xn @ kernel + bias), rtol=1e-12)
    assert_allclose(g1.numpy(), 2 * np_relu(xn @ kernel + bias) @ kernel.T, rtol=1e-12)

    def magnitude():
        return np.linalg.norm(2 * np_relu(xn @ kernel + bias) @ kernel.T)

    assert float(g1_mag.numpy()) == pytest.approx(magnitude(), rel=1e-12)
    fd = central_differences(magnitude, [kernel, bias])
    for got, ref in zip(dg1_mag, fd):
        assert_allclose(got.numpy(), ref, rtol=1e-6, atol=1e-8)


def test_input_gradient_regularization_as_printed_input_unwatched():
    # As printed the inner tape watches nothing (watch_accessed_variables=False and no
    # watch call), so the input gradient is None, as in TensorFlow.
    rng = np.random.default_rng(3)
    x = st.random.normal([7, 5])
    layer = Dense(10, activation=st.nn.relu, rng=rng)
    with st.GradientTape(watch_accessed_variables=False) as t1:
        out = st.reduce_sum(layer(x)**2)
    assert t1.gradient(out, x) is None


# --------------------------------------------------------------------------------------------
# Jacobians
# --------------------------------------------------------------------------------------------


def test_jacobian_scalar_source():
    x = st.linspace(-10.0, 10.0, 200+1)
    delta = st.Variable(0.0)

    with st.GradientTape() as tape:
        y = st.nn.sigmoid(x+delta)

    dy_dx = tape.jacobian(y, delta)

    # the result has the shape of the target: the derivative of each element
    xn = np.linspace(-10.0, 10.0, 201)
    s = 1.0 / (1.0 + np.exp(-xn))
    assert x.shape == (201,)
    assert dy_dx.shape == y.shape == (201,)
    assert_allclose(y.numpy(), s, rtol=1e-12)
    assert_allclose(dy_dx.numpy(), s * (1 - s), rtol=1e-10, atol=1e-15)


def test_jacobian_tensor_source():
    rng = np.random.default_rng(4)
    st.random.set_seed(4)
    x = st.random.normal([7, 5])
    layer = Dense(10, activation=st.nn.relu, rng=rng)

    with st.GradientTape(persistent=True) as tape:
        y = layer(x)

    # the output of this layer has a shape of (7, 10); the kernel's shape is (5, 10)
    assert y.shape == (7, 10)
    assert layer.kernel.shape == (5, 10)

    # The shape of the Jacobian is those two shapes concatenated together:
    j = tape.jacobian(y, layer.kernel)
    assert j.shape == (7, 10, 5, 10)

    # numpy: d y[b, o] / d kernel[i, p] = [o == p] * x[b, i] * [z[b, o] > 0]
    xn = x.numpy()
    active = (xn @ layer.kernel.numpy() + layer.bias.numpy()) > 0
    ref = np.einsum('op,bi,bo->boip', np.eye(10), xn, active)
    assert_allclose(j.numpy(), ref, rtol=1e-12, atol=0)

    # If you sum over the target's dimensions, you're left with the gradient of the sum
    g = tape.gradient(y, layer.kernel)
    assert g.shape == (5, 10)

    j_sum = st.reduce_sum(j, axis=[0, 1])
    delta = st.reduce_max(abs(g - j_sum)).numpy()
    assert delta < 1e-3
    assert_allclose(g.numpy(), ref.sum(axis=(0, 1)), rtol=1e-12, atol=1e-14)


def imshow_zero_center(image, **kwargs):
    lim = st.reduce_max(abs(image))
    # plt.imshow(image, vmin=-lim, vmax=lim, cmap='seismic', **kwargs)  (plotting, left out)
    return lim


def _hessian_net(rng):
    x = st.random.normal([7, 5])
    layer1 = Dense(8, activation=st.nn.relu, rng=rng)
    layer2 = Dense(6, activation=st.nn.relu, rng=rng)
    return x, layer1, layer2


def _np_grad_kernel1(xn, k1, b1, k2, b2):
    """d mean(relu(relu(x k1 + b1) k2 + b2)^2) / d k1, backpropagation by hand."""
    z1 = xn @ k1 + b1
    h1 = np_relu(z1)
    z2 = h1 @ k2 + b2
    a2 = np_relu(z2)
    dz2 = 2 * a2 / a2.size * (z2 > 0)
    dz1 = (dz2 @ k2.T) * (z1 > 0)
    return xn.T @ dz1


def test_hessian_and_newton_step():
    rng = np.random.default_rng(5)
    st.random.set_seed(5)
    x, layer1, layer2 = _hessian_net(rng)
    x_in = x.numpy()

    with st.GradientTape() as t2:
        with st.GradientTape() as t1:
            x = layer1(x)
            x = layer2(x)
            loss = st.reduce_mean(x**2)

        g = t1.gradient(loss, layer1.kernel)

    h = t2.jacobian(g, layer1.kernel)
    assert f'layer.kernel.shape: {layer1.kernel.shape}' == 'layer.kernel.shape: (5, 8)'
    assert f'h.shape: {h.shape}' == 'h.shape: (5, 8, 5, 8)'

    k1, b1 = layer1.kernel.numpy(), layer1.bias.numpy()
    k2, b2 = layer2.kernel.numpy(), layer2.bias.numpy()
    g_ref = _np_grad_kernel1(x_in, k1, b1, k2, b2)
    assert_allclose(g.numpy(), g_ref, rtol=1e-12, atol=1e-15)
    # the Hessian, column by column, from central differences of the gradient
    h_ref = np.zeros((5, 8, 5, 8))
    eps = 1e-6
    for idx in np.ndindex(5, 8):
        kp, km = k1.copy(), k1.copy()
        kp[idx] += eps
        km[idx] -= eps
        h_ref[:, :, idx[0], idx[1]] = (_np_grad_kernel1(x_in, kp, b1, k2, b2)
                                       - _np_grad_kernel1(x_in, km, b1, k2, b2)) / (2 * eps)
    assert np.abs(h_ref).max() > 0
    assert_allclose(h.numpy(), h_ref, rtol=1e-6, atol=1e-9)

    # flatten the axes into a matrix and the gradient into a vector
    n_params = st.reduce_prod(layer1.kernel.shape)
    assert int(n_params) == 40

    g_vec = st.reshape(g, [n_params, 1])
    h_mat = st.reshape(h, [n_params, n_params])
    assert g_vec.shape == (40, 1)
    assert h_mat.shape == (40, 40)

    # The Hessian matrix should be symmetric:
    lim = imshow_zero_center(h_mat)
    assert float(lim) == pytest.approx(np.abs(h_ref).max(), rel=1e-6)
    assert_allclose(h_mat.numpy(), h_mat.numpy().T, rtol=1e-12, atol=1e-14)

    # The Newton's method update step
    eps = 1e-3
    eye_eps = st.eye(h_mat.shape[0])*eps
    # X(k+1) = X(k) - (∇²f(X(k)))^-1 @ ∇f(X(k))
    # h_mat = ∇²f(X(k))
    # g_vec = ∇f(X(k))
    update = st.linalg.solve(h_mat + eye_eps, g_vec)

    # Reshape the update and apply it to the variable.
    _ = layer1.kernel.assign_sub(st.reshape(update, layer1.kernel.shape))

    update_ref = np.linalg.solve(h_ref.reshape(40, 40) + 1e-3 * np.eye(40), g_ref.reshape(40, 1))
    assert update.shape == (40, 1)
    assert_allclose(update.numpy(), update_ref, rtol=1e-5, atol=1e-9)
    assert_allclose(layer1.kernel.numpy(), k1 - update_ref.reshape(5, 8), rtol=1e-5, atol=1e-9)


# --------------------------------------------------------------------------------------------
# Batch Jacobian
# --------------------------------------------------------------------------------------------


def _elu_net(seed):
    rng = np.random.default_rng(seed)
    st.random.set_seed(seed)
    x = st.random.normal([7, 5])

    layer1 = Dense(8, activation=st.nn.elu, rng=rng)
    layer2 = Dense(6, activation=st.nn.elu, rng=rng)

    with st.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        # The seed lost this line; the guide watches the input here.
        tape.watch(x)
        y = layer1(x)
        y = layer2(y)
    return x, layer1, layer2, y, tape


def _np_elu_jacobians(xn, layer1, layer2):
    """Per-example Jacobians d y[b] / d x[b] of elu(elu(x k1 + b1) k2 + b2), by hand."""
    k1, b1 = layer1.kernel.numpy(), layer1.bias.numpy()
    k2, b2 = layer2.kernel.numpy(), layer2.bias.numpy()
    z1 = xn @ k1 + b1
    z2 = np_elu(z1) @ k2 + b2
    d1 = np.where(z1 > 0, 1.0, np.exp(z1))
    d2 = np.where(z2 > 0, 1.0, np.exp(z2))
    return np.einsum('bo,ho,bh,ih->boi', d2, k2, d1, k1), np_elu(z2)


def test_batch_jacobian():
    x, layer1, layer2, y, tape = _elu_net(6)
    per_example, y_ref = _np_elu_jacobians(x.numpy(), layer1, layer2)
    assert_allclose(y.numpy(), y_ref, rtol=1e-12)

    # The full Jacobian of y with respect to x has a shape of (batch, outs, batch, ins)
    j = tape.jacobian(y, x)
    assert j.shape == (7, 6, 7, 5)
    ref = np.einsum('boi,bc->boci', per_example, np.eye(7))
    assert_allclose(j.numpy(), ref, rtol=1e-10, atol=1e-15)

    # every (batch, batch) slice of this tensor is a diagonal matrix
    image = j[:, 0, :, 0]
    lim = imshow_zero_center(image)
    assert float(lim) == pytest.approx(np.abs(per_example[:, 0, 0]).max(), rel=1e-12)
    assert_array_equal(image.numpy() - np.diag(np.diag(image.numpy())), np.zeros((7, 7)))

    # sum over the duplicate batch dimension, or select the diagonals using einsum
    j_sum = st.reduce_sum(j, axis=2)
    j_select = st.einsum('bxby->bxy', j)
    assert j_sum.shape == j_select.shape == (7, 6, 5)
    assert_allclose(j_sum.numpy(), per_example, rtol=1e-10, atol=1e-15)
    assert_allclose(j_select.numpy(), per_example, rtol=1e-10, atol=1e-15)

    jb = tape.batch_jacobian(y, x)
    error = st.reduce_max(abs(jb - j_sum))
    assert error < 1e-3
    assert jb.shape == (7, 6, 5)
    assert_allclose(jb.numpy(), per_example, rtol=1e-10, atol=1e-15)


def test_batch_jacobian_plot_as_patches_data():
    x, _, _, y, tape = _elu_net(6)
    j = tape.jacobian(y, x)

    def plot_as_patches(j):
        # Reorder axes so the diagonals will each form a contiguous patch.
        j = st.transpose(j, [1, 0, 3, 2])
        # Pad in between each patch.
        lim = st.reduce_max(abs(j))
        # (The seed's line is cut after the paddings; the guide pads with lim.)
        j = st.pad(j, [[0, 0], [1, 1], [0, 0], [1, 1]], constant_values=lim)
        # Reshape to form a single image.
        s = j.shape
        j = st.reshape(j, [s[0]*s[1], s[2]*s[3]])
        # imshow_zero_center(j, extent=[-0.5, s[2]-0.5, s[0]-0.5, -0.5])  (plotting)
        return j, lim

    image, lim = plot_as_patches(j)
    ref = np.pad(np.transpose(j.numpy(), [1, 0, 3, 2]), [[0, 0], [1, 1], [0, 0], [1, 1]],
                 constant_values=float(lim)).reshape(6 * 9, 5 * 9)
    assert image.shape == (54, 45)
    assert_allclose(image.numpy(), ref, rtol=1e-12)


def _np_bn_net(xn, layer1, bn, layer2):
    z1 = xn @ layer1.kernel.numpy() + layer1.bias.numpy()
    a1 = np_elu(z1)
    mean = a1.mean(axis=0)
    var = ((a1 - mean) ** 2).mean(axis=0)
    n = (a1 - mean) / np.sqrt(var + 1e-3) * bn.gamma.numpy() + bn.beta.numpy()
    return np_elu(n @ layer2.kernel.numpy() + layer2.bias.numpy())


def test_batch_jacobian_with_batch_normalization():
    rng = np.random.default_rng(8)
    st.random.set_seed(8)
    x = st.random.normal([7, 5])

    layer1 = Dense(8, activation=st.nn.elu, rng=rng)
    bn = BatchNormalization()
    layer2 = Dense(6, activation=st.nn.elu, rng=rng)

    with st.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        # The seed lost this line; the guide watches the input here.
        tape.watch(x)
        y = layer1(x)
        y = bn(y, training=True)
        y = layer2(y)

    j = tape.jacobian(y, x)
    assert f'j.shape: {j.shape}' == 'j.shape: (7, 6, 7, 5)'

    xn = x.numpy()
    assert_allclose(y.numpy(), _np_bn_net(xn, layer1, bn, layer2), rtol=1e-10)
    flat = xn.copy()
    fd = np.zeros((7, 6, 7, 5))
    eps = 1e-6
    for idx in np.ndindex(7, 5):
        old = flat[idx]
        flat[idx] = old + eps
        hi = _np_bn_net(flat, layer1, bn, layer2)
        flat[idx] = old - eps
        lo = _np_bn_net(flat, layer1, bn, layer2)
        flat[idx] = old
        fd[:, :, idx[0], idx[1]] = (hi - lo) / (2 * eps)
    assert_allclose(j.numpy(), fd, rtol=1e-5, atol=1e-8)

    # These slices are not diagonal: batch normalization mixes the examples
    image = j[:, 0, :, 0].numpy()
    off_diagonal = image[~np.eye(7, dtype=bool)]
    assert np.abs(off_diagonal).min() > 0

    # batch_jacobian still runs and returns something with the expected shape
    jb = tape.batch_jacobian(y, x)
    assert f'jb.shape: {jb.shape}' == 'jb.shape: (7, 6, 5)'
    # its contents: for each output unit, the gradient of that unit summed over the batch
    assert_allclose(jb.numpy(), np.einsum('cobi->boi', j.numpy()), rtol=1e-10, atol=1e-15)
    assert not np.allclose(jb.numpy(), np.einsum('bobi->boi', j.numpy()))
