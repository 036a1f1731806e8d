"""Offsets of a tensor's elements in a buffer read as loop accesses: affine forms (an offset
and one stride per axis), finer index spaces where an axis steps unevenly, runs of
consecutive places, boxes and the cuts between evenly stepping pieces. The loop-nest planner
(:mod:`symtape.compile.planner`) places nodes with them."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["affine", "box_of", "cuts_along", "finer_affine", "finer_pair", "flat_places",
           "runs_of"]


def cuts_along(places: np.ndarray, d: int, most: int) -> set | None:
    """Where along axis ``d`` the pieces of ``places`` start: runs of holes (-1), and runs
    over which the places step evenly; None when there are more than ``most``.

    >>> cuts_along(np.array([[-1, 0, 1, 2], [-1, 4, 5, 6]]), 1, 64)
    {1}
    >>> sorted(cuts_along(np.array([0, 1, 2, 10, 20, 21, 22]), 0, 64))
    [3, 5]
    """
    n = places.shape[d]
    if n < 2:
        return set()
    lines = np.moveaxis(places, d, 0).reshape(n, -1)
    hole = lines < 0
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


def flat_places(shape: tuple) -> np.ndarray:
    """The offsets of a fresh buffer of ``shape``: element ``k`` at ``k``.

    >>> flat_places((2, 3)).tolist()
    [[0, 1, 2], [3, 4, 5]]
    """
    return np.arange(math.prod(shape), dtype=np.int64).reshape(shape)


def affine(offsets: np.ndarray) -> tuple | None:
    """``(offset, strides)`` when ``offsets[idx] == offset + sum(idx * strides)``, else None.

    >>> affine(np.array([[1, 3], [5, 7]])), affine(np.array([0, 1, 3]))
    ((1, (4, 2)), None)
    """
    shape = offsets.shape
    if offsets.size == 0:
        return 0, (0,) * len(shape)
    first = int(offsets.flat[0])
    strides = []
    expected = np.full((1,) * len(shape), first, dtype=np.int64)
    for d, n in enumerate(shape):
        step = 0
        if n > 1:
            at = [0] * len(shape)
            at[d] = 1
            step = int(offsets[tuple(at)]) - first
        strides.append(step)
        line = (np.arange(n, dtype=np.int64) * step).reshape(
            tuple(n if e == d else 1 for e in range(len(shape))))
        expected = expected + line
    return (first, tuple(strides)) if np.array_equal(np.broadcast_to(expected, shape),
                                                     offsets) else None


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
    box = []
    for d in range(mask.ndim):
        hit = np.flatnonzero(mask.any(axis=tuple(e for e in range(mask.ndim) if e != d)))
        box.append(slice(int(hit[0]), int(hit[-1]) + 1))
    box = tuple(box)
    return box if mask[box].all() and mask.sum() == mask[box].size else None
