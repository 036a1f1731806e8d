"""Strict JSON for files: text parsed without non-standard constants, duplicate keys or
strings that are not Unicode, and the checks that read a decoded document field by field.
Each fault raises :class:`~symtape.base.errors.SerializationError` naming where it is.

>>> record(loads('{"n": 3}', "header"), "header", ("n",))
{'n': 3}
"""

from __future__ import annotations

import json

from symtape.base.errors import SerializationError

__all__ = [
    "MAX_DEPTH",
    "loads",
    "excerpt",
    "expect_arity",
    "record",
    "expect",
    "expect_int",
    "expect_list",
]

# Nesting deeper than this (expressions, values, documents) is refused: no graph, template
# or parameter symtape writes comes near it, and it keeps decoding far from Python's stack.
MAX_DEPTH = 200

# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------


def loads(text: str, where: str):
    """The JSON value of ``text``, strictly: no ``NaN``/``Infinity``, no key twice in an
    object, no lone surrogate in a string (``SerializationError`` naming ``where``).

    >>> loads('{"a": [1, 2.5]}', "doc")
    {'a': [1, 2.5]}
    >>> loads('{"a": 1, "a": 2}', "doc")
    Traceback (most recent call last):
    ...
    symtape.base.errors.SerializationError: doc is malformed: duplicate key in a JSON object
    """
    try:
        doc = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise SerializationError(f"{where} is malformed: JSON nested too deeply") from None
    except ValueError as exc:
        raise SerializationError(f"{where} is malformed: {str(exc)[:120]}") from None
    _check_unicode(doc, where)
    return doc


def _reject_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name}")


def _unique_keys(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key in a JSON object")
    return out


def _check_unicode(doc, where: str) -> None:
    """Refuses a document with a string that is not Unicode text: JSON's ``\\ud800``
    escapes give lone surrogates, which no name, file or symbol may hold (they cannot even
    be encoded). One encoding of the whole document finds them; a walk names the first."""
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
        return
    except UnicodeEncodeError:
        pass
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and not _is_text(item):
            raise SerializationError(f"{where} is malformed: the string {ascii(item)[:60]} is "
                                     "not valid Unicode (a lone surrogate)")
    raise SerializationError(f"{where} is malformed: a string is not valid Unicode")


def _is_text(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# Checking decoded JSON
# --------------------------------------------------------------------------------------------


def excerpt(node) -> str:
    """``node`` for a message: its JSON text cut to 60 characters, or its type's name when it
    is not JSON.

    >>> excerpt([1, "a"]), excerpt({1j})
    ('[1, "a"]', 'set')
    """
    return json.dumps(node)[:60] if _jsonable(node) else type(node).__name__


def _jsonable(node) -> bool:
    try:
        json.dumps(node)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def expect_arity(where: str, head: str, args: list, n: int) -> None:
    """Refuses a node whose ``head`` has other than ``n`` fields.

    >>> expect_arity("value", "none", [1], 0)
    Traceback (most recent call last):
    ...
    symtape.base.errors.SerializationError: value: none takes 0 fields, got 1
    """
    if len(args) != n:
        raise SerializationError(f"{where}: {head} takes {n} fields, got {len(args)}")


def record(node, where: str, required: tuple, optional: tuple = ()) -> dict:
    """``node`` as a JSON object with every key of ``required`` and no key outside
    ``required + optional`` (missing optional keys read as None).

    >>> record({"a": 1}, "header", ("a",), ("b",))
    {'a': 1, 'b': None}
    """
    if not isinstance(node, dict):
        raise SerializationError(f"{where}: expected an object, got {excerpt(node)}")
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
        raise SerializationError(f"{where}: expected {names}, got {excerpt(value)}")
    return value


def expect_int(value, where: str, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` when it is an int (not a bool) with ``lo <= value < hi``.

    >>> expect_int(3, "index", 0, 5)
    3
    """
    if not isinstance(value, int) or isinstance(value, bool):
        raise SerializationError(f"{where}: expected an integer, got {excerpt(value)}")
    if (lo is not None and value < lo) or (hi is not None and value >= hi):
        raise SerializationError(f"{where}: {value} is out of range [{lo}, {hi})")
    return value


def expect_list(value, where: str, max_len: int | None = None) -> list:
    """``value`` when it is a JSON array (of at most ``max_len`` items).

    >>> expect_list([1, 2], "refs")
    [1, 2]
    """
    if not isinstance(value, list):
        raise SerializationError(f"{where}: expected a list, got {excerpt(value)}")
    if max_len is not None and len(value) > max_len:
        raise SerializationError(f"{where}: {len(value)} items, at most {max_len} allowed")
    return value
