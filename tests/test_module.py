"""``st.Module`` (``tf.Module``'s tracking, names and scopes), ``st.name_scope``, and
``st.function`` taking modules, optimizers and Python values as parts of its trace key:
the seeds' ``tf.Module`` training programs run with only the import changed, eagerly and
compiled, with equal values."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from seed_helpers import blobs, to_categorical

import symtape as st


class Dense(st.Module):
    def __init__(self, n_in, n_out, name=None):
        super().__init__(name=name)
        with self.name_scope:
            self.w = st.Variable(np.full((n_in, n_out), 0.5), name="w")
            self.b = st.Variable(np.zeros(n_out), name="b")

    def __call__(self, x):
        return st.matmul(x, self.w) + self.b


class Stack(st.Module):
    def __init__(self):
        super().__init__()
        self.blocks = {"second": Dense(3, 1, name="head"), "first": Dense(2, 3)}
        self.shared = self.blocks["first"]  # the same module again: counted once
        self.counter = st.Variable(0.0, trainable=False, name="counter")
        self.extras = [st.Variable(1.0, name="scale"), (st.Variable(2.0, name="shift"),)]


def test_variables_and_submodules_follow_tensorflows_order():
    """Attributes in name order (dicts in key order, lists in order), each value once,
    then each submodule found, depth first: the order of ``tf.Module``."""
    m = Stack()
    assert m.name == "stack" and repr(m) == "<Stack 'stack'>"
    assert [v.name for v in m.variables] == [
        "counter:0", "scale:0", "shift:0", "dense/b:0", "dense/w:0", "head/b:0", "head/w:0"]
    assert [v.name for v in m.trainable_variables] == [
        "scale:0", "shift:0", "dense/b:0", "dense/w:0", "head/b:0", "head/w:0"]
    assert [v.name for v in m.non_trainable_variables] == ["counter:0"]
    assert [s.name for s in m.submodules] == ["dense", "head"]
    paths = [p for p, _ in m._flatten(predicate=lambda v: isinstance(v, st.Variable),
                                      with_path=True)]
    assert ("blocks", "first", "w") in paths and ("shared", "w") in paths  # every path
    assert ("extras", 1, 0) in paths


def test_names_and_scopes():
    assert Dense(1, 1).name == "dense"

    class MyHTTPLayer(st.Module):
        pass

    assert MyHTTPLayer().name == "my_http_layer"
    with pytest.raises(st.errors.InvalidArgumentError, match="valid module name"):
        st.Module(name="not valid")
    with st.name_scope("outer"):
        inner = Dense(1, 1, name="inner")
        v = st.Variable(1.0)
    assert [x.name for x in inner.variables] == ["outer/inner/b:0", "outer/inner/w:0"]
    assert v.name == "outer/Variable:0"
    with inner.name_scope as scope:  # a module's scope is the same wherever it is entered
        assert scope == "outer/inner/"
    with pytest.raises(st.errors.InvalidArgumentError, match="scope name"):
        st.name_scope("a b")

    class Lazy(st.Module):
        @st.Module.with_name_scope
        def build(self):
            self.w = st.Variable(0.0, name="w")

    lazy = Lazy(name="lazy")
    lazy.build()
    assert lazy.w.name == "lazy/w:0" and lazy.trainable_variables == (lazy.w,)


def test_a_cycle_of_modules_is_walked_once():
    a, b = Dense(1, 1, name="a"), Dense(1, 1, name="b")
    a.peer, b.peer = b, a
    assert [s.name for s in a.submodules] == ["b"]
    assert len(a.variables) == 4


# --------------------------------------------------------------------------------------------
# The seed's MNIST MLP (tf.Module, clipping, Adam), scaled down
# --------------------------------------------------------------------------------------------

N_FEATURES, N_HIDDEN, N_CLASSES = 8, 16, 4


class MLP(st.Module):
    def __init__(self):
        self.w1 = st.Variable(st.random.normal([N_FEATURES, N_HIDDEN]))
        self.b1 = st.Variable(st.zeros([N_HIDDEN]))
        self.w2 = st.Variable(st.random.normal([N_HIDDEN, N_CLASSES]))
        self.b2 = st.Variable(st.zeros([N_CLASSES]))

    def __call__(self, x):
        h1 = st.nn.relu(st.matmul(x, self.w1) + self.b1)
        return st.matmul(h1, self.w2) + self.b2


def train_step(model, x, y, optimizer):
    with st.GradientTape(persistent=True) as tape:
        y_pred = model(x)
        loss = st.reduce_mean(st.nn.softmax_cross_entropy_with_logits(y, y_pred))
        l2_loss = 0.01 * (st.reduce_sum(st.square(model.w1)) + st.reduce_sum(st.square(model.w2)))
        total_loss = loss + l2_loss
    vars = [model.w1, model.b1, model.w2, model.b2]
    grads = tape.gradient(total_loss, vars)
    clipped_grads = [st.clip_by_norm(g, 1.0) if g is not None else g for g in grads]
    optimizer.apply_gradients(zip(clipped_grads, vars))
    del tape
    return loss


def _models():
    """Two models with equal weights (a module without ``super().__init__()``, as the seed
    writes it, still tracks its variables)."""
    st.random.set_seed(0)
    a = MLP()
    st.random.set_seed(0)
    return a, MLP()


def test_seed_mlp_trains_compiled_as_it_does_eagerly():
    rng = np.random.default_rng(0)
    x_train, labels = blobs(rng, 64, N_FEATURES, N_CLASSES)
    y_train = to_categorical(labels, N_CLASSES)
    model, eager_model = _models()
    assert len(model.trainable_variables) == 4
    optimizer, eager_optimizer = st.optimizers.Adam(0.01), st.optimizers.Adam(0.01)
    step = st.function(train_step)
    batch_size = 16
    history = []
    for epoch in range(4):
        for i in range(0, len(x_train), batch_size):
            x_batch, y_batch = x_train[i:i + batch_size], y_train[i:i + batch_size]
            loss = step(model, x_batch, y_batch, optimizer)
            want = train_step(eager_model, x_batch, y_batch, eager_optimizer)
            assert float(loss) == pytest.approx(float(want), rel=1e-10)
        history.append(float(loss))
    for a, b in zip(model.variables, eager_model.variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-12)
    assert np.all(np.diff(history) < 0)  # the last batch's loss falls epoch after epoch
    assert len(step.traced_signatures) == 1  # one trace: same shapes, same model/optimizer


def test_python_values_are_part_of_the_trace_key():
    """Modules and optimizers by identity, ints and flags by value (each new one traces
    again, with a warning past 5 traces), floats and arrays as tensors."""
    a, b = _models()

    @st.function
    def predict(model, x, scale, training=False):
        y = model(x) * scale
        return y * 2.0 if training else y

    x = np.ones((3, N_FEATURES))
    np.testing.assert_allclose(predict(a, x, 0.5).numpy(), a(x).numpy() * 0.5)
    predict(a, x, 1.5)  # a float: the same trace
    predict(b, x, 1.5)  # another module: a new trace
    np.testing.assert_allclose(predict(a, x, 1.0, training=True).numpy(),
                               a(x).numpy() * 2.0)
    assert len(predict.traced_signatures) == 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        power = st.function(lambda x, k: x ** k)
        for k in range(7):
            assert power(np.array([2.0]), k).numpy()[0] == 2.0 ** k
    assert [w.category.__name__ for w in caught] == ["RetracingWarning"]
    assert float(st.function(lambda k: k * 2)(3)) == 6.0  # a Python result is a tensor
    with pytest.raises(st.errors.InvalidArgumentError, match="tensor arguments are numbers"):
        st.function(lambda x: x)(np.array(["a"]))


# --------------------------------------------------------------------------------------------
# The seed's GAN (two tf.Modules, two optimizers in one compiled step), scaled down
# --------------------------------------------------------------------------------------------

Z_DIM, G_HIDDEN, IMAGE, D_HIDDEN = 4, 8, 6, 8


class Generator(st.Module):
    def __init__(self):
        self.w1 = st.Variable(st.random.normal([Z_DIM, G_HIDDEN]))
        self.b1 = st.Variable(st.zeros([G_HIDDEN]))
        self.w2 = st.Variable(st.random.normal([G_HIDDEN, IMAGE]))
        self.b2 = st.Variable(st.zeros([IMAGE]))

    def __call__(self, z):
        h1 = st.nn.relu(st.matmul(z, self.w1) + self.b1)
        return st.nn.tanh(st.matmul(h1, self.w2) + self.b2)


class Discriminator(st.Module):
    def __init__(self):
        self.w1 = st.Variable(st.random.normal([IMAGE, D_HIDDEN]))
        self.b1 = st.Variable(st.zeros([D_HIDDEN]))
        self.w2 = st.Variable(st.random.normal([D_HIDDEN, 1]))
        self.b2 = st.Variable(st.zeros([1]))

    def __call__(self, x):
        h1 = st.nn.relu(st.matmul(x, self.w1) + self.b1)
        return st.matmul(h1, self.w2) + self.b2


def d_loss(real_output, fake_output):
    real_loss = st.reduce_mean(st.nn.sigmoid_cross_entropy_with_logits(st.ones_like(real_output), real_output))  # noqa: E501 - the seed verbatim
    fake_loss = st.reduce_mean(st.nn.sigmoid_cross_entropy_with_logits(st.zeros_like(fake_output), fake_output))  # noqa: E501 - the seed verbatim
    return real_loss + fake_loss


def g_loss(fake_output):
    return st.reduce_mean(st.nn.sigmoid_cross_entropy_with_logits(st.ones_like(fake_output), fake_output))  # noqa: E501 - the seed verbatim


def gan_train_step(generator, discriminator, x, z, g_optimizer, d_optimizer):
    with st.GradientTape(persistent=True) as tape:
        fake_images = generator(z)
        real_output = discriminator(x)
        fake_output = discriminator(fake_images)
        g_loss_val = g_loss(fake_output)
        d_loss_val = d_loss(real_output, fake_output)
    g_vars = [generator.w1, generator.b1, generator.w2, generator.b2]
    d_vars = [discriminator.w1, discriminator.b1, discriminator.w2, discriminator.b2]
    g_grads = tape.gradient(g_loss_val, g_vars)
    d_grads = tape.gradient(d_loss_val, d_vars)
    g_optimizer.apply_gradients(zip(g_grads, g_vars))
    d_optimizer.apply_gradients(zip(d_grads, d_vars))
    del tape
    return g_loss_val, d_loss_val


def _gan():
    st.random.set_seed(1)
    return Generator(), Discriminator(), st.optimizers.Adam(0.01), st.optimizers.Adam(0.01)


def test_seed_gan_step_compiled_equals_eager():
    rng = np.random.default_rng(2)
    x_train = np.tanh(rng.normal(size=(16, IMAGE)))
    compiled, eager = _gan(), _gan()
    step = st.function(gan_train_step)
    first = None
    for epoch in range(20):
        z = rng.normal(size=(16, Z_DIM))
        got = step(compiled[0], compiled[1], x_train, z, compiled[2], compiled[3])
        want = gan_train_step(eager[0], eager[1], x_train, z, eager[2], eager[3])
        for a, b in zip(got, want):
            assert float(a) == pytest.approx(float(b), rel=1e-9)
        first = first or [float(v) for v in got]
    for a, b in zip(compiled[0].variables + compiled[1].variables,
                    eager[0].variables + eager[1].variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-8, atol=1e-12)
    assert float(got[1]) < first[1]  # the discriminator learns the real images
    assert len(step.traced_signatures) == 1
