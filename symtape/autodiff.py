"""Reverse accumulation over recorded entries: one generic sweep, rules from the op table.

The sweep never looks at an op's name: each entry's primitive gives the cotangents of its
inputs (``prim.vjp``), built with ops of the table, so an outer tape records the sweep and
can differentiate it again. Cotangents known to be zero travel as :class:`ops.Zero` (the path
is connected, nothing is computed); ``None`` means no path.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import ops
from .errors import ShapeError
from .tensor import Tensor

__all__ = ["relevant_ids", "vjp_sweep", "accumulate", "is_structural_zero"]


def relevant_ids(entries: Sequence, source_ids) -> set:
    """Ids of tensors that depend on a source through the entries (forward reachability)."""
    relevant = set(source_ids)
    for e in entries:
        if any(t._id in relevant for t in e.inputs):
            relevant.update(o._id for o in e.outputs)
    return relevant


def is_structural_zero(t: Tensor) -> bool:
    """True when every element of ``t`` is the constant 0."""
    return t._node.is_zero()


def accumulate(prev, ct):
    """The sum of two cotangents (either may be None or Zero)."""
    if prev is None or isinstance(prev, ops.Zero):
        return ct if ct is not None else prev
    if ct is None or isinstance(ct, ops.Zero):
        return prev
    return ops.add.bind(prev, ct)


def _check(ct, t, prim) -> None:
    if ct is not None and tuple(ct.shape) != tuple(t.shape):
        raise ShapeError(f"the gradient rule of {getattr(prim, 'name', prim)} returned a "
                         f"cotangent of shape {tuple(ct.shape)} for an input of shape "
                         f"{tuple(t.shape)}")


def _normalize(ct):
    if isinstance(ct, Tensor) and ct.dtype.kind != "f":
        return None
    if isinstance(ct, Tensor) and is_structural_zero(ct):
        return ops.Zero(ct.shape, ct.dtype)
    return ct


def _zero_contributions(e, needed):
    prim = e.prim
    out = []
    for i, (t, need) in enumerate(zip(e.inputs, needed)):
        static = getattr(prim, "differentiable", None)  # user rules decide when called
        connected = need and (static is None or static(i))
        out.append(ops.Zero(t.shape, t.dtype) if connected else None)
    return out


def vjp_sweep(entries: Sequence, seeds: dict, relevant: set) -> dict:
    """Cotangents (Tensor, Zero) of the tensors in ``relevant`` (see :func:`relevant_ids`),
    keyed by tensor id.

    ``seeds`` maps target ids to their cotangents (summed when several).
    """
    cts: dict = {}
    for tid, g in seeds.items():
        if tid in relevant:
            cts[tid] = accumulate(cts.get(tid), g)
    for e in reversed(list(entries)):
        gs = [cts.get(o._id) for o in e.outputs]
        if all(g is None for g in gs):
            continue
        needed = [t._id in relevant for t in e.inputs]
        if not any(needed):
            continue
        if all(g is None or isinstance(g, ops.Zero) for g in gs):
            contributions = _zero_contributions(e, needed)
        elif getattr(e.prim, "multiple_results", False):
            gs = [ops.Zero(o.shape, o.dtype) if g is None else g for g, o in zip(gs, e.outputs)]
            contributions = e.prim.vjp(gs, e.outputs, e.inputs, e.params, needed)
        else:
            contributions = e.prim.vjp(gs[0], e.outputs[0], e.inputs, e.params, needed)
        for t, ct, need in zip(e.inputs, contributions, needed):
            if not need or ct is None:
                continue
            _check(ct, t, e.prim)
            ct = _normalize(ct)
            if ct is not None:
                cts[t._id] = accumulate(cts.get(t._id), ct)
    return cts


def one_hot_seeds(shape: tuple) -> list[np.ndarray]:
    """One integer unit vector per element of a tensor of ``shape``, in C order."""
    n = int(np.prod(shape, dtype=np.int64))
    out = []
    for k in range(n):
        e = np.zeros(n, dtype=np.int64)
        e[k] = 1
        out.append(e.reshape(shape))
    return out
