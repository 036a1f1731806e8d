"""``st.function`` as ``tf.function`` behaves on the everyday mistakes and conveniences:
misspelled keywords raise ``TypeError``, NumPy integer scalars are static Python values,
``get_concrete_function()`` uses the ``input_signature``, and functions and transforms
print what they are."""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st


@pytest.mark.parametrize("kwargs, hint", [({"input_signatures": []}, "input_signature"),
                                          ({"dtpye": "float64"}, "dtype"),
                                          ({"no_such_option": 1}, "")])
def test_misspelled_keywords_raise_type_error(kwargs, hint):
    with pytest.raises(TypeError, match=f"unexpected keyword argument.*{hint}"):
        st.function(lambda x: x, **kwargs)
    with pytest.raises(TypeError):
        st.function(**kwargs)(lambda x: x)


def test_tf_function_keywords_without_effect_are_accepted():
    f = st.function(lambda x: x * 3, jit_compile=True, reduce_retracing=True, autograph=False)
    assert float(f(2.0)) == 6.0


def test_numpy_integer_scalars_are_static_values():
    calls = []

    @st.function
    def f(x, n):
        calls.append(type(n))
        total = x
        for _ in range(n):  # a Python loop over a static count
            total = total * 2
        return st.reshape(total, (n, -1))

    x = np.arange(6.0)
    got = f(x, np.int64(3))
    np.testing.assert_array_equal(got.numpy(), (x * 8).reshape(3, -1))
    np.testing.assert_array_equal(f(x, np.int32(2)).numpy(), (x * 4).reshape(2, -1))
    f(x, np.int64(3))  # the same value again: no new trace
    assert calls == [np.int64, np.int32]


def test_get_concrete_function_without_arguments_uses_the_signature():
    f = st.function(lambda x: st.reduce_sum(x ** 2), input_signature=[st.TensorSpec((3,))])
    concrete = f.get_concrete_function()
    assert float(concrete(np.array([1.0, 2.0, 3.0]))) == 14.0
    g = st.function(lambda x: 2 * x, input_signature=[st.TensorSpec((None, 2))])
    same = g.get_concrete_function()
    np.testing.assert_array_equal(same(np.ones((5, 2))).numpy(), 2 * np.ones((5, 2)))
    h = st.function(lambda x: x)
    with pytest.raises(st.errors.InvalidArgumentError):
        h.get_concrete_function()  # no signature and no arguments: nothing to trace


def test_functions_and_transforms_print_what_they_are():
    def loss(x):
        return st.reduce_sum(x ** 2)

    f = st.function(loss, input_signature=[st.TensorSpec((2,))])
    assert repr(f) == ("<st.function loss(TensorSpec(shape=(2,), dtype=float64)): "
                       "not traced yet>")
    f(np.ones(2))
    assert repr(f).endswith(": 1 trace [((2,),)]>")
    g = st.grad(loss)
    assert repr(g) == "<st.grad of loss: not traced yet>"
    g(np.ones(4))
    assert repr(g) == "<st.grad of loss: compiled for core shapes [((4,),)]>"
    assert "at 0x" not in repr(st.function(loss)) and repr(st.function(loss)).startswith(
        "<st.function loss(...)")
