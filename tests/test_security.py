"""Files and the code cache never run foreign code: data-only formats parsed against a whitelist,
plans checked and compiled again, cache entries authenticated and checked before LLVM sees them.

Every attack writes a marker file if its payload ever runs; each test checks the marker is absent.
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import json
import math
import os
import pickle
import struct
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import symtape as st
from symtape import ops
from symtape import io as dataio
from symtape.base import errors
from symtape.element import graph
from symtape.element import heads
from symtape.base import nest
from symtape.element import added_heads as F
from symtape.codegen import cache, compile_atoms, jit, kernel
from symtape.codegen.ir import entry_symbol
from symtape.codegen.plan import build_plan

ROOT = Path(__file__).resolve().parent.parent
SerializationError = errors.SerializationError


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, private code cache for one test."""
    path = tmp_path / "cache"
    monkeypatch.setenv("SYMTAPE_CACHE_DIR", str(path))
    return path


@pytest.fixture
def marker(tmp_path):
    """A file that a payload would create: it must still be missing when the test ends."""
    path = tmp_path / "payload-ran"
    yield path
    assert not path.exists(), "a payload from a file ran"


class Evil:
    """A pickle that runs code when loaded."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return exec, (f"open({self.path!r}, 'w').write('ran')",)


def python_code(path: Path) -> str:
    return f"__import__('builtins').exec(\"open({str(path)!r}, 'w').write('ran')\")"


def obj(x):
    return np.array(x, dtype=object)


def poly(name: str = "poly"):
    """``x**2 + 1`` compiled."""
    x = graph.Leaf.new("x")
    e = graph.add(graph.mul(x, x), sp.Integer(1))
    return compile_atoms([obj(e)], [obj(x)], input_names=["x"], name=name)


def seven_x_ir_and_object(name: str = "poly") -> tuple[str, bytes]:
    """The IR and object code of ``7 * x`` under the symbol names of :func:`poly`."""
    x = graph.Leaf.new("x")
    plan = build_plan([obj(graph.mul(x, sp.Integer(7)))], [obj(x)])
    ir = kernel.render(plan, entry_symbol(name))
    return ir, jit.compile_object(ir)


def read_doc(path: Path) -> dict:
    blob = path.read_bytes()
    return dataio.load_document(blob, blob[:8], 2, str(path), "symtape file")


def write_doc(path: Path, doc: dict, magic: bytes = b"SYMTAPEF") -> None:
    path.write_bytes(dataio.dump_document(doc, magic, 2))


# --------------------------------------------------------------------------------------------
# dataio: expressions
# --------------------------------------------------------------------------------------------


def _templates():
    """Every template of the op table, its derivatives and their derivatives."""
    seen = []
    for op in ops.OPS.values():
        if not isinstance(op, ops.Elementwise):
            continue
        seen.append((op.template, op.placeholders))
        for i in range(len(op.placeholders)):
            try:
                d = op.vjp_op(i)
            except errors.NonDifferentiableError:
                continue
            if d is None:
                continue
            seen.append((d.template, d.placeholders))
            for j in range(len(d.placeholders)):
                try:
                    d2 = d.vjp_op(j)
                except errors.NonDifferentiableError:
                    continue
                if d2 is not None:
                    seen.append((d2.template, d2.placeholders))
    return seen


def assert_exact(e) -> None:
    again = dataio.decode_expr(json.loads(json.dumps(dataio.encode_expr(e))))
    assert again == e and sp.srepr(again) == sp.srepr(e), (e, again)
    assert dataio.expr_from_text(dataio.expr_text(e)) == e


def test_every_template_and_derivative_round_trips_exactly():
    templates = _templates()
    assert len(templates) > 100
    for template, placeholders in templates:
        assert_exact(template)
        for p in placeholders:
            assert_exact(p)


X = sp.Symbol("x", real=True)


CONSTANTS_AND_HEADS = [
    sp.sqrt(2), sp.pi / 4, sp.sin(1), sp.log(3), sp.Rational(1, 3), sp.Rational(-7, 2),
    sp.Float(0.1), sp.Float(-2.5e-300), sp.Float(0.0), sp.Float("1.2345678901234567890123", 40),
    sp.Float(1.6732632423543772848170429916717), sp.oo, -sp.oo, sp.zoo, sp.nan, sp.true,
    sp.false, sp.E, sp.EulerGamma, sp.GoldenRatio, sp.Catalan, sp.exp(2), sp.acosh(2),
    sp.asin(sp.Rational(1, 3)), sp.erf(1), sp.cos(sp.pi / 5), sp.Integer(-7),
    sp.Integer(10**60), graph.number(0.1), graph.number(float("inf")),
    sp.Piecewise((X, X < 1), (0, True)), sp.Max(X, 1), sp.Heaviside(X, 0), sp.Mod(X, 3),
    sp.And(X < 1, X > 0), sp.Or(X < 1, X > 2), sp.Not(X < 1), sp.Eq(X, 1, evaluate=False),
    sp.Ne(X, 2), sp.ITE(X <= 1, X <= 2, X >= 0), F.log1p(X), F.expm1(X), F.RoundHalfEven(X),
    F.Trunc(X), F.RoundFloat32(X), F.StopGradient(X), sp.atan2(X, 2), sp.Symbol("b"),
    sp.Symbol("p", positive=True, integer=True), sp.Pow(X, -1, evaluate=False),
    sp.Add(X, 1, X, evaluate=False),
]


@pytest.mark.parametrize("e", CONSTANTS_AND_HEADS, ids=str)
def test_constants_and_heads_round_trip_exactly(e):
    assert_exact(e)


@pytest.mark.parametrize("e", [e for e in CONSTANTS_AND_HEADS if not e.free_symbols] + [
    sp.Float(5e-324), sp.Float(-1.5), sp.Integer(2**53), sp.Integer(2**53 + 1),
    sp.Rational(1, 2**53 + 1), sp.Float(2.0**1023), sp.Float("1e-400"), sp.Float("1e400"),
], ids=str)
def test_plain_numbers_read_without_sympy_as_sympy_reads_them(e):
    """Compiled files read their plain constants without SymPy (``dataio.number_value``):
    the same double and text as decoding them, and None (decode them) for the rest."""
    plain = dataio.number_value(dataio.encode_expr(e))
    exact_double = isinstance(e, sp.Float) and sp.Rational(e) == sp.Rational(float(e)) and \
        math.isfinite(float(e))
    assert (plain is not None) == (
        e in (sp.true, sp.false, sp.oo, -sp.oo, sp.nan) or exact_double or
        isinstance(e, sp.Rational) and max(abs(e.p), e.q) <= 2**53)
    if plain is not None:
        value, text = plain
        want = graph.const_value(e)
        assert text == dataio.expr_text(e)
        assert type(value) is type(want)
        assert value == want or math.isnan(value) and math.isnan(want)


@pytest.mark.parametrize("node, pattern", [
    (["Rational", 2, 4], "lowest terms"), (["Rational", 1, 1], "lowest terms"),
    (["Float", 0, 2, 0, 2, 53], "normalised"), (["Integer", 1.5], "Integer"),
    (["oo", 1], "takes 0 fields"), (["Integer"], "takes 1 fields"),
])
def test_plain_numbers_are_checked_as_decoding_checks_them(node, pattern):
    for read in (dataio.number_value, dataio.decode_expr):
        with pytest.raises(SerializationError, match=pattern):
            read(node)


def test_the_whitelist_covers_every_head_the_graph_can_hold():
    saved = set(dataio.HEADS.values())
    assert set(heads.NUMPY) <= saved
    assert {F.log1p, F.expm1, F.RoundHalfEven, F.Trunc, F.RoundFloat32, F.StopGradient} <= saved


@pytest.mark.parametrize("node, pattern", [
    (["__import__", ["Integer", 1]], "unknown head '__import__'"),
    (["eval", ["Symbol", "x", {}]], "unknown head 'eval'"),
    (["Function", ["Symbol", "x", {}]], "unknown head 'Function'"),
    ("Integer(1)", "malformed node"),
    ("__import__('os').system('true')", "malformed node"),
    ([], "malformed node"),
    ([1, 2], "malformed node"),
    ({"head": "Add"}, "malformed node"),
    (["Integer", "1"], "expected an integer"),
    (["Integer", True], "expected an integer"),
    (["Integer", 1, 2], "takes 1 fields"),
    (["Rational", 2, 4], "lowest terms"),
    (["Rational", 1, 0], "lowest terms"),
    (["Float", 0, 2, 0, 2, 53], "normalised"),
    (["Float", 0, 1, 0, 1, 0], "normalised"),
    (["Float", 0, 1, 0, 9, 53], "normalised"),
    (["Symbol", "x", {"evil": True}], "malformed assumptions"),
    (["Symbol", "x", {"real": "yes"}], "malformed assumptions"),
    (["Symbol", 3, {}], "name must be a string"),
    (["Piecewise", ["Integer", 1]], "ExprCondPairs"),
    (["Add", ["ExprCondPair", ["Integer", 1], ["true"]]], "only in a Piecewise"),
    (["sin", ["Integer", 1], ["Integer", 2]], "takes 1 operands"),
    (["Pow", ["Integer", 1]], "takes 2 operands"),
    (["Add"], "needs operands"),
    (["pi", ["Integer", 1]], "takes 0 fields"),
])
def test_decoding_refuses_anything_outside_the_whitelist(node, pattern):
    with pytest.raises(SerializationError, match=pattern):
        dataio.decode_expr(node)


def test_decoding_has_a_depth_limit():
    node = ["Symbol", "x", {}]
    for _ in range(dataio.MAX_DEPTH + 5):
        node = ["sin", node]
    with pytest.raises(SerializationError, match="deeper"):
        dataio.decode_expr(node)
    deep = "[" * 200_000 + "]" * 200_000
    with pytest.raises(SerializationError, match="malformed"):
        dataio.expr_from_text(deep)


def test_graph_symbols_and_user_heads_are_not_encoded():
    with pytest.raises(SerializationError, match="Leaf"):
        dataio.encode_expr(graph.Leaf.new("x"))
    with pytest.raises(SerializationError, match="clip"):
        dataio.encode_expr(F.custom_head("clip")(X))
    with pytest.raises(SerializationError, match="Dummy"):
        dataio.encode_expr(sp.Dummy("d"))


# --------------------------------------------------------------------------------------------
# dataio: arrays, values, documents
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("a", [
    np.array([True, False]), np.arange(6, dtype=np.int32).reshape(2, 3),
    np.array([-(2**62), 5], dtype=np.int64), np.array([1.5, np.nan, -np.inf], np.float32),
    np.array(3.25), np.zeros((0, 4)), np.arange(12.0).reshape(3, 4)[:, ::2],
    np.array([1.0, 2.0], dtype=">f8"),
], ids=lambda a: f"{a.dtype}{a.shape}")
def test_arrays_round_trip(a):
    back = dataio.decode_array(json.loads(json.dumps(dataio.encode_array(a))))
    assert back.dtype == a.dtype.newbyteorder("=") and back.shape == a.shape
    np.testing.assert_array_equal(back, a)
    assert back.flags.writeable


@pytest.mark.parametrize("node, pattern", [
    ({"dtype": "object", "shape": [1], "data": ""}, "dtype"),
    ({"dtype": "<f8", "shape": [1], "data": ""}, "dtype"),
    ({"dtype": "float64", "shape": [2], "data": "AAAAAAAA8D8="}, "8 bytes"),
    ({"dtype": "float64", "shape": [-1], "data": ""}, "out of range"),
    ({"dtype": "float64", "shape": [1], "data": "!!"}, "base64"),
    ({"dtype": "float64", "shape": [1]}, "missing 'data'"),
    ({"dtype": "float64", "shape": [], "data": "AAAAAAAA8D8=", "code": "x"}, "unexpected"),
])
def test_malformed_arrays_are_refused(node, pattern):
    with pytest.raises(SerializationError, match=pattern):
        dataio.decode_array(node)


def test_values_round_trip_exactly():
    value = {
        "key": (slice(1, None, -2), Ellipsis, None, np.array([0, 2])),
        3: [1, 0.1, -0.0, math.inf, -math.inf, True, "s", np.dtype("float32")],
        "scalars": (np.float64(0.5), np.int32(-3), np.bool_(True), np.float32(1.25)),
    }
    back = dataio.decode_value(json.loads(json.dumps(dataio.encode_value(value))))
    assert list(back) == ["key", 3, "scalars"]
    assert back["key"][:3] == (slice(1, None, -2), Ellipsis, None)
    np.testing.assert_array_equal(back["key"][3], [0, 2])
    assert back[3][:2] == [1, 0.1] and math.copysign(1, back[3][2]) == -1
    assert back[3][3:] == [math.inf, -math.inf, True, "s", np.dtype("float32")]
    assert [type(s) for s in back["scalars"]] == [np.float64, np.int32, np.bool_, np.float32]
    nan = dataio.decode_value(dataio.encode_value(math.nan))
    assert math.isnan(nan)


@pytest.mark.parametrize("node, pattern", [
    (["pickle", "gASV"], "unknown value tag 'pickle'"),
    (["float", "__import__('os')"], "not a hex float"),
    (["float", 1.5], "not a hex float"),
    (["dtype", "object"], "not one of"),
    (["dict", [[True, ["none"]]]], "not a str or int"),
    (["dict", [["a", ["none"]], ["a", ["none"]]]], "twice"),
    (["slice", [["none"]]], "3 parts"),
    (["int", 1.0], "expected an integer"),
    ("None", "malformed value"),
])
def test_malformed_values_are_refused(node, pattern):
    with pytest.raises(SerializationError, match=pattern):
        dataio.decode_value(node)


def test_values_outside_the_tags_are_not_saved():
    with pytest.raises(SerializationError, match="function"):
        dataio.encode_value(lambda: 0)
    with pytest.raises(SerializationError, match="dict key"):
        dataio.encode_value({(1, 2): 3})


def test_documents_are_strict_json_behind_a_checked_frame():
    magic = b"SYMTEST\n"
    blob = dataio.dump_document({"a": [1, "b"]}, magic, 3)
    assert dataio.load_document(blob, magic, 3, "doc", "test") == {"a": [1, "b"]}

    def framed(payload: bytes, version: int = 3) -> bytes:
        return cache.frame(magic, payload, version)

    cases = [
        (b"junk", "not a test"),
        (dataio.dump_document({}, b"OTHERMG\n", 3), "not a test"),
        (dataio.dump_document({}, magic, 2), "format 2"),
        (blob[:-1], "corrupt"),
        (blob[:-1] + b"]", "corrupt"),
        (framed(b'{"a": NaN}'), "NaN"),
        (framed(b'{"a": Infinity}'), "Infinity"),
        (framed(b'{"a": 1, "a": 2}'), "duplicate"),
        (framed(b"\xff\xfe"), "UTF-8"),
        (framed(b"[1, 2]"), "not a JSON object"),
        (framed(b"{" + b'"a":[' * 100_000), "malformed"),
        (framed(pickle.dumps({"a": 1})), "malformed"),
    ]
    for bad, pattern in cases:
        with pytest.raises(SerializationError, match=pattern):
            dataio.load_document(bad, magic, 3, "doc", "test")


# --------------------------------------------------------------------------------------------
# st.load: compiled functions
# --------------------------------------------------------------------------------------------


def test_a_malicious_pickle_is_never_unpickled(tmp_path, marker):
    payload = pickle.dumps(Evil(marker))
    live = tmp_path / "live"
    pickle.loads(pickle.dumps(Evil(live)))
    assert live.exists()  # the payload is real: unpickling it would have run it
    path = tmp_path / "evil.st"
    for version, pattern in [(2, "malformed"), (1, "format 1, a pickle")]:
        path.write_bytes(cache.frame(b"SYMTAPEF", payload, version))
        with pytest.raises(SerializationError, match=pattern):
            st.load(path)


def test_saved_functions_round_trip(tmp_path):
    x = st.symbol("x", shape=(2,))
    w = st.symbol("w")
    outputs = {"poly": (x[0] * w + st.sin(x[1]), st.exp(-x * w)),
               "flags": [x > 0, st.logical_and(x[0] < x[1], w > 0)],
               "pi": st.sqrt(st.constant(2.0)) * x[0] + np.pi / 4}
    for dtype in ("float64", "float32"):
        f = st.compile(outputs, [x, w], dtype=dtype, name="mixed fn")
        path = tmp_path / f"{dtype}.st"
        f.save(path)
        g = st.load(path)
        args = (np.array([[0.5, -1.0], [2.0, 3.0]]), np.array(1.5))
        want, got = f(*args), g(*args)
        assert set(got) == {"poly", "flags", "pi"}
        assert isinstance(got["poly"], tuple) and isinstance(got["flags"], list)
        for a, b in zip(nest.flatten(want), nest.flatten(got)):
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
        assert got["flags"][0].dtype == bool and got["poly"][0].dtype == np.dtype(dtype)
        assert g.inputs == f.inputs and g.outputs == f.outputs and g.name == "mixed fn"
        assert g.llvm_ir == f.llvm_ir and g.c_source() == f.c_source()
        assert str(g.formula()) == str(f.formula())


def test_a_file_from_this_user_reuses_its_object_code(tmp_path):
    f = poly()
    path = tmp_path / "f.st"
    f.save(path)
    before = jit.STATS.snapshot()
    g = st.load(path)
    after = jit.STATS.snapshot()
    assert after["compiles"] == before["compiles"]
    assert after["cache_hits"] + after["cache_misses"] == (
        before["cache_hits"] + before["cache_misses"])  # the MAC, not the cache, vouched
    assert float(g(3.0)) == 10.0


def test_a_file_signed_by_another_user_is_compiled_again(tmp_path, monkeypatch):
    f = poly()
    path = tmp_path / "f.st"
    f.save(path)
    monkeypatch.setenv("SYMTAPE_CACHE_DIR", str(tmp_path / "another-users-cache"))
    before = jit.STATS.compiles
    assert float(st.load(path)(3.0)) == 10.0
    assert jit.STATS.compiles == before + 1


@pytest.mark.parametrize("forge", ["keep-mac", "random-mac", "no-mac"])
def test_edited_ir_and_object_code_do_not_run(tmp_path, forge):
    f = poly()
    path = tmp_path / "f.st"
    f.save(path)
    doc = read_doc(path)
    ir, evil = seven_x_ir_and_object()
    evil_fn = jit.Engine(evil).function(f"{entry_symbol('poly')}_dense", None,
                                        ctypes.c_int64, ctypes.c_void_p)
    x, y = np.array([2.0]), np.zeros(1)
    evil_fn(1, (ctypes.c_void_p * 2)(x.ctypes.data, y.ctypes.data))
    assert y[0] == 14.0  # the replacement is working code for the same entry points
    doc["ir"] = ir
    doc["object"] = base64.b64encode(evil).decode()
    doc["mac"] = {"keep-mac": doc["mac"], "random-mac": os.urandom(32).hex(),
                  "no-mac": None}[forge]
    write_doc(path, doc)
    g = st.load(path)
    np.testing.assert_array_equal(g(np.array([0.0, 2.0, -3.0])), [1.0, 5.0, 10.0])
    assert g.llvm_ir == f.llvm_ir


def test_replaced_object_code_with_the_original_ir_does_not_run(tmp_path):
    f = poly()
    path = tmp_path / "f.st"
    f.save(path)
    doc = read_doc(path)
    doc["object"] = base64.b64encode(seven_x_ir_and_object()[1]).decode()
    write_doc(path, doc)
    assert float(st.load(path)(2.0)) == 5.0


def _mutations():
    def instr(k, value):
        return lambda d: d["plan"]["instrs"].__setitem__(k, value)

    return {
        "unknown op": (instr(1, ["system", [0, 0], None]), "unknown op 'system'"),
        "later argument": (instr(1, ["mul", [0, 5], None]), "out of range"),
        "self argument": (instr(1, ["mul", [0, 1], None]), "out of range"),
        "arity": (instr(1, ["mul", [0], None]), "takes 2 arguments"),
        "op attribute": (instr(1, ["mul", [0, 0], "x"]), "no attribute"),
        "input range": (instr(0, ["input", [], [3, 0]]), "argument"),
        "input index": (instr(0, ["input", [], [0, 9]]), "flat index"),
        "constant value": (instr(2, ["const", [], ["0x1.8p+1", ["Integer", 1]]]),
                           "not the value"),
        "constant code": (instr(2, ["const", [], ["0x1.0p+0", "__import__('os')"]]),
                          "malformed node"),
        "constant head": (instr(2, ["const", [], ["0x1.0p+0", ["exec", ["Integer", 1]]]]),
                          "unknown head 'exec'"),
        "constant symbol": (instr(2, ["const", [], ["0x1.0p+0", ["Symbol", "x", {}]]]),
                            "not a number"),
        "constant kind": (instr(2, ["const", [], [True, ["Integer", 1]]]), "not the value"),
        "output ref": (lambda d: d["plan"]["outputs"][0].__setitem__("refs", [99]),
                       "out of range"),
        "output shape": (lambda d: d["plan"]["outputs"][0].__setitem__("shape", [2]),
                         "1 values for shape"),
        "boolean flag": (lambda d: d["plan"]["outputs"][0].__setitem__("boolean", True),
                         "boolean flag"),
        "input names": (lambda d: d["plan"]["inputs"][0].__setitem__("names", []),
                        "0 leaf names"),
        "structure": (lambda d: d.__setitem__("structure", ["int", 3]), "exactly once"),
        "dtype": (lambda d: d.__setitem__("dtype", "object"), "dtype"),
        "extra key": (lambda d: d.__setitem__("loader", "pickle"), "unexpected 'loader'"),
        "missing key": (lambda d: d.pop("plan"), "missing 'plan'"),
        "type": (lambda d: d.__setitem__("type", "other"), "is not"),
        "ir type": (lambda d: d.__setitem__("ir", 3), "ir: expected str"),
        "object text": (lambda d: d.__setitem__("object", "%%%"), "base64"),
    }


@pytest.mark.parametrize("mutation", list(_mutations()))
def test_malformed_plans_are_refused(tmp_path, marker, mutation):
    change, pattern = _mutations()[mutation]
    f = poly()
    path = tmp_path / "f.st"
    f.save(path)
    doc = read_doc(path)
    assert [i[0] for i in doc["plan"]["instrs"]] == ["input", "mul", "const", "add"]
    change(doc)
    write_doc(path, doc)
    with pytest.raises(SerializationError, match=pattern) as info:
        st.load(path)
    assert "f.st" in str(info.value)


def test_c_source_comments_cannot_be_closed_by_a_name():
    f = poly(name="x */ int evil(void) { return 0; } /*")
    head = f.c_source().splitlines()[0]
    assert head.count("*/") == 1 and head.endswith("*/")


def test_pickling_stays_trusted_transport():
    f = poly()
    g = pickle.loads(pickle.dumps(f))
    assert float(g(3.0)) == 10.0 and g.llvm_ir == f.llvm_ir


# --------------------------------------------------------------------------------------------
# st.saved_model
# --------------------------------------------------------------------------------------------


class Model:
    def __init__(self):
        self.w = st.Variable([0.5, -1.5, 2.0], name="w")
        self.steps = st.Variable(0, name="steps")

    @st.function(input_signature=[st.TensorSpec((4, 3))])
    def __call__(self, x):
        h = st.clip_by_value(x * self.w, -1.0, 1.0) + np.pi / 4 + st.sqrt(st.constant(2.0))
        picked = h[1:, ::2][..., None] * st.cast(st.constant([[1]]), "float64")
        total = st.reduce_sum(picked, axis=(0, 2)) + st.reduce_max(st.tanh(h), axis=1)[0]
        return {"total": total, "rows": (st.gather(x, [2, 0]), st.where(x > 0, x, 0.0 * x))}

    @st.function(input_signature=[st.TensorSpec((3,))])
    def step(self, g):
        self.w.assign_sub(0.5 * g)
        self.steps.assign_add(1)
        return st.reduce_sum(self.w ** 2)


def _flat(result) -> list:
    return [np.asarray(t.numpy()) for t in nest.flatten(result)]


def test_saved_model_round_trip_of_params_constants_and_updates(tmp_path):
    model = Model()
    st.saved_model.save(model, tmp_path)
    loaded = st.saved_model.load(tmp_path)
    x = np.linspace(-2.0, 2.0, 12).reshape(4, 3)
    original = model.__call__.python_function
    for a, b in zip(_flat(original(st.constant(x))), _flat(loaded(x))):
        np.testing.assert_allclose(b, a, rtol=1e-15)
    xv = st.Variable(x)
    with st.GradientTape() as t1:
        y1 = original(xv)["total"]
    with st.GradientTape() as t2:
        y2 = loaded(xv)["total"]
    np.testing.assert_allclose(t2.gradient(y2, xv).numpy(), t1.gradient(y1, xv).numpy(),
                               rtol=1e-15)
    loss = loaded.step(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(loaded.variables[0].numpy(), [0.0, -2.5, 0.5])
    assert int(loaded.variables[1].numpy()) == 1 and loaded.variables[1].dtype == np.int32
    assert float(loss) == pytest.approx(0.0 + 6.25 + 0.25)


def _saved(tmp_path) -> tuple[Path, dict]:
    class Affine:
        def __init__(self):
            self.w = st.Variable(2.0, name="w")

        @st.function(input_signature=[st.TensorSpec((2,))])
        def f(self, x):
            return st.sin(x * self.w) + st.sqrt(st.constant(2.0))

    st.saved_model.save(Affine(), tmp_path)
    path = tmp_path / "saved_model.symtape"
    return path, read_doc(path)


def test_an_old_pickled_saved_model_is_refused_unread(tmp_path, marker):
    payload = {"format": 1, "callable": False, "variables": [], "functions": {"f": [{
        "inputs": [0], "n_inputs": 1, "shapes": None, "variables": [], "ops": [],
        "constants": [(1, (), "<f8", [python_code(marker)], None)], "outputs": 1,
        "updates": []}]}}
    for body in (pickle.dumps(payload), pickle.dumps(Evil(marker))):
        blob = b"SYMTAPEM" + (1).to_bytes(2, "little") + hashlib.sha256(body).digest() + body
        (tmp_path / "saved_model.symtape").write_bytes(blob)
        with pytest.raises(SerializationError, match="format 1, a pickle"):
            st.saved_model.load(tmp_path)


def _program(doc: dict) -> dict:
    return doc["functions"]["f"][0]


def _saved_mutations(marker: Path):
    code = python_code(marker)

    def first(kind):
        return lambda d: next(o for o in _program(d)["ops"] if o["kind"] == kind)

    def op(which, **fields):
        return lambda d: first(which)(d).update(fields)

    return {
        "constant code": (lambda d: _program(d)["constants"][0].__setitem__("exprs", [code]),
                          "malformed node"),
        "constant head": (lambda d: _program(d)["constants"][0].__setitem__(
            "exprs", [["exec", ["Integer", 1]]]), "unknown head 'exec'"),
        "constant symbol": (lambda d: _program(d)["constants"][0].__setitem__(
            "exprs", [["Symbol", "x", {}]]), "not a constant"),
        "constant count": (lambda d: _program(d)["constants"][0].__setitem__("shape", [3]),
                           "1 expressions"),
        "constant dtype": (lambda d: _program(d)["constants"][0].__setitem__("dtype", "O"),
                           "dtype"),
        "op name": (op("op", name="__import__"), "unknown op '__import__'"),
        "op kind": (op("op", kind="pickle"), "unknown op kind 'pickle'"),
        "op params": (op("op", params=["pickle", "gASV"]), "unknown value tag"),
        "template code": (lambda d: _template(d).__setitem__("template", code),
                          "malformed node"),
        "template head": (lambda d: _template(d).__setitem__(
            "template", ["system", ["Symbol", "x", {"real": True}]]), "unknown head 'system'"),
        "template symbols": (lambda d: _template(d).__setitem__(
            "template", ["Symbol", "free", {}]), "not placeholders"),
        "undefined ref": (lambda d: _program(d)["ops"][0].__setitem__("in", [77]),
                          "read before it is defined"),
        "redefined ref": (lambda d: _program(d)["ops"][0].__setitem__("out", [0]),
                          "defined twice"),
        "variable index": (lambda d: _program(d)["variables"][0].__setitem__(1, 5),
                           "variable index"),
        "output ref": (lambda d: _program(d).__setitem__("outputs", ["int", 99]),
                       "read before it is defined"),
        "n_inputs": (lambda d: _program(d).__setitem__("n_inputs", 2), "n_inputs is 2"),
        "extra field": (lambda d: _program(d).__setitem__("eval", "x"), "unexpected 'eval'"),
        "variable value": (lambda d: d["variables"][0]["value"].__setitem__("dtype", "object"),
                           "dtype"),
    }


def _template(doc: dict) -> dict:
    for o in _program(doc)["ops"]:
        if o["kind"] == "template":
            return o
    raise AssertionError("the program has no template op")


@pytest.mark.parametrize("mutation", list(_saved_mutations(Path("m"))))
def test_crafted_saved_models_are_refused(tmp_path, marker, mutation):
    path, doc = _saved(tmp_path)
    if mutation.startswith("template"):
        # a template op: a derived op, as a gradient program holds
        _program(doc)["ops"].append({"kind": "template", "name": "t",
                                     "template": ["Symbol", "x", {"real": True}],
                                     "placeholders": [["Symbol", "x", {"real": True}]],
                                     "in": [0], "out": [1000]})
    change, pattern = _saved_mutations(marker)[mutation]
    change(doc)
    write_doc(path, doc, b"SYMTAPEM")
    with pytest.raises(SerializationError, match=pattern) as info:
        st.saved_model.load(tmp_path)
    assert "saved_model.symtape" in str(info.value)


def test_an_unchanged_document_still_loads(tmp_path):
    path, doc = _saved(tmp_path)
    write_doc(path, doc, b"SYMTAPEM")
    out = st.saved_model.load(tmp_path).f(np.array([0.25, 1.0]))
    np.testing.assert_allclose(out.numpy(), np.sin([0.5, 2.0]) + np.sqrt(2.0), rtol=1e-15)


# --------------------------------------------------------------------------------------------
# The code cache
# --------------------------------------------------------------------------------------------


def _ir_of_poly() -> str:
    x = graph.Leaf.new("x")
    plan = build_plan([obj(graph.add(graph.mul(x, x), sp.Integer(1)))], [obj(x)])
    return kernel.render(plan, entry_symbol("poly"))


def test_the_cache_is_private(cache_dir):
    poly()
    assert (cache_dir.stat().st_mode & 0o777) == 0o700
    assert ((cache_dir / "obj").stat().st_mode & 0o777) == 0o700
    assert ((cache_dir / "key").stat().st_mode & 0o777) == 0o600
    assert len((cache_dir / "key").read_bytes()) == 32


def test_a_planted_entry_is_recompiled_and_overwritten(cache_dir, marker):
    ir = _ir_of_poly()
    digest = jit.cache_key(ir)
    _, evil = seven_x_ir_and_object()
    entry = cache_dir / "obj" / f"{digest}.o"
    for planted in (cache.frame(b"SYMTOBJ\n", os.urandom(32) + evil, 2),
                    cache.frame(b"SYMTOBJ\n", evil, 1)):
        poly()  # makes the folder and the key
        entry.write_bytes(planted)
        assert cache.read(digest) is None
        before = jit.STATS.compiles
        f = poly()
        assert jit.STATS.compiles == before + 1
        np.testing.assert_array_equal(f(np.array([2.0, -1.0])), [5.0, 2.0])
        assert cache.read(digest) == f._obj != evil


def _corrupt_objects() -> dict:
    real = jit.compile_object(_ir_of_poly())
    wide = struct.calcsize("P") == 8
    shoff_at = 40 if wide else 32
    shoff = struct.unpack_from("<Q" if wide else "<I", real, shoff_at)[0]

    def patched(offset: int, fmt: str, value) -> bytes:
        b = bytearray(real)
        struct.pack_into(fmt, b, offset, value)
        return bytes(b)

    shentsize = 64 if wide else 40
    return {
        "random": os.urandom(len(real)),
        "empty": b"",
        "truncated": real[: len(real) // 2],
        "machine": patched(18, "<H", 0x1234),
        "class": patched(4, "B", 1 if wide else 2),
        "type": patched(16, "<H", 3),
        "section table": patched(shoff_at, "<Q" if wide else "<I", len(real)),
        "section count": patched(shoff_at + (20 if wide else 16), "<H", 60000),
        "section range": patched(shoff + shentsize + (24 if wide else 16),
                                 "<Q" if wide else "<I", len(real) * 4),
    }


@pytest.mark.skipif(sys.byteorder != "little" or "linux" not in sys.platform,
                    reason="ELF checks on little-endian Linux")
def test_check_object_finds_damage():
    assert jit.check_object(jit.compile_object(_ir_of_poly())) is None
    for kind, blob in _corrupt_objects().items():
        assert jit.check_object(blob) is not None, kind


@pytest.mark.skipif(sys.byteorder != "little" or "linux" not in sys.platform,
                    reason="ELF checks on little-endian Linux")
def test_damaged_entries_with_a_valid_mac_are_recompiled_not_loaded(cache_dir):
    script = textwrap.dedent("""
        import json, sys
        import numpy as np
        sys.path.insert(0, sys.argv[1])
        from test_security import _corrupt_objects, _ir_of_poly, poly
        from symtape.codegen import cache, jit
        digest = jit.cache_key(_ir_of_poly())
        results = {}
        for kind, blob in _corrupt_objects().items():
            assert cache.write(digest, blob) and cache.read(digest) == blob
            before = jit.STATS.compiles
            f = poly()
            results[kind] = [jit.STATS.compiles - before, float(f(3.0))]
        print(json.dumps(results))
    """)
    env = dict(os.environ, SYMTAPE_CACHE_DIR=str(cache_dir))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", script, str(ROOT / "tests")],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr  # a crash in LLVM's loader would fail here
    results = json.loads(done.stdout)
    assert set(results) == set(_corrupt_objects())
    assert all(r == [1, 10.0] for r in results.values()), results


def _cache_warnings(fn) -> list:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if issubclass(w.category, errors.CacheWarning)]


@pytest.mark.skipif(os.name != "posix", reason="ownership and modes are POSIX")
@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_an_open_cache_folder_is_not_used(tmp_path, monkeypatch, mode):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    monkeypatch.setenv("SYMTAPE_CACHE_DIR", str(shared))

    def twice():
        before = jit.STATS.compiles
        assert float(poly()(3.0)) == 10.0
        assert float(poly()(2.0)) == 5.0
        assert jit.STATS.compiles == before + 2  # nothing cached, nothing read

    found = _cache_warnings(twice)
    assert len(found) == 1 and "writable by group or others" in str(found[0].message)
    assert str(shared) in str(found[0].message)
    assert list(shared.iterdir()) == []
    assert not _cache_warnings(twice)  # once per process and folder


@pytest.mark.skipif(os.name != "posix", reason="ownership is POSIX")
def test_a_cache_folder_of_another_user_is_not_used(cache_dir, monkeypatch):
    cache_dir.mkdir(mode=0o700)
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)
    found = _cache_warnings(lambda: poly()(1.0))
    assert len(found) == 1 and "owned by user id" in str(found[0].message)
    assert isinstance(found[0].message, st.errors.SymtapeError)
    assert list(cache_dir.iterdir()) == []


@pytest.mark.skipif(os.name != "posix", reason="modes are POSIX")
@pytest.mark.parametrize("damage", ["mode", "size", "link"])
def test_a_bad_key_file_disables_the_cache(cache_dir, damage, tmp_path):
    (cache_dir / "obj").mkdir(parents=True, mode=0o700)
    os.chmod(cache_dir, 0o700)
    key = cache_dir / "key"
    if damage == "mode":
        key.write_bytes(os.urandom(32))
        os.chmod(key, 0o644)
    elif damage == "size":
        key.write_bytes(b"short")
        os.chmod(key, 0o600)
    else:
        target = tmp_path / "elsewhere"
        target.write_bytes(os.urandom(32))
        os.chmod(target, 0o600)
        key.symlink_to(target)
    before = jit.STATS.compiles
    found = _cache_warnings(lambda: poly()(1.0))
    assert len(found) == 1 and "key" in str(found[0].message)
    assert list((cache_dir / "obj").iterdir()) == []
    assert jit.STATS.compiles == before + 1


def test_a_missing_cache_folder_is_made_and_shared_by_processes(cache_dir):
    assert not cache_dir.exists()
    poly()
    key = (cache_dir / "key").read_bytes()
    cache._create_secret(cache_dir / "key")  # a second writer loses the race, keeps the key
    assert (cache_dir / "key").read_bytes() == key
    assert sorted(p.name for p in cache_dir.iterdir()) == ["key", "obj"]
