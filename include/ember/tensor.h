/* ember/tensor.h: tensor handles.
 *
 * A tensor is an opaque handle that lives on one device of one backend and is tagged with its
 * dtype, its shape, its quantization scheme (EMBER_QFLOAT only), the device that produced it and
 * its autodiff context. Handles carry a magic field: NULL, freed or foreign handles give
 * EMBER_ERR_MISUSE, never a crash (as long as the memory is still readable).
 * Tensors are row-major, rank 1..EMBER_MAX_RANK. No op modifies a tensor it takes as input. */
#ifndef EMBER_TENSOR_H
#define EMBER_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include <ember/backend.h>
#include <ember/dtype.h>
#include <ember/export.h>
#include <ember/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ember_tensor ember_tensor;

/* Create a tensor of dtype dt and the given shape on device dev, copying numel elements from
 * data (row-major, the dtype's size each). dt must not be EMBER_QFLOAT (use ember_quantize or
 * ember_qtensor_from_bytes).
 * @return EMBER_OK and *out; on failure *out is NULL: INVALID_ARGUMENT (bad dtype, rank outside
 *         1..8, negative dim, NULL data), SHAPE_MISMATCH (element count or byte size overflows),
 *         BACKEND_UNAVAILABLE (no such device), DTYPE_TRANSFER (the device cannot hold dt),
 *         OUT_OF_MEMORY, DEVICE. */
EMBER_API ember_status ember_tensor_from_data(ember_context *ctx, ember_device dev, ember_dtype dt,
                                              int rank, const int64_t *shape, const void *data,
                                              ember_tensor **out);

/* Copy a tensor's elements (row-major) into dst, which holds dst_bytes bytes.
 * @return INVALID_ARGUMENT when dst_bytes is smaller than the tensor (nothing written),
 *         DTYPE_MISMATCH for an EMBER_QFLOAT tensor (use the ember_qtensor_* calls). */
EMBER_API ember_status ember_tensor_read(const ember_tensor *t, void *dst, size_t dst_bytes);

/* Read several tensors with one device synchronisation (the end of an engine's step). Tensor i
 * goes into dsts[i] (dst_bytes[i] bytes). Every tensor is checked before anything is written:
 * any quantized tensor gives EMBER_ERR_QUANT_UNSUPPORTED ("Quantization not supported yet"). */
EMBER_API ember_status ember_tensor_read_many(const ember_tensor *const *ts, void *const *dsts,
                                              const size_t *dst_bytes, int n);

/* Free a tensor and everything it owns (device buffers, pre-packed weight caches). NULL is a
 * no-op; a handle that is not a live tensor is ignored. The handle is poisoned. */
EMBER_API void ember_tensor_free(ember_tensor *t);

/* Accessors. On an invalid handle: device {CPU, -1}, dtype EMBER_DTYPE_COUNT, rank 0, dim -1,
 * numel 0, and ember_last_error() says EMBER_ERR_MISUSE. */
EMBER_API ember_device ember_tensor_device(const ember_tensor *t);
EMBER_API ember_dtype ember_tensor_dtype(const ember_tensor *t);
EMBER_API int ember_tensor_rank(const ember_tensor *t);
EMBER_API int64_t ember_tensor_dim(const ember_tensor *t, int axis); /* -1 for a bad axis */
EMBER_API int64_t ember_tensor_numel(const ember_tensor *t);
/* The context the tensor belongs to (NULL on an invalid handle). */
EMBER_API ember_context *ember_tensor_context(const ember_tensor *t);

/* Copy a plain tensor to device dst (any backend). A quantized tensor gives
 * EMBER_ERR_QUANT_TRANSFER (nothing moves, the source is intact); a dtype the destination cannot
 * hold gives EMBER_ERR_DTYPE_TRANSFER; a tracked (autodiff) tensor moved to another backend gives
 * EMBER_ERR_AUTODIFF_TRANSFER. The copy keeps the autodiff context. */
EMBER_API ember_status ember_to_device(const ember_tensor *t, ember_device dst, ember_tensor **out);

/* The guards of ember_to_device without doing anything: the same status and detail. */
EMBER_API ember_status ember_check_to_device(const ember_tensor *t, ember_device dst);

/* ---- Autodiff context (burn-dispatch's DispatchAutodiffContext) ---- */
typedef enum ember_autodiff {
    EMBER_AUTODIFF_DISABLED = 0,
    EMBER_AUTODIFF_BALANCED,         /* enabled, GradientCheckpointingStrategy::Balanced */
    EMBER_AUTODIFF_NO_CHECKPOINTING, /* enabled, GradientCheckpointingStrategy::Disabled */
    EMBER_AUTODIFF_COUNT
} ember_autodiff;

/* Set the autodiff context of a float tensor. A quantized tensor is never tracked: enabling it
 * gives EMBER_ERR_AUTODIFF_CONTEXT ("only float tensors may use an autodiff primitive"), as does
 * enabling an integer or bool tensor. Setting EMBER_AUTODIFF_DISABLED is accepted on any tensor
 * (a no-op on those never tracked). */
EMBER_API ember_status ember_tensor_set_autodiff(ember_tensor *t, ember_autodiff a);
EMBER_API ember_autodiff ember_tensor_autodiff(const ember_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
