"""The convolution ops (``symtape/ops/conv.py``): values of all three against numpy
definitions, eager and compiled as loop nests (strided, with input places no window
covers), their derivatives to second order against finite differences, Jacobians through
batching, sparsity, formulas, and errors naming the argument."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import symtape as st
from symtape import loopnest, ops
from symtape.codegen.loops import LoopPlan
from symtape.errors import InvalidArgumentError, ShapeError
from test_ops import np_conv2d, np_conv2d_filter, np_conv2d_input

CASES = [  # (x shape, k shape, strides)
    ((3, 9, 8, 3), (3, 3, 3, 5), (1, 1)),
    ((2, 10, 9, 2), (3, 2, 2, 4), (2, 1)),  # row 9 of x is in no window
    ((2, 11, 11, 3), (2, 3, 3, 9), (3, 2)),
]


def _three(x, k, y, strides):
    size_x, size_k = x.shape[1:3], k.shape[:2]
    return [ops.conv2d(x, k, strides=strides),
            ops.conv2d_backprop_input(y, k, strides=strides, size=size_x),
            ops.conv2d_backprop_filter(x, y, strides=strides, size=size_k)]


def _refs(x, k, y, strides):
    return [np_conv2d(x, k, strides, [(0, 0), (0, 0)]),
            np_conv2d_input(y, k, strides, x.shape[1:3]),
            np_conv2d_filter(x, y, strides, k.shape[:2])]


def _sample(xs, ks, strides, seed=0):
    rng = np.random.default_rng(seed)
    x, k = rng.normal(size=xs), rng.normal(size=ks)
    y = rng.normal(size=np_conv2d(x, k, strides, [(0, 0), (0, 0)]).shape)
    return x, k, y


@pytest.mark.parametrize("xs,ks,strides", CASES)
def test_eager_and_loop_compiled_values_equal_the_definitions(monkeypatch, xs, ks, strides):
    x, k, y = _sample(xs, ks, strides)
    refs = _refs(x, k, y, strides)
    for got, want in zip(_three(x, k, y, strides), refs):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(loopnest, "LOOP_MIN_ATOMS", 0)
    f = st.function(lambda a, b, c: _three(a, b, c, strides))
    got = f(x, k, y)
    assert isinstance(f.get_concrete_function(x, k, y).plan, LoopPlan)
    for g, want in zip(got, refs):
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-12, atol=1e-12)


def test_the_unreached_input_row_is_exactly_zero(monkeypatch):
    xs, ks, strides = CASES[1]
    x, k, y = _sample(xs, ks, strides)
    monkeypatch.setattr(loopnest, "LOOP_MIN_ATOMS", 0)
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
