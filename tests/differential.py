"""Seeded random programs for differential testing: eager values against compiled code.

A program draws ops from the tables below over a few input variables holding special values
(signed zeros, infinities, nan, huge and tiny magnitudes) and ordinary ones. Its value, its
gradient and a second derivative are computed eagerly on tapes, then the same tensors are
compiled and evaluated at the same point.

Eager values use numpy's transcendental functions and compiled code the C library's (or
symtape's own ``exp``, ``log``, ``tanh``, ``expm1``, ``log1p`` in vectorised kernels); the
two differ by an ulp now and then, which cancellation can amplify at ill-conditioned
points. So :func:`check` compares each side with the DAG interpreted by the matching
library (exactly: folding, nan patterns, infinities, signed zeros), and eager with compiled
directly wherever the two libraries agree on the DAG's value.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re

import numpy as np
import sympy as sp

import symtape as st
from symtape.element import evaluate, graph
from symtape.element import added_heads as F
from symtape.compile import strategy
from symtape.core import apply as binder
from symtape.codegen import kernel, loops

SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 3.0, 1e300, -1e300, 1e-300, np.inf,
                    -np.inf, np.nan, 1e-8, 40.0, -745.0])

UNARY = {
    "neg": lambda a: -a, "abs": st.abs, "sqrt": st.sqrt, "rsqrt": st.math.rsqrt,
    "exp": st.exp, "log": st.log, "log1p": st.math.log1p, "expm1": st.math.expm1,
    "sin": st.sin, "cos": st.cos, "tan": st.tan, "tanh": st.tanh, "sigmoid": st.nn.sigmoid,
    "softplus": st.nn.softplus, "relu": st.nn.relu, "elu": st.nn.elu, "selu": st.nn.selu,
    "acos": st.acos, "asin": st.asin, "atan": st.atan, "atanh": st.atanh, "acosh": st.acosh,
    "asinh": st.asinh, "sinh": st.sinh, "cosh": st.cosh, "square": st.square,
    "recip": lambda a: 1.0 / a, "half_pow": lambda a: a ** 0.5, "cube": lambda a: a ** 3,
    "pow_zero": lambda a: a ** 0.0, "erf": st.erf, "sign": st.sign, "floor": st.floor,
    "x_minus_x": lambda a: a - a, "x_times_zero": lambda a: a * 0.0, "plus_zero": lambda a: a + 0.0,
    "x_over_x": lambda a: a / a, "clip": lambda a: st.clip_by_value(a, -1.0, 2.0),
    "leaky": lambda a: st.nn.leaky_relu(a, 0.1),
    "softmax": lambda a: st.nn.softmax(_vector(a)),
    "log_softmax": lambda a: st.nn.log_softmax(_vector(a)),
    "reverse": lambda a: st.reverse(_vector(a), [0]),
    "gather": lambda a: st.gather(_vector(a), (2 + 7 * np.arange(SIZE[0]) ** 2) % SIZE[0]),
    "slice_pad": lambda a: st.pad(_vector(a)[1:], [[1, 0]]),
    "det": lambda a: st.linalg.det(st.stack([_vector(a), _vector(a) ** 2, st.ones(3)])),
    "inv_row": lambda a: st.linalg.inv(st.stack([_vector(a), st.reverse(_vector(a), [0]),
                                                 st.constant([1.0, 0.0, 2.0])]))[0],
}
BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "max": st.maximum, "min": st.minimum, "pow": st.pow,
    "atan2": st.atan2, "where_gt": lambda a, b: st.where(a > b, a, b),
    "where_sqrt_log": lambda a, b: st.where(a > 0, st.sqrt(a), st.log(-b)),
    "where_recip": lambda a, b: st.where(b != 0, a / b, 0.0),
    "where_pow": lambda a, b: st.where(a > 0, a ** b, 0.0),
    "where_acos": lambda a, b: st.where(st.abs(a) < 1, st.acos(a), b),
    "clip_t": lambda a, b: st.clip_by_value(a, b, 1.0),
    "dot": lambda a, b: st.tensordot(_vector(a), _vector(b), 1),
    "outer_sum": lambda a, b: st.reduce_sum(st.einsum("i,j->ij", _vector(a), _vector(b)), 0),
    "matvec": lambda a, b: st.matmul(st.reshape(st.concat([_vector(a), _vector(b), _vector(a)
                                                            * 0.5], 0), (3, 3)),
                                     st.reshape(_vector(b), (3, 1)))[:, 0],
    "stack_max": lambda a, b: st.reduce_max(st.stack([_vector(a), _vector(b)]), 0),
    "xent": lambda a, b: st.nn.softmax_cross_entropy_with_logits(
        st.nn.softmax(_vector(b)), _vector(a)),
    "sigmoid_xent": lambda a, b: st.nn.sigmoid_cross_entropy_with_logits(
        st.nn.sigmoid(b), a),
}


#: The length of the programs' vectors (3; :func:`check_large` sets more).
SIZE = [3]


def _vector(a):
    """``a`` as a vector of :data:`SIZE` (scalars broadcast)."""
    return a if a.shape == (SIZE[0],) else st.broadcast_to(a, (SIZE[0],))
#: The tables of programs over long vectors (:func:`check_large`): the size-generic ops,
#: and moves and products of long vectors.
LARGE_UNARY = {k: v for k, v in UNARY.items() if k not in ("det", "inv_row")} | {
    "swap_halves": lambda a: st.concat([_vector(a)[SIZE[0] // 2:], _vector(a)[:SIZE[0] // 2]],
                                       0),
    "transpose": lambda a: st.reshape(st.transpose(st.reshape(_vector(a), (3, -1))), (-1,)),
    "tile_half": lambda a: st.tile(_vector(a)[: SIZE[0] // 2], [2]),
    "scatter": lambda a: st.pad(_vector(a)[2:], [[2, 0]]),
}
LARGE_BINARY = {k: v for k, v in BINARY.items() if k not in ("matvec", "outer_sum")} | {
    "matmul": lambda a, b: st.reshape(st.matmul(st.reshape(_vector(a), (-1, 3)),
                                                st.reshape(_vector(b)[:9], (3, 3))), (-1,)),
}


REDUCE = {
    "sum": st.reduce_sum, "max": st.reduce_max, "mean": st.reduce_mean,
    "prod": st.reduce_prod, "lse": st.reduce_logsumexp, "norm": st.norm,
}


def random_values(rng: np.random.Generator, shape: tuple, special=SPECIAL) -> np.ndarray:
    """Half special values (of ``special``), half ordinary ones."""
    special = rng.choice(special, size=shape)
    ordinary = rng.normal(scale=2.0, size=shape)
    return np.where(rng.random(shape) < 0.5, special, ordinary)


def program(rng: np.random.Generator, n_ops: int = 7, unary: dict = UNARY,
            binary: dict = BINARY):
    """A random function of a list of tensors (the draw is fixed by ``rng`` now); ``run(xs,
    between)`` calls ``between(k, pool)`` after op ``k`` (assignments between ops)."""
    steps = []
    for _ in range(n_ops):
        kind = rng.choice(["u", "b", "b", "r"], p=[0.45, 0.2, 0.2, 0.15])
        table = {"u": unary, "b": binary, "r": REDUCE}[kind]
        name = rng.choice(sorted(table))
        steps.append((kind, str(name), int(rng.integers(1 << 30)), int(rng.integers(1 << 30))))

    def run(xs, between=None):
        pool = list(xs)
        for k, (kind, name, i, j) in enumerate(steps):
            a, b = pool[-1 - i % min(len(pool), 3)], pool[j % len(pool)]
            if kind == "u":
                pool.append(unary[name](a))
            elif kind == "b":
                pool.append(binary[name](a, b))
            else:
                pool.append(REDUCE[name](a))
            if between is not None:
                between(k, pool)
        return st.reduce_sum(pool[-1]) + st.reduce_sum(pool[-2]) * 0.5

    return run, steps


def mismatches(eager: np.ndarray, compiled: np.ndarray, rtol: float = 1e-9) -> list:
    """Flat indices where the values disagree (see the module docstring)."""
    a, b = np.ravel(eager), np.ravel(compiled)
    bad = np.isnan(a) != np.isnan(b)
    both = ~np.isnan(a) & ~np.isnan(b)
    inf = both & (np.isinf(a) | np.isinf(b))
    bad |= inf & (a != b)
    zero = both & (a == 0) & (b == 0)
    bad |= zero & (np.signbit(a) != np.signbit(b))
    fin = both & np.isfinite(a) & np.isfinite(b)
    with np.errstate(all="ignore"):
        bad |= fin & (np.abs(a - b) > rtol * np.maximum(np.abs(a), np.abs(b)))
    return np.flatnonzero(bad).tolist()


# --------------------------------------------------------------------------------------------
# References: the DAG interpreted with numpy's functions, and with the C library's
# --------------------------------------------------------------------------------------------

_LIBM_NAMES = {sp.exp: "exp", sp.log: "log", F.log1p: "log1p", F.expm1: "expm1",
               sp.sin: "sin", sp.cos: "cos", sp.tan: "tan", sp.asin: "asin", sp.acos: "acos",
               sp.atan: "atan", sp.sinh: "sinh", sp.cosh: "cosh", sp.tanh: "tanh",
               sp.asinh: "asinh", sp.acosh: "acosh", sp.atanh: "atanh", sp.erf: "erf",
               sp.atan2: "atan2", sp.Pow: "pow"}


_VECMATH = {"exp": sp.exp, "log": sp.log, "tanh": sp.tanh, "expm1": F.expm1,
            "log1p": F.log1p, "sin": sp.sin, "cos": sp.cos}


def vector_functions(f) -> tuple:
    """The functions the compiled function ``f`` computes with symtape's own IR (vectorised
    kernels, one point or a vector of them; see ``symtape/codegen/vecmath.py``) rather than
    the C library."""
    return tuple(name for name in _VECMATH
                 if re.search(rf"@st\.{name}\.(v\d+)?f64\(", f.llvm_ir))


@functools.cache
def libm_heads(vector: tuple = ()) -> dict:
    """The interpreter's head table with the elementary functions compiled code uses in
    place of numpy's: the C library's, and for the names in ``vector`` symtape's own (their
    accuracy is tested against mpmath)."""
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    heads = dict(evaluate.HEADS)
    for head, name in _LIBM_NAMES.items():
        fn = getattr(libm, name)
        arity = 2 if name in ("atan2", "pow") else 1
        fn.restype = ctypes.c_double
        fn.argtypes = [ctypes.c_double] * arity
        heads[head] = _elementwise(fn, arity)
    x = st.symbol("x")
    for name in vector:
        # in lane mode, where every one of them is symtape's own (sin and cos only there)
        limit, least = kernel.LOOP_VECTORIZE_MAX_ACCESSES, kernel.LANE_MIN_OPS
        kernel.LOOP_VECTORIZE_MAX_ACCESSES, kernel.LANE_MIN_OPS = -1, 0
        try:
            own = st.compile(getattr(st, name)(x), [x], name=f"reference_{name}")
        finally:
            kernel.LOOP_VECTORIZE_MAX_ACCESSES, kernel.LANE_MIN_OPS = limit, least
        heads[_VECMATH[name]] = lambda a, own=own: own(np.asarray(a, dtype=np.float64))
    return heads


def _elementwise(fn, arity: int):
    vec = np.frompyfunc(fn, arity, 1)

    def run(*args):
        with np.errstate(all="ignore"):  # the C library raises IEEE flags numpy would report
            return np.asarray(vec(*args), dtype=np.float64)

    return run


def reference(outputs, xs, heads: dict) -> list:
    """The DAG of ``outputs`` interpreted with ``heads`` at the values of ``xs``."""
    atoms = [a for t in outputs for a in t._atoms.flat]
    leaves = [a for x in xs for a in x._atoms.flat]
    run = evaluate.program(atoms, leaves, heads)
    flat = run(*[np.float64(v) for x in xs for v in np.ravel(x.numpy())])
    out, k = [], 0
    for t in outputs:
        out.append(np.array(flat[k:k + t.size], dtype=np.float64).reshape(t.shape))
        k += t.size
    return out


def _value_gradient_hessian(fn, xs):
    """The value, gradients and second derivatives (of the gradients' sum) on tapes."""
    with st.GradientTape(persistent=True) as outer:
        with st.GradientTape() as inner:
            y = fn(xs)
        gs = inner.gradient(y, xs, unconnected_gradients="zero")
        total = sum(st.reduce_sum(g) for g in gs)
    hs = outer.gradient(total, xs, unconnected_gradients="zero")
    return [y, *gs, *hs]


def check(rng: np.random.Generator, n_inputs: int = 2, size: int = 3) -> list:
    """The disagreements of one random program: ``(what, output, indices, a, b)`` for
    eager vs its numpy reference, compiled vs its libm reference, and eager vs compiled
    where the two references agree."""
    fn, steps = program(rng)
    xs = [st.Variable(random_values(rng, (size,)), name=f"x{k}") for k in range(n_inputs)]
    outputs = _value_gradient_hessian(fn, xs)
    eager = [np.asarray(t.numpy(), dtype=np.float64) for t in outputs]
    f = st.compile(outputs, xs)
    compiled = [np.asarray(c, dtype=np.float64) for c in f(*[x.numpy() for x in xs])]
    ref_np = reference(outputs, xs, evaluate.HEADS)
    ref_libm = reference(outputs, xs, libm_heads(vector_functions(f)))
    found, residues = [], None
    for k in range(len(outputs)):
        stable = ~np.isin(np.arange(outputs[k].size), mismatches(ref_np[k], ref_libm[k]))
        pairs = (("eager/numpy-DAG", eager[k], ref_np[k], None),
                 ("compiled/libm-DAG", compiled[k], ref_libm[k], None),
                 ("eager/compiled", eager[k], compiled[k], stable))
        for what, a, b, where in pairs:
            bad = [i for i in mismatches(a, b) if where is None or where[i]]
            if bad and what.startswith("eager"):
                if residues is None:
                    residues = _rounding_residues(outputs, xs, ref_np)
                bad = [i for i in bad if i not in residues[k]]
            if bad:
                found.append((what, k, bad, np.ravel(a)[bad], np.ravel(b)[bad], steps))
    return found


def _rounding_residues(outputs, xs, exact: list, samples: int = 8) -> list:
    """Per output, the places whose DAG value depends on where arithmetic rounds: it moves
    when each rounding operation's result is moved by an ulp (:func:`reference_rounded`),
    a residue of a cancellation of rounded numbers. There a small node's eager value,
    added tensor op by tensor op, and the element view, one sum of the terms its adds
    merged, may round differently (``0`` and ``1.4e-17``: docs/tensorflow.md, "One rule
    for values")."""
    moved = reference_rounded(outputs, xs, samples, np.random.default_rng(0), 2.0 ** -52)
    return [set().union(*[mismatches(e, m[j]) for j in range(samples)])
            for e, m in zip(exact, moved)]


#: :data:`SPECIAL` for float32 programs: signed zeros, infinities, nan, and magnitudes whose
#: ``exp`` overflows (``1e4``) and underflows (``-104``) in float32 but whose powers in the
#: programs stay inside float32's range (inputs near its limits make intermediates overflow
#: at one evaluation order and not another, which tells nothing about either).
SPECIAL32 = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 3.0, 1e4, -1e4, 1e-3, np.inf,
                      -np.inf, np.nan, 1e-4, 20.0, -104.0], dtype=np.float32)


def reference_in(outputs, xs, scale: float = 0.0, rng=None) -> list:
    """The DAG of ``outputs`` interpreted by numpy in float64 at the values of ``xs``, each
    moved by ``scale`` times itself in a random direction when ``rng`` is given."""
    atoms = [a for t in outputs for a in t._atoms.flat]
    leaves = [a for x in xs for a in x._atoms.flat]
    run = evaluate.program(atoms, leaves, evaluate.HEADS)
    point = np.concatenate([np.ravel(x.numpy()).astype(np.float64) for x in xs])
    if rng is not None:
        point = point * (1.0 + scale * rng.choice([-1.0, 1.0], size=point.shape))
    flat = run(*[np.float64(v) for v in point])
    out, k = [], 0
    for t in outputs:
        out.append(np.array(flat[k:k + t.size], dtype=np.float64).reshape(t.shape))
        k += t.size
    return out


def reference_rounded(outputs, xs, samples: int, rng, scale: float = 2.0 ** -23) -> list:
    """``samples`` evaluations at once of the DAG of ``outputs`` by numpy in float64 at the
    values of ``xs``, each rounding operation's result moved by up to ``scale`` times itself
    at random (float32 rounds each result by up to 2**-24 of itself; a float32 elementary
    function is an ulp off now and then): where these move a value, it depends on where
    float32 arithmetic rounds -- a residue of a cancellation of rounded intermediates, made
    large by what multiplies it -- whatever the points. Results that round nothing (a
    select, ``Max``, ``abs``, a negation, a copy, small integers) are not moved, so ties
    stay ties. Arrays of shape ``(samples,) + shape``, one per output."""
    atoms = [a for t in outputs for a in t._atoms.flat]
    values = {}
    for x in xs:
        for a, v in zip(x._atoms.flat, np.ravel(x.numpy())):
            values[a] = np.full(samples, v, dtype=np.float64)
    for node in graph.reachable(atoms, through_forward=True):
        v = np.broadcast_to(evaluate.evaluate_from([node], values)[0], (samples,))
        if v.dtype.kind == "f":
            with np.errstate(all="ignore"):
                # integers up to 2**24 are float32's exactly; larger ones are rounded too
                exact = ~np.isfinite(v) | ((v == np.round(v)) & (np.abs(v) <= 2.0 ** 24))
                for op in node.evaluation_operands():
                    w = values.get(op)
                    if w is not None and w.dtype.kind == "f":
                        exact |= np.abs(v) == np.abs(w)
                v = np.where(exact, v, v * (1.0 + scale * rng.uniform(-1.0, 1.0, samples)))
        values[node] = v
    out = []
    for t in outputs:
        cols = [values[a] if isinstance(a, (graph.Leaf, graph.Node)) else
                np.full(samples, graph.const_value(a)) for a in t._atoms.flat]
        out.append(np.stack(cols, -1).reshape((samples,) + t.shape) if cols else
                   np.zeros((samples,) + t.shape))
    return out


def _beyond(a: np.ndarray, b: np.ndarray, rtol: float, atol: float) -> list:
    """:func:`mismatches` of ``a`` and ``b`` but for finite pairs within ``atol`` (not both
    zeros)."""
    a, b = np.ravel(a), np.ravel(b)
    with np.errstate(invalid="ignore"):
        return [i for i in mismatches(a, b, rtol)
                if not (np.isfinite(a[i]) and np.isfinite(b[i]) and abs(a[i] - b[i]) <= atol
                        and (a[i] or b[i]))]  # two zeros: their signs agree


def check_float32(rng: np.random.Generator, n_inputs: int = 2, size: int = 3,
                  rtol: float = 1e-4, atol: float = 1e-6) -> list:
    """The disagreements of one random program in float32 (``st.config.floatx()`` float32
    while it is built, so its own constants are float32 too). Its eager values, gradients
    and second derivatives, and the same tensors compiled with ``dtype="float32"``, must be
    float32. The reference is the DAG interpreted by numpy in float64 at the same float32
    points, rounded to float32 (a value beyond float32's range is its infinity). Where the
    reference is well conditioned -- it moves by less than ``rtol / 10`` when the points
    move by float32's rounding (three random directions) and when each rounding operation
    does (:func:`reference_rounded`: a residue of a cancellation of rounded intermediates,
    made large by what multiplies it, is float32's rounding, not a value) -- and within
    float32's range, eager, compiled and the reference agree within ``rtol``, or ``atol``
    where the values are residues of a cancellation of numbers of order 1 (8 float32 ulps of
    1); zeros agree in sign. Where float32's range is reached -- any of the three an
    infinity or nan, or the reference a zero that float64 does not make -- the values are
    not compared: an intermediate can overflow (or a comparison flip by rounding) at one
    and not the other (eager fused templates keep intermediates that compiled float32 code
    rounds), and the exact nan, infinity and zero patterns are the float64 test's
    (:func:`check`)."""
    fn, steps = program(rng)
    xs = [st.Variable(random_values(rng, (size,), SPECIAL32).astype(np.float32),
                      name=f"x{k}") for k in range(n_inputs)]
    saved = st.config.floatx()
    st.config.set_floatx("float32")
    try:
        outputs = _value_gradient_hessian(fn, xs)
    finally:
        st.config.set_floatx(saved)
    found = [("dtype", k, t.dtype.name, steps) for k, t in enumerate(outputs)
             if t.dtype != np.float32]
    f = st.compile(outputs, xs, dtype="float32")
    native = f(*[x.numpy() for x in xs])
    found += [("compiled dtype", k, np.asarray(c).dtype.name, steps)
              for k, c in enumerate(native) if np.asarray(c).dtype != np.float32]
    eager = [np.asarray(t.numpy(), dtype=np.float64) for t in outputs]
    compiled = [np.asarray(c, dtype=np.float64) for c in native]
    exact = reference_in(outputs, xs)
    moved = [reference_in(outputs, xs, 2.0 ** -20, np.random.default_rng(k)) for k in (1, 2, 3)]
    rounded = reference_rounded(outputs, xs, 6, np.random.default_rng(4))
    moved += [[r[s] for r in rounded] for s in range(6)]
    with np.errstate(over="ignore"):
        ref = [r.astype(np.float32).astype(np.float64) for r in exact]
    for k in range(len(outputs)):
        unsteady = set().union(*(_beyond(m[k], exact[k], rtol / 10, atol) for m in moved))
        a, b, r, e = (np.ravel(v) for v in (eager[k], compiled[k], ref[k], exact[k]))
        ranged = set(np.flatnonzero(~np.isfinite(a) | ~np.isfinite(b) | ~np.isfinite(r) |
                                    ((r == 0) & (e != 0))).tolist())
        for what, x, y in (("eager32/numpy64-DAG", a, r), ("compiled32/numpy64-DAG", b, r),
                           ("eager32/compiled32", a, b)):
            bad = [i for i in _beyond(x, y, rtol, atol) if i not in unsteady | ranged]
            if bad:
                found.append((what, k, bad, x[bad], y[bad], steps))
    return found


def check_large(rng: np.random.Generator, n_inputs: int = 2, size: int = 300) -> list:
    """The disagreements of one random program over vectors of ``size`` (above the size up
    to which eager values settle on the element view): eager values, gradients and second
    derivatives against the compiled loop nests of the same tensors (both at the tensor
    level, where structural zeros are exact through moves and elementwise ops), but at the
    places the last-ulp rule leaves out (:func:`_last_ulps`); the loop nests' products
    are rounded term by term, as eager values' (their FMA is the other documented rule)."""
    SIZE[0] = size
    try:
        fn, steps = program(rng, unary=LARGE_UNARY, binary=LARGE_BINARY)
        xs = [st.Variable(random_values(rng, (size,)), name=f"x{k}")
              for k in range(n_inputs)]
        outputs = _value_gradient_hessian(fn, xs)
    finally:
        SIZE[0] = 3
    eager = [np.asarray(t.numpy(), dtype=np.float64) for t in outputs]
    # loop nests, as the tensors' eager values (also where the element view would fold a
    # scatter away or many small ops would compile faster element by element)
    limits = {"LOOP_MIN_ATOMS": 0, "FOLD_PROBE_ATOMS": 0, "LOOP_MAX_BLOCKS": 1 << 30}
    saved = {name: getattr(strategy, name) for name in limits}
    loops.CONTRACT_PRODUCTS = False  # products rounded as eager values' (the FMA rule aside)
    try:
        for name, value in limits.items():
            setattr(strategy, name, value)
        f = st.compile(outputs, xs)
        compiled = [np.asarray(c, dtype=np.float64) for c in f(*[x.numpy() for x in xs])]
        paths = {s.name for s in f.strategies}
        assert "element-kernel" not in paths, paths
    finally:
        for name, value in saved.items():
            setattr(strategy, name, value)
        loops.CONTRACT_PRODUCTS = True
    what = "eager/compiled-loops"
    if not _disagreements(what, zip(eager, compiled), steps):  # (references only then)
        return []
    return _disagreements(what, zip(eager, compiled), steps, _last_ulps(outputs, xs))


def _disagreements(what: str, pairs, steps, unstable: list | None = None) -> list:
    """``(what, output, indices, a, b, steps)`` where the pairs' arrays disagree, but at
    the places ``unstable[output]`` holds."""
    found = []
    for k, (a, b) in enumerate(pairs):
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        if a.shape != b.shape:
            found.append((what, k, "shapes", a.shape, b.shape, steps))
            continue
        bad = mismatches(a, b)
        if unstable is not None:
            bad = [i for i in bad if i not in unstable[k]]
        if bad:
            found.append((what, k, bad[:5], np.ravel(a)[bad[:5]], np.ravel(b)[bad[:5]], steps))
    return found


def check_mutation(rng: np.random.Generator, n_inputs: int = 2, size: int = 3) -> list:
    """Eager values are snapshots. A random program whose variables are assigned between its
    ops: every value stays what it was when computed, whatever is assigned later; and each
    value computed from arguments of one time (no assignment between their making and its
    own: docs/tensorflow.md, "One rule for values", under mutation) equals the value of the
    same program over distinct variables, a new one for each value assigned (numpy's value on the
    snapshots, with the element DAG's exact folds)."""
    fn, steps = program(rng)
    start = [random_values(rng, (size,)) for _ in range(n_inputs)]
    schedule = {k: (int(rng.integers(n_inputs)), random_values(rng, (size,)))
                for k in range(len(steps)) if rng.random() < 0.4}
    xs = [st.Variable(v) for v in start]
    by_add = {k: bool(rng.integers(2)) for k in schedule}
    held: dict = {}  # the value each assignment left (assign_add rounds)
    made: dict = {}  # op -> (tensor, its value then, whether its arguments were of one time)

    def assign(k, pool):
        t = pool[-1]
        made[k] = (t, np.array(t.numpy(), dtype=np.float64),
                   t._epoch is None or t._epoch == binder.clock())
        if k in schedule:
            m, v = schedule[k]
            xs[m].assign_add(v) if by_add[k] else xs[m].assign(v)
            held[k] = xs[m].numpy()

    y = fn(xs, assign)
    versions = [[st.Variable(v)] for v in start]
    ref: dict = {}

    def fresh(k, pool):
        ref[k] = np.asarray(pool[-1].numpy(), dtype=np.float64)
        if k in schedule:
            m, _ = schedule[k]
            old, new = versions[m][-1], st.Variable(held[k])
            versions[m].append(new)
            pool[:] = [new if p is old else p for p in pool]

    fn([vs[0] for vs in versions], fresh)
    del y
    found = _disagreements("value changed after an assignment",
                           [(np.asarray(t.numpy(), dtype=np.float64), then)
                            for t, then, _ in made.values()], (steps, sorted(schedule)))
    return found + _disagreements(
        "mutated/snapshots", [(then, ref[k]) if one_time else (ref[k], ref[k])
                              for k, (_, then, one_time) in made.items()],
        (steps, sorted(schedule)))


BATCH_UNARY = {k: v for k, v in UNARY.items()
               if k not in ("softmax", "log_softmax", "reverse", "gather", "slice_pad", "det",
                            "inv_row")}
BATCH_BINARY = {k: v for k, v in BINARY.items()
                if k not in ("dot", "outer_sum", "matvec", "stack_max", "xent")}


def check_batch(rng: np.random.Generator, batches=(0, 1, 3, 1001)) -> list:
    """A training step over a ``None`` batch (``st.TensorSpec((None, 3))``): its loss and
    its weights' gradient, compiled once for every batch size, against eager values on the
    same batches of 0, 1, 3 and 1001 examples."""
    fn, steps = program(rng, unary=BATCH_UNARY, binary=BATCH_BINARY)
    w = st.Variable(random_values(rng, (3,)))

    def step(x):
        with st.GradientTape() as t:
            loss = fn([x, x * w, w])
        return loss, t.gradient(loss, w, unconnected_gradients="zero")

    compiled = st.function(step, input_signature=[st.TensorSpec((None, 3))])
    found = []
    for b in batches:
        x = random_values(rng, (b, 3))
        # the data as a leaf with a value, as the compiled step's argument is (a constant's
        # zeros would fold: x * w at x = 0 is the constant 0)
        data = st.Variable(x, trainable=False)
        outputs = step(data)
        eager = [t.numpy() for t in outputs]
        native = [np.asarray(t) for t in compiled(x)]
        what = f"None-batch/eager at batch {b}"
        if _disagreements(what, zip(native, eager), steps):  # (references only then)
            found += _disagreements(what, zip(native, eager), steps,
                                    _last_ulps(outputs, [data, w]))
    return found


def _last_ulps(outputs, xs) -> list:
    """Per output, the places where the DAG of ``outputs`` interpreted with numpy's
    elementary functions and with those compiled code uses (the C library's, symtape's
    own) disagree: the last ulp of a transcendental function amplified (a ``where`` on
    ``|expm1(x)| < 1`` at ``expm1(-37.2)``: -1.0 in numpy, -0.9999999999999999 correctly
    rounded), the one difference the rule for values leaves."""
    ref_np = reference(outputs, xs, evaluate.HEADS)
    ref_libm = reference(outputs, xs, libm_heads(tuple(_VECMATH)))
    return [set(mismatches(a, b)) for a, b in zip(ref_np, ref_libm)]
