"""TensorFlow's everyday names: each one users call most exists in the matching ``st``
namespace and is callable. ``MISSING`` lists the names not there yet; the test checks it is
exactly the set of names absent, so it fails both when a listed name vanishes and when
``MISSING`` is stale."""

from __future__ import annotations

import symtape as st

#: namespace ("" for ``tf.`` itself) -> the names users call most
NAMES = {
    "": """
        abs add add_n argmax argmin argsort broadcast_to cast ceil clip_by_value concat
        constant cos cumsum divide einsum equal exp expand_dims eye fill floor gather
        gather_nd greater greater_equal identity less less_equal linspace log logical_and
        logical_not logical_or matmul maximum meshgrid minimum multiply negative norm
        not_equal one_hot ones ones_like pad pow range rank reduce_all reduce_any reduce_max
        reduce_mean reduce_min reduce_prod reduce_sum reshape reverse roll round scatter_nd
        searchsorted sequence_mask shape sigmoid sign sin size slice sort split sqrt square
        squeeze stack stop_gradient strided_slice subtract tanh tensor_scatter_nd_add
        tensor_scatter_nd_update tile transpose unique unstack where zeros zeros_like
        GradientTape Variable function tensordot clip_by_norm custom_gradient
        convert_to_tensor floordiv scan while_loop cond map_fn vectorized_map
    """,
    "math": """
        abs acos acosh add add_n asin asinh atan atan2 atanh bessel_i0e bessel_i1e ceil cos
        cosh cumprod cumsum digamma divide divide_no_nan erf erfc exp expm1 floor floormod
        greater is_finite is_inf is_nan lgamma log log1p log_sigmoid maximum minimum multiply
        multiply_no_nan negative polygamma polyval pow reciprocal reduce_logsumexp reduce_max
        reduce_mean reduce_min reduce_prod reduce_std reduce_sum reduce_variance round rsqrt
        segment_max segment_mean segment_min segment_prod segment_sum sigmoid sign sin sinh
        softplus sqrt square squared_difference subtract tan tanh top_k truediv
        unsorted_segment_max unsorted_segment_mean unsorted_segment_min unsorted_segment_prod
        unsorted_segment_sum xlogy zeta reduce_euclidean_norm argmax argmin greater_equal
        less less_equal equal not_equal logical_and logical_or logical_not l2_normalize
    """,
    "linalg": """
        band_part cholesky cholesky_solve cross det diag diag_part eigh eigvalsh expm inv
        logdet lstsq lu matmul matvec norm pinv qr slogdet solve svd tensordot trace
        matrix_transpose triangular_solve einsum
    """,
    "nn": """
        avg_pool2d batch_normalization bias_add conv1d conv2d conv2d_transpose dropout elu
        gelu l2_loss l2_normalize leaky_relu log_softmax max_pool2d moments relu relu6 selu
        sigmoid sigmoid_cross_entropy_with_logits silu softmax
        softmax_cross_entropy_with_logits softplus softsign
        sparse_softmax_cross_entropy_with_logits swish tanh
    """,
}

#: Names still to come (their modules are being written); shrinks to empty.
MISSING: set = set()


def _absent() -> set:
    out = set()
    for ns, names in NAMES.items():
        module = getattr(st, ns) if ns else st
        for name in names.split():
            if not callable(getattr(module, name, None)):
                out.add(f"{ns}.{name}" if ns else name)
    return out


def test_the_lists_have_no_repeats_and_cover_the_everyday_surface():
    for ns, names in NAMES.items():
        assert len(names.split()) == len(set(names.split())), ns
    assert sum(len(n.split()) for n in NAMES.values()) >= 200


def test_missing_is_exactly_the_set_of_absent_names():
    absent = _absent()
    total = sum(len(n.split()) for n in NAMES.values())
    print(f"{total - len(absent)} of {total} TensorFlow names present")
    assert not absent - MISSING, f"absent but not listed in MISSING: {sorted(absent - MISSING)}"
    assert not MISSING - absent, f"listed in MISSING but present: {sorted(MISSING - absent)}"
