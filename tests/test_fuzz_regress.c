/* tests/test_fuzz_regress.c: one test per bug the fuzz harnesses (fuzz/) found, so that each stays
 * fixed in the plain and ASan+UBSan builds whether or not libFuzzer is available. The inputs that
 * found them are also in the seed corpora (fuzz/corpus/<harness>/regress-*). */
#include <stdint.h>

#include "dispatch/internal.h"
#include "test_util.h"

static ember_context *ctx;

static int suite_init(void) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.num_threads = 1;
    return ember_context_create(&o, &ctx) == EMBER_OK ? 0 : 1;
}

static int suite_clean(void) {
    ember_context_destroy(ctx);
    return 0;
}

/* quant/layout.c computed the block grid as (dim + block - 1) / block: a signed overflow for a dim
 * near INT64_MAX, reachable when another dim is 0 (numel 0 does not overflow). */
static void test_block_grid_of_huge_dim(void) {
    const int64_t block[] = {4};
    ember_qscheme s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, block);
    const int64_t shapes[][2] = {{0, INT64_MAX}, {INT64_MAX, 0}, {0, INT64_MAX - 2}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        ember_tensor *q = NULL;
        unsigned char none[1] = {0};
        ember_status st = ember_qtensor_from_bytes(ctx, TU_CPU, &s, 2, shapes[i], none, 0, &q);
        /* an empty tensor: accepted with 0 bytes, or refused cleanly */
        CU_ASSERT(st == EMBER_OK || st == EMBER_ERR_SHAPE_MISMATCH || st == EMBER_ERR_BLOCK_SHAPE);
        if (st == EMBER_OK) {
            size_t len = 1;
            TU_OK(ember_qtensor_to_bytes(q, NULL, 0, &len));
            CU_ASSERT_EQUAL(len, 0);
        } else {
            CU_ASSERT_PTR_NULL(q);
        }
        ember_tensor_free(q);
    }
}

int main(void) {
    CU_TestInfo tests[] = {
        {"block grid of a dim near INT64_MAX", test_block_grid_of_huge_dim},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {
        {"fuzz regressions", suite_init, suite_clean, NULL, NULL, tests},
        CU_SUITE_INFO_NULL,
    };
    return tu_run("test_fuzz_regress", suites);
}
