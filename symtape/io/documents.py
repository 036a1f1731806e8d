"""Framed documents: a JSON object behind a header of magic tag, format version, payload
length and SHA-256, so a file of another kind or version, a truncated one or a corrupt one is
named as such before its JSON is read.

>>> blob = dump_document({"n": 1}, b"EXAMPLE\\n", 2)
>>> len(blob), load_document(blob, b"EXAMPLE\\n", 2, "'f.bin'", "test document")
(59, {'n': 1})
"""

from __future__ import annotations

import hashlib
import json
import struct

from symtape.base.errors import SerializationError
from symtape.io.files import read_file
from symtape.io.strict_json import loads

__all__ = ["dump_document", "load_document", "read_document"]

_HEADER = struct.Struct("<8sIQ32s")  # magic, version, payload length, sha256(payload)


def dump_document(doc: dict, magic: bytes, version: int) -> bytes:
    """``doc`` as UTF-8 JSON behind a header: 8-byte magic, version, length and SHA-256.

    >>> blob = dump_document({"a": [1]}, b"EXAMPLE\\n", 1)
    >>> load_document(blob, b"EXAMPLE\\n", 1, "example", "test document")
    {'a': [1]}
    """
    if len(magic) != 8:
        raise ValueError("the magic tag of a document is 8 bytes")
    payload = json.dumps(doc, allow_nan=False, separators=(",", ":")).encode("utf-8")
    return _HEADER.pack(magic, version, len(payload), hashlib.sha256(payload).digest()) + payload


def load_document(blob: bytes, magic: bytes, version: int, what: str, kind: str) -> dict:
    """The JSON object of a :func:`dump_document` blob, or ``SerializationError`` naming
    ``what`` (the file) and the fault: not a ``kind`` (magic), another format version, truncated
    or corrupt (length, checksum), not strict UTF-8 JSON, or not an object.

    >>> load_document(b"junk", b"EXAMPLE\\n", 1, "'f.bin'", "test document")
    Traceback (most recent call last):
    ...
    symtape.base.errors.SerializationError: 'f.bin' is not a test document (no EXAMPLE header)
    """
    label = magic.decode("ascii", "replace").strip()
    if len(blob) < _HEADER.size or blob[:8] != magic:
        raise SerializationError(f"{what} is not a {kind} (no {label} header)")
    _, ver, length, digest = _HEADER.unpack_from(blob)
    if ver != version:
        raise SerializationError(f"{what} is a {kind} of format {ver}; this symtape reads "
                                 f"format {version}")
    payload = blob[_HEADER.size:]
    if length != len(payload) or hashlib.sha256(payload).digest() != digest:
        raise SerializationError(f"{what} is truncated or corrupt (length or checksum "
                                 "mismatch)")
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SerializationError(f"{what} is malformed: not UTF-8 ({exc.reason})") from None
    doc = loads(text, what)
    if not isinstance(doc, dict):
        raise SerializationError(f"{what} is malformed: the document is not a JSON object")
    return doc


def read_document(path, magic: bytes, version: int, kind: str, pickled: bytes,
                  what: str | None = None) -> dict:
    """The JSON object of the framed document in the file at ``path`` (a bounded read of a
    regular file, then :func:`load_document`), or ``SerializationError`` naming ``what`` (by
    default the path) and the fault. A file starting with ``pickled`` (the header of the
    ``kind``'s old format 1, a pickle) is refused by name, never unpickled.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "old.bin")
    >>> with open(path, "wb") as fh:
    ...     _ = fh.write(b"EXAMPLE\\n\\x01\\x00\\x80\\x04")
    >>> try:
    ...     read_document(path, b"EXAMPLE\\n", 2, "test document", b"EXAMPLE\\n\\x01\\x00")
    ... except SerializationError as exc:
    ...     print("format 1, a pickle" in str(exc))
    True
    """
    what = repr(str(path)) if what is None else what
    try:
        blob = read_file(path)
    except OSError as exc:
        raise SerializationError(f"cannot read {kind} {what}: {exc}") from None
    if blob.startswith(pickled):
        raise SerializationError(f"{what} is a {kind} of format 1, a pickle, which is not "
                                 "loaded because it could run code: save it again with this "
                                 "symtape")
    return load_document(blob, magic, version, what, kind)
