"""Moves without index arrays: a one-argument rearrangement (reshape, transpose, slice, ...)
moves values, places and cotangents by its own ``fn`` (numpy views where numpy gives them)
instead of gathering or scatter-adding through an int64 map of its size. Each shortcut is
checked against the map it replaces, built here from scratch."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import symtape as st
from symtape.ops import structural as S

offsets = importlib.import_module("symtape.compile.offsets")

#: (op, argument shape, params)
MOVES = [
    (S.reshape, (3, 4), {"shape": (2, 6)}),
    (S.reshape, (24,), {"shape": (2, 3, 4)}),
    (S.transpose, (2, 3, 4), {"perm": (2, 0, 1)}),
    (S.transpose, (2, 3, 4), {"perm": (-1, 0, 1)}),
    (S.transpose, (3, 5), {"perm": None}),
    (S.squeeze, (3, 1, 4), {"axis": 1}),
    (S.expand_dims, (3, 4), {"axis": 1}),
    (S.reverse, (3, 4), {"axis": 1}),
    (S.reverse, (3, 4), {"axis": (0, 1)}),
    (S.getitem, (10,), {"key": (slice(2, 9, 3),)}),
    (S.getitem, (4, 5), {"key": (slice(None), 2)}),
    (S.tile, (2, 3), {"multiples": (2, 2)}),
    (S.broadcast_to, (1, 3), {"shape": (4, 3)}),
]


def _map_from_scratch(op, shape, params):
    """The flat index into the argument of every output element, by ``fn`` on an arange."""
    return np.asarray(op.fn(np.arange(int(np.prod(shape))).reshape(shape), **params))


@pytest.mark.parametrize("op, shape, params", MOVES, ids=lambda v: getattr(v, "name", ""))
def test_index_map_and_moved_values_match_the_map(op, shape, params):
    want = _map_from_scratch(op, shape, params)
    (got,) = op.index_maps([shape], params)
    np.testing.assert_array_equal(got, want)
    v = np.random.default_rng(0).normal(size=shape)
    np.testing.assert_array_equal(op.moved(v, [shape], params), v.reshape(-1)[want])
    # a row that broadcasts to the argument's shape moves as the broadcast array
    row = v[(0,) * (len(shape) - 1)] if len(shape) > 1 else v[:1]
    np.testing.assert_array_equal(op.moved(row, [shape], params),
                                  np.broadcast_to(row, shape).reshape(-1)[want])


def test_a_slice_of_a_reshape_holds_no_map_of_its_own():
    """The map of a slice (and of a reshape) is a view of the shared ramp, not an array."""
    (m,) = S.getitem.index_maps([(1000, 2)], {"key": (slice(1, None),)})
    (r,) = S.reshape.index_maps([(2000,)], {"shape": (1000, 2)})
    assert not m.flags.owndata and not r.flags.owndata
    assert not m.flags.writeable
    np.testing.assert_array_equal(m.reshape(-1), np.arange(2, 2000))


def test_several_arguments_map_each_among_minus_ones():
    (a, b) = S.concat.index_maps([(2, 3), (1, 3)], {"axis": 0})
    np.testing.assert_array_equal(a, [[0, 1, 2], [3, 4, 5], [-1, -1, -1]])
    np.testing.assert_array_equal(b, [[-1, -1, -1], [-1, -1, -1], [0, 1, 2]])
    (a, b) = S.stack.index_maps([(2,), (2,)], {"axis": 1})
    np.testing.assert_array_equal(a, [[0, -1], [1, -1]])
    np.testing.assert_array_equal(b, [[-1, 0], [-1, 1]])
    with pytest.raises(st.errors.ShapeError, match="st.concat"):
        S.concat.index_maps([(2, 3), (1, 4)], {"axis": 0})


@pytest.mark.parametrize("op, shape, params", [m for m in MOVES if m[0]._back is not None],
                         ids=lambda v: getattr(v, "name", ""))
def test_inverse_rearrangement_cotangent_equals_the_scatter(op, shape, params):
    """A one-to-one rearrangement's cotangent is its inverse applied to ``g``: the values
    the scatter-add through the map gives."""
    x = st.constant(np.random.default_rng(1).normal(size=shape))
    out_shape = op.index_maps([shape], params)[0].shape
    g = st.constant(np.random.default_rng(2).normal(size=out_shape))
    (ct,) = op.vjp(g, None, [x], params, [True])
    want = np.zeros(int(np.prod(shape)))
    np.add.at(want, _map_from_scratch(op, shape, params).reshape(-1), g.numpy().reshape(-1))
    assert ct.shape == x.shape
    np.testing.assert_array_equal(ct.numpy(), want.reshape(shape))


def test_gradients_through_rearrangements_against_central_differences():
    def f(x):
        y = st.reshape(x, (3, 4))
        y = st.transpose(y, (1, 0))
        y = st.reverse(y, axis=[0])
        y = st.expand_dims(st.squeeze(st.reshape(y, (4, 1, 3)), axis=1), 0)
        return st.reduce_sum(st.sin(y) * st.range(12.0, dtype=st.float64)[None, :3])

    x0 = np.random.default_rng(3).normal(size=12)
    v = st.Variable(x0)
    with st.GradientTape() as tape:
        y = f(v)
    eager = tape.gradient(y, v).numpy()
    compiled = np.asarray(st.grad(f, input_signature=[st.TensorSpec((12,))])(x0[None]))[0]
    h = 1e-6
    fd = np.array([(f(st.constant(x0 + h * e)).numpy() - f(st.constant(x0 - h * e)).numpy())
                   / (2 * h) for e in np.eye(12)])
    np.testing.assert_allclose(eager, fd, atol=1e-8)
    np.testing.assert_allclose(compiled, eager, rtol=1e-14, atol=1e-15)


def _scatter_reference(v, idx, size):
    """``scatter_add``'s value by a Python loop: -0.0 plus each element received, +0.0 where
    none is."""
    out = [None] * size
    for x, j in zip(v.tolist(), idx.tolist()):
        if j >= 0:
            out[j] = -0.0 + x if out[j] is None else out[j] + x
    return np.array([0.0 if o is None else o for o in out])


@pytest.mark.parametrize("idx", [[0, 2, 3, 5], [5, 3, 0, 2], [1, -1, 4, -1], [2, 2, 0, -1],
                                 [4, 4, 4, 4]])
def test_scatter_add_one_to_one_and_not_keeps_signed_zeros(idx):
    idx = np.array(idx)
    for v in (np.array([-0.0, 1.5, -0.0, 2.0]), np.array([-0.0, -0.0, -0.0, -0.0]),
              np.array([0.0, -0.0, 3.0, -3.0])):
        got = S.scatter_add.numeric([v], {"idx": idx, "shape": (6,)})
        want = _scatter_reference(v, idx, 6)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
        maps, own = S.scatter_add.moves([v.shape], {"idx": idx, "shape": (6,)})
        counts = np.bincount(idx[idx >= 0], minlength=6)
        src = np.full(6, -1)
        for i, j in enumerate(idx.tolist()):
            if j >= 0 and counts[j] == 1:
                src[j] = i
        np.testing.assert_array_equal(maps[0], src)
        assert (own is None) == (not (counts > 1).any())
        if own is not None:
            np.testing.assert_array_equal(own, counts > 1)


@pytest.mark.parametrize("shape", [(200_000,), (100_000, 2), (3, 70_000), (5, 7, 3_000),
                                   (131_073,)])
def test_affine_of_large_offsets_in_blocks(shape):
    """:func:`offsets.affine` compares large offsets a block at a time: the same verdicts
    as the whole comparison, wherever a place breaks the progression."""
    rng = np.random.default_rng(len(shape))
    strides = rng.integers(-3, 4, size=len(shape))
    grid = np.indices(shape)
    places = 7 + sum(i * s for i, s in zip(grid, strides))
    assert offsets.affine(places) == (7, tuple(int(s) for s in strides))
    n = places.size
    for at in (0, 1, n // 2, n - 70_000 if n > 70_000 else 1, n - 1):
        bad = places.copy()
        bad.flat[at] += 1
        assert offsets.affine(bad) is None, at
    assert offsets.affine(places[..., ::2]) is not None


def test_long_scan_gradient_is_unchanged_by_the_shortcuts():
    """A scan's reverse mode (its packed outputs sliced and reshaped, their cotangents
    scattered back) against the unrolled loop's gradient."""
    def step(s, _):
        return s + 0.01 * st.stack([s[1], -st.sin(s[0])])

    def scanned(s0):
        return st.scan(step, st.zeros(300), initializer=s0)[-1, 0]

    def unrolled(s0):
        s = s0
        for _ in range(300):
            s = step(s, None)
        return s[0]

    x0 = np.array([0.4, -0.1])
    g = np.asarray(st.grad(scanned, input_signature=[st.TensorSpec((2,))])(x0[None]))[0]
    v = st.Variable(x0)
    with st.GradientTape() as tape:
        y = unrolled(v)
    np.testing.assert_allclose(g, tape.gradient(y, v).numpy(), rtol=1e-12)
