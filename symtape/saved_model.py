"""``st.saved_model``: save the ``st.function`` methods of an object and load them in another
program, differentiable, custom gradients included (TensorFlow's SavedModel, in miniature).

Each function is captured as a *program*: its ops in order (primitive name and params, or the
template of a derived op), its constants, the variables it reads, and -- for every call of a
function with a user rule -- a forward program and a gradient program. Loading replays the
ops through the op table, so results are tensors with formulas, recorded on tapes like any
other.

The file ``saved_model.symtape`` is data only: strict JSON behind a checksummed header, with
expressions, parameters and arrays in the encodings of :mod:`symtape.io`. Loading runs
nothing from it: ops are looked up by name in the op table, expressions are rebuilt from a
whitelist of SymPy heads, and every reference, count and kind is checked first; a malformed
file raises :class:`~symtape.base.errors.SerializationError` saying what is wrong.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from symtape import ops
from symtape.base import nest
from symtape.base import recording
from symtape.codegen.cache import atomic_write
from symtape.derivatives.custom import CustomRule, call_with_rule
from symtape.base.errors import (
    InvalidArgumentError, NonDifferentiableError, SerializationError, SymtapeError,
)
from symtape.compile.function import Function, TensorSpec
from symtape.io import documents, expressions, strict_json, values
from symtape.io import file_budget
from symtape.core.variables import (
    Tensor, Variable, atom_constant, constant, convert_to_tensor, symbol,
)
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
F = LazyModule("F", globals(), "symtape.element.added_heads")
G = LazyModule("G", globals(), "symtape.element.graph")

__all__ = ["SaveOptions", "save", "load"]

_MAGIC = b"SYMTAPEM"
_FORMAT = 2  # 1 was a pickle: such files are refused, never unpickled
_KIND = "symtape saved model"
_FILE = "saved_model.symtape"
# Nesting of rule programs (a rule whose forward calls a function with a rule...).
_MAX_NESTING = 64


class SaveOptions:
    """Options of :func:`save` (TensorFlow's names); ``experimental_custom_gradients`` keeps
    the rules of custom-gradient functions (True by default, as in TensorFlow 2.9+).

    >>> import symtape as st
    >>> options = st.saved_model.SaveOptions(experimental_custom_gradients=False)
    >>> options.experimental_custom_gradients
    False
    """

    def __init__(self, experimental_custom_gradients: bool = True, **ignored) -> None:
        self.experimental_custom_gradients = bool(experimental_custom_gradients)


# --------------------------------------------------------------------------------------------
# Capture: a traced call as a program of plain data
# --------------------------------------------------------------------------------------------


class _Capture:
    """Builds the plain-data program of the entries of one capture."""

    def __init__(self, inputs: list[Tensor], variables: dict, keep_rules: bool) -> None:
        self.refs: dict[int, int] = {}
        self.inputs = [self._new(t) for t in inputs]
        self.variables = variables  # id -> Variable, shared by a whole saved object
        self.keep_rules = keep_rules
        self.constants: list[dict] = []
        self.var_refs: list[list[int]] = []
        self.ops: list[dict] = []

    def _new(self, t: Tensor) -> int:
        ref = self.refs[t._id] = len(self.refs)
        return ref

    def ref(self, t: Tensor) -> int:
        """The reference of a tensor read by an op: an earlier value, a variable, else a
        constant saved by value."""
        if t._id in self.refs:
            return self.refs[t._id]
        ref = self._new(t)
        if t._id in self.variables:
            order = list(self.variables).index(t._id)
            self.var_refs.append([ref, order])
        else:
            self.constants.append(_constant_record(ref, t))
        return ref

    def add(self, entry) -> None:
        ins = [self.ref(t) for t in entry.inputs]
        prim = entry.prim
        if isinstance(prim, CustomRule):
            spec = _rule_record(prim, entry, self.variables, self.keep_rules)
        elif ops.OPS.get(prim.name) is prim:
            spec = {"kind": "op", "name": prim.name,
                    "params": _encode(values.encode_value, dict(entry.params), prim.name)}
        elif isinstance(prim, ops.Elementwise):
            spec = {"kind": "template", "name": prim.name,
                    "template": _encode(expressions.encode_expr, prim.template, prim.name),
                    "placeholders": [_encode(expressions.encode_expr, p, prim.name)
                                     for p in prim.placeholders]}
        else:
            raise SerializationError(f"cannot save op {prim!r}")
        outs = [self._new(o) for o in entry.outputs]
        self.ops.append({**spec, "in": ins, "out": outs})

    def finish(self, outputs) -> dict:
        flat = nest.flatten(outputs)
        refs = [-1 if t is None else self.ref(_as_tensor(t)) for t in flat]
        structure = nest.pack_sequence_as(outputs, refs) if nest.is_nested(outputs) else \
            refs[0] if refs else None
        return {"inputs": self.inputs, "constants": self.constants, "variables": self.var_refs,
                "ops": self.ops, "outputs": values.encode_value(structure),
                "n_inputs": len(self.inputs)}


def _encode(encoder: Callable, value, op: str):
    try:
        return encoder(value)
    except SerializationError as exc:
        raise SerializationError(f"st.saved_model.save: op {op}: {exc}") from None


def _as_tensor(t) -> Tensor:
    return t if isinstance(t, Tensor) else convert_to_tensor(t)


def _constant_record(ref: int, t: Tensor) -> dict:
    atoms = t._atoms
    if t.dtype.name not in values.DTYPES:
        raise SerializationError(f"st.saved_model.save: a constant has dtype {t.dtype.name}; "
                                 f"saved tensors are one of {', '.join(values.DTYPES)}")
    head = {"ref": ref, "shape": list(t.shape), "dtype": t.dtype.name}
    if all(G.is_const(a) for a in atoms.flat):
        return {**head, "exprs": [_encode(expressions.encode_expr, a, "constant")
                                  for a in atoms.flat]}
    if t._value is None:
        raise SerializationError("the function reads a symbolic tensor created outside it "
                                 "(a closure over a traced value); pass it as an argument")
    return {**head, "value": values.encode_array(np.array(t._value))}


def _capture(fn: Callable, inputs: list[Tensor], variables: dict, keep_rules: bool,
             top: bool = False):
    """Run ``fn(*inputs)`` recording every application; returns (program, outputs).

    At the top level, assignments to variables are traced (not performed) and saved as
    updates that a loaded function applies after each call, as ``st.function`` does."""
    rec = recording.Recorder(everything=True)
    with recording.watch_accesses() as accessed, (
            recording.tracing() if top else _no_trace()) as trace:
        recording.push(rec)
        try:
            out = fn(*inputs)
        finally:
            recording.remove(rec)
    if trace is not None and trace.draws:
        raise SerializationError(
            f"{getattr(fn, '__name__', 'a function')}: it draws random values "
            "(st.random, a Dropout in training); saved programs hold no random state: save "
            "the function without the draws (training=False)")
    for t in accessed:
        if t._is_variable:
            variables.setdefault(t._id, t)
    prog = _Capture(inputs, variables, keep_rules)
    for e in rec.entries:
        prog.add(e)
    result = prog.finish(out)
    result["updates"] = [] if trace is None else [
        [list(variables).index(var._id), prog.ref(t)] for var, t in trace.assigned.values()]
    return result, out


@contextlib.contextmanager
def _no_trace():
    yield None


def _rule_record(rule: CustomRule, entry, variables: dict, keep_rules: bool) -> dict:
    """Forward and gradient programs of one call of a function with a user rule."""
    n = rule.n_inputs
    if rule.forward is None:
        raise SerializationError(f"cannot save the rule of {rule.name}")
    ins = [_stand_in(t, i) for i, t in enumerate(entry.inputs[:n])]
    forward, _ = _capture(rule.forward, ins, variables, keep_rules)
    grad = None
    if keep_rules:
        ups = [_stand_in(o, n + i, "g") for i, o in enumerate(entry.outputs)]

        def both(*args):
            xs, gs = list(args[:n]), list(args[n:])
            y = rule.forward(*xs)
            read = [variables[t._id] for t in entry.inputs[n:]]
            return list(rule.make_caller(n, read)(gs, nest.flatten(y), xs))

        grad, _ = _capture(both, ins + ups, variables, keep_rules)
    n_vars = len(entry.inputs) - n
    return {"kind": "rule", "name": rule.name, "forward": forward, "gradient": grad,
            "n_vars": n_vars}


def _stand_in(t: Tensor, i: int, prefix: str = "a") -> Tensor:
    return symbol(f"{prefix}{i}", shape=t.shape, dtype=t.dtype if t.dtype.kind == "f"
                  else "float64")


# --------------------------------------------------------------------------------------------
# Save
# --------------------------------------------------------------------------------------------


def _functions_of(obj) -> dict[str, Function]:
    found = {}
    for name in dir(type(obj)):
        if isinstance(getattr(type(obj), name, None), Function):
            found[name] = getattr(obj, name)
    for name, value in vars(obj).items() if hasattr(obj, "__dict__") else ():
        if isinstance(value, Function):
            found[name] = value
    return found


def _signatures(name: str, fn: Function) -> list[list[TensorSpec]]:
    sigs = []
    if fn.input_signature is not None:
        sigs.append([TensorSpec(() if s.shape is None else s.shape, s.dtype, s.name)
                     for s in fn.input_signature])
    for key in fn.traced_signatures:
        spec = [k if isinstance(k, TensorSpec) else TensorSpec(k) for k in key]
        if spec not in sigs:
            sigs.append(spec)
    if not sigs:
        raise InvalidArgumentError(f"st.saved_model.save: {name} has no input_signature and "
                                   "was never called; give it one or call it once")
    return sigs


def save(obj, export_dir, signatures=None, options: SaveOptions | None = None) -> None:
    """Save the ``st.function`` methods of ``obj`` (and the variables they read) under
    ``export_dir``; :func:`load` gives them back, differentiable.

    >>> import tempfile, symtape as st
    >>> class Scale:
    ...     def __init__(self):
    ...         self.w = st.Variable(3.0, name="w")
    ...     @st.function(input_signature=[st.TensorSpec(())])
    ...     def __call__(self, x):
    ...         return self.w * x ** 2
    >>> path = tempfile.mkdtemp()
    >>> st.saved_model.save(Scale(), path)
    >>> loaded = st.saved_model.load(path)
    >>> x = st.Variable(2.0)
    >>> with st.GradientTape() as t:
    ...     y = loaded(x)
    >>> float(y), float(t.gradient(y, x))
    (12.0, 12.0)
    """
    keep = True if options is None else options.experimental_custom_gradients
    functions = _functions_of(obj)
    shape = getattr(obj, "build_input_shape", None)
    if not functions and shape is not None and callable(obj):
        # a built Keras model: its inference call, for any batch (as TensorFlow saves it)
        functions = {"__call__": Function(lambda x: obj(x, training=False),
                                          input_signature=[TensorSpec(tuple(shape))])}
    if not functions:
        raise InvalidArgumentError(
            f"st.saved_model.save: {type(obj).__name__} has no st.function methods to save "
            "(decorate them with @st.function)")
    variables: dict = {}
    saved = {}
    for name, fn in functions.items():
        programs = []
        any_shape = fn.input_signature is not None and any(
            s.shape is None for s in fn.input_signature)  # TensorSpec(None): any shape
        for specs in _signatures(name, fn):
            if any_shape:
                prog = _program(fn, name, specs, variables, keep, 0)
                prog["shapes"] = None
            else:
                prog = _program(fn, name, specs, variables, keep, 2)
                if any(None in s.shape for s in specs):  # a None dimension: any size there
                    if _program(fn, name, specs, variables, keep, 3) != prog:
                        raise InvalidArgumentError(
                            f"st.saved_model.save: {name}'s operations depend on the size of "
                            "the None dimensions of its input_signature (a reshape to the "
                            "batch size, a mean over the batch...); save it with concrete "
                            "shapes")
                prog["shapes"] = [list(s.shape) for s in specs]
            prog["dtypes"] = [_input_dtype(s) for s in specs]  # (the call casts to these)
            programs.append(prog)
        saved[name] = programs
    doc = {
        "type": _KIND,
        "functions": saved,
        "variables": [{"name": v._name, "value": _variable_value(v), "trainable": v.trainable}
                      for v in variables.values()],
        "callable": "__call__" in saved,
    }
    blob = documents.dump_document(doc, _MAGIC, _FORMAT)
    os.makedirs(export_dir, exist_ok=True)
    atomic_write(Path(export_dir) / _FILE, blob)


def _input_dtype(spec) -> str:
    """The dtype a saved signature's input is replayed in (a symbol's: floats as given)."""
    return np.dtype(spec.dtype).name if np.dtype(spec.dtype).kind == "f" else "float64"


def _program(fn: Function, name: str, specs: list, variables: dict, keep: bool,
             size: int) -> dict:
    """The program of ``fn`` captured on symbols of ``specs``' shapes, ``None`` dimensions
    taken as ``size``."""
    ins = [symbol(f"x{i}", shape=None if s.shape is None else tuple(
        size if d is None else d for d in s.shape), dtype=s.dtype) for i, s in enumerate(specs)]
    prog, _ = _capture(fn.python_function, ins, variables, keep, top=True)
    return prog


def _variable_value(v: Variable) -> dict:
    try:
        return values.encode_array(np.array(v._value))
    except SerializationError as exc:
        raise SerializationError(f"st.saved_model.save: variable {v._name!r}: {exc}") from None


# --------------------------------------------------------------------------------------------
# Load: check the document into programs, then replay them through the op table
# --------------------------------------------------------------------------------------------


class _Program:
    """A checked program: refs are ints, every ref read is defined earlier."""

    __slots__ = ("constants", "dtypes", "inputs", "n_inputs", "ops", "outputs", "shapes",
                 "updates",
                 "variables")


class _Constant:
    """A saved constant: exact atoms (with their values), or an array value."""

    __slots__ = ("atoms", "dtype", "ref", "shape", "value")


class _Op:
    """One saved op: ``kind`` is 'op' (``prim``, ``params``), 'template' (``prim``) or 'rule'
    (``name``, ``forward``, ``gradient``, ``n_vars``)."""

    __slots__ = ("forward", "gradient", "ins", "kind", "n_vars", "name", "outs", "params",
                 "prim")


class _Checker:
    """Turns the JSON of a saved model into programs, checking every expectation first."""

    def __init__(self, path: str, n_variables: int) -> None:
        self.path = path
        self.n_variables = n_variables

    def fail(self, where: str, problem: str):
        raise SerializationError(f"{self.path}: {where}: {problem}")

    def program(self, node, where: str, depth: int = 0) -> _Program:
        if depth > _MAX_NESTING:
            self.fail(where, f"rule programs nested deeper than {_MAX_NESTING}")
        d = strict_json.record(node, f"{self.path}: {where}", (
            "n_inputs", "inputs", "constants", "variables", "ops", "outputs", "updates"),
            ("shapes", "dtypes"))
        prog = _Program()
        defined: set[int] = set()
        prog.inputs = [self.new_ref(r, defined, f"{where}: inputs")
                       for r in self.items(d["inputs"], f"{where}: inputs")]
        prog.n_inputs = strict_json.expect_int(d["n_inputs"], f"{self.path}: {where}: n_inputs")
        if prog.n_inputs != len(prog.inputs):
            self.fail(where, f"n_inputs is {prog.n_inputs} for {len(prog.inputs)} inputs")
        prog.constants = [self.constant(c, defined, f"{where}: constant {k}")
                          for k, c in enumerate(self.items(d["constants"], f"{where}"))]
        prog.variables = [self.variable_ref(v, defined, f"{where}: variable {k}")
                          for k, v in enumerate(self.items(d["variables"], where))]
        prog.ops = [self.op(o, defined, f"{where}: op {k}", depth)
                    for k, o in enumerate(self.items(d["ops"], where))]
        prog.outputs = self.outputs(d["outputs"], defined, f"{where}: outputs")
        prog.updates = [self.update(u, defined, f"{where}: update {k}")
                        for k, u in enumerate(self.items(d["updates"], where))]
        prog.shapes = None if d["shapes"] is None else [
            self.input_shape(sh, f"{where}: shapes") for sh in self.items(d["shapes"], where)]
        if prog.shapes is not None and len(prog.shapes) != prog.n_inputs:
            self.fail(where, f"{len(prog.shapes)} input shapes for {prog.n_inputs} inputs")
        prog.dtypes = ["float64"] * prog.n_inputs if d["dtypes"] is None else [
            self.input_dtype(t, f"{where}: dtypes") for t in self.items(d["dtypes"], where)]
        if len(prog.dtypes) != prog.n_inputs:
            self.fail(where, f"{len(prog.dtypes)} input dtypes for {prog.n_inputs} inputs")
        return prog

    def input_dtype(self, node, where: str) -> str:
        """An input's dtype: a float type's name."""
        if node not in ("float32", "float64"):
            self.fail(where, f"an input dtype is 'float32' or 'float64', not {str(node)[:20]!r}")
        return node

    def items(self, node, where: str) -> list:
        return strict_json.expect_list(node, f"{self.path}: {where}")

    def ref(self, r, defined: set, where: str) -> int:
        r = strict_json.expect_int(r, f"{self.path}: {where}: reference")
        if r not in defined:
            self.fail(where, f"reference {r} is read before it is defined")
        return r

    def new_ref(self, r, defined: set, where: str) -> int:
        r = strict_json.expect_int(r, f"{self.path}: {where}: reference", 0)
        if r in defined:
            self.fail(where, f"reference {r} is defined twice")
        defined.add(r)
        return r

    def shape(self, node, where: str) -> tuple:
        return values.expect_shape(node, f"{self.path}: {where}")

    def input_shape(self, node, where: str) -> tuple:
        """An input's shape, whose dimensions may be None (any size)."""
        if not isinstance(node, list):
            self.fail(where, "an input shape is a list")
        free = [d is None for d in node]
        known = self.shape([1 if f else d for f, d in zip(free, node)], where)
        return tuple(None if f else d for f, d in zip(free, known))

    def constant(self, node, defined: set, where: str) -> _Constant:
        d = strict_json.record(node, f"{self.path}: {where}", ("ref", "shape", "dtype"),
                          ("exprs", "value"))
        c = _Constant()
        c.ref = self.new_ref(d["ref"], defined, where)
        c.shape = self.shape(d["shape"], f"{where}: shape")
        c.dtype = d["dtype"]
        if c.dtype not in values.DTYPES:
            self.fail(where, f"dtype {str(c.dtype)[:20]!r} is not one of "
                             f"{', '.join(values.DTYPES)}")
        c.atoms = c.value = None
        if (d["exprs"] is None) == (d["value"] is None):
            self.fail(where, "a constant has either 'exprs' or 'value'")
        if d["value"] is not None:
            c.value = values.decode_array(d["value"], f"{self.path}: {where}: value")
            if c.value.shape != c.shape or c.value.dtype.name != c.dtype:
                self.fail(where, f"value of shape {c.value.shape} and dtype "
                                 f"{c.value.dtype} for shape {c.shape} and dtype {c.dtype}")
            return c
        exprs = self.items(d["exprs"], where)
        if len(exprs) != math.prod(c.shape):  # (exact: np.prod wraps around)
            self.fail(where, f"{len(exprs)} expressions for shape {c.shape}")
        atoms = np.empty(len(exprs), dtype=object)
        for k, e in enumerate(exprs):
            atoms[k] = self.constant_atom(e, f"{where}: expression {k}")
        c.atoms = atoms.reshape(c.shape)
        return c

    def constant_atom(self, node, where: str):
        atom = expressions.decode_expr(node, f"{self.path}: {where}")
        boolean = isinstance(atom, sp.logic.boolalg.BooleanAtom)
        if not (boolean or atom.is_number) or atom.free_symbols:
            self.fail(where, f"{str(atom)[:40]} is not a constant")
        return atom

    def variable_ref(self, node, defined: set, where: str) -> tuple:
        pair = self.items(node, where)
        if len(pair) != 2:
            self.fail(where, "expected [reference, variable index]")
        order = strict_json.expect_int(pair[1], f"{self.path}: {where}: variable index", 0,
                                  self.n_variables)
        return self.new_ref(pair[0], defined, where), order

    def update(self, node, defined: set, where: str) -> tuple:
        pair = self.items(node, where)
        if len(pair) != 2:
            self.fail(where, "expected [variable index, reference]")
        order = strict_json.expect_int(pair[0], f"{self.path}: {where}: variable index", 0,
                                  self.n_variables)
        return order, self.ref(pair[1], defined, where)

    def outputs(self, node, defined: set, where: str):
        structure = values.decode_value(node, f"{self.path}: {where}")
        if structure is None:
            return None
        for leaf in nest.flatten(structure):
            if strict_json.expect_int(leaf, f"{self.path}: {where}") != -1:
                self.ref(leaf, defined, where)
        return structure

    def op(self, node, defined: set, where: str, depth: int) -> _Op:
        d = strict_json.record(node, f"{self.path}: {where}", ("kind", "name", "in", "out"), (
            "params", "template", "placeholders", "forward", "gradient", "n_vars"))
        o = _Op()
        o.kind = d["kind"]
        o.name = strict_json.expect(d["name"], str, f"{self.path}: {where}: name")
        o.ins = [self.ref(r, defined, where) for r in self.items(d["in"], f"{where}: in")]
        o.prim = o.params = o.forward = o.gradient = o.n_vars = None
        fields = {"op": ("params",), "template": ("template", "placeholders"),
                  "rule": ("forward", "n_vars")}.get(o.kind)
        if fields is None:
            self.fail(where, f"unknown op kind {str(o.kind)[:20]!r} (expected op, template or "
                             "rule)")
        allowed = set(fields) | ({"gradient"} if o.kind == "rule" else set())
        extra = [k for k in ("params", "template", "placeholders", "forward", "gradient",
                             "n_vars") if d[k] is not None and k not in allowed]
        missing = [k for k in fields if d[k] is None]
        if extra or missing:
            self.fail(where, f"a {o.kind} op has fields {sorted(allowed)}; "
                             f"missing {missing}, unexpected {extra}")
        getattr(self, f"_{o.kind}")(o, d, where, depth)
        o.outs = [self.new_ref(r, defined, where) for r in self.items(d["out"], f"{where}: out")]
        if o.kind != "rule" and len(o.outs) != 1:
            self.fail(where, f"an {o.kind} op has one output, got {len(o.outs)}")
        return o

    def _op(self, o: _Op, d: dict, where: str, depth: int) -> None:
        o.prim = ops.OPS.get(o.name)
        if o.prim is None:
            self.fail(where, f"unknown op {o.name[:40]!r} (not in the op table)")
        o.params = values.decode_value(d["params"], f"{self.path}: {where}: params")
        if not isinstance(o.params, dict) or not all(isinstance(k, str) for k in o.params):
            self.fail(where, "params are a dict with str keys")

    def _template(self, o: _Op, d: dict, where: str, depth: int) -> None:
        template = expressions.decode_expr(d["template"], f"{self.path}: {where}: template")
        holders = tuple(expressions.decode_expr(p, f"{self.path}: {where}: placeholder")
                        for p in self.items(d["placeholders"], f"{where}: placeholders"))
        if not all(type(p) is sp.Symbol for p in holders) or len(set(holders)) != len(holders):
            self.fail(where, "placeholders are distinct symbols")
        if not template.free_symbols <= set(holders):
            self.fail(where, f"the template reads symbols that are not placeholders: "
                             f"{sorted(map(str, template.free_symbols - set(holders)))[:5]}")
        if len(o.ins) != len(holders):
            self.fail(where, f"{len(o.ins)} inputs for {len(holders)} placeholders")
        try:
            o.prim = ops.template_op(o.name, template, holders)
        except SymtapeError:
            raise
        except Exception as exc:  # noqa: BLE001 - a template the op table cannot build
            self.fail(where, f"template {str(template)[:60]} cannot be built: {exc}")

    def _rule(self, o: _Op, d: dict, where: str, depth: int) -> None:
        o.n_vars = strict_json.expect_int(d["n_vars"], f"{self.path}: {where}: n_vars", 0,
                                     len(o.ins) + 1)
        n = len(o.ins) - o.n_vars
        o.forward = self.program(d["forward"], f"{where}: forward", depth + 1)
        if o.forward.n_inputs != n:
            self.fail(where, f"the forward program takes {o.forward.n_inputs} inputs, the "
                             f"call passes {n}")
        if d["gradient"] is not None:
            o.gradient = self.program(d["gradient"], f"{where}: gradient", depth + 1)


class _Loaded:
    """An object whose attributes are the loaded functions."""

    def __init__(self, functions: dict, variables: list, callable_: bool) -> None:
        self.variables = variables
        self.trainable_variables = [v for v in variables if v.trainable]
        self._functions = functions
        for name, fn in functions.items():
            if name != "__call__":
                setattr(self, name, fn)

    def __call__(self, *args):
        if "__call__" not in self._functions:
            raise TypeError("the saved object was not callable")
        return self._functions["__call__"](*args)


class _Replayer:
    """Replays programs with the restored variables; heads of rule functions are shared."""

    def __init__(self, variables: list) -> None:
        self.variables = variables
        self.heads: dict[str, type] = {}

    def run(self, prog: _Program, args: list):
        env: dict = {}
        for ref, a in zip(prog.inputs, args):
            env[ref] = a
        for c in prog.constants:
            env[c.ref] = _constant(c)
        for ref, order in prog.variables:
            env[ref] = self.variables[order]
        for op in prog.ops:
            results = self._op(op, [env[r] for r in op.ins])
            if len(results) != len(op.outs):
                raise SerializationError(f"saved op {op.name} gave {len(results)} results for "
                                         f"{len(op.outs)} saved outputs")
            for r, t in zip(op.outs, results):
                env[r] = t
        for order, ref in prog.updates:
            self.variables[order].assign(env[ref].numpy())
        out = prog.outputs
        if out is None:
            return None
        def pick(r):
            return None if r < 0 else env[r]

        return nest.map_structure(pick, out) if nest.is_nested(out) else pick(out)

    def _op(self, op: _Op, args: list) -> list:
        if op.kind == "rule":
            return self._rule(op, args)
        try:
            if op.kind == "op":
                return [op.prim.bind(*args, **op.params)]
            return [op.prim.bind(*args)]
        except SymtapeError:
            raise
        except Exception as exc:  # noqa: BLE001 - params the op rejects: a bad file
            raise SerializationError(f"saved op {op.name} cannot be applied to its saved "
                                     f"arguments: {type(exc).__name__}: {exc}") from None

    def _rule(self, op: _Op, args: list) -> list:
        name, forward, grad = op.name, op.forward, op.gradient
        head = self.heads.setdefault(name, F.custom_head(name))
        n = len(args) - op.n_vars

        def make_caller(n_inputs: int, variables: list) -> Callable:
            def caller(gs, outs, ins):
                if grad is None:
                    raise NonDifferentiableError(
                        f"No gradient defined for {name!r}: it was saved without custom "
                        "gradients (SaveOptions(experimental_custom_gradients=False))")
                if grad.n_inputs != n_inputs + len(gs):
                    raise SerializationError(
                        f"the saved gradient of {name!r} takes {grad.n_inputs} inputs, not "
                        f"{n_inputs} inputs and {len(gs)} cotangents")
                return list(self.run(grad, list(ins[:n_inputs]) + list(gs)))

            return caller

        _, outs = call_with_rule(name, head, lambda *a: self.run(forward, list(a)),
                                 tuple(args[:n]), make_caller)
        return outs


def _constant(c: _Constant) -> Tensor:
    dtype = np.dtype(c.dtype)
    if c.atoms is None:
        return constant(c.value.copy())
    doubles = np.array([G.const_value(a) for a in c.atoms.flat],
                       dtype=np.float64).reshape(c.shape)
    return atom_constant(c.atoms, doubles.astype(dtype), dtype)


class _LoadedFunction:
    """A loaded function: the saved program whose input shapes match the call."""

    def __init__(self, name: str, programs: list, replayer: _Replayer) -> None:
        self.__name__ = name
        self._programs = programs
        self._replayer = replayer

    def __call__(self, *args):
        """The first saved program whose signature the arguments fit: their shapes, and the
        dtypes of tensors (arrays and numbers are cast to the signature's float type, as
        TensorFlow converts them)."""
        shapes = [tuple(a.shape) if isinstance(a, Tensor) else np.shape(a) for a in args]
        kinds = [a.dtype.name if isinstance(a, Tensor) else None for a in args]
        for prog in self._programs:
            if prog.n_inputs == len(args) and (prog.shapes is None or all(
                    len(p) == len(k) and all(d is None or d == n for d, n in zip(p, k))
                    for p, k in zip(prog.shapes, shapes))) and all(
                    k is None or k == t for k, t in zip(kinds, prog.dtypes)):
                tensors = [a if isinstance(a, Tensor) else
                           convert_to_tensor(np.asarray(a, dtype=t))
                           for a, t in zip(args, prog.dtypes)]
                return self._replayer.run(prog, tensors)
        saved = [(p.shapes, p.dtypes) for p in self._programs]
        raise InvalidArgumentError(f"{self.__name__}: no saved signature matches arguments "
                                   f"of shapes {shapes} and dtypes {kinds} (saved: {saved})")


def _read(export_dir) -> tuple[dict, str]:
    what = str(Path(export_dir) / _FILE)
    return documents.read_document(what, _MAGIC, _FORMAT, _KIND,
                                   _MAGIC + (1).to_bytes(2, "little"), what), what


def _variables(nodes: list, what: str) -> list:
    out = []
    for k, node in enumerate(nodes):
        where = f"{what}: variable {k}"
        d = strict_json.record(node, where, ("name", "value", "trainable"))
        name = strict_json.expect(d["name"], str, f"{where}: name")
        value = values.decode_array(d["value"], f"{where}: value")
        trainable = strict_json.expect(d["trainable"], bool, f"{where}: trainable")
        out.append((name, value, trainable))
    return out


def load(export_dir):
    """An object with the functions saved by :func:`save` (and ``.variables``); nothing in
    the file is run, and a missing, corrupt, foreign or malformed file raises
    ``st.errors.SerializationError`` naming the fault.

    >>> import tempfile, symtape as st
    >>> class Square:
    ...     @st.function(input_signature=[st.TensorSpec(None)])
    ...     def f(self, x):
    ...         return x * x
    >>> path = tempfile.mkdtemp()
    >>> st.saved_model.save(Square(), path)
    >>> st.saved_model.load(path).f(st.constant([1.0, 3.0])).numpy()
    array([1., 9.])
    """
    doc, what = _read(export_dir)
    with file_budget(what):  # all its exact constants, checked in about a second
        return _load(doc, what)


def _load(doc: dict, what: str):
    d = strict_json.record(doc, what, ("type", "functions", "variables", "callable"))
    if d["type"] != _KIND:
        raise SerializationError(f"{what}: type {str(d['type'])[:40]!r} is not {_KIND!r}")
    saved_vars = _variables(strict_json.expect_list(d["variables"], f"{what}: variables"), what)
    functions = strict_json.expect(d["functions"], dict, f"{what}: functions")
    callable_ = strict_json.expect(d["callable"], bool, f"{what}: callable")
    checker = _Checker(what, len(saved_vars))
    programs = {}
    for name, progs in functions.items():
        programs[name] = [checker.program(p, f"function {name[:40]!r}, signature {k}")
                          for k, p in enumerate(strict_json.expect_list(
                              progs, f"{what}: function {name[:40]!r}"))]
    variables = [Variable(value, name=name, trainable=trainable)
                 for name, value, trainable in saved_vars]
    replayer = _Replayer(variables)
    loaded = {name: _LoadedFunction(name, progs, replayer) for name, progs in programs.items()}
    return _Loaded(loaded, variables, callable_)
