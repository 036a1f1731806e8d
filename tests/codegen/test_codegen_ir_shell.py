"""The shared IR shell (``codegen/ir.py``): straight-line kernels and loop nests are both
written as header, definitions, the same entry points and attributes; and the archive
(``codegen/archive.py``): a compiled function's fields through its file and its pickle."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from symtape.base.errors import InvalidArgumentError, SerializationError
from symtape.codegen import CompiledFunction, archive, compile_atoms, ir, jit, kernel, loops
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


# --------------------------------------------------------------------------------------------
# The archive: fields of a compiled function, its pickled state and its file
# --------------------------------------------------------------------------------------------


def pair():
    x, y = graph.Leaf.new("x"), graph.Leaf.new("y")
    less = graph.relation(sp.StrictLessThan, x, y)
    return compile_atoms([obj(graph.add(graph.mul(x, y), x)), obj(less)], [obj(x), obj(y)],
                         input_names=["x", "y"], output_names=["s", "less"],
                         structure={"s": 0, "less": [1]}, name="pair")


def test_a_file_gives_back_the_fields_and_reuses_its_signed_code(tmp_path):
    f = pair()
    f.save(tmp_path / "pair.st")
    before = jit.STATS.snapshot()
    fields = archive.read(tmp_path / "pair.st")
    after = jit.STATS.snapshot()
    looked_up = [s["cache_hits"] + s["cache_misses"] for s in (before, after)]
    assert after["compiles"] == before["compiles"] and looked_up[0] == looked_up[1]
    assert set(fields) == set(archive.FIELDS)
    assert fields["plan"] == f.plan and fields["ir"] == f.llvm_ir
    assert (fields["name"], fields["dtype"], fields["structure"]) == ("pair", "float64",
                                                                       {"s": 0, "less": [1]})
    assert fields["input_names"] == ("x", "y") and fields["output_names"] == ("s", "less")
    g = CompiledFunction(**fields)
    x, y = np.array([-1.0, 0.0, 2.0]), np.array([3.0, 0.0, -4.0])
    got = g(x, y)
    np.testing.assert_array_equal(got["s"], x * y + x)
    np.testing.assert_array_equal(got["less"][0], x < y)


def test_restore_builds_once_per_state():
    f = pair()
    _, (state,) = f.__reduce__()
    state = dict(state, name="pair_restored_once")  # a state this process has not restored
    loads = archive.RESTORE_LOADS[0]
    first = archive.restore(state, dict)
    assert archive.restore(state, dict) is first and archive.RESTORE_LOADS[0] == loads + 1
    assert set(first) == set(archive.FIELDS) and first["obj"] is state["obj"]
    with pytest.raises(SerializationError, match="unsupported compiled-function format"):
        archive.restore(dict(state, format=1), dict)


def test_structures_index_each_output_once():
    assert archive.check_structure(None, 1) == 0 and archive.check_structure(None, 3) == (0, 1, 2)
    assert archive.check_structure([{"a": 1}, (0,)], 2) == [{"a": 1}, (0,)]
    for bad in ([0, 0], [0], True, [0, 1.0], {"a": "0"}):
        with pytest.raises(InvalidArgumentError, match="structure"):
            archive.check_structure(bad, 2)
