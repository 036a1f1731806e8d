"""Sparse Jacobians by accumulation: every tensor's cotangents for all rows of the target at
once, each kept as its structurally non-zero elements.

A coloured sweep (:mod:`.sparsity`) carries one dense cotangent per colour through every op;
when the pattern needs as many colours as rows (a Hessian coupling most variables to a few
hundred others, as a reaction network's least-squares residual does) that is rows x the
program's elements, however few of them are non-zero. Here the cotangent of a tensor ``z``
for all target rows is the sparse matrix ``C_z`` (rows x z's elements), held as the pairs
``(row, element)`` of its pattern and a flat tensor of their values. An op's local Jacobian
``L`` (z's elements x an input's) has the pattern its ``dependencies`` give on unit bits of
that input, and values its own gradient rule gives: seeded with the indicator of a set of
z's elements no two of which share an input element (a row colouring of ``L``), the rule
returns each of their entries alone. Then ``C_u += C_z L``: the pairs joined on z's
element (index arithmetic at trace time), the values ``gather(C_z) * gather(L)`` added into
``C_u``'s places by ``scatter_add`` -- ops of the table, so the compiled program computes the
non-zeros only (each temporary the size of a pattern, never rows x elements).

Nothing here looks at an op's name. It refuses (returns None, the caller colours instead)
when an op has several results, a local Jacobian needs more than :data:`LOCAL_COLOURS`
seeds, or the patterns grow past :data:`MAX_PAIRS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from symtape import ops
from symtape.base.errors import SymtapeError
from symtape.core import node as N
from symtape.core.primitive import union
from symtape.core.variables import Tensor, exact_constant
from symtape.derivatives import sparsity

__all__ = ["Accumulated", "jacobian", "MAX_PAIRS", "LOCAL_COLOURS"]

#: The most products (pattern pairs joined) all ops together may form.
MAX_PAIRS = 1 << 25
#: The most seeds one op's local Jacobian may take (its row colouring's colours).
LOCAL_COLOURS = 64
#: Unit bits given to ``dependencies`` at a time (ints of this many bits).
CHUNK = 1 << 12
#: The most object elements ``dependencies`` may be run over in all (its calls' inputs and
#: outputs, a chunk at a time).
MAX_DEPENDENCY_WORK = 1 << 30


class Accumulated(NamedTuple):
    """The Jacobian's non-zeros: ``rows[k], cols[k]`` (flat target and source indices,
    row-major order) holds ``values[k]``; ``products``: the pairs the ops formed."""
    rows: np.ndarray
    cols: np.ndarray
    values: Tensor
    products: int


_BIT_LENGTH = np.frompyfunc(int.bit_length, 1, 1)


class _Refused(Exception):
    pass


class _Budget:
    def __init__(self) -> None:
        self.pairs = 0
        self.work = 0

    def spend_pairs(self, n: int) -> None:
        self.pairs += n
        if self.pairs > MAX_PAIRS:
            raise _Refused(f"over MAX_PAIRS={MAX_PAIRS:,} products")

    def spend_work(self, n: int) -> None:
        self.work += n
        if self.work > MAX_DEPENDENCY_WORK:
            raise _Refused(f"over MAX_DEPENDENCY_WORK={MAX_DEPENDENCY_WORK:,}")


def jacobian(entries: Sequence, target: Tensor, source: Tensor, relevant: set
             ) -> Accumulated | None:
    """``d target / d source`` over the recorded ``entries`` as its non-zeros, or None when
    accumulation refuses (see the module's text). ``relevant``: the ids of the tensors that
    depend on ``source`` (:func:`sweep.relevant_ids`).

    >>> import numpy as np, symtape as st
    >>> x = st.Variable([1.0, 2.0, 3.0])
    >>> with st.GradientTape(persistent=True) as tape:
    ...     y = x[1:] * x[:-1]
    >>> acc = tape._accumulated(y, x)
    >>> acc.rows.tolist(), acc.cols.tolist()
    ([0, 0, 1, 1], [0, 1, 1, 2])
    >>> st.function(lambda: acc.values)().numpy().tolist()
    [2.0, 1.0, 3.0, 2.0]
    """
    try:
        return _accumulate(list(entries), target, source, relevant)
    except (_Refused, SymtapeError):  # (a user's rule that reads values: the sweeps' care)
        return None


def _accumulate(entries: list, target: Tensor, source: Tensor, relevant: set) -> Accumulated:
    budget = _Budget()
    m = target.size
    # pending contributions to each tensor's cotangents: (rows, places, values)
    pending: dict = {target._id: [(np.arange(m, dtype=np.int64), np.arange(m, dtype=np.int64),
                                   exact_constant(np.ones(m), target.dtype))]}
    for e in reversed(entries):
        outs = e.outputs
        if not any(o._id in pending for o in outs):
            continue
        if len(outs) != 1:
            raise _Refused(f"{_name(e)} has several results")
        z = outs[0]
        rows, places, vals = _merged(pending.pop(z._id), z.size)
        if z.dtype.kind != "f" or not len(rows):
            continue
        for p, u in enumerate(e.inputs):
            if u._id not in relevant or u.dtype.kind != "f":
                continue
            local = _local(e, p, budget)
            if local is None:
                continue
            k_of, j_of, lvals = local
            joined = _join(rows, places, z.size, k_of, j_of, budget)
            if joined is None:
                continue
            c_at, l_at, new_rows, new_places = joined
            value = ops.gather_flat.bind(vals, idx=c_at)
            if not isinstance(lvals, np.ndarray):
                value = ops.multiply.bind(value, ops.gather_flat.bind(lvals, idx=l_at))
            elif not (lvals[l_at] == 1.0).all():
                value = ops.multiply.bind(value, exact_constant(lvals[l_at], u.dtype))
            pending.setdefault(u._id, []).append((new_rows, new_places, value))
    got = pending.get(source._id)
    if not got:
        return Accumulated(np.zeros(0, np.int64), np.zeros(0, np.int64),
                           exact_constant(np.zeros(0), source.dtype), budget.pairs)
    rows, cols, vals = _merged(got, source.size)
    return Accumulated(rows, cols, vals, budget.pairs)


def _merged(parts: list, size: int) -> tuple:
    """One cotangent from its contributions: pairs sorted row-major, duplicates added."""
    keys = [r * size + c for r, c, _ in parts]
    every = np.concatenate(keys)
    unique, inverse = np.unique(every, return_inverse=True)
    n = len(unique)
    if len(parts) == 1 and n == len(every) and (not n or (np.diff(every) > 0).all()):
        return parts[0]
    total = None
    start = 0
    for key, (_, _, value) in zip(keys, parts):
        idx = inverse[start:start + len(key)]
        start += len(key)
        part = ops.scatter_add.bind(value, idx=idx, shape=(n,))
        total = part if total is None else ops.add.bind(total, part)
    return unique // size, unique % size, total


def _local(e, p: int, budget: _Budget) -> tuple | None:
    """The local Jacobian of entry ``e``'s result in its input ``p``: ``(k, j, values)``
    (result element k, input element j, a flat tensor of the values in that order), None
    when it is structurally zero."""
    z, u = e.outputs[0], e.inputs[p]
    ks, js = _local_pattern(e, p, budget)
    if not len(ks):
        return None
    # a row colouring of L: elements of z sharing an element of u take different seeds
    order = np.argsort(ks, kind="stable")
    ks, js = ks[order], js[order]
    colour = _row_colours(ks, js, z.size, u.size)
    n_colours = int(colour.max()) + 1 if len(colour) else 0
    if n_colours > LOCAL_COLOURS:
        raise _Refused(f"{_name(e)}'s local Jacobian takes {n_colours} seeds")
    needed = [q == p for q in range(len(e.inputs))]
    listed = getattr(e.prim, "multiple_results", False)  # (a user's rule: lists)
    total = None
    for c in range(n_colours):
        seed = np.zeros(z.size)
        seed[colour == c] = 1.0
        g = exact_constant(seed.reshape(z.shape), z.dtype)
        ct = e.prim.vjp([g] if listed else g, [z] if listed else z, e.inputs, e.params,
                        needed)[p]
        if ct is None or isinstance(ct, ops.Zero) or not isinstance(ct, Tensor):
            continue
        if tuple(ct.shape) != tuple(u.shape):
            raise _Refused(f"{_name(e)}'s rule gave a cotangent of shape "
                           f"{tuple(ct.shape)}")
        idx = np.where(colour[ks] == c, js, -1) if n_colours > 1 else js
        known = _constant_value(ct._node)
        if known is not None:
            part = np.where(idx >= 0, known.reshape(-1)[np.maximum(idx, 0)], 0.0)
        else:
            part = ops.gather_flat.bind(ct, idx=idx)
        total = part if total is None else (total + part if isinstance(total, np.ndarray)
                                            and isinstance(part, np.ndarray)
                                            else ops.add.bind(total, part))
    if total is None:
        return None
    return ks, js, total


def _row_colours(ks: np.ndarray, js: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """A colour per row of the pattern ``(ks, js)`` (``ks`` sorted) such that rows sharing
    a column differ: one colour where no column is shared (elementwise ops, sums); where
    every row has one column (gathers), a row's rank among its column's; else greedy
    (:func:`sparsity.colour_rows`).

    >>> _row_colours(np.array([0, 1, 2]), np.array([4, 4, 1]), 3, 5).tolist()
    [0, 1, 0]
    """
    if not len(js) or np.bincount(js, minlength=cols).max() <= 1:
        return np.zeros(rows, dtype=np.int64)
    per_row = np.bincount(ks, minlength=rows)
    if per_row.max() <= 1:
        colour = np.zeros(rows, dtype=np.int64)
        order = np.argsort(js, kind="stable")
        by_col = js[order]
        first = np.searchsorted(by_col, by_col)  # where each row's column's run starts
        colour[ks[order]] = np.arange(len(by_col)) - first
        return colour
    bounds = np.searchsorted(ks, np.arange(rows + 1))
    return sparsity.colour_rows([js[bounds[i]:bounds[i + 1]] for i in range(rows)], cols)


def _constant_value(root) -> np.ndarray | None:
    """The value of a node computed by ops from constants alone (the node fact
    ``constant``; :func:`N.constant_value` along its ancestry); None for any other."""
    if not root.constant:
        return None
    values: dict = {}
    for node in N.ancestry(root):
        value = N.constant_value(node, values)
        if value is None:
            return None
        values[id(node)] = value
    return values[id(root)]


def _name(e) -> str:
    """The op of entry ``e``, for a refusal's reason."""
    return getattr(e.prim, "name", None) or type(e.prim).__name__


def _local_pattern(e, p: int, budget: _Budget) -> tuple:
    """``(k, j)`` pairs: result element k may depend on element j of input ``p`` (the op's
    ``dependencies`` on unit bits, :data:`CHUNK` of them at a time)."""
    z, u = e.outputs[0], e.inputs[p]
    zeros = [np.zeros(t.shape, dtype=object) for t in e.inputs]
    ks, js = [], []
    rule = getattr(e.prim, "dependencies", None)
    for start in range(0, u.size, CHUNK):
        budget.spend_work(z.size + sum(t.size for t in e.inputs))
        bits = np.zeros(u.size, dtype=object)
        stop = min(u.size, start + CHUNK)
        bits[start:stop] = [1 << k for k in range(stop - start)]
        deps = list(zeros)
        deps[p] = bits.reshape(u.shape)
        out = rule(deps, e.params, tuple(z.shape)) if rule is not None else \
            np.full(z.shape, union(deps), dtype=object)  # (a user's rule: every element)
        out = np.asarray(out, dtype=object).reshape(-1)
        at = np.flatnonzero(out != 0)
        bits = out[at]
        single = np.asarray(bits & (bits - 1) == 0, dtype=bool)  # one element (most)
        ks.append(at[single])
        js.append(start + np.asarray(_BIT_LENGTH(bits[single]), dtype=np.int64) - 1)
        for k in at[~single].tolist():
            b = int(out[k])
            while b:
                low = b & -b
                ks.append(np.array([k]))
                js.append(np.array([start + low.bit_length() - 1]))
                b ^= low
    if not ks:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(ks).astype(np.int64), np.concatenate(js).astype(np.int64)


def _join(rows: np.ndarray, places: np.ndarray, z_size: int, ks: np.ndarray, js: np.ndarray,
          budget: _Budget) -> tuple | None:
    """The pairs of ``C_z L``: for each cotangent pair ``(row, k)`` and local pair
    ``(k, j)``, the positions of both and the product's ``(row, j)``."""
    counts = np.bincount(ks, minlength=z_size)  # (ks sorted)
    starts = np.concatenate([[0], np.cumsum(counts)])
    per = counts[places]
    total = int(per.sum())
    if not total:
        return None
    budget.spend_pairs(total)
    c_at = np.repeat(np.arange(len(places), dtype=np.int64), per)
    offset = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(per) - per, per)
    l_at = starts[places][c_at] + offset
    return c_at, l_at, rows[c_at], js[l_at]
