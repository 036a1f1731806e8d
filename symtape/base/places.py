"""Ground level: the flat places of a fresh array, shared (:func:`flat_places`)."""

from __future__ import annotations

import math
import weakref

import numpy as np

__all__ = ["flat_places"]

#: The ramp every :func:`flat_places` is a view of, while any is alive (a weak reference:
#: freed with the last view).
_RAMP = None


def flat_places(shape: tuple) -> np.ndarray:
    """The offsets of a fresh buffer of ``shape``: element ``k`` at ``k`` -- a read-only view
    of one shared ramp (a plan over 10^6 scan steps places dozens of fresh buffers of 2e6
    elements; each held its own 16 MB of offsets).

    >>> flat_places((2, 3)).tolist()
    [[0, 1, 2], [3, 4, 5]]
    >>> flat_places((4,)).base is flat_places((2, 2)).base
    True
    """
    global _RAMP
    n = math.prod(shape)
    ramp = _RAMP() if _RAMP is not None else None
    if ramp is None or ramp.size < n:
        ramp = np.arange(max(n, 1 << 12), dtype=np.int64)
        ramp.flags.writeable = False
        _RAMP = weakref.ref(ramp)
    return ramp[:n].reshape(shape)
