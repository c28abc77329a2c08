/* quant/quant_impl.h (private): burn's quantization arithmetic on host values, shared by every
 * backend. A backend that quantizes on its own (OpenCL) must reproduce these functions bit for bit;
 * tests compare against quant/reference.c, which is built on them.
 *
 * THE EXACT ARITHMETIC (every step an IEEE-754 binary32 operation, round to nearest even, no FMA
 * contraction, no fast-math; denormals are NOT flushed):
 *
 *  1. Range (MinMax): alpha = max over the block of |x| (equal to burn's max(|min x|, |max x|)).
 *     Any NaN or Inf in the input is refused (EMBER_ERR_NON_FINITE).
 *  2. Raw scale: s = alpha / H, with H = (b - a) / 2 of the value type (Q8F 127.5, Q8S 127,
 *     Q4F 7.5, Q4S 7, Q2F 1.5, Q2S 1, E4M3 448, E5M2 57344, E2M1 6). burn computes
 *     f32(2 * alpha) / (b - a); both are one correctly rounded division of the same real number,
 *     so the results are equal, and this form cannot overflow.
 *  3. Two-level only (block scales under one global f32 scale, burn's normalize_scales):
 *     g = max over blocks of s / M (M = the block scale dtype's max: F16 65504, UE4M3 448),
 *     g = max(g, FLT_MIN); the block scale becomes s / g.
 *  4. Stored scale: t = round_up(s, scale dtype) (ember__scale_round_up below). Then the zero
 *     guard (burn-flex's validated_scale): when t is not > 0 or not finite it becomes
 *     round_up(FLT_MIN) (F32 FLT_MIN, F16 2^-24, BF16 FLT_MIN, UE4M3 2^-9).
 *  5. Effective scale: e = t (one level) or e = g * t (two-level, one f32 multiply).
 *  6. Quantize, integer values: q = (int) clamp(roundf(x / e), a, b): one IEEE division by the
 *     effective scale (never a multiply by a reciprocal), rounding half AWAY FROM ZERO (C roundf,
 *     burn's f32::round), clamped as a float before the conversion.
 *     fp values (E4M3, E5M2, E2M1): v = clamp(x / e, -max, max), then encoded to the nearest
 *     representable value, ties to even (IEEE conversion; the sign of zero is kept).
 *  7. Dequantize: x' = e * (float)q, or e * decode(q) for the fp values. F16 / BF16 outputs are
 *     this f32 rounded to nearest even.
 *
 * Scale dtypes: round_up (spec §4.3) saturates at the dtype's max, rounds values below the smallest
 * normal up to a multiple of the subnormal spacing (F16 2^-24, UE4M3 2^-9), and otherwise rounds
 * the f32 bit pattern up: bits' = (bits + step - 1) & ~(step - 1), step F16 2^13, BF16 2^16,
 * UE4M3 2^20. The stored bytes are then the exact F16 / BF16 / e4m3 encoding of t.
 *
 * Layout (dispatch/internal.h, struct ember__qlayout): the row-major values, then the block scales
 * row-major over the block grid, then the global f32 scale (two-level). Packing (PackedU32 and
 * PackedNative) runs along the last axis; every row starts on a fresh word (byte for
 * PackedNative), value j of a word sits at bits [j*bits, (j+1)*bits) (LSB first), two's complement
 * masked, and a partial last word is zero-padded. */
#ifndef EMBER_QUANT_IMPL_H
#define EMBER_QUANT_IMPL_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../dispatch/internal.h"

/* ---- value types ---- */
typedef struct ember__qvalue_info {
    int bits;         /* 8, 4 or 2 */
    int is_fp;        /* E4M3, E5M2, E2M1 */
    float lo, hi;     /* the clamp range (a, b); for fp values (-max, max) */
    float half_range; /* (b - a) / 2: the divisor of the raw scale */
} ember__qvalue_info;

const ember__qvalue_info *ember__qvalue_get_info(ember_qvalue v);

/* Values per storage unit along the packed axis: 1 (Native), 32/bits (PackedU32), 2
 * (PackedNative, E2M1), and the bytes of that unit (1, 4, 1). */
int ember__qstore_per_unit(const ember_qscheme *s);
int ember__qstore_unit_bytes(const ember_qscheme *s);
/* Bytes of one stored scale: F32 4, F16 2, BF16 2, UE8M0 1, UE4M3 1. */
size_t ember__scale_dtype_size(ember_scale_dtype d);
/* The dtype of the stored block (or the single per-tensor) scales. */
ember_scale_dtype ember__qscheme_scale_dtype(const ember_qscheme *s);
/* 1 for a two-level scheme (block level and a global f32 scale). */
int ember__qscheme_two_level(const ember_qscheme *s);

/* ---- bit helpers ---- */
static inline uint32_t ember__f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float ember__f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- scales ---- */
/* The largest value of a scale dtype (F32 FLT_MAX, F16 65504, BF16 bf16::MAX, UE4M3 448). */
float ember__scale_dtype_max(ember_scale_dtype d);
/* burn's ScaleDtype::round_up: the smallest value of dtype d that is >= s (saturating at max).
 * NaN is returned unchanged. d must not be UE8M0. */
float ember__scale_round_up(float s, ember_scale_dtype d);
/* Step 4's guard applied after round_up. */
static inline float ember__scale_guard(float t, ember_scale_dtype d) {
    if (!(t > 0.0f) || !(t <= FLT_MAX))
        return ember__scale_round_up(FLT_MIN, d);
    return t;
}
/* Encode a value already representable in d (the output of round_up) into its bytes
 * (little-endian), and decode stored bytes to f32. */
void ember__scale_encode(float t, ember_scale_dtype d, uint8_t *dst);
float ember__scale_decode(const uint8_t *src, ember_scale_dtype d);

/* The raw scale of step 2 for a block whose max |x| is alpha. */
static inline float ember__raw_scale(float alpha, const ember__qvalue_info *vi) {
    return alpha / vi->half_range;
}

/* One-level scale: stored value (after round-up and guard) from a raw scale. */
static inline float ember__scale_store_one(float raw, ember_scale_dtype d) {
    return ember__scale_guard(ember__scale_round_up(raw, d), d);
}

/* Turn n raw block scales into stored scales: writes the stored bytes (n * size of the scale
 * dtype) to dst_bytes, the effective f32 scales to eff (may be NULL), and for two-level schemes
 * the global scale to *global (else *global = 1 when not NULL). Pure, deterministic. */
void ember__qscales_finish(const ember_qscheme *s, const float *raw, size_t n, uint8_t *dst_bytes,
                           float *eff, float *global);
/* The two-level global scale of step 3 from the raw block scales. */
float ember__qscales_global(const ember_qscheme *s, const float *raw, size_t n);
/* Finish scales [i0, i1) given the global scale g (1 and ignored for one-level schemes). */
void ember__qscales_finish_range(const ember_qscheme *s, const float *raw, size_t i0, size_t i1,
                                 float g, uint8_t *dst_bytes, float *eff);

/* ---- per element ---- */
/* Integer values: q = clamp(roundf(x / e), lo, hi). */
/* Computed without a libm call: d = x / e is first limited to [-256, 256] (wider than every
 * integer range, so the clamp after rounding gives the same result), then rounded half away from
 * zero by truncation and the exact remainder d - trunc(d). Equal to clamp(roundf(d), lo, hi) for
 * every d, Inf included. */
static inline int ember__quantize_int(float x, float e, float lo, float hi) {
    float d = x / e;
    d = d < -256.0f ? -256.0f : d;
    d = d > 256.0f ? 256.0f : d;
    int i = (int)d;
    float f = d - (float)i;
    i += (f >= 0.5f) - (f <= -0.5f);
    i = i < (int)lo ? (int)lo : i;
    i = i > (int)hi ? (int)hi : i;
    return i;
}

/* fp8 / fp4: encode a finite |v| <= max to the nearest value (ties to even), returning the raw
 * bit pattern (E4M3 = e4m3fn: bias 7, no Inf, max 448; E5M2: bias 15, max 57344; E2M1: bias 1,
 * max 6). decode is the inverse over every bit pattern (E4M3 0x7F/0xFF and E5M2 exponent 31 give
 * NaN / Inf as their formats define). */
uint8_t ember__fp_encode(ember_qvalue v, float x);
float ember__fp_decode(ember_qvalue v, uint8_t bits);
/* Any value type: the stored code of x with effective scale e (i8 two's complement for integer
 * values, the raw bit pattern for fp values). */
static inline uint8_t ember__quantize_code(ember_qvalue v, const ember__qvalue_info *vi, float x,
                                           float e) {
    if (!vi->is_fp)
        return (uint8_t)(int8_t)ember__quantize_int(x, e, vi->lo, vi->hi);
    float r = x / e;
    r = r < vi->lo ? vi->lo : r;
    r = r > vi->hi ? vi->hi : r;
    return ember__fp_encode(v, r);
}
/* The value a code stands for, before scaling: (float)(int8)code or decode(code). */
static inline float ember__code_value(ember_qvalue v, const ember__qvalue_info *vi, uint8_t c) {
    return vi->is_fp ? ember__fp_decode(v, c) : (float)(int8_t)c;
}

/* ---- packing (along the last axis; `codes` are one byte each) ---- */
/* Pack n codes of `bits` bits into ceil(n*bits/8) bytes... as whole storage units: PackedU32
 * writes ceil(n / (32/bits)) little-endian u32 words, PackedNative ceil(n/2) bytes, Native n
 * bytes; padding fields are zero. */
void ember__pack_codes(const ember_qscheme *s, const uint8_t *codes, size_t n, uint8_t *dst);
/* The inverse: n codes from packed storage. Integer values are sign-extended from `bits` (as int8
 * bytes); fp values keep their raw bit pattern (E2M1: 0..15). */
void ember__unpack_codes(const ember_qscheme *s, const uint8_t *src, size_t n, uint8_t *codes);
/* Bytes one packed row of `len` values occupies. */
size_t ember__packed_row_bytes(const ember_qscheme *s, int64_t len);

/* ---- block layout ---- */
/* burn's BlockLayout::block_of: the row-major block index of row-major element i. */
size_t ember__block_of(const ember__qlayout *L, int rank, const int64_t *shape, size_t i);

/* ---- reference over host arrays (quant/reference.c): slow, simple, for tests and backends ---- */
/* Quantize n = numel floats into the full QuantizedBytes of layout L (L->total_bytes bytes).
 * raw_scales NULL: dynamic MinMax (no divisibility requirement here: a partial block's range is
 * over its own elements); else L->nscales raw f32 scales (static quantization: they are rounded
 * up / normalised as in dynamic quantization). Returns EMBER_ERR_NON_FINITE (no detail recorded)
 * on a NaN / Inf input, else EMBER_OK. */
ember_status ember__qref_quantize(const ember_qscheme *s, const ember__qlayout *L, int rank,
                                  const int64_t *shape, const float *x, const float *raw_scales,
                                  uint8_t *bytes);
/* Dequantize QuantizedBytes to numel floats. */
void ember__qref_dequantize(const ember_qscheme *s, const ember__qlayout *L, int rank,
                            const int64_t *shape, const uint8_t *bytes, float *out);
/* Effective f32 scales of stored QuantizedBytes (L->nscales of them). */
void ember__qref_effective_scales(const ember_qscheme *s, const ember__qlayout *L,
                                  const uint8_t *bytes, float *eff);

/* ---- layout helpers (quant/layout.c) ---- */
/* Same as ember__qlayout_make but records no error (for tests, capability queries). */
ember_status ember__qlayout_compute(const ember_qscheme *s, int rank, const int64_t *shape,
                                    ember__qlayout *out);
/* EMBER_OK when every dim of shape is a multiple of the block (dynamic per-block quantization),
 * else BLOCK_SHAPE with burn's message ("Tensor [..] must be evenly divisible by block size [..]").
 * Per-tensor schemes always pass. */
ember_status ember__qlayout_check_divisible(const char *op, const ember_qscheme *s, int rank,
                                            const int64_t *shape);
/* 1 when every block dim but the last is 1 (blocks are runs along the last axis). */
int ember__qlayout_row_blocks(const ember__qlayout *L, int rank);

#endif
