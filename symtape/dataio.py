"""Data-only encodings for files: SymPy expressions, numpy arrays and parameter values as
JSON, inside a framed, checksummed document.

Nothing read here is ever evaluated. An expression is a nested list ``[head, *operands]``
whose head is looked up in a closed table (:data:`HEADS`: numbers, the constants symtape
folds to, symbols with their assumptions, and the heads a graph can hold); a value is a tagged
list (``["tuple", [...]]``, ``["float", "0x1.8p+1"]``, ``["ndarray", {...}]``); an array is
raw little-endian bytes of a whitelisted dtype. Anything else, or anything of the wrong shape,
raises :class:`~symtape.errors.SerializationError` naming what is wrong, before anything is
built from it. Floats are kept exactly (hex text for Python floats, the binary mantissa and
exponent for SymPy Floats), so a decoded expression is the encoded one, ``srepr`` and all.

>>> x = sp.Symbol("x", real=True)
>>> e = sp.sqrt(2) * sp.sin(x) + sp.Float(0.1)
>>> decode_expr(encode_expr(e)) == e
True
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import math
import re
import struct
from collections.abc import Callable

import numpy as np

from .errors import SerializationError
from .lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
H = LazyModule("H", globals(), "symtape.heads")
assumptions = LazyModule("assumptions", globals(), "sympy.core.assumptions")

__all__ = [  # noqa: F822 - HEADS: __getattr__
    "HEADS",
    "DTYPES",
    "MAX_DEPTH",
    "encode_expr",
    "decode_expr",
    "expr_text",
    "expr_from_text",
    "number_value",
    "encode_array",
    "decode_array",
    "encode_value",
    "decode_value",
    "dump_document",
    "load_document",
    "record",
    "expect",
    "expect_int",
    "expect_list",
]

# Nesting deeper than this (expressions, values, documents) is refused: no graph, template
# or parameter symtape writes comes near it, and it keeps decoding far from Python's stack.
MAX_DEPTH = 200
# Nodes per decoded expression: a guard against a small file that decodes to a huge tree.
MAX_NODES = 200_000
# SymPy Float precision (bits) and the exponent range accepted for a Float.
_MAX_PREC = 1 << 16
_MAX_EXP = 1 << 32

# --------------------------------------------------------------------------------------------
# Expressions: the closed table of heads
# --------------------------------------------------------------------------------------------


class _Tables:
    """The closed table of heads, built from SymPy and ``heads.py`` on first use (so that
    reading a file of plain numbers needs neither).

    ``atoms``: constants written as a bare head (``["pi"]``), the numbers a constant fold can
    give; ``heads``: function heads, written ``[name, *operands]`` -- the records of
    ``heads.py`` (arithmetic, elementary functions, comparisons, logic, symtape's own heads,
    ``Piecewise``) and ``Piecewise``'s pairs -- and the reverse maps of both."""

    def __init__(self) -> None:
        S = sp.S
        self.atoms: dict[str, sp.Basic] = {
            "pi": S.Pi,
            "E": S.Exp1,
            "EulerGamma": S.EulerGamma,
            "Catalan": S.Catalan,
            "GoldenRatio": S.GoldenRatio,
            "TribonacciConstant": S.TribonacciConstant,
            "oo": S.Infinity,
            "-oo": S.NegativeInfinity,
            "zoo": S.ComplexInfinity,
            "nan": S.NaN,
            "true": S.true,
            "false": S.false,
        }
        self.atom_names = {type(v): k for k, v in self.atoms.items()}
        self.pair = sp.functions.elementary.piecewise.ExprCondPair
        functions = tuple(r.cls for r in H.RECORDS) + (self.pair,)
        self.heads: dict[str, type] = {cls.__name__: cls for cls in functions}
        self.head_names: dict[type, str] = {cls: name for name, cls in self.heads.items()}


@functools.cache
def _tables() -> _Tables:
    return _Tables()


def __getattr__(name: str):
    if name == "HEADS":  # ``name -> SymPy head`` of saved expressions, built on first use
        return _tables().heads
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def encode_expr(expr) -> list:
    """``expr`` as nested lists of JSON values (raises ``SerializationError`` for a head that
    is not in :data:`HEADS`, or a symbol of a subclass such as a graph leaf).

    >>> encode_expr(sp.Rational(1, 3) * sp.pi)
    ['Mul', ['Rational', 1, 3], ['pi']]
    >>> encode_expr(sp.Symbol("x", real=True) ** 2)
    ['Pow', ['Symbol', 'x', {'real': True}], ['Integer', 2]]
    """
    return _encode(sp.sympify(expr) if isinstance(expr, (bool, int)) else expr, 0, [0])


def _encode(e, depth: int, count: list) -> list:
    count[0] += 1
    if depth > MAX_DEPTH or count[0] > MAX_NODES:
        raise SerializationError(f"expression is too large to save (deeper than {MAX_DEPTH} "
                                 f"or more than {MAX_NODES} nodes)")
    cls = type(e)
    tables = _tables()
    atom = tables.atom_names.get(cls)
    if atom is not None:
        return [atom]
    if isinstance(e, sp.Integer):
        return ["Integer", int(e.p)]
    if isinstance(e, sp.Rational):
        return ["Rational", int(e.p), int(e.q)]
    if cls is sp.Float:
        sign, man, exp, bc = e._mpf_
        return ["Float", int(sign), int(man), int(exp), int(bc), int(e._prec)]
    if cls is sp.Symbol:
        given = getattr(e, "_assumptions_orig", None)
        if given is None:
            given = e.assumptions0  # older SymPy kept no record of the given ones
        return ["Symbol", e.name, {k: bool(v) for k, v in given.items()}]
    name = tables.head_names.get(cls)
    if name is None or not isinstance(e, sp.Basic):
        label = cls.__name__ if isinstance(e, sp.Basic) else f"Python {cls.__name__}"
        raise SerializationError(
            f"cannot save an expression with head {label!r} ({str(e)[:60]}): saved files "
            "hold only numbers, symbols and the heads listed in symtape.dataio.HEADS"
        )
    return [name] + [_encode(a, depth + 1, count) for a in e.args]


def decode_expr(node, where: str = "expression"):
    """The SymPy expression of a node made by :func:`encode_expr`; nothing is evaluated: heads
    come from :data:`HEADS`, and anything else raises ``SerializationError`` naming ``where``.

    >>> decode_expr(["Add", ["Integer", 1], ["Symbol", "y", {}]])
    y + 1
    >>> decode_expr(["__import__", ["Integer", 1]])
    Traceback (most recent call last):
    ...
    symtape.errors.SerializationError: expression: unknown head '__import__'
    """
    return _decode(node, where, 0, [0])


def _decode(node, where: str, depth: int, count: list):
    count[0] += 1
    if depth > MAX_DEPTH or count[0] > MAX_NODES:
        raise SerializationError(f"{where}: nested deeper than {MAX_DEPTH} or larger than "
                                 f"{MAX_NODES} nodes")
    if not isinstance(node, list) or not node or not isinstance(node[0], str):
        raise SerializationError(f"{where}: malformed node {_show(node)} (expected a list "
                                 "starting with a head name)")
    head, args = node[0], node[1:]
    tables = _tables()
    atom = tables.atoms.get(head)
    if atom is not None:
        _arity(where, head, args, 0)
        return atom
    number = _NUMBERS.get(head)
    if number is not None:
        return number(where, args)
    cls = tables.heads.get(head)
    if cls is None:
        raise SerializationError(f"{where}: unknown head {head[:40]!r}")
    operands = [_decode(a, where, depth + 1, count) for a in args]
    return _build(where, head, cls, operands)


def _show(node) -> str:
    text = json.dumps(node)[:60] if _jsonable(node) else type(node).__name__
    return text


def _jsonable(node) -> bool:
    try:
        json.dumps(node)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _arity(where: str, head: str, args: list, n: int) -> None:
    if len(args) != n:
        raise SerializationError(f"{where}: {head} takes {n} fields, got {len(args)}")


def _integer_field(where: str, args: list) -> int:
    _arity(where, "Integer", args, 1)
    return expect_int(args[0], f"{where}: Integer")


def _rational_fields(where: str, args: list) -> tuple:
    _arity(where, "Rational", args, 2)
    p = expect_int(args[0], f"{where}: Rational numerator")
    q = expect_int(args[1], f"{where}: Rational denominator")
    if q < 2 or math.gcd(p, q) != 1:
        raise SerializationError(f"{where}: Rational {p}/{q} is not in lowest terms with a "
                                 "denominator above 1")
    return p, q


def _float_fields(where: str, args: list) -> tuple:
    _arity(where, "Float", args, 5)
    sign, man, exp, bc, prec = (expect_int(a, f"{where}: Float field") for a in args)
    ok = (sign in (0, 1) and man > 0 and man % 2 == 1 and bc == man.bit_length()
          and 1 <= bc <= prec <= _MAX_PREC and abs(exp) <= _MAX_EXP)
    zero = (sign, man, exp, bc) == (0, 0, 0, 0) and 1 <= prec <= _MAX_PREC
    if not (ok or zero):
        raise SerializationError(f"{where}: Float fields {args!r} are not a normalised "
                                 "binary float (sign, odd mantissa, exponent, bit count, "
                                 "precision)")
    return sign, man, exp, bc, prec


def _integer(where: str, args: list):
    return sp.Integer(_integer_field(where, args))


def _rational(where: str, args: list):
    return sp.Rational(*_rational_fields(where, args))


def _float(where: str, args: list):
    sign, man, exp, bc, prec = _float_fields(where, args)
    return sp.Float._new((sign, man, exp, bc), prec, zero=False)


def _symbol(where: str, args: list):
    _arity(where, "Symbol", args, 2)
    name, given = args
    if not isinstance(name, str):
        raise SerializationError(f"{where}: a Symbol name must be a string, got {_show(name)}")
    known = assumptions._assume_defined
    if not isinstance(given, dict) or not all(
            k in known and isinstance(v, bool) for k, v in given.items()):
        raise SerializationError(f"{where}: Symbol {name[:40]!r} has malformed assumptions "
                                 f"{_show(given)} (expected {{name: true/false}})")
    try:
        return sp.Symbol(name, **given)
    except Exception as exc:  # noqa: BLE001 - contradictory assumptions: a bad file
        raise SerializationError(f"{where}: Symbol {name[:40]!r}: {exc}") from None


_NUMBERS: dict[str, Callable] = {
    "Integer": _integer,
    "Rational": _rational,
    "Float": _float,
    "Symbol": _symbol,
}

_FIXED_ARITY = {"ExprCondPair": 2, "Pow": 2, "ITE": 3, "Not": 1}


def _build(where: str, head: str, cls: type, args: list):
    """``cls(*args)`` as stored: unevaluated, so the saved structure comes back exactly."""
    _check_operands(where, head, cls, args)
    try:
        if head == "ExprCondPair":
            return _tables().pair(*args)
        return cls(*args, evaluate=False)
    except Exception as exc:  # noqa: BLE001 - SymPy refuses the operands: a bad file
        raise SerializationError(f"{where}: {head} of these operands is invalid: "
                                 f"{type(exc).__name__}: {str(exc)[:80]}") from None


def _check_operands(where: str, head: str, cls: type, args: list) -> None:
    fixed = _FIXED_ARITY.get(head)
    if fixed is None and issubclass(cls, sp.core.relational.Relational):
        fixed = 2
    nargs = getattr(cls, "nargs", None)
    if fixed is not None:
        allowed = [fixed]
    elif isinstance(nargs, sp.FiniteSet):
        allowed = sorted(int(n) for n in nargs)
    else:
        allowed = None
    if allowed is not None and len(args) not in allowed:
        raise SerializationError(f"{where}: {head} takes {' or '.join(map(str, allowed))} "
                                 f"operands, got {len(args)}")
    if not args:
        raise SerializationError(f"{where}: {head} needs operands")
    pairs = [isinstance(a, _tables().pair) for a in args]
    if head == "Piecewise" and not all(pairs):
        raise SerializationError(f"{where}: the operands of Piecewise are ExprCondPairs")
    if head != "Piecewise" and any(pairs):
        raise SerializationError(f"{where}: an ExprCondPair is an operand of {head}; it may "
                                 "appear only in a Piecewise")


def expr_text(expr) -> str:
    """:func:`encode_expr` as compact JSON text (how a compiled plan stores a constant).

    >>> expr_text(sp.pi / 4)
    '["Mul",["Rational",1,4],["pi"]]'
    """
    return json.dumps(encode_expr(expr), separators=(",", ":"), allow_nan=False)


def expr_from_text(text: str, where: str = "expression"):
    """The expression of :func:`expr_text` output (strict JSON, then :func:`decode_expr`).

    >>> expr_from_text('["Mul",["Rational",1,4],["pi"]]')
    pi/4
    """
    if not isinstance(text, str):
        raise SerializationError(f"{where}: expected JSON text, got {type(text).__name__}")
    return decode_expr(_loads(text, where), where)


def number_value(node, where: str = "expression"):
    """``(value, text)`` of a saved plain number -- ``Integer``, ``Rational``, a ``Float``
    that is a double, ``true``/``false``, ``oo``/``-oo``/``nan`` -- read without SymPy,
    after the checks :func:`decode_expr` makes: its double (or bool) as
    ``graph.const_value`` computes it, and its :func:`expr_text`. None for any other node,
    and for a number whose double is not exact this way (decode those).

    >>> number_value(["Rational", 1, 4]), number_value(["pi"])
    ((0.25, '["Rational",1,4]'), None)
    """
    if not isinstance(node, list) or not node or not isinstance(node[0], str):
        return None
    head, args = node[0], node[1:]
    if head in _PLAIN_ATOMS:
        _arity(where, head, args, 0)
        value = _PLAIN_ATOMS[head]
    elif head == "Integer":
        p = _integer_field(where, args)
        value = float(p) if abs(p) <= 1 << 53 else None
    elif head == "Rational":
        p, q = _rational_fields(where, args)
        value = p / q if max(abs(p), q) <= 1 << 53 else None  # both exact: one rounding
    elif head == "Float":
        sign, man, exp, _, _ = _float_fields(where, args)
        value = _exact_double(sign, man, exp)
    else:
        return None
    if value is None:
        return None
    return value, json.dumps(node, separators=(",", ":"), allow_nan=False)


# the bare heads of plain numbers, with their values (graph.const_value)
_PLAIN_ATOMS = {"true": True, "false": False, "oo": math.inf, "-oo": -math.inf,
                "nan": math.nan}


def _exact_double(sign: int, man: int, exp: int) -> float | None:
    """``(-1)**sign * man * 2**exp`` when it is a double exactly (else None)."""
    if man.bit_length() > 53:
        return None
    try:
        value = math.ldexp(float(man), exp) if man else 0.0
        if value == 0.0 and man or math.ldexp(value, -exp) != man:
            return None  # underflowed or rounded
    except OverflowError:
        return None
    return -value if sign else value


# --------------------------------------------------------------------------------------------
# Arrays
# --------------------------------------------------------------------------------------------

DTYPES = ("bool", "int32", "int64", "float32", "float64")
_MAX_DIM = 1 << 40
_MAX_NDIM = 32


def encode_array(a) -> dict:
    """A numpy array as ``{"dtype", "shape", "data"}``: its raw little-endian bytes in base64.

    >>> encode_array(np.array([1.0, 2.0], dtype=np.float32))
    {'dtype': 'float32', 'shape': [2], 'data': 'AACAPwAAAEA='}
    """
    a = np.asarray(a)
    if a.dtype.name not in DTYPES:
        raise SerializationError(f"cannot save an array of dtype {a.dtype}: saved arrays are "
                                 f"one of {', '.join(DTYPES)}")
    raw = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
    return {"dtype": a.dtype.name, "shape": [int(d) for d in a.shape],
            "data": base64.b64encode(raw).decode("ascii")}


def decode_array(node, where: str = "array") -> np.ndarray:
    """The (writable, native byte order) array of :func:`encode_array` output, checked: a
    whitelisted dtype, a shape of non-negative ints, and exactly the bytes it needs.

    >>> decode_array({"dtype": "int32", "shape": [2], "data": "AQAAAAIAAAA="})
    array([1, 2], dtype=int32)
    """
    fields = record(node, where, ("dtype", "shape", "data"))
    name = fields["dtype"]
    if name not in DTYPES:
        raise SerializationError(f"{where}: dtype {_show(name)} is not one of "
                                 f"{', '.join(DTYPES)}")
    shape = tuple(expect_int(d, f"{where}: shape entry", 0, _MAX_DIM)
                  for d in expect_list(fields["shape"], f"{where}: shape", _MAX_NDIM))
    data = expect(fields["data"], str, f"{where}: data")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise SerializationError(f"{where}: data is not base64") from None
    dtype = np.dtype(name)
    size = math.prod(shape)
    if len(raw) != size * dtype.itemsize:
        raise SerializationError(f"{where}: {len(raw)} bytes of data for shape {shape} of "
                                 f"{name} (expected {size * dtype.itemsize})")
    flat = np.frombuffer(raw, dtype=dtype.newbyteorder("<"))
    return flat.astype(dtype).reshape(shape)


# --------------------------------------------------------------------------------------------
# Values: parameters and structures, tagged
# --------------------------------------------------------------------------------------------

_FLOAT_TEXT = re.compile(r"-?(0x[0-9a-f]+(\.[0-9a-f]*)?p[+-][0-9]+|inf|nan)")


def encode_value(value) -> list:
    """A parameter value as a tagged list: ``None``, ``Ellipsis``, bool, int, float (exact, as
    hex), str, tuple, list, dict (str or int keys), slice, numpy dtype, array or scalar.
    Tuple subclasses (namedtuples) are saved as tuples.

    >>> encode_value((1, 0.5, None))
    ['tuple', [['int', 1], ['float', '0x1.0000000000000p-1'], ['none']]]
    """
    return _encode_value(value, 0)


def _encode_value(v, depth: int) -> list:
    if depth > MAX_DEPTH:
        raise SerializationError(f"value nested deeper than {MAX_DEPTH}")
    if v is None:
        return ["none"]
    if v is Ellipsis:
        return ["ellipsis"]
    if isinstance(v, np.generic):  # before float: np.float64 is a float subclass
        return ["scalar", encode_array(np.asarray(v))]
    if isinstance(v, bool):
        return ["bool", v]
    if isinstance(v, int):
        return ["int", int(v)]
    if isinstance(v, float):
        return ["float", float(v).hex()]
    if isinstance(v, str):
        return ["str", v]
    if isinstance(v, tuple):
        return ["tuple", [_encode_value(x, depth + 1) for x in v]]
    if isinstance(v, list):
        return ["list", [_encode_value(x, depth + 1) for x in v]]
    if isinstance(v, dict):
        return ["dict", [[_key(k), _encode_value(x, depth + 1)] for k, x in v.items()]]
    if isinstance(v, slice):
        return ["slice", [_encode_value(x, depth + 1) for x in (v.start, v.stop, v.step)]]
    if isinstance(v, np.dtype):
        if v.name not in DTYPES:
            raise SerializationError(f"cannot save the dtype {v}: one of {', '.join(DTYPES)}")
        return ["dtype", v.name]
    if isinstance(v, np.ndarray):
        return ["ndarray", encode_array(v)]
    raise SerializationError(f"cannot save a value of type {type(v).__name__} ({str(v)[:60]})")


def _key(k):
    if isinstance(k, str) or (isinstance(k, int) and not isinstance(k, bool)):
        return k
    raise SerializationError(f"cannot save a dict key of type {type(k).__name__}: keys are "
                             "str or int")


def decode_value(node, where: str = "value"):
    """The value of :func:`encode_value` output, checked tag by tag.

    >>> decode_value(["tuple", [["slice", [["none"], ["int", 2], ["none"]]], ["ellipsis"]]])
    (slice(None, 2, None), Ellipsis)
    """
    return _decode_value(node, where, 0)


def _decode_value(node, where: str, depth: int):
    if depth > MAX_DEPTH:
        raise SerializationError(f"{where}: nested deeper than {MAX_DEPTH}")
    if not isinstance(node, list) or not node or not isinstance(node[0], str):
        raise SerializationError(f"{where}: malformed value {_show(node)} (expected a tagged "
                                 "list)")
    tag, body = node[0], node[1:]
    sub = f"{where}[{tag[:20]}]"
    if tag in ("none", "ellipsis"):
        _arity(where, tag, body, 0)
        return None if tag == "none" else Ellipsis
    _arity(where, tag, body, 1)
    (x,) = body
    if tag == "bool":
        return expect(x, bool, sub)
    if tag == "int":
        return expect_int(x, sub)
    if tag == "float":
        return _float_value(x, sub)
    if tag == "str":
        return expect(x, str, sub)
    if tag in ("tuple", "list"):
        items = [_decode_value(i, sub, depth + 1) for i in expect_list(x, sub)]
        return tuple(items) if tag == "tuple" else items
    if tag == "dict":
        return _decode_dict(x, sub, depth)
    if tag == "slice":
        parts = expect_list(x, sub)
        if len(parts) != 3:
            raise SerializationError(f"{sub}: a slice has 3 parts, got {len(parts)}")
        return slice(*(_decode_value(p, sub, depth + 1) for p in parts))
    if tag == "dtype":
        if x not in DTYPES:
            raise SerializationError(f"{sub}: {_show(x)} is not one of {', '.join(DTYPES)}")
        return np.dtype(x)
    if tag == "ndarray":
        return decode_array(x, sub)
    if tag == "scalar":
        arr = decode_array(x, sub)
        if arr.ndim:
            raise SerializationError(f"{sub}: a scalar has shape (), got {arr.shape}")
        return arr[()]
    raise SerializationError(f"{where}: unknown value tag {tag[:40]!r}")


def _float_value(x, where: str) -> float:
    if not isinstance(x, str) or not _FLOAT_TEXT.fullmatch(x):
        raise SerializationError(f"{where}: {_show(x)} is not a hex float")
    return float.fromhex(x)


def _decode_dict(x, where: str, depth: int) -> dict:
    out: dict = {}
    for item in expect_list(x, where):
        if not (isinstance(item, list) and len(item) == 2):
            raise SerializationError(f"{where}: entries are [key, value] pairs")
        k, v = item
        if not (isinstance(k, str) or (isinstance(k, int) and not isinstance(k, bool))):
            raise SerializationError(f"{where}: key {_show(k)} is not a str or int")
        if k in out:
            raise SerializationError(f"{where}: key {k!r} appears twice")
        out[k] = _decode_value(v, f"{where}[{k!r}]", depth + 1)
    return out


# --------------------------------------------------------------------------------------------
# Framed documents
# --------------------------------------------------------------------------------------------

_HEADER = struct.Struct("<8sIQ32s")  # magic, version, payload length, sha256(payload)


def dump_document(doc: dict, magic: bytes, version: int) -> bytes:
    """``doc`` as UTF-8 JSON behind a header: 8-byte magic, version, length and SHA-256.

    >>> blob = dump_document({"a": [1]}, b"EXAMPLE\\n", 1)
    >>> load_document(blob, b"EXAMPLE\\n", 1, "example", "test document")
    {'a': [1]}
    """
    if len(magic) != 8:
        raise ValueError("the magic tag of a document is 8 bytes")
    payload = json.dumps(doc, allow_nan=False, separators=(",", ":")).encode("utf-8")
    return _HEADER.pack(magic, version, len(payload), hashlib.sha256(payload).digest()) + payload


def load_document(blob: bytes, magic: bytes, version: int, what: str, kind: str) -> dict:
    """The JSON object of a :func:`dump_document` blob, or ``SerializationError`` naming
    ``what`` (the file) and the fault: not a ``kind`` (magic), another format version, truncated
    or corrupt (length, checksum), not strict UTF-8 JSON, or not an object.

    >>> load_document(b"junk", b"EXAMPLE\\n", 1, "'f.bin'", "test document")
    Traceback (most recent call last):
    ...
    symtape.errors.SerializationError: 'f.bin' is not a test document (no EXAMPLE header)
    """
    label = magic.decode("ascii", "replace").strip()
    if len(blob) < _HEADER.size or blob[:8] != magic:
        raise SerializationError(f"{what} is not a {kind} (no {label} header)")
    _, ver, length, digest = _HEADER.unpack_from(blob)
    if ver != version:
        raise SerializationError(f"{what} is a {kind} of format {ver}; this symtape reads "
                                 f"format {version}")
    payload = blob[_HEADER.size:]
    if length != len(payload) or hashlib.sha256(payload).digest() != digest:
        raise SerializationError(f"{what} is truncated or corrupt (length or checksum "
                                 "mismatch)")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SerializationError(f"{what} is malformed: not UTF-8 ({exc.reason})") from None
    doc = _loads(text, what)
    if not isinstance(doc, dict):
        raise SerializationError(f"{what} is malformed: the document is not a JSON object")
    return doc


def _reject_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name}")


def _unique_keys(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key in a JSON object")
    return out


def _loads(text: str, where: str):
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise SerializationError(f"{where} is malformed: JSON nested too deeply") from None
    except ValueError as exc:
        raise SerializationError(f"{where} is malformed: {str(exc)[:120]}") from None


# --------------------------------------------------------------------------------------------
# Checking decoded JSON
# --------------------------------------------------------------------------------------------


def record(node, where: str, required: tuple, optional: tuple = ()) -> dict:
    """``node`` as a JSON object with every key of ``required`` and no key outside
    ``required + optional`` (missing optional keys read as None).

    >>> record({"a": 1}, "header", ("a",), ("b",))
    {'a': 1, 'b': None}
    """
    if not isinstance(node, dict):
        raise SerializationError(f"{where}: expected an object, got {_show(node)}")
    missing = [k for k in required if k not in node]
    extra = [k for k in node if k not in required and k not in optional]
    if missing or extra:
        parts = ([f"missing {', '.join(map(repr, missing))}"] if missing else []) + (
            [f"unexpected {', '.join(repr(k)[:40] for k in extra)}"] if extra else [])
        raise SerializationError(f"{where}: {'; '.join(parts)}")
    return {**node, **{k: None for k in optional if k not in node}}


def expect(value, kind, where: str):
    """``value`` when it is an instance of ``kind`` (bool is not taken for an int).

    >>> expect("a", str, "name")
    'a'
    """
    bad_bool = isinstance(value, bool) and kind in (int, (int,))
    if bad_bool or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise SerializationError(f"{where}: expected {names}, got {_show(value)}")
    return value


def expect_int(value, where: str, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` when it is an int (not a bool) with ``lo <= value < hi``.

    >>> expect_int(3, "index", 0, 5)
    3
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise SerializationError(f"{where}: expected an integer, got {_show(value)}")
    if (lo is not None and value < lo) or (hi is not None and value >= hi):
        raise SerializationError(f"{where}: {value} is out of range [{lo}, {hi})")
    return value


def expect_list(value, where: str, max_len: int | None = None) -> list:
    """``value`` when it is a JSON array (of at most ``max_len`` items).

    >>> expect_list([1, 2], "refs")
    [1, 2]
    """
    if not isinstance(value, list):
        raise SerializationError(f"{where}: expected a list, got {_show(value)}")
    if max_len is not None and len(value) > max_len:
        raise SerializationError(f"{where}: {len(value)} items, at most {max_len} allowed")
    return value
