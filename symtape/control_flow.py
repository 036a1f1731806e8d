"""Control flow with TensorFlow's signatures: ``scan``, ``while_loop``, ``cond``, ``map_fn``,
``vectorized_map``; implicit differentiation: ``custom_root``, ``custom_linear_solve``.

A loop's body is traced once into a program (``ops/control.py``) and run by the ``scan``
primitive: eagerly with numpy per step, differentiated as loops again (any order), compiled
as one native loop whose setup does not depend on the number of steps. ``cond`` is a select
of both branches (the untaken branch contributes an exact zero to derivatives); eagerly it
runs only the branch taken, as TensorFlow does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from symtape import ops
from symtape.base import nest, recording
from symtape.base.errors import DTypeError, InvalidArgumentError, ShapeError
from symtape.base.lazy import LazyModule
from symtape.core.primitive import Aval
from symtape.core.tensor import Tensor, convert_to_tensor
from symtape.derivatives.custom import call_with_rule
from symtape.derivatives.tape import GradientTape
from symtape.ops import control

F = LazyModule("F", globals(), "symtape.element.added_heads")

__all__ = ["scan", "while_loop", "cond", "map_fn", "vectorized_map", "custom_root",
           "custom_linear_solve"]


def _tensors(structure, what: str) -> list:
    out = []
    for i, a in enumerate(nest.flatten(structure)):
        try:
            out.append(convert_to_tensor(a))
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(f"{what}: element {i} ({type(a).__name__}) is not a "
                                       f"tensor: {e}") from None
    return out


def _aval(t: Tensor) -> Aval:
    return Aval(tuple(t.shape), t.dtype)


def _matching(got, like, what: str, names: str) -> list:
    """The flat tensors of ``got``, which must have the structure, shapes and dtypes of the
    flat tensors ``like`` (of the structure ``template``)."""
    template, flat_like = like
    same = len(nest.flatten(got)) == len(flat_like) and \
        nest.is_nested(got) == nest.is_nested(template)
    if same:
        try:
            nest.pack_sequence_as(template, nest.flatten(got))
        except (ValueError, TypeError, IndexError, RuntimeError):
            same = False
    if not same:
        raise InvalidArgumentError(f"{what}: returned a structure of {len(nest.flatten(got))} "
                                   f"tensors, {names} have {len(flat_like)}")
    flat = _tensors(got, what)
    for i, (a, b) in enumerate(zip(flat, flat_like)):
        if tuple(a.shape) != tuple(b.shape):
            raise ShapeError(f"{what}: {names[:-1]} {i} has shape {tuple(b.shape)} but the "
                             f"body returned shape {tuple(a.shape)} (shapes must not change "
                             "from step to step)")
        if a.dtype != b.dtype:
            raise DTypeError(f"{what}: {names[:-1]} {i} has dtype {b.dtype.name} but the body "
                             f"returned {a.dtype.name}")
    return flat


def _run_scan(prog, init: list, xs: list, length: int, reverse: bool) -> list:
    packed = ops.scan.bind(*init, *xs, *prog.captures, program=prog, length=length,
                           reverse=reverse, n_carry=len(init), n_xs=len(xs))
    return control.unpack(packed, control.layout(prog, len(init), length))


def _sequences(elems, what: str, fn=None) -> tuple:
    if not callable(fn):
        raise InvalidArgumentError(f"{what}: fn must be a callable, got {type(fn).__name__}")
    flat = _tensors(elems, what)
    if not flat:
        raise InvalidArgumentError(f"{what}: elems is empty (give at least one tensor)")
    for i, t in enumerate(flat):
        if not t.shape:
            raise ShapeError(f"{what}: elems {i} is a scalar; elements are taken along a "
                             "leading axis")
    length = flat[0].shape[0]
    for i, t in enumerate(flat):
        if t.shape[0] != length:
            raise ShapeError(f"{what}: elems {i} has {t.shape[0]} elements along its leading "
                             f"axis, elems 0 has {length}")
    return flat, int(length)


def _no_gradient(flat: list, back_prop: bool) -> list:
    return flat if back_prop else [ops.stop_gradient.bind(t) if t.dtype.kind == "f" else t
                                   for t in flat]


# --------------------------------------------------------------------------------------------
# scan, map_fn, vectorized_map
# --------------------------------------------------------------------------------------------


def scan(fn: Callable, elems, initializer=None, parallel_iterations: int = 10,
         back_prop: bool = True, swap_memory: bool = False, infer_shape: bool = True,
         reverse: bool = False, name: str | None = None):
    """The values ``a_t = fn(a_{t-1}, x_t)`` over the elements ``x_t`` of ``elems`` along
    their leading axis, stacked (``tf.scan``): ``initializer`` is ``a_{-1}`` (default: the
    first element, which then starts the output). ``fn`` is traced once; the loop runs as
    one primitive (compiled: one native loop), and derivatives of it are loops again.

    >>> import symtape as st
    >>> st.scan(lambda a, x: a * x, st.constant([1.0, 2.0, 3.0, 4.0])).numpy()
    array([ 1.,  2.,  6., 24.])
    >>> x = st.Variable(2.0)
    >>> with st.GradientTape() as t:
    ...     y = st.scan(lambda a, _: a * x, st.zeros(3), initializer=st.constant(1.0))
    ...     last = y[-1]
    >>> y.numpy(), float(t.gradient(last, x))
    (array([2., 4., 8.]), 12.0)
    """
    what = "st.scan"
    xs, length = _sequences(elems, what, fn)
    first = None
    if initializer is None:
        at = length - 1 if reverse else 0
        first = [x[at] for x in xs]
        xs = [x[:-1] if reverse else x[1:] for x in xs]
        length -= 1
        init_struct, init = elems, first
    else:
        init_struct, init = initializer, _tensors(initializer, what + " initializer")
    nc = len(init)
    # a sequence that is one constant throughout (st.zeros(steps), a step count) is that
    # constant at every step, not a sequence the loop reads (its code stays small)
    steady = [x[0] if length and x._node.kind == "const" and x._node.uniform is not None
              else None for x in xs]
    xs = [x for x, c in zip(xs, steady) if c is None]

    def body(hs):
        a = nest.pack_sequence_as(init_struct, hs[:nc])
        seq = iter(hs[nc:])
        x = nest.pack_sequence_as(elems, [next(seq) if c is None else c for c in steady])
        out = _matching(fn(a, x), (init_struct, init), what + ": fn", "initializers")
        return out + out

    avals = [_aval(t) for t in init] + [Aval(tuple(x.shape[1:]), x.dtype) for x in xs]
    labels = [f"a{i}" for i in range(nc)] + [f"x{k}" for k in range(len(xs))]
    prog, _ = control.trace(body, avals, labels, what)
    ys = _run_scan(prog, init, xs, length, reverse)[nc:]
    if first is not None:
        ys = [ops.concat.bind(*((y, ops.expand_dims.bind(f, axis=0)) if reverse else
                                (ops.expand_dims.bind(f, axis=0), y)), axis=0)
              for y, f in zip(ys, first)]
    return nest.pack_sequence_as(init_struct, _no_gradient(ys, back_prop))


def _per_element(fn: Callable, elems, what: str) -> tuple:
    """``(program, sequences, length, output structure)``: ``fn`` traced once for one
    element of ``elems`` along their leading axis."""
    xs, length = _sequences(elems, what, fn)
    structure: list = []

    def body(hs):
        out = fn(nest.pack_sequence_as(elems, hs))
        structure.append(out)
        return _tensors(out, what + ": fn")

    prog, _ = control.trace(body, [Aval(tuple(x.shape[1:]), x.dtype) for x in xs],
                            [f"x{k}" for k in range(len(xs))], what)
    return prog, xs, length, structure[0]


def map_fn(fn: Callable, elems, dtype=None, parallel_iterations=None, back_prop: bool = True,
           swap_memory: bool = False, infer_shape: bool = True, name: str | None = None,
           fn_output_signature=None):
    """``fn`` applied to each element of ``elems`` along their leading axis, the results
    stacked (``tf.map_fn``); ``fn`` is traced once and runs as one loop.

    >>> import symtape as st
    >>> st.map_fn(lambda r: st.reduce_sum(r * r), st.constant([[1.0, 2.0], [3.0, 4.0]])).numpy()
    array([ 5., 25.])
    """
    prog, xs, length, structure = _per_element(fn, elems, "st.map_fn")
    ys = _run_scan(prog, [], xs, length, False)
    return nest.pack_sequence_as(structure, _no_gradient(ys, back_prop))


def vectorized_map(fn: Callable, elems, fallback_to_while_loop: bool = True,
                   warn: bool = True):
    """``fn`` applied to each element of ``elems`` along their leading axis, stacked
    (``tf.vectorized_map``): ``fn`` is traced once for one element and its ops applied to
    all elements at once, each by its batching rule (no loop).

    >>> import symtape as st
    >>> st.vectorized_map(lambda v: v * 2.0 + st.reduce_sum(v), st.constant([[1.0, 2.0],
    ...                                                                   [3.0, 4.0]])).numpy()
    array([[ 5.,  7.],
           [13., 15.]])
    """
    prog, xs, n, structure = _per_element(fn, elems, "st.vectorized_map")
    caps = [convert_to_tensor(c) for c in prog.captures]
    batched, stand = control.vmapped(prog, (True,) * len(xs), (False,) * len(caps), n)
    out = batched.replay(xs, control.captured_as(batched, stand, caps))
    return nest.pack_sequence_as(structure, out)


# --------------------------------------------------------------------------------------------
# while_loop
# --------------------------------------------------------------------------------------------


def while_loop(cond: Callable, body: Callable, loop_vars, shape_invariants=None,
               parallel_iterations: int = 10, back_prop: bool = True, swap_memory: bool = False,
               maximum_iterations=None, name: str | None = None):
    """``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)`` (``tf.while_loop``), at most
    ``maximum_iterations`` times. Eagerly the trip count is found first and the loop runs
    as a scan of that many steps (its derivative exact through every step); inside a traced
    function (``st.function``, a loop body) the count is not known while tracing, so
    ``maximum_iterations`` bounds a scan whose steps after ``cond`` turns false leave the
    variables as they are (their derivative an exact zero).

    >>> import symtape as st
    >>> i, x = st.while_loop(lambda i, x: i < 5, lambda i, x: (i + 1, x * 2.0),
    ...                      (st.constant(0), st.constant(1.0)))
    >>> int(i), float(x)
    (5, 32.0)
    """
    what = "st.while_loop"
    if not callable(cond) or not callable(body):
        raise InvalidArgumentError(f"{what}: cond and body must be callables")
    single = not nest.is_nested(loop_vars)
    struct = [loop_vars] if single else loop_vars
    init = _tensors(struct, what + " loop_vars")
    if not init:
        raise InvalidArgumentError(f"{what}: loop_vars is empty")
    limit = _max_iterations(maximum_iterations, what)
    n = len(init)

    def call(fn, hs):
        args = nest.pack_sequence_as(struct, hs)
        return fn(*args) if not single else fn(args[0])

    def test(hs):
        c = convert_to_tensor(call(cond, hs))
        if c.dtype.kind != "b" or c.shape != ():
            raise DTypeError(f"{what}: cond must return a scalar bool tensor, got shape "
                             f"{tuple(c.shape)} dtype {c.dtype.name}")
        return [c]

    def step(hs):
        out = call(body, hs)
        return _matching([out] if single else out, (struct, init), what + ": body",
                         "loop_vars")

    avals = [_aval(t) for t in init]
    labels = [f"v{i}" for i in range(n)]
    cprog, _ = control.trace(test, avals, labels, what + " cond")
    bprog, _ = control.trace(step, avals, labels, what)
    eager = all(t._value is not None for t in init + list(cprog.captures) +
                list(bprog.captures))
    if eager:
        count = _trip_count(cprog, bprog, [t._value for t in init], limit)
        out = _run_scan(bprog, init, [], count, False)[:n]
    elif limit is None:
        raise InvalidArgumentError(
            f"{what}: inside a traced function (st.function, a loop body) the number of "
            "iterations is not known while tracing; pass maximum_iterations (a bound on it) so "
            "the loop compiles")
    else:
        out = _masked(cprog, bprog, init, limit, what)
    out = _no_gradient(out, back_prop)
    return out[0] if single else nest.pack_sequence_as(struct, out)


def _max_iterations(m, what: str):
    if m is None:
        return None
    value = m.numpy() if isinstance(m, Tensor) else m
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{what}: maximum_iterations must be an integer, got "
                                   f"{m!r}") from None
    if count < 0 or count != value:
        raise InvalidArgumentError(f"{what}: maximum_iterations must be a non-negative integer, "
                                   f"got {m!r}")
    return count


def _trip_count(cprog, bprog, values: list, limit) -> int:
    """The iterations the loop runs from ``values`` (``cond`` and ``body`` applied as
    eager ops, step after step)."""
    test = control.Runner(cprog, [convert_to_tensor(c).numpy() for c in cprog.captures])
    step = control.Runner(bprog, [convert_to_tensor(c).numpy() for c in bprog.captures])
    count = 0
    while (limit is None or count < limit) and bool(test(values)[0]):
        values = step(values)
        count += 1
    test.close()
    step.close()
    return count


def _masked(cprog, bprog, init: list, limit: int, what: str) -> list:
    """The loop as a scan of ``limit`` steps carrying a ``running`` flag (1.0, then 0.0 from
    the first step whose ``cond`` is false): a step that does not run keeps the variables."""
    n = len(init)

    def step(hs):
        vs, running = hs[:n], hs[n]
        go = ops.logical_and.bind(ops.greater.bind(running, 0.0), cprog.replay(vs)[0])
        new = bprog.replay(vs)
        kept = [ops.where.bind(go, a, b) for a, b in zip(new, vs)]
        return kept + [ops.where.bind(go, 1.0, 0.0)]

    avals = [_aval(t) for t in init] + [Aval((), np.dtype(np.float64))]
    prog, _ = control.trace(step, avals, [f"v{i}" for i in range(n)] + ["running"],
                            what)
    one = convert_to_tensor(np.float64(1.0))
    return _run_scan(prog, init + [one], [], limit, False)[:n]


# --------------------------------------------------------------------------------------------
# cond
# --------------------------------------------------------------------------------------------


def cond(pred, true_fn: Callable | None = None, false_fn: Callable | None = None,
         name: str | None = None):
    """``true_fn()`` if ``pred`` else ``false_fn()`` (``tf.cond``). A known ``pred`` runs
    the branch taken; a traced one (no value yet) selects between both branches' results,
    whose structures must match; the branch not taken contributes an exact zero to
    derivatives, even where its own derivative is inf or nan.

    >>> import symtape as st
    >>> x = st.constant(-4.0)
    >>> float(st.cond(x > 0, lambda: st.sqrt(x), lambda: -x))
    4.0
    """
    what = "st.cond"
    if not callable(true_fn) or not callable(false_fn):
        raise InvalidArgumentError(f"{what}: true_fn and false_fn must both be callables")
    p = pred if isinstance(pred, Tensor) else convert_to_tensor(pred)
    if p.dtype.kind != "b" or p.shape != ():
        raise DTypeError(f"{what}: pred must be a scalar bool, got shape {tuple(p.shape)} "
                         f"dtype {p.dtype.name}")
    if p._value is not None:
        return true_fn() if bool(p._value) else false_fn()
    a, b = true_fn(), false_fn()
    flat_a = _tensors(a, what + ": true_fn")
    flat_b = _matching(b, (a, flat_a), what + ": false_fn", "true_fn outputs")
    out = [ops.where.bind(p, x, y) for x, y in zip(flat_a, flat_b)]
    return nest.pack_sequence_as(a, out) if nest.is_nested(a) else out[0]


# --------------------------------------------------------------------------------------------
# Implicit differentiation
# --------------------------------------------------------------------------------------------


def custom_root(f: Callable, initial_guess, solve: Callable, tangent_solve: Callable,
                has_aux: bool = False):
    """A root ``x`` of ``f`` (``f(x) = 0``) found by ``solve(f, initial_guess)``, whose
    derivative is the implicit function theorem's instead of the solver's iterations (JAX's
    ``lax.custom_root``): for the tensors ``theta`` that ``f`` reads,
    ``dx/dtheta = -(df/dx)^-1 df/dtheta``, with ``tangent_solve(g, y)`` solving the linear
    ``g(z) = y`` (given ``g``, the transpose of ``df/dx`` at the root). The rule is
    evaluated at the returned root, so derivatives of any order are exact at convergence.

    >>> import symtape as st
    >>> a = st.Variable(2.0)
    >>> def newton(f, x0):
    ...     x = x0
    ...     for _ in range(30):
    ...         with st.GradientTape() as t:
    ...             t.watch(x)
    ...             y = f(x)
    ...         x = x - y / t.gradient(y, x)
    ...     return x
    >>> with st.GradientTape() as t:
    ...     x = st.custom_root(lambda x: x * x - a, st.constant(1.0), newton,
    ...                        lambda g, y: y / g(st.constant(1.0)))
    >>> round(float(x), 12), round(float(t.gradient(x, a)), 12)  # sqrt(a), 1 / (2 sqrt(a))
    (1.414213562373, 0.353553390593)
    """
    what = "st.custom_root"
    if has_aux:
        raise InvalidArgumentError(f"{what}: has_aux=True is not supported (return only the "
                                   "residual from f)")
    guess = _tensors(initial_guess, what + " initial_guess")
    if len(guess) != 1:
        raise InvalidArgumentError(f"{what}: initial_guess must be one tensor")
    x0 = guess[0]
    if x0.dtype.kind != "f":
        raise DTypeError(f"{what}: initial_guess must be a float tensor, got {x0.dtype.name}")

    def residual(hs):
        r = _tensors(f(hs[0]), what + ": f")
        if len(r) != 1 or tuple(r[0].shape) != tuple(x0.shape):
            raise ShapeError(f"{what}: f must return one tensor of the shape of the guess "
                             f"{tuple(x0.shape)}")
        return r

    prog, _ = control.trace(residual, [_aval(x0)], ["x"], what)
    return _implicit(what, prog, lambda: solve(f, x0), tangent_solve)


def _implicit(what: str, prog, forward: Callable, tangent_solve: Callable):
    """The root ``forward()`` of the program ``prog`` (``x -> f(x)`` over its captures),
    recorded with the implicit function theorem's rule for the float captures."""
    caps = [convert_to_tensor(c) for c in prog.captures]
    floats = [j for j, c in enumerate(caps) if c.dtype.kind == "f"]
    head = F.custom_head(what.split(".")[-1])

    # the solver runs unseen by the tapes around (its own tapes work): the root's derivative
    # is the rule's, not the iterations'
    with recording.isolated(recording.Recorder(watch_accessed=False)):
        root = convert_to_tensor(forward())
    if root.dtype.kind != "f" or tuple(root.shape) != prog.in_avals[0].shape:
        raise ShapeError(f"{what}: the solver returned shape {tuple(root.shape)} dtype "
                         f"{root.dtype.name}, the guess has {prog.in_avals[0].shape}")

    def make_caller(n_inputs: int, variables: list) -> Callable:
        def caller(gs, outs, ins):
            (g,), (x,) = gs, outs
            if isinstance(g, ops.Zero):
                return [None] * len(ins)
            thetas = [ins[j] for j in floats]
            captured = list(ins[:len(caps)])  # (then the variables the solver read)
            with GradientTape(persistent=True) as tape:
                tape.watch(x)
                tape.watch(thetas)
                r = prog.replay([x], captured)[0]

            def transposed(v):
                return tape.gradient(r, x, output_gradients=convert_to_tensor(v))

            lam = convert_to_tensor(tangent_solve(transposed, g))
            grads = tape.gradient(r, thetas, output_gradients=ops.negative.bind(lam))
            out: list = [None] * len(ins)
            for j, gr in zip(floats, grads):
                out[j] = gr
            return out
        return caller

    _, outs = call_with_rule(what, head, lambda *_: root, tuple(caps), make_caller)
    return outs[0]


def custom_linear_solve(matvec: Callable, b, solve: Callable, transpose_solve=None,
                        symmetric: bool = False, has_aux: bool = False):
    """``x`` with ``matvec(x) = b`` found by ``solve(matvec, b)``, differentiated as the
    linear solve it is (JAX's ``lax.custom_linear_solve``): the cotangent ``g`` of ``x``
    gives ``l = transpose_solve(vecmat, g)`` (``solve`` when ``symmetric``), ``b`` gets
    ``l`` and what ``matvec`` reads gets ``-l^T d(matvec(x))``.

    >>> import symtape as st
    >>> A = st.Variable([[4.0, 1.0], [1.0, 3.0]])
    >>> b = st.constant([1.0, 2.0])
    >>> mv = lambda v: st.linalg.matvec(A, v)
    >>> solve = lambda f, y: st.linalg.solve(A, y[:, None])[:, 0]
    >>> with st.GradientTape() as t:
    ...     x = st.custom_linear_solve(mv, b, solve, symmetric=True)
    ...     loss = st.reduce_sum(x)
    >>> x.numpy().round(6).tolist(), t.gradient(loss, A).numpy().round(6).tolist()
    ([0.090909, 0.636364], [[-0.016529, -0.115702], [-0.024793, -0.173554]])
    """
    what = "st.custom_linear_solve"
    if has_aux:
        raise InvalidArgumentError(f"{what}: has_aux=True is not supported")
    if transpose_solve is None and not symmetric:
        raise InvalidArgumentError(f"{what}: give transpose_solve, or symmetric=True when "
                                   "matvec is symmetric")
    (bt,) = _tensors(b, what + " b")
    back = solve if symmetric else transpose_solve

    def residual(hs):
        r = _tensors(matvec(hs[0]), what + ": matvec")
        if len(r) != 1 or tuple(r[0].shape) != tuple(bt.shape):
            raise ShapeError(f"{what}: matvec must return one tensor of the shape of b "
                             f"{tuple(bt.shape)}")
        return [ops.subtract.bind(r[0], bt)]

    prog, _ = control.trace(residual, [_aval(bt)], ["x"], what)
    return _implicit(what, prog, lambda: solve(matvec, bt),
                     lambda g, y: back(g, y))
