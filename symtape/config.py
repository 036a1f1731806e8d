"""``st.config``: settings of the library as a whole.

>>> import symtape as st
>>> st.config.set_compile_progress(False)  # no progress lines, even on a terminal
>>> st.config.set_compile_progress(None)   # the default: on when stderr is a terminal
"""

from __future__ import annotations

from symtape.base import progress

__all__ = ["set_compile_progress"]


def set_compile_progress(enabled: bool | None) -> None:
    """Whether compiles that take longer than about 2 s print their stages (tracing,
    derivatives, planning, native code) on stderr: True, False, or None for the default (on
    when stderr is a terminal; the environment variable ``SYMTAPE_PROGRESS=0``/``1`` sets it
    too).

    >>> import symtape as st
    >>> st.config.set_compile_progress(True); st.config.set_compile_progress(None)
    """
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"st.config.set_compile_progress: enabled must be True, False or None, "
                        f"got {enabled!r}")
    progress.enable(enabled)
