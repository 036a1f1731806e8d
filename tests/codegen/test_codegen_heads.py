"""Every head of the lowering table, compiled and compared with the numpy interpreter."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from symtape.element import evaluate
from symtape.element import graph
from symtape.element import added_heads as F
from symtape.codegen import compile_atoms
from symtape.codegen.lower import HEADS

S = sp.S
BATCHES = (0, 1, 3, 1001)
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 3.0, -3.7, 1e-300, 1e300,
                    -1e300, 710.0, -745.5, 4503599627370497.0, 0.75, np.inf, -np.inf, np.nan])


def points(n_args: int, n: int, seed: int = 0) -> list[np.ndarray]:
    """``n`` points per argument: the special values (all pairs for two arguments), then
    random values of every magnitude."""
    rng = np.random.default_rng(seed)
    grids = np.meshgrid(*[SPECIAL] * n_args, indexing="ij")
    cols = [g.ravel() for g in grids]
    extra = max(0, n - len(cols[0]))
    cols = [np.concatenate([c, rng.standard_normal(extra) * 10.0 ** rng.uniform(-3, 3, extra)])
            for c in cols]
    return [c[:n] for c in cols]


def _leaves(n):
    return [graph.Leaf.new(name) for name in "xyz"[:n]]


def _unary(head):
    return lambda x: graph.call(head, x)


# name -> (number of inputs, builder of the output atom(s))
CASES = {
    "add": (2, lambda x, y: graph.lincomb([(S(2), x), (S(-3), y), (S.Half, graph.mul(x, y))],
                                          graph.number(1.5))),
    "add_symbolic_const": (1, lambda x: graph.lincomb([(sp.pi, x)], sp.sqrt(2))),
    "mul": (2, lambda x, y: graph.monomial(graph.number(2.5), [(x, S.One), (y, S.NegativeOne)])),
    "mul_powers": (2, lambda x, y: graph.monomial(S(-3), [(x, S(3)), (y, S(-2))])),
    "pow_int": (1, lambda x: [graph.power(x, S(k)) for k in (0, 1, 2, 3, 5, 16, 17, -1, -2,
                                                               -16, -17)]),
    "pow_float_int": (1, lambda x: graph.power(x, sp.Float(4.0))),
    "pow_sqrt": (1, lambda x: [graph.power(x, S.Half), graph.power(x, -S.Half)]),
    "pow_fraction": (1, lambda x: [graph.power(x, sp.Rational(1, 3)),
                                   graph.power(x, graph.number(2.5)),
                                   graph.power(x, sp.sqrt(2)), graph.power(x, sp.pi)]),
    "pow_general": (2, lambda x, y: graph.power(x, y)),
    "pow_const_base": (1, lambda x: [graph.power(graph.number(2.0), x), graph.power(sp.E, x)]),
    "exp": (1, _unary(sp.exp)),
    "log": (1, _unary(sp.log)),
    "log1p": (1, _unary(F.log1p)),
    "expm1": (1, _unary(F.expm1)),
    "sin": (1, _unary(sp.sin)),
    "cos": (1, _unary(sp.cos)),
    "tan": (1, _unary(sp.tan)),
    "asin": (1, _unary(sp.asin)),
    "acos": (1, _unary(sp.acos)),
    "atan": (1, _unary(sp.atan)),
    "sinh": (1, _unary(sp.sinh)),
    "cosh": (1, _unary(sp.cosh)),
    "tanh": (1, _unary(sp.tanh)),
    "asinh": (1, _unary(sp.asinh)),
    "acosh": (1, _unary(sp.acosh)),
    "atanh": (1, _unary(sp.atanh)),
    "erf": (1, _unary(sp.erf)),
    "atan2": (2, lambda y, x: graph.call(sp.atan2, y, x)),
    "abs": (1, _unary(sp.Abs)),
    "sign": (1, _unary(sp.sign)),
    "floor": (1, _unary(sp.floor)),
    "ceiling": (1, _unary(sp.ceiling)),
    "round_half_even": (1, _unary(F.RoundHalfEven)),
    "trunc": (1, _unary(F.Trunc)),
    "round_float32": (1, _unary(F.RoundFloat32)),
    "mod": (2, lambda x, y: graph.call(sp.Mod, x, y)),
    "heaviside": (2, lambda x, y: [graph.call(sp.Heaviside, x),
                                   graph.call(sp.Heaviside, x, S.Zero),
                                   graph.call(sp.Heaviside, x, y)]),
    "max": (2, lambda x, y: [graph.call(sp.Max, x, y), graph.call(sp.Max, x, y, S(1)),
                             graph.call(sp.Max, y, x)]),
    "min": (2, lambda x, y: [graph.call(sp.Min, x, y), graph.call(sp.Min, x, y, S(-1))]),
    "piecewise": (2, lambda x, y: [
        graph.piecewise((x, graph.relation(sp.StrictLessThan, x, S.Zero)),
                        (graph.mul(y, y), graph.relation(sp.StrictLessThan, x, y)),
                        (S.One, S.true)),
        graph.piecewise((y, graph.relation(sp.GreaterThan, x, y))),
    ]),
    "relations": (2, lambda x, y: [graph.relation(head, x, y) for head in (
        sp.StrictLessThan, sp.LessThan, sp.StrictGreaterThan, sp.GreaterThan, sp.Equality,
        sp.Unequality)]),
    "logic": (2, lambda x, y: [
        graph.logic(sp.And, graph.relation(sp.StrictLessThan, x, y),
                    graph.relation(sp.StrictGreaterThan, x, S.Zero)),
        graph.logic(sp.Or, graph.relation(sp.Equality, x, y),
                    graph.relation(sp.StrictGreaterThan, y, S.Zero)),
        graph.logic(sp.Not, graph.relation(sp.LessThan, x, y)),
    ]),
    "alias": (1, lambda x: [
        graph.alias(F.custom_head("clip"), [x], graph.call(sp.sin, x)),
        graph.alias(F.StopGradient, [x], graph.mul(x, x)),
    ]),
    "constants": (1, lambda x: [
        graph.add(x, c) for c in (sp.pi, sp.E, sp.sqrt(2), sp.exp(-S.Half), sp.Rational(1, 3),
                                  S.Infinity, S.NegativeInfinity, S.NaN, sp.EulerGamma)
    ]),
}


def _outputs(atoms):
    atoms = atoms if isinstance(atoms, list) else [atoms]
    return [np.array(a, dtype=object) for a in atoms]


@pytest.mark.parametrize("case", sorted(CASES))
def test_head_matches_evaluate(case, same):
    n_args, build = CASES[case]
    leaves = _leaves(n_args)
    outputs = _outputs(build(*leaves))
    f = compile_atoms(outputs, [np.array(v, dtype=object) for v in leaves])
    flat = [o[()] for o in outputs]
    for n in BATCHES:
        args = points(n_args, n)
        got = f(*args)
        got = list(got) if isinstance(got, tuple) else [got]
        want = evaluate.evaluate_atoms(flat, dict(zip(leaves, args)))
        for g, w in zip(got, want):
            assert g.shape == (n,)
            same(g, w)


def test_boolean_outputs_are_bool_arrays():
    x, y = _leaves(2)
    f = compile_atoms([np.array(graph.relation(sp.StrictLessThan, x, y), dtype=object)],
                      [np.array(x, dtype=object), np.array(y, dtype=object)])
    got = f(np.array([1.0, 3.0, np.nan]), 2.0)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, [True, False, False])
    assert f.outputs[0].dtype == "bool"


def test_constant_and_leaf_outputs():
    x = graph.Leaf.new("x")
    outs = [np.array([S.One, sp.pi, S.NaN], dtype=object), np.array(x, dtype=object),
            np.array(S.true, dtype=object)]
    f = compile_atoms(outs, [np.array(x, dtype=object)])
    a, b, c = f(np.array([5.0, 6.0]))
    np.testing.assert_array_equal(a[:, :2], [[1.0, np.pi]] * 2)
    assert np.isnan(a[:, 2]).all()
    np.testing.assert_array_equal(b, [5.0, 6.0])
    np.testing.assert_array_equal(c, [True, True])


def test_every_head_of_evaluate_is_lowered():
    missing = [h.__name__ for h in evaluate.HEADS if h not in HEADS]
    assert missing == []
