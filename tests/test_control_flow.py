"""Control flow: scan, while_loop, cond, map_fn, vectorized_map, custom_root and
custom_linear_solve against numpy loops, finite differences and hand-derived derivatives;
eager, nested tapes and compiled code; errors naming the loop variable."""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st
from symtape.base.errors import DTypeError, InvalidArgumentError, ShapeError

RNG = np.random.default_rng(7)


def fd(fn, x, eps=1e-6):
    """Central differences of a scalar function of an array."""
    x = np.asarray(x, dtype=float)
    out = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        e = np.zeros_like(x)
        e[i] = eps
        out[i] = (fn(x + e) - fn(x - e)) / (2 * eps)
    return out


# -- scan: values ------------------------------------------------------------------------------


def test_scan_values_match_a_numpy_loop():
    xs = RNG.normal(size=(6, 3))
    a0 = RNG.normal(size=3)
    got = st.scan(lambda a, x: a * 0.5 + st.sin(x), st.constant(xs), initializer=st.constant(a0))
    want, a = [], a0
    for x in xs:
        a = a * 0.5 + np.sin(x)
        want.append(a)
    np.testing.assert_allclose(got.numpy(), np.array(want), rtol=1e-15, atol=1e-15)


def test_scan_without_initializer_starts_with_the_first_element():
    xs = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(st.scan(lambda a, x: a + x, st.constant(xs)).numpy(),
                                  np.cumsum(xs))
    np.testing.assert_array_equal(
        st.scan(lambda a, x: a + x, st.constant(xs), reverse=True).numpy(),
        np.cumsum(xs[::-1])[::-1])


def test_scan_nested_structures():
    elems = (st.constant([1.0, 2.0, 3.0]), {"w": st.constant([[1.0], [0.0], [2.0]])})
    init = {"s": st.constant(0.0), "v": st.constant([1.0])}

    def fn(a, x):
        seq, d = x
        return {"s": a["s"] + seq, "v": a["v"] * d["w"] + seq}

    out = st.scan(fn, elems, initializer=init)
    assert set(out) == {"s", "v"}
    np.testing.assert_array_equal(out["s"].numpy(), [1.0, 3.0, 6.0])
    np.testing.assert_array_equal(out["v"].numpy(), [[2.0], [2.0], [7.0]])


def test_scan_integer_counter_carry():
    i, = st.scan(lambda a, x: (a[0] + 1,), st.zeros(4), initializer=(st.constant(0),))
    assert i.dtype == np.int32
    np.testing.assert_array_equal(i.numpy(), [1, 2, 3, 4])


# -- scan: derivatives -------------------------------------------------------------------------


def _recurrence(a0, xs, w):
    a, total = a0, 0.0
    for x in xs:
        a = np.tanh(a * w + x)
        total = total + a * a
    return total


def test_scan_gradient_to_initializer_sequence_and_captured_variable():
    a0, xs, w0 = 0.3, RNG.normal(size=5), 0.8
    w = st.Variable(w0)
    a, x = st.constant(a0), st.constant(xs)
    with st.GradientTape() as t:
        t.watch([a, x])
        loss = st.reduce_sum(st.square(st.scan(lambda c, e: st.tanh(c * w + e), x,
                                               initializer=a)))
    ga, gx, gw = t.gradient(loss, [a, x, w])
    np.testing.assert_allclose(float(loss), _recurrence(a0, xs, w0), rtol=1e-14)
    np.testing.assert_allclose(float(ga), fd(lambda v: _recurrence(v, xs, w0), a0), rtol=1e-8)
    np.testing.assert_allclose(gx.numpy(), fd(lambda v: _recurrence(a0, v, w0), xs), rtol=1e-7)
    np.testing.assert_allclose(float(gw), fd(lambda v: _recurrence(a0, xs, v), w0), rtol=1e-8)


def test_scan_second_and_third_derivatives_are_loops_too():
    # a_{t+1} = a_t * x: a_n = x**n, so d2/dx2 = n (n - 1) x**(n - 2)
    x = st.Variable(1.3)
    with st.GradientTape() as t3:
        with st.GradientTape() as t2:
            with st.GradientTape() as t1:
                y = st.scan(lambda a, _: a * x, st.zeros(5), initializer=st.constant(1.0))
                last = y[-1]
            g1 = t1.gradient(last, x)
        g2 = t2.gradient(g1, x)
    g3 = t3.gradient(g2, x)
    assert float(last) == pytest.approx(1.3 ** 5, rel=1e-15)
    assert float(g1) == pytest.approx(5 * 1.3 ** 4, rel=1e-14)
    assert float(g2) == pytest.approx(20 * 1.3 ** 3, rel=1e-14)
    assert float(g3) == pytest.approx(60 * 1.3 ** 2, rel=1e-14)


def test_scan_unconnected_source_gets_none():
    x, z = st.Variable(2.0), st.Variable(3.0)
    with st.GradientTape() as t:
        y = st.scan(lambda a, _: a * x, st.zeros(2), initializer=st.constant(1.0))
        last = y[-1]
    gx, gz = t.gradient(last, [x, z])
    assert float(gx) == 4.0 and gz is None


def test_scan_derivative_through_untaken_where_branch_is_exact():
    x = st.constant([-1.0, 4.0])
    with st.GradientTape() as t:
        t.watch(x)
        y = st.scan(lambda a, e: st.where(e > 0.0, st.sqrt(e), -e) + a, x,
                    initializer=st.constant(0.0))
        last = y[-1]
    np.testing.assert_array_equal(t.gradient(last, x).numpy(), [-1.0, 0.25])


# -- scan: compiled ----------------------------------------------------------------------------


def _rk4_final(steps, h=0.05):
    def f(s):
        return st.stack([s[1], -9.81 * st.sin(s[0])])

    def step(s, _):
        k1 = f(s)
        k2 = f(s + h / 2 * k1)
        k3 = f(s + h / 2 * k2)
        k4 = f(s + h * k3)
        return s + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

    def final(s0):
        return st.scan(step, st.zeros(steps), initializer=s0)[-1, 0]

    return final, step


def _unrolled_grad(step, steps, s0):
    s = st.constant(s0)
    with st.GradientTape() as t:
        t.watch(s)
        x = s
        for _ in range(steps):
            x = step(x, None)
        y = x[0]
    return t.gradient(y, s).numpy()


@pytest.mark.parametrize("steps", [1, 40, 300])
def test_compiled_scan_gradient_equals_the_unrolled_form(steps):
    final, step = _rk4_final(steps)
    g = st.grad(final, input_signature=[st.TensorSpec((2,))])
    pts = RNG.normal(size=(5, 2))
    got = g(pts)
    for p, row in zip(pts, got):
        np.testing.assert_allclose(row, _unrolled_grad(step, steps, p), rtol=1e-12, atol=1e-13)


def test_compiled_scan_is_a_loop_whose_code_does_not_grow_with_the_steps():
    sizes = []
    for steps in (5000, 50000):  # (both in chunks of the fewest points)
        final, _ = _rk4_final(steps)
        g = st.grad(final, input_signature=[st.TensorSpec((2,))])
        g(np.zeros((1, 2)))
        sizes.append(len(g.llvm_ir))
    assert abs(sizes[0] - sizes[1]) < 0.01 * sizes[0]


def test_compiled_scan_batches_of_points_and_reverse():
    xs = RNG.normal(size=(7, 3))

    @st.function(input_signature=[st.TensorSpec((None, 3))])
    def run(x):
        return st.map_fn(lambda r: st.scan(lambda a, e: a * 0.9 + e * e, r, reverse=True), x)

    got = run(xs)
    want = np.empty_like(xs)
    for i, r in enumerate(xs):
        a = r[-1]
        want[i, -1] = a
        for k in range(len(r) - 2, -1, -1):
            a = a * 0.9 + r[k] ** 2
            want[i, k] = a
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_compiled_hessian_through_a_scan():
    final, step = _rk4_final(30)
    h = st.hessian(final, input_signature=[st.TensorSpec((2,))])
    p = np.array([0.4, -0.2])
    got = h(p[None])[0]
    g = st.grad(final, input_signature=[st.TensorSpec((2,))])
    want = np.stack([(g((p + e)[None])[0] - g((p - e)[None])[0]) / 2e-5
                     for e in np.eye(2) * 1e-5], axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(got, got.T, rtol=1e-12)


# -- scan: errors ------------------------------------------------------------------------------


def test_scan_errors_name_the_loop_variable():
    xs = st.zeros(3)
    with pytest.raises(ShapeError, match="initializer 0 has shape"):
        st.scan(lambda a, x: st.stack([a, a]), xs, initializer=st.constant(0.0))
    with pytest.raises(DTypeError, match="initializer 0 has dtype int32"):
        st.scan(lambda a, x: st.cast(a, "float64") + x, xs, initializer=st.constant(0))
    with pytest.raises(InvalidArgumentError, match="structure of 2 tensors"):
        st.scan(lambda a, x: (a, a), xs, initializer=st.constant(0.0))
    with pytest.raises(ShapeError, match="elems 1 has 2 elements"):
        st.scan(lambda a, x: a, (st.zeros(3), st.zeros(2)), initializer=(st.constant(0.0),))
    with pytest.raises(ShapeError, match="scalar"):
        st.scan(lambda a, x: a, st.constant(1.0), initializer=st.constant(0.0))
    with pytest.raises(InvalidArgumentError, match="elems is empty"):
        st.scan(lambda a, x: a, [], initializer=st.constant(0.0))
    for mapper in (st.scan, st.map_fn, st.vectorized_map):
        with pytest.raises(InvalidArgumentError, match="fn must be a callable"):
            mapper(None, xs)


def test_a_long_scan_formula_shows_the_recurrence_not_its_steps():
    x = st.symbol("x")
    y = st.scan(lambda a, _: a * x + 1.0, st.zeros(100000), initializer=st.constant(1.0))
    text = str(y[-1].formula())
    assert "steps=100000" in text and "a0*x + 1.0" in text and len(text) < 400
    small = st.scan(lambda a, _: a * x + 1.0, st.zeros(2), initializer=st.constant(1.0))
    assert str(small.formula()) == "[x + 1.0, x*(x + 1.0) + 1.0]"


# -- while_loop --------------------------------------------------------------------------------


def test_while_loop_values_and_trip_count():
    i, s = st.while_loop(lambda i, s: i < 10, lambda i, s: (i + 1, s + st.cast(i, "float64")),
                         (st.constant(0), st.constant(0.0)))
    assert int(i) == 10 and float(s) == 45.0
    single = st.while_loop(lambda v: v < 100.0, lambda v: v * 3.0, st.constant(1.0))
    assert float(single) == 243.0
    capped = st.while_loop(lambda v: v < 100.0, lambda v: v * 3.0, st.constant(1.0),
                           maximum_iterations=2)
    assert float(capped) == 9.0


def test_while_loop_gradient_through_every_step():
    x = st.Variable(1.5)
    with st.GradientTape() as t:
        _, y = st.while_loop(lambda i, y: i < 4, lambda i, y: (i + 1, y * x),
                             (st.constant(0), st.constant(1.0)))
    assert float(t.gradient(y, x)) == pytest.approx(4 * 1.5 ** 3, rel=1e-15)


def test_while_loop_compiles_with_maximum_iterations_and_says_when_it_cannot():
    @st.function(input_signature=[st.TensorSpec(())])
    def halvings(v):
        _, n = st.while_loop(lambda v, n: v > 1.0, lambda v, n: (v / 2.0, n + 1.0),
                             (v, st.constant(0.0)), maximum_iterations=64)
        return n

    assert [float(halvings(np.float64(v))) for v in (0.5, 3.0, 1000.0)] == [0.0, 2.0, 10.0]

    @st.function(input_signature=[st.TensorSpec(())])
    def unbounded(v):
        return st.while_loop(lambda v: v > 1.0, lambda v: v / 2.0, v)

    with pytest.raises(InvalidArgumentError, match="maximum_iterations"):
        unbounded(np.float64(3.0))


def test_while_loop_errors():
    with pytest.raises(DTypeError, match="scalar bool"):
        st.while_loop(lambda v: v, lambda v: v, st.constant(1.0))
    with pytest.raises(ShapeError, match="loop_var 0 has shape"):
        st.while_loop(lambda v: v < 2.0, lambda v: st.stack([v, v]), st.constant(1.0))
    with pytest.raises(DTypeError, match="loop_var 0 has dtype int32"):
        st.while_loop(lambda v: v < 2, lambda v: st.cast(v, "float64"), st.constant(1))
    with pytest.raises(InvalidArgumentError, match="maximum_iterations"):
        st.while_loop(lambda v: v < 2.0, lambda v: v, st.constant(1.0), maximum_iterations=-1)


# -- cond --------------------------------------------------------------------------------------


def test_cond_eager_runs_only_the_branch_taken():
    ran = []
    x = st.constant(-4.0)
    out = st.cond(x > 0.0, lambda: ran.append("t") or st.sqrt(x),
                  lambda: ran.append("f") or -x)
    assert float(out) == 4.0 and ran == ["f"]


def test_cond_traced_is_a_select_with_exact_zero_from_the_untaken_branch():
    @st.function(input_signature=[st.TensorSpec(())])
    def f(x):
        return st.cond(x > 0.0, lambda: st.sqrt(x), lambda: -x)

    g = st.grad(lambda x: st.cond(x > 0.0, lambda: st.sqrt(x), lambda: -x),
                input_signature=[st.TensorSpec(())])
    assert [float(f(np.float64(v))) for v in (-4.0, 4.0)] == [4.0, 2.0]
    assert [float(g(np.float64(v))) for v in (-4.0, 4.0, 0.0)] == [-1.0, 0.25, -1.0]


def test_cond_nested_structures_and_errors():
    @st.function(input_signature=[st.TensorSpec(())])
    def f(x):
        a, b = st.cond(x > 0.0, lambda: (x, x * 2.0), lambda: (x * 3.0, x))
        return a + 10.0 * b

    assert [float(f(np.float64(v))) for v in (1.0, -1.0)] == [21.0, -13.0]
    with pytest.raises(DTypeError, match="scalar bool"):
        st.cond(st.constant(1.0), lambda: 1.0, lambda: 2.0)
    with pytest.raises(InvalidArgumentError, match="callables"):
        st.cond(True, None, lambda: 1.0)

    @st.function(input_signature=[st.TensorSpec(())])
    def mismatched(x):
        return st.cond(x > 0.0, lambda: (x, x), lambda: x)

    with pytest.raises(InvalidArgumentError, match="structure"):
        mismatched(np.float64(1.0))


# -- map_fn and vectorized_map -----------------------------------------------------------------


@pytest.mark.parametrize("mapper", [st.map_fn, st.vectorized_map])
def test_map_values_and_gradients(mapper):
    m = RNG.normal(size=(4, 3))
    w = st.Variable(RNG.normal(size=3))
    x = st.constant(m)
    with st.GradientTape() as t:
        t.watch(x)
        y = mapper(lambda r: st.reduce_sum(st.sin(r * w)), x)
        loss = st.reduce_sum(y * y)
    np.testing.assert_allclose(y.numpy(), np.sin(m * w.numpy()).sum(axis=1), rtol=1e-15)
    gx, gw = t.gradient(loss, [x, w])

    def ref(mm, ww):
        return float(np.sum(np.sin(mm * ww).sum(axis=1) ** 2))

    np.testing.assert_allclose(gx.numpy(), fd(lambda v: ref(v, w.numpy()), m), rtol=1e-7)
    np.testing.assert_allclose(gw.numpy(), fd(lambda v: ref(m, v), w.numpy()), rtol=1e-7)


def test_map_fn_nested_output():
    out = st.map_fn(lambda r: {"sum": st.reduce_sum(r), "max": st.reduce_max(r)},
                    st.constant([[1.0, 5.0], [3.0, 2.0]]))
    np.testing.assert_array_equal(out["sum"].numpy(), [6.0, 5.0])
    np.testing.assert_array_equal(out["max"].numpy(), [5.0, 3.0])


# -- implicit differentiation ------------------------------------------------------------------


def _newton(f, x0, maximum_iterations=None):
    def step(x):
        with st.GradientTape() as t:
            t.watch(x)
            y = f(x)
        return x - y / t.gradient(y, x)

    _, x = st.while_loop(lambda i, x: i < 40, lambda i, x: (i + 1, step(x)),
                         (st.constant(0), x0), maximum_iterations=maximum_iterations)
    return x


def test_custom_root_newton_in_a_while_loop_has_the_implicit_derivative():
    # x**3 + a x = b: dx/da = -x / (3 x**2 + a), dx/db = 1 / (3 x**2 + a),
    # d2x/db2 = -6 x / (3 x**2 + a)**3
    a, b = st.Variable(2.0), st.Variable(5.0)
    with st.GradientTape() as t2:
        with st.GradientTape(persistent=True) as t:
            x = st.custom_root(lambda x: x ** 3 + a * x - b, st.constant(1.0), _newton,
                               lambda g, y: y / g(st.constant(1.0)))
        ga, gb = t.gradient(x, [a, b])
    gbb = t2.gradient(gb, b)
    xv = float(x)
    assert xv ** 3 + 2.0 * xv == pytest.approx(5.0, abs=1e-13)
    d = 3 * xv ** 2 + 2.0
    assert abs(float(ga) + xv / d) < 1e-12
    assert abs(float(gb) - 1 / d) < 1e-12
    assert abs(float(gbb) + 6 * xv / d ** 3) < 1e-12


def test_custom_linear_solve_gradients_match_numpy():
    am = np.array([[4.0, 1.0, 0.5], [0.3, 3.0, 1.0], [0.0, 1.0, 5.0]])
    bv = np.array([1.0, -2.0, 0.5])
    A, b = st.Variable(am), st.Variable(bv)

    def matvec(v):
        return st.linalg.matvec(A, v)

    def solve(mv, y):
        return st.linalg.solve(A, y[:, None])[:, 0]

    def transpose_solve(vm, y):
        return st.linalg.solve(st.transpose(A), y[:, None])[:, 0]

    with st.GradientTape() as t:
        x = st.custom_linear_solve(matvec, b, solve, transpose_solve)
        loss = st.reduce_sum(x * st.constant([1.0, 2.0, 3.0]))
    gA, gb = t.gradient(loss, [A, b])
    xv = np.linalg.solve(am, bv)
    lam = np.linalg.solve(am.T, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(x.numpy(), xv, rtol=1e-14)
    np.testing.assert_allclose(gb.numpy(), lam, rtol=1e-13)
    np.testing.assert_allclose(gA.numpy(), -np.outer(lam, xv), rtol=1e-13)
    with pytest.raises(InvalidArgumentError, match="transpose_solve"):
        st.custom_linear_solve(matvec, b, solve)


def test_vectorized_map_applies_the_ops_to_all_rows_at_once():
    from symtape.core import node as N

    m = st.constant(RNG.normal(size=(5, 3)))
    y = st.vectorized_map(lambda r: r * st.reduce_sum(r) + 1.0, m)
    assert not any(n.kind == "op" and n.prim.name == "scan" for n in N.ancestry(y._node))
    want = m.numpy() * m.numpy().sum(axis=1, keepdims=True) + 1.0
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-15)


def test_jacobian_through_a_scan_is_one_batched_scan():
    """A batched sweep applies the scan's batching rule: one scan over all seeds."""
    def traj(s0):
        return st.scan(lambda a, _: st.stack([a[0] * s0[1], st.sin(a[1]) + a[0]]),
                       st.zeros(4), initializer=s0)[-1]

    jac = st.jacobian(traj, input_signature=[st.TensorSpec((2,))])
    p = np.array([0.7, -0.4])

    def ref(v):
        a = v.copy()
        for _ in range(4):
            a = np.array([a[0] * v[1], np.sin(a[1]) + a[0]])
        return a

    want = np.stack([(ref(p + e) - ref(p - e)) / 2e-6 for e in np.eye(2) * 1e-6], axis=1)
    np.testing.assert_allclose(jac(p[None])[0], want, rtol=1e-7, atol=1e-9)


def test_custom_root_compiles_with_a_bounded_newton_loop():
    def newton(f, x0):
        return _newton(f, x0, maximum_iterations=40)

    def root(p):
        a, b = p[0], p[1]
        return st.custom_root(lambda x: x ** 3 + a * x - b, st.constant(1.0), newton,
                              lambda g, y: y / g(st.constant(1.0)))

    g = st.grad(root, input_signature=[st.TensorSpec((2,))])
    pts = np.array([[2.0, 5.0], [1.0, 1.0], [3.0, -2.0]])
    for (a, b), row in zip(pts, g(pts)):
        r = np.roots([1.0, 0.0, a, -b])
        x = r[np.argmin(abs(r.imag))].real
        d = 3 * x * x + a
        np.testing.assert_allclose(row, [-x / d, 1 / d], rtol=1e-12)


def test_a_long_loop_with_a_small_result_prints_its_recurrence():
    x = st.symbol("x")
    v = st.while_loop(lambda v: v < 1e6, lambda v: v * x + 1.0, st.symbol("v0"),
                      maximum_iterations=30000)
    text = str(v.formula())
    assert "steps=30000" in text and "v0*x + 1.0" in text


def test_eager_long_scan_runs_its_compiled_loop_with_the_same_values():
    from symtape.ops import control

    xs = RNG.normal(size=3000)
    a = st.scan(lambda a, x: a * 0.99 + st.sin(x), st.constant(xs),
                initializer=st.constant(0.0))
    assert 3000 * 3 > control.EAGER_STEPS
    want, c = [], 0.0
    for x in xs:
        c = c * 0.99 + np.sin(x)
        want.append(c)
    np.testing.assert_allclose(a.numpy(), want, rtol=1e-12, atol=1e-13)


def test_python_control_flow_on_a_loop_variable_is_refused_clearly():
    def body(a, x):
        if a > 0.0:  # needs a value while the body is traced
            return a - x
        return a + x

    with pytest.raises(InvalidArgumentError, match="st.cond or st.where"):
        st.scan(body, st.ones(3), initializer=st.constant(1.0))


def test_scan_reverse_computes_only_the_cotangents_asked_for():
    """A gradient with respect to the initial carry alone runs a reverse sweep whose body
    gives no sequence cotangents (a ``wanted`` mask of False); asked for both, the same
    carry gradient and the sequence's, against central differences."""
    xs0 = np.linspace(0.0, 1.0, 40)

    def f(s0, xs):
        return st.scan(lambda a, x: 0.9 * a * st.cos(x) + 0.1 * x * st.sin(a), xs,
                       initializer=s0)[-1]

    v, w = st.Variable(0.3), st.Variable(xs0)
    with st.GradientTape(persistent=True) as tape:
        y = f(v, w)
    only = float(tape.gradient(y, v))
    both = tape.gradient(y, [v, w])
    scan_node = next(n for n in _ancestry(y._node) if getattr(n.prim, "name", "") == "scan")
    keys = [k for k in scan_node.params["program"].derived if k[0] == "backward"]
    assert ("backward", 1, 1, (False,)) in keys and ("backward", 1, 1, (True,)) in keys
    h = 1e-6
    fd_v = (f(st.constant(0.3 + h), st.constant(xs0)).numpy()
            - f(st.constant(0.3 - h), st.constant(xs0)).numpy()) / (2 * h)
    fd_w = np.array([(f(st.constant(0.3), st.constant(xs0 + h * e)).numpy()
                      - f(st.constant(0.3), st.constant(xs0 - h * e)).numpy()) / (2 * h)
                     for e in np.eye(40)])
    assert only == float(both[0])
    np.testing.assert_allclose(only, fd_v, rtol=1e-7)
    np.testing.assert_allclose(both[1].numpy(), fd_w, rtol=1e-6, atol=1e-9)


def _ancestry(node):
    seen, stack = {}, [node]
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen[id(n)] = n
            stack.extend(n.inputs)
    return list(seen.values())


# --------------------------------------------------------------------------------------------
# Checkpointed reverse mode (st.config.set_loop_checkpointing)
# --------------------------------------------------------------------------------------------


@pytest.fixture
def checkpointing():
    """Sets the loop checkpointing policy for one test, restoring the default after."""
    yield st.config.set_loop_checkpointing
    st.config.set_loop_checkpointing(None)


def _damped(n_max, n_run):
    """A while_loop of ``n_run`` steps (``n_max`` the bound) of a damped pendulum whose
    stiffness ``k`` is a captured tensor; the loss reads the final state."""
    def loss(s0, k):
        def body(i, s):
            return i + 1, s + 0.02 * st.stack([s[1], -k * st.sin(s[0]) - 0.1 * s[1]])
        _, s = st.while_loop(lambda i, s: i < n_run, body, (st.constant(0), s0),
                             maximum_iterations=n_max)
        return s[0] * s[1] + s[0]
    return loss


@pytest.mark.parametrize("policy", ["sqrt", 5, 2])
def test_checkpointed_reverse_equals_storing_every_carry(checkpointing, policy):
    """Eager and compiled gradients (initial state and a captured parameter) through a
    while_loop that stops before its bound are the same bits with checkpoints as with
    every carry stored, and agree with central differences."""
    loss = _damped(230, 217)
    x0, k0 = np.array([0.7, -0.3]), 4.0

    def both():
        v, k = st.Variable(x0), st.Variable(k0)
        with st.GradientTape() as tape:
            y = loss(v, k)
        ge = [g.numpy() for g in tape.gradient(y, [v, k])]
        fn = st.grad(loss, argnums=(0, 1), input_signature=[st.TensorSpec((2,)),
                                                            st.TensorSpec(())])
        gc = [np.asarray(g)[0] for g in fn(x0[None], np.array([k0]))]
        return ge, gc, y

    checkpointing(None)
    stored_e, stored_c, _ = both()
    checkpointing(policy)
    ck_e, ck_c, y = both()
    names = [getattr(n.params.get("program"), "name", "") for n in _ancestry(y._node)]
    for a, b in zip(stored_e + stored_c, ck_e + ck_c):
        np.testing.assert_array_equal(a, b)
    h = 1e-6
    fd = [(loss(st.constant(x0 + h * e), st.constant(k0)).numpy()
           - loss(st.constant(x0 - h * e), st.constant(k0)).numpy()) / (2 * h)
          for e in np.eye(2)]
    fd_k = (loss(st.constant(x0), st.constant(k0 + h)).numpy()
            - loss(st.constant(x0), st.constant(k0 - h)).numpy()) / (2 * h)
    np.testing.assert_allclose(ck_e[0], fd, rtol=1e-6)
    np.testing.assert_allclose(ck_e[1], fd_k, rtol=1e-6)
    np.testing.assert_allclose(ck_c[0], ck_e[0], rtol=1e-13)
    assert not any("checkpoint" in n for n in names)  # (the forward loop is untouched)


def test_checkpointed_reverse_runs_the_segment_loops(checkpointing):
    """With a policy, the reverse sweep is a loop over segments (its program named so), not
    one loop over stacked carries."""
    loss = _damped(100, 100)
    checkpointing(10)
    v = st.Variable(np.array([0.2, 0.1]))
    with st.GradientTape() as tape:
        y = loss(v, st.constant(3.0))
    g = tape.gradient(y, v)
    names = {getattr(n.params.get("program"), "name", "") for n in _ancestry(g._node)}
    assert any(n.endswith("(checkpointed reverse)") for n in names), names
    assert any(n.endswith("(checkpoints)") for n in names), names


def test_checkpoint_segments_and_policy_errors(checkpointing):
    from symtape.ops import control
    checkpointing(None)
    assert control.checkpoint_segment(10_000, 10) == 0
    checkpointing("sqrt")
    assert control.checkpoint_segment(10_000, 10) == 100
    # a segment's loops unroll in the compiled loop over segments: at most UNROLL_STEPS ops
    assert control.checkpoint_segment(10 ** 6, 40) == control.UNROLL_STEPS // 40
    assert control.checkpoint_segment(3, 10) == 0  # too short to gain
    checkpointing(7)
    assert control.checkpoint_segment(20, 1) == 7 and control.checkpoint_segment(13, 1) == 0
    for bad in (1, 0, "log", True, 2.5):
        with pytest.raises(st.errors.InvalidArgumentError, match="set_loop_checkpointing"):
            st.config.set_loop_checkpointing(bad)
    assert st.config.loop_checkpointing() == 7


def test_checkpointed_second_derivatives(checkpointing):
    """Hessians through a checkpointed while_loop (its reverse sweep differentiated again,
    compiled and on nested tapes) equal those storing every carry and central differences
    of the gradient."""
    loss = _damped(120, 120)
    x0, k = np.array([0.7, -0.3]), st.constant(4.0)

    def hessians():
        fn = st.hessian(lambda s: loss(s, k), input_signature=[st.TensorSpec((2,))])
        v = st.Variable(x0)
        with st.GradientTape() as t2:
            with st.GradientTape() as t1:
                y = loss(v, k)
            g = t1.gradient(y, v)
        return np.asarray(fn(x0[None]))[0], t2.jacobian(g, v).numpy()

    checkpointing(None)
    stored = hessians()
    checkpointing("sqrt")
    ck = hessians()
    for a, b in zip(stored, ck):
        np.testing.assert_allclose(b, a, rtol=1e-13, atol=1e-14)

    def grad_at(x):
        v = st.Variable(x)
        with st.GradientTape() as t:
            y = loss(v, k)
        return t.gradient(y, v).numpy()

    h = 1e-6
    fd = np.array([(grad_at(x0 + h * e) - grad_at(x0 - h * e)) / (2 * h) for e in np.eye(2)])
    np.testing.assert_allclose(ck[1], fd.T, rtol=1e-6, atol=1e-8)
