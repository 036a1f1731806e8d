"""Indexed loop accesses and the prologue of loop plans.

Gathers, adding scatters and segment reductions whose places follow no pattern are one loop
reading the places from an index array (an ``'indices'`` buffer; the axes along which the
places step evenly stay strides, so a batch of colours shares one array), not an unrolled
copy refused past 4,096 elements. Blocks computed from constants alone (the one-hot seeds of a
coloured sweep) run once per call, before the points, and a kept arena skips them."""

from __future__ import annotations

import ctypes

import c_build
import numpy as np
import pytest

import symtape as st
from symtape import ops
from symtape.codegen import compile_plan
from symtape.compile import planner as loopnest
from symtape.compile import strategy
from symtape.compile.offsets import split_affine


def _indexed(plan) -> list:
    return [a for b in plan.blocks for a in b.ins + b.outs if a.index]


def test_split_affine_keeps_even_axes_as_strides():
    """A (colours, terms) table of places: colours step by 2,000, terms irregularly; the
    index array keeps the terms only."""
    rng = np.random.default_rng(0)
    terms = rng.integers(0, 2000, 300)
    places = terms[None, :] + 2000 * np.arange(51)[:, None]
    strides, index = split_affine(places)
    assert strides == (2000, 0) and index.shape == (1, 300)
    np.testing.assert_array_equal(index[0], terms)
    full = np.arange(51)[:, None] * strides[0] + index
    np.testing.assert_array_equal(full, places)


@pytest.mark.parametrize("points", [0, 8])
def test_irregular_gathers_are_one_indexed_loop(points):
    """6,000 random rows of 3,000 (twice, one reversed): copy loops by index arrays, over
    points too; values as numpy's (exp as compiled, to an ulp)."""
    rng = np.random.default_rng(1)
    idx = rng.integers(0, 3000, 6000)
    x = st.symbol("x", shape=(3000,))
    y = st.gather(x, idx) * st.exp(st.gather(x, idx[::-1]))
    plan = loopnest.plan_loops([y._node], [x._node], points=points)
    assert len(_indexed(plan)) == 2
    assert sum(b.kind == "indices" for b in plan.buffers) == 2
    x0 = rng.standard_normal((11, 3000))
    got = compile_plan(plan)(x0)
    np.testing.assert_allclose(got, x0[:, idx] * np.exp(x0[:, idx[::-1]]), rtol=1e-15,
                               atol=0)


def test_irregular_adding_scatter_is_one_loop_equal_to_eager():
    """scatter_add of 20,000 terms into 3,000 places with duplicates (the transpose of a
    gather): one accumulating loop in term order, bit-equal to the eager value
    (``np.add.at`` adds in the same order)."""
    rng = np.random.default_rng(2)
    idx = rng.integers(0, 3000, 20000)
    x = st.symbol("x", shape=(20000,))
    node = ops.scatter_add.bind(st.sin(x), idx=idx, shape=(3000,))._node
    plan = loopnest.plan_loops([node], [x._node])
    assert len(_indexed(plan)) >= 1
    x0 = rng.standard_normal((3, 20000))
    got = compile_plan(plan)(x0)
    for p in range(3):
        want = ops.scatter_add.bind(st.sin(st.constant(x0[p])), idx=idx, shape=(3000,))
        np.testing.assert_array_equal(got[p], want.numpy())


def test_irregular_segment_sums_with_dropped_rows():
    """unsorted_segment_sum of 9,000 rows (ids random, some -1: dropped) into 500 segments,
    and segment_max: one loop each over the kept rows; as the eager values."""
    rng = np.random.default_rng(3)
    ids = rng.integers(-1, 500, 9000)
    x = st.symbol("x", shape=(9000, 2))
    outs = [st.math.unsorted_segment_sum(x * x, ids, 500),
            st.math.unsorted_segment_max(x, ids, 500)]
    plan = loopnest.plan_loops([o._node for o in outs], [x._node])
    assert len(_indexed(plan)) >= 2
    x0 = rng.standard_normal((2, 9000, 2))
    got = compile_plan(plan)(x0)
    for p in range(2):
        c = st.constant(x0[p])
        np.testing.assert_allclose(got[0][p], st.math.unsorted_segment_sum(
            c * c, ids, 500).numpy(), rtol=1e-13, atol=1e-13)
        np.testing.assert_array_equal(got[1][p], st.math.unsorted_segment_max(
            c, ids, 500).numpy())


def test_indexed_loops_export_as_c_arrays(tmp_path):
    """The C export writes index arrays as ``int32_t`` tables and adds them to the
    offsets; the built library gives the compiled values."""
    if c_build.GCC is None:
        pytest.skip("no gcc")
    rng = np.random.default_rng(4)
    idx = rng.integers(0, 3000, 6000)
    spec = [st.TensorSpec((3000,), name="x")]
    fn = st.function(lambda x: st.gather(x, idx) * st.gather(x, idx[::-1]),
                     input_signature=spec)
    compiled = fn.get_concrete_function(*spec)
    _, source = st.export_c({"pairs": fn}, tmp_path / "pairs")
    assert "int32_t" in source.read_text()
    lib = ctypes.CDLL(str(c_build.build(source, opt="-O2")))
    x0 = rng.standard_normal((5, 3000))
    (got,) = c_build.call_batched(lib, "pairs", compiled, [x0])
    (want,) = compiled(x0)
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------------------------
# The prologue
# --------------------------------------------------------------------------------------------


def _network(ns=300, nr=900, seed=0):
    rng = np.random.default_rng(seed)
    a, b, c = (rng.integers(0, ns, nr) for _ in range(3))
    k = rng.uniform(0.5, 2.0, nr)
    species = np.concatenate([a, b, c])
    stoich = np.concatenate([-np.ones(nr), -np.ones(nr), np.ones(nr)])
    reaction = np.tile(np.arange(nr), 3)

    def f(conc):
        r = k * st.gather(conc, a) * st.gather(conc, b)
        return st.math.unsorted_segment_sum(stoich * st.gather(r, reaction), species, ns)

    def jac(x):
        out = np.zeros((ns, ns))
        for s, sgn in ((a, -1.0), (b, -1.0), (c, 1.0)):
            np.add.at(out, (s, a), sgn * k * x[b])
            np.add.at(out, (s, b), sgn * k * x[a])
        return out

    return f, jac


def test_coloured_jacobian_of_a_reaction_network_runs_its_seeds_once(monkeypatch):
    """A mass-action network (300 species, 900 reactions) compiled as loops over points:
    its sparse Jacobian's one-hot seed blocks are the plan's prologue; two calls (the
    second on the kept arena, prologue skipped) give the hand-written Jacobian."""
    monkeypatch.setattr(strategy, "POINT_LOOP_MIN_ATOMS", 0)
    f, jac = _network()
    sj = st.jacobian(f, sparse=True, input_signature=[st.TensorSpec((300,))])
    x = np.random.default_rng(5).uniform(0.1, 1.0, (70, 300))
    first = sj(x)
    plan = sj.compiled.plan
    assert plan.prologue and plan.points
    again = sj(x[::-1])
    rows, cols = np.asarray(first.indices).T
    for p in (0, 33, 69):
        dense = np.zeros((300, 300))
        dense[rows, cols] = np.asarray(first.values)[p]
        np.testing.assert_allclose(dense, jac(x[p]), rtol=1e-13, atol=1e-14)
    np.testing.assert_array_equal(np.asarray(again.values), np.asarray(first.values)[::-1])


def test_a_prologue_reading_a_shared_argument_runs_every_call():
    """A block reading only an argument all points share (a cumulative sum of ``w``) runs
    once per call, before the chunks, on that call's value; its temporaries come first in
    the arena and nothing reuses their place."""
    x, w = st.symbol("x", shape=(40,)), st.symbol("w", shape=(40,))
    y = x * st.math.cumsum(w)
    plan = loopnest.plan_loops([y._node], [x._node, w._node], points=8, shared=(False, True))
    first = plan.prologue
    assert first and plan.order[:len(first)] == first
    offsets, _ = plan.arena
    kept = {a.buffer for k in first for a in plan.blocks[k].outs}
    others = {a.buffer for k, b in enumerate(plan.blocks) if k not in first
              for a in b.ins + b.outs if plan.buffers[a.buffer].kind == "temp"} - kept
    top = max(offsets[b] + 8 * plan.buffers[b].size for b in kept)
    assert all(offsets[b] >= top for b in others)
    fn = compile_plan(plan)
    rng = np.random.default_rng(6)
    x0 = rng.standard_normal((19, 40))
    for _ in range(2):
        w0 = rng.standard_normal(40)
        np.testing.assert_allclose(fn(x0, w0), x0 * np.cumsum(w0), rtol=1e-15, atol=1e-15)


def test_no_prologue_block_shares_a_temporary_with_the_points():
    """A zero fill (it reads nothing) of a sum that then accumulates a point's values is
    not the prologue's, nor is a fill of a sum reading that one: two chained sums per
    point equal numpy's, and no prologue block writes what a block of the points writes."""
    x = st.symbol("x", shape=(6, 5))
    c = np.linspace(-1.0, 2.0, 5)
    inner = st.reduce_sum(x * x, axis=0)
    z = st.reduce_sum(st.reshape(inner * c, (5, 1)) * st.constant(np.ones((5, 3))), axis=0)
    y = st.concat([z, st.reduce_max(z * z, keepdims=True)], axis=0)
    for points in (0, 8):
        plan = loopnest.plan_loops([y._node], [x._node], points=points)
        first = set(plan.prologue)
        mine = {a.buffer for k in first for a in plan.blocks[k].outs}
        theirs = {a.buffer for k, b in enumerate(plan.blocks) if k not in first
                  for a in b.outs}
        assert not mine & theirs
        x0 = np.random.default_rng(8).normal(size=(3, 6, 5))
        zs = np.repeat(((x0 * x0).sum(axis=1) * c).sum(axis=1)[:, None], 3, axis=1)
        want = np.concatenate([zs, (zs * zs).max(axis=1, keepdims=True)], axis=1)
        np.testing.assert_allclose(compile_plan(plan)(x0), want, rtol=1e-14)
