"""Segment and scatter ops (``symtape/segments.py`` over the table's ``segment_reduce``):
values against numpy loops, TensorFlow's semantics (empty segments, duplicates, unsorted and
dropped ids, out-of-range errors), gradients against finite differences and hand formulas,
second derivatives, batching, sparsity, loop plans at 10^5 elements, and the sparse Jacobian
of a reaction network."""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st
from symtape import ops
from symtape.compile import planner as loopnest
from symtape.compile.function import compile_plan
from symtape.derivatives import sparsity

RNG = np.random.default_rng(7)
LOWEST, HIGHEST = np.finfo(np.float64).min, np.finfo(np.float64).max


# -- numpy loop references --------------------------------------------------------------------


def _ref(data, ids, k, kind, empty):
    """Row by row, in order: the reference every value is checked against."""
    data = np.asarray(data)
    ids = np.asarray(ids)
    rows = data.reshape((ids.size,) + data.shape[ids.ndim:])
    out = np.full((k,) + rows.shape[1:], empty, dtype=data.dtype)
    seen = np.zeros(k, dtype=bool)
    for j, s in enumerate(ids.reshape(-1)):
        if s < 0:
            continue
        if not seen[s]:
            out[s], seen[s] = rows[j], True
        elif kind == "sum":
            out[s] = out[s] + rows[j]
        elif kind == "max":
            out[s] = np.maximum(out[s], rows[j])
        elif kind == "min":
            out[s] = np.minimum(out[s], rows[j])
        elif kind == "prod":
            out[s] = out[s] * rows[j]
        else:  # mean: sums here, divided below
            out[s] = out[s] + rows[j]
    if kind == "mean":
        counts = np.bincount(ids.reshape(-1)[ids.reshape(-1) >= 0], minlength=k)
        out = out / np.maximum(counts, 1).reshape((k,) + (1,) * (out.ndim - 1))
    return out


SORTED = {"segment_sum": ("sum", 0), "segment_mean": ("mean", 0), "segment_max": ("max", 0),
          "segment_min": ("min", 0), "segment_prod": ("prod", 1)}
UNSORTED = {"unsorted_segment_sum": ("sum", 0), "unsorted_segment_mean": ("mean", 0),
            "unsorted_segment_max": ("max", LOWEST), "unsorted_segment_min": ("min", HIGHEST),
            "unsorted_segment_prod": ("prod", 1)}


@pytest.mark.parametrize("name", sorted(SORTED))
def test_sorted_segment_values_equal_a_numpy_loop(name):
    data = RNG.standard_normal((7, 3))
    ids = np.array([0, 0, 2, 2, 2, 3, 5])  # segments 1 and 4 empty
    kind, empty = SORTED[name]
    got = getattr(st.math, name)(st.constant(data), ids).numpy()
    np.testing.assert_array_equal(got, _ref(data, ids, 6, kind, empty))


@pytest.mark.parametrize("name", sorted(UNSORTED))
def test_unsorted_segment_values_equal_a_numpy_loop(name):
    data = RNG.standard_normal((8, 2))
    ids = np.array([3, 0, 3, -1, 1, 3, 0, -2])  # negative ids drop rows; 2 and 4 empty
    kind, empty = UNSORTED[name]
    got = getattr(st.math, name)(st.constant(data), ids, 5).numpy()
    np.testing.assert_array_equal(got, _ref(data, ids, 5, kind, empty))


def test_unsorted_ids_may_index_several_leading_axes():
    data = RNG.standard_normal((2, 3, 4))
    ids = np.array([[1, 0, 1], [2, 2, -1]])
    got = st.math.unsorted_segment_sum(data, ids, 3).numpy()
    np.testing.assert_allclose(got, _ref(data, ids, 3, "sum", 0), rtol=1e-15)


@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
def test_integer_data_keep_their_dtype(kind):
    data = np.array([[3, -1], [2, 5], [-4, 2]], dtype=np.int32)
    fn = getattr(st.math, f"unsorted_segment_{kind}")
    out = fn(st.constant(data), [1, 1, 0], 3)
    assert out.dtype == np.int32
    empty = {"sum": 0, "prod": 1, "max": np.iinfo(np.int32).min,
             "min": np.iinfo(np.int32).max}[kind]
    np.testing.assert_array_equal(out.numpy(), _ref(data, [1, 1, 0], 3, kind, empty))


def test_a_million_elements_evaluate_eagerly_in_milliseconds():
    import time

    n, k = 1_000_000, 1000
    data, ids = RNG.standard_normal(n), RNG.integers(0, k, n)
    x = st.constant(data)
    for name in ("unsorted_segment_sum", "unsorted_segment_max"):
        t = time.perf_counter()
        out = getattr(st.math, name)(x, ids, k).numpy()
        assert time.perf_counter() - t < 1.0
    np.testing.assert_array_equal(out, np.maximum.reduceat(
        data[np.argsort(ids, kind="stable")], np.r_[0, np.cumsum(np.bincount(ids))[:-1]]))


def test_ids_are_read_when_the_op_is_applied():
    ids = np.array([0, 1, 1])
    y = st.math.unsorted_segment_sum(st.constant([1.0, 2.0, 4.0]), ids, 2)
    ids[:] = 0  # (a later change of the caller's array changes nothing)
    assert y.numpy().tolist() == [1.0, 6.0]
    x = st.Variable([1.0, 2.0, 4.0])
    with st.GradientTape() as t:
        z = st.math.unsorted_segment_sum(x, ids, 2)
    ids[:] = 1
    assert t.gradient(z, x, output_gradients=st.constant([1.0, 3.0])).numpy().tolist() == \
        [1.0, 1.0, 1.0]


# -- TensorFlow's semantics -------------------------------------------------------------------


def test_empty_segments_take_tensorflows_values():
    x = st.constant([2.0, 3.0])
    assert st.math.unsorted_segment_sum(x, [0, 0], 2).numpy()[1] == 0.0
    assert st.math.unsorted_segment_prod(x, [0, 0], 2).numpy()[1] == 1.0
    assert st.math.unsorted_segment_mean(x, [0, 0], 2).numpy()[1] == 0.0
    assert st.math.unsorted_segment_max(x, [0, 0], 2).numpy()[1] == LOWEST
    assert st.math.unsorted_segment_min(x, [0, 0], 2).numpy()[1] == HIGHEST
    assert st.math.segment_max(x, [1, 1]).numpy().tolist() == [0.0, 3.0]  # sorted: 0
    assert st.math.segment_sum(st.zeros([0]), np.zeros(0, np.int64)).shape == (0,)


def test_duplicate_indices_add_in_scatter_nd_and_tensor_scatter_nd_add():
    idx = [[0, 1], [2, 0], [0, 1]]
    upd = st.constant([1.0, 2.0, 4.0])
    want = np.zeros((3, 2))
    want[0, 1], want[2, 0] = 5.0, 2.0
    np.testing.assert_array_equal(st.scatter_nd(idx, upd, [3, 2]).numpy(), want)
    base = RNG.standard_normal((3, 2))
    np.testing.assert_array_equal(st.tensor_scatter_nd_add(base, idx, upd).numpy(), base + want)
    np.testing.assert_array_equal(st.tensor_scatter_nd_sub(base, idx, upd).numpy(), base - want)


def test_scatter_nd_scatters_slices():
    upd = RNG.standard_normal((2, 3))
    out = st.scatter_nd([[2], [0]], upd, [4, 3]).numpy()
    want = np.zeros((4, 3))
    want[2], want[0] = upd[0], upd[1]
    np.testing.assert_array_equal(out, want)


def test_tensor_scatter_nd_update_the_last_duplicate_wins():
    base = np.arange(4.0)
    out = st.tensor_scatter_nd_update(base, [[1], [3], [1]], st.constant([10.0, 20.0, 30.0]))
    assert out.numpy().tolist() == [0.0, 30.0, 2.0, 20.0]


@pytest.mark.parametrize("name, fn", [("max", np.maximum), ("min", np.minimum)])
def test_tensor_scatter_nd_max_and_min(name, fn):
    base = RNG.standard_normal(5)
    upd = RNG.standard_normal(3)
    idx = [[4], [1], [4]]
    want = base.copy()
    for (i,), u in zip(idx, upd):
        want[i] = fn(want[i], u)
    got = getattr(st, f"tensor_scatter_nd_{name}")(base, idx, upd).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("call, match", [
    (lambda: st.math.unsorted_segment_sum([1.0, 2.0], [0, 3], 3), r"segment_ids\[1\] = 3"),
    (lambda: st.math.segment_sum([1.0, 2.0], [1, 0]), "segment_ids must be sorted"),
    (lambda: st.math.segment_max([1.0, 2.0], [-1, 0]), "segment_ids must be non-negative"),
    (lambda: st.math.segment_sum([1.0, 2.0], [0]), "segment_ids must be a vector"),
    (lambda: st.scatter_nd([[4]], [1.0], [4]), r"indices\[0\] = \[4\] does not index"),
    (lambda: st.scatter_nd([[-1]], [1.0], [4]), r"indices\[0\] = \[-1\]"),
    (lambda: st.tensor_scatter_nd_update(st.zeros([2, 2]), [[0, 2]], [1.0]), "indices"),
    (lambda: st.math.unsorted_segment_sum([1.0], [0.5], 1), "segment_ids must be integers"),
    (lambda: st.math.unsorted_segment_sum([1.0], [0], -1), "num_segments"),
])
def test_bad_ids_and_indices_are_clear_errors_naming_the_argument(call, match):
    with pytest.raises(st.errors.SymtapeError, match=match):
        call()


def test_shape_mismatches_name_the_argument():
    with pytest.raises(st.errors.ShapeError, match="updates must have shape"):
        st.scatter_nd([[0], [1]], [1.0], [3])
    with pytest.raises(st.errors.DTypeError, match="for a mean"):
        st.math.segment_mean(st.constant([1, 2]), [0, 0])


# -- gradients --------------------------------------------------------------------------------


def _fd_grad(f, x0, eps=1e-6):
    out = np.zeros_like(x0)
    for i in np.ndindex(*x0.shape):
        e = np.zeros_like(x0)
        e[i] = eps
        out[i] = (f(x0 + e) - f(x0 - e)) / (2 * eps)
    return out


def _loss(y, w):
    return st.reduce_sum(y * w) + 0.5 * st.reduce_sum(y * y)


CASES = {  # name -> (function of x, x's shape)
    **{n: ((lambda n: lambda x: getattr(st.math, n)(x, [0, 0, 2, 2, 3]))(n), (5, 2))
       for n in SORTED},
    **{n: ((lambda n: lambda x: getattr(st.math, n)(x, [2, 0, 2, -1, 0], 4))(n), (5, 2))
       for n in UNSORTED if n != "unsorted_segment_max" and n != "unsorted_segment_min"},
    "unsorted_segment_max": (lambda x: st.math.unsorted_segment_max(x, [2, 0, 2, 1, 0], 3),
                             (5, 2)),
    "unsorted_segment_min": (lambda x: st.math.unsorted_segment_min(x, [2, 0, 2, 1, 0], 3),
                             (5, 2)),
    "scatter_nd": (lambda x: st.scatter_nd([[1], [3], [1]], x, [4, 2]), (3, 2)),
    "tensor_scatter_nd_add": (lambda x: st.tensor_scatter_nd_add(
        x[:4], [[1], [3], [1]], x[4:] * x[4:]), (7, 2)),
    "tensor_scatter_nd_sub": (lambda x: st.tensor_scatter_nd_sub(
        x[:4], [[1], [3], [1]], st.sin(x[4:])), (7, 2)),
    "tensor_scatter_nd_update": (lambda x: st.tensor_scatter_nd_update(
        x[:4], [[1], [3], [1]], x[4:] * 2.0), (7, 2)),
    "tensor_scatter_nd_max": (lambda x: st.tensor_scatter_nd_max(
        x[:4], [[1], [3], [1]], x[4:]), (7, 2)),
    "tensor_scatter_nd_min": (lambda x: st.tensor_scatter_nd_min(
        x[:4], [[1], [3], [1]], x[4:]), (7, 2)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_equal_finite_differences(name):
    fn, shape = CASES[name]
    x0 = RNG.uniform(0.5, 2.0, shape) * RNG.choice([-1.0, 1.0], shape)
    w = RNG.standard_normal(fn(st.constant(x0)).shape)
    x = st.Variable(x0)
    with st.GradientTape() as t:
        z = _loss(fn(x), w)
    g = t.gradient(z, x).numpy()
    want = _fd_grad(lambda a: float(_loss(fn(st.constant(a)), w)), x0)
    np.testing.assert_allclose(g, want, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("name", sorted(CASES))
def test_second_derivatives_equal_finite_differences_of_the_gradient(name):
    fn, shape = CASES[name]
    x0 = RNG.uniform(0.5, 2.0, shape) * RNG.choice([-1.0, 1.0], shape)
    w = RNG.standard_normal(fn(st.constant(x0)).shape)
    v = RNG.standard_normal(shape)

    def grad_dot_v(a):  # <grad, v>, itself differentiated
        x = st.Variable(a) if isinstance(a, np.ndarray) else a
        with st.GradientTape() as t:
            z = _loss(fn(x), w)
        return st.reduce_sum(t.gradient(z, x) * v)

    x = st.Variable(x0)
    with st.GradientTape() as outer:
        gv = grad_dot_v(x)
    hv = outer.gradient(gv, x).numpy()
    want = _fd_grad(lambda a: float(grad_dot_v(a)), x0, eps=1e-5)
    np.testing.assert_allclose(hv, want, rtol=1e-6, atol=1e-6)


def test_third_derivatives_equal_hand_formulas():
    """d^3/dx0 dx1 dx2 of x0 x1 x2 is 1; of max(x0^3, x1^3) at x1 > x0, d^3/dx1^3 is 6."""
    x = st.Variable([2.0, 3.0, 5.0, 7.0])
    with st.GradientTape() as t3:
        with st.GradientTape() as t2:
            with st.GradientTape() as t1:
                z = st.reduce_sum(st.math.segment_prod(x, [0, 0, 0, 1]))
            g0 = t1.gradient(z, x)[0]
        h01 = t2.gradient(g0, x)[1]
    np.testing.assert_allclose(t3.gradient(h01, x).numpy(), [0.0, 0.0, 1.0, 0.0], atol=1e-15)
    x = st.Variable([2.0, 3.0, 5.0])
    with st.GradientTape() as t3:
        with st.GradientTape() as t2:
            with st.GradientTape() as t1:
                z = st.reduce_sum(st.math.unsorted_segment_max(x * x * x, [0, 0, 1], 2))
            g1 = t1.gradient(z, x)[1]
        h11 = t2.gradient(g1, x)[1]
    assert t3.gradient(h11, x).numpy().tolist() == [0.0, 6.0, 0.0]


def test_segment_sum_gradient_is_a_gather():
    x = st.Variable(RNG.standard_normal((5, 2)))
    g = RNG.standard_normal((4, 2))
    with st.GradientTape() as t:
        y = st.math.unsorted_segment_sum(x, [2, 0, 2, -1, 3], 4)
    got = t.gradient(y, x, output_gradients=st.constant(g))
    assert got._node.prim.name == "gather_flat"
    np.testing.assert_array_equal(got.numpy(), np.concatenate([g[[2, 0, 2]], np.zeros((1, 2)),
                                                               g[[3]]]))


def test_max_gradient_goes_to_the_maximum_and_ties_share_it():
    x = st.Variable([3.0, 1.0, 3.0, 2.0, 5.0])
    with st.GradientTape() as t:
        y = st.math.segment_max(x, [0, 0, 0, 1, 1])
    g = t.gradient(y, x, output_gradients=st.constant([6.0, 1.0])).numpy()
    assert g.tolist() == [3.0, 0.0, 3.0, 0.0, 1.0]  # TensorFlow: ties split equally


def test_min_gradient_in_tensor_scatter_nd_min_shares_ties_with_the_tensor():
    x = st.Variable([1.0, 4.0])
    u = st.Variable([1.0, 7.0])
    with st.GradientTape() as t:
        y = st.tensor_scatter_nd_min(x, [[0], [1]], u)
    gx, gu = t.gradient(y, [x, u], output_gradients=st.constant([2.0, 3.0]))
    assert gx.numpy().tolist() == [1.0, 3.0] and gu.numpy().tolist() == [1.0, 0.0]


def test_update_gradient_zeroes_the_overwritten_places_and_the_losing_updates():
    x = st.Variable([1.0, 2.0, 3.0, 4.0])
    u = st.Variable([10.0, 20.0, 30.0])
    with st.GradientTape() as t:
        y = st.tensor_scatter_nd_update(x, [[1], [3], [1]], u)
    gx, gu = t.gradient(y, [x, u], output_gradients=st.constant([1.0, 2.0, 3.0, 4.0]))
    assert gx.numpy().tolist() == [1.0, 0.0, 3.0, 0.0]
    assert gu.numpy().tolist() == [0.0, 4.0, 2.0]


def test_prod_gradient_is_the_product_of_the_others_with_zeros():
    x = st.Variable([2.0, 0.0, 5.0, 0.0, 0.0, 3.0, 4.0])
    with st.GradientTape() as t:
        y = st.math.segment_prod(x, [0, 0, 0, 1, 1, 2, 2])
    g = t.gradient(y, x).numpy()
    # one zero: only it gets the product of the others; two zeros: nothing does
    assert g.tolist() == [0.0, 10.0, 0.0, 0.0, 0.0, 4.0, 3.0]


def test_mean_gradient_divides_by_the_count():
    x = st.Variable([1.0, 2.0, 3.0])
    with st.GradientTape() as t:
        y = st.math.unsorted_segment_mean(x, [1, 1, 0], 3)
    g = t.gradient(y, x, output_gradients=st.constant([1.0, 6.0, 9.0])).numpy()
    assert g.tolist() == [3.0, 3.0, 1.0]


# -- batching, sparsity, element view ----------------------------------------------------------


@pytest.mark.parametrize("kind", ["sum", "max", "min", "prod"])
def test_the_batch_rule_reduces_every_row(kind):
    xs = RNG.standard_normal((3, 5, 2))
    ids = np.array([1, -1, 1, 0, 1])
    prim = ops.segment_reduce
    params = dict(ids=ids, num_segments=3, kind=kind, empty=-9.0)
    out = prim.batch([st.constant(xs)], [True], params, (3, 2))
    for b in range(3):
        np.testing.assert_array_equal(out.numpy()[b], _ref(xs[b], ids, 3, kind, -9.0))


def test_each_segment_depends_only_on_its_rows():
    x = st.symbol("x", shape=(5,))
    y = st.math.unsorted_segment_max(x * x, [2, 0, 2, -1, 0], 4)
    deps = sparsity.dependencies(y._node, x._node)
    assert [int(d) for d in deps] == [0b10010, 0, 0b00101, 0]


def test_the_element_view_is_the_formula():
    x = st.symbol("x", shape=(3,))
    a, b, c = (e.expr for e in (x[0], x[1], x[2]))
    assert st.math.segment_sum(x, [0, 0, 1]).expr.tolist() == [a + b, c]
    assert st.math.unsorted_segment_prod(x, [1, -1, 1], 2).expr.tolist() == [1, a * c]


# -- loop plans -------------------------------------------------------------------------------


def _plan_value(fn, x0):
    xs = st.symbol("x", shape=x0.shape)
    plan = loopnest.plan_loops([fn(xs)._node], [xs._node])
    return plan, compile_plan(plan)(x0[None])[0]


N = 100_000


@pytest.mark.parametrize("ids, k", [
    (np.arange(N) // 10, N // 10),                     # sorted, equal segments
    (np.arange(N) % 8, 8),                             # unsorted, strided
    (np.repeat([0, 4, 9, 2], N // 4), 11),             # a few runs (sorted or not)
])
@pytest.mark.parametrize("name", ["unsorted_segment_sum", "unsorted_segment_max",
                                  "unsorted_segment_min", "unsorted_segment_prod"])
def test_large_segment_ops_are_loop_plans_equal_to_eager_values(name, ids, k):
    x0 = RNG.uniform(0.99, 1.01, N)
    fn = getattr(st.math, name)
    plan, got = _plan_value(lambda x: fn(x * 1.0, ids, k), x0)
    assert len(plan.blocks) < 20
    np.testing.assert_allclose(got, fn(st.constant(x0), ids, k).numpy(), rtol=1e-12)


def test_a_large_segment_sum_compiles_to_a_loop_nest_not_its_element_view():
    ids = np.arange(N) // 4
    f = st.function(lambda x: st.math.unsorted_segment_sum(st.sin(x), ids, N // 4))
    x0 = RNG.standard_normal(N)
    got = f(x0).numpy()
    assert [s.name for s in f.strategies] == ["loop-nest"]
    np.testing.assert_allclose(got, np.sin(x0).reshape(-1, 4).sum(axis=1), rtol=1e-13)


@pytest.mark.parametrize("name, ids, k", [
    ("unsorted_segment_max", np.arange(6000) // 4, 1500),
    ("unsorted_segment_min", np.repeat([0, 4, 9, 2], 1500), 11),   # runs, empty segments
    ("unsorted_segment_prod", (np.arange(6000) // 4) * 2, 3000),   # every other one empty
    ("segment_max", np.repeat([0, 2, 5, 9], 1500), None),          # sorted: empty ones are 0
])
def test_loop_plans_over_chunks_of_points_equal_eager_values(name, ids, k):
    fn = getattr(st.math, name)
    args = () if k is None else (k,)
    x = st.symbol("x", shape=(len(ids),))
    plan = loopnest.plan_loops([(fn(st.sin(x), ids, *args) * 2.0)._node], [x._node], points=8)
    pts = RNG.uniform(0.9, 1.1, (5, len(ids)))
    got = compile_plan(plan)(pts)
    want = np.stack([(fn(st.sin(st.constant(p)), ids, *args) * 2.0).numpy() for p in pts])
    np.testing.assert_array_equal(got, want)


def test_ids_without_affine_runs_are_one_indexed_loop_at_size():
    """10,000 rows into 100 segments by random ids: one accumulating loop reading the
    places from an index array (rows in order), as the eager sum."""
    ids = RNG.integers(0, 100, 10_000)
    xs = st.symbol("x", shape=(10_000,))
    y = st.math.unsorted_segment_sum(xs * 2.0, ids, 100)
    plan = loopnest.plan_loops([y._node], [xs._node])
    assert [b.kind for b in plan.buffers].count("indices") >= 1
    x0 = RNG.standard_normal((2, 10_000))
    got = compile_plan(plan)(x0)
    for p in range(2):
        np.testing.assert_allclose(got[p], st.math.unsorted_segment_sum(
            st.constant(x0[p]) * 2.0, ids, 100).numpy(), rtol=1e-13, atol=1e-13)


def test_small_irregular_ids_in_a_loop_plan():
    ids = np.array([3, 0, 3, 1, 0, 2, 3, 1, 0, 2, 1, 3] * 7)
    x0 = RNG.standard_normal(len(ids))
    for name in ("unsorted_segment_sum", "unsorted_segment_max"):
        fn = getattr(st.math, name)
        _, got = _plan_value(lambda x: fn(x * 1.0, ids, 5), x0)
        np.testing.assert_allclose(got, fn(st.constant(x0), ids, 5).numpy(), rtol=1e-14)


# -- a reaction network's sparse Jacobian ------------------------------------------------------


def _network(ns: int, nr: int, seed: int = 3):
    rng = np.random.default_rng(seed)
    a, b, c = (rng.integers(0, ns, nr) for _ in range(3))
    k = rng.uniform(0.5, 2.0, nr)
    stoich = np.concatenate([-np.ones(nr), -np.ones(nr), np.ones(nr)])
    reaction = np.tile(np.arange(nr), 3)
    species = np.concatenate([a, b, c])

    def f(conc):
        r = st.constant(k) * st.gather(conc, a) * st.gather(conc, b)
        return st.math.unsorted_segment_sum(st.constant(stoich) * st.gather(r, reaction),
                                            species, ns)

    def jac(x):  # by hand: d(k c_a c_b)/dc = k (c_b e_a + c_a e_b), spread by stoichiometry
        out = np.zeros((ns, ns))
        for j in range(nr):
            for s, sgn in ((a[j], -1.0), (b[j], -1.0), (c[j], 1.0)):
                out[s, a[j]] += sgn * k[j] * x[b[j]]
                out[s, b[j]] += sgn * k[j] * x[a[j]]
        return out

    return f, jac


def test_the_sparse_jacobian_of_a_reaction_network_matches_the_dense_one():
    ns, nr = 12, 20
    f, jac = _network(ns, nr)
    x0 = RNG.uniform(0.1, 1.0, ns)
    sig = [st.TensorSpec((ns,))]
    sparse = st.jacobian(f, sparse=True, input_signature=sig)(x0)
    dense = np.asarray(st.jacobian(f, input_signature=sig)(x0))
    got = sparse.to_scipy().toarray()
    np.testing.assert_allclose(got, jac(x0), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(dense, jac(x0), rtol=1e-13, atol=1e-15)
    # the pattern: structurally non-zero entries only, a superset of the numeric ones
    pattern = np.zeros((ns, ns), dtype=bool)
    pattern[tuple(np.asarray(sparse.indices).T)] = True
    assert (pattern | (jac(x0) == 0)).all() and pattern.sum() < ns * ns
