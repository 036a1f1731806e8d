"""A mass-action reaction network's sparse Jacobian: segment sums and gathers at scale.

Species concentrations ``c`` (``ns`` of them), reactions ``A + B -> C`` (``nr`` of them,
random species), rates ``r = k * c[a] * c[b]`` (gathers) and species changes ``dc =
unsorted_segment_sum(stoich * r[reaction_of_term], species_of_term, ns)`` (three terms per
reaction). symtape: ``st.jacobian(f, sparse=True)`` (the pattern read off the DAG, rows
coloured, one batched sweep per colour); JAX (when installed): the dense ``jacfwd``, jitted,
in the same run. Each tool and size runs in a child process of its own. Setup: from the
function to the first result (symtape with an empty object cache); peak RSS: the child's
(``resource.getrusage``) after its setup;
evaluation: per point, over a batch of points, best and median of several calls. The values
are checked against a hand-written Jacobian. Targets: 2,000 species / 6,000 reactions:
setup <= 2 s, peak RSS <= 2 GB, evaluation <= 1 ms a point; 20,000 / 60,000: setup <= 20 s.

    python benchmarks/reaction.py [--sizes 2000:6000,20000:60000] [--points 16] [--hessian]

``--hessian``: instead, the sparse Hessian of the steady-state residual ``0.5 * |dc|^2``
(Newton's method on it), its products with three random vectors checked against central
differences of the gradient; JAX's dense ``jit(vmap(hessian))`` beside it. Both report the
largest temporary of symtape's plan a point, in units of the derivative's non-zeros.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import resource
import statistics
import tempfile
import time

import numpy as np

os.environ.setdefault("SYMTAPE_CACHE_DIR", tempfile.mkdtemp(prefix="symtape-bench-"))

import symtape as st  # noqa: E402 - the cache directory must be chosen first


def network(ns: int, nr: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    a, b, c = (rng.integers(0, ns, nr) for _ in range(3))
    return dict(ns=ns, nr=nr, a=a, b=b, c=c, k=rng.uniform(0.5, 2.0, nr),
                stoich=np.concatenate([-np.ones(nr), -np.ones(nr), np.ones(nr)]),
                reaction=np.tile(np.arange(nr), 3), species=np.concatenate([a, b, c]))


def symtape_rhs(net: dict):
    k, stoich = st.constant(net["k"]), st.constant(net["stoich"])

    def f(conc):
        r = k * st.gather(conc, net["a"]) * st.gather(conc, net["b"])
        return st.math.unsorted_segment_sum(stoich * st.gather(r, net["reaction"]),
                                            net["species"], net["ns"])

    return f


def hand_jacobian(net: dict, x: np.ndarray) -> tuple:
    """``(rows, cols, values)`` of d dc / d c, duplicates summed by the caller."""
    a, b, k = net["a"], net["b"], net["k"]
    rows, cols, vals = [], [], []
    for s, sgn in ((a, -1.0), (b, -1.0), (net["c"], 1.0)):
        rows += [s, s]
        cols += [a, b]
        vals += [sgn * k * x[b], sgn * k * x[a]]
    return np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # (KiB on Linux)


def timed_calls(call, repeat: int = 7) -> tuple:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return min(times), statistics.median(times)


def run_symtape(net: dict, points: np.ndarray) -> dict:
    import sympy  # noqa: F401 - imported once a process, as JAX's import is, outside setup
    t = time.perf_counter()
    try:
        jac = st.jacobian(symtape_rhs(net), sparse=True,
                          input_signature=[st.TensorSpec((net["ns"],))])
        first = jac(points[:1])
    except (st.errors.SymtapeError, MemoryError) as e:
        return dict(error=f"{type(e).__name__}: {e}", setup=time.perf_counter() - t,
                    rss=rss_mb())
    setup = time.perf_counter() - t
    nnz = first.values.shape[-1]
    out = dict(setup=setup, rss=rss_mb(), nnz=nnz, largest=largest_temporary(jac, nnz),
               strategies=[s.name for s in jac.strategies])
    best, median = timed_calls(lambda: jac(points))
    out.update(best=best / len(points), median=median / len(points))
    rows, cols = np.asarray(first.indices).T
    want = {}
    for i, j, v in zip(*hand_jacobian(net, points[0])):
        want[(i, j)] = want.get((i, j), 0.0) + v
    got = dict(zip(zip(rows.tolist(), cols.tolist()), np.asarray(first.values)[0].tolist()))
    out["max_error"] = max(abs(got.get(key, 0.0) - v) for key, v in want.items())
    out["pattern_ok"] = set(want) <= set(got)
    return out


def largest_temporary(fn, nnz: int) -> float:
    """The largest temporary or constant of ``fn``'s loop plan a point, over ``nnz``."""
    plan = fn.compiled.plan
    sizes = [b.size for b in getattr(plan, "buffers", ()) if b.kind in ("temp", "const")]
    return max(sizes, default=0) / max(1, getattr(plan, "points", 0)) / nnz


def run_symtape_hessian(net: dict, points: np.ndarray) -> dict:
    import sympy  # noqa: F401 - as in run_symtape
    rhs = symtape_rhs(net)

    def residual(conc):
        return 0.5 * st.reduce_sum(rhs(conc) ** 2)

    spec = [st.TensorSpec((net["ns"],))]
    t = time.perf_counter()
    try:
        hess = st.hessian(residual, sparse=True, input_signature=spec)
        first = hess(points[:1])
    except (st.errors.SymtapeError, MemoryError) as e:
        return dict(error=f"{type(e).__name__}: {e}", setup=time.perf_counter() - t,
                    rss=rss_mb())
    setup = time.perf_counter() - t
    nnz = first.values.shape[-1]
    out = dict(setup=setup, rss=rss_mb(), nnz=nnz, largest=largest_temporary(hess, nnz),
               strategies=[s.name for s in hess.strategies])
    best, median = timed_calls(lambda: hess(points))
    out.update(best=best / len(points), median=median / len(points))
    grad = st.grad(residual, input_signature=spec)
    rows, cols = np.asarray(first.indices).T
    vals = np.asarray(first.values)[0]
    rng = np.random.default_rng(2)
    err = 0.0
    for _ in range(3):
        v = rng.standard_normal(net["ns"])
        hv = np.zeros(net["ns"])
        np.add.at(hv, rows, vals * v[cols])
        eps = 1e-5
        fd = (np.asarray(grad(points[:1] + eps * v))[0] -
              np.asarray(grad(points[:1] - eps * v))[0]) / (2 * eps)
        err = max(err, float(np.abs(hv - fd).max() / np.abs(fd).max()))
    out["max_error"] = err
    return out


def run_jax(net: dict, points: np.ndarray, hessian: bool = False) -> dict | None:
    """JAX's dense ``jacfwd`` of the species changes (checked against the hand Jacobian),
    or with ``hessian`` its dense ``hessian`` of ``0.5 |dc|^2``, jitted and vmapped."""
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    jax.config.update("jax_enable_x64", True)
    ns = net["ns"]
    what = "Hessians" if hessian else "Jacobians"
    if ns * ns * 8 * len(points) > 2 ** 31:
        return dict(error=f"dense {what} of {len(points)} points take "
                          f"{ns * ns * 8 * len(points) / 2 ** 30:.1f} GiB: skipped")
    a, b, k = jnp.asarray(net["a"]), jnp.asarray(net["b"]), jnp.asarray(net["k"])
    stoich, reaction = jnp.asarray(net["stoich"]), jnp.asarray(net["reaction"])
    species = jnp.asarray(net["species"])

    def f(c):
        r = k * c[a] * c[b]
        return jax.ops.segment_sum(stoich * r[reaction], species, num_segments=ns)

    t = time.perf_counter()
    fn = jax.hessian(lambda c: 0.5 * jnp.sum(f(c) ** 2)) if hessian else jax.jacfwd(f)
    derivative = jax.jit(jax.vmap(fn))
    first = derivative(jnp.asarray(points[:1])).block_until_ready()
    out = dict(setup=time.perf_counter() - t, rss=rss_mb())
    if not hessian:
        rows, cols, vals = hand_jacobian(net, points[0])
        want = np.zeros((ns, ns))
        np.add.at(want, (rows, cols), vals)
        out["max_error"] = float(np.abs(first[0] - want).max())
    best, median = timed_calls(lambda: derivative(jnp.asarray(points)).block_until_ready())
    out.update(best=best / len(points), median=median / len(points))
    return out


def child(tool: str, ns: int, nr: int, n_points: int, hessian: bool = False) -> None:
    """Run in a child process: one tool at one size; print a JSON line of its numbers."""
    net = network(ns, nr)
    points = np.random.default_rng(1).uniform(0.1, 1.0, (n_points, ns))
    if tool == "jax":
        out = run_jax(net, points, hessian)
    else:
        out = run_symtape_hessian(net, points) if hessian else run_symtape(net, points)
    print(json.dumps(None if out is None else
                     {k: v if isinstance(v, (str, list, bool)) else float(v)
                      for k, v in out.items()}))


def in_child(tool: str, ns: int, nr: int, n_points: int, hessian: bool = False
             ) -> dict | None:
    """``child`` in a fresh process (so each peak RSS is that tool's own)."""
    cmd = [sys.executable, __file__, "--child", tool, "--sizes", f"{ns}:{nr}",
           "--points", str(n_points)] + (["--hessian"] if hessian else [])
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        return dict(error=f"child exited with {run.returncode}: {run.stderr[-300:]}",
                    setup=float("nan"), rss=float("nan"))
    return json.loads(run.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000:6000",
                        help="species:reactions pairs, comma-separated")
    parser.add_argument("--points", type=int, default=16)
    parser.add_argument("--hessian", action="store_true",
                        help="the sparse Hessian of 0.5 |dc|^2 instead of the Jacobian")
    parser.add_argument("--child", choices=("symtape", "jax"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    for pair in args.sizes.split(","):
        ns, nr = (int(v) for v in pair.split(":"))
        if args.child:
            child(args.child, ns, nr, args.points, args.hessian)
            continue
        print(f"== {ns} species, {nr} reactions, {3 * nr} terms ==")
        rows(ns, nr, args.points, args.hessian)


def rows(ns: int, nr: int, n_points: int, hessian: bool) -> None:
    """Print symtape's row and JAX's for one size (each measured in a child process)."""
    what, check = (" Hessian", "Hessian-vector products vs central differences") if hessian \
        else ("", "max error vs hand")
    s = in_child("symtape", ns, nr, n_points, hessian)
    if "error" in s:
        print(f"symtape sparse{what}: refused after {s['setup']:.1f} s ({s['error']}), "
              f"peak RSS {s['rss']:.0f} MB")
    else:
        print(f"symtape sparse{what}: setup {s['setup']:.2f} s, peak RSS {s['rss']:.0f} MB, "
              f"{s['nnz']:.0f} non-zeros, eval best {s['best'] * 1e3:.3f} ms / median "
              f"{s['median'] * 1e3:.3f} ms a point; largest temporary "
              f"{s['largest']:.2f}x the non-zeros a point; "
              + f"paths {s['strategies']}; "
              + f"{check} {s['max_error']:.1e}"
              + ("" if hessian else f", pattern ok {s['pattern_ok']}"))
    j = in_child("jax", ns, nr, n_points, hessian)
    name = "jax dense " + ("hessian" if hessian else "jacfwd")
    if j is None:
        print("jax: not installed")
    elif "error" in j:
        print(f"{name}: {j['error']}")
    else:
        print(f"{name}: setup {j['setup']:.2f} s, peak RSS {j['rss']:.0f} MB, eval best "
              f"{j['best'] * 1e3:.3f} ms / median {j['median'] * 1e3:.3f} ms a point"
              + ("" if hessian else f"; max error vs hand {j['max_error']:.1e}"))


if __name__ == "__main__":
    main()
