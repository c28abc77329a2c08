/* dispatch/shape.c: checks shared by the dispatcher's ops: same backend / same device, and the
 * shape plan of a batched matmul with burn's broadcasting of the leading (batch) axes.
 *
 * Broadcasting: the batch axes are aligned from the right (an operand of lower rank is
 * left-padded with 1s, numpy style; burn's typed API always passes equal ranks); on each axis the
 * sizes must be equal or one of them 1, which then stretches. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

ember_status ember__check_same_device(const char *op, const ember_tensor *a,
                                      const ember_tensor *b) {
    if (a->device.backend != b->device.backend)
        EMBER_FAIL(EMBER_ERR_BACKEND_MISMATCH,
                   "%s: The provided tensors are not on the same backend. Got backends %s and %s.",
                   op, ember_backend_name(a->device.backend),
                   ember_backend_name(b->device.backend));
    if (a->device.index != b->device.index) {
        char da[32], db[32];
        EMBER_FAIL(EMBER_ERR_DEVICE_MISMATCH,
                   "%s: Input tensor 1 is on the wrong device (lhs on %s, rhs on %s)", op,
                   ember__device_str(a->device, da, sizeof da),
                   ember__device_str(b->device, db, sizeof db));
    }
    if (a->ctx != b->ctx) {
        char da[32];
        EMBER_FAIL(EMBER_ERR_DEVICE_MISMATCH,
                   "%s: Input tensor 1 is on the wrong device (both name %s, but of two different "
                   "ember contexts)",
                   op, ember__device_str(a->device, da, sizeof da));
    }
    return EMBER_OK;
}

ember__gemm ember__matmul_plan_gemm(const ember__matmul_plan *p) {
    ember__gemm g = {.trans_a = 0,
                     .trans_b = 0,
                     .m = p->m,
                     .n = p->n,
                     .k = p->k,
                     .batch = p->batch,
                     .a_off = p->a_off,
                     .b_off = p->b_off,
                     .alpha = 1.0f,
                     .beta = 0.0f};
    return g;
}

void ember__matmul_plan_free(ember__matmul_plan *p) {
    if (!p)
        return;
    ember__free(p->a_off); /* b_off lives in the same block */
    p->a_off = p->b_off = NULL;
}

ember_status ember__matmul_plan_make(const char *op, const ember_tensor *a, const ember_tensor *b,
                                     ember__matmul_plan *p) {
    char sa[200], sb[200];
    memset(p, 0, sizeof *p);
    if (a->rank < 2 || b->rank < 2)
        EMBER_FAIL(
            EMBER_ERR_SHAPE_MISMATCH,
            "%s: lhs %s and rhs %s: both operands need rank >= 2 ([..., m, k] @ [..., k, n])", op,
            ember__shape_str(a->rank, a->shape, sa, sizeof sa),
            ember__shape_str(b->rank, b->shape, sb, sizeof sb));
    const int64_t m = a->shape[a->rank - 2], k = a->shape[a->rank - 1];
    const int64_t kb = b->shape[b->rank - 2], n = b->shape[b->rank - 1];
    if (k != kb)
        EMBER_FAIL(EMBER_ERR_SHAPE_MISMATCH,
                   "%s: lhs %s and rhs %s: the inner dims differ (%lld vs %lld)", op,
                   ember__shape_str(a->rank, a->shape, sa, sizeof sa),
                   ember__shape_str(b->rank, b->shape, sb, sizeof sb), (long long)k, (long long)kb);

    /* batch axes, left-padded with 1s to a common batch rank */
    const int ra = a->rank - 2, rb = b->rank - 2;
    const int r = ra > rb ? ra : rb;
    int64_t da[EMBER_MAX_RANK], db[EMBER_MAX_RANK], dout[EMBER_MAX_RANK];
    for (int i = 0; i < r; i++) {
        da[i] = i < r - ra ? 1 : a->shape[i - (r - ra)];
        db[i] = i < r - rb ? 1 : b->shape[i - (r - rb)];
        if (da[i] != db[i] && da[i] != 1 && db[i] != 1)
            EMBER_FAIL(EMBER_ERR_SHAPE_MISMATCH,
                       "%s: lhs %s and rhs %s: the batch dims cannot be broadcast (batch axis %d: "
                       "%lld vs %lld)",
                       op, ember__shape_str(a->rank, a->shape, sa, sizeof sa),
                       ember__shape_str(b->rank, b->shape, sb, sizeof sb), i, (long long)da[i],
                       (long long)db[i]);
        dout[i] = da[i] == 1 ? db[i] : da[i];
    }

    /* the output shape and its size, overflow-checked */
    p->rank = r + 2;
    memcpy(p->out_shape, dout, (size_t)r * sizeof dout[0]);
    p->out_shape[r] = m;
    p->out_shape[r + 1] = n;
    size_t batch = 1, cells;
    for (int i = 0; i < r; i++)
        if (!ember__mul_size(batch, (size_t)dout[i], &batch))
            batch = SIZE_MAX;
    if (batch == SIZE_MAX || !ember__mul_size(batch, (size_t)m, &cells) ||
        !ember__mul_size(cells, (size_t)n, &cells) || !ember__mul_size(cells, 8, &cells)) {
        char so[200];
        EMBER_FAIL(EMBER_ERR_SHAPE_MISMATCH, "%s: lhs %s and rhs %s: the output shape %s overflows",
                   op, ember__shape_str(a->rank, a->shape, sa, sizeof sa),
                   ember__shape_str(b->rank, b->shape, sb, sizeof sb),
                   ember__shape_str(p->rank, p->out_shape, so, sizeof so));
    }
    p->m = m;
    p->n = n;
    p->k = k;
    if (batch == 0 || m == 0 || n == 0) {
        p->batch = 0; /* an empty output: nothing to compute, no offsets */
        return EMBER_OK;
    }
    p->batch = (int64_t)batch;

    /* one block for both offset arrays; batch <= numel(out) so this cannot overflow */
    int64_t *off = ember__malloc(2 * batch * sizeof(int64_t));
    if (!off) {
        memset(p, 0, sizeof *p);
        EMBER_FAIL(EMBER_ERR_OUT_OF_MEMORY, "%s: no memory for %zu batch offsets", op, batch);
    }
    p->a_off = off;
    p->b_off = off + batch;

    /* element strides of the batch axes (0 on a broadcast axis) */
    int64_t stra[EMBER_MAX_RANK], strb[EMBER_MAX_RANK];
    int64_t acc_a = m * k, acc_b = k * n;
    for (int i = r - 1; i >= 0; i--) {
        stra[i] = da[i] == 1 ? 0 : acc_a;
        strb[i] = db[i] == 1 ? 0 : acc_b;
        acc_a *= da[i];
        acc_b *= db[i];
    }
    int64_t idx[EMBER_MAX_RANK] = {0};
    int64_t oa = 0, ob = 0;
    for (size_t t = 0; t < batch; t++) {
        p->a_off[t] = oa;
        p->b_off[t] = ob;
        for (int d = r - 1; d >= 0; d--) { /* odometer over the batch axes */
            idx[d]++;
            oa += stra[d];
            ob += strb[d];
            if (idx[d] < dout[d])
                break;
            oa -= stra[d] * idx[d];
            ob -= strb[d] * idx[d];
            idx[d] = 0;
        }
    }
    return EMBER_OK;
}
