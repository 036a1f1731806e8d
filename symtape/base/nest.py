"""Nested structures (lists, tuples, namedtuples, dicts) as ``tf.nest`` handles them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["flatten", "pack_sequence_as", "map_structure", "is_nested", "sorted_keys"]


def is_nested(obj: Any) -> bool:
    """True for lists, tuples and mappings (the containers ``flatten`` descends into).

    >>> is_nested([1]), is_nested({"a": 1}), is_nested(1.0)
    (True, True, False)
    """
    t = type(obj)
    if t in _LEAVES:
        return False
    if isinstance(obj, (list, tuple, Mapping)):
        return True
    _LEAVES.add(t)
    return False


#: Types found not to be containers (a Mapping check per tensor costs more than the rest).
_LEAVES: set = set()


def _children(obj):
    if isinstance(obj, Mapping):
        return [obj[k] for k in sorted_keys(obj)]
    return list(obj)


def _key(k):
    return (type(k).__name__, k) if not isinstance(k, str) else ("", k)


def sorted_keys(mapping: Mapping) -> list:
    """A mapping's keys in the order ``flatten`` visits them: strings sorted first, then
    other keys by type name and value.

    >>> sorted_keys({"b": 1, 2: 0, "a": 3})
    ['a', 'b', 2]
    """
    return sorted(mapping, key=_key)


def flatten(obj: Any) -> list:
    """The leaves of a nested structure, dict values in sorted key order.

    >>> flatten({"b": [1, 2], "a": (3,)})
    [3, 1, 2]
    """
    if type(obj) is tuple or type(obj) is list:
        if not any(map(is_nested, obj)):  # a flat sequence (the common sources tuple)
            return list(obj)
    elif not is_nested(obj):
        return [obj]
    out: list = []
    stack = [obj]
    while stack:
        item = stack.pop()
        if is_nested(item):
            stack.extend(reversed(_children(item)))
        else:
            out.append(item)
    return out


def pack_sequence_as(structure: Any, flat: list) -> Any:
    """Rebuild ``structure`` with its leaves taken in order from ``flat``.

    Leaves are consumed in :func:`flatten`'s order (dict values by sorted key), and every dict
    of the result keeps the key order of ``structure``'s dict, as TensorFlow packs results.

    >>> pack_sequence_as({"b": [0, 0], "a": 0}, [1, 2, 3])
    {'b': [2, 3], 'a': 1}
    """
    if (type(structure) is tuple or type(structure) is list) and \
            len(structure) == len(flat) and not any(map(is_nested, structure)):
        return type(structure)(flat)
    return _build(structure, iter(flat))


def _build(node: Any, it) -> Any:
    # a module-level recursion: a nested closure would be a reference cycle holding ``flat``
    if isinstance(node, Mapping):
        built = {k: _build(node[k], it) for k in sorted_keys(node)}
        values = {k: built[k] for k in node}
        return type(node)(values) if type(node) is not dict else values
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        return type(node)(*[_build(c, it) for c in node])
    if isinstance(node, (list, tuple)):
        return type(node)(_build(c, it) for c in node)
    return next(it)


def map_structure(fn: Callable, structure: Any) -> Any:
    """Apply ``fn`` to every leaf, keeping the structure.

    >>> map_structure(lambda v: v * 2, (1, [2]))
    (2, [4])
    """
    return pack_sequence_as(structure, [fn(v) for v in flatten(structure)])
