"""The convolution and pooling ops (``symtape/ops/conv.py``, ``pool.py``): values
against numpy definitions, eager and compiled as loop nests (strided, overlapping, with
input places no window covers), derivatives to second order against finite differences,
Jacobians through batching, sparsity, formulas, ties and NaN, and errors naming the
argument."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import symtape as st
from symtape import ops
from symtape.compile import strategy
from symtape.codegen.loops import LoopPlan
from symtape.base.errors import InvalidArgumentError, ShapeError
from test_ops import (np_conv2d, np_conv2d_filter, np_conv2d_input, np_pool, np_pool_grad,
                      np_pool_pick, np_sum_pool_grad)

CASES = [  # (x shape, k shape, strides, dilations)
    ((3, 9, 8, 3), (3, 3, 3, 5), (1, 1), (1, 1)),
    ((2, 10, 9, 2), (3, 2, 2, 4), (2, 1), (1, 1)),  # row 9 of x is in no window
    ((2, 11, 11, 3), (2, 3, 3, 9), (3, 2), (1, 1)),
    ((2, 9, 10, 2), (2, 3, 2, 3), (1, 1), (3, 2)),  # dilated: taps 3 rows, 2 columns apart
    ((1, 10, 9, 2), (2, 2, 2, 3), (2, 3), (2, 2)),  # dilated and strided, rows left out
]


def dilate(k, dil):
    """The filters with ``dil - 1`` zero rows and columns between taps (an independent
    reference: a dilated convolution is a plain one with these filters)."""
    (kh, kw), (dh, dw) = k.shape[:2], dil
    out = np.zeros(((kh - 1) * dh + 1, (kw - 1) * dw + 1) + k.shape[2:])
    out[::dh, ::dw] = k
    return out


def _three(x, k, y, strides, dil=(1, 1)):
    size_x, size_k = x.shape[1:3], k.shape[:2]
    kw = {"strides": strides, "dilations": dil}
    return [ops.conv2d(x, k, **kw),
            ops.conv2d_backprop_input(y, k, size=size_x, **kw),
            ops.conv2d_backprop_filter(x, y, size=size_k, **kw)]


def _refs(x, k, y, strides, dil=(1, 1)):
    kd = dilate(k, dil)
    return [np_conv2d(x, kd, strides, [(0, 0), (0, 0)]),
            np_conv2d_input(y, kd, strides, x.shape[1:3]),
            np_conv2d_filter(x, y, strides, kd.shape[:2])[::dil[0], ::dil[1]]]


def _sample(xs, ks, strides, seed=0, dil=(1, 1)):
    rng = np.random.default_rng(seed)
    x, k = rng.normal(size=xs), rng.normal(size=ks)
    y = rng.normal(size=np_conv2d(x, dilate(k, dil), strides, [(0, 0), (0, 0)]).shape)
    return x, k, y


def _eager_and_looped(monkeypatch, fn, args, refs, rtol, atol) -> list:
    """``fn(*args)`` eager and compiled as a loop plan, each output against ``refs``; the
    loop plan's outputs."""
    for got, want in zip(fn(*args), refs):
        np.testing.assert_allclose(got.numpy(), want, rtol=rtol, atol=atol)
    monkeypatch.setattr(strategy, "LOOP_MIN_ATOMS", 0)
    f = st.function(fn)
    got = f(*args)
    assert isinstance(f.get_concrete_function(*args).plan, LoopPlan)
    for g, want in zip(got, refs):
        np.testing.assert_allclose(g.numpy(), want, rtol=rtol, atol=atol)
    return got


@pytest.mark.parametrize("xs,ks,strides,dil", CASES)
def test_eager_and_loop_compiled_values_equal_the_definitions(monkeypatch, xs, ks, strides,
                                                              dil):
    x, k, y = _sample(xs, ks, strides, dil=dil)
    refs = _refs(x, k, y, strides, dil)
    _eager_and_looped(monkeypatch, lambda a, b, c: _three(a, b, c, strides, dil), (x, k, y),
                      refs, 1e-12, 1e-12)


def test_the_unreached_input_row_is_exactly_zero(monkeypatch):
    xs, ks, strides, _ = CASES[1]
    x, k, y = _sample(xs, ks, strides)
    monkeypatch.setattr(strategy, "LOOP_MIN_ATOMS", 0)
    f = st.function(lambda b, c: ops.conv2d_backprop_input(c, b, strides=strides,
                                                           size=xs[1:3]))
    for value in (f(k, y).numpy(), ops.conv2d_backprop_input(
            y, k, strides=strides, size=xs[1:3]).numpy()):
        assert (value[:, 9] == 0).all() and not np.signbit(value[:, 9]).any()


def test_large_sizes_take_the_loop_path_with_padding_and_match_eager():
    """A SAME convolution big enough for the loop planner: value and both gradients (the
    transposes' loop forms) equal eager numpy's to rounding."""
    rng = np.random.default_rng(1)
    x = st.Variable(rng.normal(size=(8, 16, 16, 4)))
    k = st.Variable(rng.normal(size=(3, 3, 4, 6)) / 6)
    r = rng.normal(size=(8, 8, 16, 6))

    def step():
        with st.GradientTape() as t:
            loss = st.reduce_sum(st.tanh(st.nn.conv2d(x, k, [2, 1], "SAME")) * r)
        return [loss] + t.gradient(loss, [x, k])

    f = st.function(step)
    got = f()
    assert isinstance(f.get_concrete_function().plan, LoopPlan)
    for a, b in zip(got, step()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


def _fd_grad(fn, arr, eps=1e-6):
    out = np.zeros_like(arr)
    for idx in np.ndindex(*arr.shape):
        hi, lo = arr.copy(), arr.copy()
        hi[idx] += eps
        lo[idx] -= eps
        out[idx] = (fn(hi) - fn(lo)) / (2 * eps)
    return out


@pytest.mark.parametrize("which", [0, 1, 2])
def test_second_derivatives_stay_in_the_family(which):
    """The gradient of ``sum(tanh(op(a, b)) * w)`` with respect to ``a``, differentiated
    again along ``b`` (a mixed second derivative through each op's rule and the rule's
    rule), against central differences of the first derivative."""
    xs, ks, strides = (1, 5, 4, 2), (2, 2, 2, 3), (2, 1)
    x, k, y = _sample(xs, ks, strides, seed=which)
    a, b = [(x, k), (y, k), (x, y)][which]
    op = _three(x, k, y, strides)[which]
    w = np.random.default_rng(9).normal(size=op.shape)

    def f(a_, b_):
        args = {0: (a_, b_, y), 1: (x, b_, a_), 2: (a_, k, b_)}[which]
        return _three(args[0], args[1], args[2], strides)[which]

    def grad_a(b_val):
        av, bv = st.Variable(a), st.Variable(b_val)
        with st.GradientTape() as t:
            s = st.reduce_sum(st.tanh(f(av, bv)) * w)
        return t.gradient(s, av)

    av, bv = st.Variable(a), st.Variable(b)
    v = np.random.default_rng(4).normal(size=a.shape)
    with st.GradientTape() as outer:
        with st.GradientTape() as inner:
            s = st.reduce_sum(st.tanh(f(av, bv)) * w)
        ga = inner.gradient(s, av)
        gv = st.reduce_sum(ga * v)
    mixed = outer.gradient(gv, bv).numpy()
    fd = _fd_grad(lambda bb: float(np.sum(grad_a(bb).numpy() * v)), b)
    np.testing.assert_allclose(mixed, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("wrt", [0, 1])
def test_jacobians_batch_each_argument(wrt):
    """``st.jacobian`` of a convolution batches its one-hot seeds through each op's batching
    rule (the seeds merged into an axis that is not summed): equal to the exact linear
    maps."""
    xs, ks, strides = (2, 5, 4, 2), (2, 2, 2, 3), (2, 1)
    x, k, _ = _sample(xs, ks, strides)
    xv, kv = st.Variable(x), st.Variable(k)
    with st.GradientTape(persistent=True) as t:
        y = st.nn.conv2d(xv, kv, strides, "VALID")
        g = st.reduce_sum(y * y)
    gk = t.gradient(g, kv) if wrt == 0 else None
    src = [xv, kv][wrt]
    jac = t.jacobian(y, src).numpy().reshape(y.numpy().size, -1)
    base = np_conv2d(x, k, strides, [(0, 0), (0, 0)]).reshape(-1)
    cols = []
    for e in range(src.numpy().size):
        unit = np.zeros(src.numpy().size)
        unit[e] = 1.0
        args = (unit.reshape(x.shape), k) if wrt == 0 else (x, unit.reshape(k.shape))
        cols.append(np_conv2d(*args, strides, [(0, 0), (0, 0)]).reshape(-1))
    np.testing.assert_allclose(jac, np.stack(cols, 1), rtol=1e-12, atol=1e-12)
    assert base.shape[0] == jac.shape[0]
    if gk is not None:
        want = np_conv2d_filter(x, 2 * np_conv2d(x, k, strides, [(0, 0), (0, 0)]), strides,
                                k.shape[:2])
        np.testing.assert_allclose(gk.numpy(), want, rtol=1e-12)


def test_hessian_sparsity_follows_the_windows():
    """A convolution's dependency pattern: each output reads its window and the whole
    filter, so the sparse Hessian of ``sum(conv(x, k)**2)`` in ``x`` couples only places
    that share a window, and equals the dense one."""
    kern = np.array([1.0, -2.0]).reshape(2, 1, 1, 1)

    def f(x):
        y = st.nn.conv2d(st.reshape(x, (1, 6, 1, 1)), kern, [2, 1], "VALID")
        return st.reduce_sum(y * y)  # windows {0, 1}, {2, 3}, {4, 5}

    spec = [st.TensorSpec((6,))]
    x = np.linspace(-1.0, 1.0, 6)
    got = st.hessian(f, sparse=True, input_signature=spec)(x)
    pattern = {tuple(i) for i in got.indices.tolist()}
    assert pattern == {(i, j) for i in range(6) for j in range(6) if i // 2 == j // 2}
    np.testing.assert_allclose(got.to_dense(), st.hessian(f, input_signature=spec)(x),
                               rtol=1e-13)
    k = kern.reshape(2)
    np.testing.assert_allclose(got.to_dense()[:2, :2], 2 * np.outer(k, k), rtol=1e-13)


def test_formula_of_a_small_convolution():
    x = st.symbol("x", shape=(1, 3, 1, 1))
    k = st.symbol("k", shape=(2, 1, 1, 1))
    y = st.nn.conv2d(x, k, 1, "VALID")
    xs = sp.symbols("x_0:3")
    f = [sp.sympify(e) for e in np.asarray(y.formula(), dtype=object).reshape(-1)]
    names = {s.name: s for e in f for s in e.free_symbols}
    assert len(f) == 2 and set(names) == {"x_0_0_0_0", "x_0_1_0_0", "x_0_2_0_0",
                                          "k_0_0_0_0", "k_1_0_0_0"}
    assert sp.expand(f[0] - names["x_0_0_0_0"] * names["k_0_0_0_0"]
                     - names["x_0_1_0_0"] * names["k_1_0_0_0"]) == 0
    assert len(xs) == 3


@pytest.fixture
def keras_float64():
    """Keras layers in float64 (their default is float32), compared with numpy to 1e-12."""
    st.keras.backend.set_floatx("float64")
    yield
    st.keras.backend.set_floatx("float32")


def test_dilated_same_convolution_and_its_gradients_through_keras(keras_float64):
    """Keras ``Conv2D(dilation_rate=2, padding="same")``: the output keeps the input's size,
    values and both gradients equal the plain convolution with zero-dilated filters."""
    rng = np.random.default_rng(12)
    x0 = rng.normal(size=(2, 7, 6, 2))
    st.random.set_seed(1)
    layer = st.keras.layers.Conv2D(3, (3, 2), padding="same", dilation_rate=2)
    x = st.Variable(x0)
    with st.GradientTape() as t:
        out = layer(x)
        s = st.reduce_sum(st.tanh(out))
    gx, gk = t.gradient(s, [x, layer.kernel])
    kd = dilate(layer.kernel.numpy(), (2, 2))  # spans 5x3: pads (2, 2) and (1, 1)
    plain = np_conv2d(x0, kd, (1, 1), [(2, 2), (1, 1)]) + layer.bias.numpy()
    np.testing.assert_allclose(out.numpy(), plain, rtol=1e-12)
    xv, kv = st.Variable(x0), st.Variable(kd)
    with st.GradientTape() as t:
        ref = st.reduce_sum(st.tanh(st.nn.conv2d(xv, kv, 1, [[0, 0], [2, 2], [1, 1], [0, 0]])
                                    + layer.bias))
    rx, rk = t.gradient(ref, [xv, kv])
    np.testing.assert_allclose(gx.numpy(), rx.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gk.numpy(), rk.numpy()[::2, ::2], rtol=1e-12, atol=1e-14)


def test_bad_arguments_are_named():
    x, k = np.ones((1, 4, 4, 2)), np.ones((3, 3, 2, 1))
    with pytest.raises(ShapeError, match="argument k must be HWIO"):
        ops.conv2d(x, np.ones((3, 2, 1)), strides=(1, 1))
    with pytest.raises(ShapeError, match="channels"):
        ops.conv2d(x, np.ones((3, 3, 3, 1)), strides=(1, 1))
    with pytest.raises(InvalidArgumentError, match="strides must be two positive ints"):
        ops.conv2d(x, k, strides=(0, 1))
    with pytest.raises(ShapeError, match="makes an output of 2x2, not 3x3"):
        ops.conv2d_backprop_input(np.ones((1, 3, 3, 1)), k, strides=(1, 1), size=(4, 4))
    with pytest.raises(InvalidArgumentError, match="size must be two positive ints"):
        ops.conv2d_backprop_filter(x, np.ones((1, 2, 2, 1)), strides=(1, 1), size=(3,))
    with pytest.raises(ShapeError, match="does not fit"):
        ops.conv2d(np.ones((1, 2, 2, 2)), k, strides=(1, 1))
    with pytest.raises(ShapeError, match=r"spanning 5x5\) does not fit"):
        ops.conv2d(x, k, strides=(1, 1), dilations=(2, 2))
    with pytest.raises(InvalidArgumentError, match="dilations must be positive"):
        st.nn.conv2d(x, k, 1, "SAME", dilations=0)


POOLS = [((2, 7, 6, 3), (2, 2), (2, 2)),  # row 6 of x is in no window
         ((2, 7, 6, 3), (3, 2), (2, 1))]  # overlapping windows


def _pools(x, g, h, size, strides):
    kw = {"ksize": size, "strides": strides}
    return [ops.max_pool2d(x, **kw), ops.max_pool2d_grad(x, g, **kw),
            ops.max_pool2d_pick(x, h, **kw), ops.sum_pool2d(x, **kw),
            ops.sum_pool2d_grad(g, size=tuple(x.shape[1:3]), **kw)]


@pytest.mark.parametrize("xs,size,strides", POOLS)
def test_pooling_eager_and_loop_values_equal_the_definitions(monkeypatch, xs, size, strides):
    rng = np.random.default_rng(5)
    x, h = rng.normal(size=xs), rng.normal(size=xs)
    want_max = np_pool(x, size, strides, [(0, 0), (0, 0)], np.max, 0.0)
    g = rng.normal(size=want_max.shape)
    refs = [want_max, np_pool_grad(x, g, size, strides), np_pool_pick(x, h, size, strides),
            np_pool(x, size, strides, [(0, 0), (0, 0)], np.sum, 0.0),
            np_sum_pool_grad(g, size, strides, xs[1:3])]
    got = _eager_and_looped(monkeypatch, lambda a, b, c: _pools(a, b, c, size, strides),
                            (x, g, h), refs, 1e-14, 1e-15)
    if strides == (2, 2):  # row 6 is in no window: exact (positive) zeros
        for grad in (got[1], got[4]):
            assert (grad.numpy()[:, 6] == 0).all() and not np.signbit(grad.numpy()[:, 6]).any()


def test_ties_and_nan_pick_the_same_tap_everywhere(monkeypatch):
    """A window of equal values gives its gradient to its first tap (TensorFlow's choice);
    once a tap is NaN the running maximum is NaN and the window's last tap is taken (as a
    chain of maximum ops takes it): the element view, eager numpy and the loop kernel
    agree."""
    x = np.array([[1.0, 1.0], [0.0, 1.0], [2.0, np.nan], [5.0, 3.0]]).reshape(1, 4, 2, 1)
    g = np.array([10.0, 20.0]).reshape(1, 2, 1, 1)
    want = np.array([[10.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 20.0]]).reshape(x.shape)
    kw = {"ksize": (2, 2), "strides": (2, 2)}
    eager = ops.max_pool2d_grad(x, g, **kw).numpy()
    np.testing.assert_array_equal(eager, want)
    xs = st.symbol("x", shape=x.shape)
    gs = st.symbol("g", shape=g.shape)
    exact = st.compile(ops.max_pool2d_grad(xs, gs, **kw), [xs, gs])
    np.testing.assert_array_equal(exact(x, g), want)
    monkeypatch.setattr(strategy, "LOOP_MIN_ATOMS", 0)
    f = st.function(lambda a, b: ops.max_pool2d_grad(a, b, **kw))
    np.testing.assert_array_equal(f(x, g).numpy(), want)
    assert isinstance(f.get_concrete_function(x, g).plan, LoopPlan)
    with st.GradientTape() as t:
        v = st.Variable(x)
        y = st.nn.max_pool2d(v, 2, 2, "VALID")
    np.testing.assert_array_equal(t.gradient(y, v, output_gradients=g).numpy(), want)
    pooled = [y.numpy(), st.compile(ops.max_pool2d(xs, **kw), [xs])(x), st.function(
        lambda a: ops.max_pool2d(a, **kw))(x).numpy()]
    for p in pooled:  # the maximum of the window with a NaN is NaN everywhere
        np.testing.assert_array_equal(p.reshape(-1), [1.0, np.nan])


def test_pooling_second_derivative_against_differences():
    """The Hessian-vector product of ``sum(tanh(max_pool(x * s))**2)`` (the pick and the
    grad maps carry it) against central differences of the gradient."""
    rng = np.random.default_rng(6)
    x0, s = rng.normal(size=(1, 5, 4, 2)), rng.normal(size=(1, 5, 4, 2))
    v = rng.normal(size=x0.shape)

    def grad(xv):
        x = st.Variable(xv)
        with st.GradientTape() as t:
            y = st.reduce_sum(st.tanh(st.nn.max_pool2d(x * s, [3, 2], [2, 1], "SAME")) ** 2)
        return t.gradient(y, x).numpy()

    x = st.Variable(x0)
    with st.GradientTape() as outer:
        with st.GradientTape() as inner:
            y = st.reduce_sum(st.tanh(st.nn.max_pool2d(x * s, [3, 2], [2, 1], "SAME")) ** 2)
        gv = st.reduce_sum(inner.gradient(y, x) * v)
    hv = outer.gradient(gv, x).numpy()
    eps = 1e-6
    fd = (grad(x0 + eps * v) - grad(x0 - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-8)


def test_pooling_jacobian_and_bad_arguments():
    x0 = np.random.default_rng(8).normal(size=(1, 4, 4, 1))
    x = st.Variable(x0)
    with st.GradientTape() as t:
        y = st.nn.max_pool2d(x, 2, 2, "VALID")
    jac = t.jacobian(y, x).numpy().reshape(4, 16)
    want = np.zeros((4, 16))
    for idx in np.ndindex(1, 2, 2, 1):
        g = np.zeros((1, 2, 2, 1))
        g[idx] = 1.0
        want[np.ravel_multi_index(idx, (1, 2, 2, 1))] = np_pool_grad(
            x0, g, (2, 2), (2, 2)).reshape(-1)
    np.testing.assert_array_equal(jac, want)
    with pytest.raises(ShapeError, match="argument g must have shape"):
        ops.max_pool2d_grad(x0, np.ones((1, 3, 3, 1)), ksize=(2, 2), strides=(2, 2))
    with pytest.raises(InvalidArgumentError, match="ksize must be two positive ints"):
        ops.max_pool2d(x0, ksize=(2,), strides=(2, 2))
    with pytest.raises(ShapeError, match="does not fit"):
        ops.max_pool2d(x0, ksize=(5, 2), strides=(1, 1))


@pytest.mark.parametrize("wrt", [0, 1])
def test_hessians_through_convolution_and_pooling(wrt):
    """Hessians in the input and in the filters (one-hot seeds batched through every op of
    both families, each argument's batching rule) against central differences of the
    gradient."""
    rng = np.random.default_rng(11 + wrt)
    x0, k0 = rng.normal(size=(1, 4, 4, 2)), rng.normal(size=(2, 2, 2, 2)) / 2

    def loss(x, k):
        y = st.tanh(st.nn.conv2d(x, k, [1, 1], "SAME"))
        return st.reduce_sum(st.nn.max_pool2d(y, 2, [2, 1], "VALID") ** 2)

    def grad(a):
        v = st.Variable(a)
        with st.GradientTape() as t:
            s = loss(v, k0) if wrt == 0 else loss(x0, v)
        return t.gradient(s, v).numpy().reshape(-1)

    a0 = [x0, k0][wrt]
    v = st.Variable(a0)
    with st.GradientTape() as outer:
        with st.GradientTape() as inner:
            s = loss(v, k0) if wrt == 0 else loss(x0, v)
        g = inner.gradient(s, v)
    h = outer.jacobian(g, v).numpy().reshape(a0.size, a0.size)
    eps = 1e-6
    fd = np.stack([(grad(a0 + eps * e.reshape(a0.shape)) - grad(a0 - eps * e.reshape(a0.shape)))
                   / (2 * eps) for e in np.eye(a0.size)], 1)
    np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(h, h.T, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("points", [0, 8], ids=["per-point", "chunks"])
def test_a_padded_inputs_gradient_is_computed_where_it_is_read(monkeypatch, points):
    """Through a SAME convolution, the input's gradient is the pad's gradient (its
    interior) of the padded input's (``conv2d_backprop_input``): the loop nest computes
    that one only over the rows and columns the pad's gradient reads (7x7 of 9x9), to the
    same bits as computing all of it, and to eager values; asked for the padded input's
    gradient too, it computes all of it."""
    import math

    from symtape.codegen import compile_plan
    from symtape.compile import planner

    rng = np.random.default_rng(4)
    xv, kv = rng.normal(size=(2, 7, 7, 3)), rng.normal(size=(3, 3, 3, 4)) / 3
    r = rng.normal(size=(2, 7, 7, 4))
    pads = [[0, 0], [1, 1], [1, 1], [0, 0]]

    def grads(x, k, both):
        with st.GradientTape() as t:
            t.watch([x, k])
            xp = st.pad(x, pads)
            t.watch(xp)
            loss = st.reduce_sum(st.tanh(st.nn.conv2d(xp, k, 1, "VALID")) * r)
        return t.gradient(loss, [x, k, xp] if both else [x, k])

    x, k = st.symbol("x", shape=xv.shape), st.symbol("k", shape=kv.shape)

    def planned(outs):
        plan = planner.plan_loops([o._node for o in outs], [x._node, k._node], points=points)
        work = sum(math.prod(b.space) for b in plan.blocks if b.contract)
        f = compile_plan(plan)
        if not points:
            return work, [np.asarray(g) for g in f(xv, kv)]
        got = f(np.stack([xv] * 3), np.stack([kv] * 3))
        for g in got:
            np.testing.assert_array_equal(np.asarray(g)[0], np.asarray(g)[2])
        return work, [np.asarray(g)[0] for g in got]

    for both in (False, True):
        eager = [g.numpy() for g in grads(st.constant(xv), st.constant(kv), both)]
        work, got = planned(grads(x, k, both))
        for a, b in zip(got, eager):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-13)
        with monkeypatch.context() as m:
            m.setattr(planner._Planner, "read",
                      lambda self, node: tuple((0, n) for n in node.shape))
            work_all, whole = planned(grads(x, k, both))
        for a, b in zip(got, whole):
            np.testing.assert_array_equal(a, b)
        if both:  # the padded input's gradient is read whole: its border is computed
            assert work == work_all and np.abs(got[2][:, 0]).max() > 0
            np.testing.assert_array_equal(got[2][:, 1:-1, 1:-1], got[0])
        else:
            assert work < work_all
