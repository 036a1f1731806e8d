"""lgamma, digamma and polygamma: values (eager, compiled one point at a time and in lane
mode, exported C) against mpmath at small, large, negative, pole, infinite and nan points with
TensorFlow's conventions; derivatives to order 3 (sweeps and Taylor mode) against mpmath and
finite differences; formulas; SymPy interop."""

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
