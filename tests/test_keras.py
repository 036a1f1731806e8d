"""``st.keras``: layers, Sequential, losses, optimizers, utilities and the MNIST reader,
against numpy references; the seeds' Keras-layer examples with only the import changed;
models trained eagerly and under ``st.function`` alike."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_allclose
from seed_helpers import blobs

import symtape as st
from symtape.keras.layers import BatchNormalization, Dropout

keras = st.keras


@pytest.fixture(autouse=True)
def _keras_float64():
    """These tests compare with numpy's float64 to 1e-12: their layers are float64.
    Keras's default, float32, is tested against float32 references in test_float32.py."""
    keras.backend.set_floatx("float64")
    yield
    keras.backend.set_floatx("float32")


def _relu(x):
    return np.maximum(x, 0.0)


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


def test_dense_is_activation_of_an_affine_map():
    st.random.set_seed(3)
    layer = keras.layers.Dense(10, activation=st.nn.relu)
    x = np.random.default_rng(0).normal(size=(7, 5))
    y = layer(x)
    assert layer.kernel.shape == (5, 10) and layer.bias.shape == (10,)
    assert_allclose(y.numpy(), _relu(x @ layer.kernel.numpy() + layer.bias.numpy()),
                    rtol=1e-14)
    limit = np.sqrt(6.0 / 15.0)  # glorot uniform
    assert np.abs(layer.kernel.numpy()).max() <= limit
    assert [v.name for v in layer.trainable_variables] == [
        f"{layer.name}/kernel:0", f"{layer.name}/bias:0"]
    x3 = np.ones((2, 4, 5))  # any leading axes
    assert layer(x3).shape == (2, 4, 10)
    with pytest.raises(st.errors.ShapeError, match="last axis"):
        layer(np.ones((2, 4)))


def test_layer_names_are_unique_and_frozen_layers_have_no_trainable_weights():
    a, b = keras.layers.Dense(2), keras.layers.Dense(2)
    assert a.name != b.name and b.name.startswith("dense")
    model = keras.Sequential([a, b])
    model(np.ones((1, 3)))
    a.trainable = False
    assert [v.shape for v in model.trainable_variables] == [(2, 2), (2,)]
    assert len(model.non_trainable_variables) == 2 and len(model.variables) == 4
    assert model.count_params() == 3 * 2 + 2 + 2 * 2 + 2
    with pytest.raises(st.errors.InvalidArgumentError, match="activation"):
        keras.layers.Dense(2, activation="nope")
    with pytest.raises(st.errors.InvalidArgumentError, match="not a layer"):
        keras.Sequential([lambda x: x])


def test_batch_normalization_training_and_inference():
    x = np.random.default_rng(1).normal(size=(6, 3)) * 2 + 1
    bn = BatchNormalization(momentum=0.9, epsilon=1e-3)
    got = bn(x, training=True).numpy()
    mean, var = x.mean(0), x.var(0)
    assert_allclose(got, (x - mean) / np.sqrt(var + 1e-3), rtol=1e-12)
    assert_allclose(bn.moving_mean.numpy(), 0.1 * mean, rtol=1e-12)
    assert_allclose(bn.moving_variance.numpy(), 0.9 + 0.1 * var, rtol=1e-12)
    inference = bn(x).numpy()  # training=None: the moving statistics
    assert_allclose(inference, (x - 0.1 * mean) / np.sqrt(0.9 + 0.1 * var + 1e-3),
                    rtol=1e-12)
    assert [v.name.split("/")[-1] for v in bn.variables] == [
        "gamma:0", "beta:0", "moving_mean:0", "moving_variance:0"]
    images = np.random.default_rng(2).normal(size=(4, 5, 5, 2))
    out = BatchNormalization(axis=-1)(images, training=True).numpy()
    assert_allclose(out.mean(axis=(0, 1, 2)), 0.0, atol=1e-12)


def test_flatten_activation_dropout():
    x = np.arange(24.0).reshape(2, 3, 4)
    assert keras.layers.Flatten()(x).shape == (2, 12)
    assert_allclose(keras.layers.Activation("softmax")(x).numpy().sum(-1), 1.0)
    drop = Dropout(0.5, seed=1)
    assert drop(x) is not None and np.array_equal(drop(x).numpy(), x)
    y = drop(np.ones((1000,)), training=True).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0} and 400 < (y == 0).sum() < 600
    with pytest.raises(st.errors.InvalidArgumentError, match="rate"):
        Dropout(1.0)


def test_dropout_under_st_function_draws_a_new_mask_each_call_as_eagerly():
    """Dropout in training inside a compiled function: each call draws a new mask, the
    same masks in the same order as eager calls from the same seed; its gradient is the
    mask times the scale; with a None batch it is traced per batch size."""
    drop = Dropout(0.25, seed=7)
    compiled = st.function(lambda v: drop(v, training=True))
    x = np.arange(1.0, 401.0)
    st.random.set_seed(2)
    got = [compiled(x).numpy() for _ in range(3)]
    st.random.set_seed(2)
    want = [drop(x, training=True).numpy() for _ in range(3)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert not np.array_equal(got[0], got[1])
    kept = got[0] != 0
    assert_allclose(got[0][kept], x[kept] / 0.75, rtol=1e-15) and 250 < kept.sum() < 350
    v = st.Variable(x)

    @st.function
    def grad():
        with st.GradientTape() as t:
            y = st.reduce_sum(drop(v, training=True))
        return t.gradient(y, v)

    g = grad().numpy()
    assert set(np.unique(g)) == {0.0, 1 / 0.75}
    batched = st.function(lambda v: drop(v, training=True) * 2.0,
                          input_signature=[st.TensorSpec((None, 400))])
    for n in (3, 7):
        a, b = batched(np.ones((n, 400))).numpy(), batched(np.ones((n, 400))).numpy()
        assert a.shape == (n, 400) and set(np.unique(a)) == {0.0, 2 / 0.75}
        assert not np.array_equal(a, b) and 0.65 < (a != 0).mean() < 0.85
    assert len(batched.traced_signatures) == 2  # (draws: traced per batch size)
    with pytest.raises(st.errors.InvalidArgumentError, match="rate must be in"):
        st.nn.dropout(x, -0.1)
    with pytest.raises(st.errors.ShapeError, match="noise_shape"):
        st.nn.dropout(np.ones((2, 3)), 0.5, noise_shape=(4,))
    channels = st.nn.dropout(np.ones((5, 6)), 0.5, noise_shape=(1, 6)).numpy()
    assert (channels == channels[0]).all()  # whole columns kept or dropped


def test_sequential_built_from_input_shape():
    st.random.set_seed(0)
    model = keras.Sequential([keras.layers.Dense(4, activation="tanh", input_shape=(3,)),
                              keras.layers.Dense(2)])
    assert model.built and [v.shape for v in model.trainable_variables] == [
        (3, 4), (4,), (4, 2), (2,)]
    x = np.ones((5, 3))
    k1, b1, k2, b2 = (v.numpy() for v in model.trainable_variables)
    assert_allclose(model(x).numpy(), np.tanh(x @ k1 + b1) @ k2 + b2, rtol=1e-14)


# --------------------------------------------------------------------------------------------
# Losses, optimizers, utilities, data
# --------------------------------------------------------------------------------------------


def test_losses_against_numpy():
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(5, 3))
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    labels = rng.integers(0, 3, 5)
    y = np.eye(3)[labels]
    want = -(y * np.log(p)).sum(-1)
    L = keras.losses
    assert_allclose(L.categorical_crossentropy(y, p).numpy(), want, rtol=1e-12)
    assert_allclose(L.categorical_crossentropy(y, logits, from_logits=True).numpy(), want,
                    rtol=1e-12)
    assert_allclose(L.sparse_categorical_crossentropy(labels, p).numpy(), want, rtol=1e-12)
    assert float(L.CategoricalCrossentropy()(y, p)) == pytest.approx(want.mean(), rel=1e-12)
    # probabilities are clipped: a zero probability costs -log(1e-7), not inf
    assert float(L.categorical_crossentropy([[1.0, 0.0]], [[0.0, 1.0]])[0]) == \
        pytest.approx(-np.log(1e-7), rel=1e-6)
    t = rng.normal(size=(5, 3))
    assert_allclose(L.mean_squared_error(t, logits).numpy(), ((logits - t) ** 2).mean(-1),
                    rtol=1e-12)
    z = rng.integers(0, 2, (5, 3)).astype(float)
    s = 1 / (1 + np.exp(-logits))
    bce = -(z * np.log(s) + (1 - z) * np.log(1 - s)).mean(-1)
    assert_allclose(L.binary_crossentropy(z, s).numpy(), bce, rtol=1e-9)
    assert_allclose(L.binary_crossentropy(z, logits, from_logits=True).numpy(), bce,
                    rtol=1e-9)


@pytest.mark.parametrize("centered,momentum", [(False, 0.0), (True, 0.0), (False, 0.5)])
def test_rmsprop_against_its_update_rule(centered, momentum):
    w = st.Variable(np.array([1.0, -2.0]))
    opt = keras.optimizers.RMSprop(0.01, rho=0.8, momentum=momentum, centered=centered)
    ref, s, mg, vel = w.numpy().copy(), np.zeros(2), np.zeros(2), np.zeros(2)
    for k in range(4):
        g = np.array([0.5 + k, -1.0])
        opt.apply_gradients([(st.constant(g), w)])
        s = 0.8 * s + 0.2 * g * g
        den = s + 1e-7
        if centered:
            mg = 0.8 * mg + 0.2 * g
            den = den - mg * mg
        step = 0.01 * g / np.sqrt(den)
        if momentum:
            vel = momentum * vel + step
            step = vel
        ref = ref - step
    assert_allclose(w.numpy(), ref, rtol=1e-12)


def test_to_categorical():
    assert keras.utils.to_categorical([2, 0]).tolist() == [[0, 0, 1], [1, 0, 0]]
    assert keras.utils.to_categorical(np.array([[1], [0]]), 2).shape == (2, 2)
    with pytest.raises(st.errors.InvalidArgumentError, match=r"in \[0, 3\)"):
        keras.utils.to_categorical([3], 3)
    with pytest.raises(st.errors.InvalidArgumentError, match="integers"):
        keras.utils.to_categorical([0.5])


def test_mnist_reads_the_cached_file_and_refuses_anything_else(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not download"):
        keras.datasets.mnist.load_data()
    (tmp_path / "datasets").mkdir()
    file = tmp_path / "datasets" / "mnist.npz"
    rng = np.random.default_rng(5)
    np.savez(file, x_train=rng.integers(0, 255, (3, 28, 28), dtype=np.uint8),
             y_train=np.array([1, 2, 3], np.uint8), x_test=np.zeros((1, 28, 28), np.uint8),
             y_test=np.zeros(1, np.uint8))
    (x, y), (xt, yt) = keras.datasets.mnist.load_data()
    assert x.shape == (3, 28, 28) and y.tolist() == [1, 2, 3] and xt.shape == (1, 28, 28)
    np.savez(file, x_train=np.array([object()], dtype=object), y_train=y, x_test=xt,
             y_test=yt)  # a pickle inside: never loaded
    with pytest.raises(st.errors.SerializationError, match="not an MNIST archive"):
        keras.datasets.mnist.load_data()
    np.savez(file, x_train=x[:2], y_train=y, x_test=xt, y_test=yt)
    with pytest.raises(st.errors.SerializationError, match="differ in length"):
        keras.datasets.mnist.load_data()
    file.write_bytes(b"not a zip file")
    with pytest.raises(st.errors.SerializationError):
        keras.datasets.mnist.load_data()


# --------------------------------------------------------------------------------------------
# The seed's examples with Keras layers (advanced autodiff guide)
# --------------------------------------------------------------------------------------------


def test_seed_input_gradient_regularization():
    st.random.set_seed(6)
    x = st.random.normal([7, 5])

    layer = st.keras.layers.Dense(10, activation=st.nn.relu)
    with st.GradientTape() as t2:
        # The inner tape only takes the gradient with respect to the input,
        # not the variables.
        with st.GradientTape(watch_accessed_variables=False) as t1:
            t1.watch(x)  # (the guide's x is watched this way in its first listing)
            y = layer(x)
            out = st.reduce_sum(layer(x)**2)
        # 1. Calculate the input gradient.
        g1 = t1.gradient(out, x)
        # 2. Calculate the magnitude of the input gradient.
        g1_mag = st.norm(g1)

    # 3. Calculate the gradient of the magnitude with respect to the model.
    dg1_mag = t2.gradient(g1_mag, layer.trainable_variables)
    assert [var.shape for var in dg1_mag] == [(5, 10), (10,)]
    assert y.shape == (7, 10)

    def magnitude(k):
        z = x.numpy() @ k + layer.bias.numpy()
        g = (2 * _relu(z) * (z > 0)) @ k.T
        return np.linalg.norm(g)

    k0, h = layer.kernel.numpy(), 1e-6
    for i, j in [(0, 0), (2, 7), (4, 9)]:
        e = np.zeros_like(k0)
        e[i, j] = h
        fd = (magnitude(k0 + e) - magnitude(k0 - e)) / (2 * h)
        assert float(dg1_mag[0].numpy()[i, j]) == pytest.approx(fd, rel=1e-6, abs=1e-9)


def test_seed_jacobian_of_a_layer_sums_to_its_gradient():
    st.random.set_seed(7)
    x = st.random.normal([7, 5])
    layer = st.keras.layers.Dense(10, activation=st.nn.relu)

    with st.GradientTape(persistent=True) as tape:
        y = layer(x)

    j = tape.jacobian(y, layer.kernel)
    assert j.shape == (7, 10, 5, 10)
    g = tape.gradient(y, layer.kernel)
    j_sum = st.reduce_sum(j, axis=[0, 1])
    delta = st.reduce_max(abs(g - j_sum)).numpy()
    assert delta < 1e-12


def test_seed_batch_jacobian_through_batch_normalization_is_not_diagonal():
    st.random.set_seed(8)
    x = st.random.normal([7, 5])

    layer1 = st.keras.layers.Dense(8, activation=st.nn.elu)
    bn = st.keras.layers.BatchNormalization()
    layer2 = st.keras.layers.Dense(6, activation=st.nn.elu)

    with st.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        tape.watch(x)
        y = layer1(x)
        y = bn(y, training=True)
        y = layer2(y)

    j = tape.jacobian(y, x)
    assert j.shape == (7, 6, 7, 5)
    off = np.abs(j.numpy()[0, :, 1, :]).max()  # example 1 moves example 0 (batch statistics)
    assert off > 1e-6
    jb = tape.batch_jacobian(y, x)
    assert jb.shape == (7, 6, 5)


# --------------------------------------------------------------------------------------------
# Training: eager and compiled alike
# --------------------------------------------------------------------------------------------


def _model(seed):
    st.random.set_seed(seed)
    return keras.Sequential([keras.layers.Dense(16, input_shape=(8,)),
                             keras.layers.BatchNormalization(),
                             keras.layers.Activation("relu"),
                             keras.layers.Dense(4),
                             keras.layers.Activation("softmax")])


def test_sequential_with_batch_norm_trains_compiled_as_eagerly():
    """The seed's custom training step (categorical cross-entropy of softmax outputs,
    Adam), BatchNormalization in training mode: compiled with a None batch (one trace for
    every batch size) and eagerly, equal weights and moving statistics, loss falling."""
    x, labels = blobs(np.random.default_rng(9), 96, 8, 4)
    y = keras.utils.to_categorical(labels, 4)
    runs = []
    for compiled in (True, False):
        model, opt = _model(10), keras.optimizers.Adam(1e-2)

        def step(X, y):
            with st.GradientTape() as tape:
                pred = model(X, training=True)
                loss = keras.losses.categorical_crossentropy(y, pred)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return st.reduce_mean(loss)

        if compiled:
            step = st.function(step, input_signature=[st.TensorSpec((None, 8)),
                                                      st.TensorSpec((None, 4))])
        losses = []
        for epoch in range(6):
            for i in range(0, 96, 32 if epoch % 2 else 24):  # two batch sizes
                losses.append(float(step(x[i:i + 32], y[i:i + 32])))
        runs.append((model, losses, step))
    (cm, closses, cstep), (em, elosses, _) = runs
    assert_allclose(closses, elosses, rtol=1e-9)
    for a, b in zip(cm.variables, em.variables):  # (the first bias's gradient is rounding
        assert_allclose(a.numpy(), b.numpy(), rtol=1e-8, atol=1e-9)  # only: BN cancels it)
    assert cstep.traced_signatures == [((None, 8), (None, 4))]
    assert np.mean(closses[-4:]) < np.mean(closses[:4])
    assert not np.allclose(cm.layers[1].moving_mean.numpy(), 0.0)


# --------------------------------------------------------------------------------------------
# The seed's Sequential CNN and custom training loop (scaled down: 8x8 images, fewer filters)
# --------------------------------------------------------------------------------------------

from symtape.keras.layers import (  # noqa: E402 - the seed's imports, as it writes them
    Activation,
    Conv2D,
    Dense,
    Flatten,
    MaxPooling2D,
)
from symtape.keras.losses import categorical_crossentropy  # noqa: E402
from symtape.keras.models import Sequential  # noqa: E402
from symtape.keras.optimizers import Adam  # noqa: E402
from symtape.keras.utils import to_categorical  # noqa: E402


def build_model(width, height, depth, classes):
    # initialize the input shape and channels dimension to be
    # "channels last" ordering
    inputShape = (height, width, depth)
    chanDim = -1

    # build the model using Keras' Sequential API
    model = Sequential([
        # CONV => RELU => BN => POOL layer set
        Conv2D(4, (3, 3), padding="same", input_shape=inputShape),
        Activation("relu"),
        BatchNormalization(axis=chanDim),
        MaxPooling2D(pool_size=(2, 2)),

        # (CONV => RELU => BN) * 2 => POOL layer set
        Conv2D(6, (3, 3), padding="same"),
        Activation("relu"),
        BatchNormalization(axis=chanDim),
        MaxPooling2D(pool_size=(2, 2)),

        # first (and only) set of FC => RELU layers
        Flatten(),
        Dense(16),
        Activation("relu"),
        BatchNormalization(),
        Dropout(0.5),

        # softmax classifier
        Dense(classes),
        Activation("softmax")
    ])

    # return the built model to the calling function
    return model


def _digits(n, rng):
    """An offline stand-in for MNIST: 8x8 images of three classes (a bar in a different
    place each), noisy, as uint8 pixels and integer labels."""
    labels = rng.integers(0, 3, n)
    x = rng.integers(0, 60, (n, 8, 8)).astype(np.uint8)
    for k, c in enumerate(labels):
        x[k, 2 * c + 1:2 * c + 3, :] = 230
    return x, labels


def test_seed_cnn_custom_training_loop_compiled_and_eager():
    rng = np.random.default_rng(11)
    trainX, trainY = _digits(96, rng)
    trainX = np.expand_dims(trainX, axis=-1)
    trainX = trainX.astype("float64") / 255.0
    trainY = to_categorical(trainY, 3)
    EPOCHS, BS, INIT_LR = 4, 16, 1e-2
    histories, models = [], []
    for compiled in (True, False):
        st.random.set_seed(12)
        model = build_model(8, 8, 1, 3)
        opt = Adam(lr=INIT_LR, decay=INIT_LR / EPOCHS)

        def step(X, y):
            # keep track of our gradients
            with st.GradientTape() as tape:
                # make a prediction using the model and then calculate the
                # loss
                pred = model(X)
                loss = categorical_crossentropy(y, pred)

            # calculate the gradients using our tape and then update the
            # model weights
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return st.reduce_mean(loss)

        if compiled:
            step = st.function(step)
        numUpdates = int(trainX.shape[0] / BS)
        losses = []
        for epoch in range(0, EPOCHS):
            for i in range(0, numUpdates):
                start = i * BS
                end = start + BS
                losses.append(float(step(trainX[start:end], trainY[start:end])))
        histories.append(losses)
        models.append(model)
    assert_allclose(histories[0], histories[1], rtol=1e-9)
    for a, b in zip(models[0].variables, models[1].variables):
        assert_allclose(a.numpy(), b.numpy(), rtol=1e-8, atol=1e-10)
    first, last = np.mean(histories[0][:numUpdates]), np.mean(histories[0][-numUpdates:])
    assert last < 0.8 * first
    pred = models[0](trainX).numpy().argmax(-1)
    assert (pred == trainY.argmax(-1)).mean() > 0.8

    # the seed's ending: Keras's own loss and accuracy after the custom loop
    model = models[0]
    model.compile(optimizer=opt, loss=categorical_crossentropy,
                  metrics=["acc"])
    (loss, acc) = model.evaluate(trainX, trainY)
    probs = model(trainX).numpy()
    clipped = np.clip(probs / probs.sum(-1, keepdims=True), 1e-7, 1 - 1e-7)
    assert_allclose(loss, np.mean(-np.sum(trainY * np.log(clipped), axis=-1)), rtol=1e-12)
    assert acc == (probs.argmax(-1) == trainY.argmax(-1)).mean()


# --------------------------------------------------------------------------------------------
# Metrics, compile / fit / evaluate / predict
# --------------------------------------------------------------------------------------------


def test_metrics_are_running_means_against_numpy():
    rng = np.random.default_rng(21)
    batches = [(rng.integers(0, 4, n), rng.normal(size=(n, 4))) for n in (5, 3, 8)]
    cat, sparse = keras.metrics.CategoricalAccuracy(), keras.metrics.SparseCategoricalAccuracy()
    binary, mean = keras.metrics.BinaryAccuracy(), keras.metrics.Mean()
    hits, total, count = [], 0.0, 0.0
    for labels, pred in batches:
        cat.update_state(np.eye(4)[labels], pred)
        sparse.update_state(labels[:, None], pred)
        binary.update_state(np.eye(4)[labels], 1 / (1 + np.exp(-pred)))
        weights = rng.uniform(0.5, 2.0, len(labels))
        mean.update_state(pred[:, 0], sample_weight=weights)
        hits.append(pred.argmax(-1) == labels)
        total += float(np.sum(pred[:, 0] * weights))
        count += float(np.sum(weights))
    hits = np.concatenate(hits)
    assert float(cat.result()) == float(sparse.result()) == hits.mean()
    all_pred = np.concatenate([p for _, p in batches])
    all_true = np.eye(4)[np.concatenate([lab for lab, _ in batches])]
    assert_allclose(float(binary.result()), np.mean((all_pred > 0) == (all_true > 0.5)),
                    rtol=1e-15)
    assert_allclose(float(mean.result()), total / count, rtol=1e-13)
    cat.reset_state()
    assert float(cat.result()) == 0.0
    # ties: the first largest, as argmax
    assert float(cat([[0.0, 1.0]], [[0.5, 0.5]])) == 0.0


def test_metric_names_resolve_as_keras_and_bad_ones_are_refused():
    get = keras.metrics.get
    assert isinstance(get("acc", keras.losses.categorical_crossentropy),
                      keras.metrics.CategoricalAccuracy)
    assert isinstance(get("accuracy", keras.losses.SparseCategoricalCrossentropy()),
                      keras.metrics.SparseCategoricalAccuracy)
    assert isinstance(get("acc", keras.losses.binary_crossentropy), keras.metrics.BinaryAccuracy)
    assert isinstance(get("acc", keras.losses.mean_squared_error), keras.metrics.Accuracy)
    with pytest.raises(st.errors.InvalidArgumentError, match="unknown metric 'f1'"):
        get("f1")
    with pytest.raises(st.errors.InvalidArgumentError, match="unknown loss"):
        keras.losses.get("hinge_loss")
    with pytest.raises(st.errors.InvalidArgumentError, match="unknown optimizer"):
        keras.optimizers.get("adagrad2")


def test_metric_updates_run_inside_st_function():
    m = keras.metrics.Mean()

    @st.function
    def add(x):
        m.update_state(x)
        return m.result()

    add(np.array([1.0, 2.0]))
    got = add(np.array([6.0, 7.0]))
    assert float(got) == 4.0 and float(m.count) == 4.0


def _blobs_model(dropout: float = 0.0):
    st.random.set_seed(31)
    layers = [keras.layers.Dense(8, activation="tanh", input_shape=(2,))]
    if dropout:
        layers.append(Dropout(dropout))
    layers.append(keras.layers.Dense(3, activation="softmax"))
    return keras.Sequential(layers)


def _three_blobs(n, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    centres = np.array([[0.0, 2.0], [2.0, -1.0], [-2.0, -1.0]])
    return centres[labels] + 0.5 * rng.normal(size=(n, 2)), labels


def test_fit_trains_compiled_and_evaluate_agrees_with_numpy(capsys):
    x, labels = _three_blobs(90, 1)
    y = keras.utils.to_categorical(labels, 3)
    model = _blobs_model()
    model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["acc"])
    assert model.metrics_names == ["loss", "acc"]
    history = model.fit(x, y, batch_size=16, epochs=25, validation_data=(x[:30], y[:30]),
                        verbose=2)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 25 and printed[0].startswith("Epoch 1/25 - ")
    assert "val_acc" in printed[-1]
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0] and history.history["acc"][-1] > 0.9
    (step,) = [f for k, f in model._compiled.steps.items() if k[0] == "train"]
    assert len(step.traced_signatures) == 1  # batches of 16 and the last of 10: one trace
    loss, acc = model.evaluate(x, y, batch_size=7, verbose=0)
    probs = model.predict(x, batch_size=11)
    assert_allclose(probs, model(x).numpy(), rtol=1e-12)
    clipped = np.clip(probs / probs.sum(-1, keepdims=True), 1e-7, 1 - 1e-7)
    assert_allclose(loss, np.mean(-np.sum(y * np.log(clipped), axis=-1)), rtol=1e-12)
    assert acc == np.mean(probs.argmax(-1) == labels)
    assert model.evaluate(x, y, batch_size=7, verbose=0, return_dict=True) == {
        "loss": loss, "acc": acc}
    # the metrics count from zero in each call
    assert model.evaluate(x[:30], y[:30], verbose=0)[1] == history.history["val_acc"][-1]


def test_fit_with_dropout_compiles_its_step_and_learns():
    """A model with Dropout trains compiled (a new mask each step; its step traced per batch
    size) as it does eagerly."""
    x, labels = _three_blobs(60, 2)
    histories = []
    for eager in (False, True):
        model = _blobs_model(dropout=0.3)
        model.compile(optimizer=keras.optimizers.Adam(lr=0.02),
                      loss=keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"],
                      run_eagerly=eager)
        histories.append(model.fit(x, labels, batch_size=20, epochs=15, verbose=0))
        assert histories[-1].history["loss"][-1] < 0.6 * histories[-1].history["loss"][0]
    (step,) = [f for k, f in model._compiled.steps.items() if k[0] == "train"]
    assert not isinstance(step, st.Function)  # the eager one
    history = histories[0]
    assert history.history["loss"][-1] < 0.6 * history.history["loss"][0]
    assert model.evaluate(x, labels, verbose=0)[1] > 0.9  # dropout off when evaluating


def test_training_api_refuses_bad_input():
    model = _blobs_model()
    x = np.zeros((4, 2))
    with pytest.raises(st.errors.InvalidArgumentError, match="call compile"):
        model.evaluate(x, np.zeros((4, 3)))
    with pytest.raises(st.errors.InvalidArgumentError, match="give a loss"):
        model.compile(optimizer="sgd")
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(st.errors.ShapeError, match="y has 3 examples, x has 4"):
        model.fit(x, np.zeros((3, 3)), verbose=0)
    with pytest.raises(st.errors.InvalidArgumentError, match="batch_size must be a positive"):
        model.fit(x, np.zeros((4, 3)), batch_size=0, verbose=0)
    with pytest.raises(st.errors.InvalidArgumentError, match="x must hold numbers"):
        model.predict(np.array([["a", "b"]]))
    assert model.evaluate(x, np.zeros((4, 3)), verbose=0) >= 0.0  # no metrics: the loss


def test_argmax_ties_and_divide_no_nan_gradient():
    assert st.argmax([[2.0, 2.0, 1.0]], axis=1).numpy().tolist() == [0]
    assert st.argmin([[3.0, 1.0], [1.0, 0.0]]).numpy().tolist() == [1, 1]
    with pytest.raises(st.errors.ShapeError, match="axis 2 is out of range"):
        st.argmax(np.ones((2, 2)), axis=2)
    y = st.Variable([0.0, 2.0])
    with st.GradientTape() as t:
        q = st.math.divide_no_nan(3.0, y)
    assert t.gradient(q, y).numpy().tolist() == [0.0, -0.75]


def test_weights_built_inside_st_function_are_drawn_once_as_eagerly():
    """A layer built on its first call inside st.function draws its initial weights once
    (``init_scope``), the same as eagerly; a random value used only as a variable's initial
    value is not drawn again at each call."""
    st.random.set_seed(3)
    eager = keras.Sequential([keras.layers.Dense(4), Dropout(0.5)])
    eager(np.ones((2, 3)))
    st.random.set_seed(3)
    lazy = keras.Sequential([keras.layers.Dense(4), Dropout(0.5)])
    st.function(lambda x: lazy(x, training=True))(np.ones((2, 3)))
    for a, b in zip(eager.variables, lazy.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    holder = {}

    @st.function
    def scaled(x):
        if "v" not in holder:
            holder["v"] = st.Variable(st.random.normal([3]), trainable=False)
        return x * holder["v"]

    first = scaled(np.ones(3)).numpy()
    np.testing.assert_array_equal(scaled(np.ones(3)).numpy(), first)
    (traced,) = scaled._traces.values()
    assert not any(isinstance(v, st.random.Draw) for v in traced.variables)
