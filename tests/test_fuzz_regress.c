/* tests/test_fuzz_regress.c: one test per bug the fuzz harnesses (fuzz/) found, so that each stays
 * fixed in the plain and ASan+UBSan builds whether or not libFuzzer is available. The inputs that
 * found them are also in the seed corpora (fuzz/corpus/<harness>/regress-*). */
#include <math.h>
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

/* backends/opencl/cl_quant.c repeated the same block-grid ceil (dequantize / quantize on the
 * device): the empty tensor of test_block_grid_of_huge_dim, on OpenCL device 0 (fuzz_qbytes with
 * EMBER_FUZZ_OPENCL=1). Skipped without a device. */
static void test_block_grid_of_huge_dim_opencl(void) {
    ember_context *cl = NULL;
    ember_options o = ember_options_default();
    o.num_threads = 1;
    TU_OK(ember_context_create(&o, &cl));
    if (ember_device_count(cl, EMBER_BACKEND_OPENCL) == 0) {
        ember_context_destroy(cl);
        return;
    }
    const ember_device dev = {EMBER_BACKEND_OPENCL, 0};
    const int64_t block[] = {4};
    ember_qscheme s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, block);
    const int64_t shapes[][2] = {{0, INT64_MAX}, {INT64_MAX, 0}};
    for (size_t i = 0; i < 2; i++) {
        ember_tensor *q = NULL, *y = NULL, *x = NULL, *qc = NULL;
        unsigned char none[1] = {0};
        /* requantize a CPU tensor onto the device (how the fuzzer got there), quantize there */
        TU_OK(ember_qtensor_from_bytes(cl, TU_CPU, &s, 2, shapes[i], none, 0, &qc));
        TU_OK(ember_requantize_to_device(qc, dev, &q));
        TU_OK(ember_dequantize(q, &y));
        ember_tensor_free(y);
        ember_tensor_free(q);
        q = NULL;
        TU_OK(ember_tensor_from_data(cl, dev, EMBER_F32, 2, shapes[i], NULL, &x));
        ember_status st = ember_quantize(x, &s, &q); /* dynamic needs whole blocks */
        CU_ASSERT(st == (shapes[i][1] % 4 == 0 ? EMBER_OK : EMBER_ERR_BLOCK_SHAPE));
        ember_tensor_free(q);
        ember_tensor_free(x);
        ember_tensor_free(qc);
    }
    ember_context_destroy(cl);
}

/* quant/scale.c: a two-level scheme's global scale had burn's floor FLT_MIN, so for a tiny tensor
 * g * s_b underflowed to 0 where a block scale sat at its dtype's smallest value, and a zero
 * element quantized as 0 / 0 = NaN: garbage codes, different on CPU and OpenCL (fuzz_quantize). */
static void test_two_level_tiny_tensor(void) {
    const int64_t block[] = {4};
    const ember_scale_dtype bds[] = {EMBER_SCALE_F16, EMBER_SCALE_UE4M3};
    const ember_qvalue vals[] = {EMBER_E2M1, EMBER_Q8S, EMBER_E4M3};
    for (size_t b = 0; b < 2; b++)
        for (size_t v = 0; v < 3; v++) {
            ember_qscheme s = ember_qscheme_per_block(
                vals[v], vals[v] == EMBER_E2M1 ? EMBER_QSTORE_PACKED_NATIVE : EMBER_QSTORE_NATIVE,
                1, block);
            s.tensor_level = 1;
            s.block_scale = bds[b];
            const int64_t shape[] = {2, 4};
            const float x[8] = {1e-34f, 2.3e-38f, 0, 0, 0, 0, 0, 0};
            ember_tensor *t = NULL, *q = NULL, *dq = NULL;
            TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, shape, x, &t));
            TU_OK(ember_quantize(t, &s, &q));
            int8_t codes[8];
            float sc[2], g = 0, y[8];
            TU_OK(ember_qtensor_values(q, codes, 8));
            TU_OK(ember_qtensor_scales(q, sc, 2));
            TU_OK(ember_qtensor_global_scale(q, &g));
            for (int i = 2; i < 8; i++)
                CU_ASSERT_EQUAL(codes[i], 0); /* zeros stay zero */
            CU_ASSERT(g * sc[0] > 0 && g * sc[1] > 0);
            TU_OK(ember_dequantize(q, &dq));
            TU_OK(ember_tensor_read(dq, y, sizeof y));
            for (int i = 0; i < 8; i++)
                CU_ASSERT(isfinite(y[i]) && y[i] >= 0 && y[i] <= 2e-34f);
            ember_tensor_free(dq);
            ember_tensor_free(q);
            ember_tensor_free(t);
        }
}

int main(void) {
    CU_TestInfo tests[] = {
        {"block grid of a dim near INT64_MAX", test_block_grid_of_huge_dim},
        {"two-level scheme on a tiny tensor", test_two_level_tiny_tensor},
        {"block grid of a dim near INT64_MAX, on OpenCL", test_block_grid_of_huge_dim_opencl},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {
        {"fuzz regressions", suite_init, suite_clean, NULL, NULL, tests},
        CU_SUITE_INFO_NULL,
    };
    return tu_run("test_fuzz_regress", suites);
}
