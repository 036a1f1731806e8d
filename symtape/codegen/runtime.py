"""Runtime: the compiled callable, vectorised like a numpy generalized ufunc.

:func:`compile_atoms` builds a :class:`CompiledFunction` from output and input arrays of atoms.
A call checks its arguments against the traced core shapes, broadcasts their extra leading
(batch) dimensions as numpy does and loops over the batch natively: each argument gets its own
batch stride (0 where it is broadcast), so nothing is copied unless an argument has the wrong
dtype or a core that is not contiguous. The native call releases the GIL (ctypes ``CFUNCTYPE``)
and large batches are split over a thread pool. The object owns its JIT engine: the code lives
exactly as long as the callable, independently of the graph that made it.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import math
import os
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from symtape.base.aligned import aligned_empty, aligned_zeros
from symtape.base.errors import DTypeError, InvalidArgumentError, LoweringError, ShapeError
from symtape.codegen import archive, c99, jit, kernel, loops
from symtape.codegen.ir import entry_symbol, symbol_names
from symtape.codegen.loops import LoopPlan
from symtape.codegen.plan import Plan, build_plan, formulas
from symtape.element.tidy import readable

__all__ = ["TensorSpec", "CompiledFunction", "BufferCall", "compile_atoms", "compile_plan", "load",
           "restore"]

# Points x ops per thread below which splitting a batch costs more than it saves (measured
# on 10^4 points: Rosenbrock n=10's gradient, 126 ops a point, 10 ns a point on one thread
# against 16 on two; the pendulum's Hessian, 271 ops, 48 against 30).
_GRAIN = 1 << 20
_CPUS = os.cpu_count() or 1


# --------------------------------------------------------------------------------------------
# TensorSpec
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorSpec:
    """The core shape and dtype of one argument or result (one point of a batch); a
    ``None`` shape means unknown (``st.function`` then traces each call's shape), and so does
    a ``None`` dimension (in front: a batch one trace of ``st.function`` serves at every
    size, where the function computes example by example).

    >>> TensorSpec((10,))
    TensorSpec(shape=(10,), dtype='float64', name=None)
    >>> TensorSpec([2, 3], dtype=np.float32, name="w").shape
    (2, 3)
    >>> TensorSpec((None, 784)).shape
    (None, 784)
    """

    shape: tuple
    dtype: str = "float64"
    name: str | None = None

    def __post_init__(self) -> None:
        if self.shape is None:  # unknown shape (as in TensorFlow's TensorSpec(None))
            object.__setattr__(self, "dtype", np.dtype(self.dtype).name)
            return
        shape = (self.shape,) if isinstance(self.shape, (int, np.integer)) else self.shape
        try:
            shape = tuple(None if d is None else int(d) for d in shape)
        except TypeError:
            raise ShapeError(
                f"TensorSpec shape must be a tuple of ints (or None), got {self.shape!r}"
            ) from None
        if any(d is not None and d < 0 for d in shape):
            raise ShapeError(f"TensorSpec shape must not be negative, got {shape}")
        try:
            dtype = np.dtype(self.dtype).name
        except TypeError:
            raise DTypeError(f"TensorSpec dtype {self.dtype!r} is not a numpy dtype") from None
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------


def compile_atoms(
    outputs: Sequence,
    inputs: Sequence,
    *,
    input_names: Sequence[str | None] | None = None,
    output_names: Sequence[str | None] | None = None,
    structure=None,
    dtype: str = "float64",
    fastmath: bool = False,
    threads: int | None = None,
    name: str | None = None,
) -> CompiledFunction:
    """Compiles ``outputs = f(inputs)`` to native code: ``f(*arrays) -> structure of arrays``.

    Parameters
    ----------
    outputs : list of object arrays of atoms (any shapes, 0-d included): the results.
    inputs : list of object arrays of leaves: the core shape of each argument.
    input_names, output_names : optional names, used in specs, errors and C source.
    structure : nested lists/tuples/dicts of ints indexing ``outputs`` that the result mirrors
        (each index exactly once); default: the array itself for one output, else a tuple.
    dtype : ``'float64'`` or ``'float32'``, the arithmetic and result type (boolean outputs
        are ``bool`` arrays); inputs are converted to it.
    fastmath : allow LLVM's fast-math rewrites (see ``symtape.codegen.ir.FASTMATH_FLAGS``).
    threads : ``None`` splits large batches over all cores, ``1`` never splits, ``k`` at most k.
    name : the kernel's name (in IR, assembly and C source).

    Returns
    -------
    CompiledFunction

    >>> from symtape.element import graph
    >>> x, y = graph.Leaf.new("x"), graph.Leaf.new("y")
    >>> f = compile_atoms([np.array(graph.add(graph.mul(x, y), x), dtype=object)],
    ...                   [np.array(x, dtype=object), np.array(y, dtype=object)])
    >>> f(np.array([1.0, 2.0, 3.0]), 10.0)
    array([11., 22., 33.])
    """
    outputs = [np.asarray(o, dtype=object) for o in _as_list(outputs, "outputs")]
    inputs = [np.asarray(i, dtype=object) for i in _as_list(inputs, "inputs")]
    dtype = _float_dtype(dtype)
    return compile_plan(build_plan(outputs, inputs), input_names=input_names,
                        output_names=output_names, structure=structure, dtype=dtype,
                        fastmath=fastmath, threads=threads, name=name)


def compile_plan(plan: Plan | LoopPlan, *, input_names=None, output_names=None,
                 structure=None, dtype: str = "float64", fastmath: bool = False,
                 threads: int | None = None, name: str | None = None) -> CompiledFunction:
    """Compiles a straight-line or loop plan (the options as :func:`compile_atoms`'s).

    >>> from symtape.element import graph
    >>> x = graph.Leaf.new("x")
    >>> f = compile_plan(build_plan([np.array(graph.mul(x, x), dtype=object)],
    ...                             [np.array(x, dtype=object)]))
    >>> float(f(3.0))
    9.0
    """
    n_in, n_out = len(plan.inputs), len(plan.outputs)
    return CompiledFunction(
        plan,
        name=name,
        dtype=_float_dtype(dtype),
        fastmath=bool(fastmath),
        threads=_threads(threads),
        structure=archive.check_structure(structure, n_out),
        input_names=_names(input_names, n_in, "input_names"),
        output_names=_names(output_names, n_out, "output_names"),
    )


def _as_list(items, what: str) -> list:
    if isinstance(items, (list, tuple)):
        return list(items)
    raise InvalidArgumentError(f"{what} must be a list of arrays, got {type(items).__name__}")


def _float_dtype(dtype) -> str:
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in archive.FLOAT_DTYPES:
        raise DTypeError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    return name


def _threads(threads):
    if threads is None:
        return None
    if not isinstance(threads, (int, np.integer)) or threads < 1:
        raise InvalidArgumentError(f"threads must be None or a positive int, got {threads!r}")
    return int(threads)


def _names(names, n: int, what: str) -> tuple:
    if names is None:
        return (None,) * n
    names = tuple(names)
    if len(names) != n:
        raise InvalidArgumentError(f"{what} has {len(names)} entries for {n} arrays")
    return tuple(None if nm is None else str(nm) for nm in names)


def tidy_array(a: np.ndarray) -> np.ndarray:
    """``a`` (an object array of SymPy expressions) with each element in readable form."""
    out = np.empty(a.shape, dtype=object)
    for idx in np.ndindex(*a.shape):
        out[idx] = readable(a[idx])
    return out


def _rebuild(structure, values: list):
    """``structure`` with each int ``i`` replaced by ``values[i]``."""
    if isinstance(structure, (int, np.integer)):
        return values[structure]
    if isinstance(structure, dict):
        return {k: _rebuild(v, values) for k, v in structure.items()}
    items = [_rebuild(v, values) for v in structure]
    if isinstance(structure, list):
        return items
    if hasattr(structure, "_fields"):  # a namedtuple takes its fields positionally
        return type(structure)(*items)
    return type(structure)(items)


def _flatten_like(structure, value, path: str, found: dict) -> None:
    """Collects ``found[i] = (array, path)`` from ``value`` mirroring ``structure``."""
    if isinstance(structure, (int, np.integer)):
        found[int(structure)] = (value, path)
        return
    if isinstance(structure, dict):
        if not isinstance(value, dict) or set(value) != set(structure):
            raise InvalidArgumentError(f"{path} must be a dict with keys {sorted(structure)}")
        for k, sub in structure.items():
            _flatten_like(sub, value[k], f"{path}[{k!r}]", found)
        return
    if not isinstance(value, (list, tuple)) or len(value) != len(structure):
        raise InvalidArgumentError(
            f"{path} must be a list/tuple of {len(structure)} entries mirroring the result"
        )
    for k, (sub, item) in enumerate(zip(structure, value)):
        _flatten_like(sub, item, f"{path}[{k}]", found)


# --------------------------------------------------------------------------------------------
# The thread pool (shared: it holds no engines, only runs chunks of calls)
# --------------------------------------------------------------------------------------------

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(_CPUS, thread_name_prefix="symtape")
        return _POOL


# --------------------------------------------------------------------------------------------
# CompiledFunction
# --------------------------------------------------------------------------------------------

_GENERAL = object()  # a call the one-point path leaves to the general one
#: The one-point path copies arguments and results through fixed buffers up to this many
#: elements in all (a 784 x 128 result: 0.3 ms of copies on a 0.3 ms matrix product).
POINT_COPY_LIMIT = 4096
_INT_LIMIT = 1 << 53  # ints the one-point path converts (exactly) to float


class BufferCall:
    """A compiled function bound to arrays (see :meth:`CompiledFunction.buffer`): calling it
    runs the native code over them; ``out`` holds the results, ``args`` the arguments."""

    __slots__ = ("_run", "args", "out", "_keep", "_name")

    def __init__(self, fn: CompiledFunction, arrays: list, targets: list, batch: tuple,
                 result) -> None:
        self.args, self.out = tuple(arrays), result
        self._keep = fn  # the engine the native code lives in
        self._name = fn.name
        bufs = list(arrays) + list(targets)
        points = math.prod(batch)
        if points == 0:
            self._run = _nothing
            fn._start_totals(targets, 0)
            return
        entry, calls = fn._calls(bufs, batch, 1, fn._full(bufs, batch))
        self._run = (functools.partial(entry, *calls[0]) if len(calls) == 1 else
                     functools.partial(_run_group, entry, calls))
        if fn._totals:  # each call sums afresh
            run, start = self._run, functools.partial(fn._start_totals, targets, points)
            self._run = lambda: start() or run()

    def __call__(self) -> None:
        if self._run():
            raise _no_memory(self._name)


def _nothing() -> int:
    return 0


#: Where an output summed over points (``LoopPlan.totals``) starts, over some points and
#: over none (-0.0: a sum of negative zeros stays one, as an in-order sum does).
_TOTAL_START = {"sum": -0.0, "max": -np.inf, "min": np.inf}
_TOTAL_EMPTY = {"sum": 0.0, "max": -np.inf, "min": np.inf}
_TOTAL_COMBINE = {"sum": np.add, "max": np.maximum, "min": np.minimum}


class CompiledFunction:
    """A native function of arrays, vectorised over leading batch dimensions.

    ``f(*arrays, out=None)``: argument ``i`` has shape ``batch_i + inputs[i].shape``; the
    ``batch_i`` broadcast together to ``batch``, and output ``k`` has shape
    ``batch + outputs[k].shape``. Results mirror the ``structure`` given at compile time; a
    0-d result without ``out`` is returned as a numpy scalar. ``out`` (the same structure,
    or a flat tuple in output order) receives the results and is returned.

    >>> from symtape.element import graph
    >>> x = graph.Leaf.new("x")
    >>> f = compile_atoms([np.array(graph.mul(x, x), dtype=object)], [np.array(x, dtype=object)],
    ...                   input_names=["x"], name="square")
    >>> f(3.0), f(np.arange(3.0))
    (np.float64(9.0), array([0., 1., 4.]))
    >>> f.formula()
    x**2
    """

    def __init__(self, plan: Plan, *, name=None, dtype="float64", fastmath=False, threads=None,
                 structure=0, input_names=(), output_names=(), ir=None, obj=None) -> None:
        self._plan = plan
        self._shared = getattr(plan, "shared", ())  # arguments read once for all points
        self._totals = getattr(plan, "totals", ())  # outputs summed over all points
        self._spare_totals: list = []  # partial totals of a call's other threads, reused
        self._name = name or "fn"
        self._dtype = np.dtype(dtype)
        self._fastmath = fastmath
        self._threads = threads
        self._structure = structure
        self._input_names = tuple(input_names) or (None,) * len(plan.inputs)
        self._output_names = tuple(output_names) or (None,) * len(plan.outputs)
        self._symbol = entry_symbol(name)
        self._ir = ir if ir is not None else _render(plan, self._symbol, dtype, fastmath)
        self._obj = obj if obj is not None else jit.object_code(self._ir)
        self._asm = None
        self._element_view = None  # loop plans: () -> (output atoms, input atoms), if known
        self._elements = None  # the straight-line plan built from it
        self._specs()
        self._attach()

    def _specs(self) -> None:
        plan = self._plan
        self._in_specs = tuple(TensorSpec(a.shape, self._dtype.name, nm)
                               for a, nm in zip(plan.inputs, self._input_names))
        self._out_specs = tuple(TensorSpec(o.shape, "bool" if o.boolean else self._dtype.name, nm)
                                for o, nm in zip(plan.outputs, self._output_names))
        self._out_dtypes = [np.dtype(s.dtype) for s in self._out_specs]
        self._sizes = ([math.prod(s.shape) for s in self._in_specs]
                       + [math.prod(s.shape) for s in self._out_specs])
        self._point_elements = sum(self._sizes)
        self._itemsizes = [self._dtype.itemsize] * len(self._in_specs) + [
            d.itemsize for d in self._out_dtypes]
        self._core_ndims = [len(s.shape) for s in self._in_specs + self._out_specs]
        self._cost = max(1, plan.n_ops)

    def _attach(self) -> None:
        """Loads the object code into this function's own engine."""
        self._engine = jit.Engine(self._obj)
        strided, dense = symbol_names(self._symbol)
        i64, vp = ctypes.c_int64, ctypes.c_void_p
        # the entry points return 0, or 1 when the kernel's lane buffers found no memory
        self._strided = self._engine.function(strided, ctypes.c_int32, i64, vp, vp)
        self._dense = self._engine.function(dense, ctypes.c_int32, i64, vp)
        n = len(self._sizes)
        self._ptr_type = ctypes.c_void_p * max(n, 1)
        self._stride_type = ctypes.c_int64 * max(n, 1)
        self._local = threading.local()  # each thread's buffers for one-point calls
        if isinstance(self._plan, LoopPlan):  # it keeps its arena between calls: freed here
            weakref.finalize(self, self._engine.function(
                loops.release_symbol(self._symbol), None))

    # ----- properties ---------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The function's name."""
        return self._name

    @property
    def inputs(self) -> tuple:
        """The core :class:`TensorSpec` of each argument."""
        return self._in_specs

    @property
    def outputs(self) -> tuple:
        """The core :class:`TensorSpec` of each output, in output order."""
        return self._out_specs

    @property
    def structure(self):
        """The nesting of the result (ints index :attr:`outputs`)."""
        return self._structure

    @property
    def plan(self) -> Plan:
        """The SSA plan the code was generated from."""
        return self._plan

    @property
    def llvm_ir(self) -> str:
        """The LLVM IR given to the optimiser."""
        return self._ir

    @property
    def asm(self) -> str:
        """The optimised assembly for this CPU (made on first access)."""
        if self._asm is None:
            self._asm = jit.assembly(self._ir)
        return self._asm

    def formula(self):
        """The outputs as SymPy expressions of real symbols named after the input leaves,
        mirroring the call result (0-d outputs as expressions, others as object arrays);
        elements in one symbol are in :func:`~symtape.element.tidy.readable` form (a 12th
        derivative of ``exp(-x**2)`` is a polynomial times ``exp(-x**2)``)."""
        arrays = [tidy_array(a) for a in formulas(self._straight_line("formula"))]
        return _rebuild(self._structure, [a[()] if a.ndim == 0 else a for a in arrays])

    def c_source(self) -> str:
        """Standalone C99 source of the dense kernel (see :mod:`symtape.codegen.c99`)."""
        return c99.render(*self.c_kernel("c_source"))

    def c_kernel(self, what: str = "c_kernel", name: str | None = None) -> tuple:
        """``(plan, name, dtype, input names, output names)``: what
        :func:`c99.render`/:func:`c99.render_many` write as this function's C (``name``:
        another name for it)."""
        return (self._straight_line(what), name or self._name, self._dtype.name,
                self._input_names, self._output_names)

    def with_element_view(self, element_view) -> CompiledFunction:
        """Gives a loop-planned function the way to its element view: ``element_view()``
        returns ``(output atoms, input atoms)``, from which :meth:`formula`,
        :meth:`c_source` and :meth:`save` build the straight-line function on first use
        (not kept by pickles; a saved file holds the straight-line function). Returns
        ``self``.

        >>> from symtape.element import graph
        >>> x = graph.Leaf.new("x")
        >>> f = compile_atoms([np.array(graph.mul(x, x), dtype=object)],
        ...                   [np.array(x, dtype=object)])
        >>> f.with_element_view(lambda: None) is f
        True
        """
        self._element_view = element_view
        return self

    def _straight_line(self, what: str) -> Plan:
        """The straight-line plan formulas, C source and saved files are read off: this
        function's, or the one built from a loop plan's element view."""
        if not isinstance(self._plan, LoopPlan):
            return self._plan
        if self._elements is None:
            if self._element_view is None:
                raise LoweringError(
                    f"{self._name}.{what}: this function was compiled as loop nests over "
                    "large tensors and its element view is not at hand (a pickled or loaded "
                    "copy); the traced tensors still give formulas (Tensor.formula)")
            outs, ins = self._element_view()
            self._elements = build_plan([np.asarray(o, dtype=object) for o in outs],
                                        [np.asarray(i, dtype=object) for i in ins])
        return self._elements

    def __repr__(self) -> str:
        ins = ", ".join(_show(s) for s in self._in_specs)
        outs = ", ".join(_show(s) for s in self._out_specs)
        return f"<CompiledFunction {self._name}({ins}) -> ({outs})>"

    # ----- calling ------------------------------------------------------------------------

    def __call__(self, *args, out=None):
        result = self._point_call(args, out)
        if result is not _GENERAL:
            return result
        arrays, batch = self._check_inputs(args)
        targets, copies, result = self._check_outputs(out, batch, arrays)
        self._run(arrays, targets, batch)
        for tmp, dest in copies:
            np.copyto(dest, tmp)
        if out is None:
            return _rebuild(self._structure, [t[()] if t.ndim == 0 else t for t in targets])
        return result

    def _point_call(self, args, out):
        """One point, without the general checks: every argument a Python or numpy float (or
        an int) for a 0-d input, or an array of exactly the input's core shape and dtype;
        ``out`` None, or (for one output, or a tuple of outputs) writeable arrays of exactly
        the outputs' core shapes and dtypes. The values are copied into this thread's fixed
        buffers, so the pointers are made once (and ``out`` may alias an argument).
        Anything else returns :data:`_GENERAL` (the general path checks and converts it), as
        do arguments and results of more than :data:`POINT_COPY_LIMIT` elements in all (the
        general path reads and writes them in place: copies would cost more than checks)."""
        if self._point_elements > POINT_COPY_LIMIT or self._totals:
            return _GENERAL
        try:
            ins, outs, ptrs = self._local.point
        except AttributeError:
            ins, outs, ptrs = self._local.point = self._point_buffers()
        if len(args) != len(ins):
            return _GENERAL
        if out is not None:
            structure = self._structure
            targets = (out,) if type(structure) is int else out
            if type(targets) is not tuple or len(targets) != len(outs) or not (
                    type(structure) is int or structure == tuple(range(len(outs)))) or any(
                    type(t) is not np.ndarray or t.shape != o.shape or t.dtype != o.dtype or
                    not t.flags.writeable for t, o in zip(targets, outs)):
                return _GENERAL
        for x, buf in zip(args, ins):
            t = type(x)
            if t is float or t is np.float64 or (t is int and -_INT_LIMIT < x < _INT_LIMIT):
                if buf.ndim:
                    return _GENERAL
                buf[()] = x
            elif t is np.ndarray and x.shape == buf.shape and x.dtype == buf.dtype:
                buf[...] = x
            else:
                return _GENERAL
        if self._dense(1, ptrs):
            raise _no_memory(self._name)
        if out is not None:
            for t, o in zip(targets, outs):
                t[...] = o
            return out
        return _rebuild(self._structure, [o[()] if o.ndim == 0 else o.copy() for o in outs])

    def _point_buffers(self) -> tuple:
        ins = [aligned_zeros(s.shape, self._dtype) for s in self._in_specs]
        outs = [aligned_zeros(s.shape, d) for s, d in zip(self._out_specs, self._out_dtypes)]
        return ins, outs, self._ptr_type(*[a.ctypes.data for a in ins + outs])

    def buffer(self, *args, out=None) -> BufferCall:
        """A call bound to arrays, for tight loops: ``call()`` runs the native code on the
        arrays' current contents and writes ``call.out`` (the result's structure; ``out``
        when given, else new arrays), with no checks, conversions or copies. The arguments
        must be arrays of this function's dtype whose core dimensions are contiguous (they
        are read in place, so changes between calls are seen); they are checked once here.
        The call runs on the calling thread.

        >>> import symtape as st
        >>> x = st.symbol("x")
        >>> f = st.compile(x * x, [x])
        >>> xs = np.array([1.0, 2.0])
        >>> call = f.buffer(xs)
        >>> call(); call.out
        array([1., 4.])
        >>> xs[:] = [3.0, 4.0]; call(); call.out
        array([ 9., 16.])
        """
        if len(args) != len(self._in_specs):
            raise TypeError(f"{self._name}.buffer takes {len(self._in_specs)} array arguments, "
                            f"got {len(args)}")
        for i, (x, spec) in enumerate(zip(args, self._in_specs)):
            if not isinstance(x, np.ndarray) or x.dtype != self._dtype:
                what = type(x).__name__ if not isinstance(x, np.ndarray) else x.dtype
                raise DTypeError(f"{self._name}.buffer: {self._arg_name(i)} must be a numpy "
                                 f"array of {self._dtype.name} (read in place), got {what}")
            nc = len(spec.shape)
            if x.ndim >= nc and x.shape[x.ndim - nc:] == spec.shape and x.size and \
                    not (x.flags.aligned and _core_contiguous(x, nc)):
                raise InvalidArgumentError(f"{self._name}.buffer: {self._arg_name(i)} must "
                                           "have contiguous core dimensions (it is read in "
                                           "place); pass np.ascontiguousarray of it")
        arrays, batch = self._check_inputs(args)  # shapes (nothing left to convert)
        if out is not None:
            given = self._flatten_out(out)
            for k, arr in given.items():
                _check_out(self._name, arr[0], arr[1], self._out_shape(k, batch),
                           self._out_dtypes[k])
            targets = [given[k][0] for k in range(len(self._out_specs))]
            for k, arr in enumerate(targets):
                if arr.size and (any(np.may_share_memory(arr, a)
                                     for a in list(arrays) + targets[:k]) or
                                 not (arr.flags.aligned and
                                      _core_contiguous(arr, len(self._out_specs[k].shape)))):
                    raise InvalidArgumentError(
                        f"{self._name}.buffer: output {k} must not overlap an argument or "
                        "another output and must have contiguous core dimensions")
            result = out
        else:
            targets = [aligned_empty(self._out_shape(k, batch), d)
                       for k, d in enumerate(self._out_dtypes)]
            result = _rebuild(self._structure, targets)
        return BufferCall(self, arrays, targets, batch, result)

    def _arg_name(self, i: int) -> str:
        nm = self._input_names[i]
        return f"argument {i}" + (f" ({nm!r})" if nm else "")

    def _check_inputs(self, args) -> tuple:
        if len(args) != len(self._in_specs):
            raise TypeError(
                f"{self._name} takes {len(self._in_specs)} array arguments "
                f"({', '.join(_show(s) for s in self._in_specs)}), got {len(args)}"
            )
        arrays, leads = [], []
        dtype = self._dtype
        for i, (x, spec) in enumerate(zip(args, self._in_specs)):
            if type(x) is np.ndarray and x.shape == spec.shape and x.dtype == dtype and \
                    x.flags.c_contiguous and x.flags.aligned:  # (one point, as it is)
                arrays.append(x)
                leads.append(())
                continue
            a = self._as_array(i, x, spec)
            arrays.append(a)
            leads.append(a.shape[: a.ndim - len(spec.shape)])
        batch = leads[0] if leads else ()
        if any(lead != batch for lead in leads):
            try:
                batch = np.broadcast_shapes(*leads)
            except ValueError:
                shapes = ", ".join(f"{self._arg_name(i)}: {arr.shape}"
                                   for i, arr in enumerate(arrays))
                raise ShapeError(
                    f"{self._name}: the leading (batch) dimensions of the arguments do not "
                    f"broadcast together ({shapes})"
                ) from None
        return arrays, tuple(batch)

    def _as_array(self, i: int, x, spec: TensorSpec) -> np.ndarray:
        a = x if type(x) is np.ndarray else np.asarray(x)
        if a.dtype.kind not in "biuf":
            raise DTypeError(
                f"{self._name}: {self._arg_name(i)} has dtype {a.dtype}; expected real numbers "
                f"(converted to {self._dtype.name})"
            )
        core = spec.shape
        nc = len(core)
        if a.ndim < nc or a.shape[a.ndim - nc:] != core:
            raise ShapeError(
                f"{self._name}: {self._arg_name(i)} has shape {a.shape}; expected "
                f"(..., {', '.join(map(str, core))}) -- core shape {core} after any batch "
                "dimensions"
            )
        if i < len(self._shared) and self._shared[i] and \
                any(d != 1 for d in a.shape[: a.ndim - nc]):
            raise ShapeError(
                f"{self._name}: {self._arg_name(i)} is one array for all points; pass it with "
                f"shape {core}, not {a.shape}")
        if a.dtype != self._dtype:
            a = a.astype(self._dtype, order="C")
        if not (a.flags.aligned and _core_contiguous(a, nc)):
            a = np.ascontiguousarray(a)
        return a

    def _check_outputs(self, out, batch: tuple, arrays: list) -> tuple:
        specs = self._out_specs
        if out is None:
            targets = [aligned_empty(self._out_shape(k, batch), d)
                       for k, d in enumerate(self._out_dtypes)]
            return targets, [], None
        given = self._flatten_out(out)
        targets, copies = [], []
        for k, (spec, dt) in enumerate(zip(specs, self._out_dtypes)):
            arr, path = given[k]
            _check_out(self._name, arr, path, self._out_shape(k, batch), dt)
            clash = any(np.may_share_memory(arr, a) for a in arrays) or any(
                np.may_share_memory(arr, t) for t in targets)
            if clash or not (arr.flags.aligned and _core_contiguous(arr, len(spec.shape))):
                tmp = np.empty(arr.shape, dtype=dt)
                copies.append((tmp, arr))
                arr = tmp
            targets.append(arr)
        return targets, copies, out

    def _flatten_out(self, out) -> dict:
        """``{output index: (array, path)}`` from ``out`` mirroring the structure, or else a
        flat list/tuple of arrays in output order."""
        found: dict = {}
        try:
            _flatten_like(self._structure, out, "out", found)
            return found
        except InvalidArgumentError:
            n = len(self._out_specs)
            if not (isinstance(out, (list, tuple)) and len(out) == n):
                raise
        return {k: (o, f"out[{k}]") for k, o in enumerate(out)}

    # ----- the native loop ----------------------------------------------------------------

    def _out_shape(self, k: int, batch: tuple) -> tuple:
        """Output ``k``'s shape for a call over ``batch`` (a total has no batch dimensions)."""
        spec = self._out_specs[k]
        return spec.shape if k < len(self._totals) and self._totals[k] else batch + spec.shape

    def _start_totals(self, targets: list, points: int) -> None:
        """Outputs summed over the points start from their reduction's initial value (a
        sum over no points is 0)."""
        for arr, kind in zip(targets, self._totals):
            if kind and arr is not None:
                arr[...] = _TOTAL_START[kind] if points else _TOTAL_EMPTY[kind]

    def _run(self, arrays: list, targets: list, batch: tuple) -> None:
        total = math.prod(batch)
        if self._totals:
            self._start_totals(targets, total)
        if total == 0:
            return
        bufs = arrays + targets
        pieces = self._n_pieces(total)
        full = self._full(bufs, batch)
        if full and pieces == 1:
            # the common case, kept short: one dense call over the whole batch
            if self._dense(total, self._ptr_type(*[a.ctypes.data for a in bufs])):
                raise _no_memory(self._name)
            return
        fn, calls = self._calls(bufs, batch, pieces, full)
        groups = [calls[i::pieces] for i in range(min(pieces, len(calls)))]
        parts = self._partial_totals(groups, targets, len(arrays)) if self._totals else []
        if _execute(fn, groups):
            raise _no_memory(self._name)
        for part in parts:  # in the order of the points they summed
            for k, arr in part.items():
                _TOTAL_COMBINE[self._totals[k]](targets[k], arr, out=targets[k])
            self._spare_totals.append(part)  # kept for the next call: no page faults

    def _partial_totals(self, groups: list, targets: list, n_in: int) -> list:
        """Each group of calls after the first accumulates its totals in arrays of its own
        (its calls' pointers changed to them): ``[{output: array}]`` per group, to be
        combined into the outputs after."""
        parts = []
        for calls in groups[1:]:
            part = self._spare_totals.pop() if self._spare_totals else {
                k: np.empty_like(targets[k]) for k, kind in enumerate(self._totals) if kind}
            self._start_totals([part.get(k) for k in range(len(targets))], 1)
            for c, call in enumerate(calls):
                ptrs = list(call[1])
                for k, arr in part.items():
                    ptrs[n_in + k] = arr.ctypes.data
                calls[c] = (call[0], self._ptr_type(*ptrs)) + tuple(call[2:])
            parts.append(part)
        return parts

    def _full(self, bufs: list, batch: tuple) -> bool:
        """Whether every buffer holds the whole batch, C-contiguous (the dense layout)."""
        nb = len(batch)
        return all(a.ndim == nb + nc and a.shape[:nb] == batch and a.flags.c_contiguous
                   for a, nc in zip(bufs, self._core_ndims))

    def _calls(self, bufs: list, batch: tuple, pieces: int, full: bool) -> tuple:
        """``(entry point, argument tuples)`` covering a non-empty batch in about ``pieces``
        calls per inner run (``full``: :meth:`_full` of the buffers)."""
        dims = ([(math.prod(batch), self._sizes)] if full
                else _collapse(batch, bufs, self._core_ndims, self._itemsizes))
        n, strides = dims[-1]
        dense = len(dims) == 1 and strides == self._sizes
        stride_arr = self._stride_type(*strides)
        addrs = [a.ctypes.data for a in bufs]
        split = -(-pieces // math.prod(length for length, _ in dims[:-1]))
        calls = []
        for base in _outer_offsets(dims[:-1], len(bufs)):
            for count, ptrs in self._chunks(addrs, base, n, strides, split):
                calls.append((count, self._ptr_type(*ptrs)) + (() if dense else (stride_arr,)))
        return (self._dense if dense else self._strided), calls

    def _chunks(self, addrs: list, base: list, n: int, strides: list, split: int) -> list:
        """``split`` pieces of one inner run of ``n`` points: ``(count, pointers)``."""
        step = -(-n // split)
        isz = self._itemsizes
        out = []
        for start in range(0, n, step):
            ptrs = [a + (b + start * s) * w for a, b, s, w in zip(addrs, base, strides, isz)]
            out.append((min(step, n - start), ptrs))
        return out

    def _n_pieces(self, n: int) -> int:
        """How many threads ``n`` points are worth (1 below :data:`_GRAIN` work each)."""
        if self._threads == 1:
            return 1
        limit = self._threads or _CPUS
        return max(1, min(limit, n * self._cost // _GRAIN, n))

    # ----- pickling and files -------------------------------------------------------------

    def _fields(self) -> dict:
        """This function's :data:`~symtape.codegen.archive.FIELDS` (its constructor's
        keywords)."""
        return {"plan": self._plan, "name": self._name, "dtype": self._dtype.name,
                "fastmath": self._fastmath, "threads": self._threads,
                "structure": self._structure, "input_names": self._input_names,
                "output_names": self._output_names, "ir": self._ir, "obj": self._obj}

    def __reduce__(self):
        return restore, (archive.state(self._fields()),)

    def save(self, path: str | os.PathLike) -> None:
        """Writes this function to ``path`` as data only (plan, layout, names, IR and object
        code); read it with :func:`load`. The object code is signed with this user's cache
        secret, so :func:`load` by the same user on the same machine reuses it.

        >>> import tempfile, os
        >>> from symtape.element import graph
        >>> x = graph.Leaf.new("x")
        >>> f = compile_atoms([np.array(graph.mul(x, x), dtype=object)],
        ...                   [np.array(x, dtype=object)])
        >>> path = os.path.join(tempfile.mkdtemp(), "square.st")
        >>> f.save(path)
        >>> float(load(path)(4.0))
        16.0
        """
        straight = self._straight_line("save")
        if straight is not self._plan:  # a loop plan is saved as its element view
            compile_plan(straight, input_names=self._input_names,
                         output_names=self._output_names, structure=self._structure,
                         dtype=self._dtype.name, fastmath=self._fastmath,
                         threads=self._threads, name=self._name).save(path)
            return
        archive.write(self._fields(), path)


def _render(plan, symbol: str, dtype: str, fastmath: bool) -> str:
    """The IR of a straight-line or a loop plan."""
    if isinstance(plan, LoopPlan):
        return loops.render(plan, symbol, dtype, fastmath)
    return kernel.render(plan, symbol, dtype, fastmath)


def restore(state: dict) -> CompiledFunction:
    """A compiled function from its pickled state (what ``pickle`` calls; see
    :func:`~symtape.codegen.archive.restore`).

    >>> from symtape.element import graph
    >>> x = graph.Leaf.new("x")
    >>> f = compile_atoms([np.array(graph.mul(x, x), dtype=object)],
    ...                   [np.array(x, dtype=object)])
    >>> hook, (state,) = f.__reduce__()
    >>> hook is restore, float(restore(state)(3.0))
    (True, 9.0)
    """
    return archive.restore(state, CompiledFunction)


def load(path: str | os.PathLike) -> CompiledFunction:
    """Reads a function written by :meth:`CompiledFunction.save`, running nothing from the
    file: its plan is checked and the code generated again from it, and the stored object
    code is used only where this user signed it for this host and that very code (see
    :func:`~symtape.codegen.archive.read`). Anything malformed raises
    :class:`~symtape.base.errors.SerializationError` naming the file and the fault.

    ``pickle.loads`` of a pickled compiled function is different: pickle is Python's
    convention for trusted transport (multiprocessing, dask) and uses its object code as is;
    ``load`` is the safe path for files.

    >>> import tempfile, os
    >>> from symtape.base.errors import SerializationError
    >>> path = os.path.join(tempfile.mkdtemp(), "junk.st")
    >>> with open(path, "wb") as fh:
    ...     _ = fh.write(b"junk")
    >>> try:
    ...     load(path)
    ... except SerializationError as exc:
    ...     print("not a symtape compiled function" in str(exc))
    True
    """
    return CompiledFunction(**archive.read(path))


# --------------------------------------------------------------------------------------------
# Layout helpers
# --------------------------------------------------------------------------------------------


def _show(spec: TensorSpec) -> str:
    shape = "(" + ", ".join(map(str, spec.shape)) + ("," if len(spec.shape) == 1 else "") + ")"
    return f"{spec.name}: {shape}" if spec.name else shape


def _check_out(fname: str, arr, path: str, shape: tuple, dtype: np.dtype) -> None:
    if not isinstance(arr, np.ndarray):
        raise InvalidArgumentError(f"{fname}: {path} must be a numpy array, got "
                                   f"{type(arr).__name__}")
    if arr.shape != shape:
        raise ShapeError(f"{fname}: {path} has shape {arr.shape}; the result has shape {shape}")
    if arr.dtype != dtype:
        raise DTypeError(f"{fname}: {path} has dtype {arr.dtype}; the result has dtype {dtype}")
    if not arr.flags.writeable:
        raise InvalidArgumentError(f"{fname}: {path} is read-only")


def _core_contiguous(a: np.ndarray, nc: int) -> bool:
    """True when the last ``nc`` dimensions of ``a`` are laid out as a C-contiguous block."""
    expected = a.itemsize
    for d in range(a.ndim - 1, a.ndim - nc - 1, -1):
        if a.shape[d] != 1 and a.strides[d] != expected:
            return False
        expected *= a.shape[d]
    return True


def _collapse(batch: tuple, bufs: list, core_ndims: list, itemsizes: list) -> list:
    """The batch as few ``(length, element strides per buffer)`` dims as the strides allow,
    outermost first; broadcast dimensions have stride 0."""
    nb = len(batch)
    per_dim = []
    for d in range(nb):
        if batch[d] == 1:
            continue
        strides = []
        for a, nc, w in zip(bufs, core_ndims, itemsizes):
            pad = nb - (a.ndim - nc)
            if d < pad or a.shape[d - pad] == 1:
                strides.append(0)
            else:
                strides.append(a.strides[d - pad] // w)
        per_dim.append((batch[d], strides))
    merged: list = []
    for length, strides in per_dim:
        if merged and all(p == s * length for p, s in zip(merged[-1][1], strides)):
            merged[-1] = (merged[-1][0] * length, strides)
        else:
            merged.append((length, strides))
    return merged or [(1, [0] * len(bufs))]


def _execute(fn, groups: list) -> int:
    """Runs each group of calls in order, the groups in parallel (the first on this thread);
    nonzero when a kernel found no memory."""
    if len(groups) == 1:
        return _run_group(fn, groups[0])
    futures = [_pool().submit(_run_group, fn, g) for g in groups[1:]]
    status = _run_group(fn, groups[0])
    for fut in futures:
        status |= fut.result()
    return status


def _run_group(fn, calls: list) -> int:
    """Runs the calls in order; their status (0, or 1 when a kernel found no memory)."""
    for args in calls:
        if fn(*args):
            return 1
    return 0


def _no_memory(name: str) -> MemoryError:
    return MemoryError(f"compiled function {name!r}: no memory for its lane buffers")


def _outer_offsets(dims: list, n_bufs: int):
    """Element offsets of every buffer for each index of the outer dims."""
    if not dims:
        yield [0] * n_bufs
        return
    for index in itertools.product(*[range(length) for length, _ in dims]):
        offs = [0] * n_bufs
        for i, (_, strides) in zip(index, dims):
            offs = [o + i * s for o, s in zip(offs, strides)]
        yield offs
