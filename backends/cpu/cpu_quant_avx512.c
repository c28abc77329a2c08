/* backends/cpu/cpu_quant_avx512.c: the AVX-512 (F, BW, DQ, VL) tier of the CPU quantize /
 * dequantize kernels. Same bytes as the scalar tier:
 *   - x / e is _mm512_div_ps (IEEE division, as the scalar x / e; a reciprocal multiply with a
 *     fix-up near ties was tried and measured no faster here: the division is not the limit);
 *   - roundf is rebuilt exactly: t = trunc(d); if |d - t| >= 0.5 then t += copysign(1, d)
 *     (d - t is exact in f32), which is half away from zero for every d, Inf included;
 *   - the clamp is done on floats before the conversion, as in the scalar code;
 *   - dequantize is one multiply e * (float)q.
 * Packing: 64 codes at a time (Q4 / E2M1 nibbles via maddubs, Q2 via maddubs + madd), the rest
 * by the scalar packer, so a sub-chunk's tail goes through the same code as the scalar tier. */
#include "cpu_quant.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>

static inline __mmask16 tail_mask(size_t n) { return (__mmask16)((1u << n) - 1u); }

static void v_amax_blocks(const float *x, size_t len, size_t bl, uint32_t *m) {
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
    if (bl == 1) { /* a block per value (blocks across rows): each value's own magnitude */
        size_t p = 0;
        for (; p + 16 <= len; p += 16)
            _mm512_storeu_si512(m + p, _mm512_and_si512(_mm512_loadu_si512(x + p), absmask));
        if (p < len) {
            const __mmask16 mk = tail_mask(len - p);
            _mm512_mask_storeu_epi32(
                m + p, mk, _mm512_and_si512(_mm512_maskz_loadu_epi32(mk, x + p), absmask));
        }
        return;
    }
    if (!bl)
        bl = len ? len : 1;
    size_t k = 0;
    for (size_t i = 0; i < len; i += bl, k++) {
        const size_t end = i + bl < len ? i + bl : len;
        __m512i acc = _mm512_setzero_si512();
        size_t p = i;
        for (; p + 16 <= end; p += 16)
            acc = _mm512_max_epu32(acc, _mm512_and_si512(_mm512_loadu_si512(x + p), absmask));
        if (p < end)
            acc = _mm512_max_epu32(
                acc,
                _mm512_and_si512(_mm512_maskz_loadu_epi32(tail_mask(end - p), x + p), absmask));
        m[k] = _mm512_reduce_max_epu32(acc);
    }
    if (len == 0)
        m[0] = 0;
}

static void v_amax_acc(const float *x, size_t len, uint32_t *acc) {
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff);
    size_t p = 0;
    for (; p + 16 <= len; p += 16)
        _mm512_storeu_si512(acc + p,
                            _mm512_max_epu32(_mm512_loadu_si512(acc + p),
                                             _mm512_and_si512(_mm512_loadu_si512(x + p), absmask)));
    if (p < len) {
        const __mmask16 mk = tail_mask(len - p);
        _mm512_mask_storeu_epi32(
            acc + p, mk,
            _mm512_max_epu32(_mm512_maskz_loadu_epi32(mk, acc + p),
                             _mm512_and_si512(_mm512_maskz_loadu_epi32(mk, x + p), absmask)));
    }
}

/* At -O0 the roundscale intrinsic is a macro whose internal casts trip -Wsign-conversion. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wconversion"
#endif
/* q = clamp(roundf(d), lo, hi) for d = x / e, with roundf rebuilt exactly. */
static inline __m512i round_clamp(__m512 d, __m512 vlo, __m512 vhi) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    __m512 t = _mm512_roundscale_ps(d, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_andnot_ps(sign, _mm512_sub_ps(d, t));
    __mmask16 up = _mm512_cmp_ps_mask(f, half, _CMP_GE_OQ);
    __m512 step = _mm512_or_ps(_mm512_and_ps(d, sign), one);
    t = _mm512_mask_add_ps(t, up, t, step);
    t = _mm512_max_ps(t, vlo);
    t = _mm512_min_ps(t, vhi);
    return _mm512_cvttps_epi32(t);
}

/* The exact path: one IEEE division, as the scalar tier. */
static inline __m512i quant16(__m512 v, __m512 ve, __m512 vlo, __m512 vhi) {
    return round_clamp(_mm512_div_ps(v, ve), vlo, vhi);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

static void v_quant_int_blocks(const float *x, size_t len, size_t bl, const float *e, float lo,
                               float hi, int8_t *q) {
    const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    if (bl == 1) { /* a scale per value */
        size_t p = 0;
        for (; p + 16 <= len; p += 16)
            _mm_storeu_si128((__m128i *)(q + p),
                             _mm512_cvtepi32_epi8(quant16(_mm512_loadu_ps(x + p),
                                                          _mm512_loadu_ps(e + p), vlo, vhi)));
        if (p < len) {
            /* lanes off: x 0 over e 1 (not 0 / 0), and nothing stored */
            const __mmask16 mk = tail_mask(len - p);
            const __m512i r =
                quant16(_mm512_maskz_loadu_ps(mk, x + p),
                        _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), mk, e + p), vlo, vhi);
            _mm512_mask_cvtepi32_storeu_epi8(q + p, mk, r);
        }
        return;
    }
    if (!bl)
        bl = len ? len : 1;
    for (size_t i = 0, k = 0; i < len; i += bl, k++) {
        const size_t end = i + bl < len ? i + bl : len;
        const __m512 ve = _mm512_set1_ps(e[k]);
        size_t p = i;
        for (; p + 64 <= end; p += 64) {
            __m512i a = quant16(_mm512_loadu_ps(x + p), ve, vlo, vhi);
            __m512i b = quant16(_mm512_loadu_ps(x + p + 16), ve, vlo, vhi);
            __m512i c = quant16(_mm512_loadu_ps(x + p + 32), ve, vlo, vhi);
            __m512i d = quant16(_mm512_loadu_ps(x + p + 48), ve, vlo, vhi);
            _mm_storeu_si128((__m128i *)(q + p), _mm512_cvtepi32_epi8(a));
            _mm_storeu_si128((__m128i *)(q + p + 16), _mm512_cvtepi32_epi8(b));
            _mm_storeu_si128((__m128i *)(q + p + 32), _mm512_cvtepi32_epi8(c));
            _mm_storeu_si128((__m128i *)(q + p + 48), _mm512_cvtepi32_epi8(d));
        }
        for (; p + 16 <= end; p += 16)
            _mm_storeu_si128((__m128i *)(q + p),
                             _mm512_cvtepi32_epi8(quant16(_mm512_loadu_ps(x + p), ve, vlo, vhi)));
        if (p < end) {
            __mmask16 mk = tail_mask(end - p);
            __m512i r = quant16(_mm512_maskz_loadu_ps(mk, x + p), ve, vlo, vhi);
            _mm512_mask_cvtepi32_storeu_epi8(q + p, mk, r);
        }
    }
}

static void v_dequant_int_blocks(const int8_t *q, size_t len, size_t bl, const float *e,
                                 float *out) {
    if (bl == 1) { /* a scale per value */
        size_t p = 0;
        for (; p + 16 <= len; p += 16) {
            __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + p)));
            _mm512_storeu_ps(out + p, _mm512_mul_ps(_mm512_loadu_ps(e + p), _mm512_cvtepi32_ps(v)));
        }
        if (p < len) {
            __mmask16 mk = tail_mask(len - p);
            __m512i v = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mk, q + p));
            _mm512_mask_storeu_ps(
                out + p, mk,
                _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, e + p), _mm512_cvtepi32_ps(v)));
        }
        return;
    }
    if (!bl)
        bl = len ? len : 1;
    for (size_t i = 0, k = 0; i < len; i += bl, k++) {
        const size_t end = i + bl < len ? i + bl : len;
        const __m512 ve = _mm512_set1_ps(e[k]);
        size_t p = i;
        for (; p + 16 <= end; p += 16) {
            __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + p)));
            _mm512_storeu_ps(out + p, _mm512_mul_ps(ve, _mm512_cvtepi32_ps(v)));
        }
        if (p < end) {
            __mmask16 mk = tail_mask(end - p);
            __m512i v = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mk, q + p));
            _mm512_mask_storeu_ps(out + p, mk, _mm512_mul_ps(ve, _mm512_cvtepi32_ps(v)));
        }
    }
}

/* 64 codes -> 32 bytes of nibbles (value 2k in the low half of byte k). */
static inline __m256i pack4_64(const uint8_t *codes) {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    const __m512i w = _mm512_set1_epi16(0x1001); /* bytes (1, 16) */
    __m512i c = _mm512_and_si512(_mm512_loadu_si512(codes), nib);
    return _mm512_cvtepi16_epi8(_mm512_maddubs_epi16(c, w));
}

/* 64 codes -> 16 bytes of 2-bit fields. */
static inline __m128i pack2_64(const uint8_t *codes) {
    const __m512i two = _mm512_set1_epi8(0x03);
    const __m512i w1 = _mm512_set1_epi16(0x0401);     /* bytes (1, 4) */
    const __m512i w2 = _mm512_set1_epi32(0x00100001); /* words (1, 16) */
    __m512i c = _mm512_and_si512(_mm512_loadu_si512(codes), two);
    __m512i p16 = _mm512_maddubs_epi16(c, w1);
    return _mm512_cvtepi32_epi8(_mm512_madd_epi16(p16, w2));
}

static void v_pack(const ember_qscheme *s, const uint8_t *codes, size_t n, uint8_t *dst) {
    const int bits = ember__qvalue_get_info(s->value)->bits;
    size_t i = 0;
    if (s->store != EMBER_QSTORE_NATIVE && bits == 4) {
        for (; i + 64 <= n; i += 64)
            _mm256_storeu_si256((__m256i *)(dst + i / 2), pack4_64(codes + i));
        ember__pack_codes(s, codes + i, n - i, dst + i / 2);
    } else if (s->store != EMBER_QSTORE_NATIVE && bits == 2) {
        for (; i + 64 <= n; i += 64)
            _mm_storeu_si128((__m128i *)(dst + i / 4), pack2_64(codes + i));
        ember__pack_codes(s, codes + i, n - i, dst + i / 4);
    } else {
        ember__pack_codes(s, codes, n, dst);
    }
}

static void v_unpack(const ember_qscheme *s, const uint8_t *src, size_t n, uint8_t *codes) {
    const ember__qvalue_info *vi = ember__qvalue_get_info(s->value);
    size_t i = 0;
    if (s->store != EMBER_QSTORE_NATIVE && vi->bits == 4) {
        const __m512i nib = _mm512_set1_epi16(0x000f);
        const __m512i sx = _mm512_set1_epi8(vi->is_fp ? 0 : 8);
        for (; i + 64 <= n; i += 64) {
            __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(src + i / 2)));
            __m512i lo = _mm512_and_si512(w, nib);
            __m512i hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), nib);
            __m512i c = _mm512_or_si512(lo, _mm512_slli_epi16(hi, 8));
            c = _mm512_sub_epi8(_mm512_xor_si512(c, sx), sx); /* sign-extend (ints) */
            _mm512_storeu_si512(codes + i, c);
        }
        ember__unpack_codes(s, src + i / 2, n - i, codes + i);
    } else if (s->store != EMBER_QSTORE_NATIVE && vi->bits == 2) {
        const __m512i sx = _mm512_set1_epi8(2);
        for (; i + 64 <= n; i += 64) {
            __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(src + i / 4)));
            __m512i c = _mm512_and_si512(b, _mm512_set1_epi32(0x3));
            c = _mm512_or_si512(
                c, _mm512_and_si512(_mm512_slli_epi32(b, 6), _mm512_set1_epi32(0x300)));
            c = _mm512_or_si512(
                c, _mm512_and_si512(_mm512_slli_epi32(b, 12), _mm512_set1_epi32(0x30000)));
            c = _mm512_or_si512(
                c, _mm512_and_si512(_mm512_slli_epi32(b, 18), _mm512_set1_epi32(0x3000000)));
            c = _mm512_sub_epi8(_mm512_xor_si512(c, sx), sx);
            _mm512_storeu_si512(codes + i, c);
        }
        ember__unpack_codes(s, src + i / 4, n - i, codes + i);
    } else {
        ember__unpack_codes(s, src, n, codes);
    }
}

/* F16, BF16 and F32 scales 16 at a time (F16 through VCVTPH2PS, which quiets a signaling NaN:
 * 16 that hold a NaN or Inf go through the scalar decoder, which keeps its bits); the others,
 * and the tail, through the scalar decoder */
static void v_scales_f32(const uint8_t *src, size_t n, ember_scale_dtype d, int two, float g,
                         float *dst) {
    size_t i = 0;
    const __m512 gv = _mm512_set1_ps(g);
    if (d == EMBER_SCALE_F16 || d == EMBER_SCALE_BF16 || d == EMBER_SCALE_F32) {
        for (; i + 16 <= n; i += 16) {
            __m512 t;
            if (d == EMBER_SCALE_F32) {
                t = _mm512_loadu_ps(src + 4 * i);
            } else {
                const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(src + 2 * i));
                if (d == EMBER_SCALE_BF16) {
                    t = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
                } else {
                    const __m256i ex = _mm256_set1_epi16(0x7c00);
                    if (_mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_and_si256(h, ex), ex))) {
                        for (size_t q = i; q < i + 16; q++) {
                            const float v = ember__scale_decode(src + 2 * q, d);
                            dst[q] = two ? g * v : v;
                        }
                        continue;
                    }
                    t = _mm512_cvtph_ps(h);
                }
            }
            _mm512_storeu_ps(dst + i, two ? _mm512_mul_ps(gv, t) : t);
        }
    }
    ember__cpu_qkern_scalar.scales_f32(src + i * ember__scale_dtype_size(d), n - i, d, two, g,
                                       dst + i);
}

const ember__cpu_qkern ember__cpu_qkern_avx512 = {
    .name = "avx512",
    .amax_blocks = v_amax_blocks,
    .amax_acc = v_amax_acc,
    .quant_int_blocks = v_quant_int_blocks,
    .dequant_int_blocks = v_dequant_int_blocks,
    .pack = v_pack,
    .unpack = v_unpack,
    .scales_f32 = v_scales_f32,
};

#else /* not built with AVX-512: the tier falls back to scalar */
const ember__cpu_qkern ember__cpu_qkern_avx512 = {
    .name = "scalar",
    .amax_blocks = NULL,
};
#endif
