"""The shared IR shell (``codegen/ir.py``): straight-line kernels and loop nests are both
written as header, definitions, the same entry points and attributes."""

from __future__ import annotations

import numpy as np

from symtape.codegen import compile_atoms, ir, kernel, loops
from symtape.codegen.loops import Access, Block, Buffer, LoopPlan, layouts
from symtape.codegen.plan import build_plan
from symtape.element import graph


def obj(x):
    return np.array(x, dtype=object)


def square_plans():
    """x * x over 3 elements: as a straight-line plan and as a one-block loop plan."""
    xs = [graph.Leaf.new(f"x{i}") for i in range(3)]
    straight = build_plan([obj([graph.mul(x, x) for x in xs])], [obj(xs)])
    x = graph.Leaf.new("x")
    body = build_plan([obj(graph.mul(x, x))], [obj(x)])
    ins, outs = layouts([(3,)], [((3,), False)])
    looped = LoopPlan((Buffer("input", 0, 3), Buffer("output", 0, 3)),
                      (Block((3,), body, (Access(0, 0, (1,)),), (Access(1, 0, (1,)),)),),
                      ins, outs)
    return straight, looped


def test_both_renderers_write_the_shell():
    straight, looped = square_plans()
    for text, plan, kind in ((kernel.render(straight, "sq"), straight, "kernel"),
                             (loops.render(looped, "sq"), looped, "loop kernel")):
        lines = text.split("\n")
        assert lines[0].startswith(ir.header(kind, "sq", plan))
        assert text.count("\n".join(ir.entries(plan, "sq"))) == 1
        assert text.count("define internal i32 @body(") == 1
        assert text.count("\n".join(ir.body_tail())) == 1
        assert ir.ATTRIBUTES in lines[-4:] and lines[-1] == ""


def test_dense_entry_fixes_the_core_sizes_as_strides():
    a, b = np.empty((2, 3), dtype=object), np.empty(4, dtype=object)
    for idx in np.ndindex(a.shape):
        a[idx] = graph.Leaf.new(f"a{idx}")
    for i in range(4):
        b[i] = graph.Leaf.new(f"b{i}")
    plan = build_plan([obj([graph.add(a[0, 0], b[0])])], [a, b])
    text = "\n".join(ir.entries(plan, "f"))
    # sizes 6 (2 x 3), 4 and 1 (the output), in argument order
    assert "call i32 @body(i64 %n, ptr %p0, ptr %p1, ptr %p2, i64 6, i64 4, i64 1)" in text
    assert "call i32 @body(i64 %n, ptr %p0, ptr %p1, ptr %p2, i64 %s0, i64 %s1, i64 %s2)" in text
    assert ir.symbol_names("f") == ("f", "f_dense")


def test_entry_symbols_are_ascii_and_callable():
    x = graph.Leaf.new("x")
    f = compile_atoms([obj(graph.mul(x, x))], [obj(x)], name="λ x")
    assert ir.entry_symbol("λ x") == "st___x"
    assert "define i32 @st___x(" in f.llvm_ir and "define i32 @st___x_dense(" in f.llvm_ir
    np.testing.assert_array_equal(f(np.array([-2.0, 0.0, 3.0])), [4.0, 0.0, 9.0])
