"""``st.export_c`` of functions compiled as loop nests: the C is the loop plan (its blocks,
index maps, accumulations and staging of the last chunk of points), so its size follows the
plan, not the element count. Built with gcc under ``-std=c99 -Wall -Wextra -Werror
-pedantic`` and called through ctypes, it gives the compiled function's values (the 8-64-64-1
tanh MLP's input gradient also against backpropagation written out in numpy)."""

from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest
from c_build import (
    MLP, build, call_batched, load_casadi, mlp, mlp_gradient_by_hand, mlp_weights, needs_gcc,
    needs_valgrind, valgrind_driver, work_sizes,
)

import symtape as st
from symtape.codegen.routines import Routine
from symtape.codegen.loops import LoopPlan


def _library(source):
    """The loaded shared library of ``source`` (gcc -O2, strict C99)."""
    return ctypes.CDLL(str(build(source, opt="-O2")))


def _plan(fn):
    """The plan behind a transform or ``st.function`` with an input signature."""
    if isinstance(fn, st.Function):
        return fn.get_concrete_function(*fn.input_signature).plan
    return fn.plan


# --------------------------------------------------------------------------------------------
# The 8-64-64-1 tanh MLP's input gradient
# --------------------------------------------------------------------------------------------

def _mlp_grad(sizes=MLP):
    """The input gradient with the weights as arguments: the C holds no weight values."""
    specs = [st.TensorSpec((sizes[0],), name="x")]
    for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]), 1):
        specs += [st.TensorSpec((a, b), name=f"w{k}"), st.TensorSpec((b,), name=f"b{k}")]
    return st.grad(mlp, argnums=0, input_signature=specs)


def _params_per_point(n: int, ws, bs) -> list:
    params = [p for pair in zip(ws, bs) for p in pair]
    return [np.broadcast_to(p, (n, *p.shape)) for p in params]


@needs_gcc
def test_mlp_input_gradient_exports_as_loops(tmp_path):
    """<= 60 KB of C, gcc -O2 builds it strictly (measured about 0.4 s), and over 10^4
    points it equals the compiled function to 1e-14 and backpropagation by hand to 1e-12;
    batch lengths 0, 1, 3, 63, 65 go through the padded last chunk."""
    grad = _mlp_grad()
    plan = _plan(grad)
    assert isinstance(plan, LoopPlan) and plan.points > 0
    header, source = st.export_c({"mlp_grad": grad}, tmp_path / "mlp")
    text = source.read_text()
    assert len(text.encode()) <= 60_000
    assert "loop nests:" in header.read_text()
    start = time.perf_counter()
    lib = _library(source)
    # (the target is 2 s; a loaded test machine gets some room)
    assert time.perf_counter() - start < 10
    ws, bs = mlp_weights()
    x = np.random.default_rng(1).normal(size=(10_000, MLP[0]))
    (got,) = call_batched(lib, "mlp_grad", grad, [x, *_params_per_point(len(x), ws, bs)])
    want = grad(x, *[p for pair in zip(ws, bs) for p in pair])
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-15)
    for k in (0, 1, 17, 9_999):
        np.testing.assert_allclose(got[k], mlp_gradient_by_hand(x[k], ws, bs), rtol=1e-12,
                                   atol=1e-14)
    for n in (0, 1, 3, 63, 64, 65):
        (part,) = call_batched(lib, "mlp_grad", grad, [x[:n], *_params_per_point(n, ws, bs)])
        np.testing.assert_array_equal(part, got[:n])


@needs_gcc
def test_mlp_float32_export_within_float32_rounding(tmp_path):
    """``dtype="float32"``: the same loops in float (tanhf, float constants) stay within a
    few float32 roundings of the float64 values, and are not the float64 values."""
    grad = _mlp_grad()
    _, source = st.export_c({"mlp_grad32": grad}, tmp_path / "mlp32", dtype="float32")
    assert "float *restrict" in source.read_text() and "double" not in source.read_text()
    lib = _library(source)
    ws, bs = mlp_weights()
    x = np.random.default_rng(2).normal(size=(1_000, MLP[0]))
    (got,) = call_batched(lib, "mlp_grad32", grad,
                   [x, *_params_per_point(len(x), ws, bs)], dtype="float32")
    want = grad(x, *[p for pair in zip(ws, bs) for p in pair])
    # each element is a sum of about 64 * 64 products of O(1) terms: 1e-5 of the largest
    # element is some 80 float32 roundings of it
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 1e-5 * scale
    assert np.abs(got - want).max() > 1e-12 * scale  # computed in float, not in double


def test_export_size_follows_the_plan_not_the_elements(tmp_path):
    """A 4x wider network (16x the weights) writes the same blocks with other extents: the
    C grows by a few percent, not 16x."""
    sizes = []
    for width in (64, 256):
        grad = _mlp_grad((8, width, width, 1))
        _, source = st.export_c({"g": grad}, tmp_path / f"mlp{width}")
        sizes.append(len(source.read_text()))
    assert sizes[1] < 1.2 * sizes[0]


@needs_gcc
def test_constant_weights_are_static_arrays(tmp_path):
    """Weights that are constants of the function become ``static const`` arrays (exact
    hexadecimal literals): the C is then mostly those numbers (9,409 of them, the gradient
    reading two weight matrices also transposed; one array more holds the -0.0 that
    sums start from), and it equals the compiled function."""
    ws, bs = mlp_weights()

    def net(x):
        return mlp(x, *[st.constant(p) for pair in zip(ws, bs) for p in pair])
    grad = st.grad(net, input_signature=[st.TensorSpec((MLP[0],), name="x")])
    assert isinstance(_plan(grad), LoopPlan)
    _, source = st.export_c({"mlp_const": grad}, tmp_path / "mlpc")
    text = source.read_text()
    n_consts = sum(b.size for b in _plan(grad).buffers if b.kind == "const")
    assert text.count("static const double") == 9  # (and the -0.0 sums start from)
    assert len(text) < 25 * n_consts + 15_000
    lib = _library(source)
    x = np.random.default_rng(3).normal(size=(257, MLP[0]))
    (got,) = call_batched(lib, "mlp_const", grad, [x])
    np.testing.assert_allclose(got, grad(x), rtol=1e-14, atol=1e-15)


# --------------------------------------------------------------------------------------------
# Other loop plans: a reduction, a chain of matrix products, a gather
# --------------------------------------------------------------------------------------------

_ROWS = np.array([5, 0, 3, 3, 199, 17] * 10)

#: name: (function, input signature, absolute tolerance). The matrix products of the
#: compiled function may fuse a multiply and an add (one rounding, ``contract``); the C,
#: compiled with ``-ffp-contract=off`` as ISO C asks, rounds both: before tanh the terms are
#: some 40 in size, so the two differ by a few of their roundings, 1e-14 and more.
CASES = {
    "reduction": (lambda x: st.reduce_max(x * x, axis=1) - st.reduce_sum(st.sin(x), axis=1),
                  [st.TensorSpec((128, 200), name="x")], 1e-14),
    "matmul_chain": (lambda a, b, c: st.tanh(st.matmul(st.matmul(a, b), c)),
                     [st.TensorSpec((24, 40), name="a"), st.TensorSpec((40, 32), name="b"),
                      st.TensorSpec((32, 16), name="c")], 64 * 40 * 2.0 ** -52),
    "gather": (lambda x: st.gather(x, _ROWS) * st.exp(st.gather(x, _ROWS[::-1])),
               [st.TensorSpec((200, 400), name="x")], 1e-14),
    # merge sorts along either axis (values, and indices held as doubles)
    "sort": (lambda x: st.sort(x) + st.cast(st.argsort(x, axis=0, direction="DESCENDING"),
                                            st.float64),
             [st.TensorSpec((40, 30), name="x")], 0.0),
    # bisections of sorted lines of 200 for 150 values each, both sides
    "searchsorted": (lambda s, v: st.cast(st.searchsorted(st.sort(s), v), st.float64) * 100.0
                     + st.cast(st.searchsorted(st.sort(s), v, side="right"), st.float64),
                     [st.TensorSpec((4, 200), name="s"), st.TensorSpec((4, 150), name="v")], 0.0),
    # the LU routine (12x12: its factors, and slogdet through the C library's log)
    "lu": (lambda a: st.linalg.lu(a)[0] + st.linalg.slogdet(a)[1],
           [st.TensorSpec((12, 12), name="a")], 1e-14),
    # the QR routine (Householder reflections): q of a 20x12 matrix, and r
    "qr": (lambda a: st.reduce_sum(st.linalg.qr(a)[0], axis=0) + st.linalg.qr(a)[1][0],
           [st.TensorSpec((20, 12), name="a")], 1e-14),
    # the eigh routine (Jacobi rotations): eigenvalues and signed vectors of a 10x10
    "eigh": (lambda a: st.linalg.eigh(a + st.transpose(a))[1] * 10.0
             + st.linalg.eigvalsh(a + st.transpose(a)),
             [st.TensorSpec((10, 10), name="a")], 1e-13),
    # the svd routine (one-sided Jacobi) of a wide 8x12 matrix: values and signed vectors
    "svd": (lambda a: st.linalg.svd(a)[0] + st.linalg.svd(a)[1][0] * 10.0
            + st.linalg.svd(a)[2][:8, 0],
            [st.TensorSpec((8, 12), name="a")], 1e-13),
    # elimination routines: a 30x30 system read transposed, an inverse, a determinant
    "solve": (lambda a, b: st.linalg.solve(a, b, adjoint=True) + st.linalg.inv(a)[:, :3]
              * st.linalg.det(a[:5, :5]),
              [st.TensorSpec((30, 30), name="a"), st.TensorSpec((30, 3), name="b")], 1e-14),
}


@needs_gcc
@pytest.mark.parametrize("case", sorted(CASES))
def test_loop_plans_export_equal_to_the_compiled_function(tmp_path, case):
    """Each exports as its loops (kilobytes where the element view has 10^4-10^5 atoms) and
    gives the compiled function's values over 7 points (the gather's temporaries, 384 KB,
    are allocated per call; the others' are on the stack)."""
    f, specs, atol = CASES[case]
    fn = st.function(f, input_signature=specs)
    compiled = fn.get_concrete_function(*specs)
    assert isinstance(compiled.plan, LoopPlan)
    _, source = st.export_c({case: fn}, tmp_path / case)
    # the loops: a few hundred bytes per block (the gather: one block per run of rows; a
    # native routine's steps some kilobytes), not a line per element
    routines = sum(isinstance(b.body, Routine) for b in compiled.plan.blocks)
    assert len(source.read_text()) < 400 * len(compiled.plan.blocks) + 10_000 * (1 + routines)
    lib = _library(source)
    rng = np.random.default_rng(5)
    args = [rng.normal(size=(7, *s.shape)) for s in specs]
    (got,) = call_batched(lib, case, compiled, args)
    (want,) = compiled(*args)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=atol)


@needs_gcc
def test_boolean_outputs_export_as_bytes(tmp_path):
    """A comparison's result is written as 0/1 bytes (batched) or 0.0/1.0 (CasADi), beside a
    float output of ``where`` on the same comparison; constants no block reads are left out
    (gcc's unused-constant warning is an error here)."""
    specs = [st.TensorSpec((200, 200), name="x")]
    fn = st.function(lambda x: (st.sin(x) > 0.0, st.where(x > 0.5, x, -x)),
                     input_signature=specs)
    compiled = fn.get_concrete_function(*specs)
    assert isinstance(compiled.plan, LoopPlan)
    x = np.random.default_rng(8).normal(size=(3, 200, 200))
    want = compiled(x)
    _, source = st.export_c({"signs": fn}, tmp_path / "signs")
    lib = _library(source)
    flags, values = call_batched(lib, "signs", compiled, [x])
    np.testing.assert_array_equal(flags, want[0].astype(np.uint8))
    np.testing.assert_array_equal(values, want[1])
    _, source = st.export_c({"signs": fn}, tmp_path / "signs_casadi", abi="casadi", loops=True)
    ext = load_casadi("signs", build(source, opt="-O2"))
    flags, values = ext(x[1])
    np.testing.assert_array_equal(np.array(flags), want[0][1].astype(float))
    np.testing.assert_array_equal(np.array(values), want[1][1])


# --------------------------------------------------------------------------------------------
# CasADi's ABI: one point, temporaries in the caller's work vector
# --------------------------------------------------------------------------------------------


@needs_gcc
def test_mlp_input_gradient_through_casadi_external(tmp_path):
    """``abi="casadi", loops=True``: the loops run one point padded to a chunk of 4 in
    ``w`` (sz_w as ``f_work`` reports it: the plan's temporaries and staging areas); weight
    matrices come in column by column and the gradient equals the compiled function's and
    backpropagation by hand."""
    pytest.importorskip("casadi")
    grad = _mlp_grad()
    _, source = st.export_c({"mlp_grad": grad}, tmp_path / "mlp", abi="casadi",
                              loops=True)
    assert "loop nests:" in source.read_text()
    lib = build(source, opt="-O2")
    ext = load_casadi("mlp_grad", lib)
    sizes = work_sizes(lib, "mlp_grad")
    assert ext.sz_w() == sizes[3] > 0 and sizes[2] == 0
    assert ext.name_in() == ["x", "w1", "b1", "w2", "b2", "w3", "b3"]
    ws, bs = mlp_weights()
    params = [p for pair in zip(ws, bs) for p in pair]
    for x in np.random.default_rng(6).normal(size=(5, MLP[0])):
        got = np.array(ext(x, *params)).ravel()
        np.testing.assert_allclose(got, grad(x, *params), rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(got, mlp_gradient_by_hand(x, ws, bs), rtol=1e-12,
                                   atol=1e-14)


@needs_gcc
@pytest.mark.parametrize("case", sorted(CASES))
def test_loop_plans_through_casadi_external(tmp_path, case):
    """Matrices in and out column by column (the chain's 24x40, 40x32, 32x16 arguments and
    24x16 result; the reduction's 128x200), values as the compiled function's."""
    pytest.importorskip("casadi")
    f, specs, atol = CASES[case]
    fn = st.function(f, input_signature=specs)
    compiled = fn.get_concrete_function(*specs)
    _, source = st.export_c({case: fn}, tmp_path / case, abi="casadi", loops=True)
    ext = load_casadi(case, build(source, opt="-O2"))
    args = [np.random.default_rng(7).normal(size=s.shape) for s in specs]
    (want,) = compiled(*args)
    got = np.array(ext(*args))
    np.testing.assert_allclose(got.reshape(want.shape) if want.ndim != 2 else got, want,
                               rtol=1e-14, atol=atol)


def test_loops_false_writes_the_element_view(tmp_path):
    """``loops=False`` (and the CasADi ABI's default) writes the straight-line element view:
    one line per operation, about 19,000 for the MLP's gradient, no loop nests."""
    grad = _mlp_grad()
    _, source = st.export_c({"g": grad}, tmp_path / "mlp", loops=False)
    text = source.read_text()
    assert "loop nests:" not in text and "for (int64_t i0" not in text
    assert text.count("\n") > 10_000
    _, source = st.export_c({"g": grad}, tmp_path / "mlp_casadi", abi="casadi")
    assert "loop nests:" not in source.read_text()
    with pytest.raises(st.errors.InvalidArgumentError, match="loops must be None, True or"):
        st.export_c({"g": grad}, tmp_path / "x", loops="yes")


@needs_gcc
@needs_valgrind
def test_valgrind_sees_only_w_used_and_no_invalid_access(tmp_path):
    """A C driver calls the CasADi loop form of the MLP gradient and of the matrix chain with
    a work vector malloc'd at exactly the size ``f_work`` gives (uninitialised), with null
    arguments and results too, and branches on every result; memcheck finds no invalid
    access and no uninitialised value, and the only heap blocks are the driver's."""
    fns = {"mlp": _mlp_grad(), "chain": st.function(CASES["matmul_chain"][0],
                                                    input_signature=CASES["matmul_chain"][1])}
    header, source = st.export_c(fns, tmp_path / "lib", abi="casadi", loops=True)
    valgrind_driver(tmp_path, header, source, "0.01 * (casadi_real)(k % 97 + 1)",
                    [("mlp", 7, 1, -1, -1), ("mlp", 7, 1, 3, -1), ("chain", 3, 1, -1, -1),
                     ("chain", 3, 1, 0, 0)])
