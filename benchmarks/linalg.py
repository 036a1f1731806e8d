"""Linear algebra speed: symtape beside numpy (and JAX when installed) in the same run.

1. Eager ``st.linalg.inv``, ``st.linalg.solve`` (one right-hand side) and ``st.linalg.cholesky``
   at n = 100, 200, 300:
   best and median milliseconds of several runs, and the ratio to numpy's best.
2. Compiled (``--compiled``): ``st.function`` of ``solve(A, b)`` for an n x n system (default
   80), traced for one point and called over a batch of points: setup seconds (trace, plan,
   LLVM; cold caches) and microseconds per point against ``numpy.linalg.solve`` on the same
   batch; then the same for the gradient in ``A`` of ``w . solve(A, b)``.

3. Factorizations (``--factorizations``): ``st.function`` of ``lu``, ``qr``, ``eigh`` and
   ``svd`` (native routines) over a batch of 2,000 matrices of 20x20 in one call, beside
   ``numpy.linalg`` on the same batch: setup seconds (cold cache) and microseconds per
   matrix, best and median.

    python benchmarks/linalg.py                       # eager only
    python benchmarks/linalg.py --compiled            # and the compiled 80x80 solve
    python benchmarks/linalg.py --factorizations      # and the compiled factorizations

On a loaded machine with few cores, multithreaded BLAS spins against other processes; compare
with ``OPENBLAS_NUM_THREADS=1`` (both sides share it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

import symtape as st


def timings(fn, repeat: int) -> tuple[float, float]:
    """(best, median) seconds of ``repeat`` calls of ``fn`` after one warm-up call."""
    fn()
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return min(runs), statistics.median(runs)


def jax_solvers():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    inv = jax.jit(jnp.linalg.inv)
    solve = jax.jit(jnp.linalg.solve)
    chol = jax.jit(jnp.linalg.cholesky)
    return {"cholesky": lambda a: chol(a).block_until_ready(),
            "inv": lambda a: inv(a).block_until_ready(),
            "solve": lambda a, b: solve(a, b).block_until_ready()}


def eager(repeat: int) -> None:
    jx = jax_solvers()
    print("| eager | n | symtape best / median ms | numpy best / median ms | jax best ms "
          "| symtape / numpy |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for n in (100, 200, 300):
        a = rng.standard_normal((n, n)) + n * np.eye(n)
        b = rng.standard_normal((n, 1))
        spd = a @ a.T
        ta, tb, ts = st.constant(a), st.constant(b), st.constant(spd)
        cases = {"inv": (lambda: st.linalg.inv(ta), lambda: np.linalg.inv(a),
                         jx and (lambda: jx["inv"](a))),
                 "solve": (lambda: st.linalg.solve(ta, tb), lambda: np.linalg.solve(a, b),
                           jx and (lambda: jx["solve"](a, b))),
                "cholesky": (lambda: st.linalg.cholesky(ts), lambda: np.linalg.cholesky(spd),
                             jx and (lambda: jx["cholesky"](spd)))}
        for name, (ours, ref, peer) in cases.items():
            s_best, s_med = timings(ours, repeat)
            n_best, n_med = timings(ref, repeat)
            j = f"{timings(peer, repeat)[0] * 1e3:.2f}" if peer else "-"
            print(f"| {name} | {n} | {s_best * 1e3:.2f} / {s_med * 1e3:.2f} | "
                  f"{n_best * 1e3:.2f} / {n_med * 1e3:.2f} | {j} | {s_best / n_best:.1f}x |")


def _solver(n: int, gradient: bool):
    """``st.function`` of ``solve(A, b)`` (or of the gradient of ``w . solve(A, b)`` in
    ``A``) over a batch of points."""
    spec = [st.TensorSpec((None, n, n)), st.TensorSpec((None, n, 1))]
    if not gradient:
        return st.function(lambda m, r: st.linalg.solve(m, r), input_signature=spec)
    w = np.linspace(-1.0, 1.0, n).reshape(n, 1)

    def grad(m, r):
        with st.GradientTape() as tape:
            tape.watch(m)
            y = st.reduce_sum(st.linalg.solve(m, r) * w)
        return tape.gradient(y, m)

    return st.function(grad, input_signature=spec)


def compiled(n: int, points: int, repeat: int, setups: int) -> None:
    """Setup (trace, plan, LLVM; a new empty cache folder each time, so nothing is read
    back) best and median of ``setups``; then microseconds per point beside numpy."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((points, n, n)) + n * np.eye(n)
    b = rng.standard_normal((points, n, 1))
    for gradient in (False, True):
        times = []
        for _ in range(setups):
            with tempfile.TemporaryDirectory() as cache:
                os.environ["SYMTAPE_CACHE_DIR"] = cache
                t = time.perf_counter()
                fn = _solver(n, gradient)
                fn(a[:1], b[:1])
                times.append(time.perf_counter() - t)
        what = "gradient in A of w . solve" if gradient else "solve"
        print(f"\ncompiled {what} {n}x{n} over {points} points: setup best "
              f"{min(times):.2f} s, median {statistics.median(times):.2f} s")
        if gradient:
            s_best, s_med = timings(lambda: fn(a, b), repeat)
            print(f"  per point: symtape {s_best / points * 1e6:.2f} / "
                  f"{s_med / points * 1e6:.2f} us (best / median)")
            continue
        out = np.asarray(fn(a, b))
        err = np.abs(out - np.linalg.solve(a, b)).max()
        s_best, s_med = timings(lambda: fn(a, b), repeat)
        n_best, n_med = timings(lambda: np.linalg.solve(a, b), repeat)
        print(f"  max |error| {err:.1e}; per point: symtape {s_best / points * 1e6:.2f} / "
              f"{s_med / points * 1e6:.2f} us (best / median), numpy "
              f"{n_best / points * 1e6:.2f} / {n_med / points * 1e6:.2f} us, ratio "
              f"{s_best / n_best:.2f}x best, {s_med / n_med:.2f}x median")


def factorizations(n: int, batch: int, repeat: int) -> None:
    """Compiled factorizations of a batch of ``n x n`` matrices beside numpy's."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((batch, n, n))
    sym = a + np.swapaxes(a, -1, -2)
    cases = {"lu": (lambda x: st.linalg.lu(x)[0], a, None),
             "qr": (lambda x: st.linalg.qr(x)[1], a, lambda: np.linalg.qr(a)),
             "eigh": (lambda x: st.linalg.eigh(x)[1], sym, lambda: np.linalg.eigh(sym)),
             "svd": (lambda x: st.linalg.svd(x)[0], a, lambda: np.linalg.svd(a))}
    print(f"\ncompiled factorizations of {batch} matrices {n}x{n}, one call (us a matrix)")
    for name, (fn, x, ref) in cases.items():
        with tempfile.TemporaryDirectory() as cache:
            os.environ["SYMTAPE_CACHE_DIR"] = cache
            f = st.function(fn)
            t = time.perf_counter()
            f(x)
            setup = time.perf_counter() - t
        s_best, s_med = timings(lambda: f(x), repeat)
        line = (f"  {name:5s} setup {setup:.2f} s; symtape {s_best / batch * 1e6:.1f} / "
                f"{s_med / batch * 1e6:.1f}")
        if ref is not None:
            n_best, n_med = timings(ref, repeat)
            line += (f", numpy {n_best / batch * 1e6:.1f} / {n_med / batch * 1e6:.1f}; "
                     f"ratio {s_best / n_best:.2f}x best, {s_med / n_med:.2f}x median")
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--compiled", action="store_true")
    parser.add_argument("--n", type=int, default=80)
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--setups", type=int, default=3)
    parser.add_argument("--factorizations", action="store_true")
    args = parser.parse_args()
    eager(args.repeat)
    if args.compiled:
        compiled(args.n, args.points, args.repeat, args.setups)
    if args.factorizations:
        factorizations(20, 2000, args.repeat)


if __name__ == "__main__":
    main()
