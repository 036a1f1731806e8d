"""Arrays and parameter values as JSON, data only. An array is the raw little-endian bytes
of a whitelisted dtype (:data:`DTYPES`) in base64 with its shape; a value is a tagged list
(``["tuple", [...]]``, ``["float", "0x1.8p+1"]``, ``["ndarray", {...}]``), floats kept exactly
as hex text. Anything else, or anything of the wrong shape, raises
:class:`~symtape.base.errors.SerializationError` naming what is wrong, before anything is built
from it.

>>> decode_value(encode_value({"axis": (0, -1), "scale": 0.1})) == {"axis": (0, -1),
...                                                                  "scale": 0.1}
True
"""

from __future__ import annotations

import base64
import binascii
import math
import re

import numpy as np

from symtape.base.errors import SerializationError
from symtape.io.strict_json import (
    MAX_DEPTH, excerpt, expect, expect_arity, expect_int, expect_list, record,
)

__all__ = [
    "DTYPES",
    "MAX_ELEMENTS",
    "expect_shape",
    "encode_array",
    "decode_array",
    "encode_value",
    "decode_value",
]

# --------------------------------------------------------------------------------------------
# Arrays
# --------------------------------------------------------------------------------------------

DTYPES = ("bool", "int32", "int64", "float32", "float64")
_MAX_DIM = 1 << 40
_MAX_NDIM = 32
# Elements of a saved shape, counting a 0 extent as 1: numpy cannot even make an empty array
# whose other extents multiply beyond its index range (reshape to (0, 2**39, 2**39) fails).
MAX_ELEMENTS = 1 << 40


def expect_shape(node, where: str) -> tuple:
    """``node`` as a shape: at most 32 non-negative ints whose product (a 0 counted as 1) is at
    most :data:`MAX_ELEMENTS`.

    >>> expect_shape([2, 0, 3], "shape")
    (2, 0, 3)
    >>> expect_shape([1 << 30, 1 << 30, 0], "shape")
    Traceback (most recent call last):
    ...
    symtape.base.errors.SerializationError: shape: [1073741824, 1073741824, 0] has more than \
1099511627776 elements (counting 0 as 1)
    """
    shape = tuple(expect_int(d, f"{where} entry", 0, _MAX_DIM)
                  for d in expect_list(node, where, _MAX_NDIM))
    if math.prod(max(d, 1) for d in shape) > MAX_ELEMENTS:
        raise SerializationError(f"{where}: {list(shape)} has more than {MAX_ELEMENTS} "
                                 "elements (counting 0 as 1)")
    return shape


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
        raise SerializationError(f"{where}: dtype {excerpt(name)} is not one of "
                                 f"{', '.join(DTYPES)}")
    shape = expect_shape(fields["shape"], f"{where}: shape")
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
        raise SerializationError(f"{where}: malformed value {excerpt(node)} (expected a tagged "
                                 "list)")
    tag, body = node[0], node[1:]
    sub = f"{where}[{tag[:20]}]"
    if tag in ("none", "ellipsis"):
        expect_arity(where, tag, body, 0)
        return None if tag == "none" else Ellipsis
    expect_arity(where, tag, body, 1)
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
            raise SerializationError(f"{sub}: {excerpt(x)} is not one of {', '.join(DTYPES)}")
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
        raise SerializationError(f"{where}: {excerpt(x)} is not a hex float")
    return float.fromhex(x)


def _decode_dict(x, where: str, depth: int) -> dict:
    out: dict = {}
    for item in expect_list(x, where):
        if not (isinstance(item, list) and len(item) == 2):
            raise SerializationError(f"{where}: entries are [key, value] pairs")
        k, v = item
        if not (isinstance(k, str) or (isinstance(k, int) and not isinstance(k, bool))):
            raise SerializationError(f"{where}: key {excerpt(k)} is not a str or int")
        if k in out:
            raise SerializationError(f"{where}: key {k!r} appears twice")
        out[k] = _decode_value(v, f"{where}[{k!r}]", depth + 1)
    return out
