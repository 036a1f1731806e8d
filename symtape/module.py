"""``st.Module``: a container of variables and submodules with ``tf.Module``'s semantics.

A module finds its variables and submodules by walking its attributes (sorted by name),
through lists, tuples and dicts (dicts in key order), into nested modules: nothing is
registered, so ``self.layers = [Dense(...), Dense(...)]`` is tracked as it is in
TensorFlow. ``st.function`` takes modules (and optimizers, and any other Python object) as
arguments that are part of its trace key, not tensors.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping

from symtape.base import nest
from symtape.base.errors import InvalidArgumentError
from symtape.core.variables import Variable, name_scope

__all__ = ["Module", "snake_case"]

#: Attributes a module's walk skips (TensorFlow's bookkeeping names).
_IGNORED = frozenset(("_self_unconditional_checkpoint_dependencies",
                      "_self_unconditional_dependency_names"))


def snake_case(name: str) -> str:
    """``CamelCase`` to ``camel_case``, as TensorFlow names modules.

    >>> snake_case("MyDenseLayer"), snake_case("MLP")
    ('my_dense_layer', 'mlp')
    """
    out = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", out).lower()


class Module:
    """A named container whose ``variables``, ``trainable_variables`` and ``submodules``
    are found in its attributes (as ``tf.Module``).

    >>> import numpy as np
    >>> import symtape as st
    >>> class Dense(st.Module):
    ...     def __init__(self, n_in, n_out, name=None):
    ...         super().__init__(name=name)
    ...         with self.name_scope:
    ...             self.w = st.Variable(np.ones((n_in, n_out)), name="w")
    ...             self.b = st.Variable(np.zeros(n_out), name="b", trainable=False)
    ...     def __call__(self, x):
    ...         return st.matmul(x, self.w) + self.b
    >>> class MLP(st.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.layers = [Dense(2, 3), Dense(3, 1, name="out")]
    >>> m = MLP()
    >>> m.name, [v.name for v in m.variables]
    ('mlp', ['dense/b:0', 'dense/w:0', 'out/b:0', 'out/w:0'])
    >>> len(m.trainable_variables), [s.name for s in m.submodules]
    (2, ['dense', 'out'])
    """

    def __init__(self, name: str | None = None) -> None:
        if name is None:
            name = snake_case(type(self).__name__)
        elif not isinstance(name, str) or not name.isidentifier():
            raise InvalidArgumentError(f"st.Module: {name!r} is not a valid module name (a "
                                       "Python identifier)")
        self._name = name
        with name_scope(name) as scope:
            self._scope = name_scope(scope)

    @property
    def name(self) -> str:
        """The module's name (given, or its class name in snake case)."""
        return self._name

    @property
    def name_scope(self) -> name_scope:
        """The name scope of the module: variables made inside are named ``name/...``."""
        return self._scope

    @property
    def variables(self) -> tuple:
        """The variables of this module and its submodules, each once (attributes in name
        order, then submodules')."""
        return tuple(self._flatten(predicate=_is_variable))

    @property
    def trainable_variables(self) -> tuple:
        """The trainable ones of :attr:`variables`."""
        return tuple(self._flatten(predicate=lambda v: _is_variable(v) and v.trainable))

    @property
    def non_trainable_variables(self) -> tuple:
        """The variables that are not trainable."""
        return tuple(self._flatten(predicate=lambda v: _is_variable(v) and not v.trainable))

    @property
    def submodules(self) -> tuple:
        """The modules found in the attributes, recursively (not this one)."""
        return tuple(self._flatten(predicate=_is_module))

    def _flatten(self, recursive: bool = True, predicate: Callable | None = None,
                 attribute_traversal_key: Callable | None = None,
                 with_path: bool = False) -> Iterator:
        """The values in the module's attributes that ``predicate`` accepts (all, without
        one), each once; ``with_path``: ``(path, value)`` pairs, paths as tuples of
        attribute names, list indices and dict keys."""
        return _walk(self, recursive, predicate or (lambda v: True),
                     attribute_traversal_key, with_path, (), {id(self)}, [])

    @classmethod
    def with_name_scope(cls, method: Callable) -> Callable:
        """A method decorator: the method runs inside the module's name scope.

        >>> import symtape as st
        >>> class Lazy(st.Module):
        ...     @st.Module.with_name_scope
        ...     def build(self):
        ...         self.w = st.Variable(0.0, name="w")
        >>> m = Lazy(name="lazy"); m.build(); m.w.name
        'lazy/w:0'
        """
        @functools.wraps(method)
        def wrapped(self, *args, **kwargs):
            with self.name_scope:
                return method(self, *args, **kwargs)

        return wrapped

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name!r}>"


def _is_variable(value) -> bool:
    return isinstance(value, Variable)


def _is_module(value) -> bool:
    return isinstance(value, Module)


def _leaves(value, path: tuple) -> Iterator:
    """``(path, leaf)`` of a nested attribute value (lists, tuples, dicts in key order)."""
    if isinstance(value, Mapping):
        for k in nest.sorted_keys(value):
            yield from _leaves(value[k], path + (k,))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))
    else:
        yield path, value


def _walk(module: Module, recursive: bool, predicate: Callable, key, with_path: bool,
          prefix: tuple, seen: set, stack: list) -> Iterator:
    """TensorFlow's order: this module's attributes (sorted), then each submodule found in
    them, depth first; each value once (the module walked from counts as seen); a module
    met again inside itself (a cycle) has its attributes walked but is not recursed into."""
    if id(module) in stack:
        recursive = False
    subs = []
    for name in sorted(vars(module), key=key):
        if name in _IGNORED:
            continue
        for path, leaf in _leaves(vars(module)[name], (name,)):
            if not with_path:
                if id(leaf) in seen:
                    continue
                seen.add(id(leaf))
            if predicate(leaf):
                yield (prefix + path, leaf) if with_path else leaf
            if recursive and _is_module(leaf):
                subs.append((prefix + path, leaf))
    stack.append(id(module))
    for path, sub in subs:
        yield from _walk(sub, recursive, predicate, key, with_path, path, seen, stack)
    stack.pop()
