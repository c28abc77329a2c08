/* ember/ops.h: tensor operations. Every op is checked by the dispatcher before any backend code
 * runs: operands must be live handles (MISUSE), on one backend (BACKEND_MISMATCH) and one device
 * (DEVICE_MISMATCH), with compatible shapes (SHAPE_MISMATCH, both shapes in the detail) and dtypes.
 * On failure *out is NULL and no input is modified. */
#ifndef EMBER_OPS_H
#define EMBER_OPS_H

#include <ember/export.h>
#include <ember/status.h>
#include <ember/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* a @ b over the last two axes, broadcasting the leading (batch) axes as burn does. A rank-1
 * operand is not promoted: both operands need rank >= 2. F32 (F16/BF16 computed in f32). With a
 * quantized operand this is ember_q_matmul. */
EMBER_API ember_status ember_matmul(const ember_tensor *a, const ember_tensor *b,
                                    ember_tensor **out);

/* Quantized matmul with burn's three arms: (Q,Q), (F,Q), (Q,F), chosen by dtype; (F,F) runs the
 * float matmul. Output: the float operand's dtype, F32 when both are quantized; with the
 * context's quant_propagation = PROPAGATE, re-quantized with the rhs's scheme. The result equals
 * burn's dequantize-then-matmul up to float rounding. With an enabled autodiff context the
 * output is a fresh tracked leaf.
 * Weight pre-packing (CPU backend, integer path): a quantized b is packed once into the kernels'
 * layout and the copy kept with the tensor until ember_tensor_free: roundup(k, 64) x roundup(n, 32)
 * bytes per [k, n] matrix for 8-bit values, half that for 4- and 2-bit, plus 4 bytes (2 where every
 * scale is an f16) per column per K block of scales; about the size of the Q8 tensor, 1 to 1.25x
 * the Q4 one (from 4 MiB of values and scales, or where the values fill whole 2 MiB pages to
 * within an eighth, e.g. 512 x 4096 int8, they take a mapping of their own on a 2 MiB boundary,
 * below 4 MiB rounded up to whole 2 MiB pages, so that Linux can back them with huge pages; when
 * the tensor is freed the mapping is kept for the next pack of about its size, within
 * cpu_buffer_cache_mib, until ember_context_trim). A first call with up to 128 rows on an 8-bit
 * Native b multiplies b as it is stored and packs nothing (AVX-512 VNNI without AMX: up to 16
 * rows, or 64 on a b of at most 1 M values; AVX2 and scalar tiers always pack): the second use
 * packs (a weight used once is never packed). The OpenCL
 * backend's mma and wgmma paths (NVIDIA) keep a packed copy on the device from the first call:
 * the packed size again, K and N rounded up to their tiles. Invisible to results.
 * Working memory (CPU, integer path): the context keeps one region between calls for the packed
 * a (roundup(m, 32) x roundup(k, 64) bytes) and, on AMX, up to 512 KiB of sums per thread (more
 * with block scales or 4-bit b: 64 x roundup(k, 64) bytes a thread), grown to the largest call
 * so far. From 2 MiB it starts on a 2 MiB boundary and asks Linux for transparent huge pages, so
 * the memory it uses rounds up to whole 2 MiB. ember_context_trim() frees it; a call made while
 * another thread's call holds it allocates its own for that call.
 * (F,Q) on the CPU: with an F32 a (any number of rows where the CPU has AVX-512; up to 256 rows
 * per batch with AVX2, 64 without) and b of 8-bit Native or 4-bit PackedU32 values (scales per
 * tensor, per column, in blocks of a multiple of 16 columns such as burn's per_block([32]) on a
 * [d_in, d_out] weight, or across the columns; blocks along K of any length), each weight
 * is dequantized in registers as it is read (the f32 multiply ember_dequantize does) and
 * multiplied into f32 sums: no dequantized copy, nothing packed (up to 64 KiB of each working
 * thread's stack for the sums of a block of 64 rows, and on AVX2 32 KiB for a chunk of dequantized
 * weights). Each row's result is the same, bit for bit, however many rows the call has (and on
 * AVX2 and AVX-512 alike). (Q,Q) with b's scales changing along K more often than every 32
 * rows (no int32 sum can span them) takes the same path on a's dequantized values. Other (F,Q) /
 * (Q,F) / (Q,Q) cases dequantize the quantized operands and run the float matmul, as burn does. */
EMBER_API ember_status ember_q_matmul(const ember_tensor *a, const ember_tensor *b,
                                      ember_tensor **out);

/* The dispatcher's guards for q_matmul, with the same status and detail, doing no work. */
EMBER_API ember_status ember_check_q_matmul(const ember_tensor *a, const ember_tensor *b);

/* y = x @ W + b, W is [d_in, d_out] (burn's layout, not transposed); bias may be NULL, else
 * [d_out]. x is [..., d_in]; y is [..., d_out]. A quantized W runs q_matmul then adds the bias. */
EMBER_API ember_status ember_linear(const ember_tensor *x, const ember_tensor *w,
                                    const ember_tensor *bias, ember_tensor **out);

/* Elementwise with numpy/burn broadcasting (trailing axes aligned, size-1 axes stretch). */
EMBER_API ember_status ember_add(const ember_tensor *a, const ember_tensor *b, ember_tensor **out);
EMBER_API ember_status ember_mul(const ember_tensor *a, const ember_tensor *b, ember_tensor **out);

/* burn's linear backward family (spec §3.1). Inputs must be untracked: a tracked input means a
 * second-order derivative, which burn does not support (NOT_DIFFERENTIABLE, burn's text).
 * dx = dy @ Wᵀ;  dW = flatten(x)ᵀ @ flatten(dy);  db = sum of dy over every axis but the last. */
EMBER_API ember_status ember_linear_x_backward(const ember_tensor *w, const ember_tensor *dy,
                                               ember_tensor **dx);
EMBER_API ember_status ember_linear_weight_backward(const ember_tensor *x, const ember_tensor *dy,
                                                    ember_tensor **dw);
EMBER_API ember_status ember_linear_bias_backward(const ember_tensor *dy, ember_tensor **db);

#ifdef __cplusplus
}
#endif
#endif
