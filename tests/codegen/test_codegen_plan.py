"""The plan: SSA order, sharing, dead values, aliases, bound leaves, errors, formulas."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import sympy as sp

from symtape import io as dataio
from symtape.element import evaluate
from symtape.element import graph
from symtape.element import added_heads as F
from symtape.codegen.plan import build_plan, formulas
from symtape.base.errors import InvalidArgumentError, LoweringError, UnboundLeafError

S = sp.S


def arr(*atoms):
    return np.array(atoms[0] if len(atoms) == 1 else list(atoms), dtype=object)


class _Store:
    def __init__(self, value):
        self.value = value


def ops(plan):
    return [ins.op for ins in plan.instrs]


def test_values_are_computed_output_by_output():
    """Nodes made breadth first (each step of two chains before the next, as a batched
    sweep makes them) are planned depth first: one output's chain, then the other's."""
    x, y = graph.Leaf.new("x"), graph.Leaf.new("y")
    chains = [[x], [y]]
    for step in range(3):
        for chain in chains:
            chain.append(graph.call(sp.sin, graph.add(chain[-1], S(step + 2))))
    plan = build_plan([arr(chains[0][-1], chains[1][-1])], [arr(x, y)])
    for i, ins in enumerate(plan.instrs):
        assert all(a < i for a in ins.args)
    order = [ins.op for ins in plan.instrs if ins.op not in ("const", "input")]
    assert order == ["add", "sin"] * 6
    y_ref = next(i for i, ins in enumerate(plan.instrs) if ins.op == "input" and
                 ins.attr == (0, 1))
    first_out = plan.outputs[0].refs[0]
    assert all(i > first_out for i, ins in enumerate(plan.instrs) if y_ref in ins.args)


def test_ssa_is_topological_and_shares_power_factors():
    x, y = graph.Leaf.new("x"), graph.Leaf.new("y")
    a = graph.power(x, S(2))
    b = graph.monomial(S.One, [(x, S(3)), (y, S.One)])  # x**3*y: reuses x*x
    plan = build_plan([arr(graph.add(a, b))], [arr(x, y)])
    for i, ins in enumerate(plan.instrs):
        assert all(a < i for a in ins.args)
    assert ops(plan).count("mul") == 3  # x*x, (x*x)*x, (x**3)*y
    keys = [(ins.op, ins.args) for ins in plan.instrs if ins.op not in ("const", "input")]
    assert len(keys) == len(set(keys))


def test_dead_nodes_and_unused_inputs_are_dropped():
    x, y = graph.Leaf.new("x"), graph.Leaf.new("y")
    graph.call(sp.exp, y)  # exists in the graph, not under the output
    plan = build_plan([arr(graph.call(sp.sin, x))], [arr(x), arr(y)])
    assert ops(plan) == ["input", "sin"]
    assert plan.inputs[1].names == ("y",)


def test_alias_lowers_as_its_forward_atom():
    x = graph.Leaf.new("x")
    clip = F.custom_head("clip")
    node = graph.alias(clip, [x], graph.call(sp.cos, x))
    plan = build_plan([arr(node)], [arr(x)])
    assert ops(plan) == ["input", "cos"]


def test_bound_leaf_is_folded_and_unbound_leaf_raises():
    x = graph.Leaf.new("x")
    w = graph.Leaf.new("w", store=_Store(np.array([2.5])), index=0)
    plan = build_plan([arr(graph.mul(x, w))], [arr(x)])
    consts = [ins.attr[0] for ins in plan.instrs if ins.op == "const"]
    assert consts == [2.5]
    u = graph.Leaf.new("u_unbound")
    with pytest.raises(UnboundLeafError, match="u_unbound"):
        build_plan([arr(graph.mul(x, u))], [arr(x)])


def test_unknown_head_raises_lowering_error_naming_it():
    x = graph.Leaf.new("x")
    with pytest.raises(LoweringError, match="gamma"):
        build_plan([arr(graph.call(sp.gamma, x))], [arr(x)])
    custom = graph.call(F.custom_head("my_rule"), x)  # a custom head without a forward
    with pytest.raises(LoweringError, match="my_rule"):
        build_plan([arr(custom)], [arr(x)])


def test_inputs_must_be_distinct_leaves():
    x = graph.Leaf.new("x")
    with pytest.raises(InvalidArgumentError, match="not a leaf"):
        build_plan([arr(x)], [arr(graph.call(sp.sin, x))])
    with pytest.raises(InvalidArgumentError, match="twice"):
        build_plan([arr(x)], [arr(x), arr(x)])


def test_plan_pickles_without_graph_objects():
    x = graph.Leaf.new("x")
    plan = build_plan([arr(graph.add(graph.call(sp.exp, x), sp.pi))], [arr(x)])
    again = pickle.loads(pickle.dumps(plan))
    assert again == plan


def test_constants_carry_their_exact_expression_as_data():
    x = graph.Leaf.new("x")
    c = sp.pi / 4 + sp.sqrt(2)
    plan = build_plan([arr(graph.mul(x, c))], [arr(x)])
    (const,) = [ins for ins in plan.instrs if ins.op == "const"]
    assert const.attr == (float(c), dataio.expr_text(c))
    assert formulas(plan)[0][()] == sp.Symbol("x", real=True) * c


def test_formulas_rebuild_expressions_of_plain_symbols():
    x, y = graph.Leaf.new("x"), graph.Leaf.new("y")
    e = graph.piecewise((graph.call(sp.sin, x), graph.relation(sp.StrictLessThan, x, y)),
                        (graph.power(y, S.Half), S.true))
    plan = build_plan([arr(e), arr(graph.lincomb([(S(2), x)], sp.Rational(1, 3)))],
                      [arr(x), arr(y)])
    f0, f1 = formulas(plan)
    X, Y = sp.symbols("x y", real=True)
    assert f0[()] == sp.Piecewise((sp.sin(X), X < Y), (sp.sqrt(Y), True))
    assert f1[()] == 2 * X + sp.Rational(1, 3)


def test_plan_is_linear_in_a_deep_chain():
    x = graph.Leaf.new("x")
    a = x
    for _ in range(3000):  # a tree of 2**3000 terms if substituted, 3000 nodes as a DAG
        a = graph.add(graph.mul(a, a), x)
    plan = build_plan([arr(a)], [arr(x)])
    assert len(plan.instrs) <= 2 * 3000 + 2
    value = evaluate.evaluate_atoms([a], {x: np.array([0.0])})[0]
    assert value.shape == (1,)
