/* quant/reference.c: burn's quantize / dequantize over host arrays, written for clarity (element
 * by element, block_of for every element). The backends' fast paths are tested against it; any
 * backend may call it to check itself. The arithmetic is stated in quant/quant_impl.h. */
#include "quant_impl.h"

static size_t numel_of(int rank, const int64_t *shape) {
    size_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= (size_t)shape[d];
    return n;
}

void ember__qref_effective_scales(const ember_qscheme *s, const ember__qlayout *L,
                                  const uint8_t *bytes, float *eff) {
    const ember_scale_dtype d = ember__qscheme_scale_dtype(s);
    float g = 1.0f;
    if (L->global_bytes)
        g = ember__scale_decode(bytes + L->global_offset, EMBER_SCALE_F32);
    for (size_t i = 0; i < L->nscales; i++) {
        float t = ember__scale_decode(bytes + L->scales_offset + i * L->scale_size, d);
        eff[i] = L->global_bytes ? g * t : t;
    }
}

ember_status ember__qref_quantize(const ember_qscheme *s, const ember__qlayout *L, int rank,
                                  const int64_t *shape, const float *x, const float *raw_scales,
                                  uint8_t *bytes) {
    const ember__qvalue_info *vi = ember__qvalue_get_info(s->value);
    const size_t n = numel_of(rank, shape);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return EMBER_ERR_NON_FINITE;
    const size_t ns = L->nscales ? L->nscales : 1;
    float *raw = ember__calloc(ns, sizeof *raw);
    float *eff = ember__calloc(ns, sizeof *eff);
    uint8_t *codes = ember__malloc(n ? n : 1);
    if (!raw || !eff || !codes) {
        ember__free(raw);
        ember__free(eff);
        ember__free(codes);
        return EMBER_ERR_OUT_OF_MEMORY;
    }
    if (raw_scales) {
        memcpy(raw, raw_scales, L->nscales * sizeof *raw);
    } else {
        for (size_t i = 0; i < n; i++) { /* raw holds alpha = max |x| per block first */
            size_t b = ember__block_of(L, rank, shape, i);
            float a = fabsf(x[i]);
            if (a > raw[b])
                raw[b] = a;
        }
        for (size_t b = 0; b < L->nscales; b++)
            raw[b] = ember__raw_scale(raw[b], vi);
    }
    float g;
    ember__qscales_finish(s, raw, L->nscales, bytes + L->scales_offset, eff, &g);
    if (L->global_bytes)
        ember__scale_encode(g, EMBER_SCALE_F32, bytes + L->global_offset);
    for (size_t i = 0; i < n; i++)
        codes[i] =
            ember__quantize_code(s->value, vi, x[i], eff[ember__block_of(L, rank, shape, i)]);
    const size_t last = (size_t)shape[rank - 1];
    if (s->store == EMBER_QSTORE_NATIVE) {
        memcpy(bytes, codes, n);
    } else if (last > 0) {
        const size_t rb = ember__packed_row_bytes(s, (int64_t)last);
        for (size_t r = 0; r < n / last; r++)
            ember__pack_codes(s, codes + r * last, last, bytes + r * rb);
    }
    ember__free(raw);
    ember__free(eff);
    ember__free(codes);
    return EMBER_OK;
}

void ember__qref_dequantize(const ember_qscheme *s, const ember__qlayout *L, int rank,
                            const int64_t *shape, const uint8_t *bytes, float *out) {
    const ember__qvalue_info *vi = ember__qvalue_get_info(s->value);
    const size_t n = numel_of(rank, shape);
    const size_t last = (size_t)shape[rank - 1];
    if (n == 0)
        return;
    float *eff = ember__malloc(L->nscales * sizeof *eff);
    uint8_t *codes = ember__malloc(last);
    if (!eff || !codes) { /* test-only path: leave NaN so that a comparison fails loudly */
        for (size_t i = 0; i < n; i++)
            out[i] = NAN;
        ember__free(eff);
        ember__free(codes);
        return;
    }
    ember__qref_effective_scales(s, L, bytes, eff);
    const size_t rb =
        s->store == EMBER_QSTORE_NATIVE ? last : ember__packed_row_bytes(s, (int64_t)last);
    for (size_t r = 0; r < n / last; r++) {
        ember__unpack_codes(s, bytes + r * rb, last, codes);
        for (size_t j = 0; j < last; j++) {
            size_t i = r * last + j;
            out[i] =
                eff[ember__block_of(L, rank, shape, i)] * ember__code_value(s->value, vi, codes[j]);
        }
    }
    ember__free(eff);
    ember__free(codes);
}
