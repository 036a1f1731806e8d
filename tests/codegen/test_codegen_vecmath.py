"""Vector math (``symtape/codegen/vecmath.py``) against mpmath: compiled ``exp`` is within
1 ulp of the correctly rounded value on a grid of >= 10^5 points, exact at the special
values, and leaves the batch loop free to vectorise."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import symtape as st


def _correctly_rounded(fn, xs: np.ndarray, dtype) -> np.ndarray:
    """``fn`` at each point with 100 bits, rounded once to ``dtype``."""
    with mpmath.workprec(100):
        out = [fn(mpmath.mpf(float(x))) for x in xs]
    # mpf -> float64 rounds to nearest; float32 goes through an exact float64 first only
    # when that cannot round twice: compare against float64 then round
    return np.array([float(v) for v in out], dtype=np.float64).astype(dtype)


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of the spacing of ``want`` (both finite)."""
    return np.abs(got.astype(np.float64) - want.astype(np.float64)) / np.spacing(
        np.abs(want)).astype(np.float64)


def _assert_within_one_ulp(got: np.ndarray, xs: np.ndarray, fn, exact: float = 0.9) -> None:
    """``got`` is ``fn`` (mpmath) at ``xs`` to 1 ulp of the correctly rounded float64, equal
    to it where that is zero or not finite, and mostly (over ``exact``) equal to it."""
    want = _correctly_rounded(fn, xs, np.float64)
    finite = np.isfinite(want) & (want != 0)
    np.testing.assert_array_equal(got[~finite], want[~finite])
    err = _ulps(got[finite], want[finite])
    assert err.max() <= 1.0, (xs[finite][err.argmax()], err.max())
    assert np.mean(err == 0) > exact


def _grid64(n: int) -> np.ndarray:
    rng = np.random.default_rng(2026)
    return np.concatenate([
        rng.uniform(-745.2, 709.78, n // 2),  # the whole range, subnormal results included
        rng.uniform(-1.0, 1.0, n // 4),  # where the reduction does nothing
        np.sign(rng.normal(size=n // 4)) * 10.0 ** rng.uniform(-300, 0, n // 4),  # tiny |x|
        np.arange(-30, 31) * np.log(2.0),  # multiples of ln2: the reduction's boundaries
        (np.arange(-30, 31) + 0.5) * np.log(2.0),
        np.nextafter(np.arange(-30, 31) * np.log(2.0) + 0.5 * np.log(2.0), np.inf),
    ])


@pytest.fixture(scope="module")
def exp64():
    x = st.symbol("x")
    return st.compile(st.exp(x), [x], name="exp64")


def test_exp_float64_within_one_ulp_of_correctly_rounded(exp64):
    xs = _grid64(100_000)
    assert xs.size >= 100_000
    _assert_within_one_ulp(exp64(xs), xs, mpmath.exp)


def test_exp_float64_special_values(exp64):
    tiny = np.nextafter(0.0, 1.0)
    xs = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 709.782712893384, 709.7827128933841,
                   710.0, 1e308, -745.1332191019411, -745.1332191019412, -746.0, -1000.0,
                   -1000.5, -1e308, tiny, -tiny])
    got = exp64(xs)
    assert got[0] == 1.0 and got[1] == 1.0
    assert got[2] == np.inf and got[3] == 0.0 and np.isnan(got[4])
    # the largest finite result, and the next input overflows
    assert _ulps(got[5:6], _correctly_rounded(mpmath.exp, xs[5:6], np.float64))[0] <= 1.0
    assert xs[6] == np.nextafter(xs[5], np.inf)
    assert got[6] == np.inf and got[7] == np.inf and got[8] == np.inf
    assert got[9] == tiny  # the smallest subnormal, e**-745.1332... rounds up to it
    assert got[10] == 0.0 and got[11] == 0.0 and got[12] == 0.0
    assert got[13] == 0.0 and got[14] == 0.0
    assert got[15] == 1.0 and got[16] == 1.0
    assert not np.signbit(got[[3, 10, 11, 12, 13, 14]]).any()


def test_exp_float32_within_one_ulp_of_correctly_rounded():
    x = st.symbol("x")
    f = st.compile(st.exp(x), [x], dtype="float32")
    rng = np.random.default_rng(7)
    xs = np.concatenate([rng.uniform(-103.0, 88.72, 100_000),
                         rng.uniform(-1.0, 1.0, 10_000)]).astype(np.float32)
    got = f(xs)
    assert got.dtype == np.float32
    with mpmath.workprec(100):
        want = np.array([float(mpmath.exp(mpmath.mpf(float(v)))) for v in xs])
    want32 = want.astype(np.float32)  # float64 of a 100-bit value, then float32: double
    # rounding can land one float32 ulp off only at exact halfway float64 values (none here)
    finite = (want32 != 0) & np.isfinite(want32)
    err = _ulps(got[finite], want32[finite])
    assert err.max() <= 1.0
    assert f(np.float32([89.0, -104.0, np.nan]))[0] == np.inf


def test_exp_kernels_vectorise_the_batch_loop(exp64):
    # no library call is left in the kernel, so the loop vectoriser is not switched off
    assert "@exp(" not in exp64.llvm_ir and "llvm.exp" not in exp64.llvm_ir
    assert "llvm.loop.vectorize.enable" not in exp64.llvm_ir
    assert "<2 x double>" in exp64.asm or "<4 x double>" in exp64.asm or "pd" in exp64.asm


def test_exp_inside_larger_kernels_and_fastmath_agree():
    x, y = st.symbol("x"), st.symbol("y")
    out = st.exp(x) * y + st.exp(-x * y)
    plain = st.compile(out, [x, y])
    fast = st.compile(out, [x, y], fastmath=True)
    rng = np.random.default_rng(3)
    xs, ys = rng.normal(size=1000) * 5, rng.normal(size=1000)
    want = np.exp(xs) * ys + np.exp(-xs * ys)
    scale = np.abs(np.exp(xs) * ys) + np.exp(-xs * ys)  # the sum may cancel: bound by terms
    assert np.all(np.abs(plain(xs, ys) - want) <= 4 * np.finfo(float).eps * scale)
    assert np.all(np.abs(fast(xs, ys) - want) <= 16 * np.finfo(float).eps * scale)


# ---- log ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def log64():
    x = st.symbol("x")
    return st.compile(st.log(x), [x], name="log64")


def test_log_float64_within_one_ulp_of_correctly_rounded(log64):
    rng = np.random.default_rng(2027)
    xs = np.concatenate([
        10.0 ** rng.uniform(-323.5, 308.2, 50_000),  # every binade, subnormals included
        1.0 + rng.uniform(-0.3, 0.42, 30_000),  # near 1, where log is small
        1.0 + np.sign(rng.normal(size=10_000)) * 10.0 ** rng.uniform(-16, -1, 10_000),
        rng.uniform(0.70, 0.72, 5_000),  # around sqrt(2)/2 and sqrt(2): the reduction's edges
        rng.uniform(1.40, 1.43, 5_000),
        2.0 ** np.arange(-1074, 1024, dtype=np.float64),
    ])
    assert xs.size >= 100_000
    _assert_within_one_ulp(log64(xs), xs, mpmath.log)


def test_log_float64_special_values(log64):
    tiny = np.nextafter(0.0, 1.0)
    xs = np.array([1.0, 0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -tiny, tiny,
                   np.finfo(np.float64).max, 2.0, 0.5])
    got = log64(xs)
    assert got[0] == 0.0 and not np.signbit(got[0])
    assert got[1] == -np.inf and got[2] == -np.inf and got[3] == np.inf
    assert np.isnan(got[4:8]).all()
    want = _correctly_rounded(mpmath.log, xs[8:], np.float64)
    assert _ulps(got[8:], want).max() <= 1.0


def test_log_float32_within_one_ulp_of_correctly_rounded():
    x = st.symbol("x")
    f = st.compile(st.log(x), [x], dtype="float32")
    rng = np.random.default_rng(8)
    xs = np.concatenate([10.0 ** rng.uniform(-44.5, 38.5, 100_000),
                         1.0 + rng.uniform(-0.3, 0.4, 10_000)]).astype(np.float32)
    xs = xs[xs > 0]
    got = f(xs)
    with mpmath.workprec(100):
        want = np.array([float(mpmath.log(mpmath.mpf(float(v)))) for v in xs]).astype(
            np.float32)
    nonzero = want != 0
    assert _ulps(got[nonzero], want[nonzero]).max() <= 1.0


def test_log_kernels_vectorise_the_batch_loop(log64):
    assert "@log(" not in log64.llvm_ir and "llvm.log." not in log64.llvm_ir
    assert "llvm.loop.vectorize.enable" not in log64.llvm_ir


def test_kernels_with_library_calls_compute_lanes(monkeypatch):
    # sin keeps the batch loop from vectorising, so the kernel computes 8 points a vector in
    # lane mode, with the vector forms of exp, log and sin; one point at a time (lane mode
    # off), one scalar library call is faster than the inlined polynomial, and they use it
    from symtape.codegen import kernel

    x = st.symbol("x")
    f = st.compile(st.exp(x) * st.sin(x) + st.log(x), [x])
    for name in ("exp", "log", "sin"):
        assert f"@st.{name}.v8f64(" in f.llvm_ir
    monkeypatch.setattr(kernel, "LANE_MIN_OPS", 10 ** 9)
    g = st.compile(st.exp(x) * st.sin(x) + st.log(x), [x], name="one_at_a_time")
    assert "@st.exp.f64" not in g.llvm_ir and "@st.log.f64" not in g.llvm_ir
    assert "llvm.exp.f64" in g.llvm_ir and "llvm.log.f64" in g.llvm_ir
    xs = np.array([0.5, 2.0, 10.0])
    for h in (f, g):
        np.testing.assert_allclose(h(xs), np.exp(xs) * np.sin(xs) + np.log(xs), rtol=1e-15)


# ---- tanh -----------------------------------------------------------------------------------

def test_tanh_float64_within_one_ulp_of_correctly_rounded():
    x = st.symbol("x")
    f = st.compile(st.tanh(x), [x], name="tanh64")
    assert "@st.tanh.f64" in f.llvm_ir and "@tanh(" not in f.llvm_ir
    rng = np.random.default_rng(2028)
    xs = np.concatenate([
        rng.uniform(-25.0, 25.0, 40_000),
        rng.uniform(-2.0, 2.0, 40_000),  # where 1 - 2/(e**2x + 1) loses the most
        rng.uniform(0.85, 0.95, 10_000),  # either side of the series' limit
        np.sign(rng.normal(size=10_000)) * 10.0 ** rng.uniform(-320, 0, 10_000),
    ])
    _assert_within_one_ulp(f(xs), xs, mpmath.tanh)
    special = f(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 40.0, -40.0]))
    assert special[0] == 0.0 and not np.signbit(special[0])
    assert special[1] == 0.0 and np.signbit(special[1])
    assert special[2] == 1.0 and special[3] == -1.0 and np.isnan(special[4])
    assert special[5] == 5e-324 and special[6] == -5e-324
    assert special[7] == 1.0 and special[8] == -1.0


def test_tanh_polynomial_is_the_interpolant_it_says():
    """The stored coefficients are re-derived (Chebyshev interpolation at 300 bits) and,
    evaluated exactly, are within 2**-55 of tanh relative on the series' range."""
    from symtape.codegen import vecmath

    assert vecmath.tanh_coefficients() == vecmath.TANH_COEFFS
    with mpmath.workprec(200):
        worst = mpmath.mpf(0)
        for k in range(1, 301):
            x = mpmath.mpf(0.9) * k / 300
            z, p = x * x, mpmath.mpf(0)
            for c in vecmath.TANH_COEFFS:
                p = p * z + mpmath.mpf(c)
            worst = max(worst, abs((x + x ** 3 * p) / mpmath.tanh(x) - 1))
    assert worst < mpmath.mpf(2) ** -55


# ---- erf ------------------------------------------------------------------------------------

def test_erf_float64_within_one_ulp_of_correctly_rounded():
    x = st.symbol("x")
    f = st.compile(st.erf(x), [x], name="erf64")
    assert "@st.erf.f64" in f.llvm_ir and "@erf(" not in f.llvm_ir
    rng = np.random.default_rng(2029)
    xs = np.concatenate([
        rng.uniform(-7.0, 7.0, 40_000),
        rng.uniform(-1.2, 1.2, 30_000),  # the polynomial and the first erfc piece
        rng.uniform(0.9, 6.1, 20_000),  # every erfc piece and its ends
        np.array([1.0, 2.0, 3.5, 6.0, np.nextafter(1.0, 0.0), np.nextafter(2.0, 0.0),
                  np.nextafter(3.5, 0.0), np.nextafter(6.0, 0.0)]),
        np.sign(rng.normal(size=10_000)) * 10.0 ** rng.uniform(-320, 0, 10_000),
    ])
    _assert_within_one_ulp(f(xs), xs, mpmath.erf)
    special = f(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 30.0]))
    assert special[0] == 0.0 and not np.signbit(special[0])
    assert special[1] == 0.0 and np.signbit(special[1])
    assert special[2] == 1.0 and special[3] == -1.0 and np.isnan(special[4])
    assert special[5] == 5e-324 and special[6] == -5e-324 and special[7] == 1.0


def test_the_reduction_constants_are_their_derivations():
    """The split ln2, the exp overflow bound and the parts of pi/2, written as literals so
    that loading the vector math needs no mpmath, are what mpmath derives at 200-300 bits."""
    from symtape.codegen import vecmath

    assert (vecmath._R_LN2, vecmath._L2U, vecmath._L2L) == vecmath._split_ln2()
    assert vecmath._EXP_MAX == vecmath._exp_overflow()
    assert (vecmath._INVPIO2, vecmath._P1, vecmath._P1T, vecmath._P2, vecmath._P2T,
            vecmath._P3, vecmath._P3T) == vecmath._pio2_parts()


def test_erf_polynomials_are_the_interpolants_they_say():
    """Re-derived at 300 bits; evaluated exactly, within 2**-54 relative of ``erf(x)/x - 1``
    and of ``erfcx`` on their ranges."""
    from symtape.codegen import vecmath

    assert vecmath.erf_coefficients() == (vecmath.ERF_NEAR_COEFFS, vecmath.ERFCX_COEFFS)

    def horner(coeffs, t):
        p = mpmath.mpf(0)
        for c in coeffs:
            p = p * t + mpmath.mpf(c)
        return p

    with mpmath.workprec(200):
        worst = mpmath.mpf(0)
        for k in range(1, 201):
            x = mpmath.mpf(k) / 200
            worst = max(worst, abs(horner(vecmath.ERF_NEAR_COEFFS, x * x) * x + x
                                   - mpmath.erf(x)) / mpmath.erf(x))
        assert worst < mpmath.mpf(2) ** -54
        for (lo, hi), coeffs in zip(vecmath.ERF_PIECES, vecmath.ERFCX_COEFFS):
            for k in range(201):
                x = mpmath.mpf(lo) + (mpmath.mpf(hi) - lo) * k / 200
                erfcx = mpmath.erfc(x) * mpmath.exp(x * x)
                assert abs(horner(coeffs, x - (lo + hi) / 2) / erfcx - 1) < mpmath.mpf(2) ** -51


def test_one_kernel_with_exp_log_and_tanh_defines_each_once():
    x = st.symbol("x")
    f = st.compile(st.tanh(x) * st.exp(x) + st.log(st.abs(x)) + st.nn.sigmoid(x), [x])
    assert f.llvm_ir.count("define internal double @st.exp.f64") == 1
    xs = np.linspace(-3.0, 3.0, 100)  # no zero
    want = np.tanh(xs) * np.exp(xs) + np.log(np.abs(xs)) + 1.0 / (1.0 + np.exp(-xs))
    np.testing.assert_allclose(f(xs), want, rtol=1e-13)


def test_many_uses_are_called_not_inlined_past_the_compile_budget(monkeypatch):
    from symtape.codegen import kernel, lower

    x = st.symbol("x", shape=(16,))
    few = st.compile(st.tanh(x[:2] * 1.5), [x])
    many = st.compile(st.tanh(x * 1.5), [x])
    assert 2 * lower.OPS["tanh"].inline_cost <= kernel.VECMATH_BUDGET
    assert 16 * lower.OPS["tanh"].inline_cost > kernel.VECMATH_BUDGET
    assert "@st.tanh.f64" in few.llvm_ir  # inlined into the vectorised loop
    # past the budget: lane mode, one call of the vector function per use
    assert "@st.tanh.v8f64(" in many.llvm_ir and "@tanh(" not in many.llvm_ir
    assert "define internal <8 x double> @st.tanh.v8f64(<8 x double> %d) noinline" in \
        many.llvm_ir
    monkeypatch.setattr(kernel, "LANE_MIN_OPS", 10 ** 9)  # one point at a time: the library
    scalar = st.compile(st.tanh(x * 1.5), [x], name="tanh_libm")
    assert "@st.tanh" not in scalar.llvm_ir and "@tanh(" in scalar.llvm_ir
    xs = np.random.default_rng(5).normal(size=(10, 16))
    np.testing.assert_allclose(scalar(xs), np.tanh(xs * 1.5), rtol=1e-15)
    np.testing.assert_allclose(many(xs), np.tanh(xs * 1.5), rtol=2.3e-16)
    np.testing.assert_allclose(few(xs), np.tanh(xs[:, :2] * 1.5), rtol=2.3e-16)


# ---- expm1 and log1p ------------------------------------------------------------------------

@pytest.mark.parametrize("name, grid", [
    ("expm1", lambda rng: np.concatenate([
        rng.uniform(-45.0, 709.78, 30_000),
        rng.uniform(30.0, 45.0, 5_000),  # where 2**q - 1 stops being exact
        rng.uniform(709.0, 709.78, 5_000),  # where 2**q alone overflows
        rng.uniform(-1.2, 1.2, 40_000),  # either side of the series' limit (1)
        np.sign(rng.normal(size=30_000)) * 10.0 ** rng.uniform(-300, 0, 30_000)])),
    ("log1p", lambda rng: np.concatenate([
        10.0 ** rng.uniform(-300, 300, 30_000),
        rng.uniform(-0.999, 1.0, 40_000),
        -(10.0 ** rng.uniform(-300, -0.0001, 30_000))])),
])
def test_expm1_log1p_within_one_ulp_of_correctly_rounded(name, grid):
    x = st.symbol("x")
    f = st.compile(getattr(st, name)(x), [x], name=f"{name}64")
    assert f"@st.{name}.f64" in f.llvm_ir
    xs = grid(np.random.default_rng(2029))
    _assert_within_one_ulp(f(xs), xs, getattr(mpmath, name))


@pytest.mark.parametrize("name", ["cosh", "sinh"])
def test_cosh_sinh_within_one_ulp_of_correctly_rounded(name):
    """In IR from exp, expm1 and a series (no library call: a loop nest around them
    vectorises), within 1 ulp over the whole range: near 0, either side of 1 and of 22
    (where the formulas change), and past log(DBL_MAX), where e**|x| overflows and they do
    not until log(2 DBL_MAX)."""
    x = st.symbol("x")
    f = st.compile(getattr(st, name)(x), [x], name=f"{name}64")
    assert f"@st.{name}.f64" in f.llvm_ir and f"@{name}(" not in f.llvm_ir
    rng = np.random.default_rng(2030)
    xs = np.concatenate([
        rng.uniform(-711.0, 711.0, 20_000),
        rng.uniform(709.0, 710.6, 5_000) * np.sign(rng.normal(size=5_000)),
        rng.uniform(-25.0, 25.0, 20_000),
        rng.uniform(-1.2, 1.2, 20_000),
        np.sign(rng.normal(size=20_000)) * 10.0 ** rng.uniform(-300, 0, 20_000),
        [22.0, -22.0, np.nextafter(22.0, 0.0), np.log(2.0) / 2, 1.0, np.nextafter(1.0, 0.0)]])
    _assert_within_one_ulp(f(xs), xs, getattr(mpmath, name), exact=0.85)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 711.0, -711.0, 5e-324])
    got = f(special)
    want = getattr(np, name)(special)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_expm1_log1p_special_values():
    x = st.symbol("x")
    f = st.compile([st.expm1(x), st.log1p(x)], [x])
    xs = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -1.5, 5e-324, -5e-324, 800.0,
                   -50.0, 1e300])
    e, lp = f(xs)
    assert np.signbit(e[1]) and np.signbit(lp[1]) and e[0] == 0 == lp[0]
    np.testing.assert_array_equal(e[2:], [np.inf, -1.0, np.nan, np.expm1(-1.0), np.expm1(-1.5),
                                          5e-324, -5e-324, np.inf, -1.0, np.inf])
    np.testing.assert_array_equal(lp[2:5], [np.inf, np.nan, np.nan])
    assert lp[5] == -np.inf and np.isnan(lp[6]) and lp[7] == 5e-324 and lp[8] == -5e-324
    np.testing.assert_allclose(lp[[9, 11]], np.log1p(xs[[9, 11]]), rtol=2.3e-16)
    assert np.isnan(lp[10])


# ---- sin, cos (lane mode) ---------------------------------------------------------------------

def _near_multiples_of_half_pi(count: int) -> np.ndarray:
    """The doubles nearest ``k pi/2`` (and their neighbours) for ``k`` spread up to 2**19:
    where the reduction cancels most."""
    ks = np.unique(np.concatenate([np.arange(1, 200), np.geomspace(200, 2 ** 19 - 1, count)
                                   .astype(np.int64)]))
    with mpmath.workprec(200):
        centres = np.array([float(k * mpmath.pi / 2) for k in ks])
    return np.concatenate([centres, np.nextafter(centres, np.inf),
                           np.nextafter(centres, -np.inf), -centres])


@pytest.fixture(scope="module")
def trig64():
    from symtape.codegen import kernel

    x = st.symbol("x")
    limit, least = kernel.LOOP_VECTORIZE_MAX_ACCESSES, kernel.LANE_MIN_OPS
    kernel.LOOP_VECTORIZE_MAX_ACCESSES, kernel.LANE_MIN_OPS = -1, 0  # lane mode
    try:
        f = st.compile([st.sin(x), st.cos(x)], [x], name="trig64")
    finally:
        kernel.LOOP_VECTORIZE_MAX_ACCESSES, kernel.LANE_MIN_OPS = limit, least
    assert "@st.sin.v8f64(" in f.llvm_ir and "@st.cos.v8f64(" in f.llvm_ir
    return f


@pytest.mark.parametrize("which", [0, 1], ids=["sin", "cos"])
def test_sin_cos_lanes_within_one_ulp_of_correctly_rounded(trig64, which):
    rng = np.random.default_rng(2028 + which)
    xs = np.concatenate([
        rng.uniform(-4.0, 4.0, 40_000),
        rng.uniform(-1e3, 1e3, 30_000),
        rng.uniform(-8.3e5, 8.3e5, 20_000),  # up to the polynomial path's limit
        np.sign(rng.normal(size=5_000)) * 10.0 ** rng.uniform(-310, 0, 5_000),  # tiny |x|
        rng.uniform(-1e9, 1e9, 2_000), 10.0 ** rng.uniform(6, 300, 1_000),  # C library lanes
        _near_multiples_of_half_pi(800),
    ])
    assert xs.size >= 100_000
    rng.shuffle(xs)  # lanes past the limit mixed with lanes under it
    fn = (mpmath.sin, mpmath.cos)[which]
    # msun's kernels round correctly less often than exp's (about 87% here), within 1 ulp
    _assert_within_one_ulp(trig64(xs)[which], xs, fn, exact=0.8)


def test_sin_cos_lanes_special_values(trig64):
    from symtape.codegen import vecmath

    xs = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-20,
                   vecmath.TRIG_LIMIT, np.nextafter(vecmath.TRIG_LIMIT, np.inf), 1e22])
    s, c = trig64(xs)
    assert s[0] == 0.0 and not np.signbit(s[0]) and s[1] == 0.0 and np.signbit(s[1])
    assert np.isnan(s[2:5]).all() and np.isnan(c[2:5]).all()
    assert c[0] == 1.0 and c[1] == 1.0 and (c[5:8] == 1.0).all()
    np.testing.assert_array_equal(s[5:8], xs[5:8])
    with mpmath.workprec(200):  # sin(1e22) is a classic test of the argument reduction
        assert s[-1] == float(mpmath.sin(mpmath.mpf(1e22)))
    for got, fn in ((s[8:10], mpmath.sin), (c[8:10], mpmath.cos)):
        want = _correctly_rounded(fn, xs[8:10], np.float64)
        assert (_ulps(got, want) <= 1.0).all()
