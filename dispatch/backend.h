/* dispatch/backend.h (private): the backend interface, in the ggml-backend manner.
 *
 * Each backend provides exactly one `const struct ember_backend_ops` (backends/cpu/cpu_backend.c,
 * backends/opencl/cl_backend.c); dispatch/registry.c lists those built in. The dispatcher
 * (dispatch/) alone validates handles and enforces burn's guards; only then does it call an
 * entry here, so a backend may assume:
 *   - every tensor is live, on this backend, on device `dev`, with the dtype the entry expects;
 *   - shapes agree, and output tensors are allocated (buffer, shape, dtype, scheme set);
 *   - quantized inputs were produced on this very device.
 * Entries return EMBER_OK or a status recorded with EMBER_FAIL (DEVICE, KERNEL_BUILD,
 * OUT_OF_MEMORY). An entry marked (optional) may be NULL: the dispatcher then reports that the
 * device does not support the op (EMBER_ERR_BACKEND_UNAVAILABLE) or uses the fallback named.
 *
 * Buffers: `void *buf` is backend-private (CPU: a 64-byte aligned host pointer; OpenCL: a cl_mem
 * wrapper). Offsets and sizes are in bytes. */
#ifndef EMBER_DISPATCH_BACKEND_H
#define EMBER_DISPATCH_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include <ember/ember.h>

#define EMBER__BACKEND_API_VERSION 1

struct ember__nn_ops; /* dispatch/nn.h */

typedef enum ember__binop { EMBER__BINOP_ADD, EMBER__BINOP_MUL } ember__binop;

/* A (possibly batched) f32 GEMM: for i in [0, batch): C_i = alpha * op(A_i) @ op(B_i) + beta * C_i,
 * with op(X) = X or Xᵀ. A_i starts at element a_off[i] of a's buffer and is stored row-major
 * [m, k] (or [k, m] when trans_a); likewise B_i [k, n] (or [n, k]). C_i is the dense row-major
 * [m, n] block at element i*m*n of c. a_off / b_off hold `batch` entries each. */
typedef struct ember__gemm {
    int trans_a, trans_b;
    int64_t m, n, k, batch;
    const int64_t *a_off, *b_off;
    float alpha, beta;
} ember__gemm;

/* Broadcast elementwise: out[idx] = a[idx mod a-shape] op b[...] over out's shape. Strides are in
 * elements and 0 on broadcast axes; all three share `rank` (operands left-padded with 1s). */
typedef struct ember__bcast {
    int rank;
    int64_t shape[EMBER_MAX_RANK];
    int64_t a_stride[EMBER_MAX_RANK], b_stride[EMBER_MAX_RANK];
} ember__bcast;

struct ember_backend_ops {
    const char *name; /* "cpu", "opencl" */
    ember_backend kind;
    int api_version; /* EMBER__BACKEND_API_VERSION */

    /* required: set up the backend for a context (may find 0 devices: not an error) */
    ember_status (*init)(ember_context *ctx, const ember_options *opts, void **state);
    /* required: release everything init made; state may be NULL */
    void (*shutdown)(void *state);
    /* required */
    int (*device_count)(void *state);
    /* required: fill *out (already zeroed by the dispatcher) */
    ember_status (*device_describe)(void *state, int dev, ember_device_info *out);
    /* required: may a buffer of dtype dt (scheme s when dt is QFLOAT) live on dev */
    int (*holds)(void *state, int dev, ember_dtype dt, const ember_qscheme *s);
    /* (optional) finer capability answer for ember_device_supports; NULL: every op the vtable
     * has an entry for, on every dtype `holds` accepts */
    int (*supports)(void *state, int dev, ember_op op, ember_dtype dt, const ember_qscheme *s);

    /* required: memory */
    ember_status (*buffer_alloc)(void *state, int dev, size_t bytes, void **buf);
    void (*buffer_free)(void *state, int dev, void *buf);
    ember_status (*upload)(void *state, int dev, void *buf, size_t off, const void *src,
                           size_t bytes);
    ember_status (*download)(void *state, int dev, const void *buf, size_t off, void *dst,
                             size_t bytes);
    /* (optional) give back memory kept for reuse (ember_context_trim); NULL: nothing is kept */
    void (*trim)(void *state);
    /* (optional) wait for all queued work on dev; NULL: downloads are synchronous already */
    ember_status (*sync)(void *state, int dev);
    /* (optional) the host address of buf when the device shares host memory (CPU), else NULL */
    void *(*host_ptr)(void *state, int dev, void *buf);

    /* f32 compute; tensors are F32 */
    ember_status (*gemm_f32)(void *state, int dev, const ember__gemm *g, const ember_tensor *a,
                             const ember_tensor *b, ember_tensor *c);
    ember_status (*binary_f32)(void *state, int dev, ember__binop op, const ember__bcast *bc,
                               const ember_tensor *a, const ember_tensor *b, ember_tensor *out);
    /* out[j] = sum over rows r of x[r, j], x viewed as [rows, cols] */
    ember_status (*sum_rows_f32)(void *state, int dev, const ember_tensor *x, int64_t rows,
                                 int64_t cols, ember_tensor *out);
    /* (optional) convert between float dtypes (F32 <-> F16 / BF16), same shape */
    ember_status (*convert)(void *state, int dev, const ember_tensor *x, ember_tensor *out);

    /* quantization (quant/ gives the reference semantics). q is allocated with its scheme and
     * layout; x is F32 (the dispatcher converts F16/BF16 first). scales: NULL for dynamic
     * (MinMax), else an F32 tensor of the block-grid shape on the same device. */
    ember_status (*quantize)(void *state, int dev, const ember_tensor *x,
                             const ember_tensor *scales, ember_tensor *q);
    ember_status (*dequantize)(void *state, int dev, const ember_tensor *q, ember_tensor *out);
    /* (optional) the integer path of q_matmul. a and/or b are QFLOAT; a float operand is F32.
     * Shapes: a [..., m, k], b [..., k, n] with batch broadcasting already resolved into the
     * offsets of g (element offsets into the values for quantized operands). out is F32.
     * Returns EMBER_ERR_QUANT_UNSUPPORTED (without recording a detail) for a combination it does
     * not handle, and the dispatcher falls back to dequantize + gemm_f32. */
    ember_status (*q_matmul)(void *state, int dev, const ember__gemm *g, const ember_tensor *a,
                             const ember_tensor *b, ember_tensor *out);

    /* (optional) the neural-network ops of ember/nn.h (dispatch/nn.h lists the entries, each
     * optional in turn). NULL, or a NULL entry: the dispatcher downloads the operands, runs the
     * host kernel and uploads the result, so a backend needs no kernel of its own. */
    const struct ember__nn_ops *nn;
};

typedef struct ember_backend_ops ember_backend_ops;

/* dispatch/registry.c: the backends built in, indexed by ember_backend (NULL when absent). */
const ember_backend_ops *ember__backend_ops(ember_backend b);

#endif
