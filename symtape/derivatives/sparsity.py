"""Sparsity of Jacobians read off the tensor-level DAG, and the colouring that compresses them.

Each op says which source elements each of its output elements may depend on, given its
arguments' (``Primitive.dependencies``: one bit per source element in a Python int); a
pass over the nodes between a source and a target gives the pattern of ``d target / d
source``: exact for elementwise, structural and indexing ops, a superset where an op mixes
(a matrix product's element takes a row and a column). Rows of the Jacobian that share no
column are given one colour (greedy distance-2 colouring, as CPR); one sweep per colour,
its seed the sum of that colour's unit seeds, yields every element: ``J[i, j]`` is entry
``j`` of the product of colour ``colour[i]``. A tridiagonal Hessian takes 3 sweeps, not n.

A Hessian is symmetric, so an element can also be read from its mirror image: a *star
colouring* (a proper colouring in which every path of four vertices has three colours;
Gebremedhin, Manne and Pothen, SIAM Review 47, 2005) needs only that one of ``H[i, j]``,
``H[j, i]`` be alone of its colour in its column (:func:`positions`). An arrowhead Hessian
(every variable coupled to one) takes 2 sweeps instead of n.
"""

from __future__ import annotations

import numpy as np

from symtape.core import node as N
from symtape.core.primitive import union

__all__ = ["dependencies", "propagate", "dependency_rows", "colour_rows", "star_colour",
           "positions"]

#: Colouring visits, for each row, the rows that share its columns; beyond this many visits
#: (dense patterns, where colouring gains nothing) each row keeps its own colour. (Row
#: colouring holds the pairs as arrays: 16 bytes a visit.)
COLOUR_WORK = 20_000_000
#: The same for star colouring (its visits are Python steps).
STAR_WORK = 2_000_000


def _source_bits(source: N.Node) -> np.ndarray:
    out = np.empty(source.size, dtype=object)
    for k in range(source.size):
        out[k] = 1 << k
    return out.reshape(source.shape)


def dependencies(target: N.Node, source: N.Node) -> np.ndarray:
    """For each element of ``target``, an int whose bit ``k`` says it may depend on
    element ``k`` (C order) of ``source``.

    >>> import symtape as st
    >>> x = st.symbol("x", shape=(4,))
    >>> y = x[1:] * x[:-1]
    >>> [bin(d) for d in dependencies(y._node, x._node)]
    ['0b11', '0b110', '0b1100']
    """
    deps = propagate([target], {id(source): _source_bits(source)})
    found = deps.get(id(target))
    return np.zeros(target.shape, dtype=object) if found is None else found


def propagate(targets, sources: dict) -> dict:
    """The dependency bits (see :func:`dependencies`) of every node under ``targets`` that a
    source reaches: ``sources`` maps ``id(node)`` to the bits of its elements; returns the
    same map, extended.

    >>> import symtape as st
    >>> x = st.symbol("x", shape=(2,))
    >>> y = x * 2.0
    >>> bits = np.array([1, 2], dtype=object)
    >>> propagate([y._node], {id(x._node): bits})[id(y._node)].tolist()
    [1, 2]
    """
    deps = dict(sources)
    for node in N.ancestries(targets):
        if id(node) in deps or node.kind in ("leaf", "const"):
            continue
        ins = [deps.get(id(x)) for x in node.inputs]
        if all(d is None for d in ins):
            continue
        ins = [np.zeros(x.shape, dtype=object) if d is None else d
               for d, x in zip(ins, node.inputs)]
        if node.kind == "op":
            out = node.prim.dependencies(ins, node.params, node.shape)
        else:  # a view (a function with a user rule): every element on all its inputs
            out = np.full(node.shape, union(ins), dtype=object)
        deps[id(node)] = np.asarray(out, dtype=object).reshape(node.shape)
    return deps


def dependency_rows(target: N.Node, source: N.Node) -> list[np.ndarray]:
    """For each element of ``target`` (C order), the flat indices of the ``source``
    elements it may depend on (sorted).

    >>> import symtape as st
    >>> x = st.symbol("x", shape=(3,))
    >>> [r.tolist() for r in dependency_rows((x * x[::-1])._node, x._node)]
    [[0, 2], [1], [0, 2]]
    """
    width = (source.size + 7) // 8
    bits = dependencies(target, source).reshape(-1)
    if not len(bits):
        return []
    raw = np.frombuffer(b"".join(int(b).to_bytes(width, "little") for b in bits),
                        dtype=np.uint8).reshape(len(bits), width)
    rows, cols = np.nonzero(raw)  # only the non-zero bytes are unpacked
    on = (raw[rows, cols][:, None] >> np.arange(8, dtype=np.uint8)) & 1
    r, k = np.nonzero(on)
    places, owner = cols[r] * 8 + k, rows[r]  # (row-major: each row's places ascending)
    return np.split(places.astype(np.int64), np.cumsum(np.bincount(owner,
                                                                 minlength=len(bits)))[:-1])


def colour_rows(rows: list[np.ndarray], n_cols: int) -> np.ndarray:
    """A colour per row such that rows sharing a column differ (greedy, smallest colour
    first, rows in order); each row its own colour when the pattern is too dense to gain.

    >>> tri = [np.array([max(i - 1, 0), i, min(i + 1, 5)]) for i in range(6)]
    >>> colour_rows(tri, 6).tolist()
    [0, 1, 2, 0, 1, 2]
    """
    n = len(rows)
    lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=n)
    cols = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows]) if n else \
        np.zeros(0, dtype=np.int64)
    row_of = np.repeat(np.arange(n, dtype=np.int64), lens)
    counts = np.bincount(cols, minlength=n_cols)
    if int((counts ** 2).sum()) > COLOUR_WORK:
        return np.arange(n, dtype=np.int64)
    # the pairs of rows sharing each column (a row with itself included), by first row
    order = np.argsort(cols, kind="stable")
    col_rows, col_of = row_of[order], cols[order]
    starts = np.concatenate([[0], np.cumsum(counts)])
    per = counts[col_of]  # each entry pairs with every entry of its column
    entry = np.repeat(np.arange(len(col_of)), per)
    k = np.arange(len(entry)) - np.repeat(np.cumsum(per) - per, per)
    first, second = col_rows[entry], col_rows[starts[col_of[entry]] + k]
    by_first = np.argsort(first, kind="stable")
    neighbours = second[by_first]
    bounds = np.concatenate([[0], np.cumsum(np.bincount(first, minlength=n))])
    colour = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        taken = colour[neighbours[bounds[i]:bounds[i + 1]]]
        free = np.ones(len(taken) + 1, dtype=bool)
        free[taken[(taken >= 0) & (taken < len(free))]] = False
        colour[i] = int(np.argmax(free))
    return colour


def _symmetric(rows: list[np.ndarray], n: int) -> list[np.ndarray]:
    """The pattern with every element's mirror image added (a square one)."""
    pairs = [(i, int(j)) for i, cols in enumerate(rows) for j in cols.tolist()]
    adj: list = [set() for _ in range(n)]
    for i, j in pairs:
        adj[i].add(j)
        adj[j].add(i)
    return [np.array(sorted(a), dtype=np.int64) for a in adj]


def star_colour(rows: list[np.ndarray], n: int) -> np.ndarray:
    """A star colouring of the symmetric pattern ``rows`` (``n`` x ``n``, mirrored where it
    is not): neighbours differ, and no path of four vertices has only two colours (greedy,
    smallest colour first, vertices in order); each vertex its own colour when the pattern
    is too dense to gain.

    >>> arrow = [np.arange(5)] + [np.array([0, i]) for i in range(1, 5)]
    >>> star_colour(arrow, 5).tolist()
    [0, 1, 1, 1, 1]
    >>> colour_rows(arrow, 5).tolist()
    [0, 1, 2, 3, 4]
    """
    adj = [[int(j) for j in r.tolist() if j != i] for i, r in enumerate(_symmetric(rows, n))]
    if sum(len(a) ** 2 for a in adj) > STAR_WORK:
        return np.arange(n, dtype=np.int64)
    colour = [-1] * n
    # around[x][d]: how many of x's neighbours have colour d
    around: list = [{} for _ in range(n)]
    for v in range(n):
        near = [w for w in adj[v] if colour[w] >= 0]
        forbidden = {colour[w] for w in near}
        mine: dict = {}
        for w in near:
            mine[colour[w]] = mine.get(colour[w], 0) + 1
        for w in near:
            d = colour[w]
            for x in adj[w]:
                c = colour[x]
                if x == v or c < 0 or c in forbidden:
                    continue
                # v taking c makes v-w-x two-coloured: it must not extend to four vertices,
                # through another d neighbour of v or of x
                if mine[d] > 1 or around[x].get(d, 0) > 1:
                    forbidden.add(c)
        c = 0
        while c in forbidden:
            c += 1
        colour[v] = c
        for u in adj[v]:
            around[u][c] = around[u].get(c, 0) + 1
    return np.array(colour, dtype=np.int64)


def positions(rows: list[np.ndarray], colour: np.ndarray, n_cols: int,
              symmetric: bool = False) -> np.ndarray | None:
    """Where each element of the pattern is in the colour-major products (entry ``j`` of
    colour ``c``'s product at ``c * n_cols + j``), elements in row-major order: ``J[i, j]``
    from ``colour[i]``'s product, or when ``symmetric`` and ``i`` shares colour and column
    with another row, its mirror ``J[j, i]`` from ``colour[j]``'s. None when some element
    is in neither place alone (a colouring that does not separate them).

    >>> tri = [np.array([0, 1]), np.array([0, 1, 2]), np.array([1, 2])]
    >>> positions(tri, np.array([0, 1, 2]), 3).tolist()
    [0, 1, 3, 4, 5, 7, 8]
    """
    counts = np.array([len(r) for r in rows], dtype=np.int64)
    row_of = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
    cols = np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, dtype=np.int64)
    if not len(cols):
        return cols
    n_colours = int(colour.max()) + 1
    # how many rows of each colour each column has (of the pattern, mirrored when symmetric)
    pattern = _symmetric(rows, n_cols) if symmetric else rows
    p_counts = np.array([len(r) for r in pattern], dtype=np.int64)
    p_rows = np.repeat(np.arange(len(pattern), dtype=np.int64), p_counts)
    p_cols = np.concatenate(pattern).astype(np.int64)
    shared = np.bincount(p_cols * n_colours + colour[p_rows],
                         minlength=n_cols * n_colours)
    direct = shared[cols * n_colours + colour[row_of]] == 1
    out = colour[row_of] * n_cols + cols
    if direct.all():
        return out
    if not symmetric:
        return None
    mirror = shared[row_of * n_colours + colour[cols]] == 1
    if not (direct | mirror).all():
        return None
    return np.where(direct, out, colour[cols] * n_cols + row_of)
