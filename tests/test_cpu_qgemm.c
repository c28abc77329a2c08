/* tests/test_cpu_qgemm.c: the int8 matmul kernels of the CPU backend, tier by tier, against a
 * plain reference: exact int32 sums on random shapes (M, N, K that are not multiples of any tile,
 * K not a multiple of 4 or 64), 8-bit and 4-bit packed B, and the scale epilogue (per-tensor,
 * per-row / per-column, per-block along K) against a float64 reference. Tiers the machine lacks
 * are skipped (and say so). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"
#include "backends/cpu/qgemm.h"

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
                        TU_OK(ember__qpack_b_s8(&p, k, n, n, 0, bits, B, NULL));
                        TU_OK(ember__qgemm_s32(s, (ember__qtier)t, m, A, lda, &p, C, n));
                        int bad = 0;
                        for (int64_t i = 0; i < m && !bad; i++)
                            for (int64_t j = 0; j < n && !bad; j++) {
                                int32_t ref = 0;
                                for (int64_t kk = 0; kk < k; kk++)
                                    ref += (int32_t)A[i * lda + kk] * B[kk * n + j];
                                if (ref != C[i * n + j]) {
                                    printf("\n  %s bits %d m %lld n %lld k %lld: C[%lld,%lld] %d != %d",
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
    TU_OK(ember__qpack_b_s8(&p, k, n, n, 0, 8, B, NULL));
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

/* Scale epilogue vs float64: C = sum_c sa[i,c] sb[c,j] dot_c */
static void check_epilogue(ember__cpu_state *s, int64_t m, int64_t n, int64_t k, int64_t kc,
                           int bits, int f16_scales) {
    int64_t nch = kc > 0 ? k / kc : 1;
    int64_t len = kc > 0 ? kc : k;
    int8_t *A = malloc((size_t)(m * k)), *B = malloc((size_t)(k * n));
    float *sa = malloc((size_t)(m * nch) * 4), *sb = malloc((size_t)(nch * n) * 4);
    float *C = malloc((size_t)(m * n) * 4);
    rand_i8(A, (size_t)(m * k), -127, 127);
    rand_i8(B, (size_t)(k * n), bits == 8 ? -127 : -7, bits == 8 ? 127 : 7);
    tu_rand_f32(&rng, sa, (size_t)(m * nch), 0.001f, 0.02f);
    tu_rand_f32(&rng, sb, (size_t)(nch * n), 0.001f, 0.02f);
    if (f16_scales)
        for (int64_t i = 0; i < nch * n; i++)
            sb[i] = ember__f16_to_f32(ember__f32_to_f16(sb[i]));
    ember__qpack p;
    TU_OK(ember__qpack_b_s8(&p, k, n, n, kc, bits, B, sb));
    CU_ASSERT_EQUAL(p.nch, nch);
    if (nch > 1)
        CU_ASSERT_EQUAL(p.sb16, f16_scales);
    for (int t = 0; t < EMBER__QT_COUNT; t++) {
        if (!ember__qtier_available((ember__qtier)t))
            continue;
        for (int64_t i = 0; i < m * n; i++)
            C[i] = NAN;
        TU_OK(ember__qgemm(s, (ember__qtier)t, m, A, k, sa, &p, C, n));
        double worst = 0;
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
                double err = fabs((double)C[i * n + j] - ref) / (mag + 1e-30);
                if (!(err <= worst))
                    worst = isnan(err) ? INFINITY : (err > worst ? err : worst);
            }
        /* float rounding of the scale products and the chunk sums: a few ulps of the magnitude */
        if (!(worst < 1e-5))
            printf("\n  %s m %lld n %lld k %lld kc %lld bits %d: rel err %g",
                   ember__qtier_name((ember__qtier)t), (long long)m, (long long)n, (long long)k,
                   (long long)kc, bits, worst);
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
    check_epilogue(s, 37, 45, 200, 0, 8, 0);  /* per-row x per-column, one chunk */
    check_epilogue(s, 5, 70, 256, 32, 8, 0);  /* block 32 along K */
    check_epilogue(s, 40, 33, 192, 64, 8, 1); /* block 64, f16 scales */
    check_epilogue(s, 3, 64, 384, 128, 4, 1); /* 4-bit, block 128 */
    check_epilogue(s, 70, 50, 96, 32, 4, 0);  /* 4-bit, block 32 */
    check_epilogue(s, 1, 100, 64, 32, 4, 1);  /* decode row */
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

int main(void) {
    rng = tu_seed();
    CU_TestInfo tests[] = {
        {"tier names and selection", test_tiers},
        {"exact int32, every tier, odd shapes", test_exact_int32},
        {"exact int32 at the value extremes", test_extremes},
        {"scale epilogue vs float64", test_epilogue},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {{"cpu_qgemm", NULL, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
    return tu_run("test_cpu_qgemm", suites);
}
