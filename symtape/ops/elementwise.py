"""Elementwise ops: SymPy templates over placeholders, one stanza per op."""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Sequence

import numpy as np

from symtape.base.errors import NonDifferentiableError, ShapeError
from symtape.element import numeric
from symtape.element.numeric import quiet
from symtape.core.apply import shared_values, sharing
from symtape.core.primitive import (
    OPS, P, Primitive, Zero, as_obj, const_atom, fmt, is_zero, obj, register_primitive, aligned,
)
from symtape.base.lazy import LazyModule

sp = LazyModule("sp", globals(), "sympy")
E = LazyModule("E", globals(), "symtape.element.evaluate")
F = LazyModule("F", globals(), "symtape.element.added_heads")
G = LazyModule("G", globals(), "symtape.element.graph")

# --------------------------------------------------------------------------------------------
# Elementwise ops: SymPy templates
# --------------------------------------------------------------------------------------------


def _tf_diff(expr, var):
    """SymPy's partial with TensorFlow's kink conventions (ties of Max/Min to the first
    argument, no Dirac deltas: derivatives of steps are zero)."""
    expr = expr.replace(
        lambda e: isinstance(e, (sp.Max, sp.Min)),
        lambda e: functools.reduce(
            lambda a, b: sp.Piecewise((a, (a >= b) if isinstance(e, sp.Max) else (a <= b)),
                                      (b, True)), e.args))
    d = sp.diff(expr, var)
    d = d.replace(lambda e: isinstance(e, sp.DiracDelta), lambda e: sp.S.Zero)
    d = d.replace(lambda e: isinstance(e, sp.Derivative), _step_derivative)
    if d.has(sp.Subs):
        d = d.doit()
    # x**(y - 1)/x -> x**(y - 2): no spurious 0/0 where the exponent makes it exact
    return sp.powsimp(d)


def _steps() -> tuple:
    return (sp.floor, sp.ceiling, F.RoundHalfEven, F.Trunc, sp.sign, sp.Heaviside)


def _step_derivative(d):
    """Derivatives of step functions are zero almost everywhere (TF: no gradient leaks)."""
    if isinstance(d.expr, _steps()):
        return sp.S.Zero
    raise NonDifferentiableError(f"no derivative rule for {d.expr.func.__name__}; give the op "
                                 "an explicit rule")


_MAKING = threading.RLock()  # builds stanzas' templates


class Elementwise(Primitive):
    """An op applied element by element (with numpy broadcasting), defined by a template.

    ``template`` is a SymPy expression in ``placeholders`` -- or, for the table's stanzas, a
    function building it and the placeholders' names (``"x y"``: :data:`~.core.P`'s), so
    that SymPy loads when an op is first used, not at import. The builder instantiates the
    template per element, ``numeric`` evaluates it with numpy (default: the template's numpy
    evaluation), and a rule given as ``'diff'`` is the template's partial, as a template op
    of ``(g, *args)``.
    """

    def __init__(self, name: str, template, placeholders: Sequence | str, *,
                 numeric: Callable | None = None, rules: Sequence | str = "diff",
                 args: Sequence[str] | None = None, kinds: str = "f", out: str = "T") -> None:
        if isinstance(placeholders, str):
            self._make = template, placeholders
            n = len(placeholders.split())
        else:
            self.template, self.placeholders = template, tuple(placeholders)
            n = len(self.placeholders)
        if isinstance(rules, str):
            rules = (rules,) * n
        rules = tuple(self._default_rule(i) if r == "diff" else r for i, r in enumerate(rules))
        super().__init__(name, args or ("T",) * n, kinds, rules, out)
        self._hand_numeric = numeric is not None
        self._numeric = numeric
        self._vjp_ops: dict[int, Elementwise | None] = {}
        self._factors: dict[int, Elementwise | None] = {}

    def __getattr__(self, name: str):
        """``template`` and ``placeholders`` of a stanza, built on first use (once, whatever
        the threads)."""
        if name in ("template", "placeholders"):
            with _MAKING:
                made = self.__dict__
                if "_make" in made:
                    make, names = made["_make"]
                    self.placeholders = P.of(names)
                    self.template = make()
                    del made["_make"]
            if name in self.__dict__:
                return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @functools.cached_property
    def _build_one(self) -> Callable:
        return G.compile_template(self.template, self.placeholders)

    pointwise = True

    def build_atom(self, *atoms):
        """The template built on one atom per argument (constants fold as the graph's
        builders fold them)."""
        return self._build_one(*atoms)

    def loop(self, planner, node):
        """One loop over the node's shape, its body the template (the planner's elementwise
        placement: fused arguments built in, arguments read with broadcast strides, boxes
        where an argument is partly zeros); other kinds of arguments: unrolled."""
        if all(a.dtype.kind in "fiub" for a in node.inputs):
            return planner.elementwise(node)
        return planner.unrolled(node)

    @functools.cached_property
    def _ufunc(self):
        n = len(self.placeholders)
        return np.frompyfunc(self._build_one, n, 1) if n else None

    @functools.cached_property
    def _zero_arg(self) -> int | None:
        """An argument where a structural zero makes the result zero (the cotangent of a
        rule, either factor of a product): those elements are not built at all, which is
        what keeps a Jacobian's one-hot sweeps cheap."""
        return next((i for i, p in enumerate(self.placeholders)
                     if p.is_real and self.template.xreplace({p: 0}) == 0), None)

    @functools.cached_property
    def _passes(self) -> tuple:
        """``(i, j)``: at a zero argument i the template (a sum) is argument j."""
        template = self.template
        return tuple((i, j) for i, p in enumerate(self.placeholders)
                     for j, q in enumerate(self.placeholders)
                     if template.is_Add and i != j and p.is_real and
                     template.xreplace({p: 0}) == q)

    def shape_rule(self, shapes, params):
        try:
            return tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            raise ShapeError(f"st.{self.name}: shapes {', '.join(map(fmt, shapes))} cannot be "
                             "broadcast together") from None

    @functools.cached_property
    def zero_args(self) -> tuple:
        """The arguments where the structural zero makes the result zero (a product's
        factors, a rule's cotangent): a zero-branched select there makes the result one
        (the graph's builders fold the product into the select).

        >>> multiply.zero_args, add.zero_args
        ((0, 1), ())
        """
        out = []
        for i, p in enumerate(self.placeholders):
            try:
                if p.is_real and self.template.xreplace({p: 0}) == 0:
                    out.append(i)
            except (ZeroDivisionError, TypeError, ValueError):  # (x mod 0: not a zero)
                continue
        return tuple(out)

    @functools.cached_property
    def _zero_factors(self) -> tuple:
        """The arguments other than :attr:`_zero_arg` that are plain factors (``p`` or ``p**e``,
        ``e`` a positive number) of a template that is a product of such factors and a
        constant: where one is zero and every other argument is symbolic, the builder's
        product folds to the structural zero without defining anything, so those elements
        need not be built either (where another argument is a constant, ``0 * inf`` may be
        ``nan``: those are built)."""
        template = self.template
        if not template.is_Mul:
            return ()
        power = {}
        for factor in template.args:
            base, e = factor.as_base_exp() if factor.is_Pow else (factor, sp.S.One)
            if base in self.placeholders and e.is_Number:
                if base in power:
                    return ()
                power[base] = e
            elif factor.free_symbols & set(self.placeholders) or not factor.is_finite:
                return ()
        return tuple(i for i, p in enumerate(self.placeholders)
                     if i != self._zero_arg and p.is_real and power.get(p, 0) > 0)

    def _zeros(self, atoms, shape) -> np.ndarray | None:
        """The elements known to be the structural zero before building (None: none known).

        >>> x, inf = G.Leaf.new("x"), G.number(math.inf)
        >>> xs = np.array([x, inf, x, x], dtype=object)
        >>> ys = np.array([G.ZERO, G.ZERO, x, G.number(0.0)], dtype=object)
        >>> OPS["multiply"]._zeros([xs, ys], (4,)).tolist()  # 0 * inf is built: nan
        [True, False, False, True]
        >>> out = OPS["multiply"].build([xs, ys], {})
        >>> out[0] is G.ZERO, str(out[1]), out[2].definition, out[3] is G.ZERO
        (True, 'nan', x**2, True)
        """
        zero = None
        if self._zero_arg is not None and atoms[self._zero_arg].size > 1:
            zero = np.broadcast_to(is_zero(atoms[self._zero_arg]), shape)
        for j in self._zero_factors:
            if atoms[j].size <= 1:
                continue
            more = np.broadcast_to(is_zero(atoms[j]), shape)
            if zero is not None:
                more = more & ~zero
            at = np.flatnonzero(more)
            if not at.size:
                continue
            symbolic = np.ones(at.size, dtype=bool)
            for i, a in enumerate(atoms):
                if i != j:
                    picked = np.broadcast_to(a, shape).reshape(-1)[at]
                    symbolic &= ~np.asarray(const_atom(picked), dtype=bool)
            more = np.zeros(math.prod(shape), dtype=bool)
            more[at[symbolic]] = True
            more = more.reshape(shape)
            zero = more if zero is None else zero | more
        return zero

    def build(self, atoms, params):
        shape = np.broadcast_shapes(*(a.shape for a in atoms))
        with np.errstate(all="ignore"):  # constant folding follows IEEE, silently
            zero = self._zeros(atoms, shape)
            if zero is not None and zero.any():
                out = obj(shape)
                keep = ~zero
                if keep.any():
                    out[keep] = self._ufunc(*[np.broadcast_to(a, shape)[keep] for a in atoms])
                return out
            if self._passes and math.prod(shape) > 1:
                return self._build_passing(atoms, shape)
            return as_obj(self._ufunc(*atoms), shape)

    def _build_passing(self, atoms, shape):
        """Elements where an argument the template drops at zero is zero are the other
        argument's (``x + 0`` is ``x``; a sum of one-hot seeds' rows is mostly zeros)."""
        out, done = obj(shape), np.zeros(shape, dtype=bool)
        for i, j in self._passes:
            zero = np.broadcast_to(np.asarray(is_zero(atoms[i]), dtype=bool), shape) & ~done
            if zero.any():
                out[zero] = np.broadcast_to(atoms[j], shape)[zero]
                done |= zero
        keep = ~done
        if keep.any():
            out[keep] = self._ufunc(*[np.broadcast_to(a, shape)[keep] for a in atoms])
        return out

    def numeric(self, values, params):
        with quiet():
            if self._numeric is not None:
                return self._numeric(*values)
            step = self._direct_step((), tuple(range(len(values))))
            return step(values) if step is not None else self._prototype(())[0](*values)[0]

    def evaluator(self, args, params):
        """Float results are evaluated through a prototype: the template built once by the
        graph's own builders on stand-in leaves, so values round exactly as the built
        definitions (and compiled code) do; arguments that are one constant (an exponent,
        a slope) fold as they do in the graph (``x**(y - 2)`` at ``y = 2`` is 1, also at
        ``x = 0``), and an argument given twice is one stand-in (``x - x`` is 0). A small
        result whose own atoms fold further is its element view's value (``core.apply``)."""
        if self._hand_numeric and (self.out != "T" or any(a.dtype.kind != "f" for a in args)):
            fn = self._numeric
            return lambda values: fn(*values)
        spec = self._specialisation(args)
        step = self._direct_step(*spec)  # a one-step program reading the values by position
        if step is not None:
            return step
        run, keep, _, _ = self._prototype(*spec)
        if keep == list(range(len(args))):
            return lambda values: run(*values)[0]
        return lambda values: run(*[values[i] for i in keep])[0]

    @functools.lru_cache(maxsize=256)  # noqa: B019 - ops live for the whole program
    def _direct_step(self, consts: tuple, same: tuple):
        """The prototype's program (see :meth:`_prototype`) as one function of all the
        arguments' values, a sequence (those fixed or repeated are not read), when it is
        one step (the common template); else None."""
        _, keep, out, used = self._prototype(consts, same)
        stand_ins = {i: s for s, i in used.items()}
        inputs = [stand_ins.get(i) or G.Leaf.new(f"unread{i}") for i in range(len(same))]
        return getattr(E.program([out], inputs, quiet=False), "step", None)

    @staticmethod
    def _specialisation(args) -> tuple:
        """``(consts, same)``: the uniform-constant arguments and, for each other argument,
        the first argument that is the same node."""
        consts = tuple((i, a.uniform) for i, a in enumerate(args) if a.uniform is not None)
        first: dict = {}
        same = tuple(first.setdefault(id(a), i) for i, a in enumerate(args))
        return consts, same

    def structure(self, args, params, shape):
        if self.out == "T" and any(a.dtype.kind != "f" for i, a in enumerate(args)
                                   if self.role(i) == "T"):  # (a where's condition is bool)
            return False, None, None
        _, keep, out, used = self._prototype(*self._specialisation(args))
        if G.is_const(out):
            return False, out, None
        if out in used:
            i = used[out]
            same_shape = tuple(args[i].shape) == tuple(shape)
            return False, None, i if same_shape and args[i].dtype.kind == "f" else None
        if G.absorbs_products(out) or not all(args[i].regular for i in used.values()):
            return False, None, None
        covered = np.zeros(len(shape), dtype=bool)
        for i in used.values():
            s = tuple(args[i].shape)
            covered[len(shape) - len(s):] |= np.array([n > 1 for n in s], dtype=bool)
        return bool(all(c or n <= 1 for c, n in zip(covered, shape))), None, None

    @functools.lru_cache(maxsize=256)  # noqa: B019 - ops live for the whole program
    def _prototype(self, consts: tuple, same: tuple | None = None):
        """``(run, keep, out, used)``: the template built on stand-ins (``consts`` fixed,
        arguments ``same`` as an earlier one sharing its stand-in), a numpy program of the
        arguments ``keep``, the built atom and ``stand-in -> argument`` of those it uses."""
        n = len(self.placeholders)
        same = tuple(range(n)) if same is None else same
        fixed = dict(consts)
        keep = [i for i in range(n) if i not in fixed and same[i] == i]  # one per node
        stand_ins = {i: G.Leaf.new(f"p{i}") for i in keep}
        out = self._build_one(*[fixed[i] if i in fixed else fixed[same[i]] if same[i] in fixed
                                else stand_ins[same[i]] for i in range(n)])
        found = set(G.leaves([out])) if G.is_symbolic(out) else set()
        used = {s: i for i, s in stand_ins.items() if s in found}
        return E.program([out], [stand_ins[i] for i in keep], quiet=False), keep, out, used

    def fuse(self, values, args, fusions, evaluate: bool = True) -> tuple:
        """Evaluate with the arguments whose values came from a zero-branched select
        (``fusions[i]``, see :meth:`fusion`) replaced by that select's definition, so the
        graph's builders fold this op into it (``select(c, g, 0) * h`` is
        ``select(c, g*h, 0)``: 0 where ``c`` is false, also where ``h`` is inf).

        Returns ``(value, fusion)``: ``value`` is None unless ``evaluate``; ``fusion`` is
        None unless the result is again a zero-branched select (or the structural zero)."""
        consts, same = self._specialisation(args)
        fixed = {i for i, _ in consts}
        children = tuple((i, f[0]) for i, f in enumerate(fusions)
                         if f is not None and i not in fixed and same[i] == i)
        taken = {i for i, _ in children}
        own = tuple(i for i in range(len(args)) if i not in fixed and i not in taken and
                    same[i] == i)
        recipe = (self, consts, same, children)
        flat = [values[i] for i in own]
        for i, _ in children:
            flat.extend(fusions[i][1])
        pattern = sharing(flat)
        run, atom = _recipe_program(recipe, pattern)
        value = run(*shared_values(flat, pattern))[0] if evaluate else None
        # (a select folded to its zero everywhere, x - x of selects, is a structural zero too)
        zero = G.absorbs_products(atom) or not G.is_symbolic(atom) and G.is_zero(atom)
        return value, ((recipe, tuple(flat)) if zero else None)

    def makes_select(self, args) -> bool:
        """Whether this op's template, specialised to ``args``, is a zero-branched select."""
        return G.absorbs_products(self._prototype(*self._specialisation(args))[2])

    def fusion(self, values, args) -> tuple:
        """``(recipe, values)`` of a result :meth:`makes_select` says is a zero-branched
        select, for later ops to fold into: the recipe rebuilds it on fresh stand-ins (see
        :func:`recipe_atom`), the values are its arguments' in order."""
        consts, same = self._specialisation(args)
        keep = self._prototype(consts, same)[1]
        return (self, consts, same, ()), tuple(values[i] for i in keep)

    def notation(self, args, params):
        return self.template.xreplace(dict(zip(self.placeholders, args)))

    def vjp_op(self, i: int) -> Elementwise | None:
        """The template op ``g * d(template)/d(arg i)`` of ``(g, *args)``, None when zero."""
        if i not in self._vjp_ops:
            d = _tf_diff(self.template, self.placeholders[i])
            if d == 0:
                self._vjp_ops[i] = None
            else:
                g = _fresh_cotangent(self.placeholders)
                self._vjp_ops[i] = template_op(f"{self.name}_vjp{i}", g * d,
                                               (g, *self.placeholders))
        return self._vjp_ops[i]

    @functools.cached_property
    def live_op(self) -> Elementwise | None:
        """The template op of this op's arguments that is 1 where its template, a select
        with a structurally zero branch (a rule's ``where(c, g, 0)``), takes a branch that
        is not that zero, and 0 where it takes it; None for other templates.

        >>> relu.vjp_op(0).live_op.numeric([np.array([5.0, 7.0]), np.array([-1.0, 2.0])], {})
        array([0., 1.])
        """
        t = sp.piecewise_fold(self.template)
        if not isinstance(t, sp.Piecewise) or not any(e == 0 for e, _ in t.args):
            return None
        live = sp.Piecewise(*[(sp.S.Zero if e == 0 else sp.S.One, c) for e, c in t.args])
        return template_op(f"{self.name}_live", live, self.placeholders)

    def _default_rule(self, i: int) -> Callable:
        def rule(g, ans, *args, **params):
            op = self.vjp_op(i)
            if op is None:
                return Zero(args[i].shape, args[i].dtype)
            return op.bind(g, *args)

        return rule

    def vjp(self, g, ans, args, params, needed):
        cts = super().vjp(g, ans, args, params, needed)
        return [unbroadcast(ct, a.shape) for ct, a in zip(cts, args)]

    def batch(self, args, batched, params, shape):
        rank = len(shape)
        if sum(batched) == 1 and not params:
            i = list(batched).index(True)
            factor = self.linear_factor(i)
            if factor is not None:  # p * C(others): C once, not once per seed
                others = [a for a, b in zip(args, batched) if not b]
                c = others[factor] if isinstance(factor, int) else factor.bind(*others)
                return multiply.bind(aligned(args[i], True, rank), c)
        return self.bind(*[aligned(a, b, rank) for a, b in zip(args, batched)], **params)

    def linear_factor(self, i: int) -> Elementwise | int | None:
        """When the template is ``p * C`` for its placeholder ``p`` number ``i`` (a
        derivative rule's cotangent): ``C`` as a template op of the other arguments, or the
        index among them of the one ``C`` is; else None."""
        if i not in self._factors:
            self._factors[i] = None
            p = self.placeholders[i]
            others = tuple(q for q in self.placeholders if q is not p)
            if p.is_real and len(self.placeholders) > 1 and self.out == "T":
                coeff, rest = sp.factor_terms(self.template).as_independent(p, as_Add=False)
                if rest == p and coeff.free_symbols <= set(others) and coeff != 1:
                    self._factors[i] = others.index(coeff) if coeff in others else \
                        template_op(f"{self.name}_over{i}", coeff, others)
        return self._factors[i]

    def dependencies(self, deps, params, shape):
        out = np.zeros(shape, dtype=object)
        for d in deps:
            out = np.bitwise_or(out, d)
        return out


def _fresh_cotangent(placeholders) -> sp.Symbol:
    """A cotangent placeholder distinct from ``placeholders`` (rule ops already have one)."""
    names = {p.name for p in placeholders}
    k = 0
    while f"g{k}" in names:
        k += 1
    return sp.Symbol(f"g{k}", real=True)


def unbroadcast(ct, shape: tuple):
    """Sum a cotangent over the axes that broadcasting added to an argument of ``shape``."""
    if ct is None or tuple(ct.shape) == tuple(shape):
        return ct
    if isinstance(ct, Zero):
        return Zero(shape, ct.dtype)
    lead = len(ct.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape)
                                      if n == 1 and ct.shape[lead + i] != 1)
    # the table's entries: reductions and reshapes are stanzas of later modules
    out = OPS["reduce_sum"].bind(ct, axis=axes, keepdims=False)
    if tuple(out.shape) != tuple(shape):
        out = OPS["reshape"].bind(out, shape=tuple(shape))
    return out


@functools.lru_cache(maxsize=None)
def template_op(name: str, template, placeholders: tuple, **kw) -> Elementwise:
    """The (cached) elementwise op of a template, used for derived and rule ops."""
    return Elementwise(name, template, placeholders, **kw)


def _ew(name, template: Callable, placeholders: str = "x", **kw) -> Elementwise:
    """A stanza: ``template()`` builds the template over the placeholders named (``P``'s),
    when it is first needed."""
    return register_primitive(Elementwise(name, template, placeholders, **kw))


def _t(template, placeholders: str, name="rule"):
    """A rule op from a template over the placeholders named (typically ``g``, args,
    ``ans``)."""
    return template_op(name, template, P.of(placeholders))


def _zero_rule(g, ans, *args, **params):
    """The gradient is connected and zero (sign, steps)."""
    return Zero(args[0].shape, args[0].dtype)


def _sigmoid(x):
    with np.errstate(all="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


# ---- arithmetic ----------------------------------------------------------------------------
identity = _ew("identity", lambda: P.x, "x", numeric=np.copy, kinds="fib",
               rules=(lambda g, ans, x: g,))
negative = _ew("negative", lambda: -P.x, "x", numeric=np.negative, kinds="fi",
               rules=(lambda g, ans, x: negative.bind(g),))
add = _ew("add", lambda: P.x + P.y, "x y", numeric=np.add, kinds="fi",
          rules=(lambda g, ans, x, y: g, lambda g, ans, x, y: g))
subtract = _ew("subtract", lambda: P.x - P.y, "x y", numeric=np.subtract, kinds="fi",
               rules=(lambda g, ans, x, y: g, lambda g, ans, x, y: negative.bind(g)))
multiply = _ew("multiply", lambda: P.x * P.y, "x y", numeric=np.multiply, kinds="fi",
               rules=(lambda g, ans, x, y: multiply.bind(g, y),
                      lambda g, ans, x, y: multiply.bind(g, x)))
divide = _ew("divide", lambda: P.x / P.y, "x y", numeric=np.true_divide,
             rules=(lambda g, ans, x, y: divide.bind(g, y),
                    lambda g, ans, x, y: _t(-P.g * P.x / P.y**2, "g x y",
                                            name="div_vjp1").bind(g, x, y)))
pow_ = _ew("pow", lambda: P.x**P.y, "x y", numeric=numeric.ieee_pow, kinds="fi",
           rules=(lambda g, ans, x, y: _t(P.g * P.y * P.x ** (P.y - 1), "g x y",
                                          name="pow_vjp0").bind(g, x, y),
                  # TF: no gradient leaks into the exponent where the base is <= 0
                  lambda g, ans, x, y: _t(P.g * P.ans * sp.Piecewise((sp.log(P.x), P.x > 0),
                                                                     (0, True)),
                                          "g ans x", name="pow_vjp1").bind(g, ans, x)))
square = _ew("square", lambda: P.x**2, kinds="fi", numeric=np.square)
sqrt = _ew("sqrt", lambda: sp.sqrt(P.x), numeric=np.sqrt,
           rules=(lambda g, ans, x: _t(P.g / (2 * P.ans), "g ans", name="sqrt_vjp").bind(
               g, ans),))
rsqrt = _ew("rsqrt", lambda: 1 / sp.sqrt(P.x), numeric=lambda x: 1.0 / np.sqrt(x),
            rules=(lambda g, ans, x: _t(-P.g * P.ans**3 / 2, "g ans", name="rsqrt_vjp").bind(
                g, ans),))
floordiv = _ew("floordiv", lambda: sp.floor(P.x / P.y), "x y", kinds="fi",
               numeric=lambda x, y: np.floor(x / y) if np.result_type(x, y).kind == "f"
               else np.floor_divide(x, y), rules=(None, None))
floormod = _ew("floormod", lambda: sp.Mod(P.x, P.y), "x y", kinds="fi",
               numeric=np.mod,
               rules=(lambda g, ans, x, y: g,
                      lambda g, ans, x, y: _t(-P.g * sp.floor(P.x / P.y), "g x y",
                                              name="floormod_vjp1").bind(g, x, y)))
abs_ = _ew("abs", lambda: sp.Abs(P.x), kinds="fi", numeric=np.abs)
sign = _ew("sign", lambda: sp.sign(P.x), kinds="fi", numeric=np.sign, rules=(_zero_rule,))
floor = _ew("floor", lambda: sp.floor(P.x), numeric=np.floor, rules=(None,))
ceil = _ew("ceil", lambda: sp.ceiling(P.x), numeric=np.ceil, rules=(None,))
round_ = _ew("round", lambda: F.RoundHalfEven(P.x), numeric=np.rint, rules=(None,))
maximum = _ew("maximum", lambda: sp.Max(P.x, P.y), "x y", kinds="fi", numeric=np.maximum,
              rules=(lambda g, ans, x, y: _t(sp.Piecewise((P.g, P.x >= P.y), (0, True)), "g x y",
                                             name="maximum_vjp0").bind(g, x, y),
                     lambda g, ans, x, y: _t(sp.Piecewise((0, P.x >= P.y), (P.g, True)), "g x y",
                                             name="maximum_vjp1").bind(g, x, y)))
minimum = _ew("minimum", lambda: sp.Min(P.x, P.y), "x y", kinds="fi", numeric=np.minimum,
              rules=(lambda g, ans, x, y: _t(sp.Piecewise((P.g, P.x <= P.y), (0, True)), "g x y",
                                             name="minimum_vjp0").bind(g, x, y),
                     lambda g, ans, x, y: _t(sp.Piecewise((0, P.x <= P.y), (P.g, True)), "g x y",
                                             name="minimum_vjp1").bind(g, x, y)))

# ---- factors of derivative rules -----------------------------------------------------------
# Rules are written with these where the textbook form cancels: 1 - tanh(x)**2 keeps no digit
# where tanh rounds to +-1 (|x| > 19), s*(1 - s) none where the logistic s does, 1 - x**2 only
# the digits x**2's rounding leaves near +-1. Each has its own rule, so every derivative order
# is again a product of accurate factors (sympy.diff of a quotient form would bring back
# sums of near-equal terms, or cosh(x)**3, which overflows from |x| = 237).
_sech = Elementwise(
    "sech", lambda: 1 / sp.cosh(P.x), "x",  # underflows only with the exact value
    rules=(lambda g, ans, x: _t(-P.g * P.ans * P.y, "g ans y", name="sech_vjp").bind(
        g, ans, tanh.bind(x)),))
# the logistic density s(x) s(-x) (s the logistic function), d/dx = s(x) s(-x) tanh(-x/2)
_logistic_density = Elementwise(
    "logistic_density", lambda: 1 / ((1 + sp.exp(-P.x)) * (1 + sp.exp(P.x))), "x",
    rules=(lambda g, ans, x: _t(P.g * P.ans * P.y, "g ans y", name="logistic_density_vjp").bind(
        g, ans, tanh.bind(multiply.bind(x, -0.5))),))
_one_minus_square = Elementwise("one_minus_square", lambda: (1 - P.x) * (1 + P.x), "x",
                                rules=(lambda g, ans, x: _t(-2 * P.g * P.x, "g x",
                                                            name="oms_vjp").bind(g, x),))


def _asin_rule(sign: int) -> Callable:
    """``sign * g / sqrt((1 - x)(1 + x))`` (asin, acos)."""
    name = "asin_vjp" if sign > 0 else "acos_vjp"
    return lambda g, ans, x: _t(sign * P.g / sp.sqrt(P.y), "g y", name=name).bind(
        g, _one_minus_square.bind(x))


def _acosh_rule(g, ans, x):
    """``g / (sqrt(x - 1) sqrt(x + 1))``: the terms of each of its derivatives have one sign,
    so no order cancels (and it is nan below 1, with the value)."""
    return _t(P.g / (sp.sqrt(P.x - 1) * sp.sqrt(P.x + 1)), "g x", name="acosh_vjp").bind(g, x)


# ---- transcendental ------------------------------------------------------------------------
exp = _ew("exp", lambda: sp.exp(P.x), numeric=np.exp,
          rules=(lambda g, ans, x: multiply.bind(g, ans),))
expm1 = _ew("expm1", lambda: F.expm1(P.x), numeric=np.expm1)
log = _ew("log", lambda: sp.log(P.x), numeric=np.log)
log1p = _ew("log1p", lambda: F.log1p(P.x), numeric=np.log1p)
sin = _ew("sin", lambda: sp.sin(P.x), numeric=np.sin)
cos = _ew("cos", lambda: sp.cos(P.x), numeric=np.cos)
tan = _ew("tan", lambda: sp.tan(P.x), numeric=np.tan)
asin = _ew("asin", lambda: sp.asin(P.x), numeric=np.arcsin,
           rules=(_asin_rule(1),))
acos = _ew("acos", lambda: sp.acos(P.x), numeric=np.arccos,
           rules=(_asin_rule(-1),))
atan = _ew("atan", lambda: sp.atan(P.x), numeric=np.arctan)
atan2 = _ew("atan2", lambda: sp.atan2(P.x, P.y), "x y", numeric=np.arctan2)
sinh = _ew("sinh", lambda: sp.sinh(P.x), numeric=np.sinh)
cosh = _ew("cosh", lambda: sp.cosh(P.x), numeric=np.cosh)
tanh = _ew("tanh", lambda: sp.tanh(P.x), numeric=np.tanh,  # tanh' = sech(x)**2
           rules=(lambda g, ans, x: _t(P.g * P.y**2, "g y", name="tanh_vjp").bind(
               g, _sech.bind(x)),))
asinh = _ew("asinh", lambda: sp.asinh(P.x), numeric=np.arcsinh)
acosh = _ew("acosh", lambda: sp.acosh(P.x), numeric=np.arccosh,
            rules=(_acosh_rule,))
atanh = _ew("atanh", lambda: sp.atanh(P.x), numeric=np.arctanh,
            rules=(lambda g, ans, x: divide.bind(g, _one_minus_square.bind(x)),))
erf = _ew("erf", lambda: sp.erf(P.x), numeric=numeric.erf)
# the gamma family (formulas: SymPy's loggamma and polygamma; digamma is SymPy's polygamma(0, x)):
# lgamma' = digamma, digamma' = polygamma(1, .), polygamma(n, .)' = polygamma(n + 1, .), and, as
# in TensorFlow, no gradient in the order n
lgamma = _ew("lgamma", lambda: sp.loggamma(P.x), numeric=numeric.lgamma,
             rules=(lambda g, ans, x: multiply.bind(g, digamma.bind(x)),))
digamma = _ew("digamma", lambda: sp.polygamma(0, P.x), numeric=numeric.digamma,
              rules=(lambda g, ans, x: multiply.bind(g, polygamma.bind(1, x)),))
polygamma = _ew("polygamma", lambda: sp.polygamma(P.x, P.y), "x y", numeric=numeric.polygamma,
                rules=(None, lambda g, ans, n, x: multiply.bind(g, polygamma.bind(
                    add.bind(n, 1), x))))
# erfc in its own right (1 - erf loses its tail), the scaled Bessel functions and the Hurwitz
# zeta; derivatives are the heads' own: erfc' = -2/sqrt(pi) exp(-x**2), i0e' = i1e - sign(x) i0e,
# i1e' = i0e - i1e (sign(x) + 1/x) (1/2 at 0), and zeta's -x zeta(x + 1, q) in q, none in x (TF)
erfc = _ew("erfc", lambda: sp.erfc(P.x), numeric=numeric.erfc)
bessel_i0e = _ew("bessel_i0e", lambda: F.BesselI0e(P.x), numeric=numeric.bessel_i0e)
bessel_i1e = _ew("bessel_i1e", lambda: F.BesselI1e(P.x), numeric=numeric.bessel_i1e)
zeta = _ew("zeta", lambda: sp.zeta(P.x, P.y), "x y", numeric=numeric.zeta, rules=(None, "diff"))

for _op in (add, multiply):
    _op.commutative = True  # x*y and y*x are one tensor-level node (as one element atom)

# ---- comparisons and logic ------------------------------------------------------------------
_CMP = dict(kinds="fi", out="bool", rules=(None, None))
less = _ew("less", lambda: P.x < P.y, "x y", numeric=np.less, **_CMP)
less_equal = _ew("less_equal", lambda: P.x <= P.y, "x y", numeric=np.less_equal, **_CMP)
greater = _ew("greater", lambda: P.x > P.y, "x y", numeric=np.greater, **_CMP)
greater_equal = _ew("greater_equal", lambda: P.x >= P.y, "x y", numeric=np.greater_equal, **_CMP)
equal = _ew("equal", lambda: sp.Eq(P.x, P.y, evaluate=False), "x y", numeric=np.equal,
            **{**_CMP, "kinds": "fib"})
not_equal = _ew("not_equal", lambda: sp.Ne(P.x, P.y, evaluate=False), "x y", numeric=np.not_equal,
                **{**_CMP, "kinds": "fib"})
logical_and = _ew("logical_and", lambda: sp.And(P.b1, P.b2), "b1 b2", numeric=np.logical_and,
                  kinds="b", rules=(None, None))
logical_or = _ew("logical_or", lambda: sp.Or(P.b1, P.b2), "b1 b2", numeric=np.logical_or,
                 kinds="b", rules=(None, None))
logical_not = _ew("logical_not", lambda: sp.Not(P.b1), "b1", numeric=np.logical_not,
                  kinds="b", rules=(None,))
where = _ew("where", lambda: sp.Piecewise((P.x, P.c), (P.y, True)), "c x y",
            args=("bool", "T", "T"),
            kinds="fib", numeric=np.where,
            rules=(None,
                   lambda g, ans, c, x, y: where.bind(c, g, 0),
                   lambda g, ans, c, x, y: where.bind(c, 0, g)))
# dropout(x, u, rate, scale): x * scale where the uniform draw u >= rate, else exactly 0 (a
# dropped inf or NaN is 0); its derivative in x is the same mask times the scale, in the draw
# zero (piecewise constant), and none in the rate and scale (plain numbers)
dropout = _ew("dropout", lambda: sp.Piecewise((P.x * P.w, P.y >= P.z), (0, True)), "x y z w",
              numeric=lambda x, u, rate, scale: np.where(u >= rate, x * scale, 0.0),
              rules=("diff", "diff", None, None))
# (x - y)**2, TensorFlow's squared_difference (the variance of moments)
squared_difference = _ew("squared_difference", lambda: (P.x - P.y) ** 2, "x y", kinds="fi",
                         numeric=lambda x, y: np.square(x - y))
# x * y, and exactly 0 where y is 0 even if x is inf or nan (TF's mul_no_nan); TF's rules,
# themselves mul_no_nan: d/dx = mul_no_nan(g, y), d/dy = mul_no_nan(x, g) -- so at y == 0 the
# derivative in y is x g (the product's), not the select's 0


def _multiply_no_nan(x, y):
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(np.equal(y, 0), np.zeros((), np.result_type(x, y)), np.multiply(x, y))


multiply_no_nan = _ew(
    "multiply_no_nan", lambda: sp.Piecewise((0, sp.Eq(P.y, 0, evaluate=False)), (P.x * P.y, True)),
    "x y", numeric=_multiply_no_nan,
    rules=(lambda g, ans, x, y: multiply_no_nan.bind(g, y),
           lambda g, ans, x, y: multiply_no_nan.bind(x, g)))
# TF computes clip_by_value as maximum(minimum(t, hi), lo) and differentiates those two ops
# (ties to the first argument; nan compares false): the gradient passes to t at and between
# the bounds, to a bound beyond it, and to lo alone when lo > hi (the result is then lo)


def _clip_t():
    return sp.And(P.x <= P.z, P.x >= P.y)  # min(t, hi) is t, and it is >= lo


def _clip_hi():
    return sp.And(P.x > P.z, P.z >= P.y)  # min(t, hi) is hi, and it is >= lo


clip_by_value = _ew(
    "clip_by_value", lambda: sp.Max(sp.Min(P.x, P.z), P.y), "x y z", kinds="fi",
    numeric=lambda t, lo, hi: np.maximum(np.minimum(t, hi), lo),
    rules=(lambda g, ans, t, lo, hi: _t(sp.Piecewise((P.g, _clip_t()), (0, True)), "g x y z",
                                        name="clip_vjp0").bind(g, t, lo, hi),
           lambda g, ans, t, lo, hi: _t(sp.Piecewise((0, sp.Or(_clip_t(), _clip_hi())),
                                                     (P.g, True)),
                                        "g x y z", name="clip_vjp1").bind(g, t, lo, hi),
           lambda g, ans, t, lo, hi: _t(sp.Piecewise((P.g, _clip_hi()), (0, True)), "g x y z",
                                        name="clip_vjp2").bind(g, t, lo, hi)))

# ---- activations (nn) ----------------------------------------------------------------------


def _step():
    return sp.Heaviside(P.x, 0)  # TF: relu'(0) = 0


relu = _ew("relu", lambda: sp.Max(P.x, 0), kinds="fi", numeric=lambda x: np.maximum(x, 0),
           rules=(lambda g, ans, x: _t(P.g * _step(), "g x", name="relu_vjp").bind(g, x),))
relu6 = _ew("relu6", lambda: sp.Min(sp.Max(P.x, 0), 6), kinds="fi",
            numeric=lambda x: np.minimum(np.maximum(x, 0), 6),
            rules=(lambda g, ans, x: _t(P.g * _step() * sp.Heaviside(6 - P.x, 0), "g x",
                                        name="relu6_vjp").bind(g, x),))
elu = _ew("elu", lambda: sp.Piecewise((P.x, P.x > 0), (F.expm1(P.x), True)),
          numeric=lambda x: np.where(x > 0, x, np.expm1(x)))
_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _selu_constants() -> tuple:
    return sp.Float(_SELU_ALPHA), sp.Float(_SELU_SCALE)


def _selu():
    alpha, scale = _selu_constants()
    return scale * sp.Piecewise((P.x, P.x > 0), (alpha * F.expm1(P.x), True))


def _selu_vjp():  # TF's SeluGrad: scale where the activation is >= 0, so selu'(0) = scale
    alpha, scale = _selu_constants()
    return P.g * sp.Piecewise((scale, P.x >= 0), (scale * alpha * sp.exp(P.x), True))


selu = _ew("selu", _selu,
           numeric=lambda x: _SELU_SCALE * np.where(x > 0, x, _SELU_ALPHA * np.expm1(x)),
           rules=(lambda g, ans, x: _t(_selu_vjp(), "g x", name="selu_vjp").bind(g, x),))
# sigmoid' = s(x) s(-x), not s (1 - s), which cancels where s rounds to 1
sigmoid = _ew("sigmoid", lambda: 1 / (1 + sp.exp(-P.x)), numeric=_sigmoid,
              rules=(lambda g, ans, x: multiply.bind(g, _logistic_density.bind(x)),))
# stable: max(x, 0) + log1p(exp(-|x|)); TF: softplus' = sigmoid
softplus = _ew("softplus", lambda: sp.Max(P.x, 0) + F.log1p(sp.exp(-sp.Abs(P.x))),
               numeric=lambda x: np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x))),
               rules=(lambda g, ans, x: multiply.bind(g, sigmoid.bind(x)),))


@functools.lru_cache(maxsize=None)
def leaky_relu_op(alpha: float) -> Elementwise:
    """``leaky_relu`` with slope ``alpha`` below zero (TF: ``x if x > 0 else alpha * x``)."""
    a = G.number(alpha)
    return Elementwise("leaky_relu", sp.Piecewise((P.x, P.x > 0), (a * P.x, True)), (P.x,),
                       numeric=lambda x: np.where(x > 0, x, alpha * x))


# labels z, logits x; TF's stable form; gradient sigmoid(x) - z everywhere, taken as
# 1 - z - sigmoid(-x) for x >= 0 (sigmoid(x) - 1 keeps no digit where sigmoid rounds to 1)
def _sce_vjp1():
    return P.g * sp.Piecewise((1 - P.z - P.w, P.x >= 0), (P.y - P.z, True))


sigmoid_cross_entropy_with_logits = _ew(
    "sigmoid_cross_entropy_with_logits",
    lambda: sp.Max(P.x, 0) - P.x * P.z + F.log1p(sp.exp(-sp.Abs(P.x))), "z x",
    numeric=lambda z, x: np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x))),
    rules=(lambda g, ans, z, x: _t(-P.g * P.x, "g x", name="sce_vjp0").bind(g, x),
           lambda g, ans, z, x: _t(_sce_vjp1(), "g z x y w", name="sce_vjp1").bind(
               g, z, x, sigmoid.bind(x), sigmoid.bind(negative.bind(x)))))


def recipe_atom(recipe: tuple, pattern: tuple | None = None) -> tuple:
    """``(atom, stand-ins)`` of a fused chain ``(op, consts, same, children)`` built on fresh
    stand-ins -- the op's own arguments first, then each child's, in order -- so two
    arguments fused from the same op never share one, unless ``pattern`` (see
    :func:`sharing`) says they hold one value. The stand-ins are listed once each."""
    made: list = []

    def stand_in(i: int):
        p = len(made)
        made.append(made[pattern[p]] if pattern is not None and pattern[p] != p
                    else G.Leaf.new(f"s{i}"))
        return made[p]

    def build(recipe):
        op, consts, same, children = recipe
        fixed = dict(consts)
        parts = {}
        built = dict(children)
        for i in range(len(op.placeholders)):
            if i not in fixed and i not in built and same[i] == i:
                parts[i] = stand_in(i)
        for i, child in children:
            parts[i] = build(child)
        args = [fixed[i] if i in fixed else fixed[same[i]] if same[i] in fixed
                else parts[same[i]] for i in range(len(op.placeholders))]
        return op._build_one(*args)

    atom = build(recipe)
    return atom, shared_values(made, pattern)


@functools.lru_cache(maxsize=256)
def _recipe_program(recipe: tuple, pattern: tuple | None = None) -> tuple:
    """A numpy program of a fused chain's arguments (:func:`recipe_atom`'s stand-ins)."""
    atom, stand_ins = recipe_atom(recipe, pattern)
    return E.program([atom], stand_ins, quiet=False), atom
