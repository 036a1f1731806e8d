"""Which path each compiled function takes, and why: every threshold that chooses one.

``st.compile``, ``st.function`` and the derivative transforms ask this module at each choice
and record the answer, a :class:`Strategy` (a name and the reason in words, with the numbers
that decided it), on the compiled object's ``strategies``; ``explain=True`` prints each as
it is chosen. The paths:

- how a function's outputs become native code: ``element-kernel`` (its element view,
  straight-line), ``loop-nest`` (loop nests over the tensor nodes, :mod:`~.planner`, for a
  function called once per call), ``point-loop`` (loop nests run over chunks of points: a
  function of one point, ``st.compile`` and the transforms, or a pass over a batch's
  examples), ``sparse-elements`` (only the element view's non-zeros);
- how derivatives are taken: ``value`` (order 0), ``reverse-sweep`` (a gradient),
  ``batched-sweep`` (a Jacobian: one sweep of one-hot seeds), ``nested-sweeps`` (higher
  orders: a batched sweep over each lower order's), ``taylor`` (Taylor mode in a scalar
  argument), ``mixed-directions`` (mixed partials interpolated from Taylor series along
  directions), ``taylor-directional``, ``reverse-over-reverse`` (Hessian-vector products),
  ``coloured-jacobian``, ``coloured-hessian`` and ``star-coloured-hessian`` (sparse: one
  sweep per colour), ``accumulated-jacobian`` and ``accumulated-hessian`` (sparse, where
  colouring gains little: every cotangent kept as its non-zeros);
- how an ``st.function`` with a ``None`` batch dimension runs: ``batch-split`` (one trace
  for every batch size, :mod:`~.batching`) or ``per-size-traces``.

The thresholds are this module's, the loop-nest ones included (:func:`worth_looping`,
:func:`point_chunk`); the planner only carries out the plan chosen.

>>> import symtape as st
>>> g = st.grad(lambda x: st.reduce_sum(x ** 2), input_signature=[st.TensorSpec((3,))],
...             explain=True)  # doctest: +ELLIPSIS
lambda_grad: reverse-sweep: a gradient: one reverse sweep
lambda_grad: element-kernel: about ... atoms <= POINT_LOOP_MIN_ATOMS=...
>>> [s.name for s in g.strategies]
['reverse-sweep', 'element-kernel']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from symtape.base.errors import LoweringError, UnboundLeafError
from symtape.base.lazy import LazyModule
from symtape.codegen.loops import POINT_ALIGN
from symtape.compile import batching
from symtape.compile import planner
from symtape.core import node as N

G = LazyModule("G", globals(), "symtape.element.graph")

__all__ = ["Strategy", "StrategyLog", "POINT_CHUNK", "TAYLOR_MIN_ORDER", "MIXED_MIN_ORDER",
           "MIXED_DIRECTIONS", "MIXED_MAX_DIRECTIONS", "kernel", "unplannable",
           "sparse_elements", "elements_only", "summing_pass", "batch_split", "per_size_traces",
           "sweeps", "derivative", "mixed_worth", "taylor_fallback", "directional",
           "reverse_over_reverse", "colouring", "try_accumulation", "accumulation",
           "sweep_refused", "ACCUMULATE_SHARE", "ACCUMULATE_MIN", "ACCUMULATE_SWEEP_ELEMENTS",
           "MAX_SWEEP_ELEMENTS",
           "LOOP_MIN_ATOMS", "LOOP_MAX_BLOCKS",
           "LOOP_ALWAYS_ATOMS", "POINT_LOOP_MIN_ATOMS", "POINT_LOOP_MATMUL_TERMS",
           "POINT_LOOP_MAX_ELEMENTS",
           "POINT_LOOP_MAX_BLOCKS", "FOLD_PROBE_ATOMS", "FOLD_PROBE_SHARE", "CHUNK_ELEMENTS",
           "worth_looping", "element_estimate", "point_chunk", "view_refused"]


# --------------------------------------------------------------------------------------------
# Thresholds
# --------------------------------------------------------------------------------------------

#: Functions whose element view would have more atoms than this are planned as loop nests.
LOOP_MIN_ATOMS = 20_000
#: ... unless they have more tensor ops (loop blocks) than this and fewer atoms than
#: LOOP_ALWAYS_ATOMS: many small tensor ops compile faster as their element view.
LOOP_MAX_BLOCKS = 400
LOOP_ALWAYS_ATOMS = 5_000_000
#: The same for functions of one point run over many (st.grad, st.compile): their loop plans
#: run chunks of points through each loop, which pays from a smaller size.
POINT_LOOP_MIN_ATOMS = 8_000
#: ... or whose matrix products have this many terms, in at most POINT_LOOP_MAX_BLOCKS
#: tensor ops (an 8-16-16-1 MLP's gradient: 2x faster than its straight-line lanes; its
#: Hessian, 192 blocks: 1.2x).
POINT_LOOP_MATMUL_TERMS = 512
POINT_LOOP_MAX_BLOCKS = 256

#: Functions of one point compiled as loop nests run this many points through each loop at
#: once (a matrix product of each point's row vector becomes one over the chunk).
POINT_CHUNK = 64
#: ``st.derivative`` of a scalar argument takes Taylor mode from this order on.
TAYLOR_MIN_ORDER = 2
#: ... and of a vector argument from this order on, interpolating its mixed partials from
#: the series along ``C(n + order - 1, order)`` directions, at most MIXED_DIRECTIONS at
#: order 4 and MIXED_MAX_DIRECTIONS above (``python benchmarks/taylor.py --mixed``: at order
#: 4 of 2-4 inputs as fast to set up as nested sweeps and up to 2.3x faster to run, of 5-6
#: slower to set up; from order 5, 20-80x faster to set up; at order 2-3 nested sweeps are
#: as fast or faster).
MIXED_MIN_ORDER = 4
MIXED_DIRECTIONS = 60
MIXED_MAX_DIRECTIONS = 330


# --------------------------------------------------------------------------------------------
# Strategies and their record
# --------------------------------------------------------------------------------------------



# --------------------------------------------------------------------------------------------
# Loop nests or the element view: the estimate
# --------------------------------------------------------------------------------------------

def worth_looping(outputs: Sequence[N.Node], limit: int | None = None,
                  points: bool = False) -> bool:
    """Whether the element view under ``outputs`` would exceed ``limit`` atoms (default
    :data:`LOOP_MIN_ATOMS`; a matrix product counts its terms; a view already built costs
    nothing) without more than :data:`LOOP_MAX_BLOCKS` tensor ops, or would exceed
    :data:`LOOP_ALWAYS_ATOMS` (the one test for the nodes of a batched sweep); and, for a
    function that scatters, below :data:`FOLD_PROBE_ATOMS`, unless the element view, built
    to see, folds to far fewer definitions than the estimate (one-hot scatters of scalar
    code).

    >>> import symtape as st
    >>> x = st.symbol("x", shape=(60,))
    >>> with st.GradientTape() as t:
    ...     y = sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(59))
    >>> worth_looping([t.gradient(y, x)._node], 8000)  # 10,560 atoms estimated, 655 built
    False
    """
    limit = LOOP_MIN_ATOMS if limit is None else limit
    total, blocks, terms, seeded, scatters = _estimate(outputs)
    if view_refused(outputs) is not None:
        return True
    if seeded:
        # a batched sweep (a Jacobian, a Hessian): its element view holds only what each
        # one-hot seed reaches (three terms a row of a banded Hessian, the pairs of one body
        # in an N-body one), where loops would compute every seed's rows densely
        return total > LOOP_ALWAYS_ATOMS
    if points and terms >= POINT_LOOP_MATMUL_TERMS and blocks <= POINT_LOOP_MAX_BLOCKS:
        return True  # each point's matrix-vector products become products over the chunk
    if total <= limit:
        return False
    # LLVM spends some 10-15 ms on each block: thousands of small tensor ops (a Hessian's
    # sweeps over 60 coordinates) compile faster as their element view
    if not (blocks <= LOOP_MAX_BLOCKS or total > LOOP_ALWAYS_ATOMS):
        return False
    return not scatters or total > FOLD_PROBE_ATOMS or not _folds_away(outputs, total)


def _estimate(outputs: Sequence[N.Node]) -> tuple:
    """``(atoms, tensor ops, matrix-product terms, seeded, scatters)`` of the element view
    under ``outputs`` not built yet (estimated from the tensor sizes)."""
    total, blocks, terms, seeded, scatters, seen = 0, 0, 0, False, False, set()
    stack = list(outputs)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        op = node.prim if node.kind == "op" else None
        scatters = scatters or (op is not None and op.scatters)
        if node.built:
            continue
        seen.add(id(node))
        cost = _atoms_cost(node)
        total += cost
        seeded = seeded or node.seeds > 1
        if op is not None and not op.loop_view:
            blocks += 1
            terms += cost if op.product_terms else 0
        stack.extend(node.inputs)
    return total, blocks, terms, seeded, scatters


def view_refused(outputs: Sequence[N.Node]) -> str | None:
    """Why a node under ``outputs`` has no element view to compile (its op's
    ``view_refused``), or None.

    >>> import symtape as st
    >>> view_refused([st.sin(st.symbol("x"))._node]) is None
    True
    """
    return N.view_refused(outputs)


def element_estimate(outputs: Sequence[N.Node]) -> int:
    """The atoms the element view under ``outputs`` would have (a matrix product counts its
    terms): what compiling it element by element would build.

    >>> import symtape as st
    >>> x = st.symbol("x", shape=(3, 4))
    >>> element_estimate([st.matmul(x, st.transpose(x))._node])  # 3x3 of 4, x, x^T
    60
    """
    return _estimate(outputs)[0]


#: Below this many atoms (estimated from the tensor sizes), a function the estimate would
#: loop and that scatters (the gradient of indexing) has its element view built first, to
#: see whether it folds away (below); building costs about 5 us an atom.
FOLD_PROBE_ATOMS = 30_000
#: ... and is compiled from the element view when that has fewer than this share of the
#: estimate: scalar code indexing a vector (``x[i]``) differentiates into one-hot
#: scatters whose sums fold to a few terms per element (Rosenbrock n=60 written with
#: ``x[i]``: 10,560 atoms estimated, 655 definitions; 13 us a point looped, 31 ns unrolled).
FOLD_PROBE_SHARE = 0.25


def _folds_away(outputs: Sequence[N.Node], total: int) -> bool:
    """Whether the element view under ``outputs`` has fewer definitions than
    :data:`FOLD_PROBE_SHARE` of ``total`` (it is built, and kept on the nodes)."""
    try:
        atoms = [node.atoms() for node in outputs]
    except UnboundLeafError:
        return False
    found = G.reachable([a for arr in atoms for a in np.asarray(arr, dtype=object).flat])
    return len(found) < FOLD_PROBE_SHARE * total


#: A plan over points takes chunks of at most this many elements of its largest tensor (a
#: few hundred KB): beyond, a chunk's buffers leave the caches (a sparse Hessian of n = 5000,
#: 15,000 values a point: 95 us a point in chunks of 64 points, 25 us in chunks of 4).
CHUNK_ELEMENTS = 1 << 15
#: ... and one point at a time (no chunks) when a tensor has more elements than this: its
#: loops are long enough on their own, and a chunk would multiply its temporaries and the
#: planner's place arrays by POINT_ALIGN (a 10^6-step scan's stored carries: 64 MB each).
POINT_LOOP_MAX_ELEMENTS = 1 << 20


def point_chunk(outputs: Sequence[N.Node], most: int, totals: Sequence[str] = ()) -> int:
    """The points a chunk of a plan over points takes: ``most``, fewer for large tensors
    (a multiple of :data:`~symtape.codegen.loops.POINT_ALIGN`); ``totals`` as
    :func:`plan_loops` takes them (a total summed without its per-point terms held does
    not count)."""
    largest = _largest(outputs, totals)
    fit = CHUNK_ELEMENTS // max(largest, 1) // POINT_ALIGN * POINT_ALIGN
    return max(POINT_ALIGN, min(most, fit))


def _largest(outputs: Sequence[N.Node], totals: Sequence[str] = ()) -> int:
    """The elements of the largest computed tensor a plan of ``outputs`` places."""
    return max((node.size for node in N.ancestries(planner.plan_roots(outputs, totals))
                if node.kind not in ("const", "leaf")), default=1)


def _atoms_cost(node: N.Node) -> int:
    """The atoms of ``node``'s element view (a contraction counts its terms)."""
    return node.prim.element_cost(node) if node.kind == "op" else node.size


class Strategy(NamedTuple):
    """A path chosen: ``name`` (see the module's list), ``reason`` in words with the numbers
    that decided it, ``points`` the chunk of a ``point-loop`` (0 otherwise)."""

    name: str
    reason: str
    points: int = 0

    @property
    def loops(self) -> bool:
        """Whether the path is a loop plan."""
        return self.name in ("loop-nest", "point-loop")


class StrategyLog:
    """The strategies chosen for one compiled object, in order; with ``explain``, each is
    printed (``what: name: reason``) as it is chosen."""

    def __init__(self, explain: bool = False) -> None:
        self.explain = bool(explain)
        self.taken: list[Strategy] = []

    def add(self, strategy: Strategy, what: str | None) -> Strategy:
        """Records ``strategy``, chosen for the compiled function named ``what``."""
        self.taken.append(strategy)
        if self.explain:
            print(f"{what or 'fn'}: {strategy.name}: {strategy.reason}")
        return strategy


# --------------------------------------------------------------------------------------------
# Native code: element view or loop nests
# --------------------------------------------------------------------------------------------


def kernel(nodes: Sequence[N.Node], points: bool = False) -> Strategy:
    """Element view or loop nests for the tensor nodes ``nodes`` (:func:`worth_looping`
    with :data:`LOOP_MIN_ATOMS`; ``points``: a function of one point run over
    chunks of points, which loops from :data:`POINT_LOOP_MIN_ATOMS`, in chunks of at
    most :data:`POINT_CHUNK`).

    >>> import symtape as st
    >>> x = st.symbol("x", shape=(100, 100))
    >>> kernel([st.matmul(x, x)._node])
    Strategy(name='loop-nest', reason='about 1,010,000 atoms > LOOP_MIN_ATOMS=20,000', \
points=0)
    >>> kernel([st.sin(st.symbol("y", shape=(3,)))._node], points=True).name
    'element-kernel'
    """
    limit, limit_name = LOOP_MIN_ATOMS, "LOOP_MIN_ATOMS"
    if points and POINT_LOOP_MIN_ATOMS < limit:
        limit, limit_name = POINT_LOOP_MIN_ATOMS, "POINT_LOOP_MIN_ATOMS"
    atoms = element_estimate(nodes)  # (first: worth_looping may build the view)
    size = f"about {atoms:,} atoms"
    if not worth_looping(nodes, limit, points=points):
        if atoms <= limit:
            return Strategy("element-kernel", f"{size} <= {limit_name}={limit:,}")
        return Strategy("element-kernel", (
            f"{size} > {limit_name}={limit:,}, but worth_looping keeps the element "
            "view: a batched sweep's one-hot seeds (loops only past "
            f"LOOP_ALWAYS_ATOMS={LOOP_ALWAYS_ATOMS:,}), more than "
            f"LOOP_MAX_BLOCKS={LOOP_MAX_BLOCKS} tensor ops, or scatters whose element "
            f"view folds away (below FOLD_PROBE_ATOMS={FOLD_PROBE_ATOMS:,})"))
    refused = view_refused(nodes)
    if refused is not None:
        why = f"{size}, but {refused}"
    elif atoms > LOOP_ALWAYS_ATOMS:
        why = f"{size} > LOOP_ALWAYS_ATOMS={LOOP_ALWAYS_ATOMS:,}"
    elif atoms > limit:
        why = f"{size} > {limit_name}={limit:,}"
    else:
        why = (f"{size} <= {limit_name}={limit:,}, but matrix products of at least "
               f"POINT_LOOP_MATMUL_TERMS={POINT_LOOP_MATMUL_TERMS} terms in at most "
               f"POINT_LOOP_MAX_BLOCKS={POINT_LOOP_MAX_BLOCKS} tensor ops")
    if not points:
        return Strategy("loop-nest", why)
    largest = _largest(nodes)
    if largest > POINT_LOOP_MAX_ELEMENTS:
        return Strategy("point-loop", f"{why}; one point at a time: a tensor of {largest:,} "
                        f"elements > POINT_LOOP_MAX_ELEMENTS={POINT_LOOP_MAX_ELEMENTS:,}")
    chunk = point_chunk(nodes, POINT_CHUNK)
    return Strategy("point-loop", f"{why}; chunks of {chunk} points (POINT_CHUNK={POINT_CHUNK})",
                    chunk)


def unplannable(nodes: Sequence[N.Node], error: Exception, name: str | None) -> Strategy:
    """The element view of nodes :func:`kernel` would loop but a tensor op of which has no
    loop form (``error``); LoweringError when it would have more than
    :data:`LOOP_ALWAYS_ATOMS` atoms (building it would take minutes and gigabytes)."""
    atoms = element_estimate(nodes)
    if atoms > LOOP_ALWAYS_ATOMS:
        raise LoweringError(
            f"{name or 'the function'}: a tensor op has no loop form ({error}) and the element "
            f"view would have about {atoms:,} atoms (more than "
            f"{LOOP_ALWAYS_ATOMS:,}): too large to compile element by element. "
            "Compile smaller pieces, or use eager evaluation") from None
    return Strategy("element-kernel", f"a tensor op has no loop form ({error}); about {atoms:,} "
                    f"atoms <= LOOP_ALWAYS_ATOMS={LOOP_ALWAYS_ATOMS:,}")


def sparse_elements() -> Strategy:
    """``st.compile(..., sparse=True)``: the element view's non-zero elements."""
    return Strategy("sparse-elements", "sparse=True: only the elements that are not the "
                    "constant 0, straight-line")


def elements_only(why: str) -> Strategy:
    """The element view, the only form of what is compiled (``why``: what it is)."""
    return Strategy("element-kernel", f"{why} exist only as elements")


# --------------------------------------------------------------------------------------------
# st.function over a None batch
# --------------------------------------------------------------------------------------------


def summing_pass(nodes: Sequence[N.Node], totals: Sequence[str]) -> Strategy:
    """A pass of a split function whose outputs ``totals`` (``'sum'``, ``'max'``, ...) it
    accumulates over the examples: loop nests over chunks of points (no element view)."""
    chunk = point_chunk(nodes, POINT_CHUNK, totals)
    kinds = ", ".join(sorted({k for k in totals if k}))
    return Strategy("point-loop", f"a pass accumulating totals ({kinds}) over the examples; "
                    f"chunks of {chunk} points (POINT_CHUNK={POINT_CHUNK})", chunk)


def batch_split(passes: int, post: bool) -> Strategy:
    """One trace for every batch size: ``passes`` over the examples and perhaps a post
    program."""
    sizes = ", ".join(map(str, batching.SIZES))
    return Strategy("batch-split", (
        f"the traces at batch sizes {sizes} are one program: {passes} pass"
        f"{'es' if passes != 1 else ''} over the examples"
        f"{' and a post program' if post else ''}, for every batch size"))


def per_size_traces(why: str) -> Strategy:
    """A function with a None batch traced again for each batch size, because ``why``."""
    return Strategy("per-size-traces", f"{why}: traced for each batch size")


# --------------------------------------------------------------------------------------------
# Derivatives
# --------------------------------------------------------------------------------------------


def sweeps(order: int, scalar: bool) -> Strategy:
    """Derivatives of ``order`` by reverse sweeps (``scalar``: of a scalar function, a
    gradient or Hessian)."""
    if order == 0:
        return Strategy("value", "order 0: the function itself")
    if order == 1:
        return Strategy("reverse-sweep", "a gradient: one reverse sweep") if scalar else \
            Strategy("batched-sweep", "a Jacobian: one batched reverse sweep, a one-hot seed "
                     "per output element")
    if order == 2 and scalar:
        return Strategy("nested-sweeps", "a Hessian: one batched sweep over the gradient's "
                        "reverse sweep")
    return Strategy("nested-sweeps", f"order {order}: {order} nested sweeps, a batched one "
                    "over each lower order's")


def mixed_worth(n: int, order: int) -> bool:
    """Whether the partials of ``order`` in ``n`` inputs take Taylor interpolation.

    >>> mixed_worth(2, 3), mixed_worth(2, 4), mixed_worth(6, 4), mixed_worth(4, 5)
    (False, True, False, True)
    """
    return _mixed(n, order)[0]


def _mixed(n: int, order: int) -> tuple[bool, str]:
    directions = math.comb(n + order - 1, order)
    count = f"C({n} + {order} - 1, {order}) = {directions:,} directions"
    if order < MIXED_MIN_ORDER:
        return False, f"order {order} < MIXED_MIN_ORDER={MIXED_MIN_ORDER} in {n} inputs"
    if order == MIXED_MIN_ORDER:
        return directions <= MIXED_DIRECTIONS, f"order {order} in {n} inputs: {count} " + (
            "<=" if directions <= MIXED_DIRECTIONS else ">") + \
            f" MIXED_DIRECTIONS={MIXED_DIRECTIONS}"
    return directions <= MIXED_MAX_DIRECTIONS, f"order {order} in {n} inputs: {count} " + (
        "<=" if directions <= MIXED_MAX_DIRECTIONS else ">") + \
        f" MIXED_MAX_DIRECTIONS={MIXED_MAX_DIRECTIONS}"


def derivative(order: int, n: int, single: bool, scalar: bool) -> Strategy:
    """``st.derivative`` of ``order`` in one argument (``single``) of ``n`` elements: Taylor
    mode in a scalar from :data:`TAYLOR_MIN_ORDER`, interpolated mixed partials in a vector
    where :func:`mixed_worth`, else sweeps (``scalar``: of a scalar function).

    >>> derivative(5, 1, True, True).name, derivative(4, 3, True, True).reason
    ('taylor', 'order 4 in 3 inputs: C(3 + 4 - 1, 4) = 15 directions <= MIXED_DIRECTIONS=60')
    >>> derivative(3, 2, True, True).name
    'nested-sweeps'
    """
    if order == 0:
        return sweeps(0, scalar)
    if not single:
        why = "several arguments (argnums a sequence)"
    elif order < TAYLOR_MIN_ORDER:
        why = f"order {order} < TAYLOR_MIN_ORDER={TAYLOR_MIN_ORDER}"
    elif n == 1:
        return Strategy("taylor", f"order {order} >= TAYLOR_MIN_ORDER={TAYLOR_MIN_ORDER} in a "
                        "scalar argument: Taylor mode, O(order^2) per op")
    else:
        worth, why = _mixed(n, order)
        if worth:
            return Strategy("mixed-directions", why)
    swept = sweeps(order, scalar)
    return swept._replace(reason=f"{why}; {swept.reason}")


def taylor_fallback(order: int, scalar: bool) -> Strategy:
    """Sweeps where Taylor mode was chosen but does not apply."""
    swept = sweeps(order, scalar)
    return swept._replace(reason="Taylor mode does not apply (a head without a Taylor rule, "
                          f"or a custom derivative rule in the way); {swept.reason}")


def directional(order: int, taylor: bool) -> Strategy:
    """``d^order/dt^order f(x + t v)``: Taylor mode along ``v`` (``taylor``), else sweeps."""
    if order == 0:
        return sweeps(0, False)
    if taylor:
        return Strategy("taylor-directional", f"order {order}: one Taylor series along v, "
                        f"{order + 1} coefficients per element")
    return Strategy("nested-sweeps", "Taylor mode does not apply (a head without a Taylor "
                    "rule, or a custom derivative rule in the way); "
                    f"{order} batched sweeps, each a Jacobian contracted with v")


def reverse_over_reverse() -> Strategy:
    """``st.hvp``: the gradient of ``<grad f, v>``."""
    return Strategy("reverse-over-reverse", "the gradient of <grad f(x), v>: two reverse "
                    "sweeps, whatever the size of x")


#: Sparse derivatives try accumulation (:mod:`symtape.derivatives.accumulation`) when a
#: colouring needs more than this share of the columns' count as colours ...
ACCUMULATE_SHARE = 0.25
#: ... there are at least this many columns ...
ACCUMULATE_MIN = 32
#: ... and the coloured sweep would carry more than this many elements a point (colours x
#: the largest tensor on its path): below it, the plan's zero analysis
#: (:mod:`~symtape.compile.sparse_terms`, which looks at up to 2^22 iterations a block)
#: computes a sweep's non-zeros alone, and runs faster than accumulation's gathers
#: (``python benchmarks/reaction.py --hessian --sizes 300:900,2000:6000``: at 300 species
#: 0.28 ms a point coloured, 0.69 ms accumulated; at 2,000, 170 ms and 6 GB coloured, 4.3
#: ms and 0.7 GB accumulated).
ACCUMULATE_SWEEP_ELEMENTS = 1 << 22


def try_accumulation(colours: int, cols: int, largest: int) -> bool:
    """Whether a sparse derivative of ``cols`` columns whose colouring takes ``colours``
    colours, through tensors of at most ``largest`` elements, should be accumulated
    instead: colouring gains little over a dense sweep, and the sweep is too large for its
    zeros to be found element by element.

    >>> try_accumulation(2000, 2000, 18000), try_accumulation(300, 300, 2700)
    (True, False)
    >>> try_accumulation(3, 2000, 18000), try_accumulation(8, 8, 10 ** 7)
    (False, False)
    """
    return (cols >= ACCUMULATE_MIN and colours > ACCUMULATE_SHARE * cols
            and colours * largest > ACCUMULATE_SWEEP_ELEMENTS)


def accumulation(hessian: bool, rows: int, colours: int, products: int) -> Strategy:
    """A sparse Jacobian (or ``hessian``) accumulated as its non-zeros, where a colouring
    took ``colours`` colours.

    >>> accumulation(True, 300, 290, 45_000).name
    'accumulated-hessian'
    """
    kind = "hessian" if hessian else "jacobian"
    return Strategy(f"accumulated-{kind}", f"{colours} colours for {rows:,} rows: every "
                    f"op's cotangents for all rows kept as their non-zeros ({products:,} "
                    "products) instead of one dense sweep per colour")


#: A coloured sweep carries a cotangent per colour of each tensor on its path: refused
#: beyond this many elements (colours x the largest such tensor; 2 GiB of float64).
MAX_SWEEP_ELEMENTS = 1 << 28


def sweep_refused(colours: int, largest: int) -> str | None:
    """Why a coloured sweep of ``colours`` seeds through tensors of at most ``largest``
    elements is refused, or None.

    >>> sweep_refused(100, 10_000) is None, sweep_refused(20_000, 180_000)[:40]
    (True, '20,000 colours x 180,000 elements = 3,60')
    """
    if colours * largest <= MAX_SWEEP_ELEMENTS:
        return None
    return (f"{colours:,} colours x {largest:,} elements = {colours * largest:,} > "
            f"MAX_SWEEP_ELEMENTS={MAX_SWEEP_ELEMENTS:,}, and accumulating the non-zeros "
            "refused too (see symtape.derivatives.accumulation)")


def colouring(hessian: bool, rows: int, colours: int, star: int | None = None,
              unseparated: bool = False) -> Strategy:
    """A sparse Jacobian (or ``hessian``) of ``rows`` rows by ``colours`` sweeps of a row
    colouring, or by ``star`` of a star colouring (a Hessian's, when it has fewer colours;
    ``unseparated``: a star colouring with fewer did not separate the mirrored elements).

    >>> colouring(True, 100, 5, 3).name, colouring(False, 100, 5).name
    ('star-coloured-hessian', 'coloured-jacobian')
    """
    kind = "hessian" if hessian else "jacobian"
    if star is not None and star < colours:
        return Strategy("star-coloured-hessian", f"a star colouring of {star} colours < "
                        f"{colours} row colours: {star} sweeps for {rows:,} rows")
    why = "a star colouring with fewer does not separate the mirrored elements; " \
        if unseparated else ""
    return Strategy(f"coloured-{kind}",
                    f"{why}{colours} colours: {colours} sweeps for {rows:,} rows")
