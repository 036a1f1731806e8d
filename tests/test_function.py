"""st.compile, st.function and the derivative transforms: numbers, vectorisation, lifetime,
persistence, threads."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import symtape as st
from symtape.base import errors
from symtape.codegen import archive

ROOT = Path(__file__).resolve().parent.parent


def rosen(x):
    return st.reduce_sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def rosen_grad_np(x):
    g = np.zeros_like(x)
    g[..., :-1] = -400 * x[..., :-1] * (x[..., 1:] - x[..., :-1] ** 2) - 2 * (1 - x[..., :-1])
    g[..., 1:] += 200 * (x[..., 1:] - x[..., :-1] ** 2)
    return g


def test_grad_transform_over_a_batch():
    g = st.grad(rosen, input_signature=[st.TensorSpec((10,))])
    assert isinstance(g, st.codegen.CompiledFunction)
    x = np.random.default_rng(0).normal(size=(1000, 10))
    np.testing.assert_allclose(g(x), rosen_grad_np(x), rtol=1e-12, atol=1e-12)
    assert g(x[0]).shape == (10,)
    assert g(x.reshape(10, 100, 10)).shape == (10, 100, 10)


def test_hessian_jacobian_derivative_transforms_match_eager_tapes():
    x0 = np.array([0.3, -1.1, 0.7])
    h = st.hessian(rosen, input_signature=[st.TensorSpec((3,))])
    v = st.Variable(x0)
    with st.GradientTape() as t:
        y = rosen(v)
    np.testing.assert_allclose(h(x0), t.hessian(y, v).numpy(), rtol=1e-13)
    j = st.jacobian(lambda x: st.stack([x[0] * x[1], st.exp(x[2])]),
                    input_signature=[st.TensorSpec((3,))])
    np.testing.assert_allclose(j(x0), [[x0[1], x0[0], 0], [0, 0, np.exp(x0[2])]])
    d4 = st.derivative(lambda x: st.sin(x) * x, order=4, input_signature=[(())])
    xs = np.linspace(-2, 2, 7)
    np.testing.assert_allclose(d4(xs), xs * np.sin(xs) - 4 * np.cos(xs), rtol=1e-12)


def test_transforms_without_signature_trace_on_first_call():
    g = st.grad(rosen)
    x = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(g(x), rosen_grad_np(x))
    assert g.inputs[0].shape == (3,)  # the first call's shape is the core shape
    np.testing.assert_allclose(g(x[:2]), rosen_grad_np(x[:2]))  # a new shape retraces


def test_grad_with_several_argnums_and_names():
    def f(a, b):
        return st.reduce_sum(a * b ** 2)

    g = st.grad(f, argnums=(0, 1), input_signature=[(2,), (2,)])
    ga, gb = g(np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    np.testing.assert_allclose(ga, [9.0, 16.0])
    np.testing.assert_allclose(gb, [6.0, 16.0])
    assert [s.name for s in g.inputs] == ["a", "b"]
    assert str(g.formula()[1][0]) == "2*a_0*b_0"


def test_compile_structure_broadcasting_out_and_float32():
    x = st.symbol("x", shape=(2,))
    p = st.symbol("p")
    f = st.compile({"sum": st.reduce_sum(x) * p, "prod": x * p}, [x, p])
    out = f(np.ones((4, 2)), 3.0)
    np.testing.assert_allclose(out["sum"], [6.0] * 4)
    assert out["prod"].shape == (4, 2)
    buf = {"sum": np.empty(4), "prod": np.empty((4, 2))}
    assert f(np.ones((4, 2)), np.array([1.0, 2.0, 3.0, 4.0]), out=buf) is buf
    np.testing.assert_allclose(buf["sum"], [2.0, 4.0, 6.0, 8.0])
    f32 = st.compile(st.sqrt(x), [x], dtype="float32")
    r = f32(np.array([[2.0, 3.0]]))
    assert r.dtype == np.float32
    np.testing.assert_allclose(r, np.sqrt([[2.0, 3.0]]).astype(np.float32))


def test_compile_errors_name_the_argument():
    x = st.symbol("x", shape=(3,))
    f = st.compile(st.reduce_sum(x ** 2), [x])
    with pytest.raises(errors.ShapeError, match="'x'"):
        f(np.ones((4, 2)))
    with pytest.raises(errors.DTypeError, match="'x'"):
        f(np.array(["a", "b", "c"]))
    with pytest.raises(TypeError, match="1 array arguments"):
        f(np.ones(3), np.ones(3))
    with pytest.raises(errors.InvalidArgumentError, match="not a leaf"):
        st.compile(x * 2, [x * 3])
    with pytest.raises(errors.InvalidArgumentError, match="outputs\\[0\\]"):
        st.compile([1.0], [x])
    with pytest.raises(errors.ShapeError, match="scalar"):
        st.grad(lambda v: v * 2, input_signature=[(2,)])


def test_leaves_that_are_not_inputs_are_folded_at_their_value():
    w = st.Variable(2.0, name="w")
    x = st.symbol("x")
    f = st.compile(w * x, [x])
    assert float(f(3.0)) == 6.0
    w.assign(5.0)  # compiled code keeps the value it was compiled with
    assert float(f(3.0)) == 6.0
    unbound = st.symbol("k")
    with pytest.raises(errors.UnboundLeafError, match="k"):
        st.compile(unbound * x, [x])


def test_custom_rules_and_stop_gradient_compile_as_their_forward():
    @st.custom_gradient
    def clipped(y):
        return st.tanh(y), lambda dy: st.clip_by_norm(dy, 0.5)

    x = st.symbol("x")
    f = st.compile([clipped(x * 2), st.stop_gradient(x ** 2)], [x])
    a, b = f(np.array([0.3, -1.0]))
    np.testing.assert_allclose(a, np.tanh([0.6, -2.0]))
    np.testing.assert_allclose(b, [0.09, 1.0])


def test_sparse_compile_keeps_only_structural_nonzeros():
    h = None
    x = st.symbol("x", shape=(6,))
    with st.GradientTape() as t:
        y = rosen(x)
    h = t.hessian(y, x)
    sf = st.compile(h, [x], sparse=True)
    (idx, shape), = sf.sparsity
    assert shape == (6, 6) and len(idx) == 16  # tridiagonal: 6 + 2 * 5
    pts = np.random.default_rng(1).normal(size=(5, 6))
    res = sf(pts)
    dense = st.compile(h, [x])(pts)
    np.testing.assert_allclose(res.to_dense(), dense)


def test_engine_outlives_the_graph_that_built_it():
    def build():
        x = st.symbol("x", shape=(3,))
        with st.GradientTape() as t:
            y = st.reduce_sum(st.sin(x) * x)
        return st.compile(t.gradient(y, x), [x])

    f = build()
    gc.collect()
    x = np.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(f(x), np.sin(x) + x * np.cos(x))


def _run(code: str, env=None) -> str:
    full = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                         text=True, env=full, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_pickle_and_file_round_trips_in_a_fresh_process(tmp_path):
    g = st.grad(rosen, input_signature=[st.TensorSpec((4,))])
    (tmp_path / "g.pkl").write_bytes(pickle.dumps(g))
    g.save(tmp_path / "g.symtape")
    code = f"""
        import pickle, sys, numpy as np, symtape as st
        x = np.array([0.5, 1.0, -1.0, 2.0])
        g = pickle.loads(open({str(tmp_path / "g.pkl")!r}, "rb").read())
        print(repr(g(x).tolist()))
        print(repr(st.load({str(tmp_path / "g.symtape")!r})(x).tolist()))
        print(sorted(m for m in ("sympy", "mpmath") if m in sys.modules))
    """
    pickled, loaded, symbolic = _run(code).splitlines()
    want = rosen_grad_np(np.array([0.5, 1.0, -1.0, 2.0]))
    np.testing.assert_allclose(eval(pickled), want)
    assert eval(loaded) == eval(pickled)
    assert symbolic == "[]"  # a process running compiled code never loads SymPy


def test_a_file_with_exact_constants_loads(tmp_path, monkeypatch):
    """A constant that is not a plain number (erf's 2/sqrt(pi)) is checked through SymPy."""
    x = st.symbol("x", shape=(2,))
    with st.GradientTape() as t:
        t.watch(x)
        y = st.reduce_sum(st.erf(x))
    f = st.compile([t.gradient(y, x)], [x])
    f.save(tmp_path / "f.symtape")
    exact = []
    read = archive._exact_constant
    monkeypatch.setattr(archive, "_exact_constant", lambda *a: exact.append(a[0]) or read(*a))
    g = st.load(tmp_path / "f.symtape")
    assert exact == [["Mul", ["Integer", 2], ["Pow", ["pi"], ["Rational", -1, 2]]]]
    v = np.array([0.5, 1.0])
    np.testing.assert_array_equal(g(v)[0], f(v)[0])
    np.testing.assert_allclose(g(v)[0], 2 / np.sqrt(np.pi) * np.exp(-v * v), rtol=1e-15)


def test_second_process_hits_the_disk_cache(tmp_path):
    code = """
        import numpy as np, symtape as st
        from symtape.codegen import jit
        def f(x):
            return st.reduce_sum(st.exp(x) * x[::-1])
        g = st.grad(f, input_signature=[st.TensorSpec((5,))])
        print(jit.STATS.compiles, jit.STATS.cache_hits, float(g(np.ones(5)).sum()))
    """
    env = {"SYMTAPE_CACHE_DIR": str(tmp_path / "cache")}
    first = _run(code, env).split()
    second = _run(code, env).split()
    assert first[:2] == ["1", "0"]
    assert second[:2] == ["0", "1"]  # no LLVM compilation in the second process
    assert first[2] == second[2]


def test_eight_threads_call_one_function_at_once():
    g = st.grad(rosen, input_signature=[st.TensorSpec((10,))])
    rng = np.random.default_rng(2)
    inputs = [rng.normal(size=(2000, 10)) for _ in range(8)]
    results = [None] * 8

    def work(i):
        for _ in range(5):
            results[i] = g(inputs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, r in zip(inputs, results):
        np.testing.assert_allclose(r, rosen_grad_np(x), rtol=1e-12, atol=1e-12)


def test_function_with_variables_and_assignments():
    w = st.Variable([1.0, -1.0], name="w")
    b = st.Variable(0.0, name="b")

    @st.function
    def step(x, y):
        with st.GradientTape() as t:
            loss = st.reduce_mean((st.reduce_sum(w * x, axis=1) + b - y) ** 2)
        gw, gb = t.gradient(loss, [w, b])
        w.assign_sub(0.1 * gw)
        b.assign_sub(0.1 * gb)
        return loss

    rng = np.random.default_rng(3)
    x = rng.normal(size=(16, 2))
    y = x @ np.array([2.0, 0.5]) + 1.0
    w_np, b_np = np.array([1.0, -1.0]), 0.0
    for _ in range(50):
        loss = step(x, y)
        r = x @ w_np + b_np - y
        assert float(loss) == pytest.approx(np.mean(r ** 2), rel=1e-12)
        w_np = w_np - 0.1 * (2 * r @ x / 16)
        b_np = b_np - 0.1 * 2 * r.mean()
    np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-12)
    assert float(b) == pytest.approx(b_np, rel=1e-12)
    assert len(step._traces) == 1
    with pytest.raises(errors.InvalidArgumentError, match="control flow"):
        st.function(lambda v: v * 2 if float(v) > 0 else v)(1.0)


def test_function_runs_the_linear_regression_seed_compiled():
    import random

    def loss(real_y, pred_y):
        return st.abs(real_y - pred_y)

    x_train = np.asarray([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    y_train = np.asarray([i * 10 + 5 for i in x_train])
    random.seed(7)
    a = st.Variable(random.random(), trainable=True)
    b = st.Variable(random.random(), trainable=True)
    a0, b0 = float(a), float(b)

    @st.function
    def step(real_x, real_y):
        with st.GradientTape(persistent=True) as tape:
            pred_y = a * real_x + b
            reg_loss = loss(real_y, pred_y)
        a_gradients, b_gradients = tape.gradient(reg_loss, (a, b))
        a.assign_sub(a_gradients * 0.001)
        b.assign_sub(b_gradients * 0.001)

    for _ in range(100000):
        step(x_train, y_train)
    # the same updates in numpy
    an, bn = a0, b0
    for _ in range(100000):
        s = np.sign(an * x_train + bn - y_train)
        an, bn = an - 0.001 * float(s @ x_train), bn - 0.001 * float(s.sum())
    assert float(a) == pytest.approx(an, abs=1e-9)
    assert float(b) == pytest.approx(bn, abs=1e-9)
    assert abs(float(a) - 10) < 0.05 and abs(float(b) - 5) < 0.05  # y = 10x + 5


def test_c_source_compiles_and_agrees(tmp_path):
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    g = st.grad(rosen, input_signature=[st.TensorSpec((4,))])
    src = tmp_path / "k.c"
    src.write_text(g.c_source())
    obj = tmp_path / "k.o"
    done = subprocess.run([cc, "-std=c99", "-O2", "-c", str(src), "-o", str(obj)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_demo_runs():
    out = _run("import symtape.__main__ as m; m.main(['demo'])")
    assert "6*x" in out or "d2y/dx2" in out


@pytest.mark.parametrize("make", [lambda: st.optimizers.Adam(0.05),
                                  lambda: st.optimizers.SGD(0.1, momentum=0.9)],
                         ids=["adam", "sgd-momentum"])
def test_optimizer_state_carries_across_compiled_steps(make):
    """Optimizer moments and step counts are variables: a traced step updates them at every
    call, as the eager step does (Adam's bias correction uses the step count)."""

    def run(compiled):
        rng = np.random.default_rng(0)
        w, b = st.Variable(rng.standard_normal((5, 3))), st.Variable(np.zeros(3))
        opt = make()
        x, y = rng.standard_normal((8, 5)), rng.standard_normal((8, 3))

        def step(x, y):
            with st.GradientTape() as t:
                loss = st.reduce_mean((st.matmul(x, w) + b - y) ** 2)
            opt.apply_gradients(zip(t.gradient(loss, [w, b]), [w, b]))
            return loss

        fn = st.function(step) if compiled else step
        return [float(fn(x, y)) for _ in range(4)], w.numpy()

    (eager, w_eager), (compiled, w_compiled) = run(False), run(True)
    np.testing.assert_allclose(compiled, eager, rtol=1e-13)
    np.testing.assert_allclose(w_compiled, w_eager, rtol=1e-13)
    assert eager[3] < eager[0]


def _rosen(x):
    return st.reduce_sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2) + \
        st.reduce_sum(st.sin(x) * x[::-1])


def _rosen_np(x):
    return np.sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2) + \
        np.sum(np.sin(x) * x[::-1])


def test_hvp_matches_the_hessian_and_finite_differences():
    n = 6
    spec = [st.TensorSpec((n,))]
    hv = st.hvp(_rosen, input_signature=spec * 2)
    H = st.hessian(_rosen, input_signature=spec)
    rng = np.random.default_rng(3)
    x, v = rng.normal(size=(4, n)), rng.normal(size=(4, n))
    got = hv(x, v)
    np.testing.assert_allclose(got, np.einsum("bij,bj->bi", H(x), v), rtol=1e-12)
    # central differences of the gradient of the numpy function along v
    grad = st.grad(_rosen, input_signature=spec)
    h = 1e-6
    np.testing.assert_allclose(got, (grad(x + h * v) - grad(x - h * v)) / (2 * h),
                               rtol=1e-5, atol=1e-5)
    eps = 1e-4  # and the function itself, to second order
    fd = np.array([[(_rosen_np(p + eps * v[b] + eps * e) - _rosen_np(p + eps * v[b] - eps * e)
                     - _rosen_np(p - eps * v[b] + eps * e) + _rosen_np(p - eps * v[b] - eps * e))
                    / (4 * eps * eps) for e in np.eye(n)] for b, p in enumerate(x)])
    np.testing.assert_allclose(got, fd, rtol=1e-4, atol=1e-4)


def test_hvp_of_one_argument_and_its_errors():
    hv = st.hvp(lambda a, x: st.reduce_sum(a * x ** 3), argnums=1)
    np.testing.assert_allclose(hv(np.array([1.0, 2.0]), np.array([1.0, -1.0]),
                                  np.array([2.0, 5.0])), [12.0, -60.0])
    with pytest.raises(errors.ShapeError, match="v has shape"):
        hv(np.array([1.0, 2.0]), np.array([1.0, -1.0]), np.array([2.0, 5.0, 1.0]))
    with pytest.raises(errors.InvalidArgumentError, match="argnums must be one int"):
        st.hvp(lambda x: x, argnums=(0, 1))
    with pytest.raises(errors.ShapeError, match="scalar"):
        st.hvp(lambda x: x * 2)(np.ones(2), np.ones(2))


def test_hessians_are_exactly_symmetric():
    """The upper triangle of a Hessian is read from the lower one."""
    def f(x):
        q = st.reshape(x, (-1, 3))
        d = q[:, None, :] - q[None, :, :]
        return st.reduce_sum(st.sqrt(st.reduce_sum(d * d, axis=-1) + 0.1) * st.sin(x[0]))

    H = st.hessian(f, input_signature=[st.TensorSpec((9,))])
    h = H(np.random.default_rng(5).normal(size=(3, 9)))
    np.testing.assert_array_equal(h, np.swapaxes(h, 1, 2))
    eager = st.Variable(np.linspace(-1, 1, 9))
    with st.GradientTape(persistent=True) as t:
        y = f(eager)
    np.testing.assert_allclose(H(eager.numpy()), t.hessian(y, eager).numpy(), rtol=1e-12)


def test_large_results_are_returned_without_copies_and_stay_independent():
    """A result past the one-point path's copy limit is written in place by the native code
    and wrapped as it is: each call's tensor is its own, read-only array; arguments of that
    size take the general path too, with the same values."""
    from symtape.codegen import runtime

    rng = np.random.default_rng(5)
    a, b = rng.normal(size=(70, 60)), rng.normal(size=(70, 80))
    assert a.size + b.size + 60 * 80 > runtime.POINT_COPY_LIMIT

    @st.function
    def gram(x, y):
        return st.matmul(x, y, transpose_a=True) * 2.0

    first = gram(a, b)
    second = gram(a, -b)
    np.testing.assert_allclose(first.numpy(), 2.0 * a.T @ b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(second.numpy(), -2.0 * a.T @ b, rtol=1e-12, atol=1e-12)
    assert not np.shares_memory(first._value, second._value)
    assert not first._value.flags.writeable
    small = st.function(lambda x: x * 2.0)
    np.testing.assert_array_equal(small(np.arange(3.0)).numpy(), [0.0, 2.0, 4.0])


def _mlp_model(seed: int = 0):
    rng = np.random.default_rng(seed)
    w1, b1 = st.Variable(rng.normal(size=(4, 8))), st.Variable(rng.normal(size=8))
    w2 = st.Variable(rng.normal(size=(8, 3)))

    def model(x):
        h = st.tanh(st.matmul(x, w1) + b1)
        return {"p": st.nn.softmax(st.matmul(h, w2)), "h": h}

    def reference(x):
        h = np.tanh(x @ w1.numpy() + b1.numpy())
        z = h @ w2.numpy()
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return {"p": e / e.sum(axis=1, keepdims=True), "h": h}

    return model, reference, w1


def test_a_none_batch_dimension_is_traced_once_for_every_batch_size():
    """A function computed example by example with a None batch dimension: one trace and
    one compile serve batches of 0, 1, 5 and 300 (the native code loops over the batch), with
    the values of numpy; a variable changed between calls is read at its new value."""
    from symtape.codegen import jit

    model, reference, w1 = _mlp_model()
    f = st.function(model, input_signature=[st.TensorSpec((None, 4))])
    rng = np.random.default_rng(1)
    compiles = jit.STATS.compiles
    for n in (5, 1, 0, 300):
        x = rng.normal(size=(n, 4))
        got = f(x)
        assert got["p"].shape == (n, 3) and got["h"].shape == (n, 8)
        want = reference(x)
        np.testing.assert_allclose(got["p"].numpy(), want["p"], rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(got["h"].numpy(), want["h"], rtol=1e-13, atol=1e-15)
    assert f.traced_signatures == [((None, 4),)]
    assert jit.STATS.compiles - compiles <= 1
    assert got["p"]._value.base is not None  # the kernel's result itself, reshaped
    w1.assign(w1.numpy() * 0.5)
    x = rng.normal(size=(3, 4))
    np.testing.assert_allclose(f(x)["p"].numpy(), reference(x)["p"], rtol=1e-13)
    with pytest.raises(st.errors.ShapeError, match="batch dimensions differ"):
        st.function(lambda a, b: a + b, input_signature=[st.TensorSpec((None, 2))] * 2)(
            np.ones((3, 2)), np.ones((4, 2)))
    with pytest.raises(st.errors.ShapeError, match="do not match"):
        f(np.ones((2, 5)))


@pytest.mark.parametrize("name,fn", [
    ("reversed batch", lambda x, s: x[::-1] * s),
    ("the batch size as a number", lambda x, s: x * float(x.shape[0]) + s),
    ("a mean over the batch", lambda x, s: st.reduce_mean(x, axis=0) * s),
    ("softmax across the batch", lambda x, s: st.nn.softmax(x, axis=0) + s),
    ("one example against all", lambda x, s: x - x[0] * s),
    ("per-example sums", lambda x, s: st.reduce_sum(x * x, axis=1) * s),
    ("reshaped examples", lambda x, s: st.reshape(x, (-1, 3, 1)) * s),
    ("a maximum over the batch", lambda x, s: st.reduce_max(x, axis=[0, 1]) * s),
    ("centred examples", lambda x, s: (x - st.reduce_mean(x, axis=0)) * s),
    ("the unbiased variance", lambda x, s: st.reduce_sum(
        (x - st.reduce_mean(x, axis=0)) ** 2, axis=0) / float(x.shape[0] - 1) * s),
])
def test_none_batch_functions_equal_per_shape_traces(name, fn):
    """Functions computed example by example, or from sums, means and extrema over the
    examples, or from the batch size as ``k * B`` or ``k / B``, are traced once; others
    (rows that read other examples, ``1 / (B - 1)``) per batch size; both give the values
    of a trace per shape."""
    f = st.function(fn, input_signature=[st.TensorSpec((None, 3)), st.TensorSpec(())])
    per_shape = st.function(fn)
    rng = np.random.default_rng(2)
    for n in (4, 2):
        x, s = rng.normal(size=(n, 3)), np.float64(1.5 + n)
        np.testing.assert_allclose(f(x, s).numpy(), per_shape(x, s).numpy(), rtol=1e-14)
    once = name not in ("reversed batch", "softmax across the batch",
                        "one example against all", "the unbiased variance")
    assert (f.traced_signatures == [((None, 3), ())]) == once, f.traced_signatures


def test_none_batch_functions_that_assign_variables_trace_once():
    v = st.Variable(np.zeros(3))

    @st.function(input_signature=[st.TensorSpec((None, 3))])
    def accumulate(x):
        v.assign_add(st.reduce_sum(x, axis=0))
        return x * 2.0

    a, b = np.arange(6.0).reshape(2, 3), np.ones((4, 3))
    np.testing.assert_array_equal(accumulate(a).numpy(), 2 * a)
    accumulate(b)
    np.testing.assert_array_equal(v.numpy(), a.sum(0) + b.sum(0))
    assert accumulate.traced_signatures == [((None, 3),)]


def test_transforms_refuse_none_dimensions_and_saved_models_take_any_batch(tmp_path):
    with pytest.raises(st.errors.InvalidArgumentError, match="fully known"):
        st.grad(lambda x: st.reduce_sum(x), input_signature=[st.TensorSpec((None, 2))])

    class M:
        @st.function(input_signature=[st.TensorSpec((None, 2))])
        def __call__(self, x):
            return x * 2.0

    st.saved_model.save(M(), str(tmp_path))
    np.testing.assert_array_equal(st.saved_model.load(str(tmp_path))(np.ones((5, 2))).numpy(),
                                  2.0 * np.ones((5, 2)))


def _cart_pole(x, u):
    """A control-style vector field f(x, u) (x: angle, rate; u: one input)."""
    return st.stack([x[1], -9.81 * st.sin(x[0]) - 0.1 * x[1] + u[0] * st.cos(x[0])])


def test_export_c_links_named_jacobians_into_one_program(tmp_path):
    """``name=`` names a transform's C function; ``st.export_c`` writes f, df/dx and df/du
    (two Jacobians of one function, which by default would both be ``_cart_pole_jacobian``)
    as one header and one source that compile warning-free together and agree with the
    compiled callables."""
    import ctypes
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    sig = [st.TensorSpec((2,), name="x"), st.TensorSpec((1,), name="u")]
    xs, us = st.symbol("x", shape=(2,)), st.symbol("u", shape=(1,))
    f = st.compile(_cart_pole(xs, us), [xs, us], name="f")
    dfdx = st.jacobian(_cart_pole, argnums=0, input_signature=sig, name="dfdx")
    dfdu = st.jacobian(_cart_pole, argnums=1, input_signature=sig)
    assert "void dfdx(" in dfdx.c_source() and "void _cart_pole_jacobian(" in dfdu.c_source()
    header, source = st.export_c({"f": f, "dfdx": dfdx, "dfdu": dfdu}, tmp_path / "pole.c")
    assert header.name == "pole.h" and source.name == "pole.c"
    assert header.read_text().count("void ") == 3
    if cc is None:
        pytest.skip("no C compiler")
    lib = tmp_path / "pole.so"
    done = subprocess.run([cc, "-std=c99", "-O2", "-Wall", "-Werror", "-Wno-unused-function",
                           "-shared", "-fPIC", str(source), "-o", str(lib), "-lm"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    so = ctypes.CDLL(str(lib))
    rng = np.random.default_rng(3)
    x, u = rng.normal(size=(5, 2)), rng.normal(size=(5, 1))
    for cname, fn, shape in (("f", f, (5, 2)), ("dfdx", dfdx, (5, 2, 2)),
                             ("dfdu", dfdu, (5, 2, 1))):
        out = np.empty(shape)
        getattr(so, cname)(ctypes.c_int64(5), *[ctypes.c_void_p(a.ctypes.data)
                                                for a in (x, u, out)])
        np.testing.assert_allclose(out, fn(x, u), rtol=1e-15, atol=1e-15)
    # by hand: df/du = (0, cos x0); df/dx = [[0, 1], [-9.81 cos x0 - u sin x0, -0.1]]
    np.testing.assert_allclose(dfdu(x, u)[:, 1, 0], np.cos(x[:, 0]), rtol=1e-15)
    np.testing.assert_allclose(dfdx(x, u)[:, 1, 0],
                               -9.81 * np.cos(x[:, 0]) - u[:, 0] * np.sin(x[:, 0]), rtol=1e-14)


def test_export_c_refuses_what_it_cannot_name_or_write(tmp_path):
    g = st.grad(rosen)
    g(np.ones(3))
    g(np.ones(4))
    with pytest.raises(st.errors.InvalidArgumentError, match="2 compiled shapes"):
        st.export_c({"g": g}, tmp_path / "g")
    with pytest.raises(st.errors.InvalidArgumentError, match="not a C identifier"):
        st.export_c({"my-fn": st.grad(rosen, input_signature=[st.TensorSpec((3,))])},
                    tmp_path / "g")
    with pytest.raises(st.errors.InvalidArgumentError, match="not a compiled function"):
        st.export_c({"f": rosen}, tmp_path / "g")
    with pytest.raises(st.errors.InvalidArgumentError, match="name must be a non-empty"):
        st.hessian(rosen, name="")
    step = st.function(lambda x: x * 2.0, name="twice")
    step(np.ones(2))
    header, _ = st.export_c({"twice": step}, tmp_path / "t")
    assert "void twice(" in header.read_text()
    assert step.get_concrete_function(np.ones(2)).c_source().count("void twice(") == 1


def test_nested_functions_are_inlined_into_the_outer_trace():
    """A function called while another is traced runs in place (TensorFlow inlines nested
    tf.functions): one compiled program, the inner function never traced on its own."""
    @st.function
    def inner(x):
        return st.sin(x) * 2

    @st.function
    def outer(x):
        return inner(x) + 1

    x = np.array([0.5, 2.0])
    np.testing.assert_allclose(outer(x).numpy(), 2 * np.sin(x) + 1, rtol=1e-15)
    assert len(outer.traced_signatures) == 1 and inner.traced_signatures == []


def test_gradients_flow_through_a_function_called_under_a_tape():
    """Under a recording tape a compiled function runs its Python function, so the tape
    sees its operations: first and second derivatives with respect to its arguments and to
    the variables it reads, as TensorFlow gives them (by hand: f = sum(w x^3))."""
    w = st.Variable([1.0, -2.0])

    class Model(st.Module):
        @st.function(input_signature=[st.TensorSpec((2,))])
        def __call__(self, x):
            return st.reduce_sum(w * x ** 3)

    model = Model()
    x = st.Variable([3.0, 0.5])
    with st.GradientTape() as outer:
        with st.GradientTape() as inner:
            y = model(x)
        gx, gw = inner.gradient(y, [x, w])
    hxx = outer.jacobian(gx, x)
    np.testing.assert_allclose(gx.numpy(), 3 * w.numpy() * x.numpy() ** 2, rtol=1e-15)
    np.testing.assert_allclose(gw.numpy(), x.numpy() ** 3, rtol=1e-15)
    np.testing.assert_allclose(hxx.numpy(), np.diag(6 * w.numpy() * x.numpy()), rtol=1e-15)
    np.testing.assert_allclose(float(model(x.numpy())), float(y), rtol=1e-15)
    with st.GradientTape():
        with pytest.raises(errors.ShapeError, match="input_signature"):
            model(np.ones(3))
