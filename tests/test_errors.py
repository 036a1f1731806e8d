"""Bad input gets a clear symtape error naming the argument, never a SymPy traceback."""

from __future__ import annotations

import math

import numpy as np
import pytest

import symtape as st
from symtape.base import errors


@pytest.mark.parametrize("call, exc, pattern", [
    (lambda: st.add(st.zeros([2, 3]), st.zeros([4])), errors.ShapeError, r"\(2, 3\).*\(4,\)"),
    (lambda: st.matmul(st.zeros([2, 3]), st.zeros([2, 3])), errors.ShapeError, "inner"),
    (lambda: st.matmul(st.zeros([3]), st.zeros([3, 2])), errors.ShapeError, "rank >= 2"),
    (lambda: st.reshape(st.zeros([2, 3]), [4]), errors.ShapeError, "reshape"),
    (lambda: st.reduce_sum(st.zeros([2]), axis=3), errors.InvalidArgumentError, "axis 3"),
    (lambda: st.gather(st.zeros([3]), [5]), errors.InvalidArgumentError, "out of range"),
    (lambda: st.sin(st.constant([1, 2])), errors.DTypeError, "int32.*float"),
    (lambda: st.add(st.constant(1.0, "float32"), st.constant(1.0)), errors.DTypeError,
     "float32 and float64"),
    (lambda: st.constant(1) * 2.5, errors.DTypeError, "non-integer"),
    (lambda: st.constant("abc"), errors.DTypeError, "str"),
    (lambda: st.linalg.det(st.zeros([2, 3])), errors.ShapeError, "square"),
    (lambda: st.linalg.solve(st.eye(2), st.zeros([3, 1])), errors.ShapeError, "rhs"),
    (lambda: st.einsum("ij,jk->ik", st.zeros([2, 3]), st.zeros([2, 2])), errors.ShapeError,
     "label 'j'"),
    (lambda: st.nn.softmax_cross_entropy_with_logits(st.zeros([2]), st.zeros([3])),
     errors.ShapeError, "labels"),
    (lambda: st.Variable(1.0).assign([1.0, 2.0]), errors.ShapeError, "assign"),
    (lambda: st.symbol(""), errors.InvalidArgumentError, "name"),
    (lambda: st.where(st.constant([True]), st.zeros([1])), errors.InvalidArgumentError,
     "both x and y"),
    (lambda: st.where(st.zeros([1]), st.zeros([1]), st.zeros([1])), errors.DTypeError, "bool"),
])
def test_bad_input_raises_a_named_error(call, exc, pattern):
    with pytest.raises(exc, match=pattern) as info:
        call()
    assert isinstance(info.value, errors.SymtapeError)
    assert "sympy" not in str(type(info.value).__module__)


def test_errors_subclass_the_builtin_types_tf_raises():
    assert issubclass(errors.ShapeError, ValueError)
    assert issubclass(errors.DTypeError, TypeError)
    assert issubclass(errors.NonDifferentiableError, LookupError)
    assert issubclass(errors.UnboundLeafError, ValueError)


def test_unbound_leaf_error_names_the_leaf():
    x = st.symbol("speed")
    y = st.exp(x) * 2
    with pytest.raises(errors.UnboundLeafError, match="speed"):
        y.numpy()
    with pytest.raises(errors.UnboundLeafError):
        float(y)


def test_unbound_leaf_error_stays_short_for_large_and_many_leaves():
    """A traced image batch is named by its shape (its million elements are not built to
    be listed); many small leaves are listed up to eight, then '...'."""
    f = st.function(lambda x: float(st.reduce_sum(x)))
    with pytest.raises(errors.InvalidArgumentError, match=r"leaf of shape \(64, 28, 28, 16\)") \
            as info:
        f(np.ones((64, 28, 28, 16)))
    assert len(str(info.value)) < 600
    y = sum(st.symbol(f"s{i}") for i in range(20))
    with pytest.raises(errors.UnboundLeafError, match=r"\((s\d+, ){8}\.\.\.\)"):
        y.numpy()


def test_nan_and_inf_inputs_give_ieee_values_not_errors():
    x = st.Variable([math.nan, math.inf, -1.0])
    with st.GradientTape() as t:
        y = st.reduce_sum(st.sqrt(x))
    g = t.gradient(y, x).numpy()
    assert math.isnan(g[0]) and g[1] == 0.0 and math.isnan(g[2])
    assert math.isnan(float(y))


def test_ambiguous_truth_value_and_scalar_protocols():
    with pytest.raises(ValueError, match="ambiguous"):
        bool(st.constant([1.0, 2.0]))
    with pytest.raises(TypeError, match="scalar"):
        len(st.constant(1.0))
    with pytest.raises(TypeError, match="unhashable"):
        hash(st.constant(1.0))
    assert bool(st.constant(2.0) > 1.0)
    assert np.asarray(st.constant([1.0])).tolist() == [1.0]
