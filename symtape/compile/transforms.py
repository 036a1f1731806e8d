"""The derivative transforms: ``st.grad``, ``st.jacobian``, ``st.hessian``, ``st.hvp``,
``st.derivative`` and ``st.export_c``.

Each traces the function on placeholders (:func:`symtape.compile.function.placeholders`),
takes its derivatives on tapes -- nested batched sweeps, Taylor mode for higher orders, one
sweep per colour for sparse Jacobians and Hessians -- and compiles them with
:func:`symtape.compile.function.compile`. Without ``input_signature`` a :class:`Transform`
traces once per new core-shape signature.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable

import numpy as np

from symtape import ops
from symtape.base import progress
from symtape.base.errors import CompileError, InvalidArgumentError, ShapeError
from symtape.base.lazy import LazyModule
from symtape.codegen import (
    CompiledFunction, TensorSpec, c99, c_loops, casadi_abi, compile_atoms,
)
from symtape.compile import strategy
from symtape.compile.function import (
    Function, SparseFunction, common_dtype, compile_options, compile_with, fn_name,
    input_atoms, placeholders, signature_specs, traced_code,
)
from symtape.core import node as N
from symtape.core.variables import Tensor, symbol
from symtape.derivatives import sparsity
from symtape.derivatives.tape import GradientTape, UnconnectedGradients, symmetric

G = LazyModule("G", globals(), "symtape.element.graph")
taylor = LazyModule("taylor", globals(), "symtape.derivatives.taylor")

__all__ = ["grad", "jacobian", "hessian", "hvp", "derivative", "export_c", "Transform",
           "checked_result"]

# --------------------------------------------------------------------------------------------
# Derivative transforms
# --------------------------------------------------------------------------------------------


def _argnums(argnums, n: int) -> tuple[tuple, bool]:
    single = isinstance(argnums, (int, np.integer))
    nums = (int(argnums),) if single else tuple(int(a) for a in argnums)
    for a in nums:
        if not -n <= a < n:
            raise InvalidArgumentError(f"argnums {a} out of range for a function of {n} "
                                       "arguments")
    return tuple(a % n for a in nums), single


def checked_result(y, what: str, scalar: bool = False) -> Tensor:
    """``y``, checked to be what a derivative transform differentiates: one tensor (a
    scalar for gradients and Hessians)."""
    if not isinstance(y, Tensor):
        raise InvalidArgumentError(f"{what}: the function must return one tensor, got "
                                   f"{type(y).__name__}")
    if scalar and y.size != 1:
        raise ShapeError(f"{what}: the function must return a scalar, got shape {y.shape} "
                         "(use st.jacobian for vector-valued functions)")
    return y


def _derivatives(fn, xs, nums, single, order: int, scalar_only: bool, what: str):
    """Trace ``fn(*xs)`` and take ``order`` nested Jacobians with respect to ``xs[nums]``."""
    wrt = [xs[i] for i in nums]
    tapes = [GradientTape(persistent=True) for _ in range(order)]
    with contextlib.ExitStack() as stack, traced_code(what):
        for t in tapes:
            stack.enter_context(t)
        y = checked_result(fn(*xs), what, scalar_only)
        ds = [y]
        for k in reversed(range(order)):
            nxt = []
            for d in ds:
                for w in wrt:
                    nxt.append(tapes[k].jacobian(d, w, unconnected_gradients="zero"))
            ds = nxt
    if order == 2 and scalar_only:  # a Hessian's diagonal blocks are symmetric
        ds = [symmetric(d) if i // len(wrt) == i % len(wrt) else d for i, d in enumerate(ds)]
    if single and order == 1:
        return ds[0]
    if order == 1:
        return tuple(ds)
    return ds[0] if single or order == 0 else tuple(ds)


def _order(order) -> int:
    """A derivative order: a non-negative int (0 is the function itself)."""
    if isinstance(order, (bool, np.bool_)) or not isinstance(order, (int, np.integer)):
        raise TypeError(f"st.derivative: order must be an int, got {order!r} of type "
                        f"{type(order).__name__}")
    if order < 0:
        raise ValueError(f"st.derivative: order must be >= 0, got {order}")
    return int(order)


class Transform:
    """A derivative transform traced on first call for each new core-shape signature (when
    no ``input_signature`` was given); then a :class:`CompiledFunction` runs."""

    def __init__(self, tracer: Callable[[list], CompiledFunction], what: str,
                 name: str = "f") -> None:
        self._tracer = tracer
        self._what = what
        self._name = name
        self._compiled: dict[tuple, CompiledFunction] = {}
        self._last: CompiledFunction | None = None

    def __call__(self, *args, out=None):
        key = []
        for a in args:  # floats and float64 arrays go straight to a compiled function
            t = type(a)
            if t is float or t is np.float64:
                key.append(())
            elif t is np.ndarray and a.dtype == np.float64:
                key.append(a.shape)
            else:
                break
        else:
            compiled = self._compiled.get(tuple(key))
            if compiled is not None:
                self._last = compiled
                return compiled(*args, out=out)
        arrays = [np.asarray(a.numpy() if isinstance(a, Tensor) else a, dtype=np.float64)
                  for a in args]
        key = tuple(a.shape for a in arrays)
        compiled = self._compiled.get(key)
        if compiled is None:
            compiled = self._compiled[key] = self._tracer([TensorSpec(k) for k in key])
        self._last = compiled
        return compiled(*arrays, out=out)

    def __repr__(self) -> str:
        """Names the transform and the core shapes it has compiled.

        >>> import symtape as st
        >>> def energy(x):
        ...     return st.reduce_sum(x ** 4)
        >>> h = st.hessian(energy); h
        <st.hessian of energy: not traced yet>
        >>> _ = h(np.ones(3)); h
        <st.hessian of energy: compiled for core shapes [((3,),)]>
        """
        state = f"compiled for core shapes {list(self._compiled)}" if self._compiled else \
            "not traced yet"
        return f"<{self._what} of {self._name}: {state}>"

    def get_concrete_function(self, *signature) -> CompiledFunction:
        """The compiled function for core shapes ``signature``."""
        specs = signature_specs(signature, self._what)
        key = tuple(tuple(s.shape) for s in specs)
        if key not in self._compiled:
            self._compiled[key] = self._tracer(specs)
        return self._compiled[key]

    def __getattr__(self, name):
        last = self.__dict__.get("_last")
        if last is None:
            raise AttributeError(f"{self._what} has not been traced yet: call it once or give "
                                 f"input_signature to read .{name}")
        return getattr(last, name)


def _sparse_derivative(fn, xs: list, num: int, hessian: bool, what: str, kw: dict,
                       log: strategy.StrategyLog):
    """The Jacobian of ``fn`` (or the Hessian of a scalar ``fn``) with respect to
    ``xs[num]``, compiled as its structurally non-zero elements: the pattern read off the
    DAG, its rows coloured, one batched sweep with a seed per colour (:mod:`.sparsity`;
    the paths taken recorded in ``log``)."""
    w = xs[num]
    outer, inner = GradientTape(persistent=True), GradientTape(persistent=True)
    with traced_code(what), outer:
        with inner:
            y = checked_result(fn(*xs), what, hessian)
        target = inner.gradient(y, w, unconnected_gradients="zero") if hessian else y
    tape = outer if hessian else inner
    largest = max((node.size for node in N.ancestry(target._node)), default=0)
    acc = None
    if strategy.try_accumulation(w.size, w.size, largest):  # (were every column a colour)
        with traced_code(what):
            acc = tape._accumulated(target, w)
    # the pattern: the accumulated one where there is one (a subset of the dependencies',
    # without the paths whose rules gave structural zeros; lighter to find than the
    # dependencies' big ints), else the dependencies'
    rows = sparsity.dependency_rows(target._node, w._node) if acc is None else \
        np.split(acc.cols, np.searchsorted(acc.rows, np.arange(1, target.size))) \
        if target.size else []
    colour = sparsity.colour_rows(rows, w.size)
    n = _colours(colour)
    star = sparsity.star_colour(rows, w.size) if hessian and len(colour) else None
    fewest = n if star is None else min(n, _colours(star))
    if acc is not None and strategy.try_accumulation(fewest, w.size, largest):
        log.add(strategy.accumulation(hessian, len(rows), fewest, acc.products),
                kw.get("name"))
        return _sparse_function(acc.values, acc.rows, acc.cols, target, w, xs, log, kw)
    # element (i, j) is entry j of colour i's product (or, of a star-coloured Hessian,
    # perhaps entry i of colour j's); taken in that order (colour by colour), they are a
    # few runs of the products
    positions = sparsity.positions(rows, colour, w.size)
    path = strategy.colouring(hessian, len(rows), n, None if star is None else _colours(star))
    if path.name == "star-coloured-hessian":
        mirrored = sparsity.positions(rows, star, w.size, symmetric=True)
        if mirrored is None:
            path = strategy.colouring(hessian, len(rows), n, unseparated=True)
        else:
            colour, positions = star, mirrored
    n = _colours(colour)
    refused = strategy.sweep_refused(n, largest)
    if refused is not None:
        raise CompileError(f"{what}: the sparse {'Hessian' if hessian else 'Jacobian'} is "
                           f"too large to sweep: {refused}")
    log.add(path, kw.get("name"))
    seeds = np.zeros((n, target.size), dtype=np.int64)
    seeds[colour, np.arange(target.size)] = 1
    with traced_code(what):
        (compressed,) = tape._stacked_cotangents(
            target, [w], seeds.reshape((n,) + tuple(target.shape)),
            UnconnectedGradients.ZERO, one_hot=False)
    counts = np.array([len(r) for r in rows], dtype=np.int64)
    row_of = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
    cols = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    order = np.argsort(positions, kind="stable")
    row_of, cols, positions = row_of[order], cols[order], positions[order]
    values = ops.gather_flat.bind(compressed, idx=positions)
    return _sparse_function(values, row_of, cols, target, w, xs, log, kw)


def _sparse_function(values, row_of: np.ndarray, cols: np.ndarray, target, w, xs: list,
                     log: strategy.StrategyLog, kw: dict) -> SparseFunction:
    """The compiled non-zeros ``values`` of ``d target / d w`` at rows ``row_of`` and
    columns ``cols`` (flat indices), as a sparse function's output."""
    compiled = compile_with(log, values, xs, **kw)
    indices = np.concatenate([np.stack(np.unravel_index(row_of, target.shape), axis=-1),
                              np.stack(np.unravel_index(cols, w.shape), axis=-1)], axis=1) \
        if len(cols) else np.zeros((0, target.ndim + w.ndim), dtype=np.int64)
    shape = tuple(target.shape) + tuple(w.shape)
    out = SparseFunction(compiled, [(indices.reshape(len(cols), len(shape)), shape)], 0,
                         [target.ndim])
    out.strategies = log.taken
    return out


def _colours(colour: np.ndarray) -> int:
    """How many colours a colouring of rows uses."""
    return int(colour.max()) + 1 if len(colour) else 0


def _taylor_derivative(fn, xs: list, num: int, order: int, what: str, kw: dict):
    """``d^order f / dx^order`` of argument ``x = xs[num]`` by Taylor mode on the element
    view (:mod:`.taylor`): of a scalar ``x``, ``order!`` times the last Taylor coefficient
    of each output element along ``x + t``; of a vector, every mixed partial interpolated
    from the series along ``C(n + order - 1, order)`` directions (:func:`taylor.partials`),
    spread over the symmetric derivative tensor. None when some head has no Taylor rule or
    a user's derivative rule is in the way (nested sweeps then)."""
    with traced_code(what):
        y = checked_result(fn(*xs), what)
    x = xs[num]
    out = _taylor_atoms(y, [x._atoms.flat[0]], [G.ONE], order) if x.size == 1 else \
        _mixed_atoms(y, x, order)
    if out is None:
        return None
    in_atoms, in_names = input_atoms(xs)
    shape = tuple(y.shape) + tuple(x.shape) * order
    return compile_atoms([out.reshape(shape)], in_atoms, input_names=in_names,
                         output_names=[y._name], structure=0, **kw)


def _mixed_atoms(y: Tensor, x: Tensor, order: int):
    """The partials of ``order`` of each element of ``y`` in the elements of ``x``, shape
    ``(y.size,) + (x.size,) * order``, or None when Taylor mode does not apply."""
    try:
        indices, parts = taylor.partials(list(y._atoms.flat), list(x._atoms.flat), order)
    except taylor.Unsupported:
        return None
    where = {i: k for k, i in enumerate(indices)}
    n = x.size
    out = np.empty((y.size,) + (n,) * order, dtype=object)
    for idx in np.ndindex(*(n,) * order):
        k = where[tuple(np.bincount(np.array(idx, dtype=np.int64), minlength=n).tolist())]
        for e in range(y.size):
            out[(e,) + idx] = parts[e][k]
    return out


def _taylor_atoms(y: Tensor, leaves: list, tangents: list, order: int):
    """``order!`` times the last Taylor coefficient of each element of ``y`` along
    ``leaves + t * tangents`` (flat), or None when Taylor mode does not apply."""
    try:
        coefs = taylor.coefficients(list(y._atoms.flat), leaves, tangents, order)
    except taylor.Unsupported:
        return None
    scale = G.number(math.factorial(order))
    out = np.empty(len(coefs), dtype=object)
    for i, c in enumerate(coefs):
        out[i] = G.monomial(scale, [(c[-1], G.ONE)])
    return out


def _with_vector(fn, specs: list, argnums, what: str, usage: str) -> tuple:
    """Placeholders of a transform called as ``(*args, v)``: ``(xs, num, v)``, ``v`` shaped
    like argument ``num`` (``usage`` says what to pass when ``v`` is missing)."""
    if len(specs) < 2:
        raise InvalidArgumentError(f"{what}: {usage}")
    (num,), _ = _argnums(argnums, len(specs) - 1)
    xs = placeholders(fn, specs[:-1])
    x = xs[num]
    if tuple(specs[-1].shape) != tuple(x.shape):
        raise ShapeError(f"{what}: v has shape {tuple(specs[-1].shape)}, argument "
                         f"{num} has shape {tuple(x.shape)}")
    return xs, num, symbol(specs[-1].name or "v", shape=tuple(x.shape), dtype=x.dtype)


def export_c(functions: dict, path, abi: str = "batched", dtype: str | None = None,
             loops: bool | None = None) -> tuple:
    """Writes compiled functions as one C program: ``path`` with ``.h`` (their
    declarations) and ``.c`` (their definitions and the helpers they share, needing only
    ``<math.h>`` and ``<stdint.h>``, and ``<stdlib.h>`` for loops whose temporaries are
    allocated per call); ``functions`` maps each C name to a compiled function
    (``st.compile``, a transform with ``input_signature``, a sparse one, an ``st.function``
    traced once or with an ``input_signature``). Returns the two paths.

    ``abi="batched"`` (the default) gives each function the layout of
    :meth:`CompiledFunction.c_source`'s: ``void name(int64_t n, const double *x, ...,
    double *out...)`` over ``n`` points (a sparse function's outputs are its values).
    ``abi="casadi"`` writes CasADi's external-function ABI, which ``casadi.external(name,
    "lib.so")`` loads: ``int name(const casadi_real** arg, casadi_real** res, casadi_int*
    iw, casadi_real* w, int mem)`` for one point, with ``name_n_in``, ``name_sparsity_out``,
    ``name_work`` and the rest of CasADi's companions; arguments are CasADi matrices stored
    column by column (a vector is a column), a sparse Jacobian's or Hessian's output holds
    its nonzeros in its compressed-column pattern, and every temporary is in the caller's
    work vector ``w`` (see :mod:`symtape.codegen.casadi_abi`). ``dtype``: ``"float64"`` or
    ``"float32"``, the C type the code computes in (``casadi_real`` in the CasADi ABI);
    default: each function's own (one for all functions in the CasADi ABI).

    ``loops``: whether a function compiled as loop nests over large tensors is written as
    those loops (:mod:`symtape.codegen.c_loops`: C that grows with the loop plan, not with
    the elements: an 8-64-64-1 tanh MLP's input gradient is 12 KB with the weights as
    arguments, 217 KB with them as constants, mostly their literals, against 1.0 MB) or as
    its straight-line element view. The default: loops in the batched ABI; the element view
    in the CasADi ABI, whose work vector ``w`` then holds only the values alive at once (192
    reals for that gradient, against 1,088 for its loop plan's temporaries). Plans with
    outputs summed over all points or arguments shared by all points, and sparse functions,
    are always written from their element view.

    A C name that would not compile -- a C or C++ keyword (``int``, ``restrict``,
    ``class``), a reserved identifier (``_X``, ``__x``), a name of ``<math.h>`` or
    ``<stdint.h>`` (``sin``, ``NAN``, ``int64_t``) or of the generated code (``n``, ``j``,
    ``v0``, ``st_*``, ``casadi_*``), for a function or an argument, or two functions whose
    CasADi companions clash (``f`` and ``f_work``) -- and a file name other than ASCII
    letters, digits, ``_``, ``.`` and ``-`` raise ``InvalidArgumentError`` naming it.

    >>> import symtape as st, tempfile, pathlib
    >>> f = st.grad(lambda x: st.reduce_sum(x ** 3), input_signature=[st.TensorSpec((2,))])
    >>> h = st.hessian(lambda x: st.reduce_sum(x ** 3), input_signature=[st.TensorSpec((2,))])
    >>> header, source = st.export_c({"g": f, "H": h}, pathlib.Path(tempfile.mkdtemp()) / "cube")
    >>> [line for line in header.read_text().splitlines() if line.startswith("void")]
    ['void g(int64_t n, const double *restrict x, double *restrict out0);', \
'void H(int64_t n, const double *restrict x, double *restrict out0);']
    >>> hs = st.hessian(lambda x: st.reduce_sum(x ** 3), sparse=True,
    ...                 input_signature=[st.TensorSpec((2,))])
    >>> header, source = st.export_c({"H": hs}, pathlib.Path(tempfile.mkdtemp()) / "cube",
    ...                              abi="casadi")
    >>> print(header.read_text().split("/* H:")[1].split(chr(10))[0])
    (x[2x1])->(o0[2x2, 2 nonzeros])
    """
    import pathlib

    if abi not in ("batched", "casadi"):
        raise InvalidArgumentError(f"st.export_c: abi must be 'batched' or 'casadi', got "
                                   f"{abi!r}")
    if dtype is not None and dtype not in ("float64", "float32"):
        raise InvalidArgumentError(f"st.export_c: dtype must be None, 'float64' or 'float32', "
                                   f"got {dtype!r}")
    if loops not in (None, True, False):
        raise InvalidArgumentError(f"st.export_c: loops must be None, True or False, got "
                                   f"{loops!r}")
    if loops is None:
        loops = abi == "batched"
    if not isinstance(functions, dict) or not functions:
        raise InvalidArgumentError("st.export_c: functions must be a non-empty dict of C "
                                   "name -> compiled function")
    base = pathlib.Path(path)
    if base.suffix in (".c", ".h"):
        base = base.with_suffix("")
    c99.check_file_stem(base.name, "st.export_c")
    kernels = []
    for key, fn in functions.items():  # (a dict's keys: no name twice)
        problem = c99.name_problem(key)
        if problem:
            raise InvalidArgumentError(f"st.export_c: the C function name {key!r} {problem}; "
                                       "choose another name")
        patterns = fn.sparsity if isinstance(fn, SparseFunction) else None
        compiled = _exportable(fn, key)
        plan, name, own, ins, outs = _c_kernel(compiled, key, loops and patterns is None)
        kernels.append((plan, name, dtype or own, ins, outs, patterns,
                        _origin(fn, compiled)))
    # (base "lib.v2" writes lib.v2.h and lib.v2.c: only a .c or .h suffix is replaced)
    header, source = base.with_name(f"{base.name}.h"), base.with_name(f"{base.name}.c")
    if abi == "casadi":
        h_text, c_text = casadi_abi.render(kernels, header.name, _one_dtype(kernels),
                                           "st.export_c", loops=c_loops.render_casadi)
    else:
        h_text, c_text = c99.render_many([k[:5] + k[6:] for k in kernels], header.name,
                                         "st.export_c", loops=c_loops.render_function)
    header.write_text(h_text)
    source.write_text(c_text)
    return header, source


def _c_kernel(compiled: CompiledFunction, key: str, loops: bool) -> tuple:
    """``(plan, name, dtype, input names, output names)`` of ``compiled``'s C: with
    ``loops``, its loop plan where C can hold it (the C then grows with the plan, not with
    the elements), else its straight-line element view."""
    specs = [s for s in compiled.inputs + compiled.outputs if s.dtype != "bool"]
    if loops and specs and c_loops.exportable(compiled.plan):
        return (compiled.plan, key, specs[0].dtype, tuple(s.name for s in compiled.inputs),
                tuple(s.name for s in compiled.outputs))
    return compiled.c_kernel("st.export_c", name=key)


def _origin(fn, compiled: CompiledFunction) -> str:
    """What ``fn`` computes, for the comment above its C function."""
    ins = ", ".join(f"{spec.name or f'in{k}'}: {spec.dtype}{list(spec.shape)}"
                    for k, spec in enumerate(compiled.inputs))
    kind = "the nonzeros of " if isinstance(fn, SparseFunction) else ""
    return f"{kind}symtape's {compiled.name}({ins})"


def _one_dtype(kernels: list) -> str:
    """The one C type of functions written together in the CasADi ABI."""
    dtypes = sorted({k[2] for k in kernels})
    if len(dtypes) > 1:
        raise InvalidArgumentError(
            f"st.export_c: the functions compute in {' and '.join(dtypes)}, but one CasADi "
            "program has one casadi_real; pass dtype='float64' or dtype='float32'")
    return dtypes[0]


def _exportable(fn, key: str) -> CompiledFunction:
    """The compiled function behind ``fn`` (for :func:`export_c`)."""
    if isinstance(fn, SparseFunction):
        fn = fn.compiled
    if isinstance(fn, Transform):
        if len(fn._compiled) != 1:
            raise InvalidArgumentError(
                f"st.export_c: {key}: a transform without input_signature has "
                f"{len(fn._compiled)} compiled shapes; give input_signature (or call it once)")
        (fn,) = fn._compiled.values()
    if isinstance(fn, Function):
        compiled = fn.single_trace()
        signature = fn.input_signature
        if compiled is None and not fn.traced_signatures and signature is not None and all(
                s.shape is not None and None not in s.shape for s in signature):
            compiled = fn.get_concrete_function(*signature)  # its one trace, made now
        if compiled is None:
            raise InvalidArgumentError(
                f"st.export_c: {key}: an st.function is exported from one trace; pass "
                "f.get_concrete_function(*shapes)")
        fn = compiled
    if not isinstance(fn, CompiledFunction):
        raise InvalidArgumentError(f"st.export_c: {key} is a {type(fn).__name__}, not a "
                                   "compiled function")
    return fn


def _transform(fn, argnums, input_signature, order, scalar_only, what, opts,
               sparse: bool = False, explain: bool = False):
    if not callable(fn):
        raise InvalidArgumentError(f"{what}: the first argument must be a function")

    def tracer(specs: list[TensorSpec]) -> CompiledFunction:
        with progress.task(f"{what} of {fn_name(fn)}"):
            return traced(specs)

    def traced(specs: list[TensorSpec]) -> CompiledFunction:
        nums, single = _argnums(argnums, len(specs))
        xs = placeholders(fn, specs)
        kw = {"dtype": common_dtype(specs), "name": f"{fn_name(fn)}_{what.split('.')[-1]}",
              **opts}
        log = strategy.StrategyLog(explain)
        if sparse:
            if not single:
                raise InvalidArgumentError(f"{what}: sparse=True takes one argnums (an int)")
            return _sparse_derivative(fn, xs, nums[0], order == 2, what, kw, log)
        path = strategy.sweeps(order, scalar_only) if what != "st.derivative" else \
            strategy.derivative(order, xs[nums[0]].size, single, scalar_only)
        log.add(path, kw["name"])
        if path.name in ("taylor", "mixed-directions"):
            compiled = _taylor_derivative(fn, xs, nums[0], order, what, kw)
            if compiled is not None:
                log.add(strategy.elements_only("Taylor-mode coefficients"), kw["name"])
                compiled.strategies = log.taken
                return compiled
            log.add(strategy.taylor_fallback(order, scalar_only), kw["name"])
        progress.stage("tracing and derivatives")
        out = _derivatives(fn, xs, nums, single, order, scalar_only, what)
        return compile_with(log, out, xs, **kw)

    if input_signature is not None:
        return tracer(signature_specs(input_signature, what))
    return Transform(tracer, what, fn_name(fn))


def grad(f: Callable, argnums=0, *, input_signature=None, fastmath: bool = False,
         threads: int | None = None, name: str | None = None, explain: bool = False):
    """The compiled gradient of a scalar function with respect to argument(s) ``argnums``.
    ``explain=True`` prints the paths taken (:mod:`symtape.compile.strategy`) as they are
    chosen; the compiled function's ``strategies`` lists them.

    >>> import symtape as st
    >>> def rosen(x):
    ...     return st.reduce_sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
    >>> g = st.grad(rosen, input_signature=[st.TensorSpec((3,))])
    >>> g(np.array([[0.5, 1.0, 1.5], [1.0, 1.0, 2.0]]))
    array([[-151.,  -50.,  100.],
           [   0., -400.,  200.]])
    >>> g = st.grad(rosen, input_signature=[st.TensorSpec((3,))], explain=True)
    ... # doctest: +ELLIPSIS
    rosen_grad: reverse-sweep: a gradient: one reverse sweep
    rosen_grad: element-kernel: about ... atoms <= POINT_LOOP_MIN_ATOMS=...
    >>> [s.name for s in g.strategies]
    ['reverse-sweep', 'element-kernel']
    """
    return _transform(f, argnums, input_signature, 1, True, "st.grad",
                      compile_options(fastmath, threads, name, "st.grad"), explain=explain)


def jacobian(f: Callable, argnums=0, *, input_signature=None, fastmath: bool = False,
             threads: int | None = None, sparse: bool = False, name: str | None = None,
             explain: bool = False):
    """The compiled Jacobian ``dy/dx`` (shape ``y.shape + x.shape``); ``sparse=True``
    returns :class:`SparseResult` s of its structurally non-zero elements, computed with one
    sweep per colour of a colouring of its rows (see :mod:`symtape.derivatives.sparsity`).
    ``explain=True`` prints the paths taken (:mod:`symtape.compile.strategy`) as they are
    chosen; the compiled function's ``strategies`` lists them.

    >>> import symtape as st
    >>> J = st.jacobian(lambda x: st.stack([x[0] * x[1], st.sin(x[0])]),
    ...                 input_signature=[st.TensorSpec((2,))])
    >>> J(np.array([0.0, 2.0]))
    array([[2., 0.],
           [1., 0.]])
    >>> J.strategies[0].name
    'batched-sweep'
    """
    return _transform(f, argnums, input_signature, 1, False, "st.jacobian",
                      compile_options(fastmath, threads, name, "st.jacobian"), sparse, explain)


def hessian(f: Callable, argnums=0, *, input_signature=None, fastmath: bool = False,
            threads: int | None = None, sparse: bool = False, name: str | None = None,
            explain: bool = False):
    """The compiled Hessian of a scalar function (shape ``x.shape * 2``): the Jacobian of
    its gradient, all Hessian-vector products with unit vectors in one batched sweep.
    ``sparse=True`` returns :class:`SparseResult` s of its structurally non-zero elements,
    one sweep per colour (a tridiagonal Hessian takes 3). ``explain=True`` prints the paths
    taken (:mod:`symtape.compile.strategy`) as they are chosen; the compiled function's
    ``strategies`` lists them.

    >>> import symtape as st
    >>> H = st.hessian(lambda x: x[0] ** 2 * x[1], input_signature=[st.TensorSpec((2,))])
    >>> H(np.array([1.0, 3.0]))
    array([[6., 2.],
           [2., 0.]])
    >>> def rosen(x):
    ...     return st.reduce_sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)
    >>> Hs = st.hessian(rosen, sparse=True, input_signature=[st.TensorSpec((5,))])
    >>> r = Hs(np.ones(5))
    >>> len(r.values), r.to_dense()[1, :3]
    (13, array([-400., 1002., -400.]))
    >>> Hs.strategies[0]
    Strategy(name='coloured-hessian', reason='3 colours: 3 sweeps for 5 rows', points=0)
    """
    return _transform(f, argnums, input_signature, 2, True, "st.hessian",
                      compile_options(fastmath, threads, name, "st.hessian"), sparse, explain)


def hvp(f: Callable, argnums: int = 0, *, input_signature=None, fastmath: bool = False,
        threads: int | None = None, name: str | None = None, explain: bool = False):
    """The compiled Hessian-vector product ``H(x) v`` of a scalar function, called as
    ``hvp(*args, v)`` with ``v`` shaped like argument ``argnums``: the gradient of
    ``<grad f(x), v>`` (reverse over reverse; a few times the cost of ``f``, whatever the
    size of ``x``). ``st.hessian`` is all the products with unit vectors in one batched sweep.
    ``explain=True`` prints the paths taken (:mod:`symtape.compile.strategy`) as they are
    chosen; the compiled function's ``strategies`` lists them.

    >>> import symtape as st
    >>> hv = st.hvp(lambda x: x[0] ** 2 * x[1],
    ...             input_signature=[st.TensorSpec((2,)), st.TensorSpec((2,))])
    >>> hv(np.array([1.0, 3.0]), np.array([1.0, 0.0]))  # the first column: (2 x1, 2 x0)
    array([6., 2.])
    >>> hv.formula()
    array([2*v_0*x_1 + 2*v_1*x_0, 2*v_0*x_0], dtype=object)
    >>> [s.name for s in hv.strategies]
    ['reverse-over-reverse', 'element-kernel']
    """
    what = "st.hvp"
    opts = compile_options(fastmath, threads, name, what)
    if not callable(f):
        raise InvalidArgumentError(f"{what}: the first argument must be a function")
    if isinstance(argnums, (bool, np.bool_)) or not isinstance(argnums, (int, np.integer)):
        raise InvalidArgumentError(f"{what}: argnums must be one int (the argument the "
                                   f"vector multiplies), got {argnums!r}")

    def tracer(specs: list[TensorSpec]) -> CompiledFunction:
        xs, num, v = _with_vector(f, specs, argnums, what,
                                  "call it with the function's arguments and the vector v")
        kw = {"dtype": common_dtype(specs), "name": f"{fn_name(f)}_hvp", **opts}
        log = strategy.StrategyLog(explain)
        log.add(strategy.reverse_over_reverse(), kw["name"])
        outer, inner = GradientTape(), GradientTape()
        with traced_code(what), outer, inner:
            y = checked_result(f(*xs), what, scalar=True)
            g = inner.gradient(y, xs[num], unconnected_gradients="zero")
            product = ops.reduce_sum.bind(g * v)
        out = outer.gradient(product, xs[num], unconnected_gradients="zero")
        return compile_with(log, out, [*xs, v], **kw)

    if input_signature is not None:
        return tracer(signature_specs(input_signature, what))
    return Transform(tracer, what, fn_name(f))


def derivative(f: Callable, order: int = 1, argnums=0, *, input_signature=None,
               fastmath: bool = False, threads: int | None = None, direction: bool = False,
               name: str | None = None, explain: bool = False):
    """The compiled ``order``-th derivative tensor of ``f`` (shape ``y.shape + x.shape *
    order``); for scalar ``x`` and ``y``, ``d^n f / dx^n``. A scalar argument from order 2
    takes Taylor mode (:mod:`symtape.derivatives.taylor`): the 10th derivative is a DAG of a
    few hundred nodes; the mixed partials of a few inputs from order 4 are interpolated from
    Taylor series along directions (:func:`symtape.compile.strategy.derivative` says when).
    ``direction=True``: the directional derivative ``d^n/dt^n f(x + t v)`` at ``t = 0``
    (shape ``y.shape``), called as ``f(*args, v)``. ``explain=True`` prints the paths taken
    (:mod:`symtape.compile.strategy`) as they are chosen; the compiled function's
    ``strategies`` lists them.

    >>> import symtape as st
    >>> d3 = st.derivative(lambda x: x ** 5, order=3, input_signature=[st.TensorSpec(())])
    >>> d3(np.array([1.0, 2.0]))
    array([ 60., 240.])
    >>> d3.formula()
    60*x**2
    >>> dv = st.derivative(lambda x: x[0] ** 2 * x[1], order=3, direction=True,
    ...                    input_signature=[st.TensorSpec((2,)), st.TensorSpec((2,))])
    >>> float(dv(np.array([1.0, 2.0]), np.array([1.0, 1.0])))  # d^3/dt^3 (1+t)^2 (2+t)
    6.0
    >>> d4 = st.derivative(lambda x: st.exp(x[0] * x[1]), order=4, explain=True,
    ...                    input_signature=[st.TensorSpec((2,))])
    lambda_derivative: mixed-directions: order 4 in 2 inputs: C(2 + 4 - 1, 4) = 5 \
directions <= MIXED_DIRECTIONS=60
    lambda_derivative: element-kernel: Taylor-mode coefficients exist only as elements
    """
    order = _order(order)
    opts = compile_options(fastmath, threads, name, "st.derivative")
    if direction:
        return _directional(f, argnums, input_signature, order, opts, explain)
    return _transform(f, argnums, input_signature, order, False, "st.derivative", opts,
                      explain=explain)


def _directional(fn, argnums, input_signature, order: int, opts: dict, explain: bool):
    """``d^order/dt^order fn(x + t v)`` at 0 (``x`` argument ``argnums``, ``v`` the last
    argument): Taylor mode on the element view; else ``order`` batched sweeps, each a
    Jacobian contracted with ``v``."""
    what = "st.derivative"
    if not callable(fn):
        raise InvalidArgumentError(f"{what}: the first argument must be a function")

    def tracer(specs: list[TensorSpec]) -> CompiledFunction:
        xs, num, v = _with_vector(fn, specs, argnums, what, "direction=True takes the "
                                  "function's arguments and the direction v")
        x = xs[num]
        kw = {"dtype": common_dtype(specs), "name": f"{fn_name(fn)}_directional", **opts}
        log = strategy.StrategyLog(explain)
        with traced_code(what):
            y = checked_result(fn(*xs), what)
        out = _taylor_atoms(y, list(x._atoms.flat), list(v._atoms.flat), order) \
            if order else None
        log.add(strategy.directional(order, out is not None), kw["name"])
        if out is not None or not order:
            in_atoms, in_names = input_atoms([*xs, v])
            out = y._atoms if out is None else out.reshape(y.shape)
            log.add(strategy.elements_only("Taylor-mode coefficients" if order else
                                           "the values"), kw["name"])
            compiled = compile_atoms([out], in_atoms, input_names=in_names,
                                     output_names=[y._name], structure=0, **kw)
            compiled.strategies = log.taken
            return compiled
        tapes = [GradientTape(persistent=True) for _ in range(order)]
        axes = tuple(range(y.ndim, y.ndim + x.ndim))
        with traced_code(what), contextlib.ExitStack() as stack:
            for t in tapes:
                stack.enter_context(t)
            d = fn(*xs)  # traced again, on the tapes
            for k in reversed(range(order)):  # each sweep is recorded by the tapes outside
                jac = tapes[k].jacobian(d, x, unconnected_gradients="zero")
                d = ops.reduce_sum.bind(jac * v, axis=axes) if axes else jac * v
        return compile_with(log, d, [*xs, v], **kw)

    if input_signature is not None:
        return tracer(signature_specs(input_signature, what))
    return Transform(tracer, what, fn_name(fn))


