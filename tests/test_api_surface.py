"""Every public name of the API contract exists where TensorFlow puts it."""

from __future__ import annotations

import pytest

import symtape as st

MATH = """identity cast add subtract multiply divide pow square sqrt rsqrt exp expm1 log log1p sin
cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh erf abs sign floor ceil round
maximum minimum reduce_sum reduce_mean reduce_prod reduce_max reduce_min reduce_logsumexp
reduce_euclidean_norm matmul tensordot einsum transpose reshape stack concat squeeze
expand_dims tile gather where zeros ones zeros_like ones_like eye linspace range fill norm
clip_by_value clip_by_norm clip_by_global_norm""".split()
NN = """relu relu6 leaky_relu elu selu softplus sigmoid tanh softmax log_softmax
sigmoid_cross_entropy_with_logits softmax_cross_entropy_with_logits""".split()
LINALG = "det inv solve trace".split()
TOP = """constant Variable symbol Tensor GradientTape UnconnectedGradients stop_gradient
custom_gradient register_gradient define_function TensorSpec function compile grad jacobian
hessian hvp derivative load""".split()


@pytest.mark.parametrize("name", MATH)
def test_math_names(name):
    assert callable(getattr(st, name)) and callable(getattr(st.math, name))


@pytest.mark.parametrize("name", NN)
def test_nn_names(name):
    assert callable(getattr(st.nn, name))


@pytest.mark.parametrize("name", LINALG)
def test_linalg_names(name):
    assert callable(getattr(st.linalg, name))


@pytest.mark.parametrize("name", TOP)
def test_top_level_names(name):
    assert hasattr(st, name)


def test_random_and_errors():
    assert callable(st.random.normal) and callable(st.random.uniform)
    assert callable(st.random.set_seed)
    assert issubclass(st.errors.ShapeError, st.errors.SymtapeError)
    assert st.UnconnectedGradients("zero") is st.UnconnectedGradients.ZERO
