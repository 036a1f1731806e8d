"""Reverse accumulation over recorded entries: one generic sweep, rules from the op table.

The sweep never looks at an op's name: each entry's primitive gives the cotangents of its
inputs (``prim.vjp``), built with ops of the table, so an outer tape records the sweep and
can differentiate it again. Cotangents known to be zero travel as :class:`ops.Zero` (the path
is connected, nothing is computed); ``None`` means no path.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import numpy as np

from symtape.core import node as N
from symtape import ops
from symtape.base import recording
from symtape.core import apply as binder
from symtape.base.errors import ShapeError
from symtape.core.variables import Tensor, exact_constant

__all__ = ["relevant_ids", "vjp_sweep", "source_cotangents", "batched_vjp", "accumulate",
           "is_structural_zero"]


def relevant_ids(entries: Sequence, source_ids) -> set:
    """Ids of tensors that depend on a source through the entries (forward reachability)."""
    relevant = set(source_ids)
    for e in entries:
        for t in e.inputs:
            if t._id in relevant:
                for o in e.outputs:
                    relevant.add(o._id)
                break
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


#: Sweeps over small tensors seen recently, by :func:`_sweep_key`: an eager training loop
#: sweeps the same recorded nodes every step (see ``binder._SITES``), so the applications
#: its rules made are evaluated again instead of running the rules.
_REPLAYS: dict = {}
_REPLAYS_MAX = 64
#: Keys of sweeps seen once (not kept: a sweep over new nodes every time, a new data batch
#: as a constant, is never captured).
_SEEN: dict = {}


def source_cotangents(entries: Sequence, seeds: dict, relevant: Callable, targets: Sequence,
                      sources: Sequence, tracked: Sequence[bool]) -> list:
    """The cotangents (Tensor, Zero or None) of ``sources`` for ``seeds`` of ``targets``:
    :func:`vjp_sweep`'s, ``relevant()`` giving its relevant ids (:func:`relevant_ids` of
    the sources the tape ``tracked``, one flag per source). When no tape records and the
    same sweep ran over the same nodes before -- the same ops on the same nodes (variables'
    leaves, cached constants, last step's results), the same tensors the same, the same
    sources tracked -- the applications that sweep's rules made are evaluated again on the
    new values (``binder.reapply``), in order.

    >>> import symtape as st
    >>> x = st.Variable(3.0)
    >>> for _ in range(2):
    ...     with st.GradientTape() as t:
    ...         y = x * x
    ...     print(float(t.gradient(y, x)))
    ...     _ = x.assign(4.0)
    6.0
    8.0
    """
    slots, key = _sweep_key(entries, seeds, targets, sources, tracked)
    replay = _REPLAYS.get(key) if key is not None else None
    if replay is not None:
        out = replay.run(slots)
        if out is not None:
            return out
    relevant = relevant()
    if key is not None and key not in _SEEN:  # captured the second time: a loop's step
        if len(_SEEN) >= _REPLAYS_MAX:
            N.evict_oldest(_SEEN)
        _SEEN[key] = None
        key = None
    if key is None or not _replayable(entries, slots):
        cts = vjp_sweep(entries, seeds, relevant)
        return [cts.get(s._id) for s in sources]
    capture = recording.Recorder(watch_accessed=False, everything=True)
    recording.push(capture)
    try:
        cts = vjp_sweep(entries, seeds, relevant)
    finally:
        recording.remove(capture)
    out = [cts.get(s._id) for s in sources]
    replay = _Replay.make(slots, capture.entries, out)
    if replay is not None:
        if len(_REPLAYS) >= _REPLAYS_MAX:
            N.evict_oldest(_REPLAYS)
        _REPLAYS[key] = replay
    return out


def _sweep_key(entries, seeds: dict, targets, sources, tracked) -> tuple:
    """``(slots, key)``: the tensors a sweep reads (the entries' inputs and outputs, the
    targets, the sources, the seeds; in order, repeats included) and a key of everything the
    sweep depends on -- ops, params, nodes, which slots are the same tensor (so which are
    relevant, given the sources ``tracked``), which slot each seed is for; key None
    when the sweep is not replayed (a tape records it, a function is traced)."""
    if recording.active() or recording.current_trace() is not None:
        return None, None
    parts: list = []
    seq: list = []
    for e in entries:
        parts.append(e.prim)
        if e.params:
            try:
                parts.append(N.params_key(e.params))
            except TypeError:
                return None, None
        parts.append(len(e.inputs))
        seq += e.inputs
        seq += e.outputs
    seq += targets
    seq += sources
    seeded = list(seeds)  # the targets' ids, in the order of their seeds
    seq += seeds.values()
    ids = [t._id for t in seq]
    first: dict = {}
    same = tuple([first.setdefault(tid, k) for k, tid in enumerate(ids)])  # first position
    try:
        targets_at = tuple([first[tid] for tid in seeded])
    except KeyError:
        return None, None
    return seq, (tuple(parts), tuple([id(t._node) for t in seq]), same, tuple(tracked),
                 targets_at)


def _replayable(entries, slots) -> bool:
    """Whether a sweep may be replayed: every op of the table (see :func:`_table_op`), every
    tensor within the element limit (a replay holds its nodes)."""
    return all(_table_op(e.prim) for e in entries) and \
        max(map(_size, [t._node for t in slots]), default=0) <= N.ELEMENT_LIMIT


_size = operator.attrgetter("size")
_TABLE_TYPES: dict = {}


def _table_op(prim) -> bool:
    """Whether ``prim`` is an op of the table (``symtape.ops``), whose rules are ops applied
    to their arguments -- not a user's rule, which may compute anything in Python."""
    kind = type(prim)
    known = _TABLE_TYPES.get(kind)
    if known is None:
        known = _TABLE_TYPES[kind] = kind.__module__.startswith("symtape.ops.")
    return known


class _Replay:
    """A sweep's applications over slots (see :func:`_sweep_key`): ``steps`` of ``(prim,
    plan, node, refs, facts)`` -- each argument a slot ``(0, i)``, an earlier step's result
    ``(1, j)`` or a constant tensor ``(2, t)``, and the arguments' node facts it was planned
    for -- and the sources' results in the same terms. It holds the nodes its key names."""

    __slots__ = ("steps", "results", "nodes")

    def __init__(self, steps, results, nodes) -> None:
        self.steps, self.results, self.nodes = steps, results, nodes

    @classmethod
    def make(cls, slots: list, applications: list, out: list):
        where: dict = {}
        for i, t in enumerate(slots):
            where.setdefault(t._id, (0, i))
        steps = []
        for e in applications:
            if len(e.outputs) != 1 or not _table_op(e.prim):
                return None
            (o,) = e.outputs
            refs = [_ref(where, t) for t in e.inputs]
            if None in refs:
                return None
            found = binder.planned(e.prim, e.params, list(e.inputs), o)
            if found is None:
                if o._node.kind != "const":
                    return None
                where[o._id] = (2, o)  # folded to a constant: the same every time
                continue
            plan, node = found
            where[o._id] = (1, len(steps))
            steps.append((e.prim, plan, node, refs, [t._node.facts for t in e.inputs]))
        results = [_ref(where, ct) if isinstance(ct, Tensor) else (3, ct)  # None, a Zero
                   for ct in out]
        if None in results:
            return None
        nodes = [t._node for t in slots] + [step[2] for step in steps]
        return cls(steps, results, nodes)

    def run(self, slots: list) -> list | None:
        """The sources' cotangents for the tensors ``slots`` (the new step's, over the same
        nodes); None when an argument's facts changed since (plan the sweep again)."""
        made: list = []
        reapply = binder.reapply
        for prim, plan, node, refs, facts in self.steps:
            args = [slots[r] if k == 0 else made[r] if k == 1 else r for k, r in refs]
            for t, f in zip(args, facts):
                if t._node._facts is not f:
                    return None
            made.append(reapply(prim, plan, node, args))
        return [slots[r] if k == 0 else made[r] if k == 1 else r for k, r in self.results]


def _ref(where: dict, t: Tensor):
    """How a replay finds ``t``: where ``where`` says, or ``t`` itself for a constant (the
    same every time); None for anything else."""
    ref = where.get(t._id)
    if ref is None and t._node.kind == "const":
        ref = (2, t)
    return ref


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
    remade = {}  # what the sweep computed without the stand-in (from a symbol's elements)
    for e in applications:
        flags = [t._id in batched for t in e.inputs]
        args = [batched.get(t._id, remade.get(t._id, t)) for t in e.inputs]
        (out,) = e.outputs
        if not any(flags):  # the same for every seed; made again where the tapes see it
            remade[out._id] = e.prim.bind(*args, **e.params)
            continue
        t = batched[out._id] = e.prim.batch(args, flags, e.params, tuple(out.shape))
        if one_hot and t._node.kind == "op":
            t._node.seeds = n
    results = []
    for s in sources:
        ct = cts.get(s._id)
        if isinstance(ct, Tensor):
            ct = batched[ct._id] if ct._id in batched else \
                ops.broadcast_to.bind(remade.get(ct._id, ct), shape=(n,) + tuple(ct.shape))
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
