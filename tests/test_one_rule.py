"""One value rule per case, on every path (eager small and large, compiled element view and
loop nests, None-batch steps), for the cases where they once differed."""

import numpy as np
import pytest

import symtape as st

_X = np.array([[1.0, 2.0, 3.0], [np.nan, 1.0, 0.5], [0.5, 4.0, 1.0]])


def _extremum_gradient(x, w, reduce):
    with st.GradientTape() as t:
        loss = st.reduce_sum(reduce(x * w, axis=0)) + reduce(x * w)
    return t.gradient(loss, w)


@pytest.mark.parametrize("reduce", [st.reduce_max, st.reduce_min])
@pytest.mark.parametrize("rows", [3, 300])
def test_a_nan_extremum_passes_exact_zeros_to_its_elements(reduce, rows):
    """TensorFlow divides by the count of elements equal to the extremum (0 for a nan one:
    0/0); symtape gives the elements not taken an exact 0, also times a nan example."""
    x = np.tile(_X, (rows // 3, 1))
    w0 = np.array([1.0, 2.0, 3.0])
    taken = {st.reduce_max: np.max, st.reduce_min: np.min}[reduce]
    expect = np.zeros(3)
    for j in range(3):  # columns 1 and 2 have a finite extremum taken once
        col = x[:, j] * w0[j]
        if not np.isnan(col).any():
            k = np.flatnonzero(col == taken(col))
            expect[j] = x[k, j].sum() / len(k)
    w = st.Variable(w0)
    eager = _extremum_gradient(st.constant(x), w, reduce).numpy()
    np.testing.assert_allclose(eager, expect, rtol=1e-13)
    step = st.function(lambda x: _extremum_gradient(x, w, reduce),
                       input_signature=[st.TensorSpec((None, 3))])
    np.testing.assert_allclose(step(x), expect, rtol=1e-13)
    fixed = st.function(lambda x: _extremum_gradient(x, w, reduce))
    np.testing.assert_allclose(fixed(x), expect, rtol=1e-13)


def test_hessians_are_symmetric_on_every_path():
    """Where a function is not twice differentiable (pow at a negative base) its mixed
    partials differ by order; Hessians take the lower triangle's, eagerly and compiled."""
    def f(z):
        return st.reduce_sum(st.pow(z[2:4], z[0:2]))

    z0 = np.array([2.0, 0.5, -3.0, 1.5])
    z = st.Variable(z0)
    with st.GradientTape() as t:
        y = f(z)
    eager = t.hessian(y, z).numpy()
    compiled = st.hessian(f, input_signature=[st.TensorSpec((4,))])(z0)
    np.testing.assert_array_equal(np.isnan(eager), np.isnan(eager.T))
    np.testing.assert_array_equal(np.isnan(eager), np.isnan(compiled))
    np.testing.assert_array_equal(np.nan_to_num(eager), np.nan_to_num(compiled))
    # the lower triangle is d/dz_i of df/dz_j (i >= j), as nested tapes give it
    with st.GradientTape() as outer:
        with st.GradientTape() as inner:
            y = f(z)
        g = inner.gradient(y, z)
    nested = outer.jacobian(g, z).numpy()
    low = np.tril_indices(4)
    np.testing.assert_array_equal(np.nan_to_num(nested[low]), np.nan_to_num(eager[low]))
    assert np.isnan(nested[2, 0]) and not np.isnan(nested[0, 2])
