"""Saving and loading compiled functions (``CompiledFunction.save`` / ``st.load``).

Files are data only (strict JSON of the plan, names and layout, plus object code signed with
this user's cache secret); loading runs nothing from them (the format:
:mod:`symtape.codegen.archive`). ``pickle`` of a compiled function is for trusted transport
(multiprocessing, dask), as everywhere in Python.
"""

from __future__ import annotations

import os

from symtape.codegen import CompiledFunction
from symtape.codegen import load as _load

__all__ = ["load"]


def load(path: str | os.PathLike) -> CompiledFunction:
    """A compiled function saved with ``CompiledFunction.save(path)``, without running
    anything from the file.

    The plan is checked against the op table and the native code is generated again from it;
    the stored object code is reused only when this user's cache secret authenticates it and
    it was made for this CPU from the same IR, else it comes from the cache or a compile. A
    malformed, foreign or tampered file raises ``st.errors.SerializationError`` naming the
    fault. (``pickle.loads`` of a pickled compiled function trusts its bytes: use it for
    transport between your own processes, and ``st.load`` for files.)

    >>> import os, tempfile, numpy as np, symtape as st
    >>> x = st.symbol("x")
    >>> f = st.compile(x * x + 1, [x])
    >>> path = os.path.join(tempfile.mkdtemp(), "f.symtape")
    >>> f.save(path)
    >>> float(st.load(path)(3.0))
    10.0
    """
    return _load(path)
