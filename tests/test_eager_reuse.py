"""Eager loops reuse last step's nodes and sweeps: the values stay those of a fresh run.

An eager training loop applies the same ops to the same nodes every step (variables' leaves,
cached constants), so the binder finds last step's node and plan (``binder._SITES``) and a
gradient evaluates the applications of last step's sweep again
(``autodiff.source_cotangents``). These tests check that what is reused gives exactly what
planning and sweeping afresh gives, and that nothing is reused where it must not be.
"""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st
from symtape.derivatives import sweep as autodiff
from symtape.core import apply as binder


def _fresh():
    """Forget every reused node, plan and sweep (the state of a new process)."""
    binder._SITES.clear()
    autodiff._REPLAYS.clear()
    autodiff._SEEN.clear()


def _regression(steps: int, x: np.ndarray, y: np.ndarray, a0: float, b0: float, lr: float,
                forget: bool):
    a, b = st.Variable(a0), st.Variable(b0)
    history = []
    for _ in range(steps):
        if forget:
            _fresh()
        with st.GradientTape(persistent=True) as tape:
            loss = st.abs(y - (a * x + b))
        ga, gb = tape.gradient(loss, (a, b))
        history.append((float(ga), float(gb)))
        a.assign_sub(ga * lr)
        b.assign_sub(gb * lr)
    return float(a.numpy()), float(b.numpy()), history


def test_reused_steps_match_fresh_steps_and_numpy():
    # x holds 0 (a folded product) and -0.0; the residuals cross zero (sign(0) = 0)
    x = np.array([0.0, 1.0, -0.0, 2.5, -3.0, 4.0])
    y = 2.0 * x + 1.0
    reused = _regression(60, x, y, 0.25, -0.5, 0.05, forget=False)
    fresh = _regression(60, x, y, 0.25, -0.5, 0.05, forget=True)
    assert reused == fresh  # bit for bit
    a, b = 0.25, -0.5
    for ga, gb in reused[2]:
        s = np.sign(y - (a * x + b))
        assert (ga, gb) == (-np.sum(s * x), -np.sum(s))
        a, b = a - ga * 0.05, b - gb * 0.05


def test_sweeps_are_replayed_only_when_nothing_records():
    x = st.Variable(1.5)
    for k in range(4):
        _ = x.assign(1.5 + k)
        with st.GradientTape() as outer:
            with st.GradientTape() as inner:
                y = x * x * x
            g = inner.gradient(y, x)  # the outer tape records this sweep
        h = outer.gradient(g, x)
        v = 1.5 + k
        assert float(g) == 3 * v * v
        assert float(h) == 6 * v


def test_user_rules_run_every_step():
    calls = []

    @st.custom_gradient
    def scaled(t):
        def grad(upstream):
            calls.append(float(upstream))
            return upstream * 3.0

        return t * 1.0, grad

    w = st.Variable(2.0)
    for k in range(5):
        with st.GradientTape() as tape:
            loss = scaled(w) * w
        g = tape.gradient(loss, w)
        assert float(g) == pytest.approx(3.0 * float(w) + float(w))
        _ = w.assign_add(1.0)
    assert len(calls) == 5  # a user's rule is never skipped


def test_a_sweep_over_other_values_of_the_same_nodes_is_exact():
    # the replayed sweep of a product and a sum reads the new values of every slot
    v = st.Variable(np.array([1.0, -2.0, 0.5]))
    c = np.array([3.0, 0.0, -1.0])
    for scale in (1.0, -2.0, 0.0, 7.5):
        _ = v.assign(np.array([1.0, -2.0, 0.5]) * scale)
        with st.GradientTape() as tape:
            loss = st.reduce_sum(v * c + v * v)
        g = tape.gradient(loss, v)
        np.testing.assert_array_equal(g.numpy(), c + 2 * v.numpy())


def test_reused_nodes_are_the_same_and_bounded():
    a = st.Variable(0.5)
    xs = st.constant(np.arange(4.0))
    first = a * xs
    assert (a * xs)._node is first._node  # the same application: the same node
    for k in range(3 * binder._SITES_MAX // 2):
        _ = a * float(k)  # new constants: new applications
    assert len(binder._SITES) <= binder._SITES_MAX
    big = st.constant(np.ones(binder._ARRAY_SIZE * 4))
    _ = big * a
    assert all(entry[1].size <= 256 for entry in binder._SITES.values())
