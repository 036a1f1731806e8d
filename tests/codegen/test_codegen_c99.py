"""The standalone C99 source: compiled with the system C compiler, it agrees with the JIT."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest
import sympy as sp

from symtape.element import added_heads as F
from symtape.element import graph
from symtape.codegen import compile_atoms

S = sp.S
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def many_heads(x, y):
    lt = graph.relation(sp.StrictLessThan, x, y)
    return [
        graph.lincomb([(S(2), x), (S(-3), graph.mul(x, y))], sp.pi),
        graph.monomial(S.Half, [(x, S(3)), (y, S(-2))]),
        graph.power(x, S.Half), graph.power(x, graph.number(2.5)), graph.power(x, y),
        graph.call(sp.exp, x), graph.call(sp.log, x), graph.call(F.log1p, x),
        graph.call(sp.atan2, y, x), graph.call(sp.erf, y), graph.call(sp.tanh, x),
        graph.call(sp.Mod, x, y), graph.call(sp.sign, x), graph.call(sp.Heaviside, x, y),
        graph.call(sp.Max, x, y, S.One), graph.call(sp.Min, x, y), graph.call(F.RoundHalfEven, y),
        graph.call(sp.floor, x), graph.call(sp.Abs, y),
        graph.piecewise((x, lt), (graph.mul(y, y), S.true)),
        graph.piecewise((x, graph.logic(sp.Not, lt))),
    ]


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_c_source_compiles_and_matches_the_jit(tmp_path, same):
    x, y = graph.Leaf.new("x"), graph.Leaf.new("y")
    lt = graph.relation(sp.LessThan, x, y)
    outs = [np.array(many_heads(x, y), dtype=object), np.array(lt, dtype=object)]
    f = compile_atoms(outs, [np.array(x, dtype=object), np.array(y, dtype=object)],
                      name="heads", input_names=["x", "y"])
    src = tmp_path / "heads.c"
    lib = tmp_path / "heads.so"
    src.write_text(f.c_source())
    cmd = [CC, "-std=c99", "-O2", "-Wall", "-Werror", "-Wno-unused-function", "-shared",
           "-fPIC", str(src), "-o", str(lib), "-lm"]
    subprocess.run(cmd, check=True, capture_output=True)
    c_fn = ctypes.CDLL(str(lib)).heads
    vals = np.array([0.0, -0.0, 1.0, -1.5, 2.5, 1e300, -1e-300, np.inf, -np.inf, np.nan, 3.0])
    a, b = (g.ravel().copy() for g in np.meshgrid(vals, vals))
    n = len(a)
    out0 = np.empty((n, len(outs[0])))
    out1 = np.empty(n, dtype=np.uint8)
    c_fn(ctypes.c_int64(n), *[ctypes.c_void_p(v.ctypes.data) for v in (a, b, out0, out1)])
    got0, got1 = f(a, b)
    same(out0, got0)
    np.testing.assert_array_equal(out1.astype(bool), got1)


@pytest.mark.parametrize("abi", ["batched", "casadi"])
def test_each_exported_function_has_a_comment_naming_its_arguments_and_formula(tmp_path, abi):
    """Above each function: its inputs and outputs by name with their sizes, the symtape
    function it came from, and, for a small one, each output's formula, which parses back to
    sympy.diff of the expression; a large one says how many operations it has instead."""
    import re

    import symtape as st

    def f(x):
        return st.reduce_sum(st.sin(x[:-1]) * x[1:] ** 2)

    grad = st.grad(f, input_signature=[st.TensorSpec((3,))])
    big = st.grad(lambda x: st.reduce_sum(st.tanh(st.tanh(x[:, None] * x[None, :]) ** 3)),
                  input_signature=[st.TensorSpec((12,))])
    header, _ = st.export_c({"g": grad, "big": big}, tmp_path / "lib", abi=abi)
    text = header.read_text()
    note = text[text.index("/* g:"):text.index("*/", text.index("/* g:"))]
    shape = "x[3x1])->(o0[3x1])" if abi == "casadi" else "x[3])->(out0[3])"
    assert f"g:({shape}" in note and "from: symtape's f_grad(x: float64[3])" in note
    formula = re.search(r"(?:o0|out0) = (\[.*\])", note).group(1)
    xs = sp.symbols("x_0:3")
    expr = sum(sp.sin(xs[k]) * xs[k + 1] ** 2 for k in range(2))
    want = [sp.diff(expr, v) for v in xs]
    got = sp.sympify(formula, locals=dict(zip(map(str, xs), xs)))
    assert all(sp.simplify(a - b) == 0 for a, b in zip(got, want))
    big_note = text[text.index("/* big:"):]
    assert re.search(r"formula: \d+ operations, too long to print", big_note.split("*/")[0])


@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_an_argument_no_element_reads_builds_under_wextra(tmp_path):
    # d/dx of sum(w * x) + b reads w, not x or b: both stay parameters of the C function
    x, w, b = graph.Leaf.new("x"), graph.Leaf.new("w"), graph.Leaf.new("b")
    f = compile_atoms([np.array(graph.mul(S(2), w), dtype=object)],
                      [np.array(v, dtype=object) for v in (x, w, b)], name="unread",
                      input_names=["x", "w", "b"])
    text = f.c_source()
    assert "(void)x;" in text and "(void)b;" in text and "(void)w;" not in text
    src, lib = tmp_path / "unread.c", tmp_path / "unread.so"
    src.write_text(text)
    done = subprocess.run([CC, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2",
                           "-shared", "-fPIC", str(src), "-o", str(lib), "-lm"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    ws = np.array([1.5, -2.0, 0.25])
    out = np.empty(3)
    zero = np.zeros(3)
    ctypes.CDLL(str(lib)).unread(ctypes.c_int64(3), *[ctypes.c_void_p(v.ctypes.data)
                                                      for v in (zero, ws, zero, out)])
    np.testing.assert_array_equal(out, 2 * ws)
