"""One program for every batch size of a function that mixes its examples.

A function traced with a ``None`` batch dimension (``st.TensorSpec((None, 784))``) whose
results mix the examples -- a mean loss, a gradient summed over the batch, a training step
updating its weights -- is traced at three batch sizes (:data:`SIZES`) and the traces are
read node by node, two at a time (the readings must agree). Each node is

- **per example**: the batch leads its shape and each row depends only on its own
  example's inputs (``Primitive.dependencies``, one bit per example) and on shared values;
- **a total**: a node of the same shape at both sizes computed from per-example nodes: a
  sum, mean, maximum or minimum over the batch axis, or a matrix product contracting it
  (``x^T g``, a weight's gradient); its value is that reduction over the examples of the
  same op applied to each example alone (a mean: the sum times ``1/B``);
- **shared**: the same shape at both sizes, computed from the arguments without a batch,
  variables, constants and totals;
- a **constant that depends on the batch size** as ``k / B`` (the cotangent of a mean) or
  ``k * B``: ``k`` times a run-time scalar.

The function is then rebuilt for one example (:func:`split`): per-example nodes are the ops
applied to one row, each total is a leaf, and the result is a list of programs -- *passes*
over the examples, each a function of one example whose totals accumulate over all of them
(``LoopPlan.totals``), and a *post* program of the shared results and assignments computed
from the totals (an optimizer's update). A function whose per-example part reads a total
(BatchNorm's mean) takes a second pass. Anything else (a node whose rows mix examples
otherwise, a constant depending on the size some other way) makes :func:`split` return
None and the function is traced per batch size.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from symtape.core import node as N
from symtape import ops
from symtape.base import recording
from symtape.derivatives import sparsity
from symtape.core.apply import exact_constant
from symtape.ops.contraction import MatMul
from symtape.ops.reductions import Reduction
from symtape.core.variables import Tensor, symbol

__all__ = ["SIZES", "Program", "Split", "split", "same_params"]

#: The batch sizes a function is traced at to be split: read from the first two (not 1: a
#: size-1 batch folds ``x * (1/B)`` away and the traces would not match node for node),
#: and read again from the last two, which must agree (a constant equal at 2 and 3 by
#: chance, ``min(B, 3)``, is not taken as fixed).
SIZES = (2, 3, 5)

class Program(NamedTuple):
    """One compiled step of a split function: ``outputs`` (tensors of the one-example
    graph), ``totals`` (per output: ``''``, one value per example; or ``'sum'``, ``'max'``,
    ``'min'`` over all of them), ``inputs`` (its leaves), and where each input comes from
    and each output goes (``sources``, ``targets``: slots, see :class:`Split`);
    ``per_point``: a pass over the examples, not the post program."""

    outputs: list
    totals: tuple
    inputs: list
    shared: list
    sources: list
    targets: list
    per_point: bool  # a pass over the examples (not the post program)


class Split(NamedTuple):
    """``passes`` over the examples, then ``post`` (None when there is nothing after them).

    Slots: ``('arg', i)`` argument ``i`` (one row per example when it has the batch),
    ``('var', j)`` the value of read variable ``j``, ``('scale', 0)`` ``1/B`` and
    ``('scale', 1)`` ``B``, ``('total', r)`` total ``r``, ``('result', i)`` and
    ``('assign', j)`` the function's results and the values of its assignments."""

    passes: list
    post: Program | None


def same_params(a: dict, b: dict, leading: bool, sizes: tuple) -> bool:
    """Whether two traces' parameters agree, a batch-leading node's shape-like parameters
    allowed to differ in their first entry (``sizes``: the two traces' batch sizes).

    >>> same_params({"shape": (2, 3)}, {"shape": (4, 3)}, True, (2, 4))
    True
    >>> same_params({"shape": (2, 3)}, {"shape": (2, 5)}, True, (2, 4))
    False
    """
    if a.keys() != b.keys():
        return False
    for k, va in a.items():
        vb = b[k]
        if isinstance(va, np.ndarray) or isinstance(vb, np.ndarray):
            if not (isinstance(va, np.ndarray) and isinstance(vb, np.ndarray) and
                    va.shape == vb.shape and np.array_equal(va, vb)):
                return False
        elif va != vb and not (
                leading and k == "shape" and isinstance(va, tuple) and isinstance(vb, tuple)
                and len(va) == len(vb) and va[1:] == vb[1:] and (va[0], vb[0]) in (
                    sizes, (-1, -1))):
            return False
    return True


class _Refused(Exception):
    """The traces are not one program over the examples."""


def split(traces: list, flags: list, dtype: str) -> Split | None:
    """The passes and post program of a function recorded (``Function._record``: arguments,
    results, assignments, variables read, structure) at the batch sizes :data:`SIZES`
    (``traces``, in that order); ``flags[i]``: argument ``i`` has the batch. None when the
    traces are not one program over the examples (see the module's docstring)."""
    try:
        with recording.paused():
            first = _Match(traces[0], traces[1], SIZES[:2], flags)
            for k in range(1, len(SIZES) - 1):  # the same reading from every other pair
                if _Match(traces[k], traces[k + 1], SIZES[k:k + 2], flags).forms != \
                        first.forms:
                    raise _Refused
            return _Splitter(first, flags, dtype).run()
    except _Refused:
        return None


class _Match:
    """Two traces (batch sizes ``sizes``) read node by node: each node of the larger one
    per example or not (``lead``), a total (``total``: its kind, whether a mean), its pass
    or the passes before its value (``stage``), and each constant's form (``const``:
    ``(None, value)`` fixed, ``(0, k)`` ``k / B``, ``(1, k)`` ``k * B``); ``forms``: all of
    it by node position, to compare with another pair's reading."""

    def __init__(self, small: tuple, large: tuple, sizes: tuple, flags: list) -> None:
        self.sizes, self.flags, self.large = sizes, flags, large
        self.lead: dict = {}
        self.total: dict = {}
        self.stage: dict = {}
        self.const: dict = {}
        xs2, flat2, asg2, read2, s2 = small
        xs3, flat3, asg3, read3, s3 = large
        if s2 != s3 or len(flat2) != len(flat3) or [id(v) for v in read2] != [
                id(v) for v in read3] or [id(v) for v, _ in asg2] != [id(v) for v, _ in asg3]:
            raise _Refused
        outs2 = [t._node for t in flat2] + [t._node for _, t in asg2]
        outs3 = [t._node for t in flat3] + [t._node for _, t in asg3]
        nodes2, self.nodes = N.ancestries(outs2), N.ancestries(outs3)
        if len(nodes2) != len(self.nodes):
            raise _Refused
        at2 = {id(n): k for k, n in enumerate(nodes2)}
        at3 = {id(n): k for k, n in enumerate(self.nodes)}
        self.args = {id(x._node): i for i, x in enumerate(xs3)}
        args2 = {id(x._node): i for i, x in enumerate(xs2)}
        forms = []
        for a, c in zip(nodes2, self.nodes):
            if [at2[id(i)] for i in a.inputs] != [at3[id(i)] for i in c.inputs] or \
                    a.kind != c.kind or a.dtype != c.dtype:
                raise _Refused
            if a.kind == "leaf" and args2.get(id(a)) != self.args.get(id(c)):
                raise _Refused
            self.classify(a, c)
            if c.kind == "const":
                self.const[id(c)] = self.constant(a, c, self.lead[id(c)])
            form = self.const.get(id(c))
            forms.append((self.lead[id(c)], self.total.get(id(c)), self.stage[id(c)],
                          None if form is None else (form[0], _key(form[1]))))
        self.forms = forms
        self.check_rows()

    def classify(self, a: N.Node, c: N.Node) -> None:
        (b2, b3) = self.sizes
        if a is c or a.shape == c.shape:
            lead = False
        elif a.shape[:1] == (b2,) and c.shape[:1] == (b3,) and a.shape[1:] == c.shape[1:]:
            lead = True
        else:
            raise _Refused
        if c.kind == "leaf":
            i = self.args.get(id(c))
            if (i is not None and self.flags[i]) != lead:
                raise _Refused
        elif c.kind == "op" and a is not c:
            if a.prim is not c.prim or not same_params(a.params, c.params, lead, self.sizes):
                raise _Refused
        elif c.kind not in ("const", "op"):
            raise _Refused  # a node given by its element view
        self.lead[id(c)] = lead
        ins = c.inputs
        if lead:
            self.stage[id(c)] = max([1] + [self.stage[id(i)] + (0 if self.lead[id(i)] else 1)
                                           for i in ins])
        elif any(self.lead[id(i)] for i in ins):
            self.total[id(c)] = self.total_kind(c)
            self.stage[id(c)] = max(self.stage[id(i)] + (0 if self.lead[id(i)] else 1)
                                    for i in ins)
        else:
            self.stage[id(c)] = max([0] + [self.stage[id(i)] for i in ins])

    def total_kind(self, c: N.Node) -> tuple:
        """``(reduction over examples, whether it is a mean)`` of a total."""
        prim = c.prim
        if c.dtype.kind != "f":
            raise _Refused
        if isinstance(prim, Reduction) and prim.total is not None and 0 in c.params["axis"]:
            return prim.total, prim.averages
        if isinstance(prim, MatMul) and c.params["transpose_a"] and \
                not c.params["transpose_b"] and len(c.shape) == 2 and \
                all(self.lead[id(i)] for i in c.inputs):
            return "sum", False
        raise _Refused

    def constant(self, a: N.Node, c: N.Node, lead: bool) -> tuple:
        """The form of a constant (one row of a per-example constant, whose rows must all
        be equal): ``(None, value)`` the same at both sizes, ``(0, k)`` for ``k / B``,
        ``(1, k)`` for ``k * B``."""
        if a is c:
            return None, np.asarray(c._exact, dtype=object)
        try:
            v2 = np.asarray(a._exact, dtype=object)
            v3 = np.asarray(c._exact, dtype=object)
        except (TypeError, ValueError):
            raise _Refused from None
        if lead:
            if any(not all(_equal(v[:1], v[j:j + 1]) for j in range(len(v))) for v in (v2, v3)):
                raise _Refused
            v2, v3 = v2[:1], v3[:1]
        (b2, b3) = self.sizes
        if _equal(v2, v3):
            return None, v3
        for scale, k2, k3 in ((0, v2 * b2, v3 * b3), (1, v2 / b2, v3 / b3)):
            k2, k3 = np.asarray(k2, dtype=object), np.asarray(k3, dtype=object)
            if _equal(k2, k3):
                return scale, k3
        raise _Refused

    def check_rows(self) -> None:
        """Each row of a per-example node depends on its own example only (totals cut)."""
        b3 = self.sizes[1]
        seeds = {}
        for node in self.nodes:
            if node.kind == "leaf" and self.lead[id(node)]:
                rows = np.empty(node.shape, dtype=object)
                for b in range(b3):
                    rows[b] = 1 << b
                seeds[id(node)] = rows
            elif id(node) in self.total:
                seeds[id(node)] = np.zeros(node.shape, dtype=object)
        lead = [n for n in self.nodes if self.lead[id(n)] and n.kind != "leaf"]
        deps = sparsity.propagate(lead, seeds)
        for node in lead:
            out = deps.get(id(node))
            if out is None:
                continue
            for b in range(b3):
                if any(int(v) & ~(1 << b) for v in np.asarray(out[b], dtype=object).flat):
                    raise _Refused


class _Splitter:
    """The one-example graph and its programs, from a :class:`_Match` of two traces."""

    def __init__(self, match: _Match, flags: list, dtype: str) -> None:
        self.m, self.flags = match, flags
        self.lead, self.total, self.stage = match.lead, match.total, match.stage
        self.args = match.args
        self.new: dict = {}  # id(large node) -> tensor of the one-example graph
        self.totals: list = []  # (kind, per-example tensor, leaf, passes before its value)
        self.scales = [symbol("inverse_batch", shape=(), dtype=dtype),
                       symbol("batch", shape=(), dtype=dtype)]

    def run(self) -> Split:
        for c in self.m.nodes:
            self.rebuild(c)
        xs3, flat3, asg3, read3, _ = self.m.large
        return self.programs(flat3, asg3, xs3, read3)

    # -- the one-example graph -------------------------------------------------------------
    def rebuild(self, c: N.Node) -> None:
        lead = self.lead[id(c)]
        if c.kind == "leaf":
            i = self.args.get(id(c))
            out = symbol(f"x{i}", shape=(1,) + c.shape[1:], dtype=c.dtype) if lead else \
                Tensor(c, None, c.dtype)
        elif c.kind == "const":
            scale, k = self.m.const[id(c)]
            out = Tensor(c, None, c.dtype) if not lead and scale is None else \
                exact_constant(k, c.dtype)
            if scale is not None:
                out = ops.multiply.bind(out, self.scales[scale])
        else:
            ins = [self.new[id(i)] for i in c.inputs]
            params = dict(c.params)
            if lead and isinstance(params.get("shape"), tuple) and params["shape"][:1] == (
                    self.m.sizes[1],):
                params["shape"] = (1,) + params["shape"][1:]
            chosen = self.selected(c) if id(c) in self.total else None
            if chosen is not None:  # the total of the branch, selected afterwards
                ins = [chosen[1]]
            live = self.live(c) if id(c) in self.total and chosen is None else None
            try:
                out = c.prim.bind(*ins, **params)
                if live is not None:
                    live = c.prim.bind(live, **params)
            except Exception as e:  # noqa: BLE001 - an op that refuses one row
                raise _Refused from e
            if id(c) in self.total:
                kind, mean = self.total[id(c)]
                leaf = symbol(f"total{len(self.totals)}", shape=c.shape, dtype=c.dtype)
                self.totals.append((kind, out, leaf, self.stage[id(c)]))
                out = ops.multiply.bind(leaf, self.scales[0]) if mean else leaf
                if chosen is not None:
                    cond, _, first = chosen
                    out = ops.where.bind(cond, 0, out) if first else \
                        ops.where.bind(cond, out, 0)
                if live is not None:  # exactly 0 where no example's term is taken
                    count = symbol(f"total{len(self.totals)}", shape=c.shape, dtype=c.dtype)
                    self.totals.append(("sum", live, count, self.stage[id(c)]))
                    out = ops.where.bind(ops.not_equal.bind(count, 0), out, 0)
        want = (1,) + c.shape[1:] if lead else c.shape
        if tuple(out.shape) != want or out.dtype != c.dtype:
            raise _Refused
        self.new[id(c)] = out

    def summed(self, c: N.Node) -> tuple | None:
        """``(argument, where)`` when the total ``c`` is a sum (a reduction: a matrix
        product's total has two arguments) of an op; ``where``: ``(condition, branch, zero
        first)`` when that op is a zero-branched select ``where(cond, g, 0)`` (nodes of
        the traced graph), else None."""
        if not isinstance(c.prim, Reduction) or self.total[id(c)][0] != "sum":
            return None
        arg = c.inputs[0]
        if arg.kind != "op":
            return None
        if arg.prim is not ops.where:
            return arg, None
        cond, x, y = arg.inputs
        first = x.is_zero()
        return arg, ((cond, y if first else x, first) if first or y.is_zero() else None)

    def selected(self, c: N.Node) -> tuple | None:
        """``(condition, branch, zero first)`` (one-example tensors) when the total ``c`` is a
        sum of a zero-branched select ``where(cond, g, 0)`` (:meth:`summed`) whose condition
        all examples share and that is constant along the summed axes: the total is then
        ``where(cond, sum(g), 0)``, and a later pass or the post program, reading it, keeps
        its structural zeros (a sum of the select's zeros read back as a plain value met a
        nan partial there)."""
        found = self.summed(c)
        if found is None or found[1] is None:
            return None
        cond, branch, first = found[1]
        if self.lead[id(cond)] or len(cond.shape) > len(c.shape) or not (
                cond.size == 1 or (tuple(cond.shape) == tuple(c.shape) and
                                   tuple(c.params["axis"]) == (0,))):
            return None
        return self.new[id(cond)], self.new[id(branch)], first

    def live(self, c: N.Node) -> Tensor | None:
        """When the total ``c`` is a sum of a zero-branched select (:meth:`summed`, or a
        rule's select such as clip's or relu's cotangent) whose condition is per example:
        the one-example tensor, of the select's shape, that is 1 where the select takes
        ``g`` and 0 where it is a structural zero; summed as ``c`` is, it counts the terms
        taken, and the total is read as a select of that count, exactly 0 where no
        example's term is taken (the element view's rule for sums of selects: the post
        program multiplying it by a nan partial gives 0, and its sign is the structural
        zero's)."""
        found = self.summed(c)
        return None if found is None else self._live_of(found[0], c.dtype)

    def _live_of(self, arg: N.Node, dtype, depth: int = 0) -> Tensor | None:
        """The one-example tensor, of ``arg``'s shape, that is 1 where ``arg`` (per
        example) is not a structural zero and 0 where it is: a zero-branched select on a
        per-example condition, a rule's select (``live_op``), or a product with such
        (``zero_args``: the product of its selects' indicators); None for anything else."""
        if arg.kind != "op" or not self.lead[id(arg)] or depth > 8:
            return None
        shape = (1,) + tuple(arg.shape[1:])
        if arg.prim is ops.where:
            cond, x, y = arg.inputs
            first = x.is_zero()
            if not (first or y.is_zero()) or not self.lead[id(cond)]:
                return None
            ones = exact_constant(np.ones(shape), dtype)
            taken = self.new[id(cond)]
            return ops.where.bind(taken, 0, ones) if first else ops.where.bind(taken, ones, 0)
        op = getattr(arg.prim, "live_op", None)
        if op is not None and arg.prim.makes_select(arg.inputs):
            return op.bind(*[self.new[id(a)] for a in arg.inputs])
        zeros = getattr(arg.prim, "zero_args", ())  # (elementwise ops say which)
        out = None
        for i in zeros:
            live = self._live_of(arg.inputs[i], dtype, depth + 1)
            if live is not None:
                out = live if out is None else ops.multiply.bind(out, live)
        if out is None:
            return None
        return out if tuple(out.shape) == shape else ops.broadcast_to.bind(out, shape=shape)

    def programs(self, flat3: list, asg3: list, xs3: list, read3: list) -> Split:
        results = [(("result", i), t._node) for i, t in enumerate(flat3)] + [
            (("assign", j), t._node) for j, (_, t) in enumerate(asg3)]
        base = [self.new[id(x._node)] if id(x._node) in self.new else
                symbol(f"x{i}", shape=(1,) + x.shape[1:], dtype=x.dtype) if f else x
                for i, (x, f) in enumerate(zip(xs3, self.flags))]
        inputs = base + [Tensor(v._node, None, v._node.dtype) for v in read3] + self.scales
        sources = [("arg", i) for i in range(len(xs3))] + [
            ("var", j) for j in range(len(read3))] + [("scale", 0), ("scale", 1)]
        shared = [not f for f in self.flags] + [True] * (len(inputs) - len(xs3))
        n_passes = max([kind for *_, kind in self.totals] + [
            self.stage[id(n)] for _, n in results if self.lead[id(n)]] + [0])
        passes = []
        for k in range(1, n_passes + 1):
            known = [r for r, t in enumerate(self.totals) if t[3] < k]
            outs = [(t[1], t[0], ("total", r)) for r, t in enumerate(self.totals)
                    if t[3] == k]
            outs += [(self.new[id(n)], "", slot) for slot, n in results
                     if self.lead[id(n)] and self.stage[id(n)] == k]
            if outs:
                passes.append(Program(
                    [o for o, _, _ in outs], tuple(kind for _, kind, _ in outs),
                    inputs + [self.totals[r][2] for r in known],
                    shared + [True] * len(known), sources + [("total", r) for r in known],
                    [slot for *_, slot in outs], True))
        last = [(self.new[id(n)], slot) for slot, n in results if not self.lead[id(n)]]
        post = None
        if last:
            keep = [i for i, f in enumerate(self.flags) if not f] + list(
                range(len(xs3), len(inputs)))
            every = list(range(len(self.totals)))
            post = Program([o for o, _ in last], ("",) * len(last),
                           [inputs[i] for i in keep] + [self.totals[r][2] for r in every],
                           [True] * (len(keep) + len(every)),
                           [sources[i] for i in keep] + [("total", r) for r in every],
                           [slot for _, slot in last], False)
        return Split([_used(p) for p in passes], post and _used(post))


def _used(prog: Program) -> Program:
    """``prog`` with only the inputs its outputs read (and every argument with the batch:
    the batch's size comes from them)."""
    read = {id(n) for n in N.ancestries([t._node for t in prog.outputs])}
    keep = [i for i, t in enumerate(prog.inputs)
            if id(t._node) in read or not prog.shared[i]]
    return prog._replace(inputs=[prog.inputs[i] for i in keep],
                         shared=[prog.shared[i] for i in keep],
                         sources=[prog.sources[i] for i in keep])


def _key(values: np.ndarray) -> tuple:
    """A comparable form of an array of exact numbers."""
    return values.shape, tuple(values.flat)


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays of exact numbers (or floats) are equal element by element."""
    return a.shape == b.shape and all(bool(x == y) for x, y in zip(a.flat, b.flat))
