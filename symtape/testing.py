"""``check_grads``: verify derivatives of your own functions and rules by finite differences."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Sequence

import numpy as np

from symtape.base.errors import InvalidArgumentError
from symtape.derivatives.tape import GradientTape
from symtape.core.variables import Tensor, Variable

__all__ = ["check_grads"]


def _loss_value(fn: Callable, values: list[np.ndarray], weights) -> float:
    out = fn(*[Variable(v) for v in values])
    return float(np.sum(np.asarray(out.numpy(), dtype=np.float64) * weights))


def _tape_derivative(fn, values, weights, direction, order):
    """Directional derivative of order ``order`` of ``sum(weights * fn)`` along ``direction``
    (all orders but the last), returned as the gradient of the last order, per argument."""
    leaves = [Variable(v) for v in values]
    tapes = [GradientTape(persistent=True) for _ in range(order)]
    with contextlib.ExitStack() as stack:
        for t in tapes:
            stack.enter_context(t)
        y = fn(*leaves)
        d = _weighted_sum(y, weights)
        for k in reversed(range(order)):
            grads = tapes[k].gradient(d, leaves, unconnected_gradients="zero")
            if k == 0:
                return [g.numpy() for g in grads]
            d = _dot(grads, direction)
    raise AssertionError("order must be positive")


def _weighted_sum(y: Tensor, weights):
    from symtape.ops import multiply, reduce_sum

    return reduce_sum.bind(multiply.bind(y, weights), axis=None)


def _dot(grads, direction):
    from symtape.ops import add, multiply, reduce_sum

    terms = [reduce_sum.bind(multiply.bind(g, v), axis=None) for g, v in zip(grads, direction)]
    total = terms[0]
    for t in terms[1:]:
        total = add.bind(total, t)
    return total


def _fd_derivative(fn, values, weights, direction, order, eps):
    """The same quantity by central differences of the numeric function."""
    out = []
    for i, v in enumerate(values):
        g = np.zeros_like(v, dtype=np.float64)
        for idx in np.ndindex(*v.shape):
            total = 0.0
            for signs in itertools.product((1, -1), repeat=order):
                p = [np.array(x, dtype=np.float64, copy=True) for x in values]
                for s in signs[:-1]:
                    p = [x + s * eps * d for x, d in zip(p, direction)]
                p[i][idx] += signs[-1] * eps
                total += np.prod(signs) * _loss_value(fn, p, weights)
            g[idx] = total / (2 * eps) ** order
        out.append(g)
    return out


# finite-difference steps balancing truncation (h**2) and rounding (1e-16 / h**k) per order
_STEPS = {1: 1e-6, 2: 1e-4, 3: 1e-3}


def check_grads(fn: Callable, args: Sequence, order: int = 2, eps: float | None = None,
                rtol: float = 1e-5, atol: float = 1e-6, seed: int = 0) -> None:
    """Check derivatives of ``fn`` up to ``order`` against central finite differences.

    For each order ``k``, the gradient of the ``k-1``-th directional derivative of a random
    weighting of ``fn``'s output is compared with finite differences of ``fn``'s values.
    Raises AssertionError with the mismatch.

    >>> import symtape as st
    >>> @st.custom_gradient
    ... def cube(x):
    ...     return x ** 3, lambda dy: dy * 3 * x ** 2
    >>> st.testing.check_grads(cube, [np.array([0.5, -1.2])], order=3)
    """
    if order < 1:
        raise InvalidArgumentError("check_grads: order must be >= 1")
    values = [np.asarray(a.numpy() if isinstance(a, Tensor) else a, dtype=np.float64)
              for a in args]
    rng = np.random.default_rng(seed)
    out = fn(*[Variable(v) for v in values])
    weights = rng.normal(size=out.shape)
    direction = [rng.normal(size=v.shape) for v in values]
    for k in range(1, order + 1):
        h = eps if eps is not None else _STEPS.get(k, 1e-2)
        got = _tape_derivative(fn, values, weights, direction, k)
        want = _fd_derivative(fn, values, weights, direction, k, h)
        for i, (a, b) in enumerate(zip(got, want)):
            np.testing.assert_allclose(a, b, rtol=rtol * 10 ** (k - 1),
                                       atol=atol * 10 ** (k - 1),
                                       err_msg=f"order {k} derivative, argument {i}")
