/* dispatch/internal.h (private): the context and tensor structs, shared by the dispatcher, quant/
 * and the backends. Nothing under include/ includes this. */
#ifndef EMBER_DISPATCH_INTERNAL_H
#define EMBER_DISPATCH_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <ember/ember.h>

#include "alloc.h"
#include "backend.h"
#include "error.h"

#define EMBER__CONTEXT_MAGIC 0x454d4243u /* "EMBC" */
#define EMBER__TENSOR_MAGIC 0x454d4254u  /* "EMBT" */
#define EMBER__DEAD_MAGIC 0xdeadbeefu    /* written into a freed handle */

/* Handles keep their magic past the first 16 bytes: once a block is freed, glibc's allocator
 * writes its free-list links there, and a freed handle whose memory is still mapped should still
 * read as "already freed" (EMBER__DEAD_MAGIC), not as a foreign pointer. */
struct ember_context {
    uint64_t allocator_reserved[2];
    uint32_t magic;
    ember_options opts; /* resolved: environment applied, cpu_max_isa points into isa[] */
    char isa[32];
    char opencl_platform[128], opencl_device[128], opencl_cache_dir[512];
    char opencl_kernel[16]; /* EMBER_OPENCL_KERNEL: a forced int8 path ("" = the best) */
    struct {
        const ember_backend_ops *ops; /* NULL when not built in */
        void *state;                  /* the backend's own, from init */
    } be[EMBER_BACKEND_COUNT];
};

/* Where the parts of a quantized tensor's buffer lie: burn's QuantizedBytes layout, exactly.
 * [0, values_bytes): the values (i8 / fp8 bytes for Native, little-endian u32 words for
 * PackedU32, two fp4 per byte for PackedNative), then the block scales (nscales of scale_size
 * bytes in the scale dtype; a per-tensor scheme has one), then the global f32 scale (two-level
 * only). */
typedef struct ember__qlayout {
    size_t values_bytes;
    size_t scales_offset, scale_size, nscales;
    size_t global_offset, global_bytes; /* global_bytes is 0 or 4 */
    size_t total_bytes;
    int grid_rank;
    int64_t grid[EMBER_MAX_RANK]; /* the scale grid: ceil(shape/block) per axis, [1] per-tensor */
    int64_t block_full[EMBER_MAX_RANK]; /* the block dims left-padded with 1s to the rank */
} ember__qlayout;

/* A backend's cached copy of a quantized operand in its kernel's layout (weight pre-packing).
 * Filled on first use under `lock`, freed with the tensor; invisible to semantics. */
typedef struct ember__pack_cache {
    pthread_mutex_t lock;
    void *data;
    size_t bytes;
    int kind; /* backend-defined layout id */
    void (*release)(void *backend_state, void *data);
} ember__pack_cache;

struct ember_tensor {
    uint64_t allocator_reserved[2]; /* see struct ember_context */
    uint32_t magic;
    ember_context *ctx;
    ember_device device;
    ember_dtype dtype;
    int rank;
    int64_t shape[EMBER_MAX_RANK];
    size_t numel;
    ember_autodiff autodiff;
    void *buf;     /* backend buffer (see dispatch/backend.h) */
    size_t nbytes; /* bytes of buf in use */
    /* EMBER_QFLOAT only */
    ember_qscheme scheme;
    ember_device producer; /* the device that quantized (or loaded) it */
    ember__qlayout q;
    ember__pack_cache pack;
};

/* ---- handle checks (dispatch/tensor.c) ---- */
/* EMBER_OK when t is a live tensor; else records MISUSE naming `what` (e.g. "matmul lhs"). */
ember_status ember__check_tensor(const ember_tensor *t, const char *what);
ember_status ember__check_context(const ember_context *ctx, const char *what);
/* The backend ops / state of t's device. */
const ember_backend_ops *ember__ops_of(const ember_context *ctx, ember_backend b);
void *ember__state_of(const ember_context *ctx, ember_backend b);
/* EMBER_OK when dev names an existing device of ctx, else BACKEND_UNAVAILABLE / INVALID_ARGUMENT
 * with the detail naming `what`. */
ember_status ember__check_device(const ember_context *ctx, ember_device dev, const char *what);

/* Allocate a tensor struct plus a device buffer of `nbytes` (nothing uploaded). For QFLOAT the
 * caller fills scheme / q / producer and passes q.total_bytes. autodiff starts DISABLED. */
ember_status ember__tensor_alloc(ember_context *ctx, ember_device dev, ember_dtype dt, int rank,
                                 const int64_t *shape, size_t nbytes, ember_tensor **out);
/* Validate rank and shape and compute numel and the byte size for a plain dtype. */
ember_status ember__shape_bytes(ember_dtype dt, int rank, const int64_t *shape, size_t *numel,
                                size_t *nbytes);
/* Release a tensor without the handle checks (used on error paths inside ember). */
void ember__tensor_destroy(ember_tensor *t);

/* "cpu:0", "opencl:1" into buf (at least 24 bytes). */
const char *ember__device_str(ember_device d, char *buf, size_t cap);
/* "[2, 3, 4]" into buf. */
const char *ember__shape_str(int rank, const int64_t *shape, char *buf, size_t cap);

/* ---- shared by the ops of the dispatcher (dispatch/shape.c) ---- */
/* Same backend and same device, else BACKEND_MISMATCH ("The provided tensors are not on the same
 * backend. Got backends cpu and opencl.") / DEVICE_MISMATCH, naming `op`. */
ember_status ember__check_same_device(const char *op, const ember_tensor *a, const ember_tensor *b);

/* The shape of a (batched, broadcast) matmul a[..., m, k] @ b[..., k, n]: out_shape, and for each
 * of the `batch` products the element offsets of its A and B blocks (a_off / b_off, owned by the
 * plan). SHAPE_MISMATCH with both shapes in the detail, naming `op`. */
typedef struct ember__matmul_plan {
    int rank;
    int64_t out_shape[EMBER_MAX_RANK];
    int64_t m, n, k, batch;
    int64_t *a_off, *b_off;
} ember__matmul_plan;
ember_status ember__matmul_plan_make(const char *op, const ember_tensor *a, const ember_tensor *b,
                                     ember__matmul_plan *p);
void ember__matmul_plan_free(ember__matmul_plan *p);
/* The plan's products as one backend request: no transposes, alpha 1, beta 0 (the offsets stay
 * owned by the plan). */
ember__gemm ember__matmul_plan_gemm(const ember__matmul_plan *p);

/* ---- autodiff context (dispatch/autodiff.c) ---- */
/* burn's merge of two operands' autodiff contexts (spec §1.2, validate_checkpointing):
 * DISABLED with x gives x (the association is promoted); equal strategies give that strategy;
 * two different enabled strategies give CHECKPOINT_MISMATCH with burn's text ("Gradient
 * checkpointing strategy mismatch: Balanced vs Disabled. Tensors in the same operation must share
 * a strategy."), the detail naming `op`. *result is written only on success. */
ember_status ember__autodiff_merge(const char *op, ember_autodiff a, ember_autodiff b,
                                   ember_autodiff *result);
/* burn's Debug name of an enabled context's strategy: "Balanced", "Disabled" (= ember's
 * NO_CHECKPOINTING); "None" for EMBER_AUTODIFF_DISABLED. */
const char *ember__autodiff_strategy_name(ember_autodiff a);

/* ---- quant/ ---- */
/* 1 when ember_qscheme_validate(s) would pass; records no error. */
int ember__qscheme_is_valid(const ember_qscheme *s);
/* The layout of a quantized tensor of scheme s and this shape, validating both against each other
 * (BLOCK_SHAPE, PACKED_SHAPE, ...; the detail names `op`). */
ember_status ember__qlayout_make(const char *op, const ember_qscheme *s, int rank,
                                 const int64_t *shape, ember__qlayout *out);
/* Allocate an unfilled quantized tensor on dev (producer = dev). */
ember_status ember__qtensor_alloc(ember_context *ctx, ember_device dev, const ember_qscheme *s,
                                  int rank, const int64_t *shape, ember_tensor **out);
/* The effective f32 scale of every block (g * s_b for two-level), row-major over the grid,
 * read from the tensor (downloaded from its device when needed). dst holds q->q.nscales. */
ember_status ember__qtensor_effective_scales(const ember_tensor *q, float *dst);

/* ---- float <-> half conversions (dispatch/half.c): round to nearest even, NaN kept ---- */
uint16_t ember__f32_to_f16(float f);
float ember__f16_to_f32(uint16_t h);
uint16_t ember__f32_to_bf16(float f);
float ember__bf16_to_f32(uint16_t h);

#endif
