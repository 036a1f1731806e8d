"""Ground level: arrays that start on a cache line, and how to recognise a fresh one.

numpy starts its arrays 16 bytes into a line; native code storing 512-bit vectors into them
straddles two lines with every store, and two threads writing the halves of a row share the
line between them. :func:`aligned_empty` makes an array a view of a byte buffer up to 64
bytes longer that starts on a line; :func:`fresh_aligned` tells such an array nobody else
holds (a compiled function's result, taken as a tensor's value without a copy).
"""

from __future__ import annotations

import math
import sys

import numpy as np

__all__ = ["LINE", "ALIGN_BYTES", "aligned_empty", "aligned_zeros", "fresh_aligned"]

#: A cache line, in bytes.
LINE = 64
#: Arrays of at least this many bytes start on a cache line (smaller ones stay numpy's).
ALIGN_BYTES = 1 << 12


def aligned_empty(shape: tuple, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)`` starting on a cache line when it is at least
    :data:`ALIGN_BYTES` long.

    >>> aligned_empty((100, 64), "float32").ctypes.data % LINE
    0
    """
    dtype = np.dtype(dtype)
    n = math.prod(shape) * dtype.itemsize
    if n < ALIGN_BYTES:
        return np.empty(shape, dtype=dtype)
    raw = np.empty(n + LINE, dtype=np.uint8)
    at = -raw.ctypes.data % LINE
    return raw[at:at + n].view(dtype).reshape(shape)


def aligned_zeros(shape: tuple, dtype) -> np.ndarray:
    """``np.zeros(shape, dtype)`` as :func:`aligned_empty` places it.

    >>> float(aligned_zeros((2048,), "float64").sum())
    0.0
    """
    out = aligned_empty(shape, dtype)
    out[...] = 0
    return out


def fresh_aligned(value: np.ndarray) -> bool:
    """Whether ``value`` is an :func:`aligned_empty` array whose byte buffer nothing else
    holds.

    >>> a = aligned_empty((100, 64), "float64")
    >>> fresh_aligned(a), fresh_aligned(np.empty((100, 64)))
    (True, False)
    >>> raw = a.base  # another holder
    >>> fresh_aligned(a)
    False
    """
    raw = value.base
    # (references to the buffer: the view's, ``raw`` here and getrefcount's argument)
    return (type(raw) is np.ndarray and raw.dtype == np.uint8 and raw.ndim == 1 and
            raw.flags.owndata and 0 <= raw.nbytes - value.nbytes <= LINE and
            sys.getrefcount(raw) <= 3)
