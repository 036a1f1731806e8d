"""Tensor notation: formulas of large tensors written over whole tensors, read off the
tensor-level nodes (no element view is built).

Leaves print as their names, elementwise ops as their templates applied to whole tensors
(products and powers there are elementwise, as in numpy), ``·`` is the matrix product and
``ᵀ`` the transpose; other ops print as named functions with their parameters. A node used
more than once becomes an intermediate ``t1 = ...``, as in a CSE form.
"""

from __future__ import annotations

import numpy as np
import sympy as sp
from sympy.printing.precedence import PRECEDENCE

from symtape.core import node as N

__all__ = ["tensor_formula", "wants_notation", "Dot", "Transpose", "applied"]


class Dot(sp.Function):
    """The matrix product of two tensors (printed ``a·b``)."""

    nargs = 2
    precedence = PRECEDENCE["Mul"]

    def _sympystr(self, printer):
        return "·".join(printer.parenthesize(a, self.precedence) for a in self.args)

    def _latex(self, printer):
        return r" \cdot ".join(printer.parenthesize(a, self.precedence) for a in self.args)


class Transpose(sp.Function):
    """The transpose of the last two axes (printed ``aᵀ``)."""

    nargs = 1

    def _sympystr(self, printer):
        return printer.parenthesize(self.args[0], PRECEDENCE["Atom"], strict=True) + "ᵀ"

    def _latex(self, printer):
        return printer.parenthesize(self.args[0], PRECEDENCE["Atom"], strict=True) + "^{T}"


def _params_text(params: dict) -> str:
    parts = []
    for k, v in params.items():
        if isinstance(v, np.ndarray):
            v = v.tolist() if v.size <= 8 else f"<{v.shape} array>"
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def applied(name: str, params: dict, args: list):
    """``name[params](args)``: how an op without a formula of its own prints.

    >>> applied("reduce_sum", {"axis": (1,)}, [sp.Symbol("x")])
    reduce_sum[axis=(1,)](x)
    """
    params = {k: v for k, v in params.items() if not callable(v)}
    label = f"{name}[{_params_text(params)}]" if params else name
    return sp.Function(label)(*args)


def _users(root: N.Node) -> dict:
    count: dict = {}
    for node in N.ancestry(root):
        for n in node.inputs:
            count[id(n)] = count.get(id(n), 0) + 1
    return count


def tensor_formula(root: N.Node) -> tuple[list, object]:
    """``(intermediates, expression)`` of ``root`` in tensor notation.

    >>> import symtape as st
    >>> w, x = st.symbol("W", shape=(3, 4)), st.symbol("x", shape=(4, 1))
    >>> tensor_formula(st.tanh(st.matmul(w, x) + 1.0)._node)
    ([], tanh(W·x + 1.0))
    """
    users = _users(root)
    exprs: dict = {}
    intermediates: list = []
    constants = 0
    for node in N.ancestry(root):
        if node.kind == "leaf" or (node.kind == "const" and node.uniform is None):
            name = node.label
            if name is None:
                constants += 1
                name = f"c{constants}"
            expr = sp.Symbol(name, real=True)
        elif node.uniform is not None:
            expr = node.uniform
        else:
            expr = _expression(node, [exprs[id(n)] for n in node.inputs])
        if users.get(id(node), 0) > 1 and node is not root and not expr.is_Atom:
            sym = sp.Symbol(f"t{len(intermediates) + 1}", real=True)
            intermediates.append((sym, expr))
            expr = sym
        exprs[id(node)] = expr
    return intermediates, exprs[id(root)]


def _expression(node: N.Node, args: list):
    if node.kind == "view":
        return sp.Function("custom")(*args)
    return node.prim.notation(args, node.params)


def wants_notation(node: N.Node, size_limit: int = 64, view_limit: int = 4096) -> bool:
    """Whether a formula of ``node`` reads better in tensor notation: the tensor has more
    than ``size_limit`` elements, or its element view would take more than ``view_limit``
    atoms to build, or a node under it has none (a long loop: ``Primitive.view_refused``)."""
    return node.size > size_limit or not node.view_cost_within(view_limit) or \
        N.view_refused([node]) is not None
