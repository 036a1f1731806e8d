"""``GradientTape``: TensorFlow's tape API over exact symbolic reverse accumulation."""

from __future__ import annotations

import contextlib
import enum
import math
from collections.abc import Iterator

import numpy as np

from symtape import ops
from symtape.derivatives import accumulation
from symtape.derivatives import sweep as autodiff
from symtape.base import nest
from symtape.base import recording
from symtape.base.errors import DTypeError, ShapeError
from symtape.core.variables import Tensor, constant, convert_to_tensor, exact_constant, promote

__all__ = ["GradientTape", "UnconnectedGradients"]


class UnconnectedGradients(enum.Enum):
    """What ``gradient`` returns for a source the target does not depend on.

    >>> import symtape as st
    >>> x, y = st.Variable(1.0), st.Variable(2.0)
    >>> with st.GradientTape() as t:
    ...     z = x * 3
    >>> [float(g) for g in t.gradient(z, [x, y], unconnected_gradients="zero")]
    [3.0, 0.0]
    """

    NONE = "none"
    ZERO = "zero"


def _unconnected(value) -> UnconnectedGradients:
    if isinstance(value, UnconnectedGradients):
        return value
    if isinstance(value, str):
        try:
            return UnconnectedGradients(value.lower())
        except ValueError:
            pass
    raise ValueError(f"Unknown value for unconnected_gradients: {value!r} (use "
                     "st.UnconnectedGradients.NONE or .ZERO, or 'none'/'zero')")


def _zeros(shape: tuple, dtype) -> Tensor:
    """Exact zeros (they print as 0 and fold away in later formulas)."""
    return exact_constant(np.zeros(shape, dtype=np.int64), dtype, cache=True)


_ONES: dict = {}


def _ones(shape: tuple, dtype) -> Tensor:
    """The exact unit seed of a target of ``shape`` (a new tensor over one node per small shape
    and dtype: a training loop's gradients start from the same constant)."""
    key = (shape, dtype)
    hit = _ONES.get(key)
    if hit is None and math.prod(shape) > 256:  # large ones are not kept
        return exact_constant(np.ones(shape, dtype=np.int64), dtype)
    if hit is None:
        if len(_ONES) >= 256:
            _ONES.clear()
        hit = _ONES[key] = exact_constant(np.ones(shape, dtype=np.int64), dtype, cache=True)
    return Tensor(hit._node, hit._value, hit.dtype)


#: Hessian blocks of at most this many elements are made exactly symmetric (st.hessian's
#: compiled blocks too, which then hold code for one triangle only).
SYMMETRIC_ELEMENTS = 4096


def symmetric(h: Tensor) -> Tensor:
    """A Hessian block of a source with itself, its upper triangle read from the lower one
    (``d/dx_i`` of ``df/dx_j`` for ``i >= j``), when it has at most
    :data:`SYMMETRIC_ELEMENTS` elements: exactly symmetric also where ``f`` is not twice
    differentiable and the two orders of a mixed partial differ (``x ** y`` at ``x < 0``:
    TensorFlow's exponent partial is 0 there, its derivative in ``x`` is not).

    >>> import symtape as st
    >>> symmetric(st.constant([[1.0, 5.0], [2.0, 3.0]])).numpy()
    array([[1., 2.],
           [2., 3.]])
    """
    n = int(np.prod(h.shape[:h.ndim // 2], dtype=np.int64))
    if h.size > SYMMETRIC_ELEMENTS or n < 2:
        return h
    i, j = np.indices((n, n))
    idx = (np.maximum(i, j) * n + np.minimum(i, j)).reshape(h.shape)
    return ops.gather_flat.bind(h, idx=idx)


class GradientTape:
    """Records operations on watched tensors to differentiate them exactly, as
    ``tf.GradientTape``; nested tapes give derivatives of any order.

    >>> import symtape as st
    >>> x = st.Variable(3.0, name="x")
    >>> with st.GradientTape() as outer:
    ...     with st.GradientTape() as inner:
    ...         y = x ** 3
    ...     dy = inner.gradient(y, x)
    >>> d2y = outer.gradient(dy, x)
    >>> float(dy), float(d2y), d2y.formula()
    (27.0, 18.0, 6*x)
    """

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True) -> None:
        self._rec = recording.Recorder(watch_accessed_variables)
        self._persistent = bool(persistent)
        self._consumed = False
        self._entered = False

    # -- context ---------------------------------------------------------------------------
    def __enter__(self) -> GradientTape:
        if self._rec.recording:
            raise ValueError("this GradientTape is already recording; a tape cannot be "
                             "entered twice")
        self._entered = True
        recording.push(self._rec)
        return self

    def __exit__(self, *exc) -> None:
        recording.remove(self._rec)

    def _check_usable(self, what: str) -> None:
        if not self._entered and not self._rec.recording and not self._rec.tracked:
            raise RuntimeError(f"GradientTape.{what}: this tape never recorded anything: use it "
                               "as a context manager (`with st.GradientTape() as tape:`) around "
                               "the computation, or watch sources on it first")
        if self._consumed:
            raise RuntimeError(f"A non-persistent GradientTape can only be used to compute one "
                               f"set of gradients (or jacobians); {what} was called again. Use "
                               "st.GradientTape(persistent=True) to call it several times.")

    def _finish_call(self) -> None:
        if not self._persistent:
            self._consumed = True
            recording.remove(self._rec)

    # -- recording control -----------------------------------------------------------------
    def watch(self, tensor) -> None:
        """Watch a tensor, variable or nested structure of them as sources.

        A tape used without ``with`` starts recording at its first ``watch``.
        """
        for t in nest.flatten(tensor):
            if not isinstance(t, Tensor):
                raise ValueError(f"GradientTape.watch: passed in an object of type "
                                 f"{type(t).__name__}, not an st.Tensor or st.Variable")
            promote(t)
            self._rec.watch(t)
        if not self._entered and not self._rec.recording and not self._consumed:
            recording.push(self._rec)

    @contextlib.contextmanager
    def stop_recording(self) -> Iterator[None]:
        """Temporarily stop recording operations on this tape (entered outside the tape's
        ``with`` block it raises ``RuntimeError``, as TensorFlow does).

        >>> import symtape as st
        >>> x = st.Variable(3.0)
        >>> with st.GradientTape(persistent=True) as tape:
        ...     y = x * x
        ...     with tape.stop_recording():
        ...         z = y * x  # not recorded: no gradient flows through it
        >>> float(tape.gradient(y, x)), tape.gradient(z, x)
        (6.0, None)
        """
        if not self._rec.recording:
            raise RuntimeError("Trying to stop recording a tape which is not recording.")
        recording.remove(self._rec)
        try:
            yield
        finally:
            recording.push(self._rec)

    def reset(self) -> None:
        """Forget everything recorded and watched so far (recording continues); only a tape
        that is recording can be reset, as in TensorFlow."""
        if not self._rec.recording:
            raise ValueError("GradientTape.reset: the tape is not recording (reset it inside "
                             "its `with` block)")
        self._rec.reset()

    def watched_variables(self) -> tuple:
        """The variables this tape watches, in creation order."""
        return tuple(sorted(self._rec.variables.values(), key=lambda v: v._order))

    # -- differentiation -------------------------------------------------------------------
    @staticmethod
    def _float_tensors(items, role: str) -> list[Tensor]:
        """The flat tensors of ``items``, checked: tensors (or variables) of a float dtype."""
        flat = nest.flatten(items)
        for i, t in enumerate(flat):
            if not isinstance(t, Tensor):
                raise TypeError(f"GradientTape: {role}[{i}] is a {type(t).__name__}, not an "
                                "st.Tensor or st.Variable")
            if t.dtype.kind != "f":
                raise DTypeError(f"GradientTape: {role}[{i}] has dtype {t.dtype.name}; "
                                 "gradients are defined only for float tensors (cast it "
                                 "before use)")
        return flat

    def _sources(self, sources) -> list[Tensor]:
        return self._float_tensors(sources, "sources")

    def _targets(self, target) -> list[Tensor]:
        if target is None:
            raise TypeError("GradientTape.gradient: target is None; pass the tensor (or "
                            "nested structure of tensors) to differentiate")
        return [t.read() if t._is_variable else t
                for t in self._float_tensors(target, "target")]

    def _seeds(self, targets, output_gradients) -> dict:
        if output_gradients is None:
            grads = [None] * len(targets)
        else:
            grads = nest.flatten(output_gradients)
            if len(grads) != len(targets):
                raise ValueError(f"GradientTape.gradient: {len(grads)} output_gradients for "
                                 f"{len(targets)} targets")
            for i, g in enumerate(grads):
                if g is None:
                    raise ValueError(f"GradientTape.gradient: output_gradients[{i}] is None; "
                                     "give a tensor for every target (st.ones_like(target) "
                                     "for an unweighted one)")
        seeds: dict = {}
        for i, (t, g) in enumerate(zip(targets, grads)):
            if g is None:
                g = _ones(t.shape, t.dtype)
            else:
                g = convert_to_tensor(g) if isinstance(g, Tensor) else constant(g, dtype=t.dtype)
                if tuple(g.shape) != tuple(t.shape):
                    raise ShapeError(f"GradientTape.gradient: output_gradients[{i}] has shape "
                                     f"{tuple(g.shape)}, target[{i}] has shape {t.shape}")
            seeds[t._id] = autodiff.accumulate(seeds.get(t._id), g)
        return seeds

    def _tracked_ids(self, srcs) -> list[int]:
        """Sources this tape can differentiate with respect to: the ones it tracks."""
        return [s._id for s in srcs if s._id in self._rec.tracked]

    def _relevant(self, entries, srcs, target_ids) -> set:
        """Ids the sweep follows: what depends on a tracked source, and every source that is
        itself a target (its own gradient is the seed, watched or not, as in TensorFlow)."""
        relevant = autodiff.relevant_ids(entries, self._tracked_ids(srcs))
        relevant.update(s._id for s in srcs if s._id in target_ids)
        return relevant

    @staticmethod
    def _result(ct, source, mode: UnconnectedGradients):
        if isinstance(ct, ops.Zero) or (ct is None and mode is UnconnectedGradients.ZERO):
            return _zeros(source.shape, source.dtype)
        return ct

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=UnconnectedGradients.NONE):
        """d(sum of ``target``)/d ``sources``, with the structure of ``sources``.

        ``output_gradients`` weights the targets (a vector-Jacobian product);
        ``unconnected_gradients`` chooses None or zeros for sources the target does not
        depend on.
        """
        self._check_usable("gradient")
        mode = _unconnected(unconnected_gradients)
        srcs = self._sources(sources)
        targets = self._targets(target)
        seeds = self._seeds(targets, output_gradients)
        if not self._persistent:
            recording.remove(self._rec)
        entries = self._rec.entries
        tracked = self._rec.tracked
        cts = autodiff.source_cotangents(entries, seeds,
                                         lambda: self._relevant(entries, srcs, seeds),
                                         targets, srcs, [s._id in tracked for s in srcs])
        results = [self._result(ct, s, mode) for ct, s in zip(cts, srcs)]
        self._finish_call()
        return nest.pack_sequence_as(sources, results)

    def _stacked_cotangents(self, target: Tensor, srcs, seeds: np.ndarray, mode,
                            rowwise: bool = False, one_hot: bool = True):
        """For each source, its cotangents for every seed of ``target`` (``seeds`` stacked
        along a leading axis) as one tensor with that axis; None for a source never reached
        when ``mode`` says so. One batched sweep (see :func:`autodiff.batched_vjp`); one
        sweep per seed where that cannot run, or ``rowwise``."""
        entries, relevant = self._swept(srcs, target)
        n = seeds.shape[0]
        per_source = None
        if n > 1 and not rowwise:
            per_source = autodiff.batched_vjp(entries, target, seeds, srcs, relevant,
                                              one_hot)
        if per_source is None:
            rows = [[] for _ in srcs]
            for seed in seeds:
                g = exact_constant(seed, target.dtype)
                cts = autodiff.vjp_sweep(entries, {target._id: g}, relevant)
                for k, s in enumerate(srcs):
                    rows[k].append(cts.get(s._id))
            per_source = [self._stack_rows(r, s, n) for r, s in zip(rows, srcs)]
        out = []
        for ct, s in zip(per_source, srcs):
            if ct is None and mode is UnconnectedGradients.NONE:
                out.append(None)
            elif not isinstance(ct, Tensor):
                out.append(_zeros((n,) + tuple(s.shape), s.dtype))
            else:
                out.append(ct)
        return out

    def _accumulated(self, target: Tensor, source: Tensor):
        """``d target / d source`` as its non-zeros by accumulation
        (:func:`accumulation.jacobian`), or None where that refuses."""
        entries, relevant = self._swept([source], target)
        return accumulation.jacobian(entries, target, source, relevant)

    def _swept(self, srcs, target: Tensor) -> tuple:
        """``(entries, relevant ids)`` of a sweep from ``target`` to ``srcs`` (a tape that is
        not persistent stops recording)."""
        if not self._persistent:
            recording.remove(self._rec)
        entries = list(self._rec.entries)
        return entries, self._relevant(entries, srcs, {target._id})

    @staticmethod
    def _stack_rows(rows, source, n: int):
        """Per-seed cotangents as one tensor with a leading axis (None: never reached)."""
        if all(r is None for r in rows):
            return None
        if not any(isinstance(r, Tensor) for r in rows):
            return ops.Zero((n,) + tuple(source.shape), source.dtype)
        parts = [r if isinstance(r, Tensor) else _zeros(source.shape, source.dtype)
                 for r in rows]
        return ops.stack.bind(*parts, axis=0)

    def jacobian(self, target, sources, unconnected_gradients=UnconnectedGradients.NONE,
                 parallel_iterations=None, experimental_use_pfor=True):
        """d ``target`` / d ``sources``: shape ``target.shape + source.shape`` per source."""
        self._check_usable("jacobian")
        self._check_loop_mode("jacobian", experimental_use_pfor)
        mode = _unconnected(unconnected_gradients)
        (tgt,) = self._targets(target) if isinstance(target, Tensor) else (None,)
        if tgt is None:
            raise TypeError("GradientTape.jacobian: target must be a single st.Tensor")
        srcs = self._sources(sources)
        seeds = autodiff.one_hot_seeds(tgt.shape)
        stacked = self._stacked_cotangents(tgt, srcs, seeds, mode, not experimental_use_pfor)
        results = [None if ct is None else ops.reshape.bind(
            ct, shape=tuple(tgt.shape) + tuple(s.shape)) for ct, s in zip(stacked, srcs)]
        self._finish_call()
        return nest.pack_sequence_as(sources, results)

    def batch_jacobian(self, target, source, unconnected_gradients=UnconnectedGradients.NONE,
                       parallel_iterations=None, experimental_use_pfor=True):
        """Per-example Jacobians: shape ``(batch,) + target.shape[1:] + source.shape[1:]``,
        assuming example ``b`` of the target depends only on example ``b`` of the source."""
        self._check_usable("batch_jacobian")
        self._check_loop_mode("batch_jacobian", experimental_use_pfor)
        _unconnected(unconnected_gradients)
        (tgt,) = self._targets(target)
        (src,) = self._sources(source)
        if tgt.ndim < 2 or src.ndim < 2 or tgt.shape[0] != src.shape[0]:
            raise ShapeError(f"GradientTape.batch_jacobian: target {tgt.shape} and source "
                             f"{src.shape} need rank >= 2 and the same first (batch) "
                             "dimension")
        inner = tgt.shape[1:]
        seeds = np.broadcast_to(autodiff.one_hot_seeds(inner).reshape(
            (-1, 1) + tuple(inner)), (int(np.prod(inner, dtype=np.int64)),) + tgt.shape)
        # TF: an unconnected source gives zeros here, whatever unconnected_gradients says
        (ct,) = self._stacked_cotangents(tgt, [src], seeds, UnconnectedGradients.ZERO,
                                         not experimental_use_pfor)
        # ct[j, b] is row j of example b: put j after the batch axis
        rank = len(ct.shape)
        moved = ops.transpose.bind(ct, perm=(1, 0) + tuple(range(2, rank)))
        out = ops.reshape.bind(moved, shape=(tgt.shape[0],) + inner + src.shape[1:])
        self._finish_call()
        return out

    def _check_loop_mode(self, what: str, use_pfor) -> None:
        if not use_pfor and not self._persistent:
            raise RuntimeError(f"GradientTape.{what}: experimental_use_pfor=False computes "
                               "row by row and needs GradientTape(persistent=True)")

    def _replica(self) -> GradientTape:
        """A persistent tape holding what this one recorded and tracks."""
        tape = GradientTape(persistent=True)
        tape._entered = True
        tape._rec.entries = list(self._rec.entries)
        tape._rec.tracked = set(self._rec.tracked)
        return tape

    def hessian(self, target, sources, unconnected_gradients=UnconnectedGradients.NONE):
        """Second derivatives of a scalar ``target``: ``source.shape * 2`` for one source,
        a nested list of blocks ``H[i][j]`` for a list of sources.

        >>> import symtape as st
        >>> x = st.Variable([1.0, 2.0], name="x")
        >>> with st.GradientTape() as t:
        ...     y = x[0] ** 2 * x[1]
        >>> t.hessian(y, x).numpy()
        array([[4., 2.],
               [2., 0.]])
        """
        self._check_usable("hessian")
        mode = _unconnected(unconnected_gradients)
        (tgt,) = self._targets(target)
        if tgt.size != 1:
            raise ShapeError(f"GradientTape.hessian: target must be a scalar, got shape "
                             f"{tgt.shape}")
        srcs = self._sources(sources)
        if not self._persistent:
            recording.remove(self._rec)
        # the first sweep runs on a replica of this tape while a second replica records it
        second = self._replica()
        with second:
            grads = self._replica().gradient(tgt, srcs,
                                             unconnected_gradients=UnconnectedGradients.ZERO)
        blocks = []
        for i, g in enumerate(grads):
            row = second.jacobian(g, srcs, unconnected_gradients=mode)
            if row[i] is not None:
                row[i] = symmetric(row[i])
            blocks.append(row)
        self._finish_call()
        if isinstance(sources, Tensor):
            return blocks[0][0]
        return blocks
