/* backends/cpu/cpu_quant.h (private): the CPU backend's quantize / dequantize and their ISA tiers.
 *
 * The driver (cpu_quant.c) splits a tensor, viewed as rows x last-axis columns, into tiles for
 * ember__cpu_parallel_for, and within a tile into sub-chunks whose first column is aligned to the
 * block length along the last axis and to 64 (so every sub-chunk starts on a block and on a packed
 * word). The kernels below work on one sub-chunk; the scalar and AVX-512 tiers produce identical
 * bytes (the arithmetic is quant/quant_impl.h's, step for step). */
#ifndef EMBER_CPU_QUANT_H
#define EMBER_CPU_QUANT_H

#include "../../quant/quant_impl.h"
#include "cpu_backend.h"

typedef struct ember__cpu_qkern {
    const char *name; /* "scalar", "avx512" */
    /* Blocks of bl values along the sub-chunk (the last may be shorter); bl == 0: one block of
     * all len values. m[k] = max over block k of (f32 bits & 0x7fffffff): as an unsigned integer
     * this orders like |x|, and >= 0x7f800000 means a NaN or Inf was seen. */
    void (*amax_blocks)(const float *x, size_t len, size_t bl, uint32_t *m);
    /* acc[i] = max(acc[i], f32 bits of x[i] & 0x7fffffff): a column's maximum over rows ([b, 1]
     * blocks) */
    void (*amax_acc)(const float *x, size_t len, uint32_t *acc);
    /* Integer values: q[i] = clamp(roundf(x[i] / e[k]), lo, hi) for i in block k. */
    void (*quant_int_blocks)(const float *x, size_t len, size_t bl, const float *e, float lo,
                             float hi, int8_t *q);
    /* Integer values: out[i] = e[k] * (float)q[i]. */
    void (*dequant_int_blocks)(const int8_t *q, size_t len, size_t bl, const float *e, float *out);
    /* ember__pack_codes / ember__unpack_codes (dst / src start on a storage unit). */
    void (*pack)(const ember_qscheme *s, const uint8_t *codes, size_t n, uint8_t *dst);
    void (*unpack)(const ember_qscheme *s, const uint8_t *src, size_t n, uint8_t *codes);
    /* n stored scales of dtype d from src as f32, times g where two is set: ember__scale_decode's
     * values, bit for bit (NaN payloads included) */
    void (*scales_f32)(const uint8_t *src, size_t n, ember_scale_dtype d, int two, float g,
                       float *dst);
} ember__cpu_qkern;

extern const ember__cpu_qkern ember__cpu_qkern_scalar;
/* The AVX-512 tier (cpu_quant_avx512.c); use only when the CPU has AVX-512 F, BW, DQ and VL. */
extern const ember__cpu_qkern ember__cpu_qkern_avx512;

/* The tier the CPU backend uses for this state: avx512 when the CPU has it and neither the
 * context's cpu_max_isa (scalar / avx2) nor the test hook below rules it out. */
const ember__cpu_qkern *ember__cpu_qkern_select(const ember__cpu_state *s);
/* Test hook: nonzero forces the scalar tier in every context (process-wide). */
void ember__cpu_quant_force_scalar(int on);

/* The effective scales of quantized CPU tensor q (ember__qtensor_effective_scales's values) into
 * dst[q->q.nscales], through the state's tier. */
void ember__cpu_effective_scales(const ember__cpu_state *s, const ember_tensor *q, float *dst);

/* The vtable entries (dispatch/backend.h). */
ember_status ember__cpu_quantize(void *state, int dev, const ember_tensor *x,
                                 const ember_tensor *scales, ember_tensor *q);
ember_status ember__cpu_dequantize(void *state, int dev, const ember_tensor *q, ember_tensor *out);

#endif
