/* tests/test_api.c: version macros against the library, contexts and their options and
 * environment, the device queries of the CPU backend. (That libember.so exports only ember_
 * symbols is checked by the CTest test `exported_symbols`, tests/extra.cmake.) */
#include <stdio.h>
#include <stdlib.h>

#include "test_util.h"

/* ---- version ---- */

static void test_version(void) {
    CU_ASSERT_STRING_EQUAL(ember_version_string(), EMBER_VERSION_STRING);
    CU_ASSERT_EQUAL(ember_version_number(), EMBER_VERSION_NUMBER);
    CU_ASSERT_EQUAL(EMBER_VERSION_NUMBER,
                    EMBER_VERSION_MAJOR * 10000 + EMBER_VERSION_MINOR * 100 + EMBER_VERSION_PATCH);
    char buf[64];
    snprintf(buf, sizeof buf, "%d.%d.%d", EMBER_VERSION_MAJOR, EMBER_VERSION_MINOR,
             EMBER_VERSION_PATCH);
    CU_ASSERT_STRING_EQUAL(ember_version_string(), buf);
}

/* ---- contexts ---- */

/* Set an environment variable for one test and put the old value back afterwards. */
typedef struct env_save {
    const char *name;
    char *old;
    int had;
} env_save;

static void env_set(env_save *s, const char *name, const char *value) {
    const char *o = getenv(name);
    s->name = name;
    s->had = o != NULL;
    s->old = o ? strdup(o) : NULL;
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

static void env_restore(env_save *s) {
    if (s->had)
        setenv(s->name, s->old, 1);
    else
        unsetenv(s->name);
    free(s->old);
}

static void test_options_default(void) {
    ember_options o = ember_options_default();
    CU_ASSERT_EQUAL(o.num_threads, 0);
    CU_ASSERT_PTR_NULL(o.cpu_max_isa);
    CU_ASSERT_EQUAL(o.enable_opencl, 1);
    CU_ASSERT_EQUAL(o.quant_propagation, EMBER_QUANT_INHIBIT);
    CU_ASSERT_EQUAL(o.dynamic_activation_quant, 0);
}

static void test_context_create_destroy(void) {
    ember_context *c = NULL;
    /* NULL options: the defaults plus the environment (whatever it holds, it must be valid) */
    env_save e1, e2;
    env_set(&e1, "EMBER_NUM_THREADS", NULL);
    env_set(&e2, "EMBER_CPU_MAX_ISA", NULL);
    TU_OK(ember_context_create(NULL, &c));
    CU_ASSERT_PTR_NOT_NULL(c);
    CU_ASSERT(ember_device_count(c, EMBER_BACKEND_CPU) == 1);
    ember_context_destroy(c);
    env_restore(&e2);
    env_restore(&e1);
    ember_context_destroy(NULL); /* no-op */
    uint32_t junk[16] = {0};
    ember_context_destroy((ember_context *)junk); /* a foreign pointer is ignored */
    CU_ASSERT_EQUAL(junk[0], 0);
    /* explicit options */
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.num_threads = 3;
    o.cpu_max_isa = "scalar";
    o.quant_propagation = EMBER_QUANT_PROPAGATE;
    TU_OK(ember_context_create(&o, &c));
    ember_device_info info;
    TU_OK(ember_device_describe(c, TU_CPU, &info));
    CU_ASSERT_EQUAL(info.compute_units, 3);
    ember_context_destroy(c);
}

static void test_context_option_errors(void) {
    ember_context *c;
    ember_options o;
    TU_ASSERT_STATUS(ember_context_create(NULL, NULL), EMBER_ERR_INVALID_ARGUMENT, "out is NULL");
#define BAD_OPTION(field, value, needle)                                                           \
    do {                                                                                           \
        o = ember_options_default();                                                               \
        o.enable_opencl = 0;                                                                       \
        o.field = value;                                                                           \
        c = (ember_context *)(uintptr_t)0x1;                                                       \
        TU_ASSERT_STATUS(ember_context_create(&o, &c), EMBER_ERR_INVALID_ARGUMENT, needle);        \
        CU_ASSERT_PTR_NULL(c);                                                                     \
    } while (0)
    BAD_OPTION(num_threads, -1, "num_threads -1 is outside 0..1024");
    BAD_OPTION(num_threads, 5000, "num_threads 5000");
    BAD_OPTION(cpu_max_isa, "avx9000", "cpu_max_isa \"avx9000\"");
    BAD_OPTION(cpu_max_isa, "", "scalar|avx2|avx512_vnni|amx");
    BAD_OPTION(enable_opencl, 2, "enable_opencl must be 0 or 1");
    BAD_OPTION(quant_propagation, (ember_quant_propagation)9, "bad quant_propagation 9");
    BAD_OPTION(dynamic_activation_quant, -1, "dynamic_activation_quant must be 0 or 1");
#undef BAD_OPTION
}

static void test_context_env(void) {
    ember_context *c;
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    env_save e;
    const char *bad_threads[] = {"abc", "0", "-2", "4x", "100000"};
    for (size_t i = 0; i < sizeof bad_threads / sizeof bad_threads[0]; i++) {
        env_set(&e, "EMBER_NUM_THREADS", bad_threads[i]);
        c = (ember_context *)(uintptr_t)0x1;
        TU_ASSERT_STATUS(ember_context_create(&o, &c), EMBER_ERR_INVALID_ARGUMENT,
                         "EMBER_NUM_THREADS");
        CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), bad_threads[i]));
        CU_ASSERT_PTR_NULL(c);
        env_restore(&e);
    }
    /* a field set in the options wins over the environment, which is then not read */
    env_set(&e, "EMBER_NUM_THREADS", "abc");
    o.num_threads = 2;
    TU_OK(ember_context_create(&o, &c));
    ember_context_destroy(c);
    env_restore(&e);
    o.num_threads = 0;
    /* a valid value is used */
    env_set(&e, "EMBER_NUM_THREADS", "2");
    TU_OK(ember_context_create(&o, &c));
    ember_device_info info;
    TU_OK(ember_device_describe(c, TU_CPU, &info));
    CU_ASSERT_EQUAL(info.compute_units, 2);
    ember_context_destroy(c);
    env_restore(&e);

    env_set(&e, "EMBER_CPU_MAX_ISA", "sse9");
    c = (ember_context *)(uintptr_t)0x1;
    TU_ASSERT_STATUS(ember_context_create(&o, &c), EMBER_ERR_INVALID_ARGUMENT, "\"sse9\"");
    CU_ASSERT_PTR_NULL(c);
    o.cpu_max_isa = "scalar"; /* the option wins */
    TU_OK(ember_context_create(&o, &c));
    ember_context_destroy(c);
    env_restore(&e);
}

/* ---- devices ---- */

static void test_device_count(void) {
    ember_context *c = tu_cpu_context();
    CU_ASSERT_EQUAL(ember_device_count(c, EMBER_BACKEND_CPU), 1);
    CU_ASSERT_EQUAL(ember_device_count(c, EMBER_BACKEND_OPENCL), 0); /* disabled in c */
    CU_ASSERT_EQUAL(ember_device_count(c, (ember_backend)5), 0);
    CU_ASSERT_EQUAL(ember_device_count(c, (ember_backend)-1), 0);
    CU_ASSERT_EQUAL(ember_device_count(NULL, EMBER_BACKEND_CPU), 0);
    CU_ASSERT_STRING_EQUAL(ember_backend_name(EMBER_BACKEND_CPU), "cpu");
    CU_ASSERT_STRING_EQUAL(ember_backend_name(EMBER_BACKEND_OPENCL), "opencl");
    CU_ASSERT_STRING_EQUAL(ember_backend_name((ember_backend)9), "unknown");
    ember_context_destroy(c);
}

static void test_device_describe_cpu(void) {
    ember_context *c = tu_cpu_context();
    ember_device_info info;
    memset(&info, 0x7f, sizeof info);
    TU_OK(ember_device_describe(c, TU_CPU, &info));
    CU_ASSERT(info.name[0] != '\0' && strlen(info.name) < sizeof info.name);
    CU_ASSERT_STRING_EQUAL(info.vendor, "host");
    CU_ASSERT_PTR_NOT_NULL(strstr(info.driver, ember_version_string()));
    CU_ASSERT_EQUAL(strncmp(info.int8_matmul_path, "cpu.", 4), 0);
    /* the OpenBLAS core actually in use (Prescott, SkylakeX, Haswell, ...) */
    CU_ASSERT(info.blas_core[0] != '\0' && strlen(info.blas_core) < sizeof info.blas_core);
    CU_ASSERT_STRING_NOT_EQUAL(info.blas_core, "unknown");
    CU_ASSERT(info.memory_bytes > 0);
    CU_ASSERT(info.compute_units >= 1);
    CU_ASSERT_EQUAL(info.version[0], '\0');
    fprintf(stderr, "  cpu: %s, blas core %s, int8 path %s, %d threads\n", info.name,
            info.blas_core, info.int8_matmul_path, info.compute_units);
    ember_context_destroy(c);
}

static void test_device_describe_errors(void) {
    ember_context *c = tu_cpu_context();
    ember_device_info info, before;
    memset(&info, 0x3c, sizeof info);
    before = info;
    TU_ASSERT_STATUS(ember_device_describe(NULL, TU_CPU, &info), EMBER_ERR_MISUSE,
                     "device_describe: context is NULL");
    TU_ASSERT_STATUS(ember_device_describe(c, TU_CPU, NULL), EMBER_ERR_INVALID_ARGUMENT,
                     "out is NULL");
    ember_device cpu1 = {EMBER_BACKEND_CPU, 1}, cl = {EMBER_BACKEND_OPENCL, 0},
                 bad = {(ember_backend)3, 0};
    TU_ASSERT_STATUS(ember_device_describe(c, cpu1, &info), EMBER_ERR_BACKEND_UNAVAILABLE,
                     "no device cpu:1 (the cpu backend has 1 device)");
    TU_ASSERT_STATUS(ember_device_describe(c, cl, &info), EMBER_ERR_BACKEND_UNAVAILABLE,
                     "opencl backend is not available");
    TU_ASSERT_STATUS(ember_device_describe(c, bad, &info), EMBER_ERR_INVALID_ARGUMENT,
                     "bad backend value 3");
    CU_ASSERT_EQUAL(memcmp(&info, &before, sizeof info), 0); /* untouched on failure */
    ember_context_destroy(c);
}

static void test_device_supports_cpu(void) {
    ember_context *c = tu_cpu_context();
    int yes = -1;
    const ember_dtype plain[] = {EMBER_F32, EMBER_F16, EMBER_BF16, EMBER_I64,
                                 EMBER_I32, EMBER_I8,  EMBER_U8,   EMBER_BOOL};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        yes = -1;
        TU_OK(ember_device_supports(c, TU_CPU, EMBER_OP_STORE, plain[i], NULL, &yes));
        CU_ASSERT_EQUAL(yes, 1);
    }
    const ember_op float_ops[] = {EMBER_OP_MATMUL, EMBER_OP_ADD, EMBER_OP_MUL, EMBER_OP_LINEAR};
    for (size_t i = 0; i < sizeof float_ops / sizeof float_ops[0]; i++) {
        yes = -1;
        TU_OK(ember_device_supports(c, TU_CPU, float_ops[i], EMBER_F32, NULL, &yes));
        CU_ASSERT_EQUAL(yes, 1);
    }
    /* an invalid scheme is supported nowhere (answered, not an error) */
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_NATIVE);
    yes = -1;
    TU_OK(ember_device_supports(c, TU_CPU, EMBER_OP_STORE, EMBER_QFLOAT, &s, &yes));
    CU_ASSERT_EQUAL(yes, 0);

    /* errors */
    int keep = 42;
    TU_ASSERT_STATUS(ember_device_supports(NULL, TU_CPU, EMBER_OP_MATMUL, EMBER_F32, NULL, &keep),
                     EMBER_ERR_MISUSE, "context is NULL");
    TU_ASSERT_STATUS(ember_device_supports(c, TU_CPU, EMBER_OP_MATMUL, EMBER_F32, NULL, NULL),
                     EMBER_ERR_INVALID_ARGUMENT, "out is NULL");
    TU_ASSERT_STATUS(ember_device_supports(c, TU_CPU, EMBER_OP_COUNT, EMBER_F32, NULL, &keep),
                     EMBER_ERR_INVALID_ARGUMENT, "bad op value");
    TU_ASSERT_STATUS(
        ember_device_supports(c, TU_CPU, EMBER_OP_MATMUL, (ember_dtype)77, NULL, &keep),
        EMBER_ERR_INVALID_ARGUMENT, "bad dtype value 77");
    TU_ASSERT_STATUS(ember_device_supports(c, TU_CPU, EMBER_OP_Q_MATMUL, EMBER_QFLOAT, NULL, &keep),
                     EMBER_ERR_INVALID_ARGUMENT, "needs a scheme");
    ember_device cpu2 = {EMBER_BACKEND_CPU, 2};
    TU_ASSERT_STATUS(ember_device_supports(c, cpu2, EMBER_OP_MATMUL, EMBER_F32, NULL, &keep),
                     EMBER_ERR_BACKEND_UNAVAILABLE, "no device cpu:2");
    CU_ASSERT_EQUAL(keep, 42);
    ember_context_destroy(c);
}

static CU_TestInfo api_tests[] = {
    {"version macros vs library", test_version},
    {"options default", test_options_default},
    {"context create / destroy", test_context_create_destroy},
    {"context option errors", test_context_option_errors},
    {"context environment", test_context_env},
    {"device count", test_device_count},
    {"device describe (cpu)", test_device_describe_cpu},
    {"device describe errors", test_device_describe_errors},
    {"device supports (cpu)", test_device_supports_cpu},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"api", NULL, NULL, NULL, NULL, api_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return tu_run("test_api", suites); }
