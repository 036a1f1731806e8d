"""Compiled elementary functions over 10^6 points: symtape's IR ``exp``/``log``/``tanh``/
``erf`` (vectorised kernels) and ``sin``/``cos`` (lane-mode kernels) against the C library's scalar
calls and numpy, in the same run.

The C library rows compile the same function with the batch loop's vectorisation and lane
mode off (``kernel.LOOP_VECTORIZE_MAX_ACCESSES = 0``, ``kernel.LANE_MIN_OPS`` huge), where
kernels call the C library's scalar function once per point: what every kernel did before
the IR versions. ``sin``/``cos`` have IR forms only in lane mode (which every kernel calling
them is in).

    python benchmarks/vecmath.py
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

os.environ.setdefault("SYMTAPE_CACHE_DIR", tempfile.mkdtemp(prefix="symtape-bench-"))

import symtape as st  # noqa: E402 - the cache directory must be chosen first
from symtape.codegen import kernel  # noqa: E402

N = 1_000_000


def best_ms(fn, repeat: int = 30) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def _scipy_erf(arg, out):
    """SciPy's vectorised erf (the numpy column), when SciPy is installed."""
    try:
        from scipy.special import erf
    except ImportError:
        return None
    return lambda: erf(arg, out=out)


def main() -> None:
    rng = np.random.default_rng(0)
    xs = rng.normal(size=N) * 10
    pos = np.abs(xs) + 1e-3
    out = np.empty(N)
    x = st.symbol("x")
    cases = [
        ("exp", st.exp(x), xs, lambda: np.exp(xs, out=out)),
        ("log", st.log(x), pos, lambda: np.log(pos, out=out)),
        ("tanh", st.tanh(x), xs, lambda: np.tanh(xs, out=out)),
        ("sigmoid", st.nn.sigmoid(x), xs, lambda: np.divide(1.0, 1.0 + np.exp(-xs), out=out)),
        ("sin", st.sin(x), xs, lambda: np.sin(xs, out=out)),
        ("cos", st.cos(x), xs, lambda: np.cos(xs, out=out)),
        ("erf", st.erf(x), xs / 4, _scipy_erf(xs / 4, out)),
    ]
    print(f"{N:,} points, one thread; ms (best of 30)")
    print(f"{'function':10s} {'symtape IR':>11s} {'C library':>10s} {'numpy':>8s} "
          f"{'IR / C lib':>11s} {'IR / numpy':>11s}")
    for name, expr, arg, numpy_fn in cases:
        saved = kernel.LOOP_VECTORIZE_MAX_ACCESSES, kernel.LANE_MIN_OPS
        try:
            ours = st.compile(expr, [x], threads=1)
            kernel.LOOP_VECTORIZE_MAX_ACCESSES, kernel.LANE_MIN_OPS = 0, 10 ** 9
            libm = st.compile(expr, [x], threads=1, name=f"{name}_libm")
        finally:
            kernel.LOOP_VECTORIZE_MAX_ACCESSES, kernel.LANE_MIN_OPS = saved
        assert "@st." in ours.llvm_ir and "@st." not in libm.llvm_ir
        # each within 1 ulp of the correctly rounded value: at most 2 apart
        np.testing.assert_allclose(ours(arg), libm(arg), rtol=4.5e-16, atol=1e-300)
        t_ours = best_ms(lambda: ours(arg, out=out))
        t_libm = best_ms(lambda: libm(arg, out=out))
        if numpy_fn is None:
            print(f"{name:10s} {t_ours:11.2f} {t_libm:10.2f} {'-':>8s} "
                  f"{t_ours / t_libm:10.2f}x {'-':>10s}")
            continue
        t_np = best_ms(numpy_fn)
        print(f"{name:10s} {t_ours:11.2f} {t_libm:10.2f} {t_np:8.2f} {t_ours / t_libm:10.2f}x "
              f"{t_ours / t_np:10.2f}x")


if __name__ == "__main__":
    main()
