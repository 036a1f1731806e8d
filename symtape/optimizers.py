"""``st.optimizers``: SGD, Adam and RMSprop applying gradients to variables (as Keras
optimizers)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from symtape import Tensor, Variable, cast, constant
from symtape.base.errors import InvalidArgumentError
from symtape.math import sqrt

__all__ = ["SGD", "Adam", "RMSprop"]


def _pairs(grads_and_vars: Iterable) -> list[tuple]:
    out = []
    for i, pair in enumerate(grads_and_vars):
        g, v = pair
        if not isinstance(v, Variable):
            raise InvalidArgumentError(f"apply_gradients: item {i} has no st.Variable")
        if g is not None:
            out.append((g if isinstance(g, Tensor) else constant(np.asarray(g, v.dtype)), v))
    return out


def _rate(rate, v: Variable):
    """A step size in ``v``'s dtype: a tensor one (of the float64 step count: Adam's bias
    correction, Keras's decay) is cast, as Keras computes each update in its variable's
    dtype; a number takes the dtype of the tensor it meets."""
    return cast(rate, v.dtype) if isinstance(rate, Tensor) and rate.dtype != v.dtype else rate


class Slots(dict):
    """An optimizer's state per variable: ``variable id -> (variable, slot)``. It pickles as
    its ``(variable, slot)`` pairs and is keyed again by the unpickled variables, so a model
    pickled with its optimizer goes on training where it stopped.

    >>> import pickle, symtape as st
    >>> w = st.Variable([1.0]); slots = Slots(); slot(slots, w).assign([0.5])
    <st.Variable 'Variable:0' shape=(1,) dtype=float64, numpy=[0.5]>
    >>> w2, slots2 = pickle.loads(pickle.dumps((w, slots)))
    >>> slot(slots2, w2).numpy()
    array([0.5])
    """

    def __reduce__(self):
        return (Slots.of_pairs, (list(self.values()),))

    @staticmethod
    def of_pairs(pairs: list) -> Slots:
        return Slots({v._id: (v, s) for v, s in pairs})


def slot(slots: Slots, v: Variable) -> Variable:
    """The optimizer's state for ``v`` (a variable, so that ``st.function`` steps carry it
    from call to call), zeros at first."""
    found = slots.get(v._id)
    if found is None:
        found = slots[v._id] = (v, Variable(np.zeros(v.shape, dtype=v.dtype), trainable=False))
    return found[1]


class SGD:
    """Gradient descent with optional momentum: ``v -= learning_rate * g``.

    >>> import symtape as st
    >>> w = st.Variable(1.0)
    >>> st.optimizers.SGD(0.1).apply_gradients([(st.constant(2.0), w)])
    >>> float(w)
    0.8
    """

    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.0) -> None:
        self.learning_rate = float(learning_rate)
        self.momentum = float(momentum)
        self._velocity: Slots = Slots()

    def apply_gradients(self, grads_and_vars: Iterable) -> None:
        for g, v in _pairs(grads_and_vars):
            if self.momentum:
                vel = slot(self._velocity, v)
                vel.assign(self.momentum * vel - _rate(self.learning_rate, v) * g)
                v.assign_add(vel)
            else:
                v.assign_sub(_rate(self.learning_rate, v) * g)


class Adam:
    """Adam (Kingma & Ba) with Keras's defaults and epsilon placement; its moments and step
    count are variables, so a step traced by ``st.function`` updates them at every call.

    >>> import symtape as st
    >>> w = st.Variable(1.0)
    >>> st.optimizers.Adam(0.1).apply_gradients([(st.constant(2.0), w)])
    >>> round(float(w), 6)
    0.9
    """

    def __init__(self, learning_rate: float = 0.001, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-7) -> None:
        self.learning_rate = float(learning_rate)
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        self._m: Slots = Slots()
        self._v: Slots = Slots()
        # a float64 count is exact past float32's 2**24 whatever st.config.floatx() is
        self.iterations = Variable(0.0, name="iterations", trainable=False, dtype="float64")

    def apply_gradients(self, grads_and_vars: Iterable) -> None:
        pairs = _pairs(grads_and_vars)
        self.iterations.assign_add(1.0)
        t = self.iterations
        b1, b2 = self.beta_1, self.beta_2
        lr = self.learning_rate * sqrt(1.0 - b2 ** t) / (1.0 - b1 ** t)
        for g, v in pairs:
            m, s = slot(self._m, v), slot(self._v, v)
            m.assign(b1 * m + (1.0 - b1) * g)
            s.assign(b2 * s + (1.0 - b2) * g * g)
            v.assign_sub(_rate(lr, v) * m / (sqrt(s) + self.epsilon))


class RMSprop:
    """RMSprop with Keras's defaults: ``s = rho s + (1 - rho) g^2``, ``v -= lr g /
    sqrt(s + epsilon)`` (``centered``: ``s`` less the squared mean gradient; ``momentum``:
    the steps accumulate).

    >>> import symtape as st
    >>> w = st.Variable(1.0)
    >>> st.optimizers.RMSprop(0.1).apply_gradients([(st.constant(2.0), w)])
    >>> round(float(w), 6)  # 1 - 0.1 * 2 / sqrt(0.1 * 4)
    0.683772
    """

    def __init__(self, learning_rate: float = 0.001, rho: float = 0.9, momentum: float = 0.0,
                 epsilon: float = 1e-7, centered: bool = False) -> None:
        self.learning_rate, self.rho = float(learning_rate), float(rho)
        self.momentum, self.epsilon, self.centered = float(momentum), float(epsilon), centered
        self._s: Slots = Slots()
        self._mean: Slots = Slots()
        self._velocity: Slots = Slots()

    def apply_gradients(self, grads_and_vars: Iterable) -> None:
        rho = self.rho
        for g, v in _pairs(grads_and_vars):
            s = slot(self._s, v)
            s.assign(rho * s + (1.0 - rho) * g * g)
            denominator = s + self.epsilon
            if self.centered:
                mean = slot(self._mean, v)
                mean.assign(rho * mean + (1.0 - rho) * g)
                denominator = denominator - mean * mean
            step = _rate(self.learning_rate, v) * g / sqrt(denominator)
            if self.momentum:
                vel = slot(self._velocity, v)
                vel.assign(self.momentum * vel + step)
                step = vel
            v.assign_sub(step)
