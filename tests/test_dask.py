"""Compiled functions on a 2-worker dask cluster: mapped over blocks with equal values,
loaded once per worker; and unpickled once per process."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import symtape as st
from symtape.codegen import archive


def rosen(x):
    return st.reduce_sum(100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


def test_unpickling_the_same_function_again_reuses_the_loaded_one():
    g = st.grad(rosen, input_signature=[st.TensorSpec((5,))])
    data = pickle.dumps(g)
    before = archive.RESTORE_LOADS[0]
    a, b = pickle.loads(data), pickle.loads(data)
    assert a is b and archive.RESTORE_LOADS[0] == before + 1
    x = np.random.default_rng(0).normal(size=(7, 5))
    np.testing.assert_array_equal(a(x), g(x))
    other = pickle.loads(pickle.dumps(st.grad(rosen, input_signature=[st.TensorSpec((6,))])))
    assert other is not a and other(np.ones(6)).shape == (6,)


def _loads():
    from symtape.codegen import archive as rt

    return rt.RESTORE_LOADS[0]


def test_map_blocks_on_a_two_worker_cluster_loads_the_code_once_per_worker():
    pytest.importorskip("dask.array")
    distributed = pytest.importorskip("dask.distributed")
    import dask.array as da

    g = st.grad(rosen, input_signature=[st.TensorSpec((4,))])
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        x = da.random.RandomState(1).normal(size=(24_000, 4), chunks=(1_000, 4))
        got = x.map_blocks(g, dtype=np.float64).compute()
        np.testing.assert_array_equal(got, g(x.compute()))
        per_worker = client.run(_loads)
        assert len(per_worker) == 2 and all(n == 1 for n in per_worker.values())
        futures = client.map(g, [np.full((10, 4), float(k)) for k in range(6)])
        for k, result in enumerate(client.gather(futures)):
            np.testing.assert_array_equal(result, g(np.full((10, 4), float(k))))
        assert all(n == 1 for n in client.run(_loads).values())
