/* backends/opencl/cl_quant.c: quantize and dequantize on OpenCL (kernels/quant.cl).
 *
 * quantize(x, scales?, q), three steps:
 *   1. on the device, kernel q_absmax: per block, alpha = max |x| and a NaN/Inf flag (the flag
 *      alone is used with static scales);
 *   2. on the host, the few scales: raw = f32(2 * alpha) / (b - a) (MinMax) or the caller's static
 *      scales, then guarded, rounded up to the scale dtype and (two-level) normalised by
 *      ember__cl_scales_finish, exactly as the CPU backend does; the stored scales (and global)
 *      are written into q's buffer, the effective f32 scales into a temporary buffer;
 *   3. on the device, kernel q_quantize: one work item per storage unit (byte or u32 word).
 * dequantize(q, out): kernel q_dequantize reads values and stored scales straight from q's
 * buffer (F16 / BF16 outputs go through a temporary F32 buffer and the convert kernel).
 *
 * Scale rules (spec §4.3, ember's documented choices where burn's backends differ):
 *   - a scale that is not positive and finite (all-zero block) becomes FLT_MIN before rounding;
 *   - round up to the scale dtype: F32 identity; s >= max gives max; below the smallest normal,
 *     ceil(s / spacing) * spacing; else the f32 bits rounded up to the dtype's mantissa;
 *   - two-level: g = max(raw) / block_max (FLT_MIN at least), s_b = raw / g rounded up to the
 *     block dtype; the effective scale is g * s_b (one f32 multiply), as dequantize computes it. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "cl_backend.h"

/* ---- scheme facts ---- */

typedef struct qfacts {
    int bits, vkind, qa, qb;
    int per, unit_bytes;
    float range; /* b - a as f32, for the MinMax scale */
} qfacts;

static qfacts facts_of(const ember_qscheme *s) {
    qfacts f;
    memset(&f, 0, sizeof f);
    switch (s->value) {
    case EMBER_Q8F: f.bits = 8; f.qa = -128; f.qb = 127; break;
    case EMBER_Q8S: f.bits = 8; f.qa = -127; f.qb = 127; break;
    case EMBER_Q4F: f.bits = 4; f.qa = -8; f.qb = 7; break;
    case EMBER_Q4S: f.bits = 4; f.qa = -7; f.qb = 7; break;
    case EMBER_Q2F: f.bits = 2; f.qa = -2; f.qb = 1; break;
    case EMBER_Q2S: f.bits = 2; f.qa = -1; f.qb = 1; break;
    case EMBER_E4M3: f.bits = 8; f.vkind = 1; f.qa = -448; f.qb = 448; break;
    case EMBER_E5M2: f.bits = 8; f.vkind = 2; f.qa = -57344; f.qb = 57344; break;
    default: f.bits = 4; f.vkind = 3; f.qa = -6; f.qb = 6; break; /* E2M1 */
    }
    f.range = (float)(f.qb - f.qa);
    if (s->store == EMBER_QSTORE_PACKED_U32) {
        f.per = 32 / f.bits;
        f.unit_bytes = 4;
    } else {
        f.per = 8 / f.bits; /* Native 8-bit: 1; PackedNative E2M1: 2 */
        f.unit_bytes = 1;
    }
    return f;
}

static ember_scale_dtype scale_dtype_of(const ember_qscheme *s) {
    return s->block_rank > 0 ? s->block_scale : s->tensor_scale;
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
        grid->s[d] = s->block_rank > 0 ? (shape[d] + b - 1) / b : 1;
        shp->s[d] = shape[d];
        nb *= (size_t)grid->s[d];
    }
    *nblocks = nb;
}

/* ---- scale dtypes ---- */

size_t ember__cl_scale_size(ember_scale_dtype d) {
    return d == EMBER_SCALE_F32 ? 4 : (d == EMBER_SCALE_F16 || d == EMBER_SCALE_BF16) ? 2 : 1;
}

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float ember__cl_scale_round_up(float s, ember_scale_dtype d) {
    float maxv, min_normal, spacing;
    uint32_t step;
    switch (d) {
    case EMBER_SCALE_F16:
        maxv = 65504.0f;
        min_normal = 0x1p-14f;
        spacing = 0x1p-24f;
        step = 1u << 13;
        break;
    case EMBER_SCALE_BF16:
        maxv = float_of(0x7f7f0000u);
        min_normal = FLT_MIN;
        spacing = 0x1p-133f;
        step = 1u << 16;
        break;
    case EMBER_SCALE_UE4M3:
        maxv = 448.0f;
        min_normal = 0x1p-6f;
        spacing = 0x1p-9f;
        step = 1u << 20;
        break;
    default:
        return s;
    }
    if (isnan(s))
        return s;
    if (s >= maxv)
        return maxv;
    if (s < min_normal)
        return ceilf(s / spacing) * spacing;
    return float_of((bits_of(s) + step - 1) & ~(step - 1));
}

void ember__cl_scale_encode(float s, ember_scale_dtype d, uint8_t *dst) {
    uint32_t u = bits_of(s);
    switch (d) {
    case EMBER_SCALE_F32:
        dst[0] = (uint8_t)u;
        dst[1] = (uint8_t)(u >> 8);
        dst[2] = (uint8_t)(u >> 16);
        dst[3] = (uint8_t)(u >> 24);
        break;
    case EMBER_SCALE_F16: {
        uint16_t h = ember__f32_to_f16(s);
        dst[0] = (uint8_t)h;
        dst[1] = (uint8_t)(h >> 8);
        break;
    }
    case EMBER_SCALE_BF16: /* exact: the value was rounded up to bf16 */
        dst[0] = (uint8_t)(u >> 16);
        dst[1] = (uint8_t)(u >> 24);
        break;
    default: { /* UE4M3, exact by the same argument; bias 7, 3 mantissa bits */
        if (s < 0x1p-6f) {
            dst[0] = (uint8_t)(s * 512.0f); /* subnormal: m * 2^-9 */
        } else {
            int e = (int)((u >> 23) & 0xffu) - 127;
            uint32_t m = (u >> 20) & 7u;
            dst[0] = (uint8_t)(((uint32_t)(e + 7) << 3) | m);
        }
        break;
    }
    }
}

float ember__cl_scale_decode(const uint8_t *src, ember_scale_dtype d) {
    switch (d) {
    case EMBER_SCALE_F32:
        return float_of((uint32_t)src[0] | ((uint32_t)src[1] << 8) | ((uint32_t)src[2] << 16) |
                        ((uint32_t)src[3] << 24));
    case EMBER_SCALE_F16:
        return ember__f16_to_f32((uint16_t)(src[0] | (src[1] << 8)));
    case EMBER_SCALE_BF16:
        return float_of(((uint32_t)src[0] | ((uint32_t)src[1] << 8)) << 16);
    default: {
        uint32_t e = (src[0] >> 3) & 15u, m = src[0] & 7u;
        if (e == 15u && m == 7u)
            return NAN;
        return e == 0 ? ldexpf((float)m, -9) : ldexpf((float)(m | 8u), (int)e - 10);
    }
    }
}

static float guard(float s) { return (s > 0.0f && isfinite(s)) ? s : FLT_MIN; }

void ember__cl_scales_finish(const ember_qscheme *s, const float *raw, size_t n, uint8_t *stored,
                             float *global, float *eff) {
    ember_scale_dtype d = scale_dtype_of(s);
    size_t sz = ember__cl_scale_size(d);
    float g = 1.0f;
    if (s->block_rank > 0 && s->tensor_level) {
        float mx = 0.0f;
        for (size_t i = 0; i < n; i++)
            mx = fmaxf(mx, guard(raw[i]));
        static const float block_max[EMBER_SCALE_DTYPE_COUNT] = {
            [EMBER_SCALE_F32] = FLT_MAX, [EMBER_SCALE_F16] = 65504.0f,
            [EMBER_SCALE_BF16] = 0x1.fep127f, [EMBER_SCALE_UE8M0] = 0x1p127f,
            [EMBER_SCALE_UE4M3] = 448.0f};
        g = mx / block_max[d];
        g = fmaxf(g, FLT_MIN);
    }
    for (size_t i = 0; i < n; i++) {
        float sb = guard(raw[i]);
        if (s->block_rank > 0 && s->tensor_level)
            sb = sb / g;
        sb = ember__cl_scale_round_up(sb, d);
        ember__cl_scale_encode(sb, d, stored + i * sz);
        float dec = ember__cl_scale_decode(stored + i * sz, d);
        eff[i] = (s->block_rank > 0 && s->tensor_level) ? g * dec : dec;
    }
    *global = g;
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
    cl_int rank = q->rank;
    cl_mem X = ember__cl_mem(x), Q = ember__cl_mem(q);

    /* 1. alpha and the non-finite flag per block */
    if (x->numel > 0) {
        int *bad = (int *)(void *)(raw + nb); /* raw holds 2*nb words */
        EMBER_TRY(ember__cl_temp(s, dev, "quantize", nb * sizeof(float), NULL, &tmp[0]));
        EMBER_TRY(ember__cl_temp(s, dev, "quantize", nb * sizeof(cl_int), NULL, &tmp[1]));
        size_t l = 64; /* a power of two: the reduction halves it */
        while (l > s->dev[dev].max_wg)
            l /= 2;
        const ember__cl_arg args[] = {EMBER_CL_ARG(X),     EMBER_CL_ARG(tmp[0]),
                                      EMBER_CL_ARG(tmp[1]), EMBER_CL_ARG(rank),
                                      EMBER_CL_ARG(shape), EMBER_CL_ARG(block),
                                      EMBER_CL_ARG(grid),  EMBER_CL_LOCAL(l * sizeof(float)),
                                      EMBER_CL_LOCAL(l * sizeof(cl_int))};
        size_t gsz = nb * l;
        EMBER_TRY(ember__cl_launch(s, dev, "quantize", "quant", "", "q_absmax", 9, args, 1, &gsz,
                                   &l));
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
        EMBER_TRY(ember__cl_read(s, dev, "quantize", ember__cl_mem(scales), 0, raw,
                                 nb * sizeof(float)));
    } else {
        for (size_t b = 0; b < nb; b++)
            raw[b] = (2.0f * raw[b]) / f.range;
    }
    float g;
    ember__cl_scales_finish(sc, raw, nb, stored, &g, eff);
    size_t ssz = ember__cl_scale_size(scale_dtype_of(sc));
    EMBER_TRY(ember__cl_write(s, dev, "quantize", Q, q->q.scales_offset, stored, nb * ssz));
    if (q->q.global_bytes == 4) {
        uint8_t gb[4];
        ember__cl_scale_encode(g, EMBER_SCALE_F32, gb);
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
    const ember__cl_arg args[] = {
        EMBER_CL_ARG(X),    EMBER_CL_ARG(Q),    EMBER_CL_ARG(tmp[2]), EMBER_CL_ARG(rows),
        EMBER_CL_ARG(L),    EMBER_CL_ARG(U),    EMBER_CL_ARG(per),    EMBER_CL_ARG(bits),
        EMBER_CL_ARG(ub),   EMBER_CL_ARG(vk),   EMBER_CL_ARG(qa),     EMBER_CL_ARG(qb),
        EMBER_CL_ARG(rank), EMBER_CL_ARG(shape), EMBER_CL_ARG(block), EMBER_CL_ARG(grid)};
    size_t l = s->dev[dev].max_wg >= 256 ? 256 : s->dev[dev].max_wg;
    size_t gsz = ember__cl_round_up((size_t)(rows * U), l);
    EMBER_TRY(ember__cl_launch(s, dev, "quantize", "quant", "", "q_quantize", 16, args, 1, &gsz,
                               &l));
    return EMBER_OK;
}

ember_status ember__cl_quantize(void *state, int dev, const ember_tensor *x,
                                const ember_tensor *scales, ember_tensor *q) {
    ember__cl_state *s = state;
    cl_long8 block, grid, shape;
    size_t nb;
    block_geometry(&q->scheme, q->rank, q->shape, &block, &grid, &shape, &nb);
    size_t ssz = ember__cl_scale_size(scale_dtype_of(&q->scheme));
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
    cl_int sdt = (cl_int)scale_dtype_of(sc), ssize = (cl_int)ember__cl_scale_size(scale_dtype_of(sc));
    cl_long goff = q->q.global_bytes == 4 ? (cl_long)q->q.global_offset : -1;
    cl_int rank = q->rank;
    const ember__cl_arg args[] = {
        EMBER_CL_ARG(Q),    EMBER_CL_ARG(out),   EMBER_CL_ARG(numel), EMBER_CL_ARG(L),
        EMBER_CL_ARG(U),    EMBER_CL_ARG(per),   EMBER_CL_ARG(bits),  EMBER_CL_ARG(ub),
        EMBER_CL_ARG(vk),   EMBER_CL_ARG(soff),  EMBER_CL_ARG(sdt),   EMBER_CL_ARG(ssize),
        EMBER_CL_ARG(goff), EMBER_CL_ARG(rank),  EMBER_CL_ARG(shape), EMBER_CL_ARG(block),
        EMBER_CL_ARG(grid)};
    size_t l = s->dev[dev].max_wg >= 256 ? 256 : s->dev[dev].max_wg;
    size_t gsz = ember__cl_round_up(q->numel, l);
    return ember__cl_launch(s, dev, "dequantize", "quant", "", "q_dequantize", 17, args, 1, &gsz,
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
