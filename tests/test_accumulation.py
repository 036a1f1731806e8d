"""Sparse Jacobians and Hessians accumulated as their non-zeros
(symtape/derivatives/accumulation.py): chosen where colouring needs about as many colours
as columns; values against the dense derivatives and hand-derived formulas; refusals fall
back to colouring, and a sweep too large for either is refused with a clear error."""

from __future__ import annotations

import numpy as np
import pytest
from test_indexed_loops import _network

import symtape as st
from symtape.base.errors import CompileError
from symtape.compile import strategy
from symtape.derivatives import accumulation, sparsity


def _dense(got, shape) -> np.ndarray:
    values = np.asarray(got.values)
    out = np.zeros(values.shape[:-1] + shape)
    idx = tuple(np.asarray(got.indices).T)
    out[(...,) + idx] = values
    return out


def test_a_residuals_hessian_is_accumulated_at_its_non_zeros(monkeypatch):
    """The Hessian of a reaction network's steady-state residual ``0.5 |dc|^2`` (300
    species, 900 reactions): every row colouring takes about 300 colours, so (the sweep
    threshold lowered to this size) it is accumulated -- no temporary over twice the
    Hessian's non-zeros a point -- and equals the dense Hessian and the hand formula
    ``J^T J + sum_i r_i d2 r_i``."""
    monkeypatch.setattr(strategy, "POINT_LOOP_MIN_ATOMS", 0)
    monkeypatch.setattr(strategy, "ACCUMULATE_SWEEP_ELEMENTS", 0)
    f, jac = _network()

    def residual(c):
        return 0.5 * st.reduce_sum(f(c) ** 2)

    sparse = st.hessian(residual, sparse=True, input_signature=[st.TensorSpec((300,))])
    x = np.random.default_rng(3).uniform(0.1, 1.0, (4, 300))
    got = sparse(x)
    assert sparse.strategies[0].name == "accumulated-hessian"
    nnz = np.asarray(got.values).shape[-1]
    plan = sparse.compiled.plan
    assert plan.points and max(b.size for b in plan.buffers if b.kind in ("temp", "const")) \
        <= 2 * plan.points * nnz
    dense = st.hessian(residual, input_signature=[st.TensorSpec((300,))])
    want = np.asarray(dense(x))
    full = _dense(got, (300, 300))
    for p in range(4):
        np.testing.assert_allclose(full[p], want[p], rtol=1e-12,
                                   atol=1e-12 * np.abs(want[p]).max())
    # by hand: r = dc, d2 r_i / dc_a dc_b = stoich * k of each reaction of species i
    rng = np.random.default_rng(0)  # (_network's draws)
    a, b, c = (rng.integers(0, 300, 900) for _ in range(3))
    k = rng.uniform(0.5, 2.0, 900)
    for p in (0, 3):
        j = jac(x[p])
        r = np.asarray(st.function(f)(x[p]))
        w = k * (r[c] - r[a] - r[b])  # sum_i r_i * stoich_i of each reaction
        want_p = j.T @ j
        np.add.at(want_p, (a, b), w)
        np.add.at(want_p, (b, a), w)
        np.testing.assert_allclose(full[p], want_p, rtol=1e-12,
                                   atol=1e-12 * np.abs(want_p).max())


def _mixed(c):
    """Gathers, a segment sum, a matrix product, broadcasting, nonlinear elementwise ops."""
    rng = np.random.default_rng(7)
    a, b = rng.integers(0, 40, 120), rng.integers(0, 40, 120)
    m = st.constant(rng.standard_normal((5, 8)))
    e = st.sin(st.gather(c, a)) * st.exp(0.1 * st.gather(c, b)) / (1.0 + st.gather(c, a) ** 2)
    s = st.math.unsorted_segment_sum(e, b, 40)
    head = st.reshape(st.matmul(m, st.reshape(c[:8], (8, 1))), (5,))
    return st.concat([s * c, st.tanh(head)], axis=0)


def _mixed_jacobian(monkeypatch, x: np.ndarray, path: str):
    """:func:`_mixed`'s sparse Jacobian at the points ``x`` (accumulation's thresholds at
    0), taken by ``path`` and equal to the dense one."""
    monkeypatch.setattr(strategy, "ACCUMULATE_SHARE", 0.0)
    monkeypatch.setattr(strategy, "ACCUMULATE_SWEEP_ELEMENTS", 0)
    spec = [st.TensorSpec((40,))]
    sparse = st.jacobian(_mixed, sparse=True, input_signature=spec)
    got = sparse(x)
    assert sparse.strategies[0].name == path
    want = np.asarray(st.jacobian(_mixed, input_signature=spec)(x))
    np.testing.assert_allclose(_dense(got, (45, 40)), want, rtol=1e-13, atol=1e-13)
    return got


def test_an_accumulated_jacobian_equals_the_dense_one(monkeypatch):
    """A program of gathers, a segment sum, a matrix product (its local Jacobian takes
    several seeds), broadcasting and nonlinear ops: the accumulated Jacobian equals the
    dense one, and central differences, at several points."""
    x = np.random.default_rng(1).uniform(-1.0, 1.0, (3, 40))
    got = _mixed_jacobian(monkeypatch, x, "accumulated-jacobian")
    h = 1e-6
    fd = np.stack([(np.asarray(st.function(_mixed)(x[0] + h * e)) -
                    np.asarray(st.function(_mixed)(x[0] - h * e))) / (2 * h)
                   for e in np.eye(40)], axis=-1)
    np.testing.assert_allclose(_dense(got, (45, 40))[0], fd, atol=1e-7)


def test_a_hessian_with_two_inputs_per_term_matches_the_hand_formula(monkeypatch):
    """``f = sum_t k_t x_{a_t}^2 x_{b_t}`` (every pair of variables coupled at most by its
    terms): the accumulated Hessian is the hand-derived one, duplicates summed."""
    monkeypatch.setattr(strategy, "ACCUMULATE_SHARE", 0.0)
    monkeypatch.setattr(strategy, "ACCUMULATE_SWEEP_ELEMENTS", 0)
    rng = np.random.default_rng(2)
    n, m = 50, 200
    a, b = rng.integers(0, n, m), rng.integers(0, n, m)
    k = rng.uniform(0.5, 2.0, m)

    def f(x):
        return st.reduce_sum(k * st.gather(x, a) ** 2 * st.gather(x, b))

    sparse = st.hessian(f, sparse=True, input_signature=[st.TensorSpec((n,))])
    x = rng.standard_normal(n)
    got = sparse(x)
    assert sparse.strategies[0].name == "accumulated-hessian"
    want = np.zeros((n, n))
    np.add.at(want, (a, a), 2 * k * x[b])
    np.add.at(want, (a, b), 2 * k * x[a])
    np.add.at(want, (b, a), 2 * k * x[a])
    np.testing.assert_allclose(_dense(got, (n, n)), want, rtol=1e-13, atol=1e-13)
    # the pattern is the structural one: every stored element has a term behind it
    pairs = set(zip(a.tolist(), a.tolist())) | set(zip(a.tolist(), b.tolist())) | \
        set(zip(b.tolist(), a.tolist()))
    assert set(map(tuple, np.asarray(got.indices).tolist())) == pairs


def test_accumulation_refusing_falls_back_to_colouring(monkeypatch):
    """A local Jacobian needing more seeds than LOCAL_COLOURS (the matrix product's):
    accumulation refuses, the coloured sweep runs, the values are the same."""
    monkeypatch.setattr(accumulation, "LOCAL_COLOURS", 2)
    _mixed_jacobian(monkeypatch, np.random.default_rng(4).uniform(-1.0, 1.0, (2, 40)),
                    "coloured-jacobian")


def test_a_sweep_too_large_for_either_is_refused_at_once(monkeypatch):
    """Where accumulation refuses and colours x the largest tensor exceed
    MAX_SWEEP_ELEMENTS, a CompileError names the sizes (no 9 GB allocation)."""
    monkeypatch.setattr(strategy, "ACCUMULATE_SHARE", 0.0)
    monkeypatch.setattr(strategy, "ACCUMULATE_SWEEP_ELEMENTS", 0)
    monkeypatch.setattr(accumulation, "MAX_PAIRS", 10)
    monkeypatch.setattr(strategy, "MAX_SWEEP_ELEMENTS", 1000)
    f, _ = _network(100, 300)
    with pytest.raises(CompileError, match="MAX_SWEEP_ELEMENTS=1,000"):
        st.jacobian(f, sparse=True, input_signature=[st.TensorSpec((100,))])


def test_a_coloured_jacobian_may_take_the_accumulated_pattern(monkeypatch):
    """Where accumulation is tried (large sweeps) but its pattern colours well (the
    reaction network's Jacobian: about 30 colours for 300 columns), the coloured sweep
    runs on that pattern -- the same as the dependencies' -- and gives the hand Jacobian."""
    monkeypatch.setattr(strategy, "ACCUMULATE_SWEEP_ELEMENTS", 0)
    f, jac = _network()
    sparse = st.jacobian(f, sparse=True, input_signature=[st.TensorSpec((300,))])
    x = np.random.default_rng(6).uniform(0.1, 1.0, (3, 300))
    got = sparse(x)
    assert sparse.strategies[0].name == "coloured-jacobian"
    full = _dense(got, (300, 300))
    for p in range(3):
        np.testing.assert_allclose(full[p], jac(x[p]), rtol=1e-13, atol=1e-14)
    c = st.symbol("c", shape=(300,))
    want = sparsity.dependency_rows(f(c)._node, c._node)
    rows, cols = np.asarray(got.indices).T
    assert [sorted(cols[rows == i].tolist()) for i in range(300)] == [r.tolist() for r in want]


def test_a_users_rule_is_accumulated_through_its_own_gradient(monkeypatch):
    """A function with ``st.custom_gradient`` inside the program (its rule: a stated
    derivative of x^2, called with the several-results convention): the accumulated
    Hessian, float64 and float32, equals the dense one."""
    monkeypatch.setattr(strategy, "ACCUMULATE_SHARE", 0.0)
    monkeypatch.setattr(strategy, "ACCUMULATE_MIN", 1)
    monkeypatch.setattr(strategy, "ACCUMULATE_SWEEP_ELEMENTS", 0)

    @st.custom_gradient
    def square(x):
        return x * x, lambda g: g * 2.0 * x

    def f(x):
        return st.reduce_sum(square(st.sin(x)) * x[::-1])

    for dtype, tol in (("float64", 1e-13), ("float32", 1e-5)):
        spec = [st.TensorSpec((8,), dtype=dtype)]
        sparse = st.hessian(f, sparse=True, input_signature=spec)
        x = np.random.default_rng(8).uniform(-1.0, 1.0, (3, 8)).astype(dtype)
        got = sparse(x)
        assert sparse.strategies[0].name == "accumulated-hessian"
        want = np.asarray(st.hessian(f, input_signature=spec)(x))
        np.testing.assert_allclose(_dense(got, (8, 8)), want, rtol=tol, atol=tol)
