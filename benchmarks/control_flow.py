"""Control flow speed: ``st.scan`` of an RK4 pendulum beside JAX's ``lax.scan``, in one run.

The pendulum ``s = (theta, omega)``, ``f(s) = (omega, -9.81 sin theta)``, takes ``steps`` RK4
steps of ``h = 0.01``; one step is the scan body (over ``st.zeros(steps)``, ``initializer``
the start state) and the loss is the final angle ``traj[-1, 0]``.

1. Gradients: ``st.grad(final, input_signature=[st.TensorSpec((2,))])`` called on a
   ``(points, 2)`` array beside ``jax.jit(jax.vmap(jax.grad(final)))``: setup seconds (the first
   call: trace, derivatives, plan, native code; for JAX, trace and XLA compile) and
   microseconds per point (best and median of later calls / points), with the ratio
   symtape / JAX.
2. Values: the largest difference between symtape's and JAX's gradients, and (at 1,000 steps,
   ``--eager-points`` points, default 3) against an eager unrolled reference: a Python loop of
   RK4 steps under ``st.GradientTape``, no ``st.scan`` (the slowest part: about 30 s a point
   on a loaded 2-core machine).
3. Hessians at 1,000 steps: ``st.hessian`` beside ``jax.jit(jax.vmap(jax.hessian(final)))``.
4. ``--long``: reverse mode over 1,000,000 steps for one point, in a child process so its peak
   resident memory (``VmHWM``, else ``ru_maxrss``) is its own: wall time and peak beside the
   process's size right after ``import symtape`` (target: under 200 MB); JAX likewise, in its
   own child. symtape runs three ways: the ``st.scan`` above (its result is the stacked
   trajectory, 16 MB, which reverse mode reads as the carries), and the final state by
   ``st.while_loop``, whose reverse mode stores every carry or, with
   ``st.config.set_loop_checkpointing("sqrt")``, checkpoints of them.

    python benchmarks/control_flow.py                   # quick: 1,000 steps, 1,000 points
    python benchmarks/control_flow.py --full            # and 100,000 steps at 64 points
    python benchmarks/control_flow.py --long            # and 1,000,000 steps, one point
    python benchmarks/control_flow.py --long --no-hessian --eager-points 0   # 1 + 4 only

Setup numbers are cold and exclude the one-time imports of each side's libraries (JAX;
SymPy, which symtape imports on first use): symtape keeps compiled object code in an on-disk cache
(``$SYMTAPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/symtape``, else ``~/.cache/symtape``; see
``symtape/codegen/cache.py``), so this script points ``SYMTAPE_CACHE_DIR`` at a new empty
temporary folder before every timed setup (``--warm-cache DIR`` uses ``DIR`` instead, to
measure warm setups). JAX's persistent compilation cache is off by default and is left off.
Both sides run in float64 (``jax_enable_x64``) on the CPU with their default threads
(``--threads`` sets symtape's; XLA's CPU client picks its own).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

H = 0.01
G = 9.81


def timings(fn, repeat: int) -> tuple[float, float]:
    """(best, median) seconds of ``repeat`` calls of ``fn`` (after the caller's first call)."""
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return min(runs), statistics.median(runs)


_CACHES = tempfile.TemporaryDirectory(prefix="st-bench-cache-")  # removed at exit


def fresh_cache(args) -> str:
    """An empty folder for symtape's object cache (or the ``--warm-cache`` one)."""
    return args.warm_cache or tempfile.mkdtemp(dir=_CACHES.name)


def cold_cache(args) -> None:
    """Point symtape's object cache at :func:`fresh_cache` before a timed setup."""
    os.environ["SYMTAPE_CACHE_DIR"] = fresh_cache(args)


def peak_mb() -> float:
    """Peak resident memory of this process so far, in MB: ``VmHWM`` of /proc/self/status
    where there is one, as ``ru_maxrss`` of a child started by fork and exec starts at the
    parent's peak (Linux carries it over at exec); else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2 ** 10
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 2 ** 20 if sys.platform == "darwin" else rss / 2 ** 10


# --------------------------------------------------------------------------------------------
# The pendulum, three ways
# --------------------------------------------------------------------------------------------


def symtape_final(steps: int):
    import symtape as st

    def f(s):
        return st.stack([s[1], -G * st.sin(s[0])])

    def rk4(s, _):
        k1 = f(s)
        k2 = f(s + H / 2 * k1)
        k3 = f(s + H / 2 * k2)
        k4 = f(s + H * k3)
        return s + H / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

    def final(s0):
        traj = st.scan(rk4, st.zeros(steps), initializer=s0)
        return traj[-1, 0]

    return final, rk4


def symtape_final_state(steps: int):
    """The final angle after ``steps`` RK4 steps by ``st.while_loop`` (the result is the
    final state only, not the stacked trajectory ``st.scan`` returns, so reverse mode
    stores the loop's carries itself, or checkpoints of them)."""
    import symtape as st
    _, rk4 = symtape_final(steps)

    def final(s0):
        _, s = st.while_loop(lambda i, s: i < steps, lambda i, s: (i + 1, rk4(s, None)),
                             (st.constant(0), s0), maximum_iterations=steps)
        return s[0]

    return final


def jax_final(steps: int):
    import jax
    import jax.numpy as jnp

    def f(s):
        return jnp.stack([s[1], -G * jnp.sin(s[0])])

    def rk4(s, _):
        k1 = f(s)
        k2 = f(s + H / 2 * k1)
        k3 = f(s + H / 2 * k2)
        k4 = f(s + H * k3)
        s = s + H / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return s, s

    def final(s0):
        _, traj = jax.lax.scan(rk4, s0, jnp.zeros(steps))
        return traj[-1, 0]

    return final


def eager_unrolled_grad(steps: int, s0: np.ndarray) -> np.ndarray:
    """The gradient of the final angle by a Python loop of eager RK4 steps on the tape."""
    import symtape as st
    _, rk4 = symtape_final(steps)
    x = st.Variable(s0)
    with st.GradientTape() as tape:
        s = x + 0.0
        for _ in range(steps):
            s = rk4(s, None)
        loss = s[0]
    return np.asarray(tape.gradient(loss, x))


def import_jax():
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    return jax


# --------------------------------------------------------------------------------------------
# 1-3: gradients, values, Hessians
# --------------------------------------------------------------------------------------------


def points_for(steps: int, args) -> tuple[int, int]:
    """(points, repeat) for a run of ``steps`` steps: fewer of both for long runs."""
    return (args.points, args.repeat) if steps <= 10_000 else (args.big_points, args.big_repeat)


def compare(name: str, steps: int, args, make_st, make_jax, out_shape) -> dict:
    """Setup and per-point timings of one symtape transform and its JAX peer, same points."""
    points, repeat = points_for(steps, args)
    pts = np.random.default_rng(steps).uniform(-1.0, 1.0, (points, 2))
    row = {"name": name, "steps": steps, "points": points}
    cold_cache(args)
    t = time.perf_counter()
    try:
        fn = make_st()
        ours = np.asarray(fn(pts))
    except Exception as exc:  # reported, not hidden: the table shows the error
        row["error"] = f"{type(exc).__name__}: {exc}"
        row["st_setup"] = time.perf_counter() - t
    else:
        row["st_setup"] = time.perf_counter() - t
        assert ours.shape == (points, *out_shape), ours.shape
        row["st"] = timings(lambda: fn(pts), repeat)
        row["st_out"] = ours
    jfn = make_jax()
    t = time.perf_counter()
    theirs = np.asarray(jfn(pts).block_until_ready())
    row["jax_setup"] = time.perf_counter() - t
    row["jax"] = timings(lambda: jfn(pts).block_until_ready(), repeat)
    row["jax_out"] = theirs
    return row


def print_rows(rows: list[dict]) -> None:
    print("| transform | steps | points | symtape setup s | symtape us/pt best / median "
          "| JAX setup s | JAX us/pt best / median | symtape / JAX per pt best / median |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        n = r["points"]
        jb, jm = (v / n * 1e6 for v in r["jax"])
        jax_cells = f"{r['jax_setup']:.2f} | {jb:.2f} / {jm:.2f}"
        if "error" in r:
            print(f"| {r['name']} | {r['steps']:,} | {n} | failed after {r['st_setup']:.2f} "
                  f"| - | {jax_cells} | - |")
            continue
        sb, sm = (v / n * 1e6 for v in r["st"])
        print(f"| {r['name']} | {r['steps']:,} | {n} | {r['st_setup']:.2f} | {sb:.2f} / "
              f"{sm:.2f} | {jax_cells} | {sb / jb:.2f}x / {sm / jm:.2f}x |")
    for r in rows:
        if "error" in r:
            print(f"\n{r['name']} at {r['steps']:,} steps failed: {r['error']}")


def value_checks(rows: list[dict], args) -> None:
    jax = import_jax()
    print("\nvalues: symtape against JAX (same points); as a yardstick of round-off over the "
          "horizon, JAX's reverse mode against its forward mode (jacfwd)")
    for r in rows:
        if "st_out" not in r:
            continue
        diff = np.abs(r["st_out"] - r["jax_out"])
        scale = np.maximum(1.0, np.abs(r["jax_out"]))
        line = (f"  {r['name']:8s} {r['steps']:>9,} steps: max |symtape - JAX| {diff.max():.1e}, "
                f"relative {(diff / scale).max():.1e} (largest |value| "
                f"{np.abs(r['jax_out']).max():.1e})")
        if r["name"] == "grad":
            pts = np.random.default_rng(r["steps"]).uniform(-1.0, 1.0, (r["points"], 2))
            fwd = np.asarray(jax.jit(jax.vmap(jax.jacfwd(jax_final(r["steps"]))))(pts))
            yard = np.abs(fwd - r["jax_out"])
            line += f"; |JAX rev - fwd| {yard.max():.1e}, relative {(yard / scale).max():.1e}"
        print(line)
    steps, n = 1000, args.eager_points
    row = next((r for r in rows if r["name"] == "grad" and r["steps"] == steps), None)
    if row is None or n <= 0:
        return
    # The rows draw their points from default_rng(steps): these are that row's first three.
    pts = np.random.default_rng(steps).uniform(-1.0, 1.0, (n, 2))
    t = time.perf_counter()
    ref = np.stack([eager_unrolled_grad(steps, p) for p in pts])
    took = time.perf_counter() - t
    print(f"  eager unrolled GradientTape reference, {steps:,} steps, {n} points ({took:.1f} s):")
    if "st_out" in row:
        print(f"    max |st.grad - eager| {np.abs(row['st_out'][:n] - ref).max():.1e}")
    print(f"    max |JAX - eager|     {np.abs(row['jax_out'][:n] - ref).max():.1e}")


def gradients_and_hessians(args) -> None:
    import symtape as st
    # both sides' libraries are imported before any timed setup: JAX here, and SymPy, which
    # symtape imports on first use (about 0.5 s once a process)
    import sympy  # noqa: F401
    jax = import_jax()
    steps_list = [1000] + ([100_000] if args.full else [])
    sig = [st.TensorSpec((2,))]
    rows = []
    for steps in steps_list:
        final, _ = symtape_final(steps)
        jfinal = jax_final(steps)
        rows.append(compare(
            "grad", steps, args,
            lambda final=final: st.grad(final, input_signature=sig, threads=args.threads),
            lambda jfinal=jfinal: jax.jit(jax.vmap(jax.grad(jfinal))), (2,)))
    if not args.no_hessian:
        final, _ = symtape_final(1000)
        jfinal = jax_final(1000)
        rows.append(compare(
            "hessian", 1000, args,
            lambda: st.hessian(final, input_signature=sig, threads=args.threads),
            lambda: jax.jit(jax.vmap(jax.hessian(jfinal))), (2, 2)))
    print_rows(rows)
    value_checks(rows, args)


# --------------------------------------------------------------------------------------------
# 4: one long reverse sweep, measured in a child process
# --------------------------------------------------------------------------------------------


def long_child(side: str, steps: int, threads) -> None:
    """Run in a child: one gradient over ``steps`` steps; print a JSON line of the numbers."""
    s0 = np.array([[0.3, -0.2]])
    if side.startswith("symtape"):
        import symtape as st
        base = peak_mb()
        if side == "symtape":
            final, _ = symtape_final(steps)
        else:  # the final state by while_loop, its carries checkpointed every ~sqrt steps
            st.config.set_loop_checkpointing("sqrt" if side.endswith("checkpointed") else None)
            final = symtape_final_state(steps)
        t = time.perf_counter()
        g = st.grad(final, input_signature=[st.TensorSpec((2,))], threads=threads)
        out = np.asarray(g(s0))
        first = time.perf_counter() - t
        t = time.perf_counter()
        out = np.asarray(g(s0))
        again = time.perf_counter() - t
    else:
        jax = import_jax()
        import jax.numpy as jnp
        jnp.zeros(1).block_until_ready()  # the runtime is up before the baseline is read
        base = peak_mb()
        g = jax.jit(jax.vmap(jax.grad(jax_final(steps))))
        t = time.perf_counter()
        out = np.asarray(g(s0).block_until_ready())
        first = time.perf_counter() - t
        t = time.perf_counter()
        out = np.asarray(g(s0).block_until_ready())
        again = time.perf_counter() - t
    print(json.dumps({"base_mb": base, "peak_mb": peak_mb(), "first_s": first,
                      "again_s": again, "grad": out[0].tolist()}))


def long_run(args) -> None:
    steps = args.long_steps
    print(f"\nlong: reverse mode over {steps:,} steps, one point (each side in its own process)")
    results = {}
    for side in ("symtape", "symtape-while", "symtape-while-checkpointed", "jax"):
        env = dict(os.environ, SYMTAPE_CACHE_DIR=fresh_cache(args))
        cmd = [sys.executable, __file__, "--child", side, "--long-steps", str(steps)]
        if args.threads is not None:
            cmd += ["--threads", str(args.threads)]
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            print(f"  {side}: failed (exit {proc.returncode}) after {wall:.1f} s:\n"
                  + "\n".join("    " + line for line in proc.stderr.strip().splitlines()[-12:]))
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        results[side] = r
        print(f"  {side}: process wall {wall:.1f} s; first call (setup + run) "
              f"{r['first_s']:.2f} s, second call {r['again_s']:.2f} s; peak RSS "
              f"{r['peak_mb']:.0f} MB (after import {r['base_mb']:.0f} MB, so "
              f"{r['peak_mb'] - r['base_mb']:.0f} MB for the gradient); "
              f"gradient {r['grad'][0]:.6f} {r['grad'][1]:.6f}")
    if "jax" in results:
        b = np.array(results["jax"]["grad"])
        for side in (k for k in results if k != "jax"):
            a = np.array(results[side]["grad"])
            verdict = "under" if results[side]["peak_mb"] < 200 else "over"
            print(f"  {side}: max |symtape - JAX| {np.abs(a - b).max():.1e}; peak {verdict} "
                  f"the 200 MB target")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also 100,000 steps")
    parser.add_argument("--long", action="store_true", help="also 1,000,000 steps, one point")
    parser.add_argument("--points", type=int, default=1000, help="points at 1,000 steps")
    parser.add_argument("--big-points", type=int, default=64, help="points at 100,000 steps")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--big-repeat", type=int, default=3)
    parser.add_argument("--long-steps", type=int, default=1_000_000)
    parser.add_argument("--no-hessian", action="store_true")
    parser.add_argument("--eager-points", type=int, default=3,
                        help="points of the eager unrolled reference (0: skip it)")
    parser.add_argument("--threads", type=int, default=None, help="symtape's threads")
    parser.add_argument("--warm-cache", default=None,
                        help="use this symtape cache folder instead of a fresh empty one")
    parser.add_argument("--child", choices=("symtape", "symtape-while",
                                            "symtape-while-checkpointed", "jax"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        long_child(args.child, args.long_steps, args.threads)
        return
    gradients_and_hessians(args)
    if args.long:
        long_run(args)


if __name__ == "__main__":
    main()
