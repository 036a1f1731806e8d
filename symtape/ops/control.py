"""Control flow: loops as primitives over programs traced once.

A :class:`Program` is a function traced once into the applications it made (JAX's jaxpr):
its inputs (placeholders), the outer tensors it reads (captures), its steps and outputs. It
is applied again to other tensors (:meth:`Program.replay`), or to values step after step
(:class:`Runner`). The ``scan`` primitive runs one program ``length`` times,
threading its carries and stacking its per-step outputs, all packed into one float vector
(:func:`layout`, :func:`unpack`). Its derivative is two scans again -- one that also stacks
the carries each step read, one that runs the body's vjp backwards from them, carrying the
cotangents of the carries and of the captures -- so derivatives of any order stay loops;
compiled, it is one loop around the program's element view, whatever the number of steps.
"""

from __future__ import annotations

import math

import numpy as np

from symtape.base import recording
from symtape.base.errors import (
    InvalidArgumentError, ShapeError, SymtapeError, UnboundLeafError,
)
from symtape.base.lazy import LazyModule
from symtape.core.primitive import (
    Aval, Primitive, Unplannable, batch_size, fmt, register_primitive, spread,
)
from symtape.core.tensor import Tensor, constant, read_only, view
from symtape.core.variables import leaf_node, symbol
from symtape.ops.elementwise import add
from symtape.ops.structural import cast, concat, expand_dims, getitem, reshape, transpose

TN = LazyModule("TN", globals(), "symtape.core.notation")
sweep = LazyModule("sweep", globals(), "symtape.derivatives.sweep")

__all__ = ["Program", "Runner", "trace", "scan", "layout", "unpack", "UNROLL_STEPS"]

#: A scan's element view (its formulas, a compile without a loop form) unrolls its steps up
#: to this many steps times body ops; beyond, it is refused at once (unrolling costs more
#: than its size suggests: each step's ops are applied again to the last step's views).
UNROLL_STEPS = 2000
#: A compiled loop's body is the program's element view for one step: up to this many atoms.
BODY_ATOMS = 4096
#: Eager loops of more steps times body ops than this run compiled (some 0.3-1 s to compile
#: once per program and shapes; applying ops one by one costs some 10-20 us each).
EAGER_STEPS = 4000


# --------------------------------------------------------------------------------------------
# Programs
# --------------------------------------------------------------------------------------------


class _Unbound:
    """A placeholder's store: no value, or the one a step of an eager loop gives it."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = None


def _holding(holder: Tensor, value) -> Tensor:
    """The placeholder ``holder``'s leaf holding ``value`` now, as a tensor of that value."""
    value = read_only(np.asarray(value, dtype=holder.dtype))
    holder._node.leaf_store.value = value
    return Tensor(holder._node, value, holder.dtype)


def placeholder(label: str, shape: tuple, dtype) -> Tensor:
    """A leaf with no value standing for an input of a traced body (named ``label`` in its
    formulas)."""
    dtype = np.dtype(dtype)
    return Tensor(leaf_node(label, tuple(shape), dtype, _Unbound()), None, dtype, name=label)


class Program:
    """A traced function: ``steps`` of ``(prim, params, refs)``, each reference
    ``(0, i)`` an input, ``(1, j)`` a capture, ``(2, k)`` an earlier step's result or
    ``(3, tensor)`` a constant; ``outs`` are references too. Programs compare by identity
    (a node's parameters name the program it runs)."""

    __slots__ = ("name", "in_avals", "captures", "steps", "outs", "out_avals", "derived",
                 "holders", "step_avals", "__weakref__")

    def __init__(self, name: str, in_avals: list, captures: list, steps: list, outs: list,
                 out_avals: list, holders: list, step_avals: list) -> None:
        self.name = name
        self.step_avals = tuple(step_avals)  # each step's result (batching reads them)
        self.holders = tuple(holders)  # the placeholders it was traced on (for formulas)
        self.in_avals = tuple(in_avals)
        self.captures = tuple(captures)
        self.steps = tuple(steps)
        self.outs = tuple(outs)
        self.out_avals = tuple(out_avals)
        self.derived: dict = {}  # programs made from this one (stacking, backward), by key

    def __repr__(self) -> str:
        return f"<program {self.name}: {len(self.in_avals)} inputs, {len(self.steps)} steps>"

    def replay(self, tensors: list, captured: list | None = None) -> list:
        """The outputs, the program's ops applied again to ``tensors`` (and to ``captured``
        for its captures, default its own), as tensors recorded like any application."""
        captured = list(self.captures) if captured is None else captured
        made: list = []
        for prim, params, refs in self.steps:
            made.append(prim.bind(*[_tensor(r, tensors, captured, made) for r in refs],
                                  **params))
        return [_tensor(r, tensors, captured, made) for r in self.outs]

    def with_inputs(self, extra: list, key) -> Program:
        """This program returning also its inputs numbered ``extra`` (memoised by ``key``)."""
        found = self.derived.get(key)
        if found is None:
            avals = [self.in_avals[i] for i in extra]
            extra = [(0, i) for i in extra]
            found = self.derived[key] = Program(self.name, self.in_avals, self.captures,
                                                self.steps, self.outs + tuple(extra),
                                                self.out_avals + tuple(avals), self.holders,
                                                self.step_avals)
        return found

    def describe(self) -> str:
        """The program as ``(inputs) -> (outputs)``, each output's formula in its inputs'
        names and the tensors it reads.

        >>> import symtape as st
        >>> x = st.symbol("x")
        >>> prog, _ = trace(lambda h: [h[0] * x + 1.0], [Aval((), np.dtype(float))], ["a"], "f")
        >>> prog.describe()
        '(a) -> (a*x + 1.0)'
        """
        with recording.paused():
            outs = self.replay(list(self.holders))
        return f"({', '.join(h.name for h in self.holders)}) -> " \
            f"({', '.join(str(o.formula()) for o in outs)})"


class Runner:
    """A program applied step after step to numeric values, as eager ops of leaves that
    hold them: its ops fold as eager ops of variables do (one semantics with compiled code),
    and, the leaves being the same at every step, their plans are found again.

    >>> import symtape as st
    >>> prog, _ = trace(lambda h: [h[0] * 2.0], [Aval((), np.dtype(float))], ["a"], "f")
    >>> run = Runner(prog, [])
    >>> [float(run([np.float64(v)])[0]) for v in (1.0, 3.0)]
    [2.0, 6.0]
    """

    def __init__(self, program: Program, captured: list) -> None:
        self.program = program
        self.holders = [placeholder(f"s{i}", a.shape, a.dtype)
                        for i, a in enumerate(program.in_avals)]
        self.caps = [_holding(placeholder(f"k{j}", np.shape(v), np.asarray(v).dtype), v)
                     for j, v in enumerate(captured)]

    def __call__(self, values: list) -> list:
        """The outputs' values (numpy arrays) for the inputs' ``values``."""
        with recording.paused():
            ins = [_holding(h, v) for h, v in zip(self.holders, values)]
            return [o.numpy() for o in self.program.replay(ins, self.caps)]

    def close(self) -> None:
        """Let go of the values the leaves hold."""
        for h in self.holders + self.caps:
            h._node.leaf_store.value = None


def _tensor(ref, tensors, captured, made):
    kind, at = ref
    return tensors[at] if kind == 0 else captured[at] if kind == 1 else made[at] if kind == 2 \
        else at


def trace(fn, avals: list, labels: list, what: str) -> tuple:
    """``(program, outputs)``: ``fn`` (flat list of tensors -> flat list of outputs) traced
    once on placeholders of ``avals``; the outputs as traced. The tapes recording around it
    see none of its applications; the variables and symbols it reads are announced to them
    afterwards, as if read outside (so that they watch what the loop reads)."""
    holders = [placeholder(lb, a.shape, a.dtype) for lb, a in zip(labels, avals)]
    rec = recording.Recorder(watch_accessed=False, everything=True)
    with recording.isolated(rec), recording.watch_accesses() as read:
        try:
            outs = fn(holders)
        except UnboundLeafError as e:
            raise InvalidArgumentError(
                f"{what}: the body needs the value of a loop variable while it is traced "
                "once for every step (Python `if`/`while` on a tensor, float(), .numpy(), "
                "or assigning a variable): write the choice with st.cond or st.where, and "
                f"assign after the loop ({e})") from None
    outs = [_as_tensor(o, what, i) for i, o in enumerate(outs)]
    own = {t._id for t in holders}
    leaves = {t._id: t for t in read if t._id not in own}
    for t in leaves.values():
        recording.accessed(t)
    return _program(what, holders, rec.entries, outs, leaves), outs


def _as_tensor(value, what: str, i: int) -> Tensor:
    if isinstance(value, Tensor):
        return value
    try:
        return constant(value)
    except (TypeError, ValueError, SymtapeError) as e:
        raise InvalidArgumentError(f"{what}: output {i} ({type(value).__name__}) is not a "
                                   f"tensor: {e}") from None


def _program(what: str, holders: list, entries: list, outs: list, leaves: dict) -> Program:
    """The program of a trace's ``entries``; a capture that is a variable's value is the
    variable itself (``leaves``: by id), read again at each application."""
    where = {t._id: (0, i) for i, t in enumerate(holders)}
    captures: list = []
    steps: list = []
    step_avals: list = []

    def ref(t):
        found = where.get(t._id)
        if found is None:
            if t._node.kind == "const":
                return (3, t)
            found = where[t._id] = (1, len(captures))
            captures.append(leaves.get(t._id, t))
        return found

    for e in entries:
        if len(e.outputs) != 1 or not isinstance(e.prim, Primitive):
            raise InvalidArgumentError(
                f"{what}: the body calls {getattr(e.prim, 'name', e.prim)}, a function with a "
                "custom gradient; call it outside the loop, or write its rule with "
                "st.register_gradient on ops")
        refs = tuple(ref(t) for t in e.inputs)
        where[e.outputs[0]._id] = (2, len(steps))
        steps.append((e.prim, e.params, refs))
        step_avals.append(Aval(tuple(e.outputs[0].shape), e.outputs[0].dtype))
    out_refs = [ref(t) for t in outs]
    avals = [Aval(tuple(t.shape), t.dtype) for t in outs]
    return Program(what, [Aval(tuple(t.shape), t.dtype) for t in holders], captures, steps,
                   out_refs, avals, holders, step_avals)


# --------------------------------------------------------------------------------------------
# The packed output of a scan
# --------------------------------------------------------------------------------------------


def layout(program: Program, n_carry: int, length: int) -> list:
    """``[(offset, shape, dtype)]`` of a scan's outputs in its packed vector: the final
    carries, then each per-step output stacked over the steps."""
    out, at = [], 0
    for k, a in enumerate(program.out_avals):
        shape = tuple(a.shape) if k < n_carry else (length,) + tuple(a.shape)
        out.append((at, shape, a.dtype))
        at += math.prod(shape)
    return out


def unpack(packed: Tensor, parts: list, cast_back: bool = True) -> list:
    """The tensors of a packed vector's ``parts`` (:func:`layout`), in their dtypes (else
    the packed one)."""
    out = []
    for at, shape, dtype in parts:
        t = reshape.bind(getitem.bind(packed, key=(slice(at, at + math.prod(shape), None),)),
                         shape=shape)
        out.append(t if dtype == packed.dtype or not cast_back else cast.bind(t, dtype=dtype))
    return out


def _swap01(t: Tensor) -> Tensor:
    """``t`` with its first two axes exchanged."""
    rank = len(t.shape)
    return transpose.bind(t, perm=(1, 0) + tuple(range(2, rank)))


def vmapped(prog: Program, in_flags: tuple, cap_flags: tuple, n: int) -> tuple:
    """``(program, stand_ins)``: ``prog`` applied to ``n`` rows at once -- its inputs and
    captures flagged carry the rows on a leading axis, every output does -- each step by its
    op's batching rule (``Primitive.batch``) where an argument has rows; captures are read
    through ``stand_ins`` (:func:`captured_as`). Memoised on ``prog``."""
    key = ("vmapped", in_flags, cap_flags, n)
    found = prog.derived.get(key)
    if found is not None:
        return found
    stand = [placeholder(f"k{j}", ((n,) if f else ()) + tuple(c.shape), c.dtype)
             for j, (c, f) in enumerate(zip(prog.captures, cap_flags))]
    avals = [Aval(((n,) if f else ()) + tuple(a.shape), a.dtype)
             for a, f in zip(prog.in_avals, in_flags)]

    def body(hs):
        made: list = []

        def get(ref):
            kind, at = ref
            if kind == 0:
                return hs[at], in_flags[at]
            if kind == 1:
                return stand[at], cap_flags[at]
            if kind == 2:
                return made[at]
            return at, False

        for (prim, params, refs), aval in zip(prog.steps, prog.step_avals):
            got = [get(r) for r in refs]
            flags = [b for _, b in got]
            args = [t for t, _ in got]
            if True in flags:
                made.append((prim.batch(args, flags, params, tuple(aval.shape)), True))
            else:
                made.append((prim.bind(*args, **params), False))
        outs = [get(r) for r in prog.outs]
        return [t if b else spread(t, False, n) for t, b in outs]

    found, _ = trace(body, avals, [h.name for h in prog.holders], prog.name)
    found = prog.derived[key] = (found, tuple(stand))
    return found


def _zeros(shape, dtype) -> Tensor:
    return constant(np.zeros(shape, dtype))


# --------------------------------------------------------------------------------------------
# scan
# --------------------------------------------------------------------------------------------


class Scan(Primitive):
    """``scan(*init, *xs, *captures; program, length, reverse, n_carry, n_xs)``: the program
    ``(carry..., x_t...) -> (carry..., y_t...)`` run over ``t`` (descending when
    ``reverse``); the packed final carries and stacked outputs (:func:`layout`)."""

    variadic = True

    def __init__(self) -> None:
        super().__init__("scan", ("*",), "fib", rules=(None,))

    def differentiable(self, i: int) -> bool:
        return True

    def prepare(self, avals, params):
        prog, length = params["program"], int(params["length"])
        nc, nx = int(params["n_carry"]), int(params["n_xs"])
        if len(avals) != nc + nx + len(prog.captures):
            raise InvalidArgumentError(f"st.scan: {len(avals)} arguments for {nc} carries, "
                                       f"{nx} sequences and {len(prog.captures)} captures")
        for i, (a, want) in enumerate(zip(avals, prog.in_avals)):
            shape = a.shape if i < nc else a.shape[1:]
            if i >= nc and (not a.shape or a.shape[0] != length):
                raise ShapeError(f"st.scan: sequence {i - nc} has shape {fmt(a.shape)}; its "
                                 f"leading axis must have the {length} steps")
            if tuple(shape) != tuple(want.shape) or a.dtype != want.dtype:
                raise ShapeError(f"st.scan: argument {i} has shape {fmt(shape)} and dtype "
                                 f"{a.dtype.name}, the body was traced for {fmt(want.shape)} "
                                 f"{want.dtype.name}")
        size = sum(math.prod(s) for _, s, _ in layout(prog, nc, length))
        params = {"program": prog, "length": length, "reverse": bool(params["reverse"]),
                  "n_carry": nc, "n_xs": nx}
        return Aval((size,), np.dtype(np.float64)), params

    def structure(self, args, params, shape):
        """Regular: eager values come from running the program step by step with numpy (as
        its compiled loop runs it), never from the unrolled element view."""
        return True, None, None

    def numeric(self, values, params):
        """Short loops apply the program step by step as eager ops (the values eager code
        gives, exact folds and zero-branched selects included); long ones run the compiled
        loop (:func:`compiled_loop`), the values compiled code gives: one semantics."""
        prog, length = params["program"], params["length"]
        if length * max(1, len(prog.steps)) > EAGER_STEPS:
            return compiled_loop(params, [np.asarray(v) for v in values])
        nc, nx = params["n_carry"], params["n_xs"]
        parts = layout(prog, nc, length)
        out = np.empty(sum(math.prod(s) for _, s, _ in parts), dtype=np.float64)
        stacked = [out[at:at + math.prod(s)].reshape(s) for at, s, _ in parts[nc:]]
        run = Runner(prog, values[nc + nx:])
        carry = [np.asarray(v) for v in values[:nc]]
        xs = [np.asarray(v) for v in values[nc:nc + nx]]
        for t in (range(length - 1, -1, -1) if params["reverse"] else range(length)):
            got = run(carry + [x[t] for x in xs])
            carry = got[:nc]
            for ys, y in zip(stacked, got[nc:]):
                ys[t] = y
        run.close()
        for (at, s, _), c in zip(parts[:nc], carry):
            out[at:at + math.prod(s)] = np.asarray(c, dtype=np.float64).reshape(-1)
        return out

    # -- derivatives -----------------------------------------------------------------------
    def vjp(self, g, ans, args, params, needed):
        prog, length, rev, nc, nx = (params[k] for k in
                                     ("program", "length", "reverse", "n_carry", "n_xs"))
        caps = list(args[nc + nx:])
        parts = unpack(g, layout(prog, nc, length))
        wanted = tuple(bool(n) for n in needed[nc:])  # (sequences', captures' asked for)
        floats, fcaps, fxs = _float_cotangents(prog, nc, nx, wanted)
        back, stand = backward_program(prog, nc, nx, wanted)
        init = [parts[i] for i in floats] + [_zeros(caps[j].shape, caps[j].dtype)
                                             for j in fcaps]
        ycts = [p for p, a in zip(parts[nc:], prog.out_avals[nc:]) if a.dtype.kind == "f"]
        segment = checkpoint_segment(length, max(len(back.steps), len(prog.steps))) \
            if not rev and not _carried_out(prog, nc) else 0
        if segment:  # the carries of checkpoints only, each segment's recomputed
            got = _checkpointed(self, prog, args, params, (back, stand), init, ycts, segment)
        else:
            seqs = ycts + _stacked_carries(self, prog, ans, args, params) + \
                list(args[nc:nc + nx])
            got = _run(self, back, init, seqs, length, not rev, captured_as(back, stand, caps))
        cts: list = [None] * len(args)
        for k, i in enumerate(floats):
            cts[i] = got[k]
        for k, j in enumerate(fcaps):
            cts[nc + nx + j] = got[len(floats) + k]
        for k, i in enumerate(fxs):
            cts[nc + i] = got[len(init) + k]
        return [ct if need else None for ct, need in zip(cts, needed)]

    # -- batching --------------------------------------------------------------------------
    def batch(self, args, batched, params, shape):
        """One scan over every row: its program batched (:func:`vmapped`), carried with the
        rows in front, the batched sequences with their steps in front."""
        prog, length, nc, nx = (params[k] for k in ("program", "length", "n_carry", "n_xs"))
        n = batch_size(args, batched)
        in_flags = [True] * nc + list(batched[nc:nc + nx])
        bprog, stand = vmapped(prog, tuple(in_flags), tuple(batched[nc + nx:]), n)
        init = [a if b else spread(a, False, n) for a, b in zip(args[:nc], batched[:nc])]
        xs = [_swap01(a) if b else a for a, b in zip(args[nc:nc + nx], batched[nc:nc + nx])]
        packed = self.bind(*init, *xs, *captured_as(bprog, stand, list(args[nc + nx:])),
                           program=bprog, length=length, reverse=params["reverse"],
                           n_carry=nc, n_xs=nx)
        parts = unpack(packed, layout(bprog, nc, length), cast_back=False)
        rows = [reshape.bind(p, shape=(n, -1)) for p in parts[:nc]]
        rows += [reshape.bind(_swap01(p), shape=(n, -1)) for p in parts[nc:]]
        return concat.bind(*rows, axis=1) if len(rows) > 1 else rows[0]

    # -- element view ----------------------------------------------------------------------
    sized_view = True

    def view_size(self, node) -> int:
        """Its steps times its body's ops (what unrolling the loop builds), at least its
        size."""
        return max(node.size, _unrolled_ops(node.params))

    def view_refused(self, node):
        p = node.params
        n = _unrolled_ops(p)
        if n > UNROLL_STEPS:
            return (f"a scan of {p['length']} steps of a {len(p['program'].steps)}-op body is "
                    f"never unrolled ({n:,} body ops > UNROLL_STEPS={UNROLL_STEPS:,})")
        return None

    def build(self, atoms, params):
        prog, length, nc, nx = (params[k] for k in ("program", "length", "n_carry", "n_xs"))
        if _unrolled_ops(params) > UNROLL_STEPS:
            raise InvalidArgumentError(
                f"st.scan: a loop of {length} steps of a {len(prog.steps)}-op body has no "
                f"element view (more than UNROLL_STEPS={UNROLL_STEPS:,} body ops): its "
                "formula is the recurrence (tensor notation), its code a compiled loop")
        carry = list(atoms[:nc])
        xs = list(atoms[nc:nc + nx])
        captured = [_view(a, c.dtype) for a, c in zip(atoms[nc + nx:], prog.captures)]
        ys: list = [[None] * length for _ in prog.outs[nc:]]
        order = range(length - 1, -1, -1) if params["reverse"] else range(length)
        for t in order:
            ins = [_view(c, a.dtype) for c, a in zip(carry, prog.in_avals)]
            ins += [_view(x[t], a.dtype) for x, a in zip(xs, prog.in_avals[nc:])]
            with recording.paused():  # (the element view is no application of the tapes)
                got = prog.replay(ins, captured)
            carry = [o._atoms for o in got[:nc]]
            for k, o in enumerate(got[nc:]):
                ys[k][t] = o._atoms
        flat = [np.asarray(c, dtype=object).reshape(-1) for c in carry]
        flat += [np.stack([np.asarray(a, dtype=object) for a in y]).reshape(-1) if length else
                 np.empty(0, dtype=object) for y in ys]
        return np.concatenate(flat) if flat else np.empty(0, dtype=object)

    def notation(self, args, params):
        """``scan[steps=n, body=(inputs) -> (outputs)](init, sequences, captures)``: the
        recurrence, never its steps expanded."""
        shown = {"steps": params["length"], "body": params["program"].describe()}
        if params["reverse"]:
            shown["reverse"] = True
        return TN.applied("scan", shown, args)

    def element_cost(self, node):
        params = node.params
        return node.size + params["length"] * len(params["program"].steps)

    # -- loop nest -------------------------------------------------------------------------
    def loop(self, planner, node):
        """One block over the steps (and the chunk's points) whose body is the program's
        element view for one step: the carries live in buffers updated in place, each step's
        sequence elements and outputs are read and written at a stride of one step."""
        return scan_loop(planner, node)


def compiled_loop(params: dict, values: list) -> np.ndarray:
    """The packed result of a scan of ``params`` on ``values``, by its compiled loop (made
    once per program, length, direction and argument shapes; integer and boolean arguments
    enter as floats, cast inside)."""
    prog = params["program"]
    key = ("eager", params["length"], params["reverse"], params["n_carry"], params["n_xs"],
           tuple((v.shape, v.dtype.str) for v in values))
    fn = prog.derived.get(key)
    if fn is None:
        from symtape.compile.function import compile as compile_fn

        leaves = [symbol(f"in{i}", shape=v.shape) for i, v in enumerate(values)]
        with recording.paused():
            args = [t if v.dtype.kind == "f" else cast.bind(t, dtype=v.dtype)
                    for t, v in zip(leaves, values)]
            out = scan.bind(*args, **params)
        fn = prog.derived[key] = compile_fn(out, leaves, name=f"{prog.name.split('.')[-1]}_loop")
    return np.asarray(fn(*[v.astype(np.float64) for v in values]), dtype=np.float64)


def _same_ref(a: tuple, b: tuple) -> bool:
    return a[0] == b[0] and (a[1] is b[1] if a[0] == 3 else a[1] == b[1])


def _carry_outputs(prog: Program, nc: int) -> list:
    """For each carry, the per-step output that is the same value (None: none is)."""
    return [next((k for k, r in enumerate(prog.outs[nc:]) if _same_ref(r, prog.outs[i])),
                 None) for i in range(nc)]


def _carried_out(prog: Program, nc: int) -> bool:
    """Whether every carry is also a per-step output (``tf.scan``'s): the result holds them."""
    return None not in _carry_outputs(prog, nc)


#: Reverse mode through loops whose carries the result does not hold: None stores the carry
#: of every step; "sqrt" stores one in about sqrt(steps) and recomputes each segment's
#: from it; an int, one every that many steps. Set by ``st.config.set_loop_checkpointing``.
CHECKPOINTING: str | int | None = None


def checkpoint_segment(length: int, body_ops: int) -> int:
    """The steps between stored carries under :data:`CHECKPOINTING` for a loop of
    ``length`` steps whose reverse body has ``body_ops`` ops, or 0: every carry stored (no
    policy, or too short to gain). A segment's loops run inside the loop over segments,
    whose compiled body is an element view: at most :data:`UNROLL_STEPS` body ops a segment
    (10^6 steps of a 40-op body: segments of 50 steps, 20,000 carries stored, not 10^6).

    >>> checkpoint_segment(10 ** 6, 40)
    0
    """
    policy = CHECKPOINTING
    if policy is None:
        return 0
    k = math.isqrt(max(length - 1, 0)) + 1 if policy == "sqrt" else int(policy)
    k = min(k, UNROLL_STEPS // max(1, body_ops))
    return k if 2 <= k and 2 * k <= length else 0


def _checkpointed(scan_prim, prog: Program, args, params, backward: tuple, init: list,
                  ycts: list, k: int) -> list:
    """A forward scan's reverse sweep with the carries of every ``k``-th step stored
    (``m`` segments of ``k`` steps, then a tail of fewer): a scan over the segments gives
    their first carries; the tail is swept back from the last of them; then a reverse scan
    over the segments recomputes each one's carries from its first (a stacking scan of
    ``k`` steps) and sweeps it back (the reverse program of ``k`` steps). Memory: ``m + k``
    carries, not ``length``. The values of :meth:`Scan.vjp`'s one reverse sweep: the same
    reverse program on the same carries, which are recomputed by the same program."""
    length, nc, nx = params["length"], params["n_carry"], params["n_xs"]
    back, stand = backward
    caps, carries, xs = list(args[nc + nx:]), list(args[:nc]), list(args[nc:nc + nx])
    back_caps = captured_as(back, stand, caps)
    m, ni, ny = length // k, len(init), len(ycts)
    stacking = prog.with_inputs(list(range(nc)), "stacking")
    cut = m * k

    def segments(t):  # (m, k, ...) of the first m * k steps
        head = getitem.bind(t, key=(slice(0, cut, None),))
        return reshape.bind(head, shape=(m, k) + tuple(t.shape[1:]))

    def tails(ts):
        return [getitem.bind(t, key=(slice(cut, length, None),)) for t in ts]

    def recomputed(start, xseg, steps):  # the carries each of the steps read
        return _run(scan_prim, stacking, start, xseg, steps, False, caps)[len(prog.outs):]

    def swept(acc, yseg, cseg, xseg, steps):
        return _run(scan_prim, back, acc, yseg + cseg + xseg, steps, True, back_caps)

    c_avals = [_aval_of(prog.in_avals[i]) for i in range(nc)]
    x_segs = [segments(x) for x in xs]

    def starts_body(hs):
        final = _run(scan_prim, prog, hs[:nc], hs[nc:], k, False, caps)[:nc]
        return final + list(hs[:nc])

    sprog, _ = trace(starts_body, c_avals + [_aval_of(t, 1) for t in x_segs],
                     [f"c{i}" for i in range(nc)] + [f"x{j}" for j in range(nx)],
                     f"{prog.name} (checkpoints)")
    got = _run(scan_prim, sprog, carries, x_segs, m, False, sprog.captures)
    last, starts = got[:nc], got[nc:]
    acc, tail_x = list(init), []
    if length > cut:
        done = swept(acc, tails(ycts), recomputed(last, tails(xs), length - cut), tails(xs),
                     length - cut)
        acc, tail_x = done[:ni], done[ni:]
    y_segs = [segments(y) for y in ycts]

    def back_body(hs):
        a, st_, ys_, xs_ = hs[:ni], hs[ni:ni + nc], hs[ni + nc:ni + nc + ny], hs[ni + nc + ny:]
        return swept(list(a), list(ys_), recomputed(list(st_), list(xs_), k), list(xs_), k)

    bprog, _ = trace(back_body, [_aval_of(t) for t in acc] + c_avals +
                     [_aval_of(t, 1) for t in y_segs + x_segs],
                     [f"a{i}" for i in range(ni)] + [f"c{i}" for i in range(nc)] +
                     [f"y{j}" for j in range(ny)] + [f"x{j}" for j in range(nx)],
                     f"{prog.name} (checkpointed reverse)")
    got = _run(scan_prim, bprog, acc, starts + y_segs + x_segs, m, True, bprog.captures)
    out = got[:ni]
    for j, g in enumerate(got[ni:]):
        flat = reshape.bind(g, shape=(cut,) + tuple(g.shape[2:]))
        out.append(concat.bind(flat, tail_x[j], axis=0) if tail_x else flat)
    return out


def _run(scan_prim, program: Program, front: list, seqs: list, steps: int, reverse: bool,
         captures) -> list:
    """The outputs (:func:`unpack`) of a scan of ``program`` over ``steps`` steps from the
    carries ``front`` along the sequences ``seqs``, reading ``captures`` as its captures."""
    out = scan_prim.bind(*front, *seqs, *captures, program=program, length=steps,
                         reverse=reverse, n_carry=len(front), n_xs=len(seqs))
    return unpack(out, layout(program, len(front), steps))


def _unrolled_ops(params: dict) -> int:
    """A scan's steps times its body's ops: what its element view unrolls."""
    return params["length"] * max(1, len(params["program"].steps))


def _float_cotangents(prog: Program, nc: int, nx: int, wanted: tuple) -> tuple:
    """``(carries, captures, sequences)``: the indices of a scan's float carries, and of its
    float captures and sequences whose cotangents are ``wanted`` (sequences first)."""
    ins = prog.in_avals
    return ([i for i in range(nc) if ins[i].dtype.kind == "f"],
            [j for j, c in enumerate(prog.captures) if c.dtype.kind == "f" and wanted[nx + j]],
            [k for k in range(nx) if ins[nc + k].dtype.kind == "f" and wanted[k]])


def _aval_of(t, drop: int = 0) -> Aval:
    """The aval of a tensor or aval ``t`` without its first ``drop`` axes."""
    return Aval(tuple(t.shape[drop:]), t.dtype)


def _stacked_carries(scan_prim, prog: Program, ans, args, params) -> list:
    """The carries each step of a scan read, stacked in step order: when each carry is also
    a per-step output (``tf.scan``'s), the outputs shifted by a step after the initial one,
    from the scan's own result ``ans``; else from a second scan that outputs them."""
    length, rev, nc = params["length"], params["reverse"], params["n_carry"]
    same = _carry_outputs(prog, nc)
    if length and None not in same:
        stacked = unpack(ans, layout(prog, nc, length))[nc:]
        out = []
        for i, k in enumerate(same):
            first = expand_dims.bind(args[i], axis=0)
            rest = getitem.bind(stacked[k], key=((slice(1, None, None),) if rev else
                                                 (slice(None, length - 1, None),)))
            if first.dtype != rest.dtype:
                first = cast.bind(first, dtype=rest.dtype)
            out.append(concat.bind(*((rest, first) if rev else (first, rest)), axis=0))
        return out
    stacking = prog.with_inputs(list(range(nc)), "stacking")
    nx = params["n_xs"]
    return _run(scan_prim, stacking, args[:nc], args[nc:nc + nx], length, rev,
                args[nc + nx:])[len(prog.outs):]


def _view(atoms, dtype) -> Tensor:
    atoms = np.asarray(atoms, dtype=object)
    return view(lambda: atoms, atoms.shape, None, dtype)


def backward_program(prog: Program, nc: int, nx: int, wanted: tuple | None = None) -> tuple:
    """``(program, stand_ins)``: the body of a scan's reverse sweep, which carries the
    cotangents of the float carries and the sums of the float captures' cotangents, reads
    each step's output cotangents, the carries that step read and its sequence elements,
    and gives the float sequence elements' cotangents. ``wanted``: for each sequence, then
    each capture, whether its cotangent is asked for (default: all); the others are not
    computed. It reads the captures through ``stand_ins`` (leaves standing for them: a scan
    applies it to its own captures, :func:`captured_as`), so it serves every application of
    ``prog`` (memoised on it)."""
    wanted = (True,) * (nx + len(prog.captures)) if wanted is None else tuple(wanted)
    key = ("backward", nc, nx, wanted)
    found = prog.derived.get(key)
    if found is not None:
        return found
    ins = prog.in_avals
    floats, fcaps, fxs = _float_cotangents(prog, nc, nx, wanted)
    fys = [k for k, a in enumerate(prog.out_avals[nc:]) if a.dtype.kind == "f"]
    stand = [placeholder(f"k{j}", tuple(c.shape), c.dtype) for j, c in enumerate(prog.captures)]
    avals = [ins[i] for i in floats] + [Aval(tuple(stand[j].shape), stand[j].dtype)
                                        for j in fcaps]
    avals += [prog.out_avals[nc + k] for k in fys] + list(ins[:nc + nx])
    labels = [f"ct_c{i}" for i in floats] + [f"ct_k{j}" for j in fcaps]
    labels += [f"ct_y{k}" for k in fys] + [f"c{i}" for i in range(nc)]
    labels += [f"x{k}" for k in range(nx)]

    def body(hs):
        ct_c = hs[:len(floats)]
        acc = hs[len(floats):len(floats) + len(fcaps)]
        rest = hs[len(floats) + len(fcaps):]
        ct_y, primal = rest[:len(fys)], rest[len(fys):]
        rec = recording.Recorder(watch_accessed=False, everything=True)
        recording.push(rec)
        try:
            outs = prog.replay(primal, stand)
        finally:
            recording.remove(rec)
        seeds: dict = {}
        for i, ct in zip(floats, ct_c):
            seeds[outs[i]._id] = sweep.accumulate(seeds.get(outs[i]._id), ct)
        for k, ct in zip(fys, ct_y):
            o = outs[nc + k]
            seeds[o._id] = sweep.accumulate(seeds.get(o._id), ct)
        sources = [primal[i] for i in floats] + [primal[nc + k] for k in fxs]
        sources += [stand[j] for j in fcaps]
        relevant = sweep.relevant_ids(rec.entries, [s._id for s in sources])
        cts = sweep.vjp_sweep(rec.entries, seeds, relevant)
        new = [_dense(cts.get(primal[i]._id), ins[i]) for i in floats]
        new += [add.bind(a, _dense(cts.get(stand[j]._id), a)) for a, j in zip(acc, fcaps)]
        return new + [_dense(cts.get(primal[nc + k]._id), ins[nc + k]) for k in fxs]

    back, _ = trace(body, avals, labels, f"{prog.name} (reverse)")
    found = prog.derived[key] = (back, tuple(stand))
    return found


def captured_as(program: Program, stand_ins: tuple, captures: list) -> list:
    """The tensors an application of ``program`` reads for its captures, where those are
    ``stand_ins`` for ``captures`` (:func:`backward_program`)."""
    at = {t._id: j for j, t in enumerate(stand_ins)}
    return [captures[at[c._id]] if c._id in at else c for c in program.captures]


def _dense(ct, like) -> Tensor:
    """A cotangent as a tensor (zeros where none flows)."""
    if isinstance(ct, Tensor):
        return ct
    return _zeros(tuple(like.shape), like.dtype)


scan = register_primitive(Scan())


# --------------------------------------------------------------------------------------------
# The loop rule
# --------------------------------------------------------------------------------------------


def scan_loop(planner, node) -> tuple:
    """See :meth:`Scan.loop`. Over a chunk of points the block runs the steps outermost and
    the chunk's points innermost, the carries held element-major (element ``e`` of point
    ``p`` at ``e * P + p``), so each step's body is vectorised across the points."""
    p = node.params
    prog, length, nc, nx = p["program"], p["length"], p["n_carry"], p["n_xs"]
    if any(a.dtype.kind == "b" for a in prog.in_avals[:nc] + prog.out_avals):
        raise Unplannable("scan with a boolean carry or output")
    args = node.inputs
    locs, batched = planner.arguments(node)
    body = _body_plan(planner, prog)
    loc = planner.fresh(node, batched)
    P = planner.P if batched else 1
    rev = p["reverse"]
    lane = (1,) if batched else ()  # the stride of the points' loop (innermost)
    states = []
    for i in range(nc):
        shape = tuple(prog.in_avals[i].shape)
        n = math.prod(shape)
        buf = planner.temp(max(1, n * P))
        if n:
            src = planner.access(locs[i], shape, batched)
            dst = planner.at(buf, 0, lane + tuple(s * P for s in _strides(shape)))
            planner.block(shape, planner.copy_body(1, False), (src,), (dst,), batched=batched)
        states.append((buf, n))
    state = [planner.at(buf, 0, (0,) + lane, tuple(e * P for e in range(n)))
             for buf, n in states]
    reads = list(state)
    for k in range(nx):
        acc = planner.access(locs[nc + k], tuple(args[nc + k].shape), batched)
        lead, core = _split(acc, 2 if batched else 1, tuple(args[nc + k].shape[1:]))
        step = lead[-1]
        offset = acc.offset + ((length - 1) * step if rev else 0)
        reads.append(planner.at(acc.buffer, offset, ((-step if rev else step),) + lead[:-1],
                                core))
    for j in range(len(prog.captures)):
        shape = tuple(args[nc + nx + j].shape)
        acc = planner.access(locs[nc + nx + j], shape, batched)
        lead, core = _split(acc, 1 if batched else 0, shape)
        reads.append(planner.at(acc.buffer, acc.offset, (0,) + lead, core))
    writes = list(state)
    parts = layout(prog, nc, length)
    pstride = (node.size,) if batched else ()
    for (at, _, _), a in zip(parts[nc:], prog.out_avals[nc:]):
        n = math.prod(a.shape)
        start = at + ((length - 1) * n if rev else 0)
        writes.append(planner.at(loc[0], start, ((-n if rev else n),) + pstride,
                                 tuple(range(n))))
    if length:
        if batched:  # (the chunk's points innermost: a step's body vectorised across them)
            planner.block((length, P), body, reads, writes, accumulate=True, runs=1)
        else:
            planner.block((length,), body, reads, writes, accumulate=True)
    for (buf, n), (at, _, _) in zip(states, parts[:nc]):
        if n:
            src = planner.at(buf, 0, lane + (P,))
            dst = planner.at(loc[0], at, pstride + (1,))
            planner.block((n,), planner.copy_body(1, False), (src,), (dst,), batched=batched)
    return loc


def _body_plan(planner, prog: Program):
    """The plan of one step: the program's element view over stand-ins of its inputs and
    captures (in that order), its outputs in order."""
    stand = [planner.stand_ins(tuple(a.shape), f"s{k}") for k, a in enumerate(prog.in_avals)]
    cstand = [planner.stand_ins(tuple(c.shape), f"k{j}") for j, c in enumerate(prog.captures)]
    if sum(s.size for s in stand + cstand) > BODY_ATOMS:
        raise Unplannable(f"scan body reading {sum(s.size for s in stand + cstand)} elements "
                          f"a step (more than BODY_ATOMS={BODY_ATOMS})")
    ins = [_view(s, a.dtype) for s, a in zip(stand, prog.in_avals)]
    caps = [_view(s, c.dtype) for s, c in zip(cstand, prog.captures)]
    with recording.paused():
        outs = [np.asarray(o._atoms, dtype=object) for o in prog.replay(ins, caps)]
    if sum(o.size for o in outs) > BODY_ATOMS:
        raise Unplannable(f"scan body writing {sum(o.size for o in outs)} elements a step "
                          f"(more than BODY_ATOMS={BODY_ATOMS})")
    return planner.build_plan(outs, stand + cstand)


def _strides(shape: tuple) -> tuple:
    """The C-order strides (in elements) of ``shape``."""
    out, at = [], 1
    for n in reversed(shape):
        out.append(at)
        at *= n
    return tuple(reversed(out))


def _split(acc, lead: int, shape: tuple) -> tuple:
    """An access over ``lead`` leading axes and ``shape`` as ``(lead strides, core)``: the
    offsets of the elements of ``shape`` become the core."""
    strides = tuple(acc.strides)
    own = strides[lead:]
    core = tuple(int(sum(i * s for i, s in zip(idx, own))) + acc.core[0]
                 for idx in np.ndindex(*shape)) if shape else (acc.core[0],)
    return strides[:lead], core
