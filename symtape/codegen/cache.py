"""The on-disk object-code cache, private to its user and authenticated, and the checked
framing it shares with other blobs.

Entries live under ``$SYMTAPE_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/symtape``, else
``~/.cache/symtape``. The folder and its ``obj`` subfolder are created with mode 0700; a folder
that is not owned by this user, or that group or others may write, is not used at all (one
:class:`~symtape.base.errors.CacheWarning` per process and folder): code mapped into the process
must never come from someone else.

Each entry is framed (magic tag, format version, length, SHA-256 of the payload) and carries an
HMAC-SHA256 of its key and object code, made with a per-user secret: 32 random bytes in the
file ``key`` of the cache folder, created 0600 and published atomically. An entry whose frame
or MAC does not match (truncated, corrupted, written by someone without the secret) reads as a
miss and is recompiled and overwritten. An entry is opened without following symbolic links
and without blocking, and must be a regular file of at most :data:`MAX_ENTRY_BYTES`: a link,
FIFO, device or oversized file is a miss (one ``CacheWarning`` per entry), so a planted entry
can neither stall a compile nor exhaust memory. Likewise a cache folder (or its ``obj``
subfolder) that is a symbolic link is not used. Entries are written to a temporary file in the same
folder and moved into place with ``os.replace``, so a concurrent reader sees the old file, the
new one or none, never half of one. The cache is an optimisation only: a folder that cannot be
created or written is ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
import struct
import tempfile
import threading
import warnings
from pathlib import Path

from symtape.io.files import file_kind, read_at_most
from symtape.base.errors import CacheWarning

__all__ = ["cache_dir", "key", "frame", "unframe", "read", "write", "atomic_write", "sign",
           "verify", "MAX_ENTRY_BYTES"]

_OBJECT_MAGIC = b"SYMTOBJ\n"
_FORMAT = 1
_ENTRY_FORMAT = 2  # 1 had no MAC: such entries are misses, and get rewritten
_HEADER = struct.Struct("<8sIQ32s")  # magic, version, payload length, sha256(payload)
_MAC_SIZE = 32
_SECRET_SIZE = 32
_KEY_FILE = "key"
_POSIX = os.name == "posix"
# Largest entry read: object code of the largest kernels is a few MB; more is not an entry.
MAX_ENTRY_BYTES = 1 << 28
# Opening cache files: never through a symbolic link, never blocking on a FIFO.
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0))

_LOCK = threading.Lock()
_SECRETS: dict[str, bytes] = {}
_WARNED: set[str] = set()
_WARNED_ENTRIES: set[str] = set()


def cache_dir() -> Path:
    """The cache folder (read from the environment on every call, so tests can move it).

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"SYMTAPE_CACHE_DIR": "/tmp/st-cache"}):
    ...     print(cache_dir())
    /tmp/st-cache
    """
    explicit = os.environ.get("SYMTAPE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "symtape"


def key(*parts: str | bytes) -> str:
    """A hex digest of ``parts`` (length-prefixed, so part boundaries matter).

    >>> key("ab", "c") != key("a", "bc")
    True
    """
    h = hashlib.sha256()
    _feed(h, parts)
    return h.hexdigest()


def _feed(h, parts) -> None:
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(struct.pack("<Q", len(data)))
        h.update(data)


def frame(magic: bytes, payload: bytes, version: int = _FORMAT) -> bytes:
    """``payload`` behind a header: 8-byte magic, version, length and SHA-256.

    >>> unframe(b"EXAMPLE\\n", frame(b"EXAMPLE\\n", b"data"))
    b'data'
    """
    return _HEADER.pack(magic, version, len(payload), hashlib.sha256(payload).digest()) + payload


def unframe(magic: bytes, blob: bytes, version: int = _FORMAT) -> bytes | None:
    """The payload of a framed blob, or None when the header or checksum does not match.

    >>> unframe(b"EXAMPLE\\n", frame(b"EXAMPLE\\n", b"data")[:-1]) is None
    True
    """
    if len(blob) < _HEADER.size:
        return None
    tag, ver, length, digest = _HEADER.unpack_from(blob)
    payload = blob[_HEADER.size:]
    if tag != magic or ver != version or length != len(payload):
        return None
    if hashlib.sha256(payload).digest() != digest:
        return None
    return payload


# --------------------------------------------------------------------------------------------
# The private folder and its secret
# --------------------------------------------------------------------------------------------


def _warn_once(root: Path, problem: str) -> None:
    with _LOCK:
        if str(root) in _WARNED:
            return
        _WARNED.add(str(root))
    warnings.warn(CacheWarning(
        f"symtape does not use the code cache {str(root)!r}: {problem}. Compiled code is not "
        "cached; make the folder private (chmod 700, owned by you) or point SYMTAPE_CACHE_DIR "
        "at one"), stacklevel=4)


def _unsafe(st: os.stat_result, what: str, forbidden: int, by: str) -> str | None:
    """Why a file with status ``st`` may not be trusted (another owner, ``forbidden``
    permission bits set), or None. Ownership means nothing off POSIX: nothing is checked."""
    if not _POSIX:
        return None
    uid = os.getuid()
    if st.st_uid != uid:
        return f"the {what} is owned by user id {st.st_uid}, not by this user ({uid})"
    if st.st_mode & forbidden:
        return f"the {what} has mode {stat.S_IMODE(st.st_mode):04o}, {by}"
    return None


def _private_folder(path: Path) -> str | None:
    """Creates ``path`` (mode 0700) if needed; why it may not be used, or None. A symbolic
    link is not followed: whoever can point it elsewhere would choose the code we load."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return f"{str(path)!r} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{str(path)!r} is not a folder"
    return _unsafe(st, f"folder {str(path)!r}", stat.S_IWGRP | stat.S_IWOTH,
                   "writable by group or others")


def _root() -> Path | None:
    """The cache folder when it is safe to use, else None (after one warning if unsafe)."""
    root = cache_dir()
    try:
        problem = _private_folder(root) or _private_folder(root / "obj")
    except OSError:
        return None  # no folder can be made here: run uncached, as a read-only home does
    if problem:
        _warn_once(root, problem)
        return None
    return root


def _read_secret(path: Path) -> bytes | None:
    """The secret in ``path``, None when there is no such file; ValueError when it is not a
    private regular file of the right size."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a symbolic link (O_NOFOLLOW), no permission, ...
        raise ValueError(f"the key file {str(path)!r} cannot be opened ({exc.strerror})") \
            from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"the key file {str(path)!r} is not a regular file")
        problem = _unsafe(st, f"key file {str(path)!r}", 0o077, "open to group or others")
        if problem:
            raise ValueError(problem)
        data = read_at_most(fd, _SECRET_SIZE + 1)
    finally:
        os.close(fd)
    if len(data) != _SECRET_SIZE:
        raise ValueError(f"the key file {str(path)!r} holds {len(data)} bytes, not "
                         f"{_SECRET_SIZE}")
    return data


def _create_secret(path: Path) -> None:
    """Publishes a fresh secret at ``path`` unless one is there: written in full to a private
    temporary file (mkstemp: O_CREAT|O_EXCL, mode 0600), then hard-linked into place, which
    fails if another process got there first; so no reader ever sees a partial key."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".key.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(secrets.token_bytes(_SECRET_SIZE))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: exclusive create, then write
            _create_secret_directly(path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _create_secret_directly(path: Path) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as fh:
        fh.write(secrets.token_bytes(_SECRET_SIZE))


def _open() -> tuple[Path, bytes] | None:
    """The cache folder and this user's secret (made on first use); None when the cache may
    not be used."""
    root = _root()
    if root is None:
        return None
    with _LOCK:
        known = _SECRETS.get(str(root))
    if known is not None:
        return root, known
    path = root / _KEY_FILE
    try:
        data = _read_secret(path)
        if data is None:
            _create_secret(path)
            data = _read_secret(path)
    except ValueError as exc:
        _warn_once(root, str(exc))
        return None
    except OSError:
        return None
    if data is None:
        return None
    with _LOCK:
        return root, _SECRETS.setdefault(str(root), data)


def _mac(secret: bytes, parts) -> bytes:
    h = hmac.new(secret, digestmod=hashlib.sha256)
    _feed(h, parts)
    return h.digest()


def sign(*parts: str | bytes) -> bytes | None:
    """An HMAC-SHA256 of ``parts`` with this user's cache secret; None without a usable cache.

    >>> mac = sign("symtape-example", b"data")
    >>> mac is None or verify(mac, "symtape-example", b"data")
    True
    """
    opened = _open()
    return None if opened is None else _mac(opened[1], parts)


def verify(mac: bytes, *parts: str | bytes) -> bool:
    """True when ``mac`` is :func:`sign` of ``parts`` (constant-time comparison).

    >>> verify(b"\\x00" * 32, "symtape-example", b"data")
    False
    """
    opened = _open()
    if opened is None or not isinstance(mac, bytes) or len(mac) != _MAC_SIZE:
        return False
    return hmac.compare_digest(mac, _mac(opened[1], parts))


# --------------------------------------------------------------------------------------------
# Entries
# --------------------------------------------------------------------------------------------


def _entry(root: Path, digest: str) -> Path:
    return root / "obj" / f"{digest}.o"


def read(digest: str) -> bytes | None:
    """The cached object code for ``digest``, or None: missing, unreadable, corrupt, not
    authenticated by this user's secret, or the cache is not usable.

    >>> digest = key("symtape-example-entry")
    >>> write(digest, b"object code") and read(digest) == b"object code"
    True
    >>> read(key("never written")) is None
    True
    """
    opened = _open()
    if opened is None:
        return None
    root, secret = opened
    blob = _read_entry(_entry(root, digest))
    if blob is None:
        return None
    payload = unframe(_OBJECT_MAGIC, blob, _ENTRY_FORMAT)
    if payload is None or len(payload) < _MAC_SIZE:
        return None
    mac, data = payload[:_MAC_SIZE], payload[_MAC_SIZE:]
    if not hmac.compare_digest(mac, _mac(secret, ("symtape-cache-entry", digest, data))):
        return None
    return data


def _read_entry(path: Path) -> bytes | None:
    """The bytes of the entry file ``path``; None for a missing or unreadable one, and, after
    one warning, for anything but a regular file of at most ``MAX_ENTRY_BYTES``."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError:
        if os.path.islink(path):
            _warn_entry(path, "it is a symbolic link")
        return None  # else unreadable (permissions): an ordinary miss
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            _warn_entry(path, f"it is not a regular file ({file_kind(st.st_mode)})")
            return None
        if st.st_size > MAX_ENTRY_BYTES:
            _warn_entry(path, f"it holds {st.st_size} bytes, more than {MAX_ENTRY_BYTES}")
            return None
        blob = read_at_most(fd, MAX_ENTRY_BYTES + 1)  # the file may grow after fstat
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(blob) > MAX_ENTRY_BYTES:
        _warn_entry(path, f"it holds more than {MAX_ENTRY_BYTES} bytes")
        return None
    return blob


def _warn_entry(path: Path, problem: str) -> None:
    with _LOCK:
        if str(path) in _WARNED_ENTRIES:
            return
        _WARNED_ENTRIES.add(str(path))
    warnings.warn(CacheWarning(
        f"symtape does not read the code cache entry {str(path)!r}: {problem}. The code is "
        "compiled again and the entry replaced"), stacklevel=4)


def write(digest: str, data: bytes) -> bool:
    """Stores ``data`` under ``digest`` atomically, with its MAC; False when the cache is not
    usable or not writable.

    >>> write(key("symtape-example-entry"), b"object code") in (True, False)
    True
    """
    opened = _open()
    if opened is None:
        return False
    root, secret = opened
    mac = _mac(secret, ("symtape-cache-entry", digest, data))
    try:
        atomic_write(_entry(root, digest), frame(_OBJECT_MAGIC, mac + data, _ENTRY_FORMAT))
    except OSError:
        return False
    return True


def atomic_write(path: Path, blob: bytes) -> None:
    """Writes ``blob`` to ``path`` through a temporary file and ``os.replace``.

    >>> path = Path(tempfile.mkdtemp()) / "sub" / "blob.bin"
    >>> atomic_write(path, b"data"); path.read_bytes()
    b'data'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
