"""The compiled callable: gufunc-style batching, out=, dtypes, errors, threads, lifetime."""

from __future__ import annotations

import gc
import json
import os
import pickle
import subprocess
import sys
import textwrap
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import sympy as sp

import symtape
from symtape.element import evaluate
from symtape.element import graph
from symtape.codegen import (
    CompiledFunction,
    TensorSpec,
    cache,
    compile_atoms,
    jit,
    load,
    runtime,
)
from symtape.base.errors import (
    DTypeError,
    InvalidArgumentError,
    LoweringError,
    SerializationError,
    ShapeError,
)

S = sp.S


def obj(x):
    return np.array(x, dtype=object)


def leaves(name, shape):
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        out[idx] = graph.Leaf.new(f"{name}{list(idx)}" if shape else name)
    return out


@pytest.fixture(scope="module")
def affine():
    """``(y = W @ x + b, s = sum(x**2))`` with W (2, 3), x (3,), b (2,)."""
    W, x, b = leaves("W", (2, 3)), leaves("x", (3,)), leaves("b", (2,))
    y = [graph.add(b[i], *[graph.mul(W[i, k], x[k]) for k in range(3)]) for i in range(2)]
    s = graph.add(*[graph.power(x[k], S(2)) for k in range(3)])
    f = compile_atoms([obj(y), obj(s)], [W, x, b], input_names=["W", "x", "b"],
                      output_names=["y", "s"], name="affine")
    return f, (W, x, b), [obj(y), obj(s)]


def reference(atoms, inputs, args):
    """evaluate.py over a batch: leaf arrays taken from the last axes of each argument."""
    env = {}
    for leaf_arr, a in zip(inputs, args):
        a = np.asarray(a, dtype=np.float64)
        core = leaf_arr.ndim
        for idx in np.ndindex(*leaf_arr.shape):
            env[leaf_arr[idx]] = a[(Ellipsis,) + idx] if core else a
    out = []
    for o in atoms:
        vals = evaluate.evaluate_atoms(list(o.flat), env)
        batch = np.broadcast_shapes(*[np.shape(v) for v in vals]) if vals else ()
        stacked = np.stack([np.broadcast_to(v, batch) for v in vals], axis=-1)
        out.append(stacked.reshape(batch + o.shape))
    return out


def test_specs_and_repr(affine):
    f, _, _ = affine
    assert f.inputs == (TensorSpec((2, 3), name="W"), TensorSpec((3,), name="x"),
                        TensorSpec((2,), name="b"))
    assert f.outputs[1] == TensorSpec((), "float64", "s")
    assert "affine" in repr(f)
    assert isinstance(f, CompiledFunction)


@pytest.mark.parametrize("shapes", [
    ((), (), ()),
    ((5,), (5,), (5,)),
    ((), (7,), ()),
    ((4, 1), (1, 3), ()),
    ((2, 1, 3), (4, 1), (1,)),
])
def test_broadcasting_matches_numpy_rules(affine, shapes, same):
    f, inputs, atoms = affine
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(lead + spec.shape) for lead, spec in zip(shapes, f.inputs)]
    y, s = f(*args)
    batch = np.broadcast_shapes(*shapes)
    assert y.shape == batch + (2,) and np.shape(s) == batch
    want_y, want_s = reference(atoms, inputs, args)
    same(y, want_y)
    same(s, want_s)


def test_strided_views_and_other_dtypes_are_accepted(affine, same):
    f, inputs, atoms = affine
    rng = np.random.default_rng(2)
    W = rng.standard_normal((6, 2, 3))[::2]  # a strided batch
    x = rng.integers(-5, 5, (3, 3))  # ints are converted
    b = np.asfortranarray(rng.standard_normal((3, 2)))  # core not contiguous: copied
    y, s = f(W, x, b)
    want_y, want_s = reference(atoms, inputs, [W, x, b])
    same(y, want_y)
    same(s, want_s)


def test_zero_d_result_is_a_scalar_and_empty_batches_work(affine):
    f, _, _ = affine
    y, s = f(np.ones((2, 3)), np.ones(3), np.ones(2))
    assert isinstance(s, np.float64) and float(s) == 3.0
    y, s = f(np.ones((0, 2, 3)), np.ones(3), np.ones(2))
    assert y.shape == (0, 2) and s.shape == (0,)


def test_out_arrays_are_filled_and_returned(affine, same):
    f, _, _ = affine
    W, x, b = np.ones((4, 2, 3)), np.arange(3.0), np.zeros(2)
    y_out, s_out = np.empty((4, 2)), np.empty(4)
    res = f(W, x, b, out=(y_out, s_out))
    assert res[0] is y_out and res[1] is s_out
    same(y_out, np.full((4, 2), 3.0))
    same(s_out, np.full(4, 5.0))
    strided = np.empty((4, 4))[:, ::2]  # not contiguous: written through a temporary
    f(W, x, b, out=(strided, s_out))
    same(strided, np.full((4, 2), 3.0))


def test_out_validation_names_the_entry(affine):
    f, _, _ = affine
    args = (np.ones((4, 2, 3)), np.ones(3), np.ones(2))
    with pytest.raises(ShapeError, match=r"out\[1\]"):
        f(*args, out=(np.empty((4, 2)), np.empty(5)))
    with pytest.raises(DTypeError, match="float32"):
        f(*args, out=(np.empty((4, 2), np.float32), np.empty(4)))
    with pytest.raises(InvalidArgumentError):
        f(*args, out=(np.empty((4, 2)),))
    ro = np.empty(4)
    ro.flags.writeable = False
    with pytest.raises(InvalidArgumentError, match="read-only"):
        f(*args, out=(np.empty((4, 2)), ro))


def test_out_aliasing_an_input_is_safe(same):
    x = leaves("x", (2,))
    f = compile_atoms([obj([x[1], x[0]])], [x])  # swap: in-place needs a temporary
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    f(a, out=a)
    same(a, [[2.0, 1.0], [4.0, 3.0]])


def test_input_errors_name_argument_and_shape(affine):
    f, _, _ = affine
    with pytest.raises(TypeError, match="takes 3"):
        f(np.ones((2, 3)), np.ones(3))
    with pytest.raises(ShapeError, match=r"argument 1 \('x'\).*\(5, 4\)"):
        f(np.ones((2, 3)), np.ones((5, 4)), np.ones(2))
    with pytest.raises(ShapeError, match="broadcast"):
        f(np.ones((4, 2, 3)), np.ones((5, 3)), np.ones(2))
    with pytest.raises(DTypeError, match="complex"):
        f(np.ones((2, 3)), np.ones(3, dtype=complex), np.ones(2))
    with pytest.raises(DTypeError, match="argument 2"):
        f(np.ones((2, 3)), np.ones(3), np.array(["a", "b"]))


def test_structure_is_mirrored_by_result_out_and_formula():
    x = leaves("x", ())
    outs = [obj(graph.mul(x[()], x[()])), obj([x[()], graph.call(sp.exp, x[()])])]
    f = compile_atoms(outs, [x], structure={"sq": 0, "rest": [1]})
    res = f(np.array([1.0, 2.0]))
    assert set(res) == {"sq", "rest"} and isinstance(res["rest"], list)
    np.testing.assert_array_equal(res["sq"], [1.0, 4.0])
    out = {"sq": np.empty(2), "rest": [np.empty((2, 2))]}
    assert f(np.array([1.0, 2.0]), out=out) is out
    X = sp.Symbol("x", real=True)
    form = f.formula()
    assert form["sq"] == X**2 and list(form["rest"][0]) == [X, sp.exp(X)]
    with pytest.raises(InvalidArgumentError):
        compile_atoms(outs, [x], structure=[0, 0])


def test_float32(same):
    x = leaves("x", (2,))
    e = graph.add(graph.call(sp.sin, x[0]), graph.mul(x[0], x[1]))
    f = compile_atoms([obj(e)], [x], dtype="float32")
    a = np.random.default_rng(3).standard_normal((50, 2))
    got = f(a)
    assert got.dtype == np.float32 and f.inputs[0].dtype == "float32"
    same(got, np.sin(a[:, 0]) + a[:, 0] * a[:, 1], rtol=1e-5)
    with pytest.raises(DTypeError):
        compile_atoms([obj(e)], [x], dtype="int32")


def test_threads_split_large_batches(same):
    x = leaves("x", (3,))
    e = graph.add(*[graph.call(sp.tanh, v) for v in x])
    one = compile_atoms([obj(e)], [x], threads=1)
    many = compile_atoms([obj(e)], [x], threads=4)
    a = np.random.default_rng(4).standard_normal((1_000_001, 3))
    assert many._n_pieces(len(a)) > 1
    same(many(a), one(a), rtol=0)


def test_unbatched_argument_whose_core_looks_like_a_batch(same):
    x, w = leaves("x", (3,)), leaves("w", (3,))
    f = compile_atoms([obj([graph.mul(x[i], w[i]) for i in range(3)])], [x, w])
    rng = np.random.default_rng(6)
    X, W = rng.standard_normal((3, 3)), rng.standard_normal(3)
    same(f(X, W), X * W)
    same(f(W, X), X * W)


def test_threads_with_outer_broadcast_dimensions(same):
    x, w = leaves("x", ()), leaves("w", ())
    f1 = compile_atoms([obj(graph.call(sp.sin, graph.mul(x[()], w[()])))], [x, w], threads=1)
    f4 = compile_atoms([obj(graph.call(sp.sin, graph.mul(x[()], w[()])))], [x, w], threads=4)
    rng = np.random.default_rng(7)
    X, W = rng.standard_normal((3, 1)), rng.standard_normal((1, 700_001))
    assert f4._n_pieces(3 * 700_001) > 1
    same(f4(X, W), f1(X, W), rtol=0)
    same(f1(X, W), np.sin(X * W))


def test_eight_threads_call_one_function(same):
    x = leaves("x", (2,))
    f = compile_atoms([obj(graph.call(sp.atan2, x[0], x[1]))], [x])
    rng = np.random.default_rng(5)
    data = [rng.standard_normal((20_000, 2)) for _ in range(8)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(f, data))
    for a, r in zip(data, results):
        same(r, np.arctan2(a[:, 0], a[:, 1]))


def test_engine_outlives_the_graph(same):
    def build():
        x = leaves("x", (2,))
        e = graph.add(graph.call(sp.exp, x[0]), graph.power(x[1], S(3)))
        return compile_atoms([obj(e)], [x]), weakref.ref(x[0]), weakref.ref(e)

    f, leaf_ref, node_ref = build()
    gc.collect()
    assert leaf_ref() is None and node_ref() is None
    a = np.array([[0.0, 2.0], [1.0, -1.0]])
    same(f(a), np.exp(a[:, 0]) + a[:, 1] ** 3)


def test_llvm_ir_asm_and_c_source(affine):
    f, _, _ = affine
    assert "noalias" in f.llvm_ir and "define i32 @st_affine(" in f.llvm_ir
    assert "st_affine_dense" in f.asm
    assert "void affine(int64_t n" in f.c_source()


def test_save_and_load(tmp_path, affine, same):
    f, _, _ = affine
    path = tmp_path / "affine.st"
    f.save(path)
    g = load(path)
    args = (np.ones((3, 2, 3)), np.arange(3.0), np.ones(2))
    for a, b in zip(f(*args), g(*args)):
        same(a, b, rtol=0)
    blob = path.read_bytes()
    path.write_bytes(blob[:-10])
    with pytest.raises(SerializationError, match="corrupt"):
        load(path)
    path.write_bytes(b"not a function")
    with pytest.raises(SerializationError):
        load(path)


def test_old_pickled_files_are_refused_unread(tmp_path):
    path = tmp_path / "old.st"
    path.write_bytes(cache.frame(b"SYMTAPEF", pickle.dumps({"format": 1}), 1))
    with pytest.raises(SerializationError, match="format 1, a pickle"):
        load(path)


def test_saved_files_are_json_and_reload_in_a_fresh_process(tmp_path, affine, private_cache):
    f, _, _ = affine
    path = tmp_path / "affine.st"
    f.save(path)
    doc = json.loads(path.read_bytes()[52:])
    assert doc["type"] == "symtape compiled function" and len(doc["mac"]) == 64
    script = textwrap.dedent(f"""
        import numpy as np
        from symtape.codegen import jit, load
        g = load({str(path)!r})
        y, s = g(np.ones((3, 2, 3)), np.arange(3.0), np.ones(2))
        print(jit.STATS.compiles, jit.STATS.cache_hits + jit.STATS.cache_misses, float(s[0]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=str(tmp_path), env=_env(private_cache), check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "0", "5.0"]  # the signed object code was reused


def test_non_ascii_names_give_valid_symbols(same):
    x = leaves("x", ())
    f = compile_atoms([obj(graph.mul(x[()], x[()]))], [x], name="café² λ")
    same(f(np.array([3.0])), [9.0])
    assert "@st_caf" in f.llvm_ir and "café² λ" not in f.llvm_ir


def test_pickle_round_trip_in_a_fresh_process(tmp_path, affine, private_cache):
    f, _, _ = affine
    args = (np.ones((3, 2, 3)), np.arange(3.0), np.ones(2))
    want = f(*args)
    (tmp_path / "f.pkl").write_bytes(pickle.dumps(f))
    script = textwrap.dedent(f"""
        import pickle, sys
        import numpy as np
        from symtape.codegen import jit
        f = pickle.loads(open({str(tmp_path / 'f.pkl')!r}, 'rb').read())
        y, s = f(np.ones((3, 2, 3)), np.arange(3.0), np.ones(2))
        np.save({str(tmp_path / 'y.npy')!r}, y)
        print(jit.STATS.compiles, f.formula()[1])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=str(tmp_path), env=_env(private_cache), check=False)
    assert done.returncode == 0, done.stderr
    compiles, formula = done.stdout.split(maxsplit=1)
    assert compiles == "0"  # the object code was reused, not recompiled
    assert "x[0]**2" in formula
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want[0])


def _env(cache_dir):
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(symtape.__file__))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env["SYMTAPE_CACHE_DIR"] = str(cache_dir)
    return env


def test_unpickling_on_another_host_recompiles_the_stored_ir(affine, same):
    f, _, _ = affine
    restore, (state,) = f.__reduce__()
    state = dict(state, host=("other-triple", "other-cpu", "", "0", "0"))
    before = jit.STATS.snapshot()
    g = restore(state)
    after = jit.STATS.snapshot()
    looked_up = (after["cache_hits"] + after["cache_misses"]
                 - before["cache_hits"] - before["cache_misses"])
    assert looked_up == 1
    args = (np.ones((2, 3)), np.arange(3.0), np.ones(2))
    same(g(*args)[0], f(*args)[0], rtol=0)
    with pytest.raises(SerializationError):
        runtime.restore({"format": -1})


def test_tensor_spec_is_frozen_and_pickles():
    spec = TensorSpec([3, 2], dtype="float32", name="w")
    assert pickle.loads(pickle.dumps(spec)) == spec and spec.shape == (3, 2)
    with pytest.raises(AttributeError):
        spec.shape = (1,)
    with pytest.raises(ShapeError):
        TensorSpec((-1,))


def test_unknown_head_fails_at_compile_time():
    x = leaves("x", ())
    with pytest.raises(LoweringError, match="airyai"):
        compile_atoms([obj(graph.call(sp.airyai, x[()]))], [x])


def test_large_point_is_called_not_inlined(same):
    x = leaves("x", (40,))
    ys = [graph.call(sp.sin, graph.mul(x[i], x[(i + 1) % 40])) for i in range(40)]
    flags = [graph.relation(sp.StrictLessThan, x[i], S.Zero) for i in range(3)]
    f = compile_atoms([obj(ys), obj(flags)], [x])
    assert "noinline" in f.llvm_ir and "llvm.loop.vectorize.enable" in f.llvm_ir
    a = np.random.default_rng(8).standard_normal((7, 40))
    y, b = f(a)
    same(y, np.sin(a * np.roll(a, -1, axis=1)))
    np.testing.assert_array_equal(b, a[:, :3] < 0)
    y2, _ = f(a[::2])  # the strided entry
    same(y2, y[::2], rtol=0)


def test_wide_arithmetic_outputs_run_one_point_at_a_time(same):
    """A small point of arithmetic with an output of more than LOOP_VECTORIZE_MAX_STORE
    elements is not vectorised across points (its stores would be scatters), nor put in
    lanes; narrower outputs, or functions like exp, keep the vectorised loop."""
    from symtape.codegen import kernel

    def poly(v):
        return graph.add(graph.mul(v, v), v)

    wide = kernel.LOOP_VECTORIZE_MAX_STORE + 1
    for n, fn, ref, vectorised in ((wide, poly, lambda a: a * a + a, False),
                                   (wide - 1, poly, lambda a: a * a + a, True),
                                   (wide, lambda v: graph.call(sp.exp, v), np.exp, True)):
        x = leaves("x", (n,))
        f = compile_atoms([obj([fn(x[i]) for i in range(n)])], [x])
        assert ("llvm.loop.vectorize.enable" not in f.llvm_ir) == vectorised
        assert "points per vector" not in f.llvm_ir  # never lanes here
        a = np.random.default_rng(9).standard_normal((11, n))
        same(f(a), ref(a))


def test_large_results_start_on_a_cache_line_and_are_adopted_without_a_copy():
    """A compiled function's results of 4 KiB or more start on a 64-byte line (a 512-bit
    store of one then never straddles two lines, and two threads' halves of a row never
    share one); ``st.function`` adopts them as they are, and a small one stays numpy's."""
    import symtape as st
    from symtape.core.tensor import adopt

    f = st.function(lambda a: (st.tanh(a) * 2.0, st.reduce_sum(a)))
    x = np.random.default_rng(0).normal(size=(170, 33))  # (past the one-point path's copies)
    big, small = f(x)
    np.testing.assert_allclose(big.numpy(), np.tanh(x) * 2.0, rtol=1e-15)
    value = big._value  # (what .numpy() copies)
    assert value.ctypes.data % 64 == 0 and not value.flags.writeable
    assert float(small) == pytest.approx(x.sum(), rel=1e-13)
    from symtape.base.aligned import aligned_empty

    held = aligned_empty((170, 33), "float64")
    keep = held.base  # another holder of its buffer: adopting it copies
    assert adopt(held)._value is not held and keep is held.base
    fresh = aligned_empty((170, 33), "float64")
    assert adopt(fresh)._value is fresh
