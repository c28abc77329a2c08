/* backends/opencl/cl_backend.h (private): the OpenCL backend's state, shared by its files.
 *
 * Devices. At init the backend walks every platform the ICD loader reports and every device of
 * each (GPU, accelerator, CPU, custom), keeps those that EMBER_OPENCL_PLATFORM /
 * EMBER_OPENCL_DEVICE select (an index, or a case-insensitive substring of the name), and gives
 * each kept device its own cl_context and in-order command queue. ember's opencl:i is the i-th
 * kept device. No platform, no device, or a selector that matches nothing: 0 devices, not an
 * error (a debug line says why with EMBER_LOG=debug).
 *
 * Buffers. A buffer is an ember__cl_buf (a cl_mem plus its size; a 0-byte buffer has no cl_mem),
 * owned by the tensor that holds it and released by buffer_free. Device memory is never
 * host-addressable through ember (host_ptr is NULL), even on a CPU device.
 *
 * Errors. Every failing CL call becomes EMBER_ERR_DEVICE with the op, the call, the CL error name
 * and its number in the detail: "gemm_f32: clEnqueueNDRangeKernel failed on opencl:0: CL_INVALID_
 * WORK_GROUP_SIZE (-54)". A program that does not build gives EMBER_ERR_KERNEL_BUILD with the
 * build log in the detail.
 *
 * Programs (cl_program.c). Built lazily, on first use, once per (device, source, options), and
 * kept until shutdown; the device's lock guards the list. Kernel objects are created per call
 * (clSetKernelArg is not thread-safe on a shared cl_kernel), so any thread may launch at any time.
 * An optional on-disk binary cache (EMBER_OPENCL_CACHE_DIR): the file
 * <dir>/ember-<16 hex>.clbin is keyed by an FNV-1a hash of (source, options, device name, device
 * version, driver version, platform version); a missing, unreadable or rejected file falls back
 * silently to building from source, and a fresh build is written back (to a temporary file, then
 * renamed, so concurrent processes never see half a file). Write failures are ignored.
 *
 * int8 matmul paths (cl_qmatmul.c). Each device gets one path at init, named in
 * ember_device_info.int8_matmul_path: "opencl.generic" (plain int MAC, any device),
 * "opencl.dot4" (cl_khr_integer_dot_product), and NVIDIA tensor-core paths ("mma", "wgmma")
 * defined in their own files (ember__cl_qpath_at). EMBER_OPENCL_KERNEL=generic|dot4|
 * mma|wgmma forces a choice; a forced path the device cannot run falls back to generic. */
#ifndef EMBER_CL_BACKEND_H
#define EMBER_CL_BACKEND_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#include <CL/cl.h>

#include "../../dispatch/bufcache.h"
#include "../../dispatch/internal.h"

typedef struct ember__cl_buf {
    cl_mem mem;   /* NULL for a 0-byte buffer */
    size_t bytes; /* the tensor's bytes */
    size_t cap;   /* mem's size (>= bytes: a buffer reused from the device's cache may be larger) */
} ember__cl_buf;

#define EMBER__CL_BCACHE_SLOTS 64 /* buffers in a device's cache at most */

typedef struct ember__cl_program {
    struct ember__cl_program *next;
    const char *src;   /* the source text (embedded, or the caller's for a test build) */
    uint64_t src_hash; /* FNV-1a of src */
    char *options;
    cl_program prog;
} ember__cl_program;

struct ember__cl_qpath;

/* The slots of ember__cl_scratch. */
enum {
    EMBER__CL_S_SCALE, /* q_matmul: the per-tensor epilogue factor sa * sb (one float) */
    EMBER__CL_S_SA,    /* q_matmul: the lhs's effective scales (per channel) */
    EMBER__CL_S_SB,    /* q_matmul: the rhs's effective scales */
    EMBER__CL_S_A,     /* tensor-core paths: A in the kernels' row layout */
    EMBER__CL_S_B,     /* tensor-core paths: B packed for this call (no cached pack) */
    EMBER__CL_S_WS,    /* tensor-core paths: the split-K workspace */
    EMBER__CL_S_CNT,   /* tensor-core paths: split-K tile counters (kept zero by the kernels) */
    EMBER__CL_SCRATCH_SLOTS
};

/* A kernel object kept for reuse (cl_program.c, ember__cl_run_kernel). */
typedef struct ember__cl_kentry {
    struct ember__cl_kentry *next;
    cl_program prog;
    char name[64];
    cl_kernel k;
} ember__cl_kentry;

/* Tests set 0 to create (and release) a kernel object per launch, as before the cache existed, so
 * that the fault walker sees every clCreateKernel. Default 1. */
extern int ember__cl_kernel_cache;

typedef struct ember__cl_device {
    cl_platform_id platform;
    cl_device_id id;
    cl_context ctx;
    cl_command_queue queue;
    cl_device_type type;
    char name[128], vendor[64], driver[64], version[64];
    char platform_name[128], platform_version[128];
    char extensions[256]; /* the extensions ember uses that this device has */
    int has_fp16, has_fp64, has_dot4, cr_divide;
    uint64_t mem_bytes, max_alloc;
    size_t max_wg;
    int compute_units;
    const struct ember__cl_qpath *qpath; /* the int8 matmul path chosen at init */
    char int8_path[48];
    pthread_mutex_t lock; /* guards `programs` */
    ember__cl_program *programs;
    /* Per-device temporaries of q_matmul, kept across calls (cl_scratch.c): a call used to create
     * and release up to 8 buffers, three of them written with blocking writes that each waited for
     * all queued work. `qlock` is held over a q_matmul's whole enqueue sequence: the queue is in
     * order, so a later call's writes into a slot run after an earlier call's reads of it. */
    pthread_mutex_t qlock;
    cl_mem scratch[EMBER__CL_SCRATCH_SLOTS];
    size_t scratch_bytes[EMBER__CL_SCRATCH_SLOTS];
    cl_mem consts[2]; /* [0]: a cl_long 0 (a batch of one's offset table); [1]: a 1.0f */
    /* Freed tensor buffers (ember__cl_buf, keyed by cap) kept for reuse (dispatch/bufcache.h):
     * the queue is in order, so a reused buffer's new contents are written after the commands
     * that read its old ones. */
    ember__bufcache bcache;
    /* Kernel objects by (program, name), created on first launch: clCreateKernel per launch cost
     * host time on every op. klock is held from the lookup to the enqueue, as a kernel object's
     * arguments are shared state. */
    pthread_mutex_t klock;
    ember__cl_kentry *kernels;
} ember__cl_device;

typedef struct ember__cl_state {
    ember_context *ctx;
    int ndev;
    ember__cl_device *dev; /* ndev entries */
    char cache_dir[512];   /* "" = no on-disk cache */
    /* Kernel shapes (GEMMs f32 and int8, the quantize reduction): 0 chooses by device (the
     * barrier-free "rows" GEMMs and the per-item absmax on CPU devices; the local-memory tiled
     * GEMMs and the work-group absmax on the others); 1 forces the latter, 2 the former (tests set
     * it to cover both on any device). */
    int gemm_variant;
    /* 1: quantize divides with the fma-corrected software division (kernels/quant.cl) even where
     * the device divides exactly (tests set it; devices without either exact path use it anyway);
     * 2: the same, starting 2 ulp away from the device's quotient (tests: the correction works). */
    int soft_div;
} ember__cl_state;

/* 1 when a GEMM of m rows on dev runs the barrier-free "rows" kernels (see gemm_variant). */
int ember__cl_gemm_rows(const ember__cl_state *s, int dev, int64_t m);
#define EMBER__CL_RM 8 /* rows per work item of the "rows" kernels (-DRM); 16 columns each */

/* ---- errors (cl_program.c) ---- */
/* "CL_INVALID_VALUE" for -30, ...; "CL_UNKNOWN_ERROR" for a code not in the table. Never NULL. */
const char *ember__cl_error_name(cl_int err);
/* Record EMBER_ERR_DEVICE: "<op>: <call> failed on opencl:<dev>: <NAME> (<err>)". */
ember_status ember__cl_fail(const char *op, const char *call, int dev, cl_int err);
#define EMBER_CL_TRY(op, call, dev, expr)                                                          \
    do {                                                                                           \
        cl_int ember__e = (expr);                                                                  \
        if (ember__e != CL_SUCCESS)                                                                \
            return ember__cl_fail((op), (call), (dev), ember__e);                                  \
    } while (0)

/* ---- programs and launches (cl_program.c) ---- */
/* The program of embedded source `name` (backends/opencl/kernels/<name>.cl) built with `options`
 * for device dev: from the in-memory cache, else the disk cache, else source.
 * KERNEL_BUILD (log in the detail), DEVICE, OUT_OF_MEMORY, INVALID_ARGUMENT (no such source). */
ember_status ember__cl_program_get(ember__cl_state *s, int dev, const char *name,
                                   const char *options, cl_program *out);
/* The same for a source given as text (used for the embedded sources, and by the tests to prove
 * the failure path with a deliberately broken kernel). `label` names it in the detail. */
/* The device's program cache, shared by every way of making a program: the program for (src,
 * options) from the cache, else build(s, dev, arg, &prog) makes it (under the device's lock) and
 * it is kept for the device's life. src is any NUL-terminated text that identifies the program
 * (the OpenCL C source, or the PTX module's text); entries are found by src's address first. */
typedef ember_status (*ember__cl_build_fn)(ember__cl_state *s, int dev, void *arg, cl_program *out);
ember_status ember__cl_program_cached(ember__cl_state *s, int dev, const char *src,
                                      const char *options, ember__cl_build_fn build, void *arg,
                                      cl_program *out);
ember_status ember__cl_program_get_src(ember__cl_state *s, int dev, const char *label,
                                       const char *src, const char *options, cl_program *out);
/* The options every ember program is built with on dev (the -D macros that say what the device
 * has, plus the exact-division flag when supported), followed by `extra`. */
void ember__cl_base_options(const ember__cl_device *d, const char *extra, char *buf, size_t cap);

/* One kernel argument: a value of `size` bytes at `ptr`, or local memory of `size` bytes when ptr
 * is NULL. */
typedef struct ember__cl_arg {
    size_t size;
    const void *ptr;
} ember__cl_arg;
#define EMBER_CL_ARG(v) ((ember__cl_arg){sizeof(v), &(v)})
#define EMBER_CL_LOCAL(bytes) ((ember__cl_arg){(bytes), NULL})

/* Build (or fetch) program `prog` with `options`, create kernel `kernel`, set the args and
 * enqueue it over `dims` dimensions (global sizes rounded up to the local sizes by the caller;
 * local may be NULL). Does not wait. `op` names the ember op in an error's detail. */
ember_status ember__cl_launch(ember__cl_state *s, int dev, const char *op, const char *prog,
                              const char *options, const char *kernel, int nargs,
                              const ember__cl_arg *args, cl_uint dims, const size_t *global,
                              const size_t *local);
/* The kernel-running half of ember__cl_launch, for a program obtained otherwise (the PTX module
 * of cl_qmatmul_mma.c): create the kernel, set its arguments, enqueue it; DEVICE on failure. */
ember_status ember__cl_run_kernel(ember__cl_state *s, int dev, const char *op, cl_program p,
                                  const char *kernel, int nargs, const ember__cl_arg *args,
                                  cl_uint dims, const size_t *global, const size_t *local);

/* Temporary device buffers for the ops (offset tables, scales): created from host data
 * (data may be NULL for an uninitialised one). bytes 0 is allowed (a 1-byte buffer). */
ember_status ember__cl_temp(ember__cl_state *s, int dev, const char *op, size_t bytes,
                            const void *data, cl_mem *out);
/* Slot `slot`'s buffer on dev, of at least `bytes` (grown as needed; a grown EMBER__CL_S_CNT is
 * filled with zeros by an enqueued fill). The caller holds dev's qlock until its last use of the
 * buffer is enqueued. OUT_OF_MEMORY / DEVICE on failure. */
ember_status ember__cl_scratch(ember__cl_state *s, int dev, int slot, size_t bytes, cl_mem *out);
/* dev's constant buffers (created on first use, kept until the device closes; the caller holds
 * qlock): *zero_off holds one cl_long 0, *one one float 1.0f. Either pointer may be NULL. */
ember_status ember__cl_consts(ember__cl_state *s, int dev, cl_mem *zero_off, cl_mem *one);
/* Release dev's scratch and constants (device close). */
void ember__cl_scratch_release(ember__cl_device *d);

/* Blocking reads and writes of a cl_mem, with the error mapped (op names the caller). */
ember_status ember__cl_read(ember__cl_state *s, int dev, const char *op, cl_mem m, size_t off,
                            void *dst, size_t bytes);
ember_status ember__cl_write(ember__cl_state *s, int dev, const char *op, cl_mem m, size_t off,
                             const void *src, size_t bytes);

/* The cl_mem of a tensor (NULL for an empty one). */
static inline cl_mem ember__cl_mem(const ember_tensor *t) {
    return t->buf ? ((const ember__cl_buf *)t->buf)->mem : NULL;
}

/* Round n up to a multiple of m (m > 0). */
static inline size_t ember__cl_round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* Work-group size for the 1-D elementwise kernels (256, or the device's limit when lower); global
 * sizes are rounded up to it. */
static inline size_t ember__cl_wg1(const ember__cl_device *d) {
    return d->max_wg >= 256 ? 256 : d->max_wg;
}

/* ---- f32 ops (cl_ops.c) ---- */
ember_status ember__cl_gemm_f32(void *state, int dev, const ember__gemm *g, const ember_tensor *a,
                                const ember_tensor *b, ember_tensor *c);
ember_status ember__cl_binary_f32(void *state, int dev, ember__binop op, const ember__bcast *bc,
                                  const ember_tensor *a, const ember_tensor *b, ember_tensor *out);
ember_status ember__cl_sum_rows_f32(void *state, int dev, const ember_tensor *x, int64_t rows,
                                    int64_t cols, ember_tensor *out);
ember_status ember__cl_convert(void *state, int dev, const ember_tensor *x, ember_tensor *out);
/* The nn ops' entries (cl_nn.c). */
extern const struct ember__nn_ops ember__cl_nn_ops;
/* Convert n elements between float dtypes on cl_mems (src and dst distinct). */
ember_status ember__cl_convert_mem(ember__cl_state *s, int dev, const char *op, cl_mem src,
                                   ember_dtype from, cl_mem dst, ember_dtype to, size_t n);

/* ---- quantization (cl_quant.c) ---- */
ember_status ember__cl_quantize(void *state, int dev, const ember_tensor *x,
                                const ember_tensor *scales, ember_tensor *q);
ember_status ember__cl_dequantize(void *state, int dev, const ember_tensor *q, ember_tensor *out);

/* The host half of quantization (the few block scales: rounding up to the scale dtype, the zero
 * guard, two-level normalisation) is quant/'s own code (ember__qscales_finish), so the stored
 * scales are the CPU backend's by construction; only per-element work runs on the device. */

/* ---- int8 matmul (cl_qmatmul.c) ---- */
/* One int8 GEMM for a path: out_i[r, c] = 0.0f + f(r, c) * (float)(A_i @ B_i)[r, c] with the
 * exact int32 sum, i < batch, where f = scale[0] (per-tensor operands: sa * sb, computed on the
 * device) or, when sa is not NULL, f = sa[r / a_group] * sb[c / b_group] (per-row scales of A,
 * per-column scales of B; one f32 multiply per element, as the CPU backend).
 * A_i is the int8 matrix at byte a_off[i] of `a`, row r / column c at byte r*lda + c (or, with
 * trans_a, element (r, c) at c*lda + r); likewise B_i (k x n) with ldb; out_i the dense row-major
 * m x n f32 block at element i*m*n of `out`. a_off / b_off are device buffers of `batch` cl_longs;
 * `scale` a device buffer holding one float; sa / sb device buffers of f32 scales. */
typedef struct ember__cl_qgemm_args {
    int trans_a, trans_b;
    int64_t m, n, k, batch;
    cl_mem a, b, out, a_off, b_off, scale;
    int64_t lda, ldb;
    /* appended: per-row / per-column scales (NULL: per-tensor, use `scale`) */
    cl_mem sa, sb;
    int64_t a_group, b_group;
    /* appended: the rhs tensor and the call's per-batch element offsets into it (host copy of
     * what b_off holds in bytes), for a path that keeps B packed in the tensor's pack cache;
     * NULL: pack per call */
    const ember_tensor *b_tensor;
    const int64_t *b_off_elems;
} ember__cl_qgemm_args;

typedef struct ember__cl_qpath {
    const char *name;  /* the EMBER_OPENCL_KERNEL spelling: "generic", "dot4", "mma", "wgmma" */
    const char *label; /* ember_device_info.int8_matmul_path: "opencl.generic" */
    int (*available)(const ember__cl_device *d);
    ember_status (*run)(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q);
    int per_channel; /* appended: 1 when run() honours sa / sb (else those calls take generic) */
} ember__cl_qpath;

/* The i-th path, best first ("wgmma" and "mma" when built in, "dot4", then "generic", which is
 * available everywhere); NULL past the end. A tensor-core path plugs in by defining one of
 *   const ember__cl_qpath ember__cl_qpath_wgmma = {"wgmma", "opencl.wgmma_sm90", ...};
 *   const ember__cl_qpath ember__cl_qpath_mma = {"mma", "opencl.mma_sm80", ...};
 * in its own backends/opencl/ file (cl_qmatmul_mma.c; cl_qmatmul.c references both). */
const ember__cl_qpath *ember__cl_qpath_at(size_t i);
/* Pick dev's path: `forced` ("" = best available) by name, else the best available. Sets
 * d->qpath and d->int8_path. */
void ember__cl_qpath_choose(ember__cl_device *d, const char *forced);
ember_status ember__cl_q_matmul(void *state, int dev, const ember__gemm *g, const ember_tensor *a,
                                const ember_tensor *b, ember_tensor *out);

#endif
