"""No ``where`` trap: the derivative of ``where(c, f(x), g(x))`` is exactly
``where(c, f'(x), g'(x))`` at every order, in eager values, formulas and compiled code, for
every op whose own partial is infinite or nan somewhere. The reference is exact math: SymPy's
derivative of the selected branch at the point, and 0 where the branch is not selected
(TensorFlow and JAX give nan there, 0 * inf)."""

import math

import numpy as np
import pytest
import sympy as sp

import symtape as st

X = sp.Symbol("x", real=True)

# name: (symtape function, SymPy expression, condition on a float, symtape condition, points)
CASES = {
    "sqrt": (st.sqrt, sp.sqrt(X), lambda v: v > 0, lambda x: x > 0, [-2, -0.5, 0, 0.25, 4]),
    "log": (st.log, sp.log(X), lambda v: v > 0, lambda x: x > 0, [-1, 0, 0.5, 3]),
    "recip": (lambda x: 1 / x, 1 / X, lambda v: v != 0, lambda x: x != 0, [-2, 0, 0.5]),
    "half_power": (lambda x: x ** 0.5, X ** sp.Rational(1, 2), lambda v: v > 0,
                   lambda x: x > 0, [-1, 0, 2]),
    "rsqrt": (st.math.rsqrt, 1 / sp.sqrt(X), lambda v: v > 0, lambda x: x > 0, [-1, 0, 2]),
    "acos": (st.acos, sp.acos(X), lambda v: abs(v) < 1, lambda x: st.abs(x) < 1,
             [-2, -1, 0, 0.5, 1, 3]),
    "asin": (st.asin, sp.asin(X), lambda v: abs(v) < 1, lambda x: st.abs(x) < 1,
             [-1, 0.25, 1, 2]),
    "atanh": (st.atanh, sp.atanh(X), lambda v: abs(v) < 1, lambda x: st.abs(x) < 1,
              [-1, -0.5, 1, 4]),
    "acosh": (st.acosh, sp.acosh(X), lambda v: v > 1, lambda x: x > 1, [0, 1, 2.5]),
    "pow_1.5": (lambda x: x ** 1.5, X ** sp.Rational(3, 2), lambda v: v > 0, lambda x: x > 0,
                [-1, 0, 2]),
    "log1p": (st.math.log1p, sp.log(1 + X), lambda v: v > -1, lambda x: x > -1, [-2, -1, 0, 1]),
}


def _reference(expr, cond, points, order):
    d = sp.diff(expr, X, order)
    return [float(d.subs(X, sp.nsimplify(p))) if cond(p) else 0.0 for p in points]


def _eager(fn, scond, points, order):
    x = st.Variable(np.array(points, dtype=float), name="x")
    tapes = [st.GradientTape() for _ in range(order)]
    for t in tapes:
        t.__enter__()
    y = st.where(scond(x), fn(x), 0.0)
    for k in reversed(range(order)):
        y = tapes[k].gradient(st.reduce_sum(y), x)
        tapes[k].__exit__(None, None, None)
    return y.numpy()


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_and_compiled_are_the_selected_branch(name, order):
    fn, expr, cond, scond, points = CASES[name]
    ref = _reference(expr, cond, points, order)
    eager = _eager(fn, scond, points, order)
    compiled = st.derivative(lambda x: st.where(scond(x), fn(x), 0.0), order=order,
                             input_signature=[st.TensorSpec(())])(np.array(points, float))
    for got in (eager, compiled):
        assert not np.isnan(got).any(), (name, order, got)
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=0)
        outside = [i for i, p in enumerate(points) if not cond(p)]
        assert all(got[i] == 0.0 and not math.copysign(1, got[i]) < 0 for i in outside)


@pytest.mark.parametrize("name", sorted(CASES))
def test_formula_is_the_selected_branch(name):
    fn, expr, cond, scond, points = CASES[name]
    x = st.symbol("x")
    with st.GradientTape() as t2:
        with st.GradientTape() as t1:
            y = st.where(scond(x), fn(x), 0.0)
        g = t1.gradient(y, x)
    h = t2.gradient(g, x)
    sym = x.symbols[()]  # (SymPy's own symbol, as formulas write it)
    for order, tensor in ((1, g), (2, h)):
        formula = tensor.formula().subs(sym, X)
        for p, r in zip(points, _reference(expr, cond, points, order)):
            value = complex(formula.subs(X, sp.nsimplify(p)).evalf())
            assert abs(value.imag) == 0 and math.isclose(value.real, r, rel_tol=1e-12), \
                (name, order, p, formula)


def test_both_branches_singular_somewhere():
    # where(x > 0, sqrt(x), log(-x)): each branch's partial is infinite where it is not used
    points = np.array([-2.0, -0.5, 0.5, 4.0])
    x = st.Variable(points)
    with st.GradientTape() as t2:
        with st.GradientTape() as t1:
            y = st.where(x > 0, st.sqrt(x), st.log(-x))
        g = t1.gradient(y, x)
    h = t2.gradient(g, x)
    ref_g = np.where(points > 0, 0.5 / np.sqrt(np.abs(points)), 1 / points)
    ref_h = np.where(points > 0, -0.25 * np.abs(points) ** -1.5, -1 / points ** 2)
    np.testing.assert_allclose(g.numpy(), ref_g, rtol=1e-15)
    np.testing.assert_allclose(h.numpy(), ref_h, rtol=1e-15)
    H = st.hessian(lambda v: st.reduce_sum(st.where(v > 0, st.sqrt(v), st.log(-v))),
                   input_signature=[st.TensorSpec((4,))])(points)
    np.testing.assert_allclose(np.diag(H), ref_h, rtol=1e-15)


def test_pow_exponent_gradient_where_the_base_is_not_positive():
    # d/dy of where(x > 0, x**y, 0) is x**y log(x) where x > 0, exactly 0 elsewhere
    x = st.Variable([-1.0, 0.0, 2.0])
    y = st.Variable([0.5, 0.5, 3.0])
    with st.GradientTape() as t:
        z = st.where(x > 0, x ** y, 0.0)
    gx, gy = t.gradient(z, [x, y])
    np.testing.assert_array_equal(gx.numpy(), [0.0, 0.0, 12.0])
    np.testing.assert_allclose(gy.numpy(), [0.0, 0.0, 8 * math.log(2)], rtol=1e-15)


def test_tensorflow_single_where_pattern_needs_no_second_where():
    # the JAX/TF "double where" workaround: where(x > 0, sqrt(where(x > 0, x, 1)), 0); the
    # single where gives the same derivative here
    x = st.Variable([-1.0, 0.0, 4.0])
    with st.GradientTape(persistent=True) as t:
        single = st.where(x > 0, st.sqrt(x), 0.0)
        double = st.where(x > 0, st.sqrt(st.where(x > 0, x, 1.0)), 0.0)
    np.testing.assert_array_equal(t.gradient(single, x).numpy(), t.gradient(double, x).numpy())


def test_wheres_on_different_conditions_sum_exactly():
    # sqrt(x) used by three wheres: its cotangent is a sum of selects on x > 0, 1, 2, and
    # no branch is taken at x <= 0, where sqrt' is infinite
    points = np.array([-1.0, 0.0, 0.5, 1.5, 4.0])
    weights = (1.0, 1.0, 3.0)

    def f(v):
        s = st.sqrt(v)
        return sum(w * st.where(v > k, s, 0.0) for k, w in enumerate(weights))

    x = st.Variable(points)
    with st.GradientTape() as t2:
        with st.GradientTape() as t1:
            y = f(x)
        g = t1.gradient(y, x)
    h = t2.gradient(g, x)
    scale = sum(np.where(points > k, w, 0.0) for k, w in enumerate(weights))
    with np.errstate(all="ignore"):
        ref_g = np.where(scale > 0, scale * 0.5 / np.sqrt(np.abs(points)), 0.0)
        ref_h = np.where(scale > 0, -scale * 0.25 * np.abs(points) ** -1.5, 0.0)
    np.testing.assert_allclose(g.numpy(), ref_g, rtol=1e-15)
    np.testing.assert_allclose(h.numpy(), ref_h, rtol=1e-15)
    # Taylor mode (st.derivative of a scalar) sums in another order: equal to rounding,
    # with the same exact zeros where no branch is taken
    d2 = st.derivative(f, order=2, input_signature=[st.TensorSpec(())])(points)
    np.testing.assert_allclose(d2, h.numpy(), rtol=1e-15, atol=0)


def test_many_hinges_stay_exact_and_small():
    # a hinge basis sum_k where(x > k/10, log(x - k/10 + 1) , 0): 30 selects on one tensor
    knots = np.arange(30) / 10.0
    x = st.symbol("x")
    with st.GradientTape() as t:
        y = sum(st.where(x > k, st.log(x - k + 1.0) * st.sqrt(x), 0.0) for k in knots)
    g = t.gradient(y, x)
    from symtape.element import graph
    assert len(graph.reachable([g._atoms[()]])) < 20_000
    f = st.compile(g, [x])
    pts = np.array([-2.0, -0.0, 0.05, 1.23, 5.0])
    got = f(pts)
    with np.errstate(all="ignore"):
        ref = sum(np.where(pts > k, 1 / (pts - k + 1) * np.sqrt(np.abs(pts))
                           + np.log(np.abs(pts - k + 1)) * 0.5 / np.sqrt(np.abs(pts)), 0.0)
                  for k in knots)
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    assert got[0] == 0.0 and got[1] == 0.0


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_large_tensors_fold_the_select_too(name, order):
    """Above the element level (here 3,000 elements), the unselected branch's zero cotangent
    folds inside the fused templates: the same values, no nan."""
    fn, expr, cond, scond, points = CASES[name]
    ref = _reference(expr, cond, points, order)
    big = np.resize(np.array(points, dtype=float), 3000)
    eager = _eager(fn, scond, big, order)
    np.testing.assert_allclose(eager, np.resize(np.array(ref), 3000), rtol=1e-12, atol=0)


# -- large tensors: the zeros of moves (slices, gathers, reshapes, broadcasts, transposes,
# concatenations, scatters) stay exact in eager values, as in compiled code -----------------

_MOVES = {
    "slice": lambda x, n: st.sqrt(x)[0],
    "reshape": lambda x, n: st.reduce_sum(st.where(x > 1, st.reshape(st.log(x), (-1,)), x)),
    "broadcast": lambda x, n: st.reduce_sum(st.where(
        x > 1, st.broadcast_to(st.log(x), (n,)), x)),
    "transpose": lambda x, n: st.reduce_sum(st.where(
        st.reshape(x, (2, -1)) > 1, st.transpose(st.reshape(st.log(x), (-1, 2))),
        st.reshape(x, (2, -1)))),
    "gather": lambda x, n: st.reduce_sum(st.gather(st.sqrt(x), [0, 2, 2])),
    "concat": lambda x, n: st.reduce_sum(st.where(
        x > 1, st.concat([st.log(x[: n // 2]), st.sqrt(x[n // 2:])], 0), x)),
    "stack_slices": lambda x, n: st.reduce_sum(st.stack([st.sqrt(x)[1:3], st.log(x)[0:2]])),
    "tile": lambda x, n: st.reduce_sum(st.where(
        st.tile(x, [2]) > 1, st.tile(st.log(x), [2]), 0.0)),
    "broadcast_rows": lambda x, n: st.reduce_sum(st.where(
        st.broadcast_to(x, (2, n)) > 1, st.broadcast_to(st.log(x), (2, n)), 0.0)),
    "sum_rows": lambda x, n: st.reduce_sum(st.reduce_sum(st.where(
        st.reshape(x, (2, -1)) > 1, st.reshape(st.log(x), (2, -1)), 0.0), 0)),
}


@pytest.mark.parametrize("n", [4, 300])
@pytest.mark.parametrize("case", sorted(_MOVES))
def test_zeros_of_moves_are_exact_at_every_size(case, n):
    f = _MOVES[case]
    x0 = np.zeros(n)
    x0[1::2] = -1.0  # log and sqrt have nan or infinite partials everywhere
    x = st.Variable(x0)
    with st.GradientTape() as t:
        y = f(x, n)
    eager = t.gradient(y, x).numpy()
    xs = st.symbol("x", shape=(n,))
    with st.GradientTape() as t:
        t.watch(xs)
        ys = f(xs, n)
    compiled = st.compile(t.gradient(ys, xs), [xs])(x0)
    np.testing.assert_array_equal(np.isnan(eager), np.isnan(compiled))
    np.testing.assert_array_equal(eager, compiled)
    assert np.sum(np.isfinite(eager)) >= n - 3  # the unreached places are exact zeros


@pytest.mark.parametrize("case", ["reshape", "broadcast", "concat", "sum_rows"])
def test_zeros_of_one_move_are_exact_in_loop_nests(case, monkeypatch):
    """A select read through one move (not a chain of them, nor a move that adds elements)
    is computed where its reader reads it, so the reader folds into its zero branch."""
    from symtape.codegen.loops import LoopPlan
    from symtape.compile import strategy

    monkeypatch.setattr(strategy, "LOOP_MIN_ATOMS", 0)
    n, f = 300, _MOVES[case]
    x0 = np.zeros(n)
    x0[1::2] = -1.0
    xs = st.symbol("x", shape=(n,))
    with st.GradientTape() as t:
        t.watch(xs)
        ys = f(xs, n)
    g = st.compile(t.gradient(ys, xs), [xs])
    assert isinstance(g._plan, LoopPlan)  # loop nests, not the element view
    x = st.Variable(x0)
    with st.GradientTape() as t:
        y = f(x, n)
    np.testing.assert_array_equal(g(x0), t.gradient(y, x).numpy())


@pytest.mark.parametrize("n", [3, 300])
def test_selects_of_one_value_on_both_branches_stay_exact_at_every_size(n):
    """``s = where(c, x, x)``: the cotangent of ``x`` is ``where(c, g, 0) + where(c, 0, g)``
    of one ``g`` (itself a zero-branched select on ``s > 0``), which is ``g``: the Hessian
    of ``sum(where(s > 0, s ** exp(s), 0))`` is 0 at a nan element at every size (large
    tensors' fused recipes gave each ``g`` its own stand-ins, and ``0 * nan`` after)."""
    def f(x):
        s = st.where(x > x, x, x)
        return st.reduce_sum(st.where(s > 0, s ** st.exp(s), 0.0))

    x0 = np.linspace(-1.0, 2.0, n)
    x0[1] = np.nan
    x = st.Variable(x0)
    with st.GradientTape() as t2:
        with st.GradientTape() as t1:
            y = f(x)
        g = t1.gradient(y, x)
    h = t2.jacobian(g, x).numpy()
    z = sp.Symbol("z")
    d2 = sp.lambdify(z, sp.diff(z ** sp.exp(z), z, 2))
    ref = np.diag([float(d2(v)) if v > 0 else 0.0 for v in x0])
    np.testing.assert_allclose(h, ref, rtol=1e-12, atol=0)


def _eager_and_loops(f, xs0):
    """Value, gradient and Hessian (of the gradient's sum) of ``f`` eagerly and as loop
    nests of the same tensors."""
    from symtape.compile import strategy

    xs = [st.Variable(v) for v in xs0]
    with st.GradientTape() as t2:
        with st.GradientTape() as t1:
            y = f(*xs)
        gs = t1.gradient(y, xs, unconnected_gradients="zero")
        total = sum(st.reduce_sum(g) for g in gs)
    hs = t2.gradient(total, xs, unconnected_gradients="zero")
    outs = [y, *gs, *hs]
    limit, strategy.LOOP_MIN_ATOMS = strategy.LOOP_MIN_ATOMS, 0
    try:
        fn = st.compile(outs, xs)
    finally:
        strategy.LOOP_MIN_ATOMS = limit
    return [t.numpy() for t in outs], [np.asarray(v) for v in fn(*xs0)]


_LOOP_ZEROS = {
    # a select's sum read through a broadcast and a product computed in two loops
    "sum_then_product": lambda x, y: st.reduce_sum(st.where(
        st.reduce_sum(x) > 0, st.exp(st.reduce_sum(x) * x), 0.0)),
    # the cotangent of a norm compared elementwise: a sum of selects, broadcast back
    "norm_compared": lambda x, y: st.reduce_sum(st.where(
        st.norm(x * y) > st.sin(y), st.norm(x * y), st.sin(y))),
    # the branches 0.0 and 0 of a select are one zero
    "acos_of_product": lambda x, y: st.reduce_sum(st.where(
        st.abs(st.reduce_prod(y - x)) < 1, st.acos(st.reduce_prod(y - x)), y)) * 0.0
    + st.reduce_sum(st.where(st.reduce_prod(y - x) > 0, st.sqrt(st.reduce_prod(y - x)),
                             st.log(x - y))),
    # the second derivatives of a product tree, its cotangent a select's zero (maximum at
    # a nan product): moves with zeros (an odd level's concat), unrolled small levels and
    # scatters computed apart after all keep it (they gave nan; differential seed 40)
    "product_tree": lambda x, y: st.reduce_sum(st.nn.selu(st.maximum(
        st.reduce_prod(x), st.zeros_like(x)))),
}


@pytest.mark.parametrize("case", sorted(_LOOP_ZEROS))
def test_loop_nests_keep_zeros_of_selects_through_sums_and_temporaries(case):
    """Programs whose select is summed, broadcast back or written to a temporary before a
    product with a nan partial: loop nests give eager values' exact 0s (they gave nan;
    seeds 14, 19 and 46 of the differential test's long programs)."""
    rng = np.random.default_rng(7)
    x0 = rng.normal(size=300)
    x0[::7] = np.nan
    x0[3::11] = -np.inf
    y0 = rng.normal(size=300)
    eager, loops = _eager_and_loops(_LOOP_ZEROS[case], [x0, y0])
    for e, c in zip(eager, loops):
        np.testing.assert_array_equal(np.isnan(e), np.isnan(c))
        np.testing.assert_array_equal(e, c)
        np.testing.assert_array_equal(np.signbit(e), np.signbit(c))


def test_where_of_uniform_arguments_is_uniform_at_every_size():
    """``where(c, 0, g)`` with ``c`` all true (``x ** 0 > 0``) is the constant 0, so the
    cotangent of the other branch times its infinite partial is 0 at 3,003 elements, as
    at 3 (a boolean condition kept the where from folding)."""
    for n in (1, 1001):
        w = st.Variable(np.array([1e-300, 0.0, -3.19]))
        x = st.Variable(np.resize([[4.17, -1.2, 1e-8]], (n, 3)), trainable=False)
        with st.GradientTape() as t:
            v = (x * 2.0) ** 0.0
            y = st.reduce_sum(st.where(v > 0, st.sqrt(v), st.log(-w)))
        np.testing.assert_array_equal(t.gradient(y, w).numpy(), [0.0, 0.0, 0.0])


@pytest.mark.parametrize("n", [3, 600])
def test_a_difference_of_one_select_is_a_structural_zero_at_every_size(n):
    """``v - v`` reached by a where's cotangent: ``where(c, 0, g) - where(c, 0, g)`` is the
    structural zero, so the partials of ``v = x ** x`` (nan at negative ``x``) multiply it
    to 0 at every size (eager values of large tensors dropped the zero's recipe: nan)."""
    x0 = np.resize([np.nan, -0.5, 0.5, 2.0, -np.inf, 0.0], n)
    x = st.Variable(x0)
    with st.GradientTape() as t:
        v = x ** x
        e = st.exp(v)
        y = st.reduce_sum(st.where(st.abs(e) < 1, st.acos(e), v - v))
    np.testing.assert_array_equal(t.gradient(y, x).numpy(), np.zeros(n))


def test_fused_chains_stay_bounded_at_every_size():
    """A product tree's cotangents fuse selects level by level; the chain a result keeps
    for later ops to fold into is bounded (``where(live, value, 0)`` past
    ``RECIPE_MAX_OPS`` ops), so the eager second derivatives of ``reduce_prod`` over 300
    elements take a fraction of a second (they built chains of ~37,000 ops: minutes),
    with the element view's values (a nan product's cotangent is an exact 0)."""
    from symtape.core import apply

    x0 = np.resize([np.nan, 2.0, -0.5, np.inf, 0.0, 1.5], 300)
    x = st.Variable(x0)
    kept = []
    with st.GradientTape() as t2:
        with st.GradientTape() as t1:
            y = st.reduce_sum(st.nn.selu(st.maximum(st.reduce_prod(x), st.zeros_like(x))))
        g = t1.gradient(y, x)
        kept.append(g)
        total = st.reduce_sum(g)
    h = t2.gradient(total, x)
    np.testing.assert_array_equal(g.numpy(), np.zeros(300))
    np.testing.assert_array_equal(h.numpy(), np.zeros(300))
    for t in (g, h):
        if t._fusion is not None:
            assert apply.recipe_ops(t._fusion[0]) <= apply.RECIPE_MAX_OPS


@pytest.mark.parametrize("n", [3, 300])
def test_sums_of_negative_zeros_are_negative_zero_at_every_size(n):
    """A place receiving only negative zeros sums to -0.0, as the element view adds its
    terms (IEEE addition starts from -0.0): the cotangent of a gather with repeated
    indices, ``segment_sum`` and ``unsorted_segment_sum``; places receiving none are
    +0.0. Eager values (numpy) started from +0.0 and gave +0.0 at 300 elements."""
    x = st.Variable(np.ones(n))
    idx = np.concatenate([np.arange(n - 1), np.arange(n - 1)])
    z = st.Variable(np.full(2 * n - 2, -0.0))  # (a constant -0.0 is the exact 0)
    with st.GradientTape() as t:
        y = st.reduce_sum(st.gather(x, idx) * z)
    g = t.gradient(y, x).numpy()
    assert np.signbit(g[:-1]).all() and (g[:-1] == 0).all()
    assert g[-1] == 0 and not np.signbit(g[-1])
    data = np.resize([-0.0, -0.0, 2.0], n)
    ids = np.arange(n) // 3
    for fn in (lambda: st.math.segment_sum(data, ids),
               lambda: st.math.unsorted_segment_sum(data, ids, n // 3 + 1)):
        out = fn().numpy()
        ref = np.array([sum(data[ids == k], -0.0) if (ids == k).any() else 0.0
                        for k in range(len(out))])
        np.testing.assert_array_equal(out, ref)
        np.testing.assert_array_equal(np.signbit(out), np.signbit(ref))
