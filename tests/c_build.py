"""Building and calling the C that ``st.export_c`` writes, for the export tests: strict C99
with gcc (or clang) into a shared library, ctypes calls through the batched ABI and CasADi's,
``casadi.external`` loading, and a C driver of CasADi-ABI functions run under valgrind; and
the tanh MLP both export tests export, with its input gradient by hand."""

from __future__ import annotations

import ctypes
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest

import symtape as st

GCC = shutil.which("gcc")
VALGRIND = shutil.which("valgrind")
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
needs_gcc = pytest.mark.skipif(GCC is None, reason="no gcc")
needs_valgrind = pytest.mark.skipif(VALGRIND is None, reason="no valgrind")
CTYPE = {"float64": np.float64, "float32": np.float32}


def build(source: pathlib.Path, cc: str = "gcc", opt: str = "-O1") -> pathlib.Path:
    """The shared library of ``source`` beside it, built by ``cc`` under STRICT at ``opt``;
    the test fails with the compiler's message where it does not build."""
    lib = source.with_suffix(".so")
    done = subprocess.run([shutil.which(cc), *STRICT, opt, "-shared", "-fPIC", str(source),
                           "-o", str(lib), "-lm"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return lib


def load_casadi(name: str, lib: pathlib.Path):
    """``casadi.external(name, lib)``; the test is skipped where CasADi is not installed."""
    casadi = pytest.importorskip("casadi")
    return casadi.external(name, str(lib))


def work_sizes(lib: pathlib.Path, name: str) -> tuple:
    """``name_work``'s four sizes (sz_arg, sz_res, sz_iw, sz_w), called through ctypes."""
    sizes = [ctypes.c_longlong(-1) for _ in range(4)]
    rc = getattr(ctypes.CDLL(str(lib)), f"{name}_work")(*[ctypes.byref(s) for s in sizes])
    assert rc == 0
    return tuple(s.value for s in sizes)


def call_batched(lib, name: str, compiled, args: list, dtype: str = "float64") -> list:
    """The batched-ABI function ``name`` of the loaded ``lib`` over the points of ``args``
    (leading axis: points); its outputs those of ``compiled`` per point (booleans as bytes)."""
    t = CTYPE[dtype]
    n = len(args[0])
    ins = [np.ascontiguousarray(a, dtype=t) for a in args]
    outs = [np.full((n, *s.shape), 2, dtype=np.uint8) if s.dtype == "bool" else
            np.full((n, *s.shape), np.nan, dtype=t) for s in compiled.outputs]
    getattr(lib, name)(ctypes.c_int64(n), *[a.ctypes.data_as(ctypes.c_void_p)
                                            for a in ins + outs])
    return outs


def call_casadi(lib: pathlib.Path, name: str, args, n_res: int, sizes: list,
                ctype=ctypes.c_double) -> list:
    """One call of ``name`` through the CasADi ABI with ctypes (``None``: a null pointer),
    its work vector of the size ``name_work`` gives."""
    f = getattr(ctypes.CDLL(str(lib)), name)
    sz_w = work_sizes(lib, name)[3]
    arrays = [None if a is None else np.ascontiguousarray(a, dtype=ctype) for a in args]
    res = [None if s is None else np.full(s, -7.0, dtype=ctype) for s in sizes]
    argv = (ctypes.c_void_p * max(1, len(args)))(
        *[None if a is None else a.ctypes.data for a in arrays])
    resv = (ctypes.c_void_p * max(1, n_res))(*[None if r is None else r.ctypes.data for r in res])
    w = np.zeros(max(1, sz_w), dtype=ctype)
    assert f(argv, resv, None, ctypes.c_void_p(w.ctypes.data), 0) == 0
    return res


def valgrind_driver(tmp_path: pathlib.Path, header: pathlib.Path, source: pathlib.Path,
                    fill: str, checks: list) -> None:
    """Builds a C driver with the exported ``source`` and runs it under memcheck. Each check
    ``(f, n_in, n_out, skip_in, skip_out)`` calls ``f`` with inputs ``fill`` (C, of the
    element number ``k``; input ``skip_in`` null), output ``skip_out`` null and a work vector
    malloc'd at exactly the size ``f_work`` gives (uninitialised), and branches on every
    result it writes: valgrind must find no invalid access and no uninitialised value, no
    result may be nan, and the only heap blocks must be the driver's (three a check)."""
    calls = "".join(f"    bad |= check({f}, {f}_work, {f}_sparsity_in, {f}_sparsity_out, "
                    f"{n_in}, {n_out}, {skip_in}, {skip_out});\n"
                    for f, n_in, n_out, skip_in, skip_out in checks)
    driver = tmp_path / "driver.c"
    driver.write_text(DRIVER.replace("LIB_H", header.name).replace("FILL", fill)
                      .replace("CHECKS", calls))
    exe = tmp_path / "driver"
    done = subprocess.run([GCC, *STRICT, "-O1", "-g", str(driver), str(source), "-I",
                           str(tmp_path), "-o", str(exe), "-lm"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    run = subprocess.run([VALGRIND, "--error-exitcode=3", "--leak-check=full", str(exe)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "ERROR SUMMARY: 0 errors" in run.stderr
    allocs = re.search(r"total heap usage: (\d+) allocs, (\d+) frees", run.stderr)
    blocks = str(3 * len(checks))
    assert allocs and allocs.groups() == (blocks, blocks), run.stderr


# --------------------------------------------------------------------------------------------
# The 8-64-64-1 tanh MLP and its input gradient by hand
# --------------------------------------------------------------------------------------------

MLP = (8, 64, 64, 1)


def mlp_weights(sizes=MLP) -> tuple:
    """The weights (scaled by one over the root of their fan-in) and biases of the MLP of
    layer ``sizes``, from seed 0."""
    rng = np.random.default_rng(0)
    ws = [rng.normal(size=(a, b)) / np.sqrt(a) for a, b in zip(sizes[:-1], sizes[1:])]
    return ws, [rng.normal(size=b) * 0.1 for b in sizes[1:]]


def mlp(x, *params):
    """The sum of the MLP's outputs at the point ``x`` (params: w1, b1, w2, b2, ...; tanh on
    every layer but the last)."""
    h = x
    layers = len(params) // 2
    for k in range(layers):
        h = st.matmul(h[None, :], params[2 * k])[0] + params[2 * k + 1]
        h = st.tanh(h) if k < layers - 1 else h
    return st.reduce_sum(h)


def mlp_gradient_by_hand(x, ws, bs):
    """``mlp``'s gradient in ``x`` by backpropagation written out in numpy, one point."""
    hs = [x]
    for w, b in zip(ws[:-1], bs[:-1]):
        hs.append(np.tanh(hs[-1] @ w + b))
    g = ws[-1].sum(axis=1)
    for w, h in zip(ws[-2::-1], hs[:0:-1]):
        g = w @ (g * (1 - h ** 2))
    return g


DRIVER = r"""
#include <stdlib.h>
#include "LIB_H"

typedef int (*casadi_fn)(const casadi_real**, casadi_real**, casadi_int*, casadi_real*, int);
typedef int (*work_fn)(casadi_int*, casadi_int*, casadi_int*, casadi_int*);
typedef const casadi_int* (*sparsity_fn)(casadi_int);

static casadi_int nnz(const casadi_int* sp) { return sp[2 + sp[1]]; }

/* f on inputs FILL (input skip_in null), output skip_out null; every buffer malloc'd at
   exactly its size; 1 if a result written is not a number. */
static int check(casadi_fn f, work_fn work, sparsity_fn sp_in, sparsity_fn sp_out,
                 casadi_int n_in, casadi_int n_out, casadi_int skip_in, casadi_int skip_out) {
    casadi_int sz_arg, sz_res, sz_iw, sz_w, i, k, total_in = 0, total_out = 0;
    const casadi_real* arg[8];
    casadi_real* res[8];
    casadi_real *in, *out, *w, *p;
    int bad = 0;
    if (work(&sz_arg, &sz_res, &sz_iw, &sz_w) != 0 || sz_iw != 0) return 1;
    for (i = 0; i < n_in; ++i) total_in += nnz(sp_in(i));
    for (i = 0; i < n_out; ++i) total_out += nnz(sp_out(i));
    in = malloc(sizeof(casadi_real) * (size_t)total_in);
    out = malloc(sizeof(casadi_real) * (size_t)total_out);
    w = malloc(sizeof(casadi_real) * (size_t)sz_w);
    for (k = 0; k < total_in; ++k) in[k] = FILL;
    p = in;
    for (i = 0; i < n_in; ++i) { arg[i] = i == skip_in ? 0 : p; p += nnz(sp_in(i)); }
    p = out;
    for (i = 0; i < n_out; ++i) { res[i] = i == skip_out ? 0 : p; p += nnz(sp_out(i)); }
    if (f(arg, res, 0, w, 0) != 0) bad = 1;
    for (i = 0; i < n_out; ++i) {
        if (i == skip_out) continue;
        for (k = 0; k < nnz(sp_out(i)); ++k) if (res[i][k] != res[i][k]) bad = 1;
    }
    free(w);
    free(out);
    free(in);
    return bad;
}

int main(void) {
    int bad = 0;
CHECKS    return bad;
}
"""
