/* ember/quant.h: burn's quantization model, bit-exact (spec/burn-semantics.md §4).
 *
 * Quantized data is what burn produces byte for byte: q = clamp(round_half_away(x / s), a, b)
 * dividing by the stored scale (after rounding it up to the scale dtype), no zero point, and the
 * serialized form is burn's QuantizedBytes layout.
 *
 * Arithmetic (identical on every backend, device and CPU kernel tier; every step one IEEE f32
 * operation):
 *   - MinMax: alpha = max |x| over the tensor or the block; NaN / Inf input: EMBER_ERR_NON_FINITE.
 *   - raw scale s = alpha / ((b - a) / 2), equal to burn's (2 * alpha) / (b - a) (Q8S alpha/127,
 *     Q8F 2*alpha/255, Q4S alpha/7, Q4F 2*alpha/15, Q2S alpha, Q2F 2*alpha/3, E4M3 alpha/448,
 *     E5M2 alpha/57344, E2M1 alpha/6).
 *   - two-level: g = max(max_b s_b / M, FLT_MIN) with M the block dtype's max (F16 65504, UE4M3
 *     448); the block scales become s_b / g; the effective scale of a block is g * stored.
 *   - stored scale = burn's round_up to the scale dtype (saturating at its max); a stored scale
 *     that is not > 0 (an all-zero block) becomes FLT_MIN rounded up to the dtype (burn-flex):
 *     F32 / BF16 FLT_MIN, F16 2^-24, UE4M3 2^-9.
 *   - integer values: q = clamp(roundf(x / e), a, b), half AWAY from zero (burn's CPU backends;
 *     cubecl's half-to-even differs only at exact ties), e = the stored (effective) scale.
 *   - fp values (E4M3 = e4m3fn, E5M2, E2M1): clamp(x / e, -max, max) encoded to the nearest
 *     representable value, ties to even. Dequantize: x' = e * q (or e * decode(q)).
 *
 * Blocks: `block` is aligned to the trailing axes and left-padded with 1s (leading 1s of the
 * block are dropped first, as burn canonicalises BlockSize); a block with more non-1 dims than the
 * tensor has axes is BLOCK_SHAPE. The scale grid is ceil(shape / block) per axis, row-major.
 *   - ember_quantize (dynamic MinMax) needs whole blocks, as burn's reduce_blocks does: every
 *     axis must be a multiple of its block dim, else BLOCK_SHAPE "Tensor [..] must be evenly
 *     divisible by block size [..]".
 *   - ember_quantize_static and ember_qtensor_from_bytes accept any shape: a partial block at the
 *     edge of an axis is a block of its own with its own scale (burn's num_blocks rounds up).
 *
 * Packing: PackedU32 (any value type) and PackedNative (E2M1 only, two per byte) pack along the
 * last axis only (packing_dim 0; any other is PACKED_SHAPE). Every row starts on a fresh word and
 * a row whose length is not a multiple of the values per word ends in a zero-padded partial word
 * (burn's storage_elements: [3, 3] Q4 takes 3 words). cubecl's "Can't store in u32" for such rows
 * is therefore not an error in ember. Value j of a word sits at bits [j*bits, (j+1)*bits), LSB
 * first, two's complement masked; words are little-endian. */
#ifndef EMBER_QUANT_H
#define EMBER_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include <ember/backend.h>
#include <ember/dtype.h>
#include <ember/export.h>
#include <ember/status.h>
#include <ember/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* burn's quantize_dynamic (MinMax): quantize a float tensor (F32, F16, BF16) with scheme s, on the
 * tensor's device. The result is EMBER_QFLOAT, records that device as its producer, and is never
 * tracked by autodiff. Errors: NON_FINITE (NaN/Inf input), BLOCK_SHAPE (a block that does not
 * divide the shape), SUB_BYTE_NATIVE, UNSUPPORTED_SCHEME, PACKED_SHAPE, SCALE_DTYPE,
 * DTYPE_MISMATCH (x is not float). *out is NULL on failure. */
EMBER_API ember_status ember_quantize(const ember_tensor *x, const ember_qscheme *s,
                                      ember_tensor **out);

/* Quantize with given scales: an F32 tensor with the shape of the block grid ([1] per-tensor; any
 * shape of one element is accepted), on x's device. Partial edge blocks are allowed (see above).
 * The scales are rounded up to the scheme's scale dtype first, as burn does. For a two-level
 * scheme the scales are the raw per-block scales; they are normalised as in quantize.
 * Errors: as ember_quantize (except the divisibility rule), plus BLOCK_SHAPE (scales not of the
 * grid's shape: "Invalid per-block quantization: ..."), DTYPE_MISMATCH (scales not F32),
 * BACKEND_MISMATCH / DEVICE_MISMATCH (scales elsewhere), NON_FINITE (a NaN / Inf scale),
 * INVALID_ARGUMENT (a negative scale, or scales NULL). A zero scale takes the FLT_MIN guard. */
EMBER_API ember_status ember_quantize_static(const ember_tensor *x, const ember_qscheme *s,
                                             const ember_tensor *scales, ember_tensor **out);

/* Dequantize to F32 on the backend and device that produced q. */
EMBER_API ember_status ember_dequantize(const ember_tensor *q, ember_tensor **out);
/* Dequantize to dt (F32, F16 or BF16; F16 only where the device holds F16, else DTYPE_TRANSFER).
 * F16 / BF16 are the F32 result rounded to nearest even. INVALID_ARGUMENT for another dt. */
EMBER_API ember_status ember_dequantize_to(const ember_tensor *q, ember_dtype dt,
                                           ember_tensor **out);
/* The per-backend entry point an engine may call directly: refuses (FOREIGN_DEQUANTIZE) unless q
 * was produced on dev, as burn's router refuses to dequantize a foreign tensor. */
EMBER_API ember_status ember_backend_dequantize(ember_context *ctx, ember_device dev,
                                                const ember_tensor *q, ember_tensor **out);

/* The scheme of a quantized tensor. NOT_QUANTIZED on a float tensor, with "Quantization scheme is
 * not valid for dtype F32" in the detail. */
EMBER_API ember_status ember_tensor_qscheme(const ember_tensor *t, ember_qscheme *out);

/* The quantized values as i8, one per element, row-major (count must be at least numel);
 * fp8/fp4 values are returned as their raw bit patterns. */
EMBER_API ember_status ember_qtensor_values(const ember_tensor *q, int8_t *dst, size_t count);
/* The stored scales decoded to f32, row-major over the block grid ([1] for per-tensor); count
 * must be at least the number of scales. ember_qtensor_scale_count() tells how many. */
EMBER_API ember_status ember_qtensor_scales(const ember_tensor *q, float *dst, size_t count);
EMBER_API ember_status ember_qtensor_scale_count(const ember_tensor *q, size_t *count);
/* The global f32 scale of a two-level scheme; INVALID_ARGUMENT for other schemes,
 * NOT_QUANTIZED for floats. */
EMBER_API ember_status ember_qtensor_global_scale(const ember_tensor *q, float *out);

/* Serialize in burn's QuantizedBytes layout. dst NULL: *len = size needed, EMBER_OK. cap too
 * small: INVALID_ARGUMENT and *len = size needed. */
EMBER_API ember_status ember_qtensor_to_bytes(const ember_tensor *q, void *dst, size_t cap,
                                              size_t *len);
/* Build a quantized tensor on dev from burn's QuantizedBytes. len must be exactly the size the
 * scheme and shape need: SHAPE_MISMATCH otherwise, the detail says how many bytes were expected
 * (values, scales, global scale). Any value the storage bits can hold is accepted (e.g. -128
 * under Q8S, nonzero padding bits), as burn does, and is given back unchanged by to_bytes. */
EMBER_API ember_status ember_qtensor_from_bytes(ember_context *ctx, ember_device dev,
                                                const ember_qscheme *s, int rank,
                                                const int64_t *shape, const void *bytes, size_t len,
                                                ember_tensor **out);

/* Dequantize q on its producer, move the floats to dst, and quantize them there with the same
 * scheme: the explicit, opt-in way around EMBER_ERR_QUANT_TRANSFER that burn's docs recommend.
 * The source's scales are reused, so single-level schemes arrive bit-exact; a two-level scheme
 * re-normalises its block scales and may move a value by one quantization step. */
EMBER_API ember_status ember_requantize_to_device(const ember_tensor *q, ember_device dst,
                                                  ember_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
