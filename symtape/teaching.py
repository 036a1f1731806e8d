"""Higher derivatives for teaching: exact Taylor coefficients (:func:`taylor`), a table of
derivatives in LaTeX (:meth:`TaylorSeries.latex_table`), and a plot of a function with its
derivatives (:func:`plot`, matplotlib as the optional extra ``[plot]``). The coefficients
come from Taylor mode (:mod:`symtape.derivatives.taylor`): ``order`` of them cost ``O(order^2)`` per
op, as formulas in SymPy's own symbols and as numbers.

>>> import symtape as st
>>> s = st.taylor(lambda x: st.exp(st.sin(x)), 0, 4)
>>> s.coefficients
[1, 1, 1/2, 0, -1/8]
>>> s.polynomial()
-x**4/8 + x**2/2 + x + 1
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from symtape.codegen import compile_atoms
from symtape.base.errors import (
    InvalidArgumentError, MissingDependencyError, NonDifferentiableError,
)
from symtape.element.tidy import readable
from symtape.compile.function import traced_code
from symtape.compile.transforms import checked_result
from symtape.core.variables import Tensor, symbol
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
G = LazyModule("G", globals(), "symtape.element.graph")
T = LazyModule("T", globals(), "symtape.derivatives.taylor")

__all__ = ["taylor", "TaylorSeries", "plot"]


class TaylorSeries:
    """The Taylor series of ``f`` at ``x0`` to ``order``: ``coefficients[k]`` is
    ``f^(k)(x0) / k!`` exactly (SymPy numbers when ``x0`` is exact: an int, a
    ``Fraction``, a SymPy number or expression), ``numbers`` the same in float64,
    ``formulas[k]`` is ``f^(k)(x) / k!`` as a formula in ``x``, and the series is callable
    (the polynomial at float points)."""

    def __init__(self, name: str, formulas: list, coefficients: list, x0, var: sp.Symbol,
                 compiled) -> None:
        self.name = name
        self.formulas = formulas
        self.x0 = x0
        self.var = var
        self.order = len(formulas) - 1
        self.coefficients = coefficients
        self._compiled = compiled
        self.numbers = np.asarray(compiled(float(x0)), dtype=np.float64).reshape(-1)

    def polynomial(self, var: sp.Symbol | None = None) -> sp.Expr:
        """``sum(c_k (var - x0)^k)`` (``var``: the function's variable by default)."""
        v = self.var if var is None else var
        return sp.expand(sum(c * (v - self.x0) ** k for k, c in enumerate(self.coefficients)))

    def derivatives(self) -> list:
        """``f^(k)(x0)`` exactly, ``k = 0..order``."""
        return [c * math.factorial(k) for k, c in enumerate(self.coefficients)]

    def __call__(self, x) -> np.ndarray:
        """The polynomial at ``x`` (float64, Horner's rule)."""
        h = np.asarray(x, dtype=np.float64) - float(self.x0)
        out = np.zeros_like(h)
        for c in self.numbers[::-1]:
            out = out * h + c
        return out

    def latex_table(self) -> str:
        r"""A LaTeX ``tabular`` of ``k``, ``f^{(k)}(x)`` and ``f^{(k)}(x_0)``.

        >>> import symtape as st
        >>> print(st.taylor(lambda x: x ** 3, 1, 2).latex_table())
        \begin{tabular}{c|c|c}
        $k$ & $f^{(k)}(x)$ & $f^{(k)}(1)$ \\ \hline
        $0$ & $x^{3}$ & $1$ \\
        $1$ & $3 x^{2}$ & $3$ \\
        $2$ & $6 x$ & $6$ \\
        \end{tabular}
        """
        rows = [r"\begin{tabular}{c|c|c}",
                rf"$k$ & $f^{{(k)}}({sp.latex(self.var)})$ & $f^{{(k)}}({sp.latex(self.x0)})$"
                r" \\ \hline"]
        for k, (f, d) in enumerate(zip(self.formulas, self.derivatives())):
            rows.append(rf"${k}$ & ${sp.latex(_tidy(f * math.factorial(k)))}$ & "
                        rf"${sp.latex(_tidy(d))}$ \\")
        rows.append(r"\end{tabular}")
        return "\n".join(rows)

    def __repr__(self) -> str:
        return f"TaylorSeries({self.name} at {self.x0}, order {self.order}: {self.polynomial()})"


#: formulas with at most this many operations are simplified for display
TIDY_OPS = 60


def _tidy(expr):
    """``expr`` simplified when it is small (SymPy's simplify grows fast with size)."""
    return sp.simplify(expr) if sp.count_ops(expr) <= TIDY_OPS else expr


def _exact(x0):
    if isinstance(x0, sp.Basic):
        return x0
    if isinstance(x0, (bool, np.bool_)):
        raise InvalidArgumentError("st.taylor: x0 must be a number, got a bool")
    if isinstance(x0, (int, np.integer)):
        return sp.Integer(int(x0))
    if isinstance(x0, Fraction):
        return sp.Rational(x0.numerator, x0.denominator)
    try:
        value = float(x0)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"st.taylor: x0 must be a number, got "
                                   f"{type(x0).__name__}") from None
    if not math.isfinite(value):
        raise InvalidArgumentError(f"st.taylor: x0 must be finite, got {value}")
    return sp.Float(value)


def _series_atoms(f: Callable, order: int, name: str, what: str) -> tuple:
    """``(x, [atoms of f^(k)(x)/k!])`` by Taylor mode on ``f`` of a scalar symbol."""
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 0:
        raise InvalidArgumentError(f"{what}: order must be a non-negative int, got {order!r}")
    if not callable(f):
        raise InvalidArgumentError(f"{what}: f must be a function of one scalar tensor")
    x = symbol(name)
    with traced_code(what):
        y = checked_result(f(x), what, True)
    if not isinstance(y, Tensor) or y.size != 1:
        raise InvalidArgumentError(f"{what}: f must return a scalar")
    try:
        (coefs,) = T.coefficients([y._atoms.flat[0]], [x._atoms[()]], [G.ONE], int(order))
    except T.Unsupported as e:
        raise NonDifferentiableError(f"{what}: {e}; Taylor mode cannot expand it") from None
    return x, coefs


def taylor(f: Callable, x0, order: int, name: str = "x") -> TaylorSeries:
    """The Taylor series of the scalar function ``f`` (of one scalar tensor) at ``x0``, to
    ``order``: exact coefficients, their formulas in ``x`` (SymPy's ``Symbol(name)``), and
    float64 numbers (a compiled function of the point).

    >>> import symtape as st
    >>> from fractions import Fraction
    >>> st.taylor(lambda x: 1 / (1 - x), Fraction(1, 2), 3).coefficients
    [2, 4, 8, 16]
    """
    x, coefs = _series_atoms(f, order, name, "st.taylor")
    var = x.symbols[()]
    at = _exact(x0)
    values = {leaf: at for leaf in G.leaves(coefs)}  # (x0 for x, node by node)
    memo = G.plain_memo(coefs)
    formulas = [readable(G.expand(a, memo)) for a in coefs]
    coefficients = [readable(G.expand(a, values)) for a in coefs]
    compiled = compile_atoms([np.array(coefs, dtype=object)], [x._atoms],
                             name=f"{getattr(f, '__name__', 'f')}_taylor")
    return TaylorSeries(getattr(f, "__name__", "f"), formulas, coefficients, at, var,
                        compiled)


def plot(f: Callable, x_range, derivatives: int = 3, points: int = 400, ax=None):
    """Plots ``f`` and its first ``derivatives`` derivatives over ``x_range = (a, b)``
    (computed by one compiled Taylor-mode function over all the points), with the
    derivatives' formulas in the legend when short; returns the matplotlib axes. Needs
    matplotlib (``pip install "symtape[plot]"``).
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError('st.plot needs matplotlib: pip install "symtape[plot]"',
                                     name="matplotlib") from None
    try:
        a, b = (float(v) for v in x_range)
    except (TypeError, ValueError):
        raise InvalidArgumentError("st.plot: x_range must be a pair of numbers (a, b)") from None
    if not (math.isfinite(a) and math.isfinite(b) and a < b):
        raise InvalidArgumentError(f"st.plot: x_range must be finite with a < b, got {x_range}")
    x, coefs = _series_atoms(f, derivatives, "x", "st.plot")
    scaled = [G.monomial(G.number(math.factorial(k)), [(c, G.ONE)]) for k, c in enumerate(coefs)]
    compiled = compile_atoms([np.array(scaled, dtype=object)], [x._atoms], name="plot")
    xs = np.linspace(a, b, int(points))
    ys = np.asarray(compiled(xs)).reshape(len(xs), -1)
    if ax is None:
        _, ax = plt.subplots()
    memo = G.plain_memo(scaled)
    for k in range(ys.shape[1]):
        text = sp.latex(_tidy(G.expand(scaled[k], memo)))
        label = f"$f^{{({k})}}(x) = {text}$" if len(text) <= 60 else f"$f^{{({k})}}(x)$"
        ax.plot(xs, ys[:, k], label=label)
    ax.axhline(0.0, color="0.8", linewidth=0.8)
    ax.set_xlabel("$x$")
    ax.legend(fontsize="small")
    return ax
