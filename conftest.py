"""Test session set-up: compiled-code caches go to a private temporary directory; tests marked
``slow`` (the heaviest seventeen, listed in SLOW, about two thirds of the time) run only with
``--slow`` -- CI's command, ``python -m pytest --slow`` -- so ``python -m pytest`` alone is the
quick run; tests marked ``long`` run only with ``--long``."""

import os
import tempfile

import pytest

#: The example programs shipped in the package are scripts (tests/test_examples.py runs them),
#: not modules to import for doctests.
collect_ignore_glob = ["symtape/examples/*"]

_CACHE = tempfile.mkdtemp(prefix="symtape-test-cache-")
os.environ.setdefault("SYMTAPE_CACHE_DIR", _CACHE)

#: The slowest tests (all their parameters), measured with ``pytest --durations=0``.
SLOW = {
    "tests/test_differential.py::test_random_programs_agree",
    "tests/test_compile_ops.py::test_compiled_equals_eager",
    "tests/test_examples.py::test_example_runs",
    "tests/test_loopnest.py::test_loop_plan_equals_eager",
    "tests/test_taylor.py::test_mixed_partials_by_interpolation_match_sympy",
    "tests/test_keras.py::test_dropout_under_st_function_draws_a_new_mask_each_call_as_eagerly",
    "tests/test_keras.py::test_seed_cnn_custom_training_loop_compiled_and_eager",
    "tests/test_sparsity.py::test_sparse_hessians_equal_dense_ones",
    "tests/test_loopnest.py::test_image_windows_and_strided_scatters_are_loops",
    "tests/test_taylor.py::test_every_scalar_op_to_order_five_matches_sympy",
    "tests/test_scipy_hooks.py::test_a_large_stiff_system_gets_a_sparse_jacobian",
    "tests/codegen/test_codegen_jit.py::test_corrupt_entry_is_recompiled",
    "tests/test_loopnest.py::"
    "test_an_argument_that_cannot_be_read_through_the_scatter_is_computed_apart",
    "tests/test_taylor.py::test_directional_derivatives_match_sympy",
    "tests/test_ops.py::test_batched_jacobians_match_row_by_row",
    "tests/test_conv.py::test_hessians_through_convolution_and_pooling",
    "tests/test_function.py::test_function_runs_the_linear_regression_seed_compiled",
}


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the slow tests (marked 'slow'; CI does)")
    parser.addoption("--long", action="store_true", default=False,
                     help="also run the long tests (marked 'long')")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a slow test, skipped unless --slow is given")
    config.addinivalue_line("markers", "long: a long run, skipped unless --long is given")


def pytest_collection_modifyitems(config, items):
    root = config.rootpath
    for item in items:
        try:
            name = f"{item.path.relative_to(root).as_posix()}::{item.originalname}"
        except (AttributeError, ValueError):
            continue
        if name in SLOW:  # (tests/test_conventions.py checks every name still exists)
            item.add_marker(pytest.mark.slow)
    run_slow, run_long = config.getoption("--slow"), config.getoption("--long")
    skip_slow = pytest.mark.skip(reason="slow: pass --slow to run it (CI does)")
    skip_long = pytest.mark.skip(reason="long run: pass --long to run it")
    for item in items:
        if "long" in item.keywords and not run_long:
            item.add_marker(skip_long)
        elif "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)
