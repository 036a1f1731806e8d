"""Large plans are cut into functions (``kernel.SPLIT_OPS``): cut at every size, a kernel
computes exactly what the uncut one does -- values crossing cuts (floats and booleans),
outputs defined early or constant, float32, library and IR functions."""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st
from symtape.codegen import kernel


def _program():
    x, y = st.symbol("x", shape=(3,)), st.symbol("y")
    a = st.sin(x) * y + x * x  # early values read much later
    big = a > 0.5  # a boolean crossing cuts
    b = st.where(big, st.exp(a), st.log(st.abs(a) + 1.0))
    c = st.tanh(b * y) + st.reduce_sum(a) * 2.0
    outputs = {"a": a, "b": b, "c": c, "big": big, "flag": y > 0.0,
               "k": st.constant(np.array([1.5, -2.0])), "m": st.maximum(c, a)}
    return outputs, [x, y]


def _compile(split: int, monkeypatch, dtype="float64"):
    monkeypatch.setattr(kernel, "SPLIT_OPS", split)
    monkeypatch.setattr(kernel, "LANE_SPLIT_OPS", split)
    outputs, inputs = _program()
    return st.compile(outputs, inputs, dtype=dtype, name=f"split{split}")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_cut_kernels_compute_what_the_whole_one_does(monkeypatch, dtype):
    rng = np.random.default_rng(11)
    xs = rng.normal(size=(64, 3)).astype(dtype)
    ys = rng.normal(size=64).astype(dtype)
    xs[0] = [np.nan, np.inf, -0.0]
    whole = _compile(10 ** 9, monkeypatch, dtype)
    assert "@point.0" not in whole.llvm_ir
    want = whole(xs, ys)
    for split in (1, 2, 3, 7, 20):
        cut = _compile(split, monkeypatch, dtype)
        assert "@point.1(" in cut.llvm_ir
        got = cut(xs, ys)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{key} at {split}")
            assert got[key].dtype == want[key].dtype
        # one point, and the formula read back from the plan, are unchanged too
        np.testing.assert_array_equal(cut(xs[3], ys[3])["c"], want["c"][3])
    np.testing.assert_array_equal(want["k"], np.broadcast_to([1.5, -2.0], (64, 2)))


def test_chunks_cover_the_plan_in_order():
    outputs, inputs = _program()
    f = st.compile(outputs, inputs)
    plan = f.plan
    for size in (1, 5, 10 ** 9):
        chunks = kernel._chunks(plan, size)
        assert chunks[0][0] == 0 and chunks[-1][1] == len(plan.instrs)
        assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))
        ops = [sum(plan.instrs[r].op != "const" for r in range(lo, hi)) for lo, hi in chunks]
        assert all(n <= size for n in ops)


def _rosenbrock_hessian(x: np.ndarray) -> np.ndarray:
    """The tridiagonal Hessian of sum(100 (x[i+1] - x[i]^2)^2 + (1 - x[i])^2), by hand."""
    n = x.shape[-1]
    h = np.zeros(x.shape + (n,))
    i = np.arange(n - 1)
    h[..., i, i] += 1200.0 * x[..., :-1] ** 2 - 400.0 * x[..., 1:] + 2.0
    h[..., i + 1, i + 1] += 200.0
    h[..., i, i + 1] = h[..., i + 1, i] = -400.0 * x[..., :-1]
    return h


@pytest.mark.parametrize("split", [kernel.SPLIT_OPS, 7])
@pytest.mark.parametrize("points", [1, 40])
def test_runs_of_structural_zeros_are_one_memset(monkeypatch, split, points):
    """A Hessian's structural zeros, consecutive in its output, are written by memsets (one
    point at a time and in lane mode, in one function or cut), not one store each: a 30
    variable Rosenbrock Hessian has 784 of them in runs of 27."""
    monkeypatch.setattr(kernel, "SPLIT_OPS", split)
    monkeypatch.setattr(kernel, "LANE_SPLIT_OPS", split)

    def f(x):
        return st.reduce_sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    h = st.hessian(f, input_signature=[st.TensorSpec((30,))])
    x = np.random.default_rng(3).normal(1.0, 0.5, size=(points, 30))
    got = np.asarray(h(x))
    ir = h.llvm_ir
    assert ir.count("call void @llvm.memset") >= 28 and ir.count("store double 0x0000") < 30
    np.testing.assert_allclose(got, _rosenbrock_hessian(x), rtol=1e-14, atol=1e-12)
    assert not np.signbit(got[_rosenbrock_hessian(x) == 0]).any()
