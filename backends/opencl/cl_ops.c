/* backends/opencl/cl_ops.c: f32 ops on OpenCL: tiled GEMM (kernels/gemm.cl), broadcast add / mul,
 * column sums and float conversions (kernels/elementwise.cl). */
#include <stdio.h>
#include <string.h>

#include "cl_backend.h"

/* The GEMM tile for a device: 64x64 tiles of 4x4 per item (256 items) where the device allows
 * work-groups that large, else 32x32 tiles of 4x4 (64 items), else 16x16 tiles of 2x2. */
static void gemm_tile(const ember__cl_device *d, int *tm, int *wm) {
    if (d->max_wg >= 256) {
        *tm = 64;
        *wm = 4;
    } else if (d->max_wg >= 64) {
        *tm = 32;
        *wm = 4;
    } else {
        *tm = 16;
        *wm = 2;
    }
}

/* The batch offset tables of g as device buffers of cl_long (element offsets). */
static ember_status offsets(ember__cl_state *s, int dev, const char *op, const ember__gemm *g,
                            cl_mem *ao, cl_mem *bo) {
    EMBER_TRY(ember__cl_temp(s, dev, op, (size_t)g->batch * sizeof(cl_long), g->a_off, ao));
    ember_status st = ember__cl_temp(s, dev, op, (size_t)g->batch * sizeof(cl_long), g->b_off, bo);
    if (st != EMBER_OK) {
        clReleaseMemObject(*ao);
        return st;
    }
    return EMBER_OK;
}

int ember__cl_gemm_rows(const ember__cl_state *s, int dev, int64_t m) {
    if (s->gemm_variant)
        return s->gemm_variant == 2;
    (void)m; /* GPUs: tiled even for skinny products (memory bound: B is read once either way) */
    return (s->dev[dev].type & CL_DEVICE_TYPE_CPU) != 0;
}

ember_status ember__cl_gemm_f32(void *state, int dev, const ember__gemm *g, const ember_tensor *a,
                                const ember_tensor *b, ember_tensor *c) {
    ember__cl_state *s = state;
    if (g->m == 0 || g->n == 0 || g->batch == 0)
        return EMBER_OK;
    _Static_assert(sizeof(int64_t) == sizeof(cl_long), "offset tables are cl_long");
    const int rows = ember__cl_gemm_rows(s, dev, g->m);
    int tm, wm;
    gemm_tile(&s->dev[dev], &tm, &wm);
    char opts[96];
    if (rows)
        snprintf(opts, sizeof opts, "-DRM=%d", EMBER__CL_RM);
    else
        snprintf(opts, sizeof opts, "-DTM=%d -DTN=%d -DTK=16 -DWM=%d -DWN=%d", tm, tm, wm, wm);
    cl_mem ao, bo;
    EMBER_TRY(offsets(s, dev, "gemm_f32", g, &ao, &bo));
    /* an empty operand (k == 0) has no cl_mem: pass the output's, never read */
    cl_mem A = ember__cl_mem(a) ? ember__cl_mem(a) : ember__cl_mem(c);
    cl_mem B = ember__cl_mem(b) ? ember__cl_mem(b) : ember__cl_mem(c);
    cl_mem C = ember__cl_mem(c);
    cl_int ta = g->trans_a, tb = g->trans_b;
    cl_long m = g->m, n = g->n, k = g->k;
    cl_float alpha = g->alpha, beta = g->beta;
    const ember__cl_arg args[] = {EMBER_CL_ARG(ta), EMBER_CL_ARG(tb),    EMBER_CL_ARG(m),
                                  EMBER_CL_ARG(n),  EMBER_CL_ARG(k),     EMBER_CL_ARG(A),
                                  EMBER_CL_ARG(ao), EMBER_CL_ARG(B),     EMBER_CL_ARG(bo),
                                  EMBER_CL_ARG(C),  EMBER_CL_ARG(alpha), EMBER_CL_ARG(beta)};
    size_t local[3], global[3];
    if (rows) {
        global[0] = ((size_t)g->n + 15) / 16; /* no barriers: any local size */
        global[1] = ((size_t)g->m + EMBER__CL_RM - 1) / EMBER__CL_RM;
    } else {
        const size_t lx = (size_t)(tm / wm);
        local[0] = local[1] = lx;
        local[2] = 1;
        global[0] = ember__cl_round_up((size_t)g->n, (size_t)tm) / (size_t)tm * lx;
        global[1] = ember__cl_round_up((size_t)g->m, (size_t)tm) / (size_t)tm * lx;
    }
    global[2] = (size_t)g->batch;
    ember_status st =
        ember__cl_launch(s, dev, "gemm_f32", "gemm", opts, rows ? "gemm_f32_rows" : "gemm_f32",
                         (int)(sizeof args / sizeof args[0]), args, 3, global, rows ? NULL : local);
    clReleaseMemObject(ao);
    clReleaseMemObject(bo);
    return st;
}

ember_status ember__cl_binary_f32(void *state, int dev, ember__binop op, const ember__bcast *bc,
                                  const ember_tensor *a, const ember_tensor *b, ember_tensor *out) {
    ember__cl_state *s = state;
    if (out->numel == 0)
        return EMBER_OK;
    cl_long8 shape, as, bs;
    memset(&shape, 0, sizeof shape);
    memset(&as, 0, sizeof as);
    memset(&bs, 0, sizeof bs);
    for (int i = 0; i < bc->rank; i++) {
        shape.s[i] = bc->shape[i];
        as.s[i] = bc->a_stride[i];
        bs.s[i] = bc->b_stride[i];
    }
    cl_int opi = op == EMBER__BINOP_ADD ? 0 : 1, rank = bc->rank;
    cl_long total = (cl_long)out->numel;
    cl_mem A = ember__cl_mem(a), B = ember__cl_mem(b), O = ember__cl_mem(out);
    const ember__cl_arg args[] = {EMBER_CL_ARG(opi),   EMBER_CL_ARG(rank), EMBER_CL_ARG(total),
                                  EMBER_CL_ARG(shape), EMBER_CL_ARG(as),   EMBER_CL_ARG(bs),
                                  EMBER_CL_ARG(A),     EMBER_CL_ARG(B),    EMBER_CL_ARG(O)};
    size_t l = ember__cl_wg1(&s->dev[dev]);
    size_t gsz = ember__cl_round_up(out->numel, l);
    return ember__cl_launch(s, dev, op == EMBER__BINOP_ADD ? "add" : "mul", "elementwise", "",
                            "binary_f32", (int)(sizeof args / sizeof args[0]), args, 1, &gsz, &l);
}

ember_status ember__cl_sum_rows_f32(void *state, int dev, const ember_tensor *x, int64_t rows,
                                    int64_t cols, ember_tensor *out) {
    ember__cl_state *s = state;
    if (cols == 0)
        return EMBER_OK;
    cl_mem X = ember__cl_mem(x), O = ember__cl_mem(out);
    if (!X) { /* no rows: the sums are 0 */
        const cl_float zero = 0.0f;
        EMBER_CL_TRY("sum_rows", "clEnqueueFillBuffer", dev,
                     clEnqueueFillBuffer(s->dev[dev].queue, O, &zero, sizeof zero, 0,
                                         (size_t)cols * sizeof(float), 0, NULL, NULL));
        return EMBER_OK;
    }
    cl_long r = rows, c = cols;
    const ember__cl_arg args[] = {EMBER_CL_ARG(X), EMBER_CL_ARG(r), EMBER_CL_ARG(c),
                                  EMBER_CL_ARG(O)};
    size_t l = ember__cl_wg1(&s->dev[dev]);
    size_t gsz = ember__cl_round_up((size_t)cols, l);
    return ember__cl_launch(s, dev, "sum_rows", "elementwise", "", "sum_rows_f32", 4, args, 1, &gsz,
                            &l);
}

ember_status ember__cl_convert_mem(ember__cl_state *s, int dev, const char *op, cl_mem src,
                                   ember_dtype from, cl_mem dst, ember_dtype to, size_t n) {
    if (n == 0)
        return EMBER_OK;
    if (from == to) {
        size_t bytes = n * (from == EMBER_F32 ? 4u : 2u);
        EMBER_CL_TRY(op, "clEnqueueCopyBuffer", dev,
                     clEnqueueCopyBuffer(s->dev[dev].queue, src, dst, 0, 0, bytes, 0, NULL, NULL));
        return EMBER_OK;
    }
    cl_int kind;
    if (from == EMBER_F32 && to == EMBER_BF16)
        kind = 0;
    else if (from == EMBER_BF16 && to == EMBER_F32)
        kind = 1;
    else if (from == EMBER_F32 && to == EMBER_F16)
        kind = 2;
    else if (from == EMBER_F16 && to == EMBER_F32)
        kind = 3;
    else { /* F16 <-> BF16: through a temporary F32 buffer */
        cl_mem tmp;
        EMBER_TRY(ember__cl_temp(s, dev, op, n * 4, NULL, &tmp));
        ember_status st = ember__cl_convert_mem(s, dev, op, src, from, tmp, EMBER_F32, n);
        if (st == EMBER_OK)
            st = ember__cl_convert_mem(s, dev, op, tmp, EMBER_F32, dst, to, n);
        clReleaseMemObject(tmp);
        return st;
    }
    cl_long nn = (cl_long)n;
    const ember__cl_arg args[] = {EMBER_CL_ARG(kind), EMBER_CL_ARG(nn),  EMBER_CL_ARG(src),
                                  EMBER_CL_ARG(src),  EMBER_CL_ARG(dst), EMBER_CL_ARG(dst)};
    size_t l = ember__cl_wg1(&s->dev[dev]);
    size_t gsz = ember__cl_round_up(n, l);
    return ember__cl_launch(s, dev, op, "elementwise", "", "convert_f", 6, args, 1, &gsz, &l);
}

ember_status ember__cl_convert(void *state, int dev, const ember_tensor *x, ember_tensor *out) {
    return ember__cl_convert_mem(state, dev, "convert", ember__cl_mem(x), x->dtype,
                                 ember__cl_mem(out), out->dtype, x->numel);
}
