/* ember/backend.h: the context, backends and devices.
 *
 * A context owns the backends' state (thread pool, OpenCL contexts and program caches). Create one
 * with ember_context_create() and destroy it with ember_context_destroy() after every tensor made
 * in it has been freed. One context may be shared by several threads. */
#ifndef EMBER_BACKEND_H
#define EMBER_BACKEND_H

#include <stdint.h>

#include <ember/dtype.h>
#include <ember/export.h>
#include <ember/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ember_backend {
    EMBER_BACKEND_CPU = 0,
    EMBER_BACKEND_OPENCL = 1,
    EMBER_BACKEND_COUNT
} ember_backend;

/* A device: a backend and the index of the device within it. The CPU backend has device 0. */
typedef struct ember_device {
    ember_backend backend;
    int index;
} ember_device;

typedef struct ember_context ember_context;

typedef enum ember_quant_propagation {
    EMBER_QUANT_INHIBIT = 0, /* burn's default: a quantized op returns a float tensor */
    EMBER_QUANT_PROPAGATE,   /* re-quantize the output with the rhs's scheme */
    EMBER_QUANT_PROPAGATION_COUNT
} ember_quant_propagation;

/* Start from ember_options_default(); fields are appended, never reordered. */
typedef struct ember_options {
    int num_threads;         /* 0: EMBER_NUM_THREADS, else the online CPUs */
    const char *cpu_max_isa; /* NULL: EMBER_CPU_MAX_ISA, else the best the CPU allows */
    int enable_opencl;       /* 1 (default): enumerate OpenCL devices; 0: CPU only */
    ember_quant_propagation quant_propagation; /* burn's default: INHIBIT (float output) */
    /* Opt-in, lossy: for (F,Q) / (Q,F) q_matmul, quantize the float operand per row (Q8S) on the
     * fly and run the integer kernel (W8A8) instead of burn's float path. 0 (default): off.
     * (CPU: per row of a float lhs, per column of a float rhs, scale max|x| / 127; an operand
     * with NaN or Inf takes burn's float path.) */
    int dynamic_activation_quant;
    /* appended. CPU: freed tensor buffers of 256 KiB or more are kept, up to this many MiB, and
     * handed to later allocations that fit, so that ops writing large outputs do not pay the page
     * faults of fresh memory on every call. -1 (default): EMBER_CPU_BUFFER_CACHE_MIB, else 512 MiB
     * or 1/8 of physical memory when that is less; 0: off. ember_context_trim() empties it. The
     * mappings of freed packed weights of 4 MiB or more (ember_q_matmul) are kept the same way,
     * under a second cap of the same size. */
    long long cpu_buffer_cache_mib;
    /* appended. OpenCL: the same for device buffers, per device (freed buffers of any size are
     * reused in the device's in-order queue, which avoids a driver allocation and release per op).
     * -1 (default): EMBER_OPENCL_BUFFER_CACHE_MIB, else 256 MiB or 1/16 of the device's memory
     * when that is less; 0: off. ember_context_trim() empties it. */
    long long opencl_buffer_cache_mib;
    /* appended. CPU: pin each worker thread of the context's pool to its own CPU of the process's
     * affinity mask (worker i to the mask's i-th CPU, the first left to the calling thread), when
     * the mask has at least num_threads CPUs. Without it the scheduler often put a woken worker on
     * the caller's CPU, so that one of the two ran a whole short call alone (measured on a 2-vCPU
     * VM: q_matmul at 1 x 4096^2 with 2 ms of other work between calls, 0.56 ms -> 0.36 ms). A
     * worker whose CPU the calling thread runs on when a call starts moves to a CPU of the mask
     * that no worker holds (else the two shared one CPU and one of them ran the call alone: 1024^3
     * q_matmul 700-800 us against 420-520 us). -1 (default): EMBER_CPU_PIN (0 or 1), else on; 0:
     * off; 1: on. The calling thread is never pinned. */
    int cpu_pin_threads;
    /* appended. CPU: how long an idle worker of the context's pool keeps polling for the next call
     * before it sleeps, in microseconds. A sleeping worker is woken by the next call, which on a
     * VM costs that call tens of microseconds (measured on a 2-vCPU VM: the caller 17-21 us in the
     * wake, the worker starting 35-58 us into the call), so an engine that calls back to back with
     * gaps a little longer than the default (decode: one small q_matmul after another, some other
     * work between them) gains from a longer spin, at the cost of a CPU kept busy that long after
     * every call (bench/bench_decode.c measures both). -1 (default): EMBER_CPU_SPIN_US, else
     * EMBER_CPU_SPIN_US_DEFAULT (10 us); 0: sleep at once; at most EMBER_CPU_SPIN_US_MAX (1 s). */
    long long cpu_spin_us;
} ember_options;
#define EMBER_CPU_SPIN_US_DEFAULT 10
#define EMBER_CPU_SPIN_US_MAX 1000000

typedef struct ember_device_info {
    char name[128], vendor[64], driver[64];
    char int8_matmul_path[48]; /* e.g. "cpu.amx", "cpu.avx512_vnni", "opencl.mma_sm80" */
    char blas_core[32];        /* CPU: the OpenBLAS core in use, e.g. "SkylakeX" */
    uint64_t memory_bytes;
    /* appended */
    char version[64];     /* OpenCL: the device's OpenCL version string; CPU: "" */
    char extensions[256]; /* OpenCL: the extensions ember uses that the device has */
    int compute_units;    /* CPU: the threads of the context's pool */
} ember_device_info;

/* The defaults: every field as documented above (0 / NULL / 1 for enable_opencl). */
EMBER_API ember_options ember_options_default(void);

/* Create a context. opts NULL means the defaults plus the environment (EMBER_CPU_MAX_ISA,
 * EMBER_NUM_THREADS, EMBER_CPU_PIN, EMBER_CPU_BUFFER_CACHE_MIB, EMBER_OPENCL_BUFFER_CACHE_MIB,
 * EMBER_OPENCL_PLATFORM, EMBER_OPENCL_DEVICE, EMBER_OPENCL_CACHE_DIR, EMBER_LOG), read once here.
 * Fields set in opts win over the environment.
 * @return EMBER_OK and *out set; on failure *out is NULL (INVALID_ARGUMENT for a bad option,
 *         OUT_OF_MEMORY). No OpenCL platform is not a failure: the backend has 0 devices. */
EMBER_API ember_status ember_context_create(const ember_options *opts, ember_context **out);

/* Destroy a context. NULL is a no-op. Tensors still alive become invalid. */
EMBER_API void ember_context_destroy(ember_context *ctx);

/* Give back the memory the context holds for reuse (the CPU and OpenCL buffer caches, and the CPU
 * int8 kernels' working region: see ember_q_matmul); tensors are untouched and the context stays
 * usable (the caches fill again as tensors are freed, the working region on the next q_matmul). A
 * working region held by a q_matmul running on another thread at that moment is kept.
 * @return EMBER_OK; MISUSE for a NULL or dead context. */
EMBER_API ember_status ember_context_trim(ember_context *ctx);

/* The number of devices of backend b (0 when the backend is absent or ctx is invalid). */
EMBER_API int ember_device_count(const ember_context *ctx, ember_backend b);

/* Describe a device. @return INVALID_ARGUMENT / BACKEND_UNAVAILABLE for a device that does not
 * exist; *out is untouched on failure. */
EMBER_API ember_status ember_device_describe(const ember_context *ctx, ember_device d,
                                             ember_device_info *out);

/* "cpu" / "opencl"; "unknown" for an invalid value. Never NULL. */
EMBER_API const char *ember_backend_name(ember_backend b);

/* The operations a capability query can ask about. */
typedef enum ember_op {
    EMBER_OP_STORE, /* can a tensor of this dtype (and scheme) live on the device */
    EMBER_OP_MATMUL,
    EMBER_OP_Q_MATMUL,
    EMBER_OP_QUANTIZE,
    EMBER_OP_DEQUANTIZE,
    EMBER_OP_ADD,
    EMBER_OP_MUL,
    EMBER_OP_LINEAR,
    EMBER_OP_COUNT
} ember_op;

/* Answer truthfully whether device d runs op on operands of dtype dt (and scheme s for
 * EMBER_QFLOAT; s may be NULL otherwise). *out is 1 or 0.
 * @return EMBER_OK, or INVALID_ARGUMENT / BACKEND_UNAVAILABLE for a bad query. */
EMBER_API ember_status ember_device_supports(const ember_context *ctx, ember_device d, ember_op op,
                                             ember_dtype dt, const ember_qscheme *s, int *out);

#ifdef __cplusplus
}
#endif
#endif
