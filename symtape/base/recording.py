"""The stack of active tapes (one per thread) and what each has recorded.

A :class:`Recorder` is the state behind one ``GradientTape``: the tensor ids it tracks (its
watched sources and everything computed from them while it recorded), the entries it
recorded, the variables it watches. Applying a primitive calls :func:`record`; reading a
variable or a symbol calls :func:`accessed`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence

__all__ = ["Entry", "Recorder", "Trace", "push", "remove", "active", "record", "accessed",
           "paused", "is_paused", "watch_accesses", "tracing", "current_trace", "isolated"]


class Entry:
    """One recorded application: ``outputs = prim(*inputs, **params)``."""

    __slots__ = ("prim", "params", "inputs", "outputs")

    def __init__(self, prim, params: dict, inputs: Sequence, outputs: Sequence) -> None:
        self.prim = prim
        self.params = params
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)


class Recorder:
    """What one tape tracks and records."""

    __slots__ = ("entries", "tracked", "recording", "watch_accessed", "variables",
                 "everything")

    def __init__(self, watch_accessed: bool = True, everything: bool = False) -> None:
        self.entries: list[Entry] = []
        self.tracked: set[int] = set()
        self.recording = False
        self.watch_accessed = watch_accessed
        self.variables: dict = {}
        self.everything = everything  # record every application (capturing a program)

    def watch(self, tensor) -> None:
        """Track ``tensor`` (a tensor or variable) as a source."""
        self.tracked.add(tensor._id)
        if getattr(tensor, "_is_variable", False):
            self.variables[tensor._id] = tensor

    def reset(self) -> None:
        self.entries.clear()
        self.tracked.clear()
        self.variables.clear()


class Trace:
    """What tracing a function for compilation collects: the variables it reads (inputs of
    the compiled code), the values it assigns to them (outputs written back), and its
    random draws (inputs drawn anew at each call: ``st.random``)."""

    __slots__ = ("variables", "assigned", "draws")

    def __init__(self) -> None:
        self.variables: dict = {}
        self.assigned: dict = {}
        self.draws: list = []


class _State(threading.local):
    def __init__(self) -> None:
        self.stack: list[Recorder] = []
        self.paused = 0
        self.observers: list[list] = []
        self.trace: Trace | None = None


_state = _State()


def push(rec: Recorder) -> None:
    """Make ``rec`` record (top of this thread's stack)."""
    rec.recording = True
    _state.stack.append(rec)


def remove(rec: Recorder) -> None:
    """Stop ``rec`` recording."""
    rec.recording = False
    if rec in _state.stack:
        _state.stack.remove(rec)


def active() -> list[Recorder]:
    """The recorders recording now (none while paused)."""
    if _state.paused:
        return []
    return _state.stack


def record(prim, params: dict, inputs: Sequence, outputs: Sequence) -> None:
    """Record an application on every active tape tracking one of its inputs."""
    stack = _state.stack
    if not stack or _state.paused:
        return
    entry = None
    for rec in stack:
        tracked = rec.tracked
        if not rec.everything:
            for t in inputs:
                if t._id in tracked:
                    break
            else:
                continue
        if entry is None:
            entry = Entry(prim, params, inputs, outputs)
        rec.entries.append(entry)
        for o in outputs:
            tracked.add(o._id)


def accessed(tensor) -> None:
    """A variable or symbol was read: tapes that watch accessed leaves watch it."""
    state = _state
    for obs in state.observers:
        obs.append(tensor)
    variable = getattr(tensor, "_is_variable", False)
    trace = state.trace
    if trace is not None and variable:
        trace.variables.setdefault(tensor._id, tensor)
    if state.paused:
        return
    for rec in state.stack:
        if variable:
            if rec.watch_accessed and tensor.trainable:
                rec.watch(tensor)
        else:
            rec.watch(tensor)


def is_paused() -> bool:
    """Whether recording is paused in this thread (inside a custom function's forward)."""
    return bool(_state.paused)


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No tape records inside (a custom function's forward pass)."""
    _state.paused += 1
    try:
        yield
    finally:
        _state.paused -= 1


@contextlib.contextmanager
def isolated(rec: Recorder) -> Iterator[None]:
    """Only ``rec`` records inside (a loop body traced into a program: the tapes recording
    around it see the loop, not its body's applications); a trace in progress still
    collects the variables read."""
    stack, _state.stack = _state.stack, []
    paused, _state.paused = _state.paused, 0
    push(rec)
    try:
        yield
    finally:
        rec.recording = False
        _state.stack, _state.paused = stack, paused


@contextlib.contextmanager
def watch_accesses() -> Iterator[list]:
    """Collect the variables and symbols read inside, in order of first access."""
    seen: list = []
    _state.observers.append(seen)
    try:
        yield seen
    finally:
        _state.observers.remove(seen)


@contextlib.contextmanager
def tracing() -> Iterator[Trace]:
    """Trace a function for compilation: variable reads and assignments are collected."""
    if _state.trace is not None:
        raise RuntimeError("a function is already being traced in this thread")
    trace = _state.trace = Trace()
    try:
        yield trace
    finally:
        _state.trace = None


@contextlib.contextmanager
def init_scope() -> Iterator[None]:
    """Code run outside the trace in progress (as ``tf.init_scope``): a variable's initial
    value, drawn once, not a random draw of every call."""
    trace, _state.trace = _state.trace, None
    try:
        yield
    finally:
        _state.trace = trace


def current_trace() -> Trace | None:
    """The trace in progress in this thread, if any."""
    return _state.trace
