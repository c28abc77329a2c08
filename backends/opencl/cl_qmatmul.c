/* backends/opencl/cl_qmatmul.c: the integer path of q_matmul on OpenCL, and its kernel paths.
 *
 * Handled: (Q, Q) with both operands Q8F or Q8S, per-tensor, stored Native or PackedU32 (the same
 * bytes, rows padded to whole words), alpha 1 and beta 0: out = (float)acc * (sa * sb) with acc
 * the exact int32 sum (kernels/qgemm.cl documents the epilogue; it is the CPU backend's).
 * Everything else answers EMBER_ERR_QUANT_UNSUPPORTED without a detail, and the dispatcher falls
 * back to dequantize + gemm_f32 on this same device.
 *
 * Paths: ember__cl_qpaths[] lists them best first. A path is {name, label, available(device),
 * run(args)}; the GPU engineer's tensor-core paths ("mma", "wgmma", kernels qgemm_mma*.cl / ptx/)
 * go in front of "dot4" with their own available() (e.g. an NVIDIA device of the right compute
 * capability). run() gets int8 operands as cl_mems with byte offsets and byte row strides, and
 * the epilogue factor as a one-float device buffer. */
#include <stdio.h>
#include <string.h>

#include "cl_backend.h"

static int always(const ember__cl_device *d) {
    (void)d;
    return 1;
}

static int has_dot4(const ember__cl_device *d) { return d->has_dot4; }

static ember_status run_tiled(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q,
                              int dot4) {
    const ember__cl_device *d = &s->dev[dev];
    int tm = 64, wm = 4;
    if (d->max_wg < 256) {
        tm = d->max_wg >= 64 ? 32 : 16;
        wm = d->max_wg >= 64 ? 4 : 2;
    }
    char opts[128];
    snprintf(opts, sizeof opts, "-DTM=%d -DTN=%d -DTK=32 -DWM=%d -DWN=%d%s", tm, tm, wm, wm,
             dot4 ? " -DEMBER_DOT4=1" : "");
    cl_int ta = q->trans_a, tb = q->trans_b;
    cl_long m = q->m, n = q->n, k = q->k, lda = q->lda, ldb = q->ldb;
    const ember__cl_arg args[] = {
        EMBER_CL_ARG(ta),    EMBER_CL_ARG(tb),  EMBER_CL_ARG(m),    EMBER_CL_ARG(n),
        EMBER_CL_ARG(k),     EMBER_CL_ARG(q->a), EMBER_CL_ARG(q->a_off), EMBER_CL_ARG(lda),
        EMBER_CL_ARG(q->b),  EMBER_CL_ARG(q->b_off), EMBER_CL_ARG(ldb), EMBER_CL_ARG(q->out),
        EMBER_CL_ARG(q->scale)};
    const size_t lx = (size_t)(tm / wm);
    const size_t local[3] = {lx, lx, 1};
    const size_t global[3] = {ember__cl_round_up((size_t)q->n, (size_t)tm) / (size_t)tm * lx,
                              ember__cl_round_up((size_t)q->m, (size_t)tm) / (size_t)tm * lx,
                              (size_t)q->batch};
    return ember__cl_launch(s, dev, "q_matmul", "qgemm", opts, "qgemm_i8",
                            (int)(sizeof args / sizeof args[0]), args, 3, global, local);
}

static ember_status run_generic(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q) {
    return run_tiled(s, dev, q, 0);
}

static ember_status run_dot4(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q) {
    return run_tiled(s, dev, q, 1);
}

const ember__cl_qpath ember__cl_qpaths[] = {
    /* tensor-core paths ("mma", "wgmma") go here, best first */
    {"dot4", "opencl.dot4", has_dot4, run_dot4},
    {"generic", "opencl.generic", always, run_generic},
    {NULL, NULL, NULL, NULL},
};

void ember__cl_qpath_choose(ember__cl_device *d, const char *forced) {
    const ember__cl_qpath *pick = NULL, *generic = NULL;
    for (const ember__cl_qpath *p = ember__cl_qpaths; p->name; p++) {
        if (strcmp(p->name, "generic") == 0)
            generic = p;
        if (forced && forced[0]) {
            if (strcmp(p->name, forced) == 0 && p->available(d))
                pick = p;
        } else if (!pick && p->available(d)) {
            pick = p;
        }
    }
    if (!pick) /* a forced path this device cannot run (or an unknown name): generic */
        pick = generic;
    d->qpath = pick;
    snprintf(d->int8_path, sizeof d->int8_path, "%s", pick->label);
}

/* Per-tensor Q8 (Native or PackedU32): the integer path's operands. */
static int q8_per_tensor(const ember_tensor *t) {
    const ember_qscheme *s = &t->scheme;
    return t->dtype == EMBER_QFLOAT && (s->value == EMBER_Q8F || s->value == EMBER_Q8S) &&
           (s->store == EMBER_QSTORE_NATIVE || s->store == EMBER_QSTORE_PACKED_U32) &&
           s->block_rank == 0;
}

/* Bytes between rows of t's values, and the byte offsets of the batch's matrices. */
static int64_t row_bytes(const ember_tensor *t) {
    int64_t last = t->shape[t->rank - 1];
    return t->scheme.store == EMBER_QSTORE_PACKED_U32 ? (last + 3) / 4 * 4 : last;
}

static void byte_offsets(const ember_tensor *t, const int64_t *off, int64_t n, int64_t *dst) {
    int64_t last = t->shape[t->rank - 1], rb = row_bytes(t);
    for (int64_t i = 0; i < n; i++)
        dst[i] = last ? (off[i] / last) * rb + off[i] % last : 0;
}

ember_status ember__cl_q_matmul(void *state, int dev, const ember__gemm *g, const ember_tensor *a,
                                const ember_tensor *b, ember_tensor *out) {
    ember__cl_state *s = state;
    if (!q8_per_tensor(a) || !q8_per_tensor(b) || g->alpha != 1.0f || g->beta != 0.0f)
        return EMBER_ERR_QUANT_UNSUPPORTED; /* the dispatcher falls back; no detail */
    if (g->m == 0 || g->n == 0 || g->batch == 0)
        return EMBER_OK;
    cl_mem out_mem = ember__cl_mem(out);
    if (g->k == 0) { /* an empty sum */
        const cl_float zero = 0.0f;
        EMBER_CL_TRY("q_matmul", "clEnqueueFillBuffer", dev,
                     clEnqueueFillBuffer(s->dev[dev].queue, out_mem, &zero, sizeof zero, 0,
                                         out->nbytes, 0, NULL, NULL));
        return EMBER_OK;
    }
    size_t nb = (size_t)g->batch;
    int64_t *offs = ember__malloc(2 * nb * sizeof(int64_t));
    EMBER_FAIL_IF(!offs, EMBER_ERR_OUT_OF_MEMORY, "q_matmul: no memory for %zu offsets", 2 * nb);
    byte_offsets(a, g->a_off, g->batch, offs);
    byte_offsets(b, g->b_off, g->batch, offs + nb);
    cl_mem tmp[3] = {NULL, NULL, NULL};
    ember_status st = ember__cl_temp(s, dev, "q_matmul", nb * sizeof(cl_long), offs, &tmp[0]);
    if (st == EMBER_OK)
        st = ember__cl_temp(s, dev, "q_matmul", nb * sizeof(cl_long), offs + nb, &tmp[1]);
    if (st == EMBER_OK)
        st = ember__cl_temp(s, dev, "q_matmul", sizeof(cl_float), NULL, &tmp[2]);
    ember__free(offs);
    if (st == EMBER_OK) { /* the epilogue factor sa * sb, on the device */
        cl_mem A = ember__cl_mem(a), B = ember__cl_mem(b);
        cl_long asoff = (cl_long)a->q.scales_offset, bsoff = (cl_long)b->q.scales_offset;
        cl_int asdt = (cl_int)a->scheme.tensor_scale, bsdt = (cl_int)b->scheme.tensor_scale;
        const ember__cl_arg args[] = {EMBER_CL_ARG(A),     EMBER_CL_ARG(asoff), EMBER_CL_ARG(asdt),
                                      EMBER_CL_ARG(B),     EMBER_CL_ARG(bsoff), EMBER_CL_ARG(bsdt),
                                      EMBER_CL_ARG(tmp[2])};
        size_t one = 1;
        st = ember__cl_launch(s, dev, "q_matmul", "quant", "", "q_scale_prod", 7, args, 1, &one,
                              NULL);
    }
    if (st == EMBER_OK) {
        ember__cl_qgemm_args q = {
            .trans_a = g->trans_a, .trans_b = g->trans_b, .m = g->m, .n = g->n, .k = g->k,
            .batch = g->batch, .a = ember__cl_mem(a), .b = ember__cl_mem(b), .out = out_mem,
            .a_off = tmp[0], .b_off = tmp[1], .scale = tmp[2], .lda = row_bytes(a),
            .ldb = row_bytes(b)};
        st = s->dev[dev].qpath->run(s, dev, &q);
    }
    for (int i = 0; i < 3; i++)
        if (tmp[i])
            clReleaseMemObject(tmp[i]);
    return st;
}
