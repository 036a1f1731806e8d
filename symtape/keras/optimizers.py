"""Keras optimizers: ``SGD``, ``Adam`` and ``RMSprop`` (``symtape.optimizers``), also taking
the arguments of Keras 2 that tutorials still pass: ``lr`` for ``learning_rate``, and
``decay`` (the learning rate divided by ``1 + decay * iterations``)."""

from __future__ import annotations

from symtape import Variable, optimizers
from symtape.base.errors import InvalidArgumentError

__all__ = ["SGD", "Adam", "RMSprop", "get"]


def _legacy(cls):
    """``cls`` taking ``lr``/``decay``/``name``; its steps count in ``iterations``."""

    class Keras(cls):
        def __init__(self, learning_rate=None, *args, lr=None, decay: float = 0.0,
                     name: str | None = None, **kwargs) -> None:
            if lr is not None and learning_rate is not None:
                raise InvalidArgumentError(f"st.keras.optimizers.{cls.__name__}: give "
                                           "learning_rate or lr, not both")
            rate = lr if lr is not None else learning_rate
            if rate is not None:
                kwargs["learning_rate"] = rate
            super().__init__(*args, **kwargs)
            self.decay = float(decay)
            self.name = name or cls.__name__
            if not hasattr(self, "iterations"):
                self.iterations = Variable(0.0, name="iterations", trainable=False,
                                           dtype="float64")  # counts exactly past 2**24
                self._counts = True
            else:
                self._counts = False

        def apply_gradients(self, grads_and_vars) -> None:
            base = self.learning_rate
            if self.decay:
                self.learning_rate = base / (1.0 + self.decay * self.iterations)
            try:
                super().apply_gradients(grads_and_vars)
            finally:
                self.learning_rate = base
            if self._counts:
                self.iterations.assign_add(1.0)

    Keras.__name__ = Keras.__qualname__ = cls.__name__
    Keras.__doc__ = (cls.__doc__ or "") + "\n\n    Keras 2's ``lr`` and ``decay`` work too.\n"
    return Keras


SGD = _legacy(optimizers.SGD)
Adam = _legacy(optimizers.Adam)
RMSprop = _legacy(optimizers.RMSprop)


def get(identifier):
    """An optimizer from its name (``"sgd"``, ``"adam"``, ``"rmsprop"``, with Keras's
    default arguments), or the optimizer itself.

    >>> type(get("adam")).__name__
    'Adam'
    """
    if isinstance(identifier, str):
        by_name = {"sgd": SGD, "adam": Adam, "rmsprop": RMSprop}
        if identifier.lower() not in by_name:
            raise InvalidArgumentError(f"st.keras.optimizers: unknown optimizer {identifier!r}"
                                       " (known: adam, rmsprop, sgd)")
        return by_name[identifier.lower()]()
    if hasattr(identifier, "apply_gradients"):
        return identifier
    raise InvalidArgumentError(f"st.keras.optimizers: an optimizer is a name or an optimizer "
                               f"object, got {type(identifier).__name__}")
