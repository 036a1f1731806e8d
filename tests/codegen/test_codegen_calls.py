"""Calling compiled functions: the one-point path and buffer-bound calls agree with the
general path (which is checked against numpy and the interpreter elsewhere) and refuse what
they cannot read in place."""

from __future__ import annotations

import gc
import threading
from collections import namedtuple

import numpy as np
import pytest

import symtape as st
from symtape.base.errors import DTypeError, InvalidArgumentError, ShapeError


def _reference(x, y, v):
    """The functions below, by hand with numpy."""
    x, y, v = np.float64(x), np.float64(y), np.asarray(v, dtype=np.float64)
    return np.sin(x) * y + x * x, np.exp(x) * v - y, x > y


@pytest.fixture(scope="module")
def mixed():
    """f(x, y, v) with x, y scalars and v of shape (3,): a scalar, a vector and a bool."""
    x, y, v = st.symbol("x"), st.symbol("y"), st.symbol("v", shape=(3,))
    return st.compile((st.sin(x) * y + x * x, st.exp(x) * v - y, x > y), [x, y, v],
                      name="mixed")


def _general(f, *args):
    """The general path's answer: the same call with an explicit ``out``."""
    a = [np.asarray(x, dtype=np.float64) for x in args]
    batch = np.broadcast_shapes(*[x.shape[:x.ndim - len(s.shape)] for x, s in zip(a, f.inputs)])
    out = tuple(np.empty(batch + s.shape, dtype=s.dtype) for s in f.outputs)
    if isinstance(f.structure, int):
        return (f(*args, out=out[0]),)
    return f(*args, out=out)


@pytest.mark.parametrize("args", [
    (0.5, 1.5, np.array([1.0, -2.0, 3.5])),
    (np.float64(-0.25), 2, np.array([0.0, np.inf, np.nan])),
    (np.array(3.0), np.array(-1.0), np.arange(3.0)),
    (7, -3, np.array([1e300, -1e-300, 0.0])),
])
def test_one_point_calls_agree_with_the_general_path(mixed, args):
    got = mixed(*args)
    want = _reference(*args)
    general = _general(mixed, *args)
    for g, w, h in zip(got, want, general):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(g, h)
    assert isinstance(got[0], np.float64) and isinstance(got[2], np.bool_)
    assert got[1].shape == (3,) and got[1].dtype == np.float64


def test_one_point_results_are_fresh_objects(mixed):
    v = np.array([1.0, 2.0, 3.0])
    first = mixed(0.5, 1.0, v)
    second = mixed(2.0, -1.0, v)
    assert not np.shares_memory(first[1], second[1])
    np.testing.assert_array_equal(first[1], _reference(0.5, 1.0, v)[1])
    first[1][:] = 0.0  # the caller owns the result
    np.testing.assert_array_equal(mixed(0.5, 1.0, v)[1], _reference(0.5, 1.0, v)[1])


def test_other_arguments_take_the_general_path(mixed):
    v = np.array([1.0, 2.0, 3.0])
    # a batch, an int array, a float32 array, a list: converted and broadcast as before
    got = mixed(np.array([0.5, 1.0]), 1.5, v)
    assert got[0].shape == (2,) and got[1].shape == (2, 3)
    np.testing.assert_array_equal(got[0], np.sin([0.5, 1.0]) * 1.5 + np.array([0.25, 1.0]))
    np.testing.assert_array_equal(mixed(0.5, 1.5, np.array([1, 2, 3]))[1],
                                  _reference(0.5, 1.5, [1.0, 2.0, 3.0])[1])
    np.testing.assert_array_equal(mixed(0.5, 1.5, [1.0, 2.0, 3.0])[1],
                                  _reference(0.5, 1.5, [1.0, 2.0, 3.0])[1])
    np.testing.assert_array_equal(mixed(True, 0.0, v)[0], _reference(1.0, 0.0, v)[0])
    # and their errors are the general path's
    with pytest.raises(DTypeError, match="argument 0"):
        mixed(10 ** 400, 1.0, v)
    with pytest.raises(ShapeError, match="argument 2"):
        mixed(0.5, 1.5, np.ones(4))
    with pytest.raises(ShapeError, match="do not broadcast"):
        mixed(0.5, np.ones(2), np.ones((3, 3)))
    with pytest.raises(TypeError, match="takes 3 array arguments"):
        mixed(0.5, 1.5)


def test_one_point_float32_rounds_like_the_general_path():
    x, y = st.symbol("x"), st.symbol("y")
    f = st.compile(x / y, [x, y], dtype="float32")
    got = f(1.0, 3.0)
    assert got.dtype == np.float32
    assert got == _general(f, 1.0, 3.0)[0] == np.float32(1.0) / np.float32(3.0)


def test_one_point_results_mirror_the_structure():
    x, y = st.symbol("x"), st.symbol("y")
    Pair = namedtuple("Pair", "total product")
    f = st.compile({"a": Pair(x + y, x * y), "b": [x - y]}, [x, y])
    got = f(2.0, 5.0)
    assert got == {"a": Pair(7.0, 10.0), "b": [-3.0]}
    assert isinstance(got["a"], Pair)


def test_threads_calling_one_point_each_get_their_own_answer(mixed):
    rng = np.random.default_rng(1)
    cases = [[(float(a), float(b), rng.normal(size=3)) for a, b in rng.normal(size=(300, 2))]
             for _ in range(6)]
    wants = [[_general(mixed, *c) for c in work] for work in cases]
    errors = []

    def worker(k):
        for c, want in zip(cases[k], wants[k]):
            got = mixed(*c)
            if not all(np.array_equal(g, w) for g, w in zip(got, want)):
                errors.append((k, c))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_compiled_gradient_takes_floats_directly():
    g = st.grad(lambda x, y: st.sin(x) * y + x * y, argnums=(0, 1))
    gx, gy = g(0.5, 2.0)
    assert gx == np.cos(0.5) * 2.0 + 2.0 and gy == np.sin(0.5) + 0.5
    np.testing.assert_array_equal(g(np.array(0.5), 2)[0], gx)
    h = st.grad(lambda x: st.reduce_sum(x ** 3))
    np.testing.assert_array_equal(h(np.array([1.0, 2.0])), [3.0, 12.0])
    np.testing.assert_array_equal(h(np.array([1, 2])), [3.0, 12.0])  # converted first


# ---- buffer-bound calls ---------------------------------------------------------------------

def _same_as_call(f, got, args):
    """``got`` is what calling ``f`` on copies of ``args`` gives, and numpy's answer to
    rounding."""
    want = f(*[np.array(a, copy=True) for a in args])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    x, y, v = (np.asarray(a) for a in args)
    ref = _reference(x, y, np.moveaxis(v, -1, 0))
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-14)
    np.testing.assert_allclose(got[1], np.moveaxis(ref[1], 0, -1), rtol=1e-14)
    np.testing.assert_array_equal(got[2], ref[2])


def test_buffer_call_reads_arguments_in_place(mixed):
    rng = np.random.default_rng(0)
    x, y, v = rng.normal(size=5), rng.normal(size=5), rng.normal(size=(5, 3))
    call = mixed.buffer(x, y, v)
    for _ in range(3):
        assert call() is None
        _same_as_call(mixed, call.out, (x, y, v))
        x[:], y[:], v[:] = rng.normal(size=5), rng.normal(size=5), rng.normal(size=(5, 3))
    assert call.args[0] is x


def test_buffer_call_with_given_out_broadcasting_and_strided_batches(mixed):
    x = np.linspace(-1.0, 1.0, 4)
    y = np.array(0.5)  # broadcast over the batch (stride 0)
    v = np.arange(24.0).reshape(3, 4, 2)[..., :3].transpose(1, 0, 2)  # not collapsible
    v = np.arange(36.0).reshape(4, 3, 3)[:, ::-1, :]  # reversed middle axis, contiguous core
    v = v[:, 0, :]  # (4, 3), rows 9 elements apart
    out = (np.empty(4), np.empty((4, 3)), np.empty(4, dtype=bool))
    call = mixed.buffer(x, y, v, out=out)
    assert call.out is out
    call()
    _same_as_call(mixed, out, (x, y, v))
    # a batch of two dimensions whose strides do not collapse into one
    xs = np.arange(12.0).reshape(3, 4)[:, :3] / 10.0
    call = mixed.buffer(xs, np.ones((3, 3)), np.ones((3, 3, 3)))
    call()
    _same_as_call(mixed, call.out, (xs, np.ones((3, 3)), np.ones((3, 3, 3))))


def test_buffer_call_with_an_empty_batch(mixed):
    call = mixed.buffer(np.empty(0), np.empty(0), np.empty((0, 3)))
    call()
    assert call.out[1].shape == (0, 3)


def test_buffer_call_refuses_what_it_cannot_read_in_place(mixed):
    v = np.ones(3)
    with pytest.raises(DTypeError, match=r"argument 0 .*float64"):
        mixed.buffer(0.5, np.array(1.0), v)
    with pytest.raises(DTypeError, match="argument 2"):
        mixed.buffer(np.array(0.5), np.array(1.0), np.ones(3, dtype=np.float32))
    with pytest.raises(InvalidArgumentError, match="argument 2 .*contiguous"):
        mixed.buffer(np.array(0.5), np.array(1.0), np.ones(6)[::2])
    with pytest.raises(ShapeError, match="argument 2"):
        mixed.buffer(np.array(0.5), np.array(1.0), np.ones(4))
    with pytest.raises(TypeError, match="takes 3 array arguments"):
        mixed.buffer(np.array(0.5))
    x = np.zeros(2)
    with pytest.raises(InvalidArgumentError, match="overlap"):
        mixed.buffer(x, np.zeros(2), np.zeros((2, 3)), out=(x, np.empty((2, 3)),
                                                             np.empty(2, dtype=bool)))
    with pytest.raises(InvalidArgumentError, match="out"):
        mixed.buffer(x, np.zeros(2), np.zeros((2, 3)), out=(np.empty(3), np.empty((2, 3)),
                                                             np.empty(2, dtype=bool)))


def test_buffer_call_keeps_the_native_code_alive():
    x = st.symbol("x")
    f = st.compile(x * 3.0 + 1.0, [x])
    xs = np.arange(4.0)
    call = f.buffer(xs)
    del f
    gc.collect()
    call()
    np.testing.assert_array_equal(call.out, xs * 3.0 + 1.0)


def test_one_point_calls_with_out_fill_and_return_it(mixed):
    v = np.array([1.0, 2.0, 3.0])
    out = (np.empty(()), np.empty(3), np.empty((), dtype=bool))
    got = mixed(0.5, 1.5, v, out=out)
    assert got is out
    for g, w in zip(out, _general(mixed, 0.5, 1.5, v)):
        np.testing.assert_array_equal(g, w)
    # an output aliasing an argument: the argument is read before the result is written
    x, y = st.symbol("x", shape=(3,)), st.symbol("y", shape=(3,))
    f = st.compile(x[::-1] * 2.0 + y, [x, y])
    a, b = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])
    assert f(a, b, out=a) is a
    np.testing.assert_array_equal(a, [16.0, 24.0, 32.0])
    # what the short path does not take goes the general way, with its errors
    with pytest.raises(InvalidArgumentError, match="read-only"):
        ro = np.empty(3)
        ro.flags.writeable = False
        f(a, b, out=ro)
    with pytest.raises(DTypeError, match="dtype"):
        f(a, b, out=np.empty(3, dtype=np.float32))
    listed = [np.empty(()), np.empty(3), np.empty((), dtype=bool)]
    assert mixed(0.5, 1.5, v, out=listed) is listed  # a list: the general path
    np.testing.assert_array_equal(listed[1], out[1])
