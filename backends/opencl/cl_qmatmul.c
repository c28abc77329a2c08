/* backends/opencl/cl_qmatmul.c: the integer path of q_matmul on OpenCL, and its kernel paths.
 *
 * Handled: (Q, Q) with both operands Q8F or Q8S stored Native or PackedU32 (the same bytes, rows
 * padded to whole words), alpha 1 and beta 0, each operand per-tensor (any batch) or, as plain
 * matrices, with scales that do not change along K: per-row (blocks [bm, k]) for the lhs,
 * per-column (blocks [k, bn]) for the rhs, two-level or not, any scale dtype. The output is
 * 0 + (sa * sb) * (float)acc with acc the exact int32 sum (kernels/qgemm.cl documents the
 * epilogue; it is the CPU backend's single-chunk one).
 * Everything else answers EMBER_ERR_QUANT_UNSUPPORTED without a detail, and the dispatcher falls
 * back to dequantize + gemm_f32 on this same device.
 *
 * Paths, best first: "wgmma", "mma" (NVIDIA tensor cores: kernels qgemm_mma*.cl / ptx/, with
 * their C side in a file of their own, cl_qmatmul_mma.c, that defines `const ember__cl_qpath
 * ember__cl_qpath_wgmma` / `ember__cl_qpath_mma`), "dot4", "generic". A path is {name, label,
 * available(device), run(args)}; available() says whether this device can run it (e.g. an NVIDIA
 * device of the right compute capability). run() gets int8 operands as cl_mems with byte offsets
 * and byte row strides, and the epilogue factor as a one-float device buffer. A path whose program
 * fails to build on a device (EMBER_ERR_KERNEL_BUILD: a compiler that rejects its builtins) is
 * replaced by "generic" for that device, once, and the call is retried; int8_matmul_path then says
 * "opencl.generic". */
#include <stdio.h>
#include <string.h>

#include "../../quant/quant_impl.h"
#include "cl_backend.h"

static int always(const ember__cl_device *d) {
    (void)d;
    return 1;
}

static int has_dot4(const ember__cl_device *d) { return d->has_dot4; }

static ember_status run_tiled(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q,
                              int dot4) {
    const ember__cl_device *d = &s->dev[dev];
    const int rows = ember__cl_gemm_rows(s, dev, q->m);
    int tm = 64, wm = 4;
    if (d->max_wg < 256) {
        tm = d->max_wg >= 64 ? 32 : 16;
        wm = d->max_wg >= 64 ? 4 : 2;
    }
    char opts[128];
    if (rows)
        snprintf(opts, sizeof opts, "-DRM=%d", EMBER__CL_RM);
    else
        snprintf(opts, sizeof opts, "-DTM=%d -DTN=%d -DTK=32 -DWM=%d -DWN=%d%s", tm, tm, wm, wm,
                 dot4 ? " -DEMBER_DOT4=1" : "");
    cl_int ta = q->trans_a, tb = q->trans_b;
    cl_long m = q->m, n = q->n, k = q->k, lda = q->lda, ldb = q->ldb;
    cl_int pc = q->sa != NULL;
    cl_mem sa = q->sa ? q->sa : q->scale, sb = q->sb ? q->sb : q->scale;
    cl_long ag = q->sa ? q->a_group : 1, bg = q->sb ? q->b_group : 1;
    const ember__cl_arg args[] = {EMBER_CL_ARG(ta),       EMBER_CL_ARG(tb),  EMBER_CL_ARG(m),
                                  EMBER_CL_ARG(n),        EMBER_CL_ARG(k),   EMBER_CL_ARG(q->a),
                                  EMBER_CL_ARG(q->a_off), EMBER_CL_ARG(lda), EMBER_CL_ARG(q->b),
                                  EMBER_CL_ARG(q->b_off), EMBER_CL_ARG(ldb), EMBER_CL_ARG(q->out),
                                  EMBER_CL_ARG(q->scale), EMBER_CL_ARG(pc),  EMBER_CL_ARG(sa),
                                  EMBER_CL_ARG(ag),       EMBER_CL_ARG(sb),  EMBER_CL_ARG(bg)};
    size_t local[3], global[3];
    if (rows) {
        global[0] = ((size_t)q->n + 15) / 16; /* no barriers: any local size */
        global[1] = ((size_t)q->m + EMBER__CL_RM - 1) / EMBER__CL_RM;
    } else {
        const size_t lx = (size_t)(tm / wm);
        local[0] = local[1] = lx;
        local[2] = 1;
        global[0] = ember__cl_round_up((size_t)q->n, (size_t)tm) / (size_t)tm * lx;
        global[1] = ember__cl_round_up((size_t)q->m, (size_t)tm) / (size_t)tm * lx;
    }
    global[2] = (size_t)q->batch;
    return ember__cl_launch(s, dev, "q_matmul", "qgemm", opts, rows ? "qgemm_i8_rows" : "qgemm_i8",
                            (int)(sizeof args / sizeof args[0]), args, 3, global,
                            rows ? NULL : local);
}

static ember_status run_generic(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q) {
    return run_tiled(s, dev, q, 0);
}

static ember_status run_dot4(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q) {
    return run_tiled(s, dev, q, 1);
}

static const ember__cl_qpath path_dot4 = {"dot4", "opencl.dot4", has_dot4, run_dot4, 1};
static const ember__cl_qpath path_generic = {"generic", "opencl.generic", always, run_generic, 1};

/* The tensor-core paths, defined in their own file (cl_qmatmul_mma.c, always built with this
 * backend). Strong references: a weak undefined reference does not pull an archive member, so
 * with the static library (the tests, any static user) the paths were silently missing. */
extern const ember__cl_qpath ember__cl_qpath_wgmma;
extern const ember__cl_qpath ember__cl_qpath_mma;

const ember__cl_qpath *ember__cl_qpath_at(size_t i) {
    const ember__cl_qpath *const all[] = {&ember__cl_qpath_wgmma, &ember__cl_qpath_mma, &path_dot4,
                                          &path_generic};
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++) {
        if (!all[j])
            continue;
        if (i-- == 0)
            return all[j];
    }
    return NULL;
}

void ember__cl_qpath_choose(ember__cl_device *d, const char *forced) {
    const ember__cl_qpath *pick = NULL, *generic = &path_generic, *p;
    for (size_t i = 0; (p = ember__cl_qpath_at(i)) != NULL; i++) {
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

/* Q8 values (Native or PackedU32) that the integer path reads in place. */
static int q8_values(const ember_tensor *t) {
    const ember_qscheme *s = &t->scheme;
    return t->dtype == EMBER_QFLOAT && (s->value == EMBER_Q8F || s->value == EMBER_Q8S) &&
           (s->store == EMBER_QSTORE_NATIVE || s->store == EMBER_QSTORE_PACKED_U32);
}

/* How many consecutive rows (lhs, axis -2) or columns (rhs, axis -1) share a scale: the whole
 * extent for per-tensor, the block's extent there when the block spans all of K (the other
 * matrix axis) and the tensor is a plain matrix; 0 when the scales change along K (per-block
 * schemes that split K: the dequantize route). */
static int64_t scale_group(const ember_tensor *t, int lhs) {
    const ember_qscheme *s = &t->scheme;
    const int64_t rows = t->shape[t->rank - 2], cols = t->shape[t->rank - 1];
    if (s->block_rank == 0)
        return lhs ? rows : cols;
    if (t->rank != 2 || s->block_rank > 2)
        return 0;
    const int64_t bk = s->block[s->block_rank - 1]; /* along the last axis */
    const int64_t bm = s->block_rank == 2 ? s->block[0] : 1;
    if (lhs) /* [m, k]: blocks [bm, k] */
        return bk == cols ? bm : 0;
    return bm == rows ? bk : 0; /* [k, n]: blocks [k, bn] */
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

/* The effective f32 scales of a quantized tensor (q->q.nscales of them) into scratch `slot`. */
static ember_status eff_scales(ember__cl_state *s, int dev, const ember_tensor *t, int slot,
                               cl_mem *out) {
    cl_long n = (cl_long)t->q.nscales;
    EMBER_TRY(ember__cl_scratch(s, dev, slot, (size_t)n * sizeof(float), out));
    cl_mem Q = ember__cl_mem(t);
    cl_long soff = (cl_long)t->q.scales_offset;
    cl_int sdt = (cl_int)ember__qscheme_scale_dtype(&t->scheme);
    cl_int ssize = (cl_int)t->q.scale_size;
    cl_long goff = t->q.global_bytes == 4 ? (cl_long)t->q.global_offset : -1;
    const ember__cl_arg args[] = {EMBER_CL_ARG(Q),     EMBER_CL_ARG(soff), EMBER_CL_ARG(sdt),
                                  EMBER_CL_ARG(ssize), EMBER_CL_ARG(goff), EMBER_CL_ARG(n),
                                  EMBER_CL_ARG(*out)};
    size_t gsz = (size_t)n;
    return ember__cl_launch(s, dev, "q_matmul", "quant", "", "q_eff_scales", 7, args, 1, &gsz,
                            NULL);
}

ember_status ember__cl_q_matmul(void *state, int dev, const ember__gemm *g, const ember_tensor *a,
                                const ember_tensor *b, ember_tensor *out) {
    ember__cl_state *s = state;
    if (!q8_values(a) || !q8_values(b) || g->alpha != 1.0f || g->beta != 0.0f)
        return EMBER_ERR_QUANT_UNSUPPORTED; /* the dispatcher falls back; no detail */
    const int per_channel = a->scheme.block_rank > 0 || b->scheme.block_rank > 0;
    const int64_t ag = scale_group(a, 1), bg = scale_group(b, 0);
    if (!ag || !bg || (per_channel && (g->trans_a || g->trans_b)))
        return EMBER_ERR_QUANT_UNSUPPORTED;
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
    /* tmp[0..1]: the batch offset tables, [2] the epilogue factor, [3..4] the effective scales;
     * own[i]: tmp[i] is this call's buffer (released below), else a per-device one (scratch or
     * the constant zero table of a batch of one at offset 0). The device's temporaries are ours
     * until every command of this call is enqueued. */
    cl_mem tmp[5] = {NULL, NULL, NULL, NULL, NULL};
    int own[5] = {0, 0, 0, 0, 0};
    pthread_mutex_lock(&s->dev[dev].qlock);
    ember_status st = EMBER_OK;
    for (int i = 0; i < 2 && st == EMBER_OK; i++) {
        if (nb == 1 && offs[i] == 0) {
            st = ember__cl_consts(s, dev, &tmp[i], NULL);
        } else {
            st = ember__cl_temp(s, dev, "q_matmul", nb * sizeof(cl_long), offs + (size_t)i * nb,
                                &tmp[i]);
            own[i] = st == EMBER_OK;
        }
    }
    if (st == EMBER_OK)
        st = ember__cl_scratch(s, dev, EMBER__CL_S_SCALE, sizeof(cl_float), &tmp[2]);
    ember__free(offs);
    if (st == EMBER_OK && !per_channel) { /* the epilogue factor sa * sb, on the device */
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
    if (st == EMBER_OK && per_channel) { /* the effective scales of both operands */
        st = eff_scales(s, dev, a, EMBER__CL_S_SA, &tmp[3]);
        if (st == EMBER_OK)
            st = eff_scales(s, dev, b, EMBER__CL_S_SB, &tmp[4]);
    }
    if (st == EMBER_OK) {
        ember__cl_qgemm_args q = {.trans_a = g->trans_a,
                                  .trans_b = g->trans_b,
                                  .m = g->m,
                                  .n = g->n,
                                  .k = g->k,
                                  .batch = g->batch,
                                  .a = ember__cl_mem(a),
                                  .b = ember__cl_mem(b),
                                  .out = out_mem,
                                  .a_off = tmp[0],
                                  .b_off = tmp[1],
                                  .scale = tmp[2],
                                  .lda = row_bytes(a),
                                  .ldb = row_bytes(b),
                                  .sa = tmp[3],
                                  .sb = tmp[4],
                                  .a_group = ag,
                                  .b_group = bg,
                                  .b_tensor = b,
                                  .b_off_elems = g->b_off};
        ember__cl_device *d = &s->dev[dev];
        const ember__cl_qpath *path = __atomic_load_n(&d->qpath, __ATOMIC_ACQUIRE);
        if (per_channel && !path->per_channel)
            path = &path_generic;
        st = path->run(s, dev, &q);
        if (st == EMBER_ERR_KERNEL_BUILD && path != &path_generic) {
            /* a specialised path this device's compiler rejects: generic from now on (the
             * detail of the failure stays readable with EMBER_LOG=debug) */
            if (ember__log_level >= 2)
                fprintf(stderr, "ember: opencl:%d: int8 path %s does not build (%s); using %s\n",
                        dev, path->label, ember_last_error(), path_generic.label);
            __atomic_store_n(&d->qpath, &path_generic, __ATOMIC_RELEASE);
            pthread_mutex_lock(&d->lock);
            snprintf(d->int8_path, sizeof d->int8_path, "%s", path_generic.label);
            pthread_mutex_unlock(&d->lock);
            st = path_generic.run(s, dev, &q);
        }
    }
    for (int i = 0; i < 5; i++)
        if (own[i])
            clReleaseMemObject(tmp[i]);
    pthread_mutex_unlock(&s->dev[dev].qlock);
    return st;
}
