"""Weights files of :meth:`Model.save_weights` / :meth:`Model.load_weights`: an uncompressed
NumPy ``.npz`` archive with one ``.npy`` entry per weight, named by its order and variable
name; a model of the same architecture loads it by order (layer names may differ). Loading
runs nothing from the file (no pickles) and reads no more than the model's own weights: each
entry's header must give exactly the shape and dtype of the weight it fills, and a
compressed, missing, extra or mismatched entry is an ``InvalidArgumentError`` naming the file
and the weight -- before any weight is changed.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "w.weights.npz")
>>> save(path, [("dense/kernel:0", np.ones((2, 1)))])
>>> [a.tolist() for a in load(path, [("dense/kernel:0", (2, 1), np.dtype("float64"))])]
[[[1.0], [1.0]]]
"""

from __future__ import annotations

import io
import os
import zipfile

import numpy as np

from symtape.base.errors import InvalidArgumentError

__all__ = ["save", "load"]


def _entry(k: int, name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    return f"{k:04d}_{safe}.npy"


def save(path, weights: list) -> None:
    """Writes ``weights``, a list of ``(name, array)``, to the file ``path`` (replaced).

    >>> import tempfile, os
    >>> save(os.path.join(tempfile.mkdtemp(), "w.npz"), [("b", np.zeros(3))])
    """
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z:
        for k, (name, value) in enumerate(weights):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(value), allow_pickle=False)
            z.writestr(_entry(k, name), buf.getvalue())
    os.replace(tmp, path)


def load(path, expected: list) -> list:
    """The arrays of the weights file ``path``, checked against ``expected``, a list of
    ``(name, shape, dtype)`` in the model's order.

    >>> load("/nonexistent/w.npz", [])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    symtape.base.errors.InvalidArgumentError: load_weights: cannot read '/nonexistent/w.npz': ...
    """
    what = repr(os.fspath(path))
    try:
        z = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise InvalidArgumentError(f"load_weights: cannot read {what}: {exc}") from None
    out = []
    with z:
        entries = sorted(z.namelist())
        if len(entries) != len(expected) or any(
                not e.startswith(f"{k:04d}_") for k, e in enumerate(entries)):
            raise InvalidArgumentError(f"load_weights: {what} holds {len(entries)} weights "
                                       f"{entries[:3]}..., the model has {len(expected)}: "
                                       "not a weights file of this architecture")
        for entry, (name, shape, dtype) in zip(entries, expected):
            out.append(_read(z, entry, name, tuple(shape), np.dtype(dtype), what))
    return out


def _read(z: zipfile.ZipFile, entry: str, name: str, shape: tuple, dtype: np.dtype,
          what: str) -> np.ndarray:
    info = z.getinfo(entry)
    if info.compress_type != zipfile.ZIP_STORED:
        raise InvalidArgumentError(f"load_weights: {what}: weight {name} is compressed; "
                                   "symtape writes and reads stored entries only")
    with z.open(info) as fh:
        try:
            version = np.lib.format.read_magic(fh)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            got_shape, fortran, got_dtype = read_header(fh)
        except (ValueError, OSError) as exc:
            raise InvalidArgumentError(f"load_weights: {what}: weight {name} is not a .npy "
                                       f"array ({exc})") from None
        if got_shape != shape or got_dtype != dtype or got_dtype.hasobject:
            raise InvalidArgumentError(f"load_weights: {what}: weight {name} has shape "
                                       f"{got_shape} and dtype {got_dtype}; the model's has "
                                       f"{shape} and {dtype}")
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        data = fh.read(size)
    if len(data) != size:
        raise InvalidArgumentError(f"load_weights: {what}: weight {name} is truncated")
    flat = np.frombuffer(data, dtype=dtype)
    return flat.reshape(shape, order="F" if fortran else "C").copy()
