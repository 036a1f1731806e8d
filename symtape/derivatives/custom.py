"""Substitution rules: ``stop_gradient``, ``custom_gradient``, ``register_gradient``.

A function with a user rule runs its forward pass unrecorded; each output element becomes a
node printed as the function applied to the inputs it depends on (``clip_gradients(v**2)``),
evaluated and compiled as its forward value, and one tape entry whose rule is the user's.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import numpy as np

from symtape import ops
from symtape.base import nest
from symtape.base import recording
from symtape.base.errors import InvalidArgumentError, NonDifferentiableError, ShapeError
from symtape.core.variables import Tensor, convert_to_tensor, view
from symtape.base.lazy import LazyModule

F = LazyModule("F", globals(), "symtape.element.added_heads")
G = LazyModule("G", globals(), "symtape.element.graph")

__all__ = ["stop_gradient", "custom_gradient", "register_gradient", "define_function",
           "get_function", "RegisterGradient", "call_with_rule"]

stop_gradient = ops.stop_gradient.bind


class CustomRule:
    """The primitive-like object recorded for one call of a function with a user rule.

    It keeps what made it (``forward``, ``make_caller``, the number of tensor inputs), so a
    saved program can capture the function and its rule again."""

    multiple_results = True

    def __init__(self, name: str, caller: Callable, forward: Callable | None = None,
                 make_caller: Callable | None = None, n_inputs: int = 0) -> None:
        self.name = name
        self.caller = caller
        self.forward = forward
        self.make_caller = make_caller
        self.n_inputs = n_inputs

    def vjp(self, gs, outs, ins, params, needed) -> list:
        grads = self.caller(gs, outs, ins)
        if len(grads) != len(ins):
            raise InvalidArgumentError(
                f"the gradient function of {self.name} returned {len(grads)} gradients for "
                f"{len(ins)} inputs")
        out = []
        for i, (g, x, need) in enumerate(zip(grads, ins, needed)):
            if not need or g is None:
                out.append(None)
                continue
            g = g if isinstance(g, (Tensor, ops.Zero)) else convert_to_tensor(
                np.asarray(g, dtype=x.dtype))
            if tuple(g.shape) != tuple(x.shape):
                raise ShapeError(f"the gradient function of {self.name} returned shape "
                                 f"{tuple(g.shape)} for input {i} of shape {tuple(x.shape)}")
            out.append(g)
        return out


def _dependencies(out_atoms, input_atoms: dict) -> dict:
    """For each output node, the input atoms it depends on (memoised over the DAG)."""
    deps: dict = {}
    for node in G.reachable(out_atoms):
        found: set = set()
        for op in node.operands:
            if op in input_atoms:
                found.add(op)
            elif isinstance(op, G.Node):
                found |= deps[op]
        deps[node] = found if node not in input_atoms else {node}
    return deps


def _aliased_atoms(head: type, outs: list, inputs: list) -> list:
    """Element views of ``outs`` whose elements print as ``head(inputs they use)``."""
    order: dict = {}
    for t in inputs:
        for a in t._atoms.flat:
            if G.is_symbolic(a) and a not in order:
                order[a] = len(order)
    flat = [a for t in outs for a in t._atoms.flat]
    deps = _dependencies(flat, order)
    aliased = []
    for t in outs:
        atoms = np.empty(t.shape, dtype=object)
        for idx, a in np.ndenumerate(t._atoms):
            if G.is_const(a):
                atoms[idx] = a
                continue
            used = {a} if a in order else deps.get(a, set())
            args = sorted(used, key=order.__getitem__)
            atoms[idx] = G.alias(head, args, a)
        aliased.append(atoms)
    return aliased


def _alias_outputs(head: type, outs: list, inputs: list) -> list:
    """Output tensors whose element views (built on demand) alias ``outs`` under ``head``."""
    made: list = []

    def make(k):
        if not made:
            made.extend(_aliased_atoms(head, outs, inputs))
        return made[k]

    return [view(functools.partial(make, k), t.shape, t._value, t.dtype, tuple(outs) +
                 tuple(inputs)) for k, t in enumerate(outs)]


def call_with_rule(name: str, head: type, forward: Callable, args: tuple,
                    make_caller: Callable):
    """Run ``forward`` unrecorded on the arguments as tensors, alias its outputs under
    ``head`` and record one entry whose rule is ``make_caller(n_inputs, variables)``.

    Returns the forward result and the aliased output tensors (flat).
    """
    args = nest.map_structure(convert_to_tensor, list(args))
    inputs = nest.flatten(args)
    with recording.paused(), recording.watch_accesses() as accessed:
        y = forward(*args)
    flat_y = [_as_output(name, i, t) for i, t in enumerate(nest.flatten(y))]
    variables = [v for v in _unique(accessed) if v._is_variable]
    for v in variables:
        recording.accessed(v)
    reads = [v.read() for v in variables]
    outs = _alias_outputs(head, flat_y, inputs + reads)
    caller = make_caller(len(inputs), variables)
    rule = CustomRule(name, caller, forward, make_caller, len(inputs))
    recording.record(rule, {}, inputs + reads, outs)
    return y, outs


def _as_output(name: str, i: int, value) -> Tensor:
    """An output of a function with a rule as a tensor (numbers and arrays converted as
    ``tf.convert_to_tensor`` does)."""
    if isinstance(value, Tensor):
        return value
    try:
        return convert_to_tensor(value)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"{name}: output {i} ({type(value).__name__}) cannot be "
                                   f"converted to a tensor: {e}") from None


def _unique(tensors) -> list:
    seen: dict = {}
    for t in tensors:
        seen.setdefault(t._id, t)
    return list(seen.values())


def _as_list(grads, n: int) -> list:
    if isinstance(grads, (list, tuple)):
        return list(grads)
    if n == 1:
        return [grads]
    raise InvalidArgumentError(f"a gradient function must return {n} gradients, got one")


def _repack(y, outs):
    return nest.pack_sequence_as(y, outs) if nest.is_nested(y) else outs[0]


def custom_gradient(f: Callable | None = None):
    """Decorator for a function returning ``(y, grad_fn)``: ``grad_fn(*upstream)`` replaces the
    derivative of ``y`` everywhere (every tape, every order), as ``tf.custom_gradient``.

    When the body reads variables, ``grad_fn(*upstream, variables=...)`` must return
    ``(input_grads, variable_grads)``.

    >>> import symtape as st
    >>> @st.custom_gradient
    ... def clip_gradients(y):
    ...     def backward(dy):
    ...         return st.clip_by_norm(dy, 0.5)
    ...     return y, backward
    >>> v = st.Variable(2.0, name="v")
    >>> with st.GradientTape() as t:
    ...     out = clip_gradients(v * v)
    >>> out.formula(), float(t.gradient(out, v))
    (clip_gradients(v**2), 2.0)
    """
    if f is None:
        return custom_gradient
    head = F.custom_head(getattr(f, "__name__", "custom"))
    name = head.display

    @functools.wraps(f)
    def decorated(*args):
        holder: dict = {}

        def forward(*a):
            out = f(*a)
            if not isinstance(out, tuple) or len(out) != 2 or not callable(out[1]):
                raise InvalidArgumentError(f"{name}: a @custom_gradient function must return "
                                           "(outputs, grad_fn)")
            holder["grad_fn"] = out[1]
            return out[0]

        def make_caller(n_inputs: int, variables: list) -> Callable:
            grad_fn = holder["grad_fn"]
            params = inspect.signature(grad_fn).parameters
            wants_vars = "variables" in params or any(
                p.kind is p.VAR_KEYWORD for p in params.values())
            if variables and not wants_vars:
                raise TypeError(f"{name}: the function reads variables "
                                f"({', '.join(v.name for v in variables)}), so its grad_fn "
                                "must accept a keyword argument 'variables'")

            def caller(gs, outs, ins):
                gs = [convert_to_tensor(g) for g in gs]
                if not variables:
                    return _as_list(grad_fn(*gs), n_inputs)
                in_grads, var_grads = grad_fn(*gs, variables=variables)
                return _as_list(in_grads, n_inputs) + _as_list(var_grads, len(variables))

            return caller

        y, outs = call_with_rule(name, head, forward, args, make_caller)
        return _repack(y, outs)

    return decorated


# --------------------------------------------------------------------------------------------
# Named functions with registered rules
# --------------------------------------------------------------------------------------------

_GRADIENTS: dict[str, Callable] = {}
_FUNCTIONS: dict[str, NamedFunction] = {}


def register_gradient(name: str):
    """Decorator registering ``rule(g, ans, *args) -> gradients`` for the named function
    ``name`` (see :func:`define_function`); the rule can be registered before or after the
    function is defined.

    >>> import symtape as st
    >>> @st.register_gradient("cube_doc")
    ... def _cube_grad(g, ans, x):
    ...     return g * 3 * x ** 2
    >>> cube = st.define_function("cube_doc", lambda x: x * x * x)
    >>> x = st.symbol("x", 2.0)
    >>> with st.GradientTape() as t:
    ...     y = cube(x)
    >>> y.formula(), float(t.gradient(y, x))
    (cube_doc(x), 12.0)
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError("register_gradient: name must be a non-empty string")
    if name in ops.OPS:
        raise InvalidArgumentError(f"register_gradient: {name!r} is a built-in op; define a "
                                   "new name with st.define_function")

    def deco(rule: Callable) -> Callable:
        if not callable(rule):
            raise InvalidArgumentError("register_gradient: the rule must be callable")
        _GRADIENTS[name] = rule
        return rule

    return deco


RegisterGradient = register_gradient


class NamedFunction:
    """A named function with a derivative rule ``rule(g, ans, *args)``."""

    def __init__(self, name: str, forward: Callable, grad: Callable | None) -> None:
        self.name = name
        self.forward = forward
        self.grad = grad
        self.head = F.custom_head(name)

    def rule(self) -> Callable:
        rule = self.grad or _GRADIENTS.get(self.name)
        if rule is None:
            raise NonDifferentiableError(
                f"No gradient defined for function {self.name!r}; pass grad= to "
                f"st.define_function or register one with @st.register_gradient({self.name!r})")
        return rule

    def __call__(self, *args):
        def make_caller(n_inputs: int, variables: list) -> Callable:
            def caller(gs, outs, ins):
                g = gs[0] if len(gs) == 1 else list(gs)
                ans = outs[0] if len(outs) == 1 else list(outs)
                grads = _as_list(self.rule()(g, ans, *ins[:n_inputs]), n_inputs)
                return grads + [None] * len(variables)

            return caller

        y, outs = call_with_rule(self.name, self.head, self.forward, args, make_caller)
        return _repack(y, outs)

    def __repr__(self) -> str:
        return f"<st function {self.name}>"


def define_function(name: str, forward: Callable, grad: Callable | None = None
                    ) -> NamedFunction:
    """A function named ``name`` (how it prints in formulas) whose derivative is ``grad`` (or
    the rule registered under ``name``), ``grad(g, ans, *args) -> gradient(s)``.

    >>> import symtape as st
    >>> softclip = st.define_function("softclip", lambda x: st.tanh(x),
    ...                               grad=lambda g, ans, x: g)  # straight-through
    >>> x = st.symbol("x", 0.5)
    >>> with st.GradientTape() as t:
    ...     y = softclip(x)
    >>> y.formula(), float(t.gradient(y, x))
    (softclip(x), 1.0)
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError("define_function: name must be a non-empty string")
    if not callable(forward):
        raise InvalidArgumentError("define_function: forward must be callable")
    fn = NamedFunction(name, forward, grad)
    _FUNCTIONS[name] = fn
    return fn


def get_function(name: str) -> NamedFunction:
    """The function defined under ``name``.

    >>> import symtape as st
    >>> _ = st.define_function("twice_doc", lambda x: 2 * x, grad=lambda g, ans, x: 2 * g)
    >>> st.get_function("twice_doc").name
    'twice_doc'
    """
    try:
        return _FUNCTIONS[name]
    except KeyError:
        raise LookupError(f"no function named {name!r} is defined") from None
