"""Archive: a compiled function as data -- its description checked, its pickled state, its
file.

A compiled function is made from its *fields* (:data:`FIELDS`, the keywords of
:class:`~symtape.codegen.runtime.CompiledFunction`): the plan, its name, dtype, options,
result structure, argument and result names, IR and object code. :func:`write` saves them
as a file of data only (strict JSON behind a checksummed header, the object code signed with
this user's cache secret) and :func:`read` takes them back from one, running nothing from
it. :func:`state` and :func:`restore` carry them through ``pickle``, Python's convention for
trusted transport (multiprocessing, dask): the pickled object code is used as it is.
"""

from __future__ import annotations

import base64
import binascii
import collections
import hashlib
import json
import math
import os
import threading
from pathlib import Path

import numpy as np

from symtape.base.errors import InvalidArgumentError, SerializationError
from symtape.base.lazy import LazyModule
from symtape.codegen import cache, jit, kernel
from symtape.codegen.ir import entry_symbol
from symtape.codegen.plan import ArgLayout, Instr, OutLayout, Plan

dataio = LazyModule("dataio", globals(), "symtape.io")
sp = LazyModule("sp", globals(), "sympy")
G = LazyModule("G", globals(), "symtape.element.graph")
lower = LazyModule("lower", globals(), "symtape.codegen.lower")

__all__ = ["FIELDS", "FLOAT_DTYPES", "RESTORE_KEEP", "RESTORE_LOADS", "check_structure",
           "read", "restore", "state", "write"]

#: The fields a compiled function is made from (its constructor's keywords).
FIELDS = ("plan", "name", "dtype", "fastmath", "threads", "structure", "input_names",
          "output_names", "ir", "obj")
#: The arithmetic types a compiled function computes in.
FLOAT_DTYPES = ("float64", "float32")
_FILE_MAGIC = b"SYMTAPEF"
_FILE_FORMAT = 2  # 1 was a pickle: such files are refused, never unpickled
_FILE_KIND = "symtape compiled function"
_STATE_FORMAT = 2  # 2: entry points return a status


# --------------------------------------------------------------------------------------------
# The description
# --------------------------------------------------------------------------------------------


def check_structure(structure, n: int):
    """The nesting of a result of ``n`` outputs: ``structure`` when its ints index each
    output exactly once (:class:`~symtape.base.errors.InvalidArgumentError` otherwise); by
    default the output itself for one output, else a tuple of them.

    >>> check_structure(None, 2), check_structure({"a": 1, "b": [0]}, 2)
    ((0, 1), {'a': 1, 'b': [0]})
    """
    if structure is None:
        return 0 if n == 1 else tuple(range(n))
    seen = sorted(_leaves(structure))
    if seen != list(range(n)):
        raise InvalidArgumentError(
            f"structure must index each of the {n} outputs exactly once, got {structure!r}"
        )
    return structure


def _leaves(structure) -> list:
    """The ints of a nested structure, in order (dicts by insertion order)."""
    if isinstance(structure, (bool, np.bool_)):
        raise InvalidArgumentError(f"structure leaves must be ints, got {structure!r}")
    if isinstance(structure, (int, np.integer)):
        return [int(structure)]
    if isinstance(structure, dict):
        return [i for v in structure.values() for i in _leaves(v)]
    if isinstance(structure, (list, tuple)):
        return [i for v in structure for i in _leaves(v)]
    raise InvalidArgumentError(
        f"structure must nest lists, tuples and dicts of ints, found {structure!r}"
    )


# --------------------------------------------------------------------------------------------
# Pickled state (trusted transport)
# --------------------------------------------------------------------------------------------


def state(fields: dict) -> dict:
    """What a compiled function pickles as: its fields, the format and this host.

    >>> sorted(state(dict.fromkeys(FIELDS)))[:3]
    ['dtype', 'fastmath', 'format']
    """
    return {"format": _STATE_FORMAT, **{k: fields[k] for k in FIELDS},
            "host": jit.host().signature()}


#: Compiled functions unpickled in this process, by their state's digest (the last
#: RESTORE_KEEP of them): a function sent with every task (dask, multiprocessing) is loaded
#: once per process, not once per task.
_RESTORED: collections.OrderedDict = collections.OrderedDict()
RESTORE_KEEP = 32
#: How many unpickled functions this process has loaded (the others were found above).
RESTORE_LOADS = [0]
_RESTORE_LOCK = threading.Lock()


def restore(pickled: dict, build):
    """``build(**fields)`` of a pickled :func:`state`: the stored object code when it was
    made for this host, else a fresh compile of the stored IR (pickles are trusted
    transport); the same function again when this process has already restored it and it is
    alive.

    >>> try:
    ...     restore({"format": -1}, dict)
    ... except SerializationError as exc:
    ...     print(exc)
    unsupported compiled-function format
    """
    if not isinstance(pickled, dict) or pickled.get("format") != _STATE_FORMAT:
        raise SerializationError("unsupported compiled-function format")
    digest = hashlib.sha256(repr(sorted(
        (k, v) for k, v in pickled.items() if k not in ("plan", "obj"))).encode()).hexdigest()
    with _RESTORE_LOCK:
        found = _RESTORED.get(digest)
        if found is not None:
            _RESTORED.move_to_end(digest)
            return found
        same_host = tuple(pickled["host"]) == jit.host().signature()
        obj = pickled["obj"] if same_host else jit.object_code(pickled["ir"])
        RESTORE_LOADS[0] += 1
        fn = _RESTORED[digest] = build(**{k: pickled[k] for k in FIELDS if k != "obj"}, obj=obj)
        while len(_RESTORED) > RESTORE_KEEP:
            _RESTORED.popitem(last=False)
        return fn


# --------------------------------------------------------------------------------------------
# Files (data only)
# --------------------------------------------------------------------------------------------


def write(fields: dict, path: str | os.PathLike) -> None:
    """Writes the fields of a straight-line compiled function to ``path`` as data only: its
    plan, layout, names, IR and object code, the code signed with this user's cache secret
    (so :func:`read` by the same user on the same machine reuses it).

    >>> import tempfile
    >>> from symtape.element import graph
    >>> from symtape.codegen.runtime import compile_atoms
    >>> x = graph.Leaf.new("x")
    >>> f = compile_atoms([graph.mul(x, x)], [x], name="square")
    >>> path = os.path.join(tempfile.mkdtemp(), "square.st")
    >>> f.save(path)  # (through write)
    >>> read(path)["name"]
    'square'
    """
    mac = cache.sign(*_object_parts(fields["ir"], fields["obj"]))
    doc = {
        "type": _FILE_KIND,
        "name": fields["name"],
        "dtype": fields["dtype"],
        "fastmath": fields["fastmath"],
        "threads": fields["threads"],
        "structure": dataio.encode_value(fields["structure"]),
        "input_names": list(fields["input_names"]),
        "output_names": list(fields["output_names"]),
        "plan": _plan_doc(fields["plan"]),
        "ir": fields["ir"],
        "host": list(jit.host().signature()),
        "object": base64.b64encode(fields["obj"]).decode("ascii"),
        "mac": None if mac is None else mac.hex(),
    }
    blob = dataio.dump_document(doc, _FILE_MAGIC, _FILE_FORMAT)
    cache.atomic_write(Path(path), blob)


def _object_parts(ir_text: str, obj: bytes) -> tuple:
    """What the MAC of a saved function's object code covers: the IR, the host and compiler
    (through the cache key) and the code itself."""
    return ("symtape-saved-object", jit.cache_key(ir_text), obj)


def read(path: str | os.PathLike) -> dict:
    """The fields of the compiled function saved at ``path``, running nothing from the file.

    The file is strict JSON behind a checksummed header. Its plan is checked (op names, arity
    and argument kinds, references to earlier values, input and output layouts, constants
    equal to their exact expressions) and the LLVM IR is generated again from it; the stored
    IR is never compiled. The stored object code is used only when it carries a valid MAC
    made with this user's cache secret, was made for this host and from the IR just
    generated, and passes :func:`~symtape.codegen.jit.check_object`; otherwise the code comes
    from the cache or a compile. Anything malformed raises
    :class:`~symtape.base.errors.SerializationError` naming the file and the fault.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "junk.st")
    >>> with open(path, "wb") as fh:
    ...     _ = fh.write(b"junk")
    >>> try:
    ...     read(path)
    ... except SerializationError as exc:
    ...     print("not a symtape compiled function" in str(exc))
    True
    """
    what = repr(str(path))
    doc = dataio.read_document(path, _FILE_MAGIC, _FILE_FORMAT, _FILE_KIND,
                               _FILE_MAGIC + (1).to_bytes(4, "little"), what)
    with dataio.file_budget(what):  # all its exact constants, checked in about a second
        return _from_doc(doc, what)


_DOC_KEYS = ("type", "name", "dtype", "fastmath", "threads", "structure", "input_names",
             "output_names", "plan", "ir", "host", "object", "mac")


def _from_doc(doc: dict, what: str) -> dict:
    d = dataio.record(doc, what, _DOC_KEYS)
    if d["type"] != _FILE_KIND:
        raise SerializationError(f"{what}: type {str(d['type'])[:40]!r} is not {_FILE_KIND!r}")
    name = dataio.expect(d["name"], str, f"{what}: name")
    dtype = dataio.expect(d["dtype"], str, f"{what}: dtype")
    if dtype not in FLOAT_DTYPES:
        raise SerializationError(f"{what}: dtype {dtype[:20]!r} is not one of {FLOAT_DTYPES}")
    fastmath = dataio.expect(d["fastmath"], bool, f"{what}: fastmath")
    threads = d["threads"]
    if threads is not None:
        threads = dataio.expect_int(threads, f"{what}: threads", 1)
    plan = _plan_from(d["plan"], f"{what}: plan")
    try:
        structure = check_structure(
            dataio.decode_value(d["structure"], f"{what}: structure"), len(plan.outputs))
    except InvalidArgumentError as exc:
        raise SerializationError(f"{what}: {exc}") from None
    input_names = _names_from(d["input_names"], len(plan.inputs), f"{what}: input_names")
    output_names = _names_from(d["output_names"], len(plan.outputs), f"{what}: output_names")
    text = kernel.render(plan, entry_symbol(name), dtype, fastmath)
    obj = _trusted_object(d, text, what)
    return {"plan": plan, "name": name, "dtype": dtype, "fastmath": fastmath,
            "threads": threads, "structure": structure, "input_names": input_names,
            "output_names": output_names, "ir": text,
            "obj": obj if obj is not None else jit.object_code(text)}


def _trusted_object(d: dict, expected_ir: str, what: str) -> bytes | None:
    """The file's object code when this user signed it for this host and this very IR."""
    stored_ir = dataio.expect(d["ir"], str, f"{what}: ir")
    host = tuple(dataio.expect(h, str, f"{what}: host")
                 for h in dataio.expect_list(d["host"], f"{what}: host", 16))
    text = dataio.expect(d["object"], str, f"{what}: object")
    mac = d["mac"] if d["mac"] is None else dataio.expect(d["mac"], str, f"{what}: mac")
    try:
        obj = base64.b64decode(text.encode("ascii"), validate=True)
        mac = None if mac is None else bytes.fromhex(mac)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise SerializationError(f"{what}: object or mac is not base64/hex text") from None
    if mac is None or stored_ir != expected_ir or host != jit.host().signature():
        return None
    if not cache.verify(mac, *_object_parts(expected_ir, obj)) or jit.check_object(obj) is not None:
        return None
    return obj


def _names_from(node, n: int, where: str) -> tuple:
    names = dataio.expect_list(node, where)
    if len(names) != n:
        raise SerializationError(f"{where}: {len(names)} names for {n} arrays")
    return tuple(nm if nm is None else dataio.expect(nm, str, where) for nm in names)


# --------------------------------------------------------------------------------------------
# Plans as data
# --------------------------------------------------------------------------------------------

_MAX_DIM = 1 << 31


def _plan_doc(plan: Plan) -> dict:
    instrs = []
    for ins in plan.instrs:
        if ins.op == "const":
            value, text = ins.attr
            tagged = value if isinstance(value, bool) else float(value).hex()
            instrs.append(["const", [], [tagged, json.loads(text)]])
        elif ins.op == "input":
            instrs.append(["input", [], list(ins.attr)])
        else:
            instrs.append([ins.op, list(ins.args), None])
    return {
        "instrs": instrs,
        "inputs": [{"shape": list(a.shape), "names": list(a.names)} for a in plan.inputs],
        "outputs": [{"shape": list(o.shape), "refs": list(o.refs), "boolean": o.boolean}
                    for o in plan.outputs],
    }


def _plan_from(node, where: str) -> Plan:
    """A plan from its saved form, every expectation of the kernel generator checked."""
    d = dataio.record(node, where, ("instrs", "inputs", "outputs"))
    inputs = tuple(_arg_layout(a, f"{where}: input {i}")
                   for i, a in enumerate(dataio.expect_list(d["inputs"], f"{where}: inputs")))
    instrs: list[Instr] = []
    for k, item in enumerate(dataio.expect_list(d["instrs"], f"{where}: instrs")):
        instrs.append(_instr(item, k, inputs, f"{where}: instruction {k}"))
    body = Plan(tuple(instrs), inputs, ())
    outputs = tuple(_out_layout(o, body, f"{where}: output {i}")
                    for i, o in enumerate(dataio.expect_list(d["outputs"], f"{where}: outputs")))
    return Plan(body.instrs, inputs, outputs)


def _shape(node, where: str) -> tuple:
    return tuple(dataio.expect_int(n, f"{where}: shape", 0, _MAX_DIM)
                 for n in dataio.expect_shape(node, f"{where}: shape"))


def _arg_layout(node, where: str) -> ArgLayout:
    d = dataio.record(node, where, ("shape", "names"))
    shape = _shape(d["shape"], where)
    names = tuple(dataio.expect(n, str, f"{where}: names")
                  for n in dataio.expect_list(d["names"], f"{where}: names"))
    if len(names) != math.prod(shape):
        raise SerializationError(f"{where}: {len(names)} leaf names for shape {shape}")
    return ArgLayout(shape, names)


def _instr(item, k: int, inputs: tuple, where: str) -> Instr:
    if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)):
        raise SerializationError(f"{where}: expected [op, args, attr]")
    op, args, attr = item
    args = dataio.expect_list(args, f"{where}: args")
    if op == "const":
        return Instr("const", (), _const_attr(attr, args, where))
    if op == "input":
        if args or not (isinstance(attr, list) and len(attr) == 2):
            raise SerializationError(f"{where}: an input is [\"input\", [], [arg, index]]")
        arg = dataio.expect_int(attr[0], f"{where}: argument", 0, len(inputs))
        flat = dataio.expect_int(attr[1], f"{where}: flat index", 0, len(inputs[arg].names))
        return Instr("input", (), (arg, flat))
    spec = lower.OPS.get(op)
    if spec is None:
        raise SerializationError(f"{where}: unknown op {op[:40]!r}")
    if attr is not None or len(args) != len(spec.args):
        raise SerializationError(f"{where}: {op} takes {len(spec.args)} arguments and no "
                                 f"attribute, got {len(args)} and {str(attr)[:40]}")
    refs = tuple(dataio.expect_int(a, f"{where}: argument", 0, k) for a in args)
    return Instr(op, refs, None)


def _const_attr(attr, args: list, where: str) -> tuple:
    if args or not (isinstance(attr, list) and len(attr) == 2):
        raise SerializationError(f"{where}: a constant is [\"const\", [], [value, expr]]")
    tagged, node = attr
    plain = dataio.number_value(node, f"{where}: constant")  # (no SymPy for plain numbers)
    exact, text = plain if plain is not None else _exact_constant(node, where)
    if isinstance(tagged, bool):
        value = tagged
    else:
        value = dataio.decode_value(["float", tagged], f"{where}: value")
    same = (value == exact or (isinstance(value, float) and isinstance(exact, float)
                               and math.isnan(value) and math.isnan(exact)))
    if not same or isinstance(value, bool) != isinstance(exact, bool):
        raise SerializationError(f"{where}: value {value!r} is not the value of its exact "
                                 f"expression {text[:40]} ({exact!r})")
    return (value, text)


def _exact_constant(node, where: str) -> tuple:
    """``(value, text)`` of a saved exact constant that is not a plain number (``pi / 4``)."""
    expr = dataio.decode_expr(node, f"{where}: constant")
    if not (isinstance(expr, sp.logic.boolalg.BooleanAtom) or expr.is_number) or expr.free_symbols:
        raise SerializationError(f"{where}: the constant {str(expr)[:40]} is not a number")
    try:
        with dataio.charged(f"{where}: constant"):
            exact = G.const_value(expr)
    except SerializationError:
        raise  # (the file's budget is spent: a ValueError, but no fault of this constant)
    except (ArithmeticError, TypeError, ValueError):
        raise SerializationError(f"{where}: the constant {str(expr)[:40]} has no double "
                                 "value") from None
    return exact, dataio.expr_text(expr)


def _out_layout(node, body: Plan, where: str) -> OutLayout:
    d = dataio.record(node, where, ("shape", "refs", "boolean"))
    shape = _shape(d["shape"], where)
    refs = tuple(dataio.expect_int(r, f"{where}: ref", 0, len(body.instrs))
                 for r in dataio.expect_list(d["refs"], f"{where}: refs"))
    if len(refs) != math.prod(shape):
        raise SerializationError(f"{where}: {len(refs)} values for shape {shape}")
    boolean = dataio.expect(d["boolean"], bool, f"{where}: boolean")
    if boolean != (bool(refs) and all(body.kind(r) == "b" for r in refs)):
        raise SerializationError(f"{where}: boolean flag {boolean} does not match its values")
    return OutLayout(shape, refs, boolean)
