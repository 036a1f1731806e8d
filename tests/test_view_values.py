"""Small nodes' eager values are their element view evaluated, on one path for every op.

The reference is the element DAG itself, evaluated from the leaves' values through every
definition (``evaluate.evaluate_from``): the value formulas and compiled code give. Values
are compared bit for bit, nan and signed zeros included.
"""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st
from symtape import ops
from symtape.core import primitive, view_values
from symtape.element import evaluate, graph as G

INF, NAN = float("inf"), float("nan")


def _view_value(t) -> np.ndarray:
    atoms = t._atoms  # the element view (built here, for the reference)
    got = evaluate.evaluate_from(list(atoms.flat), {}, t.dtype)
    return np.array([np.nan if v is None else v for v in got], dtype=t.dtype).reshape(t.shape)


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return a.shape == b.shape and bool(np.all((a == b) & (np.signbit(a) == np.signbit(b)) |
                                              (np.isnan(a) & np.isnan(b))))


def _x():
    return st.Variable([[1.5, -2.0, INF], [0.25, -0.0, 3.0]], name="x")


CASES = {
    # a constant's zeros fold products, also with inf and nan partners
    "product": lambda x: x * st.constant([[0.0, 2.0, 0.0], [1.0, 0.0, -1.0]]) * INF,
    "quotient": lambda x: st.constant([[0.0, 1.0, 2.0], [0.0, 3.0, INF]]) / x,
    "sum of folded terms": lambda x: st.reduce_sum(
        x * st.constant([[0.0, 0.0, 0.0], [1.0, 0.0, 2.0]]), axis=1),
    "all terms folded": lambda x: st.reduce_sum(-x * st.constant([[0.0, 0.0, 0.0],
                                                                  [0.0, 0.0, 0.0]]) + 1.0),
    "one-hot contraction": lambda x: st.matmul(st.constant(np.eye(2)), x * INF),
    "moved folds": lambda x: st.transpose(x * st.constant([[0.0, 1.0, 0.0],
                                                           [1.0, 0.0, 1.0]])) * INF,
    "concat": lambda x: st.concat([x * st.constant([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]]),
                                   x], axis=0) * NAN,
    "merged terms": lambda x: (x * 3.0 + x) - x * 4.0,
    "select zero branch": lambda x: st.where(x > 0.0, x, 0.0) * INF,
    "irregular times constant": lambda x: st.constant([[2.0, 0.0, 1.0], [0.0, 1.0, 3.0]]) *
    st.nn.softmax(x * 0.5),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_values_are_the_element_view(name):
    x = _x()
    y = CASES[name](x)
    assert _same_bits(y.numpy(), _view_value(y)), (name, y.numpy(), _view_value(y))


def test_no_op_carries_a_value_hook_of_its_own():
    # every op's small values come from its element view (Primitive.build): no family
    # re-derives folds at the tensor level beside it
    for name in dir(ops):
        op = getattr(ops, name)
        if isinstance(op, primitive.Primitive):
            assert not hasattr(op, "settle_folds"), name
    assert not hasattr(primitive.Primitive, "settles_alone")


def test_a_fold_pattern_is_planned_once_and_the_view_is_not_built():
    x = st.Variable(np.linspace(-1.0, 1.0, 12), name="x")
    data = np.arange(12.0) + 1.0
    data[[2, 5]] = 0.0
    first = x * st.constant(data) * INF
    assert _same_bits(first.numpy(), _view_value(first))
    before = G.GRAPH.created
    again = np.arange(12.0) + 7.0  # other numbers, the same zeros: the same plan
    again[[2, 5]] = 0.0
    y = x * st.constant(again) * INF
    assert G.GRAPH.created == before
    assert not y._node.built
    with np.errstate(invalid="ignore"):
        expect = np.where(again == 0.0, 0.0, x.numpy() * again * INF)
    assert _same_bits(y.numpy(), expect)


def test_commutative_nodes_read_their_arguments_in_their_own_order():
    x = st.Variable([[1.5, -2.0, 0.5], [0.25, -0.0, 3.0]], name="x")
    s = st.nn.softmax(x * 0.5)
    c = st.constant([[2.0, 0.0, 1.0], [0.0, 1.0, 3.0]])
    for y in (c * s, s * c):
        assert _same_bits(y.numpy(), c.numpy() * s.numpy())


def test_a_plan_writes_into_a_fresh_array_of_any_layout():
    x = st.Variable(np.arange(6.0).reshape(3, 2).T, name="x")
    c = st.constant(np.asfortranarray([[0.0, 1.0, 2.0], [3.0, 0.0, 5.0]]))
    y = x * c * INF
    assert _same_bits(y.numpy(), _view_value(y))
    assert _same_bits(y.numpy(), [[0.0, INF, INF], [INF, 0.0, INF]])


def test_arguments_too_large_to_stand_in_for_plan_the_nodes_own_view(monkeypatch):
    monkeypatch.setattr(view_values, "STAND_IN_LIMIT", 4)
    x = st.Variable([1.0, -2.0, INF, 0.5, 3.0], name="x")
    y = st.reduce_sum(x * st.constant([1.0, 0.0, 0.0, 2.0, -1.0]))
    assert float(y.numpy()) == 1.0 + 1.0 - 3.0
    assert _same_bits(y.numpy(), _view_value(y))
    assert y._node.built  # planned on its own view


def test_a_node_evaluated_again_is_planned_on_its_own_view_with_the_same_bits():
    x = st.Variable([[1.5, -2.0, 0.5], [0.25, -0.0, 3.0]], name="x")
    s = st.where(x > 0.0, x, 0.0)  # a select: its products fold into its zero branch
    c = st.constant([[2.0, INF, 1.0], [NAN, 1.0, 3.0]])
    first = c * s  # evaluated through its definitions
    assert not isinstance(view_values._NODE_PLANS.get(first._node), view_values.ViewPlan)
    again = c * s  # the same node: now planned
    assert again._node is first._node
    assert isinstance(view_values._NODE_PLANS.get(again._node), view_values.ViewPlan)
    assert _same_bits(again.numpy(), first.numpy())
    assert _same_bits(again.numpy(), _view_value(again))
    assert _same_bits(again.numpy(), [[3.0, 0.0, 0.5], [NAN, 0.0, 9.0]])


def test_a_view_too_long_to_walk_is_evaluated_through_its_definitions(monkeypatch):
    monkeypatch.setattr(view_values, "WALK_LIMIT", 2)
    x = st.Variable([[1.5, -2.0, 0.5], [0.25, -0.0, 3.0]], name="x")
    s = st.where(st.sin(x) * x > 0.0, x, 0.0)  # the products read the condition's ancestry
    c = st.constant([[2.0, INF, 1.0], [NAN, 1.0, 3.0]])
    first = c * s
    again = c * s
    assert again._node is first._node
    assert view_values._NODE_PLANS.get(again._node) is None  # not planned: walked too far
    assert _same_bits(again.numpy(), first.numpy())
    assert _same_bits(again.numpy(), _view_value(again))
