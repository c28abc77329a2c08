/* ember/status.h: status codes, their fixed strings, and the per-thread error detail.
 *
 * Every fallible ember function returns an ember_status. EMBER_OK is 0; every error is negative.
 * Values are ABI: they are appended, never renumbered. The guard codes (-100 and below) stand for
 * one of burn's panics each; ember_status_str() gives the fixed message, which reuses burn's text.
 *
 * On failure a call also leaves a one-line detail for the calling thread in ember_last_error():
 * which op, which operands, which backends or devices, the OpenCL error or build log. A successful
 * call does not clear it (as libgit2); ember_clear_error() does. */
#ifndef EMBER_STATUS_H
#define EMBER_STATUS_H

#include <ember/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The one table of codes: X(name, value, fixed message). The enum, ember_status_name() and
 * ember_status_str() are all generated from it, so the three cannot drift apart. */
#define EMBER_STATUS_LIST(X)                                                                       \
    X(EMBER_OK, 0, "success")                                                                      \
    X(EMBER_ERR_INVALID_ARGUMENT, -1, "invalid argument")                                          \
    X(EMBER_ERR_OUT_OF_MEMORY, -2, "out of memory")                                                \
    X(EMBER_ERR_MISUSE, -3, "library misuse: NULL, freed or foreign handle")                       \
    X(EMBER_ERR_SHAPE_MISMATCH, -4, "shape mismatch")                                              \
    X(EMBER_ERR_DTYPE_MISMATCH, -5, "Invalid dtype (expected DType::QFloat, got another dtype)")   \
    X(EMBER_ERR_NON_FINITE, -6, "NaN or Inf where a finite value is required")                     \
    X(EMBER_ERR_BACKEND_MISMATCH, -100, "The provided tensors are not on the same backend.")       \
    X(EMBER_ERR_DEVICE_MISMATCH, -101, "Input tensor is on the wrong device")                      \
    X(EMBER_ERR_QUANT_TRANSFER, -102, "Local transfer of quantized tensors is not supported yet")  \
    X(EMBER_ERR_DTYPE_TRANSFER, -103, "Local transfer of this dtype is not supported yet")         \
    X(EMBER_ERR_FOREIGN_DEQUANTIZE, -104,                                                          \
      "dequantize must run on the backend that produced the tensor")                               \
    X(EMBER_ERR_QUANT_UNSUPPORTED, -105, "Quantization not supported yet")                         \
    X(EMBER_ERR_NOT_QUANTIZED, -106, "Quantization scheme is not valid for this dtype")            \
    X(EMBER_ERR_SUB_BYTE_NATIVE, -107, "Can't store native sub-byte values")                       \
    X(EMBER_ERR_UNSUPPORTED_SCHEME, -108, "Quantization not supported for scheme")                 \
    X(EMBER_ERR_PACKED_SHAPE, -109, "Can't store in u32")                                          \
    X(EMBER_ERR_BLOCK_SHAPE, -110, "Tensor must be evenly divisible by block size")                \
    X(EMBER_ERR_SCALE_DTYPE, -111, "UE8M0 scales are not yet supported")                           \
    X(EMBER_ERR_NOT_DIFFERENTIABLE, -120, "Can't differentiate a backward op")                     \
    X(EMBER_ERR_AUTODIFF_CONTEXT, -121, "Operation not marked for autodiff.")                      \
    X(EMBER_ERR_CHECKPOINT_MISMATCH, -122,                                                         \
      "Gradient checkpointing strategy mismatch. Tensors in the same operation must share a "      \
      "strategy.")                                                                                 \
    X(EMBER_ERR_AUTODIFF_TRANSFER, -123, "Autodiff tensor cannot be moved between backends.")      \
    X(EMBER_ERR_BACKEND_UNAVAILABLE, -200, "backend or device not available")                      \
    X(EMBER_ERR_DEVICE, -201, "device runtime failure")                                            \
    X(EMBER_ERR_KERNEL_BUILD, -202, "kernel build failed")

typedef enum ember_status {
#define EMBER__STATUS_ENUM(name, value, msg) name = value,
    EMBER_STATUS_LIST(EMBER__STATUS_ENUM)
#undef EMBER__STATUS_ENUM
} ember_status;

/* "EMBER_ERR_QUANT_TRANSFER" for EMBER_ERR_QUANT_TRANSFER; "EMBER_UNKNOWN_STATUS" for a value
 * not in the table. Never NULL; the string is static. */
EMBER_API const char *ember_status_name(ember_status s);

/* The fixed message of a code ("unknown status" for a value not in the table). Never NULL. */
EMBER_API const char *ember_status_str(ember_status s);

/* The detail of the last failure on the calling thread, "" when there is none. The pointer stays
 * valid until the next ember call on this thread. */
EMBER_API const char *ember_last_error(void);

/* The status of the last failure on the calling thread (EMBER_OK when none). */
EMBER_API ember_status ember_last_error_status(void);

/* Where the last failure was detected inside ember (source file, function, line), for bug
 * reports. Any output pointer may be NULL. Outputs are "" / 0 when there was no failure. */
EMBER_API void ember_last_error_location(const char **file, const char **func, int *line);

/* Forget the detail of the last failure on the calling thread. */
EMBER_API void ember_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
