"""``st.function`` with a ``None`` batch over functions that mix their examples: one trace
and one compile for every batch size (passes over the examples whose totals accumulate in
the kernel, then a post program), against eager steps and traces per shape; and the loop
plans' totals over points against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st
from symtape.compile import batching
from symtape.compile import planner as loopnest
from symtape.codegen import compile_plan, jit, runtime

SIZES = (5, 7, 3)


def _initial(seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for a, b in zip(SIZES[:-1], SIZES[1:]):
        out += [rng.standard_normal((a, b)) / np.sqrt(a), rng.standard_normal(b) * 0.1]
    return out


def _data(n: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, SIZES[0])), np.eye(SIZES[-1])[
        rng.integers(0, SIZES[-1], n)]


def _step(params: list):
    """A training step (tanh MLP, softmax cross-entropy, Adam), and its variables."""
    vs = [st.Variable(p) for p in params]
    opt = st.optimizers.Adam(0.01)

    def step(x, y):
        with st.GradientTape() as tape:
            h = st.tanh(st.matmul(x, vs[0]) + vs[1])
            logits = st.matmul(h, vs[2]) + vs[3]
            losses = st.nn.softmax_cross_entropy_with_logits(labels=y, logits=logits)
            loss = st.reduce_mean(losses)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        return loss, losses

    return step, vs


def _signature():
    return [st.TensorSpec((None, SIZES[0])), st.TensorSpec((None, SIZES[-1]))]


def test_training_step_is_one_trace_for_every_batch_size():
    """Batches of 4, 1, 0, 3 and 1001 examples: the step's loss, per-example losses and
    updated weights equal eager steps' (Adam's moments and step count included), from one
    trace and two compiles (the pass over the examples and the update) for every batch but
    the empty one, which sums over no example and is traced as it is (its sums are the
    constant 0, as eagerly)."""
    step, vs = _step(_initial())
    ref, rvs = _step(_initial())
    fn = st.function(step, input_signature=_signature())
    compiles = jit.STATS.compiles
    for n in (4, 1, 0, 3, 1001):
        x, y = _data(n, seed=n)
        loss, losses = fn(x, y)
        want, want_losses = ref(x, y)
        assert losses.shape == (n,)
        np.testing.assert_allclose(float(loss), float(want), rtol=1e-12, equal_nan=True)
        np.testing.assert_allclose(losses.numpy(), want_losses.numpy(), rtol=1e-12)
        for a, b in zip(vs, rvs):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-14)
    assert np.isnan(float(fn(*_data(0, 0))[0]))  # the mean of no examples
    assert fn.traced_signatures == [((None, SIZES[0]), (None, SIZES[-1])),
                                    ((0, SIZES[0]), (0, SIZES[-1]))]
    assert jit.STATS.compiles - compiles == 3
    steps = fn._poly.steps
    assert [s.per_point for s in steps] == [True, False]
    assert set(steps[0].totals) == {"", "sum"}  # per-example losses; gradients summed


def test_special_values_in_one_example_reach_the_totals_as_in_a_trace_per_shape():
    x, y = _data(9, seed=3)
    x[2, 1], x[5, 0] = np.inf, np.nan
    got = st.function(_step(_initial())[0], input_signature=_signature())
    want = st.function(_step(_initial())[0])
    for a, b in zip(got(x, y), want(x, y)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, equal_nan=True)


def _normalise(x, g):
    """Batch normalisation of ``x`` scaled by ``g``: a total (the mean, the variance) read
    by each example takes another pass."""
    mean = st.reduce_mean(x, axis=0)
    centred = x - mean
    var = st.reduce_mean(centred * centred, axis=0)
    y = centred / st.sqrt(var + 1e-3) * g
    return y, st.reduce_sum(y * y) / float(x.shape[0])


def test_a_total_each_example_reads_takes_another_pass():
    f = st.function(_normalise, input_signature=[st.TensorSpec((None, 4)),
                                                 st.TensorSpec((4,))])
    per_shape = st.function(_normalise)
    rng = np.random.default_rng(4)
    g = rng.normal(size=4)
    for n in (6, 1, 1001):
        x = rng.normal(size=(n, 4)) * 3 + 1
        for a, b in zip(f(x, g), per_shape(x, g)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-11, atol=1e-12)
    kinds = [(p.per_point, p.totals) for p in f._poly.steps]
    # the mean; the variance (reads the mean); y and its sum of squares; the loss
    assert kinds == [(True, ("sum",)), (True, ("sum",)), (True, ("sum", "")), (False, ("",))]
    assert f.traced_signatures == [((None, 4), (4,))]


def test_gradient_through_batch_statistics_equals_finite_differences():
    """The gradient of a loss of normalised examples with respect to the scale, in one
    trace, against central differences of numpy's loss."""
    g = st.Variable(np.array([0.5, -1.0, 2.0]))

    @st.function(input_signature=[st.TensorSpec((None, 3))])
    def grad(x):
        with st.GradientTape() as t:
            loss = _normalise(x, g)[1]
        return t.gradient(loss, g)

    def numpy_loss(x, gv):
        c = x - x.mean(0)
        y = c / np.sqrt((c * c).mean(0) + 1e-3) * gv
        return (y * y).sum() / len(x)

    x = np.random.default_rng(5).normal(size=(11, 3))
    h = 1e-6
    want = [(numpy_loss(x, g.numpy() + h * e) - numpy_loss(x, g.numpy() - h * e)) / (2 * h)
            for e in np.eye(3)]
    np.testing.assert_allclose(grad(x).numpy(), want, rtol=1e-7)
    assert grad.traced_signatures == [((None, 3),)]


def test_float32_steps_stay_float32():
    sig = [st.TensorSpec((None, 3), "float32")]
    f = st.function(lambda x: (st.reduce_mean(x, axis=0), x * 2.0), input_signature=sig)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    mean, twice = f(x)
    assert mean.dtype == np.float32 and twice.dtype == np.float32
    np.testing.assert_allclose(mean.numpy(), x.mean(0), rtol=1e-6)
    np.testing.assert_array_equal(twice.numpy(), 2 * x)


def test_split_refuses_traces_that_are_not_one_program():
    """Rows that read other examples, the batch size squared, a product over the batch: no
    split (the function is traced per size); the batch size itself is ``k * B``."""
    flags = [True]

    def traces(f):
        return [st.function(f)._record([st.TensorSpec((b, 2))]) for b in batching.SIZES]

    assert batching.split(traces(lambda x: x[::-1] + st.reduce_sum(x, axis=0)), flags,
                          "float64") is None
    assert batching.split(traces(lambda x: x * float(x.shape[0] ** 2)), flags,
                          "float64") is None
    assert batching.split(traces(lambda x: st.reduce_prod(x, axis=0)), flags,
                          "float64") is None
    # equal at 2 and 3, not at 5: the third trace disagrees
    assert batching.split(traces(lambda x: x * float(min(x.shape[0], 3))), flags,
                          "float64") is None
    assert batching.split(traces(lambda x: x + float(min(x.shape[0], 3)) / x.shape[0]),
                          flags, "float64") is None
    parts = batching.split(traces(lambda x: x * float(x.shape[0])), flags, "float64")
    assert parts is not None and parts.post is None and len(parts.passes) == 1


# --------------------------------------------------------------------------------------------
# Loop plans: totals over points
# --------------------------------------------------------------------------------------------


def _totals_function(threads=None):
    x = st.symbol("x", shape=(1, 5))
    w = st.symbol("w", shape=(5, 3))
    h = st.tanh(st.matmul(x, w))
    outs = [st.reduce_sum(h, axis=0), st.matmul(x, h, transpose_a=True),
            st.reduce_max(h, axis=[0, 1]), h * 2.0, st.reduce_mean(h * h),
            st.exp(st.reduce_sum(h, axis=0)), st.reduce_min(h, axis=0)]
    kinds = ["sum", "sum", "max", "", "sum", "sum", "min"]
    plan = loopnest.plan_loops([t._node for t in outs], [x._node, w._node], points=8,
                               shared=[False, True], totals=kinds)
    return compile_plan(plan, threads=threads), plan


def _totals_reference(x: np.ndarray, w: np.ndarray) -> list:
    h = np.tanh(x[:, 0] @ w)
    n = len(x)
    return [h.sum(0), x[:, 0].T @ h, h.max() if n else -np.inf, 2 * h[:, None],
            (h * h).mean(1).sum(), np.exp(h).sum(0), h.min(0) if n else np.full(3, np.inf)]


@pytest.mark.parametrize("n", [0, 1, 3, 8, 9, 1001])
def test_totals_over_points_equal_numpy(n):
    """Sums, maxima and minima over points (an outer product, reductions, any node): the
    padding of a short last chunk never reaches a total."""
    f, plan = _totals_function()
    assert [b.count for b in plan.blocks if b.count >= 0]  # summed as they are computed
    rng = np.random.default_rng(n)
    x, w = rng.normal(size=(n, 1, 5)), rng.normal(size=(5, 3))
    got = f(x, w)
    for a, b in zip(got, _totals_reference(x, w)):
        assert np.shape(a) == np.shape(b)
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    assert f(x, w)[0].shape == (3,)  # a second call starts afresh


def test_totals_split_across_threads_sum_their_partial_totals(monkeypatch):
    monkeypatch.setattr(runtime, "_GRAIN", 1)
    f, _ = _totals_function(threads=3)
    one, _ = _totals_function(threads=1)
    rng = np.random.default_rng(7)
    x, w = rng.normal(size=(1001, 1, 5)), rng.normal(size=(5, 3))
    for _ in range(2):  # the second call reuses the other threads' partial totals
        for a, b, c in zip(f(x, w), one(x, w), _totals_reference(x, w)):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-12)


def test_totals_through_a_buffer_call_start_afresh_each_call():
    f, _ = _totals_function()
    rng = np.random.default_rng(8)
    x, w = rng.normal(size=(13, 1, 5)), rng.normal(size=(5, 3))
    call = f.buffer(x, w)
    call()
    call()
    for a, b in zip(call.out, _totals_reference(x, w)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    empty = f.buffer(x[:0], w)
    empty()
    assert empty.out[0].tolist() == [0.0, 0.0, 0.0]


def test_totals_need_a_plan_over_points():
    x = st.symbol("x", shape=(1, 2))
    with pytest.raises(ValueError, match="over points"):
        loopnest.plan_loops([st.reduce_sum(x)._node], [x._node], totals=["sum"])


def test_programs_read_only_what_they_use_but_keep_the_batch():
    """A result per example that reads no argument still has the batch's size; each
    program is given only the inputs it reads."""
    f = st.function(lambda x, s: (st.ones_like(x) * 2.0, st.reduce_sum(x) * s),
                    input_signature=[st.TensorSpec((None, 2)), st.TensorSpec(())])
    for n in (3, 0, 5):
        twos, total = f(np.arange(2.0 * n).reshape(n, 2), 2.0)
        assert twos.shape == (n, 2) and float(total) == 2 * n * (2 * n - 1)
    first, post = f._poly.steps
    assert ("arg", 0) in first.sources and ("arg", 1) not in first.sources
    assert ("arg", 0) not in post.sources and ("arg", 1) in post.sources
