"""TensorFlow's moves (roll, slice, strided_slice, gather_nd, linalg.diag_part, linalg.diag,
meshgrid) against numpy: values eager and compiled, gradients (the inverse move of the output
weights), a batched Jacobian, sizes that compile to loop nests, and errors naming the bad
argument."""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st
from symtape import ops
from symtape.base.errors import InvalidArgumentError

RNG = np.random.default_rng(7)
X34 = RNG.normal(size=(3, 4))
X234 = RNG.normal(size=(2, 3, 4))
GND = np.array([[1, 2], [0, 0], [2, 3], [1, 2]])  # a repeated index: its gradients add

# name -> (function of one tensor, numpy reference, input)
CASES = {
    "roll": (lambda x: st.roll(x, [1, -5, 7], [0, 1, 0]),
             lambda x: np.roll(x, (8, -5), (0, 1)), X34),
    "roll_negative_axis": (lambda x: st.roll(x, 2, -1), lambda x: np.roll(x, 2, -1), X234),
    "slice": (lambda x: st.slice(x, [0, 1, 1], [2, -1, 2]), lambda x: x[:, 1:, 1:3], X234),
    "strided_slice": (lambda x: st.strided_slice(x, [1, -1], [3, 0], [1, -2], end_mask=1),
                      lambda x: x[1:, -1:0:-2], X34),
    "strided_slice_masks": (
        lambda x: st.strided_slice(x, [0, 2, 0, 0], [0, 0, 0, 3], [1, -1, 1, 2],
                                   begin_mask=2, end_mask=2, ellipsis_mask=1, new_axis_mask=4,
                                   shrink_axis_mask=0),
        lambda x: x[..., ::-1, None, 0:3:2], X234),
    "strided_slice_shrink": (
        lambda x: st.strided_slice(x, [-1, 0, 1], [0, 0, 4], [1, 1, 2], end_mask=2,
                                   shrink_axis_mask=1),
        lambda x: x[-1, :, 1:4:2], X234),
    "gather_nd": (lambda x: st.gather_nd(x, GND), lambda x: x[GND[:, 0], GND[:, 1]], X34),
    "gather_nd_slices": (lambda x: st.gather_nd(x, [[[1], [0]], [[0], [0]]]),
                         lambda x: x[np.array([[1, 0], [0, 0]])], X234),
    "gather_nd_batch": (lambda x: st.gather_nd(x, [[[2], [0]], [[1], [1]]], batch_dims=1),
                        lambda x: np.stack([x[0][[2, 0]], x[1][[1, 1]]]), X234),
    "diag_part": (st.linalg.diag_part, lambda x: np.diagonal(x, axis1=-2, axis2=-1), X234),
    "diag": (st.linalg.diag, lambda x: np.einsum("...i,ij->...ij", x, np.eye(x.shape[-1])),
             X34),
    "meshgrid_xy": (lambda x: st.stack(st.meshgrid(x[0], x[1][:3], x[2])),
                    lambda x: np.stack(np.meshgrid(x[0], x[1][:3], x[2])), X34),
    "meshgrid_ij": (lambda x: st.stack(st.meshgrid(x[0], x[1][:2], indexing="ij")),
                    lambda x: np.stack(np.meshgrid(x[0], x[1][:2], indexing="ij")), X34),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_eager_and_compiled_match_numpy(name):
    fn, ref, x = CASES[name]
    want = ref(x)
    eager = fn(st.constant(x)).numpy()
    assert eager.shape == want.shape
    np.testing.assert_array_equal(eager, want)
    np.testing.assert_array_equal(st.function(fn)(x).numpy(), want)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_is_the_inverse_move_of_the_weights(name):
    """d sum(w * f(x)) / dx for a move f: each weight added back to the element it came
    from; the reference moves the flat positions with numpy and scatters the weights."""
    fn, ref, x = CASES[name]
    w = RNG.normal(size=ref(x).shape)
    v = st.Variable(x)
    with st.GradientTape() as tape:
        loss = st.reduce_sum(fn(v) * w)
    got = tape.gradient(loss, v).numpy()
    src = ref(np.arange(1.0, x.size + 1).reshape(x.shape)).reshape(-1)  # 0: from no element
    inverse = np.zeros(x.size + 1)
    np.add.at(inverse, src.astype(int), w.reshape(-1))
    inverse = inverse[1:]
    np.testing.assert_allclose(got, inverse.reshape(x.shape), rtol=1e-13, atol=1e-13)


def test_diag_zeros_are_exact():
    """Off the diagonal, zeros whatever the diagonal holds (no 0 * inf = nan)."""
    out = st.linalg.diag(st.constant([np.inf, np.nan, -2.0])).numpy()
    assert np.all(out[~np.eye(3, dtype=bool)] == 0)
    assert np.isinf(out[0, 0]) and np.isnan(out[1, 1])
    f = st.function(lambda d: st.linalg.diag(d) * 1.0)
    np.testing.assert_array_equal(f(np.array([np.inf, 1.0])).numpy(), [[np.inf, 0], [0, 1]])


def test_second_derivative_of_a_move_inside_a_product():
    """Hessian of sum(x * roll(x, 1)) is P + P^T (P the roll's permutation matrix)."""
    h = st.hessian(lambda x: st.reduce_sum(x * st.roll(x, 1, 0)),
                   input_signature=[st.TensorSpec((5,))])(RNG.normal(size=5))
    perm = np.roll(np.eye(5), 1, 0)
    np.testing.assert_allclose(np.asarray(h), perm + perm.T, atol=1e-14)


@pytest.mark.parametrize("op", [
    lambda x: st.roll(x, [2, -1], [0, 1]),
    lambda x: st.slice(x, [1, 0], [2, 3]),
    lambda x: st.strided_slice(x, [3, 0], [0, 4], [-2, 3]),
    lambda x: st.gather_nd(x, [[0, 1], [3, 2]]),
    st.linalg.diag_part,
    st.linalg.diag,
], ids=["roll", "slice", "strided_slice", "gather_nd", "diag_part", "diag"])
def test_batch_jacobian_of_each_example(op):
    """``batch_jacobian`` of ``op(x) * x[0, 0]`` over a batch of 3 examples against the
    Jacobian of each example alone, eager and compiled (its rows swept as one batch)."""
    xs = RNG.normal(size=(3, 4, 4))

    def f(x):
        return op(x) * x[..., :1, :1] if op is not st.linalg.diag else op(x) * x[..., :1, None]

    v = st.constant(xs)
    with st.GradientTape() as tape:
        tape.watch(v)
        y = st.stack([f(v[i]) for i in range(3)])
    got = tape.batch_jacobian(y, v).numpy()
    for i in range(3):
        w = st.constant(xs[i])
        with st.GradientTape() as t1:
            t1.watch(w)
            yi = f(w)
        np.testing.assert_allclose(got[i], t1.jacobian(yi, w).numpy(), atol=1e-14)
    jac = st.jacobian(f, input_signature=[st.TensorSpec((4, 4))])  # one sweep per batch row
    for i in range(3):
        np.testing.assert_allclose(np.asarray(jac(xs[i])), got[i], atol=1e-14)


@pytest.mark.parametrize("name, params, core", [
    ("roll", {"shift": (2, -1, 5), "axis": (0, 1, 0)}, (4, 3)),
    ("slice", {"begin": (1, 0), "size": (2, 3)}, (4, 3)),
    ("gather_nd", {"indices": np.array([[3, 1], [0, 2], [3, 1]]), "batch_dims": 0}, (4, 3)),
    ("gather_nd", {"indices": np.array([[[1]], [[0]], [[2]], [[1]]]), "batch_dims": 1},
     (4, 3)),
    ("matrix_diag_part", {}, (4, 3)),
    ("matrix_diag", {}, (4,)),
])
def test_batching_rule_equals_the_op_on_each_row(name, params, core):
    """``Primitive.batch`` (how a sweep over many cotangents applies the op at once) against
    the op applied to each of 3 rows and stacked."""
    op = ops.OPS[name]
    xs = RNG.normal(size=(3,) + core)
    rows = [op.bind(st.constant(x), **params).numpy() for x in xs]
    out = op.batch([st.constant(xs)], [True], params, rows[0].shape)
    np.testing.assert_array_equal(out.numpy(), np.stack(rows))


# ---- sizes that compile to loop nests (not the element view) -------------------------------
BIG = RNG.normal(size=(150, 160))
ROWS = np.array([[149], [0], [7], [7], [60]] * 8)  # whole rows: copies by runs
LARGE = {
    "roll": (lambda x: st.roll(x, [7, -300, 3], [0, 1, 0]) * 2.0,
             lambda x: np.roll(x, (10, -300), (0, 1)) * 2.0),
    "roll_one_axis": (lambda x: st.roll(x, 45, 1) * 2.0, lambda x: np.roll(x, 45, 1) * 2.0),
    "slice": (lambda x: st.slice(x, [3, 5], [-1, 100]) * 2.0, lambda x: x[3:, 5:105] * 2.0),
    "strided_slice": (lambda x: st.strided_slice(x, [140, 1], [2, 150], [-3, 2]) * 2.0,
                      lambda x: x[140:2:-3, 1:150:2] * 2.0),
    "gather_nd": (lambda x: st.gather_nd(x, ROWS) * 2.0, lambda x: x[ROWS[:, 0]] * 2.0),
    "diag_part": (lambda x: st.linalg.diag_part(x) * 2.0 + st.reduce_sum(x),
                  lambda x: np.diagonal(x) * 2.0 + x.sum()),
    "diag": (lambda x: st.linalg.diag(x[0] * 2.0), lambda x: np.diag(x[0] * 2.0)),
    "meshgrid": (lambda x: [g * 2.0 for g in st.meshgrid(x[0], x[:, 1])],
                 lambda x: [g * 2.0 for g in np.meshgrid(x[0], x[:, 1])]),
}


@pytest.mark.parametrize("name", sorted(LARGE))
def test_large_sizes_compile_to_loop_nests(name):
    fn, ref = LARGE[name]
    f = st.function(fn)
    got = f(BIG)
    got = [g.numpy() for g in got] if isinstance(got, list) else got.numpy()
    np.testing.assert_allclose(got, ref(BIG), rtol=1e-13, atol=1e-12)
    assert [s.name for s in f.strategies] == ["loop-nest"]


def test_large_roll_gradient_compiled():
    w = RNG.normal(size=BIG.shape)

    @st.function
    def grad(x):
        with st.GradientTape() as tape:
            tape.watch(x)
            loss = st.reduce_sum(st.roll(x, [11, -40], [0, 1]) * w)
        return tape.gradient(loss, x)

    np.testing.assert_allclose(grad(BIG).numpy(), np.roll(w, (-11, 40), (0, 1)), rtol=1e-15)


def test_a_400_vector_compiled():
    x = RNG.normal(size=400)
    f = st.function(lambda v: st.roll(st.slice(v, [10], [-1]), -3, 0) + 1.0)
    np.testing.assert_allclose(f(x).numpy(), np.roll(x[10:], -3) + 1.0, rtol=1e-15)


# ---- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("call, words", [
    (lambda: st.roll(X34, 1, 2), "axis 2"),
    (lambda: st.roll(X34, [1, 2], [0]), "shift and axis"),
    (lambda: st.slice(X34, [0, 3], [1, 2]), "size[1]"),
    (lambda: st.slice(X34, [0, 5], [1, -1]), "begin[1]"),
    (lambda: st.slice(X34, [0], [1]), "begin and size"),
    (lambda: st.strided_slice(X34, [0, 0], [1, 1], [1, 0]), "strides[1]"),
    (lambda: st.strided_slice(X34, [0, 4], [1, 1], [1, 1], shrink_axis_mask=2), "begin[1]"),
    (lambda: st.strided_slice(X34, [0], [1, 1]), "same length"),
    (lambda: st.strided_slice(X34, [0] * 3, [1] * 3, [1] * 3), "rank 2"),
    (lambda: st.strided_slice(X34, [0], [1], ellipsis_mask=-1), "ellipsis_mask"),
    (lambda: st.gather_nd(X34, [[0, 4]]), "indices[0]"),
    (lambda: st.gather_nd(X34, [[0, -1]]), "indices[0]"),
    (lambda: st.gather_nd(X34, [[0, 1, 2]]), "indices.shape[-1]"),
    (lambda: st.gather_nd(X34, [[0.5, 1.0]]), "integers"),
    (lambda: st.gather_nd(X234, [[[0]], [[1]], [[0]]], batch_dims=1), "batch_dims"),
    (lambda: st.linalg.diag_part(np.ones(3)), "rank >= 2"),
    (lambda: st.linalg.diag(1.0), "rank >= 1"),
    (lambda: st.linalg.diag(np.ones(3), k=1), "k=1"),
    (lambda: st.meshgrid(X34[0], indexing="yx"), "indexing"),
])
def test_bad_input_is_refused_by_name(call, words):
    with pytest.raises(InvalidArgumentError, match=words.replace("[", r"\[")
                       .replace("]", r"\]").replace(".", r"\.")):
        call()
