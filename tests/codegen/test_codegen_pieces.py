"""Large kernels compiled in pieces side by side: the same values as one module, object
files packed into one blob that the cache and the loader check and link."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import symtape as st
from symtape.base.errors import CompileError
from symtape.codegen import jit, pieces


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SYMTAPE_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def objects(monkeypatch):
    """The object code of every compile in the test, and the threads that emitted it."""
    made, threads = [], set()
    compile_object, emit = jit.compile_object, jit._emit_unlocked

    def recording(ir):
        obj = compile_object(ir)
        made.append(obj)
        return obj

    def emitting(*args):
        threads.add(threading.current_thread().name)
        return emit(*args)

    monkeypatch.setattr(jit, "compile_object", recording)
    monkeypatch.setattr(jit, "_emit_unlocked", emitting)
    return made, threads


def potential(x):
    q = st.reshape(x, (6, 3))
    d = q[:, None, :] - q[None, :, :]
    return -st.reduce_sum(1.0 / st.sqrt(st.reduce_sum(d * d, axis=-1) + 0.01))


def points(n: int, k: int = 6) -> np.ndarray:
    rng = np.random.default_rng(1)
    base = np.concatenate([[np.cos(i), np.sin(i), 0.3 * i] for i in range(k)])
    return base + 0.05 * rng.standard_normal((n, 3 * k))


def hessian_values(x: np.ndarray) -> np.ndarray:
    h = st.hessian(potential, input_signature=[st.TensorSpec((18,))])
    return np.asarray(h(x))


def test_a_lane_kernel_in_pieces_gives_the_same_bits(tmp_path, objects, monkeypatch):
    made, threads = objects
    monkeypatch.setenv("SYMTAPE_CACHE_DIR", str(tmp_path / "whole"))
    x = points(37)
    whole = hessian_values(x)
    assert len(made) == 1 and not made[0].startswith(pieces.PACK_MAGIC)
    monkeypatch.setattr(pieces, "PIECE_CHARS", 20_000)
    monkeypatch.setenv("SYMTAPE_CACHE_DIR", str(tmp_path / "pieces"))
    split = hessian_values(x)  # a fresh cache: compiled again, now in pieces
    assert len(made) == 2 and made[1].startswith(pieces.PACK_MAGIC)
    parts = pieces.unpack(made[1])
    assert 2 < len(parts) <= 1 + pieces.MAX_PIECES
    assert jit.check_object(made[1]) is None
    np.testing.assert_array_equal(split, whole)
    # the reference: central differences of the gradient
    g = st.grad(potential, input_signature=[st.TensorSpec((18,))])
    e = 1e-6 * np.eye(18)
    fd = np.stack([(np.asarray(g(x[:1] + e[i])) - np.asarray(g(x[:1] - e[i])))[0] / 2e-6
                   for i in range(18)], axis=-1)
    np.testing.assert_allclose(split[0], fd, rtol=1e-5, atol=1e-5)
    if jit._cpus() > 1 and getattr(jit.llvm.ffi.lib.LLVMPY_TargetMachineEmitToMemory,
                                   "_cfn", None) is not None:
        assert len(threads) > 1  # emitted on more than one thread


def test_a_loop_kernel_with_globals_in_pieces(fresh_cache, objects, monkeypatch):
    made, _ = objects
    monkeypatch.setattr(pieces, "PIECE_CHARS", 4_000)
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((40, 30)), rng.standard_normal((30, 20))

    @st.function
    def f(a, b):
        h = st.tanh(st.matmul(a, b))
        return st.reduce_sum(h * h, axis=0) + st.reduce_max(st.matmul(st.transpose(h), a))

    got = np.asarray(f(a, b))
    assert any(obj.startswith(pieces.PACK_MAGIC) for obj in made)
    h = np.tanh(a @ b)
    np.testing.assert_allclose(got, (h * h).sum(axis=0) + (h.T @ a).max(), rtol=1e-13)


def test_a_damaged_pack_is_refused():
    one = jit.compile_object("define i64 @one() { ret i64 1 }")
    two = jit.compile_object("declare i64 @one()\n"
                             "define i64 @two() {\n  %a = call i64 @one()\n"
                             "  %b = add i64 %a, 1\n  ret i64 %b\n}")
    blob = pieces.pack([one, two])
    assert jit.check_object(blob) is None
    engine = jit.Engine(blob)  # linked: two calls one in the other object file
    import ctypes

    assert engine.function("two", ctypes.c_int64)() == 2
    assert "damaged" in jit.check_object(blob[:-1])
    with pytest.raises(CompileError, match="packed object is damaged"):
        jit.Engine(blob[:-1])
    assert "damaged" in jit.check_object(pieces.PACK_MAGIC + b"\x05\0\0\0")
    nested = pieces.pack([blob, one])
    assert "another" in jit.check_object(nested)
    sizes = len(pieces.PACK_MAGIC) + 4
    bad_part = blob[:sizes + 16] + b"\0" * 4 + blob[sizes + 20:]  # the first part's magic
    assert jit.check_object(bad_part) == "no ELF magic"


def test_small_modules_stay_whole():
    ir = "define i64 @one() { ret i64 1 }"
    assert pieces.split(ir) == [ir]
    assert not jit.compile_object(ir).startswith(pieces.PACK_MAGIC)


def test_pieces_compile_with_llvmlites_lock_where_its_entry_points_are_hidden(monkeypatch):
    """Where the binding layer has no unlocked entry points, pieces are optimised and
    emitted through its locked calls: the same object code."""
    ir = _two_functions()
    parts = pieces.split(ir, piece_chars=1)
    assert len(parts) == 3
    fast = jit._compile_pieces(parts, ir)
    monkeypatch.setattr(jit, "_unlocked", lambda name: None)
    assert jit._compile_pieces(parts, ir) == fast


def _two_functions() -> str:
    body = "\n".join(f"  %v{i} = fmul double %v{i - 1}, %x" for i in range(1, 40))
    fns = [f"define internal double @f{k}(double %x) noinline nounwind {{\nentry:\n"
           f"  %v0 = fadd double %x, {k}.0\n{body}\n  ret double %v39\n}}" for k in range(2)]
    return "\n".join(fns + ["define double @g(double %x) nounwind {\nentry:\n"
                            "  %a = call double @f0(double %x)\n"
                            "  %b = call double @f1(double %a)\n  ret double %b\n}"])
