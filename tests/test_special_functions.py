"""lgamma, digamma, polygamma, erfc, bessel_i0e, bessel_i1e and zeta: values (eager,
compiled one point at a time and in lane mode, exported C) against mpmath and scipy at small,
large, negative, pole, infinite and nan points with TensorFlow's conventions; derivatives to
order 3 (sweeps and Taylor mode) against mpmath and finite differences; formulas; SymPy
interop."""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess

import mpmath
import numpy as np
import pytest
import sympy as sp

import symtape as st
from symtape.base.errors import SymtapeError
from symtape.codegen import compile_atoms, kernel
from symtape.derivatives import taylor
from symtape.element import added_heads as F
from symtape.element import graph as G
from symtape.element import numeric

CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")

# small, moderate, near digamma's root, large, negative non-integers, poles, infinities, nan
POINTS = np.array([1e-8, 0.1, 0.5, 1.0, 1.5, 2.0, 2.5, 7.3, 9.99, 10.0, 33.3, 1e6, 1e15,
                   -0.5, -2.5, -3.7, -100.25, 0.0, -0.0, -1.0, -2.0, np.inf, -np.inf, np.nan])
ORDERS = (1.0, 2.0, 3.0, 4.0, 7.0)


def ref_lgamma(x: float) -> float:
    """log|Gamma(x)| (mpmath), inf at the poles and at +-inf (the C library's lgamma)."""
    if math.isnan(x):
        return math.nan
    if math.isinf(x) or (x <= 0 and x == math.floor(x)):
        return math.inf
    return float(mpmath.re(mpmath.loggamma(x)))


def ref_polygamma(n: float, x: float) -> float:
    """psi^(n)(x) (mpmath) with TensorFlow's conventions: nan for an order that is not a
    non-negative integer; at poles nan for n = 0 and even n, +inf for odd n; at +inf, inf for
    n = 0 and 0 above; nan at -inf."""
    if math.isnan(n) or math.isnan(x) or n < 0 or n != math.floor(n) or x == -math.inf:
        return math.nan
    if x == math.inf:
        return math.inf if n == 0 else 0.0
    if x <= 0 and x == math.floor(x):
        return math.inf if n % 2 == 1 else math.nan
    with mpmath.workdps(40):
        return float(mpmath.polygamma(int(n), x))


def close(got, want, rtol=1e-13, atol=0.0) -> None:
    """Equal to ``rtol`` with nan and infinities in the same places (negative arguments of
    even orders sum terms of both signs; digamma near its root at 1.4616 keeps an absolute
    error of an ulp of its terms)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg="nan positions")
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg="infinities")
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=rtol, atol=atol)


# name -> (st function of x, reference of x, relative tolerance at negative arguments)
CASES = {"lgamma": (st.lgamma, ref_lgamma, 1e-13),
         "digamma": (st.digamma, lambda x: ref_polygamma(0.0, x), 1e-13)}
for _n in ORDERS:
    CASES[f"polygamma{int(_n)}"] = (lambda x, n=_n: st.polygamma(n, x),
                                    lambda x, n=_n: ref_polygamma(n, x), 1e-11)


def _want(case):
    return np.array([CASES[case][1](float(v)) for v in POINTS])


def _check(case, got):
    """Positive arguments to 1e-13 relative; negative ones to the case's tolerance."""
    want = _want(case)
    neg = POINTS < 0
    close(got[~neg], want[~neg], rtol=1e-13, atol=1e-15)
    close(got[neg], want[neg], rtol=CASES[case][2], atol=1e-15)


@pytest.mark.parametrize("case", sorted(CASES))
def test_eager_values_match_mpmath(case):
    _check(case, CASES[case][0](st.constant(POINTS)).numpy())


@pytest.mark.parametrize("lane", [False, True])
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_values_are_the_eager_values(case, lane, monkeypatch):
    """Compiled code computes what eager evaluation does, bit for bit (the same C library
    calls, the same arithmetic in the same order), one point at a time and in lane mode."""
    monkeypatch.setattr(kernel, "LOOP_VECTORIZE_MAX_ACCESSES", -1)
    monkeypatch.setattr(kernel, "LANE_MIN_OPS", 0 if lane else 10 ** 9)
    x = G.Leaf.new("x")
    f = compile_atoms([np.array(_atom(case, x), dtype=object)], [np.array(x, dtype=object)])
    assert ("<8 x double>" in f.llvm_ir) == lane
    for batch in (POINTS, POINTS[:1], POINTS[:3]):
        eager = CASES[case][0](st.constant(batch)).numpy()
        np.testing.assert_array_equal(f(batch), eager)


@pytest.mark.parametrize("lane", [False, True])
def test_float32_kernels_compute_what_float32_evaluation_does(lane, monkeypatch):
    """float32 kernels: lgammaf of the C library, polygamma in double rounded once."""
    monkeypatch.setattr(kernel, "LOOP_VECTORIZE_MAX_ACCESSES", -1)
    monkeypatch.setattr(kernel, "LANE_MIN_OPS", 0 if lane else 10 ** 9)
    x, n = G.Leaf.new("x"), G.Leaf.new("n")
    atoms = [G.call(sp.loggamma, x), G.call(sp.polygamma, n, x)]
    f = compile_atoms([np.array(atoms, dtype=object)],
                      [np.array(n, dtype=object), np.array(x, dtype=object)], dtype="float32")
    xs = np.resize(POINTS, 3 * len(POINTS)).astype(np.float32)
    ns = np.repeat(np.float32([0.0, 1.0, 2.0]), len(POINTS))
    out = f(ns, xs)
    np.testing.assert_array_equal(out[:, 0], numeric.lgamma(xs))
    np.testing.assert_array_equal(out[:, 1], numeric.polygamma(ns, xs))
    close(out[:, 1], [ref_polygamma(a, b) for a, b in zip(ns, xs)], rtol=3e-7, atol=1e-30)


def _atom(case, x):
    """The element atom of the case at the leaf ``x``."""
    if case == "lgamma":
        return G.call(sp.loggamma, x)
    order = 0 if case == "digamma" else int(case.removeprefix("polygamma"))
    return G.call(sp.polygamma, sp.Integer(order), x)


def test_st_function_compiles_the_family():
    @st.function(input_signature=[st.TensorSpec((None,))])
    def f(x):
        return st.stack([st.lgamma(x), st.digamma(x), st.polygamma(3.0, x)])

    got = f(POINTS).numpy()
    for row, case in zip(got, ("lgamma", "digamma", "polygamma3")):
        _check(case, row)


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_exported_c_matches_the_jit(tmp_path):
    x, n = G.Leaf.new("x"), G.Leaf.new("n")
    atoms = [G.call(sp.loggamma, x), G.call(sp.polygamma, sp.Integer(0), x),
             G.call(sp.polygamma, n, x)]
    f = compile_atoms([np.array(atoms, dtype=object)],
                      [np.array(n, dtype=object), np.array(x, dtype=object)],
                      name="gammas", input_names=["order", "x"])
    src, lib = tmp_path / "gammas.c", tmp_path / "gammas.so"
    src.write_text(f.c_source())
    assert f.c_source().count("static double st_polygamma_f64(") == 1
    subprocess.run([CC, "-std=c99", "-O2", "-Wall", "-Werror", "-Wno-unused-function",
                    "-shared", "-fPIC", str(src), "-o", str(lib), "-lm"], check=True,
                   capture_output=True)
    orders = np.array([0.0, 1.0, 2.0, 3.0, 0.5, -1.0, np.nan])
    nn, xx = (g.ravel().copy() for g in np.meshgrid(orders, POINTS))
    out = np.empty((len(nn), 3))
    ctypes.CDLL(str(lib)).gammas(ctypes.c_int64(len(nn)), *[ctypes.c_void_p(v.ctypes.data)
                                                          for v in (nn, xx, out)])
    np.testing.assert_array_equal(out, f(nn, xx))
    want = np.array([ref_polygamma(a, b) for a, b in zip(nn, xx)])
    ok = xx >= 0
    close(out[ok, 2], want[ok], rtol=1e-13, atol=1e-15)
    close(out[~ok, 2], want[~ok], rtol=1e-11, atol=1e-15)


@pytest.mark.parametrize("order", [0.5, -1.0, -2.0, np.nan, np.inf])
def test_an_order_that_is_not_a_natural_number_gives_nan(order):
    assert np.isnan(st.polygamma(order, st.constant([0.5, 2.0, -1.5])).numpy()).all()


# --------------------------------------------------------------------------------------------
# Derivatives
# --------------------------------------------------------------------------------------------

SMOOTH = np.array([0.3, 1.7, 2.5, 7.0, 40.0, -0.5, -2.3])
# (st function, n such that its k-th derivative is psi^(n + k - 1)); lgamma: n = -1
DERIVED = {"lgamma": (st.lgamma, -1), "digamma": (st.digamma, 0),
           "polygamma2": (lambda x: st.polygamma(2.0, x), 2)}


def _nested(fn, x, order):
    """The ``order``-th derivative of ``fn`` at the variable ``x`` by nested tapes."""
    tapes = [st.GradientTape(persistent=True) for _ in range(order)]
    for t in tapes:
        t.__enter__()
    y = fn(x)
    for t in reversed(tapes):
        t.__exit__(None, None, None)
        y = t.gradient(y, x)
    return y


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("name", sorted(DERIVED))
def test_derivatives_to_order_three_match_mpmath(name, order):
    fn, n = DERIVED[name]
    want = np.array([float(mpmath.polygamma(n + order, v)) for v in SMOOTH])
    swept = _nested(fn, st.Variable(SMOOTH), order).numpy()
    np.testing.assert_allclose(swept, want, rtol=1e-11)
    d = st.derivative(fn, order=order, input_signature=[st.TensorSpec(())])
    taylored = np.array([d(np.array(v)) for v in SMOOTH])
    np.testing.assert_allclose(taylored, want, rtol=1e-11)


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_first_and_second_derivatives_match_finite_differences(name):
    fn = DERIVED[name][0]
    h = 1e-5

    def value(x):
        return fn(st.constant(x)).numpy()

    first = _nested(fn, st.Variable(SMOOTH), 1).numpy()
    second = _nested(fn, st.Variable(SMOOTH), 2).numpy()
    np.testing.assert_allclose(first, (value(SMOOTH + h) - value(SMOOTH - h)) / (2 * h),
                               rtol=1e-6)
    d1 = lambda x: _nested(fn, st.Variable(x), 1).numpy()  # noqa: E731
    np.testing.assert_allclose(second, (d1(SMOOTH + h) - d1(SMOOTH - h)) / (2 * h), rtol=1e-6)


def test_polygamma_has_no_gradient_in_its_order():
    n, x = st.Variable([1.0, 2.0]), st.Variable([0.7, 3.0])
    with st.GradientTape(persistent=True) as tape:
        y = st.polygamma(n, x)
    assert tape.gradient(y, n) is None
    np.testing.assert_allclose(tape.gradient(y, x).numpy(),
                               [float(mpmath.polygamma(2, 0.7)),
                                float(mpmath.polygamma(3, 3.0))], rtol=1e-13)


def test_taylor_coefficients_are_polygammas_over_factorials():
    x = G.Leaf.new("x")
    (series,) = taylor.coefficients([G.call(sp.loggamma, x)], [x], [G.ONE], 4)
    X = sp.Symbol("X")
    back = {x: X}
    assert G.expand(series[0]).xreplace(back) == sp.loggamma(X)
    for k in range(1, 5):
        want = sp.polygamma(k - 1, X) / sp.factorial(k)
        assert sp.simplify(G.expand(series[k]).xreplace(back) - want) == 0, k


def test_taylor_mode_refuses_a_moving_order():
    n, x = G.Leaf.new("n"), G.Leaf.new("x")
    with pytest.raises(taylor.Unsupported, match="order of polygamma"):
        taylor.coefficients([G.call(sp.polygamma, n, x)], [n], [G.ONE], 2)


# --------------------------------------------------------------------------------------------
# Formulas and interop
# --------------------------------------------------------------------------------------------


def test_formulas_print_as_sympy_does():
    x = st.symbol("x")
    X = x.symbols[()]
    assert st.lgamma(x).formula() == sp.loggamma(X)
    assert st.digamma(x).formula() == sp.digamma(X)  # SymPy's digamma is polygamma(0, x)
    assert str(st.polygamma(2, x).formula()) == "polygamma(2, x)"
    with st.GradientTape() as tape:
        tape.watch(x)
        y = st.lgamma(x * x)
    assert str(tape.gradient(y, x).formula()) == "2*x*polygamma(0, x**2)"


def test_from_sympy_maps_the_family():
    q = sp.Symbol("q")
    expr = sp.loggamma(q) + sp.digamma(q) * sp.polygamma(2, q) + sp.trigamma(q)
    got = st.from_sympy(expr, {q: 2.5}).numpy()
    want = float(mpmath.loggamma(2.5) + mpmath.digamma(2.5) * mpmath.polygamma(2, 2.5)
                 + mpmath.polygamma(1, 2.5))
    assert got == pytest.approx(want, rel=1e-14)


def test_bad_orders_raise_symtape_errors():
    with pytest.raises((SymtapeError, TypeError, ValueError), match="polygamma"):
        st.polygamma(st.constant([1.0, 2.0]), st.constant([1.0, 2.0, 3.0]))


def test_saved_programs_keep_the_family_and_its_gradients(tmp_path):
    class Model(st.Module):
        @st.function(input_signature=[st.TensorSpec((4,))])
        def __call__(self, x):
            return st.lgamma(x) + st.polygamma(2.0, x) * st.digamma(x)

    xs = np.array([0.5, 2.5, -0.5, 7.0])
    st.saved_model.save(Model(), str(tmp_path))
    loaded = st.saved_model.load(str(tmp_path))
    x = st.Variable(xs)
    with st.GradientTape() as tape:
        y = loaded(x)
    psi = [float(mpmath.digamma(v)) for v in xs]
    want = [p + float(mpmath.polygamma(3, v)) * q + float(mpmath.polygamma(2, v)) *
            float(mpmath.polygamma(1, v)) for v, p, q in zip(xs, psi, psi)]
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), want, rtol=1e-12)


# --------------------------------------------------------------------------------------------
# erfc, bessel_i0e, bessel_i1e and zeta: values against scipy.special, compiled code,
# exported C, derivatives, coefficients
# --------------------------------------------------------------------------------------------

special = pytest.importorskip("scipy.special")

WIDE = np.concatenate([np.linspace(-30.0, 30.0, 1201), np.geomspace(1e-300, 1e300, 121),
                       -np.geomspace(1e-12, 1e12, 25), [0.0, -0.0, 7.999, 8.0, 8.001, 5.9999,
                                                         6.0, 26.5, 27.2, 27.3]])
EDGES = np.array([np.inf, -np.inf, np.nan])
MP_POINTS = np.concatenate([np.linspace(-28.0, 28.0, 113), [1e-9, -1e-300, 7.999, 8.001, 1e5]])
MP_REF = {"erfc": [float(mpmath.erfc(v)) for v in MP_POINTS],
          **{f"bessel_i{n}e": [float(mpmath.besseli(n, v) * mpmath.exp(-abs(v)))
                               for v in MP_POINTS] for n in (0, 1)}}
# name -> (st function, scipy reference, leaf head, relative tolerance of compiled values)
UNARY = {"erfc": (st.math.erfc, special.erfc, sp.erfc, 1.2e-15),
         "bessel_i0e": (st.math.bessel_i0e, special.i0e, F.BesselI0e, 1.2e-15),
         "bessel_i1e": (st.math.bessel_i1e, special.i1e, F.BesselI1e, 1.2e-15)}


def near(got, want, rtol, tiny=1e-300):
    """Equal to ``rtol`` relative, nan and infinities in place, values below ``tiny``
    (subnormal results) to an absolute ``tiny * rtol``."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg="nan positions")
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg="infinities")
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=rtol, atol=tiny)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_eager_values_match_scipy_at_small_large_and_edge_points(name):
    """scipy's own error reaches 5e-14 (erfc's tail): the tight check is against mpmath."""
    fn, ref = UNARY[name][:2]
    x = np.concatenate([WIDE, EDGES])
    near(fn(st.constant(x)).numpy(), ref(x), rtol=1e-13)


@pytest.mark.parametrize("name", ["bessel_i0e", "bessel_i1e"])
def test_bessel_values_match_mpmath(name):
    """Within 5 ulp of the true values, on both sides of the split at 8 and far out."""
    order = int(name[8])
    x = np.concatenate([np.linspace(-40.0, 40.0, 161), [1e-9, 7.999, 8.001, 1e4, 1e12]])
    want = [float(mpmath.besseli(order, v) * mpmath.exp(-abs(v))) for v in x]
    np.testing.assert_allclose(UNARY[name][0](st.constant(x)).numpy(), want, rtol=1.2e-15,
                               atol=1e-300)


@pytest.mark.parametrize("lane", [False, True])
def test_compiled_erfc_and_bessel_match_scipy(lane, monkeypatch):
    """Straight-line IR: vectorised loops, one point at a time and lane mode (widened)."""
    monkeypatch.setattr(kernel, "LOOP_VECTORIZE_MAX_ACCESSES", -1)
    monkeypatch.setattr(kernel, "LANE_MIN_OPS", 0 if lane else 10 ** 9)
    x = G.Leaf.new("x")
    atoms = [G.call(UNARY[n][2], x) for n in sorted(UNARY)]
    f = compile_atoms([np.array(atoms, dtype=object)], [np.array(x, dtype=object)])
    assert ("<8 x double>" in f.llvm_ir) == lane
    pts = np.concatenate([WIDE, EDGES])
    for batch in (pts, pts[:1], pts[:3]):
        out = f(batch)
        for k, n in enumerate(sorted(UNARY)):
            near(out[:, k], UNARY[n][1](batch), rtol=1e-13)  # scipy's own error
    out = f(MP_POINTS)
    for k, n in enumerate(sorted(UNARY)):
        near(out[:, k], MP_REF[n], rtol=UNARY[n][3])


def test_st_function_compiles_erfc_bessel_and_zeta():
    @st.function(input_signature=[st.TensorSpec((None,))])
    def f(x):
        return st.stack([st.math.erfc(x), st.math.bessel_i0e(x), st.math.bessel_i1e(x),
                         st.math.zeta(x * x + 1.5, x * x + 0.25)])

    x = np.array([-3.0, -0.5, 0.0, 0.7, 4.0, 9.0, 25.0])
    got = f(x).numpy()
    for row, n in zip(got[:3], ("erfc", "bessel_i0e", "bessel_i1e")):
        near(row, UNARY[n][1](x), rtol=1e-13)
    near(got[3], tf_zeta(x * x + 1.5, x * x + 0.25), rtol=1e-14)


def test_float32_kernels_round_once():
    x = G.Leaf.new("x")
    atoms = [G.call(UNARY[n][2], x) for n in sorted(UNARY)]
    f = compile_atoms([np.array(atoms, dtype=object)], [np.array(x, dtype=object)],
                      dtype="float32")
    xs = np.float32([-4.0, -0.5, 0.0, 0.25, 3.0, 9.0, 12.0])
    out = f(xs)
    for k, n in enumerate(sorted(UNARY)):
        want = UNARY[n][1](xs.astype(np.float64)).astype(np.float32)
        np.testing.assert_allclose(out[:, k], want, rtol=1.2e-7)


# zeta: points of every kind (TF's conventions: inf at x = 1 and at the poles of q; nan for
# x < 1, for q < 0 with x not an integer)
ZX = np.array([1.0001, 1.5, 2.0, 2.5, 3.0, 4.0, 7.5, 10.0, 20.0, 50.0, 100.0, 1e3, 1e10, 0.5,
               1.0, -2.0, np.nan, np.inf])
ZQ = np.array([1e-10, 0.1, 0.5, 1.0, 2.0, 3.3, 9.0, 9.5, 10.0, 100.0, 1e5, 1e8, 2e8, 1e12,
               1e300, -0.5, -2.5, -10.5, 0.0, -1.0, -3.0, np.nan, np.inf])
ZXX, ZQQ = (g.ravel() for g in np.meshgrid(ZX, ZQ))


def tf_zeta(x, q):
    """scipy's zeta with TensorFlow's (Eigen's) conventions at the poles of q: inf for an
    even integer x > 1 there, nan otherwise (scipy: inf); x = 1 is inf first; at x = inf the
    sum stops at once for 0 < q <= 1 (inf, 1) and meets 0/0 above (nan)."""
    ref = special.zeta(x, q)
    even = (x == np.floor(x)) & np.isfinite(x) & (np.floor(x / 2) == x / 2)
    pole = (q <= 0) & (q == np.floor(q))
    ref = np.where(pole & (x != 1) & ~((x > 1) & even), np.nan, ref)
    top = np.where((q > 0) & (q < 1), np.inf, np.where(q == 1, 1.0, np.nan))
    return np.where(x == np.inf, top, ref)


def test_zeta_matches_scipy_with_tf_conventions():
    got = st.math.zeta(st.constant(ZXX), st.constant(ZQQ)).numpy()
    near(got, tf_zeta(ZXX, ZQQ), rtol=1e-14)
    assert st.math.zeta(1.0, np.nan).numpy() == np.inf
    assert np.isnan(st.math.zeta(3.0, -2.0).numpy()) and st.math.zeta(4.0, -2.0).numpy() == np.inf


def test_zeta_matches_mpmath():
    xs, qs = np.array([1.5, 2.0, 3.0, 6.5, 2.0, 4.0]), np.array([0.3, 1.0, 7.25, 40.0, -2.5, -0.75])
    with mpmath.workdps(40):
        want = [float(mpmath.zeta(a, b)) for a, b in zip(xs, qs)]
    np.testing.assert_allclose(st.math.zeta(xs, qs).numpy(), want, rtol=1e-14)


def test_zeta_refuses_to_loop_without_bound():
    assert np.isnan(st.math.zeta(2.0, -2.0e6 - 0.5).numpy())
    assert np.isfinite(st.math.zeta(2.0, -1000.5).numpy())


@pytest.mark.parametrize("lane", [False, True])
def test_compiled_zeta_is_the_eager_value(lane, monkeypatch):
    """The operations of numeric.zeta in order (pow: the C library's in both, to an ulp)."""
    monkeypatch.setattr(kernel, "LOOP_VECTORIZE_MAX_ACCESSES", -1)
    monkeypatch.setattr(kernel, "LANE_MIN_OPS", 0 if lane else 10 ** 9)
    x, q = G.Leaf.new("x"), G.Leaf.new("q")
    f = compile_atoms([np.array([G.call(sp.zeta, x, q)], dtype=object)],
                      [np.array(x, dtype=object), np.array(q, dtype=object)])
    assert ("<8 x double>" in f.llvm_ir) == lane
    near(f(ZXX, ZQQ)[:, 0], numeric.zeta(ZXX, ZQQ), rtol=5e-16)


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_exported_c_of_erfc_bessel_and_zeta_matches_the_jit(tmp_path):
    x, q = G.Leaf.new("x"), G.Leaf.new("q")
    atoms = [G.call(sp.erfc, x), G.call(F.BesselI0e, x), G.call(F.BesselI1e, x),
             G.call(sp.zeta, x, q)]
    f = compile_atoms([np.array(atoms, dtype=object)],
                      [np.array(x, dtype=object), np.array(q, dtype=object)],
                      name="specials", input_names=["x", "q"])
    src, lib = tmp_path / "specials.c", tmp_path / "specials.so"
    src.write_text(f.c_source())
    subprocess.run([CC, "-std=c99", "-O2", "-Wall", "-Werror", "-Wno-unused-function",
                    "-shared", "-fPIC", str(src), "-o", str(lib), "-lm"], check=True,
                   capture_output=True)
    xx, qq = ZXX.copy(), ZQQ.copy()
    out = np.empty((len(xx), 4))
    ctypes.CDLL(str(lib)).specials(ctypes.c_int64(len(xx)), *[ctypes.c_void_p(v.ctypes.data)
                                                             for v in (xx, qq, out)])
    jit = f(xx, qq)
    for k in range(4):
        near(out[:, k], jit[:, k], rtol=1.2e-15)


def test_derivatives_of_erfc_and_bessel_to_order_three():
    """d erfc = -2/sqrt(pi) exp(-x^2); d i0e = i1e - sign i0e; d i1e = i0e - i1e (sign + 1/x);
    against mpmath's derivatives of exp(-|x|) I_n(x) (away from 0) to order 3."""
    x = np.array([-3.5, -0.7, 0.4, 2.0, 9.5])
    for name, f in (("erfc", mpmath.erfc),
                    ("bessel_i0e", lambda v: mpmath.besseli(0, v) * mpmath.exp(-abs(v))),
                    ("bessel_i1e", lambda v: mpmath.besseli(1, v) * mpmath.exp(-abs(v)))):
        for order in (1, 2, 3):
            want = [float(mpmath.diff(f, v, order)) for v in x]
            got = _nested(UNARY[name][0], st.Variable(x), order).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-10, err_msg=f"{name} {order}")


def test_bessel_i1e_gradient_at_zero_is_one_half():
    v = st.Variable([0.0, -0.0, 1e-300])
    with st.GradientTape(persistent=True) as tape:
        y = st.math.bessel_i1e(v)
        z = st.math.bessel_i0e(v)
    np.testing.assert_array_equal(tape.gradient(y, v).numpy(), [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(tape.gradient(z, v).numpy(), [0.0, 0.0, -1.0])  # kink at 0


def test_zeta_gradients_follow_tf():
    """d/dq zeta(x, q) = -x zeta(x + 1, q), to order 3 (and Taylor mode); none in x."""
    x, q = st.Variable([2.0, 3.5]), st.Variable([0.7, 4.0])
    with st.GradientTape(persistent=True) as tape:
        y = st.math.zeta(x, q)
    assert tape.gradient(y, x) is None
    def dq(s, v, order):  # (-1)^k s (s + 1) ... (s + k - 1) zeta(s + k, v)
        return float((-1) ** order * mpmath.rf(s, order) * mpmath.zeta(s + order, v))

    for order in (1, 2, 3):
        want = [dq(a, b, order) for a, b in ((2.0, 0.7), (3.5, 4.0))]
        got = _nested(lambda v: st.math.zeta(x, v), q, order).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12)
    d = st.derivative(lambda v: st.math.zeta(2.5, v), order=3,
                      input_signature=[st.TensorSpec(())])
    assert float(d(np.array(1.3))) == pytest.approx(dq(2.5, 1.3, 3), rel=1e-12)


def test_formulas_and_from_sympy():
    x = st.symbol("x")
    X = x.symbols[()]
    assert st.math.erfc(x).formula() == sp.erfc(X)
    assert str(st.math.bessel_i1e(x).formula()) == "bessel_i1e(x)"
    assert str(st.math.zeta(2.0, x).formula()).startswith("zeta(2")
    got = st.from_sympy(sp.erfc(X) + F.BesselI0e(X), {X: 1.5}).numpy()
    assert got == pytest.approx(float(mpmath.erfc(1.5) + mpmath.besseli(0, 1.5)
                                      * mpmath.exp(-1.5)), rel=1e-15)


def test_polyval_is_horner_with_tf_conventions():
    x = np.array([-1.5, 0.0, 2.0])
    np.testing.assert_allclose(st.math.polyval([2.0, -1.0, 0.5, 3.0], x).numpy(),
                               np.polyval([2.0, -1.0, 0.5, 3.0], x), rtol=1e-15)
    assert st.math.polyval([], x).numpy().tolist() == [0.0, 0.0, 0.0]
    c = st.Variable([1.0, 2.0, 3.0])  # coefficients broadcast with x: per-element polynomials
    v = st.Variable(x)
    with st.GradientTape(persistent=True) as tape:
        y = st.reduce_sum(st.math.polyval([c, 3.0 * c], v))
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_allclose(tape.gradient(y, c).numpy(), x + 3.0)
    with pytest.raises(SymtapeError, match="coeffs must be a list"):
        st.math.polyval(np.array([1.0, 2.0]), x)
    with pytest.raises(SymtapeError, match=r"coeffs\[1\]"):
        st.math.polyval([1.0, np.ones(4)], x)


def test_bad_arguments_name_them():
    with pytest.raises(SymtapeError, match="st.math.zeta: q"):
        st.math.zeta(2.0, np.array([1, 2]))
    with pytest.raises(SymtapeError, match="st.math.bessel_i0e: x"):
        st.math.bessel_i0e(np.array([1, 2]))
    with pytest.raises(SymtapeError, match="broadcast"):
        st.math.zeta(np.ones(2), np.ones(3))


def test_coefficients_rederive():
    from symtape.codegen import special as S

    assert S.erfc_tail_coefficients() == S.ERFC_TAIL_COEFFS
    assert S.bessel_coefficients() == numeric.BESSEL_FAR


def test_riemann_zeta_of_one_argument_is_zeta_at_q_one():
    """SymPy's one-argument zeta (from a formula) evaluates, folds and compiles as zeta(x, 1)."""
    x = G.Leaf.new("x")
    f = compile_atoms([np.array([G.call(sp.zeta, x)], dtype=object)], [np.array(x, dtype=object)])
    np.testing.assert_allclose(f(np.array([2.0, 3.0]))[:, 0],
                               [math.pi ** 2 / 6, 1.2020569031595942], rtol=1e-15)
    assert float(G.call(sp.zeta, sp.Float(4.0))) == pytest.approx(math.pi ** 4 / 90, rel=1e-15)


def test_zeta_taylor_coefficients_and_a_moving_first_argument():
    q = G.Leaf.new("q")
    (series,) = taylor.coefficients([G.call(sp.zeta, sp.Integer(2), q)], [q], [G.ONE], 3)
    Q = sp.Symbol("Q")
    got = [G.expand(c).xreplace({q: Q}) for c in series]
    assert got == [sp.zeta(2, Q), -2 * sp.zeta(3, Q), 3 * sp.zeta(4, Q), -4 * sp.zeta(5, Q)]
    x = G.Leaf.new("x")
    with pytest.raises(taylor.Unsupported, match="first argument of zeta"):
        taylor.coefficients([G.call(sp.zeta, x, q)], [x], [G.ONE], 2)


def test_saved_programs_keep_erfc_bessel_and_zeta_and_their_gradients(tmp_path):
    class Model(st.Module):
        @st.function(input_signature=[st.TensorSpec((3,))])
        def __call__(self, x):
            return (st.math.erfc(x) + st.math.bessel_i1e(x) * st.math.bessel_i0e(x)
                    + st.math.zeta(2.5, x * x + 1.0))

    xs = np.array([0.3, -1.2, 2.5])
    st.saved_model.save(Model(), str(tmp_path))
    loaded = st.saved_model.load(str(tmp_path))
    x = st.Variable(xs)
    with st.GradientTape() as tape:
        y = loaded(x)
    i0 = special.i0e(xs)
    i1 = special.i1e(xs)
    np.testing.assert_allclose(y.numpy(), special.erfc(xs) + i1 * i0
                               + special.zeta(2.5, xs * xs + 1.0), rtol=1e-14)
    di0 = i1 - np.sign(xs) * i0
    di1 = i0 - i1 * (np.sign(xs) + 1 / xs)
    want = (-2 / np.sqrt(np.pi) * np.exp(-xs * xs) + di1 * i0 + i1 * di0
            - 2.5 * special.zeta(3.5, xs * xs + 1.0) * 2 * xs)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), want, rtol=1e-12)
