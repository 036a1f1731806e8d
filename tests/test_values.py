"""One rule for values: eager values equal the definitions' values, hence compiled code, at
the points where numpy's whole-array operations would round or fold differently."""

import math

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import differential as D
import symtape as st


def _same(eager, compiled):
    eager, compiled = np.asarray(eager, float), np.asarray(compiled, float)
    assert D.mismatches(eager, compiled, rtol=0.0) == [], (eager, compiled)


def test_merged_terms_round_as_compiled_code():
    # a + b + b is a + 2*b in the DAG: at a = 1, b = 2**-53 in-order addition gives 1.0
    v = st.Variable([1.0, 2.0 ** -53])
    s = st.reduce_sum(st.gather(v, [0, 1, 1]))
    compiled = st.compile(s, [v])(v.numpy())
    assert float(s) == 1.0 + 2.0 ** -52 == float(compiled)


def test_cancellation_of_one_node_leaves_no_residue():
    # d(x/x)/dx = 1/x - x/x**2: the second term folds to -1/x per element, so the sum is
    # exactly 0 everywhere (in-order numpy of the generic rule leaves ulp-sized residues)
    x = st.Variable(np.random.default_rng(0).normal(size=1000) * 10.0 ** np.arange(-5, 5, 0.01))
    with st.GradientTape() as t:
        y = st.divide(x, x)
    g = t.gradient(y, x)
    assert_array_equal(g.numpy(), np.zeros(1000))
    _same(g.numpy(), st.compile(g, [x])(x.numpy()))


def test_sign_of_zero_of_a_folded_sum():
    v = st.Variable(-0.0)
    s = st.reduce_sum(st.stack([v, st.constant(0.0)]))  # folds to v: -0.0, numpy says +0.0
    r = st.math.rsqrt(s)
    assert math.copysign(1.0, float(s)) == -1.0 and float(r) == -math.inf
    _same(r.numpy(), st.compile(r, [v])(v.numpy()))


def test_zero_times_overflow_is_zero_where_it_folds():
    x = st.Variable([1e200, -1e300, 2.0])
    with st.GradientTape() as t:
        y = st.where(st.abs(x) < 1e100, x * x * x, 0.0)
    g = t.gradient(y, x)
    assert_array_equal(g.numpy(), [0.0, 0.0, 12.0])
    _same(g.numpy(), st.compile(g, [x])(x.numpy()))


def test_eager_hessian_nan_pattern_is_the_compiled_one():
    def f(v):
        return st.sqrt(v[0] * v[1]) + v[0] ** 2 * st.log(v[1]) + st.where(v[0] > 0, 1 / v[0], 0.0)

    H = st.hessian(f, input_signature=[st.TensorSpec((2,))])
    for point in ([0.0, 1.0], [-1.0, 0.0], [2.0, -3.0], [np.inf, 1.0], [0.0, 0.0]):
        v = st.Variable(point)
        with st.GradientTape() as t:
            y = f(v)
        h = t.hessian(y, v)
        _same(h.numpy(), H(np.array(point)))


def test_ieee_pow_at_one_half():
    # IEEE pow: (-inf)**0.5 = inf and (-0)**0.5 = +0 (numpy's square-root shortcut differs)
    x = st.Variable([-np.inf, -0.0, 4.0])
    y = x ** 0.5
    assert_array_equal(y.numpy(), [np.inf, 0.0, 2.0])
    assert not np.signbit(y.numpy()[1])
    _same(y.numpy(), st.compile(y, [x])(x.numpy()))


@pytest.mark.parametrize("m", [4, 64, 300])
def test_products_and_sums_with_a_constant_zero_factor_are_zero_on_every_path(m):
    """``x - x`` is the constant 0; a matrix product, einsum, convolution or reduction of it
    is 0 also where the other factors are infinite, eager and compiled, at every size."""
    xv = np.array([[np.inf, 1.0, -np.inf, np.nan]])
    fs = {
        "matmul": lambda x, w: st.matmul(x - x, w) * st.reduce_sum(x),
        "einsum": lambda x, w: st.einsum("ij,jk->ik", w[:1, :4] * 0.0 + (x - x), w)
        * st.reduce_sum(x),
        "reduce": lambda x, w: st.reduce_sum(x - x, 1) * x + st.reduce_max(x - x) * w[0, 0],
        "prod": lambda x, w: st.reduce_prod(x - x) * st.reduce_sum(x) * w[:1],
    }
    for name, f in fs.items():
        x, w = st.Variable(xv), st.Variable(np.ones((4, m)))
        eager = np.asarray(f(x, w).numpy())
        xs, ws = st.symbol("x", shape=(1, 4)), st.symbol("w", shape=(4, m))
        compiled = np.asarray(st.compile(f(xs, ws), [xs, ws])(xv, np.ones((4, m))))
        np.testing.assert_array_equal(eager, np.zeros_like(eager), err_msg=name)
        np.testing.assert_array_equal(compiled, np.zeros_like(compiled), err_msg=name)
