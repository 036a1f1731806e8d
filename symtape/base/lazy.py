"""Modules imported on first use.

SymPy, and symtape's element-level modules built on it (``graph``, ``heads``, ``functions``,
``evaluate``, the lowering table, ...), load when a formula, an element view or a tensor op
first needs them, not at ``import symtape``: importing costs numpy, llvmlite and symtape's own
tables (about 0.1 s), and SymPy's 0.2-0.3 s is paid by the first op that uses it.

A module that needs one of them binds a :class:`LazyModule` under the name it would import
(``G = LazyModule("G", globals(), "symtape.element.graph")`` for ``from . import graph as G``). The
first attribute read imports the module and rebinds that global to it, so later reads cost
what a plain module global costs (TensorFlow's ``LazyLoader`` works the same way).
"""

from __future__ import annotations

import importlib
import types

__all__ = ["LazyModule"]


class LazyModule(types.ModuleType):
    """The module ``name``, imported when an attribute is first read; it then replaces this
    stand-in as ``parent[local]`` (``parent``: the importing module's ``globals()``).

    >>> import sys
    >>> here = {}
    >>> here["json"] = LazyModule("json", here, "json")
    >>> here["json"].dumps([1])
    '[1]'
    >>> here["json"] is sys.modules["json"]
    True
    """

    def __init__(self, local: str, parent: dict, name: str) -> None:
        super().__init__(name)
        self._local = local
        self._parent = parent

    def _load(self) -> types.ModuleType:
        module = importlib.import_module(self.__name__)
        self._parent[self._local] = module
        return module

    def __getattr__(self, attr: str):
        return getattr(self._load(), attr)

    def __dir__(self) -> list[str]:
        return dir(self._load())

    def __repr__(self) -> str:
        return f"<module {self.__name__!r} (imported on first use)>"
