"""Sums over known zeros (symtape/compile/sparse_terms.py) and constants folded at plan time
(symtape/compile/fusion.py ``constant_folds``): an accumulating block whose term has a
large, mostly zero factor computed from constants alone visits the factor's non-zeros only,
with the element DAG's values (a constant 0 times anything is 0, also at inf and nan) and
each sum's terms in their order."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_indexed_loops import _network

import symtape as st
from symtape.codegen import compile_plan
from symtape.compile import planner as loopnest
from symtape.compile import strategy


def _accumulating(plan) -> list:
    return [b for b in plan.blocks if b.accumulate]


@pytest.fixture
def sparse_factor():
    rng = np.random.default_rng(0)
    c = np.zeros(8192)
    nz = np.sort(rng.choice(8192, 300, replace=False))
    c[nz] = rng.normal(size=300)
    x0 = rng.normal(size=8192)
    off = np.setdiff1d(np.arange(8192), nz)
    x0[off[:4]] = [np.inf, -np.inf, np.nan, 1e308]
    return c, nz, x0


def test_a_sum_with_a_folded_mostly_zero_factor_visits_its_non_zeros(sparse_factor):
    """``sum((c * 3) * x)``, ``c`` 300 non-zeros of 8,192: ``c * 3`` is folded at plan time
    (no block computes it) and the sum is one loop of 300 terms, added in order; inf and
    nan of ``x`` where the factor is 0 do not reach it (the element DAG's value)."""
    c, nz, x0 = sparse_factor
    x = st.Variable(x0)
    y = st.reduce_sum((st.constant(c) * 3.0) * x)
    plan = loopnest.plan_loops([y._node], [x._node])
    (acc,) = _accumulating(plan)
    assert acc.space == (300,)
    assert not any(b.ins and plan.buffers[b.ins[0].buffer].kind == "const" and
                   len(b.space) == 1 and b.space[0] == 8192 for b in plan.blocks)
    got = compile_plan(plan)(x0)
    want = 0.0
    for i in nz:  # left to right, as the block adds
        want += (c[i] * 3.0) * x0[i]
    assert got == want and np.isfinite(got)


def test_rows_of_a_folded_sparse_matrix_times_a_vector():
    """``reduce_sum(-C * x, axis=1)`` with ``C`` (64, 128) mostly zero: one loop over C's
    non-zeros writing each row's sum, against the sums over the non-zeros (nan and inf of
    ``x`` in columns where C is 0)."""
    rng = np.random.default_rng(1)
    C = np.where(rng.random((64, 128)) < 0.05, rng.normal(size=(64, 128)), 0.0)
    C[:, :2] = 0.0
    x0 = rng.normal(size=128)
    x0[:2] = [np.nan, np.inf]
    x = st.Variable(x0)
    y = st.reduce_sum(-st.constant(C) * x, axis=1)
    plan = loopnest.plan_loops([y._node], [x._node])
    (acc,) = _accumulating(plan)
    assert math.prod(acc.space) == np.count_nonzero(C)
    got = compile_plan(plan)(x0)
    want = np.zeros(64)
    for i, j in zip(*np.nonzero(C)):
        want[i] += -C[i, j] * x0[j]
    np.testing.assert_array_equal(got, want)


def test_constants_held_as_they_are_and_dense_ones_keep_their_blocks():
    """A constant the program holds (not computed by an op) and a computed one with few
    zeros are read as they are: no index arrays, every term visited."""
    rng = np.random.default_rng(2)
    sparse = np.where(rng.random(8192) < 0.02, 1.0, 0.0)
    dense = rng.normal(size=8192)
    dense[::3] = 0.0
    x = st.Variable(rng.normal(size=8192))
    for y in (st.reduce_sum(st.constant(sparse) * x),
              st.reduce_sum((st.constant(dense) * 2.0) * x)):
        plan = loopnest.plan_loops([y._node], [x._node])
        (acc,) = _accumulating(plan)
        assert acc.space == (8192,) and not any(a.index for a in acc.ins)
        np.testing.assert_allclose(compile_plan(plan)(x.numpy()), float(y), rtol=1e-13)


def test_a_coloured_jacobian_multiplies_its_non_zeros_only(monkeypatch):
    """A reaction network's sparse Jacobian: the seeds' cotangents (colours x reactions,
    computed from constants alone) are folded at plan time, so no block computes them at a
    call, and the sweep's sums visit their non-zeros: at most three per reaction for each
    of its two factors' sums, not colours x reactions. Values equal the hand Jacobian, also
    at a point with an infinite concentration (the entries it multiplies are inf, the rest
    exact: before, 0 * inf = nan of other colours' terms reached other rows' entries)."""
    monkeypatch.setattr(strategy, "POINT_LOOP_MIN_ATOMS", 0)
    f, jac = _network()
    nr = 900
    sj = st.jacobian(f, sparse=True, input_signature=[st.TensorSpec((300,))])
    x = np.random.default_rng(5).uniform(0.1, 1.0, (8, 300))
    x[3, 17] = np.inf
    got = sj(x)
    plan = sj.compiled.plan
    per_point = [b for k, b in enumerate(plan.blocks) if b.accumulate and k not in
                 plan.prologue]
    assert per_point and all(math.prod(b.space[1:]) <= 3 * nr for b in per_point)
    assert not any(b.accumulate for k, b in enumerate(plan.blocks) if k in plan.prologue)
    rows, cols = np.asarray(got.indices).T
    for p in (0, 3, 7):
        dense = np.zeros((300, 300))
        dense[rows, cols] = np.asarray(got.values)[p]
        np.testing.assert_allclose(dense, jac(x[p]), rtol=1e-13, atol=1e-14)
