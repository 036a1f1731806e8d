"""Native elimination routines (``codegen/routines.py``): solve, inv and det beyond 3x3 as
one loop-plan block per matrix. They give the element view's bits (the same pivots, the same
operations in the same order), nan and inf included, in both float types, and plan an 80x80
system as loops whatever the batch (the unrolled elimination took minutes there)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import symtape as st
from symtape.codegen import compile_plan
from symtape.codegen.loops import LoopPlan
from symtape.codegen.routines import Routine
from symtape.compile import planner as loopnest
from symtape.compile import strategy
from symtape.ops import linalg as L


def _awkward(rng, shape):
    """Random matrices with a zero column (a zero pivot: inf/nan), a nan and an inf."""
    a = rng.standard_normal(shape)
    a[0, 0, :, 0] = 0.0
    a[1, 1, 2, 2] = np.nan
    a[2, 0, 3, 1] = np.inf
    return a


def _by_elimination(prim, arrays, params=None):
    """The element view's elimination on floats, matrix by matrix (the reference)."""
    lead = arrays[0].shape[:-2]
    out = [prim.compute([a[i][None] for a in arrays], params or {}, L._FloatRing)[0]
           for i in np.ndindex(*lead)]
    return np.asarray(out).reshape(lead + np.shape(out[0]))


@pytest.mark.parametrize("n", [4, 7])
@pytest.mark.parametrize("looped", [True, False])
def test_solve_inv_det_bits_equal_the_element_view(monkeypatch, n, looped):
    """Planned as loops (routines) and as the element view, over 7 points of two matrices
    each, a transposed read (``adjoint``) included: identical to the elimination on floats."""
    monkeypatch.setattr(strategy, "POINT_LOOP_MIN_ATOMS", 0 if looped else 10 ** 9)
    rng = np.random.default_rng(n)
    a = _awkward(rng, (7, 2, n, n))
    b = rng.standard_normal((7, 2, n, 3))
    m, r = st.symbol("m", shape=(2, n, n)), st.symbol("r", shape=(2, n, 3))
    for adjoint in (False, True):
        f = st.compile(st.linalg.solve(m, r, adjoint=adjoint), [m, r])
        assert [s.name for s in f.strategies] == ["point-loop" if looped else "element-kernel"]
        want = _by_elimination(L.solve, [a, b], {"adjoint": adjoint})
        np.testing.assert_array_equal(np.asarray(f(a, b)), want)
    inv, det = st.compile([st.linalg.inv(m), st.linalg.det(m)], [m])(a)
    np.testing.assert_array_equal(inv, _by_elimination(L.inv, [a]))
    np.testing.assert_array_equal(det, _by_elimination(L.det, [a]))


def test_float32_loops_equal_the_float32_element_view(monkeypatch):
    """In float32 the routine computes in float, as the element kernel does."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 6, 6)).astype(np.float32) + 3 * np.eye(6, dtype=np.float32)
    b = rng.standard_normal((5, 6, 2)).astype(np.float32)
    m, r = st.symbol("m", shape=(6, 6)), st.symbol("r", shape=(6, 2))
    outs = []
    for atoms in (0, 10 ** 9):
        monkeypatch.setattr(strategy, "POINT_LOOP_MIN_ATOMS", atoms)
        f = st.compile([st.linalg.solve(m, r), st.linalg.det(m)], [m, r], dtype="float32")
        outs.append(f(a, b))
    for looped, unrolled in zip(*outs):
        assert looped.dtype == np.float32
        np.testing.assert_array_equal(looped, unrolled)
    np.testing.assert_allclose(outs[0][0], np.linalg.solve(a, b), rtol=1e-4, atol=1e-5)


def test_solve_80_plans_one_routine_block_and_matches_lapack():
    """An 80x80 system: a loop plan whose solve is one routine block; over a batch
    (``st.function`` with a ``None`` dimension, a pass over the examples) equal to LAPACK's
    solution to rounding."""
    n = 80
    m, r = st.symbol("m", shape=(n, n)), st.symbol("r", shape=(n, 1))
    f = st.compile(st.linalg.solve(m, r), [m, r])
    assert isinstance(f.plan, LoopPlan)
    assert [isinstance(blk.body, Routine) for blk in f.plan.blocks].count(True) == 1
    fn = st.function(lambda m, r: st.linalg.solve(m, r),
                     input_signature=[st.TensorSpec((None, n, n)), st.TensorSpec((None, n, 1))])
    rng = np.random.default_rng(1)
    a = rng.standard_normal((9, n, n)) + n * np.eye(n)
    b = rng.standard_normal((9, n, 1))
    for got in (np.asarray(fn(a, b)), f(a, b)):
        np.testing.assert_allclose(got, np.linalg.solve(a, b), rtol=1e-12, atol=1e-14)


def test_solve_80_gradient_in_the_matrix_against_finite_differences():
    """d(w . solve(A, b))/dA = -A^-T w x^T, compiled through two routine solves: against the
    formula with LAPACK and central differences of numpy's solve."""
    n = 80
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, n, n)) + n * np.eye(n)
    b = rng.standard_normal((3, n, 1))
    w = rng.standard_normal((n, 1))

    @st.function(input_signature=[st.TensorSpec((None, n, n)), st.TensorSpec((None, n, 1))])
    def grad(m, r):
        with st.GradientTape() as tape:
            tape.watch(m)
            y = st.reduce_sum(st.linalg.solve(m, r) * w)
        return tape.gradient(y, m)

    got = np.asarray(grad(a, b))
    x = np.linalg.solve(a, b)
    lam = np.linalg.solve(np.swapaxes(a, -1, -2), np.broadcast_to(w, b.shape))
    np.testing.assert_allclose(got, -lam @ np.swapaxes(x, -1, -2), rtol=1e-10, atol=1e-16)
    h = 1e-6
    for i, j in [(0, 0), (3, 7), (79, 1), (40, 40)]:
        up, down = a[0].copy(), a[0].copy()
        up[i, j] += h
        down[i, j] -= h
        fd = float(((np.linalg.solve(up, b[0]) - np.linalg.solve(down, b[0])) * w).sum()) / (2 * h)
        assert abs(fd - got[0, i, j]) < 1e-8


def test_element_cost_counts_the_elimination():
    """The strategy sees an n x n elimination as about n**3 atoms (a 20x20 solve goes to
    loops for points, a 4x4 one stays an element kernel)."""
    for n, path in ((20, "point-loop"), (4, "element-kernel")):
        m, r = st.symbol("m", shape=(n, n)), st.symbol("r", shape=(n, 1))
        f = st.compile(st.linalg.solve(m, r), [m, r])
        assert [s.name for s in f.strategies] == [path]


def test_routine_ir_and_c_spell_the_same_steps():
    """Both spellings of a 5x5 solve: the IR has the pivot search's nan test and divisions,
    the C the same comparisons; the C compiles is checked by the export tests."""
    r = Routine("solve", 5, 2, (5, 1), (2, 1), (2, 1))
    ir, decls = r.ir("s", "double")
    text = "\n".join(ir)
    assert "fcmp uno double" in text and "fdiv double" in text
    assert "declare double @llvm.fabs.f64(double)" in decls
    c = "\n".join(r.c("s", "double"))
    assert "static void s(const double *restrict A, const double *restrict B" in c
    assert "fabs(" in c and " != " in c
    assert Routine("det", 5, 0, (5, 1), (0, 0), (0, 0)).args == ("A", "X", "W")
    bisect = Routine("lower_bound", 40, 30, (1, 0), (1, 0), (1, 0))
    assert bisect.args == ("A", "B", "X") and "fcmp olt double" in "\n".join(
        bisect.ir("b", "double")[0])
    assert bisect.n_ops < 30 * 40  # (log2 steps a value, where counting takes n)


@pytest.mark.parametrize("looped", [True, False])
def test_cholesky_and_triangular_solves_bits_equal_the_element_view(monkeypatch, looped):
    """Cholesky (a non-positive-definite matrix gives nan, as the element view) and the four
    triangular solves (lower/upper, adjoint or not) of 6x6 matrices over 5 points of two."""
    monkeypatch.setattr(strategy, "POINT_LOOP_MIN_ATOMS", 0 if looped else 10 ** 9)
    rng = np.random.default_rng(11)
    base = rng.standard_normal((5, 2, 6, 6))
    spd = base @ np.swapaxes(base, -1, -2) + 6 * np.eye(6)
    spd[1, 0] -= 50 * np.eye(6)  # not positive definite
    b = rng.standard_normal((5, 2, 6, 2))
    m, r = st.symbol("m", shape=(2, 6, 6)), st.symbol("r", shape=(2, 6, 2))
    outs = [st.linalg.cholesky(m)] + [st.linalg.triangular_solve(m, r, lower=lo, adjoint=ad)
                                      for lo in (True, False) for ad in (False, True)]
    f = st.compile(outs, [m, r])
    assert [s.name for s in f.strategies] == ["point-loop" if looped else "element-kernel"]
    got = f(spd, b)
    lead = spd.shape[:-2]
    for idx in np.ndindex(*lead):
        a, rhs = spd[idx].tolist(), b[idx].tolist()
        np.testing.assert_array_equal(got[0][idx], _cholesky(a))
        for g, (lo, ad) in zip(got[1:], [(lo, ad) for lo in (True, False)
                                         for ad in (False, True)]):
            np.testing.assert_array_equal(g[idx], _triangular(a, rhs, lo, ad))


def _cholesky(a):
    """Cholesky-Banachiewicz on Python floats (math.sqrt: nan below zero)."""
    n = len(a)
    low = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1):
            rest = a[i][j]
            for k in range(j):
                rest = rest - low[i][k] * low[j][k]
            low[i][j] = (math.sqrt(rest) if rest >= 0 else math.nan) if i == j else \
                rest / low[j][j]
    return low


def _triangular(a, rhs, lower, adjoint):
    """Substitution on Python floats, the terms in ascending order."""
    n = len(a)
    t = [[a[j][i] for j in range(n)] for i in range(n)] if adjoint else a
    forward = lower != adjoint
    x = [[0.0] * len(rhs[0]) for _ in range(n)]
    for i in (range(n) if forward else reversed(range(n))):
        for c in range(len(rhs[0])):
            rest = rhs[i][c]
            for k in (range(i) if forward else range(i + 1, n)):
                rest = rest - t[i][k] * x[k][c]
            x[i][c] = rest / t[i][i]
    return x


def test_large_batches_of_small_matrices_are_one_block_each():
    """3,000 3x3 determinants, inverses and solves (closed forms) and 6x6 Cholesky factors
    plan as one block per op over the batch, not an unrolled view (which was refused past
    4,096 elements); values as numpy's to rounding."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3000, 3, 3)) + 3 * np.eye(3)
    b = rng.standard_normal((3000, 3, 2))
    m, r = st.symbol("m", a), st.symbol("r", b)
    outs = [st.linalg.det(m), st.linalg.inv(m), st.linalg.solve(m, r)]
    plan = loopnest.plan_loops([o._node for o in outs], [m._node, r._node])
    assert len(plan.blocks) == 3 and all(blk.space == (3000,) for blk in plan.blocks)
    det, inv, x = compile_plan(plan)(a[None], b[None])
    np.testing.assert_allclose(det[0], np.linalg.det(a), rtol=1e-12)
    np.testing.assert_allclose(inv[0], np.linalg.inv(a), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(x[0], np.linalg.solve(a, b), rtol=1e-11, atol=1e-13)
    c = rng.standard_normal((500, 6, 6))
    spd = c @ np.swapaxes(c, -1, -2) + 6 * np.eye(6)
    s = st.symbol("s", spd)
    plan = loopnest.plan_loops([st.linalg.cholesky(s)._node], [s._node])
    assert [isinstance(blk.body, Routine) for blk in plan.blocks] == [True]
    np.testing.assert_allclose(compile_plan(plan)(spd[None])[0], np.linalg.cholesky(spd),
                               rtol=1e-12, atol=1e-14)


def test_small_lu_and_eigh_are_one_block_over_a_large_batch():
    """2,000 4x4 LU factorizations and 2x2 eigendecompositions: one block each over the
    batch (their element views of one matrix as the body), equal to the eager values."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((2000, 4, 4))
    c = rng.standard_normal((2000, 2, 2))
    s = c + np.swapaxes(c, -1, -2)
    m, h = st.symbol("m", a), st.symbol("h", s)
    lu, perm = st.linalg.lu(m)
    e, v = st.linalg.eigh(h)
    outs = [lu, e, st.abs(v)]
    plan = loopnest.plan_loops([o._node for o in outs], [m._node, h._node])
    assert sum(blk.space == (2000,) for blk in plan.blocks) >= 2
    got = compile_plan(plan)(a[None], s[None])
    ea, ee = st.linalg.lu(st.constant(a))[0], st.linalg.eigh(st.constant(s))
    np.testing.assert_allclose(got[0][0], ea.numpy(), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(got[1][0], ee[0].numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got[2][0], np.abs(ee[1].numpy()), rtol=1e-11, atol=1e-13)
