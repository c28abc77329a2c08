/* dispatch/qmatmul.c: burn's q_matmul (spec §1.4, §4.8) behind the dispatcher's guards.
 *
 * Arms, chosen by dtype as burn-dispatch does: (Q,Q), (F,Q), (Q,F); (F,F) is the float matmul.
 * Guards, in burn's order, all in qmm_check() so that ember_check_q_matmul() and the op give the
 * same status and detail:
 *   1. live handles; each operand float (F32/F16/BF16) or QFloat;
 *   2. burn's autodiff pre-check: a quantized operand is never tracked (the API cannot break this;
 *      the check is kept for a corrupted handle);
 *   3. one backend ("q_matmul inputs are on different backends"), one device (of one context);
 *   4. the merge of the autodiff contexts (spec §1.2);
 *   5. shapes: a[..., m, k] @ b[..., k, n], batch axes broadcast (aligned to the right);
 *   6. with quant_propagation = PROPAGATE, the output shape must divide into the scheme's blocks,
 *      as quantize_dynamic requires.
 * Output: the float operand's dtype, F32 when both are quantized. PROPAGATE re-quantizes it with
 * the quantized operand's scheme (the rhs's when both are), as burn's default q_matmul does. A
 * float output takes the merged context: with an enabled one it is a fresh tracked leaf (ember
 * keeps no graph). A quantized output is never tracked.
 * Execution: the backend's q_matmul entry when it has one (the integer path; it may decline with
 * EMBER_ERR_QUANT_UNSUPPORTED), else burn's default: dequantize each quantized operand on its
 * producer to the output dtype, then the float matmul. */
#include <string.h>

#include "../quant/quant_impl.h"
#include "internal.h"

typedef struct qmm_plan {
    int aq, bq;                /* which operands are quantized */
    ember_autodiff ad;         /* the merged autodiff context */
    ember_dtype out_dtype;     /* the float output's dtype */
    const ember_qscheme *prop; /* PROPAGATE: re-quantize the output with this scheme */
    int out_rank;
    int64_t out_shape[EMBER_MAX_RANK];
} qmm_plan;

static int is_float(ember_dtype d) { return d == EMBER_F32 || d == EMBER_F16 || d == EMBER_BF16; }

/* a[..., m, k] @ b[..., k, n] with the batch axes broadcast (aligned to the right, 1 stretches);
 * SHAPE_MISMATCH naming op, with the same text as ember__matmul_plan_make (which does the same
 * checks but allocates the batch offsets, so the check function cannot call it). */
static ember_status check_shapes(const char *op, const ember_tensor *a, const ember_tensor *b,
                                 qmm_plan *p) {
    char as[200], bs[200];
    ember__shape_str(a->rank, a->shape, as, sizeof as);
    ember__shape_str(b->rank, b->shape, bs, sizeof bs);
    EMBER_FAIL_IF(a->rank < 2 || b->rank < 2, EMBER_ERR_SHAPE_MISMATCH,
                  "%s: lhs %s and rhs %s: both operands need rank >= 2 ([..., m, k] @ [..., k, n])",
                  op, as, bs);
    int64_t m = a->shape[a->rank - 2], k = a->shape[a->rank - 1];
    int64_t kb = b->shape[b->rank - 2], n = b->shape[b->rank - 1];
    EMBER_FAIL_IF(k != kb, EMBER_ERR_SHAPE_MISMATCH,
                  "%s: lhs %s and rhs %s: the inner dims differ (%lld vs %lld)", op, as, bs,
                  (long long)k, (long long)kb);
    int r = a->rank > b->rank ? a->rank : b->rank;
    size_t batch = 1, cells = 0;
    for (int i = 0; i < r - 2; i++) {
        int ia = i - (r - a->rank), ib = i - (r - b->rank);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        EMBER_FAIL_IF(da != db && da != 1 && db != 1, EMBER_ERR_SHAPE_MISMATCH,
                      "%s: lhs %s and rhs %s: the batch dims cannot be broadcast (batch axis %d: "
                      "%lld vs %lld)",
                      op, as, bs, i, (long long)da, (long long)db);
        p->out_shape[i] = da == 1 ? db : da;
        if (!ember__mul_size(batch, (size_t)p->out_shape[i], &batch))
            batch = SIZE_MAX;
    }
    p->out_shape[r - 2] = m;
    p->out_shape[r - 1] = n;
    p->out_rank = r;
    if (batch == SIZE_MAX || !ember__mul_size(batch, (size_t)m, &cells) ||
        !ember__mul_size(cells, (size_t)n, &cells) || !ember__mul_size(cells, 8, &cells)) {
        char so[200];
        EMBER_FAIL(EMBER_ERR_SHAPE_MISMATCH, "%s: lhs %s and rhs %s: the output shape %s overflows",
                   op, as, bs, ember__shape_str(r, p->out_shape, so, sizeof so));
    }
    return EMBER_OK;
}

/* The output must be quantizable with the propagated scheme: quantize_dynamic's layout and block
 * rules (quant/'s own checks, so the detail is the one ember_quantize would give, naming
 * q_matmul). */
static ember_status check_propagation(const qmm_plan *p) {
    ember__qlayout L;
    EMBER_TRY(ember__qlayout_make("q_matmul", p->prop, p->out_rank, p->out_shape, &L));
    return ember__qlayout_check_divisible("q_matmul", p->prop, p->out_rank, p->out_shape);
}

static ember_status qmm_check(const ember_tensor *a, const ember_tensor *b, qmm_plan *p) {
    memset(p, 0, sizeof *p);
    EMBER_TRY(ember__check_tensor(a, "q_matmul lhs"));
    EMBER_TRY(ember__check_tensor(b, "q_matmul rhs"));
    p->aq = a->dtype == EMBER_QFLOAT;
    p->bq = b->dtype == EMBER_QFLOAT;
    EMBER_FAIL_IF(!p->aq && !is_float(a->dtype), EMBER_ERR_DTYPE_MISMATCH,
                  "q_matmul: lhs is %s; operands must be float (F32, F16, BF16) or QFloat",
                  ember_dtype_name(a->dtype));
    EMBER_FAIL_IF(!p->bq && !is_float(b->dtype), EMBER_ERR_DTYPE_MISMATCH,
                  "q_matmul: rhs is %s; operands must be float (F32, F16, BF16) or QFloat",
                  ember_dtype_name(b->dtype));

    if (!p->aq && !p->bq) { /* (F,F): the float matmul's guards */
        EMBER_TRY(ember__check_same_device("matmul", a, b));
        EMBER_FAIL_IF(a->dtype != b->dtype, EMBER_ERR_DTYPE_MISMATCH,
                      "matmul: lhs is %s but rhs is %s (operands must share a float dtype)",
                      ember_dtype_name(a->dtype), ember_dtype_name(b->dtype));
        EMBER_TRY(ember__autodiff_merge("matmul", a->autodiff, b->autodiff, &p->ad));
        EMBER_TRY(check_shapes("matmul", a, b, p));
        p->out_dtype = a->dtype;
        return EMBER_OK;
    }

    EMBER_FAIL_IF(p->aq && a->autodiff != EMBER_AUTODIFF_DISABLED, EMBER_ERR_AUTODIFF_CONTEXT,
                  "q_matmul: only float tensors may use an autodiff primitive (the quantized lhs "
                  "is tracked)");
    EMBER_FAIL_IF(p->bq && b->autodiff != EMBER_AUTODIFF_DISABLED, EMBER_ERR_AUTODIFF_CONTEXT,
                  "q_matmul: only float tensors may use an autodiff primitive (the quantized rhs "
                  "is tracked)");
    char ad[32], bd[32];
    ember__device_str(a->device, ad, sizeof ad);
    ember__device_str(b->device, bd, sizeof bd);
    EMBER_FAIL_IF(a->device.backend != b->device.backend, EMBER_ERR_BACKEND_MISMATCH,
                  "q_matmul inputs are on different backends (lhs %s on %s, rhs %s on %s; "
                  "quantized operands must share a backend)",
                  ember_dtype_name(a->dtype), ad, ember_dtype_name(b->dtype), bd);
    EMBER_FAIL_IF(a->device.index != b->device.index, EMBER_ERR_DEVICE_MISMATCH,
                  "q_matmul: Input tensor 1 is on the wrong device (lhs on %s, rhs on %s)", ad, bd);
    EMBER_FAIL_IF(a->ctx != b->ctx, EMBER_ERR_DEVICE_MISMATCH,
                  "q_matmul: Input tensor 1 is on the wrong device (both name %s, but of two "
                  "different ember contexts)",
                  ad);
    EMBER_TRY(ember__autodiff_merge("q_matmul", a->autodiff, b->autodiff, &p->ad));
    EMBER_TRY(check_shapes("q_matmul", a, b, p));
    p->out_dtype = !p->aq ? a->dtype : !p->bq ? b->dtype : EMBER_F32;
    if (a->ctx->opts.quant_propagation == EMBER_QUANT_PROPAGATE) {
        p->prop = p->bq ? &b->scheme : &a->scheme;
        EMBER_TRY(check_propagation(p));
    }
    return EMBER_OK;
}

ember_status ember_check_q_matmul(const ember_tensor *a, const ember_tensor *b) {
    qmm_plan p;
    return qmm_check(a, b, &p);
}

/* The backend's integer path. EMBER_ERR_QUANT_UNSUPPORTED (no detail) when it has none or
 * declines; the caller then falls back. */
static ember_status run_backend(const ember_tensor *a, const ember_tensor *b, const qmm_plan *p,
                                ember_tensor **r) {
    ember_context *ctx = a->ctx;
    const ember_backend_ops *ops = ctx->be[a->device.backend].ops;
    void *state = ctx->be[a->device.backend].state;
    if (!ops->q_matmul || p->out_dtype != EMBER_F32)
        return EMBER_ERR_QUANT_UNSUPPORTED; /* the entry takes F32 float operands only */
    int64_t k = a->shape[a->rank - 1];
    size_t cells = 1;
    for (int i = 0; i < p->out_rank; i++)
        cells *= (size_t)p->out_shape[i];
    if (cells == 0 || k == 0)
        return EMBER_ERR_QUANT_UNSUPPORTED; /* empty: the float path handles it */
    size_t nbytes;
    EMBER_TRY(ember__shape_bytes(EMBER_F32, p->out_rank, p->out_shape, NULL, &nbytes));
    ember__matmul_plan mp;
    EMBER_TRY(ember__matmul_plan_make("q_matmul", a, b, &mp));
    ember_tensor *o = NULL;
    ember_status st =
        ember__tensor_alloc(ctx, a->device, EMBER_F32, p->out_rank, p->out_shape, nbytes, &o);
    if (st == EMBER_OK) {
        ember__gemm g = ember__matmul_plan_gemm(&mp);
        st = ops->q_matmul(state, a->device.index, &g, a, b, o);
    }
    ember__matmul_plan_free(&mp);
    if (st != EMBER_OK) {
        ember__tensor_destroy(o);
        return st;
    }
    *r = o;
    return EMBER_OK;
}

static ember_status dequantize_as(const ember_tensor *q, ember_dtype dt, ember_tensor **out) {
    return dt == EMBER_F32 ? ember_dequantize(q, out) : ember_dequantize_to(q, dt, out);
}

/* burn's default q_matmul: dequantize on the producer to the output dtype, float matmul. */
static ember_status run_fallback(const ember_tensor *a, const ember_tensor *b, const qmm_plan *p,
                                 ember_tensor **r) {
    ember_tensor *da = NULL, *db = NULL;
    ember_status st = EMBER_OK;
    if (p->aq)
        st = dequantize_as(a, p->out_dtype, &da);
    if (st == EMBER_OK && p->bq)
        st = dequantize_as(b, p->out_dtype, &db);
    if (st == EMBER_OK)
        st = ember_matmul(da ? da : a, db ? db : b, r);
    ember__tensor_destroy(da);
    ember__tensor_destroy(db);
    return st;
}

ember_status ember_q_matmul(const ember_tensor *a, const ember_tensor *b, ember_tensor **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "q_matmul: out is NULL");
    *out = NULL;
    qmm_plan p;
    EMBER_TRY(qmm_check(a, b, &p));
    if (!p.aq && !p.bq)
        return ember_matmul(a, b, out);

    ember_tensor *r = NULL;
    ember_status st = run_backend(a, b, &p, &r);
    if (st == EMBER_ERR_QUANT_UNSUPPORTED)
        st = run_fallback(a, b, &p, &r);
    if (st != EMBER_OK)
        return st;
    if (p.prop) {
        ember_tensor *qr = NULL;
        st = ember_quantize(r, p.prop, &qr);
        ember__tensor_destroy(r);
        if (st != EMBER_OK)
            return st;
        qr->autodiff = EMBER_AUTODIFF_DISABLED; /* quantize detaches: never tracked */
        *out = qr;
        return EMBER_OK;
    }
    r->autodiff = p.ad; /* a fresh leaf: no graph links it to the inputs */
    *out = r;
    return EMBER_OK;
}
