"""Progress of long compiles on stderr: a compile (``st.function``'s trace, a transform such
as ``st.hessian``, ``st.compile``) that takes longer than :data:`AFTER_SECONDS` prints its
stage -- tracing, derivatives, planning, the native compile -- and each later stage, with the
time so far. On by default only when stderr is a terminal; ``SYMTAPE_PROGRESS=0`` (or
:func:`enable`\\ ``(False)``, ``st.config.set_compile_progress(False)``) turns it off,
``SYMTAPE_PROGRESS=1`` on everywhere.

>>> import io
>>> out = io.StringIO()
>>> enable(True, stream=out, after=0.0)
>>> with task("st.function step"):
...     stage("tracing")
>>> enable(None)
>>> print(out.getvalue().strip())
symtape: st.function step: tracing (0.0 s)
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

__all__ = ["AFTER_SECONDS", "enable", "task", "stage"]

#: A compile shows its stages once it has taken this long.
AFTER_SECONDS = 2.0

_settings = {"enabled": None, "stream": None, "after": None}
_local = threading.local()  # the compile in progress on this thread (outermost task)


def enable(on: bool | None, stream=None, after: float | None = None) -> None:
    """Turns compile progress on (True), off (False) or back to the default (None: on when
    stderr is a terminal, or as ``SYMTAPE_PROGRESS`` says); ``stream``: where it goes
    (stderr), ``after``: seconds before a compile shows it (:data:`AFTER_SECONDS`).

    >>> enable(False); enable(None)
    """
    _settings.update(enabled=on, stream=stream, after=after)


def _active() -> bool:
    on = _settings["enabled"]
    if on is not None:
        return bool(on)
    env = os.environ.get("SYMTAPE_PROGRESS", "").strip().lower()
    if env in ("0", "false", "no", "off"):
        return False
    if env in ("1", "true", "yes", "on"):
        return True
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


class _Task:
    def __init__(self, what: str) -> None:
        self.what = what
        self.start = time.perf_counter()
        self.stage = "starting"
        self.shown = False
        self.lock = threading.Lock()
        self.stream = _settings["stream"] or sys.stderr
        after = _settings["after"]
        self.timer = threading.Timer(AFTER_SECONDS if after is None else after, self.show)
        self.timer.daemon = True

    def show(self) -> None:
        with self.lock:
            self.shown = True
            self.write()

    def write(self) -> None:
        took = time.perf_counter() - self.start
        try:
            self.stream.write(f"symtape: {self.what}: {self.stage} ({took:.1f} s)\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream: progress is not worth an error
            pass


@contextlib.contextmanager
def task(what: str):
    """A compile named ``what`` (nested tasks belong to the outermost one).

    >>> with task("st.compile"):
    ...     stage("planning")
    """
    if getattr(_local, "task", None) is not None or not _active():
        yield
        return
    current = _Task(what)
    _local.task = current
    if _settings["after"] == 0.0:
        current.shown = True  # (shown from the first stage on)
    else:
        current.timer.start()
    try:
        yield
    finally:
        current.timer.cancel()
        _local.task = None


def stage(name: str) -> None:
    """Marks the start of stage ``name`` of the compile in progress (printed once the compile
    is shown); nothing outside a task.

    >>> stage("tracing")
    """
    current = getattr(_local, "task", None)
    if current is None:
        return
    with current.lock:
        current.stage = name
        if current.shown:
            current.write()
