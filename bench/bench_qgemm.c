/* bench/bench_qgemm.c: int8 matmul, ember's CPU kernels side by side with oneDNN 2.6 and OpenBLAS,
 * in one run, interleaved (every round runs each row once, in turn, from a start that moves by one
 * row each round), medians.
 *
 * Rows per shape (M x N x K) and thread count:
 *   ember_q8_cached  Q8S x Q8S, B packed once (the inference setting), f32 out with the scales
 *   ember_q8_first   a first call: B packed on every call (M <= 128: what the library runs on
 *                    such a first call instead, B multiplied as it is stored: AMX for 2..128
 *                    rows, AVX-512 VNNI for one row or without AMX)
 *   ember_q4_cached  Q8S activations x Q4S weights (blocks of 32 along K, or --block, f16
 *                    scales; A per row and block), packed once
 *   ember_q8_blocked Q8S activations x Q8S weights with the Q4 row's blocks and scales, packed
 *                    once: burn's block-quantized 8-bit weights
 *   (a K that the block does not divide: one block, the whole K)
 *   dnnl_reordered   oneDNN s8s8->s32 matmul, B reordered once into its preferred layout
 *   dnnl_plain       oneDNN s8s8->s32 matmul on plain row-major B
 *   blas_sgemm       OpenBLAS sgemm on the dequantized operands (core name printed)
 * Ceilings measured in the same run: AMX and AVX-512 VNNI register-only peaks (with two threads
 * the AMX one also on one thread alone, and the multiple: near 1 where the two share one tile
 * unit, as on issue 5's machine, near 2 where each has a core's), the AMX 2 x 2 step
 * on random operand tiles loaded from L1 each step (the tile unit runs slower on operands that
 * change than on the register-only loop's fixed ones), the AMX 2 x 2 tile loop with its operands
 * (random bytes) in L2 (one cached-product task of 256 x 512 x 2048 run over and over
 * without its epilogue: what a kernel whose blocks do not fit L1 can reach; column %loop) and the
 * read bandwidth of a 16 MiB buffer (the L3-resident size of a 4096 x 4096 int8 weight) with the
 * same threads. For decode shapes (M <= 8) the roofline is 2 * M ops per weight byte at the read
 * bandwidth of a row inside the interleaved rounds: one pass over a buffer of the weights' size
 * (K x N bytes) on ember's pool, so that the probe meets the same cache conditions as the kernel
 * rows (the other rows' data pass between two passes, as between two calls of a kernel row; the
 * ceiling probe above reads one buffer over and over, so it finds it hot in the cache, and the
 * kernel rows never do). Both figures are printed. The e_q4 row has a roofline of its own: its
 * pack's bytes (values and scales) at the in-round read rate of a buffer that size, printed with
 * its ratio to the Q8 roofline (the most Q4 / Q8 can read at M = 1 in that round).
 *
 * Usage: bench_qgemm [--json] [--quick] [--threads 1|2] [--reps N] [--shape M,N,K] [--blas-apart]
 *                    [--block N]
 * --shape: run that one shape (any M, N, K >= 1) instead of the table.
 * --reps: rounds per shape, up to 64 (default 5, 7, 11 or 31, fewer for larger products).
 * --block: the K block of the e_q4 and e_q8b rows (a multiple of 32; default 32).
 * The ember rows run the tier a context gets: EMBER_CPU_MAX_ISA caps it as in the library.
 * --blas-apart: at M <= 8, time the f32 BLAS row after the interleaved int8 rounds instead of
 * within them (its 64 MiB of f32 weights push the int8 weights out of the cache between calls,
 * and the decode rows are then measured against a bandwidth they do not get).
 * The program re-executes itself with OPENBLAS_CORETYPE=SkylakeX when unset (OpenBLAS misdetects
 * this CPU), and then also with short idle spins for OpenBLAS and OpenMP (see main). */
#include <dlfcn.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "backends/cpu/qgemm.h"
#include "bench_common.h"
#include "blas_coretype.h"

#ifdef EMBER_BENCH_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

char *openblas_get_corename(void);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---------------------------------------------------------------- ceilings */

typedef struct peak_arg {
    int which; /* 0 AMX, 1 VNNI, 2 bandwidth, 3 AMX loop from L2, 4 AMX step on tiles from L1 */
    int64_t iters;
    const uint8_t *buf;
    size_t bytes;
    double ops;
    double t0, t1; /* this thread's own start and end */
    pthread_barrier_t *bar;
} peak_arg;

static void *peak_thread(void *p) {
    peak_arg *a = p;
    /* this thread's four sets of random operand tiles (which == 4) */
    uint8_t l1[EMBER__QPEAK_L1_BYTES] __attribute__((aligned(64)));
    if (a->which == 4)
        bench_fill_bytes(l1, sizeof l1, 0x9e3779b97f4a7c15u ^ (uint64_t)(uintptr_t)a);
    pthread_barrier_wait(a->bar);
    a->t0 = now();
    if (a->which == 4) {
        a->ops = ember__qpeak_amx_l1(a->iters, l1);
    } else if (a->which == 0) {
        a->ops = ember__qpeak_amx(a->iters);
    } else if (a->which == 1) {
        a->ops = ember__qpeak_vnni(a->iters);
    } else if (a->which == 3) {
        a->ops = ember__qpeak_amx_l2(a->iters, a->buf);
    } else {
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int64_t it = 0; it < a->iters; it++) {
            const uint64_t *w = (const uint64_t *)a->buf;
            for (size_t i = 0; i < a->bytes / 8; i += 4) {
                s0 += w[i];
                s1 += w[i + 1];
                s2 += w[i + 2];
                s3 += w[i + 3];
            }
        }
        a->ops = (double)a->bytes * (double)a->iters + (double)((s0 ^ s1 ^ s2 ^ s3) & 1);
    }
    a->t1 = now();
    return NULL;
}

/* The CPU for probe thread t of nt in *one: the t-th of the process's allowed CPUs. 0 (no pin)
 * where fewer than nt are allowed or the mask cannot be read. */
static int probe_cpu(int t, int nt, cpu_set_t *one) {
    cpu_set_t all;
    if (sched_getaffinity(0, sizeof all, &all) != 0 || CPU_COUNT(&all) < nt)
        return 0;
    for (size_t c = 0, seen = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all) && seen++ == (size_t)t) {
            CPU_ZERO(one);
            CPU_SET(c, one);
            return 1;
        }
    return 0;
}

/* ops (or bytes) per second with nt threads, over the span from the first thread's start to the
 * last one's end, as the threads read the clock themselves. Until 2026-12-01 the calling thread
 * read it after the start barrier: with as many threads as vCPUs it often ran only when a
 * worker's time slice ended, so the span came out short and the ceilings high (on the 2-vCPU
 * Zen 5, two threads' VNNI peak read 1079-3379 GOPS in three runs against 864 for one thread,
 * and the read bandwidth 83-1488 GB/s). Until 2026-12-02 the threads were not pinned: a probe's
 * new threads often ran on the creator's vCPU together for much of their few milliseconds, and
 * on the Zen 5 two threads' VNNI peak read 908-1774 GOPS in ten runs (one thread alone about
 * 880, ember's own 2048^3 product 1600); each on a CPU of its own, 1488-1830 (mostly ~1770) in
 * six, and the 16 MiB read 73-95 GB/s against 49-82. */
static double ceiling(int which, int nt, int64_t iters, const uint8_t *buf, size_t bytes) {
    pthread_t th[8];
    peak_arg a[8];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nt);
    for (int t = 0; t < nt; t++) {
        a[t] = (peak_arg){which,
                          iters,
                          buf ? buf + (bytes / (size_t)nt) * (size_t)t : NULL,
                          bytes / (size_t)nt,
                          0,
                          0,
                          0,
                          &bar};
        /* each thread on a CPU of its own (the t-th the process may run on): unpinned, the new
         * threads of a short probe often shared the creator's vCPU for much of it */
        pthread_attr_t attr;
        cpu_set_t one;
        const int pin = probe_cpu(t, nt, &one);
        pthread_attr_init(&attr);
        if (pin)
            pthread_attr_setaffinity_np(&attr, sizeof one, &one);
        if (pthread_create(&th[t], &attr, peak_thread, &a[t]) != 0 && pin)
            pthread_create(&th[t], NULL, peak_thread, &a[t]); /* the pin refused: unpinned */
        pthread_attr_destroy(&attr);
    }
    double ops = 0, t0 = 0, t1 = 0;
    for (int t = 0; t < nt; t++) {
        pthread_join(th[t], NULL);
        ops += a[t].ops;
        t0 = t == 0 || a[t].t0 < t0 ? a[t].t0 : t0;
        t1 = t == 0 || a[t].t1 > t1 ? a[t].t1 : t1;
    }
    pthread_barrier_destroy(&bar);
    return ops / (t1 - t0);
}

/* A bandwidth probe's buffer on the pages ember's packed weights get: a mapping of its own on a
 * 2 MiB boundary, advised huge (ember__map_huge), as the packs' values are from 4 MiB. Free with
 * probe_free. Until 2026-11-30 the probes read 4 KiB pages while the weights sat on 2 MiB ones:
 * at 1 x 4096^2 the in-round probe read 86-97 GOPS-equivalent (median 88.5) against 93-102 (95)
 * advised, six runs each, and the decode rows' roofline read that much closer than it is. Until
 * the thirteenth session the probes (and the packs) were heap memory with their whole 2 MiB pages
 * advised, which in a full table often meant pages already on 4 KiB ones. */
static uint8_t *probe_alloc(size_t bytes) { return ember__map_huge(bytes); }
static void probe_free(uint8_t *p, size_t bytes) { ember__map_free(p, bytes); }

/* The bandwidth rows of decode shapes: one pass over a buffer as large as the Q8 weights (and
 * one as large as the e_q4 row's pack: values and scales), on ember's pool, timed inside the
 * interleaved rounds like the kernel rows (the other rows' data pass through the cache between
 * two passes, as between two calls of a kernel row). 16 chunks (1 MiB for a 4096^2 Q8 weight, so
 * that two threads get even shares at either size), 64-byte loads. */
typedef struct bw_arg {
    const uint8_t *buf;
    size_t bytes, chunk;
    uint64_t sink[64];
} bw_arg;

static void bw_init(bw_arg *a, size_t bytes) {
    memset(a, 0, sizeof *a);
    a->bytes = bytes;
    a->chunk = (bytes / 16 + 255) / 256 * 256;
}

__attribute__((target("avx512f"))) static void bw_task(void *varg, int64_t task, int thread) {
    bw_arg *a = varg;
    const size_t off = (size_t)task * a->chunk;
    const size_t len = a->bytes - off < a->chunk ? a->bytes - off : a->chunk;
    __m512i x0 = _mm512_setzero_si512(), x1 = x0, x2 = x0, x3 = x0;
    for (size_t i = 0; i + 256 <= len; i += 256) {
        x0 = _mm512_xor_si512(x0, _mm512_load_si512((const void *)(a->buf + off + i)));
        x1 = _mm512_xor_si512(x1, _mm512_load_si512((const void *)(a->buf + off + i + 64)));
        x2 = _mm512_xor_si512(x2, _mm512_load_si512((const void *)(a->buf + off + i + 128)));
        x3 = _mm512_xor_si512(x3, _mm512_load_si512((const void *)(a->buf + off + i + 192)));
    }
    x0 = _mm512_xor_si512(_mm512_xor_si512(x0, x1), _mm512_xor_si512(x2, x3));
    a->sink[thread & 63] ^= (uint64_t)_mm512_reduce_add_epi64(x0);
}

static void bw_pass(ember__cpu_state *s, bw_arg *a) {
    ember__cpu_parallel_for(s, (int64_t)((a->bytes + a->chunk - 1) / a->chunk), bw_task, a);
}

/* ---------------------------------------------------------------- oneDNN */

#ifdef EMBER_BENCH_HAVE_DNNL
typedef struct dnnl_case {
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
    int ok;
} dnnl_case;

static dnnl_engine_t eng;
static dnnl_stream_t strm;

static int dnnl_setup(dnnl_case *d, int64_t m, int64_t n, int64_t k, int8_t *A, int8_t *B,
                      int32_t *C, int reorder) {
    memset(d, 0, sizeof *d);
    dnnl_memory_desc_t amd, bmd, bany, cmd;
    dnnl_dims_t ad = {m, k}, bd = {k, n}, cd = {m, n};
    if (dnnl_memory_desc_init_by_tag(&amd, 2, ad, dnnl_s8, dnnl_ab) ||
        dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_s8, dnnl_ab) ||
        dnnl_memory_desc_init_by_tag(&bany, 2, bd, dnnl_s8,
                                     reorder ? dnnl_format_tag_any : dnnl_ab) ||
        dnnl_memory_desc_init_by_tag(&cmd, 2, cd, dnnl_s32, dnnl_ab))
        return 0;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &amd, &bany, NULL, &cmd))
        return 0;
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL))
        return 0;
    const dnnl_memory_desc_t *bq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_primitive_create(&d->prim, pd);
    dnnl_memory_create(&d->a, &amd, eng, A);
    dnnl_memory_create(&d->c, &cmd, eng, C);
    if (reorder) {
        dnnl_memory_t braw;
        dnnl_memory_create(&braw, &bmd, eng, B);
        dnnl_memory_create(&d->b, bq, eng, DNNL_MEMORY_ALLOCATE);
        dnnl_primitive_desc_t rpd;
        dnnl_reorder_primitive_desc_create(&rpd, &bmd, eng, bq, eng, NULL);
        dnnl_primitive_t r;
        dnnl_primitive_create(&r, rpd);
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, braw}, {DNNL_ARG_TO, d->b}};
        dnnl_primitive_execute(r, strm, 2, args);
        dnnl_stream_wait(strm);
        dnnl_primitive_destroy(r);
        dnnl_primitive_desc_destroy(rpd);
        dnnl_memory_destroy(braw);
    } else {
        dnnl_memory_create(&d->b, &bmd, eng, B);
    }
    dnnl_primitive_desc_destroy(pd);
    d->ok = 1;
    return 1;
}

static void dnnl_run(dnnl_case *d) {
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, d->a}, {DNNL_ARG_WEIGHTS, d->b}, {DNNL_ARG_DST, d->c}};
    dnnl_primitive_execute(d->prim, strm, 3, args);
    dnnl_stream_wait(strm);
}

static void dnnl_free(dnnl_case *d) {
    if (!d->ok)
        return;
    dnnl_primitive_destroy(d->prim);
    dnnl_memory_destroy(d->a);
    dnnl_memory_destroy(d->b);
    dnnl_memory_destroy(d->c);
}

static const char *dnnl_impl(int64_t m, int64_t n, int64_t k) {
    static char name[96];
    dnnl_memory_desc_t amd, bany, cmd;
    dnnl_dims_t ad = {m, k}, bd = {k, n}, cd = {m, n};
    dnnl_memory_desc_init_by_tag(&amd, 2, ad, dnnl_s8, dnnl_ab);
    dnnl_memory_desc_init_by_tag(&bany, 2, bd, dnnl_s8, dnnl_format_tag_any);
    dnnl_memory_desc_init_by_tag(&cmd, 2, cd, dnnl_s32, dnnl_ab);
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    snprintf(name, sizeof name, "?");
    if (dnnl_matmul_desc_init(&md, &amd, &bany, NULL, &cmd) == dnnl_success &&
        dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL) == dnnl_success) {
        const char *s = NULL;
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &s);
        snprintf(name, sizeof name, "%s", s ? s : "?");
        dnnl_primitive_desc_destroy(pd);
    }
    return name;
}
#endif

/* ---------------------------------------------------------------- ember rows */

typedef struct ember_case {
    ember__cpu_state *s;
    ember__qtier tier;
    int64_t m, n, k;
    const int8_t *A, *B, *B4;
    const float *sa, *sb, *sb4, *sa4; /* sa4: A's scale per row and K block ([m][K blocks]) */
    float *C;
    ember__qpack p8, p4, p8b;
} ember_case;

static void ember_cached(ember_case *e) {
    ember__qgemm(e->s, e->tier, e->m, e->A, e->k, e->sa, &e->p8, e->C, e->n);
}

static void ember_q4(ember_case *e) {
    ember__qgemm(e->s, e->tier, e->m, e->A, e->k, e->sa4, &e->p4, e->C, e->n);
}

static void ember_q8b(ember_case *e) {
    ember__qgemm(e->s, e->tier, e->m, e->A, e->k, e->sa4, &e->p8b, e->C, e->n);
}

typedef struct s8_src {
    const int8_t *b;
    int64_t ldb;
} s8_src;

static void s8_row(const void *src, int64_t kk, int64_t j0, int64_t nj, int8_t *dst) {
    const s8_src *s = src;
    memcpy(dst, s->b + kk * s->ldb + j0, (size_t)nj);
}

static void ember_first(ember_case *e) {
    /* as the library's first calls: up to 128 rows (16 without AMX), B multiplied as it is stored
     */
    if (e->m <= 128 && ember__qgemm_direct(e->s, e->m, e->n, e->k, e->A, e->k, e->sa, e->B, e->n,
                                           e->sb, e->C, NULL, e->n) == EMBER_OK)
        return;
    ember__qpack p;
    ember__qpack_b_plain(e->s, &p, e->k, e->n, e->n, 0, e->B, e->sb);
    ember__qgemm(e->s, e->tier, e->m, e->A, e->k, e->sa, &p, e->C, e->n);
    ember__qpack_free(&p);
}

/* ---------------------------------------------------------------- main */

enum { R_E8, R_E8F, R_E4, R_E8B, R_DR, R_DP, R_BLAS, R_BW, R_BW4, NROWS };
static const char *row_names[NROWS] = {"ember_q8_cached",  "ember_q8_first", "ember_q4_cached",
                                       "ember_q8_blocked", "dnnl_reordered", "dnnl_plain",
                                       "blas_sgemm",       "read_bw",        "read_bw_q4"};

int main(int argc, char **argv) {
    /* OpenBLAS's core type and short idle spins for the interleaved rows, each unless the caller
     * set it (blas_coretype.h). (The spins used to come only with a core type this program set
     * itself: under `make bench`, which sets OPENBLAS_CORETYPE, OpenMP's and OpenBLAS's threads
     * kept spinning into the next row; and it set SkylakeX on any CPU, AVX-512 or not.) */
    ember_tool_bench_env(argv, openblas_get_corename());
    int json = 0, quick = 0, only_threads = 0, reps_arg = 0, blas_apart = 0;
    int64_t blk = 32;
    int64_t only_m = 0, only_n = 0, only_k = 0;
    for (int i = 1; i < argc; i++) {
        const int more = i + 1 < argc;
        if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else if (!strcmp(argv[i], "--blas-apart")) {
            blas_apart = 1;
        } else if (!strcmp(argv[i], "--threads") && more) {
            only_threads = atoi(argv[++i]);
            if (only_threads != 1 && only_threads != 2) {
                fprintf(stderr, "bench_qgemm: --threads is 1 or 2 (the table's thread counts)\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--reps") && more) {
            reps_arg = atoi(argv[++i]);
            if (reps_arg < 1) {
                fprintf(stderr, "bench_qgemm: --reps wants a count >= 1\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--shape") && more) {
            long long a, b, c;
            if (sscanf(argv[++i], "%lld,%lld,%lld", &a, &b, &c) != 3 || a < 1 || b < 1 || c < 1) {
                fprintf(stderr, "bench_qgemm: --shape wants M,N,K (each >= 1), not '%s'\n",
                        argv[i]);
                return 2;
            }
            only_m = a, only_n = b, only_k = c;
        } else if (!strcmp(argv[i], "--block") && more) {
            char *end = NULL;
            blk = strtoll(argv[++i], &end, 10);
            if (!end || *end || blk < 32 || blk % 32 || blk > (1 << 16)) {
                fprintf(stderr,
                        "bench_qgemm: --block wants a multiple of 32 up to 65536, not "
                        "'%s'\n",
                        argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: bench_qgemm [--json] [--quick] [--threads 1|2] [--reps N] "
                            "[--shape M,N,K] [--blas-apart] [--block N]\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    void (*omp_set)(int) = NULL; /* oneDNN's OpenMP runtime, when loaded */
    void *sym = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (sym)
        memcpy(&omp_set, &sym, sizeof omp_set);
#ifdef EMBER_BENCH_HAVE_DNNL
    dnnl_engine_create(&eng, dnnl_cpu, 0);
    dnnl_stream_create(&strm, eng, dnnl_stream_default_flags);
    const int have_dnnl = 1;
#else
    const int have_dnnl = 0;
#endif
    static const int64_t table[][3] = {
        {256, 256, 256},    {512, 512, 512},   {1024, 1024, 1024}, {2048, 2048, 2048},
        {4096, 4096, 4096}, {1, 4096, 4096},   {8, 4096, 4096},    {32, 4096, 4096},
        {128, 4096, 4096},  {512, 4096, 4096}, {128, 11008, 4096},
    };
    /* --shape: that shape alone (any M, N, K), else the table */
    const int64_t one[1][3] = {{only_m, only_n, only_k}};
    const int64_t(*shapes)[3] = only_m ? one : table;
    const int nshapes = only_m ? 1 : (int)(sizeof table / sizeof table[0]);
    /* The ember rows run the tier a context gets: the best the CPU allows, capped by
     * EMBER_CPU_MAX_ISA as in the library (until 2026-11-30 this bench took the best tier and
     * ignored the cap, so a capped run printed and measured AMX). A bad cap ends the run here. */
    ember__qtier best;
    {
        ember_options o = ember_options_default();
        o.enable_opencl = 0;
        o.num_threads = 1;
        ember_context *ctx = NULL;
        if (ember_context_create(&o, &ctx) != EMBER_OK) {
            fprintf(stderr, "bench_qgemm: no context: %s\n", ember_last_error());
            return 1;
        }
        best = ember__cpu_tier(ember__cpu_state_of(ctx));
        ember_context_destroy(ctx);
    }
    char host[128] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10)) {
                char *c = strchr(line, ':');
                snprintf(host, sizeof host, "%.100s", c ? c + 2 : line);
                host[strcspn(host, "\n")] = 0;
                break;
            }
        fclose(f);
    }
    if (json)
        printf("{\"cpu\": \"%s\", \"tier\": \"%s\", \"blas_core\": \"%s\", \"dnnl\": %d, "
               "\"block\": %lld, \"results\": [\n",
               host, ember__qtier_name(best), openblas_get_corename(), have_dnnl, (long long)blk);
    else
        printf("# bench_qgemm: %s; ember tier %s; OpenBLAS core %s; oneDNN %s; e_q4 / e_q8b K "
               "blocks of %lld; OPENBLAS_THREAD_TIMEOUT=%s GOMP_SPINCOUNT=%s\n",
               host, ember__qtier_name(best), openblas_get_corename(),
               have_dnnl ? "2.x linked" : "absent (rows skipped)", (long long)blk,
               getenv("OPENBLAS_THREAD_TIMEOUT") ? getenv("OPENBLAS_THREAD_TIMEOUT") : "-",
               getenv("GOMP_SPINCOUNT") ? getenv("GOMP_SPINCOUNT") : "-");
    size_t bwbytes = (size_t)16 << 20;
    uint8_t *bwbuf = probe_alloc(bwbytes);
    /* random bytes: the tile loop fed from L2 multiplies them (the tile unit is slower on
     * changing random operands than on constant ones) */
    bench_fill_bytes(bwbuf, bwbytes, 0x243f6a8885a308d3u);
    int first_json = 1;
    for (int nt = 1; nt <= 2; nt++) {
        if (only_threads && nt != only_threads)
            continue;
        ember_options o = ember_options_default();
        o.enable_opencl = 0;
        o.num_threads = nt;
        ember_context *ctx = NULL;
        if (ember_context_create(&o, &ctx) != EMBER_OK) {
            fprintf(stderr, "bench_qgemm: no context: %s\n", ember_last_error());
            return 1;
        }
        ember__cpu_state *s = ember__cpu_state_of(ctx);
        if (omp_set)
            omp_set(nt);
        openblas_set_num_threads(nt);
        /* ceilings: medians of 5 */
        double pk_amx[5], pk_amx1[5], pk_vnni[5], pk_vnni1[5], bw[5], pk_l2[5], pk_l1[5];
        ceiling(2, nt, 4, bwbuf, bwbytes); /* warm */
        const int have_amx = ember__qtier_available(EMBER__QT_AMX);
        for (int r = 0; r < 5; r++) {
            pk_amx[r] = have_amx ? ceiling(0, nt, 2000000, NULL, 0) : 0;
            /* with two threads, also one alone: whether they share one tile unit (issue 5's
             * machine: two vCPUs of one core, 4864 GOPS together and ~4500 one alone) or each
             * has its own (two cores: twice one thread's figure) */
            pk_amx1[r] = have_amx && nt > 1 ? ceiling(0, 1, 2000000, NULL, 0) : 0;
            pk_l1[r] = have_amx ? ceiling(4, nt, 1000000, NULL, 0) : 0;
            pk_l2[r] = have_amx ? ceiling(3, nt, 40, bwbuf, bwbytes) : 0;
            pk_vnni[r] = ceiling(1, nt, 4000000, NULL, 0);
            pk_vnni1[r] = nt > 1 ? ceiling(1, 1, 4000000, NULL, 0) : 0; /* as pk_amx1 */
            bw[r] = ceiling(2, nt, 20, bwbuf, bwbytes);
        }
        double amx_peak = median(pk_amx, 5) * 1e-9, vnni_peak = median(pk_vnni, 5) * 1e-9;
        const double amx_peak1 = median(pk_amx1, 5) * 1e-9, vnni_peak1 = median(pk_vnni1, 5) * 1e-9;
        double l2_loop = median(pk_l2, 5) * 1e-9, l1_rand = median(pk_l1, 5) * 1e-9;
        double bw_gbs = median(bw, 5) * 1e-9;
        if (json) {
            printf("%s  {\"threads\": %d, \"amx_peak_gops\": %.0f, \"amx_l1_random_gops\": %.0f, "
                   "\"amx_l2_loop_gops\": %.0f, \"vnni_peak_gops\": %.0f, \"read_bw_gbs\": %.1f",
                   first_json ? "" : ",\n", nt, amx_peak, l1_rand, l2_loop, vnni_peak, bw_gbs);
            if (have_amx && nt > 1)
                printf(", \"amx_peak_one_thread_gops\": %.0f", amx_peak1);
            if (nt > 1)
                printf(", \"vnni_peak_one_thread_gops\": %.0f", vnni_peak1);
            printf("}");
            first_json = 0;
        } else {
            /* two threads against one alone on the register-only loop: near 1 where they share
             * one tile unit (issue 5's machine: 4864 / ~4500), near 2 where each has its own */
            char units[96] = "";
            if (have_amx && nt > 1)
                snprintf(units, sizeof units, "one thread alone %.0f: x%.2f, %s; ", amx_peak1,
                         amx_peak / amx_peak1,
                         amx_peak / amx_peak1 < 1.4 ? "one tile unit shared" : "a tile unit each");
            char vunits[48] = "";
            if (nt > 1)
                snprintf(vunits, sizeof vunits, " (one thread alone %.0f: x%.2f)", vnni_peak1,
                         vnni_peak / vnni_peak1);
            printf("\n## threads %d: AMX peak %.0f GOPS (%srandom tiles from L1 %.0f, tile loop "
                   "fed from L2 %.0f), AVX-512 VNNI peak %.0f GOPS%s, read bandwidth (16 MiB) "
                   "%.1f GB/s -> M=1 roofline %.0f GOPS (Q8 weights), M=8 %.0f\n",
                   nt, amx_peak, units, l1_rand, l2_loop, vnni_peak, vunits, bw_gbs, 2 * bw_gbs,
                   16 * bw_gbs);
            /* Two threads below 1.3x one on the vector loop: either the two CPUs are one core's
             * (SMT siblings share its vector units, as on issue 5's machine) or the second was
             * not running beside the first (on the 2-vCPU Zen 5, two cores, after the one-thread
             * section at times: every library's rows up to 2048^3 then ran at half speed) */
            if (nt > 1 && vnni_peak < 1.3 * vnni_peak1)
                printf("# note: two threads reached only x%.2f of one on the vector peak: the two "
                       "CPUs share one core, or the second was held back while it ran\n",
                       vnni_peak / vnni_peak1);
            printf("%-16s %9s %9s %9s %9s %9s %9s %9s | %6s %6s %6s %6s %6s %6s\n", "shape M,N,K",
                   "e_q8", "e_q8_1st", "e_q4", "e_q8b", "dnnl_ro", "dnnl_pl", "blas_f32", "q8/ro",
                   "1st/pl", "q4/q8", "q8/blas", "%peak", "%loop");
        }
        for (int si = 0; si < nshapes; si++) {
            const int64_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
            if (quick && (m * n * k > (int64_t)1 << 32))
                continue;
            const double ops = 2.0 * (double)m * (double)n * (double)k;
            /* rounds: the cheap shapes take more (decode calls last well under a millisecond; at 1
             * x 4096^2 e_q8 read 67-86 GOPS in four runs of 11 rounds, 83-91 in four of 41) */
            int reps = ops > 1e11 ? 5 : (ops > 1e10 ? 7 : (ops > 1e9 ? 11 : 31));
            if (reps_arg)
                reps = reps_arg < 64 ? reps_arg : 64;
            int8_t *A = ember__aligned_alloc((size_t)(m * k)),
                   *B = ember__aligned_alloc((size_t)(k * n));
            int8_t *B4 = ember__aligned_alloc((size_t)(k * n));
            float *sa = malloc((size_t)m * 4), *sb = malloc((size_t)n * 4);
            /* the blocked rows' K blocks: blk where it divides K, else the whole K */
            const int64_t kcb = k % blk == 0 && k > blk ? blk : 0, nb4 = kcb ? k / kcb : 1;
            float *sa4 = malloc((size_t)(m * nb4) * 4);
            float *sb4 = malloc((size_t)(n * nb4) * 4);
            float *C = ember__aligned_alloc((size_t)(m * n) * 4);
            int32_t *C32 = ember__aligned_alloc((size_t)(m * n) * 4);
            /* each library writes its own output (oneDNN C32, OpenBLAS Cf): a row does not
             * inherit another library's dirty lines in its own buffer */
            float *Cf = ember__aligned_alloc((size_t)(m * n) * 4);
            float *Af = ember__aligned_alloc((size_t)(m * k) * 4),
                  *Bf = ember__aligned_alloc((size_t)(k * n) * 4);
            uint64_t x = 88172645463325252ull;
            for (int64_t i = 0; i < m * k; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                A[i] = (int8_t)((int)(x % 255) - 127);
                Af[i] = (float)A[i] * 0.01f;
            }
            for (int64_t i = 0; i < k * n; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                B[i] = (int8_t)((int)(x % 255) - 127);
                B4[i] = (int8_t)((int)((x >> 20) % 15) - 7);
                Bf[i] = (float)B[i] * 0.02f;
            }
            for (int64_t i = 0; i < m; i++)
                sa[i] = 0.01f;
            for (int64_t i = 0; i < m * nb4; i++)
                sa4[i] = 0.01f;
            for (int64_t j = 0; j < n; j++)
                sb[j] = 0.02f;
            for (int64_t j = 0; j < n * nb4; j++)
                sb4[j] = ember__f16_to_f32(ember__f32_to_f16(0.01f + 0.0001f * (float)(j % 97)));
            ember_case e = {s, best, m, n, k, A, B, B4, sa, sb, sb4, sa4, C, {0}, {0}, {0}};
            s8_src s4 = {B4, n};
            ember__qpack_b_plain(s, &e.p8, k, n, n, 0, B, sb);
            ember__qpack_b_mt(s, &e.p4, k, n, kcb, 4, s8_row, &s4, sb4);
            ember__qpack_b_plain(s, &e.p8b, k, n, n, kcb, B, sb4);
            /* the decode rows' probes: the Q8 weights' size, and the e_q4 pack's (its values
             * and its scales, f16 where they are exact) */
            bw_arg bwa, bwa4;
            bw_init(&bwa, (size_t)(k * n));
            bw_init(&bwa4, ember__qpack_bytes(&e.p4));
            uint8_t *bwrow = m <= 8 ? probe_alloc(bwa.bytes) : NULL;
            uint8_t *bwrow4 = m <= 8 ? probe_alloc(bwa4.bytes) : NULL;
            if (bwrow)
                memset(bwrow, 3, bwa.bytes);
            if (bwrow4)
                memset(bwrow4, 3, bwa4.bytes);
            bwa.buf = bwrow;
            bwa4.buf = bwrow4;
#ifdef EMBER_BENCH_HAVE_DNNL
            dnnl_case dr, dp;
            dnnl_setup(&dr, m, n, k, A, B, C32, 1);
            dnnl_setup(&dp, m, n, k, A, B, C32, 0);
#endif
            double t[NROWS][64];
            /* warm-up once each, then interleaved rounds, each in its own order (a shuffle from a
             * fixed seed), so that no row always follows the same one: a row meets what the row
             * before it left behind (its data in the caches or pushed out, dirty lines, the clock
             * after the BLAS row's AVX-512). Until 2026-11-30 round r ran the rows in the cyclic
             * order from row r, which rotates the start but keeps every row's predecessor: ember's
             * cached row always came right after the f32 BLAS row, and its median at 2048^3 read
             * 4276 GOPS in one run against 5038 with the BLAS row left out. */
            uint64_t ox = 0x9e3779b97f4a7c15ull;
            for (int r = -1; r < reps; r++) {
                int order[NROWS];
                if (r >= 0)
                    bench_shuffle(order, NROWS, &ox);
                else
                    for (int q = 0; q < NROWS; q++)
                        order[q] = q;
                for (int q = 0; q < NROWS; q++) {
                    const int row = order[q];
                    double t0 = now();
                    switch (row) {
                    case R_E8:
                        ember_cached(&e);
                        break;
                    case R_E8F:
                        ember_first(&e);
                        break;
                    case R_E4:
                        ember_q4(&e);
                        break;
                    case R_E8B:
                        ember_q8b(&e);
                        break;
#ifdef EMBER_BENCH_HAVE_DNNL
                    case R_DR:
                        dnnl_run(&dr);
                        break;
                    case R_DP:
                        dnnl_run(&dp);
                        break;
#endif
                    case R_BLAS:
                        if (blas_apart && m <= 8)
                            break; /* timed after the interleaved rounds */
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n,
                                    (int)k, 1.0f, Af, (int)k, Bf, (int)n, 0.0f, Cf, (int)n);
                        break;
                    case R_BW:
                        if (bwrow)
                            bw_pass(s, &bwa);
                        break;
                    case R_BW4:
                        if (bwrow4)
                            bw_pass(s, &bwa4);
                        break;
                    default:
                        break;
                    }
                    if (r >= 0)
                        t[row][r] = now() - t0;
                }
            }
            if (blas_apart && m <= 8) /* its 64 MiB f32 weights would evict the int8 ones */
                for (int r = -1; r < reps; r++) {
                    double t0 = now();
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k,
                                1.0f, Af, (int)k, Bf, (int)n, 0.0f, Cf, (int)n);
                    if (r >= 0)
                        t[R_BLAS][r] = now() - t0;
                }
            double g[NROWS];
            for (int row = 0; row < NROWS; row++)
                g[row] = ops / median(t[row], reps) * 1e-9;
            /* GB/s of the in-round read pass (decode shapes) */
            const double bwr = bwrow ? (double)bwa.bytes / median(t[R_BW], reps) * 1e-9 : NAN;
            const double bwr4 = bwrow4 ? (double)bwa4.bytes / median(t[R_BW4], reps) * 1e-9 : NAN;
            if (!have_dnnl)
                g[R_DR] = g[R_DP] = NAN;
            double pk = best == EMBER__QT_AMX ? amx_peak : vnni_peak;
            if (json) {
                printf(",\n  {\"threads\": %d, \"m\": %lld, \"n\": %lld, \"k\": %lld, \"reps\": %d",
                       nt, (long long)m, (long long)n, (long long)k, reps);
                for (int row = 0; row < R_BW; row++)
                    printf(", \"%s_gops\": %.1f", row_names[row], isnan(g[row]) ? -1.0 : g[row]);
                if (bwrow)
                    printf(", \"read_bw_in_round_gbs\": %.1f, \"read_bw_q4_in_round_gbs\": %.1f",
                           bwr, bwr4);
                printf("}");
            } else {
                char shp[32];
                snprintf(shp, sizeof shp, "%lld,%lld,%lld", (long long)m, (long long)n,
                         (long long)k);
                /* %loop: the tile loop's ceiling (AMX, M > 8; decode rows have the roofline) */
                char loop[16] = "     -";
                if (best == EMBER__QT_AMX && m > 8)
                    snprintf(loop, sizeof loop, "%5.0f%%", 100 * g[R_E8] / l2_loop);
                printf("%-16s %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f | %6.2f %6.2f %6.2f "
                       "%6.1f %5.0f%% %s",
                       shp, g[R_E8], g[R_E8F], g[R_E4], g[R_E8B], g[R_DR], g[R_DP], g[R_BLAS],
                       g[R_E8] / g[R_DR], g[R_E8F] / g[R_DP], g[R_E4] / g[R_E8],
                       g[R_E8] / g[R_BLAS], 100 * g[R_E8] / pk, loop);
                if (m <= 8) {
                    /* e_q4's roofline: its pack's bytes at the in-round read rate of a buffer
                     * that size, as GOPS; q4/q8 cannot pass its ratio to Q8's roofline */
                    const double q4roof =
                        2.0 * (double)m * (double)(k * n) / (double)bwa4.bytes * bwr4;
                    printf("  roofline %.0f%% of %.0f (warm probe: %.0f%%); e_q4 %.0f%% of %.0f "
                           "(q4/q8 ceiling %.2f)",
                           100 * g[R_E8] / (2.0 * (double)m * bwr), 2.0 * (double)m * bwr,
                           100 * g[R_E8] / (2.0 * (double)m * bw_gbs), 100 * g[R_E4] / q4roof,
                           q4roof, q4roof / (2.0 * (double)m * bwr));
                }
#ifdef EMBER_BENCH_HAVE_DNNL
                if (nt == 1 && si == 0)
                    printf("  (dnnl: %s)", dnnl_impl(m, n, k));
#endif
                printf("\n");
            }
            fflush(stdout);
#ifdef EMBER_BENCH_HAVE_DNNL
            dnnl_free(&dr);
            dnnl_free(&dp);
#endif
            ember__qpack_free(&e.p8);
            ember__qpack_free(&e.p4);
            ember__qpack_free(&e.p8b);
            probe_free(bwrow, bwa.bytes);
            probe_free(bwrow4, bwa4.bytes);
            ember__aligned_free(A);
            ember__aligned_free(B);
            ember__aligned_free(B4);
            ember__aligned_free(C);
            ember__aligned_free(Cf);
            ember__aligned_free(C32);
            ember__aligned_free(Af);
            ember__aligned_free(Bf);
            free(sa);
            free(sa4);
            free(sb);
            free(sb4);
        }
        ember_context_destroy(ctx);
    }
    if (json)
        printf("\n]}\n");
    probe_free(bwbuf, bwbytes);
    return 0;
}
