"""Taylor mode: univariate Taylor coefficients propagated through the element DAG.

With ``x(t) = x + t`` (or ``x + t v`` along a direction), every atom ``a`` of the DAG gets
the coefficients ``a_0 ... a_K`` of its Taylor series in ``t``; the ``K``-th derivative
along the line is ``K! a_K``. Each SymPy head has a recurrence (Griewank & Walther,
*Evaluating Derivatives*, ch. 13), stated in each head's record (``element/heads.py``) over
the series arithmetic here (:data:`SERIES`): sums add coefficients, products are Cauchy products,
``u**e`` and ``exp``, ``tanh``, ``sin``/``cos``, ... satisfy a first-order ODE in ``t``
(``y' = g(u, y) u'``) whose coefficients follow in ``O(K^2)`` operations, and functions whose
derivative is an algebraic function of their argument (``log``, ``atan``, ``erf``, ...)
integrate that derivative's series. The coefficients are atoms of the same DAG (built by the
graph's folding builders), so the ``K``-th derivative is a DAG of ``O(K^2)`` nodes per
definition: printable, exact, and compiled like any other.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from fractions import Fraction

import sympy as sp

from symtape.element import added_heads as F
from symtape.element import graph as G
from symtape.element import heads as H

__all__ = ["Unsupported", "Series", "SERIES", "coefficients", "multi_indices", "interpolation",
           "partials"]

ZERO, ONE = G.ZERO, G.ONE


class Unsupported(Exception):
    """A head without a Taylor rule (or a user's derivative rule) in the DAG."""


# --------------------------------------------------------------------------------------------
# Series arithmetic (lists of K + 1 atoms)
# --------------------------------------------------------------------------------------------


def _zero(a) -> bool:
    return a is ZERO or (G.is_const(a) and G.is_zero(a))


def _dot(pairs) -> object:
    """``sum(c * a * b)`` over ``(c, a, b)`` (``c`` a number), dropping zero terms."""
    terms = [(sp.Integer(c) if isinstance(c, int) else c, G.mul(a, b)) for c, a, b in pairs
             if not (_zero(a) or _zero(b))]
    return G.lincomb(terms)


def _product(u: list, v: list) -> list:
    k = len(u)
    return [_dot((1, u[j], v[n - j]) for j in range(n + 1)) for n in range(k)]


def _scaled(c, u: list) -> list:
    return [G.lincomb([(c, a)]) for a in u]


def _shifted(u: list, c) -> list:
    """``u + c`` (a constant or an atom added to the value)."""
    return [G.add(u[0], c)] + list(u[1:])


def _integrated(u: list, g: Callable[[int], object], y0) -> list:
    """The series of ``y`` with ``y' = g u'`` and ``y(0) = y0``; ``g(m)`` is the ``m``-th
    coefficient of ``g``, asked for in order (it may read ``y``'s first ``m + 1``)."""
    y = [y0]
    gs: list = []
    for n in range(1, len(u)):
        gs.append(g(n - 1, y))
        y.append(G.monomial(sp.Rational(1, n), [(_dot((j, u[j], gs[n - j]) for j in
                                                      range(1, n + 1)), ONE)]))
    return y


def _power(u: list, e) -> list:
    """``u ** e`` for a constant ``e``: repeated products for a small natural ``e`` (exact at
    ``u_0 = 0``), else ``n u_0 v_n = sum_j ((e + 1) j - n) u_j v_{n-j}``."""
    if e.is_Integer and 0 <= int(e) <= 8:
        out = [ONE] + [ZERO] * (len(u) - 1)
        for _ in range(int(e)):
            out = _product(out, u)
        return out
    v = [G.power(u[0], e)]
    inv = G.power(u[0], sp.Integer(-1))
    for n in range(1, len(u)):
        s = _dot(((e + 1) * j - n, u[j], v[n - j]) for j in range(1, n + 1))
        v.append(G.monomial(sp.Rational(1, n), [(s, ONE), (inv, ONE)]))
    return v


def _exp(u: list) -> list:
    return _integrated(u, lambda m, y: y[m], G.call(sp.exp, u[0]))


def _sin_cos(u: list, hyperbolic: bool) -> tuple[list, list]:
    """``(sin u, cos u)`` (``(sinh u, cosh u)``): ``s' = c u'``, ``c' = -/+ s u'``."""
    s = [G.call(sp.sinh if hyperbolic else sp.sin, u[0])]
    c = [G.call(sp.cosh if hyperbolic else sp.cos, u[0])]
    sign = 1 if hyperbolic else -1
    for n in range(1, len(u)):
        s.append(G.monomial(sp.Rational(1, n), [(_dot((j, u[j], c[n - j])
                                                      for j in range(1, n + 1)), ONE)]))
        c.append(G.monomial(sp.Rational(sign, n), [(_dot((j, u[j], s[n - j])
                                                         for j in range(1, n + 1)), ONE)]))
    return s, c


def _square_based(u: list, y0, sign: int) -> list:
    """``y' = (1 + sign y^2) u'`` (``tan``: +1; ``tanh``: -1, whose ``1 - y_0^2`` is
    ``sech(u_0)^2``: where ``tanh`` rounds to +-1 the difference keeps no digit)."""
    def g(m, y):
        if m == 0 and sign < 0:
            return _sech_squared(u[0])
        sq = _dot((1, y[i], y[m - i]) for i in range(m + 1))
        return G.lincomb([(sp.Integer(sign), sq)], ONE if m == 0 else ZERO)

    return _integrated(u, g, y0)


def _sech_squared(a):
    """``(1/cosh(a))**2``: the reciprocal first, so it underflows only where the result does
    (``cosh(a)**2`` overflows from ``|a| = 355``)."""
    return G.power(G.power(G.call(sp.cosh, a), sp.Integer(-1)), sp.Integer(2))


def _logistic(w: list, value) -> list:
    """``1/(1 + exp(w))`` (``value`` its atom at ``t = 0``) as ``(1 - tanh(w/2))/2``: the
    series of the quotient would take differences of nearly equal terms at small ``w_0``
    (``1/4 - 1/4`` in the second coefficient)."""
    half = _scaled(sp.Rational(-1, 2), w)
    y = _square_based(half, G.call(sp.tanh, half[0]), -1)
    return [value] + _scaled(sp.Rational(1, 2), y[1:])


def _by_derivative(u: list, y0, derivative: list) -> list:
    """``y`` from the series of ``dy/du`` (a function of ``u`` alone)."""
    return _integrated(u, lambda m, y: derivative[m], y0)


def _one_minus_square(u: list, sign: int = -1) -> list:
    """``1 + sign u^2``; ``1 - u^2`` starts at ``(1 - u_0)(1 + u_0)``, exact where ``u_0``
    is near +-1 (``1 - u_0^2`` loses the digits of ``u_0^2``'s rounding there)."""
    out = _shifted(_scaled(sp.Integer(sign), _product(u, u)), ONE)
    if sign < 0:
        out[0] = G.mul(G.lincomb([(sp.Integer(-1), u[0])], ONE), G.add(u[0], ONE))
    return out


def _square_minus_one(u: list) -> list:
    """``u^2 - 1``, starting at ``(u_0 - 1)(u_0 + 1)`` (exact near ``u_0 = 1``)."""
    out = _shifted(_product(u, u), sp.Integer(-1))
    out[0] = G.mul(G.add(u[0], sp.Integer(-1)), G.add(u[0], ONE))
    return out


def _atan2(a: list, b: list, value) -> list:
    """``atan2(a, b)`` from its derivative ``(b a' - a b') / (a^2 + b^2)``."""
    da = [G.lincomb([(sp.Integer(n), a[n])]) for n in range(1, len(a))]
    db = [G.lincomb([(sp.Integer(n), b[n])]) for n in range(1, len(b))]
    if not da:
        return [value]
    num = [G.lincomb([(ONE, p), (sp.Integer(-1), q)])
           for p, q in zip(_product(b[:-1], da), _product(a[:-1], db))]
    den = [G.add(p, q) for p, q in zip(_product(a[:-1], a[:-1]), _product(b[:-1], b[:-1]))]
    slope = _product(num, _power(den, sp.Integer(-1)))
    return [value] + [G.monomial(sp.Rational(1, n), [(slope[n - 1], ONE)])
                      for n in range(1, len(a))]


def _constant(value, k: int) -> list:
    """The series of a value that does not move (``k`` coefficients)."""
    return [value] + [ZERO] * (k - 1)


class Series:
    """The series arithmetic the Taylor rules of ``element/heads.py`` are written in (a rule
    is ``rule(SERIES, value, *series)``; series are lists of atoms, numbers are SymPy's)."""

    exp = staticmethod(_exp)
    sin_cos = staticmethod(_sin_cos)
    square_based = staticmethod(_square_based)
    by_derivative = staticmethod(_by_derivative)
    power = staticmethod(_power)
    product = staticmethod(_product)
    scaled = staticmethod(_scaled)
    shifted = staticmethod(_shifted)
    one_minus_square = staticmethod(_one_minus_square)
    square_minus_one = staticmethod(_square_minus_one)
    atan2 = staticmethod(_atan2)
    constant = staticmethod(_constant)
    call = staticmethod(G.call)
    add = staticmethod(G.add)

    @staticmethod
    def fixed(u: list, what: str):
        """The value of a series that must not move (a function's order, say), or raises
        :class:`Unsupported` naming ``what``."""
        if any(not _zero(c) for c in u[1:]):
            raise Unsupported(f"{what} moves: no Taylor rule")
        return u[0]


#: The series arithmetic handed to the heads' Taylor rules.
SERIES = Series()


# --------------------------------------------------------------------------------------------
# Rules per head: the structural ones here, the rest from the head records
# --------------------------------------------------------------------------------------------


#: Heads whose series would not be what the ops' own derivative rules give at a kink: a
#: template may use them for stability where the function is smooth (softplus is
#: ``max(x, 0) + log1p(exp(-|x|))``, whose derivative at 0 is 1/2, not 0: that sum is
#: recognised and expanded as the smooth function, see :func:`_softplus_terms`), and a power
#: with a variable exponent follows TensorFlow's convention where the base is not positive.
KINKED = (sp.Abs, sp.Max, sp.Min)


def _definition(node: G.Node, series: Callable) -> list:  # noqa: C901 - a table of heads
    d = node.definition
    head = d.func
    if head is sp.Add:
        terms = [(arg.args[0], arg.args[1]) if arg.is_Mul else (ONE, arg) for arg in d.args]
        out = None
        for coef, s in _softplus_terms(terms, series) + [(c, series(a)) for c, a in terms]:
            term = _scaled(coef, s) if not is_one(coef) else s
            out = term if out is None else [G.add(a, b) for a, b in zip(out, term)]
        return out
    if head is sp.Mul:
        coef, out = ONE, None
        for arg in d.args:
            if arg.is_Pow:  # a factor atom ** constant
                factor = _power(series(arg.base), arg.exp)
            elif G.is_symbolic(arg):
                factor = series(arg)
            else:
                coef = G.c_mul(coef, arg)
                continue
            out = factor if out is None else _product(out, factor)
        return _scaled(coef, out)
    if head is sp.Pow:
        base, exp = d.args
        w = _logistic_exponent(base) if exp == -1 else None
        if w is not None:  # 1/(1 + exp(w)), the logistic function of -w
            return _logistic(series(w), node)
        if G.is_const(exp):
            return _power(series(base), exp)
        raise Unsupported("a power with a variable exponent")
    if head in KINKED:
        raise Unsupported(f"{head.__name__}: a kink, differentiated by the ops' rules")
    if head is sp.Piecewise:
        values = [(series(v), c) for v, c in d.args]
        return [G.piecewise(*[(s[n], c) for s, c in values]) for n in range(len(values[0][0]))]
    rec = H.record(head)
    if rec is None or rec.taylor is None:
        raise Unsupported(f"no Taylor rule for {head.__name__}")
    return rec.taylor(SERIES, node, *[series(a) for a in d.args])


def is_one(c) -> bool:
    return G.is_const(c) and G.is_one(c)


def _defined(atom, head):
    """The definition of ``atom`` when it is a plain node of ``head``, else None."""
    if isinstance(atom, G.Node) and atom.forward is None and atom.definition.func is head:
        return atom.definition
    return None


def _logistic_exponent(base):
    """``w`` when ``base`` is the node ``1 + exp(w)``, else None."""
    d = _defined(base, sp.Add)
    if d is None or len(d.args) != 2 or not any(is_one(a) for a in d.args):
        return None
    e = next(a for a in d.args if not is_one(a))
    inner = _defined(e, sp.exp)
    return inner.args[0] if inner is not None else None


def _softplus_argument(high, low):
    """``u`` when ``high`` is ``Max(u, 0)`` and ``low`` is ``log1p(exp(-Abs(u)))`` (the
    stable softplus ``log(1 + exp(u))`` of the op table), else None."""
    top, d = _defined(high, sp.Max), _defined(low, F.log1p)
    if top is None or d is None or len(top.args) != 2 or not any(
            G.is_const(a) and G.is_zero(a) for a in top.args):
        return None
    u = next(a for a in top.args if not G.is_const(a))
    e = _defined(d.args[0], sp.exp)
    m = _defined(e.args[0], sp.Mul) if e is not None else None
    if m is None or len(m.args) != 2 or m.args[0] != -1:
        return None
    a = _defined(m.args[1], sp.Abs)
    return u if a is not None and a.args[0] == u else None


def _softplus_terms(terms: list, series: Callable) -> list:
    """The softplus pairs among the ``(coef, atom)`` terms of a sum, taken out of ``terms``
    (in place) and returned as ``(coef, series)``: softplus is smooth, so its series is the
    integral of the logistic function's, while its stable form's ``Max`` and ``Abs`` have
    none (:data:`KINKED`)."""
    out = []
    for i, (c, high) in enumerate(terms):
        for j, (c2, low) in enumerate(terms):
            u = _softplus_argument(high, low) if i != j and c == c2 else None
            if u is not None:
                value = G.add(high, low)
                us = series(u)
                slope = _logistic(_scaled(sp.Integer(-1), us), G.power(G.add(ONE, G.call(
                    sp.exp, G.lincomb([(sp.Integer(-1), u)]))), sp.Integer(-1)))
                out.append((c, _by_derivative(us, value, slope)))
                for k in sorted((i, j), reverse=True):
                    del terms[k]
                return out + _softplus_terms(terms, series)
    return out


def coefficients(outputs: Sequence, leaves: Sequence, tangents: Sequence, order: int) -> list:
    """For each atom of ``outputs``, its Taylor coefficients ``[a_0, ..., a_order]`` along
    ``leaves[i](t) = leaves[i] + t * tangents[i]`` (tangents: constants or atoms).

    >>> x = G.Leaf.new("x")
    >>> (c,) = coefficients([G.call(sp.exp, G.mul(x, x))], [x], [ONE], 2)
    >>> [G.expand(a) for a in c]
    [exp(x**2), 2*x*exp(x**2), 2*x**2*exp(x**2) + exp(x**2)]
    """
    k = order + 1
    memo: dict = {leaf: [leaf, tangent] + [ZERO] * (k - 2) if k > 1 else [leaf]
                  for leaf, tangent in zip(leaves, tangents)}
    moving: set = set(leaves)

    def series(atom) -> list:
        found = memo.get(atom)
        if isinstance(found, Unsupported):
            raise found
        return found if found is not None else [atom] + [ZERO] * (k - 1)

    for node in G.reachable(outputs):
        if not any(op in moving for op in node.operands):
            continue
        moving.add(node)
        if node.forward is not None:
            if node.definition.func is not F.StopGradient:
                raise Unsupported(f"{node.definition.func.__name__} has a user's derivative "
                                  "rule")
            continue  # no derivative flows through stop_gradient: a constant series
        if node.is_boolean:
            continue  # a condition: held at its value at t = 0
        try:
            memo[node] = _definition(node, series)
        except Unsupported as e:  # raised where an output needs it (a softplus's Max does not)
            memo[node] = e
    return [series(a) for a in outputs]


# --------------------------------------------------------------------------------------------
# Mixed partials from univariate series (Griewank, Utke and Walther, Math. Comp. 69, 2000)
# --------------------------------------------------------------------------------------------


def multi_indices(n: int, d: int) -> list[tuple]:
    """The multi-indices of ``n`` variables summing to ``d`` (lexicographically descending).

    >>> multi_indices(2, 2)
    [(2, 0), (1, 1), (0, 2)]
    """
    if n == 1:
        return [(d,)]
    return [(a,) + rest for a in range(d, -1, -1) for rest in multi_indices(n - 1, d - a)]


def _binomial(a: Fraction, b: int) -> Fraction:
    out = Fraction(1)
    for t in range(b):
        out *= a - t
    return out / math.factorial(b)


@functools.cache
def interpolation(n: int, d: int) -> tuple:
    """``(indices, weights)``: every partial of order ``d`` in ``n`` variables is exactly
    ``d^i f = sum_j weights[i][j] c_j``, ``c_j`` the ``d``-th Taylor coefficient of
    ``f(x + t j)`` and ``j`` running over the same ``indices`` as directions:
    ``weights[i][j] = sum over 0 < k <= i of (-1)^|i-k| C(i, k) C(d k/|k|, j) (|k|/d)^d``.

    >>> indices, w = interpolation(2, 2)  # f_xy = c_(1,1) - (c_(2,0) + c_(0,2)) / 4
    >>> indices[1], [str(v) for v in w[1]]
    ((1, 1), ['-1/4', '1', '-1/4'])
    """
    indices = multi_indices(n, d)
    weights = []
    for i in indices:
        row = []
        for j in indices:
            total = Fraction(0)
            for k in itertools.product(*[range(m + 1) for m in i]):
                size = sum(k)
                if size == 0:
                    continue
                term = Fraction((-1) ** (d - size) * math.prod(map(math.comb, i, k)))
                for km, jm in zip(k, j):
                    term *= _binomial(Fraction(d * km, size), jm)
                total += term * Fraction(size, d) ** d
            row.append(total)
        weights.append(tuple(row))
    return indices, tuple(weights)


def partials(outputs: Sequence, leaves: Sequence, order: int) -> tuple:
    """``(indices, atoms)``: for each multi-index ``i`` of ``order`` over ``leaves``, the
    partial ``d^i`` of every atom of ``outputs``, interpolated exactly from the Taylor
    series of the outputs along each direction ``i`` (:func:`interpolation`); one series
    per direction, ``C(n + order - 1, order)`` of them.

    >>> x, y = G.Leaf.new("x"), G.Leaf.new("y")
    >>> indices, ((fxx, fxy, fyy),) = partials([G.mul(G.mul(x, x), y)], [x, y], 2)
    >>> [G.expand(a) for a in (fxx, fxy, fyy)]
    [2*y, 2*x, 0]
    """
    indices, weights = interpolation(len(leaves), order)
    series = []
    for j in indices:
        moving = [(leaf, G.number(m)) for leaf, m in zip(leaves, j) if m]
        coefs = coefficients(outputs, [a for a, _ in moving], [t for _, t in moving], order)
        series.append([c[-1] for c in coefs])
    out = []
    for k in range(len(outputs)):
        row = []
        for w in weights:
            terms = [(sp.Rational(c.numerator, c.denominator), s[k])
                     for c, s in zip(w, series) if c]
            row.append(G.lincomb(terms))
        out.append(tuple(row))
    return indices, out
