"""Constants holding zeros and non-finite values: small results settle exactly without the
element view (folded constants tracked per element), and agree with compiled code at signed
zeros, infinities and nan."""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st
from differential import SPECIAL, mismatches

CONSTANTS = np.array([0.0, 1.0, 2.0, np.inf, -0.5, 0.0, np.nan, 3.0])

OPS = {
    "mul": lambda x, c: x * c, "rmul": lambda x, c: c * x, "add": lambda x, c: x + c,
    "sub": lambda x, c: c - x, "div": lambda x, c: c / x, "rdiv": lambda x, c: x / c,
    "pow": lambda x, c: x ** c, "max": lambda x, c: st.maximum(x, c),
    "square_mix": lambda x, c: st.square(x * c) + st.sin(x) * c,
}


def _program(op, c):
    def run(x, w):
        y = op(x, c) * w + op(w, c)
        return [y, st.reduce_sum(y * x), st.reduce_sum(op(x, c))]
    return run


@pytest.mark.parametrize("name", sorted(OPS))
def test_folded_constants_agree_with_compiled(name):
    rng = np.random.default_rng(sorted(OPS).index(name))
    c = st.constant(CONSTANTS)
    run = _program(OPS[name], c)
    sx, sw = st.symbol("x", shape=(8,)), st.symbol("w", shape=(8,))
    with st.GradientTape() as tape:
        tape.watch([sx, sw])
        outs = run(sx, sw)
    compiled = st.compile(outs + tape.gradient(outs[1], [sx, sw]), [sx, sw])
    for _ in range(20):
        xv = rng.choice(SPECIAL, 8)
        wv = np.where(rng.random(8) < 0.5, rng.choice(SPECIAL, 8), rng.normal(size=8))
        x, w = st.Variable(xv), st.Variable(wv)
        with st.GradientTape() as tape:
            eager = run(x, w)
        eager = eager + tape.gradient(eager[1], [x, w])
        got = compiled(xv, wv)
        for k, (e, g) in enumerate(zip(eager, got)):
            bad = mismatches(np.asarray(e.numpy(), float), np.asarray(g, float), rtol=1e-12)
            assert not bad, (name, k, xv, wv, np.ravel(e.numpy())[bad], np.ravel(g)[bad])


def test_folds_settle_without_the_element_view():
    x = st.Variable([np.inf, -2.0, 3.0], name="x")
    c = st.constant([0.0, 1.0, 2.0])
    with st.GradientTape() as tape:
        y = st.reduce_sum(st.sin(x * c) * x)
    np.testing.assert_array_equal((x * c).numpy(), [0.0, -2.0, 6.0])  # inf * 0 folds to 0
    # sin(0) * inf: the folded zero stays exact, so the term is 0, not nan
    assert float(y) == np.sin(-2.0) * -2.0 + np.sin(6.0) * 3.0
    g = tape.gradient(y, x)
    want = [0.0, np.cos(-2.0) * -2.0 + np.sin(-2.0), np.cos(6.0) * 2.0 * 3.0 + np.sin(6.0)]
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-15)
    for t in (x * c, y, g):
        assert not t._node.built  # settled from the folds, not the element view
    assert (x * c)._node.folds[0].tolist() == [True, False, False]


MATRIX = np.array([[0.0, 1.0, -2.0], [0.0, 0.0, 0.0], [3.0, 0.0, 0.5]])


@pytest.mark.parametrize("transpose", [False, True])
def test_matmul_drops_products_with_folded_zeros(transpose):
    """A zero in a constant operand drops its products from the sums (inf * 0 is not nan),
    an all-zero row gives the constant 0, and the gradient's one-hot seeds settle the same
    way; eager agrees with compiled code at special values without the element view."""
    rng = np.random.default_rng(7)
    c = st.constant(MATRIX)

    def run(x):
        y = st.matmul(x, c, transpose_b=transpose)
        return [y, st.reduce_sum(st.sin(y) * x)]

    sx = st.symbol("x", shape=(2, 3))
    with st.GradientTape() as tape:
        tape.watch(sx)
        outs = run(sx)
    compiled = st.compile(outs + [tape.gradient(outs[1], sx)], [sx])
    for _ in range(20):
        xv = rng.choice(SPECIAL, (2, 3))
        x = st.Variable(xv)
        with st.GradientTape(persistent=True) as tape:
            eager = run(x)
        eager = eager + [tape.gradient(eager[1], x)]
        jac = tape.jacobian(eager[0], x)
        for t in eager + [jac]:
            assert not t._node.built
        for k, (e, g) in enumerate(zip(eager, compiled(xv))):
            bad = mismatches(np.asarray(e.numpy(), float), np.asarray(g, float), rtol=1e-12)
            assert not bad, (k, xv, np.ravel(e.numpy())[bad], np.ravel(g)[bad])
    # by hand: products with a zero of c are dropped, so x's inf and nan meet only nonzeros;
    # transposed, c's zero row makes the middle element the constant 0 whatever x holds
    y = st.matmul(st.Variable([[np.inf, np.nan, 1.0]]), c, transpose_b=transpose)
    want = [np.nan, 0.0, np.inf] if transpose else [3.0, np.inf, -np.inf]
    np.testing.assert_array_equal(y.numpy(), [want])
    assert not np.signbit(y.numpy()[0, 1])
    assert (y._node.folds is not None) == transpose and not y._node.built
