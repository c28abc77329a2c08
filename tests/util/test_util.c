/* tests/util/test_util.c: helpers shared by the CUnit suites. */
#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "test_util.h"

const ember_device TU_CPU = {EMBER_BACKEND_CPU, 0};

#if defined(__SANITIZE_ADDRESS__)
/* AddressSanitizer's defaults for every test binary, so that a run outside `make asan` (ctest in
 * build-asan/, a test started by hand) behaves as the make target does; ASAN_OPTIONS in the
 * environment still overrides each flag. intercept_tls_get_addr=0 keeps the runtime from misreading
 * PoCL's dynamic TLS blocks as glibc 2.19's, which crashes LeakSanitizer's tracer at exit after a
 * passing test (the Makefile's SANITIZER_ENV says why and what it costs). Default visibility:
 * the build hides symbols, and GCC's shared runtime finds the function only when exported. */
__attribute__((visibility("default"))) const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "intercept_tls_get_addr=0"; }
#endif

int tu_run(const char *name, CU_SuiteInfo *suites) {
    /* The suites create contexts with the environment's EMBER_* settings and take success for
     * granted past their first check; a setting that no context accepts (EMBER_CPU_MAX_ISA=avx512,
     * say) is reported once here instead of as a crash in the middle of a suite. */
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    ember_context *probe = NULL;
    if (ember_context_create(&o, &probe) != EMBER_OK) {
        fprintf(stderr, "%s: no context can be made in this environment: %s\n", name,
                ember_last_error());
        return 2;
    }
    ember_context_destroy(probe);
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    if (CU_register_suites(suites) != CUE_SUCCESS) {
        fprintf(stderr, "%s: cannot register suites: %s\n", name, CU_get_error_msg());
        CU_cleanup_registry();
        return 2;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_ErrorCode rc = CU_basic_run_tests();
    unsigned failed = CU_get_number_of_tests_failed();
    unsigned suites_failed = CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return (rc != CUE_SUCCESS || failed > 0 || suites_failed > 0) ? 1 : 0;
}

uint64_t tu_seed(void) {
    static uint64_t seed;
    if (!seed) {
        const char *e = getenv("EMBER_TEST_SEED");
        seed = e ? strtoull(e, NULL, 0) : ((uint64_t)time(NULL) ^ ((uint64_t)clock() << 20));
        if (!seed)
            seed = 0x9e3779b97f4a7c15ull;
        fprintf(stderr, "EMBER_TEST_SEED=%llu\n", (unsigned long long)seed);
    }
    return seed;
}

uint64_t tu_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

void tu_rand_f32(uint64_t *s, float *dst, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) {
        double u = (double)(tu_next(s) >> 11) / 9007199254740992.0;
        dst[i] = (float)(lo + (hi - lo) * u);
    }
}

ember_context *tu_cpu_context(void) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    ember_context *ctx = NULL;
    if (ember_context_create(&o, &ctx) != EMBER_OK) {
        fprintf(stderr, "context_create failed: %s\n", ember_last_error());
        CU_FAIL_FATAL("cannot create a CPU context");
    }
    return ctx;
}

ember_qscheme tu_qscheme_sample(int k) {
    static const int64_t b4[] = {4};
    switch (k) {
    case 0:
        return ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    case 1:
        return ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
    case 2:
        return ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, b4);
    case 3: {
        ember_qscheme s = ember_qscheme_per_block(EMBER_E2M1, EMBER_QSTORE_PACKED_NATIVE, 1, b4);
        s.tensor_level = 1;
        s.block_scale = EMBER_SCALE_UE4M3;
        return s;
    }
    case 4:
        return ember_qscheme_per_tensor(EMBER_E4M3, EMBER_QSTORE_NATIVE);
    default:
        return ember_qscheme_per_tensor(EMBER_Q8F, EMBER_QSTORE_NATIVE);
    }
}

void tu_q8_matmul_nd(ember_context *c, ember_device dev, int rank, const int64_t *xs,
                     const int64_t *ws, const float *x, const float *w, float *r, size_t rbytes,
                     ember_tensor **qx, ember_tensor **qw) {
    ember_qscheme q = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_tensor *tx = NULL, *tw = NULL, *qxt = NULL, *qwt = NULL, *y = NULL;
    TU_OK(ember_tensor_from_data(c, dev, EMBER_F32, rank, xs, x, &tx));
    TU_OK(ember_tensor_from_data(c, dev, EMBER_F32, rank, ws, w, &tw));
    TU_OK(ember_quantize(tx, &q, &qxt));
    TU_OK(ember_quantize(tw, &q, &qwt));
    TU_OK(ember_q_matmul(qxt, qwt, &y));
    TU_OK(ember_tensor_read(y, r, rbytes));
    ember_tensor_free(y);
    ember_tensor_free(tx);
    ember_tensor_free(tw);
    if (qx)
        *qx = qxt;
    else
        ember_tensor_free(qxt);
    if (qw)
        *qw = qwt;
    else
        ember_tensor_free(qwt);
}

void tu_q8_matmul(ember_context *c, ember_device dev, int64_t m, int64_t k, int64_t n,
                  const float *x, const float *w, float *r) {
    const int64_t sx[] = {m, k}, sw[] = {k, n};
    tu_q8_matmul_nd(c, dev, 2, sx, sw, x, w, r, (size_t)(m * n) * sizeof(float), NULL, NULL);
}

void tu_q8_same_bits(ember_context *(*make)(long long), const long long setting[2], int64_t m,
                     int64_t k, int64_t n) {
    float *x = malloc((size_t)(m * k) * sizeof *x), *w = malloc((size_t)(k * n) * sizeof *w);
    float *r[2] = {malloc((size_t)(m * n) * sizeof(float)),
                   malloc((size_t)(m * n) * sizeof(float))};
    CU_ASSERT_FATAL(x && w && r[0] && r[1]);
    uint64_t seed = tu_seed();
    tu_rand_f32(&seed, x, (size_t)(m * k), -2.0f, 2.0f);
    tu_rand_f32(&seed, w, (size_t)(k * n), -1.0f, 1.0f);
    for (int i = 0; i < 2; i++) {
        ember_context *c = make(setting[i]);
        tu_q8_matmul(c, TU_CPU, m, k, n, x, w, r[i]);
        ember_context_destroy(c);
    }
    CU_ASSERT_EQUAL(memcmp(r[0], r[1], (size_t)(m * n) * sizeof(float)), 0);
    free(x);
    free(w);
    free(r[0]);
    free(r[1]);
}

void tu_check_status(const char *file, int line, ember_status got, ember_status want,
                     const char *needle) {
    CU_assertImplementation(got == want, (unsigned)line, "status as expected", file, "", CU_FALSE);
    if (got != want)
        fprintf(stderr, "  %s:%d: got %s (%s), want %s\n", file, line, ember_status_name(got),
                ember_last_error(), ember_status_name(want));
    if (needle && !strstr(ember_last_error(), needle)) {
        CU_assertImplementation(CU_FALSE, (unsigned)line, "ember_last_error() has the text", file,
                                "", CU_FALSE);
        fprintf(stderr, "  %s:%d: detail \"%s\" lacks \"%s\"\n", file, line, ember_last_error(),
                needle);
    }
}
