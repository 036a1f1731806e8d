"""Loop plans (tensor nodes as loop nests) against eager values: every op of the table and
its derivatives to order 2, batch lengths 0, 1, 3 and 1001; elementwise ops on large
tensors with zeros, infinities and nans (where eager values follow the template level, as
loop bodies do); and ``st.function`` training steps that take the loop path."""

from __future__ import annotations

import math
import importlib
import pickle
import re
import threading

import numpy as np
import pytest
from test_compile_ops import _alike, _compiled_rows, _outputs, _points
from test_ops import ROWS

import symtape as st
from symtape.compile import fusion
from symtape.compile import planner as loopnest
from symtape.compile import strategy
from symtape.codegen import compile_plan
from symtape.codegen.loops import Access, LoopPlan
from symtape.base.errors import LoweringError


def _loop_compiled(outs, syms, points=0):
    plan = loopnest.plan_loops([o._node for o in outs], [s._node for s in syms],
                               points=points)
    return compile_plan(plan), plan


def _close(got, want) -> np.ndarray:
    """Equal to 1e-12 relative, or (cancellations to zero: element folding drops terms the
    template level computes) to 1e-12 of the output's largest finite magnitude."""
    want = np.asarray(want, dtype=np.float64)
    finite = np.abs(want[np.isfinite(want)])
    scale = finite.max() if finite.size else 1.0
    with np.errstate(invalid="ignore"):
        near = np.abs(np.asarray(got, dtype=np.float64) - want) <= 1e-12 * scale
    return _alike(got, want, rtol=1e-12) | near


@pytest.mark.parametrize("points", [0, 8], ids=["per-point", "chunks"])
@pytest.mark.parametrize("name", _compiled_rows())
def test_loop_plan_equals_eager(name, points):
    """Per point, and in chunks of 8 points (1001 points: whole chunks on the arrays, the
    last one staged)."""
    r = ROWS[name]
    syms = [st.symbol(f"a{i}", shape=a.shape, dtype=a.dtype) for i, a in enumerate(r.args)]
    outs = _outputs(r, syms, order=2)
    f, plan = _loop_compiled(outs, syms, points)
    assert isinstance(f.plan, LoopPlan) and plan.blocks
    # regular samples and large magnitudes (at zeros and non-finite values small eager
    # tensors fold as the element DAG does, which the template level does not: those are
    # compared on large tensors below)
    points = [p for k, p in enumerate(_points(r)) if k % 4 in (0, 2)]
    eager = []
    for pt in points:
        leaves = [st.symbol(f"a{i}", x) for i, x in enumerate(pt)]
        eager.append([np.asarray(o.numpy()) for o in _outputs(r, leaves, order=2)])
    for batch in (0, 1, 3, 1001):
        picks = [k % len(points) for k in range(batch)]
        args = [np.array([points[k][i] for k in picks]).reshape((batch,) + a.shape)
                for i, a in enumerate(r.args)]
        got = f(*args)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(outs)
        for j, g in enumerate(got):
            assert g.shape == (batch,) + outs[j].shape
            for row, k in enumerate(picks):
                ok = _close(g[row], eager[k][j])
                assert ok.all(), (name, j, points[k], g[row], eager[k][j])


def _special(rng, n: int) -> np.ndarray:
    x = rng.uniform(-3, 3, n)
    pick = rng.random(n)
    x[pick < 0.1] = 0.0
    x[(pick >= 0.1) & (pick < 0.2)] = -0.0
    x[(pick >= 0.2) & (pick < 0.25)] = np.inf
    x[(pick >= 0.25) & (pick < 0.3)] = -np.inf
    x[(pick >= 0.3) & (pick < 0.35)] = np.nan
    return x


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide", "exp", "log",
                                "tanh", "sqrt", "relu", "sigmoid", "softplus", "maximum",
                                "minimum", "pow", "abs", "sin", "atan2"])
def test_large_elementwise_special_values(op):
    """On tensors above the element limit eager values are the template's, as loop bodies
    compute them: equal bit for bit but for sin (its lane form), nan and inf alike; the
    same run over chunks of points (each point one row: 600 points, the last chunk
    staged)."""
    rng = np.random.default_rng(7)
    fn = getattr(st, op, None) or getattr(st.math, op, None) or getattr(st.nn, op)
    n = 600
    xs = [st.Variable(_special(rng, n)), st.Variable(_special(rng, n))]
    try:
        y = fn(*xs)
    except TypeError:
        y = fn(xs[0])
    f, _ = _loop_compiled([y], xs)
    got = f(xs[0].numpy(), xs[1].numpy())
    assert _alike(got, y.numpy(), rtol=1e-15).all()
    rows = [st.symbol(f"r{i}", shape=(1,)) for i in range(2)]
    try:
        z = fn(*rows)
    except TypeError:
        z = fn(rows[0])
    g, _ = _loop_compiled([z], rows, points=64)
    per_point = g(xs[0].numpy()[:, None], xs[1].numpy()[:, None])
    assert _alike(per_point[:, 0], y.numpy(), rtol=1e-15).all()


def _mlp_step(sizes, batch, lr=1e-3):
    rng = np.random.default_rng(0)
    vs = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        vs += [st.Variable(rng.standard_normal((a, b)) / np.sqrt(a)), st.Variable(np.zeros(b))]
    ms = [st.Variable(np.zeros(v.shape)) for v in vs]
    ss = [st.Variable(np.zeros(v.shape)) for v in vs]

    def step(x, y):
        with st.GradientTape() as tape:
            h = x
            for i in range(0, len(vs) - 2, 2):
                h = st.nn.relu(st.matmul(h, vs[i]) + vs[i + 1])
            logits = st.matmul(h, vs[-2]) + vs[-1]
            loss = st.reduce_mean(st.nn.softmax_cross_entropy_with_logits(labels=y,
                                                                          logits=logits))
        grads = tape.gradient(loss, vs)
        for g, v, m, s in zip(grads, vs, ms, ss):
            m.assign(0.9 * m + 0.1 * g)
            s.assign(0.999 * s + 0.001 * g * g)
            v.assign_sub(lr * m / (st.sqrt(s) + 1e-7))
        return loss

    x = rng.standard_normal((batch, sizes[0]))
    y = np.eye(sizes[-1])[rng.integers(0, sizes[-1], batch)]
    return step, vs + ms + ss, x, y


def _run(step, state, x, y, steps, compiled):
    start = [v.numpy().copy() for v in state]
    fn = st.function(step) if compiled else step
    losses = [float(fn(x, y)) for _ in range(steps)]
    end = [v.numpy().copy() for v in state]
    for v, s in zip(state, start):
        v.assign(s)
    return losses, end, fn


def test_training_step_takes_loop_path_and_matches_eager():
    step, state, x, y = _mlp_step((64, 32, 10), batch=48)
    eager_losses, eager_end, _ = _run(step, state, x, y, 3, compiled=False)
    losses, end, fn = _run(step, state, x, y, 3, compiled=True)
    assert isinstance(fn.get_concrete_function(x, y).plan, LoopPlan)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-12)
    assert losses[2] < losses[0]
    for a, b in zip(end, eager_end):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-14)


def test_loop_and_element_paths_agree(monkeypatch):
    step, state, x, y = _mlp_step((6, 5, 3), batch=4)
    _, element_end, fn = _run(step, state, x, y, 2, compiled=True)
    assert not isinstance(fn.get_concrete_function(x, y).plan, LoopPlan)
    monkeypatch.setattr(strategy, "LOOP_MIN_ATOMS", 0)
    _, loop_end, fn = _run(step, state, x, y, 2, compiled=True)
    assert isinstance(fn.get_concrete_function(x, y).plan, LoopPlan)
    for a, b in zip(loop_end, element_end):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)


def test_views_are_not_copied():
    """Transpose, reshape, slices and broadcasts are index arithmetic: one block per
    computing op; a view that is not affine in its buffer (a reshape of a transpose) is
    copied once."""
    x = st.Variable(np.arange(24.0).reshape(4, 6) / 10)
    v = st.transpose(st.reshape(x, (3, 8)))[1:, ::2]
    y = st.exp(v) + st.reduce_sum(x)
    f, plan = _loop_compiled([y], [x])
    assert len(plan.blocks) == 3  # fill and accumulate of the sum, exp-and-add
    np.testing.assert_allclose(f(x.numpy()), y.numpy(), rtol=1e-15)
    w = st.exp(st.reshape(st.transpose(x), (3, 8)))
    f, plan = _loop_compiled([w], [x])
    assert len(plan.blocks) == 2  # the copy, exp
    np.testing.assert_allclose(f(x.numpy()), w.numpy(), rtol=1e-15)


def test_elementwise_chains_fuse_into_one_loop():
    """An Adam update is three loops (the two moments, which are outputs, and the step),
    not one per op; values as the eager chain's to rounding."""
    rng = np.random.default_rng(2)
    w, m, s, g = (st.Variable(rng.standard_normal((40, 30))) for _ in range(4))
    m1 = 0.9 * m + 0.1 * g
    s1 = 0.999 * s + 0.001 * g * g
    w1 = w - 0.01 * m1 / (st.sqrt(s1) + 1e-7)
    f, plan = _loop_compiled([m1, s1, w1], [w, m, s, g])
    assert len(plan.blocks) == 3
    for got, want in zip(f(*(v.numpy() for v in (w, m, s, g))), (m1, s1, w1)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-14)


def test_arena_reuses_dead_temporaries():
    x = st.Variable(np.linspace(-1, 1, 1000))
    y = x
    for _ in range(10):
        y = st.tanh(y) * 1.5
        y = y + st.reduce_sum(y) * 1e-3  # used twice: not fused
    f, plan = _loop_compiled([y], [x])
    offsets, size = plan.arena
    assert size <= 3 * 8064  # three live 1000-element temporaries at most, not twenty
    np.testing.assert_allclose(f(x.numpy()), y.numpy(), rtol=1e-12)


def test_unplannable_falls_back_to_elements(monkeypatch):
    """An op whose loop rule refuses (here searchsorted's, made to) and that is too large
    to unroll: the function compiles its element view."""
    def refused(self, planner, node):
        raise loopnest.Unplannable(f"{self.name} refused")

    monkeypatch.setattr(strategy, "LOOP_MIN_ATOMS", 0)
    monkeypatch.setattr(loopnest, "UNROLL_LIMIT", 8)
    monkeypatch.setattr(type(st.ops.ordering.searchsorted), "loop", refused)
    x = np.random.default_rng(1).permutation(12).astype(float) + 0.5
    edges = np.arange(12.0)

    @st.function
    def f(v):
        where = st.cast(st.searchsorted(st.constant(edges), v), st.float64)
        return st.exp(where * 0.1 + st.reduce_sum(v)) * 2.0

    np.testing.assert_allclose(f(x).numpy(), np.exp(np.searchsorted(edges, x) * 0.1 +
                                                    x.sum()) * 2.0, rtol=1e-15)
    assert not isinstance(f.get_concrete_function(x).plan, LoopPlan)


def test_integer_tensors_are_planned_as_doubles(monkeypatch):
    """Casts to integers, integer arithmetic and sums of integers in loop plans equal their
    eager (numpy integer) values."""
    monkeypatch.setattr(strategy, "LOOP_MIN_ATOMS", 0)
    rng = np.random.default_rng(8)
    x = rng.uniform(-50.0, 50.0, (40, 30))

    def g(v):
        k = st.cast(v * 2.5, "int64")  # truncation toward zero
        q = k // 3 * 2 - k % 7
        count = st.reduce_sum(st.cast(v > 0.0, "int32"), axis=1)
        return st.cast(q, "float64") + st.cast(count, "float64")[:, None]

    f = st.function(g)
    got = f(x).numpy()
    assert isinstance(f.get_concrete_function(x).plan, LoopPlan)
    np.testing.assert_array_equal(got, g(st.constant(x)).numpy())
    k = np.trunc(x * 2.5).astype(np.int64)
    want = (k // 3 * 2 - k % 7) + np.sum(x > 0, axis=1)[:, None]
    np.testing.assert_array_equal(got, want)


def test_loop_functions_refuse_formulas_and_files_but_pickle(tmp_path):
    x = st.Variable(np.ones((4, 3)))
    y = st.reduce_sum(st.matmul(x, x, transpose_b=True))
    f, _ = _loop_compiled([y], [x])
    for what in (f.formula, f.c_source, lambda: f.save(tmp_path / "f.st")):
        with pytest.raises(LoweringError, match="loop nests"):
            what()
    g = pickle.loads(pickle.dumps(f))
    assert float(g(np.full((4, 3), 2.0))) == 4 * 4 * 12.0


def test_large_blocks_split_across_threads_with_equal_values(monkeypatch):
    """A large block's outermost loop runs in ranges on pthreads; each element is computed
    by one thread in the same order, so values are the same bits as on one thread. A sum
    over the outermost axis (iterations writing one element) is never split. (The work a
    block needs to be split is lowered: a product this small runs faster on one thread.)"""
    monkeypatch.setattr(importlib.import_module("symtape.codegen.loops"), "PARALLEL_WORK",
                        1 << 19)
    rng = np.random.default_rng(5)
    a, b = st.Variable(rng.standard_normal((96, 200))), st.Variable(rng.standard_normal((200, 64)))
    ys = [st.tanh(st.matmul(a, b)), st.reduce_sum(st.matmul(a, b), axis=0)]
    nodes, ins = [y._node for y in ys], [a._node, b._node]
    one = compile_plan(loopnest.plan_loops(nodes, ins, threads=1))
    three = compile_plan(loopnest.plan_loops(nodes, ins, threads=3))
    assert "pthread_create" in three.llvm_ir and "pthread_create" not in one.llvm_ir
    sums = [k for k, blk in enumerate(three.plan.blocks)
            if blk.accumulate and blk.outs[0].strides[0] == 0]
    assert sums and all(f"@b{k}.par" not in three.llvm_ir for k in sums)
    for x, y, want in zip(one(a.numpy(), b.numpy()), three(a.numpy(), b.numpy()), ys):
        np.testing.assert_array_equal(x, y)
        assert _close(y, want.numpy()).all()  # eager: BLAS's order of terms
    # each call starts its own helpers: calls from several threads at once agree
    results = [None] * 6

    def call(i):
        results[i] = three(a.numpy() * (i + 1), b.numpy())

    workers = [threading.Thread(target=call, args=(i,)) for i in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    for i, got in enumerate(results):
        for x, y in zip(one(a.numpy() * (i + 1), b.numpy()), got):
            np.testing.assert_array_equal(x, y)


def test_threads_start_once_a_call_and_only_for_large_work(monkeypatch):
    """Helper threads are started by a program whose blocks to split come to PARALLEL_WORK
    operations, once a call, and then take every block of at least POOL_WORK; a plan with
    less to split starts none."""
    loops = importlib.import_module("symtape.codegen.loops")
    rng = np.random.default_rng(7)
    a, b = st.Variable(rng.standard_normal((64, 100))), st.Variable(rng.standard_normal((100, 64)))
    ys = [st.tanh(st.matmul(a, b)) * 2.0 + 1.0]
    nodes, ins = [y._node for y in ys], [a._node, b._node]
    plan = loopnest.plan_loops(nodes, ins, threads=2)
    work = [math.prod(blk.space) * max(1, blk.body.n_ops) for blk in plan.blocks]
    monkeypatch.setattr(loops, "POOL_WORK", min(w for w in work if w > 1))
    monkeypatch.setattr(loops, "PARALLEL_WORK", sum(work) + 1)
    assert all(len(r) == 1 for r in loops.splits(plan))
    assert "@pool.start" not in compile_plan(plan).llvm_ir
    monkeypatch.setattr(loops, "PARALLEL_WORK", max(work))
    split = loops.splits(plan)
    assert sum(len(r) > 1 for r in split) >= 2
    f = compile_plan(plan)
    assert f.llvm_ir.count("call void @pool.start") == 1  # in body: once for all points
    program = f.llvm_ir[f.llvm_ir.index("define internal void @program("):]
    assert "@pool.start" not in program[:program.index("\n}")]
    single = compile_plan(loopnest.plan_loops(nodes, ins, threads=1))
    np.testing.assert_array_equal(f(a.numpy(), b.numpy()), single(a.numpy(), b.numpy()))
    xs = np.stack([a.numpy() * k for k in (1.0, -0.5, 2.0)])
    np.testing.assert_array_equal(f(xs, b.numpy()), single(xs, b.numpy()))


def _mlp_grad_by_hand(layers, x):
    hs, h = [], x
    for w, b in layers[:-1]:
        h = np.tanh(h @ w + b)
        hs.append(h)
    g = np.ones((x.shape[0], 1))
    for (w, _), h in zip(reversed(layers[1:]), reversed(hs)):
        g = (g @ w.T) * (1.0 - h * h)
    return g @ layers[0][0].T


def _mlp(layers):
    ws = [(st.constant(w), st.constant(b)) for w, b in layers]

    def f(x):
        h = x
        for i, (w, b) in enumerate(ws):
            h = st.matmul(h[None, :], w)[0] + b
            if i < len(ws) - 1:
                h = st.tanh(h)
        return st.reduce_sum(h)
    return f


def test_gradient_of_one_point_function_runs_in_chunks_of_points(monkeypatch, tmp_path):
    """st.grad of an MLP taken as a loop plan over chunks of points (each layer one matrix
    product over the chunk's points) equals the chain rule written with numpy, for batches
    shorter than, equal to and longer than a chunk, strided and broadcast arguments; its
    formula and C source are the element view's, and its saved file the straight-line
    function."""
    monkeypatch.setattr(strategy, "LOOP_MIN_ATOMS", 0)
    rng = np.random.default_rng(3)
    sizes = (3, 5, 4, 1)
    layers = [(rng.standard_normal((a, b)), rng.standard_normal(b))
              for a, b in zip(sizes[:-1], sizes[1:])]
    g = st.grad(_mlp(layers), input_signature=[st.TensorSpec((3,))])
    plan = g.plan
    assert isinstance(plan, LoopPlan) and plan.points > 0
    assert any(b.points > 1 for b in plan.blocks)  # rows of points in a matrix product
    for n in (0, 1, 5, plan.points, 2 * plan.points + 3):
        x = rng.standard_normal((n, 3))
        np.testing.assert_allclose(g(x), _mlp_grad_by_hand(layers, x), rtol=1e-12,
                                   atol=1e-14)
    x = rng.standard_normal((2 * plan.points + 1, 6))[:, ::2]  # strided rows
    np.testing.assert_allclose(g(x), _mlp_grad_by_hand(layers, x), rtol=1e-12, atol=1e-14)
    one = rng.standard_normal(3)
    wide = np.broadcast_to(one, (plan.points + 2, 3))  # every point the same: stride 0
    np.testing.assert_allclose(g(wide), _mlp_grad_by_hand(layers, np.array(wide)),
                               rtol=1e-12, atol=1e-14)
    formula = g.formula()
    assert formula.shape == (3,) and all(e.free_symbols for e in formula)
    assert "tanh" in g.c_source()
    g.save(tmp_path / "g.st")
    loaded = st.load(tmp_path / "g.st")
    # the element view rounds each product's terms twice, the loop plan's FMAs once
    np.testing.assert_allclose(loaded(one), g(one), rtol=1e-12)
    copy = pickle.loads(pickle.dumps(g))
    np.testing.assert_array_equal(copy(wide), g(wide))
    with pytest.raises(LoweringError, match="element view"):
        copy.formula()


def test_chunked_plan_in_float32():
    rng = np.random.default_rng(4)
    x = st.symbol("x", shape=(6,))
    w = st.constant(rng.standard_normal((6, 5)))
    y = st.exp(st.matmul(x[None, :], w)[0] * 0.25)
    plan = loopnest.plan_loops([y._node], [x._node], points=8)
    f = compile_plan(plan, dtype="float32")
    xs = rng.standard_normal((11, 6)).astype(np.float32)
    got = f(xs)
    assert got.dtype == np.float32
    want = np.exp((xs.astype(np.float64) @ w.numpy()) * 0.25)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_points_must_be_a_multiple_of_the_alignment():
    x = st.symbol("x", shape=(2,))
    with pytest.raises(ValueError, match="multiple"):
        loopnest.plan_loops([st.exp(x)._node], [x._node], points=6)


@pytest.mark.parametrize("points", [0, 8])
def test_concatenations_of_computed_tensors_copy_each_part(points):
    """A concat or stack of several computed tensors is one copy loop per part (a run of
    elements in each), not an element-by-element copy."""
    x = st.symbol("x", shape=(3000,))
    parts = [st.exp(x * 0.001), st.sin(x) * 2.0]
    ys = [st.concat(parts, 0), st.stack(parts, axis=1)]
    plan = loopnest.plan_loops([y._node for y in ys], [x._node], points=points)
    copies = [b for b in plan.blocks if len(b.body.instrs) == 1 and b.ins]
    assert len(copies) == 4 and all(math.prod(b.space) == points * 3000 or
                                    math.prod(b.space) == 3000 for b in copies)
    f = compile_plan(plan)
    xs = np.random.default_rng(6).standard_normal((5, 3000))
    got = f(xs)
    want_parts = [np.exp(xs * 0.001), np.sin(xs) * 2.0]
    np.testing.assert_allclose(got[0], np.concatenate(want_parts, axis=1), rtol=1e-15)
    np.testing.assert_allclose(got[1], np.stack(want_parts, axis=2), rtol=1e-15)


def test_many_small_tensor_ops_compile_as_their_element_view(monkeypatch):
    """Past LOOP_MAX_BLOCKS tensor ops a function is not loop-planned (LLVM's time per
    block would dominate) unless its element view is hopelessly large."""
    x = st.symbol("x", shape=(50,))
    y = x
    for _ in range(12):
        y = st.sin(y) * 1.5
    monkeypatch.setattr(strategy, "LOOP_MIN_ATOMS", 0)
    assert strategy.worth_looping([y._node])
    monkeypatch.setattr(strategy, "LOOP_MAX_BLOCKS", 10)
    assert not strategy.worth_looping([y._node])
    monkeypatch.setattr(strategy, "LOOP_ALWAYS_ATOMS", 100)
    assert strategy.worth_looping([y._node])


def _scalar_rosenbrock_gradient(n: int):
    x = st.symbol("x", shape=(n,))
    with st.GradientTape() as t:
        y = sum(100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2 for i in range(n - 1))
    return x, t.gradient(y, x)


def test_scalar_code_whose_one_hot_sums_fold_compiles_as_its_element_view(monkeypatch):
    """Scalar code indexing a vector differentiates into sums of one-hot scatters: the
    tensor sizes overestimate the element view (it folds to a few terms an element), which
    is compiled unrolled instead of as loops over dense vectors."""
    _, g = _scalar_rosenbrock_gradient(60)
    assert not strategy.worth_looping([g._node], 8000)
    monkeypatch.setattr(strategy, "FOLD_PROBE_ATOMS", 0)  # the estimate alone would loop
    _, g = _scalar_rosenbrock_gradient(60)
    assert strategy.worth_looping([g._node], 8000)


def test_scalar_code_gradient_values():
    n = 60
    f = st.grad(lambda x: sum(100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
                              for i in range(n - 1)), input_signature=[st.TensorSpec((n,))])
    pts = np.random.default_rng(4).normal(0.5, 1.0, (7, n))
    want = np.zeros_like(pts)
    a, b = pts[:, :-1], pts[:, 1:]
    want[:, :-1] += -400.0 * a * (b - a ** 2) - 2.0 * (1.0 - a)
    want[:, 1:] += 200.0 * (b - a ** 2)
    np.testing.assert_allclose(f(pts), want, rtol=1e-12, atol=1e-9)


def test_small_network_gradients_run_in_chunks_of_points():
    """A one-point function whose matrix products have POINT_LOOP_MATMUL_TERMS terms is
    loop-planned over chunks of points even when its element view is small; a scalar
    program of the same size is not."""
    rng = np.random.default_rng(9)
    sizes = (8, 16, 16, 1)
    layers = [(rng.standard_normal((a, b)) / np.sqrt(a), rng.standard_normal(b))
              for a, b in zip(sizes[:-1], sizes[1:])]
    g = st.grad(_mlp(layers), input_signature=[st.TensorSpec((8,))])
    assert isinstance(g.plan, LoopPlan) and g.plan.points
    x = rng.standard_normal((300, 8))
    np.testing.assert_allclose(g(x), _mlp_grad_by_hand(layers, x), rtol=1e-12, atol=1e-14)
    h = st.grad(lambda v: st.reduce_sum(st.sin(v) * v), input_signature=[st.TensorSpec((8,))])
    assert not isinstance(h.plan, LoopPlan)


def test_large_arenas_are_kept_between_calls_and_threads_do_not_share_them():
    """A loop kernel whose temporaries need the heap keeps its arena for the next call
    (an atomic slot; concurrent calls each get their own) and frees it with the function;
    it works from the arena's first cache line (malloc's start is 16-byte aligned: every
    512-bit store of a temporary straddled two lines), freeing what malloc gave."""
    import gc
    import threading

    from symtape.codegen import loops

    rng = np.random.default_rng(11)
    a = st.Variable(rng.standard_normal((300, 200)))
    y = st.tanh(st.matmul(a, a, transpose_b=True)) * 2.0
    f, plan = _loop_compiled([y], [a])
    assert plan.arena[1] > loops.LANE_STACK_BYTES and "@arena.slots" in f.llvm_ir
    assert f"@malloc(i64 {plan.arena[1] + 64})" in f.llvm_ir
    assert "%arena.skip = and i64 %arena.neg, 63" in f.llvm_ir
    assert "@free(ptr %arena.raw)" in f.llvm_ir and "@free(ptr %arena)" not in f.llvm_ir
    inputs = [rng.standard_normal((300, 200)) for _ in range(6)]
    want = [np.tanh(x @ x.T) * 2.0 for x in inputs]
    got: dict = {}

    def run(i, fn=f):
        for _ in range(5):
            got[i] = fn(inputs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(6):
        np.testing.assert_allclose(got[i], want[i], rtol=1e-12, atol=1e-14)
    del f, run, threads
    gc.collect()  # the finaliser frees the kept arena (no crash, no leak checker here)


@pytest.mark.parametrize("points", [0, 8], ids=["per-point", "chunks"])
def test_gathers_and_scatters_are_index_arithmetic(points):
    """A gather of a few long runs copies run by run, a scatter to distinct places is a
    zero fill and one copy of a box, with no element-by-element body of thousands."""
    from symtape import ops

    n, half = 6000, 3000
    x = st.symbol("x", shape=(n,))
    e = st.exp(x * 1e-3)
    runs = np.concatenate([np.arange(10, 2010), np.arange(3000, 5000), np.arange(0, 5)])
    gathered = ops.gather_flat.bind(e, idx=runs)
    places = np.arange(2)[:, None] * half + 1 + np.arange(half - 1)[None, :]
    scattered = ops.scatter_add.bind(st.reshape(e, (2, half))[:, 1:], idx=places,
                                     shape=(2, half))
    plan = loopnest.plan_loops([gathered._node, scattered._node], [x._node], points=points)
    assert max(len(b.body.instrs) for b in plan.blocks) < 100
    # the gathered output is copied run by run straight into the output buffer
    out_buffer = next(i for i, b in enumerate(plan.buffers) if b.kind == "output"
                      and b.index == 0)
    writes = [b for b in plan.blocks if any(a.buffer == out_buffer for a in b.outs)]
    assert len(writes) == 3 and sum(math.prod(b.space) for b in writes) == \
        len(runs) * max(points, 1)
    f = compile_plan(plan)
    xs = np.random.default_rng(7).standard_normal((3, n))
    got_g, got_s = f(xs)
    ex = np.exp(xs * 1e-3)
    np.testing.assert_allclose(got_g, ex[:, runs], rtol=1e-15)  # exp: to an ulp
    want_s = ex.reshape(3, 2, half).copy()
    want_s[:, :, 0] = 0.0
    np.testing.assert_allclose(got_s, want_s, rtol=1e-15)
    assert not got_s[:, :, 0].any()


def test_shared_arguments_of_a_chunked_plan_are_read_in_place():
    """A chunked plan whose weight argument is shared by all points (``shared``): a matrix
    product over the chunk's points reading the weights where they are, equal to numpy for
    batches shorter than, equal to and longer than a chunk, strided rows (staged) and an
    empty batch; weights with batch dimensions are refused."""
    rng = np.random.default_rng(8)
    x = st.symbol("x", shape=(1, 6))
    w = st.symbol("w", shape=(6, 5))
    s = st.symbol("s")
    y = st.tanh(st.matmul(x, w)) * s + st.reduce_sum(x * x, axis=1, keepdims=True)
    plan = loopnest.plan_loops([y._node], [x._node, w._node, s._node], points=8,
                               shared=[False, True, False])
    assert plan.shared == (False, True, False)
    assert any(b.points > 1 for b in plan.blocks)  # rows of points in one product
    f = compile_plan(plan)
    wv = rng.standard_normal((6, 5))

    def want(xs, sv):
        return np.tanh(xs @ wv) * sv[..., None, None] + np.sum(xs * xs, axis=-1,
                                                              keepdims=True)

    for n in (0, 1, 3, 8, 21):
        xs, sv = rng.standard_normal((n, 1, 6)), rng.standard_normal(n)
        np.testing.assert_allclose(f(xs, wv, sv), want(xs, sv), rtol=1e-13, atol=1e-14)
    xs = rng.standard_normal((19, 1, 12))[:, :, ::2]  # strided rows: staged chunks
    np.testing.assert_allclose(f(xs, wv, 2.0), want(xs, np.full(19, 2.0)), rtol=1e-13,
                               atol=1e-14)
    np.testing.assert_allclose(f(xs, wv[None], 2.0), want(xs, np.full(19, 2.0)),
                               rtol=1e-13, atol=1e-14)  # leading ones broadcast
    with pytest.raises(st.errors.ShapeError, match="one array for all points"):
        f(xs[:2], np.stack([wv, wv]), 1.0)


def test_image_windows_and_strided_scatters_are_loops():
    """A convolution's windows side by side and a pooling's strided scatters (its
    gradient), larger than an unrolled copy may be, copy in single loops over finer index
    spaces: the compiled gradients equal the eager ones."""
    rng = np.random.default_rng(3)
    x = st.Variable(rng.normal(size=(3, 24, 24, 2)))
    k = st.Variable(rng.normal(size=(3, 3, 2, 3)))

    def loss():
        y = st.nn.conv2d(x, k, 1, "SAME")
        return st.reduce_sum(st.nn.max_pool2d(st.tanh(y), 2, 2) ** 2)

    def grads():
        with st.GradientTape() as t:
            value = loss()
        return [value] + t.gradient(value, [x, k])

    step = st.function(grads)
    got = step()
    plan = step.get_concrete_function().plan
    assert isinstance(plan, LoopPlan)
    assert max(len(a.core) for b in plan.blocks for a in b.ins + b.outs) <= \
        loopnest.UNROLL_LIMIT
    for a, b in zip(got, grads()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


def test_a_huge_function_without_loop_form_is_refused_not_built(monkeypatch):
    """When the loop planner fails and the element view would be huge, compiling raises
    a LoweringError naming both, instead of building millions of atoms."""
    def refuse(*args, **kwargs):
        raise loopnest.Unplannable("an op with no loop form")

    monkeypatch.setattr(loopnest, "plan_loops", refuse)
    monkeypatch.setattr(strategy, "LOOP_ALWAYS_ATOMS", 1000)
    f = st.function(lambda a: st.matmul(a, a))
    with pytest.raises(LoweringError, match="no loop form.*element view would have about"):
        f(np.ones((200, 200)))


def _padded_shifts(n: int):
    """``y = pad_front(exp(x[:, 1:] / 1000)) * x + pad_back(sin(x[:, :-1]))`` (the adjoint
    of a shift, as a reverse sweep through ``x[1:]`` and ``x[:-1]`` builds it), the output
    all of ``y`` but two elements, and numpy's value of it."""
    from symtape import ops

    x = st.symbol("x", shape=(2, n))
    front = np.arange(2)[:, None] * n + 1 + np.arange(n - 1)[None, :]
    pad_front = ops.scatter_add.bind(st.exp(x[:, 1:] * 1e-3), idx=front, shape=(2, n))
    pad_back = ops.scatter_add.bind(st.sin(x[:, :-1]), idx=front - 1, shape=(2, n))
    y = pad_front * x + pad_back
    keep = np.concatenate([np.arange(1, n + 5), np.arange(n + 6, 2 * n)])
    out = ops.gather_flat.bind(y, idx=keep)

    def want(xs):
        with np.errstate(invalid="ignore"):
            f = np.zeros_like(xs)
            f[..., 1:] = np.exp(xs[..., 1:] * 1e-3)
            b = np.zeros_like(xs)
            b[..., :-1] = np.sin(xs[..., :-1])
            return (f * xs + b).reshape(xs.shape[:-2] + (-1,))[..., keep]
    return x, out, want


@pytest.mark.parametrize("points", [0, 8], ids=["per-point", "chunks"])
def test_padded_scatters_are_read_in_place_and_gathers_written_into_outputs(
        points, monkeypatch):
    """Zero-padded scatters read by an elementwise op are not copied out with their zeros:
    the op runs box by box, the padding read from one constant zero (so ``0 * inf`` is NaN,
    as in numpy), and the gather taken of it is written straight into the output. Values
    equal numpy's and those of the copying plan (boxes refused: ``MAX_REGIONS = 0``), which
    has more blocks and writes the zeros."""
    n = 3000
    x, out, want = _padded_shifts(n)
    plan = loopnest.plan_loops([out._node], [x._node], points=points)
    monkeypatch.setattr(loopnest, "MAX_REGIONS", 0)
    copying = loopnest.plan_loops([out._node], [x._node], points=points)
    monkeypatch.undo()
    def iterations(p):
        return sum(math.prod(b.space) for b in p.blocks)

    assert iterations(plan) < iterations(copying) - 4 * n * max(points, 1)
    assert not [b for b in plan.blocks if not b.ins]  # no zero fill
    assert [b for b in copying.blocks if not b.ins]
    out_buffer = next(i for i, b in enumerate(plan.buffers) if b.kind == "output")
    sums = [b for b in plan.blocks if any(a.buffer == out_buffer for a in b.outs)]
    assert all(b.body.n_ops >= 2 for b in sums)  # the sum itself, no copy
    assert sum(math.prod(b.space) for b in sums) == (2 * n - 2) * max(points, 1)
    xs = np.random.default_rng(5).standard_normal((5, 2, n))
    xs[0, 1, 0] = np.inf  # read where the front padding is: 0 * inf
    xs[1, 1, -1] = -np.inf
    xs[2, 0, 7] = np.nan
    expected = want(xs)
    assert np.isnan(expected[0, n - 1]) and np.isnan(expected[1, -1])  # 0 * inf
    for p in (plan, copying):
        got = compile_plan(p)(xs)
        np.testing.assert_allclose(got, expected, rtol=1e-15, atol=0)


def test_cuts_into_boxes_beyond_the_limit_fall_back_to_copies(monkeypatch):
    """An elementwise op over a scatter that would need more boxes than MAX_REGIONS writes
    the scatter's zeros and copies it, with the same values."""
    monkeypatch.setattr(loopnest, "MAX_REGIONS", 2)
    x, out, want = _padded_shifts(3000)
    plan = loopnest.plan_loops([out._node], [x._node])
    assert [b for b in plan.blocks if not b.ins]  # the zeros written
    xs = np.random.default_rng(6).standard_normal((3, 2, 3000))
    np.testing.assert_allclose(compile_plan(plan)(xs), want(xs), rtol=1e-15, atol=0)


def test_a_padded_scatters_argument_is_computed_where_the_scatter_is_read():
    """The elementwise argument of a zero-padded scatter (read only by it) is computed
    inside the boxes of the scatter's reader, its own arguments read through the scatter's
    places: no temporary for it; equal values to numpy's and to the plan that writes it."""
    n = 3000
    x, out, want = _padded_shifts(n)
    plan = loopnest.plan_loops([out._node], [x._node], points=8)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loopnest, "through", lambda *a: (set(), set()))
        apart = loopnest.plan_loops([out._node], [x._node], points=8)
    temps = [b for b in plan.buffers if b.kind == "temp"]
    assert len(temps) < len([b for b in apart.buffers if b.kind == "temp"])
    ops_in = {tuple(i.op for i in b.body.instrs) for b in plan.blocks}
    assert any("exp" in o and "sin" not in o and "mul" in o for o in ops_in)  # inlined
    xs = np.random.default_rng(9).standard_normal((6, 2, n))
    xs[0, 1, 0] = np.inf
    for p in (plan, apart):
        np.testing.assert_allclose(compile_plan(p)(xs), want(xs), rtol=1e-15, atol=0)


def test_an_argument_that_cannot_be_read_through_the_scatter_is_computed_apart():
    """When the inlined argument's own arguments are not affine through the scatter's
    places (a shuffled gather, copied in the reader's order), it is computed apart and the
    scatter still read in place, its zeros as holes: no zero fill, the same values as
    numpy."""
    from symtape import ops

    n = 1500
    x = st.symbol("x", shape=(2, n))
    perm = np.random.default_rng(4).permutation(2 * n)[:2 * (n - 1)].reshape(2, n - 1)
    shuffled = ops.gather_flat.bind(x, idx=perm)
    front = np.arange(2)[:, None] * n + 1 + np.arange(n - 1)[None, :]
    pad = ops.scatter_add.bind(st.exp(shuffled * 1e-3), idx=front, shape=(2, n))
    y = pad * x + 1.0
    plan = loopnest.plan_loops([y._node], [x._node])
    assert not [b for b in plan.blocks if not b.ins]  # no zero fill
    xs = np.random.default_rng(5).standard_normal((3, 2, n))
    f = np.zeros_like(xs)
    f[..., 1:] = np.exp(xs.reshape(3, -1)[:, perm] * 1e-3)
    np.testing.assert_allclose(compile_plan(plan)(xs), f * xs + 1.0, rtol=1e-15, atol=2e-15)


def test_a_scatters_argument_read_elsewhere_too_is_recomputed_in_each_loop(monkeypatch):
    """``e`` read by a padding scatter and by an elementwise op (itself padded): both loops
    compute it (no temporary), with the values numpy gives and those of the plan that
    writes it once (``THROUGH_USERS = 1``)."""
    from symtape import ops

    n = 2000
    x = st.symbol("x", shape=(2, n))
    e = st.exp(x[:, 1:] * 1e-3)
    front = np.arange(2)[:, None] * n + 1 + np.arange(n - 1)[None, :]
    y = ops.scatter_add.bind(e, idx=front, shape=(2, n)) * x + \
        ops.scatter_add.bind(st.sin(e), idx=front - 1, shape=(2, n))
    plan = loopnest.plan_loops([y._node], [x._node], points=8)
    monkeypatch.setattr(fusion, "THROUGH_USERS", 1)
    once = loopnest.plan_loops([y._node], [x._node], points=8)
    assert sum(b.kind == "temp" for b in plan.buffers) < \
        sum(b.kind == "temp" for b in once.buffers)
    xs = np.random.default_rng(12).standard_normal((5, 2, n))
    ex = np.exp(xs[..., 1:] * 1e-3)
    want = np.zeros_like(xs)
    want[..., 1:] += ex * xs[..., 1:]
    want[..., :-1] += np.sin(ex)
    for p in (plan, once):
        np.testing.assert_allclose(compile_plan(p)(xs), want, rtol=1e-15, atol=1e-15)


def test_disjoint_outer_iterations():
    """Threads split a block's outermost loop only when its iterations write disjoint
    elements: slabs (told from the strides' span), interleaved rows (enumerated), and
    overlapping windows or a zero stride (refused)."""
    from symtape.codegen.loops import _disjoint
    assert _disjoint(Access(0, 0, (10, 1)), (5, 10))
    assert _disjoint(Access(0, 0, (2, 10)), (2, 3))  # {0, 10, 20} and {2, 12, 22}
    assert _disjoint(Access(0, 0, (-10, 1)), (5, 10))
    assert not _disjoint(Access(0, 0, (1, 1)), (5, 10))
    assert not _disjoint(Access(0, 0, (0, 1)), (3, 3))
    assert not _disjoint(Access(0, 0, (3, 1), (0, 1, 2, 3)), (4, 1))


def test_blocks_alike_but_for_their_buffers_share_one_function(monkeypatch):
    """Two equal-sized tanh loops over different buffers are one LLVM function called twice
    (LLVM optimises it once); values are each block's own."""
    from symtape.codegen import loops
    monkeypatch.setattr(strategy, "LOOP_MIN_ATOMS", 0)
    a, b = st.symbol("a", shape=(50,)), st.symbol("b", shape=(50,))
    c = st.symbol("c", shape=(60,))
    f, plan = _loop_compiled([st.tanh(a) * 3.0, st.tanh(b) * 3.0, st.tanh(c) * 3.0],
                             [a, b, c])
    ir = loops.render(plan, "alike")
    defined = re.findall(r"define internal void @(b\d+)\(", ir)
    called = re.findall(r"call void @(b\d+)\(", ir)
    assert len(plan.blocks) == 3 and len(defined) == 2 and len(called) == 3
    x, y, z = np.linspace(-2, 2, 50), np.linspace(0, 1, 50), np.linspace(-1, 3, 60)
    for got, want in zip(f(x, y, z), (x, y, z)):
        np.testing.assert_allclose(got, np.tanh(want) * 3.0, rtol=1e-15)


def test_an_elementwise_argument_of_a_sum_is_computed_in_its_loop():
    """A reduction (and an adding scatter, the transpose of a broadcast) accumulates its
    elementwise argument's template directly: no temporary of the argument's size."""
    rng = np.random.default_rng(5)
    x = st.symbol("x", shape=(40, 30))
    y = st.reduce_sum(st.exp(x) * x + 1.0, axis=0)
    with st.GradientTape() as t:
        t.watch(x)
        b = st.broadcast_to(st.reduce_sum(x, axis=0), (40, 30))
        z = st.reduce_sum(st.sin(b) * b)
    g = t.gradient(z, x)
    for out, want in ((y, lambda v: (np.exp(v) * v + 1.0).sum(axis=0)),
                      (g, lambda v: np.broadcast_to(  # z = 40 sum_j s_j sin(s_j)
                          40.0 * (np.sin(v.sum(0)) + v.sum(0) * np.cos(v.sum(0))), v.shape))):
        f, plan = _loop_compiled([out], [x], points=8)
        assert max((b.size for b in plan.buffers if b.kind == "temp"), default=0) < 8 * x.size
        v = rng.standard_normal((5, 40, 30))
        np.testing.assert_allclose(f(v), [want(p) for p in v], rtol=1e-12, atol=1e-12)


def _nbody(x):
    """The softened potential of len(x) / 3 bodies (masses 1, 2, ...), as array code."""
    k = x.shape[0] // 3
    ms = np.arange(1.0, k + 1.0)
    q = st.reshape(x, (k, 3))
    d = q[:, None, :] - q[None, :, :]
    r = st.sqrt(st.reduce_sum(d * d, axis=-1) + 0.01)
    return -st.reduce_sum(st.constant(np.triu(np.outer(ms, ms), 1)) / r)


def _nbody_hessian(p: np.ndarray) -> np.ndarray:
    """By hand: each pair's potential -w / s(d), d = q_i - q_j, has the Hessian in d
    w (I / s^3 - 3 d d^T / s^5), added to the blocks ii and jj, subtracted from ij, ji."""
    k = p.size // 3
    q, ms, h = p.reshape(k, 3), np.arange(1.0, k + 1.0), np.zeros((k, 3, k, 3))
    for i in range(k):
        for j in range(i + 1, k):
            d = q[i] - q[j]
            s = np.sqrt(d @ d + 0.01)
            block = ms[i] * ms[j] * (np.eye(3) / s ** 3 - 3.0 * np.outer(d, d) / s ** 5)
            h[i, :, i] += block
            h[j, :, j] += block
            h[i, :, j] -= block
            h[j, :, i] -= block
    return h.reshape(3 * k, 3 * k)


def test_a_batched_sweeps_one_hot_tangents_are_computed_where_they_are_read():
    """The N-body Hessian's batched sweep (one-hot seeds broadcast over the pairs): the
    tangents the points share are computed inside each loop reading them, not held in a
    temporary of seeds x pairs, and the plan over chunks of points equals the Hessian by
    hand."""
    k = 6
    x = st.symbol("x", shape=(3 * k,))
    with st.GradientTape(persistent=True) as outer:
        outer.watch(x)
        with st.GradientTape() as inner:
            inner.watch(x)
            u = _nbody(x)
        g = inner.gradient(u, x)
    h = outer.jacobian(g, x)
    f, plan = _loop_compiled([h], [x], points=4)
    seeds_pairs = 3 * k * k * k * 3  # seeds x pairs x 3 coordinates
    temps = [b.size for b in plan.buffers if b.kind == "temp"]
    assert seeds_pairs not in temps  # (the one-hot tangents of the differences, shared)
    # one per point of the chunk: the cotangent of the differences, read by two sums
    assert [n for n in temps if n >= 4 * seeds_pairs] == [4 * seeds_pairs]
    pts = np.random.default_rng(6).standard_normal((5, 3 * k)) * 2.0
    np.testing.assert_allclose(f(pts), [_nbody_hessian(p) for p in pts], rtol=1e-10,
                               atol=1e-10)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("m,k,n,tb", [(131, 50, 10, False), (7, 30, 3, False),
                                      (20, 9, 37, False), (40, 10, 128, True),
                                      (64, 300, 100, True), (9, 40, 33, False),
                                      (18, 20, 64, True)])
def test_products_of_every_tile_shape_equal_numpy(m, k, n, tb, dtype):
    """Rows left over from the tiles (one shorter tile, or a taller last tile: 9 and 18
    rows), columns left over (a power of two
    and the rest: 10 is 8 + 2), a transposed ``b`` packed along its rows: each element adds
    its terms in order, as a fused multiply-add each, like an ordered sum in long double
    within the dtype's rounding."""
    rng = np.random.default_rng(m + n)
    x = rng.normal(size=(m, k)).astype(dtype)
    y = rng.normal(size=(n, k) if tb else (k, n)).astype(dtype)
    a = st.symbol("a", shape=x.shape, dtype=dtype)
    b = st.symbol("b", shape=y.shape, dtype=dtype)
    plan = loopnest.plan_loops([st.matmul(a, b, transpose_b=tb)._node], [a._node, b._node])
    got = compile_plan(plan, dtype=dtype)(x, y)
    want = x.astype(np.longdouble) @ (y.T if tb else y).astype(np.longdouble)
    tol = 1e-13 if dtype == "float64" else 3e-6
    scale = np.abs(x).astype(np.float64) @ np.abs(y.T if tb else y).astype(np.float64)
    assert got.dtype == dtype
    assert np.all(np.abs(got - want.astype(np.float64)) <= tol * scale)


@pytest.mark.parametrize("m", [9, 18, 21])
def test_a_row_or_two_left_over_joins_the_last_tile(m):
    """A product of 9 rows is one tile of 9 rows where the host has AVX-512 (8 rows and a
    tile of one would load ``b`` for two multiply-adds), of 4 and 5 elsewhere; 21 rows
    leave 5 over, which stay a tile of their own."""
    from symtape.codegen import loops

    a = st.symbol("a", shape=(m, 40), dtype="float32")
    b = st.symbol("b", shape=(40, 32), dtype="float32")
    plan = loopnest.plan_loops([st.matmul(a, b)._node], [a._node, b._node])
    heights = sorted(len(blk.outs[0].core) for blk in plan.blocks if blk.contract)
    want = {9: [9], 18: [8, 10], 21: [5, 8]} if loops.wide_registers() else \
        {9: [4, 5], 18: [4, 5], 21: [4, 5]}
    assert heights == want[m]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_matrix_product_tiles_ask_for_wide_registers(dtype):
    """On AVX-512 hosts the register tile of a product (8 rows of two 512-bit vectors: 16
    doubles, 32 floats) is 16 512-bit registers: its block asks LLVM for them (in 256-bit
    ones it was 32 and spilled), and its inner loop is FMAs on them. The product equals
    numpy's."""
    from symtape.codegen import jit, loops

    a = st.symbol("a", shape=(64, 96), dtype=dtype)
    b = st.symbol("b", shape=(96, 64), dtype=dtype)
    plan = loopnest.plan_loops([st.matmul(a, b)._node], [a._node, b._node])
    f = compile_plan(plan, dtype=dtype)
    wide = loops.wide_registers()
    assert ('"prefer-vector-width"="512"' in f.llvm_ir) == wide
    cols = 16 if dtype == "float64" else 32
    tiles = [blk for blk in plan.blocks if blk.contract]
    assert tiles and all(blk.space[-1] == (cols if wide else 8) for blk in tiles)
    assert all(len(blk.outs[0].core) == (8 if wide else 4) for blk in tiles)
    if wide:
        asm = jit.assembly(f.llvm_ir)
        suffix = "pd" if dtype == "float64" else "ps"
        assert re.search(rf"vfmadd\d+{suffix}\s+[^\n]*%zmm", asm)
    rng = np.random.default_rng(5)
    x, y = rng.normal(size=(64, 96)).astype(dtype), rng.normal(size=(96, 64)).astype(dtype)
    np.testing.assert_allclose(f(x, y), x.astype(np.float64) @ y.astype(np.float64),
                               rtol=1e-12 if dtype == "float64" else 2e-5,
                               atol=1e-12 if dtype == "float64" else 2e-4)
