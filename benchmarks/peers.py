"""Setup and evaluation against the peers on 15 problems, in one run.

Problems (scalar code over the inputs ``x[0] ... x[n-1]`` for SymEngine and CasADi, array
code for symtape and JAX, as their users write them): Rosenbrock n=10 and n=100 (value,
gradient, Hessian), the softened gravitational potential of k=5 and k=20 bodies (gradient:
the forces; Hessian) and the Hessian of k=50 bodies (150 inputs, on 200 points), the
8-16-16-1 tanh MLP with fixed weights (input gradient and
Hessian), and the Lagrangian of a cart carrying a 3-link pendulum (gradient and Hessian in
the 8 coordinates and velocities).

Tools: symtape (``st.function``/``st.grad``/``st.hessian``), SymEngine's LLVM
``Lambdify`` (``cse=True``), CasADi SX functions (``map`` over the points, its virtual
machine), CasADi's generated C compiled with ``cc -O3 -march=native`` (when a C compiler is
on the PATH), and JAX ``jit(vmap(...))`` in float64. Setup: from the function to the first
result (trace, derivative, compile; symtape with an empty object cache; JAX's compile for
the evaluated batch shape). Evaluation: the best of several calls over the same points,
in ns per point. Every tool's result is checked against symtape's, and a tool that
disagrees is flagged (SymEngine 0.15's LLVM ``Lambdify`` with ``cse=True`` gets the
pendulum wrong: its values differ from its own ``cse=False`` and from JAX's).

Targets: symtape's setup geomean <= 0.2 s and max <= 3 s; its evaluation the best of the
symbolic tools (SymEngine, CasADi; those whose values agree) and <= 1.0x JAX on the MLP
gradient and Hessian; on the 50-body Hessian, setup <= 2 s and evaluation <= 0.5x JAX.

    pip install -e ".[bench]" && python benchmarks/peers.py [--points N] [--only NAME]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

os.environ.setdefault("SYMTAPE_CACHE_DIR", tempfile.mkdtemp(prefix="symtape-bench-"))

import symtape as st  # noqa: E402 - the cache directory must be chosen first
from _timing import best  # noqa: E402 - benchmarks/ is the script's directory

# --------------------------------------------------------------------------------------------
# The problems: scalar code over x[0..n-1] with the math functions of a namespace ``m``
# --------------------------------------------------------------------------------------------


def rosenbrock(x, m):
    return sum(100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
               for i in range(len(x) - 1))


def _masses(k: int) -> list:
    return [1.0 + 0.25 * (i % 4) for i in range(k)]


def nbody(x, m):
    """Softened potential of ``k = len(x) / 3`` bodies at positions ``x`` (3 per body)."""
    k = len(x) // 3
    ms = _masses(k)
    total = 0.0
    for i in range(k):
        for j in range(i + 1, k):
            d2 = sum((x[3 * i + c] - x[3 * j + c]) ** 2 for c in range(3)) + 0.01
            total = total - ms[i] * ms[j] / m.sqrt(d2)
    return total


MLP_SIZES = (8, 16, 16, 1)


def _mlp_weights() -> list:
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((a, b)) / np.sqrt(a), rng.standard_normal(b) * 0.1)
            for a, b in zip(MLP_SIZES[:-1], MLP_SIZES[1:])]


MLP_WEIGHTS = _mlp_weights()


def mlp(x, m):
    h = list(x)
    for layer, (w, b) in enumerate(MLP_WEIGHTS):
        h = [sum(h[i] * float(w[i, j]) for i in range(len(h))) + float(b[j])
             for j in range(w.shape[1])]
        if layer < len(MLP_WEIGHTS) - 1:
            h = [m.tanh(v) for v in h]
    return h[0]


def cart_pendulum(x, m):
    """Lagrangian ``T - V`` of a cart (position ``x[0]``, velocity ``x[4]``) carrying a
    3-link pendulum of point masses (angles ``x[1:4]``, rates ``x[5:8]``)."""
    lengths, masses, g, cart = (1.0, 0.8, 0.6), (0.5, 0.4, 0.3), 9.81, 2.0
    xd = x[4]
    kinetic = 0.5 * cart * xd * xd
    potential = 0.0
    vx, vy, height = xd, 0.0, 0.0
    for j in range(3):
        th, thd = x[1 + j], x[5 + j]
        vx = vx + lengths[j] * m.cos(th) * thd
        vy = vy + lengths[j] * m.sin(th) * thd
        height = height - lengths[j] * m.cos(th)
        kinetic = kinetic + 0.5 * masses[j] * (vx * vx + vy * vy)
        potential = potential + masses[j] * g * height
    return kinetic - potential


# The same problems as array code, as symtape's and JAX's users write them (``a``: the
# array namespace below); the pendulum is scalar code in every tool.


def rosenbrock_array(x, a):
    return a.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def nbody_array(x, a):
    k = x.shape[0] // 3
    ms = np.array(_masses(k))
    pair = np.triu(np.outer(ms, ms), 1)  # m_i m_j for i < j
    q = a.reshape(x, (k, 3))
    diff = q[:, None, :] - q[None, :, :]
    d2 = a.sum(diff * diff, axis=-1) + 0.01
    return -a.sum(a.const(pair) / a.sqrt(d2))


def mlp_array(x, a):
    h = x
    for layer, (w, b) in enumerate(MLP_WEIGHTS):
        h = a.vecmat(h, a.const(w)) + a.const(b)
        if layer < len(MLP_WEIGHTS) - 1:
            h = a.tanh(h)
    return h[0]


class _Symtape:
    sqrt, tanh, sin, cos, reshape, const = st.sqrt, st.tanh, st.sin, st.cos, st.reshape, \
        st.constant

    @staticmethod
    def sum(x, axis=None):
        return st.reduce_sum(x, axis=axis)

    @staticmethod
    def vecmat(h, w):
        return st.matmul(h[None, :], w)[0]


class _Jax:
    def __getattr__(self, name):
        import jax.numpy as jnp

        if name == "const":
            return jnp.asarray
        if name == "vecmat":
            return lambda h, w: h @ w
        return getattr(jnp, name)


ARRAY_FORMS = {rosenbrock: rosenbrock_array, nbody: nbody_array, mlp: mlp_array}


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable
    n: int
    what: str  # 'value', 'grad' or 'hessian'
    sample: Callable  # rng, points -> array (points, n)
    points: int = 0  # at most this many points (0: --points): a dense Hessian of 150 inputs

    def array_code(self, namespace) -> Callable:
        """The problem as a function of one array, in the array form where there is one."""
        form = ARRAY_FORMS.get(self.fn)
        if form is not None:
            return lambda x: form(x, namespace)
        return lambda x: self.fn([x[i] for i in range(self.n)], namespace)


def _normal(scale: float, shift: float = 0.0):
    return lambda rng, n_pts, n: shift + scale * rng.standard_normal((n_pts, n))


def _bodies(rng, n_pts, n):
    k = n // 3
    base = np.concatenate([np.array([np.cos(2 * np.pi * i / k), np.sin(2 * np.pi * i / k),
                                     0.1 * i]) * (1 + 0.1 * i) for i in range(k)])
    return base + 0.05 * rng.standard_normal((n_pts, n))


CASES = [
    *(Case(f"rosenbrock{n} {w}", rosenbrock, n, w, _normal(0.5, 1.0))
      for n in (10, 100) for w in ("value", "grad", "hessian")),
    *(Case(f"nbody{k} {w}", nbody, 3 * k, w, _bodies) for k in (5, 20)
      for w in ("grad", "hessian")),
    Case("nbody50 hessian", nbody, 150, "hessian", _bodies, points=200),
    *(Case(f"mlp8-16-16-1 {w}", mlp, 8, w, _normal(1.0)) for w in ("grad", "hessian")),
    *(Case(f"cart+3-pendulum {w}", cart_pendulum, 8, w, _normal(0.7)) for w in
      ("grad", "hessian")),
]

# --------------------------------------------------------------------------------------------
# The tools: each returns (setup seconds, evaluate(points) -> array (points, *out_shape))
# --------------------------------------------------------------------------------------------


def symtape_tool(case: Case, points: np.ndarray):
    # each tool's libraries are imported outside its timed setup (the others import theirs
    # first): SymPy too, and symtape's element level, both of which symtape imports on first
    # use (``st.config.preload``)
    st.config.preload()

    f = case.array_code(_Symtape)
    spec = [st.TensorSpec((case.n,))]
    t = time.perf_counter()
    if case.what == "value":
        fn = st.derivative(f, order=0, input_signature=spec)
    elif case.what == "grad":
        fn = st.grad(f, input_signature=spec)
    else:
        fn = st.hessian(f, input_signature=spec)
    fn(points[:1])
    return time.perf_counter() - t, fn


def symengine_tool(case: Case, points: np.ndarray):
    import symengine as se

    t = time.perf_counter()
    xs = list(se.symbols(f"x0:{case.n}"))
    y = case.fn(xs, se)
    if case.what == "value":
        outs = [y]
    else:
        grad = [se.diff(y, v) for v in xs]
        outs = grad if case.what == "grad" else [se.diff(g, v) for g in grad for v in xs]
    lam = se.Lambdify(xs, outs, backend="llvm", cse=True)
    lam(points[0])
    setup = time.perf_counter() - t
    shape = {"value": (), "grad": (case.n,), "hessian": (case.n, case.n)}[case.what]
    return setup, lambda p: np.asarray(lam(p)).reshape((len(p),) + shape)


def _casadi_function(case: Case):
    import casadi as ca

    x = ca.SX.sym("x", case.n)
    y = case.fn([x[i] for i in range(case.n)], ca)  # ca.sqrt, ca.tanh, ca.sin, ca.cos
    if case.what == "value":
        out = y
    elif case.what == "grad":
        out = ca.gradient(y, x)
    else:
        out = ca.hessian(y, x)[0]
    return ca.Function("f", [x], [ca.densify(out)])  # a Hessian is sparse: every element


def _casadi_eval(case: Case, fn, n_points: int):
    """The mapped function over ``n_points`` called through CasADi's buffer interface on
    the caller's arrays (points are contiguous columns: a row-major ``(points, n)`` array),
    no conversions."""
    mapped = fn.map(n_points, "serial")
    buf, trigger = mapped.buffer()
    shape = {"value": (), "grad": (case.n,), "hessian": (case.n, case.n)}[case.what]
    out = np.empty((n_points,) + shape)
    buf.set_res(0, memoryview(out))

    def run(p):
        p = np.ascontiguousarray(p)
        buf.set_arg(0, memoryview(p))
        trigger()
        # a Hessian block is column-major: transposed (it is symmetric: the same values)
        return out.swapaxes(1, 2).copy() if case.what == "hessian" else out.copy()

    return run


def casadi_tool(case: Case, points: np.ndarray):
    t = time.perf_counter()
    fn = _casadi_function(case)
    run = _casadi_eval(case, fn, len(points))
    run(points)
    return time.perf_counter() - t, run


def casadi_c_tool(case: Case, points: np.ndarray):
    t = time.perf_counter()
    ext = casadi_c(_casadi_function(case))
    run = _casadi_eval(case, ext, len(points))
    run(points)
    return time.perf_counter() - t, run


def casadi_c(fn):
    """A CasADi function's generated C, compiled with ``cc -O3 -march=native`` and loaded
    back as a CasADi ``external``."""
    import casadi as ca

    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("no C compiler")
    tmp = tempfile.mkdtemp(prefix="casadi-c-")
    cwd = os.getcwd()
    try:
        os.chdir(tmp)
        fn.generate(f"{fn.name()}.c")
    finally:
        os.chdir(cwd)
    lib = os.path.join(tmp, f"{fn.name()}.so")
    subprocess.run([cc, "-O3", "-march=native", "-shared", "-fPIC", "-o", lib,
                    os.path.join(tmp, f"{fn.name()}.c")], check=True, capture_output=True)
    return ca.external(fn.name(), lib)


def jax_tool(case: Case, points: np.ndarray):
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    f = case.array_code(_Jax())
    t = time.perf_counter()
    g = {"value": f, "grad": jax.grad(f), "hessian": jax.hessian(f)}[case.what]
    fn = jax.jit(jax.vmap(g))
    arr = jnp.asarray(points)
    fn(arr).block_until_ready()
    setup = time.perf_counter() - t
    return setup, lambda p: np.asarray(fn(jnp.asarray(p)).block_until_ready())


TOOLS = {
    "symtape": symtape_tool,
    "SymEngine-LLVM": symengine_tool,
    "CasADi": casadi_tool,
    "CasADi-C": casadi_c_tool,
    "JAX": jax_tool,
}
SYMBOLIC = ("SymEngine-LLVM", "CasADi", "CasADi-C")

# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------


def measure(case: Case, tool: str, points: np.ndarray, reference):
    """``(setup s, ns per point, max relative error against the reference)`` or a reason."""
    try:
        setup, fn = TOOLS[tool](case, points)
    except ImportError as exc:
        return f"not installed ({exc.name})"
    except Exception as exc:  # a tool that fails on a problem is reported, not fatal
        return f"failed: {type(exc).__name__}: {str(exc)[:60]}"
    got = np.asarray(fn(points), dtype=np.float64)
    if reference is None:
        reference = got
    scale = max(1.0, float(np.max(np.abs(reference))))
    err = float(np.max(np.abs(got.reshape(reference.shape) - reference))) / scale
    seconds = best(lambda: fn(points), 5)
    return setup, seconds / len(points) * 1e9, err, got


def geomean(values: list) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=10_000)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--tools", default=",".join(TOOLS), help="comma-separated tool names")
    args = ap.parse_args()
    tools = [t for t in args.tools.split(",") if t in TOOLS]
    if "symtape" not in tools:
        tools.insert(0, "symtape")
    rng = np.random.default_rng(1)
    cases = [c for c in CASES if args.only in c.name]
    setups: dict = {t: [] for t in tools}
    ratios: dict = {t: [] for t in tools}
    verdicts = []
    print(f"{len(cases)} problems, {args.points} points; setup s / evaluation ns per point "
          "(ratio to the fastest tool)")
    for case in cases:
        points = case.sample(rng, min(args.points, case.points or args.points), case.n)
        print(f"\n{case.name} (n={case.n})")
        reference, rows = None, {}
        for tool in tools:
            r = measure(case, tool, points, reference)
            if isinstance(r, str):
                print(f"  {tool:16s} {r}")
                continue
            setup, ns, err, got = r
            if tool == "symtape":
                reference = got
            rows[tool] = (setup, ns, err)
        fastest = min(ns for _, ns, _ in rows.values())
        for tool, (setup, ns, err) in rows.items():
            flag = "" if err < 1e-9 else "  <- DISAGREES"
            print(f"  {tool:16s} setup {setup:8.3f} s   eval {ns:10.1f} ns "
                  f"({ns / fastest:5.2f}x)   err {err:.1e}{flag}")
            setups[tool].append(setup)
            ratios[tool].append(ns / fastest)
        if "symtape" in rows:
            sym = rows["symtape"][1]
            peers = [rows[t][1] for t in SYMBOLIC if t in rows and rows[t][2] < 1e-9]
            if peers:
                verdicts.append((case.name, "evaluation best symbolic", sym <= min(peers)))
            if case.name.startswith("mlp") and "JAX" in rows and rows["JAX"][2] < 1e-9:
                verdicts.append((case.name, "evaluation <= 1.0x JAX", sym <= rows["JAX"][1]))
            if case.name == "nbody50 hessian":
                verdicts.append((case.name, "setup <= 2 s", rows["symtape"][0] <= 2.0))
                if "JAX" in rows and rows["JAX"][2] < 1e-9:
                    verdicts.append((case.name, "evaluation <= 0.5x JAX",
                                     sym <= 0.5 * rows["JAX"][1]))
    print("\nsummary: setup geomean / max (s), evaluation geomean of ratio to the fastest")
    for tool in tools:
        if setups[tool]:
            print(f"  {tool:16s} {geomean(setups[tool]):7.3f} / {max(setups[tool]):7.3f}   "
                  f"{geomean(ratios[tool]):6.2f}x  ({len(setups[tool])} problems)")
    if setups["symtape"]:
        g, mx = geomean(setups["symtape"]), max(setups["symtape"])
        print(f"symtape setup geomean {g:.3f} s (target <= 0.2): {'ok' if g <= 0.2 else 'FAIL'}"
              f"; max {mx:.2f} s (target <= 3): {'ok' if mx <= 3 else 'FAIL'}")
    for name, what, ok in verdicts:
        print(f"symtape {what} on {name}: {'ok' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
