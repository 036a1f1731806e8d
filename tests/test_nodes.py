"""The tensor-level DAG: hash-consed nodes, numpy values per node, the element view on demand,
tensor notation and released nodes."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import sympy as sp

import symtape as st
from symtape.core import node as N
from symtape.base.errors import InvalidArgumentError


def test_same_op_on_same_nodes_is_one_node():
    x, y = st.Variable([1.0, 2.0]), st.Variable([3.0, 4.0])
    assert (x * y)._node is (x * y)._node
    assert (x * y)._node is (y * x)._node  # commutative: argument order ignored
    assert (x - y)._node is not (y - x)._node
    assert (x * y)._node is not (x + y)._node


def test_folding_at_the_tensor_level():
    x = st.Variable([1.5, -2.0], name="x")
    assert (x * 1.0)._node is x.read()._node  # the template folds to its argument
    zero = x * 0.0
    assert zero._node.uniform == 0 and zero._node.is_zero()
    diff = x - x  # one stand-in for an argument given twice
    assert diff._node.uniform == 0
    np.testing.assert_array_equal(diff.numpy(), [0.0, 0.0])


def test_large_eager_values_build_no_element_view():
    rng = np.random.default_rng(0)
    a, b = rng.random(10_000), rng.random(10_000)
    x, y = st.Variable(a), st.Variable(b)
    z = st.exp(x * y + x) / (1.0 + y)
    np.testing.assert_allclose(z.numpy(), np.exp(a * b + a) / (1.0 + b), rtol=1e-15)
    assert not z._node.built and not x._node.built


def test_small_irregular_nodes_settle_to_the_element_dag():
    # x * c with a constant zero element: the element DAG folds x * 0 to 0, numpy gives nan
    x = st.Variable([np.inf, 2.0], name="x")
    c = st.constant([0.0, 3.0])
    y = x * c
    np.testing.assert_array_equal(y.numpy(), [0.0, 6.0])
    compiled = st.compile(y, x)(np.array([np.inf, 2.0]))
    np.testing.assert_array_equal(np.asarray(compiled), y.numpy())
    assert str(y.formula()) == "[0, 3.0*x_1]"


def test_contractions_small_in_order_large_blas():
    # a sum of up to ops.ORDERED_TERMS terms is taken left to right, as the element DAG adds
    v = st.Variable([1e16, 1.0, -1e16])
    assert float(st.reduce_sum(v)) == (1e16 + 1.0) - 1e16
    rng = np.random.default_rng(1)
    for shape_a, shape_b in (((3, 4), (4, 2)), ((300, 400), (400, 200))):
        a, b = rng.normal(size=shape_a), rng.normal(size=shape_b)
        got = st.matmul(st.Variable(a), st.Variable(b)).numpy()
        np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12)
        got = st.einsum("ij,jk->ik", st.Variable(a), st.Variable(b)).numpy()
        np.testing.assert_allclose(got, np.einsum("ij,jk->ik", a, b), rtol=1e-12, atol=1e-12)
    d = rng.normal(size=(5, 5))
    assert float(st.einsum("ii->", st.Variable(d))) == pytest.approx(np.trace(d), rel=1e-15)


def test_tensor_notation_for_large_tensors():
    w1, b1 = st.symbol("W1", shape=(784, 128)), st.symbol("b1", shape=(128,))
    x = st.symbol("x", shape=(32, 784))
    h = st.tanh(st.matmul(x, w1) + b1)
    assert str(h.formula()) == "tanh(b1 + x·W1)"
    assert "tanh" in h.latex() and r"\cdot" in h.latex()
    assert "formula=tanh(b1 + x·W1)" in repr(h)
    with st.GradientTape() as tape:
        tape.watch(w1)
        y = st.reduce_sum(st.tanh(st.matmul(x, w1) + b1))
    g = tape.gradient(y, w1)
    assert str(g.formula()) == "xᵀ·cosh(b1 + x·W1)**(-2)"
    assert not g._node.built  # nothing of 784 x 128 elements was expanded


def test_small_tensors_print_elements_and_notation_can_be_chosen():
    x = st.symbol("x", shape=(2,))
    y = st.sin(x) * 2.0
    assert y.formula() == sp.Array([2.0 * sp.sin(x.symbols[0]), 2.0 * sp.sin(x.symbols[1])])
    assert str(y.formula(notation="tensor")) == "2.0*sin(x)"
    big = st.symbol("v", shape=(100,)) ** 2
    assert big.formula(notation="elements").shape == (100,)
    with pytest.raises(InvalidArgumentError, match="notation"):
        y.formula(notation="matrix")


def test_nodes_nobody_refers_to_are_released():
    w = st.Variable(np.ones((4, 3)))
    x = st.constant(np.ones((5, 4)))

    def step():
        with st.GradientTape() as tape:
            loss = st.reduce_sum(st.tanh(st.matmul(x, w)) ** 2)
        w.assign_sub(0.01 * tape.gradient(loss, w))

    for _ in range(20):
        step()
    gc.collect()
    before = N.table_size()
    for _ in range(200):
        step()
    gc.collect()
    assert N.table_size() <= before


def test_selects_of_large_tensors_fold_like_their_elements():
    # two zero-branched selects made by the same op: each keeps its own arguments when a
    # product folds them together, and a zero branch times inf stays 0 (no where trap)
    rng = np.random.default_rng(3)
    n = 5000
    xv, wv = rng.normal(size=n), rng.normal(size=n)
    xv[::7], wv[::11] = np.inf, np.nan
    c1, c2 = xv < 0.5, wv > -0.5
    x, w = st.Variable(xv), st.Variable(wv)
    y = st.where(c1, x, 0.0) * st.where(c2, w, 0.0) * st.exp(x)
    with np.errstate(all="ignore"):
        want = np.where(c1 & c2, xv * wv * np.exp(xv), 0.0)
    np.testing.assert_array_equal(y.numpy(), want)
    small = st.Variable(xv[:3]), st.Variable(wv[:3])
    ys = st.where(c1[:3], small[0], 0.0) * st.where(c2[:3], small[1], 0.0) * st.exp(small[0])
    np.testing.assert_array_equal(ys.numpy(), want[:3])  # the element level agrees


def test_converted_arrays_and_seeds_share_nodes_not_identity():
    # a training loop's data converts once to a node, but each conversion (and each seed a
    # gradient returns) is its own tensor: watching one does not watch the others
    data = np.array([0.0, 1.0, 2.0])
    v = st.Variable(2.0)
    y1, y2 = v * data, v * data
    assert y1._node is y2._node  # one constant node, so one hash-consed product
    first, second = st.ones_like(y1) * data, st.ones_like(y1) * data
    assert first._node is second._node
    x = st.constant([1.0, 2.0])
    with st.GradientTape(persistent=True) as tape:
        tape.watch(x)
    g1, g2 = tape.gradient(x, x), tape.gradient(x, x)
    assert g1 is not g2 and g1._id != g2._id and g1._node is g2._node
    np.testing.assert_array_equal(g1.numpy(), [1.0, 1.0])
    with st.GradientTape() as outer:
        outer.watch(g1)
        z = g2 * 3.0
    assert outer.gradient(z, g1) is None  # g2 is not g1
