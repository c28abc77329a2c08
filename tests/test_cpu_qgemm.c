/* tests/test_cpu_qgemm.c: the int8 matmul kernels of the CPU backend, tier by tier, against a
 * plain reference: exact int32 sums on random shapes (M, N, K that are not multiples of any tile,
 * K not a multiple of 4 or 64), 8-bit and 4-bit packed B, and the scale epilogue (per-tensor,
 * per-row / per-column, per-block along K) against a float64 reference. Tiers the machine lacks
 * are skipped (and say so). */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/cpu/fq_matmul.h"
#include "backends/cpu/qgemm.h"
#include "test_util.h"

static uint64_t rng;

static void rand_i8(int8_t *d, size_t n, int lo, int hi) {
    for (size_t i = 0; i < n; i++)
        d[i] = (int8_t)(lo + (int)(tu_next(&rng) % (uint64_t)(hi - lo + 1)));
}

static ember__cpu_state *cpu_state(ember_context **ctx) {
    *ctx = tu_cpu_context();
    return *ctx ? ember__cpu_state_of(*ctx) : NULL;
}

/* exact int32 for every tier, shape and bit width */
static void test_exact_int32(void) {
    static const int64_t ms[] = {1, 2, 7, 16, 33, 70};
    static const int64_t ns[] = {1, 5, 16, 31, 33, 100};
    static const int64_t ks[] = {1, 3, 4, 63, 64, 65, 130, 257};
    ember_context *ctx;
    ember__cpu_state *s = cpu_state(&ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    int tested = 0;
    for (int t = 0; t < EMBER__QT_COUNT; t++) {
        if (!ember__qtier_available((ember__qtier)t)) {
            printf("\n  tier %s: not on this machine, skipped", ember__qtier_name((ember__qtier)t));
            continue;
        }
        for (int bits = 8; bits >= 4; bits -= 4)
            for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
                for (size_t b = 0; b < sizeof ns / sizeof ns[0]; b++)
                    for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++) {
                        int64_t m = ms[a], n = ns[b], k = ks[c];
                        int64_t lda = k + (int64_t)(tu_next(&rng) % 5);
                        int8_t *A = malloc((size_t)(m * lda));
                        int8_t *B = malloc((size_t)(k * n));
                        int32_t *C = malloc((size_t)(m * n) * 4);
                        rand_i8(A, (size_t)(m * lda), -128, 127);
                        if (bits == 8)
                            rand_i8(B, (size_t)(k * n), -128, 127);
                        else
                            rand_i8(B, (size_t)(k * n), -8, 7);
                        ember__qpack p;
                        TU_OK(ember__qpack_b_s8(NULL, &p, k, n, n, 0, bits, B, NULL));
                        TU_OK(ember__qgemm_s32(s, (ember__qtier)t, m, A, lda, &p, C, n));
                        int bad = 0;
                        for (int64_t i = 0; i < m && !bad; i++)
                            for (int64_t j = 0; j < n && !bad; j++) {
                                int32_t ref = 0;
                                for (int64_t kk = 0; kk < k; kk++)
                                    ref += (int32_t)A[i * lda + kk] * B[kk * n + j];
                                if (ref != C[i * n + j]) {
                                    printf("\n  %s bits %d m %lld n %lld k %lld: C[%lld,%lld] %d "
                                           "!= %d",
                                           ember__qtier_name((ember__qtier)t), bits, (long long)m,
                                           (long long)n, (long long)k, (long long)i, (long long)j,
                                           C[i * n + j], ref);
                                    bad = 1;
                                }
                            }
                        CU_ASSERT_FALSE(bad);
                        ember__qpack_free(&p);
                        free(A);
                        free(B);
                        free(C);
                        tested++;
                    }
    }
    CU_ASSERT(tested > 0);
    ember_context_destroy(ctx);
}

static void ref_rows(const int8_t *A, int64_t lda, const int8_t *B, int64_t m, int64_t n, int64_t k,
                     int32_t *ref);

/* The vector tiers take 8-bit B in one K chunk 64 columns a pass (two panels; the second may be
 * partial, down to one column) and a task's lone last panel 32 at a time. With two threads, at
 * up to 64 rows a task is 1/16 of B's panels wide (here 9 panels: four pairs and a lone one),
 * beyond that 128 columns: the shapes end a task in a pair whose second panel holds 1, 16 and 31
 * columns, a full pair, or a lone panel of 17. Exact int32 on every tier, the other rows around
 * the 6-row step, and nothing written past column n (C's rows are 3 apart from n). */
static void test_wide_panels(void) {
    static const int64_t shapes[][3] = {
        {7, 4129, 64},  {13, 4144, 64},  {2, 4159, 4},
        {70, 4193, 64}, {200, 300, 260}, {200, 337, 260},
    };
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.num_threads = 2;
    ember_context *ctx = NULL;
    TU_OK(ember_context_create(&o, &ctx));
    ember__cpu_state *s = ember__cpu_state_of(ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    for (int t = 0; t < EMBER__QT_COUNT; t++) {
        if (!ember__qtier_available((ember__qtier)t))
            continue;
        for (size_t q = 0; q < sizeof shapes / sizeof shapes[0]; q++) {
            const int64_t m = shapes[q][0], n = shapes[q][1], k = shapes[q][2], lda = k + 1,
                          ldc = n + 3;
            int8_t *A = malloc((size_t)(m * lda)), *B = malloc((size_t)(k * n));
            int32_t *C = malloc((size_t)(m * ldc) * 4), *ref = malloc((size_t)(m * n) * 4);
            rand_i8(A, (size_t)(m * lda), -128, 127);
            rand_i8(B, (size_t)(k * n), -128, 127);
            ref_rows(A, lda, B, m, n, k, ref);
            for (int64_t i = 0; i < m * ldc; i++)
                C[i] = INT32_MIN;
            ember__qpack p;
            TU_OK(ember__qpack_b_s8(NULL, &p, k, n, n, 0, 8, B, NULL));
            TU_OK(ember__qgemm_s32(s, (ember__qtier)t, m, A, lda, &p, C, ldc));
            int bad = 0;
            for (int64_t i = 0; i < m * ldc && !bad; i++) {
                const int64_t r = i / ldc, j = i % ldc;
                const int32_t want = j < n ? ref[r * n + j] : INT32_MIN;
                if (C[i] != want) {
                    printf("\n  %s m %lld n %lld k %lld: C[%lld,%lld] %d != %d",
                           ember__qtier_name((ember__qtier)t), (long long)m, (long long)n,
                           (long long)k, (long long)r, (long long)j, C[i], want);
                    bad = 1;
                }
            }
            CU_ASSERT_FALSE(bad);
            ember__qpack_free(&p);
            free(A);
            free(B);
            free(C);
            free(ref);
        }
    }
    ember_context_destroy(ctx);
}

/* Extreme values: all -128 x -128 over a long K (the bias trick must stay exact). */
static void test_extremes(void) {
    ember_context *ctx;
    ember__cpu_state *s = cpu_state(&ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    const int64_t m = 33, n = 40, k = 4100;
    int8_t *A = malloc((size_t)(m * k)), *B = malloc((size_t)(k * n));
    int32_t *C = malloc((size_t)(m * n) * 4);
    for (int64_t i = 0; i < m * k; i++)
        A[i] = (i % 3) ? -128 : 127;
    for (int64_t i = 0; i < k * n; i++)
        B[i] = (i % 5) ? -128 : 127;
    ember__qpack p;
    TU_OK(ember__qpack_b_s8(NULL, &p, k, n, n, 0, 8, B, NULL));
    for (int t = 0; t < EMBER__QT_COUNT; t++) {
        if (!ember__qtier_available((ember__qtier)t))
            continue;
        TU_OK(ember__qgemm_s32(s, (ember__qtier)t, m, A, k, &p, C, n));
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int32_t ref = 0;
                for (int64_t kk = 0; kk < k; kk++)
                    ref += (int32_t)A[i * k + kk] * B[kk * n + j];
                if (ref != C[i * n + j]) {
                    CU_FAIL("extreme values: int32 sum differs");
                    i = m;
                    break;
                }
            }
    }
    ember__qpack_free(&p);
    free(A);
    free(B);
    free(C);
    ember_context_destroy(ctx);
}

static int g_sa_row; /* check_epilogue: the same A scale in all chunks of a row */

/* Scale epilogue vs float64: C = sum_c sa[i,c] sb[c,j] dot_c */
static void check_epilogue(ember__cpu_state *s, int64_t m, int64_t n, int64_t k, int64_t kc,
                           int bits, int f16_scales) {
    int64_t nch = kc > 0 ? k / kc : 1;
    int64_t len = kc > 0 ? kc : k;
    int8_t *A = malloc((size_t)(m * k)), *B = malloc((size_t)(k * n));
    float *sa = malloc((size_t)(m * nch) * 4), *sb = malloc((size_t)(nch * n) * 4);
    /* C rows 7 columns wider than n: those columns must stay as they were */
    const int64_t ldc = n + 7;
    float *C = malloc((size_t)(m * ldc) * 4);
    rand_i8(A, (size_t)(m * k), -127, 127);
    rand_i8(B, (size_t)(k * n), bits == 8 ? -127 : -7, bits == 8 ? 127 : 7);
    tu_rand_f32(&rng, sa, (size_t)(m * nch), 0.001f, 0.02f);
    tu_rand_f32(&rng, sb, (size_t)(nch * n), 0.001f, 0.02f);
    if (g_sa_row) /* one A scale per row, repeated over its chunks */
        for (int64_t i = 0; i < m; i++)
            for (int64_t c = 1; c < nch; c++)
                sa[i * nch + c] = sa[i * nch];
    if (f16_scales)
        for (int64_t i = 0; i < nch * n; i++)
            sb[i] = ember__f16_to_f32(ember__f32_to_f16(sb[i]));
    ember__qpack p;
    TU_OK(ember__qpack_b_s8(NULL, &p, k, n, n, kc, bits, B, sb));
    CU_ASSERT_EQUAL(p.nch, nch);
    if (nch > 1)
        CU_ASSERT_EQUAL(p.sb16, f16_scales);
    for (int t = 0; t < EMBER__QT_COUNT; t++) {
        if (!ember__qtier_available((ember__qtier)t))
            continue;
        for (int64_t i = 0; i < m * ldc; i++)
            C[i] = i % ldc < n ? NAN : 12345.0f;
        TU_OK(ember__qgemm(s, (ember__qtier)t, m, A, k, sa, &p, C, ldc));
        double worst = 0;
        int64_t past = 0; /* columns past n written */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = n; j < ldc; j++)
                past += C[i * ldc + j] != 12345.0f;
        CU_ASSERT_EQUAL(past, 0);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double ref = 0, mag = 0;
                for (int64_t c = 0; c < nch; c++) {
                    long dot = 0;
                    for (int64_t kk = c * len; kk < (c + 1) * len; kk++)
                        dot += (long)A[i * k + kk] * B[kk * n + j];
                    double term = (double)sa[i * nch + c] * (double)sb[c * n + j] * (double)dot;
                    ref += term;
                    mag += fabs(term);
                }
                double err = fabs((double)C[i * ldc + j] - ref) / (mag + 1e-30);
                if (!(err <= worst))
                    worst = isnan(err) ? INFINITY : (err > worst ? err : worst);
            }
        /* float rounding of the scale products and the chunk sums: a few ulps of the magnitude */
        if (!(worst < 1e-5) || past)
            printf("\n  %s m %lld n %lld k %lld kc %lld bits %d: rel err %g, %lld past n",
                   ember__qtier_name((ember__qtier)t), (long long)m, (long long)n, (long long)k,
                   (long long)kc, bits, worst, (long long)past);
        CU_ASSERT(worst < 1e-5);
    }
    ember__qpack_free(&p);
    free(A);
    free(B);
    free(sa);
    free(sb);
    free(C);
}

static void test_epilogue(void) {
    ember_context *ctx;
    ember__cpu_state *s = cpu_state(&ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    check_epilogue(s, 37, 45, 200, 0, 8, 0);   /* per-row x per-column, one chunk */
    check_epilogue(s, 11, 80, 260, 0, 8, 1);   /* a 64-column pass, then a panel of 16 */
    check_epilogue(s, 1, 70, 200, 0, 8, 0);    /* decode row, one chunk, a ragged panel */
    check_epilogue(s, 2, 45, 128, 0, 8, 0);    /* two rows, one chunk */
    check_epilogue(s, 5, 70, 256, 32, 8, 0);   /* block 32 along K */
    check_epilogue(s, 40, 33, 192, 64, 8, 1);  /* block 64, f16 scales */
    check_epilogue(s, 3, 64, 384, 128, 4, 1);  /* 4-bit, block 128 */
    check_epilogue(s, 70, 50, 96, 32, 4, 0);   /* 4-bit, block 32 */
    check_epilogue(s, 1, 100, 64, 32, 4, 1);   /* decode row */
    check_epilogue(s, 1, 70, 96, 32, 4, 0);    /* decode row, f32 scales, a lone last panel */
    check_epilogue(s, 1, 200, 2048, 32, 4, 1); /* decode row, 64 blocks, several tasks */
    check_epilogue(s, 1, 1100, 256, 32, 4, 0); /* decode row, tasks of 3 panels: a pair + one */
    check_epilogue(s, 1, 1100, 256, 32, 4, 1); /* the same, f16 scales */
    check_epilogue(s, 1, 70, 256, 32, 8, 0);   /* decode row, 8-bit blocks of 32, f32 scales */
    check_epilogue(s, 1, 100, 384, 128, 8, 1); /* decode row, 8-bit blocks of 128, f16 scales */
    /* decode rows whose last task ends in a pair of panels with 8 columns in its second (tasks of
     * 64 or 128 columns at 2 threads or 1; np = 1024) */
    check_epilogue(s, 1, 1000, 256, 32, 4, 1);
    check_epilogue(s, 1, 1000, 128, 32, 8, 0);
    /* decode rows over tasks of 5 and 7 panels (2 threads; np 2176 and 3520): four panels a pass,
     * then two, then one, the last panel ragged; and the last chunks of B, which fetch nothing
     * ahead (the one-row kernel, AVX-512) */
    check_epilogue(s, 1, 2149, 256, 32, 4, 1);
    check_epilogue(s, 1, 3500, 128, 32, 4, 0);
    check_epilogue(s, 1, 3500, 256, 32, 8, 1);
    /* the one-row kernel (AVX-512) takes a panel's chunks four at a time and the rest one at a
     * time over four sets of chains: one chunk (4-bit, the whole K), five, six (the last panels
     * of B fetch nothing ahead), seven (8-bit) */
    check_epilogue(s, 1, 70, 200, 0, 4, 0);
    check_epilogue(s, 1, 300, 160, 32, 4, 1);
    check_epilogue(s, 1, 2149, 192, 32, 4, 0);
    check_epilogue(s, 1, 300, 224, 32, 8, 0);
    check_epilogue(s, 9, 70, 200, 0, 8, 0);     /* decode rows on m-row AMX tiles */
    check_epilogue(s, 97, 40, 130, 0, 4, 0);    /* 4-bit, one chunk, several row blocks */
    check_epilogue(s, 130, 70, 640, 0, 8, 0);   /* pipelined scaling over many K steps */
    check_epilogue(s, 40, 70, 1100, 0, 4, 0);   /* 4-bit over several K slices */
    check_epilogue(s, 600, 300, 96, 0, 8, 0);   /* several row and column tasks */
    check_epilogue(s, 40, 70, 768, 256, 8, 0);  /* 8-bit, block 256: chunked tile path */
    check_epilogue(s, 100, 70, 320, 64, 4, 1);  /* 4-bit, block 64: chunked, two steps */
    check_epilogue(s, 45, 33, 160, 32, 4, 0);   /* 4-bit, block 32, odd chunk count */
    check_epilogue(s, 40, 50, 64, 32, 4, 0);    /* 4-bit, block 32, two chunks (the shortest) */
    check_epilogue(s, 70, 45, 160, 32, 8, 0);   /* 8-bit, block 32: signed panel, a step a chunk */
    check_epilogue(s, 33, 70, 384, 128, 8, 1);  /* 8-bit, block 128: signed panel, two steps */
    check_epilogue(s, 300, 40, 2112, 64, 8, 0); /* blocks over K > 2048: tasks of 256 rows */
    check_epilogue(s, 9, 70, 256, 32, 8, 0);    /* 7..16 rows, 8-bit blocks of 32: m-row tiles */
    check_epilogue(s, 16, 45, 384, 128, 8, 1);  /* 16 rows, blocks of 128: two steps a chunk */
    check_epilogue(s, 7, 33, 192, 64, 8, 0);    /* 7 rows, blocks of 64, a lone short panel */
    check_epilogue(s, 12, 70, 256, 64, 4, 1);   /* 12 rows, 4-bit blocks of 64: staged steps */
    check_epilogue(s, 8, 70, 192, 64, 4, 0);    /* 8 rows, 4-bit blocks of 64: tiles */
    check_epilogue(s, 20, 70, 256, 32, 8,
                   0); /* one row block, 8-bit: unsigned panel, blocks of 32 */
    check_epilogue(s, 30, 45, 384, 128, 8, 1); /* one row block, 8-bit, blocks of 128 */
    check_epilogue(s, 2, 45, 128, 32, 8, 1);   /* 2 rows, 8-bit blocks of 32: tiles */
    check_epilogue(s, 16, 45, 384, 128, 4, 0); /* 16 rows, 4-bit blocks of 128, f32 scales */
    g_sa_row = 1; /* A scales per row only (Q8S activations): applied once per row */
    check_epilogue(s, 70, 50, 96, 32, 4, 0);
    check_epilogue(s, 45, 33, 160, 32, 4, 1);
    check_epilogue(s, 100, 70, 320, 64, 4, 1);
    check_epilogue(s, 40, 70, 768, 256, 8, 0);
    check_epilogue(s, 5, 70, 256, 32, 8, 0);
    check_epilogue(s, 70, 45, 160, 32, 8, 1);
    check_epilogue(s, 12, 70, 192, 64, 8, 1);
    check_epilogue(s, 14, 70, 256, 128, 4, 1);
    check_epilogue(s, 25, 70, 192, 64, 8, 1);
    check_epilogue(s, 8, 70, 256, 32, 4, 1);   /* 8 rows in one pass (VNNI: micro_rows8) */
    check_epilogue(s, 7, 45, 192, 64, 8, 0);   /* 7 rows, 8-bit blocks */
    check_epilogue(s, 1, 100, 256, 32, 4, 0);  /* decode row (VNNI: the one-row kernel) */
    check_epilogue(s, 1, 70, 384, 128, 8, 1);  /* decode row, 8-bit blocks of 128 */
    check_epilogue(s, 1, 3500, 128, 32, 4, 1); /* decode row, four panels a pass */
    g_sa_row = 0;
    ember_context_destroy(ctx);
}

/* On a machine with AVX-VNNI the AVX2 tier multiplies B as bytes; the hook ember__avx2_no_vnni
 * gives the 16-bit path that a machine without AVX-VNNI runs. Both are checked here: exact int32
 * (8- and 4-bit, with nothing written past column n for 8-bit) and the scaled float output (one
 * chunk and blocks along K, 8- and 4-bit, decode rows). */
static void test_avx2_paths(void) {
    if (!ember__qtier_available(EMBER__QT_AVX2))
        return;
    printf("\n  AVX-VNNI on this machine: %s", ember__avx2_vnni() ? "yes" : "no");
    for (int off = 1; off >= 0; off--) {
        ember__avx2_no_vnni = off;
        CU_ASSERT(!off || !ember__avx2_vnni());
        test_wide_panels();
        test_exact_int32();
        ember_context *ctx;
        ember__cpu_state *s = cpu_state(&ctx);
        CU_ASSERT_PTR_NOT_NULL_FATAL(s);
        check_epilogue(s, 37, 45, 200, 0, 8, 0);
        check_epilogue(s, 1, 70, 200, 0, 8, 0);
        check_epilogue(s, 2, 45, 128, 0, 8, 0);
        check_epilogue(s, 9, 70, 200, 0, 8, 0);
        check_epilogue(s, 5, 70, 256, 32, 8, 0);   /* 8-bit, blocks of 32 */
        check_epilogue(s, 1, 100, 384, 128, 8, 1); /* decode row, 8-bit blocks of 128 */
        check_epilogue(s, 70, 50, 96, 32, 4, 0);   /* 4-bit, blocks of 32 */
        check_epilogue(s, 1, 1100, 256, 32, 4, 1); /* decode row, 4-bit, f16 scales */
        check_epilogue(s, 97, 40, 130, 0, 4, 0);   /* 4-bit, one chunk */
        g_sa_row = 1; /* one A scale per row: applied after the chunk sums */
        check_epilogue(s, 5, 70, 256, 32, 8, 0);
        check_epilogue(s, 70, 50, 96, 32, 4, 1);
        check_epilogue(s, 4, 70, 192, 64, 4, 0);  /* 4 rows a pass (AVX-VNNI) */
        check_epilogue(s, 1, 100, 256, 32, 4, 0); /* decode row */
        g_sa_row = 0;
        ember_context_destroy(ctx);
    }
    ember__avx2_no_vnni = 0;
}

/* ref = A (m x k, lda) times B (k x n) in int32, row by row (B read along its rows: the wide
 * cases of the test below have rows of up to 256 KiB) */
static void ref_rows(const int8_t *A, int64_t lda, const int8_t *B, int64_t m, int64_t n, int64_t k,
                     int32_t *ref) {
    for (int64_t i = 0; i < m; i++) {
        int32_t *r = ref + i * n;
        memset(r, 0, (size_t)n * sizeof *r);
        for (int64_t kk = 0; kk < k; kk++) {
            const int32_t a = A[i * lda + kk];
            const int8_t *b = B + kk * n;
            for (int64_t j = 0; j < n; j++)
                r[j] += a * b[j];
        }
    }
}

/* The float-output tile path (AMX: whole-K blocks for K <= 2048, slices of 512 beyond, tasks of
 * several row and column blocks): with unit scales and values small enough that every sum is
 * exact in f32 (|sum| < 2^24), the float output equals the int32 sum exactly, on every tier. */
static void test_float_path_exact(void) {
    ember_context *ctx;
    ember__cpu_state *s = cpu_state(&ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    static const int64_t shapes[][3] = {
        {300, 560, 700}, /* one K slice, 2 x 2 tasks, ragged edges */
        {70, 100, 2500}, /* panel order, slices of 1024 and a short last one; K % 64 != 0 */
        {200, 70, 1536}, /* panel order, two slices; blocks of 32 and 256 divide K */
        {530, 40, 2049}, /* panel order, three slices (the last of 64), two row tasks */
        {33, 65, 2048},  /* two row blocks, two slices */
        {300, 40, 4200}, /* a task's A over 1 MiB: slice order, slices of 512 */
        {520, 544, 256}, /* C of 1.1 MiB: ordinary stores, lines fetched for writing ahead */
        {1024, 4100, 4}, /* C of 16 MiB: rows written with streaming stores */
        {20, 70, 2100},  /* one row block: the whole K in its tiles */
        /* m-row AMX tiles (the thin kernel): C written a task's panels at a time; tasks of two
         * panels, then of eight with a short last task and a ragged last panel */
        {5, 1000, 300},
        {12, 4100, 200},
        /* C of 16 MiB in blocks along K: streamed through the chunked scaling (m-row tiles for
         * 16 rows, 32-row blocks for 64) */
        {16, 262144, 64},
        {64, 65536, 64},
        {1024, 40, 2048}, /* A of 2 MiB, packed by the tasks of four row groups */
    };
    for (size_t q = 0; q < sizeof shapes / sizeof shapes[0]; q++) {
        const int64_t m = shapes[q][0], n = shapes[q][1], k = shapes[q][2], lda = k + 3;
        int8_t *A = malloc((size_t)(m * lda)), *B = malloc((size_t)(k * n));
        /* 64-byte aligned: the rows of a large C on a line boundary are streamed */
        float *C = aligned_alloc(64, ((size_t)(m * n) * 4 + 63) / 64 * 64);
        int32_t *ref = malloc((size_t)(m * n) * 4), *ref4 = malloc((size_t)(m * n) * 4);
        int8_t *B4 = malloc((size_t)(k * n));
        rand_i8(A, (size_t)(m * lda), -40, 40);
        rand_i8(B, (size_t)(k * n), -40, 40); /* |sum| <= 2500 * 1600 < 2^24 */
        ref_rows(A, lda, B, m, n, k, ref);
        for (int v = 0; v < 4; v++) {
            /* v 0: 8-bit, one chunk; 1: 4-bit, blocks of 32; 2: 8-bit, blocks of 256; 3: 8-bit,
             * blocks of 32 (unit scales) */
            const int bits = v == 1 ? 4 : 8;
            const int64_t kc = v == 0 ? 0 : (v == 2 ? 256 : 32);
            if (kc && k % kc)
                continue;
            if (bits == 4) { /* 4-bit values: the reference over the values clamped to [-8, 7] */
                for (int64_t e = 0; e < k * n; e++)
                    B4[e] = (int8_t)(B[e] < -8 ? -8 : (B[e] > 7 ? 7 : B[e]));
                ref_rows(A, lda, B4, m, n, k, ref4);
            }
            const int32_t *rf = bits == 4 ? ref4 : ref;
            ember__qpack p;
            TU_OK(ember__qpack_b_s8(NULL, &p, k, n, n, kc, bits, bits == 4 ? B4 : B, NULL));
            for (int t = 0; t < EMBER__QT_COUNT; t++) {
                if (!ember__qtier_available((ember__qtier)t))
                    continue;
                /* the cases of over 2^26 products are there for the tiles' streamed rows; on the
                 * scalar tier they took most of the suite's time under ThreadSanitizer */
                if (t == EMBER__QT_SCALAR && m * n * k > ((int64_t)1 << 26))
                    continue;
                for (int64_t i = 0; i < m * n; i++)
                    C[i] = NAN;
                TU_OK(ember__qgemm(s, (ember__qtier)t, m, A, lda, NULL, &p, C, n));
                int bad = 0;
                for (int64_t i = 0; i < m * n && !bad; i++)
                    if (!(C[i] == (float)rf[i])) {
                        printf("\n  %s bits %d kc %lld m %lld n %lld k %lld: C[%lld] %g != %d",
                               ember__qtier_name((ember__qtier)t), bits, (long long)kc,
                               (long long)m, (long long)n, (long long)k, (long long)i, (double)C[i],
                               rf[i]);
                        bad = 1;
                    }
                CU_ASSERT_FALSE(bad);
            }
            ember__qpack_free(&p);
        }
        free(A);
        free(B);
        free(C);
        free(ref);
        free(ref4);
        free(B4);
    }
    ember_context_destroy(ctx);
}

/* A C of 16 MiB (rows streamed to memory) from the tiles' panel order (K in two slices): every
 * output written, and sampled outputs equal to their int32 sums exactly (unit scales, small
 * values). Sampled because the full reference is 4.5e9 products. The vector tiers run it too. */
static void test_float_panels_streamed(void) {
    ember_context *ctx;
    ember__cpu_state *s = cpu_state(&ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    const int64_t m = 1024, n = 4100, k = 1100, lda = k + 5;
    int8_t *A = malloc((size_t)(m * lda)), *B = malloc((size_t)(k * n));
    float *C = aligned_alloc(64, ((size_t)(m * n) * 4 + 63) / 64 * 64);
    CU_ASSERT_FATAL(A && B && C);
    rand_i8(A, (size_t)(m * lda), -40, 40);
    rand_i8(B, (size_t)(k * n), -40, 40); /* |sum| <= 1100 * 1600 < 2^24 */
    ember__qpack p;
    TU_OK(ember__qpack_b_s8(NULL, &p, k, n, n, 0, 8, B, NULL));
    for (int t = EMBER__QT_AVX2; t < EMBER__QT_COUNT; t++) {
        if (!ember__qtier_available((ember__qtier)t))
            continue;
        for (int64_t i = 0; i < m * n; i++)
            C[i] = NAN;
        TU_OK(ember__qgemm(s, (ember__qtier)t, m, A, lda, NULL, &p, C, n));
        int64_t unwritten = 0, wrong = 0;
        for (int64_t i = 0; i < m * n; i++)
            unwritten += C[i] != C[i];
        for (int q = 0; q < 4000; q++) {
            /* every row's first and last columns, and random ones */
            const int64_t i = q < 2048 ? q % m : (int64_t)(tu_next(&rng) % (uint64_t)m);
            const int64_t j =
                q < 1024 ? 0 : (q < 2048 ? n - 1 : (int64_t)(tu_next(&rng) % (uint64_t)n));
            int32_t ref = 0;
            for (int64_t e = 0; e < k; e++)
                ref += (int32_t)A[i * lda + e] * (int32_t)B[e * n + j];
            wrong += !(C[i * n + j] == (float)ref);
        }
        if (unwritten || wrong)
            printf("\n  %s: %lld outputs unwritten, %lld of 4000 sampled wrong",
                   ember__qtier_name((ember__qtier)t), (long long)unwritten, (long long)wrong);
        CU_ASSERT_EQUAL(unwritten, 0);
        CU_ASSERT_EQUAL(wrong, 0);
    }
    ember__qpack_free(&p);
    free(A);
    free(B);
    free(C);
    ember_context_destroy(ctx);
}

static void test_tiers(void) {
    CU_ASSERT_STRING_EQUAL(ember__qtier_name(EMBER__QT_AMX), "amx");
    CU_ASSERT_STRING_EQUAL(ember__qtier_name(EMBER__QT_AVX512), "avx512_vnni");
    CU_ASSERT_STRING_EQUAL(ember__qtier_name((ember__qtier)99), "unknown");
    CU_ASSERT_EQUAL(ember__qtier_select("scalar"), EMBER__QT_SCALAR);
    ember__qtier best = ember__qtier_select(NULL);
    CU_ASSERT(ember__qtier_available(best));
    CU_ASSERT(ember__qtier_select("avx2") <= EMBER__QT_AVX2);
    CU_ASSERT(ember__qtier_select("avx512") <= EMBER__QT_AVX512);
    CU_ASSERT_EQUAL(ember__qtier_select("bogus"), best);
}

/* the unpacked kernels of small first calls (AMX for 2..128 rows, AVX-512 VNNI for 1..16, and up
 * to 64 on a B of at most 1 M values): exact int32 and the scales, on the context's tier (AMX
 * where there is one) and capped to VNNI */
static int direct_cases(ember__cpu_state *s) {
    /* n 9000: a task wider than the kernels' 2048-column pass; k 301: three chunks of up to 128
     * rows and a partial group of 4 / tile of 64; n 130: a partial piece of 64; m 17 and 32: two
     * row halves
     * on AMX; 33..128: blocks of 32, the last padded. VNNI takes rows in groups of up to 6, as
     * even as they come: 1, 2, 3, 4 + 4 (8), 3 + 4 (7), 4 + 4 + 5 (13), 5 + 5 + 6 (16) */
    static const int64_t ms[] = {1, 2, 3, 7, 8, 13, 16, 17, 32, 33, 70, 128},
                         ns[] = {1, 17, 64, 100, 130, 4200, 9000},
                         ks[] = {1, 2, 7, 64, 65, 301, 600, 4096};
    int ran = 0;
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < 7; b++)
            for (size_t c = 0; c < 8; c++) {
                int64_t m = ms[a], n = ns[b], k = ks[c], lda = k + 3, ldb = n + 5;
                if ((n > 1000 && (k > 65 || (k == 65 && m != 70) || (m > 32 && m != 70))) ||
                    (k == 600 && m < 33) || (k == 4096 && (n != 100 || (m != 8 && m != 70))))
                    continue; /* k 600: over 32 rows, two chunks of 512; n 4200 and 9000 at
                                 k 65 once (a partial tile, several tasks); k 4096 (AMX pads
                                 A's rows off the 4 KiB multiple) at 8 and 70 rows */
                int8_t *A = malloc((size_t)(m * lda)), *B = malloc((size_t)(k * ldb));
                int32_t *C = malloc((size_t)(m * n) * 4);
                float *F = malloc((size_t)(m * n) * 4), sa[128], *sb = malloc((size_t)n * 4);
                rand_i8(A, (size_t)(m * lda), -128, 127);
                rand_i8(B, (size_t)(k * ldb), -128, 127);
                tu_rand_f32(&rng, sa, 128, 0.01f, 0.1f);
                tu_rand_f32(&rng, sb, (size_t)n, 0.01f, 0.1f);
                ember_status st =
                    ember__qgemm_direct(s, m, n, k, A, lda, NULL, B, ldb, NULL, NULL, C, n);
                if (st == EMBER_ERR_QUANT_UNSUPPORTED) { /* no kernel for these rows on this tier */
                    free(A), free(B), free(C), free(F), free(sb);
                    continue;
                }
                TU_OK(st);
                TU_OK(ember__qgemm_direct(s, m, n, k, A, lda, sa, B, ldb, sb, F, NULL, n));
                int bad = 0;
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++) {
                        int32_t ref = 0;
                        for (int64_t kk = 0; kk < k; kk++)
                            ref += (int32_t)A[i * lda + kk] * B[kk * ldb + j];
                        double fr = (double)sa[i] * (double)sb[j] * (double)ref;
                        if (ref != C[i * n + j] ||
                            fabs((double)F[i * n + j] - fr) > 1e-6 * fabs(fr) + 1e-30)
                            bad = 1;
                    }
                if (bad)
                    printf("\n  direct m %lld n %lld k %lld differs", (long long)m, (long long)n,
                           (long long)k);
                CU_ASSERT_FALSE(bad);
                ran++;
                free(A), free(B), free(C), free(F), free(sb);
            }
    return ran;
}

static void test_direct(void) {
    ember_context *ctx;
    ember__cpu_state *s = cpu_state(&ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    int ran = direct_cases(s);
    /* K = 0: empty sums, zeros out */
    {
        float z[3 * 5];
        int32_t z32[3 * 5];
        for (int e = 0; e < 15; e++)
            z[e] = NAN, z32[e] = 7;
        const int8_t one = 1;
        if (ember__qgemm_direct(s, 3, 5, 0, &one, 1, NULL, &one, 5, NULL, z, NULL, 5) == EMBER_OK) {
            TU_OK(ember__qgemm_direct(s, 3, 5, 0, &one, 1, NULL, &one, 5, NULL, NULL, z32, 5));
            for (int e = 0; e < 15; e++) {
                CU_ASSERT_EQUAL(z[e], 0.0f);
                CU_ASSERT_EQUAL(z32[e], 0);
            }
        }
    }
    /* more rows than either kernel takes: declined, nothing written */
    static int8_t a129[129 * 8] = {1}, b8[8 * 4] = {1};
    static float c129[129 * 4] = {42.0f};
    CU_ASSERT_EQUAL(ember__qgemm_direct(s, 129, 4, 8, a129, 8, NULL, b8, 4, NULL, c129, NULL, 4),
                    EMBER_ERR_QUANT_UNSUPPORTED);
    CU_ASSERT_EQUAL(c129[0], 42.0f);
    ember_context_destroy(ctx);
    /* the VNNI kernel where AMX would take the rows */
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.cpu_max_isa = "avx512_vnni";
    TU_OK(ember_context_create(&o, &ctx));
    s = ember__cpu_state_of(ctx);
    ran += direct_cases(s);
    /* over 64 rows, or over 16 with B over 1 M values (1024 x 1025: declined before any of it is
     * read): packing B serves those better */
    CU_ASSERT_EQUAL(ember__qgemm_direct(s, 65, 4, 8, a129, 8, NULL, b8, 4, NULL, c129, NULL, 4),
                    EMBER_ERR_QUANT_UNSUPPORTED);
    CU_ASSERT_EQUAL(
        ember__qgemm_direct(s, 17, 1025, 1024, a129, 1024, NULL, b8, 1025, NULL, c129, NULL, 1025),
        EMBER_ERR_QUANT_UNSUPPORTED);
    CU_ASSERT_EQUAL(c129[0], 42.0f);
    ember_context_destroy(ctx);
    if (!ran)
        printf("\n  direct kernels: no AVX-512 on this machine, skipped");
}

/* ---------------------------------------------------------------- the vtable entry */

static ember_tensor *mk_f32(ember_context *ctx, int rank, const int64_t *shape, float lo,
                            float hi) {
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)shape[i];
    float *x = malloc(n * sizeof(float));
    tu_rand_f32(&rng, x, n, lo, hi);
    ember_tensor *t = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, rank, shape, x, &t));
    free(x);
    return t;
}

static ember_tensor *mk_q(ember_context *ctx, const ember_qscheme *s, int rank,
                          const int64_t *shape) {
    ember_tensor *x = mk_f32(ctx, rank, shape, -2.0f, 2.0f), *q = NULL;
    TU_OK(ember_quantize(x, s, &q));
    ember_tensor_free(x);
    return q;
}

/* float64 reference of matmul over the dequantized (or float) operands; batch broadcast on
 * rank-3 / rank-2 pairs */
static double *reference(const ember_tensor *a, const ember_tensor *b, int64_t *cells) {
    ember_tensor *da = NULL, *db = NULL;
    if (ember_tensor_dtype(a) == EMBER_QFLOAT)
        TU_OK(ember_dequantize(a, &da));
    if (ember_tensor_dtype(b) == EMBER_QFLOAT)
        TU_OK(ember_dequantize(b, &db));
    const ember_tensor *fa = da ? da : a, *fb = db ? db : b;
    int ra = ember_tensor_rank(fa), rb = ember_tensor_rank(fb);
    int64_t m = ember_tensor_dim(fa, ra - 2), k = ember_tensor_dim(fa, ra - 1);
    int64_t n = ember_tensor_dim(fb, rb - 1);
    int64_t ba = ra == 3 ? ember_tensor_dim(fa, 0) : 1, bb = rb == 3 ? ember_tensor_dim(fb, 0) : 1;
    int64_t batch = ba > bb ? ba : bb;
    float *x = malloc((size_t)ember_tensor_numel(fa) * 4),
          *y = malloc((size_t)ember_tensor_numel(fb) * 4);
    TU_OK(ember_tensor_read(fa, x, (size_t)ember_tensor_numel(fa) * 4));
    TU_OK(ember_tensor_read(fb, y, (size_t)ember_tensor_numel(fb) * 4));
    double *r = calloc((size_t)(batch * m * n), sizeof(double));
    for (int64_t q = 0; q < batch; q++) {
        const float *xa = x + (ba > 1 ? q : 0) * m * k, *yb = y + (bb > 1 ? q : 0) * k * n;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double acc = 0;
                for (int64_t kk = 0; kk < k; kk++)
                    acc += (double)xa[i * k + kk] * (double)yb[kk * n + j];
                r[(q * m + i) * n + j] = acc;
            }
    }
    *cells = batch * m * n;
    free(x);
    free(y);
    ember_tensor_free(da);
    ember_tensor_free(db);
    return r;
}

/* relative to the largest |reference| value */
static double max_rel_err(const ember_tensor *out, const double *ref, int64_t cells) {
    float *o = malloc((size_t)cells * 4);
    TU_OK(ember_tensor_read(out, o, (size_t)cells * 4));
    double big = 1e-30, worst = 0;
    for (int64_t i = 0; i < cells; i++)
        big = fmax(big, fabs(ref[i]));
    for (int64_t i = 0; i < cells; i++) {
        double e = fabs((double)o[i] - ref[i]) / big;
        worst = isnan(e) ? INFINITY : fmax(worst, e);
    }
    free(o);
    return worst;
}

static int packed(const ember_tensor *t) { return t->pack.data != NULL; }

typedef struct qcase {
    const char *name;
    ember_qvalue av, bv;
    ember_qstore as, bs;
    int ablock_rank, bblock_rank;
    int64_t ablock[2], bblock[2];
    int64_t m, k, n;
    int integer; /* 1: the integer path must take it (the rhs gets a pack cache) */
} qcase;

static ember_qscheme scheme_of(ember_qvalue v, ember_qstore st, int brank, const int64_t *block) {
    return brank ? ember_qscheme_per_block(v, st, brank, block) : ember_qscheme_per_tensor(v, st);
}

static void test_q_matmul_entry(void) {
    static const qcase cases[] = {
        {"Q8S x Q8S per-tensor",
         EMBER_Q8S,
         EMBER_Q8S,
         EMBER_QSTORE_NATIVE,
         EMBER_QSTORE_NATIVE,
         0,
         0,
         {0},
         {0},
         37,
         100,
         45,
         1},
        {"Q8F x Q8S per-row x per-column",
         EMBER_Q8F,
         EMBER_Q8S,
         EMBER_QSTORE_NATIVE,
         EMBER_QSTORE_NATIVE,
         2,
         2,
         {1, 96},
         {96, 1},
         40,
         96,
         33,
         1},
        {"Q8S x Q4S block 32 along K (PackedU32)",
         EMBER_Q8S,
         EMBER_Q4S,
         EMBER_QSTORE_NATIVE,
         EMBER_QSTORE_PACKED_U32,
         2,
         2,
         {1, 64},
         {32, 8},
         35,
         128,
         48,
         1},
        {"Q8S x Q2S block 64 (PackedU32)",
         EMBER_Q8S,
         EMBER_Q2S,
         EMBER_QSTORE_NATIVE,
         EMBER_QSTORE_PACKED_U32,
         0,
         2,
         {0},
         {64, 16},
         5,
         192,
         64,
         1},
        {"Q4S (PackedU32) x Q8S decode row",
         EMBER_Q4S,
         EMBER_Q8S,
         EMBER_QSTORE_PACKED_U32,
         EMBER_QSTORE_NATIVE,
         2,
         2,
         {1, 128},
         {128, 1},
         1,
         256,
         80,
         1},
        {"Q8S x Q8S, B blocks along N only (declined)",
         EMBER_Q8S,
         EMBER_Q8S,
         EMBER_QSTORE_NATIVE,
         EMBER_QSTORE_NATIVE,
         0,
         1,
         {0},
         {16},
         6,
         32,
         48,
         0},
        {"Q8S x Q8S, K blocks of 16 (declined)",
         EMBER_Q8S,
         EMBER_Q8S,
         EMBER_QSTORE_NATIVE,
         EMBER_QSTORE_NATIVE,
         2,
         0,
         {1, 16},
         {0},
         6,
         64,
         16,
         0},
    };
    ember_context *ctx = tu_cpu_context();
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const qcase *q = &cases[c];
        ember_qscheme sa = scheme_of(q->av, q->as, q->ablock_rank, q->ablock);
        ember_qscheme sb = scheme_of(q->bv, q->bs, q->bblock_rank, q->bblock);
        const int64_t ash[2] = {q->m, q->k}, bsh[2] = {q->k, q->n};
        ember_tensor *a = mk_q(ctx, &sa, 2, ash), *b = mk_q(ctx, &sb, 2, bsh), *y = NULL;
        CU_ASSERT_PTR_NOT_NULL_FATAL(a);
        CU_ASSERT_PTR_NOT_NULL_FATAL(b);
        int64_t cells;
        double *ref = reference(a, b, &cells);
        for (int rep = 0; rep < 2; rep++) { /* the second call uses the pack cache */
            TU_OK(ember_q_matmul(a, b, &y));
            double err = max_rel_err(y, ref, cells);
            if (!(err < 1e-5))
                printf("\n  %s: rel err %g", q->name, err);
            CU_ASSERT(err < 1e-5);
            ember_tensor_free(y);
            y = NULL;
        }
        CU_ASSERT_EQUAL(packed(b), q->integer);
        CU_ASSERT_FALSE(packed(a));
        free(ref);
        ember_tensor_free(a);
        ember_tensor_free(b);
    }
    ember_context_destroy(ctx);
}

/* 1 where a first call of m rows (8-bit Native B, one chunk) runs on B as it is stored on this
 * context: m <= 128 and a direct kernel for m rows on its tier (the context's cap included) */
static int direct_takes(ember__cpu_state *cs, int64_t m) {
    return m <= 128 && ember__qgemm_direct(cs, m, 0, 0, NULL, 0, NULL, NULL, 0, NULL, NULL, NULL,
                                           0) == EMBER_OK;
}

/* a decode-sized first call runs unpacked and marks the tensor; the second use packs */
static void test_first_call_policy(void) {
    ember_context *ctx = tu_cpu_context();
    ember__cpu_state *cs = ember__cpu_state_of(ctx);
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    static const int64_t rows[3] = {4, 40, 200};
    for (int r = 0; r < 3; r++) {
        ember_tensor *x = mk_q(ctx, &s, 2, (int64_t[]){rows[r], 96});
        ember_tensor *w = mk_q(ctx, &s, 2, (int64_t[]){96, 70});
        int64_t cells;
        double *ref = reference(x, w, &cells);
        const int unpacked_first = direct_takes(cs, rows[r]);
        for (int call = 0; call < 3; call++) {
            ember_tensor *y = NULL;
            TU_OK(ember_q_matmul(x, w, &y));
            CU_ASSERT(max_rel_err(y, ref, cells) < 1e-5);
            CU_ASSERT_EQUAL(packed(w), unpacked_first ? call >= 1 : 1);
            ember_tensor_free(y);
        }
        free(ref);
        ember_tensor_free(x);
        ember_tensor_free(w);
    }
    ember_context_destroy(ctx);
}

static void test_q_matmul_batched(void) {
    ember_context *ctx = tu_cpu_context();
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    /* B in blocks of 32 down each column ([1, 32, 1] on a batch of matrices: each matrix's
     * chunk scales are a run of the scale grid, which the pack reads in place) */
    ember_qscheme sk =
        ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, (int64_t[]){32, 1});
    sk.block_scale = EMBER_SCALE_F16;
    const int64_t a3[3] = {3, 20, 70}, b2[2] = {70, 40}, a2[2] = {20, 70}, b3[3] = {3, 70, 40};
    const int64_t a3k[3] = {3, 20, 96}, b3k[3] = {3, 96, 40};
    const int64_t *as[3] = {a3, a2, a3k}, *bs[3] = {b2, b3, b3k};
    const int ar[3] = {3, 2, 3}, br[3] = {2, 3, 3};
    for (int t = 0; t < 3; t++) {
        ember_tensor *a = mk_q(ctx, &s, ar[t], as[t]),
                     *b = mk_q(ctx, t == 2 ? &sk : &s, br[t], bs[t]), *y = NULL;
        int64_t cells;
        double *ref = reference(a, b, &cells);
        for (int call = 0; call < 2; call++) { /* a first call may run unpacked */
            TU_OK(ember_q_matmul(a, b, &y));
            CU_ASSERT_EQUAL(ember_tensor_numel(y), cells);
            CU_ASSERT(max_rel_err(y, ref, cells) < 1e-5);
            ember_tensor_free(y);
            y = NULL;
        }
        CU_ASSERT(packed(b));
        free(ref);
        ember_tensor_free(a);
        ember_tensor_free(b);
    }
    ember_context_destroy(ctx);
}

/* quantized (s != NULL) or float tensor of the given values on ctx */
static ember_tensor *tensor_of(ember_context *ctx, const ember_qscheme *s, int rank,
                               const int64_t *shape, const float *x) {
    ember_tensor *t = NULL, *q = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, rank, shape, x, &t));
    if (!s)
        return t;
    TU_OK(ember_quantize(t, s, &q));
    ember_tensor_free(t);
    return q;
}

/* Wide Native 8-bit B over 128 rows (the first call packs B, no unpacked kernel): each result
 * is within 1e-5 of the float64 reference, B holds its pack after the call, and the first call,
 * the cached second call and a context with another thread count (2 and 3 threads: other task
 * splits) give the same bits. Cases: one matrix; A batched against one B; batched A and B; blocks
 * of 32 along K; and the dynamic quantization of a float B (W8A8, packed on every call). */
static void test_wide_same_bits(void) {
    typedef struct pcase {
        const char *name;
        int ra, rb;
        int64_t as[3], bs[3];
        int blocks; /* B in blocks of 32 along K */
        int fb;     /* B float, dynamic activation quantization */
    } pcase;
    static const pcase cases[] = {
        {"one matrix", 2, 2, {150, 96}, {96, 300}, 0, 0},
        {"A batched, one B", 3, 2, {3, 140, 64}, {64, 300}, 0, 0},
        {"A and B batched", 3, 3, {2, 140, 64}, {2, 64, 300}, 0, 0},
        {"blocks of 32 along K", 2, 2, {40, 128}, {128, 300}, 1, 0},
        {"float B, dynamic quantization", 2, 2, {20, 64}, {64, 300}, 0, 1},
    };
    ember_context *ctx[2];
    ember__cpu_serial_off = 1;    /* these products are small: spread them over the threads too */
    for (int c = 0; c < 2; c++) { /* 2 and 3 threads */
        ember_options o = ember_options_default();
        o.enable_opencl = 0;
        o.num_threads = 2 + c;
        o.dynamic_activation_quant = 1;
        ctx[c] = NULL;
        TU_OK(ember_context_create(&o, &ctx[c]));
        CU_ASSERT_PTR_NOT_NULL_FATAL(ctx[c]); /* e.g. a bad EMBER_CPU_MAX_ISA in the environment */
    }
    const ember_qscheme sq = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    const ember_qscheme sk =
        ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, (int64_t[]){32, 1});
    for (size_t q = 0; q < sizeof cases / sizeof cases[0]; q++) {
        const pcase *pc = &cases[q];
        int64_t na = 1, nb = 1;
        for (int i = 0; i < pc->ra; i++)
            na *= pc->as[i];
        for (int i = 0; i < pc->rb; i++)
            nb *= pc->bs[i];
        float *xa = malloc((size_t)na * 4), *xb = malloc((size_t)nb * 4);
        tu_rand_f32(&rng, xa, (size_t)na, -2.0f, 2.0f);
        tu_rand_f32(&rng, xb, (size_t)nb, -2.0f, 2.0f);
        float *out[3] = {NULL, NULL, NULL};
        int64_t cells = 0;
        for (int c = 0; c < 2; c++) {
            ember_tensor *a = tensor_of(ctx[c], &sq, pc->ra, pc->as, xa);
            ember_tensor *b =
                tensor_of(ctx[c], pc->fb ? NULL : (pc->blocks ? &sk : &sq), pc->rb, pc->bs, xb);
            double *ref = reference(a, b, &cells);
            for (int call = 0; call < (c ? 1 : 2); call++) {
                ember_tensor *y = NULL;
                TU_OK(ember_q_matmul(a, b, &y));
                double err = max_rel_err(y, ref, cells);
                /* dynamic quantization of B: 8-bit columns, ~1/254 of the range (lossy) */
                if (!(err < (pc->fb ? 2e-2 : 1e-5)))
                    printf("\n  %s, %d threads, call %d: rel err %g", pc->name, 2 + c, call, err);
                CU_ASSERT(err < (pc->fb ? 2e-2 : 1e-5));
                if (!pc->fb)
                    CU_ASSERT(packed(b));
                float *o = malloc((size_t)cells * 4);
                TU_OK(ember_tensor_read(y, o, (size_t)cells * 4));
                out[c ? 2 : call] = o;
                ember_tensor_free(y);
            }
            free(ref);
            ember_tensor_free(a);
            ember_tensor_free(b);
        }
        CU_ASSERT(memcmp(out[0], out[1], (size_t)cells * 4) == 0); /* first call, cached */
        CU_ASSERT(memcmp(out[0], out[2], (size_t)cells * 4) == 0); /* 2 threads, 3 threads */
        for (int i = 0; i < 3; i++)
            free(out[i]);
        free(xa);
        free(xb);
    }
    ember__cpu_serial_off = 0;
    ember_context_destroy(ctx[0]);
    ember_context_destroy(ctx[1]);
}

/* 1 when l1 x r1 and l2 x r2 (cells floats each) come out the same, bit for bit */
static int same_products(ember_tensor *l1, ember_tensor *r1, ember_tensor *l2, ember_tensor *r2,
                         size_t cells) {
    ember_tensor *y1 = NULL, *y2 = NULL;
    float *o1 = malloc(cells * 4), *o2 = malloc(cells * 4);
    CU_ASSERT_FATAL(o1 && o2);
    TU_OK(ember_q_matmul(l1, r1, &y1));
    TU_OK(ember_q_matmul(l2, r2, &y2));
    TU_OK(ember_tensor_read(y1, o1, cells * 4));
    TU_OK(ember_tensor_read(y2, o2, cells * 4));
    const int same = memcmp(o1, o2, cells * 4) == 0;
    ember_tensor_free(y1);
    ember_tensor_free(y2);
    free(o1);
    free(o2);
    return same;
}

/* 1 when l x r ([m, n]) is NaN at each of count cells from first, step apart */
static int nan_cells(ember_tensor *l, ember_tensor *r, int64_t m, int64_t n, int64_t first,
                     int64_t step, int64_t count) {
    ember_tensor *y = NULL;
    float *o = malloc((size_t)(m * n) * 4);
    CU_ASSERT_FATAL(o != NULL);
    TU_OK(ember_q_matmul(l, r, &y));
    TU_OK(ember_tensor_read(y, o, (size_t)(m * n) * 4));
    int all = 1;
    for (int64_t c = 0; c < count; c++)
        all &= isnan(o[first + c * step]) != 0;
    ember_tensor_free(y);
    free(o);
    return all;
}

/* W8A8 quantizes each row of A as ember_quantize does with one block per row: the product is,
 * bit for bit, the (Q,Q) product of A quantized per_block([1, k]) (a zero row included); a NaN in
 * a row of A leaves the call to burn's float path, which gives that row NaN. The same for a float
 * rhs, quantized per column. */
static void test_w8a8_rows(void) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.dynamic_activation_quant = 1;
    ember_context *ctx = NULL;
    TU_OK(ember_context_create(&o, &ctx));
    const int64_t m = 9, k = 192, n = 96;
    const ember_qscheme ws =
        ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, (int64_t[]){64, 1});
    const ember_qscheme pt = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_qscheme as =
        ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, (int64_t[]){1, k});
    ember_qscheme bs =
        ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, (int64_t[]){k, 1});
    as.block_scale = bs.block_scale = EMBER_SCALE_F32;
    ember_tensor *w = mk_q(ctx, &ws, 2, (int64_t[]){k, n}),
                 *qa2 = mk_q(ctx, &pt, 2, (int64_t[]){m, k});
    float *xs = malloc((size_t)(m * k) * sizeof(float)), *fs = malloc((size_t)(k * n) * 4);
    CU_ASSERT_FATAL(xs && fs);
    tu_rand_f32(&rng, xs, (size_t)(m * k), -1.5f, 1.5f);
    tu_rand_f32(&rng, fs, (size_t)(k * n), -1.0f, 1.0f);
    for (int64_t kk = 0; kk < k; kk++)
        xs[3 * k + kk] = 0.0f;
    ember_tensor *x = NULL, *qa = NULL, *xn = NULL, *f = NULL, *qf = NULL, *fn = NULL;
    /* (F,Q): A per row */
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, (int64_t[]){m, k}, xs, &x));
    TU_OK(ember_quantize(x, &as, &qa));
    CU_ASSERT(same_products(x, w, qa, w, (size_t)(m * n)));
    xs[2 * k + 5] = NAN; /* a NaN in row 2 */
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, (int64_t[]){m, k}, xs, &xn));
    CU_ASSERT(nan_cells(xn, w, m, n, 2 * n, 1, n));
    /* (Q,F): the float rhs per column, as per_block([k, 1]); a NaN in column 7 */
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, (int64_t[]){k, n}, fs, &f));
    TU_OK(ember_quantize(f, &bs, &qf));
    CU_ASSERT(same_products(qa2, f, qa2, qf, (size_t)(m * n)));
    fs[11 * n + 7] = NAN;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, (int64_t[]){k, n}, fs, &fn));
    CU_ASSERT(nan_cells(qa2, fn, m, n, 7, n, m));
    ember_tensor *all[] = {w, qa2, x, qa, xn, f, qf, fn};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ember_tensor_free(all[i]);
    free(xs);
    free(fs);
    ember_context_destroy(ctx);
}

/* (F,Q): burn's float path by default; W8A8 with dynamic_activation_quant (lossy) */
static void test_dynamic_activation_quant(void) {
    ember_qscheme s =
        ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, (int64_t[]){64, 1});
    const int64_t xs[2] = {9, 128}, ws[2] = {128, 50}, xt[2] = {50, 9};
    for (int on = 0; on <= 1; on++) {
        ember_options o = ember_options_default();
        o.enable_opencl = 0;
        o.dynamic_activation_quant = on;
        ember_context *ctx = NULL;
        TU_OK(ember_context_create(&o, &ctx));
        ember_tensor *x = mk_f32(ctx, 2, xs, -1.0f, 1.0f), *w = mk_q(ctx, &s, 2, ws), *y = NULL;
        int64_t cells;
        double *ref = reference(x, w, &cells);
        TU_OK(ember_q_matmul(x, w, &y));
        double err = max_rel_err(y, ref, cells);
        /* off: the float path (float rounding only); on: 8-bit activations, ~1/254 of the range */
        CU_ASSERT(err < (on ? 2e-2 : 1e-5));
        CU_ASSERT(on ? err > 0 : 1);
        CU_ASSERT_EQUAL(packed(w), on);
        ember_tensor_free(y);
        free(ref);
        /* (Q,F): the float rhs is quantized per column */
        ember_tensor *f = mk_f32(ctx, 2, xt, -1.0f, 1.0f);
        ember_qscheme sq = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
        ember_tensor *qa = mk_q(ctx, &sq, 2, (int64_t[]){7, 50});
        ref = reference(qa, f, &cells);
        TU_OK(ember_q_matmul(qa, f, &y));
        CU_ASSERT(max_rel_err(y, ref, cells) < (on ? 2e-2 : 1e-5));
        free(ref);
        ember_tensor_free(y);
        ember_tensor_free(qa);
        ember_tensor_free(f);
        ember_tensor_free(x);
        ember_tensor_free(w);
        ember_context_destroy(ctx);
    }
}

/* w's values and scales as a tensor of another context (scheme s, [k, n]): from its bytes */
static ember_tensor *weights_in(ember_context *c2, const ember_tensor *w, const ember_qscheme *s,
                                int64_t k, int64_t n) {
    size_t nb = 0;
    TU_OK(ember_qtensor_to_bytes(w, NULL, 0, &nb));
    uint8_t *bytes = malloc(nb);
    TU_OK(ember_qtensor_to_bytes(w, bytes, nb, &nb));
    ember_tensor *w2 = NULL;
    TU_OK(ember_qtensor_from_bytes(c2, TU_CPU, s, 2, (int64_t[]){k, n}, bytes, nb, &w2));
    free(bytes);
    return w2;
}

/* One-hot rows of an [m, k] lhs against w [k, n]: row i picks weight row (i * 7) % k, which must
 * come back exactly, the dequantized weight row (ember_dequantize's floats) bit for bit */
static int onehot_rows_exact(ember_context *ctx, const ember_tensor *w, int64_t m, int64_t k,
                             int64_t n) {
    float *oh = calloc((size_t)(m * k), sizeof(float)), *out = malloc((size_t)(m * n) * 4),
          *dq = malloc((size_t)(k * n) * 4);
    for (int64_t i = 0; i < m; i++)
        oh[i * k + (i * 7) % k] = 1.0f;
    ember_tensor *xo = NULL, *y = NULL, *dw = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, (int64_t[]){m, k}, oh, &xo));
    TU_OK(ember_q_matmul(xo, w, &y));
    TU_OK(ember_dequantize(w, &dw));
    TU_OK(ember_tensor_read(dw, dq, (size_t)(k * n) * 4));
    TU_OK(ember_tensor_read(y, out, (size_t)(m * n) * 4));
    int same = 1;
    for (int64_t i = 0; i < m && same; i++)
        same = memcmp(out + i * n, dq + ((i * 7) % k) * n, (size_t)n * 4) == 0;
    free(oh);
    free(out);
    free(dq);
    ember_tensor_free(xo);
    ember_tensor_free(dw);
    ember_tensor_free(y);
    return same;
}

/* (F,Q) with up to EMBER__FQ_MAX_ROWS rows: burn's float path, fused (backends/cpu/fq_matmul.c).
 * Every scale layout the fused path reads (per tensor; per column; blocks along K that divide
 * K, across the kernel's K chunks; one scale across the columns; F32 / F16 / BF16 scales; two-level
 * with a global scale; UE4M3 block scales, decoded per call) and one it leaves to the dequantize
 * path (8 columns a block), on shapes with column tails and batches: the float64 reference of the
 * dequantized weights within 1e-5 of the largest output, the weights never packed; and with one-hot
 * rows of the lhs, each output row is the dequantized weight row bit for bit (the fused weights are
 * ember_dequantize's). Run by CTest on the AVX-512 kernel and, with EMBER_CPU_MAX_ISA capped
 * (make test-tiers), on the portable one. */
static ember_qscheme fq_scheme(int kind, int64_t k, int64_t n) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    switch (kind) {
    case 0: /* Q8S per tensor (until 2026-11-30 kind 0 fell to the default below: Q2S, which the
             * fused path leaves to dequantize + sgemm, so per tensor was never tested here, and
             * test_fq_decode_row compared OpenBLAS's 1- and 2-row sgemm, which differ in the last
             * bits with its Prescott kernels, those it picks on the Xeon it does not know) */
        break;
    case 1: /* per column */
        s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, (int64_t[]){k, 1});
        break;
    case 2: /* blocks of 32 along K, F16 scales */
        s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, (int64_t[]){32, 1});
        s.block_scale = EMBER_SCALE_F16;
        break;
    case 3: /* blocks of 48 along K (not a divisor of the kernel's K chunk), BF16 scales */
        s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, (int64_t[]){48, 1});
        s.block_scale = EMBER_SCALE_BF16;
        break;
    case 4: /* one scale per K row across the columns */
        s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, (int64_t[]){1, n});
        break;
    case 5: /* two-level: F16 blocks of 16 under a global f32 scale */
        s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, (int64_t[]){16, 1});
        s.block_scale = EMBER_SCALE_F16;
        s.tensor_level = 1;
        break;
    case 6: /* two-level with UE4M3 block scales (decoded per call) */
        s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, (int64_t[]){32, 1});
        s.block_scale = EMBER_SCALE_UE4M3;
        s.tensor_level = 1;
        break;
    case 7: /* 8 columns a block: left to dequantize + float matmul */
        s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, (int64_t[]){k, 8});
        break;
    case 8: /* Q8F per tensor */
        s = ember_qscheme_per_tensor(EMBER_Q8F, EMBER_QSTORE_NATIVE);
        break;
    case 9: /* Q4S nibbles per tensor */
        s = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
        break;
    case 10: /* Q4S nibbles, blocks of 32 along K, F16 scales (decode_step's) */
        s = ember_qscheme_per_block(EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 2, (int64_t[]){32, 1});
        s.block_scale = EMBER_SCALE_F16;
        break;
    case 11: /* Q4F nibbles per column */
        s = ember_qscheme_per_block(EMBER_Q4F, EMBER_QSTORE_PACKED_U32, 2, (int64_t[]){k, 1});
        break;
    default: /* Q2S: left to dequantize + float matmul */
        s = ember_qscheme_per_tensor(EMBER_Q2S, EMBER_QSTORE_PACKED_U32);
        break;
    }
    return s;
}

/* A decode row of the fused path (one lhs row against a task of 256 full columns) reads each K
 * row of the task at once: its outputs must be the first row of the same product with a second
 * lhs row (the 4-row group path), bit for bit, for 8- and 4-bit weights, a scale per matrix, per
 * column, per block along K (f16, bf16, two-level, decoded UE4M3), and a ragged last task. */
static void test_fq_decode_row(void) {
    ember_context *ctx = tu_cpu_context();
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    static const int kinds[] = {0, 1, 2, 3, 5, 6, 8, 9, 10, 11}; /* fq_scheme's */
    const int64_t k = 192, n = 552; /* two full tasks and one of 40 columns */
    int tested = 0;
    for (size_t q = 0; q < sizeof kinds / sizeof kinds[0]; q++) {
        ember_qscheme s = fq_scheme(kinds[q], k, n);
        ember_tensor *w = NULL, *wf = mk_f32(ctx, 2, (int64_t[]){k, n}, -2.0f, 2.0f);
        TU_OK(ember_quantize(wf, &s, &w));
        ember_tensor_free(wf);
        tested++;
        ember_tensor *x2 = mk_f32(ctx, 2, (int64_t[]){2, k}, -1.0f, 1.0f), *x1 = NULL;
        float *xs = malloc((size_t)(2 * k) * 4);
        TU_OK(ember_tensor_read(x2, xs, (size_t)(2 * k) * 4));
        TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, (int64_t[]){1, k}, xs, &x1));
        ember_tensor *y1 = NULL, *y2 = NULL;
        TU_OK(ember_q_matmul(x1, w, &y1));
        TU_OK(ember_q_matmul(x2, w, &y2));
        float *o1 = malloc((size_t)n * 4), *o2 = malloc((size_t)(2 * n) * 4);
        TU_OK(ember_tensor_read(y1, o1, (size_t)n * 4));
        TU_OK(ember_tensor_read(y2, o2, (size_t)(2 * n) * 4));
        int64_t bad = -1, nbad = 0;
        for (int64_t j = 0; j < n; j++)
            if (memcmp(&o1[j], &o2[j], 4) != 0 && nbad++ == 0)
                bad = j;
        if (nbad)
            printf("\n  scheme %d: %lld of %lld outputs differ, first at column %lld: %a (1 row) "
                   "against %a (2 rows)",
                   kinds[q], (long long)nbad, (long long)n, (long long)bad, (double)o1[bad],
                   (double)o2[bad]);
        CU_ASSERT(nbad == 0);
        int64_t cells;
        double *ref = reference(x1, w, &cells);
        CU_ASSERT(max_rel_err(y1, ref, cells) < 1e-5);
        free(ref);
        free(xs);
        free(o1);
        free(o2);
        ember_tensor_free(x1);
        ember_tensor_free(x2);
        ember_tensor_free(y1);
        ember_tensor_free(y2);
        ember_tensor_free(w);
    }
    CU_ASSERT_EQUAL(tested, 10);
    ember_context_destroy(ctx);
}

/* The fused path's AVX2 kernel (CPUs without AVX-512) takes 32 or 64 columns a pass over the
 * whole K (or, from 9 rows, K chunks of 256) where the AVX-512 one takes 64 and chunks of 128:
 * the same products in the same order, so a context capped at avx2 gives the uncapped context's
 * results bit for bit (1, 2, 3, 5, 8, 9, 12, 37 and 130 rows; K in one chunk of the AVX-512
 * kernel and in three; every scheme of fq_scheme the path takes; ragged last columns). Both are
 * also checked against the float64 reference. */
static void test_fq_avx2(void) {
    if (!ember__qtier_available(EMBER__QT_AVX2))
        return;
    /* the uncapped context says so itself: EMBER_CPU_MAX_ISA (make test-tiers) would cap it */
    ember_context *ctx = NULL, *c2 = NULL;
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.cpu_max_isa = "amx";
    TU_OK(ember_context_create(&o, &ctx));
    o.cpu_max_isa = "avx2";
    TU_OK(ember_context_create(&o, &c2));
    /* more than 8 rows: both kernels dequantize a K chunk's weights once for all groups; more
     * than 64: blocks of rows (up to 256 on AVX2) */
    static const int64_t ms[] = {1, 2, 3, 5, 8, 9, 12, 37, 130};
    int compared = 0;
    for (int ki = 0; ki < 3; ki++) {
        const int64_t k = ki == 1 ? 288 : 96; /* one K chunk of the AVX-512 kernel, or three */
        /* a task of 256 columns and one of 44; or of 34 (the last 16 columns hold 2) */
        const int64_t n = ki == 2 ? 290 : 300;
        for (int kind = 0; kind <= 11; kind++) {
            if (kind == 7 || kind == 4)
                continue; /* left to dequantize + float matmul, or blocks across the columns */
            ember_qscheme s = fq_scheme(kind, k, n);
            ember_tensor *w = NULL, *wf = mk_f32(ctx, 2, (int64_t[]){k, n}, -2.0f, 2.0f);
            if (ember_quantize(wf, &s, &w) != EMBER_OK) {
                ember_tensor_free(wf);
                continue;
            }
            ember_tensor_free(wf);
            /* the same weights in the capped context, from their bytes */
            ember_tensor *w2 = weights_in(c2, w, &s, k, n);
            for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++) {
                const int64_t m = ms[a];
                ember_tensor *x = mk_f32(ctx, 2, (int64_t[]){m, k}, -1.0f, 1.0f), *x2 = NULL;
                float *xs = malloc((size_t)(m * k) * 4);
                TU_OK(ember_tensor_read(x, xs, (size_t)(m * k) * 4));
                TU_OK(ember_tensor_from_data(c2, TU_CPU, EMBER_F32, 2, (int64_t[]){m, k}, xs, &x2));
                ember_tensor *y = NULL, *y2 = NULL;
                TU_OK(ember_q_matmul(x, w, &y));
                TU_OK(ember_q_matmul(x2, w2, &y2));
                float *o1 = malloc((size_t)(m * n) * 4), *o2 = malloc((size_t)(m * n) * 4);
                TU_OK(ember_tensor_read(y, o1, (size_t)(m * n) * 4));
                TU_OK(ember_tensor_read(y2, o2, (size_t)(m * n) * 4));
                const int same = memcmp(o1, o2, (size_t)(m * n) * 4) == 0;
                CU_ASSERT(same);
                if (!same)
                    printf("\n  scheme %d, %lld rows: the avx2 kernel's results differ", kind,
                           (long long)m);
                int64_t cells;
                double *ref = reference(x2, w2, &cells);
                CU_ASSERT(max_rel_err(y2, ref, cells) < 1e-5);
                compared++;
                free(ref);
                free(xs);
                free(o1);
                free(o2);
                ember_tensor_free(x);
                ember_tensor_free(x2);
                ember_tensor_free(y);
                ember_tensor_free(y2);
            }
            ember_tensor_free(w);
            ember_tensor_free(w2);
        }
    }
    CU_ASSERT(compared >= 40);
    ember_context_destroy(c2);
    ember_context_destroy(ctx);
}

/* More than EMBER__FQ_MAX_ROWS rows on the AVX-512 kernel: the fused path takes them in blocks
 * of rows (150 rows: 52, 52 and 46), and each row's sums are the same whatever its block: the rows
 * at the blocks' edges come out as the same rows multiplied alone (the decode row) and as a
 * 64-row product, bit for bit, for 8- and 4-bit weights per tensor and in blocks of 32 along K
 * (K over several of the kernel's chunks, a ragged last task); and within 1e-5 of the float64
 * reference. */
static void test_fq_row_blocks(void) {
    if (!ember__qtier_available(EMBER__QT_AVX512))
        return;
    ember_context *ctx = NULL;
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.cpu_max_isa = "amx"; /* uncapped, whatever EMBER_CPU_MAX_ISA says (make test-tiers) */
    TU_OK(ember_context_create(&o, &ctx));
    static const int kinds[] = {0, 2, 9, 10}; /* fq_scheme's */
    const int64_t m = 150, k = 608, n = 300;
    static const int64_t edge[] = {0, 51, 52, 103, 104, 149};
    int compared = 0;
    for (size_t q = 0; q < sizeof kinds / sizeof kinds[0]; q++) {
        ember_qscheme s = fq_scheme(kinds[q], k, n);
        ember_tensor *w = NULL, *wf = mk_f32(ctx, 2, (int64_t[]){k, n}, -2.0f, 2.0f);
        TU_OK(ember_quantize(wf, &s, &w));
        ember_tensor_free(wf);
        ember_tensor *x = mk_f32(ctx, 2, (int64_t[]){m, k}, -1.0f, 1.0f), *y = NULL;
        float *xs = malloc((size_t)(m * k) * 4), *ys = malloc((size_t)(m * n) * 4),
              *o1 = malloc((size_t)(64 * n) * 4);
        TU_OK(ember_tensor_read(x, xs, (size_t)(m * k) * 4));
        TU_OK(ember_q_matmul(x, w, &y));
        TU_OK(ember_tensor_read(y, ys, (size_t)(m * n) * 4));
        int64_t cells;
        double *ref = reference(x, w, &cells);
        CU_ASSERT(max_rel_err(y, ref, cells) < 1e-5);
        free(ref);
        CU_ASSERT_FALSE(packed(w));
        for (size_t e = 0; e < sizeof edge / sizeof edge[0]; e++) {
            const int64_t i = edge[e];
            ember_tensor *x1 = NULL, *y1 = NULL;
            TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, (int64_t[]){1, k}, xs + i * k,
                                         &x1));
            TU_OK(ember_q_matmul(x1, w, &y1));
            TU_OK(ember_tensor_read(y1, o1, (size_t)n * 4));
            const int same = memcmp(o1, ys + i * n, (size_t)n * 4) == 0;
            CU_ASSERT(same);
            if (!same)
                printf("\n  scheme %d: row %lld alone differs from its row of %lld", kinds[q],
                       (long long)i, (long long)m);
            compared++;
            ember_tensor_free(x1);
            ember_tensor_free(y1);
        }
        /* rows 40..103 as one product of 64 rows (one block; here they lie in two) */
        ember_tensor *x64 = NULL, *y64 = NULL;
        TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, (int64_t[]){64, k}, xs + 40 * k,
                                     &x64));
        TU_OK(ember_q_matmul(x64, w, &y64));
        TU_OK(ember_tensor_read(y64, o1, (size_t)(64 * n) * 4));
        CU_ASSERT(memcmp(o1, ys + 40 * n, (size_t)(64 * n) * 4) == 0);
        compared++;
        ember_tensor_free(x64);
        ember_tensor_free(y64);
        free(xs);
        free(ys);
        free(o1);
        ember_tensor_free(x);
        ember_tensor_free(y);
        ember_tensor_free(w);
    }
    CU_ASSERT_EQUAL(compared, 28);
    ember_context_destroy(ctx);
}

/* Scale blocks along the columns ([1, 32]: burn's per_block([32]) on a [d_in, d_out] weight, a
 * scale per 32 output columns of each K row; also [2, 48] and [4, 64]): the fused path takes them
 * (the kernels' 16-column scale vectors are one scale each), and leaves blocks of 8 columns to
 * dequantize + sgemm. Against the float64 reference (1e-5 of the largest output), one-hot rows
 * bit for bit the dequantized weight rows, the AVX2 kernel's results bit for bit the AVX-512
 * one's, a decode row the first row of a 2-row product, and 150 rows (K of 608) row by row as
 * the same rows alone (which dequantize + sgemm does not give). */
/* 4-bit B as stored (nibbles read in place, ember__qpack_b_plain4) packs to the same bytes as its
 * int8 values through the row callback: values (padding rows and columns included) and scales.
 * The stored rows' padding nibbles hold random bits, as a tensor from bytes may. */
static void test_pack_plain4(void) {
    ember_context *ctx = NULL;
    ember__cpu_state *s = cpu_state(&ctx);
    CU_ASSERT_FATAL(s != NULL);
    const int64_t shapes[][3] = {{64, 32, 0},  {70, 33, 0},   {128, 290, 32},
                                 {200, 47, 0}, {96, 513, 32}, {7, 5, 0}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t k = shapes[si][0], n = shapes[si][1], kc = shapes[si][2];
        const int64_t ldb = (n + 7) / 8 * 4; /* u32 words a row */
        const int64_t nch = kc ? k / kc : 1;
        int8_t *B = malloc((size_t)(k * n));
        uint8_t *B4 = malloc((size_t)(k * ldb));
        float *sc = malloc((size_t)(nch * n) * sizeof(float));
        CU_ASSERT_FATAL(B && B4 && sc);
        rand_i8(B, (size_t)(k * n), -8, 7);
        rand_i8((int8_t *)B4, (size_t)(k * ldb), -128, 127); /* the padding: random */
        for (int64_t r = 0; r < k; r++)
            for (int64_t j = 0; j < n; j++) {
                uint8_t *byte = B4 + r * ldb + j / 2;
                const int sh = 4 * (int)(j % 2);
                *byte = (uint8_t)((*byte & ~(0xf << sh)) | ((B[r * n + j] & 0xf) << sh));
            }
        for (int64_t i = 0; i < nch * n; i++) /* f16-exact scales, and one that is not */
            sc[i] = (float)(1 + (int)(tu_next(&rng) % 64)) / 256.0f;
        if (si % 2)
            sc[0] = 0.1f;
        for (int with_scales = 0; with_scales < 2; with_scales++) {
            ember__qpack p1, p2;
            TU_OK(ember__qpack_b_s8(s, &p1, k, n, n, kc, 4, B, with_scales ? sc : NULL));
            TU_OK(ember__qpack_b_plain4(s, &p2, k, n, ldb, kc, B4, with_scales ? sc : NULL));
            CU_ASSERT_EQUAL(ember__qpack_bytes(&p1), ember__qpack_bytes(&p2));
            CU_ASSERT_EQUAL(p1.sb16, p2.sb16);
            const size_t vb = (size_t)(p1.kp * p1.np / 2),
                         sbb = (size_t)(p1.nch * p1.np) * (p1.sb16 ? 2 : 4);
            const int same = memcmp(p1.b, p2.b, vb) == 0 && memcmp(p1.sb, p2.sb, sbb) == 0;
            CU_ASSERT(same);
            if (!same)
                printf("\n  plain4 %lld x %lld, kc %lld: bytes differ", (long long)k, (long long)n,
                       (long long)kc);
            ember__qpack_free(&p1);
            ember__qpack_free(&p2);
        }
        free(B);
        free(B4);
        free(sc);
    }
    ember_context_destroy(ctx);
}

static void test_fq_col_blocks(void) {
    ember_context *ctx = NULL, *c2 = NULL;
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.cpu_max_isa = "amx";
    TU_OK(ember_context_create(&o, &ctx));
    o.cpu_max_isa = "avx2";
    TU_OK(ember_context_create(&o, &c2));
    const int avx512 = ember__qtier_available(EMBER__QT_AVX512);
    const struct {
        ember_qvalue v;
        ember_qstore st;
        int64_t bk, bn;
        ember_scale_dtype sd;
        int two_level;
    } kinds[] = {
        {EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, 32, EMBER_SCALE_F16, 0},
        {EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 1, 32, EMBER_SCALE_F16, 0},
        {EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, 48, EMBER_SCALE_BF16, 0},
        {EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 4, 64, EMBER_SCALE_F32, 0},
        {EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, 8, EMBER_SCALE_F32, 0},
        /* blocks along K that K chunks (128 or 256 rows) do not hold whole */
        {EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 3, 32, EMBER_SCALE_F16, 0},
        {EMBER_Q8S, EMBER_QSTORE_NATIVE, 5, 16, EMBER_SCALE_F16, 0},
        /* a global f32 scale over the block scales; 4-bit values in blocks of 16 columns */
        {EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 1, 32, EMBER_SCALE_F16, 1},
        {EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 1, 16, EMBER_SCALE_F32, 0}};
    const int64_t shapes[][3] = {{1, 64, 576},  {2, 96, 576},    {3, 96, 288},  {9, 160, 96},
                                 {70, 64, 288}, {150, 608, 288}, {1, 390, 576}, {5, 390, 576}};
    int cases = 0;
    for (size_t q = 0; q < sizeof kinds / sizeof kinds[0]; q++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t m = shapes[si][0], k = shapes[si][1], n = shapes[si][2];
            ember_qscheme s = ember_qscheme_per_block(kinds[q].v, kinds[q].st, 2,
                                                      (int64_t[]){kinds[q].bk, kinds[q].bn});
            s.block_scale = kinds[q].sd;
            s.tensor_level = kinds[q].two_level;
            ember_tensor *w = NULL, *wf = mk_f32(ctx, 2, (int64_t[]){k, n}, -2.0f, 2.0f);
            if (ember_quantize(wf, &s, &w) != EMBER_OK) { /* a shape the blocks do not divide */
                ember_tensor_free(wf);
                continue;
            }
            ember_tensor_free(wf);
            cases++;
            ember_tensor *w2 = weights_in(c2, w, &s, k, n);
            ember_tensor *x = mk_f32(ctx, 2, (int64_t[]){m, k}, -1.0f, 1.0f), *y = NULL, *x2 = NULL,
                         *y2 = NULL;
            float *xs = malloc((size_t)(m * k) * 4), *o1 = malloc((size_t)(m * n) * 4),
                  *o2 = malloc((size_t)(m * n) * 4);
            TU_OK(ember_tensor_read(x, xs, (size_t)(m * k) * 4));
            TU_OK(ember_q_matmul(x, w, &y));
            int64_t cells;
            double *ref = reference(x, w, &cells);
            const double err = max_rel_err(y, ref, cells);
            CU_ASSERT(err < 1e-5);
            if (err >= 1e-5)
                printf("\n  blocks [%lld, %lld], %lld x %lld x %lld: error %.3g",
                       (long long)kinds[q].bk, (long long)kinds[q].bn, (long long)m, (long long)k,
                       (long long)n, err);
            free(ref);
            CU_ASSERT_FALSE(packed(w));
            TU_OK(ember_tensor_read(y, o1, (size_t)(m * n) * 4));
            const int fused = kinds[q].bn % 16 == 0;
            if (fused && m <= 256) { /* the AVX2 kernel: the same bits */
                TU_OK(ember_tensor_from_data(c2, TU_CPU, EMBER_F32, 2, (int64_t[]){m, k}, xs, &x2));
                TU_OK(ember_q_matmul(x2, w2, &y2));
                TU_OK(ember_tensor_read(y2, o2, (size_t)(m * n) * 4));
                CU_ASSERT(memcmp(o1, o2, (size_t)(m * n) * 4) == 0);
            }
            if (fused && avx512 && (m == 2 || m == 150)) { /* rows alone: the same bits */
                for (int64_t i = 0; i < m; i += m == 2 ? 1 : 51) {
                    ember_tensor *x1 = NULL, *y1 = NULL;
                    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, (int64_t[]){1, k},
                                                 xs + i * k, &x1));
                    TU_OK(ember_q_matmul(x1, w, &y1));
                    TU_OK(ember_tensor_read(y1, o2, (size_t)n * 4));
                    const int same = memcmp(o2, o1 + i * n, (size_t)n * 4) == 0;
                    CU_ASSERT(same);
                    if (!same)
                        printf("\n  blocks [%lld, %lld]: row %lld of %lld alone differs",
                               (long long)kinds[q].bk, (long long)kinds[q].bn, (long long)i,
                               (long long)m);
                    ember_tensor_free(x1);
                    ember_tensor_free(y1);
                }
            }
            CU_ASSERT(onehot_rows_exact(ctx, w, m, k, n));
            free(xs);
            free(o1);
            free(o2);
            ember_tensor_free(x);
            ember_tensor_free(x2);
            ember_tensor_free(y);
            ember_tensor_free(y2);
            ember_tensor_free(w);
            ember_tensor_free(w2);
        }
    CU_ASSERT(cases >= 20);
    ember_context_destroy(c2);
    ember_context_destroy(ctx);
}

/* (Q,Q) and W8A8 against weights whose scales change along K every row ([1, 32] blocks): no
 * int32 sum can span them, so the product is the fused float path's on A's dequantized values
 * (bit for bit the F x Q product of ember_dequantize(A)), and under dynamic_activation_quant the
 * F x Q product is the plain one, not quantized; both within 1e-5 of the float64 reference. */
static void test_qq_col_blocks(void) {
    ember_context *ctx = tu_cpu_context(), *cd = NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.dynamic_activation_quant = 1;
    TU_OK(ember_context_create(&o, &cd));
    const ember_qvalue vs[] = {EMBER_Q8S, EMBER_Q4S};
    const ember_qstore sts[] = {EMBER_QSTORE_NATIVE, EMBER_QSTORE_PACKED_U32};
    const int64_t shapes[][3] = {{1, 608, 288}, {5, 608, 576}, {70, 96, 288}};
    int compared = 0;
    for (int q = 0; q < 2; q++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t m = shapes[si][0], k = shapes[si][1], n = shapes[si][2];
            ember_qscheme s = ember_qscheme_per_block(vs[q], sts[q], 2, (int64_t[]){1, 32});
            s.block_scale = EMBER_SCALE_F16;
            ember_qscheme sa = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
            ember_tensor *wf = mk_f32(ctx, 2, (int64_t[]){k, n}, -2.0f, 2.0f), *w = NULL;
            ember_tensor *x = mk_f32(ctx, 2, (int64_t[]){m, k}, -1.0f, 1.0f), *xq = NULL,
                         *xd = NULL;
            TU_OK(ember_quantize(wf, &s, &w));
            TU_OK(ember_quantize(x, &sa, &xq));
            TU_OK(ember_dequantize(xq, &xd));
            ember_tensor *y = NULL, *y2 = NULL;
            TU_OK(ember_q_matmul(xq, w, &y));
            TU_OK(ember_q_matmul(xd, w, &y2));
            float *o1 = malloc((size_t)(m * n) * 4), *o2 = malloc((size_t)(m * n) * 4);
            TU_OK(ember_tensor_read(y, o1, (size_t)(m * n) * 4));
            TU_OK(ember_tensor_read(y2, o2, (size_t)(m * n) * 4));
            CU_ASSERT(memcmp(o1, o2, (size_t)(m * n) * 4) == 0);
            int64_t cells;
            double *ref = reference(xq, w, &cells);
            CU_ASSERT(max_rel_err(y, ref, cells) < 1e-5);
            free(ref);
            CU_ASSERT_FALSE(packed(w));
            /* W8A8 asked for: the float lhs stays float */
            float *xs = malloc((size_t)(m * k) * 4);
            TU_OK(ember_tensor_read(xd, xs, (size_t)(m * k) * 4));
            ember_tensor *wd = weights_in(cd, w, &s, k, n), *xdd = NULL, *y3 = NULL;
            TU_OK(ember_tensor_from_data(cd, TU_CPU, EMBER_F32, 2, (int64_t[]){m, k}, xs, &xdd));
            TU_OK(ember_q_matmul(xdd, wd, &y3));
            TU_OK(ember_tensor_read(y3, o1, (size_t)(m * n) * 4));
            CU_ASSERT(memcmp(o1, o2, (size_t)(m * n) * 4) == 0);
            compared++;
            free(xs);
            free(o1);
            free(o2);
            ember_tensor_free(wf);
            ember_tensor_free(w);
            ember_tensor_free(wd);
            ember_tensor_free(x);
            ember_tensor_free(xq);
            ember_tensor_free(xd);
            ember_tensor_free(xdd);
            ember_tensor_free(y);
            ember_tensor_free(y2);
            ember_tensor_free(y3);
        }
    CU_ASSERT_EQUAL(compared, 6);
    ember_context_destroy(cd);
    ember_context_destroy(ctx);
}

static void test_fq_fused(void) {
    ember_context *ctx = tu_cpu_context();
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    const int64_t shapes[][3] = {{1, 64, 50},
                                 {3, 96, 257},
                                 {16, 128, 64},
                                 {2, 288, 130},
                                 {5, 1, 7},
                                 {64, 64, 300},
                                 {EMBER__FQ_MAX_ROWS + 1, 64, 40},
                                 {2 * EMBER__FQ_MAX_ROWS + 2, 64, 300}};
    for (int kind = 0; kind <= 12; kind++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t m = shapes[si][0], k = shapes[si][1], n = shapes[si][2];
            ember_qscheme s = fq_scheme(kind, k, n);
            if (((kind == 2 || kind == 6 || kind == 10) && k % 32) || (kind == 5 && k % 16))
                continue; /* blocks that must divide K */
            ember_tensor *w = NULL, *wf = mk_f32(ctx, 2, (int64_t[]){k, n}, -2.0f, 2.0f);
            if (ember_quantize(wf, &s, &w) != EMBER_OK) { /* a block the shape cannot take */
                ember_tensor_free(wf);
                continue;
            }
            ember_tensor_free(wf);
            ember_tensor *x = mk_f32(ctx, 2, (int64_t[]){m, k}, -1.0f, 1.0f), *y = NULL;
            int64_t cells;
            double *ref = reference(x, w, &cells);
            TU_OK(ember_q_matmul(x, w, &y));
            const double err = max_rel_err(y, ref, cells);
            CU_ASSERT(err < 1e-5);
            if (err >= 1e-5)
                printf("\n  scheme %d, %lld x %lld x %lld: error %.3g ", kind, (long long)m,
                       (long long)k, (long long)n, err);
            CU_ASSERT_FALSE(packed(w));
            free(ref);
            ember_tensor_free(y);
            CU_ASSERT(onehot_rows_exact(ctx, w, m, k, n));
            ember_tensor_free(x);
            ember_tensor_free(w);
        }
    /* batches: a rank-3 lhs against a rank-2 weight, and rank-3 against rank-3 (per tensor, 8-
     * and 4-bit) */
    ember_qscheme pt = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_qscheme pt4 = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
    ember_qscheme pc = fq_scheme(1, 96, 70), b32 = fq_scheme(10, 96, 70),
                  b16 = fq_scheme(5, 96, 70);
    const ember_qscheme *bs[6] = {&pc, &pt, &pt4, &pc, &b32, &b16};
    const int64_t wsh[2][3] = {{96, 70, 0}, {3, 96, 70}};
    /* 70 columns: each packed 4-bit row ends in a partial word; the last three are rank-3 weights
     * with scales per column, per block of 32 (4-bit, F16) and two-level: each matrix its own */
    for (int c = 0; c < 6; c++) {
        ember_tensor *x = mk_f32(ctx, 3, (int64_t[]){3, 4, 96}, -1.0f, 1.0f), *y = NULL;
        ember_tensor *w = mk_q(ctx, bs[c], c ? 3 : 2, c ? wsh[1] : wsh[0]);
        int64_t cells;
        double *ref = reference(x, w, &cells);
        TU_OK(ember_q_matmul(x, w, &y));
        CU_ASSERT(max_rel_err(y, ref, cells) < 1e-5);
        CU_ASSERT_FALSE(packed(w));
        free(ref);
        ember_tensor_free(y);
        ember_tensor_free(x);
        ember_tensor_free(w);
    }
    ember_context_destroy(ctx);
}

/* Fail the n-th allocation of one q_matmul, for n = 1, 2, ... until the call succeeds (a fresh
 * context each time, so that the kernels' scratch is allocated too): each failure gives
 * EMBER_ERR_OUT_OF_MEMORY and no output, frees what the call took (where B got no pack), and the
 * operands still give the right answer. first_call: B is multiplied as it is stored, so it must
 * stay unpacked and unmarked (the retry is a first call again). */
static ember_context *cpu_threads(int threads) {
    if (!threads)
        return tu_cpu_context();
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.num_threads = threads;
    ember_context *ctx = NULL;
    TU_OK(ember_context_create(&o, &ctx));
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    return ctx;
}

static void oom_walk_t(const ember_qscheme *sa, const int64_t ash[2], const ember_qscheme *sb,
                       const int64_t bsh[2], int first_call, int threads) {
    int done = 0;
    for (long n = 1; n < 200 && !done; n++) {
        ember_context *ctx = cpu_threads(threads);
        ember_tensor *a = mk_q(ctx, sa, 2, ash), *b = mk_q(ctx, sb, 2, bsh);
        int64_t cells;
        double *ref = reference(a, b, &cells);
        long live0 = ember__alloc_live();
        ember__alloc_fail_at(n);
        ember_tensor *y = (ember_tensor *)&done;
        ember_status st = ember_q_matmul(a, b, &y);
        ember__alloc_fail_at(0);
        if (st == EMBER_OK) {
            done = 1;
            CU_ASSERT(max_rel_err(y, ref, cells) < 1e-5);
            ember_tensor_free(y);
        } else {
            TU_ASSERT_STATUS(st, EMBER_ERR_OUT_OF_MEMORY, NULL);
            CU_ASSERT_PTR_NULL(y);
            if (first_call)
                CU_ASSERT_FALSE(packed(b));
            if (!packed(b))
                CU_ASSERT_EQUAL(ember__alloc_live(), live0);
            TU_OK(ember_q_matmul(a, b, &y));
            CU_ASSERT(max_rel_err(y, ref, cells) < 1e-5);
            /* the retry is a first call too: unpacked where a direct kernel takes its rows */
            if (first_call && direct_takes(ember__cpu_state_of(ctx), ash[0]))
                CU_ASSERT_FALSE(packed(b));
            ember_tensor_free(y);
        }
        free(ref);
        ember_tensor_free(a);
        ember_tensor_free(b);
        ember_context_destroy(ctx);
    }
    CU_ASSERT(done);
}

static void oom_walk(const ember_qscheme *sa, const int64_t ash[2], const ember_qscheme *sb,
                     const int64_t bsh[2], int first_call) {
    oom_walk_t(sa, ash, sb, bsh, first_call, 0);
}

/* the packing path (4-bit blocked B) */
static void test_q_matmul_oom(void) {
    ember_qscheme sa = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_qscheme sb =
        ember_qscheme_per_block(EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 2, (int64_t[]){32, 8});
    oom_walk(&sa, (int64_t[]){33, 64}, &sb, (int64_t[]){64, 40}, 0);
    /* B's scales changing every K row: the fused float path on A's dequantized values */
    ember_qscheme sc =
        ember_qscheme_per_block(EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 2, (int64_t[]){1, 32});
    oom_walk(&sa, (int64_t[]){33, 64}, &sc, (int64_t[]){64, 64}, 0);
}

/* a first call of 150 rows packs a Native 8-bit B (2 threads, two packing tasks): a failed call
 * leaves B without a pack */
static void test_first_pack_oom(void) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    oom_walk_t(&s, (int64_t[]){150, 96}, &s, (int64_t[]){96, 300}, 1, 2);
}

/* first calls on B as it is stored (8 and 70 rows: the unpacked kernels' buffers) */
static void test_direct_oom(void) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    oom_walk(&s, (int64_t[]){8, 96}, &s, (int64_t[]){96, 300}, 1);
    oom_walk(&s, (int64_t[]){70, 96}, &s, (int64_t[]){96, 300}, 1);
}

/* Q8S x Q8S [m, k] x [k, n] through ember_q_matmul, `calls` times on the same operands (a first
 * call, then the packed weights): right within 1e-5 of the float64 reference each time */
static void q8_right(ember_context *ctx, int64_t m, int64_t k, int64_t n, int calls) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_tensor *a = mk_q(ctx, &s, 2, (int64_t[]){m, k}), *b = mk_q(ctx, &s, 2, (int64_t[]){k, n});
    int64_t cells;
    double *ref = reference(a, b, &cells);
    for (int call = 0; call < calls; call++) {
        ember_tensor *y = NULL;
        TU_OK(ember_q_matmul(a, b, &y));
        CU_ASSERT(max_rel_err(y, ref, cells) < 1e-5);
        ember_tensor_free(y);
    }
    free(ref);
    ember_tensor_free(a);
    ember_tensor_free(b);
}

/* EMBER_CPU_MAX_ISA / cpu_max_isa caps the tier; ember_device_describe names it ("+avx_vnni"
 * after the AVX2 tier's name where that tier multiplies bytes with AVX-VNNI). */
static void test_tier_cap(void) {
    static const char *caps[] = {"scalar", "avx2", "avx512_vnni", "amx", NULL};
    static const char *want[] = {"cpu.scalar", "cpu.avx2", "cpu.avx512_vnni", "cpu.amx", NULL};
    for (int i = 0; i < 5; i++) {
        ember_options o = ember_options_default();
        o.enable_opencl = 0;
        o.cpu_max_isa = caps[i];
        ember_context *ctx = NULL;
        TU_OK(ember_context_create(&o, &ctx));
        ember_device_info info;
        TU_OK(ember_device_describe(ctx, TU_CPU, &info));
        char expect[48];
        /* no cap in the options: EMBER_CPU_MAX_ISA's, if the environment sets one */
        const char *cap = caps[i] ? caps[i] : getenv("EMBER_CPU_MAX_ISA");
        const ember__qtier t = ember__qtier_select(cap);
        /* the AVX2 tier says whether it multiplies bytes with AVX-VNNI */
        const char *vnni = t == EMBER__QT_AVX2 && ember__avx2_vnni() ? "+avx_vnni" : "";
        snprintf(expect, sizeof expect, "cpu.%s%s", ember__qtier_name(t), vnni);
        CU_ASSERT_STRING_EQUAL(info.int8_matmul_path, expect);
        if (want[i] && ember__qtier_available((ember__qtier)i)) {
            char w[48];
            snprintf(w, sizeof w, "%s%s", want[i], i == EMBER__QT_AVX2 ? vnni : "");
            CU_ASSERT_STRING_EQUAL(info.int8_matmul_path, w);
        }
        q8_right(ctx, 40, 70, 20, 1); /* the capped tier still computes the right thing */
        ember_context_destroy(ctx);
    }
}

/* EMBER_CPU_MAX_ISA does the same when the option is NULL */
static void test_tier_cap_env(void) {
    const char *old = getenv("EMBER_CPU_MAX_ISA");
    char saved[64] = "";
    if (old)
        snprintf(saved, sizeof saved, "%s", old);
    setenv("EMBER_CPU_MAX_ISA", "scalar", 1);
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    ember_context *ctx = NULL;
    TU_OK(ember_context_create(&o, &ctx));
    ember_device_info info;
    TU_OK(ember_device_describe(ctx, TU_CPU, &info));
    CU_ASSERT_STRING_EQUAL(info.int8_matmul_path, "cpu.scalar");
    ember_context_destroy(ctx);
    if (old)
        setenv("EMBER_CPU_MAX_ISA", saved, 1);
    else
        unsetenv("EMBER_CPU_MAX_ISA");
}

/* ---------------------------------------------------------------- thread pool */

typedef struct pf_arg {
    int64_t *hits;
    int nthreads;
    int bad_thread;
} pf_arg;

static void pf_task(void *v, int64_t task, int thread) {
    pf_arg *a = v;
    if (thread < 0 || thread >= a->nthreads)
        a->bad_thread = 1;
    __atomic_fetch_add(&a->hits[task], 1, __ATOMIC_RELAXED);
}

/* fn(x) on this thread and fn(y) on another, at once; returns when both are done */
static void both_at_once(void *(*fn)(void *), void *x, void *y) {
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, fn, y), 0);
    fn(x);
    pthread_join(th, NULL);
}

typedef struct pf_thread {
    ember__cpu_state *s;
    int ok;
} pf_thread;

static void *pf_caller(void *v) {
    pf_thread *p = v;
    p->ok = 1;
    for (int rep = 0; rep < 200; rep++) {
        int64_t hits[37] = {0};
        pf_arg a = {hits, p->s->num_threads, 0};
        ember__cpu_parallel_for(p->s, 37, pf_task, &a);
        for (int i = 0; i < 37; i++)
            if (hits[i] != 1)
                p->ok = 0;
        if (a.bad_thread)
            p->ok = 0;
    }
    return NULL;
}

static void test_thread_pool(void) {
    for (int nt = 1; nt <= 4; nt++) {
        ember_options o = ember_options_default();
        o.enable_opencl = 0;
        o.num_threads = nt;
        ember_context *ctx = NULL;
        TU_OK(ember_context_create(&o, &ctx));
        ember__cpu_state *s = ember__cpu_state_of(ctx);
        CU_ASSERT_EQUAL(s->num_threads, nt);
        ember_device_info info;
        TU_OK(ember_device_describe(ctx, TU_CPU, &info));
        CU_ASSERT_EQUAL(info.compute_units, nt);
        /* every task exactly once, thread ids in range, many back-to-back jobs, and two
         * application threads sharing the context at once */
        pf_thread p[2] = {{s, 0}, {s, 0}};
        both_at_once(pf_caller, &p[0], &p[1]);
        CU_ASSERT(p[0].ok);
        CU_ASSERT(p[1].ok);
        int64_t one = 0;
        pf_arg a = {&one, nt, 0};
        ember__cpu_parallel_for(s, 1, pf_task, &a); /* inline */
        ember__cpu_parallel_for(s, 0, pf_task, &a); /* nothing */
        CU_ASSERT_EQUAL(one, 1);
        ember_context_destroy(ctx);
    }
}

/* More pool threads than 64 (a large server's default, oversubscribed here): every tier's tile
 * path and the first-call kernels give right answers, whichever thread takes which task (the
 * per-thread buffers were once indexed by thread up to a fixed 64). Oversubscribed, the calls also
 * end only if a task waiting for rows of A that another task packs gives up its CPU: while that
 * wait only spun, this test kept test_cpu_qgemm under ThreadSanitizer past CTest's 600 s in one
 * of five runs, and in both of two runs side by side (ember__cpu_wait_step). */
static void test_many_threads(void) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.num_threads = 100;
#if defined(__SANITIZE_THREAD__)
    const int calls = 2; /* a hundred threads are slow under ThreadSanitizer; a race shows sooner */
#else
    const int calls = 8; /* a high thread id takes a task in most of them (on two cores) */
#endif
    ember_context *ctx = NULL;
    TU_OK(ember_context_create(&o, &ctx));
    static const int64_t shapes[][3] = {
        {8, 96, 2000}, {100, 96, 900}, {300, 200, 3000}, {600, 64, 2100}};
    ember__cpu_serial_off = 1;  /* the small ones too: every thread may take a task */
    for (int q = 0; q < 4; q++) /* a first call, then the packed weights */
        q8_right(ctx, shapes[q][0], shapes[q][1], shapes[q][2], calls);
    ember__cpu_serial_off = 0;
    ember_context_destroy(ctx);
}

/* Products of several row blocks give each pool thread its own run of tasks, which the others
 * take from the back once theirs are done (qgemm.c, claim_task). Whatever the schedule, every
 * task runs once: the output equals a one-thread context's bit for bit, with 2 and 3 threads
 * (runs split inside a row block), and with two application threads calling on one context at
 * once (the pool then runs one call inline: its thread takes every run). The shapes have more
 * row blocks than threads on every tier (AMX 256 rows, the vector tiers 64), a first call and
 * the packed weights. */
typedef struct runs_call {
    ember_tensor *a, *b;
    const float *want;
    int64_t cells;
    int ok;
} runs_call;

static void *runs_caller(void *v) {
    runs_call *c = v;
    c->ok = 1;
    float *o = malloc((size_t)c->cells * 4);
    for (int rep = 0; rep < 4 && o; rep++) {
        ember_tensor *y = NULL;
        if (ember_q_matmul(c->a, c->b, &y) != EMBER_OK ||
            ember_tensor_read(y, o, (size_t)c->cells * 4) != EMBER_OK ||
            memcmp(o, c->want, (size_t)c->cells * 4) != 0)
            c->ok = 0;
        ember_tensor_free(y);
    }
    if (!o)
        c->ok = 0;
    free(o);
    return NULL;
}

static void test_task_runs(void) {
    const ember_qscheme sq = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    static const int64_t shapes[][3] = {{1100, 200, 130}, {700, 96, 2100}};
    for (int q = 0; q < 2; q++) {
        const int64_t as[2] = {shapes[q][0], shapes[q][2]}, bs[2] = {shapes[q][2], shapes[q][1]};
        const int64_t cells = as[0] * bs[1];
        float *xa = malloc((size_t)(as[0] * as[1]) * 4), *xb = malloc((size_t)(bs[0] * bs[1]) * 4);
        float *want = malloc((size_t)cells * 4), *got = malloc((size_t)cells * 4);
        CU_ASSERT_FATAL(xa && xb && want && got);
        tu_rand_f32(&rng, xa, (size_t)(as[0] * as[1]), -2.0f, 2.0f);
        tu_rand_f32(&rng, xb, (size_t)(bs[0] * bs[1]), -2.0f, 2.0f);
        for (int nt = 1; nt <= 3; nt++) {
            ember_context *ctx = cpu_threads(nt);
            ember_tensor *a = tensor_of(ctx, &sq, 2, as, xa), *b = tensor_of(ctx, &sq, 2, bs, xb);
            if (nt == 1) {
                int64_t n;
                double *ref = reference(a, b, &n);
                ember_tensor *y = NULL;
                TU_OK(ember_q_matmul(a, b, &y));
                CU_ASSERT(max_rel_err(y, ref, cells) < 1e-5);
                TU_OK(ember_tensor_read(y, want, (size_t)cells * 4));
                ember_tensor_free(y);
                free(ref);
            }
            for (int call = 0; call < 2; call++) { /* a first call, then the packed weights */
                ember_tensor *y = NULL;
                TU_OK(ember_q_matmul(a, b, &y));
                TU_OK(ember_tensor_read(y, got, (size_t)cells * 4));
                CU_ASSERT(memcmp(got, want, (size_t)cells * 4) == 0);
                ember_tensor_free(y);
            }
            CU_ASSERT(packed(b));
            if (nt > 1) { /* two application threads on the context at once */
                runs_call c[2] = {{a, b, want, cells, 0}, {a, b, want, cells, 0}};
                both_at_once(runs_caller, &c[0], &c[1]);
                CU_ASSERT(c[0].ok);
                CU_ASSERT(c[1].ok);
            }
            ember_tensor_free(a);
            ember_tensor_free(b);
            ember_context_destroy(ctx);
        }
        free(xa);
        free(xb);
        free(want);
        free(got);
    }
}

/* A product small enough (qgemm.c, serial_product: under 15 us on one thread by the tier's rate,
 * B within 256 KiB) runs on the calling thread: a 2-thread context hands nothing to its pool for
 * it, first call or cached, and its results are those of the same product spread over the threads
 * (ember__cpu_serial_off), bit for bit, and right. A large one still goes to the pool. The same
 * for the fused F x Q path. */
static void test_small_serial(void) {
    const ember_qscheme sq = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_context *ctx = cpu_threads(2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    ember__cpu_state *s = ember__cpu_state_of(ctx);
    /* small on every tier (the scalar one: under 5 us by its rate); the last large on every tier
     * (AMX: about 54 us on one thread) */
    static const int64_t shapes[][3] = {{8, 64, 64}, {20, 96, 64}, {1, 200, 64}, {256, 512, 512}};
    for (int q = 0; q < 4; q++) {
        const int64_t as[2] = {shapes[q][0], shapes[q][2]}, bs[2] = {shapes[q][2], shapes[q][1]};
        const int64_t cells = as[0] * bs[1];
        float *xa = malloc((size_t)(as[0] * as[1]) * 4), *xb = malloc((size_t)(bs[0] * bs[1]) * 4);
        float *o[3] = {malloc((size_t)cells * 4), malloc((size_t)cells * 4),
                       malloc((size_t)cells * 4)};
        CU_ASSERT_FATAL(xa && xb && o[0] && o[1] && o[2]);
        tu_rand_f32(&rng, xa, (size_t)(as[0] * as[1]), -2.0f, 2.0f);
        tu_rand_f32(&rng, xb, (size_t)(bs[0] * bs[1]), -2.0f, 2.0f);
        ember_tensor *a = tensor_of(ctx, &sq, 2, as, xa), *b = tensor_of(ctx, &sq, 2, bs, xb);
        int64_t n;
        double *ref = reference(a, b, &n);
        for (int call = 0; call < 3; call++) { /* first call, cached, cached on the threads */
            ember__cpu_serial_off = call == 2;
            const long long j0 = ember__cpu_pool_jobs(s);
            ember_tensor *y = NULL;
            TU_OK(ember_q_matmul(a, b, &y));
            const long long jobs = ember__cpu_pool_jobs(s) - j0;
            CU_ASSERT(call < 2 && q < 3 ? jobs == 0 : jobs > 0);
            CU_ASSERT(max_rel_err(y, ref, cells) < 1e-5);
            TU_OK(ember_tensor_read(y, o[call], (size_t)cells * 4));
            ember_tensor_free(y);
        }
        ember__cpu_serial_off = 0;
        CU_ASSERT(memcmp(o[0], o[1], (size_t)cells * 4) == 0);
        CU_ASSERT(memcmp(o[1], o[2], (size_t)cells * 4) == 0);
        free(ref);
        ember_tensor_free(a);
        ember_tensor_free(b);
        for (int c = 0; c < 3; c++)
            free(o[c]);
        free(xa);
        free(xb);
    }
    /* the fused float path (F32 lhs against Q8S weights; fq_matmul.c) follows the same rule: two
     * column tasks of 256 on the calling thread (small for the portable kernel too: under 15 us at
     * its 1 G multiply-adds a second), a large product on the pool */
    static const int64_t fshapes[][3] = {{1, 512, 16}, {2, 300, 24}, {8, 1024, 1024}};
    for (int q = 0; q < 3; q++) {
        const int64_t m = fshapes[q][0], n = fshapes[q][1], k = fshapes[q][2];
        ember_tensor *w = NULL, *wf = mk_f32(ctx, 2, (int64_t[]){k, n}, -2.0f, 2.0f);
        TU_OK(ember_quantize(wf, &sq, &w));
        ember_tensor_free(wf);
        ember_tensor *x = mk_f32(ctx, 2, (int64_t[]){m, k}, -1.0f, 1.0f);
        float *o[2] = {malloc((size_t)(m * n) * 4), malloc((size_t)(m * n) * 4)};
        CU_ASSERT_FATAL(o[0] && o[1]);
        for (int call = 0; call < 2; call++) {
            ember__cpu_serial_off = call == 1;
            const long long j0 = ember__cpu_pool_jobs(s);
            ember_tensor *y = NULL;
            TU_OK(ember_q_matmul(x, w, &y));
            const long long jobs = ember__cpu_pool_jobs(s) - j0;
            CU_ASSERT(call == 0 && q < 2 ? jobs == 0 : jobs > 0);
            TU_OK(ember_tensor_read(y, o[call], (size_t)(m * n) * 4));
            ember_tensor_free(y);
        }
        ember__cpu_serial_off = 0;
        CU_ASSERT(memcmp(o[0], o[1], (size_t)(m * n) * 4) == 0);
        CU_ASSERT_FALSE(packed(w)); /* the fused path, not dequantize + sgemm */
        free(o[0]);
        free(o[1]);
        ember_tensor_free(x);
        ember_tensor_free(w);
    }
    ember_context_destroy(ctx);
}

/* m x k int8 A against the packed p (from B [k, n], plain row-major): the int32 products equal the
 * scalar sums, cell for cell. */
static int pack_exact(ember__cpu_state *s, const ember__qpack *p, int64_t m, const int8_t *A,
                      const int8_t *B) {
    const int64_t k = p->k, n = p->n;
    int32_t *C = malloc((size_t)(m * n) * 4), *ref = malloc((size_t)(m * n) * 4);
    CU_ASSERT_FATAL(C && ref);
    TU_OK(ember__qgemm_s32(s, ember__qtier_select(NULL), m, A, k, p, C, n));
    ref_rows(A, k, B, m, n, k, ref);
    const int same = memcmp(C, ref, (size_t)(m * n) * 4) == 0;
    free(C);
    free(ref);
    return same;
}

/* The pack stores B's scales as f16 when every one is exactly an f16: ember__f32_exact_f16 must
 * say so exactly when the round trip through ember__f32_to_f16 / ember__f16_to_f32 gives the value
 * back, and give that conversion's bits: every f16 (as f32: normals, subnormals, zeros,
 * infinities; NaNs excluded), each one ulp of f32 off, and random f32 of every exponent. */
static void test_f16_exact(void) {
    int checked = 0, bad = 0;
    for (int pass = 0; pass < 3; pass++)
        for (uint32_t i = 0; i < 65536 + (pass == 2 ? 200000u : 0u); i++) {
            float f;
            if (pass < 2 || i < 65536) {
                f = ember__f16_to_f32((uint16_t)i);
                if (pass == 1)
                    f = nextafterf(f, (i & 1) ? INFINITY : -INFINITY);
            } else {
                uint32_t u = (uint32_t)rand() << 16 ^ (uint32_t)rand();
                memcpy(&f, &u, 4);
            }
            uint16_t h = 0xdead;
            const int ex = ember__f32_exact_f16(f, &h);
            const int want = !isnan(f) && ember__f16_to_f32(ember__f32_to_f16(f)) == f;
            if (ex != want || (want && h != ember__f32_to_f16(f))) {
                if (bad++ < 5)
                    printf("\n  %a: exact %d (want %d), bits %04x (want %04x)", (double)f, ex, want,
                           h, ember__f32_to_f16(f));
            }
            if (ember__qtier_available(EMBER__QT_AVX512)) {
                /* the vector test and the vector conversion (the pack's scales): f in one lane
                 * of 16 exact values, then as the tail of 17 */
                float v[17];
                for (int l = 0; l < 17; l++)
                    v[l] = 0.5f * (float)(l + 1);
                v[i % 16] = f;
                const int vex = ember__qall_f16_avx512(v, 16);
                v[i % 16] = 1.0f;
                v[16] = f;
                const int tex = ember__qall_f16_avx512(v, 17);
                uint16_t hv[32];
                float one[32] = {0};
                one[i % 32] = f;
                ember__qscales32_avx512(one, 32, 1, hv);
                if (vex != want || tex != want || (want && hv[i % 32] != h)) {
                    if (bad++ < 5)
                        printf("\n  %a: vector exact %d / %d (want %d), bits %04x (want %04x)",
                               (double)f, vex, tex, want, hv[i % 32], h);
                }
            }
            checked++;
        }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(checked > 300000);
}

/* Packed values of 4 MiB or more, or that fill their 2 MiB pages to within an eighth, take a
 * region of their own, on a 2 MiB boundary (so that their 2 MiB pages can be huge), given back to
 * the context that packed them (or unmapped, without one); the scales follow the values there,
 * or take heap memory of their own where only the values fill their pages (under 4 MiB in all).
 * Other packs are 64-byte aligned heap memory from (and back to) the context's cache of freed
 * buffers. The products stay exact. */
static void test_pack_placement(void) {
    const size_t huge = (size_t)2 << 20;
    ember_context *ctx;
    ember__cpu_state *s = cpu_state(&ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    /* placed: 0 heap, 1 a region with the scales in it, 2 a region and the scales apart */
    static const struct {
        int64_t k, n;
        int bits;
        int placed;
    } cases[] = {{2048, 2048, 8, 1}, /* 4 MiB and the scales */
                 {4096, 4096, 4, 1},
                 {1984, 1024, 8, 1},  /* 1.94 MiB and 4 KiB of scales: within an eighth */
                 {1000, 2000, 8, 1},  /* 1024 x 2016: 1.97 MiB, and the scales: 1.98 */
                 {1024, 2048, 8, 2},  /* 2 MiB, the scales past it */
                 {2048, 2048, 4, 2},  /* 2 MiB of nibbles */
                 {1000, 1000, 8, 0},  /* 1 MiB */
                 {1500, 2000, 8, 0}}; /* 2.95 MiB: a region of 4 would waste over an eighth */
    const int64_t m = 2;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int with_state = 0; with_state < 2; with_state++) {
            const int64_t k = cases[c].k, n = cases[c].n;
            const int bits = cases[c].bits;
            int8_t *A = malloc((size_t)(m * k)), *B = malloc((size_t)(k * n));
            CU_ASSERT_FATAL(A && B);
            rand_i8(A, (size_t)(m * k), -128, 127);
            rand_i8(B, (size_t)(k * n), bits == 8 ? -128 : -8, bits == 8 ? 127 : 7);
            TU_OK(ember_context_trim(ctx)); /* no cached region, no scratch */
            const long live0 = ember__alloc_live();
            ember__qpack p;
            TU_OK(ember__qpack_b_s8(with_state ? s : NULL, &p, k, n, n, 0, bits, B, NULL));
            const size_t vbytes = (size_t)p.kp * (size_t)p.np / (bits == 8 ? 1 : 2);
            if (cases[c].placed == 2) { /* the scales in heap memory of their own */
                CU_ASSERT_PTR_NOT_NULL(p.sb_heap);
                CU_ASSERT_PTR_EQUAL(p.sb, p.sb_heap);
                CU_ASSERT_EQUAL((uintptr_t)p.sb % 64, 0);
            } else { /* the scales follow the values in the same allocation */
                CU_ASSERT_PTR_NULL(p.sb_heap);
                CU_ASSERT_PTR_EQUAL(p.sb, p.b + vbytes);
            }
            if (cases[c].placed) {
                CU_ASSERT_EQUAL((uintptr_t)p.b % huge, 0);
                /* from 4 MiB the size asked; below, whole 2 MiB pages */
                const size_t want = cases[c].placed == 1 ? ember__qpack_bytes(&p) : vbytes;
                CU_ASSERT_EQUAL(p.b_map,
                                want >= ((size_t)4 << 20) ? want : (want + huge - 1) / huge * huge);
                CU_ASSERT_PTR_EQUAL(p.b_owner, with_state ? s : NULL);
            } else {
                CU_ASSERT_EQUAL((uintptr_t)p.b % 64, 0);
                CU_ASSERT_EQUAL(p.b_map, 0);
            }
            CU_ASSERT(pack_exact(s, &p, m, A, B));
            ember__qpack_free(&p);
            CU_ASSERT_PTR_NULL(p.b);
            CU_ASSERT_PTR_NULL(p.sb);
            CU_ASSERT_PTR_NULL(p.sb_heap);
            CU_ASSERT_EQUAL(p.b_map, 0);
            /* a region goes back to its context's cache; without a context it is unmapped. Heap
             * memory goes back to the context's cache of freed buffers (all of these are over
             * its 256 KiB minimum), where the next pack or tensor of about its size takes it */
            CU_ASSERT_EQUAL(s->packs.n, cases[c].placed && with_state);
            CU_ASSERT_EQUAL(s->cache.n, !cases[c].placed && with_state);
            TU_OK(ember_context_trim(ctx));
            CU_ASSERT_EQUAL(ember__alloc_live(), live0);
            free(A);
            free(B);
        }
    ember_context_destroy(ctx);
}

/* The context's cache of freed pack regions: a pack of the same size takes the region back (the
 * same address, every byte rewritten: exact products), a size more than 1/8 away maps its own,
 * ember_context_trim unmaps them, a context without a cache (cpu_buffer_cache_mib 0) unmaps at
 * once, an allocation failure at any point leaves no pack and no leak, and a weight tensor's
 * pack goes back to the cache when the tensor is freed. */
static void test_pack_regions(void) {
    const int64_t k = 2048, n = 2048, m = 3; /* 4 MiB of 8-bit values */
    int8_t *A = malloc((size_t)(m * k)), *B = malloc((size_t)(k * n));
    CU_ASSERT_FATAL(A && B);
    rand_i8(A, (size_t)(m * k), -128, 127);
    rand_i8(B, (size_t)(k * n), -128, 127);
    for (int cap = 0; cap < 2; cap++) {
        ember_options o = ember_options_default();
        o.enable_opencl = 0;
        o.cpu_buffer_cache_mib = cap ? -1 : 0;
        ember_context *ctx = NULL;
        TU_OK(ember_context_create(&o, &ctx));
        ember__cpu_state *s = ember__cpu_state_of(ctx);
        const long live0 = ember__alloc_live();
        ember__qpack p, q;
        TU_OK(ember__qpack_b_s8(s, &p, k, n, n, 0, 8, B, NULL));
        uint8_t *first = p.b;
        memset(first, 0xa5, p.b_map); /* the next pack must rewrite every byte */
        ember__qpack_free(&p);
        CU_ASSERT_EQUAL(s->packs.n, cap);
        const long hits0 = s->packs.hits;
        TU_OK(ember__qpack_b_s8(s, &p, k, n, n, 0, 8, B, NULL));
        CU_ASSERT_EQUAL(s->packs.hits, hits0 + cap);
        if (cap)
            CU_ASSERT_PTR_EQUAL(p.b, first);
        CU_ASSERT(pack_exact(s, &p, m, A, B));
        /* 4 MiB kept, 8 MiB asked: more than 1/8 larger, a region of its own */
        int8_t *B2 = malloc((size_t)(k * 2 * n));
        CU_ASSERT_FATAL(B2 != NULL);
        rand_i8(B2, (size_t)(k * 2 * n), -128, 127);
        const size_t pbytes = ember__qpack_bytes(&p);
        ember__qpack_free(&p);
        TU_OK(ember__qpack_b_s8(s, &q, k, 2 * n, 2 * n, 0, 8, B2, NULL));
        CU_ASSERT_EQUAL(q.b_map, ember__qpack_bytes(&q)); /* values and scales */
        const size_t qbytes = q.b_map;
        CU_ASSERT_EQUAL(s->packs.n, cap);
        CU_ASSERT(pack_exact(s, &q, m, A, B2));
        ember__qpack_free(&q);
        free(B2);
        CU_ASSERT_EQUAL(s->packs.n, 2 * cap);
        CU_ASSERT_EQUAL(s->packs.held, cap ? pbytes + qbytes : 0);
        TU_OK(ember_context_trim(ctx));
        CU_ASSERT_EQUAL(s->packs.n, 0);
        CU_ASSERT_EQUAL(ember__alloc_live(), live0);
        /* every allocation of a pack failing in turn: OUT_OF_MEMORY, no pack, nothing left */
        int failed = 0;
        for (long f = 1; f < 64; f++) {
            ember__alloc_fail_at(f);
            ember_status st = ember__qpack_b_s8(s, &p, k, n, n, 0, 8, B, NULL);
            ember__alloc_fail_at(0);
            if (st == EMBER_OK) {
                ember__qpack_free(&p);
                break;
            }
            failed++;
            CU_ASSERT_EQUAL(st, EMBER_ERR_OUT_OF_MEMORY);
            CU_ASSERT_PTR_NULL(p.b);
            TU_OK(ember_context_trim(ctx)); /* a region mapped before the failure is cached */
            CU_ASSERT_EQUAL(ember__alloc_live(), live0);
        }
        CU_ASSERT(failed >= 1); /* the region (the scales share it) */
        TU_OK(ember_context_trim(ctx));
        CU_ASSERT_EQUAL(ember__alloc_live(), live0);
        /* the same for values that fill their region alone (1024 x 2048 bytes), the scales apart:
         * the region, then the scales' heap memory */
        failed = 0;
        for (long f = 1; f < 64; f++) {
            ember__alloc_fail_at(f);
            ember_status st = ember__qpack_b_s8(s, &p, 1024, 2048, 2048, 0, 8, B, NULL);
            ember__alloc_fail_at(0);
            if (st == EMBER_OK) {
                CU_ASSERT_PTR_NOT_NULL(p.sb_heap);
                CU_ASSERT_NOT_EQUAL(p.b_map, 0);
                ember__qpack_free(&p);
                break;
            }
            failed++;
            CU_ASSERT_EQUAL(st, EMBER_ERR_OUT_OF_MEMORY);
            CU_ASSERT_PTR_NULL(p.b);
            CU_ASSERT_PTR_NULL(p.sb_heap);
            TU_OK(ember_context_trim(ctx));
            CU_ASSERT_EQUAL(ember__alloc_live(), live0);
        }
        CU_ASSERT(failed >= 2);
        TU_OK(ember_context_trim(ctx));
        CU_ASSERT_EQUAL(ember__alloc_live(), live0);
        /* through the API: a weight tensor with K blocks (so that even one row packs it) keeps
         * its pack in a region until it is freed */
        float *xf = malloc((size_t)k * 4), *wf = malloc((size_t)(k * n) * 4);
        CU_ASSERT_FATAL(xf && wf);
        uint64_t seed = tu_seed();
        tu_rand_f32(&seed, xf, (size_t)k, -1.0f, 1.0f);
        tu_rand_f32(&seed, wf, (size_t)(k * n), -1.0f, 1.0f);
        ember_tensor *tx = NULL, *tw = NULL, *qx = NULL, *qw = NULL, *y = NULL;
        ember_qscheme sx = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
        ember_qscheme sw =
            ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, (int64_t[]){32, 1});
        TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, (int64_t[]){1, k}, xf, &tx));
        TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, (int64_t[]){k, n}, wf, &tw));
        TU_OK(ember_quantize(tx, &sx, &qx));
        TU_OK(ember_quantize(tw, &sw, &qw));
        TU_OK(ember_q_matmul(qx, qw, &y));
        CU_ASSERT_EQUAL(s->packs.n, 0);
        ember_tensor_free(qw);
        CU_ASSERT_EQUAL(s->packs.n, cap);
        ember_tensor_free(y);
        ember_tensor_free(qx);
        ember_tensor_free(tx);
        ember_tensor_free(tw);
        free(xf);
        free(wf);
        ember_context_destroy(ctx);
    }
    free(A);
    free(B);
}

/* The context's scratch region: 64-byte aligned below EMBER__SCRATCH_HUGE, on a 2 MiB boundary
 * from there (the huge-page region), every byte of it usable, reused when it suffices, grown when
 * not, refused while held, and an allocation failure leaves no region behind and no leak. */
static void test_scratch_region(void) {
    const size_t huge = (size_t)2 << 20;
    long live0 = ember__alloc_live();
    ember_context *ctx;
    ember__cpu_state *s = cpu_state(&ctx);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    uint8_t *r = ember__cpu_scratch_get(s, 1000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_EQUAL((uintptr_t)r % 64, 0);
    memset(r, 0x5a, 1000);
    CU_ASSERT_PTR_NULL(ember__cpu_scratch_get(s, 10)); /* held */
    ember__cpu_scratch_put(s);
    static const size_t sizes[] = {EMBER__SCRATCH_HUGE, (size_t)5 << 20 | 1, (size_t)3 << 20};
    uint8_t *big = NULL;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        r = ember__cpu_scratch_get(s, sizes[i]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        CU_ASSERT_EQUAL((uintptr_t)r % huge, 0);
        memset(r, (int)i,
               sizes[i]); /* the whole region (a mapping from 2 MiB: a write past it faults) */
        CU_ASSERT_EQUAL(r[sizes[i] - 1], (uint8_t)i);
        if (i == 1)
            big = r;
        if (i == 2)
            CU_ASSERT_PTR_EQUAL(r, big); /* 3 MiB fits the 5 MiB region: reused */
        ember__cpu_scratch_put(s);
    }
    ember__alloc_fail_at(1); /* the next growth fails */
    CU_ASSERT_PTR_NULL(ember__cpu_scratch_get(s, (size_t)8 << 20));
    ember__alloc_fail_at(0);
    r = ember__cpu_scratch_get(s, 1000); /* nothing left: a new region */
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    memset(r, 1, 1000);
    ember__cpu_scratch_put(s);
    /* ember_context_trim frees the region, unless a call holds it */
    TU_OK(ember_context_trim(ctx)); /* the buffer cache emptied too: only the region moves below */
    r = ember__cpu_scratch_get(s, (size_t)3 << 20);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    long live1 = ember__alloc_live();
    TU_OK(ember_context_trim(ctx)); /* held: kept */
    CU_ASSERT_EQUAL(ember__alloc_live(), live1);
    memset(r, 2, (size_t)3 << 20); /* still the caller's (not unmapped) */
    ember__cpu_scratch_put(s);
    TU_OK(ember_context_trim(ctx));
    CU_ASSERT_EQUAL(ember__alloc_live(), live1 - 1);
    ember_context_destroy(ctx);
    CU_ASSERT_EQUAL(ember__alloc_live(), live0);
}

/* the trim tests' float operands: x [m, k] in [-4, 4], w [k, n] in [-2, 2], steps of 1/250 and
 * 1/500 */
static void trim_operands(float *x, float *w, int64_t m, int64_t k, int64_t n) {
    for (int64_t i = 0; i < m * k; i++)
        x[i] = (float)((int)(tu_next(&rng) % 2001) - 1000) / 250.0f;
    for (int64_t i = 0; i < k * n; i++)
        w[i] = (float)((int)(tu_next(&rng) % 2001) - 1000) / 500.0f;
}

/* q_matmul through the API after ember_context_trim (the working region given back between two
 * calls) gives the same bytes as before it; the packed a alone (600 x 4032 bytes) takes the region
 * over 2 MiB, on every tier */
static void test_trim_between_calls(void) {
    const int64_t m = 600, k = 4000, n = 40;
    float *x = malloc((size_t)(m * k) * 4), *w = malloc((size_t)(k * n) * 4);
    float *r0 = malloc((size_t)(m * n) * 4), *r1 = malloc((size_t)(m * n) * 4);
    CU_ASSERT_FATAL(x && w && r0 && r1);
    trim_operands(x, w, m, k, n);
    ember_context *ctx = tu_cpu_context();
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    tu_q8_matmul(ctx, TU_CPU, m, k, n, x, w, r0);
    TU_OK(ember_context_trim(ctx));
    tu_q8_matmul(ctx, TU_CPU, m, k, n, x, w, r1);
    CU_ASSERT_EQUAL(memcmp(r0, r1, (size_t)(m * n) * 4), 0);
    ember_context_destroy(ctx);
    free(x);
    free(w);
    free(r0);
    free(r1);
}

typedef struct trim_race {
    const ember_tensor *qx, *qw;
    const float *want; /* the product before the race */
    size_t bytes;
    atomic_int done, trims;
    int bad, calls;
    ember_context *ctx;
} trim_race;

static void *trim_race_mm(void *v) {
    trim_race *t = v;
    float *got = malloc(t->bytes);
    while (atomic_load(&t->trims) == 0) /* the other thread is trimming before the first call */
        sched_yield();
    for (int rep = 0; rep < 12 && got; rep++) {
        ember_tensor *y = NULL;
        if (ember_q_matmul(t->qx, t->qw, &y) != EMBER_OK ||
            ember_tensor_read(y, got, t->bytes) != EMBER_OK || memcmp(got, t->want, t->bytes))
            t->bad++;
        ember_tensor_free(y);
        t->calls++;
    }
    free(got);
    atomic_store(&t->done, 1);
    return NULL;
}

static void *trim_race_trim(void *v) {
    trim_race *t = v;
    while (!atomic_load(&t->done)) {
        if (ember_context_trim(t->ctx) != EMBER_OK)
            t->bad++;
        atomic_fetch_add(&t->trims, 1);
    }
    return NULL;
}

/* ember_context_trim on one thread while another runs q_matmul on the same context (the trim
 * frees the working region only when no call holds it): every product keeps its bytes, nothing
 * leaks (ThreadSanitizer and AddressSanitizer watch the region in CI). The calls start after the
 * first trim, so that the two overlap even where threads run one at a time (valgrind). */
static void test_trim_while_running(void) {
    const int64_t m = 600, k = 4000, n = 40, xs[2] = {m, k}, ws[2] = {k, n};
    float *x = malloc((size_t)(m * k) * 4), *w = malloc((size_t)(k * n) * 4);
    float *want = malloc((size_t)(m * n) * 4);
    CU_ASSERT_FATAL(x && w && want);
    trim_operands(x, w, m, k, n);
    long live0 = ember__alloc_live();
    ember_context *ctx = tu_cpu_context();
    CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
    ember_tensor *qx = NULL, *qw = NULL;
    tu_q8_matmul_nd(ctx, TU_CPU, 2, xs, ws, x, w, want, (size_t)(m * n) * 4, &qx, &qw);
    CU_ASSERT_FATAL(qx && qw);
    trim_race t = {qx, qw, want, (size_t)(m * n) * 4, 0, 0, 0, 0, ctx};
    atomic_init(&t.done, 0);
    atomic_init(&t.trims, 0);
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, trim_race_trim, &t), 0);
    trim_race_mm(&t);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(t.bad, 0);
    CU_ASSERT_EQUAL(t.calls, 12);
    CU_ASSERT(atomic_load(&t.trims) > 0);
    ember_tensor_free(qx);
    ember_tensor_free(qw);
    ember_context_destroy(ctx);
    CU_ASSERT_EQUAL(ember__alloc_live(), live0);
    free(x);
    free(w);
    free(want);
}

/* the bench's ceiling loops report the ops they did, and the L2-fed loop reads its buffer only
 * (tile loads are not instrumented by AddressSanitizer: the buffer lies between two inaccessible
 * pages instead, so a read outside it faults) */
static void test_peak_loops(void) {
    if (ember__qtier_available(EMBER__QT_AVX512)) /* each loop only where its ISA is */
        CU_ASSERT_EQUAL(ember__qpeak_vnni(10), 10.0 * 12 * 64 * 2);
    if (!ember__qtier_available(EMBER__QT_AMX))
        return;
    CU_ASSERT_EQUAL(ember__qpeak_amx(10), 10.0 * 4 * 16 * 16 * 64 * 2);
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = EMBER__QPEAK_L2_BYTES + 2 * pg;
    CU_ASSERT_EQUAL_FATAL(EMBER__QPEAK_L2_BYTES % pg, 0);
    uint8_t *map = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CU_ASSERT_FATAL(map != MAP_FAILED);
    uint8_t *buf = map + pg;
    CU_ASSERT_EQUAL_FATAL(mprotect(buf, EMBER__QPEAK_L2_BYTES, PROT_READ | PROT_WRITE), 0);
    rand_i8((int8_t *)buf, EMBER__QPEAK_L2_BYTES, -128, 127);
    CU_ASSERT_EQUAL(ember__qpeak_amx_l2(2, buf), 2.0 * 256 * 512 * 2048 * 2);
    munmap(map, len);
}

int main(void) {
    rng = tu_seed();
    CU_TestInfo tests[] = {
        {"tier names and selection", test_tiers},
        {"exact int32, every tier, odd shapes", test_exact_int32},
        {"exact int32, 64 columns a pass and a lone last panel", test_wide_panels},
        {"the AVX2 tier with and without AVX-VNNI", test_avx2_paths},
        {"exact int32 at the value extremes", test_extremes},
        {"scale epilogue vs float64", test_epilogue},
        {"float-output tile path exact (unit scales)", test_float_path_exact},
        {"float output of 16 MiB in panel order, sampled exact", test_float_panels_streamed},
        {"direct (unpacked) kernel for first decode calls", test_direct},
        {"q_matmul entry: schemes, declines, pack cache", test_q_matmul_entry},
        {"q_matmul entry: batched", test_q_matmul_batched},
        {"decode first call unpacked, packed from the second", test_first_call_policy},
        {"wide weights: first call, cached call, thread counts, same bits", test_wide_same_bits},
        {"a first call that packs, allocation failures", test_first_pack_oom},
        {"dynamic activation quant (opt-in, lossy)", test_dynamic_activation_quant},
        {"W8A8: A quantized per row, as ember_quantize; NaN rows", test_w8a8_rows},
        {"(F,Q): the fused float path", test_fq_fused},
        {"(F,Q) more than 64 rows: blocks of rows, each row's results as alone",
         test_fq_row_blocks},
        {"4-bit B as stored: the packed bytes of its int8 values", test_pack_plain4},
        {"(F,Q) scale blocks along the columns ([1, 32], ...)", test_fq_col_blocks},
        {"(Q,Q) and W8A8 on [1, 32] weights: the fused path on A's floats", test_qq_col_blocks},
        {"(F,Q) the AVX2 kernel: the AVX-512 kernel's results", test_fq_avx2},
        {"(F,Q) a decode row: whole rows of a task, the group path's results", test_fq_decode_row},
        {"q_matmul entry: allocation failures", test_q_matmul_oom},
        {"first calls on B as stored: allocation failures", test_direct_oom},
        {"cpu_max_isa caps the tier, describe names it", test_tier_cap},
        {"EMBER_CPU_MAX_ISA caps the tier", test_tier_cap_env},
        {"thread pool", test_thread_pool},
        {"more than 64 pool threads", test_many_threads},
        {"row-block runs: every task once, any schedule", test_task_runs},
        {"small products on the calling thread, the same bits", test_small_serial},
        {"bench ceiling loops: op counts, bounds", test_peak_loops},
        {"f16 scales: exactness test and bits", test_f16_exact},
        {"packed values from 4 MiB or filling 2 MiB pages in aligned regions, exact",
         test_pack_placement},
        {"pack regions: recycled per context, trimmed, failure, tensor free", test_pack_regions},
        {"scratch region: alignment, reuse, growth, failure, trim", test_scratch_region},
        {"q_matmul after ember_context_trim: same bytes", test_trim_between_calls},
        {"ember_context_trim while q_matmul runs on another thread", test_trim_while_running},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"cpu_qgemm", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return tu_run("test_cpu_qgemm", suites);
}
