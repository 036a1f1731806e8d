"""Hessian-vector products of programs of a few hundred inputs: loop plans (not unrolled
element kernels) whose cost grows like the function's, values against dense Hessians, exact
formulas and central differences of the compiled gradient. And compiled steps that assign
variables, shared by threads: no update is lost."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import symtape as st
from symtape import ops
from symtape.compile import planner as loopnest
from symtape.compile import strategy
from symtape.codegen.loops import LoopPlan


def _atan_outer(z):
    """``sum(atan2(sum(outer(z[1:]**z[0], z[1:]), 1), z[1:]))``, the outer product a
    tensordot."""
    b = z[1:]
    return st.reduce_sum(st.atan2(st.reduce_sum(st.tensordot(b ** z[0], b, axes=0), 1), b))


def _atan_broadcast(z):
    """The same program, its outer product by broadcasting."""
    b = z[1:]
    return st.reduce_sum(st.atan2(st.reduce_sum((b ** z[0])[:, None] * b[None, :], 1), b))


def _prod(z):
    return st.reduce_prod(z)


def _hvp_tensors(f, n: int):
    """The tensors ``st.hvp`` compiles (reverse over reverse) and its inputs ``z``, ``v``."""
    z, v = st.symbol("z", shape=(n,)), st.symbol("v", shape=(n,))
    with st.GradientTape() as outer:
        outer.watch(z)
        with st.GradientTape() as inner:
            inner.watch(z)
            y = f(z)
        g = inner.gradient(y, z, unconnected_gradients="zero")
        product = st.reduce_sum(g * v)
    return outer.gradient(product, z, unconnected_gradients="zero"), y, z, v


def _loop_ops(outs, ins) -> int:
    """Operations per point of the loop plan of ``outs`` over chunks of points (as many
    as ``st.hvp``'s plan takes)."""
    nodes = [o._node for o in outs]
    plan = loopnest.plan_loops(nodes, [i._node for i in ins],
                               points=strategy.point_chunk(nodes, 64))
    return plan.n_ops


def _central(g, z, v, h: float = 1e-5):
    return (g(z + h * v) - g(z - h * v)) / (2 * h)


def _rel(a, b) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("f", [_atan_outer, _atan_broadcast, _prod],
                         ids=["tensordot", "broadcast", "reduce_prod"])
def test_hvp_loop_plan_costs_a_few_times_the_function_at_every_size(f):
    """The planner takes the whole reverse-over-reverse graph (tensordot's einsum, the
    transposes of broadcasts, reduce_prod's derivative) as loops, and its operations per
    point stay a bounded multiple of the function's as n grows: no op is unrolled, and
    the derivative of a product costs O(n), not the O(n^2) of one product per element."""
    ratios = []
    for n in (100, 400):
        hv, y, z, v = _hvp_tensors(f, n)
        ratios.append(_loop_ops([hv], [z, v]) / _loop_ops([y], [z]))
    # (about 7 for the tensordot, 21-23 for the broadcast, 35 for the product, whose adding
    # scatters, concats and pads count their live terms and structural zeros to keep a
    # select's zeros exact through the product tree: docs/limits.md)
    assert max(ratios) < 40, ratios
    assert ratios[1] < 1.5 * ratios[0], ratios


def test_hvp_of_the_outer_product_program_at_437():
    """The program that stayed minutes in LLVM as an unrolled element kernel: planned as
    loops (checked first on the tensors, which raised Unplannable at the einsum), compiled
    as a loop plan, equal to central differences of the compiled gradient."""
    n = 437
    hv_t, _, z_s, v_s = _hvp_tensors(_atan_outer, n)
    loopnest.plan_loops([hv_t._node], [z_s._node, v_s._node], points=4)
    hv = st.hvp(_atan_outer, input_signature=[st.TensorSpec((n,))] * 2)
    g = st.grad(_atan_outer, input_signature=[st.TensorSpec((n,))])
    assert isinstance(hv.plan, LoopPlan) and isinstance(g.plan, LoopPlan)
    rng = np.random.default_rng(0)
    z, v = rng.uniform(0.5, 1.5, n), rng.standard_normal(n)
    assert _rel(hv(z, v), _central(g, z, v)) < 1e-7
    zs, vs = rng.uniform(0.5, 1.5, (3, n)), rng.standard_normal((3, n))  # several points
    got = hv(zs, vs)
    for k in range(3):
        assert _rel(got[k], _central(g, zs[k], vs[k])) < 1e-7


def test_hvp_matches_the_dense_hessian_at_small_n():
    """Below the loop thresholds (the element kernel) and planned as loops, the product
    is the dense Hessian's times v."""
    n = 12
    rng = np.random.default_rng(1)
    z, v = rng.uniform(0.5, 1.5, n), rng.standard_normal(n)
    hv_t, _, z_s, v_s = _hvp_tensors(_atan_outer, n)
    plan = loopnest.plan_loops([hv_t._node], [z_s._node, v_s._node])
    looped = st.codegen.compile_plan(plan)
    for f in (_atan_outer, _atan_broadcast):
        H = st.hessian(f, input_signature=[st.TensorSpec((n,))])(z)
        hv = st.hvp(f, input_signature=[st.TensorSpec((n,))] * 2)
        assert _rel(hv(z, v), H @ v) < 1e-13
    assert _rel(looped(z, v), H @ v) < 1e-13


def _others(x: np.ndarray) -> np.ndarray:
    """Product of the other elements, from prefix and suffix products (no division)."""
    pre = np.concatenate([[1.0], np.cumprod(x[:-1])])
    suf = np.concatenate([np.cumprod(x[::-1][:-1])[::-1], [1.0]])
    return pre * suf


def _prod_hvp(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``H v`` of ``prod(x)``: ``H[i, j]`` is the product of all but ``x_i`` and ``x_j``."""
    out = np.zeros_like(x)
    for i in range(x.size):
        rest = np.delete(x, i)
        out[i] = np.dot(_others(rest), np.delete(v, i))
    return out


def test_hvp_of_reduce_prod_at_300_with_zeros_is_exact():
    """The product's Hessian at n=300 (it raised LoweringError: a gather of 26,730,600
    elements), a loop plan; at points with one and two zeros the product of the others
    is exact (never ``prod / x``): with two zeros at a and b only ``H[a, b]`` survives."""
    n = 300
    hv = st.hvp(_prod, input_signature=[st.TensorSpec((n,))] * 2)
    g = st.grad(_prod, input_signature=[st.TensorSpec((n,))])
    assert isinstance(hv.plan, LoopPlan)
    rng = np.random.default_rng(2)
    x, v = rng.uniform(0.95, 1.05, n), rng.standard_normal(n)
    np.testing.assert_allclose(hv(x, v), _prod_hvp(x, v), rtol=1e-11, atol=1e-12)
    assert _rel(hv(x, v), _central(g, x, v)) < 1e-7
    x[7] = 0.0
    np.testing.assert_allclose(g(x), _others(x), rtol=1e-12, atol=0)
    np.testing.assert_allclose(hv(x, v), _prod_hvp(x, v), rtol=1e-11, atol=1e-12)
    x[200] = 0.0
    e = np.zeros(n)
    e[200] = 1.0
    col = hv(x, e)
    want = np.zeros(n)
    want[7] = np.prod(np.delete(x, [7, 200]))
    assert want[7] != 0.0
    np.testing.assert_allclose(col, want, rtol=1e-12, atol=0)
    assert np.count_nonzero(col) == 1


@pytest.mark.parametrize("shape", [(5,), (3, 4)])
def test_reduce_prod_derivatives_at_zeros_to_order_two(shape):
    """Gradient and Hessian of products over each axis, with zeros, against the
    products of the others (exact, no division) and finite differences."""
    rng = np.random.default_rng(3)
    x0 = rng.uniform(0.5, 2.0, shape)
    x0.flat[1] = 0.0
    axes = [None] + list(range(len(shape)))
    for axis in axes:
        x = st.Variable(x0)
        with st.GradientTape() as t2:
            with st.GradientTape() as t1:
                y = st.reduce_sum(st.reduce_prod(x, axis=axis) * st.constant(1.5))
            g = t1.gradient(y, x)
        H = t2.jacobian(g, x).numpy()
        moved = np.moveaxis(x0, axis, -1) if axis is not None else x0.reshape(1, -1)
        want = np.stack([_others(row) for row in moved.reshape(-1, moved.shape[-1])])
        want = 1.5 * (np.moveaxis(want.reshape(moved.shape), -1, axis) if axis is not None
                      else want.reshape(shape))
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-14, atol=0)
        h = 1e-6
        for i in np.ndindex(*shape):
            d = np.zeros(shape)
            d[i] = h
            x.assign(x0 + d)
            with st.GradientTape() as tp:
                yp = st.reduce_sum(st.reduce_prod(x, axis=axis) * st.constant(1.5))
            gp = tp.gradient(yp, x).numpy()
            x.assign(x0 - d)
            with st.GradientTape() as tm:
                ym = st.reduce_sum(st.reduce_prod(x, axis=axis) * st.constant(1.5))
            gm = tm.gradient(ym, x).numpy()
            np.testing.assert_allclose(H[(...,) + i], (gp - gm) / (2 * h), atol=1e-8)


_W = np.random.default_rng(4).standard_normal((500, 500)) / 25
_IDX = np.random.default_rng(5).integers(0, 500, 800)


def _matmul_chain(z):
    w = st.constant(_W)
    h = st.tanh(st.matmul(w, z[:, None]))
    return st.reduce_sum(st.tanh(st.matmul(w, h)) ** 2)


def _softmax(z):
    return st.reduce_sum(st.nn.softmax(z) * st.range(500.0)) + st.reduce_logsumexp(z)


def _gather(z):
    return st.reduce_sum(st.sin(st.gather(z, _IDX)) * st.gather(z, _IDX[::-1]))


def _select(z):
    return st.reduce_sum(st.where(z > 1.0, st.sin(z), z ** 3) * st.reduce_mean(z))


@pytest.mark.parametrize("f", [_matmul_chain, _softmax, _gather, _select],
                         ids=["matmul-chain", "softmax", "gather", "where"])
def test_hvp_of_other_programs_at_500(f):
    """Other shapes of program compile (none refuses or unrolls a 500-element op) and
    agree with central differences of the compiled gradient."""
    n = 500
    hv = st.hvp(f, input_signature=[st.TensorSpec((n,))] * 2)
    g = st.grad(f, input_signature=[st.TensorSpec((n,))])
    rng = np.random.default_rng(6)
    z, v = rng.uniform(0.5, 1.5, n), rng.standard_normal(n)
    assert _rel(hv(z, v), _central(g, z, v)) < 1e-7


# --- the loop forms these take ----------------------------------------------------------


@pytest.mark.parametrize("points", [0, 8], ids=["per-point", "chunks"])
@pytest.mark.parametrize("spec,shapes", [
    ("i,j->ij", [(70,), (80,)]),
    ("ij,j->i", [(70, 80), (80,)]),
    ("ij,i->j", [(70, 80), (70,)]),
    ("ij,jk,k->i", [(30, 40), (40, 50), (50,)]),
    ("ii->i", [(90, 90)]),
    ("ij,->ji", [(70, 80), ()]),
    ("ij,ij->", [(70, 80), (70, 80)]),
])
def test_einsum_loop_form_equals_numpy(spec, shapes, points):
    """Einsums (outer products, contractions, diagonals, scalars) are loop nests, not
    unrolled element views, equal to numpy's einsum per point and in chunks of points."""
    rng = np.random.default_rng(7)
    syms = [st.symbol(f"a{i}", shape=s) for i, s in enumerate(shapes)]
    out = st.einsum(spec, *syms) * 1.0
    plan = loopnest.plan_loops([out._node], [s._node for s in syms], points=points)
    assert max(b.body.n_ops for b in plan.blocks) < 8  # (an unrolled view: one per term)
    f = st.codegen.compile_plan(plan)
    args = [rng.standard_normal((3,) + s) for s in shapes]
    got = f(*args)
    for k in range(3):
        np.testing.assert_allclose(got[k], np.einsum(spec, *[a[k] for a in args]),
                                   rtol=1e-12, atol=1e-12)


def test_summing_scatter_is_one_accumulating_loop():
    """A scatter adding several elements into each place (the transpose of a broadcast)
    accumulates in one loop, equal to numpy's ``add.at``."""
    x = st.symbol("x", shape=(300, 40))
    idx = np.broadcast_to(np.arange(40)[None, :], (300, 40)).copy()
    out = ops.scatter_add.bind(st.sin(x), idx=idx, shape=(40,))
    plan = loopnest.plan_loops([out._node], [x._node])
    assert any(b.accumulate and b.space == (300, 40) for b in plan.blocks)
    f = st.codegen.compile_plan(plan)
    xv = np.random.default_rng(8).standard_normal((300, 40))
    want = np.zeros(40)
    np.add.at(want, idx.reshape(-1), np.sin(xv).reshape(-1))
    np.testing.assert_allclose(f(xv), want, rtol=1e-13)


def test_select_on_a_large_boolean_is_a_loop():
    """``where`` of a computed condition over 5,000 elements (nan and infinities among
    them) is a loop, equal to numpy."""
    x = st.symbol("x", shape=(5000,))
    y = st.where(x > 1.0, st.sin(x), x ** 3) * st.where(x < -1.0, x, 2.0)
    plan = loopnest.plan_loops([y._node], [x._node])
    f = st.codegen.compile_plan(plan)
    xv = np.random.default_rng(9).uniform(-3, 3, 5000)
    xv[:4] = [np.nan, np.inf, -np.inf, 0.0]
    with np.errstate(invalid="ignore"):
        want = np.where(xv > 1.0, np.sin(xv), xv ** 3) * np.where(xv < -1.0, xv, 2.0)
    np.testing.assert_allclose(f(xv), want, rtol=1e-14)  # (nan where numpy's is)


# --- compiled training steps shared by threads ---------------------------------------------


def _hammer(step, args, threads: int = 8, calls: int = 300) -> None:
    """``calls`` calls of ``step(*args)`` on each of ``threads`` threads started together."""
    start = threading.Barrier(threads)
    errors = []

    def run():
        try:
            start.wait()
            for _ in range(calls):
                step(*args)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors


def test_threads_sharing_a_compiled_step_lose_no_variable_update():
    """Each call reads the variables, runs and writes them back as one step: 8 threads of
    300 calls of ``v.assign_add(1.0)`` (and ``w.assign_sub`` of a vector) end at 2,400."""
    v, w = st.Variable(0.0), st.Variable(np.zeros(3))

    @st.function
    def step(x):
        v.assign_add(1.0)
        w.assign_sub(x)
        return v

    x = np.array([1.0, 2.0, -0.5])
    step(x)
    v.assign(0.0)
    w.assign(np.zeros(3))
    _hammer(step, (x,))
    assert v.numpy() == 2400.0
    np.testing.assert_array_equal(w.numpy(), -2400.0 * x)


def test_threads_sharing_a_step_traced_for_every_batch_size_lose_no_update():
    """The same for a step with a None batch dimension (its passes and post program run
    as one call): each call adds its batch's sum."""
    v = st.Variable(0.0)

    @st.function(input_signature=[st.TensorSpec((None,))])
    def step(x):
        v.assign_add(st.reduce_sum(x))

    x = np.array([1.0, 2.0])
    step(x)
    assert "(None,)" in str(step.traced_signatures)
    v.assign(0.0)
    _hammer(step, (x,))
    assert v.numpy() == 3.0 * 2400


def test_pure_functions_do_not_wait_for_a_step_that_assigns():
    """Only functions that assign variables take their lock: a pure function's calls run
    while another thread holds it (the native call releases the GIL), an assigning one's
    wait for it."""
    v = st.Variable(1.0)
    pure = st.function(lambda x: x * v)
    assigning = st.function(lambda x: v.assign_add(x))
    pure(np.ones(2))
    assigning(np.ones(()))
    for f, runs in ((pure, True), (assigning, False)):
        done = threading.Event()
        with f._assigning:
            t = threading.Thread(target=lambda: (f(np.ones(2) if f is pure else 1.0),
                                                 done.set()))
            t.start()
            assert done.wait(5.0 if runs else 0.5) is runs
        t.join()
        assert done.is_set()
