"""``st.config``: settings of the library as a whole -- the default float
(``floatx``), compile progress, ``preload`` of what is otherwise imported on first use, and
``st.config.threading`` (TensorFlow's names) for the threads of eager ops' BLAS.

>>> import symtape as st
>>> st.config.floatx()
'float64'
>>> st.config.set_compile_progress(False)  # no progress lines, even on a terminal
>>> st.config.set_compile_progress(None)   # the default: on when stderr is a terminal
"""

from __future__ import annotations

import importlib
import types

from symtape.base import progress
from symtape.base.errors import InvalidArgumentError, MissingDependencyError
from symtape.core import tensor
from symtape.ops import control

__all__ = ["floatx", "set_floatx", "set_compile_progress", "set_loop_checkpointing",
           "loop_checkpointing", "preload", "threading"]

#: What ``import symtape`` leaves to the first op, formula or compile that needs it (see
#: ``symtape.base.lazy``), and the parts of SymPy its first sum imports
#: (``sympy.tensor.tensor``, which pulls in ``sympy.combinatorics``: 20 ms).
FIRST_USE = ("sympy", "sympy.tensor.tensor", "sympy.codegen.cfunctions",
             "symtape.element.graph", "symtape.element.heads", "symtape.element.added_heads",
             "symtape.element.evaluate", "symtape.core.notation", "symtape.derivatives.sweep",
             "symtape.derivatives.taylor", "symtape.codegen.lower", "symtape.codegen.vecmath",
             "symtape.codegen.special", "symtape.codegen.polygamma", "symtape.io")


def preload() -> None:
    """Imports now what symtape otherwise imports when first needed (:data:`FIRST_USE`):
    SymPy, the element level and the lowering tables, about 0.3 s with SymPy, 0.05 s
    after it. ``import symtape`` stays fast for scripts; a server calls this at start-up
    so its first request does not pay for them.

    >>> import sys
    >>> preload()
    >>> "symtape.element.graph" in sys.modules and "sympy.tensor.tensor" in sys.modules
    True
    """
    for name in FIRST_USE:
        importlib.import_module(name)


def floatx() -> str:
    """The default float, ``"float64"`` unless set: the dtype of Python floats made tensors
    (``st.constant(0.5)``, ``st.Variable(1.0)``), of ``st.zeros``/``ones``/``eye``,
    ``st.one_hot`` and ``st.random.*`` given no dtype. A Python number or numpy scalar
    meeting a tensor takes the tensor's dtype whatever this is. ``st.keras`` has its own,
    float32 (``st.keras.backend.floatx``).

    >>> import symtape as st
    >>> st.config.floatx(), st.constant(0.5).dtype.name
    ('float64', 'float64')
    """
    return tensor.floatx().name


def set_floatx(dtype: str) -> None:
    """Sets :func:`floatx`: ``"float32"`` (TensorFlow's default, for networks) or
    ``"float64"`` (the default, for exact physics). Tensors made before keep their dtype.

    >>> import symtape as st
    >>> st.config.set_floatx("float32")
    >>> st.constant(0.5).dtype.name, st.zeros([2]).dtype.name
    ('float32', 'float32')
    >>> st.config.set_floatx("float64")
    """
    tensor.set_floatx(dtype)


def set_compile_progress(enabled: bool | None) -> None:
    """Whether compiles that take longer than about 2 s print their stages (tracing,
    derivatives, planning, native code) on stderr: True, False, or None for the default (on
    when stderr is a terminal; the environment variable ``SYMTAPE_PROGRESS=0``/``1`` sets it
    too).

    >>> import symtape as st
    >>> st.config.set_compile_progress(True); st.config.set_compile_progress(None)
    """
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"st.config.set_compile_progress: enabled must be True, False or None, "
                        f"got {enabled!r}")
    progress.enable(enabled)


def set_loop_checkpointing(policy) -> None:
    """How reverse mode through a loop whose result does not hold its carries
    (``st.while_loop``, ``st.map_fn``, a scan inside a traced function) keeps them: ``None``
    (the default) stores the carry of every step; ``"sqrt"`` stores one every about
    ``sqrt(steps)`` steps and recomputes each segment's carries from it on the way back
    (memory ``O(sqrt(steps))`` carries, one more forward pass of work); an int ``k >= 2``
    stores one every ``k`` steps. Derivatives are the same values either way. ``st.scan``'s
    result holds every carry (``tf.scan`` stacks them), so it is not affected.

    >>> import symtape as st
    >>> st.config.set_loop_checkpointing("sqrt"); st.config.loop_checkpointing()
    'sqrt'
    >>> st.config.set_loop_checkpointing(None)
    """
    ok = policy is None or policy == "sqrt" or (
        isinstance(policy, int) and not isinstance(policy, bool) and policy >= 2)
    if not ok:
        raise InvalidArgumentError(f"st.config.set_loop_checkpointing: policy must be None, "
                                   f"'sqrt' or an int >= 2, got {policy!r}")
    control.CHECKPOINTING = policy


def loop_checkpointing():
    """The policy :func:`set_loop_checkpointing` set (None: every carry stored).

    >>> import symtape as st
    >>> st.config.loop_checkpointing() is None
    True
    """
    return control.CHECKPOINTING


_threads = {"intra": 0, "inter": 0, "limiter": None}


def _threadpoolctl():
    try:
        import threadpoolctl
    except ImportError:
        raise MissingDependencyError(
            'st.config.threading.set_intra_op_parallelism_threads needs threadpoolctl: '
            'pip install "symtape[threads]"', name="threadpoolctl") from None
    return threadpoolctl


def _count(n, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidArgumentError(f"st.config.threading.{what}: the number of threads must be "
                                   f"an int >= 0 (0: the default), got {n!r}")
    return n


def set_intra_op_parallelism_threads(num_threads: int) -> None:
    """Threads of the BLAS library behind eager ops (``st.matmul`` and the like run by
    numpy): ``1`` keeps small eager steps from fighting other processes for a busy
    machine's cores (an eager MLP step varied 5x with the default on a loaded 2-core
    machine), ``0`` restores the library's default. Needs ``threadpoolctl`` (the extra
    ``[threads]``). Compiled functions choose their threads with ``threads=``.

    >>> import symtape as st
    >>> st.config.threading.get_intra_op_parallelism_threads()
    0
    """
    n = _count(num_threads, "set_intra_op_parallelism_threads")
    tpc = _threadpoolctl()
    if _threads["limiter"] is not None:
        _threads["limiter"].restore_original_limits()
        _threads["limiter"] = None
    if n:
        _threads["limiter"] = tpc.threadpool_limits(limits=n, user_api="blas")
    _threads["intra"] = n


def get_intra_op_parallelism_threads() -> int:
    """The number given to :func:`set_intra_op_parallelism_threads` (0: the default)."""
    return _threads["intra"]


def set_inter_op_parallelism_threads(num_threads: int) -> None:
    """Accepted for TensorFlow code: symtape runs one eager op at a time, so there is no
    pool of independent ops to size; the number is kept and returned by
    :func:`get_inter_op_parallelism_threads`."""
    _threads["inter"] = _count(num_threads, "set_inter_op_parallelism_threads")


def get_inter_op_parallelism_threads() -> int:
    """The number given to :func:`set_inter_op_parallelism_threads` (0: the default)."""
    return _threads["inter"]


#: ``st.config.threading``, as ``tf.config.threading``.
threading = types.SimpleNamespace(
    set_intra_op_parallelism_threads=set_intra_op_parallelism_threads,
    get_intra_op_parallelism_threads=get_intra_op_parallelism_threads,
    set_inter_op_parallelism_threads=set_inter_op_parallelism_threads,
    get_inter_op_parallelism_threads=get_inter_op_parallelism_threads,
)
