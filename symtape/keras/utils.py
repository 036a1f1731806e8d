"""``to_categorical``."""

from __future__ import annotations

import numpy as np

from symtape.base.errors import InvalidArgumentError
from symtape.keras import backend

__all__ = ["to_categorical"]


def to_categorical(x, num_classes: int | None = None, dtype=None) -> np.ndarray:
    """One-hot rows of integer class labels (``num_classes`` default: the largest + 1;
    ``dtype`` default: ``st.keras.backend.floatx()``, float32).

    >>> to_categorical([0, 2], 3)
    array([[1., 0., 0.],
           [0., 0., 1.]], dtype=float32)
    """
    labels = np.asarray(x)
    if labels.dtype.kind not in "iu" and not (labels.dtype.kind == "f" and labels.size and
                                               np.all(labels == np.round(labels))):
        if labels.size:
            raise InvalidArgumentError("st.keras.utils.to_categorical: labels must be "
                                       "integers")
    labels = labels.astype(np.int64)
    if labels.ndim and labels.shape[-1] == 1 and labels.ndim > 1:
        labels = labels[..., 0]
    n = int(labels.max()) + 1 if num_classes is None and labels.size else int(num_classes or 0)
    if labels.size and (labels.min() < 0 or labels.max() >= n):
        raise InvalidArgumentError(f"st.keras.utils.to_categorical: labels must be in [0, "
                                   f"{n}), got {labels.min()}..{labels.max()}")
    return np.eye(n, dtype=dtype or backend.floatx())[labels]
