"""A loop plan's intermediates kept to the places that are read
(symtape/compile/compaction.py): a copy of a few places restricts the block that made them,
buffers read at a few places are compacted to them, blocks nothing reads are dropped.
Values against numpy and a hand-written Jacobian."""

from __future__ import annotations

import numpy as np
from test_indexed_loops import _network

import symtape as st
from symtape.codegen import compile_plan
from symtape.compile import planner as loopnest
from symtape.compile import strategy


def _sizes(plan, *kinds) -> list:
    return [b.size for b in plan.buffers if b.kind in kinds]


def test_a_copy_of_a_few_places_computes_those_places_only():
    """``gather(reshape(exp(x) * sin(x)), idx)``: exp and sin run at the three places read,
    not over the 2,000 elements (an inf elsewhere is never made); values are numpy's."""
    x = st.symbol("x", shape=(40, 50))
    idx = [3, 500, 1999]
    y = st.gather(st.reshape(st.exp(x) * st.sin(x), (-1,)), idx)
    plan = loopnest.plan_loops([y._node], [x._node])
    assert [b.space for b in plan.blocks] == [(3,)]
    assert _sizes(plan, "temp") == []
    x0 = np.random.default_rng(0).standard_normal((40, 50))
    x0[0, 0] = 800.0  # exp overflows where nothing reads it
    with np.errstate(over="ignore"):
        want = (np.exp(x0) * np.sin(x0)).reshape(-1)[idx]
    np.testing.assert_array_equal(compile_plan(plan)(x0), want)


def test_a_constant_read_at_a_few_places_keeps_those_places():
    """A large constant's product read back at a few places: the product runs there, and
    the constant the plan holds is those places' values, in order."""
    rng = np.random.default_rng(1)
    c = rng.standard_normal(5000)
    x = st.symbol("x", shape=(5000,))
    idx = np.array([4999, 7, 7, 1234, 2500])
    y = st.gather(st.constant(c) * st.tanh(x), idx)
    plan = loopnest.plan_loops([y._node], [x._node])
    assert max(_sizes(plan, "const", "temp"), default=0) <= len(idx)
    x0 = rng.standard_normal(5000)
    np.testing.assert_allclose(compile_plan(plan)(x0), (c * np.tanh(x0))[idx], rtol=1e-15)


def test_a_sparse_jacobians_intermediates_are_at_most_its_non_zeros(monkeypatch):
    """A reaction network's sparse Jacobian (300 species, 900 reactions): no temporary or
    constant of its plan holds more than the Jacobian's non-zeros for each point (the
    compressed Jacobian, colours x species, was 4x; the seeds' cotangents, colours x
    reactions, 12x); values equal the hand
    Jacobian, also at an infinite concentration."""
    monkeypatch.setattr(strategy, "POINT_LOOP_MIN_ATOMS", 0)
    f, jac = _network()
    sj = st.jacobian(f, sparse=True, input_signature=[st.TensorSpec((300,))])
    x = np.random.default_rng(5).uniform(0.1, 1.0, (8, 300))
    x[3, 17] = np.inf
    got = sj(x)
    nnz = np.asarray(got.values).shape[-1]
    plan = sj.compiled.plan
    assert plan.points and max(_sizes(plan, "temp", "const")) <= plan.points * nnz
    rows, cols = np.asarray(got.indices).T
    for p in (0, 3, 7):
        dense = np.zeros((300, 300))
        dense[rows, cols] = np.asarray(got.values)[p]
        np.testing.assert_allclose(dense, jac(x[p]), rtol=1e-13, atol=1e-14)


def test_a_sparse_hessians_intermediates_are_at_most_its_non_zeros(monkeypatch):
    """A star-coloured Hessian of gathers, a segment sum and their products (300 inputs,
    900 terms): the forward sweep's tangents (colours x terms) are computed at their
    non-zeros only -- zeros carried from the seeds through products, sums, selects of
    counts and copies --, so no temporary holds more than the Hessian's non-zeros a point
    (they were 8x); values equal the dense Hessian's, nan where it has nan (an infinite
    input)."""
    monkeypatch.setattr(strategy, "POINT_LOOP_MIN_ATOMS", 0)
    rng = np.random.default_rng(0)
    n, m = 300, 900
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    k = st.constant(rng.uniform(0.5, 2.0, m))

    def f(c):
        e = st.gather(c, a) * st.gather(c, b)
        spread = st.math.unsorted_segment_sum(st.exp(st.gather(c, a)), b, n)
        return st.reduce_sum(k * st.sin(e)) + st.reduce_sum(spread ** 2)

    sparse = st.hessian(f, sparse=True, input_signature=[st.TensorSpec((n,))])
    dense = st.hessian(f, input_signature=[st.TensorSpec((n,))])
    x = rng.uniform(0.1, 1.0, (8, n))
    x[3, 7] = np.inf
    got = sparse(x)
    want = np.asarray(dense(x))
    nnz = np.asarray(got.values).shape[-1]
    plan = sparse.compiled.plan
    assert plan.points and max(_sizes(plan, "temp", "const")) <= plan.points * nnz
    rows, cols = np.asarray(got.indices).T
    for p in range(8):
        full = np.zeros((n, n))
        full[rows, cols] = np.asarray(got.values)[p]
        np.testing.assert_allclose(full, want[p], rtol=1e-13, atol=1e-13 * np.nanmax(
            np.abs(np.where(np.isinf(want[p]), np.nan, want[p]))))
    assert np.isnan(want[3]).any()


def test_the_sparse_hessian_of_a_residual_keeps_its_sums_zeros(monkeypatch):
    """The Hessian of a reaction network's steady-state residual ``0.5 |dc|^2`` (300
    species, 900 reactions): the reverse sweep's sums start from -0.0, and a place no live
    term reaches is the element DAG's 0, so the tangents built from them are computed at
    their non-zeros only -- no temporary over twice the Hessian's non-zeros a point (it was
    23x) --, and values equal the dense Hessian's."""
    monkeypatch.setattr(strategy, "POINT_LOOP_MIN_ATOMS", 0)
    f, _ = _network()

    def residual(c):
        return 0.5 * st.reduce_sum(f(c) ** 2)

    sparse = st.hessian(residual, sparse=True, input_signature=[st.TensorSpec((300,))])
    dense = st.hessian(residual, input_signature=[st.TensorSpec((300,))])
    x = np.random.default_rng(3).uniform(0.1, 1.0, (4, 300))
    got = sparse(x)
    assert sparse.strategies[0].name == "coloured-hessian"
    nnz = np.asarray(got.values).shape[-1]
    plan = sparse.compiled.plan
    assert plan.points and max(_sizes(plan, "temp", "const")) <= 2 * plan.points * nnz
    rows, cols = np.asarray(got.indices).T
    want = np.asarray(dense(x))
    for p in range(4):
        full = np.zeros((300, 300))
        full[rows, cols] = np.asarray(got.values)[p]
        np.testing.assert_allclose(full, want[p], rtol=1e-12, atol=1e-12 * np.abs(want[p]).max())
