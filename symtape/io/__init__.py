"""Data-only encodings and bounded file reads: what symtape writes to files and reads back
without evaluating anything.

* :mod:`~symtape.io.expressions` -- SymPy expressions over a closed table of heads;
* :mod:`~symtape.io.constant_bounds` -- interval bounds refusing constants too costly to
  evaluate;
* :mod:`~symtape.io.values` -- numpy arrays and tagged parameter values;
* :mod:`~symtape.io.documents` -- JSON objects framed by magic, version, length and checksum;
* :mod:`~symtape.io.files` -- bounded reads of regular files;
* :mod:`~symtape.io.strict_json` -- strict JSON text and field-by-field checks.

The package exposes the public names of all six (``HEADS`` is built on first use).

>>> from symtape import io
>>> io.decode_value(io.encode_value([1, 0.5]))
[1, 0.5]
"""

from __future__ import annotations

from symtape.io import expressions
from symtape.io.constant_bounds import (
    MAX_CONSTANT_HEIGHT, MAX_CONSTANT_NODES, MAX_CONSTANT_PRECISION, MAX_MAGNITUDE, charged,
    file_budget,
)
from symtape.io.documents import dump_document, load_document, read_document
from symtape.io.expressions import (
    decode_expr, encode_expr, expr_from_text, expr_text, number_value,
)
from symtape.io.files import file_kind, read_at_most, read_file
from symtape.io.strict_json import MAX_DEPTH, expect, expect_int, expect_list, record
from symtape.io.values import (
    DTYPES, MAX_ELEMENTS, decode_array, decode_value, encode_array, encode_value, expect_shape,
)

__all__ = [  # noqa: F822 - HEADS: __getattr__
    "HEADS", "DTYPES", "MAX_DEPTH", "MAX_MAGNITUDE", "MAX_CONSTANT_NODES", "MAX_CONSTANT_HEIGHT",
    "MAX_CONSTANT_PRECISION", "MAX_ELEMENTS", "expect_shape", "encode_expr", "decode_expr",
    "expr_text", "expr_from_text", "number_value", "encode_array", "decode_array",
    "encode_value", "decode_value", "dump_document", "read_file", "read_at_most", "file_kind",
    "load_document", "read_document", "record", "expect", "expect_int", "expect_list",
    "file_budget", "charged",
]


def __getattr__(name: str):
    if name == "HEADS":  # (building it imports SymPy: on first use only)
        return expressions.HEADS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
