"""Reverse accumulation over recorded entries: one generic sweep, rules from the op table.

The sweep never looks at an op's name: each entry's primitive gives the cotangents of its
inputs (``prim.vjp``), built with ops of the table, so an outer tape records the sweep and
can differentiate it again. Cotangents known to be zero travel as :class:`ops.Zero` (the path
is connected, nothing is computed); ``None`` means no path.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import nodes as N
from . import ops, recording
from .errors import ShapeError
from .tensor import Tensor, exact_constant

__all__ = ["relevant_ids", "vjp_sweep", "batched_vjp", "accumulate", "is_structural_zero"]


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


def _normalize(ct, opaque):
    if isinstance(ct, Tensor) and ct.dtype.kind != "f":
        return None
    if isinstance(ct, Tensor) and ct._id not in opaque and is_structural_zero(ct):
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


def vjp_sweep(entries: Sequence, seeds: dict, relevant: set, opaque=frozenset()) -> dict:
    """Cotangents (Tensor, Zero) of the tensors in ``relevant`` (see :func:`relevant_ids`),
    keyed by tensor id.

    ``seeds`` maps target ids to their cotangents (summed when several); cotangents whose ids
    are in ``opaque`` are never looked at element by element (for structural zeros).
    """
    cts: dict = {}
    for tid, g in seeds.items():
        if tid in relevant:
            cts[tid] = accumulate(cts.get(tid), g)
    Zero = ops.Zero
    for e in reversed(list(entries)):
        outputs = e.outputs
        if len(outputs) == 1:
            g = cts.get(outputs[0]._id)
            if g is None:
                continue
            gs = [g]
        else:
            gs = [cts.get(o._id) for o in outputs]
            if all(g is None for g in gs):
                continue
        needed = [t._id in relevant for t in e.inputs]
        if True not in needed:
            continue
        if all(g is None or isinstance(g, Zero) for g in gs):
            contributions = _zero_contributions(e, needed)
        elif getattr(e.prim, "multiple_results", False):
            gs = [Zero(o.shape, o.dtype) if g is None else g for g, o in zip(gs, outputs)]
            contributions = e.prim.vjp(gs, outputs, e.inputs, e.params, needed)
        else:
            contributions = e.prim.vjp(gs[0], outputs[0], e.inputs, e.params, needed)
        for t, ct, need in zip(e.inputs, contributions, needed):
            if not need or ct is None:
                continue
            _check(ct, t, e.prim)
            ct = _normalize(ct, opaque)
            if ct is not None:
                cts[t._id] = accumulate(cts.get(t._id), ct)
    return cts


class _NoValue:
    value = None


def _stand_in(shape: tuple, dtype) -> Tensor:
    """A leaf with no value: the cotangent a sweep is traced for."""
    def unnamed():
        raise AssertionError("the stand-in of a batched sweep has no element view")

    node = N.leaf(tuple(shape), dtype, _NoValue(), unnamed)
    node.label = "seed"
    return Tensor(node, None, dtype)


def _traced_sweep(entries, target: Tensor, relevant: set):
    """The sweep for a stand-in cotangent of ``target``: ``(stand_in, cts, applications)``,
    the applications being the entries it made from the stand-in, in order. The tapes
    recording now keep what the sweep computed without the stand-in (what an outer tape
    differentiates through) and drop the rest. None when a rule needs the cotangent's values
    (a user's rule computing in Python), or when nothing records (a custom function's
    forward pass), so the applications could not be seen."""
    if recording.is_paused():
        return None
    stand_in = _stand_in(target.shape, target.dtype)
    capture = recording.Recorder(watch_accessed=False)
    capture.watch(stand_in)
    outer = [(rec, len(rec.entries)) for rec in recording.active()]
    recording.push(capture)
    try:
        cts = vjp_sweep(entries, {target._id: stand_in}, relevant, capture.tracked)
    except Exception:  # noqa: BLE001 - the sweep row by row says what is wrong, if anything
        cts = None
    finally:
        recording.remove(capture)
        made = {id(e) for e in capture.entries}
        for rec, mark in outer:
            rec.entries[mark:] = [e for e in rec.entries[mark:] if id(e) not in made]
    if cts is None or not all(hasattr(e.prim, "batch") and len(e.outputs) == 1
                              for e in capture.entries):
        return None
    return stand_in, cts, capture.entries


def batched_vjp(entries: Sequence, target: Tensor, seeds: np.ndarray, sources: Sequence,
                relevant: set, one_hot: bool = True) -> list | None:
    """The cotangents of ``sources`` for each of the ``seeds`` of ``target`` (stacked along a
    leading axis) in one sweep: the sweep is traced once for a stand-in cotangent, and what
    it computed from it is applied again by each op's batching rule (``Primitive.batch``) to
    all seeds at once. Per source: a tensor with the seeds' leading axis, a Zero, or None (no
    path); None as a whole when the sweep needs the seeds' values. The nodes made for
    ``one_hot`` seeds are marked with their number (``Node.seeds``: their element views are
    mostly zero).

    >>> import symtape as st
    >>> x = st.Variable([1.0, 2.0])
    >>> with st.GradientTape() as t:
    ...     y = x * x
    >>> entries, rel = t._rec.entries, relevant_ids(t._rec.entries, [x._id])
    >>> (ct,) = batched_vjp(entries, t._targets(y)[0], np.eye(2, dtype=int), [x], rel)
    >>> ct.numpy()
    array([[2., 0.],
           [0., 4.]])
    """
    traced = _traced_sweep(entries, target, relevant)
    if traced is None:
        return None
    stand_in, cts, applications = traced
    n = seeds.shape[0]
    batched = {stand_in._id: exact_constant(seeds, target.dtype)}
    for e in applications:
        flags = [t._id in batched for t in e.inputs]
        args = [batched.get(t._id, t) for t in e.inputs]
        (out,) = e.outputs
        t = batched[out._id] = e.prim.batch(args, flags, e.params, tuple(out.shape))
        if one_hot and t._node.kind == "op":
            t._node.seeds = n
    results = []
    for s in sources:
        ct = cts.get(s._id)
        if isinstance(ct, Tensor):
            ct = batched[ct._id] if ct._id in batched else \
                ops.broadcast_to.bind(ct, shape=(n,) + tuple(ct.shape))
        results.append(ct)
    return results


def one_hot_seeds(shape: tuple) -> np.ndarray:
    """One integer unit tensor of ``shape`` per element, in C order, stacked along a leading
    axis.

    >>> one_hot_seeds((2,)).tolist()
    [[1, 0], [0, 1]]
    """
    n = int(np.prod(shape, dtype=np.int64))
    return np.eye(n, dtype=np.int64).reshape((n,) + tuple(shape))
