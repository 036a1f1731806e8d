"""Rosenbrock against hand-written C, in one run: value, gradient and Hessian at n = 10 and
n = 100, symtape's compiled functions (``st.derivative(order=0)``, ``st.grad``,
``st.hessian``, results written into ``out=`` arrays as the C writes into its own) beside
loops written by hand and compiled with ``cc -O3 -march=native`` (which contracts to FMA, as
GNU C does by default). Every symtape result is checked against the C's first.

Each line gives ns a point, best / median of ``--repeat`` calls of each, alternating, and the
ratio symtape / C (target: <= 1.0x in every case).

    python benchmarks/hand_c.py [--points 100000] [--repeat 11] [--only 10value,100grad]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("SYMTAPE_CACHE_DIR", tempfile.mkdtemp(prefix="symtape-bench-"))

import symtape as st  # noqa: E402 - the cache directory must be chosen first

C_SOURCE = r"""
#include <stddef.h>
void rosen_value(ptrdiff_t n, const double *restrict x, double *restrict v) {
    for (ptrdiff_t p = 0; p < n; ++p) {
        const double *xp = x + p * N;
        double s = 0.0;
        for (int i = 0; i < N - 1; ++i) {
            double t = xp[i + 1] - xp[i] * xp[i];
            double u = 1.0 - xp[i];
            s += 100.0 * t * t + u * u;
        }
        v[p] = s;
    }
}
void rosen_grad(ptrdiff_t n, const double *restrict x, double *restrict g) {
    for (ptrdiff_t p = 0; p < n; ++p) {
        const double *xp = x + p * N;
        double *gp = g + p * N;
        for (int i = 0; i < N; ++i) gp[i] = 0.0;
        for (int i = 0; i < N - 1; ++i) {
            double t = xp[i + 1] - xp[i] * xp[i];
            gp[i] += -400.0 * xp[i] * t - 2.0 * (1.0 - xp[i]);
            gp[i + 1] += 200.0 * t;
        }
    }
}
void rosen_hess(ptrdiff_t n, const double *restrict x, double *restrict h) {
    for (ptrdiff_t p = 0; p < n; ++p) {
        const double *xp = x + p * N;
        double *hp = h + p * N * N;
        for (int i = 0; i < N * N; ++i) hp[i] = 0.0;
        for (int i = 0; i < N - 1; ++i) {
            hp[i * N + i] += 1200.0 * xp[i] * xp[i] - 400.0 * xp[i + 1] + 2.0;
            hp[(i + 1) * N + i + 1] += 200.0;
            hp[i * N + i + 1] = -400.0 * xp[i];
            hp[(i + 1) * N + i] = -400.0 * xp[i];
        }
    }
}
"""

CASES = ("10value", "10grad", "10hess", "100value", "100grad", "100hess")


def rosen(x):
    return st.reduce_sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def c_library(tmp: Path, n: int):
    """The hand-written kernels for rows of ``n``, or None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    src, lib = tmp / "rosen.c", tmp / f"librosen{n}.so"
    src.write_text(C_SOURCE)
    done = subprocess.run([cc, "-O3", "-march=native", f"-DN={n}", "-shared", "-fPIC",
                           str(src), "-o", str(lib)], capture_output=True, text=True)
    return ctypes.CDLL(str(lib)) if done.returncode == 0 else None


def timings(fns, repeat: int) -> list:
    """Per function, the sorted wall times of ``repeat`` calls, the functions alternating."""
    for fn in fns:
        fn()
    out = [[] for _ in fns]
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            out[k].append(time.perf_counter() - t)
    return [sorted(ts) for ts in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--only", default=",".join(CASES))
    args = ap.parse_args()
    ptr = ctypes.POINTER(ctypes.c_double)
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.only.split(","):
            n = int(case.rstrip("valuegrdhs"))
            what = case[len(str(n)):]
            dll = c_library(Path(tmp), n)
            if dll is None:
                print("no C compiler: nothing to compare against")
                return
            # a Hessian of n = 100 is 80 kB a point: fewer points keep it in memory
            m = args.points if what != "hess" or n < 100 else args.points // 50
            x = np.random.default_rng(0).normal(size=(m, n))
            spec = [st.TensorSpec((n,))]
            t0 = time.perf_counter()
            f = {"value": lambda: st.derivative(rosen, order=0, input_signature=spec),
                 "grad": lambda: st.grad(rosen, input_signature=spec),
                 "hess": lambda: st.hessian(rosen, input_signature=spec)}[what]()
            mine = np.empty((m,) + {"value": (), "grad": (n,), "hess": (n, n)}[what])
            f(x, out=mine)
            setup = time.perf_counter() - t0
            theirs = np.empty((m, mine[0].size))
            fc = getattr(dll, "rosen_" + what)
            fc.argtypes = [ctypes.c_ssize_t, ptr, ptr]
            fc.restype = None

            def c_call(fc=fc, x=x, theirs=theirs, m=m):
                fc(m, x.ctypes.data_as(ptr), theirs.ctypes.data_as(ptr))

            c_call()
            np.testing.assert_allclose(mine.reshape(m, -1), theirs, rtol=1e-12, atol=1e-9)
            ts, tc = timings([lambda f=f, x=x, mine=mine: f(x, out=mine), c_call],
                             args.repeat)
            ratio = (ts[0] / tc[0], statistics.median(ts) / statistics.median(tc))
            ratios.append(ratio[0])
            print(f"rosenbrock n={n:3d} {what:5s}  setup {setup:5.2f} s  symtape "
                  f"{ts[0] / m * 1e9:8.1f} / {statistics.median(ts) / m * 1e9:8.1f} ns  "
                  f"C {tc[0] / m * 1e9:8.1f} / {statistics.median(tc) / m * 1e9:8.1f} ns  "
                  f"ratio {ratio[0]:.2f}x / {ratio[1]:.2f}x", flush=True)
    worst = max(ratios)
    print(f"worst best-ratio {worst:.2f}x (target <= 1.0x): {'ok' if worst <= 1.0 else 'FAIL'}")


if __name__ == "__main__":
    main()
