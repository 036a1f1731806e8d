"""``st.random``: seeded random values (numeric data, not differentiable). Eagerly they
are constants; inside a function traced by ``st.function`` they are *draws*: inputs of the
compiled code drawn anew from the same stream at each call, as TensorFlow's random ops in a
``tf.function`` are, so a compiled step and the same step run eagerly see the same values.

>>> import symtape as st
>>> @st.function
... def noisy(x):
...     return x + st.random.uniform([3])
>>> st.random.set_seed(5); a, b = noisy(np.zeros(3)).numpy(), noisy(np.zeros(3)).numpy()
>>> bool((a != b).all())
True
>>> st.random.set_seed(5); bool((st.random.uniform([3]).numpy() == a).all())
True
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from symtape.base import recording
from symtape.base.errors import DTypeError
from symtape.core.tensor import floatx
from symtape.core.variables import Tensor, Variable, constant
from symtape.core.variables import shape_arg as _shape_arg

__all__ = ["set_seed", "normal", "uniform", "Draw"]


class Draw(Variable):
    """Random values a traced function reads as an input: :meth:`draw` gives the next
    values of its stream (``st.function`` calls it at each call). Not trainable. It holds
    the values drawn while tracing (an initial value taken from it is a real draw), and
    its first :meth:`draw` gives those, so the stream is read in the order eager calls
    read it."""

    __slots__ = ("_sample", "_first")

    def __init__(self, sample: Callable, shape: tuple, dtype) -> None:
        first = np.asarray(sample()).astype(dtype).reshape(shape)
        super().__init__(first, trainable=False, name="random")
        self._sample = sample
        self._first = first

    def draw(self) -> np.ndarray:
        """The next values (the first time: those drawn while tracing)."""
        first, self._first = self._first, None
        if first is not None:
            return first
        return np.asarray(self._sample(), dtype=self.dtype).reshape(self.shape)


def _values(sample: Callable, shape: tuple, dtype) -> Tensor:
    """``sample()`` now (a constant), or, while a function is traced, a draw of it at each
    call."""
    trace = recording.current_trace()
    if trace is None:
        return constant(np.asarray(sample()).astype(dtype))
    draw = Draw(sample, shape, np.dtype(dtype))
    trace.draws.append(draw)
    return draw.read()


_state = {"global": None, "rng": np.random.default_rng(), "ops": {}}


def set_seed(seed: int) -> None:
    """Seed the global generator: later draws repeat from run to run.

    >>> import symtape as st
    >>> st.random.set_seed(1); a = st.random.normal([2]).numpy()
    >>> st.random.set_seed(1); bool((st.random.normal([2]).numpy() == a).all())
    True
    """
    _state["global"] = int(seed)
    _state["rng"] = np.random.default_rng(int(seed))
    _state["ops"] = {}


def _rng(seed):
    if seed is None:
        return _state["rng"]
    key = int(seed)
    if key not in _state["ops"]:
        _state["ops"][key] = np.random.default_rng([_state["global"] or 0, key])
    return _state["ops"][key]


def _float_dtype(dtype, what: str, ints: bool = False) -> np.dtype:
    """``dtype`` checked (floats; ints too where ``ints``), floatx when None."""
    if dtype is None:
        return floatx()
    try:
        got = np.dtype(dtype)
    except TypeError:
        got = None
    if got is None or got.kind not in ("fiu" if ints else "f") or got.itemsize < 4:
        raise DTypeError(f"{what}: dtype must be float32 or float64"
                         f"{' (or int32, int64)' if ints else ''}, got {dtype!r}")
    return got


def normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None, name=None) -> Tensor:
    """Normally distributed values (``dtype``: ``st.config.floatx()`` when None).

    >>> import symtape as st
    >>> st.random.normal([2, 3]).shape
    (2, 3)
    """
    shape = _shape_arg(shape, "st.random.normal")
    dtype = _float_dtype(dtype, "st.random.normal")
    return _values(lambda: _rng(seed).normal(mean, stddev, size=shape), shape, dtype)


def uniform(shape, minval=0.0, maxval=None, dtype=None, seed=None, name=None) -> Tensor:
    """Uniformly distributed values in ``[minval, maxval)`` (``maxval`` defaults to 1;
    ``dtype``: ``st.config.floatx()`` when None; int32/int64 need ``maxval``).

    >>> import symtape as st
    >>> bool((st.random.uniform([4]).numpy() < 1).all())
    True
    """
    hi = 1.0 if maxval is None else maxval
    shape = _shape_arg(shape, "st.random.uniform")
    dtype = _float_dtype(dtype, "st.random.uniform", ints=True)
    if dtype.kind in "iu":
        if maxval is None:
            raise ValueError("st.random.uniform: integer dtypes need an explicit maxval")
        return _values(lambda: _rng(seed).integers(int(minval), int(hi), size=shape), shape,
                       dtype)
    return _values(lambda: _rng(seed).uniform(minval, hi, size=shape), shape, dtype)
