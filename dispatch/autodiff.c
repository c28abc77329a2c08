/* dispatch/autodiff.c: the autodiff context of a tensor (burn-dispatch's DispatchAutodiffContext,
 * spec §1.1-§1.2).
 *
 * ember keeps no graph: a tensor is only tagged DISABLED or enabled with a checkpointing strategy.
 * The tag decides which guards apply (the NOT_DIFFERENTIABLE sentinels, the transfer rule) and
 * travels through ops by burn's merge rule, ember__autodiff_merge(). Only float tensors are ever
 * tracked: burn's quantize detaches and its quantized primitive is never an autodiff primitive
 * (spec §3.4), so a quantized tensor stays DISABLED for life. */
#include "internal.h"

/* burn's Debug spelling of the GradientCheckpointingStrategy inside Enabled(..). */
const char *ember__autodiff_strategy_name(ember_autodiff a) {
    switch (a) {
    case EMBER_AUTODIFF_BALANCED:
        return "Balanced";
    case EMBER_AUTODIFF_NO_CHECKPOINTING:
        return "Disabled";
    case EMBER_AUTODIFF_DISABLED:
        return "None";
    default:
        return "unknown";
    }
}

ember_status ember__autodiff_merge(const char *op, ember_autodiff a, ember_autodiff b,
                                   ember_autodiff *result) {
    if (a == EMBER_AUTODIFF_DISABLED) {
        *result = b; /* None ⊕ x = x: the association is promoted */
        return EMBER_OK;
    }
    if (b == EMBER_AUTODIFF_DISABLED || a == b) {
        *result = a;
        return EMBER_OK;
    }
    EMBER_FAIL(EMBER_ERR_CHECKPOINT_MISMATCH,
               "%s: Gradient checkpointing strategy mismatch: %s vs %s. Tensors in the same "
               "operation must share a strategy.",
               op, ember__autodiff_strategy_name(a), ember__autodiff_strategy_name(b));
}

ember_status ember_tensor_set_autodiff(ember_tensor *t, ember_autodiff a) {
    EMBER_TRY(ember__check_tensor(t, "tensor_set_autodiff"));
    EMBER_FAIL_IF((unsigned)a >= EMBER_AUTODIFF_COUNT, EMBER_ERR_INVALID_ARGUMENT,
                  "tensor_set_autodiff: bad autodiff value %d", (int)a);
    if (a == EMBER_AUTODIFF_DISABLED) { /* untracking is always allowed (a no-op off floats) */
        t->autodiff = a;
        return EMBER_OK;
    }
    EMBER_FAIL_IF(t->dtype == EMBER_QFLOAT, EMBER_ERR_AUTODIFF_CONTEXT,
                  "tensor_set_autodiff: only float tensors may use an autodiff primitive (a "
                  "quantized tensor is never tracked: quantize detaches; dequantize it first)");
    const ember_dtype_traits *tr = ember_dtype_get_traits(t->dtype);
    EMBER_FAIL_IF(!tr || !tr->is_float, EMBER_ERR_AUTODIFF_CONTEXT,
                  "tensor_set_autodiff: only float tensors may use an autodiff primitive (the "
                  "tensor is %s)",
                  ember_dtype_name(t->dtype));
    t->autodiff = a;
    return EMBER_OK;
}
