"""``st.export_c(..., abi="casadi")``: the exported C, built with gcc into a shared library,
loads with ``casadi.external`` and gives the values, sparsity patterns and work sizes symtape
computes, checked against hand formulas, SymPy and SciPy; both ABIs and both float types build
with ``-std=c99 -Wall -Wextra -Werror -pedantic`` (gcc, and clang where installed); under
valgrind the exported functions allocate nothing and touch only their arguments and ``w``."""

from __future__ import annotations

import ctypes
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import sympy as sp
from c_build import (
    GCC, MLP, build, call_casadi, load_casadi, mlp, mlp_gradient_by_hand, mlp_weights, needs_gcc,
    needs_valgrind, valgrind_driver, work_sizes,
)
from sympy.physics import mechanics as me

import symtape as st
from symtape.codegen import casadi_abi


def _pattern(ext, k: int) -> tuple:
    """An output's compressed-column pattern as ``f_sparsity_out`` gave it to CasADi."""
    s = ext.sparsity_out(k)
    return (s.size1(), s.size2(), *s.colind(), *s.row())


def _csc(indices, shape) -> tuple:
    """The compressed-column pattern of ``indices`` by SciPy (an independent reference)."""
    from scipy import sparse

    idx = np.asarray(indices)
    m = sparse.csc_matrix((np.ones(len(idx)), (idx[:, 0], idx[:, 1])), shape=shape)
    m.sort_indices()
    return (shape[0], shape[1], *m.indptr.tolist(), *m.indices.tolist())


def _dense_pattern(rows: int, cols: int) -> tuple:
    return (rows, cols, *[rows * j for j in range(cols + 1)], *list(range(rows)) * cols)


def _work(ext, lib: pathlib.Path, name: str) -> tuple:
    """``name_work``'s four sizes, called through ctypes; and CasADi's view of them (it adds
    its own call's argument and result pointers, n_in and n_out, to sz_arg and sz_res)."""
    work = work_sizes(lib, name)
    assert (ext.sz_arg(), ext.sz_res(), ext.sz_iw(), ext.sz_w()) == (
        ext.n_in() + work[0], ext.n_out() + work[1], work[2], work[3])
    return work


def _layout(fn) -> casadi_abi.Layout:
    """symtape's own layout of the function it exports (a sparse one: its pattern)."""
    if hasattr(fn, "sparsity"):
        return casadi_abi.layout(fn.compiled.c_kernel()[0], fn.sparsity)
    if isinstance(fn, st.Function):
        fn = fn.single_trace()
    return casadi_abi.layout(fn.c_kernel()[0])


# --------------------------------------------------------------------------------------------
# The three models
# --------------------------------------------------------------------------------------------

def _mlp(sizes):
    """The MLP with its weights as constants."""
    ws, bs = mlp_weights(sizes)

    def net(x):
        return mlp(x, *[st.constant(p) for pair in zip(ws, bs) for p in pair])
    return net


def _nbody(x, chain: bool):
    """The softened potential of len(x) / 3 bodies of masses 1, 2, ...: every pair, or
    (``chain``) each body and the next only, whose Hessian is block tridiagonal."""
    k = x.shape[0] // 3
    ms = np.arange(1.0, k + 1.0)
    q = st.reshape(x, (k, 3))
    if chain:
        d = q[1:] - q[:-1]
        r = st.sqrt(st.reduce_sum(d * d, axis=-1) + 0.01)
        return -st.reduce_sum(st.constant(ms[1:] * ms[:-1]) / r)
    d = q[:, None, :] - q[None, :, :]
    r = st.sqrt(st.reduce_sum(d * d, axis=-1) + 0.01)
    return -st.reduce_sum(st.constant(np.triu(np.outer(ms, ms), 1)) / r)


def _nbody_hessian_by_hand(p, chain: bool):
    """Each pair's -w / s(d), d = q_i - q_j, has the Hessian w (I / s^3 - 3 d d^T / s^5) in
    d: added to the blocks ii and jj, subtracted from ij and ji."""
    k = p.size // 3
    q, ms, h = p.reshape(k, 3), np.arange(1.0, k + 1.0), np.zeros((k, 3, k, 3))
    for i in range(k):
        for j in range(i + 1, i + 2 if chain else k):
            if j >= k:
                continue
            d = q[i] - q[j]
            s = np.sqrt(d @ d + 0.01)
            block = ms[i] * ms[j] * (np.eye(3) / s ** 3 - 3.0 * np.outer(d, d) / s ** 5)
            h[i, :, i] += block
            h[j, :, j] += block
            h[i, :, j] -= block
            h[j, :, i] -= block
    return h.reshape(3 * k, 3 * k)


def _cart_pendulum():
    """A cart (position q1, pushed by force f) carrying a pendulum (angle q2) by Kane's
    method: the mass matrix M(q) and forcing F(q, u, f) of M u' = F."""
    q1, q2, u1, u2 = me.dynamicsymbols("q1 q2 u1 u2")
    f = sp.Symbol("f")
    length, m_cart, m_bob, g = 0.7, 1.5, 0.4, 9.81
    frame = me.ReferenceFrame("N")
    origin = me.Point("O")
    origin.set_vel(frame, 0)
    cart = origin.locatenew("C", q1 * frame.x)
    cart.set_vel(frame, u1 * frame.x)
    arm = frame.orientnew("A", "Axis", [q2, frame.z])
    arm.set_ang_vel(frame, u2 * frame.z)
    bob = cart.locatenew("P", -length * arm.y)
    bob.v2pt_theory(cart, frame, arm)
    kane = me.KanesMethod(frame, q_ind=[q1, q2], u_ind=[u1, u2],
                          kd_eqs=[q1.diff() - u1, q2.diff() - u2])
    kane.kanes_equations([me.Particle("cart", cart, m_cart), me.Particle("bob", bob, m_bob)],
                         [(cart, f * frame.x - m_cart * g * frame.y), (bob, -m_bob * g * frame.y)])
    state = [q1, q2, u1, u2]
    return kane.mass_matrix, kane.forcing, state, f


def _kane_function():
    mass, forcing, state, f = _cart_pendulum()

    def dynamics(x, force):
        values = {**{s: x[k] for k, s in enumerate(state)}, f: force[0]}
        return st.from_sympy(mass, values), st.from_sympy(forcing, values)
    fn = st.function(dynamics, input_signature=[st.TensorSpec((4,)), st.TensorSpec((1,))])
    xs, fs = sp.symbols("x0:4"), sp.Symbol("fs")
    subs = {**dict(zip(state, xs)), f: fs}
    reference = sp.lambdify([xs, fs], [mass.subs(subs), forcing.subs(subs)])
    return fn, reference


# --------------------------------------------------------------------------------------------
# Loaded by casadi.external
# --------------------------------------------------------------------------------------------


@needs_gcc
@pytest.mark.slow
def test_mlp_input_gradient_through_casadi_external(tmp_path):
    """The 8-64-64-1 tanh MLP's input gradient (its straight-line C: about 0.7 MB, about
    19,000 operations) equals backpropagation by hand; its work vector holds the values alive
    at once (192), not one slot per operation."""
    grad = st.grad(_mlp(MLP), input_signature=[st.TensorSpec((MLP[0],))])
    _, source = st.export_c({"mlp_grad": grad}, tmp_path / "mlp", abi="casadi")
    lib = build(source)
    ext = load_casadi("mlp_grad", lib)
    for x in np.random.default_rng(1).normal(size=(5, MLP[0])):
        got = np.array(ext(x)).ravel()
        np.testing.assert_allclose(got, mlp_gradient_by_hand(x, *mlp_weights(MLP)),
                                   rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(got, grad(x), rtol=1e-14, atol=1e-15)
    lay = _layout(grad)
    assert _work(ext, lib, "mlp_grad") == lay.work
    assert lay.sz_w < 1000 < 10_000 < grad.c_kernel()[0].n_ops
    assert _pattern(ext, 0) == _dense_pattern(MLP[0], 1) == lay.sparsity_out[0]
    assert ext.name_in(0) == "x"


@needs_gcc
@pytest.mark.parametrize("bodies,chain,nnz", [(3, False, 81), (4, True, 4 * 9 + 6 * 9)])
def test_n_body_sparse_hessian_through_casadi_external(tmp_path, bodies, chain, nnz):
    """Three bodies, all pairs (every entry a nonzero), and four in a chain (block
    tridiagonal): the sparse Hessian's nonzeros land in the compressed-column pattern SciPy
    gives for symtape's indices, and equal the hand formula; the dense gradient in the same
    program equals a central difference of the potential."""
    spec = [st.TensorSpec((3 * bodies,))]

    def potential(x):
        return _nbody(x, chain)
    hess = st.hessian(potential, sparse=True, input_signature=spec)
    grad = st.grad(potential, input_signature=spec)
    _, source = st.export_c({"nbody_hess": hess, "nbody_grad": grad}, tmp_path / "nbody.c",
                            abi="casadi")
    lib = build(source)
    ext, ext_grad = load_casadi("nbody_hess", lib), load_casadi("nbody_grad", lib)
    (indices, shape), = hess.sparsity
    assert len(indices) == nnz == ext.sparsity_out(0).nnz()
    assert _pattern(ext, 0) == _csc(indices, shape) == _layout(hess).sparsity_out[0]
    assert _work(ext, lib, "nbody_hess") == _layout(hess).work
    assert _work(ext_grad, lib, "nbody_grad") == _layout(grad).work
    value = st.function(potential, input_signature=spec)
    for p in np.random.default_rng(2).normal(size=(3, 3 * bodies)):
        got = np.array(ext(p).full())
        np.testing.assert_allclose(got, _nbody_hessian_by_hand(p, chain), rtol=1e-12,
                                   atol=1e-12)
        np.testing.assert_allclose(got, hess(p).to_dense(), rtol=1e-15, atol=0)
        h = 1e-6
        fd = [(value(p + h * e).numpy() - value(p - h * e).numpy()) / (2 * h)
              for e in np.eye(3 * bodies)]
        np.testing.assert_allclose(np.array(ext_grad(p)).ravel(), fd, rtol=1e-6, atol=1e-6)


@needs_gcc
def test_kane_cart_pendulum_mass_matrix_and_forcing_through_casadi_external(tmp_path):
    """An st.function with an input_signature exports without a call first: the 2x2 mass
    matrix and the 2x1 forcing equal SymPy's (lambdify of KanesMethod's own matrices)."""
    fn, reference = _kane_function()
    assert fn.single_trace() is None  # not traced: export_c traces its signature
    _, source = st.export_c({"cart_pole": fn}, tmp_path / "cart_pole", abi="casadi")
    lib = build(source)
    ext = load_casadi("cart_pole", lib)
    assert [ext.name_in(k) for k in range(2)] == ["x", "force"]
    assert [ext.name_out(k) for k in range(2)] == ["o0", "o1"]  # (CasADi's default names)
    lay = _layout(fn)
    assert _work(ext, lib, "cart_pole") == lay.work == (2, 2, 0, lay.sz_w)
    assert [_pattern(ext, k) for k in range(2)] == [_dense_pattern(2, 2),
                                                    _dense_pattern(2, 1)]
    rng = np.random.default_rng(3)
    for x, force in zip(rng.uniform(-2, 2, (4, 4)), rng.uniform(-5, 5, 4)):
        got_m, got_f = (np.array(r.full()) for r in ext(x, force))
        want_m, want_f = (np.array(a, dtype=float) for a in reference(x, force))
        np.testing.assert_allclose(got_m, want_m, rtol=1e-13)
        np.testing.assert_allclose(got_f, want_f, rtol=1e-13, atol=1e-13)


def test_a_matrix_argument_is_read_column_by_column(tmp_path):
    """A non-symmetric 2x3 argument and 3x2 result: CasADi's column-major storage is read
    and written element by element as numpy's transpose puts it."""
    if GCC is None:
        pytest.skip("no gcc")
    fn = st.function(lambda a: st.transpose(a) * st.constant(np.arange(1.0, 7.0).reshape(3, 2)),
                     input_signature=[st.TensorSpec((2, 3))])
    _, source = st.export_c({"scaled_t": fn}, tmp_path / "t", abi="casadi")
    ext = load_casadi("scaled_t", build(source))
    a = np.arange(6.0).reshape(2, 3) + 0.5
    want = a.T * np.arange(1.0, 7.0).reshape(3, 2)
    np.testing.assert_array_equal(np.array(ext(a).full()), want)
    np.testing.assert_array_equal(np.array(ext(a).nonzeros()), want.T.ravel())
    assert _pattern(ext, 0) == _dense_pattern(3, 2)
# --------------------------------------------------------------------------------------------
# Every head, both ABIs, both float types: warning-free, and equal to the JIT
# --------------------------------------------------------------------------------------------


def _heads_function(dtype: str = "float64"):
    """Every kind of head the C printer writes (tests/codegen's table), and a comparison."""
    sys.path.insert(0, str(pathlib.Path(__file__).parent / "codegen"))
    from test_codegen_c99 import many_heads
    from symtape.codegen import compile_atoms
    from symtape.element import graph

    x, y = graph.Leaf.new("x"), graph.Leaf.new("y")
    outs = [np.array(many_heads(x, y), dtype=object),
            np.array(graph.relation(sp.LessThan, x, y), dtype=object)]
    return compile_atoms(outs, [np.array(x, dtype=object), np.array(y, dtype=object)],
                         name="heads", input_names=["x", "y"], dtype=dtype)


COMPILERS = [cc for cc in ("gcc", "clang") if shutil.which(cc)]


@pytest.mark.skipif(not COMPILERS, reason="no gcc or clang")
@pytest.mark.parametrize("cc", COMPILERS)
@pytest.mark.parametrize("abi", ["batched", "casadi"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_both_abis_and_float_types_build_without_a_warning(tmp_path, cc, abi, dtype):
    """-std=c99 -Wall -Wextra -Werror -pedantic, and the header from C++ (g++) as well."""
    heads = _heads_function()
    sparse = st.hessian(lambda v: st.reduce_sum(v ** 3) + v[0] * v[1], sparse=True,
                        input_signature=[st.TensorSpec((3,))])
    header, source = st.export_c({"heads": heads, "hess": sparse}, tmp_path / "lib", abi=abi,
                                 dtype=dtype)
    text = source.read_text()
    assert ("float" if dtype == "float32" else "double") in header.read_text()
    assert "malloc" not in text and "alloca" not in text
    build(source, cc, "-O2")
    if shutil.which("g++"):
        driver = tmp_path / "use.cpp"
        driver.write_text(f'#include "{header.name}"\nint main() {{ return 0; }}\n')
        done = subprocess.run(["g++", "-std=c++11", "-Wall", "-Wextra", "-Werror", "-pedantic",
                               "-fsyntax-only", str(driver)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


EDGES = np.array([0.0, -0.0, 1.0, -1.5, 2.5, 1e300, -1e-300, np.inf, -np.inf, np.nan, 3.0])


@needs_gcc
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_head_through_the_casadi_abi_equals_the_jit(tmp_path, dtype):
    """At zeros, signed zeros, huge and tiny numbers, infinities and nan: the CasADi ABI's
    values equal the compiled function's (booleans as 0/1); a null argument reads as zeros and
    a null result is left alone."""
    f = _heads_function(dtype)
    _, source = st.export_c({"heads": f}, tmp_path / "heads", abi="casadi")
    lib = build(source)
    ctype = ctypes.c_float if dtype == "float32" else ctypes.c_double
    with np.errstate(over="ignore"):  # (1e300 is inf in float32, on both sides)
        a, b = (g.ravel().astype(dtype) for g in np.meshgrid(EDGES, EDGES))
    want0, want1 = f(a, b)
    n0 = want0.shape[1]
    got0, got1 = np.empty_like(want0), np.empty(len(a))
    for k in range(len(a)):
        r0, r1 = call_casadi(lib, "heads", [a[k:k + 1], b[k:k + 1]], 2, [n0, 1], ctype)
        got0[k], got1[k] = r0, r1[0]
    rtol = 1e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(got0, want0, rtol=rtol, atol=0, equal_nan=True)
    np.testing.assert_array_equal(got1, want1.astype(float))
    zero0, _ = f(np.zeros(1, dtype), np.full(1, 2.0, dtype))
    r0, r1 = call_casadi(lib, "heads", [None, np.array([2.0])], 2, [n0, None], ctype)
    np.testing.assert_allclose(r0, zero0[0], rtol=rtol, atol=0, equal_nan=True)
    assert r1 is None


@needs_gcc
@needs_valgrind
@pytest.mark.slow
def test_valgrind_sees_no_heap_use_and_no_invalid_access(tmp_path):
    """A C driver calls the exported N-body Hessian and cart-pendulum dynamics with a work
    vector of exactly the size name_work gives (malloc'd by the driver, uninitialised), with
    null arguments and results too, and branches on every result: memcheck finds no invalid
    read or write and no uninitialised value, and the program's only heap blocks are the
    driver's own."""
    hess = st.hessian(lambda x: _nbody(x, True), sparse=True,
                      input_signature=[st.TensorSpec((12,))])
    cart, _ = _kane_function()
    header, source = st.export_c({"hess": hess, "cart": cart}, tmp_path / "lib", abi="casadi")
    valgrind_driver(tmp_path, header, source, "0.25 * (casadi_real)(k + 1)",
                    [("hess", 1, 1, -1, -1), ("cart", 2, 2, -1, -1), ("cart", 2, 2, 1, 0),
                     ("hess", 1, 1, 0, -1)])


# --------------------------------------------------------------------------------------------
# Refusals
# --------------------------------------------------------------------------------------------


def _cube():
    return st.grad(lambda x: st.reduce_sum(x ** 3), input_signature=[st.TensorSpec((2,))])


@pytest.mark.parametrize("functions,match", [
    ({"f": "cube", "f_work": "cube"}, "makes the symbol f_work, which is also"),
    ({"casadi_f": "cube"}, "starts with casadi_"),
    ({"f": "cube", "g": "cube32"}, "pass dtype='float64' or dtype='float32'"),
])
def test_casadi_names_that_would_clash_are_refused(tmp_path, functions, match):
    made = {"cube": _cube(),
            "cube32": st.function(lambda x: x ** 3, dtype="float32",
                                  input_signature=[st.TensorSpec((2,))])}
    with pytest.raises(st.errors.InvalidArgumentError, match=match):
        st.export_c({k: made[v] for k, v in functions.items()}, tmp_path / "lib", abi="casadi")
    assert not (tmp_path / "lib.c").exists()


def test_unknown_abi_and_dtype_are_refused(tmp_path):
    with pytest.raises(st.errors.InvalidArgumentError, match="abi must be 'batched' or"):
        st.export_c({"f": _cube()}, tmp_path / "lib", abi="casadi3")
    with pytest.raises(st.errors.InvalidArgumentError, match="dtype must be None, 'float64'"):
        st.export_c({"f": _cube()}, tmp_path / "lib", dtype="float16")
