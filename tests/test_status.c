/* tests/test_status.c: status names and strings, the per-thread last error. */
#include <pthread.h>
#include <stdio.h>

#include "test_util.h"

static void test_names_and_strings(void) {
    CU_ASSERT_STRING_EQUAL(ember_status_name(EMBER_OK), "EMBER_OK");
    CU_ASSERT_STRING_EQUAL(ember_status_name(EMBER_ERR_QUANT_TRANSFER), "EMBER_ERR_QUANT_TRANSFER");
    CU_ASSERT_STRING_EQUAL(ember_status_name((ember_status)12345), "EMBER_UNKNOWN_STATUS");
    CU_ASSERT_STRING_EQUAL(ember_status_str((ember_status)12345), "unknown status");
    CU_ASSERT_STRING_EQUAL(ember_status_str(EMBER_ERR_QUANT_TRANSFER),
                           "Local transfer of quantized tensors is not supported yet");
    CU_ASSERT_STRING_EQUAL(ember_status_str(EMBER_ERR_SUB_BYTE_NATIVE),
                           "Can't store native sub-byte values");
    CU_ASSERT_STRING_EQUAL(ember_status_str(EMBER_ERR_QUANT_UNSUPPORTED),
                           "Quantization not supported yet");
}

/* The values are ABI (API.md): pin every one. */
static void test_values_pinned(void) {
    CU_ASSERT_EQUAL(EMBER_OK, 0);
    CU_ASSERT_EQUAL(EMBER_ERR_INVALID_ARGUMENT, -1);
    CU_ASSERT_EQUAL(EMBER_ERR_OUT_OF_MEMORY, -2);
    CU_ASSERT_EQUAL(EMBER_ERR_MISUSE, -3);
    CU_ASSERT_EQUAL(EMBER_ERR_SHAPE_MISMATCH, -4);
    CU_ASSERT_EQUAL(EMBER_ERR_DTYPE_MISMATCH, -5);
    CU_ASSERT_EQUAL(EMBER_ERR_NON_FINITE, -6);
    CU_ASSERT_EQUAL(EMBER_ERR_BACKEND_MISMATCH, -100);
    CU_ASSERT_EQUAL(EMBER_ERR_DEVICE_MISMATCH, -101);
    CU_ASSERT_EQUAL(EMBER_ERR_QUANT_TRANSFER, -102);
    CU_ASSERT_EQUAL(EMBER_ERR_DTYPE_TRANSFER, -103);
    CU_ASSERT_EQUAL(EMBER_ERR_FOREIGN_DEQUANTIZE, -104);
    CU_ASSERT_EQUAL(EMBER_ERR_QUANT_UNSUPPORTED, -105);
    CU_ASSERT_EQUAL(EMBER_ERR_NOT_QUANTIZED, -106);
    CU_ASSERT_EQUAL(EMBER_ERR_SUB_BYTE_NATIVE, -107);
    CU_ASSERT_EQUAL(EMBER_ERR_UNSUPPORTED_SCHEME, -108);
    CU_ASSERT_EQUAL(EMBER_ERR_PACKED_SHAPE, -109);
    CU_ASSERT_EQUAL(EMBER_ERR_BLOCK_SHAPE, -110);
    CU_ASSERT_EQUAL(EMBER_ERR_SCALE_DTYPE, -111);
    CU_ASSERT_EQUAL(EMBER_ERR_NOT_DIFFERENTIABLE, -120);
    CU_ASSERT_EQUAL(EMBER_ERR_AUTODIFF_CONTEXT, -121);
    CU_ASSERT_EQUAL(EMBER_ERR_CHECKPOINT_MISMATCH, -122);
    CU_ASSERT_EQUAL(EMBER_ERR_AUTODIFF_TRANSFER, -123);
    CU_ASSERT_EQUAL(EMBER_ERR_BACKEND_UNAVAILABLE, -200);
    CU_ASSERT_EQUAL(EMBER_ERR_DEVICE, -201);
    CU_ASSERT_EQUAL(EMBER_ERR_KERNEL_BUILD, -202);
}

static void test_last_error_lifecycle(void) {
    ember_clear_error();
    CU_ASSERT_STRING_EQUAL(ember_last_error(), "");
    CU_ASSERT_EQUAL(ember_last_error_status(), EMBER_OK);
    ember_context *ctx = NULL;
    TU_ASSERT_STATUS(ember_context_create(NULL, NULL), EMBER_ERR_INVALID_ARGUMENT, "out is NULL");
    CU_ASSERT_EQUAL(ember_last_error_status(), EMBER_ERR_INVALID_ARGUMENT);
    const char *file = NULL, *func = NULL;
    int line = 0;
    ember_last_error_location(&file, &func, &line);
    CU_ASSERT_PTR_NOT_NULL(strstr(file, "context.c"));
    CU_ASSERT_STRING_EQUAL(func, "ember_context_create");
    CU_ASSERT(line > 0);
    /* a successful call does not clear it */
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    TU_OK(ember_context_create(&o, &ctx));
    CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "out is NULL"));
    ember_clear_error();
    CU_ASSERT_STRING_EQUAL(ember_last_error(), "");
    ember_context_destroy(ctx);
}

static void *other_thread(void *arg) {
    (void)arg;
    /* a fresh thread starts with no error, and its failures stay its own */
    int clean = ember_last_error()[0] == '\0';
    ember_context_create(NULL, NULL);
    return (void *)(intptr_t)clean;
}

static void test_last_error_is_per_thread(void) {
    ember_clear_error();
    ember_context_create(NULL, NULL); /* fails: detail on this thread */
    pthread_t th;
    void *ret = NULL;
    CU_ASSERT_EQUAL(pthread_create(&th, NULL, other_thread, NULL), 0);
    pthread_join(th, &ret);
    CU_ASSERT_EQUAL((intptr_t)ret, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "out is NULL"));
    ember_clear_error();
}

static CU_TestInfo status_tests[] = {
    {"names and strings", test_names_and_strings},
    {"values pinned (ABI)", test_values_pinned},
    {"last error lifecycle", test_last_error_lifecycle},
    {"last error is per thread", test_last_error_is_per_thread},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"status", NULL, NULL, NULL, NULL, status_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return tu_run("test_status", suites); }
