"""Lane mode (a vector register's worth of points, ``lanes.points``,
``symtape/codegen/lanes.py``): a kernel computing several points at once gives bit for bit
what the same kernel gives one point at a time -- every batch length (partial last blocks
included), float32, strided and broadcast inputs, boolean and constant outputs, kernels cut
into functions, library calls through lane wrappers -- and its IR functions (exp, log, tanh,
...) are those of vectorised loops. (sin and cos are lane mode's own, tested against mpmath
in ``test_codegen_vecmath.py``.)"""

from __future__ import annotations

import re

import mpmath
import numpy as np
import pytest

import symtape as st
from symtape.codegen import kernel, lanes

VECTOR = f"<{lanes.LANES} x "


def _mode(monkeypatch, lane: bool, split: int = 10 ** 9) -> None:
    """Every kernel in lane mode, or every kernel one point at a time (nothing small)."""
    monkeypatch.setattr(kernel, "LOOP_VECTORIZE_MAX_ACCESSES", -1)
    monkeypatch.setattr(kernel, "LANE_MIN_OPS", 0 if lane else 10 ** 9)
    monkeypatch.setattr(kernel, "SPLIT_OPS", split)
    monkeypatch.setattr(kernel, "LANE_SPLIT_OPS", max(1, split // 2))


def _program(dtype: str):
    """Library calls (wrapped per lane), intrinsics, selects, booleans and constants."""
    x = st.symbol("x", shape=(3,), dtype=dtype)
    y = st.symbol("y", dtype=dtype)
    a = st.atan(x) * y + x * x / (y + 2.0)
    b = st.where(a > 0.25, st.asinh(a) + st.atan2(a, y), st.floormod(a, 0.75))
    c = st.sign(b) * st.sqrt(st.abs(b)) + st.pow(st.abs(y) + 0.5, x)
    flags = st.logical_and(a > 0.0, st.logical_not(b < c))
    return {"a": a, "b": b, "c": st.maximum(c, st.minimum(a, b)), "d": st.tan(st.round(c)),
            "flags": flags, "k": st.constant(np.array([1.5, -2.0], dtype=dtype)),
            "t": st.constant(np.array([True, False]))}, [x, y]


def _points(dtype: str, n: int, seed: int = 5):
    rng = np.random.default_rng(seed)
    xs = rng.normal(size=(n, 3)) * 2.0
    ys = rng.normal(size=n)
    specials = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    if n:
        xs.flat[: min(len(specials), xs.size)] = specials[: xs.size]
        ys[-1] = -0.0
    return xs.astype(dtype), ys.astype(dtype)


def _compile(monkeypatch, lane: bool, dtype: str, split: int = 10 ** 9):
    _mode(monkeypatch, lane, split)
    outputs, inputs = _program(dtype)
    f = st.compile(outputs, inputs, dtype=dtype, name=f"lanes{int(lane)}")
    # a vector register's worth of points: 8 doubles, 16 floats
    width = lanes.points(np.dtype(dtype).itemsize)
    assert width == (16 if dtype == "float32" else 8)
    assert (f"<{width} x " in f.llvm_ir) == lane
    return f


def _assert_equal(got: dict, want: dict, what) -> None:
    for key in want:
        assert got[key].dtype == want[key].dtype, (key, what)
        np.testing.assert_array_equal(got[key], want[key], err_msg=f"{key} ({what})")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("split", [10 ** 9, 7])
def test_lanes_compute_what_one_point_at_a_time_does(monkeypatch, dtype, split):
    one = _compile(monkeypatch, False, dtype, split)
    many = _compile(monkeypatch, True, dtype, split)
    if split == 7:
        assert "@point.1(" in many.llvm_ir
    for n in (0, 1, 3, 7, 8, 9, 16, 17, 1001):
        xs, ys = _points(dtype, n)
        _assert_equal(many(xs, ys), one(xs, ys), n)
    xs, ys = _points(dtype, 4)
    _assert_equal(many(xs[2], ys[2]), one(xs[2], ys[2]), "one point")
    buf = many.buffer(xs, ys)
    buf()
    _assert_equal(buf.out, one(xs, ys), "buffer call")


def test_lanes_read_strided_and_broadcast_inputs(monkeypatch):
    one = _compile(monkeypatch, False, "float64")
    many = _compile(monkeypatch, True, "float64")
    xs, ys = _points("float64", 40)
    wide = np.repeat(xs, 2, axis=1)[:, ::2]  # a strided view equal to xs
    assert not wide.flags.c_contiguous
    np.testing.assert_array_equal(wide, xs)
    _assert_equal(many(wide, ys), one(xs, ys), "strided")
    # one y for every point: the stride of y is 0
    _assert_equal(many(xs, ys[3]), one(xs, np.full(40, ys[3])), "broadcast")
    # points on two batch axes
    _assert_equal(many(xs.reshape(5, 8, 3), ys.reshape(5, 8)),
                  {k: v.reshape((5, 8) + v.shape[1:]) for k, v in one(xs, ys).items()},
                  "two batch axes")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_long_input_rows_enter_the_lanes_as_tiles(monkeypatch, dtype):
    # rows of 37 elements: square tiles transposed in registers for full blocks of points,
    # then the 37 % lanes elements left; partial blocks element by element
    x = st.symbol("x", shape=(37,), dtype=dtype)
    y = st.symbol("y", shape=(19,), dtype=dtype)
    out = {"a": st.sqrt(st.abs(x[1:]) + 1.0) * x[:-1] / (1.0 + y[0] * y[0])
                 + st.reduce_sum(y) * x[::-1][1:],
           "b": st.cumsum(y * y) - y[0]}
    _mode(monkeypatch, False)
    one = st.compile(out, [x, y], dtype=dtype, name="tiles0")
    _mode(monkeypatch, True)
    many = st.compile(out, [x, y], dtype=dtype, name="tiles1")
    assert "shufflevector" in many.llvm_ir and "shufflevector" not in one.llvm_ir
    rng = np.random.default_rng(7)
    for n in (0, 1, 7, 8, 9, 16, 17, 33, 1001):
        xs = rng.normal(size=(n, 37)).astype(dtype)
        ys = rng.normal(size=(n, 19)).astype(dtype)
        _assert_equal(many(xs, ys), one(xs, ys), n)
    xs = rng.normal(size=(40, 74)).astype(dtype)[:, ::2]  # strided rows
    ys = rng.normal(size=19).astype(dtype)  # one row for every point: stride 0
    _assert_equal(many(xs, ys), one(xs, np.tile(ys, (40, 1))), "strided and broadcast")


@pytest.mark.parametrize("name, fn, lo, hi", [
    ("exp", mpmath.exp, -750.0, 710.0),
    ("log", mpmath.log, 0.0, 1e300),
    ("tanh", mpmath.tanh, -30.0, 30.0),
    ("expm1", mpmath.expm1, -50.0, 50.0),
    ("log1p", mpmath.log1p, -1.0, 1e10),
])
def test_lane_functions_are_those_of_vectorised_loops(monkeypatch, name, fn, lo, hi):
    """The vector twins of the IR functions compute what they compute in a vectorised loop
    (the one mpmath checks to 1 ulp in ``test_codegen_vecmath.py``), bit for bit."""
    x = st.symbol("x")
    looped = st.compile(getattr(st, name)(x), [x], name=f"{name}_loop")
    assert f"@st.{name}.f64(" in looped.llvm_ir and VECTOR not in looped.llvm_ir
    assert "llvm.loop.vectorize.enable" not in looped.llvm_ir  # the loop vectoriser's
    monkeypatch.setattr(kernel, "LOOP_VECTORIZE_MAX_ACCESSES", -1)
    monkeypatch.setattr(kernel, "LANE_MIN_OPS", 0)
    laned = st.compile(getattr(st, name)(x), [x], name=f"{name}_lanes")
    assert f"@st.{name}.v{lanes.LANES}f64(" in laned.llvm_ir
    rng = np.random.default_rng(9)
    xs = np.concatenate([rng.uniform(lo, hi, 20_000), rng.uniform(-1.0, 1.0, 5_000),
                         [0.0, -0.0, np.inf, -np.inf, np.nan, lo, hi]])
    np.testing.assert_array_equal(laned(xs), looped(xs))
    some = xs[:300][xs[:300] > (-1.0 if name == "log1p" else lo)]
    got = laned(some)
    for v, g in zip(some, got):
        w = float(fn(mpmath.mpf(float(v))))
        if np.isfinite(w) and w != 0:
            assert abs(g - w) <= np.spacing(abs(w)), (name, v)


def test_lane_buffers_past_the_stack_limit_come_from_the_heap(monkeypatch):
    on_stack = _compile(monkeypatch, True, "float64")
    assert "@malloc(" not in on_stack.llvm_ir
    monkeypatch.setattr(kernel, "LANE_STACK_BYTES", 64)
    outputs, inputs = _program("float64")
    for split in (10 ** 9, 7):  # with and without the scratch arrays of a cut point
        monkeypatch.setattr(kernel, "LANE_SPLIT_OPS", split)
        heap = st.compile(outputs, inputs, name=f"lanes_heap{split}")
        assert "@malloc(" in heap.llvm_ir and "@free(" in heap.llvm_ir
        for n in (0, 1, 9, 1001):
            xs, ys = _points("float64", n)
            _assert_equal(heap(xs, ys), on_stack(xs, ys), f"heap {n}")
        xs, ys = _points("float64", 3000)  # several threads, each with its own arena
        _assert_equal(heap(xs, ys), on_stack(xs, ys), "threads")


def test_a_kernel_without_memory_raises(monkeypatch):
    """Where ``malloc`` fails the kernel reports it and the call raises MemoryError (no
    output is left half written as if it were a result)."""
    from symtape.codegen import runtime

    _mode(monkeypatch, True)
    monkeypatch.setattr(kernel, "LANE_STACK_BYTES", 64)
    outputs, inputs = _program("float64")
    f = st.compile(outputs, inputs, name="lanes_nomem")
    # the same kernel asking for more than any machine has
    ir = f.llvm_ir
    huge = re.sub(r"@malloc\(i64 \d+\)", "@malloc(i64 9223372036854775000)", ir)
    assert huge != ir
    g = runtime.CompiledFunction(f.plan, name="lanes_nomem", ir=huge,
                                 obj=runtime.jit.object_code(huge),
                                 structure=f.structure)
    xs, ys = _points("float64", 20)
    with pytest.raises(MemoryError, match="lanes_nomem"):
        g(xs, ys)
    with pytest.raises(MemoryError):
        g(xs[0], ys[0])
    call = g.buffer(xs, ys)
    with pytest.raises(MemoryError):
        call()


def test_large_kernels_choose_lanes_and_small_ones_the_loop_vectoriser():
    x = st.symbol("x", shape=(4,))
    small = st.compile(st.reduce_sum(x * x), [x], name="lanes_small")
    assert VECTOR not in small.llvm_ir
    y = x
    for _ in range(160):  # over a thousand operations, 4 inputs: small in accesses
        y = st.sin(y) * 0.5 + y * y * 0.25
    big = st.compile(y, [x], name="lanes_big")
    assert VECTOR in big.llvm_ir
    # lane kernels this large skip O3 for a short pipeline of their own; small ones do not
    assert big.plan.n_ops >= kernel.SHORT_PIPELINE_OPS and lanes.LANES_MARK in big.llvm_ir
    x3 = st.symbol("x3")
    little = st.compile(st.sin(x3) * 2.0, [x3], name="lanes_little")
    assert VECTOR in little.llvm_ir and lanes.LANES_MARK not in little.llvm_ir
    xs = np.random.default_rng(1).normal(size=(11, 4)) * 0.1
    want = xs
    for _ in range(160):
        want = np.sin(want) * 0.5 + want * want * 0.25
    np.testing.assert_allclose(big(xs), want, rtol=1e-13)


def test_widen_rewrites_types_literals_and_calls():
    assert lanes.widen("%r = fcmp olt double %a, 0.0", 4) == \
        "%r = fcmp olt <4 x double> %a, splat (double 0.0)"
    assert lanes.widen("%r = xor i1 %a, true", 2) == "%r = xor <2 x i1> %a, splat (i1 true)"
    assert lanes.widen("%r = shl i64 %e, 52") == "%r = shl <8 x i64> %e, splat (i64 52)"
    assert lanes.widen("%r.x = fpext float %a to double", 4) == \
        "%r.x = fpext <4 x float> %a to <4 x double>"
    assert lanes.widen("%r = call double @st.exp.f64(double %a)") == \
        "%r = call <8 x double> @st.exp.v8f64(<8 x double> %a)"
    assert lanes.widen("%r = call double @erf(double %a)", 8, frozenset({"erf"})) == \
        "%r = call <8 x double> @erf.v8(<8 x double> %a)"
    # names that merely contain a type, and a wrapped name's longer relatives, stay
    assert lanes.widen("%i1 = fadd double %double.1, %v2", 2) == \
        "%i1 = fadd <2 x double> %double.1, %v2"
    assert "@erfc(" in lanes.widen("%r = call double @erfc(double %a)", 2, frozenset({"erf"}))
    with pytest.raises(AssertionError):
        lanes.widen("ret 0")


def test_fastmath_lanes_stay_close(monkeypatch):
    """``fastmath=True`` lane kernels (contracted, reassociated) agree with the IEEE ones to
    rounding."""
    plain = _compile(monkeypatch, True, "float64")
    outputs, inputs = _program("float64")
    fast = st.compile(outputs, inputs, fastmath=True, name="lanes_fast")
    assert VECTOR in fast.llvm_ir and "contract" in fast.llvm_ir
    xs, ys = _points("float64", 333, seed=8)
    xs, ys = xs[8:], ys[8:]  # regular points: fast-math may fold nan and signed zeros apart
    want, got = plain(xs, ys), fast(xs, ys)
    for key in ("a", "c"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-12, atol=1e-12)


def test_sin_cos_lanes_in_float32(monkeypatch):
    _mode(monkeypatch, True)
    x = st.symbol("x", dtype="float32")
    f = st.compile([st.sin(x), st.cos(x)], [x], dtype="float32", name="trig32")
    assert "@st.sin.v16f64(" in f.llvm_ir and "<16 x float>" in f.llvm_ir
    xs = np.random.default_rng(4).uniform(-100.0, 100.0, 20_000).astype(np.float32)
    s, c = f(xs)
    assert s.dtype == np.float32
    with mpmath.workprec(100):
        for got, fn in ((s, mpmath.sin), (c, mpmath.cos)):
            want = np.array([float(fn(mpmath.mpf(float(v)))) for v in xs[:3000]])
            want32 = want.astype(np.float32)
            ulp = np.spacing(np.abs(want32)).astype(np.float64)
            assert np.all(np.abs(got[:3000].astype(np.float64) - want32) <= ulp)
