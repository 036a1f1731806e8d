"""The head table: every SymPy head an op's template brings into the element DAG, to third
derivatives, has one record with its numpy evaluation and lowering."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from symtape import ops
from symtape import io as dataio
from symtape.element import heads
from symtape.element import graph as G
from symtape.codegen import lower
from symtape.base.errors import NonDifferentiableError


def _templates(op: ops.Elementwise, order: int = 3) -> list:
    """The op's template op and its derivative template ops up to ``order``."""
    out, frontier = [op], [op]
    for _ in range(order):
        nxt = []
        for o in frontier:
            for i, p in enumerate(o.placeholders):
                if not p.is_real:
                    continue  # conditions: no derivative
                try:
                    d = o.vjp_op(i)
                except NonDifferentiableError:
                    continue
                if d is not None:
                    nxt.append(d)
        out.extend(nxt)
        frontier = nxt
    return out


def _dag_heads(op: ops.Elementwise) -> set:
    """Heads of the definitions the graph's builders make from ``op``'s template."""
    stand_ins = [G.Leaf.new(f"p{i}") if p.is_real else G.relation(
        sp.StrictGreaterThan, G.Leaf.new(f"q{i}"), G.ZERO) for i, p in
        enumerate(op.placeholders)]
    out = op._build_one(*stand_ins)
    atoms = [out] if G.is_symbolic(out) else []
    return {type(n.definition) for n in G.reachable(atoms, through_forward=True)
            if isinstance(n, G.Node)}


ELEMENTWISE = sorted(name for name, op in ops.OPS.items() if isinstance(op, ops.Elementwise))


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_every_head_to_order_3_has_a_record(name):
    for op in _templates(ops.OPS[name]):
        for head in _dag_heads(op):
            rec = heads.record(head)
            assert rec is not None, f"{op.name}: SymPy head {head.__name__} has no record"
            assert rec.numpy is not None or rec.lower.startswith("rule:"), rec
            assert lower.head_rule(head) is not None


def test_one_table_feeds_evaluation_lowering_and_files():
    for rec in heads.RECORDS:
        assert lower.HEADS[rec.cls] is not None
        assert dataio.HEADS[rec.name] is rec.cls
        if rec.numpy is not None:
            assert heads.NUMPY[rec.cls] is rec.numpy
    assert set(lower.HEADS) == set(heads.HEADS)


def test_numpy_evaluations_match_sympy():
    x = np.array([-1.5, -0.25, 0.5, 2.0])
    for head, fn in ((sp.tanh, np.tanh), (sp.erf, None), (sp.Abs, np.abs)):
        want = np.array([float(head(sp.Float(v))) for v in x])
        np.testing.assert_allclose(heads.HEADS[head].numpy(x), want, rtol=1e-15)


def test_ite_in_clip_derivatives_evaluates_and_compiles():
    import symtape as st

    op = ops.OPS["clip_by_value"].vjp_op(0)  # its template holds ITE(x <= hi, x <= lo, ...)
    syms = [st.symbol(n) for n in ("g", "x", "lo", "hi")]
    f = st.compile(op.bind(*syms), syms)
    for point in ((1.0, 0.5, -1.0, 2.0), (1.0, 3.0, -1.0, 2.0), (1.0, 0.5, 2.0, -1.0),
                  (2.0, 0.0, 0.0, 0.0)):
        leaves = [st.symbol(n, v) for n, v in zip(("g", "x", "lo", "hi"), point)]
        eager = float(op.bind(*leaves))
        assert float(f(*point)) == eager
        want = op.template.subs(dict(zip(op.placeholders, map(sp.Float, point))))
        assert eager == float(want)  # SymPy's own evaluation of the partial
