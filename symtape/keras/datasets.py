"""``datasets.mnist.load_data()``: TensorFlow's cached ``mnist.npz`` read from disk (no
download: this machine may have no network)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from symtape.base.errors import SerializationError

__all__ = ["mnist"]

_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
#: What each array of ``mnist.npz`` must be: (dtype kind, trailing shape).
_ARRAYS = {"x_train": ("u", (28, 28)), "y_train": ("u", ()), "x_test": ("u", (28, 28)),
          "y_test": ("u", ())}


def _cache_file(name: str) -> Path:
    """Where Keras keeps a dataset: ``$KERAS_HOME/datasets`` or ``~/.keras/datasets``."""
    home = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    return Path(home) / "datasets" / name


class _MNIST:
    """The MNIST digits: 60,000 training and 10,000 test images of 28x28 uint8 pixels."""

    def load_data(self, path: str = "mnist.npz") -> tuple:
        """``((x_train, y_train), (x_test, y_test))`` from ``path`` (a file name looked up
        in Keras's cache folder, or a path to the file). Data only: the arrays are read
        without pickles and checked.

        >>> import tempfile, os
        >>> f = os.path.join(tempfile.mkdtemp(), "digits.npz")
        >>> np.savez(f, x_train=np.zeros((2, 28, 28), np.uint8), y_train=np.zeros(2, np.uint8),
        ...          x_test=np.zeros((1, 28, 28), np.uint8), y_test=np.zeros(1, np.uint8))
        >>> (x, y), _ = mnist.load_data(f)
        >>> x.shape, y.shape
        ((2, 28, 28), (2,))
        """
        file = Path(path) if os.sep in str(path) or Path(path).is_file() else _cache_file(path)
        if not file.is_file():
            raise FileNotFoundError(
                f"st.keras.datasets.mnist: {file} does not exist. symtape does not download; "
                f"put TensorFlow's mnist.npz ({_URL}) there, or pass its path")
        try:
            with np.load(file, allow_pickle=False) as data:
                arrays = {k: np.asarray(data[k]) for k in _ARRAYS}
        except (KeyError, ValueError, OSError, zipfile.BadZipFile) as e:
            raise SerializationError(f"st.keras.datasets.mnist: {file} is not an MNIST "
                                     f"archive ({type(e).__name__}: {e})") from None
        for key, (kind, core) in _ARRAYS.items():
            a = arrays[key]
            if a.dtype.kind != kind or a.shape[1:] != core:
                raise SerializationError(f"st.keras.datasets.mnist: {file}: {key} has dtype "
                                         f"{a.dtype} and shape {a.shape}")
        for part in ("train", "test"):
            if len(arrays[f"x_{part}"]) != len(arrays[f"y_{part}"]):
                raise SerializationError(f"st.keras.datasets.mnist: {file}: x_{part} and "
                                         f"y_{part} differ in length")
        return ((arrays["x_train"], arrays["y_train"]), (arrays["x_test"], arrays["y_test"]))


mnist = _MNIST()
