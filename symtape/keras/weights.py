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
import json
import os
import zipfile

import numpy as np

from symtape.base.errors import InvalidArgumentError

__all__ = ["save", "load", "save_archive", "Archive", "MAX_CONFIG_BYTES"]

#: The largest ``config.json`` a model file may hold (a model's architecture is small).
MAX_CONFIG_BYTES = 1 << 20


def _entry(k: int, name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    return f"{k:04d}_{safe}.npy"


def save(path, weights: list) -> None:
    """Writes ``weights``, a list of ``(name, array)``, to the file ``path`` (replaced).

    >>> import tempfile, os
    >>> save(os.path.join(tempfile.mkdtemp(), "w.npz"), [("b", np.zeros(3))])
    """
    save_archive(path, None, {"": weights})


def save_archive(path, config: dict | None, groups: dict) -> None:
    """Writes a model file: ``config`` as ``config.json`` (JSON data only) and, for each
    ``group -> [(name, array)]``, the arrays as ``group/NNNN_name.npy`` entries.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "m.keras")
    >>> save_archive(path, {"a": 1}, {"weights": [("w", np.ones(2))]})
    >>> Archive(path).config
    {'a': 1}
    """
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z:
        if config is not None:
            z.writestr("config.json", json.dumps(config, allow_nan=False, indent=1))
        for group, weights in groups.items():
            prefix = f"{group}/" if group else ""
            for k, (name, value) in enumerate(weights):
                buf = io.BytesIO()
                np.lib.format.write_array(buf, np.ascontiguousarray(value), allow_pickle=False)
                z.writestr(prefix + _entry(k, name), buf.getvalue())
    os.replace(tmp, path)


class Archive:
    """A model file opened for reading: its ``config`` (strict JSON, bounded) and its
    arrays, read group by group against the shapes and dtypes the caller expects
    (:meth:`arrays`). Nothing in it is run.

    >>> Archive("/nonexistent.keras")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    symtape.base.errors.InvalidArgumentError: load_model: cannot read '/nonexistent.keras': ...
    """

    def __init__(self, path, what: str = "load_model") -> None:
        self.what = what
        self.name = repr(os.fspath(path))
        try:
            with zipfile.ZipFile(path) as z:
                self.entries = {i.filename: i for i in z.infolist()}
                info = self.entries.get("config.json")
                if info is None:
                    raise InvalidArgumentError(f"{what}: {self.name} has no config.json: not "
                                               "a model file (weights files load with "
                                               "load_weights)")
                if info.file_size > MAX_CONFIG_BYTES:
                    raise InvalidArgumentError(f"{what}: {self.name}: config.json is larger "
                                               f"than {MAX_CONFIG_BYTES} bytes")
                raw = z.read(info)[:MAX_CONFIG_BYTES + 1]
        except (OSError, zipfile.BadZipFile) as exc:
            raise InvalidArgumentError(f"{what}: cannot read {self.name}: {exc}") from None
        try:
            self.config = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        except (UnicodeDecodeError, ValueError) as exc:
            raise InvalidArgumentError(f"{what}: {self.name}: config.json is not JSON "
                                       f"({exc})") from None
        if not isinstance(self.config, dict):
            raise InvalidArgumentError(f"{what}: {self.name}: config.json is not an object")
        self.path = path

    def arrays(self, group: str, expected: list) -> list:
        """The arrays of ``group``, checked against ``expected``: ``(name, shape, dtype)``
        in order (the names are for messages; the order decides)."""
        with zipfile.ZipFile(self.path) as z:
            return _checked_arrays(z, f"{group}/" if group else "", expected, self.what,
                                   self.name)


def _checked_arrays(z: zipfile.ZipFile, prefix: str, expected: list, what: str,
                    name: str) -> list:
    """The arrays of the entries ``prefix + NNNN_*.npy`` of ``z``, one for each of
    ``expected`` (``(name, shape, dtype)``, in order), each checked before it is read."""
    entries = sorted(n for n in z.namelist() if n.startswith(prefix) and n != "config.json"
                     and "/" not in n[len(prefix):])
    if len(entries) != len(expected) or any(
            not e[len(prefix):].startswith(f"{k:04d}_") for k, e in enumerate(entries)):
        raise InvalidArgumentError(f"{what}: {name} holds {len(entries)} {prefix or 'weight '}"
                                   f"arrays, the model has {len(expected)}: not a file of "
                                   "this architecture")
    return [_read(z, e, label, tuple(shape), np.dtype(dtype), name, what)
            for e, (label, shape, dtype) in zip(entries, expected)]


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def load(path, expected: list) -> list:
    """The arrays of the weights file ``path``, checked against ``expected``, a list of
    ``(name, shape, dtype)`` in the model's order.

    >>> load("/nonexistent/w.npz", [])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    symtape.base.errors.InvalidArgumentError: load_weights: cannot read '/nonexistent/w.npz': ...
    """
    name = repr(os.fspath(path))
    try:
        z = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise InvalidArgumentError(f"load_weights: cannot read {name}: {exc}") from None
    with z:
        return _checked_arrays(z, "", expected, "load_weights", name)


def _read(z: zipfile.ZipFile, entry: str, name: str, shape: tuple, dtype: np.dtype,
          where: str, what: str = "load_weights") -> np.ndarray:
    info = z.getinfo(entry)
    if info.compress_type != zipfile.ZIP_STORED:
        raise InvalidArgumentError(f"{what}: {where}: weight {name} is compressed; "
                                   "symtape writes and reads stored entries only")
    with z.open(info) as fh:
        try:
            version = np.lib.format.read_magic(fh)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            got_shape, fortran, got_dtype = read_header(fh)
        except (ValueError, OSError) as exc:
            raise InvalidArgumentError(f"{what}: {where}: weight {name} is not a .npy "
                                       f"array ({exc})") from None
        if got_shape != shape or got_dtype != dtype or got_dtype.hasobject:
            raise InvalidArgumentError(f"{what}: {where}: weight {name} has shape "
                                       f"{got_shape} and dtype {got_dtype}; the model's has "
                                       f"{shape} and {dtype}")
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        data = fh.read(size)
    if len(data) != size:
        raise InvalidArgumentError(f"{what}: {where}: weight {name} is truncated")
    flat = np.frombuffer(data, dtype=dtype)
    return flat.reshape(shape, order="F" if fortran else "C").copy()
