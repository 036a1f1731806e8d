"""The compile paths by name (:mod:`symtape.compile.strategy`): representative programs on
each side of each threshold, ``explain=True`` printing the name and the reason, and the
thresholds living in the strategy module alone, the loop-nest ones included."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

import symtape as st
from symtape.compile import strategy

PKG = Path(st.__file__).resolve().parent


def _names(compiled) -> list[str]:
    return [s.name for s in compiled.strategies]


# --------------------------------------------------------------------------------------------
# Element view or loop nests
# --------------------------------------------------------------------------------------------


def test_a_small_scalar_function_is_an_element_kernel():
    x = st.symbol("x")
    f = st.compile(st.sin(x) * x, [x])
    assert _names(f) == ["element-kernel"]
    assert "<= POINT_LOOP_MIN_ATOMS=" in f.strategies[0].reason
    assert f(0.5) == pytest.approx(math.sin(0.5) * 0.5, rel=1e-15)


def test_a_300_by_300_matmul_gradient_is_a_point_loop_and_a_trace_a_loop_nest():
    w = np.random.default_rng(0).standard_normal((300, 300)) / 300

    def f(w):
        return st.reduce_sum(st.matmul(w, w))

    g = st.grad(f, input_signature=[st.TensorSpec((300, 300))])
    assert _names(g) == ["reverse-sweep", "point-loop"]
    loop = g.strategies[1]
    assert loop.loops and loop.points >= 1 and f"chunks of {loop.points} points" in loop.reason
    assert "LOOP_ALWAYS_ATOMS=" in loop.reason  # 27,000,000 terms per product
    ones = np.ones(300)  # d/dW 1^T W W 1 = 1 (W 1)^T + (W^T 1) 1^T
    want = np.outer(ones, w.sum(axis=1)) + np.outer(w.sum(axis=0), ones)
    np.testing.assert_allclose(g(w), want, rtol=1e-12, atol=1e-12)

    traced = st.function(f)
    assert float(traced(w)) == pytest.approx((w @ w).sum(), rel=1e-12)
    assert [s.name for s in traced.strategies] == ["loop-nest"]


@pytest.mark.parametrize("offset, name", [(0, "element-kernel"), (-1, "loop-nest")])
def test_loop_min_atoms_decides_on_each_side(monkeypatch, offset, name):
    """An elementwise function of n elements: at LOOP_MIN_ATOMS = its estimate it stays an
    element view, one below it loops (the constant is read when the choice is made)."""
    x = st.symbol("x", shape=(40,))
    y = st.exp(x) * x
    atoms = strategy.element_estimate([y._node])
    monkeypatch.setattr(strategy, "LOOP_MIN_ATOMS", atoms + offset)
    path = strategy.kernel([y._node])
    assert path.name == name
    assert f"about {atoms:,} atoms" in path.reason
    assert f"LOOP_MIN_ATOMS={atoms + offset:,}" in path.reason


@pytest.mark.parametrize("offset, name", [(0, "element-kernel"), (-1, "point-loop")])
def test_point_loop_min_atoms_decides_functions_of_one_point(monkeypatch, offset, name):
    x = st.symbol("x", shape=(40,))
    y = st.exp(x) * x
    x._atoms  # (built, as st.compile builds its inputs' leaves before it estimates)
    atoms = strategy.element_estimate([y._node])
    monkeypatch.setattr(strategy, "POINT_LOOP_MIN_ATOMS", atoms + offset)
    f = st.compile(y, [x])
    assert _names(f) == [name]
    assert f"POINT_LOOP_MIN_ATOMS={atoms + offset:,}" in f.strategies[0].reason
    v = np.linspace(-1.0, 1.0, 40)
    np.testing.assert_allclose(f(v), np.exp(v) * v, rtol=1e-15)


def test_sparse_compile_is_its_own_path():
    x = st.symbol("x", shape=(3,))
    with st.GradientTape() as t:
        y = st.reduce_sum(x ** 3)
    h = st.compile(t.hessian(y, x), [x], sparse=True)
    assert _names(h) == ["sparse-elements"]
    np.testing.assert_array_equal(h(np.array([1.0, 2.0, 3.0])).values, [6.0, 12.0, 18.0])


# --------------------------------------------------------------------------------------------
# Derivatives
# --------------------------------------------------------------------------------------------


def _nbody_hessian_nodes(k: int) -> list:
    """The traced Hessian of the softened potential of ``k`` bodies (3 k inputs)."""
    ms = 1.0 + 0.25 * (np.arange(k) % 4)
    x = st.symbol("x", shape=(3 * k,))
    with st.GradientTape(persistent=True) as outer:
        outer.watch(x)
        with st.GradientTape() as inner:
            inner.watch(x)
            q = st.reshape(x, (k, 3))
            d = q[:, None, :] - q[None, :, :]
            r = st.sqrt(st.reduce_sum(d * d, axis=-1) + 0.01)
            u = -st.reduce_sum(st.constant(np.triu(np.outer(ms, ms), 1)) / r)
        g = inner.gradient(u, x)
    return [outer.jacobian(g, x)._node]


@pytest.mark.parametrize("k, name", [(20, "element-kernel"), (50, "point-loop")])
def test_n_body_hessians_on_each_side_of_loop_always_atoms(k, name):
    """A batched sweep keeps the element view (what each one-hot seed reaches) up to
    LOOP_ALWAYS_ATOMS of its dense estimate: 20 bodies, about 1.2 million; 50 bodies (150
    inputs), about 18 million, run as loop nests one point at a time (its largest tensor,
    150 x 50 x 50 x 3, passes POINT_LOOP_MAX_ELEMENTS: no chunks of points)."""
    path = strategy.kernel(_nbody_hessian_nodes(k), points=True)
    assert path.name == name
    assert "LOOP_ALWAYS_ATOMS=" in path.reason
    assert path.points == 0
    assert ("POINT_LOOP_MAX_ELEMENTS" in path.reason) == (name == "point-loop")


def test_chunks_of_points_shrink_with_the_largest_tensor(monkeypatch):
    """Chunks of POINT_CHUNK points for small tensors, fewer (a multiple of 4) as the
    largest grows, and none past POINT_LOOP_MAX_ELEMENTS."""
    monkeypatch.setattr(strategy, "POINT_LOOP_MIN_ATOMS", 0)
    for n, want in ((100, strategy.POINT_CHUNK), (4000, 8), (200_000, 4), (2_000_000, 0)):
        x = st.symbol("x", shape=(n,))
        y = st.math.cumsum(st.sin(x) * st.cos(x))
        path = strategy.kernel([y._node], points=True)
        assert path.name == "point-loop" and path.points == want, (n, path)


def test_gradients_jacobians_hessians_and_hvps_name_their_sweeps():
    sig = [st.TensorSpec((2,))]

    def f(x):
        return x[0] ** 2 * x[1]

    assert _names(st.grad(f, input_signature=sig))[0] == "reverse-sweep"
    assert _names(st.jacobian(lambda x: x * x, input_signature=sig))[0] == "batched-sweep"
    h = st.hessian(f, input_signature=sig)
    assert _names(h)[0] == "nested-sweeps" and "a Hessian" in h.strategies[0].reason
    np.testing.assert_allclose(h(np.array([1.0, 3.0])), [[6.0, 2.0], [2.0, 0.0]])
    hv = st.hvp(f, input_signature=sig + sig)
    assert _names(hv) == ["reverse-over-reverse", "element-kernel"]


def test_taylor_from_taylor_min_order_in_a_scalar_argument():
    sig = [st.TensorSpec(())]
    below = st.derivative(st.sin, order=strategy.TAYLOR_MIN_ORDER - 1, input_signature=sig)
    at = st.derivative(st.sin, order=strategy.TAYLOR_MIN_ORDER, input_signature=sig)
    assert _names(below)[0] == "batched-sweep"
    assert f"< TAYLOR_MIN_ORDER={strategy.TAYLOR_MIN_ORDER}" in below.strategies[0].reason
    assert _names(at) == ["taylor", "element-kernel"]
    d4 = st.derivative(st.sin, order=4, input_signature=sig)
    assert _names(d4)[0] == "taylor" and d4(0.3) == pytest.approx(math.sin(0.3), rel=1e-14)


def test_mixed_directions_against_nested_sweeps():
    """Order 4 in 2 inputs: 5 directions (<= MIXED_DIRECTIONS) interpolated; order 3
    (< MIXED_MIN_ORDER): nested sweeps. Both against the hand formula of exp(x0 x1)."""
    sig = [st.TensorSpec((2,))]

    def f(x):
        return st.exp(x[0] * x[1])

    x0 = np.array([0.3, -0.7])
    d4 = st.derivative(f, order=4, input_signature=sig)
    assert _names(d4) == ["mixed-directions", "element-kernel"]
    assert "C(2 + 4 - 1, 4) = 5 directions <= MIXED_DIRECTIONS=60" in d4.strategies[0].reason
    a, b = x0
    e = math.exp(a * b)
    assert d4(x0)[0, 0, 0, 0] == pytest.approx(b ** 4 * e, rel=1e-13)
    d3 = st.derivative(f, order=3, input_signature=sig)
    assert _names(d3)[0] == "nested-sweeps"
    assert f"order 3 < MIXED_MIN_ORDER={strategy.MIXED_MIN_ORDER}" in d3.strategies[0].reason
    # d^3/dx0^2 dx1 of exp(ab) = (2 b + a b^2) e
    assert d3(x0)[0, 0, 1] == pytest.approx((2 * b + a * b * b) * e, rel=1e-13)


@pytest.mark.parametrize("n, order, name", [
    (2, 3, "nested-sweeps"),      # below MIXED_MIN_ORDER
    (2, 4, "mixed-directions"),   # C(5, 4) = 5
    (5, 4, "nested-sweeps"),      # C(8, 4) = 70 > MIXED_DIRECTIONS
    (6, 4, "nested-sweeps"),      # C(9, 4) = 126 > MIXED_DIRECTIONS
    (4, 5, "mixed-directions"),   # C(8, 5) = 56 <= MIXED_MAX_DIRECTIONS
    (7, 5, "nested-sweeps"),      # C(11, 5) = 462 > MIXED_MAX_DIRECTIONS
    (1, 7, "taylor"),
])
def test_derivative_thresholds_on_each_side(n, order, name):
    directions = math.comb(n + order - 1, order)
    limit = strategy.MIXED_DIRECTIONS if order == strategy.MIXED_MIN_ORDER else \
        strategy.MIXED_MAX_DIRECTIONS
    want = "taylor" if n == 1 else "mixed-directions" if (
        order >= strategy.MIXED_MIN_ORDER and directions <= limit) else "nested-sweeps"
    assert want == name  # the row's arithmetic, against today's thresholds
    path = strategy.derivative(order, n, True, True)
    assert path.name == name
    if n > 1:
        assert strategy.mixed_worth(n, order) == (name == "mixed-directions")
    if n > 1 and order >= strategy.MIXED_MIN_ORDER:
        assert f"= {directions:,} directions" in path.reason


def test_taylor_mode_that_does_not_apply_falls_back_to_nested_sweeps():
    @st.custom_gradient
    def doubled_rule(x):
        return st.sin(x), lambda g: 2 * g * st.cos(x)

    d2 = st.derivative(doubled_rule, order=2, input_signature=[st.TensorSpec(())])
    assert _names(d2)[:2] == ["taylor", "nested-sweeps"]
    assert "Taylor mode does not apply" in d2.strategies[1].reason
    assert d2(np.array(0.5)) == pytest.approx(-2 * math.sin(0.5), rel=1e-14)


def test_directional_derivatives():
    sig = [st.TensorSpec((2,)), st.TensorSpec((2,))]
    dv = st.derivative(lambda x: x[0] ** 2 * x[1], order=3, direction=True,
                       input_signature=sig)
    assert _names(dv) == ["taylor-directional", "element-kernel"]
    assert float(dv(np.array([1.0, 2.0]), np.array([1.0, 1.0]))) == 6.0


def test_sparse_jacobians_and_hessians_name_their_colourings():
    def rosen(x):
        return st.reduce_sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)

    n = 30
    hs = st.hessian(rosen, sparse=True, input_signature=[st.TensorSpec((n,))])
    assert _names(hs)[0] in ("coloured-hessian", "star-coloured-hessian")
    assert f"for {n} rows" in hs.strategies[0].reason
    x = np.linspace(-1.0, 1.0, n)
    dense = st.hessian(rosen, input_signature=[st.TensorSpec((n,))])(x)
    np.testing.assert_allclose(hs(x).to_dense(), dense, rtol=1e-14)

    js = st.jacobian(lambda x: x[1:] * x[:-1], sparse=True,
                     input_signature=[st.TensorSpec((n,))])
    assert _names(js)[0] == "coloured-jacobian"
    assert js.strategies[0].reason.startswith("2 colours: 2 sweeps for 29 rows")


def test_star_colouring_when_it_has_fewer_colours():
    assert strategy.colouring(True, 10, 4, 3).name == "star-coloured-hessian"
    assert strategy.colouring(True, 10, 3, 3).name == "coloured-hessian"
    assert "does not separate" in strategy.colouring(True, 10, 4, unseparated=True).reason


# --------------------------------------------------------------------------------------------
# st.function over a None batch
# --------------------------------------------------------------------------------------------


def test_a_mean_over_a_none_batch_is_one_split_trace():
    w = st.Variable([0.5, -1.0])

    @st.function(input_signature=[st.TensorSpec((None, 2))])
    def loss(x):
        return st.reduce_mean(st.tanh(st.reduce_sum(x * w, axis=1)) ** 2)

    x = np.random.default_rng(1).standard_normal((7, 2))
    assert float(loss(x)) == pytest.approx(np.mean(np.tanh(x @ w.numpy()) ** 2), rel=1e-13)
    names = [s.name for s in loss.strategies]
    assert names[0] == "batch-split" and "point-loop" in names
    assert "batch sizes 2, 3, 5" in loss.strategies[0].reason


def test_random_draws_over_a_none_batch_are_traced_per_size():
    @st.function(input_signature=[st.TensorSpec((None, 2))])
    def noisy(x):
        return x + st.random.normal((2,), seed=3)

    noisy(np.zeros((4, 2)))
    assert _names(noisy)[0] == "per-size-traces"
    assert "draws random numbers" in noisy.strategies[0].reason


# --------------------------------------------------------------------------------------------
# explain=True
# --------------------------------------------------------------------------------------------


def test_explain_prints_each_path_and_its_reason_when_chosen(capsys):
    x = st.symbol("x", shape=(2,))
    st.compile(st.sin(x), [x], name="quiet")
    assert capsys.readouterr().out == ""
    f = st.compile(st.sin(x), [x], name="loud", explain=True)
    out = capsys.readouterr().out
    assert out == f"loud: element-kernel: {f.strategies[0].reason}\n"

    d = st.derivative(lambda x: st.exp(x[0] * x[1]), order=4, explain=True)
    assert capsys.readouterr().out == ""  # nothing chosen before the first call
    d(np.array([0.1, 0.2]))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("lambda_derivative: mixed-directions: order 4 in 2 inputs")
    assert lines[1] == "lambda_derivative: element-kernel: Taylor-mode coefficients exist " \
        "only as elements"
    assert _names(d) == ["mixed-directions", "element-kernel"]

    g = st.function(lambda x: st.reduce_sum(x ** 2), explain=True)
    g(np.ones(3))
    assert capsys.readouterr().out.startswith("lambda: element-kernel: about ")
    g(np.ones(3))
    assert capsys.readouterr().out == ""  # no new trace, no new choice


# --------------------------------------------------------------------------------------------
# The thresholds live in strategy.py
# --------------------------------------------------------------------------------------------

MOVED = ("POINT_CHUNK", "TAYLOR_MIN_ORDER", "MIXED_MIN_ORDER", "MIXED_DIRECTIONS",
         "MIXED_MAX_DIRECTIONS")
PLANNER_CHOICES = ("worth_looping", "point_chunk", "element_estimate", "LOOP_MIN_ATOMS",
                   "LOOP_MAX_BLOCKS", "LOOP_ALWAYS_ATOMS", "POINT_LOOP_MIN_ATOMS",
                   "POINT_LOOP_MATMUL_TERMS", "POINT_LOOP_MAX_BLOCKS", "FOLD_PROBE_ATOMS",
                   "FOLD_PROBE_SHARE", "CHUNK_ELEMENTS")
NOT_A_PATH = {"RETRACE_WARNING"}  # when st.function warns, not which path it takes


def _tree(mod: str) -> ast.Module:
    return ast.parse((PKG / "compile" / f"{mod}.py").read_text())


def _constant_like(node) -> str | None:
    """The name of a module-level constant ``node`` reads (``X`` or ``module.X``)."""
    name = node.id if isinstance(node, ast.Name) else node.attr if (
        isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and
        node.value.id in ("loopnest", "planner", "strategy", "batching")) else None
    return name if name and name.isupper() and len(name) > 1 else None


@pytest.mark.parametrize("mod", ["function", "transforms"])
def test_no_path_threshold_outside_the_strategy_module(mod):
    tree = _tree(mod)
    assigned = {t.id for node in tree.body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    assert not assigned & set(MOVED), f"{mod} defines {assigned & set(MOVED)}"
    used = {getattr(n, "attr", getattr(n, "id", None)) for n in ast.walk(tree)
            if isinstance(n, (ast.Name, ast.Attribute))}
    assert not used & set(MOVED + PLANNER_CHOICES), f"{mod} reads {used & set(PLANNER_CHOICES)}"
    compared = {c for n in ast.walk(tree) if isinstance(n, ast.Compare)
                for side in [n.left, *n.comparators] for sub in ast.walk(side)
                if (c := _constant_like(sub))}
    assert compared <= NOT_A_PATH, f"{mod} compares against {compared - NOT_A_PATH}"


def test_every_path_threshold_is_defined_in_the_strategy_module_alone():
    """The strategy module defines its thresholds and the loop-nest ones; the planner
    defines none of them and reads none (it carries out the plan chosen)."""
    tree = _tree("strategy")
    assigned = {t.id for node in tree.body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert assigned >= set(MOVED) | {c for c in PLANNER_CHOICES if c.isupper()}
    assert defined >= {c for c in PLANNER_CHOICES if not c.isupper()}
    planner_tree = _tree("planner")
    names = {getattr(n, "attr", getattr(n, "id", None)) for n in ast.walk(planner_tree)
             if isinstance(n, (ast.Name, ast.Attribute, ast.FunctionDef))}
    names |= {n.name for n in ast.walk(planner_tree) if isinstance(n, ast.FunctionDef)}
    assert not names & set(MOVED + PLANNER_CHOICES), names & set(MOVED + PLANNER_CHOICES)
