/* dispatch/ops_float.c: the float ops of the dispatcher: matmul, linear and burn's linear backward
 * family (spec §3.1), elementwise add / mul with broadcasting.
 *
 * Every op validates first (handles, same backend and device, autodiff, dtypes, shapes) and only
 * then allocates and calls the backend's vtable. F16 / BF16 operands are converted to f32 through
 * the backend's `convert` entry, computed in f32, and the result converted back to the operands'
 * dtype. On failure *out is NULL and nothing leaks. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* ---- small helpers ---- */

static int is_float(ember_dtype dt) {
    return dt == EMBER_F32 || dt == EMBER_F16 || dt == EMBER_BF16;
}

/* A float operand: not quantized (QUANT_UNSUPPORTED unless the op routes quantized operands
 * itself), not an integer dtype (DTYPE_MISMATCH). */
static ember_status check_float(const char *op, const char *what, const ember_tensor *t) {
    EMBER_FAIL_IF(t->dtype == EMBER_QFLOAT, EMBER_ERR_QUANT_UNSUPPORTED,
                  "%s: %s is QFloat: Quantization not supported yet for this op (dequantize it "
                  "first)",
                  op, what);
    EMBER_FAIL_IF(!is_float(t->dtype), EMBER_ERR_DTYPE_MISMATCH,
                  "%s: %s is %s; this op takes F32, F16 or BF16", op, what,
                  ember_dtype_name(t->dtype));
    return EMBER_OK;
}

/* Two float operands (check_float on each, in order) of one dtype. */
static ember_status check_float_pair(const char *op, const ember_tensor *a, const char *wa,
                                     const ember_tensor *b, const char *wb) {
    EMBER_TRY(check_float(op, wa, a));
    EMBER_TRY(check_float(op, wb, b));
    EMBER_FAIL_IF(a->dtype != b->dtype, EMBER_ERR_DTYPE_MISMATCH,
                  "%s: %s is %s but %s is %s (operands must share a float dtype)", op, wa,
                  ember_dtype_name(a->dtype), wb, ember_dtype_name(b->dtype));
    return EMBER_OK;
}

/* burn's "Can't differentiate ..." sentinel: a tracked input to a backward op is second order.
 * burn's text, exactly: the op is all it names. */
static ember_status check_untracked(const char *op, const ember_tensor *t) {
    EMBER_FAIL_IF(t->autodiff != EMBER_AUTODIFF_DISABLED, EMBER_ERR_NOT_DIFFERENTIABLE,
                  "Can't differentiate %s.", op);
    return EMBER_OK;
}

static ember_status new_tensor(const ember_tensor *like, ember_dtype dt, int rank,
                               const int64_t *shape, ember_tensor **out) {
    size_t nbytes;
    EMBER_TRY(ember__shape_bytes(dt, rank, shape, NULL, &nbytes));
    return ember__tensor_alloc(like->ctx, like->device, dt, rank, shape, nbytes, out);
}

/* An f32 view of a float operand: the tensor itself when F32 (borrowed), else a converted copy
 * (owned: *own is set and must be freed). */
static ember_status as_f32(const char *op, const ember_tensor *t, const ember_tensor **f32,
                           ember_tensor **own) {
    *own = NULL;
    if (t->dtype == EMBER_F32) {
        *f32 = t;
        return EMBER_OK;
    }
    const ember_backend_ops *ops = ember__ops_of(t->ctx, t->device.backend);
    if (!ops->convert) {
        char d[32];
        EMBER_FAIL(EMBER_ERR_BACKEND_UNAVAILABLE, "%s: device %s cannot convert %s to F32", op,
                   ember__device_str(t->device, d, sizeof d), ember_dtype_name(t->dtype));
    }
    ember_tensor *c;
    EMBER_TRY(new_tensor(t, EMBER_F32, t->rank, t->shape, &c));
    ember_status st =
        ops->convert(ember__state_of(t->ctx, t->device.backend), t->device.index, t, c);
    if (st != EMBER_OK) {
        ember__tensor_destroy(c);
        return st;
    }
    *f32 = c;
    *own = c;
    return EMBER_OK;
}

/* Turn an f32 result into dtype dt: returns y itself for F32, else a converted copy (y freed). */
static ember_status finish(const char *op, ember_tensor *y, ember_dtype dt, ember_autodiff ad,
                           ember_tensor **out) {
    if (dt != EMBER_F32) {
        const ember_backend_ops *ops = ember__ops_of(y->ctx, y->device.backend);
        ember_tensor *c = NULL;
        ember_status st = EMBER_OK;
        if (!ops->convert) {
            char d[32];
            ember__device_str(y->device, d, sizeof d);
            ember__tensor_destroy(y);
            EMBER_FAIL(EMBER_ERR_BACKEND_UNAVAILABLE, "%s: device %s cannot convert F32 to %s", op,
                       d, ember_dtype_name(dt));
        }
        st = new_tensor(y, dt, y->rank, y->shape, &c);
        if (st == EMBER_OK) {
            st = ops->convert(ember__state_of(y->ctx, y->device.backend), y->device.index, y, c);
            if (st != EMBER_OK)
                ember__tensor_destroy(c);
        }
        ember__tensor_destroy(y);
        if (st != EMBER_OK)
            return st;
        y = c;
    }
    y->autodiff = ad;
    *out = y;
    return EMBER_OK;
}

/* Release the converted copies of up to three operands. */
static void drop3(ember_tensor *a, ember_tensor *b, ember_tensor *c) {
    ember__tensor_destroy(a);
    ember__tensor_destroy(b);
    ember__tensor_destroy(c);
}

/* Run one (batched) f32 GEMM into a fresh F32 tensor of the given shape. */
static ember_status run_gemm(const ember__gemm *g, const ember_tensor *a, const ember_tensor *b,
                             int rank, const int64_t *shape, ember_tensor **y) {
    ember_tensor *c;
    EMBER_TRY(new_tensor(a, EMBER_F32, rank, shape, &c));
    if (c->numel > 0) {
        const ember_backend_ops *ops = ember__ops_of(a->ctx, a->device.backend);
        ember_status st =
            ops->gemm_f32(ember__state_of(a->ctx, a->device.backend), a->device.index, g, a, b, c);
        if (st != EMBER_OK) {
            ember__tensor_destroy(c);
            return st;
        }
    }
    *y = c;
    return EMBER_OK;
}

/* out = a op b with broadcasting, all F32, into a fresh tensor of bc's shape. */
static ember_status run_binary(ember__binop op, const ember__bcast *bc, const ember_tensor *a,
                               const ember_tensor *b, ember_tensor **y) {
    ember_tensor *c;
    EMBER_TRY(new_tensor(a, EMBER_F32, bc->rank, bc->shape, &c));
    if (c->numel > 0) {
        const ember_backend_ops *ops = ember__ops_of(a->ctx, a->device.backend);
        ember_status st = ops->binary_f32(ember__state_of(a->ctx, a->device.backend),
                                          a->device.index, op, bc, a, b, c);
        if (st != EMBER_OK) {
            ember__tensor_destroy(c);
            return st;
        }
    }
    *y = c;
    return EMBER_OK;
}

/* The broadcast of a's and b's shapes (numpy / burn: trailing axes aligned, 1 stretches). */
static ember_status bcast_make(const char *op, const ember_tensor *a, const ember_tensor *b,
                               ember__bcast *bc) {
    const int r = a->rank > b->rank ? a->rank : b->rank;
    memset(bc, 0, sizeof *bc);
    bc->rank = r;
    int64_t sa = 1, sb = 1;
    for (int i = r - 1; i >= 0; i--) {
        const int ia = i - (r - a->rank), ib = i - (r - b->rank);
        const int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char s1[200], s2[200];
            EMBER_FAIL(EMBER_ERR_SHAPE_MISMATCH,
                       "%s: lhs %s and rhs %s cannot be broadcast (axis %d: %lld vs %lld)", op,
                       ember__shape_str(a->rank, a->shape, s1, sizeof s1),
                       ember__shape_str(b->rank, b->shape, s2, sizeof s2), i, (long long)da,
                       (long long)db);
        }
        bc->shape[i] = da == 1 ? db : da;
        bc->a_stride[i] = da == 1 ? 0 : sa;
        bc->b_stride[i] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
    }
    return EMBER_OK;
}

/* ---- matmul ---- */

ember_status ember_matmul(const ember_tensor *a, const ember_tensor *b, ember_tensor **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "matmul: out is NULL");
    *out = NULL;
    EMBER_TRY(ember__check_tensor(a, "matmul lhs"));
    EMBER_TRY(ember__check_tensor(b, "matmul rhs"));
    if (a->dtype == EMBER_QFLOAT || b->dtype == EMBER_QFLOAT)
        return ember_q_matmul(a, b, out);
    EMBER_TRY(ember__check_same_device("matmul", a, b));
    EMBER_TRY(check_float_pair("matmul", a, "lhs", b, "rhs"));
    ember_autodiff ad;
    EMBER_TRY(ember__autodiff_merge("matmul", a->autodiff, b->autodiff, &ad));

    ember__matmul_plan p;
    EMBER_TRY(ember__matmul_plan_make("matmul", a, b, &p));
    const ember_tensor *fa, *fb;
    ember_tensor *oa = NULL, *ob = NULL, *y = NULL;
    ember_status st = as_f32("matmul", a, &fa, &oa);
    if (st == EMBER_OK)
        st = as_f32("matmul", b, &fb, &ob);
    if (st == EMBER_OK) {
        ember__gemm g = ember__matmul_plan_gemm(&p);
        /* One rhs for every batch (x[..., m, k] @ W[k, n]) over a dense lhs: the batch folds
         * into the rows of one GEMM (burn's MergeBatches), far faster than many small ones. */
        int fold = p.batch > 1;
        for (int64_t i = 0; fold && i < p.batch; i++)
            fold = p.b_off[i] == p.b_off[0] && p.a_off[i] == i * p.m * p.k;
        if (fold) {
            g.m = p.m * p.batch;
            g.batch = 1;
        }
        st = run_gemm(&g, fa, fb, p.rank, p.out_shape, &y);
    }
    drop3(oa, ob, NULL);
    ember__matmul_plan_free(&p);
    if (st != EMBER_OK)
        return st;
    return finish("matmul", y, a->dtype, ad, out);
}

/* ---- linear ---- */

/* The bias of linear: NULL, or [d_out] of dtype dt on x's device. */
static ember_status check_bias(const ember_tensor *x, const ember_tensor *w,
                               const ember_tensor *bias, ember_dtype dt) {
    if (!bias)
        return EMBER_OK;
    EMBER_TRY(ember__check_tensor(bias, "linear bias"));
    EMBER_TRY(ember__check_same_device("linear", x, bias));
    EMBER_TRY(check_float("linear", "bias", bias));
    EMBER_FAIL_IF(bias->dtype != dt, EMBER_ERR_DTYPE_MISMATCH,
                  "linear: bias is %s but the output is %s (operands must share a float dtype)",
                  ember_dtype_name(bias->dtype), ember_dtype_name(dt));
    const int64_t d_out = w->shape[w->rank - 1];
    if (bias->rank != 1 || bias->shape[0] != d_out) {
        char s1[200], s2[200];
        EMBER_FAIL(EMBER_ERR_SHAPE_MISMATCH,
                   "linear: bias %s does not match weight %s (want [%lld])",
                   ember__shape_str(bias->rank, bias->shape, s1, sizeof s1),
                   ember__shape_str(w->rank, w->shape, s2, sizeof s2), (long long)d_out);
    }
    return EMBER_OK;
}

/* A quantized operand: q_matmul, then + bias (burn's tensor API, spec §3.1). */
static ember_status linear_quantized(const ember_tensor *x, const ember_tensor *w,
                                     const ember_tensor *bias, ember_tensor **out) {
    EMBER_TRY(ember_check_q_matmul(x, w)); /* q_matmul's own guards and text, before the bias */
    if (bias) {
        const ember_tensor *fl = x->dtype != EMBER_QFLOAT ? x : w;
        ember_dtype dt = fl->dtype != EMBER_QFLOAT ? fl->dtype : EMBER_F32;
        EMBER_TRY(check_bias(x, w, bias, dt));
    }
    ember_tensor *y = NULL;
    EMBER_TRY(ember_q_matmul(x, w, &y));
    if (!bias) {
        *out = y;
        return EMBER_OK;
    }
    ember_status st = ember_add(y, bias, out);
    ember__tensor_destroy(y);
    return st;
}

ember_status ember_linear(const ember_tensor *x, const ember_tensor *w, const ember_tensor *bias,
                          ember_tensor **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "linear: out is NULL");
    *out = NULL;
    EMBER_TRY(ember__check_tensor(x, "linear x"));
    EMBER_TRY(ember__check_tensor(w, "linear weight"));
    if (w->dtype == EMBER_QFLOAT || x->dtype == EMBER_QFLOAT)
        return linear_quantized(x, w, bias, out);
    EMBER_TRY(ember__check_same_device("linear", x, w));
    EMBER_TRY(check_float_pair("linear", x, "x", w, "weight"));
    char s1[200], s2[200];
    if (w->rank != 2 || x->shape[x->rank - 1] != w->shape[0])
        EMBER_FAIL(EMBER_ERR_SHAPE_MISMATCH,
                   "linear: x %s and weight %s: the weight must be [d_in, d_out] with d_in = the "
                   "last dim of x",
                   ember__shape_str(x->rank, x->shape, s1, sizeof s1),
                   ember__shape_str(w->rank, w->shape, s2, sizeof s2));
    EMBER_TRY(check_bias(x, w, bias, x->dtype));
    ember_autodiff ad;
    EMBER_TRY(ember__autodiff_merge("linear", x->autodiff, w->autodiff, &ad));
    if (bias)
        EMBER_TRY(ember__autodiff_merge("linear", ad, bias->autodiff, &ad));

    const int64_t d_in = w->shape[0], d_out = w->shape[1];
    int64_t yshape[EMBER_MAX_RANK];
    memcpy(yshape, x->shape, sizeof yshape);
    yshape[x->rank - 1] = d_out;
    int64_t rows = 1, zero = 0; /* x viewed as [rows, d_in] */
    for (int i = 0; i < x->rank - 1; i++)
        rows *= x->shape[i];
    const ember_tensor *fx, *fw, *fbias = NULL;
    ember_tensor *ox = NULL, *ow = NULL, *obias = NULL, *y = NULL;
    ember_status st = as_f32("linear", x, &fx, &ox);
    if (st == EMBER_OK)
        st = as_f32("linear", w, &fw, &ow);
    if (st == EMBER_OK && bias)
        st = as_f32("linear", bias, &fbias, &obias);
    if (st == EMBER_OK) {
        ember__gemm g = {.m = rows,
                         .n = d_out,
                         .k = d_in,
                         .batch = 1,
                         .a_off = &zero,
                         .b_off = &zero,
                         .alpha = 1.0f,
                         .beta = 0.0f};
        st = run_gemm(&g, fx, fw, x->rank, yshape, &y);
    }
    if (st == EMBER_OK && bias) {
        ember__bcast bc;
        st = bcast_make("linear", y, fbias, &bc);
        ember_tensor *z = NULL;
        if (st == EMBER_OK)
            st = run_binary(EMBER__BINOP_ADD, &bc, y, fbias, &z);
        ember__tensor_destroy(y);
        y = st == EMBER_OK ? z : NULL;
    }
    drop3(ox, ow, obias);
    if (st != EMBER_OK)
        return st;
    return finish("linear", y, x->dtype, ad, out);
}

/* ---- add / mul ---- */

static ember_status binary(const char *op, ember__binop kind, const ember_tensor *a,
                           const ember_tensor *b, ember_tensor **out) {
    char wa[32], wb[32];
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    snprintf(wa, sizeof wa, "%s lhs", op);
    snprintf(wb, sizeof wb, "%s rhs", op);
    EMBER_TRY(ember__check_tensor(a, wa));
    EMBER_TRY(ember__check_tensor(b, wb));
    EMBER_TRY(ember__check_same_device(op, a, b));
    EMBER_TRY(check_float_pair(op, a, "lhs", b, "rhs"));
    ember_autodiff ad;
    EMBER_TRY(ember__autodiff_merge(op, a->autodiff, b->autodiff, &ad));
    ember__bcast bc;
    EMBER_TRY(bcast_make(op, a, b, &bc));
    {
        size_t nbytes;
        EMBER_TRY(ember__shape_bytes(a->dtype, bc.rank, bc.shape, NULL, &nbytes));
    }
    const ember_tensor *fa, *fb;
    ember_tensor *oa = NULL, *ob = NULL, *y = NULL;
    ember_status st = as_f32(op, a, &fa, &oa);
    if (st == EMBER_OK)
        st = as_f32(op, b, &fb, &ob);
    if (st == EMBER_OK)
        st = run_binary(kind, &bc, fa, fb, &y);
    drop3(oa, ob, NULL);
    if (st != EMBER_OK)
        return st;
    return finish(op, y, a->dtype, ad, out);
}

ember_status ember_add(const ember_tensor *a, const ember_tensor *b, ember_tensor **out) {
    return binary("add", EMBER__BINOP_ADD, a, b, out);
}

ember_status ember_mul(const ember_tensor *a, const ember_tensor *b, ember_tensor **out) {
    return binary("mul", EMBER__BINOP_MUL, a, b, out);
}

/* ---- burn's linear backward family (spec §3.1) ---- */

/* dx = dy @ Wᵀ: w [d_in, d_out], dy [..., d_out] -> dx [..., d_in]. */
ember_status ember_linear_x_backward(const ember_tensor *w, const ember_tensor *dy,
                                     ember_tensor **dx) {
    static const char op[] = "linear_x_backward";
    EMBER_FAIL_IF(!dx, EMBER_ERR_INVALID_ARGUMENT, "%s: dx is NULL", op);
    *dx = NULL;
    EMBER_TRY(ember__check_tensor(w, "linear_x_backward weight"));
    EMBER_TRY(ember__check_tensor(dy, "linear_x_backward output_grad"));
    EMBER_TRY(ember__check_same_device(op, w, dy));
    EMBER_TRY(check_untracked(op, w));
    EMBER_TRY(check_untracked(op, dy));
    EMBER_TRY(check_float_pair(op, w, "weight", dy, "output_grad"));
    char s1[200], s2[200];
    if (w->rank != 2 || dy->shape[dy->rank - 1] != w->shape[1])
        EMBER_FAIL(EMBER_ERR_SHAPE_MISMATCH,
                   "%s: weight %s and output_grad %s: want weight [d_in, d_out] and output_grad "
                   "[..., d_out]",
                   op, ember__shape_str(w->rank, w->shape, s1, sizeof s1),
                   ember__shape_str(dy->rank, dy->shape, s2, sizeof s2));
    const int64_t d_in = w->shape[0], d_out = w->shape[1];
    int64_t shape[EMBER_MAX_RANK];
    memcpy(shape, dy->shape, sizeof shape);
    shape[dy->rank - 1] = d_in;
    int64_t rows = 1, zero = 0;
    for (int i = 0; i < dy->rank - 1; i++)
        rows *= dy->shape[i];
    const ember_tensor *fw, *fdy;
    ember_tensor *ow = NULL, *ody = NULL, *y = NULL;
    ember_status st = as_f32(op, w, &fw, &ow);
    if (st == EMBER_OK)
        st = as_f32(op, dy, &fdy, &ody);
    if (st == EMBER_OK) {
        /* [rows, d_out] @ ([d_in, d_out])ᵀ */
        ember__gemm g = {.trans_b = 1,
                         .m = rows,
                         .n = d_in,
                         .k = d_out,
                         .batch = 1,
                         .a_off = &zero,
                         .b_off = &zero,
                         .alpha = 1.0f,
                         .beta = 0.0f};
        st = run_gemm(&g, fdy, fw, dy->rank, shape, &y);
    }
    drop3(ow, ody, NULL);
    if (st != EMBER_OK)
        return st;
    return finish(op, y, dy->dtype, EMBER_AUTODIFF_DISABLED, dx);
}

/* dW = flatten(x)ᵀ @ flatten(dy): x [..., d_in], dy [..., d_out] (same leading dims) -> [d_in,
 * d_out]; the flattening sums over the batch. */
ember_status ember_linear_weight_backward(const ember_tensor *x, const ember_tensor *dy,
                                          ember_tensor **dw) {
    static const char op[] = "linear_weight_backward";
    EMBER_FAIL_IF(!dw, EMBER_ERR_INVALID_ARGUMENT, "%s: dw is NULL", op);
    *dw = NULL;
    EMBER_TRY(ember__check_tensor(x, "linear_weight_backward x"));
    EMBER_TRY(ember__check_tensor(dy, "linear_weight_backward output_grad"));
    EMBER_TRY(ember__check_same_device(op, x, dy));
    EMBER_TRY(check_untracked(op, x));
    EMBER_TRY(check_untracked(op, dy));
    EMBER_TRY(check_float_pair(op, x, "x", dy, "output_grad"));
    int same = x->rank == dy->rank;
    for (int i = 0; same && i < x->rank - 1; i++)
        same = x->shape[i] == dy->shape[i];
    if (!same) {
        char s1[200], s2[200];
        EMBER_FAIL(EMBER_ERR_SHAPE_MISMATCH,
                   "%s: x %s and output_grad %s: the leading dims must be equal", op,
                   ember__shape_str(x->rank, x->shape, s1, sizeof s1),
                   ember__shape_str(dy->rank, dy->shape, s2, sizeof s2));
    }
    const int64_t d_in = x->shape[x->rank - 1], d_out = dy->shape[dy->rank - 1];
    int64_t rows = 1, zero = 0;
    for (int i = 0; i < x->rank - 1; i++)
        rows *= x->shape[i];
    const int64_t shape[2] = {d_in, d_out};
    const ember_tensor *fx, *fdy;
    ember_tensor *ox = NULL, *ody = NULL, *y = NULL;
    ember_status st = as_f32(op, x, &fx, &ox);
    if (st == EMBER_OK)
        st = as_f32(op, dy, &fdy, &ody);
    if (st == EMBER_OK) {
        /* ([rows, d_in])ᵀ @ [rows, d_out] */
        ember__gemm g = {.trans_a = 1,
                         .m = d_in,
                         .n = d_out,
                         .k = rows,
                         .batch = 1,
                         .a_off = &zero,
                         .b_off = &zero,
                         .alpha = 1.0f,
                         .beta = 0.0f};
        st = run_gemm(&g, fx, fdy, 2, shape, &y);
    }
    drop3(ox, ody, NULL);
    if (st != EMBER_OK)
        return st;
    return finish(op, y, x->dtype, EMBER_AUTODIFF_DISABLED, dw);
}

/* db = the sum of dy over every axis but the last: dy [..., d_out] -> [d_out]. */
ember_status ember_linear_bias_backward(const ember_tensor *dy, ember_tensor **db) {
    static const char op[] = "linear_bias_backward";
    EMBER_FAIL_IF(!db, EMBER_ERR_INVALID_ARGUMENT, "%s: db is NULL", op);
    *db = NULL;
    EMBER_TRY(ember__check_tensor(dy, "linear_bias_backward output_grad"));
    EMBER_TRY(check_untracked(op, dy));
    EMBER_TRY(check_float(op, "output_grad", dy));
    const int64_t d_out = dy->shape[dy->rank - 1];
    int64_t rows = 1;
    for (int i = 0; i < dy->rank - 1; i++)
        rows *= dy->shape[i];
    const ember_tensor *fdy;
    ember_tensor *ody = NULL, *y = NULL;
    ember_status st = as_f32(op, dy, &fdy, &ody);
    if (st == EMBER_OK)
        st = new_tensor(dy, EMBER_F32, 1, &d_out, &y);
    if (st == EMBER_OK && d_out > 0) {
        const ember_backend_ops *ops = ember__ops_of(dy->ctx, dy->device.backend);
        st = ops->sum_rows_f32(ember__state_of(dy->ctx, dy->device.backend), dy->device.index, fdy,
                               rows, d_out, y);
        if (st != EMBER_OK) {
            ember__tensor_destroy(y);
            y = NULL;
        }
    }
    drop3(ody, NULL, NULL);
    if (st != EMBER_OK)
        return st;
    return finish(op, y, dy->dtype, EMBER_AUTODIFF_DISABLED, db);
}
