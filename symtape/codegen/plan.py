"""Plan: the graph under some outputs, as a straight-line SSA list of low-level ops.

A :class:`Plan` is what every backend reads: the LLVM kernel, the C99 source and the rebuilt
SymPy formulas. It holds no graph objects (heads by op name, constants as their double and the
exact expression in the data-only JSON of :mod:`symtape.io`), so it pickles and saves, and a
compiled function outlives the graph that made it.

Building one is a single pass over the reachable definitions in topological order (linear in
the DAG): alias nodes become their forward atom, leaves that are not inputs become constants
of their bound value, each definition is lowered through :data:`~symtape.codegen.lower.HEADS`
and identical ops are shared (structural CSE on top of the graph's hash-consing: the same
``x*x`` inside ``x**2`` and ``x**3``, the same ``2*x`` term in two sums). Values no output
reads are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from symtape.base.errors import InvalidArgumentError, SerializationError, UnboundLeafError
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
dataio = LazyModule("dataio", globals(), "symtape.io")
G = LazyModule("G", globals(), "symtape.element.graph")
lower = LazyModule("lower", globals(), "symtape.codegen.lower")

__all__ = ["Instr", "ArgLayout", "OutLayout", "Plan", "build_plan", "formulas"]


class Instr(NamedTuple):
    """One SSA value: ``op`` is an :data:`~symtape.codegen.lower.OPS` name, ``'const'``
    (``attr = (value, json_text)``, the exact constant as :func:`symtape.io.expr_text`)
    or ``'input'`` (``attr = (argument, flat_index)``); ``args`` are indices of earlier
    values."""

    op: str
    args: tuple
    attr: object = None


@dataclass(frozen=True)
class ArgLayout:
    """One input argument: its core shape and the names of its leaves (flat, C order)."""

    shape: tuple
    names: tuple


@dataclass(frozen=True)
class OutLayout:
    """One output: its core shape, the value of each element (flat, C order), and whether it
    is boolean (stored as 0/1 bytes)."""

    shape: tuple
    refs: tuple
    boolean: bool


@dataclass(frozen=True)
class Plan:
    """The SSA list and the layout of the arguments and outputs around it."""

    instrs: tuple
    inputs: tuple
    outputs: tuple

    def kind(self, ref: int) -> str:
        """``'b'`` for a boolean value, ``'f'`` for a float one."""
        return _kind(self.instrs[ref])

    @property
    def n_ops(self) -> int:
        """The number of operations per point (a cost estimate)."""
        return sum(1 for ins in self.instrs if ins.op != "const")


def _kind(ins: Instr) -> str:
    if ins.op == "const":
        return "b" if isinstance(ins.attr[0], bool) else "f"
    if ins.op == "input":
        return "f"
    return lower.OPS[ins.op].result


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------


class _Builder:
    """Emits shared SSA values; the head rules of ``lower.py`` call back into it."""

    def __init__(self) -> None:
        self.instrs: list[Instr] = []
        self.shared: dict = {}
        self.consts: dict = {}
        # the same constant objects recur (the graph shares its Floats): met by identity first,
        # since a SymPy Float's hash converts it to a double each time
        self.const_ids: dict = {}
        self.env: dict = {}
        self.rules: dict = {}

    def op(self, name: str, *args: int) -> int:
        key = (name, args)
        ref = self.shared.get(key)
        if ref is None:
            ref = self.shared[key] = len(self.instrs)
            self.instrs.append(Instr(name, args))
        return ref

    def const(self, value) -> int:
        hit = self.const_ids.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        given = value
        if not isinstance(value, sp.Basic):
            value = G.number(value)
        ref = self.consts.get(value)
        if ref is None:
            ref = self.consts[value] = len(self.instrs)
            self.instrs.append(Instr("const", (), (G.const_value(value), _const_text(value))))
        self.const_ids[id(given)] = (given, ref)
        return ref

    def term(self, expr) -> int:
        if G.is_symbolic(expr):
            ref = self.env.get(expr)
            return ref if ref is not None else self._free_leaf(expr)
        if not isinstance(expr, sp.Basic) or isinstance(expr, sp.logic.boolalg.BooleanAtom) or \
                expr.is_number:
            return self.const(expr)
        return self.rule(type(expr))(self, expr)

    def rule(self, head: type):
        """The lowering rule of ``head`` (looked up once per head)."""
        rule = self.rules.get(head)
        if rule is None:
            rule = self.rules[head] = lower.head_rule(head)
        return rule

    def node(self, node: G.Node) -> int:
        if node.forward is not None:
            return self.term(node.forward)
        definition = node.definition
        if node.operands:  # a head over symbols: no constant, so straight to its rule
            return self.rule(type(definition))(self, definition)
        return self.term(definition)

    def _free_leaf(self, leaf) -> int:
        """A leaf that is not an input: its bound value, folded in as a constant."""
        if not isinstance(leaf, G.Leaf):
            raise InvalidArgumentError(f"node {leaf.name!r} is used before it is defined")
        value = leaf.bound_value()
        if value is None:
            why = getattr(leaf.store, "why", None)
            raise UnboundLeafError(
                f"leaf {leaf.name!r} is not an input of the compiled function and has no "
                + (f"value: {why}" if why else
                   "bound value: pass it among the inputs or give it a value"))
        ref = self.env[leaf] = self.const(float(value))
        return ref


def _const_text(value) -> str:
    """The exact constant as JSON; one outside the saved heads is kept as its double."""
    try:
        return dataio.expr_text(value)
    except SerializationError:
        return dataio.expr_text(G.number(G.const_value(value)))


def build_plan(outputs: Sequence[np.ndarray], inputs: Sequence[np.ndarray]) -> Plan:
    """The plan computing ``outputs`` (object arrays of atoms) from ``inputs`` (object arrays
    of leaves).

    >>> from symtape.element import graph
    >>> x = graph.Leaf.new("x")
    >>> y = graph.mul(x, x)
    >>> p = build_plan([np.array(graph.add(y, graph.mul(y, x)), dtype=object)],
    ...                [np.array([x], dtype=object)])
    >>> [ins.op for ins in p.instrs]
    ['input', 'mul', 'mul', 'add']
    """
    b = _Builder()
    layouts = tuple(_bind_inputs(b, i, np.asarray(arr, dtype=object))
                    for i, arr in enumerate(inputs))
    outputs = [np.asarray(arr, dtype=object) for arr in outputs]
    atoms = [a for arr in outputs for a in arr.flat]
    for node in _schedule(atoms):
        b.env[node] = b.node(node)
    outs = []
    for arr in outputs:
        refs = tuple(b.term(a) for a in arr.flat)
        boolean = bool(refs) and all(_kind(b.instrs[r]) == "b" for r in refs)
        outs.append(OutLayout(tuple(arr.shape), refs, boolean))
    return _prune(b.instrs, layouts, tuple(outs))


def _schedule(atoms) -> list:
    """The nodes ``atoms`` need, each after its operands, output by output (depth first):
    a value is computed close to where it is used, whatever order the nodes were made in
    (a batched sweep makes each node for every seed before the next), so few values are
    live at once."""
    order: list = []
    done: set = set()
    for atom in atoms:
        if not isinstance(atom, G.Node) or atom in done:
            continue
        stack = [(atom, iter(atom.evaluation_operands()))]
        done.add(atom)
        while stack:
            node, pending = stack[-1]
            for op in pending:
                if isinstance(op, G.Node) and op not in done:
                    done.add(op)
                    stack.append((op, iter(op.evaluation_operands())))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def _bind_inputs(b: _Builder, index: int, arr: np.ndarray) -> ArgLayout:
    names = []
    for k, leaf in enumerate(arr.flat):
        if not isinstance(leaf, G.Leaf):
            raise InvalidArgumentError(
                f"input {index} holds {leaf!r} at flat position {k}, which is not a leaf: "
                "inputs must be arrays of leaves (variables, symbols, watched constants)"
            )
        if leaf in b.env:
            raise InvalidArgumentError(
                f"leaf {leaf.name!r} appears twice among the inputs (again in input {index})"
            )
        b.env[leaf] = len(b.instrs)
        b.instrs.append(Instr("input", (), (index, k)))
        names.append(leaf.name)
    return ArgLayout(tuple(arr.shape), tuple(names))


def _prune(instrs: list, inputs: tuple, outputs: tuple) -> Plan:
    """Drops the values no output reads and renumbers the rest (order kept)."""
    live = bytearray(len(instrs))
    for out in outputs:
        for r in out.refs:
            live[r] = 1
    for i in range(len(instrs) - 1, -1, -1):
        if live[i]:
            for a in instrs[i].args:
                live[a] = 1
    new = [-1] * len(instrs)
    kept = []
    for i, ins in enumerate(instrs):
        if live[i]:
            new[i] = len(kept)
            # (the tuple constructor: NamedTuple._replace costs 3x more)
            kept.append(Instr(ins.op, tuple([new[a] for a in ins.args]), ins.attr) if ins.args
                        else ins)
    outs = tuple(OutLayout(o.shape, tuple(new[r] for r in o.refs), o.boolean) for o in outputs)
    return Plan(tuple(kept), inputs, outs)


# --------------------------------------------------------------------------------------------
# Formulas: the plan read back as SymPy expressions
# --------------------------------------------------------------------------------------------


def input_symbols(plan: Plan) -> list:
    """One real SymPy symbol per input leaf (per argument, flat), named after the leaf;
    repeated names get a numeric suffix so that distinct leaves stay distinct."""
    seen: dict = {}
    out = []
    for layout in plan.inputs:
        syms = []
        for name in layout.names:
            count = seen.get(name, 0)
            seen[name] = count + 1
            syms.append(sp.Symbol(name if count == 0 else f"{name}_{count}", real=True))
        out.append(syms)
    return out


def formulas(plan: Plan) -> list:
    """The outputs of ``plan`` as object arrays of SymPy expressions of the input symbols.

    >>> from symtape.element import graph
    >>> x = graph.Leaf.new("x")
    >>> p = build_plan([np.array(graph.power(x, sp.Integer(3)), dtype=object)],
    ...                [np.array(x, dtype=object)])
    >>> formulas(p)[0][()]
    x**3
    """
    symbols = input_symbols(plan)
    values: list = []
    for ins in plan.instrs:
        if ins.op == "const":
            values.append(dataio.expr_from_text(ins.attr[1], "plan constant"))
        elif ins.op == "input":
            arg, k = ins.attr
            values.append(symbols[arg][k])
        else:
            values.append(lower.OPS[ins.op].sympy(*[values[a] for a in ins.args]))
    out = []
    for layout in plan.outputs:
        arr = np.empty(len(layout.refs), dtype=object)
        for k, r in enumerate(layout.refs):
            arr[k] = values[r]
        out.append(arr.reshape(layout.shape))
    return out
