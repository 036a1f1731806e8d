"""The core below the op table: it imports without ``symtape.ops``, applies the table's
primitives by name once the table has registered them, and says so clearly before."""

from __future__ import annotations

import operator
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import symtape as st
from symtape.base.errors import SymtapeError
from symtape.core.primitive import OPS
from symtape.core.tensor import table_op, true_divide

X = np.array([[1.5, -2.0], [0.25, 3.0]])
Y = np.array([[0.5, 4.0], [-1.25, 2.0]])

# (Tensor operator, the primitive it applies, numpy's answer)
BINARY = [
    (operator.add, "add", np.add),
    (operator.sub, "subtract", np.subtract),
    (operator.mul, "multiply", np.multiply),
    (operator.floordiv, "floordiv", np.floor_divide),
    (operator.mod, "floormod", np.mod),
    (operator.pow, "pow", lambda a, b: np.power(np.abs(a), b)),
    (operator.matmul, "matmul", np.matmul),
    (operator.lt, "less", np.less),
    (operator.le, "less_equal", np.less_equal),
    (operator.gt, "greater", np.greater),
    (operator.ge, "greater_equal", np.greater_equal),
    (operator.eq, "equal", np.equal),
    (operator.ne, "not_equal", np.not_equal),
]


@pytest.mark.parametrize("op, name, ref", BINARY, ids=[r[1] for r in BINARY])
def test_tensor_operators_apply_the_registered_primitives(op, name, ref):
    a = np.abs(X) if name == "pow" else X
    x, y = st.constant(a), st.constant(Y)
    for out in (op(x, y), op(x, Y)):
        assert out._node.prim is OPS[name] is table_op(name)
        np.testing.assert_array_equal(out.numpy(), ref(a, Y))
    # numpy on the left defers to the tensor's reflected operator (a < y is y > a)
    np.testing.assert_array_equal(op(a, y).numpy(), ref(a, Y))


def test_unary_logical_and_item_operators():
    x = st.constant(X)
    b, c = st.constant(X > 0), st.constant(Y > 0)
    rows = [(-x, "negative", -X), (abs(x), "abs", np.abs(X)), (~b, "logical_not", X <= 0),
            (b & c, "logical_and", (X > 0) & (Y > 0)), (b | c, "logical_or", (X > 0) | (Y > 0)),
            (x[1], "getitem", X[1])]
    for out, name, want in rows:
        assert out._node.prim is OPS[name]
        np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("a, b", [(7, 2), (np.array([3, -4], np.int32), 8),
                                  (np.array([True, False]), np.array([True, True])),
                                  (np.array([1.5, -3.0]), 0.5)])
def test_true_division_gives_floats_as_tensorflow(a, b):
    for out in (true_divide(st.constant(a), b), st.constant(a) / b, a / st.constant(b)):
        assert out.dtype == np.float64
        np.testing.assert_array_equal(out.numpy(), np.true_divide(a, b))


def test_an_unregistered_primitive_is_a_clear_error(monkeypatch):
    x = st.constant(X)
    monkeypatch.delitem(OPS, "multiply")
    with pytest.raises(SymtapeError, match="no primitive 'multiply' is registered"):
        _ = x * 2.0


def test_the_core_imports_and_fails_clearly_without_the_op_table():
    """Every core module imports with ``symtape.ops`` unimportable (and without the package's
    own ``__init__``, which loads the table); the operators then name what is missing, and
    work once the table is imported."""
    code = textwrap.dedent("""
        import importlib.util, sys, types
        spec = importlib.util.find_spec("symtape")
        pkg = types.ModuleType("symtape")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["symtape"] = pkg

        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.startswith("symtape.ops"):
                    raise ImportError(name)

        sys.meta_path.insert(0, Refuse())
        from symtape.base.errors import SymtapeError
        from symtape.core import apply, node, notation, primitive, tensor, variables
        x = variables.Variable([1.0, 2.0])
        for attempt in (lambda: x + 1.0, lambda: apply.lent("elementwise")):
            try:
                attempt()
            except SymtapeError as e:
                print(e)
        print(any(m.startswith("symtape.ops") for m in sys.modules))
        sys.meta_path.pop(0)
        import symtape.ops
        print((x * 3.0 + 1.0).numpy().tolist(), (tensor.constant(3) / 2).numpy())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert "no primitive 'add' is registered" in out[0]
    assert "has not lent the core 'elementwise'" in out[1]
    assert out[2:] == ["False", "[4.0, 7.0] 1.5"]
