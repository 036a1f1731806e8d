"""Bounds on the gamma family's constants in files (``symtape.io.constant_bounds``): each
enclosure holds the value mpmath computes at 300 bits, at points and over wide intervals, and
arguments where the functions are complex or have poles are refused by name, when bounded
alone and when a file's expression is decoded."""

from __future__ import annotations

import mpmath
import pytest
import sympy as sp

from symtape.base.errors import SerializationError
from symtape.io import constant_bounds, expressions

# (node, its value as an mpmath function of nothing, at the working precision)
POINTS = [
    (["Rational", 1, 3], lambda: mpmath.mpf(1) / 3),
    (["Integer", 1], lambda: mpmath.mpf(1)),
    (["Integer", 2], lambda: mpmath.mpf(2)),
    (["Float", 0, 6582605715198133, -52, 53, 53], lambda: mpmath.ldexp(6582605715198133, -52)),
    (["Rational", 7, 2], lambda: mpmath.mpf(7) / 2),
    (["Integer", 10 ** 6], lambda: mpmath.mpf(10) ** 6),
    (["Rational", 1, 2 ** 4000], lambda: mpmath.ldexp(1, -4000)),
    (["Integer", 2 ** 4000], lambda: mpmath.ldexp(1, 4000)),
    (["Mul", ["Rational", 1, 2], ["pi"]], lambda: mpmath.pi / 2),
    (["Add", ["E"], ["Integer", -1]], lambda: mpmath.e - 1),
]


def _ends(bound) -> tuple:
    with mpmath.workprec(300):  # (the endpoints exactly)
        return tuple(mpmath.mpf(e) for e in bound.value._mpi_)


def _contains(bound, value) -> bool:
    a, b = _ends(bound)
    return a <= value <= b


def _reference(f):
    with mpmath.workprec(300):
        return +f()


@pytest.mark.parametrize("node, x", POINTS, ids=[str(p[0])[:30] for p in POINTS])
def test_loggamma_enclosures_hold_the_value(node, x):
    bound = constant_bounds.bound_tree(["loggamma", node], "c")
    want = _reference(lambda: mpmath.loggamma(x()))
    assert _contains(bound, want)
    a, b = _ends(bound)
    assert b - a <= abs(want) * 2.0 ** -60 + 2.0 ** -70  # a tight enclosure, not a hull


@pytest.mark.parametrize("order", [0, 1, 2, 5, 16, 128])
@pytest.mark.parametrize("node, x", POINTS, ids=[str(p[0])[:30] for p in POINTS])
def test_polygamma_enclosures_hold_the_value(order, node, x):
    want = _reference(lambda: mpmath.psi(order, x()))
    try:
        bound = constant_bounds.bound_tree(["polygamma", ["Integer", order], node], "c")
    except SerializationError as exc:  # only values beyond the magnitude bounds are refused
        assert "in magnitude" in str(exc)
        assert not mpmath.ldexp(1, -4096) <= abs(want) <= mpmath.ldexp(1, 4096)
        return
    assert _contains(bound, want)
    a, b = _ends(bound)
    assert b - a <= abs(want) * 2.0 ** -60 + 2.0 ** -70


@pytest.mark.parametrize("head, args", [
    ("loggamma", []), ("polygamma", [["Integer", 0]]), ("polygamma", [["Integer", 3]])])
def test_wide_arguments_are_enclosed_at_every_point(head, args):
    # RoundHalfEven's enclosure is [x - 1, x + 1]: [0.5, 2.5] holds loggamma's minimum
    # and digamma's zero
    bound = constant_bounds.bound_tree(
        [head, *args, ["RoundHalfEven", ["Rational", 3, 2]]], "c")
    order = args[0][1] if args else None
    for k in range(201):
        x = mpmath.mpf("0.5") + mpmath.mpf(k) / 100
        want = _reference(lambda: mpmath.loggamma(x) if order is None else
                          mpmath.psi(order, x))
        assert _contains(bound, want), (head, x)


@pytest.mark.parametrize("node, match", [
    (["loggamma", ["Integer", -3]], "not a real number .loggamma of an argument that may be "
                                    "0 or less"),
    (["loggamma", ["Add", ["pi"], ["Integer", -4]]], "not a real number"),
    (["polygamma", ["Integer", 1], ["Rational", -1, 2]], "polygamma of an argument that may "
                                                         "be 0 or less"),
    (["polygamma", ["Rational", 1, 2], ["Integer", 3]], "an order that may not be an "
                                                        "integer from 0 to 128"),
    (["polygamma", ["Integer", 129], ["Integer", 3]], "an order that may not be an integer"),
    (["polygamma", ["Integer", -1], ["Integer", 3]], "an order that may not be an integer"),
    (["polygamma", ["pi"], ["Integer", 3]], "an order that may not be an integer"),
])
def test_arguments_without_a_real_bound_are_refused(node, match):
    with pytest.raises(SerializationError, match=match):
        constant_bounds.bound_tree(node, "constant")
    with pytest.raises(SerializationError, match="^file: the constant"):
        expressions.decode_expr(node, "file")


@pytest.mark.parametrize("node", [
    ["loggamma", ["Rational", 7, 2]],
    ["polygamma", ["Integer", 2], ["Mul", ["Rational", 1, 2], ["pi"]]],
])
def test_decoded_constants_evaluate_inside_their_bounds(node):
    expr = expressions.decode_expr(node)
    bound = constant_bounds.bound_tree(node, "c")
    assert _contains(bound, _reference(lambda: mpmath.mpf(str(sp.N(expr, 60)))))
    assert expressions.encode_expr(expr) == node
