/* tests/test_opencl_guards.c: the dispatcher's cross-backend guards on a real OpenCL device (PoCL
 * in CI, any GPU elsewhere). test_panics.c runs the same guards against a mock backend; this file
 * checks that they hold with the real OpenCL backend, and that plain moves round-trip exactly.
 * Exits 77 (skipped) when the context finds no OpenCL device. */
#include <math.h>
#include <stdlib.h>

#include "mock_backend.h"

static uint64_t rng;
static ember_device CL0;

static const int64_t S23[2] = {2, 3}, S32[2] = {3, 2};

static ember_context *cl_context(void) {
    ember_options o = ember_options_default();
    o.enable_opencl = 1;
    ember_context *ctx = NULL;
    if (ember_context_create(&o, &ctx) != EMBER_OK) {
        fprintf(stderr, "context_create: %s\n", ember_last_error());
        CU_FAIL_FATAL("cannot create a context with OpenCL");
    }
    return ctx;
}

static ember_qscheme q8s(void) { return ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE); }

static int suite_init(void) {
    rng = tu_seed();
    CL0 = (ember_device){EMBER_BACKEND_OPENCL, 0};
    return 0;
}

static void test_q_matmul_different_backends(void) {
    ember_context *ctx = cl_context();
    ember_qscheme s = q8s();
    ember_tensor *fc = mk_f32(ctx, TU_CPU, 2, S23, &rng), *fl = mk_f32(ctx, CL0, 2, S32, &rng);
    ember_tensor *qc = mk_q(ctx, TU_CPU, &s, 2, S23, &rng), *ql = mk_q(ctx, CL0, &s, 2, S32, &rng);
    const ember_tensor *L[3] = {fc, qc, qc}, *R[3] = {ql, fl, ql};
    for (int i = 0; i < 3; i++) {
        snap sa, sb;
        snap_take(L[i], &sa);
        snap_take(R[i], &sb);
        ember_tensor *out;
        EXPECT_REFUSED_OUT(out, ember_q_matmul(L[i], R[i], &out), EMBER_ERR_BACKEND_MISMATCH,
                           "q_matmul inputs are on different backends");
        EXPECT_REFUSED(ember_check_q_matmul(L[i], R[i]), EMBER_ERR_BACKEND_MISMATCH,
                       "q_matmul inputs are on different backends");
        snap_check(L[i], &sa);
        snap_check(R[i], &sb);
    }
    ember_tensor *out;
    EXPECT_REFUSED_OUT(
        out, ember_matmul(fc, fl, &out), EMBER_ERR_BACKEND_MISMATCH,
        "The provided tensors are not on the same backend. Got backends cpu and opencl.");
    ember_tensor *all[4] = {fc, fl, qc, ql};
    for (int i = 0; i < 4; i++)
        ember_tensor_free(all[i]);
    ember_context_destroy(ctx);
}

static void test_quant_transfer(void) {
    ember_context *ctx = cl_context();
    ember_qscheme s = q8s();
    ember_tensor *qc = mk_q(ctx, TU_CPU, &s, 2, S23, &rng), *ql = mk_q(ctx, CL0, &s, 2, S23, &rng);
    const ember_tensor *src[2] = {qc, ql};
    const ember_device dst[2] = {CL0, TU_CPU};
    for (int i = 0; i < 2; i++) {
        snap sq;
        snap_take(src[i], &sq);
        ember_tensor *out;
        EXPECT_REFUSED_OUT(out, ember_to_device(src[i], dst[i], &out), EMBER_ERR_QUANT_TRANSFER,
                           "Local transfer of quantized tensors is not supported yet");
        EXPECT_REFUSED(ember_check_to_device(src[i], dst[i]), EMBER_ERR_QUANT_TRANSFER,
                       "Local transfer of quantized tensors is not supported yet");
        snap_check(src[i], &sq);
        /* the explicit way out keeps the values */
        TU_OK(ember_requantize_to_device(src[i], dst[i], &out));
        int8_t v0[6], v1[6];
        TU_OK(ember_qtensor_values(src[i], v0, 6));
        TU_OK(ember_qtensor_values(out, v1, 6));
        CU_ASSERT(memcmp(v0, v1, 6) == 0);
        ember_tensor_free(out);
    }
    ember_tensor_free(qc);
    ember_tensor_free(ql);
    ember_context_destroy(ctx);
}

static void test_autodiff_transfer(void) {
    ember_context *ctx = cl_context();
    ember_tensor *t = mk_f32(ctx, TU_CPU, 2, S23, &rng);
    TU_OK(ember_tensor_set_autodiff(t, EMBER_AUTODIFF_BALANCED));
    snap st;
    snap_take(t, &st);
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_to_device(t, CL0, &out), EMBER_ERR_AUTODIFF_TRANSFER,
                       "Autodiff tensor cannot be moved between backends.");
    snap_check(t, &st);
    ember_tensor_free(t);
    ember_context_destroy(ctx);
}

/* Every dtype the device holds round-trips exactly; every one it does not is refused with
 * burn's router text. */
static void test_dtype_transfer_and_round_trip(void) {
    ember_context *ctx = cl_context();
    const ember_dtype dts[8] = {EMBER_F32, EMBER_F16, EMBER_BF16, EMBER_I64,
                                EMBER_I32, EMBER_I8,  EMBER_U8,   EMBER_BOOL};
    unsigned char src[6 * 8], back[sizeof src];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (unsigned char)(tu_next(&rng) & 1);
    int refused = 0;
    for (int d = 0; d < 8; d++) {
        int holds = 0;
        TU_OK(ember_device_supports(ctx, CL0, EMBER_OP_STORE, dts[d], NULL, &holds));
        ember_tensor *t = NULL, *o = OUT_SENTINEL, *b = NULL;
        TU_OK(ember_tensor_from_data(ctx, TU_CPU, dts[d], 2, S23, src, &t));
        if (holds) {
            TU_OK(ember_to_device(t, CL0, &o));
            TU_OK(ember_to_device(o, TU_CPU, &b));
            memset(back, 0xee, sizeof back);
            TU_OK(ember_tensor_read(b, back, sizeof back));
            CU_ASSERT(memcmp(back, src, 6 * ember_dtype_get_traits(dts[d])->size) == 0);
            ember_tensor_free(o);
            ember_tensor_free(b);
        } else {
            char text[96];
            snprintf(text, sizeof text, "Local transfer of %s tensors is not supported yet",
                     ember_dtype_name(dts[d]));
            EXPECT_REFUSED(ember_to_device(t, CL0, &o), EMBER_ERR_DTYPE_TRANSFER, text);
            CU_ASSERT_PTR_NULL(o);
            EXPECT_REFUSED(ember_check_to_device(t, CL0), EMBER_ERR_DTYPE_TRANSFER, text);
            refused++;
        }
        ember_tensor_free(t);
    }
    fprintf(stderr, "  (%d dtype(s) refused by opencl:0)\n", refused);
    ember_context_destroy(ctx);
}

static void test_foreign_dequantize(void) {
    ember_context *ctx = cl_context();
    ember_qscheme s = q8s();
    ember_tensor *qc = mk_q(ctx, TU_CPU, &s, 2, S23, &rng), *ql = mk_q(ctx, CL0, &s, 2, S23, &rng);
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_backend_dequantize(ctx, CL0, qc, &out),
                       EMBER_ERR_FOREIGN_DEQUANTIZE, NULL);
    EXPECT_REFUSED_OUT(out, ember_backend_dequantize(ctx, TU_CPU, ql, &out),
                       EMBER_ERR_FOREIGN_DEQUANTIZE, NULL);
    TU_OK(ember_backend_dequantize(ctx, CL0, ql, &out));
    ember_tensor_free(out);
    ember_tensor_free(qc);
    ember_tensor_free(ql);
    ember_context_destroy(ctx);
}

static void test_read_many_across_backends(void) {
    ember_context *ctx = cl_context();
    ember_qscheme s = q8s();
    ember_tensor *a = mk_f32(ctx, TU_CPU, 2, S23, &rng), *b = mk_f32(ctx, CL0, 2, S23, &rng);
    ember_tensor *q = mk_q(ctx, CL0, &s, 2, S23, &rng);
    float wa[6], wb[6], ga[6], gb[6];
    TU_OK(ember_tensor_read(a, wa, sizeof wa));
    TU_OK(ember_tensor_read(b, wb, sizeof wb));
    const ember_tensor *ts[3] = {a, b, q};
    void *dsts[3] = {ga, gb, ga};
    size_t nb[3] = {sizeof ga, sizeof gb, sizeof ga};
    TU_OK(ember_tensor_read_many(ts, dsts, nb, 2));
    CU_ASSERT(memcmp(ga, wa, sizeof ga) == 0);
    CU_ASSERT(memcmp(gb, wb, sizeof gb) == 0);
    memset(ga, 0, sizeof ga);
    memset(gb, 0, sizeof gb);
    EXPECT_REFUSED(ember_tensor_read_many(ts, dsts, nb, 3), EMBER_ERR_QUANT_UNSUPPORTED,
                   "Quantization not supported yet");
    for (int i = 0; i < 6; i++)
        CU_ASSERT(ga[i] == 0.0f && gb[i] == 0.0f);
    ember_tensor_free(a);
    ember_tensor_free(b);
    ember_tensor_free(q);
    ember_context_destroy(ctx);
}

/* q_matmul on the OpenCL device equals dequantize-then-matmul there. */
static void test_q_matmul_on_device(void) {
    ember_context *ctx = cl_context();
    ember_qscheme s = q8s();
    const int64_t sa[2] = {5, 16}, sb[2] = {16, 7};
    ember_tensor *a = mk_f32(ctx, CL0, 2, sa, &rng), *q = mk_q(ctx, CL0, &s, 2, sb, &rng);
    ember_tensor *y = NULL, *w = NULL;
    TU_OK(ember_q_matmul(a, q, &y));
    CU_ASSERT_EQUAL(ember_tensor_device(y).backend, EMBER_BACKEND_OPENCL);
    TU_OK(ember_dequantize(q, &w));
    float va[80], vw[112], vy[35];
    TU_OK(ember_tensor_read(a, va, sizeof va));
    TU_OK(ember_tensor_read(w, vw, sizeof vw));
    TU_OK(ember_tensor_read(y, vy, sizeof vy));
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 7; j++) {
            double acc = 0, mag = 0;
            for (int l = 0; l < 16; l++) {
                acc += (double)va[i * 16 + l] * vw[l * 7 + j];
                mag += fabs((double)va[i * 16 + l] * vw[l * 7 + j]);
            }
            CU_ASSERT(fabs(vy[i * 7 + j] - acc) <= 4 * 17 * 5.9604645e-8 * mag + 1e-30);
        }
    ember_tensor_free(a);
    ember_tensor_free(q);
    ember_tensor_free(y);
    ember_tensor_free(w);
    ember_context_destroy(ctx);
}

static CU_TestInfo tests[] = {
    {"q_matmul inputs are on different backends", test_q_matmul_different_backends},
    {"Local transfer of quantized tensors", test_quant_transfer},
    {"Autodiff tensor cannot be moved between backends.", test_autodiff_transfer},
    {"Local transfer of {dtype:?} / round trips", test_dtype_transfer_and_round_trip},
    {"foreign dequantize", test_foreign_dequantize},
    {"read_many across backends", test_read_many_across_backends},
    {"q_matmul on the device", test_q_matmul_on_device},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"opencl guards", suite_init, NULL, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) {
    ember_options o = ember_options_default();
    o.enable_opencl = 1;
    ember_context *ctx = NULL;
    int n = 0;
    if (ember_context_create(&o, &ctx) == EMBER_OK) {
        n = ember_device_count(ctx, EMBER_BACKEND_OPENCL);
        ember_context_destroy(ctx);
    }
    if (n == 0) {
        fprintf(stderr, "test_opencl_guards: no OpenCL device: skipped\n");
        return 77;
    }
    return tu_run("test_opencl_guards", suites);
}
