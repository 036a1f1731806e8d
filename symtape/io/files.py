"""Bounded reads of regular files: a file to load is opened without blocking, refused
unless it is a regular file (a FIFO, a device such as ``/dev/zero`` or a folder is named in the
error instead of read or waited for), and read up to a known length.

>>> file_kind(os.stat(os.path.dirname(__file__)).st_mode)
'a folder'
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = ["read_file", "read_at_most", "file_kind"]

# Opening a file to load: never blocking (a FIFO would wait for a writer forever).
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def read_file(path) -> bytes:
    """The bytes of the regular file ``path``; ``OSError`` for anything else (a FIFO, a
    device such as ``/dev/zero``, a folder), found without reading or waiting for it.

    >>> read_file("/dev/null" if os.path.exists("/dev/null") else os.devnull)
    Traceback (most recent call last):
    ...
    OSError: [Errno 19] not a regular file (a character device): '/dev/null'
    """
    fd = os.open(path, _READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.ENODEV, f"not a regular file ({file_kind(st.st_mode)})",
                          str(path))
        # (a file that grows while read is read as it was)
        return read_at_most(fd, st.st_size + 1)[:st.st_size]
    finally:
        os.close(fd)


def read_at_most(fd: int, n: int) -> bytes:
    """At most ``n`` bytes from the open file ``fd`` (fewer at its end).

    >>> r, w = os.pipe()
    >>> _ = os.write(w, b"abcdef"); os.close(w)
    >>> read_at_most(r, 4), read_at_most(r, 4), read_at_most(r, 4)
    (b'abcd', b'ef', b'')
    >>> os.close(r)
    """
    chunks = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, for messages.

    >>> file_kind(os.stat(os.devnull).st_mode) if os.name == "posix" else "a character device"
    'a character device'
    """
    return next((name for test, name in _FILE_KINDS if test(mode)), f"mode {mode:o}")


_FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))
