"""Per-call latency of a compiled one-point function of three scalars, against peers.

The function is ``f(x, y, z) = sin(x) * y + z * x`` and its gradient. Each row is the best
of several timed loops (microseconds per call, one point per call):

- symtape ``f(0.5, 1.5, 2.5)`` through ``__call__`` with Python floats and with 0-d arrays,
  ``st.grad`` (a traced transform) with floats, and a buffer-bound call (``f.buffer``:
  arrays bound once, ``call()`` runs the native code on their contents);
- peers where they are installed (``pip install -e ".[bench]"``): SymEngine's ``Lambdify``
  (LLVM backend when available, else its default), CasADi's ``Function`` call and its
  buffer call, JAX ``jit``, and ``sympy.lambdify`` (numpy).

Targets: ``__call__`` <= 3 us, buffer call <= 1 us.

    python benchmarks/call_latency.py
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
import sympy as sp

os.environ.setdefault("SYMTAPE_CACHE_DIR", tempfile.mkdtemp(prefix="symtape-bench-"))

import symtape as st  # noqa: E402 - the cache directory must be chosen first

ARGS = (0.5, 1.5, 2.5)


def best_us(fn, number: int = 20000, repeat: int = 15) -> float:
    for _ in range(1000):
        fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - t) / number)
    return best * 1e6


def symtape_rows() -> list:
    x, y, z = st.symbol("x"), st.symbol("y"), st.symbol("z")
    f = st.compile(st.sin(x) * y + z * x, [x, y, z], name="latency")
    g = st.grad(lambda x, y, z: st.sin(x) * y + z * x, argnums=(0, 1, 2))
    g(*ARGS)
    a, b, c = (np.array(v) for v in ARGS)
    call = f.buffer(a, b, c)
    want = np.sin(0.5) * 1.5 + 2.5 * 0.5
    call()
    assert f(*ARGS) == want and call.out == want
    return [("symtape __call__, floats", best_us(lambda: f(*ARGS))),
            ("symtape __call__, 0-d arrays", best_us(lambda: f(a, b, c))),
            ("symtape st.grad, floats (3 outputs)", best_us(lambda: g(*ARGS))),
            ("symtape buffer call", best_us(call))]


def peer_rows() -> list:
    rows = []
    sx, sy, sz = sp.symbols("x y z")
    expr = sp.sin(sx) * sy + sz * sx
    try:
        import symengine as se
    except ImportError:
        print("symengine not installed: skipped")
    else:
        for backend in ("llvm", None):
            try:
                kw = {"backend": backend} if backend else {}
                lf = se.Lambdify([sx, sy, sz], [expr], **kw)
                name = f"SymEngine Lambdify ({backend or 'default'})"
                rows.append((name, best_us(lambda: lf(*ARGS))))
                break
            except (TypeError, ValueError, RuntimeError):
                continue
    try:
        import casadi as ca
    except ImportError:
        print("casadi not installed: skipped")
    else:
        cx, cy, cz = (ca.SX.sym(n) for n in "xyz")
        cf = ca.Function("f", [cx, cy, cz], [ca.sin(cx) * cy + cz * cx])
        rows.append(("CasADi Function call", best_us(lambda: cf(*ARGS))))
        try:
            buf, run = cf.buffer()
            ins = [np.array([v]) for v in ARGS]
            res = np.zeros(1)
            for i, arr in enumerate(ins):
                buf.set_arg(i, memoryview(arr))
            buf.set_res(0, memoryview(res))
            rows.append(("CasADi buffer call", best_us(run)))
        except (AttributeError, RuntimeError):
            pass
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        print("jax not installed: skipped")
    else:
        jf = jax.jit(lambda x, y, z: jnp.sin(x) * y + z * x)
        jf(*ARGS).block_until_ready()
        rows.append(("JAX jit", best_us(lambda: jf(*ARGS).block_until_ready(), number=2000)))
    lam = sp.lambdify([sx, sy, sz], expr, "numpy")
    rows.append(("sympy.lambdify (numpy)", best_us(lambda: lam(*ARGS))))
    return rows


def main() -> None:
    ours = symtape_rows()
    peers = peer_rows()
    fastest_peer = min((t for _, t in peers), default=None)
    print(f"{'call':40s} {'us/call':>9s} {'/ fastest peer':>15s}")
    for name, t in ours + peers:
        ratio = f"{t / fastest_peer:13.2f}x" if fastest_peer else ""
        print(f"{name:40s} {t:9.2f} {ratio:>15s}")
    call_us = dict(ours)["symtape __call__, floats"]
    raw_us = dict(ours)["symtape buffer call"]
    print(f"targets: __call__ {call_us:.2f} us (<= 3: {'holds' if call_us <= 3 else 'MISSED'}),"
          f" buffer call {raw_us:.2f} us (<= 1: {'holds' if raw_us <= 1 else 'MISSED'})")


if __name__ == "__main__":
    main()
