"""Sparsity patterns read off the tensor-level DAG, row colouring, and sparse Jacobians and
Hessians computed from compressed sweeps, against dense ones and element views."""

from __future__ import annotations

import numpy as np
import pytest

import symtape as st
from symtape.element import graph as G
from symtape.derivatives import sparsity
from test_ops import ROWS, _sample


def rosen(x):
    return st.reduce_sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def nbody(x):
    q = st.reshape(x, (-1, 3))
    k = q.shape[0]
    diff = q[:, None, :] - q[None, :, :]
    pair = np.triu(np.ones((k, k)), 1)
    return -st.reduce_sum(st.constant(pair) / st.sqrt(st.reduce_sum(diff * diff, axis=-1)
                                                      + 0.01))


def chain(x):
    """A banded vector function: a discretised reaction-diffusion residual."""
    lap = x[:-2] - 2 * x[1:-1] + x[2:]
    return st.concat([x[:1] - 1.0, lap + st.exp(x[1:-1]) * 0.1, x[-1:] ** 2], axis=0)


def _element_rows(y, x) -> list[set]:
    """The leaves of ``x`` each element of ``y``'s element view depends on."""
    position = {leaf: k for k, leaf in enumerate(x._atoms.reshape(-1))}
    return [{position[a] for a in G.leaves([atom]) if a in position}
            for atom in y._atoms.reshape(-1)]


@pytest.mark.parametrize("name", sorted(ROWS))
def test_patterns_hold_every_dependence_of_the_element_view(name):
    """For every op of the table and each float argument: an output element that depends on
    an input element (in its element view) has it in its pattern."""
    r = ROWS[name]
    xs = _sample(r)
    floats = [i for i, a in enumerate(r.args) if a.dtype.startswith("float")]
    if not floats:
        pytest.skip("no float arguments")
    syms = [st.symbol(f"a{i}", value=x) if i in floats else st.constant(x)
            for i, x in enumerate(xs)]
    y = r.fn(*syms)
    for i in floats:
        rows = sparsity.dependency_rows(y._node, syms[i]._node)
        for k, (want, got) in enumerate(zip(_element_rows(y, syms[i]), rows)):
            assert want <= set(got.tolist()), (name, i, k, want, got)


def test_patterns_are_exact_for_indexing_and_elementwise_chains():
    x = st.symbol("x", shape=(6,))
    with st.GradientTape() as t:
        y = rosen(x)
    g = t.gradient(y, x)
    rows = sparsity.dependency_rows(g._node, x._node)
    assert [r.tolist() for r in rows] == [[max(i - 1, 0), i, i + 1][(i == 0):] if i < 5
                                          else [4, 5] for i in range(6)]
    assert [set(r.tolist()) for r in rows] == _element_rows(g, x)
    assert sparsity.colour_rows(rows, 6).max() + 1 == 3


def test_colouring_separates_rows_sharing_a_column():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(1, 30))
        rows = [np.unique(rng.integers(0, n, size=int(rng.integers(0, 4)))) for _ in range(n)]
        colour = sparsity.colour_rows(rows, n)
        for a in range(n):
            for b in range(a):
                if set(rows[a].tolist()) & set(rows[b].tolist()):
                    assert colour[a] != colour[b]


def _paths_of_four(adj: list[set]):
    for b in range(len(adj)):
        for c in adj[b]:
            for a in adj[b] - {c}:
                for d in adj[c] - {a, b}:
                    yield a, b, c, d


def test_star_colouring_leaves_no_two_coloured_path_of_four():
    """Random symmetric patterns (and one-sided ones, mirrored): neighbours differ, every
    path of four vertices has three colours (checked path by path), every element can be
    read from the compressed products, and no more colours than the distance-2 colouring."""
    rng = np.random.default_rng(4)
    for trial in range(60):
        n = int(rng.integers(1, 25))
        rows = [np.unique(np.append(rng.integers(0, n, size=int(rng.integers(0, 4))), i))
                for i in range(n)]
        colour = sparsity.star_colour(rows, n)
        adj = [set() for _ in range(n)]
        for i, r in enumerate(rows):
            for j in r.tolist():
                if j != i:
                    adj[i].add(j)
                    adj[j].add(i)
        for i in range(n):
            assert all(colour[i] != colour[j] for j in adj[i])
        for path in _paths_of_four(adj):
            assert len({int(colour[v]) for v in path}) >= 3, (trial, path)
        sym = [np.array(sorted(a | {i})) for i, a in enumerate(adj)]
        assert colour.max() <= sparsity.colour_rows(sym, n).max()
        where = sparsity.positions(rows, colour, n, symmetric=True)
        # read back a symmetric matrix through the compressed products
        h = rng.normal(size=(n, n))
        h = (h + h.T) * np.array([[j in adj[i] or i == j for j in range(n)]
                                  for i in range(n)])
        seeds = np.zeros((colour.max() + 1, n))
        seeds[colour, np.arange(n)] = 1.0
        products = (seeds @ h).reshape(-1)
        want = np.concatenate([h[i, r] for i, r in enumerate(rows)])
        np.testing.assert_allclose(products[where], want, rtol=1e-12, atol=1e-12)


def test_positions_refuse_a_colouring_that_does_not_separate():
    path = [np.array([0, 1]), np.array([0, 1, 2]), np.array([1, 2, 3]), np.array([2, 3])]
    assert sparsity.positions(path, np.array([0, 1, 0, 1]), 4, symmetric=True) is None
    assert sparsity.positions(path, np.array([0, 1, 0, 2]), 4) is None
    assert sparsity.positions(path, np.array([0, 1, 2, 0]), 4) is not None


def arrowhead(x):
    """Every variable coupled to the first: distance-2 colouring needs n colours, a star
    colouring two."""
    return st.reduce_sum(st.exp(x[0] * x[1:]) + x[1:] ** 4) + x[0] ** 3


def test_arrowhead_hessian_takes_two_sweeps(monkeypatch):
    n = 40
    taken = []
    original = st.GradientTape._stacked_cotangents

    def spy(self, target, sources, seeds, *args, **kw):
        taken.append(np.shape(seeds)[0])
        return original(self, target, sources, seeds, *args, **kw)

    monkeypatch.setattr(st.GradientTape, "_stacked_cotangents", spy)
    spec = [st.TensorSpec((n,))]
    sparse = st.hessian(arrowhead, sparse=True, input_signature=spec)
    assert taken == [2]
    x = np.random.default_rng(5).normal(size=(3, n)) * 0.5
    dense = st.hessian(arrowhead, input_signature=spec)(x)
    got = sparse(x)
    np.testing.assert_allclose(got.to_dense(), dense, rtol=1e-13, atol=1e-13)
    assert len(got.indices) == 3 * n - 2
    # against hand-derived second derivatives at one point
    p = x[0]
    e = np.exp(p[0] * p[1:])
    want = np.zeros((n, n))
    want[0, 0] = np.sum(p[1:] ** 2 * e) + 6 * p[0]
    want[0, 1:] = want[1:, 0] = e + p[0] * p[1:] * e
    want[np.arange(1, n), np.arange(1, n)] = p[0] ** 2 * e + 12 * p[1:] ** 2
    np.testing.assert_allclose(got.to_dense()[0], want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("fn,n", [(rosen, 7), (nbody, 12), (rosen, 300)])
def test_sparse_hessians_equal_dense_ones(fn, n):
    spec = [st.TensorSpec((n,))]
    sparse = st.hessian(fn, sparse=True, input_signature=spec)
    dense = st.hessian(fn, input_signature=spec)
    x = np.random.default_rng(1).normal(size=(5, n)) + 1.0
    result = sparse(x)
    want = dense(x)
    np.testing.assert_allclose(result.to_dense(), want, rtol=1e-12, atol=1e-9)
    # the pattern holds every non-zero, and nothing twice
    nonzero = {tuple(i) for i in np.argwhere(np.any(want != 0, axis=0))}
    pattern = [tuple(i) for i in result.indices.tolist()]
    assert nonzero <= set(pattern) and len(set(pattern)) == len(pattern)


def test_sparse_jacobian_of_a_banded_function():
    n = 40
    spec = [st.TensorSpec((n,))]
    sparse = st.jacobian(chain, sparse=True, input_signature=spec)
    dense = st.jacobian(chain, input_signature=spec)
    x = np.random.default_rng(2).normal(size=(3, n))
    np.testing.assert_allclose(sparse(x).to_dense(), dense(x), rtol=1e-13, atol=1e-13)
    assert sparse(x[0]).values.shape == (3 * (n - 2) + 2,)


def test_sparse_result_to_scipy():
    pytest.importorskip("scipy")
    spec = [st.TensorSpec((8,))]
    r = st.hessian(rosen, sparse=True, input_signature=spec)(np.linspace(-1, 1, 8))
    np.testing.assert_array_equal(r.to_scipy().toarray(), r.to_dense())
    batch = st.hessian(rosen, sparse=True, input_signature=spec)(np.ones((2, 8)))
    np.testing.assert_array_equal(batch.to_scipy(index=1).toarray(), batch.to_dense()[1])
    with pytest.raises(st.errors.InvalidArgumentError, match="pick one point"):
        batch.to_scipy()


def test_sparse_transform_errors():
    with pytest.raises(st.errors.ShapeError, match="scalar"):
        st.hessian(chain, sparse=True, input_signature=[st.TensorSpec((5,))])
    with pytest.raises(st.errors.InvalidArgumentError, match="one argnums"):
        st.jacobian(lambda a, b: a * b, argnums=(0, 1), sparse=True,
                    input_signature=[st.TensorSpec((2,))] * 2)


def test_to_scipy_of_a_jacobian_of_a_matrix_argument():
    pytest.importorskip("scipy")

    def f(m):
        return st.reduce_sum(m * m[:, ::-1], axis=1)

    J = st.jacobian(f, sparse=True, input_signature=[st.TensorSpec((3, 4))])
    m = np.arange(12.0).reshape(3, 4)
    r = J(m)
    assert r.dense_shape == (3, 3, 4) and r.rows == 1
    np.testing.assert_array_equal(r.to_scipy().toarray(), r.to_dense().reshape(3, 12))
    dense = st.jacobian(f, input_signature=[st.TensorSpec((3, 4))])(m)
    np.testing.assert_array_equal(r.to_dense(), dense)


def test_sparse_values_written_into_out():
    """``out=`` takes the values' array (or an earlier SparseResult) and writes it in place,
    for compressed sweeps and for element views (``st.compile(..., sparse=True)``)."""
    n = 30
    sparse = st.hessian(rosen, sparse=True, input_signature=[st.TensorSpec((n,))])
    x = np.random.default_rng(3).normal(size=(4, n))
    want = sparse(x)
    buf = np.full_like(want.values, np.nan)
    got = sparse(x, out=buf)
    assert got.values is buf
    np.testing.assert_array_equal(buf, want.values)
    again = sparse(x[::-1], out=got)
    assert again.values is buf
    np.testing.assert_array_equal(buf, want.values[::-1])
    with pytest.raises(st.errors.ShapeError, match="out"):
        sparse(x, out=buf[:, 1:])
    with pytest.raises(st.errors.InvalidArgumentError, match="numpy array"):
        sparse(x, out="values")
    with pytest.raises(st.errors.InvalidArgumentError, match="1 value arrays"):
        sparse(x, out=[buf, buf])

    v = st.symbol("v", shape=(3,))
    with st.GradientTape() as t:
        y = st.reduce_sum(v ** 3)
    h = st.compile(t.hessian(y, v), [v], sparse=True)
    target = np.zeros(3)
    assert h(np.array([1.0, 2.0, 3.0]), out=target).values is target
    np.testing.assert_array_equal(target, [6.0, 12.0, 18.0])
