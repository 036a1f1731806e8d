"""The primitive table: for each op, its SymPy builder, numpy evaluation and derivative rule.

An op is applied with ``op.bind(*args, **params)`` (or by calling it); ``tensor.py`` installs
the binder that converts arguments, checks shapes and dtypes (:meth:`Primitive.prepare`),
makes the result's tensor-level node (folded per :meth:`Primitive.structure`), evaluates it
with numpy (:meth:`Primitive.evaluator`) and records it on the active tapes. The element view
of a node (:meth:`Primitive.build`, one small definition per element) is built on demand.

Derivative rules have one fixed signature, ``rule(g, ans, *args, **params) -> cotangent``,
one rule per argument, ``None`` meaning no gradient flows through that argument (not the
same as zero: a rule may return :class:`Zero`). Rules use only ops of this table, so
derivatives of any order are just more sweeps. Elementwise ops are SymPy *templates*; their
default rule is SymPy's local partial of the template, itself a template op. TensorFlow's
conventions at kinks, and stable forms, override it where named.

The table is split by kind: ``core`` (the framework), ``elementwise``, ``structural``,
``reductions``, ``linalg`` (contractions and linear algebra), ``conv`` and ``pool``
(convolutions, max pooling), ``axis`` (softmax family, ``stop_gradient``) and ``binder``
(tensors and the application of ops). TensorFlow's composites live in ``math.py``,
``nn.py`` and ``linalg.py``.
"""

from __future__ import annotations

from symtape.ops.axis import (
    AxisOp, StopGradient, log_softmax, softmax, softmax_cross_entropy_with_logits, stop_gradient,
)

from symtape.core.primitive import OPS, Aval, P, Primitive, Zero, irregular_rows, row_flags
from symtape.ops.elementwise import (
    Elementwise, abs_, acos, acosh, add, asin, asinh, atan, atan2, atanh, ceil, clip_by_value, cos,
    cosh, divide, dropout, elu, equal, erf, exp, expm1, floor, floordiv, floormod, greater,
    greater_equal, identity, leaky_relu_op, less, less_equal, log, log1p, logical_and, logical_not,
    logical_or, maximum, minimum, multiply, negative, not_equal, pow_, relu, relu6, round_, rsqrt,
    selu, sigmoid, sigmoid_cross_entropy_with_logits, sign, sin, sinh, softplus, sqrt, square,
    squared_difference, subtract, tan, tanh, template_op, unbroadcast, where,
)
from symtape.ops.conv import Conv, conv2d, conv2d_backprop_filter, conv2d_backprop_input  # noqa: F401
from symtape.ops.pool import (
    MaxPool, Pooling, SumPool, max_pool2d, max_pool2d_grad, max_pool2d_pick, sum_pool2d,
    sum_pool2d_grad,
)
from symtape.ops.contraction import (
    Einsum, MatMul, dot_atoms, einsum, in_order_sum, matmul, parse_einsum,
)
from symtape.ops.linalg import Det, Inv, Solve, swap_last, cofactors, det, inv, solve
from symtape.ops.factorizations import cholesky, triangular_solve  # noqa: F401
from symtape.ops.decompositions import eigh, lu, qr, svd  # noqa: F401
from symtape.ops.reductions import (
    ORDERED_TERMS, Reduction, normalize_axes, reduce_euclidean_norm, reduce_logsumexp, reduce_max,
    reduce_mean, reduce_min, reduce_prod, reduce_sum,
)
from symtape.ops.structural import (
    Cast, GatherFlat, ScatterAdd, Structural, broadcast_to, cast, concat, expand_dims, gather,
    gather_flat, getitem, reshape, reverse, scatter_add, squeeze, stack, tile, transpose,
)
from symtape.ops.structural import (  # TensorFlow's moves
    MatrixDiag, Roll, gather_nd, matrix_diag, matrix_diag_part, roll, slice_,
)
from symtape.ops.segment import SegmentReduce, segment_reduce
from symtape.ops.ordering import argsort, cumprod, cumsum, searchsorted, sort_permute  # noqa: F401
from symtape.ops.control import Program, Scan, scan  # noqa: F401

# The core applies this table's primitives by name; what else its eager path needs it is lent.
from symtape.core.apply import lend  # noqa: E402
from symtape.ops.elementwise import recipe_atom  # noqa: E402

lend(elementwise=Elementwise, recipe_atom=recipe_atom)
