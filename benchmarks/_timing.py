"""Timing shared by the benchmarks."""

from __future__ import annotations

import time


def best(fn, repeat: int = 7) -> float:
    """The shortest of ``repeat`` calls of ``fn``, in seconds.

    >>> best(lambda: None, 3) >= 0.0
    True
    """
    out = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out
