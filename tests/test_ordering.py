"""Scans (``cumsum``, ``cumprod``): values against numpy and TensorFlow's rows, gradients
against central finite differences and hand formulas (exact at zeros of ``cumprod``), second
derivatives, batching, sparsity and loop forms against eager values."""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st
from symtape.codegen import compile_plan
from symtape.compile import planner as loopnest
from symtape.core.primitive import OPS

FLAGS = [(e, r) for e in (False, True) for r in (False, True)]


def _np_scan(x, kind, axis, exclusive, reverse):
    fn = np.cumsum if kind == "sum" else np.cumprod
    x = np.flip(x, axis) if reverse else x
    out = fn(x, axis=axis)
    if exclusive:
        out = np.moveaxis(out, axis, -1)
        out = np.concatenate([np.full(out.shape[:-1] + (1,), 0.0 if kind == "sum" else 1.0),
                              out[..., :-1]], axis=-1)
        out = np.moveaxis(out, -1, axis)
    return np.flip(out, axis) if reverse else out


def _fd_grad(f, x, h=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


# -- values -----------------------------------------------------------------------------------


@pytest.mark.parametrize("exclusive, reverse", FLAGS)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_values_equal_numpys(axis, exclusive, reverse):
    x = np.random.default_rng(0).normal(size=(3, 4, 5))
    for kind, fn in (("sum", st.math.cumsum), ("prod", st.math.cumprod)):
        got = fn(x, axis=axis, exclusive=exclusive, reverse=reverse).numpy()
        np.testing.assert_allclose(got, _np_scan(x, kind, axis % 3, exclusive, reverse),
                                   rtol=1e-14, atol=1e-14)


def test_tensorflows_rows():
    # tf.cumsum docs: [a, b, c] -> exclusive [0, a, a + b], reverse [a + b + c, b + c, c],
    # both [b + c, c, 0]
    x = [1.0, 2.0, 4.0]
    assert st.cumsum(x).numpy().tolist() == [1.0, 3.0, 7.0]
    assert st.cumsum(x, exclusive=True).numpy().tolist() == [0.0, 1.0, 3.0]
    assert st.cumsum(x, reverse=True).numpy().tolist() == [7.0, 6.0, 4.0]
    assert st.cumsum(x, exclusive=True, reverse=True).numpy().tolist() == [6.0, 4.0, 0.0]
    assert st.math.cumprod(x, exclusive=True, reverse=True).numpy().tolist() == [8.0, 4.0, 1.0]
    ints = st.cumsum(st.constant([1, 2, 3], dtype=st.int32))
    assert ints.dtype == st.int32 and ints.numpy().tolist() == [1, 3, 6]


def test_bad_arguments_name_the_argument():
    with pytest.raises(Exception, match="axis 2 is out of range"):
        st.cumsum(np.ones((2, 3)), axis=2)
    with pytest.raises(Exception, match="scalar"):
        st.math.cumprod(1.0)
    with pytest.raises(Exception, match="exclusive must be a bool"):
        st.cumsum([1.0], exclusive="yes")
    with pytest.raises(Exception, match="axis must be an int"):
        st.cumsum([1.0], axis=0.5)


# -- gradients --------------------------------------------------------------------------------


def _grad(fn, x, w, **kw):
    v = st.Variable(x)
    with st.GradientTape() as t:
        y = st.reduce_sum(fn(v, **kw) * w)
    return t.gradient(y, v).numpy()


@pytest.mark.parametrize("exclusive, reverse", FLAGS)
def test_gradients_equal_finite_differences(exclusive, reverse):
    rng = np.random.default_rng(1)
    x = rng.uniform(0.5, 1.5, size=(3, 5)) * rng.choice([-1.0, 1.0], size=(3, 5))
    w = rng.normal(size=(3, 5))
    for kind, fn in (("sum", st.math.cumsum), ("prod", st.math.cumprod)):
        kw = dict(axis=1, exclusive=exclusive, reverse=reverse)
        got = _grad(fn, x, w, **kw)
        want = _fd_grad(lambda z: np.sum(_np_scan(z, kind, 1, exclusive, reverse) * w), x)
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("exclusive, reverse", FLAGS)
def test_cumprod_gradient_is_exact_at_zeros(exclusive, reverse):
    """d out_i / d x_j = product of x_k over the scanned k other than j (a hand formula
    with no division), where TensorFlow's division by x gives nan."""
    x = np.array([1.5, 0.0, 2.0, 0.0, 3.0, -1.0])
    w = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    n = len(x)
    want = np.zeros(n)
    for i in range(n):
        terms = [k for k in range(n) if (k >= i if reverse else k <= i) and
                 not (exclusive and k == i)]
        for j in terms:
            want[j] += w[i] * np.prod([x[k] for k in terms if k != j])
    got = _grad(st.math.cumprod, x, w, exclusive=exclusive, reverse=reverse)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", ["sum", "prod"])
def test_second_derivatives_equal_finite_differences_of_the_gradient(kind):
    fn = st.math.cumsum if kind == "sum" else st.math.cumprod
    rng = np.random.default_rng(2)
    x = rng.uniform(0.5, 1.5, size=4)
    w = rng.normal(size=4)

    def hess(x0):
        v = st.Variable(x0)
        with st.GradientTape() as outer:
            with st.GradientTape() as inner:
                y = st.reduce_sum(fn(v, reverse=True) ** 2 * w)
            g = inner.gradient(y, v)
        return outer.jacobian(g, v).numpy()

    def grad(z):
        return _grad(lambda v: fn(v, reverse=True) ** 2, z, w)

    want = np.stack([(grad(x + h) - grad(x - h)) / 2e-6 for h in np.eye(4) * 1e-6], axis=1)
    np.testing.assert_allclose(hess(x), want, rtol=1e-6, atol=1e-7)
    # and at a zero of cumprod: exact against sympy-free hand formula of d2(prod)/dxj dxk
    if kind == "prod":
        x0 = np.array([2.0, 0.0, 3.0])
        v = st.Variable(x0)
        with st.GradientTape() as outer:
            with st.GradientTape() as inner:
                y = st.reduce_sum(st.math.cumprod(v)[2:])  # x0 * x1 * x2
            g = inner.gradient(y, v)
        h = outer.jacobian(g, v).numpy()
        np.testing.assert_array_equal(h, [[0.0, 3.0, 0.0], [3.0, 0.0, 2.0], [0.0, 2.0, 0.0]])


# -- batching, sparsity -----------------------------------------------------------------------


def test_batching_equals_row_by_row():
    x = np.random.default_rng(3).normal(size=(4, 3, 5))
    for name in ("cumsum", "cumprod"):
        prim = OPS[name]
        params = dict(axis=1, exclusive=True, reverse=True)
        out = prim.batch([st.constant(x)], [True], params, (3, 5))
        for i in range(4):
            np.testing.assert_allclose(out.numpy()[i], prim.bind(x[i], **params).numpy(),
                                       rtol=1e-15)


def test_sparsity_is_triangular_along_the_axis():
    deps = np.array([[1 << (3 * i + j) for j in range(3)] for i in range(2)], dtype=object)
    got = OPS["cumsum"].dependencies([deps], dict(axis=1, exclusive=False, reverse=False),
                                     (2, 3))
    assert got[0].tolist() == [1, 3, 7] and got[1].tolist() == [8, 24, 56]
    got = OPS["cumprod"].dependencies([deps], dict(axis=0, exclusive=True, reverse=True),
                                      (2, 3))
    assert got[0].tolist() == [8, 16, 32] and got[1].tolist() == [0, 0, 0]


# -- compiled ---------------------------------------------------------------------------------


@pytest.mark.parametrize("shape, axis", [((5,), 0), ((3000,), 0), ((40, 70), 0), ((4, 6, 300), 1)])
def test_loop_form_equals_eager_values(shape, axis):
    sym = st.symbol("x", shape=shape)
    outs = [fn(sym, axis=axis, exclusive=e, reverse=r) for e, r in FLAGS
            for fn in (st.math.cumsum, lambda v, **kw: st.math.cumprod(v * 0.1 + 1.0, **kw))]
    plan = loopnest.plan_loops([o._node for o in outs], [sym._node])
    f = compile_plan(plan)
    x = np.random.default_rng(4).normal(size=shape)
    got = f(x[None])
    for (e, r), (gs, gp) in zip(FLAGS, zip(got[0::2], got[1::2])):
        np.testing.assert_allclose(gs[0], _np_scan(x, "sum", axis, e, r), rtol=1e-12,
                                   atol=1e-9)
        np.testing.assert_allclose(gp[0], _np_scan(x * 0.1 + 1.0, "prod", axis, e, r),
                                   rtol=1e-12)


def test_compiled_function_and_gradient_equal_eager():
    w = np.random.default_rng(5).normal(size=2000)

    def loss(v):
        return st.reduce_sum(st.math.cumprod(v, reverse=True) * w) + \
            st.reduce_sum(st.cumsum(v * v, exclusive=True) * w)

    def grad(v):
        with st.GradientTape() as t:
            t.watch(v)
            y = loss(v)
        return t.gradient(y, v)

    x = 1.0 + 0.001 * np.random.default_rng(6).normal(size=2000)
    x[7] = 0.0
    f = st.function(grad)
    np.testing.assert_allclose(f(x).numpy(), grad(st.constant(x)).numpy(), rtol=1e-9,
                               atol=1e-9)


# -- sort, argsort, top_k, searchsorted, unique -----------------------------------------------


def _desc_order(x, axis):
    """Stable descending order (ties by index), from numpy's stable ascending sort of the
    negated keys (floats without nan)."""
    return np.argsort(-x, axis=axis, kind="stable")


@pytest.mark.parametrize("axis", [0, -1])
def test_sort_and_argsort_equal_numpys(axis):
    x = np.random.default_rng(7).integers(0, 4, size=(5, 6)).astype(float)  # many ties
    np.testing.assert_array_equal(st.sort(x, axis=axis).numpy(), np.sort(x, axis=axis))
    np.testing.assert_array_equal(st.sort(x, axis=axis, direction="DESCENDING").numpy(),
                                  -np.sort(-x, axis=axis))
    np.testing.assert_array_equal(st.argsort(x, axis=axis).numpy(),
                                  np.argsort(x, axis=axis, kind="stable"))
    np.testing.assert_array_equal(st.argsort(x, axis=axis, direction="DESCENDING").numpy(),
                                  _desc_order(x, axis))
    assert st.argsort(x).dtype == st.int32
    ints = st.sort(st.constant([3, 1, 2], dtype=st.int32))
    assert ints.dtype == st.int32 and ints.numpy().tolist() == [1, 2, 3]


def test_tensorflows_rows_of_orderings():
    # tf.sort / tf.argsort docs; ties keep index order in both directions
    assert st.sort([1.0, 10.0, 26.9, 2.8, 166.32, 62.3]).numpy().tolist() == \
        [1.0, 2.8, 10.0, 26.9, 62.3, 166.32]
    assert st.argsort([1.0, 10.0, 26.9, 2.8, 166.32, 62.3]).numpy().tolist() == \
        [0, 3, 1, 2, 5, 4]
    assert st.argsort([2.0, 1.0, 2.0, 1.0], direction="DESCENDING").numpy().tolist() == \
        [0, 2, 1, 3]
    v, i = st.math.top_k([[1.0, 5.0, 5.0, 3.0], [9.0, 0.0, 9.0, 9.0]], k=2)
    assert v.numpy().tolist() == [[5.0, 5.0], [9.0, 9.0]]
    assert i.numpy().tolist() == [[1, 2], [0, 2]]
    assert st.nn.top_k([1.0, 2.0], k=0)[0].shape == (0,)
    # tf.searchsorted docs: sorted rows and values per row
    seq = [[0.0, 3.0, 9.0, 9.0, 10.0], [1.0, 2.0, 3.0, 4.0, 5.0]]
    vals = [[2.0, 4.0, 9.0], [0.0, 2.0, 6.0]]
    assert st.searchsorted(seq, vals).numpy().tolist() == [[1, 2, 2], [0, 1, 5]]
    assert st.searchsorted(seq, vals, side="right").numpy().tolist() == [[1, 2, 4], [0, 2, 5]]
    assert st.searchsorted(seq, vals, out_type=st.int64).dtype == st.int64
    # tf.unique docs
    y, idx = st.unique([1, 1, 2, 4, 4, 4, 7, 8, 8])
    assert y.numpy().tolist() == [1, 2, 4, 7, 8]
    assert idx.numpy().tolist() == [0, 0, 1, 2, 2, 2, 3, 4, 4]
    y, idx = st.unique([3.0, 1.0, 3.0, 2.0])
    assert y.numpy().tolist() == [3.0, 1.0, 2.0] and idx.numpy().tolist() == [0, 1, 0, 2]


def test_orderings_name_bad_arguments():
    with pytest.raises(Exception, match="direction must be"):
        st.sort([1.0], direction="UP")
    with pytest.raises(Exception, match="k must be an int in"):
        st.math.top_k([1.0, 2.0], k=3)
    with pytest.raises(Exception, match="side must be"):
        st.searchsorted([1.0], [1.0], side="middle")
    with pytest.raises(Exception, match="same leading axes"):
        st.searchsorted([[1.0]], [1.0, 2.0])
    with pytest.raises(Exception, match="must be 1-D"):
        st.unique([[1.0]])
    with pytest.raises(Exception, match="axis 1 is out of range"):
        st.argsort([1.0], axis=1)


def test_unique_refuses_traced_tensors():
    f = st.function(lambda x: st.unique(x)[0])
    with pytest.raises(Exception, match="size of its result depends on the values"):
        f(np.array([1.0, 2.0, 1.0]))


@pytest.mark.parametrize("direction", ["ASCENDING", "DESCENDING"])
def test_sort_and_top_k_gradients_go_back_through_the_permutation(direction):
    rng = np.random.default_rng(8)
    x = rng.permutation(12).astype(float).reshape(3, 4) + 0.25  # no ties
    w = rng.normal(size=(3, 4))
    for axis in (0, 1):
        got = _grad(st.sort, x, w, axis=axis, direction=direction)
        ref = np.sort(x, axis=axis) if direction == "ASCENDING" else -np.sort(-x, axis=axis)
        want = _fd_grad(lambda z: np.sum((np.sort(z, axis=axis) if direction == "ASCENDING"
                                          else -np.sort(-z, axis=axis)) * w), x)
        np.testing.assert_allclose(got, want, atol=1e-8)
        assert ref.shape == x.shape
    got = _grad(lambda v: st.math.top_k(v, k=2)[0], x, w[:, :2])
    want = _fd_grad(lambda z: np.sum(-np.sort(-z, axis=1)[:, :2] * w[:, :2]), x)
    np.testing.assert_allclose(got, want, atol=1e-8)


def test_gradient_at_ties_follows_the_stable_permutation():
    """Ties: each place gets the cotangent of the one sorted place it went to (TensorFlow's
    top_k gradient scatters by its indices, lower index first)."""
    x = np.array([2.0, 1.0, 2.0, 2.0])
    w = np.array([10.0, 20.0, 30.0, 40.0])
    assert _grad(st.sort, x, w).tolist() == [20.0, 10.0, 30.0, 40.0]
    assert _grad(st.sort, x, w, direction="DESCENDING").tolist() == [10.0, 40.0, 20.0, 30.0]
    assert _grad(lambda v: st.math.top_k(v, k=2)[0], x, w[:2]).tolist() == \
        [10.0, 0.0, 20.0, 0.0]


def test_second_derivative_through_sort():
    x = np.array([0.3, -1.2, 2.0])
    v = st.Variable(x)
    with st.GradientTape() as outer:
        with st.GradientTape() as inner:
            y = st.reduce_sum(st.sort(v) ** 3 * st.constant([1.0, 2.0, 3.0]))
        g = inner.gradient(y, v)
    h = outer.jacobian(g, v).numpy()
    # sorted order: x1, x0, x2 with weights 1, 2, 3: d2/dxj2 = 6 * w_rank(j) * x_j
    np.testing.assert_allclose(h, np.diag([6 * 2 * 0.3, 6 * 1 * -1.2, 6 * 3 * 2.0]),
                               atol=1e-12)


def test_ordering_batch_rules_equal_row_by_row():
    x = np.random.default_rng(9).integers(0, 3, size=(4, 5)).astype(float)
    for name, params in (("argsort", dict(axis=0, descending=True)),):
        out = OPS[name].batch([st.constant(x)], [True], params, (5,)).numpy()
        for i in range(4):
            np.testing.assert_array_equal(out[i], OPS[name].bind(x[i], **params).numpy())
    out = OPS["sort_permute"].batch([st.constant(x), st.constant(x)], [True, True],
                                    dict(axis=0, descending=False, inverse=False), (5,))
    np.testing.assert_array_equal(out.numpy(), np.sort(x, axis=1))
    seq = np.array([0.0, 1.0, 2.0])
    out = OPS["searchsorted"].batch([st.constant(seq), st.constant(x)], [False, True],
                                    dict(side="right", out_type="int32", axis=0), (5,))
    np.testing.assert_array_equal(out.numpy(), np.searchsorted(seq, x, side="right"))


def test_sort_element_view_orders_values_and_places_nan_as_eager():
    """The sorted values' formulas pick each place's value by its rank (a min/max network
    would spread a nan to every place); compiled code equals eager at nan and inf."""
    s = st.symbol("s", shape=(3,))
    exprs = st.sort(s, direction="DESCENDING").expr
    for vals in ([1.0, 3.0, 2.0], [2.0, 2.0, -1.0], [0.0, 0.0, 0.0]):
        sub = dict(zip(sorted(exprs[0].free_symbols, key=str), vals))
        got = [float(e.subs(sub)) for e in exprs]
        assert got == sorted(vals, reverse=True)
    x = np.array([1.7, np.nan, 1.1, np.inf, np.nan, 1.1])
    for d in ("ASCENDING", "DESCENDING"):
        f = st.function(lambda v: st.sort(v, direction=d))
        np.testing.assert_array_equal(np.asarray(f(x)), st.sort(x, direction=d).numpy())
    np.testing.assert_array_equal(st.sort(x).numpy(), np.sort(x))


def test_compiled_orderings_equal_eager_small_and_large():
    def fn(v):
        vals, idx = st.math.top_k(v, k=3)
        return st.reduce_sum(st.sort(v) * st.constant([1.0, 2.0, 3.0, 4.0, 5.0])) + \
            st.reduce_sum(vals) + st.cast(idx[0], st.float64) + \
            st.cast(st.searchsorted(st.constant([0.0, 0.5]), v[:2])[1], st.float64)

    def grad(v):
        with st.GradientTape() as t:
            t.watch(v)
            y = fn(v)
        return y, t.gradient(y, v)

    f = st.function(grad)
    for x in (np.array([0.3, -1.0, 2.0, 0.7, 0.1]), np.array([1.0, 1.0, 0.0, 1.0, -2.0])):
        got, want = f(x), grad(st.constant(x))
        np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-14)
        np.testing.assert_allclose(got[1].numpy(), want[1].numpy(), rtol=1e-14)
    big = st.function(lambda v: st.sort(v) * 2.0)
    x = np.random.default_rng(11).normal(size=5000)
    np.testing.assert_array_equal(np.asarray(big(x)), np.sort(x) * 2.0)
    edges = np.sort(x)[::7]
    for side in ("left", "right"):  # (one bisecting block: a line of 715 sorted elements)
        far = st.function(lambda v: st.cast(st.searchsorted(st.constant(edges), v,
                                                            side=side), st.float64))
        probe = np.concatenate([x, edges[:50], [np.nan, np.inf, -np.inf]])
        np.testing.assert_array_equal(np.asarray(far(probe)), st.searchsorted(
            edges, probe, side=side).numpy())


@pytest.mark.parametrize("side", ["left", "right"])
def test_long_searchsorted_bisects_in_a_loop_over_points(monkeypatch, side):
    """Sorted lines of 40 and 30 values each, per point of a plan over points (and constant
    lines): one block whose body bisects each line (a native binary search), equal to
    eager values (ties, nan, +-inf among the values)."""
    from symtape.codegen.loops import LoopPlan
    from symtape.codegen.routines import Routine
    from symtape.compile import strategy

    monkeypatch.setattr(strategy, "LOOP_MIN_ATOMS", 0)
    monkeypatch.setattr(strategy, "POINT_LOOP_MIN_ATOMS", 0)
    rng = np.random.default_rng(4)
    s = np.sort(rng.normal(size=(6, 2, 40)), axis=-1)
    v = rng.normal(size=(6, 2, 30))
    v[0, 0, :3] = [np.nan, np.inf, -np.inf]
    v[1, 1, :5] = s[1, 1, :5]
    both = st.function(lambda a, b: st.searchsorted(a, b, side=side),
                       input_signature=[st.TensorSpec((None, 2, 40)),
                                        st.TensorSpec((None, 2, 30))])
    lines = np.broadcast_to(s[1], s.shape)
    shared = st.function(lambda b: st.searchsorted(st.constant(lines), b, side=side),
                         input_signature=[st.TensorSpec((6, 2, 30))])
    np.testing.assert_array_equal(np.asarray(both(s, v)),
                                  st.searchsorted(s, v, side=side).numpy())
    np.testing.assert_array_equal(np.asarray(shared(v)),
                                  st.searchsorted(lines, v, side=side).numpy())
    plan = both.get_concrete_function(s, v).plan
    assert isinstance(plan, LoopPlan)
    kind = "lower_bound" if side == "left" else "upper_bound"
    assert [b.body.kind for b in plan.blocks if isinstance(b.body, Routine)] == [kind]


def test_long_searchsorted_matches_numpy_on_sorted_lines_with_nan_keys():
    """Lines of 5,000 sorted keys with nans last and runs of ties, 4,000 values (nan, +-inf,
    the ties): the compiled bisection equals numpy's search, as eager values do (but for a
    nan value on the left, placed first: TensorFlow's lower bound), in log2(n) steps."""
    rng = np.random.default_rng(0)
    s = np.sort(rng.normal(size=(3, 5000)), axis=-1)
    s[0, -3:] = np.nan
    s[1, 100:200] = s[1, 100]
    v = rng.normal(size=(3, 4000))
    v[0, :4] = [np.nan, np.inf, -np.inf, s[0, 7]]
    v[1, :50] = s[1, 100]
    for side in ("left", "right"):
        f = st.function(lambda a, b: st.searchsorted(a, b, side=side))
        got = np.asarray(f(s, v))
        want = np.stack([np.searchsorted(s[i], v[i], side=side) for i in range(3)])
        if side == "left":
            want[np.isnan(v)] = 0
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, st.searchsorted(s, v, side=side).numpy())


@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("direction", ["ASCENDING", "DESCENDING"])
def test_long_lines_sort_in_loops_bit_equal_to_eager(axis, direction):
    """Lines of 300 (ties, nan, -inf, a line of nans) sort by a native merge sort per line
    in a loop plan over points: sort and argsort equal the eager values exactly, nan last
    ascending and first descending, ties in index order."""
    rng = np.random.default_rng(12)
    x0 = rng.integers(0, 50, (3, 7, 300)).astype(float)
    x0[0, 0, [5, 17]] = np.nan
    x0[1, 2, :] = np.nan
    x0[2, 3, 4] = -np.inf
    x = st.symbol("x", shape=x0.shape[1:])
    outs = [st.sort(x, axis=axis, direction=direction),
            st.argsort(x, axis=axis, direction=direction)]
    plan = loopnest.plan_loops([o._node for o in outs], [x._node], points=4)
    assert [type(b.body).__name__ for b in plan.blocks] == ["Routine", "Routine"]
    got = compile_plan(plan)(x0)
    for p in range(3):
        c = st.constant(x0[p])
        np.testing.assert_array_equal(got[0][p], st.sort(c, axis=axis,
                                                         direction=direction).numpy())
        np.testing.assert_array_equal(got[1][p], st.argsort(c, axis=axis,
                                                            direction=direction).numpy())


def test_the_gradient_of_a_long_sort_puts_back_in_loops():
    """d(sum(sort(x) * w))/dx is w put back through the sorting permutation (the inverse
    routine): 2,000 elements, compiled, against numpy's stable argsort; top_k's values too."""
    x = st.symbol("x", shape=(2000,))
    w = np.arange(2000.0)
    with st.GradientTape() as t:
        t.watch(x)
        y = st.reduce_sum(st.sort(x) * w) + st.reduce_sum(st.math.top_k(x, k=5)[0])
    g = t.gradient(y, x)
    plan = loopnest.plan_loops([g._node], [x._node])
    v = np.random.default_rng(13).normal(size=(2, 2000))
    got = compile_plan(plan)(v)
    for p in range(2):
        want = np.empty(2000)
        want[np.argsort(v[p], kind="stable")] = w
        want[np.argsort(-v[p], kind="stable")[:5]] += 1.0
        np.testing.assert_array_equal(got[p], want)


def test_eager_sort_of_a_hundred_thousand_is_numpy_fast():
    import time
    x = np.random.default_rng(10).normal(size=100_000)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        out = st.sort(x)
        times.append(time.perf_counter() - t0)
    np.testing.assert_array_equal(out.numpy(), np.sort(x))
    assert min(times) < 0.5, times


def test_hessian_transform_and_sparse_jacobian():
    """``st.hessian`` at a zero of cumprod against the hand formula of
    ``f = x0 + 2 x0 x1 + 3 x0 x1 x2 + sum(x**3)``; the Jacobian of cumsum is lower triangular
    (its sparsity pattern, not dense)."""
    def f(v):
        return st.reduce_sum(st.math.cumprod(v) * st.constant([1.0, 2.0, 3.0])) + \
            st.reduce_sum(st.sort(v) ** 3)

    x = np.array([2.0, 0.0, 3.0])
    want = [[6 * 2.0, 2 + 3 * 3.0, 3 * 0.0], [2 + 3 * 3.0, 0.0, 3 * 2.0],
            [3 * 0.0, 3 * 2.0, 6 * 3.0]]
    np.testing.assert_allclose(st.hessian(f)(x), want, atol=1e-12)
    jac = st.jacobian(lambda v: st.cumsum(v), sparse=True)(np.arange(5.0))
    assert sorted(map(tuple, jac.indices.tolist())) == [(i, j) for i in range(5)
                                                        for j in range(i + 1)]


def test_searchsorted_places_nan_as_tensorflows_bounds_do():
    """TensorFlow's lower bound puts nan first (nothing is below it), its upper bound last;
    eager values, formulas and compiled code agree."""
    seq = np.array([-1.0, 0.0, 1.0])
    v = np.array([np.nan, 0.5])
    for side, want in (("left", [0, 2]), ("right", [3, 2])):
        assert st.searchsorted(seq, v, side=side).numpy().tolist() == want
        f = st.function(lambda s, x: st.searchsorted(s, x, side=side))
        assert np.asarray(f(seq, v)).tolist() == want
