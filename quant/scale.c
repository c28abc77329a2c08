/* quant/scale.c: scale dtypes (burn's ScaleDtype::round_up, storage encodings), the two-level
 * normalisation, and the fp8 / fp4 value codecs. The exact arithmetic is stated at the top of
 * quant/quant_impl.h. */
#include "quant_impl.h"

float ember__scale_dtype_max(ember_scale_dtype d) {
    switch (d) {
    case EMBER_SCALE_F16:
        return 65504.0f;
    case EMBER_SCALE_BF16:
        return ember__f32_from_bits(0x7f7f0000u); /* bf16::MAX = 3.3895314e38 */
    case EMBER_SCALE_UE8M0:
        return 0x1p127f;
    case EMBER_SCALE_UE4M3:
        return 448.0f;
    default:
        return FLT_MAX;
    }
}

float ember__scale_round_up(float s, ember_scale_dtype d) {
    if (d == EMBER_SCALE_F32 || s != s)
        return s;
    const float max = ember__scale_dtype_max(d);
    if (s >= max)
        return max;
    uint32_t step;
    switch (d) {
    case EMBER_SCALE_F16:
        if (s < 0x1p-14f) /* below f16's smallest normal: a multiple of the subnormal spacing */
            return ceilf(s * 0x1p24f) * 0x1p-24f;
        step = 1u << 13;
        break;
    case EMBER_SCALE_UE4M3:
        if (s < 0x1p-6f)
            return ceilf(s * 0x1p9f) * 0x1p-9f;
        step = 1u << 20;
        break;
    case EMBER_SCALE_BF16:
        step = 1u << 16;
        break;
    default: /* UE8M0 is refused before anything is computed */
        return s;
    }
    uint32_t b = ember__f32_bits(s);
    b = (b + step - 1u) & ~(step - 1u);
    return ember__f32_from_bits(b);
}

void ember__scale_encode(float t, ember_scale_dtype d, uint8_t *dst) {
    uint32_t u;
    switch (d) {
    case EMBER_SCALE_F16:
        u = ember__f32_to_f16(t);
        dst[0] = (uint8_t)u;
        dst[1] = (uint8_t)(u >> 8);
        return;
    case EMBER_SCALE_BF16:
        u = ember__f32_to_bf16(t);
        dst[0] = (uint8_t)u;
        dst[1] = (uint8_t)(u >> 8);
        return;
    case EMBER_SCALE_UE4M3:
    case EMBER_SCALE_UE8M0:
        dst[0] = ember__fp_encode(EMBER_E4M3, t);
        return;
    default:
        u = ember__f32_bits(t);
        dst[0] = (uint8_t)u;
        dst[1] = (uint8_t)(u >> 8);
        dst[2] = (uint8_t)(u >> 16);
        dst[3] = (uint8_t)(u >> 24);
        return;
    }
}

float ember__scale_decode(const uint8_t *src, ember_scale_dtype d) {
    switch (d) {
    case EMBER_SCALE_F16:
        return ember__f16_to_f32((uint16_t)(src[0] | src[1] << 8));
    case EMBER_SCALE_BF16:
        return ember__bf16_to_f32((uint16_t)(src[0] | src[1] << 8));
    case EMBER_SCALE_UE4M3:
    case EMBER_SCALE_UE8M0:
        return ember__fp_decode(EMBER_E4M3, src[0]);
    default:
        return ember__f32_from_bits((uint32_t)src[0] | (uint32_t)src[1] << 8 |
                                    (uint32_t)src[2] << 16 | (uint32_t)src[3] << 24);
    }
}

float ember__qscales_global(const ember_qscheme *s, const float *raw, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++)
        if (raw[i] > m)
            m = raw[i];
    float g = m / ember__scale_dtype_max(s->block_scale);
    /* burn's floor is FLT_MIN. With it, a block scale stored near its dtype's smallest positive
     * value (a zero or tiny block of a tiny tensor) makes s_eff = g * s_b underflow to 0, and a
     * zero element then quantizes as 0 / 0 = NaN, encoded differently by each device (found by
     * fuzz_quantize, CPU vs OpenCL). So the floor is raised until g times the smallest positive
     * block scale is a normal f32: FLT_MIN / 2^-24 for F16 block scales, FLT_MIN / 2^-9 for UE4M3
     * (the only block dtypes a two-level scheme accepts). This differs from burn only for tensors
     * whose largest magnitude is below 65504 * 2^-102 (F16) or 448 * 2^-117 (UE4M3), where burn's
     * own result is NaN-dependent. */
    float floor_g = FLT_MIN;
    if (s->block_scale == EMBER_SCALE_F16)
        floor_g = 0x1p-102f;
    else if (s->block_scale == EMBER_SCALE_UE4M3)
        floor_g = 0x1p-117f;
    return g >= floor_g ? g : floor_g;
}

void ember__qscales_finish_range(const ember_qscheme *s, const float *raw, size_t i0, size_t i1,
                                 float g, uint8_t *dst_bytes, float *eff) {
    const ember_scale_dtype d = ember__qscheme_scale_dtype(s);
    const size_t sz = ember__scale_dtype_size(d);
    const int two = ember__qscheme_two_level(s);
    for (size_t i = i0; i < i1; i++) {
        float v = two ? raw[i] / g : raw[i];
        float t = ember__scale_store_one(v, d);
        if (dst_bytes)
            ember__scale_encode(t, d, dst_bytes + i * sz);
        if (eff)
            eff[i] = two ? g * t : t;
    }
}

void ember__qscales_finish(const ember_qscheme *s, const float *raw, size_t n, uint8_t *dst_bytes,
                           float *eff, float *global) {
    float g = ember__qscheme_two_level(s) ? ember__qscales_global(s, raw, n) : 1.0f;
    ember__qscales_finish_range(s, raw, 0, n, g, dst_bytes, eff);
    if (global)
        *global = g;
}

/* ---- fp8 / fp4 ---- */
typedef struct fpfmt {
    int e, m, bias;
} fpfmt;

static fpfmt fmt_of(ember_qvalue v) {
    switch (v) {
    case EMBER_E5M2:
        return (fpfmt){5, 2, 15};
    case EMBER_E2M1:
        return (fpfmt){2, 1, 1};
    default:
        return (fpfmt){4, 3, 7};
    }
}

/* Round a finite f32 to the nearest value of the format (ties to even), assuming |x| <= max. */
uint8_t ember__fp_encode(ember_qvalue v, float x) {
    const fpfmt f = fmt_of(v);
    const uint32_t u = ember__f32_bits(x);
    const uint32_t sign = (u >> 31) << (f.e + f.m);
    const uint32_t a = u & 0x7fffffffu;
    if (a == 0)
        return (uint8_t)sign;
    const int e32 = (int)(a >> 23);
    const int emin = 1 - f.bias; /* unbiased exponent of the smallest normal */
    uint32_t mag;
    if (e32 - 127 >= emin) { /* normal in the target: round the f32 pattern to m mantissa bits */
        const int sh = 23 - f.m;
        uint32_t r = (a + (1u << (sh - 1)) - 1u + ((a >> sh) & 1u)) >> sh;
        mag = r - ((uint32_t)(127 - f.bias) << f.m);
    } else { /* subnormal in the target: a multiple of 2^(emin - m) */
        uint32_t sig = e32 ? (a & 0x7fffffu) | 0x800000u : a;
        int sh = 150 + emin - f.m - (e32 ? e32 : 1);
        if (sh >= 25)
            mag = 0;
        else
            mag = (sig + (1u << (sh - 1)) - 1u + ((sig >> sh) & 1u)) >> sh;
    }
    return (uint8_t)(sign | mag);
}

float ember__fp_decode(ember_qvalue v, uint8_t bits) {
    const fpfmt f = fmt_of(v);
    const uint32_t mmask = (1u << f.m) - 1u;
    const uint32_t emask = (1u << f.e) - 1u;
    const int neg = (bits >> (f.e + f.m)) & 1;
    const uint32_t ef = ((uint32_t)bits >> f.m) & emask, mf = bits & mmask;
    float r;
    if (v == EMBER_E4M3 && ef == emask && mf == mmask)
        r = NAN;
    else if (v == EMBER_E5M2 && ef == emask)
        r = mf ? NAN : INFINITY;
    else if (ef == 0)
        r = ldexpf((float)mf, 1 - f.bias - f.m);
    else
        r = ldexpf((float)(mf | (1u << f.m)), (int)ef - f.bias - f.m);
    return neg ? -r : r;
}
