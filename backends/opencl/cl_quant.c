/* backends/opencl/cl_quant.c: quantize and dequantize on OpenCL (kernels/quant.cl).
 *
 * quantize(x, scales?, q), three steps:
 *   1. on the device, kernel q_absmax: per block, alpha = max |x| and a NaN/Inf flag (the flag
 *      alone is used with static scales);
 *   2. on the host, the few scales: raw = alpha / ((b - a) / 2) (MinMax) or the caller's static
 *      scales, then rounded up to the scale dtype, guarded and (two-level) normalised by quant/'s
 *      own ember__qscales_finish, so they are the CPU backend's by construction; the stored scales
 *      (and the global) are written into q's buffer, the effective f32 scales into a temporary;
 *   3. on the device, kernel q_quantize: one work item per storage unit (byte or u32 word), with
 *      the per-element arithmetic of quant/quant_imp.h (one IEEE division by the effective scale,
 *      roundf / clamp for integers, nearest-even encoding for fp8 / fp4).
 * dequantize(q, out): kernel q_dequantize reads values and stored scales straight from q's
 * buffer (F16 / BF16 outputs go through a temporary F32 buffer and the convert kernel). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "../../quant/quant_impl.h"
#include "cl_backend.h"

/* ---- scheme facts (quant/quant_impl.h) ---- */

typedef struct qfacts {
    int bits, vkind, qa, qb;
    int per, unit_bytes;
} qfacts;

static qfacts facts_of(const ember_qscheme *s) {
    const ember__qvalue_info *vi = ember__qvalue_get_info(s->value);
    qfacts f;
    memset(&f, 0, sizeof f);
    f.bits = vi->bits;
    f.vkind = s->value == EMBER_E4M3   ? 1
              : s->value == EMBER_E5M2 ? 2
              : s->value == EMBER_E2M1 ? 3
                                       : 0;
    f.qa = (int)vi->lo;
    f.qb = (int)vi->hi;
    f.per = ember__qstore_per_unit(s);
    f.unit_bytes = ember__qstore_unit_bytes(s);
    return f;
}

/* Block dims left-padded with 1s to the rank (the whole shape for per-tensor) and the grid. */
static void block_geometry(const ember_qscheme *s, int rank, const int64_t *shape, cl_long8 *block,
                           cl_long8 *grid, cl_long8 *shp, size_t *nblocks) {
    memset(block, 0, sizeof *block);
    memset(grid, 0, sizeof *grid);
    memset(shp, 0, sizeof *shp);
    size_t nb = 1;
    for (int d = 0; d < rank; d++) {
        int64_t b = s->block_rank > 0 ? 1 : (shape[d] > 0 ? shape[d] : 1);
        int j = d - (rank - s->block_rank); /* the scheme's dim aligned to axis d */
        if (s->block_rank > 0 && j >= 0)
            b = s->block[j];
        block->s[d] = b;
        /* ceil without shape + b - 1, which overflows for a dim near INT64_MAX (as in
         * quant/layout.c: reachable when another dim is 0) */
        grid->s[d] = s->block_rank > 0 ? shape[d] / b + (shape[d] % b != 0) : 1;
        shp->s[d] = shape[d];
        nb *= (size_t)grid->s[d];
    }
    *nblocks = nb;
}

/* The index mode of kernels/quant.cl: 0 per-tensor, 1 blocks along the last axis only, 2 any. */
static cl_int block_mode(const ember_qscheme *s, int rank, const cl_long8 *block) {
    if (s->block_rank == 0)
        return 0;
    for (int d = 0; d < rank - 1; d++)
        if (block->s[d] != 1)
            return 2;
    return 1;
}

/* ---- quantize ---- */

static ember_status quantize_run(ember__cl_state *s, int dev, const ember_tensor *x,
                                 const ember_tensor *scales, ember_tensor *q, float *raw,
                                 uint8_t *stored, float *eff, cl_mem *tmp) {
    const ember_qscheme *sc = &q->scheme;
    const qfacts f = facts_of(sc);
    cl_long8 block, grid, shape;
    size_t nb;
    block_geometry(sc, q->rank, q->shape, &block, &grid, &shape, &nb);
    cl_int rank = q->rank, bmode = block_mode(sc, q->rank, &block);
    cl_mem X = ember__cl_mem(x), Q = ember__cl_mem(q);

    /* 1. alpha and the non-finite flag per block */
    if (x->numel > 0) {
        int *bad = (int *)(void *)(raw + nb); /* raw holds 2*nb words */
        EMBER_TRY(ember__cl_temp(s, dev, "quantize", nb * sizeof(float), NULL, &tmp[0]));
        EMBER_TRY(ember__cl_temp(s, dev, "quantize", nb * sizeof(cl_int), NULL, &tmp[1]));
        size_t bn = 1; /* elements per block */
        for (int d = 0; d < q->rank; d++)
            bn *= (size_t)block.s[d];
        const cl_uint zero = 0;
        EMBER_CL_TRY("quantize", "clEnqueueFillBuffer", dev,
                     clEnqueueFillBuffer(s->dev[dev].queue, tmp[0], &zero, sizeof zero, 0,
                                         nb * sizeof(float), 0, NULL, NULL));
        EMBER_CL_TRY("quantize", "clEnqueueFillBuffer", dev,
                     clEnqueueFillBuffer(s->dev[dev].queue, tmp[1], &zero, sizeof zero, 0,
                                         nb * sizeof(cl_int), 0, NULL, NULL));
        if (ember__cl_gemm_rows(s, dev, 0)) { /* CPU devices: a contiguous chunk per item */
            cl_long chunk = 16384, gpb = (cl_long)((bn + 16383) / 16384);
            cl_long nchunks = (cl_long)nb * gpb;
            const ember__cl_arg args[] = {
                EMBER_CL_ARG(X),       EMBER_CL_ARG(tmp[0]), EMBER_CL_ARG(tmp[1]),
                EMBER_CL_ARG(nchunks), EMBER_CL_ARG(gpb),    EMBER_CL_ARG(chunk),
                EMBER_CL_ARG(bmode),   EMBER_CL_ARG(rank),   EMBER_CL_ARG(shape),
                EMBER_CL_ARG(block),   EMBER_CL_ARG(grid)};
            size_t gsz = (size_t)nchunks;
            EMBER_TRY(ember__cl_launch(s, dev, "quantize", "quant", "", "q_absmax_seq", 11, args, 1,
                                       &gsz, NULL));
        } else {          /* a work-group per chunk, interleaved items, a local reduction */
            size_t l = 1; /* a power of two (the reduction halves it), up to 256 */
            while (l < 256 && l < bn && l * 2 <= s->dev[dev].max_wg)
                l *= 2;
            cl_long chunk = (cl_long)l * 16, gpb = ((cl_long)bn + chunk - 1) / chunk;
            const ember__cl_arg args[] = {EMBER_CL_ARG(X),
                                          EMBER_CL_ARG(tmp[0]),
                                          EMBER_CL_ARG(tmp[1]),
                                          EMBER_CL_ARG(gpb),
                                          EMBER_CL_ARG(chunk),
                                          EMBER_CL_ARG(bmode),
                                          EMBER_CL_ARG(rank),
                                          EMBER_CL_ARG(shape),
                                          EMBER_CL_ARG(block),
                                          EMBER_CL_ARG(grid),
                                          EMBER_CL_LOCAL(l * sizeof(float)),
                                          EMBER_CL_LOCAL(l * sizeof(cl_int))};
            size_t gsz = nb * (size_t)gpb * l;
            EMBER_TRY(ember__cl_launch(s, dev, "quantize", "quant", "", "q_absmax_wg", 12, args, 1,
                                       &gsz, &l));
        }
        EMBER_TRY(ember__cl_read(s, dev, "quantize", tmp[0], 0, raw, nb * sizeof(float)));
        EMBER_TRY(ember__cl_read(s, dev, "quantize", tmp[1], 0, bad, nb * sizeof(cl_int)));
        for (size_t b = 0; b < nb; b++) {
            if (bad[b]) {
                char sb[160];
                EMBER_FAIL(EMBER_ERR_NON_FINITE,
                           "quantize: the tensor %s on opencl:%d holds NaN or Inf (block %zu); "
                           "quantization needs finite values",
                           ember__shape_str(x->rank, x->shape, sb, sizeof sb), dev, b);
            }
        }
    } else {
        for (size_t b = 0; b < nb; b++)
            raw[b] = 0.0f;
    }

    /* 2. the scales, on the host */
    if (scales) {
        EMBER_TRY(
            ember__cl_read(s, dev, "quantize", ember__cl_mem(scales), 0, raw, nb * sizeof(float)));
    } else {
        const ember__qvalue_info *vi = ember__qvalue_get_info(sc->value);
        for (size_t b = 0; b < nb; b++)
            raw[b] = ember__raw_scale(raw[b], vi);
    }
    float g;
    ember__qscales_finish(sc, raw, nb, stored, eff, &g);
    size_t ssz = ember__scale_dtype_size(ember__qscheme_scale_dtype(sc));
    EMBER_TRY(ember__cl_write(s, dev, "quantize", Q, q->q.scales_offset, stored, nb * ssz));
    if (q->q.global_bytes == 4) {
        uint8_t gb[4];
        ember__scale_encode(g, EMBER_SCALE_F32, gb);
        EMBER_TRY(ember__cl_write(s, dev, "quantize", Q, q->q.global_offset, gb, 4));
    }
    if (x->numel == 0)
        return EMBER_OK;

    /* 3. the values */
    EMBER_TRY(ember__cl_temp(s, dev, "quantize", nb * sizeof(float), eff, &tmp[2]));
    cl_long L = q->shape[q->rank - 1];
    cl_long rows = (cl_long)(x->numel / (size_t)L);
    cl_long U = (L + f.per - 1) / f.per;
    cl_int per = f.per, bits = f.bits, ub = f.unit_bytes, vk = f.vkind, qa = f.qa, qb = f.qb;
    const ember__cl_arg args[] = {EMBER_CL_ARG(X),     EMBER_CL_ARG(Q),    EMBER_CL_ARG(tmp[2]),
                                  EMBER_CL_ARG(rows),  EMBER_CL_ARG(L),    EMBER_CL_ARG(U),
                                  EMBER_CL_ARG(per),   EMBER_CL_ARG(bits), EMBER_CL_ARG(ub),
                                  EMBER_CL_ARG(vk),    EMBER_CL_ARG(qa),   EMBER_CL_ARG(qb),
                                  EMBER_CL_ARG(bmode), EMBER_CL_ARG(rank), EMBER_CL_ARG(shape),
                                  EMBER_CL_ARG(block), EMBER_CL_ARG(grid)};
    size_t l = s->dev[dev].max_wg >= 256 ? 256 : s->dev[dev].max_wg;
    size_t gsz = ember__cl_round_up((size_t)(rows * U), l);
    EMBER_TRY(ember__cl_launch(s, dev, "quantize", "quant",
                               s->soft_div == 2 ? "-DEMBER_SOFT_DIV=1 -DEMBER_SOFT_DIV_TEST=1"
                               : s->soft_div    ? "-DEMBER_SOFT_DIV=1"
                                                : "",
                               "q_quantize", 17, args, 1, &gsz, &l));
    return EMBER_OK;
}

ember_status ember__cl_quantize(void *state, int dev, const ember_tensor *x,
                                const ember_tensor *scales, ember_tensor *q) {
    ember__cl_state *s = state;
    cl_long8 block, grid, shape;
    size_t nb;
    block_geometry(&q->scheme, q->rank, q->shape, &block, &grid, &shape, &nb);
    size_t ssz = ember__scale_dtype_size(ember__qscheme_scale_dtype(&q->scheme));
    /* raw: 2*nb words (alphas, then the flags); stored: nb scales; eff: nb floats */
    float *raw = ember__malloc(2 * nb * sizeof(float) + 1);
    uint8_t *stored = ember__malloc(nb * ssz + 1);
    float *eff = ember__malloc(nb * sizeof(float) + 1);
    cl_mem tmp[3] = {NULL, NULL, NULL};
    ember_status st;
    if (!raw || !stored || !eff)
        st = ember__fail(EMBER_ERR_OUT_OF_MEMORY, __FILE__, __func__, __LINE__,
                         "quantize: no memory for %zu block scales", nb);
    else
        st = quantize_run(s, dev, x, scales, q, raw, stored, eff, tmp);
    for (int i = 0; i < 3; i++)
        if (tmp[i])
            clReleaseMemObject(tmp[i]);
    ember__free(raw);
    ember__free(stored);
    ember__free(eff);
    return st;
}

/* ---- dequantize ---- */

static ember_status dequantize_f32(ember__cl_state *s, int dev, const ember_tensor *q, cl_mem out) {
    const ember_qscheme *sc = &q->scheme;
    const qfacts f = facts_of(sc);
    cl_long8 block, grid, shape;
    size_t nb;
    block_geometry(sc, q->rank, q->shape, &block, &grid, &shape, &nb);
    cl_mem Q = ember__cl_mem(q);
    cl_long numel = (cl_long)q->numel, L = q->shape[q->rank - 1];
    cl_long U = (L + f.per - 1) / f.per;
    cl_int per = f.per, bits = f.bits, ub = f.unit_bytes, vk = f.vkind;
    cl_long soff = (cl_long)q->q.scales_offset;
    cl_int sdt = (cl_int)ember__qscheme_scale_dtype(sc),
           ssize = (cl_int)ember__scale_dtype_size(ember__qscheme_scale_dtype(sc));
    cl_long goff = q->q.global_bytes == 4 ? (cl_long)q->q.global_offset : -1;
    cl_int rank = q->rank, bmode = block_mode(sc, q->rank, &block);
    const ember__cl_arg args[] = {EMBER_CL_ARG(Q),     EMBER_CL_ARG(out),   EMBER_CL_ARG(numel),
                                  EMBER_CL_ARG(L),     EMBER_CL_ARG(U),     EMBER_CL_ARG(per),
                                  EMBER_CL_ARG(bits),  EMBER_CL_ARG(ub),    EMBER_CL_ARG(vk),
                                  EMBER_CL_ARG(soff),  EMBER_CL_ARG(sdt),   EMBER_CL_ARG(ssize),
                                  EMBER_CL_ARG(goff),  EMBER_CL_ARG(bmode), EMBER_CL_ARG(rank),
                                  EMBER_CL_ARG(shape), EMBER_CL_ARG(block), EMBER_CL_ARG(grid)};
    size_t l = s->dev[dev].max_wg >= 256 ? 256 : s->dev[dev].max_wg;
    size_t gsz = ember__cl_round_up(q->numel, l);
    return ember__cl_launch(s, dev, "dequantize", "quant", "", "q_dequantize", 18, args, 1, &gsz,
                            &l);
}

ember_status ember__cl_dequantize(void *state, int dev, const ember_tensor *q, ember_tensor *out) {
    ember__cl_state *s = state;
    if (q->numel == 0)
        return EMBER_OK;
    if (out->dtype == EMBER_F32)
        return dequantize_f32(s, dev, q, ember__cl_mem(out));
    cl_mem tmp;
    EMBER_TRY(ember__cl_temp(s, dev, "dequantize", q->numel * sizeof(float), NULL, &tmp));
    ember_status st = dequantize_f32(s, dev, q, tmp);
    if (st == EMBER_OK)
        st = ember__cl_convert_mem(s, dev, "dequantize", tmp, EMBER_F32, ember__cl_mem(out),
                                   out->dtype, q->numel);
    clReleaseMemObject(tmp);
    return st;
}
