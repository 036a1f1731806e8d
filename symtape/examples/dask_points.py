"""Compiled derivatives on a dask cluster: the gradient of the 2-D Rosenbrock function at
10^8 random points, generated block by block on the workers of a 2-process local cluster
and mapped by the compiled gradient with ``dask.array.map_blocks``. The compiled function
travels to the workers by pickle, its object code with it: each worker loads it once (not
once per task, not compiled again). Any dask deployment works the same way; the local
cluster stands in for one.

    pip install -e ".[dask]" && python -m symtape examples dask_points [--points 100000000]
"""

import argparse
import time

import dask.array as da
import numpy as np
from dask.distributed import Client, LocalCluster

import symtape as st


def rosenbrock(x):
    return 100 * (x[1] - x[0] ** 2) ** 2 + (1 - x[0]) ** 2


def loads():
    from symtape.codegen import archive

    return archive.RESTORE_LOADS[0]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=10**8)
    ap.add_argument("--block", type=int, default=10**7)
    args = ap.parse_args()
    grad = st.grad(rosenbrock, input_signature=[st.TensorSpec((2,))], threads=1)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        x = da.random.RandomState(0).uniform(-2, 2, size=(args.points, 2),
                                             chunks=(args.block, 2))
        g = x.map_blocks(grad, dtype=np.float64)
        t = time.perf_counter()
        mean_norm = float(da.sqrt((g ** 2).sum(axis=1)).mean().compute())
        took = time.perf_counter() - t
        per_worker = client.run(loads)
        print(f"{args.points:,} points in {args.points // args.block} blocks on 2 workers: "
              f"{took:.1f} s (random points included); mean |grad| = {mean_norm:.4f}")
        print(f"compiled function loads per worker: {sorted(per_worker.values())}")
        assert all(n <= 1 for n in per_worker.values())
        # a block checked against numpy's gradient of the same points
        block = x.blocks[0].compute()[:1000]
        a, b = block[:, 0], block[:, 1]
        want = np.stack([-400 * a * (b - a ** 2) - 2 * (1 - a), 200 * (b - a ** 2)], axis=1)
        np.testing.assert_allclose(grad(block), want, rtol=1e-13, atol=1e-12)
