/* backends/cpu/cpu_backend.h (private): the CPU backend's state, shared by its files.
 *
 * The CPU backend has one device (index 0). Buffers are 64-byte aligned host memory from the
 * ember allocator. f32 math goes to OpenBLAS (cblas); int8 matmul to ember's kernels in tiers
 * (scalar, avx2, avx512_vnni, amx) chosen at init from CPUID and the Linux AMX permission. */
#ifndef EMBER_CPU_BACKEND_H
#define EMBER_CPU_BACKEND_H

#include "../../dispatch/bufcache.h"
#include "../../dispatch/internal.h"

/* The CPU buffer cache (dispatch/bufcache.h): buffers of 256 KiB or more, 32 at most; smaller ones
 * go straight back to malloc. */
#define EMBER__CPU_BUFCACHE_MIN ((size_t)256 << 10)
#define EMBER__CPU_BUFCACHE_SLOTS 32
/* Its default cap: 512 MiB, or 1/8 of physical memory when that is less. */
size_t ember__cpu_bufcache_default_cap(void);

typedef struct ember__cpu_state {
    ember_context *ctx;
    int num_threads;       /* threads for ember's own kernels */
    int pin_threads;       /* pin the pool's workers to CPUs (ember_options.cpu_pin_threads) */
    long long spin_us;     /* an idle worker polls this long before it sleeps (cpu_spin_us) */
    char max_isa[32];      /* the cap asked for ("" = none) */
    char int8_path[48];    /* "cpu.amx", "cpu.avx512_vnni", "cpu.avx2+avx_vnni", "cpu.avx2",
                              "cpu.scalar" */
    void *kernels;         /* int8 kernel state (tier, thread pool): backends/cpu/qgemm*.c */
    ember__bufcache cache; /* freed tensor buffers kept for reuse */
    ember__bufcache packs; /* freed regions of large packed operands kept for reuse */
} ember__cpu_state;

/* Memory for the values of a large packed operand (from EMBER__CPU_REGION_MIN, or from
 * EMBER__CPU_REGION_SMALLEST where they fill their 2 MiB pages: qgemm.c, pack_values_alloc): a
 * mapping of its own, 2 MiB-aligned and advised huge (ember__map_huge), taken from the context's
 * cache of freed regions when one fits (s->packs; the same cap as the buffer cache), else mapped
 * fresh. *len gets the region's size, to give back with ember__cpu_region_put. s may be NULL (no
 * cache). NULL when no memory can be had. */
#define EMBER__CPU_REGION_MIN ((size_t)4 << 20)
#define EMBER__CPU_REGION_SMALLEST ((size_t)7 << 18) /* 1.75 MiB */
void *ember__cpu_region_get(ember__cpu_state *s, size_t bytes, size_t *len);
/* A region back to the context's cache, or unmapped when the cache declines it (or s is NULL). */
void ember__cpu_region_put(ember__cpu_state *s, void *p, size_t len);

/* A call's temporary working memory (and the heap memory of packs under EMBER__CPU_REGION_MIN),
 * from (and back to) the state's cache of freed tensor buffers: a first call's temporaries are
 * then the pages an earlier call faulted in, where fresh memory from the heap faulted in every 4
 * KiB page (7-11 us each on a Zen 5 VM). s may be NULL (heap memory). NULL when out of memory. */
void *ember__cpu_temp_get(ember__cpu_state *s, size_t bytes);
void ember__cpu_temp_put(ember__cpu_state *s, void *p);

/* Run fn(arg, task, thread) for task in [0, n_tasks) on the context's CPU threads (thread in
 * [0, num_threads)); returns when all are done. Tasks are handed out dynamically. The calling
 * thread takes part. With n_tasks <= 1 or one thread, runs inline. (backends/cpu/threadpool.c) */
typedef void (*ember__task_fn)(void *arg, int64_t task, int thread);
void ember__cpu_parallel_for(ember__cpu_state *s, int64_t n_tasks, ember__task_fn fn, void *arg);
/* One step of a thread's wait for another thread of the pool (the caller for the workers still in
 * a call, a task for the rows of A another task packs): a pause for the first steps, then the CPU
 * yielded between checks (*spins counts the steps; start it at 0). A wait that only spins starves
 * the thread it waits for wherever the threads outnumber the CPUs (100 pool threads on 2 CPUs;
 * under ThreadSanitizer, whose atomic loads and stores of one address share a lock, a crowd of
 * spinning waiters kept a packer's release store waiting for minutes). (threadpool.c) */
void ember__cpu_wait_step(int *spins);
/* How many of the pool's workers run pinned to one CPU (tests read it). */
int ember__cpu_pool_pinned(const ember__cpu_state *s);
/* How many times the pool's workers have gone to sleep after polling in vain (tests read it). */
long long ember__cpu_pool_sleeps(const ember__cpu_state *s);
/* How many parallel_for calls were handed to the pool's workers (not run inline; tests read it). */
long long ember__cpu_pool_jobs(const ember__cpu_state *s);
/* 1 when work that would take one thread about one_thread_s seconds and reads `bytes` is too
 * small to share with the pool (under 15 us, within 256 KiB, one core's L2): its caller runs it on
 * the calling thread (ember__cpu_parallel_for with no state). Handing part of it to the pool's
 * worker cost more than it saved; waking a worker that had gone to sleep cost 30-50 us a call on
 * a Zen 5 VM (the callers' measurements: qgemm.c, serial_product; fq_matmul.c). Always 0 while
 * the test hook ember__cpu_serial_off is set (set it only while no call runs). */
int ember__cpu_small_work(double one_thread_s, double bytes);
extern int ember__cpu_serial_off;
/* The CPU state of a context (its CPU backend is always present). */
ember__cpu_state *ember__cpu_state_of(const ember_context *ctx);

/* f32 ops (cpu_float.c) */
ember_status ember__cpu_gemm_f32(void *state, int dev, const ember__gemm *g, const ember_tensor *a,
                                 const ember_tensor *b, ember_tensor *c);
ember_status ember__cpu_binary_f32(void *state, int dev, ember__binop op, const ember__bcast *bc,
                                   const ember_tensor *a, const ember_tensor *b, ember_tensor *out);
ember_status ember__cpu_sum_rows_f32(void *state, int dev, const ember_tensor *x, int64_t rows,
                                     int64_t cols, ember_tensor *out);
ember_status ember__cpu_convert(void *state, int dev, const ember_tensor *x, ember_tensor *out);
/* The OpenBLAS core in use ("SkylakeX", "Prescott", ...). */
const char *ember__cpu_blas_core(void);

#endif
