"""Offsets of a tensor's elements in a buffer read as loop accesses: affine forms (an offset
and one stride per axis), finer index spaces where an axis steps unevenly, runs of
consecutive places, boxes and the cuts between evenly stepping pieces, and chains of moves
read as one move (their index maps composed). The loop-nest planner
(:mod:`symtape.compile.planner`) places nodes with them."""

from __future__ import annotations

import math

import numpy as np

from symtape.base.places import flat_places

__all__ = ["affine", "bounds", "box_of", "chains", "composed", "composed_move", "cuts_along",
           "finer_affine", "finer_pair", "flat_places", "fused_size", "moved_offsets",
           "paddings", "past_links", "read_box", "readers", "runs_of", "split_affine"]


def cuts_along(places: np.ndarray, d: int, most: int) -> set | None:
    """Where along axis ``d`` the pieces of ``places`` start: runs of holes (-1), and runs
    over which the places step evenly; None when there are more than ``most``.

    >>> cuts_along(np.array([[-1, 0, 1, 2], [-1, 4, 5, 6]]), 1, 64)
    {1}
    >>> sorted(cuts_along(np.array([0, 1, 2, 10, 20, 21, 22]), 0, 64))
    [3, 5]
    """
    n = places.shape[d]
    if n < 2 or places.strides[d] == 0:  # (broadcast along d: every line the same)
        return set()
    # the other broadcast axes hold copies of one line each: only one of them is looked at
    places = places[tuple(slice(0, 1) if e != d and step == 0 else slice(None)
                          for e, step in enumerate(places.strides))]
    lines = np.moveaxis(places, d, 0).reshape(n, -1)
    hole = lines < 0
    starts: set = set()
    if hole.any():
        lines = np.where(hole, 0, lines)
        starts = set((np.flatnonzero((hole[1:] != hole[:-1]).any(axis=1)) + 1).tolist())
    steps = lines[1:] - lines[:-1]  # steps[p - 1]: the step into p
    uneven = np.flatnonzero((steps[1:] != steps[:-1]).any(axis=1)) + 2
    if len(starts) + len(uneven) > most:
        return None
    out, last = set(), 0
    for p in sorted(starts | set(uneven.tolist())):
        if p in starts or p > last + 1:  # (the step into a piece's second place is its own)
            out.add(p)
            last = p
    return out




def affine(offsets: np.ndarray) -> tuple | None:
    """``(offset, strides)`` when ``offsets[idx] == offset + sum(idx * strides)``, else None.

    >>> affine(np.array([[1, 3], [5, 7]])), affine(np.array([0, 1, 3]))
    ((1, (4, 2)), None)
    >>> affine(np.broadcast_to(np.array([[2], [5]]), (2, 3)))
    (2, (3, 0))
    """
    shape = offsets.shape
    if offsets.size == 0:
        return 0, (0,) * len(shape)
    # a broadcast axis (no stride in memory: the offsets of a node read broadcast) steps by
    # 0: only the rest is checked, one element per broadcast line (planning a batched
    # sweep checks arrays of millions of offsets, mostly broadcasts)
    compact = offsets[tuple(0 if step == 0 and n > 1 else slice(None)
                            for step, n in zip(offsets.strides, shape))]
    first = int(compact.flat[0])
    strides = [0] * len(shape)
    kept = [d for d, n in enumerate(shape) if not (offsets.strides[d] == 0 and n > 1)]
    for e, d in enumerate(kept):
        if shape[d] > 1:
            at = [0] * compact.ndim
            at[e] = 1
            strides[d] = int(compact[tuple(at)]) - first
    if compact.ndim == 0 or compact.size == 1:
        return first, tuple(strides)
    # the trailing axes' offsets (a small table) against every leading index at once: one
    # pass with long inner loops, no full-size sums
    cshape, cstrides = compact.shape, [strides[d] for d in kept]
    if compact.ndim == 1 and compact.size > _AFFINE_BLOCK:  # as rows of a block each
        n, c = compact.size, _AFFINE_BLOCK
        whole = n - n % c
        head = compact[:whole].reshape(-1, c)
        tail = compact[whole:]
        if not _rows_affine(head, first, (c * cstrides[0], cstrides[0]), (len(head), c), 1):
            return None
        start = first + whole * cstrides[0]
        ok = np.array_equal(tail, start + cstrides[0] * np.arange(len(tail), dtype=np.int64))
        return (first, tuple(strides)) if ok else None
    split = len(cshape) - 1
    while split > 0 and math.prod(cshape[split:]) < 512 and \
            math.prod(cshape[split - 1:]) <= _AFFINE_BLOCK:
        split -= 1
    ok = _rows_affine(compact, first, cstrides, cshape, split)
    return (first, tuple(strides)) if ok else None


#: :func:`affine` compares offsets with their progression this many at a time (no
#: temporary of the size of 2e6 offsets).
_AFFINE_BLOCK = 1 << 16


def _rows_affine(compact: np.ndarray, first: int, strides: list, cshape: tuple,
                 split: int) -> bool:
    """Whether ``compact`` is ``first + sum(idx * strides)``: its trailing axes from
    ``split`` on (a small table) against every leading index, a block of rows at a time."""
    def ramp(axes: range):
        out = np.zeros((), dtype=np.int64)
        for e in axes:
            out = np.add.outer(out, np.arange(cshape[e], dtype=np.int64) * strides[e])
        return out.reshape(-1)

    rows = compact.reshape(-1, math.prod(cshape[split:]))
    table = ramp(range(split, len(cshape)))
    step = max(1, _AFFINE_BLOCK // max(table.size, 1))
    for r in range(0, len(rows), step):
        at = np.unravel_index(np.arange(r, min(r + step, len(rows))), cshape[:split]) \
            if split else ()
        lead = first + sum((i * s for i, s in zip(at, strides)), np.zeros(1, dtype=np.int64))
        part = rows[r:r + step]
        if not np.array_equal(part - table, np.broadcast_to(lead[:, None], part.shape)):
            return False
    return True


def finer_affine(offsets: np.ndarray):
    """``(shape, (offset, strides))`` when ``offsets`` is affine once some axes are split
    where their step changes: the windows of an image side by side, ``((n, i, j), (p, q,
    c))`` flattened to two axes, are affine over ``(n, i, j, p, (q, c))``; None otherwise.

    >>> x = np.arange(25).reshape(5, 5)
    >>> cols = np.stack([x[i:i + 3, j:j + 3].reshape(-1) for i in range(3) for j in range(3)])
    >>> finer_affine(cols)
    ((3, 3, 3, 3), (0, (5, 1, 5, 1)))
    """
    shape = tuple(offsets.shape)
    for _ in range(2 * len(shape) + 4):
        aff = affine(offsets.reshape(shape))
        if aff is not None:
            return shape, aff
        arr = offsets.reshape(shape)
        for d, n in enumerate(shape):
            if n < 3:
                continue
            line = arr[tuple(slice(None) if e == d else 0 for e in range(len(shape)))]
            steps = np.diff(line)
            run = int(np.argmax(steps != steps[0])) + 1 if (steps != steps[0]).any() else n
            if run < n and n % run == 0:
                shape = shape[:d] + (n // run, run) + shape[d + 1:]
                break
        else:
            return None
    return None


def split_affine(offsets: np.ndarray) -> tuple:
    """``(strides, index)``: ``offsets[idx] == sum(idx * strides) + index[idx]`` with every
    axis along which the offsets step evenly in ``strides`` and ``index`` constant along
    those axes (read with stride 0 there): ``index`` holds only the irregular part, taken
    at the first place of each affine axis. An indexed loop access stores ``index``.

    >>> strides, index = split_affine(np.array([[5, 0, 3], [105, 100, 103]]))
    >>> strides, index.tolist()
    ((100, 0), [[5, 0, 3]])
    """
    o = np.asarray(offsets, dtype=np.int64)
    strides = []
    rest = o
    for d, n in enumerate(o.shape):
        if n <= 1 or o.strides[d] == 0:  # (a broadcast axis steps by 0)
            strides.append(0)
            rest = rest.take([0], axis=d) if n > 1 else rest
            continue
        first = rest.take([0], axis=d)
        second = rest.take([1], axis=d)
        step = second - first
        c = int(step.flat[0])
        if np.all(step == c) and np.array_equal(
                rest, first + c * np.arange(n, dtype=np.int64).reshape(
                    (n,) + (1,) * (o.ndim - d - 1))):
            strides.append(c)
            rest = first  # constant along d from here on
        else:
            strides.append(0)
    return tuple(strides), np.ascontiguousarray(rest)


def finer_pair(src: np.ndarray, dst: np.ndarray):
    """``(shape, src affine, dst affine)`` when both 1-D arrays of places are affine over
    one finer shape (found from either of them); None otherwise.

    >>> dst = np.array([0, 2, 8, 10, 16, 18])  # every other place of a 3x8 grid
    >>> finer_pair(np.arange(6), dst)
    ((3, 2), (0, (2, 1)), (0, (8, 2)))
    """
    for a, b in ((dst, src), (src, dst)):
        found = finer_affine(a)
        if found is None:
            continue
        shape, aff_a = found
        aff_b = affine(b.reshape(shape))
        if aff_b is not None:
            return (shape, aff_b, aff_a) if a is dst else (shape, aff_a, aff_b)
    return None


def runs_of(flat: np.ndarray) -> list[int]:
    """Where the runs of consecutive values of ``flat`` start.

    >>> runs_of(np.array([4, 5, 6, 9, 10, 2]))
    [0, 3, 5]
    """
    if flat.size == 0:
        return []
    return [0] + (np.flatnonzero(np.diff(flat) != 1) + 1).tolist()


def box_of(mask: np.ndarray) -> tuple | None:
    """The slices of the box ``mask`` is true on, when it is exactly a box (else None).

    >>> box_of(np.array([[False, True, True], [False, True, True]]))
    (slice(0, 2, None), slice(1, 3, None))
    """
    if mask.ndim == 0:
        return None
    box = tuple(slice(lo, hi) for lo, hi in bounds(mask))
    return box if mask[box].all() and mask.sum() == mask[box].size else None


def bounds(mask: np.ndarray) -> tuple:
    """``((start, stop), ...)`` per axis: the smallest box holding every true element of
    ``mask`` (which has one).

    >>> bounds(np.array([[False, True, False], [False, False, True]]))
    ((0, 2), (1, 3))
    """
    out = []
    for d in range(mask.ndim):
        hit = np.flatnonzero(mask.any(axis=tuple(e for e in range(mask.ndim) if e != d)))
        out.append((int(hit[0]), int(hit[-1]) + 1))
    return tuple(out)


def composed(inner: np.ndarray, outer: np.ndarray) -> np.ndarray:
    """The index map of a move of a move: ``outer`` (flat indices into the inner move's
    result, -1: none) read through ``inner`` (flat indices into its argument, -1: none).

    >>> composed(np.array([[2, -1], [0, 1]]), np.array([3, 0, 1, -1])).tolist()
    [1, 2, -1, -1]
    """
    flat = inner.reshape(-1)
    safe = np.where(outer < 0, 0, outer)
    return np.where(outer < 0, -1, flat[safe] if flat.size else -1)


def moved_offsets(node, locs: list, maps: list, buf: int, shape: tuple,
                  batched: bool) -> np.ndarray:
    """The places in ``buf`` of a move's elements: element ``j`` at argument ``a``'s places
    ``locs[a][1]`` read at ``maps[a][j]`` (0 where no map of ``buf``'s reaches; ``batched``:
    rows of points first). ``node``: a one-argument move covering its result, whose op's
    own rearrangement of the places is used (``Primitive.moved``: a view for a slice,
    reshape or transposition) where it has one."""
    if node is not None and len(node.inputs) == 1 and not batched:
        via = node.prim.moved(locs[0][1], [tuple(node.inputs[0].shape)], node.params)
        if via is not None:
            return via
    if len(maps) == 1 and locs[0][0] == buf and not batched and bool((maps[0] >= 0).all()):
        return locs[0][1].reshape(-1)[maps[0]]
    offsets = np.zeros(shape, dtype=np.int64)
    for (b, offs), m in zip(locs, maps):
        inside = m >= 0
        if b != buf or not inside.any():
            continue
        if batched:
            offsets[:, inside] = offs.reshape(shape[0], -1)[:, m[inside]]
        else:
            offsets[inside] = offs.reshape(-1)[m[inside]]
    return offsets


def chains(order: list, users: dict) -> dict:
    """``id(move) -> (source, map)`` for the float moves of one argument (``Primitive.places``)
    read only by other such moves (not outputs: ``users`` holds None for those): the first
    links of chains of moves, each with the node its elements come from (the chain's first
    argument that is not such a link) and the composed index map into it. A reader of the
    chain reads the source at the composed places: a move of a move is one move."""
    out: dict = {}
    maps: dict = {}  # id(node) -> its index map, None: not such a move (computed once)

    def moved(node):
        if id(node) not in maps:
            maps[id(node)] = node.prim.places(node) if (
                node.kind == "op" and len(node.inputs) == 1 and node.dtype.kind == "f") \
                else None
        return maps[id(node)]

    for node in order:  # (arguments before their users)
        use = users.get(id(node), [])
        if not use or moved(node) is None or not all(
                u is not None and moved(u) is not None for u in use):
            continue
        (arg,) = node.inputs
        m = moved(node)
        if id(arg) in out:
            arg, inner = out[id(arg)]
            m = composed_move(node, inner, m)
        out[id(node)] = (arg, m)
    return out


def composed_move(node, inner: np.ndarray, outer: np.ndarray) -> np.ndarray:
    """:func:`composed` for the one-argument move ``node`` (``outer``: its index map): the
    op's own rearrangement of ``inner`` where it has one (``Primitive.moved``: a slice of a
    reshape is a view, not three arrays of the chain's size), else (or ``node`` None) the
    gather."""
    if node is None:
        return composed(inner, outer)
    shape = tuple(node.inputs[0].shape)
    via = node.prim.moved(inner.reshape(shape), [shape], node.params)
    return composed(inner, outer) if via is None else via


def readers(order: list, outputs: list) -> dict:
    """``id(node) -> [the nodes reading it]`` over the nodes ``order`` (arguments first),
    None for each time it is one of ``outputs``."""
    users: dict = {}
    for node in order:
        for a in node.inputs:
            users.setdefault(id(a), []).append(node)
    for node in outputs:
        users.setdefault(id(node), []).append(None)
    return users


def read_box(node, users: list) -> tuple:
    """``((start, stop), ...)`` per axis of ``node``: a box holding every element its
    ``users`` (:func:`readers`) read. An output (None) and an op computing its elements
    read all of it; an op moving elements (``moves``, without elements it computes) only
    those its map takes from ``node`` -- a padded input's gradient keeps its interior.

    >>> import symtape as st
    >>> x = st.symbol("x", shape=(4, 5))
    >>> inner = x[1:3, 1:4]._node
    >>> read_box(x._node, [inner]), read_box(x._node, [inner, None])
    (((1, 3), (1, 4)), ((0, 4), (0, 5)))
    """
    full = tuple((0, n) for n in node.shape)
    seen = np.zeros(node.size, dtype=bool)
    for u in users:
        moves = None if u is None else u.prim.moves([a.shape for a in u.inputs], u.params)
        if moves is None or moves[1] is not None:
            return full
        for a, m in zip(u.inputs, moves[0]):
            if a is node:
                m = np.asarray(m).reshape(-1)
                seen[m[m >= 0]] = True
    return bounds(seen.reshape(node.shape)) if seen.any() else full


def past_links(users: dict, links: dict) -> dict:
    """``users`` (``id(node) -> [its readers]``) with each link of a chain of moves
    (:func:`chains`) replaced by its own readers: who reads a node through the chains."""
    def past(use: list) -> list:
        out = []
        for u in use:
            out.extend(past(users.get(id(u), [])) if u is not None and id(u) in links
                       else [u])
        return out

    return {k: past(use) for k, use in users.items()}


def paddings(order: list, holey: set, outs: set) -> set:
    """Moves of their one argument among the ``holey`` nodes (read only by elementwise ops
    of their shape) that are not ``outs``: scatters to distinct places with zeros left,
    whose zeros may stay unwritten, and rearrangements (a reshape, a transpose, a slice, a
    gather, a broadcast). An elementwise argument of one is computed where it is read, so
    the reader's template folds into it: a select's zero branch stays exact through the
    move (no ``where`` trap)."""
    out = set()
    for node in order:
        if id(node) not in holey or id(node) in outs or node.kind != "op" or \
                len(node.inputs) != 1:
            continue
        if node.prim.places(node) is not None:  # (holey nodes are floats)
            out.add(id(node))
    return out


def fused_size(node, fused: set) -> int:
    """The nodes of ``node``'s fused template (itself and the arguments built into it)."""
    return 1 + sum(fused_size(a, fused) for a in node.inputs if id(a) in fused)
