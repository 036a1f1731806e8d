"""Where tapes meet native code: ``st.compile`` and ``st.function``.

A function is traced once for one point (its arguments are symbols of their *core* shapes)
and its outputs compiled; the compiled callable loops over any extra leading (batch)
dimensions natively. The batch is never unrolled symbolically. The derivative transforms
(``st.grad``, ``st.hessian``, ...) trace with this module's helpers
(:mod:`symtape.compile.transforms`).
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import os
import threading
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from symtape.compile import batching
from symtape.base import progress
from symtape.base import nest
from symtape.base import recording
from symtape.compile import planner as loopnest
from symtape.compile import strategy
from symtape.compile.call_keys import (argument_dtype, batch_arguments, fits,
                                       python_value, value_key)
from symtape.core import node as N
from symtape.codegen import CompiledFunction, TensorSpec, compile_atoms, compile_plan
from symtape.base.errors import (
    InvalidArgumentError, MissingDependencyError, ShapeError, UnboundLeafError,
)
from symtape.core.tensor import adopt, constant
from symtape.ops.random import Draw
from symtape.core.variables import Tensor, symbol
from symtape.base.lazy import LazyModule

G = LazyModule("G", globals(), "symtape.element.graph")

__all__ = ["compile", "function", "Function", "TensorSpec", "SparseResult", "SparseFunction",
           "RetracingWarning", "compile_with", "placeholders", "traced_code", "signature_specs",
           "common_dtype", "input_atoms", "fn_name", "compile_options"]


# --------------------------------------------------------------------------------------------
# st.compile
# --------------------------------------------------------------------------------------------


def input_atoms(inputs) -> tuple[list, list]:
    """The leaves (element arrays) and names of compiled functions' inputs, checked."""
    flat = [inputs] if isinstance(inputs, Tensor) else nest.flatten(inputs)
    atoms, names = [], []
    for i, t in enumerate(flat):
        if not isinstance(t, Tensor):
            raise InvalidArgumentError(f"st.compile: inputs[{i}] is a {type(t).__name__}; "
                                       "inputs are variables, symbols or watched constants")
        if not all(isinstance(a, G.Leaf) for a in t._atoms.flat):
            raise InvalidArgumentError(
                f"st.compile: inputs[{i}] is not a leaf: its values are already folded into "
                "the outputs. Use st.symbol or st.Variable (or watch the constant on a tape) "
                "before computing the outputs from it")
        atoms.append(t._atoms)
        names.append(t._name)
    return atoms, names


def _output_tensors(outputs) -> list:
    flat = nest.flatten(outputs)
    for i, t in enumerate(flat):
        if not isinstance(t, Tensor):
            raise InvalidArgumentError(f"st.compile: outputs[{i}] is a {type(t).__name__}, "
                                       "not a tensor")
    return flat


def _output_structure(outputs, flat: list):
    """The nesting of ``outputs`` with ints indexing ``flat`` (0 for a single tensor)."""
    return nest.pack_sequence_as(outputs, list(range(len(flat)))) \
        if nest.is_nested(outputs) else 0


def compile(outputs, inputs, *, dtype: str = "float64", fastmath: bool = False,  # noqa: A001
            sparse: bool = False, threads: int | None = None, name: str | None = None,
            explain: bool = False):
    """A native function computing ``outputs`` from ``inputs`` (leaves), vectorised over
    leading batch dimensions; leaves that are not inputs are folded in at their current value.

    ``sparse=True`` computes only the structurally non-zero elements (see :class:`SparseResult`).
    The result's ``strategies`` say which path compiled it (:mod:`symtape.compile.strategy`:
    ``element-kernel``, ``point-loop``, ``sparse-elements``) and why; ``explain=True`` prints
    each as it is chosen.

    >>> import symtape as st
    >>> x = st.symbol("x", shape=(2,))
    >>> with st.GradientTape() as t:
    ...     y = st.reduce_sum(x ** 3)
    >>> f = st.compile(t.gradient(y, x), [x])
    >>> f(np.array([[1.0, 2.0], [3.0, 4.0]]))
    array([[ 3., 12.],
           [27., 48.]])
    >>> s = st.compile(st.sin(x), [x], name="s", explain=True)  # doctest: +ELLIPSIS
    s: element-kernel: about ... atoms <= POINT_LOOP_MIN_ATOMS=...
    >>> [p.name for p in s.strategies]
    ['element-kernel']
    """
    return compile_with(strategy.StrategyLog(explain), outputs, inputs, dtype=dtype,
                        fastmath=fastmath, sparse=sparse, threads=threads, name=name)


def compile_with(log: strategy.StrategyLog, outputs, inputs, *, dtype: str = "float64",
                 fastmath: bool = False, sparse: bool = False, threads: int | None = None,
                 name: str | None = None):
    """:func:`compile`, recording each path it takes in ``log`` (the result's
    ``strategies`` are ``log.taken``)."""
    in_atoms, in_names = input_atoms(inputs)
    opts = dict(dtype=dtype, fastmath=fastmath, threads=threads, name=name)
    flat = _output_tensors(outputs)
    structure, out_names = _output_structure(outputs, flat), [t._name for t in flat]
    if sparse:
        log.add(strategy.sparse_elements(), name)
        compiled = SparseFunction.of_atoms([t._atoms for t in flat], in_atoms, in_names,
                                           out_names, structure, opts)
    else:
        progress.stage("planning loops")
        compiled = _loop_compiled(flat, nest.flatten(inputs), dict(
            input_names=in_names, output_names=out_names, structure=structure, **opts), log,
            points=True)
        if compiled is None:  # (the element view is built only now)
            progress.stage("element view and straight-line code")
            compiled = compile_atoms([t._atoms for t in flat], in_atoms, input_names=in_names,
                                     output_names=out_names, structure=structure, **opts)
    compiled.strategies = log.taken
    return compiled


class SparseResult(NamedTuple):
    """The structurally non-zero elements of a result: ``values[..., k]`` is the element at
    ``indices[k]`` of a tensor of ``dense_shape`` (leading batch dimensions kept).

    >>> import symtape as st
    >>> x = st.symbol("x", shape=(3,))
    >>> with st.GradientTape() as t:
    ...     y = st.reduce_sum(x ** 3)
    >>> h = t.hessian(y, x)  # diagonal: 6 x_i
    >>> r = st.compile(h, [x], sparse=True)(np.array([1.0, 2.0, 3.0]))
    >>> r.indices.tolist(), r.values
    ([[0, 0], [1, 1], [2, 2]], array([ 6., 12., 18.]))
    >>> r.to_dense()[1]
    array([ 0., 12.,  0.])
    """

    indices: np.ndarray
    values: np.ndarray
    dense_shape: tuple
    rows: int | None = None  # leading axes of dense_shape that are the rows (the target's)

    def to_dense(self) -> np.ndarray:
        """The full array, zeros where the structure is zero."""
        batch = self.values.shape[:-1]
        out = np.zeros(batch + tuple(self.dense_shape), dtype=self.values.dtype)
        if len(self.indices):
            out[(Ellipsis, *self.indices.T)] = self.values
        return out

    def to_scipy(self, index=()):
        """The result at batch ``index`` (none for one point) as a ``scipy.sparse``
        ``csr_array`` of shape ``(target elements, source elements)`` (``rows``: how many
        leading axes of ``dense_shape`` are the target's; half of them when not given).
        SciPy is optional."""
        try:
            from scipy import sparse
        except ImportError:
            raise MissingDependencyError('SparseResult.to_scipy needs SciPy: pip install '
                                         '"symtape[scipy]"', name="scipy") from None
        values = np.asarray(self.values)[index]
        if values.ndim != 1:
            raise InvalidArgumentError(
                f"SparseResult.to_scipy: values have batch shape {values.shape[:-1]}; pick "
                "one point with index=")
        shape = tuple(self.dense_shape)
        split = self.rows if self.rows is not None else len(shape) // 2
        rows_shape, cols_shape = shape[:split] or (1,), shape[split:] or (1,)
        idx = np.asarray(self.indices, dtype=np.int64).reshape(len(values), len(shape))
        rows = np.ravel_multi_index(tuple(idx[:, :split].T), shape[:split]) if split else \
            np.zeros(len(values), dtype=np.int64)
        cols = np.ravel_multi_index(tuple(idx[:, split:].T), shape[split:])
        return sparse.csr_array((values, (rows, cols)),
                                shape=(int(np.prod(rows_shape)), int(np.prod(cols_shape))))


class SparseFunction:
    """A compiled function returning :class:`SparseResult` s: only elements that are not
    structural zeros are computed (the sparsity of Jacobians and Hessians).

    ``patterns``: per output, ``(indices, dense_shape)`` of the values the compiled
    function computes."""

    def __init__(self, compiled, patterns: list, structure, rows: list | None = None) -> None:
        self.compiled = compiled
        self.strategies: list = []  # the paths that compiled it (see st.compile)
        self._patterns = patterns
        self._structure = structure
        self._rows = rows if rows is not None else [None] * len(patterns)

    @classmethod
    def of_atoms(cls, out_atoms, in_atoms, in_names, out_names, structure, opts):
        """The elements of element views that are not the constant 0."""
        patterns, nonzero = [], []
        for atoms in out_atoms:
            idx = [i for i in np.ndindex(*atoms.shape) if not is_zero(atoms[i])]
            patterns.append((np.array(idx, dtype=np.int64).reshape(len(idx), atoms.ndim),
                             atoms.shape))
            vals = np.empty(len(idx), dtype=object)
            for k, i in enumerate(idx):
                vals[k] = atoms[i]
            nonzero.append(vals)
        compiled = compile_atoms(nonzero, in_atoms, input_names=in_names,
                                 output_names=out_names, **opts)
        return cls(compiled, patterns, structure)

    @property
    def sparsity(self) -> list:
        """``(indices, dense_shape)`` of each output."""
        return list(self._patterns)

    @property
    def inputs(self) -> tuple:
        return self.compiled.inputs

    def __call__(self, *args, out=None):
        """The :class:`SparseResult` s at ``args`` (leading batch dimensions as the compiled
        function's). ``out``: where to write the values -- for each output (in the results'
        structure) an array of shape ``batch + (nnz,)``, or the SparseResult of an earlier
        call -- so a loop over many calls allocates nothing.

        >>> import symtape as st
        >>> def f(x):
        ...     return st.reduce_sum(x ** 3)
        >>> h = st.hessian(f, sparse=True, input_signature=[st.TensorSpec((3,))])
        >>> r = h(np.array([1.0, 2.0, 3.0]))
        >>> r.values
        array([ 6., 12., 18.])
        >>> _ = h(np.array([0.0, 1.0, 1.0]), out=r)
        >>> r.values
        array([0., 6., 6.])
        """
        if out is None:
            values = self.compiled(*args)
        else:
            targets = self._targets(out)
            values = self.compiled(*args, out=targets[0] if len(targets) == 1 else targets)
        flat = [values] if len(self._patterns) == 1 else list(values)
        results = [SparseResult(idx, np.asarray(v), shape, rows)
                   for (idx, shape), v, rows in zip(self._patterns, flat, self._rows)]
        return nest.pack_sequence_as(self._structure, results) \
            if nest.is_nested(self._structure) else results[0]

    @property
    def _name(self) -> str:
        return self.compiled.name

    def _targets(self, out) -> list:
        """The value arrays ``out`` gives, one per output."""
        def leaves(o) -> list:
            if isinstance(o, (SparseResult, np.ndarray)) or not nest.is_nested(o):
                return [o]
            items = [o[k] for k in sorted(o)] if isinstance(o, dict) else list(o)
            return [leaf for item in items for leaf in leaves(item)]

        flat = leaves(out)
        if len(flat) != len(self._patterns):
            raise InvalidArgumentError(f"{self._name}: out= needs {len(self._patterns)} "
                                       f"value arrays, got {len(flat)}")
        targets = [t.values if isinstance(t, SparseResult) else t for t in flat]
        for k, t in enumerate(targets):
            if not isinstance(t, np.ndarray):
                raise InvalidArgumentError(f"{self._name}: out[{k}] must be a numpy array or "
                                           f"a SparseResult, got {type(t).__name__}")
        return targets


def is_zero(atom) -> bool:
    return G.is_const(atom) and atom.is_Number and atom.is_zero


# --------------------------------------------------------------------------------------------
# Tracing
# --------------------------------------------------------------------------------------------


def signature_specs(signature, what: str, unknown: bool = False) -> list[TensorSpec]:
    """TensorSpecs of a signature (TensorSpecs or shape tuples); ``unknown`` allows
    ``TensorSpec(None)`` (any shape)."""
    out = []
    for i, s in enumerate(signature):
        if isinstance(s, TensorSpec):
            out.append(s)
        elif isinstance(s, (tuple, list)):
            out.append(TensorSpec(tuple(int(n) for n in s)))
        else:
            raise InvalidArgumentError(f"{what}: input_signature[{i}] must be an "
                                       "st.TensorSpec or a shape tuple")
        if (out[-1].shape is None or None in out[-1].shape) and not unknown:
            raise InvalidArgumentError(f"{what}: input_signature[{i}] needs a fully known "
                                       "core shape (leading batch dimensions are free at call "
                                       "time)")
    return out


def _arg_names(fn: Callable, n: int) -> list[str]:
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"x{i}" for i in range(n)]


def placeholders(fn: Callable, specs: Sequence[TensorSpec]) -> list[Tensor]:
    """Symbols standing for ``fn``'s arguments, of ``specs``' shapes, named after its
    parameters (or the specs' names), all of the specs' common dtype."""
    names = _arg_names(fn, len(specs))
    dtype = common_dtype(specs)
    return [symbol(spec.name or nm, shape=tuple(spec.shape), dtype=dtype)
            for spec, nm in zip(specs, names)]


def common_dtype(specs) -> str:
    """float32 when every spec is float32, else float64."""
    kinds = {np.dtype(s.dtype).name for s in specs}
    return "float32" if kinds == {"float32"} else "float64"


@contextlib.contextmanager
def traced_code(what: str):
    """Runs a user's function on placeholders: its use of an argument's numeric value
    raises InvalidArgumentError naming ``what`` (not UnboundLeafError)."""
    try:
        yield
    except UnboundLeafError as e:
        raise InvalidArgumentError(
            f"{what}: the function used the numeric value of a traced argument (Python "
            "control flow such as `if x > 0`, float(x) or x.numpy()); traced functions must "
            f"be expressed with tensor ops (st.where for branches) [{e}]") from None


def fn_name(fn) -> str:
    """``fn``'s name as a compiled function's name takes it (``<lambda>``: ``lambda``)."""
    return getattr(fn, "__name__", "fn").replace("<", "").replace(">", "") or "fn"


def compile_options(fastmath: bool, threads, name, what: str) -> dict:
    """A transform's or ``st.function``'s compile options; ``name``: the compiled
    function's name (its C function's in ``c_source``/``st.export_c``; default: the
    function's name and the transform's, ``f_jacobian``).

    >>> compile_options(False, None, "dfdx", "st.jacobian")["name"]
    'dfdx'
    """
    opts = dict(fastmath=fastmath, threads=threads)
    if name is not None:
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"{what}: name must be a non-empty string, got "
                                       f"{name!r}")
        opts["name"] = name
    return opts


# --------------------------------------------------------------------------------------------
# st.function
# --------------------------------------------------------------------------------------------


class _Traced(NamedTuple):
    compiled: CompiledFunction
    variables: list
    assigned: list
    structure: object
    n_results: int


class _Step(NamedTuple):
    """A compiled pass or post program (:class:`batching.Program` without its graph)."""

    fn: CompiledFunction
    sources: list
    targets: list
    totals: tuple
    per_point: bool


class _SplitTraced(NamedTuple):
    steps: list  # _Step: the passes, then the post program
    variables: list
    assigned: list
    structure: object
    n_results: int

    @property
    def sums(self) -> bool:
        """Whether a pass sums (or takes extrema) over the examples."""
        return any(kind for step in self.steps for kind in step.totals)


class Function:
    """A Python function traced once per input shape signature and run as native code.

    Variables it reads are extra inputs (their current values are passed at each call);
    ``assign``/``assign_add``/``assign_sub`` on them are extra outputs written back after the
    call. Results are tensors, as ``tf.function``'s. Called while another function is being
    traced, or while a tape records, it runs its Python function in place instead (as
    TensorFlow inlines a nested ``tf.function`` and differentiates through one under a
    tape): its operations join that trace, or that tape, so gradients flow through it to its
    arguments and to the variables it reads.

    >>> import symtape as st
    >>> f = st.function(lambda x: st.reduce_sum(x ** 2))
    >>> float(f(np.array([1.0, 2.0]))), f.traced_signatures
    (5.0, [((2,),)])
    >>> f.strategies  # doctest: +ELLIPSIS
    [Strategy(name='element-kernel', reason='about ... atoms <= LOOP_MIN_ATOMS=...', points=0)]
    """

    def __init__(self, fn: Callable, input_signature=None, dtype: str | None = None,
                 fastmath: bool = False, threads: int | None = None,
                 explain: bool = False) -> None:
        self.python_function = fn
        self.input_signature = None if input_signature is None else signature_specs(
            input_signature, "st.function", unknown=True)
        self._opts = dict(fastmath=fastmath, threads=threads)
        self._dtype = dtype
        self._traces: dict[tuple, _Traced] = {}
        self._batch = batch_arguments(self.input_signature)
        self._poly: _SplitTraced | bool | None = None  # the one trace of a None batch
        self._bound: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._held: dict = {}  # id -> object, for Python values keyed by identity
        self._count = 0  # traces so far
        self._log = strategy.StrategyLog(explain)  # the paths its traces took
        # a call that assigns variables reads their values, runs and writes them back while
        # holding _assigning, so calls from several threads never lose an update; pure calls
        # run in parallel (the native code releases the GIL). _tracing: one trace at a time.
        self._assigning = threading.Lock()
        self._tracing = threading.RLock()
        self.__name__ = fn_name(fn)
        self.__doc__ = fn.__doc__

    def __get__(self, obj, objtype=None):
        """As a method: a Function of the bound method, one per instance."""
        if obj is None:
            return self
        bound = self._bound.get(obj)
        if bound is None:
            bound = Function(functools.partial(self.python_function, obj), self.input_signature,
                             self._dtype, **self._opts, explain=self._log.explain)
            bound.__name__ = self.__name__
            self._bound[obj] = bound
        return bound

    def single_trace(self) -> CompiledFunction | None:
        """The compiled function of this function's one trace; None with no trace, with
        several, or with one trace split over a None batch (passes, not one function)."""
        if self._poly or len(self._traces) != 1:
            return None
        (traced,) = self._traces.values()
        return traced.compiled

    @property
    def strategies(self) -> list[strategy.Strategy]:
        """The paths its traces took so far, in order (:mod:`symtape.compile.strategy`): per
        trace, element view or loop nests; for a None batch, whether one trace serves every
        size (``batch-split``, then its passes') or each size is traced."""
        return list(self._log.taken)

    @property
    def traced_signatures(self) -> list[tuple]:
        """The core shapes of the tensor arguments of each trace so far (``None`` for a
        batch dimension one trace serves at every size; with Python values among the
        arguments, ``(shapes, ((position, value key), ...))``); a float32 trace of a function
        without input_signature and dtype= by its arguments' TensorSpecs.

        >>> f = Function(lambda x: x * 2.0); _ = f(np.ones(2)), f(np.ones(2, np.float32))
        >>> f.traced_signatures
        [((2,),), (TensorSpec(shape=(2,), dtype='float32', name=None),)]
        """
        poly = [tuple(tuple(sp.shape) for sp in self.input_signature)] if self._poly else []
        return poly + list(self._traces)

    def __repr__(self) -> str:
        """Names the function, its signature and what it has traced.

        >>> import symtape as st
        >>> def step(x):
        ...     return x * 2
        >>> f = st.function(step, input_signature=[st.TensorSpec((None, 3))])
        >>> f
        <st.function step(TensorSpec(shape=(None, 3), dtype=float64)): not traced yet>
        >>> _ = f(np.ones((4, 3))); f
        <st.function step(TensorSpec(shape=(None, 3), dtype=float64)): 1 trace [((None, 3),)]>
        """
        sig = "..." if self.input_signature is None else ", ".join(
            f"TensorSpec(shape={tuple(sp.shape) if sp.shape is not None else None}, "
            f"dtype={np.dtype(sp.dtype).name})" for sp in self.input_signature)
        traced = self.traced_signatures
        state = f"{len(traced)} trace{'s' if len(traced) != 1 else ''} {traced}" if traced \
            else "not traced yet"
        return f"<st.function {self.__name__}({sig}): {state}>"

    def _record(self, specs: list[TensorSpec], python: tuple = ()) -> tuple:
        """Traces the function on placeholders of ``specs`` (and the Python values
        ``python``: ``(position, value)`` among the arguments): ``(placeholders, results
        (flat), assignments [(variable, tensor)], variables read, result structure)``."""
        xs = placeholders(self.python_function, specs)
        args = list(xs)
        for at, value in python:
            args.insert(at, value)
        with recording.tracing() as trace, traced_code("st.function"):
            result = self.python_function(*args)
        flat = [] if result is None else nest.flatten(result)
        for i, r in enumerate(flat):
            if isinstance(r, (bool, int, float, np.number, np.bool_)):
                flat[i] = constant(r)  # a Python number: a constant result
            elif not isinstance(r, Tensor):
                raise InvalidArgumentError(f"st.function {self.__name__}: result {i} is a "
                                           f"{type(r).__name__}; return tensors")
        structure = None if result is None else _output_structure(result, flat)
        assigned = list(trace.assigned.values())
        reached = {id(n) for n in N.ancestries([t._node for t in flat] +
                                                [t._node for _, t in assigned])} \
            if trace.draws else set()
        draws = [d for d in trace.draws if id(d._node) in reached]  # (not a weight's init)
        return xs, flat, assigned, list(trace.variables.values()) + draws, structure

    def _trace(self, specs: list[TensorSpec], python: tuple = ()) -> _Traced:
        self._count += 1
        if self._count == RETRACE_WARNING + 1:
            warnings.warn(
                f"st.function {self.__name__} has been traced {self._count} times: each new "
                "argument shape and each new Python value (an int, a flag, another object) "
                "traces and compiles again. Pass numbers that change as arrays or floats, or "
                "give input_signature with a None batch dimension", RetracingWarning,
                stacklevel=3)
        with progress.task(f"st.function {self.__name__}"):
            progress.stage("tracing")
            xs, flat, assigned, read, structure = self._record(specs, python)
            start = len(self._log.taken)
            outputs = flat + [t for _, t in assigned]
            inputs = xs + read
            compiled = _compile_tensors(outputs, inputs, dict(
                input_names=[t._name for t in inputs], structure=tuple(range(len(outputs))),
                dtype=self._dtype or common_dtype(specs), name=self.__name__, **self._opts),
                self._log)
        compiled.strategies = self._log.taken[start:]
        return _Traced(compiled, read, [v for v, _ in assigned], structure, len(flat))

    def _polymorphic(self) -> _SplitTraced | None:
        """The one trace serving every batch size (:func:`batching.split`), or None when
        the function is not one program over its examples (each size is then traced)."""
        if self._poly is None:
            with self._tracing:
                if self._poly is None:
                    self._poly = self._split_traced()
        return self._poly or None

    def _split_traced(self) -> _SplitTraced | bool:
        """The traces at :data:`batching.SIZES` split into one program, or False when they
        are not one (a size-specific failure too: the real call raises it)."""
        sig, flags = self.input_signature, self._batch

        def at(b: int) -> list:
            return [TensorSpec((b,) + tuple(sp.shape[1:]) if f else tuple(sp.shape),
                               sp.dtype, sp.name) for sp, f in zip(sig, flags)]

        try:
            traces = [self._record(at(b)) for b in batching.SIZES]
            drawn = any(isinstance(v, Draw) for t in traces for v in t[3])
            parts = None if drawn else batching.split(  # (draws: traced per size)
                traces, flags, self._dtype or common_dtype(sig))
            if not parts:
                self._log.add(strategy.per_size_traces(
                    "it draws random numbers" if drawn else "its traces at batch sizes "
                    f"{', '.join(map(str, batching.SIZES))} are not one program over the "
                    "examples"), self.__name__)
                return False
            self._log.add(strategy.batch_split(len(parts.passes), parts.post is not None),
                          self.__name__)
            return self._split_compiled(parts, traces[1])
        except Exception as e:  # noqa: BLE001 - a size-specific failure: traced per size
            self._log.add(strategy.per_size_traces(
                f"splitting it over the examples failed ({type(e).__name__}: {e})"),
                self.__name__)
            return False

    def _split_compiled(self, parts: batching.Split, large: tuple) -> _SplitTraced | bool:
        """The compiled passes and post program of a function split over its examples;
        False when a pass that sums over the examples has no loop plan. A pass without
        totals compiles as any function of one point over chunks of points (its element
        view when small)."""
        _, flat, assigned, read, structure = large
        dtype = self._dtype or common_dtype(self.input_signature)
        steps = []
        for k, prog in enumerate(parts.passes + ([parts.post] if parts.post else [])):
            what = f"_pass{k + 1}" if k < len(parts.passes) else "_post"
            opts = dict(input_names=[t._name for t in prog.inputs], dtype=dtype,
                        structure=tuple(range(len(prog.outputs))), name=self.__name__ + what,
                        **self._opts)
            if prog is parts.post:
                fn = _compile_tensors(prog.outputs, prog.inputs, opts, self._log)
            elif not any(prog.totals):
                fn = _compile_tensors(prog.outputs, prog.inputs, opts, self._log, True,
                                      prog.shared)
            else:
                nodes = [t._node for t in prog.outputs]
                path = strategy.summing_pass(nodes, prog.totals)
                try:
                    plan = loopnest.plan_loops(
                        nodes, [t._node for t in prog.inputs], points=path.points,
                        shared=prog.shared, totals=prog.totals)
                except loopnest.Unplannable as e:
                    self._log.add(strategy.per_size_traces(
                        f"pass {k + 1} accumulates over the examples and has no loop form "
                        f"({e})"), opts["name"])
                    return False
                self._log.add(path, opts["name"])
                fn = compile_plan(plan, **opts)
            steps.append(_Step(fn, prog.sources, prog.targets, prog.totals, prog.per_point))
        return _SplitTraced(steps, read, [v for v, _ in assigned], structure, len(flat))

    def _run_split(self, traced: _SplitTraced, arrays: list):
        """A call of the one trace: the passes over the examples (the batch a loop of the
        native code), then the post program."""
        sizes = sorted({a.shape[0] for a, f in zip(arrays, self._batch) if f})
        if len(sizes) > 1:
            raise ShapeError(f"st.function {self.__name__}: the arguments' batch dimensions "
                             f"differ ({', '.join(map(str, sizes))})")
        n = sizes[0]
        with np.errstate(divide="ignore"):
            slots = {("scale", 0): np.array(1.0) / n, ("scale", 1): np.array(float(n))}
        for i, (a, f) in enumerate(zip(arrays, self._batch)):
            slots[("arg", i)] = a.reshape((n, 1) + a.shape[1:]) if f else a
        for j, v in enumerate(traced.variables):
            slots[("var", j)] = _current(v)
        for step in traced.steps:
            results = step.fn(*[slots[s] for s in step.sources])
            for slot, r, kind in zip(step.targets, results, step.totals):
                if step.per_point and not kind:
                    r.flags.writeable = False  # fresh: its read-only reshaped view is used
                    r = r.reshape((n,) + r.shape[2:])
                slots[slot] = r
        for j, var in enumerate(traced.assigned):
            _write_back(var, slots[("assign", j)])
        if traced.structure is None:
            return None
        tensors = [adopt(slots[("result", i)]) for i in range(traced.n_results)]
        return nest.pack_sequence_as(traced.structure, tensors) \
            if nest.is_nested(traced.structure) else tensors[0]

    def _inline(self, args: tuple):
        """The Python function run on ``args`` in place (inside another trace, under a
        recording tape), after the checks of its input signature.

        >>> import symtape as st
        >>> f = st.function(lambda x: st.reduce_sum(x ** 3))
        >>> x = st.Variable([1.0, 2.0])
        >>> with st.GradientTape() as t:
        ...     y = f(x)
        >>> t.gradient(y, x).numpy()
        array([ 3., 12.])
        """
        sig = self.input_signature
        if sig is not None:
            shapes = [tuple(a.shape) if isinstance(a, Tensor) else np.shape(a) for a in args]
            if len(sig) != len(shapes) or any(
                    s.shape is not None and not fits(s.shape, k) for s, k in zip(sig, shapes)):
                raise ShapeError(f"st.function {self.__name__}: argument shapes {shapes} do "
                                 "not match input_signature "
                                 f"{[None if s.shape is None else tuple(s.shape) for s in sig]}")
        return self.python_function(*args)

    def _keyed(self, shapes: list, dtypes: list) -> tuple:
        """The trace key of arguments of ``shapes`` and ``dtypes`` (names, as
        :func:`argument_dtype` gives them): the shapes; without input_signature and dtype=,
        a float32 trace by its specs (a trace per dtype, as ``tf.function``'s)."""
        if self.input_signature is None and self._dtype is None and dtypes and \
                all(d == "float32" for d in dtypes):  # (common_dtype of the specs)
            return tuple(self._specs(shapes, dtypes))
        return tuple([tuple(k) for k in shapes])

    def _specs(self, shapes: list, dtypes: list) -> list[TensorSpec]:
        """The specs to trace for arguments of ``shapes`` and ``dtypes``."""
        sig = self.input_signature
        return [TensorSpec(k, s.dtype, s.name) for k, s in zip(shapes, sig)] if sig else \
            [TensorSpec(k, self._dtype or d) for k, d in zip(shapes, dtypes)]

    def _positional(self, args: tuple, kwargs: dict) -> tuple:
        """Keyword arguments in their positions (defaults filled in)."""
        try:
            bound = inspect.signature(self.python_function).bind(*args, **kwargs)
        except (TypeError, ValueError) as e:
            raise TypeError(f"st.function {self.__name__}: {e}") from None
        bound.apply_defaults()
        if bound.kwargs:
            raise TypeError(f"st.function {self.__name__}: keyword-only arguments "
                            f"({', '.join(bound.kwargs)}) are not supported; pass them "
                            "positionally")
        return bound.args

    def get_concrete_function(self, *args) -> CompiledFunction:
        """The compiled function for these arguments (or shapes/TensorSpecs). With none, the
        function's ``input_signature`` is traced now and the function itself is returned:
        the callable that serves that signature (one trace for every batch size where the
        signature has a ``None`` batch and the function allows it, see
        :mod:`symtape.compile.batching`).

        >>> import symtape as st
        >>> f = st.function(lambda x: 2 * x, input_signature=[st.TensorSpec((2,))])
        >>> f.get_concrete_function()(np.array([1.0, 2.0])).numpy()
        array([2., 4.])
        """
        if not args and self.input_signature is not None:
            if self._batch is not None:
                self._polymorphic()
            else:
                self.get_concrete_function(*self.input_signature)
            return self
        if not args:
            try:
                inspect.signature(self.python_function).bind()
            except TypeError:
                raise InvalidArgumentError(
                    f"st.function {self.__name__}.get_concrete_function: give the arguments "
                    "(or TensorSpecs) to trace for; the function has no input_signature"
                ) from None
            except ValueError:
                pass  # (a builtin without a signature: tried as it is)
        given = signature_specs([getattr(a, "shape", a) if not isinstance(a, TensorSpec) else a
                                 for a in args], "st.function")
        dtypes = [s.dtype if isinstance(a, TensorSpec) or not hasattr(a, "shape") else
                  argument_dtype(a) for a, s in zip(args, given)]  # (arrays: as a call's)
        shapes = [s.shape for s in given]
        key = self._keyed(shapes, dtypes)
        specs = [TensorSpec(s.shape, s.dtype, g.name or s.name)
                 for s, g in zip(self._specs(shapes, dtypes), given)]
        with self._tracing:
            if key not in self._traces:
                self._traces[key] = self._trace(specs)
        return self._traces[key].compiled

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self._positional(args, kwargs)
        sig = self.input_signature
        if recording.current_trace() is not None or recording.active():
            return self._inline(args)
        python = () if sig is not None else tuple(
            (i, a) for i, a in enumerate(args) if python_value(a))
        if python:
            keyed = {i for i, _ in python}
            args = [a for i, a in enumerate(args) if i not in keyed]
        arrays = [np.asarray(a.numpy() if isinstance(a, Tensor) else a) for a in args]
        for i, a in enumerate(arrays):
            if a.dtype.kind not in "biuf":
                raise InvalidArgumentError(
                    f"st.function {self.__name__}: argument {i} is an array of "
                    f"{a.dtype}; tensor arguments are numbers")
        shapes = [a.shape for a in arrays]
        if sig is not None and (len(sig) != len(shapes) or any(
                s.shape is not None and not fits(s.shape, k) for s, k in zip(sig, shapes))):
            raise ShapeError(f"st.function {self.__name__}: argument shapes {shapes} do not "
                             "match input_signature "
                             f"{[None if s.shape is None else tuple(s.shape) for s in sig]}")
        if self._batch is not None:
            poly = self._polymorphic()
            if poly is not None and not (poly.sums and _empty_batch(arrays, self._batch)):
                with self._assigning if poly.assigned else contextlib.nullcontext():
                    return self._run_split(poly, arrays)
        dtypes = [argument_dtype(a) for a in args]
        key = self._keyed(shapes, dtypes)
        if python:
            key = (key, tuple((i, value_key(v, self._held)) for i, v in python))
        traced = self._traces.get(key)
        if traced is None:
            with self._tracing:
                traced = self._traces.get(key)
                if traced is None:
                    traced = self._traces[key] = self._trace(self._specs(shapes, dtypes),
                                                             python)
        with self._assigning if traced.assigned else contextlib.nullcontext():
            values = [_current(v) for v in traced.variables]
            results = traced.compiled(*arrays, *values)
            for var, value in zip(traced.assigned, results[traced.n_results:]):
                _write_back(var, value)
        if traced.structure is None:
            return None
        tensors = [adopt(r) for r in results[: traced.n_results]]  # fresh: no copies
        return nest.pack_sequence_as(traced.structure, tensors) \
            if nest.is_nested(traced.structure) else tensors[0]


def _empty_batch(arrays: list, batch: list) -> bool:
    """Whether the batch is empty: a step that sums over its examples then runs as a trace
    of its own, whose sums over no example are the constant 0, as eagerly (a total
    accumulated over no example is a plain 0.0: times an infinity, nan)."""
    return any(f and a.ndim and a.shape[0] == 0 for a, f in zip(arrays, batch))


def _current(var) -> np.ndarray:
    """What a compiled call reads for a variable: its value, or a random draw's next one."""
    return var.draw() if isinstance(var, Draw) else var._store.value


def _write_back(var, value) -> None:
    """A compiled function's assignment to ``var``: a fresh array, nobody else's, is
    adopted without a copy."""
    if type(value) is np.ndarray and value.dtype == var.dtype and value.shape == var.shape:
        var._adopt(value)
    else:
        var.assign(value)


#: A function traced more often than this warns (:class:`RetracingWarning`), as TensorFlow
#: does after 5 retraces.
RETRACE_WARNING = 5


class RetracingWarning(UserWarning):
    """An ``st.function`` traced again and again (new shapes or Python values each call)."""


def _compile_tensors(outputs: list, inputs: list, opts: dict, log: strategy.StrategyLog,
                     points: bool = False, shared: Sequence[bool] = ()) -> CompiledFunction:
    """Native code of traced tensors: loop nests over the tensor nodes when the element view
    would be large (:func:`strategy.kernel`; ``points``, ``shared``: a function of one point
    run over chunks of points, some inputs the same for all), else the element view
    straight-line; the path taken recorded in ``log``."""
    progress.stage("planning loops")
    looped = _loop_compiled(outputs, inputs, opts, log, points, shared)
    if looped is not None:
        return looped
    progress.stage("element view and straight-line code")
    return compile_atoms([t._atoms for t in outputs], [t._atoms for t in inputs], **opts)


def _loop_compiled(outputs: list, inputs: list, opts: dict, log: strategy.StrategyLog,
                   points: bool = False, shared: Sequence[bool] = ()):
    """The loop-planned function of these tensors (``points``: in chunks of points,
    ``shared`` inputs the same for all of them), or None when the element view is small or
    some node has no loop form (the path recorded in ``log``)."""
    nodes = [t._node for t in outputs]
    path = strategy.kernel(nodes, points)
    if not path.loops:
        log.add(path, opts.get("name"))
        return None
    threads = opts.get("threads")
    try:
        plan = loopnest.plan_loops(nodes, [t._node for t in inputs],
                                   threads=os.cpu_count() or 1 if threads is None else threads,
                                   points=path.points, shared=shared)
    except loopnest.Unplannable as e:
        log.add(strategy.unplannable(nodes, e, opts.get("name")), opts.get("name"))
        return None
    log.add(path, opts.get("name"))
    return compile_plan(plan, **opts).with_element_view(
        lambda: ([t._atoms for t in outputs], [t._atoms for t in inputs]))


#: ``tf.function`` keywords that have no effect here (symtape always traces and compiles).
TF_FUNCTION_KEYWORDS = frozenset({
    "autograph", "jit_compile", "reduce_retracing", "experimental_implements",
    "experimental_autograph_options", "experimental_attributes", "experimental_relax_shapes",
    "experimental_compile", "experimental_follow_type_hints",
})


def unknown_keywords(given: dict, known, what: str) -> None:
    """Raises ``TypeError`` (as Python does for a misspelled keyword) naming the first of
    ``given`` that is not in ``known`` and the known name it is closest to.

    >>> unknown_keywords({"dtpye": 1}, ["dtype", "name"], "st.function")
    Traceback (most recent call last):
    ...
    TypeError: st.function got an unexpected keyword argument 'dtpye' (did you mean 'dtype'?)
    """
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"{what} got an unexpected keyword argument {key!r}{hint}")


def function(fn: Callable | None = None, *, input_signature=None, dtype: str | None = None,
             fastmath: bool = False, threads: int | None = None, name: str | None = None,
             explain: bool = False, **tf_options):
    """Decorator like ``tf.function``: trace ``fn`` once per input shape signature, compile
    it with llvmlite, run native code on later calls. ``threads``: ``None`` runs large batches
    and the large loops of large tensors (:mod:`symtape.compile.planner`) on all cores, ``1`` on
    one, ``k`` on at most ``k``. ``explain=True`` prints which path each trace takes and why
    as it is chosen (:mod:`symtape.compile.strategy`); ``.strategies`` lists them.

    >>> import symtape as st
    >>> w = st.Variable(1.0, name="w")
    >>> @st.function
    ... def step(x, y):
    ...     with st.GradientTape() as t:
    ...         loss = st.reduce_mean((w * x - y) ** 2)
    ...     w.assign_sub(0.1 * t.gradient(loss, w))
    ...     return loss
    >>> xs, ys = np.array([1.0, 2.0]), np.array([2.0, 4.0])
    >>> float(step(xs, ys)), float(w)
    (2.5, 1.5)
    >>> cube = st.function(lambda x: x ** 3, explain=True)
    >>> float(cube(2.0))  # doctest: +ELLIPSIS
    lambda: element-kernel: about ... atoms <= LOOP_MIN_ATOMS=...
    8.0

    ``tf.function``'s other keywords (``jit_compile``, ``reduce_retracing``, ...) are accepted
    and have no effect; any other keyword is a ``TypeError``, as in TensorFlow.
    """
    unknown_keywords(tf_options, TF_FUNCTION_KEYWORDS | {
        "input_signature", "dtype", "fastmath", "threads", "name", "explain"}, "st.function")
    if name is not None:
        compile_options(fastmath, threads, name, "st.function")  # (checks it)

    def make(f):
        out = Function(f, input_signature, dtype, fastmath, threads, explain)
        if name is not None:
            out.__name__ = name
        return out

    return make if fn is None else make(fn)
