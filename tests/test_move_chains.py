"""The zeros of a select stay exact through chains of moves in compiled loop nests.

``where(c, f(x), 0)`` read through a chain of ops that only move elements (a reshape of a
transpose, a tile then a reshape, a gather then a reshape), or through a scatter that adds
several elements into one place (the gradient of a tile or a broadcast), and then multiplied
by a partial that is infinite or nan where ``c`` is false, is exactly 0 there -- in eager
values (docs/tensorflow.md, "Exact derivatives: no ``where`` trap") and in the loop nests a large
function compiles to. The references are numpy's ``np.where`` of the selected branch and the
hand-written derivatives of the selected branch."""

import numpy as np
import pytest

import symtape as st
from symtape.codegen import compile_plan
from symtape.codegen.loops import LoopPlan
from symtape.compile import planner
from symtape.compile import strategy

N = 300
_PERM = np.random.default_rng(7).permutation(N)

# name: (symtape chain, numpy chain)
CHAINS = {
    "reshape_transpose": (lambda a: st.transpose(st.reshape(a, (20, 15))),
                          lambda a: np.transpose(np.reshape(a, (20, 15)))),
    "transpose_reshape": (lambda a: st.reshape(st.transpose(st.reshape(a, (20, 15))), (-1,)),
                          lambda a: np.reshape(np.transpose(np.reshape(a, (20, 15))), (-1,))),
    "tile_reshape": (lambda a: st.reshape(st.tile(a, [2]), (20, 30)),
                     lambda a: np.reshape(np.tile(a, 2), (20, 30))),
    "broadcast_transpose": (lambda a: st.transpose(st.broadcast_to(a, (2, N))),
                            lambda a: np.transpose(np.broadcast_to(a, (2, N)))),
    "gather_reshape": (lambda a: st.reshape(st.gather(a, _PERM), (15, 20)),
                       lambda a: np.reshape(a[_PERM], (15, 20))),
    "reverse_slice_reshape": (lambda a: st.reshape(st.reverse(a, [0])[60:], (24, 10)),
                              lambda a: np.reshape(a[::-1][60:], (24, 10))),
}
# adding scatters (several elements into one place) with no other move around them
ADDING = {
    "tile": (lambda a: st.tile(a, [3]), lambda a: np.tile(a, 3)),
    "broadcast_rows": (lambda a: st.broadcast_to(a, (2, N)),
                       lambda a: np.broadcast_to(a, (2, N))),
}
ALL = {**CHAINS, **ADDING}


def _points() -> np.ndarray:
    """0 (log: -inf, 1/x: inf) and -1 (log: nan) where the select is false, powers of two
    (exact reciprocals) where it is true."""
    x = np.zeros(N)
    x[1::3] = -1.0
    x[2::3] = 2.0 ** (np.arange(N)[2::3] % 5 + 1)
    return x


def _compiled(fn, monkeypatch):
    """``fn`` of a symbol of shape (N,), compiled as loop nests (not its element view)."""
    monkeypatch.setattr(strategy, "LOOP_MIN_ATOMS", 0)
    xs = st.symbol("x", shape=(N,))
    f = st.compile(fn(xs), [xs])
    assert isinstance(f._plan, LoopPlan)
    return f


@pytest.mark.parametrize("case", sorted(ALL))
def test_value_of_a_moved_select_times_an_infinite_partial(case, monkeypatch):
    """``chain(where(x > 1, x, 0)) * chain(1 / x)``: 0 where x <= 1 (also at x = 0)."""
    move, np_move = ALL[case]

    def fn(x):
        return move(st.where(x > 1, x, 0.0)) * move(1.0 / x)

    x0 = _points()
    with np.errstate(all="ignore"):
        ref = np_move(np.where(x0 > 1, x0 * (1.0 / x0), 0.0))
    eager = fn(st.Variable(x0)).numpy()
    np.testing.assert_array_equal(eager, ref)
    compiled = _compiled(fn, monkeypatch)(x0)
    np.testing.assert_array_equal(compiled, ref)


def _derivatives(x, move):
    """The gradient and the second derivative (gradient of the gradient's sum) of
    ``sum(where(move(x) > 1, move(log x), 0))``, on tapes."""
    with st.GradientTape() as outer:
        outer.watch(x)
        with st.GradientTape() as inner:
            inner.watch(x)
            y = st.reduce_sum(st.where(move(x) > 1, move(st.log(x)), 0.0))
        g = inner.gradient(y, x)
        total = st.reduce_sum(g)
    return [g, outer.gradient(total, x)]


@pytest.mark.parametrize("case", sorted(ALL))
def test_derivatives_through_moves_are_exact(case, monkeypatch):
    """d/dx = count / x and d2/dx2 = -count / x**2 where x > 1 (each element read ``count``
    times, at least once), exactly 0 elsewhere (the unselected log's partials are inf and
    nan)."""
    move, np_move = ALL[case]
    x0 = _points()
    count = np.bincount(np.ravel(np_move(np.arange(N))), minlength=N)
    live = (x0 > 1) & (count > 0)
    safe = np.where(live, x0, 1.0)
    refs = [np.where(live, count * (1.0 / safe), 0.0), np.where(live, -count / safe ** 2, 0.0)]
    eager = [t.numpy() for t in _derivatives(st.Variable(x0), move)]
    compiled = _compiled(lambda x: _derivatives(x, move), monkeypatch)(x0)
    for e, c, r in zip(eager, compiled, refs):
        np.testing.assert_array_equal(e == 0, ~live)  # exact zeros, no nan
        np.testing.assert_allclose(e, r, rtol=1e-15, atol=0)
        np.testing.assert_array_equal(c, e)


@pytest.mark.parametrize("case", ["reshape_transpose", "tile_reshape", "tile"])
def test_derivatives_through_moves_in_chunks_of_points(case):
    """The loop plan over chunks of 8 points (each point's tensors one slice of a chunk):
    3 points, each the values above in another order, against each point's eager values."""
    move, _ = ALL[case]
    xs = st.symbol("x", shape=(N,))
    outs = _derivatives(xs, move)
    f = compile_plan(planner.plan_loops([o._node for o in outs], [xs._node], points=8))
    rng = np.random.default_rng(3)
    batch = np.stack([rng.permutation(_points()) for _ in range(3)])
    got = f(batch)
    for p in range(3):
        eager = [t.numpy() for t in _derivatives(st.Variable(batch[p]), move)]
        for k in range(2):
            np.testing.assert_array_equal(got[k][p], eager[k])
            assert np.isfinite(got[k][p]).all()


def test_a_select_read_by_several_loops_keeps_its_zeros_in_each():
    """``s = where(x > 0, 2x, 0)`` read by three loops (two sums and an elementwise
    output) whose other factors are nan where ``x <= 0``: each loop computes the select
    itself, so ``s * log(x)`` is 0 there, as eager values and numpy's ``np.where`` give
    (the select written to a temporary and read back gave ``0 * nan = nan``)."""
    x0 = np.linspace(-2.0, 2.0, N)
    x = st.Variable(x0)
    s = st.where(x > 0, x * 2.0, 0.0)
    outs = [st.reduce_sum(s * st.log(x)), st.reduce_sum(s * st.sqrt(x)), s * st.log(x)]
    plan = planner.plan_loops([o._node for o in outs], [x._node])
    got = compile_plan(plan)(x0)
    pos = x0 > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        terms = np.where(pos, 2.0 * x0 * np.log(x0), 0.0)
        want = [np.sum(terms), np.sum(np.where(pos, 2.0 * x0 * np.sqrt(x0), 0.0)), terms]
    for g, w, o in zip(got, want, outs):
        np.testing.assert_allclose(g, w, rtol=1e-13)
        np.testing.assert_allclose(o.numpy(), w, rtol=1e-13)
