"""Numeric evaluation of DAGs of definitions with numpy: the interpreter twin of the lowering.

:func:`program` compiles the definitions under some atoms once into numpy closures (eager
values of derived templates use it); :func:`evaluate_atoms` evaluates atoms for given leaf
values (the reference compiled code is checked against). The head table and its conventions
are in ``numeric.py``.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import sympy as sp
from sympy.logic.boolalg import BooleanAtom

from symtape.element.graph import Leaf, Node, const_value, is_const, reachable
from symtape.element.heads import NUMPY as HEADS
from symtape.element.numeric import ieee_pow, pow_plan, power_const, split_quotient

__all__ = ["HEADS", "ieee_pow", "pow_plan", "power_const", "evaluate_atoms", "program",
           "evaluate_from"]


def _const(c):
    return const_value(c)


def _piecewise(pairs, fallback):
    def run(values):
        out = fallback
        for fe, fc in reversed(pairs):
            out = np.where(fc(values), fe(values), out)
        return out

    return run


def _direct(expr, lookup: Callable):
    """``(True, key)`` for an atom read from the values, ``(False, c)`` for a number, else
    None."""
    key = lookup(expr)
    if key is not None:
        return True, key
    if is_const(expr) and expr.is_number:
        return False, _const(expr)
    return None


def _binary(op: Callable, a: tuple, b: tuple):
    """``values -> op(a, b)`` of two :func:`_direct` operands (one call, no sub-closures)."""
    (ra, ka), (rb, kb) = a, b
    if ra and rb:
        return lambda values: op(values[ka], values[kb])
    if ra:
        return lambda values: op(values[ka], kb)
    if rb:
        return lambda values: op(ka, values[kb])
    c = op(ka, kb)
    return lambda values: c


def _compile(expr, lookup: Callable, heads: dict = HEADS) -> Callable:  # noqa: C901
    """A closure ``f(values) -> ndarray`` evaluating ``expr``; ``lookup(atom)`` resolves
    symbols to a key of ``values``; ``heads`` maps SymPy heads to numpy functions."""
    key = lookup(expr)
    if key is not None:
        return lambda values: values[key]
    if is_const(expr) and (expr.is_number or isinstance(expr, BooleanAtom)):
        c = _const(expr)
        return lambda values: c
    head = expr.func
    if head is sp.Piecewise:
        pairs = [(_compile(e, lookup, heads), _compile(c, lookup, heads))
                 for e, c in expr.args]
        return _piecewise(pairs, np.nan)
    if head is sp.Pow and expr.exp.is_number:
        fb = _compile(expr.base, lookup, heads)
        e = expr.exp
        power = heads[sp.Pow]
        return lambda values: power_const(fb(values), e, power)
    if head is sp.Mul:
        power = heads[sp.Pow]
        num, den = split_quotient(expr.args)
        if not den and len(num) == 2:  # the common product of two operands, in one call
            pair = [_direct(a, lookup) for a in num]
            if None not in pair:
                return _binary(operator.mul, *pair)
        subs = [_compile(a, lookup, heads) for a in num]
        dens = [(_compile(b, lookup, heads), e) for b, e in den]

        def product(values):
            out = subs[0](values) if subs else 1.0
            for f in subs[1:]:
                out = out * f(values)
            for f, e in dens:
                out = out / power_const(f(values), e, power)
            return out

        return product
    if head is sp.Add:
        if len(expr.args) == 2:  # x + y, and x - y as x + (-1)*y (the same rounding)
            x, y = expr.args
            neg = y.is_Mul and len(y.args) == 2 and y.args[0] == -1
            pair = [_direct(x, lookup), _direct(y.args[1] if neg else y, lookup)]
            if None not in pair:
                return _binary(operator.sub if neg else operator.add, *pair)
        subs = [_compile(a, lookup, heads) for a in expr.args]

        def total(values):
            out = subs[0](values)
            for f in subs[1:]:
                out = out + f(values)
            return out

        return total
    fn = heads.get(head)
    if fn is None:
        for base in head.__mro__:
            fn = heads.get(base)
            if fn is not None:
                break
    if fn is None:
        from symtape.base.errors import LoweringError

        raise LoweringError(f"no numeric evaluation for SymPy head {head.__name__!r}")
    subs = [_compile(a, lookup, heads) for a in expr.args]

    if len(subs) == 1:
        (sub,) = subs
        return lambda values: fn(sub(values))
    return lambda values: fn(*[f(values) for f in subs])


def _lookup(sym):
    return sym if isinstance(sym, (Leaf, Node)) else None


def _step(node: Node, heads: dict, lookup: Callable = _lookup) -> Callable:
    """A closure ``f(values) -> value`` of one node: its ``forward`` atom for aliases, else its
    definition compiled (``lookup`` as for :func:`_compile`)."""
    fwd = node.forward
    if fwd is None:
        return _compile(node.definition, lookup, heads)
    if isinstance(fwd, (Leaf, Node)):
        key = lookup(fwd)
        return lambda values: values[key]
    c = _const(fwd)
    return lambda values: c


def program(outputs: Sequence, inputs: Sequence, heads: dict = HEADS,
            quiet: bool = True) -> Callable:
    """A numpy function of arrays (one per atom of ``inputs``: leaves, or nodes whose values
    are given) evaluating the atoms ``outputs``: the DAG's definitions below the inputs
    compiled once, evaluated in topological order (alias nodes through ``forward``); the
    arrays broadcast, so one call evaluates a whole batch.
    ``heads`` replaces the numpy functions of SymPy heads (a reference with other libraries);
    ``quiet=False`` leaves numpy's floating-point error state to the caller.

    >>> from symtape.element import graph
    >>> x = graph.Leaf.new("x")
    >>> f = program([graph.add(graph.mul(x, x), x)], [x])
    >>> f(np.array([1.0, 2.0]))
    [array([2., 6.])]
    """
    outputs = list(outputs)
    position = {leaf: i for i, leaf in enumerate(inputs)}
    nodes = reachable(outputs, through_forward=True, below=position)
    missing = [op for node in nodes for op in node.evaluation_operands()
               if isinstance(op, Leaf) and op not in position]
    missing += [a for a in outputs if isinstance(a, Leaf) and a not in position]
    if missing:
        from symtape.base.errors import UnboundLeafError

        raise UnboundLeafError(f"no value given for leaf {missing[0].name!r}")

    # values live in a list: the inputs, then each node in order
    index = dict(position)
    for k, node in enumerate(nodes, len(inputs)):
        index[node] = k

    def lookup(atom):
        return index.get(atom) if isinstance(atom, (Leaf, Node)) else None

    steps = [_step(node, heads, lookup) for node in nodes]
    results = [(True, index[a]) if isinstance(a, (Leaf, Node)) else (False, _const(a))
               for a in outputs]

    def run(*arrays):
        values = list(arrays)
        for fn in steps:
            values.append(fn(values))
        return [values[k] if ref else k for ref, k in results]

    if len(steps) == 1 and results == [(True, len(inputs))]:  # one op: the common template
        (fn,) = steps

        def run(*arrays):  # noqa: F811 - the one-step case of the loop above
            return [fn(arrays)]

        run.step = fn  # values (a sequence, one per input) -> the output, for hot callers

    if not quiet:
        return run

    def quiet_run(*arrays):
        with np.errstate(all="ignore"):
            return run(*arrays)

    return quiet_run


def evaluate_atoms(atoms: Iterable, env: dict) -> list:
    """Evaluate atoms (leaves, nodes, constants) given ``env: Leaf -> array`` (once; see
    :func:`program` to evaluate the same atoms many times).

    >>> from symtape.element import graph
    >>> x = graph.Leaf.new("x")
    >>> evaluate_atoms([graph.mul(x, 3)], {x: np.array([1.0, 2.0])})
    [array([3., 6.])]
    """
    env = dict(env)
    return program(atoms, list(env))(*env.values())


def _rounded(value, dtype: np.dtype):
    """A float ``value`` rounded to ``dtype`` (a head computed wider, a Python constant);
    booleans and values already of ``dtype`` as they are."""
    kind = getattr(value, "dtype", None)
    if kind == dtype or (kind is None and not isinstance(value, float)) or \
            (kind is not None and kind.kind != "f"):
        return value
    return dtype.type(value) if np.ndim(value) == 0 else np.asarray(value, dtype=dtype)


def evaluate_from(atoms: Sequence, known: dict, dtype=np.float64) -> list:
    """Values of ``atoms`` computed through their definitions, reading the atoms of ``known``
    (``atom -> value``) as given and other leaves at their bound values; None for an atom
    that needs an unbound leaf. Leaves are read and every definition's value is rounded in
    ``dtype`` (float32: the known values are float32 ones, and a node recomputed from leaves
    must be the float32 value they were computed from, or a tie ``Max(a, b) == b`` breaks).

    >>> from symtape.element import graph
    >>> x, y = graph.Leaf.new("x"), graph.Leaf.new("y")
    >>> s = graph.add(x, y)
    >>> evaluate_from([graph.mul(s, s), graph.ZERO], {s: 3.0})
    [9.0, 0.0]
    >>> evaluate_from([graph.mul(s, 1.0 / 3.0)], {s: np.float32(1.0)}, np.float32)
    [np.float32(0.33333334)]
    """
    dtype = np.dtype(dtype)
    wide = dtype == np.float64
    values: dict = dict(known)
    missing: set = set()
    order: list = []
    stack = [a for a in atoms if isinstance(a, (Leaf, Node)) and a not in values]
    seen: set = set()
    while stack:
        atom = stack.pop()
        if atom in seen or atom in values:
            continue
        seen.add(atom)
        if isinstance(atom, Leaf):
            bound = atom.bound_value()
            if bound is None:
                missing.add(atom)
            else:
                values[atom] = dtype.type(bound)
            continue
        order.append(atom)
        stack.extend(op for op in atom.evaluation_operands() if op not in values)

    order.sort(key=lambda n: n.uid)
    with np.errstate(all="ignore"):
        for node in order:
            if any(op in missing for op in node.evaluation_operands()):
                missing.add(node)
            else:
                value = _step(node, HEADS)(values)
                values[node] = value if wide else _rounded(value, dtype)
    out = []
    for a in atoms:
        if isinstance(a, (Leaf, Node)):
            out.append(None if a in missing else values[a])
        else:
            out.append(_const(a))
    return out
