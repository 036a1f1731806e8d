"""Command line: ``python -m symtape demo`` (the tour), ``python -m symtape examples [NAME |
all]`` (the example programs shipped in the package: lists them and runs one), ``python -m
symtape --version``."""

from __future__ import annotations

import argparse
import ast
import runpy
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

import symtape as st


def _section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 70 - len(title)))


def demo_derivatives() -> None:
    _section("A tape, and exact derivatives of every order")
    x = st.Variable(0.5, name="x")
    print("x = st.Variable(0.5, name='x')")
    print("with st.GradientTape() as t3, st.GradientTape() as t2, st.GradientTape() as t1:")
    print("    y = x**3 * st.sin(x)")
    with st.GradientTape() as t3:
        with st.GradientTape() as t2:
            with st.GradientTape() as t1:
                y = x ** 3 * st.sin(x)
            dy = t1.gradient(y, x)
        d2y = t2.gradient(dy, x)
    d3y = t3.gradient(d2y, x)
    for label, t in (("y", y), ("dy/dx", dy), ("d2y/dx2", d2y), ("d3y/dx3", d3y)):
        print(f"  {label:8s} = {str(t.formula()):48s} = {float(t):.12g}")
    print(f"  LaTeX of d2y/dx2: {d2y.latex()}")


def demo_sigmoid() -> None:
    _section("Derivative of the logistic sigmoid, and its simplification")
    s = st.symbol("s")
    with st.GradientTape() as t:
        y = st.nn.sigmoid(s)
    g = t.gradient(y, s)
    print(f"  d sigmoid(s)/ds            = {g.formula()}")
    print(f"  .formula(simplify=True)    = {g.formula(simplify=True)}")


def demo_linearisation() -> None:
    _section("Linearising a pendulum: the Jacobian of its dynamics")
    theta, omega = st.symbol("theta", 0.3), st.symbol("omega", 0.0)
    g_over_l, damping = 9.81, 0.1
    with st.GradientTape(persistent=True) as t:
        f = st.stack([omega, -g_over_l * st.sin(theta) - damping * omega])
    a = st.stack([t.jacobian(f, theta), t.jacobian(f, omega)], axis=1)
    print("  f(theta, omega) =", f.formula())
    print("  A = df/d(theta, omega) =", a.formula())
    print("  A at theta=0.3, omega=0:\n" + textwrap.indent(str(a.numpy()), "    "))


def demo_rosenbrock() -> None:
    _section("A gradient in CSE form (Rosenbrock, n = 4)")
    x = st.Variable(np.array([-1.2, 1.0, 0.5, 2.0]), name="x")
    with st.GradientTape() as t:
        f = st.reduce_sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
    g = t.gradient(f, x)
    print(textwrap.indent(str(g.cse()), "  "))
    print("  value:", g.numpy())


def demo_compiled() -> None:
    _section("The same gradient as native code, over a million points")

    def rosen(x):
        return st.reduce_sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)

    t0 = time.perf_counter()
    g = st.grad(rosen, input_signature=[st.TensorSpec((10,))])
    compile_ms = (time.perf_counter() - t0) * 1e3
    x = np.random.default_rng(0).normal(size=(1_000_000, 10))
    out = np.empty_like(x)
    g(x, out=out)
    t0 = time.perf_counter()
    g(x, out=out)
    run_ms = (time.perf_counter() - t0) * 1e3
    print(f"  {g}")
    print(f"  traced, differentiated and compiled in {compile_ms:.0f} ms (or read from the "
          "disk cache)")
    print(f"  1e6 gradients of a 10-dimensional Rosenbrock in {run_ms:.1f} ms "
          f"({1e3 / run_ms:.0f} million points per second)")
    print(f"  first point: {np.round(out[0], 6)}")


def demo() -> None:
    print("symtape: exact symbolic derivatives behind TensorFlow's GradientTape API")
    demo_derivatives()
    demo_sigmoid()
    demo_linearisation()
    demo_rosenbrock()
    demo_compiled()


#: The example programs shipped in the package (data files, not modules of the package).
EXAMPLES = Path(__file__).resolve().parent / "examples"
#: The example ``python -m symtape examples`` runs when given no name: quick, no extras.
FIRST_EXAMPLE = "pendulum_linearisation"


def examples() -> dict:
    """``name -> (path, first line of its docstring)`` of the shipped example programs.

    >>> "pendulum_linearisation" in examples()
    True
    """
    out = {}
    for path in sorted(EXAMPLES.glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        out[path.stem] = (path, " ".join(doc.split("\n\n")[0].split()).rstrip("."))
    return out


def run_examples(which: str | None, args: list | None = None) -> int:
    """Lists the examples, then runs ``which`` (a name, ``all``, or None for the first) with
    the command-line arguments ``args``."""
    found = examples()
    print("symtape examples (python -m symtape examples NAME | all):")
    for name, (_, line) in found.items():
        print(f"  {name:26s} {textwrap.shorten(line, 72)}")
    names = list(found) if which == "all" else [which or FIRST_EXAMPLE]
    for name in names:
        if name not in found:
            print(f"no example named {name!r}", file=sys.stderr)
            return 2
        _section(f"{name} ({found[name][0]})")
        saved = sys.argv
        sys.argv = [str(found[name][0]), *(args or [])]  # the example parses its own options
        try:
            runpy.run_path(str(found[name][0]), run_name="__main__")
        finally:
            sys.argv = saved
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m symtape")
    parser.add_argument("--version", action="version", version=f"symtape {st.__version__}")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("demo", help="show tapes, exact derivative formulas and their values")
    ex = sub.add_parser("examples", help="list the example programs and run one (or all)")
    ex.add_argument("name", nargs="?", default=None,
                    help=f"the example to run (default {FIRST_EXAMPLE}; 'all': every one)")
    ex.add_argument("args", nargs=argparse.REMAINDER, help="options of the example")
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo()
        return 0
    if args.command == "examples":
        return run_examples(args.name, args.args)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
