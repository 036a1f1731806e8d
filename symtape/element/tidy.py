"""Readable forms of exact expressions: a derivative formula expanded from the DAG (nested
Taylor-mode terms, repeated factors) is expanded and its common factors pulled out, so that
``d^12/dx^12 exp(-x**2)`` prints as a polynomial times ``exp(-x**2)`` and an exact Taylor
coefficient at ``pi/4`` as ``(3*sqrt(2) + 8)*exp(sqrt(2)/2)/192``.

>>> import sympy as sp
>>> x = sp.Symbol("x")
>>> readable(x*(x*(x + 1) - x**2) + 2*(x + 1)*x)
x*(3*x + 2)
"""

from __future__ import annotations

from symtape.base.lazy import LazyModule

# a process that only runs compiled code never loads SymPy
sp = LazyModule("sp", globals(), "sympy")

__all__ = ["readable", "MAX_OPS", "MAX_SYMBOLS"]

#: Expressions with more operations are left as they are (their expansion may be large).
MAX_OPS = 4000
#: Expressions in more symbols are left as they are: expanding a product of sums in many
#: symbols multiplies their terms out.
MAX_SYMBOLS = 1


def readable(expr):
    """``expr`` expanded with its common factors pulled out (SymPy's
    ``factor_terms(expand(expr))``), kept when it has fewer operations; left as it is when it
    is not a SymPy expression, has more than :data:`MAX_OPS` operations or more than
    :data:`MAX_SYMBOLS` free symbols. Those limits are checked first by one memoised walk of
    the expression's DAG (:func:`_tree_size`), so a large expression with shared parts costs
    what its DAG does, not what its tree does.

    >>> import sympy as sp
    >>> readable(sp.sqrt(2) * (sp.sqrt(2) / 4 + sp.Rational(1, 3)))
    (2*sqrt(2) + 3)/6
    """
    if not isinstance(expr, sp.Basic) or expr.is_Atom:
        return expr
    # a tree of at most MAX_OPS operations has at most 4 * MAX_OPS + 1 nodes
    if _tree_size(expr, 4 * MAX_OPS + 1) is None:
        return expr
    if len(expr.free_symbols) > MAX_SYMBOLS:  # (the tree is small: a cheap walk now)
        return expr
    ops = sp.count_ops(expr)
    if ops > MAX_OPS:
        return expr
    out = sp.factor_terms(sp.expand(expr))
    return out if sp.count_ops(out) < ops else expr


def _tree_size(expr, limit: int) -> int | None:
    """The number of nodes of ``expr`` written as a tree, or None when it passes ``limit``:
    each shared sub-expression is visited once (a tree walk of a deep DAG is exponential).

    >>> import sympy as sp
    >>> x = sp.Symbol("x"); y = sp.sin(x) + x
    >>> _tree_size(y * y + y, 100), _tree_size(y * y + y, 5)
    (10, None)
    """
    sizes: dict = {}
    stack = [(expr, False)]
    while stack:
        e, ready = stack.pop()
        if e in sizes:
            continue
        if not e.args:
            sizes[e] = 1
        elif ready:
            size = 1 + sum(sizes[a] for a in e.args)
            if size > limit:
                return None
            sizes[e] = size
        else:
            stack.append((e, True))
            stack.extend((a, False) for a in e.args if a not in sizes)
    return sizes[expr]
