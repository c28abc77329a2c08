/* tests/test_panics.c: burn's panic catalogue as tests (docs/PANICS.md maps each row here).
 *
 * One test per burn panic that ember reproduces. Each asserts the status, burn's text in
 * ember_last_error(), a NULL output, inputs untouched (dtype, device, autodiff, shape and every
 * byte) and no net allocation by the refused call. Cross-backend and cross-device guards run
 * against the mock backend of mock_backend.h (two "opencl" devices), so they need no OpenCL
 * device; tests/test_opencl_guards.c repeats them on a real one. */
#include <stdlib.h>

#include "mock_backend.h"

static uint64_t rng;

static const int64_t S23[2] = {2, 3}, S32[2] = {3, 2}, S44[2] = {4, 4}, S34[2] = {3, 4};

static ember_qscheme q8s(void) { return ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE); }

static int suite_init(void) {
    rng = tu_seed();
    return 0;
}

/* ---------------- the three headline panics ---------------- */

/* burn-dispatch ops/qtensor.rs:81 (and 137, 140, 196, 199): every arm with a cross-backend pair. */
static void test_q_matmul_different_backends(void) {
    ember_context *ctx = mock_context();
    ember_qscheme s = q8s();
    ember_tensor *fa = mk_f32(ctx, TU_CPU, 2, S23, &rng), *fb = mk_f32(ctx, MOCK0, 2, S32, &rng);
    ember_tensor *qa = mk_q(ctx, TU_CPU, &s, 2, S23, &rng),
                 *qb = mk_q(ctx, MOCK0, &s, 2, S32, &rng);
    ember_tensor *fa2 = mk_f32(ctx, MOCK0, 2, S23, &rng),
                 *qb2 = mk_q(ctx, TU_CPU, &s, 2, S32, &rng);
    const ember_tensor *lhs[] = {fa, qa, qa, fa2}, *rhs[] = {qb, fb, qb, qb2};
    for (int i = 0; i < 4; i++) {
        snap sa, sb;
        snap_take(lhs[i], &sa);
        snap_take(rhs[i], &sb);
        ember_tensor *out;
        EXPECT_REFUSED_OUT(out, ember_q_matmul(lhs[i], rhs[i], &out), EMBER_ERR_BACKEND_MISMATCH,
                           "q_matmul inputs are on different backends");
        /* ember_matmul routes a quantized operand to q_matmul: the same guard */
        EXPECT_REFUSED_OUT(out, ember_matmul(lhs[i], rhs[i], &out), EMBER_ERR_BACKEND_MISMATCH,
                           "q_matmul inputs are on different backends");
        EXPECT_REFUSED(ember_check_q_matmul(lhs[i], rhs[i]), EMBER_ERR_BACKEND_MISMATCH,
                       "q_matmul inputs are on different backends");
        snap_check(lhs[i], &sa);
        snap_check(rhs[i], &sb);
    }
    ember_tensor *all[] = {fa, fb, qa, qb, fa2, qb2};
    for (int i = 0; i < 6; i++)
        ember_tensor_free(all[i]);
    ember_context_destroy(ctx);
}

/* burn-router interpreter.rs:124 (and :98 for QFloat, and the q_to_device stub of §2.3). */
static void test_quant_transfer(void) {
    ember_context *ctx = mock_context();
    ember_qscheme schemes[3] = {
        q8s(), ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32),
        ember_qscheme_per_block(EMBER_Q8F, EMBER_QSTORE_NATIVE, 1, (const int64_t[]){2})};
    for (int k = 0; k < 3; k++) {
        ember_tensor *q = mk_q(ctx, TU_CPU, &schemes[k], 2, S44, &rng);
        if (!q)
            continue;
        const ember_device dsts[] = {MOCK0, MOCK1, TU_CPU};
        for (int i = 0; i < 3; i++) {
            snap sq;
            snap_take(q, &sq);
            ember_tensor *out;
            EXPECT_REFUSED_OUT(out, ember_to_device(q, dsts[i], &out), EMBER_ERR_QUANT_TRANSFER,
                               "Local transfer of quantized tensors is not supported yet");
            EXPECT_REFUSED(ember_check_to_device(q, dsts[i]), EMBER_ERR_QUANT_TRANSFER,
                           "Local transfer of quantized tensors is not supported yet");
            snap_check(q, &sq);
        }
        ember_tensor_free(q);
    }
    ember_context_destroy(ctx);
}

/* burn-autodiff ops/module.rs:194 (linear_bias_backward), 183 (x), 190 (weight). */
static void test_linear_bias_backward_not_differentiable(void) {
    ember_context *ctx = tu_cpu_context();
    ember_tensor *dy = mk_f32(ctx, TU_CPU, 2, S23, &rng);
    TU_OK(ember_tensor_set_autodiff(dy, EMBER_AUTODIFF_BALANCED));
    snap s;
    snap_take(dy, &s);
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_linear_bias_backward(dy, &out), EMBER_ERR_NOT_DIFFERENTIABLE,
                       "Can't differentiate linear_bias_backward.");
    snap_check(dy, &s);
    ember_tensor_free(dy);
    ember_context_destroy(ctx);
}

/* A linear backward of two float operands (the first of shape first[2], then dy [2, 3]) with
 * either one tracked (autodiff mode `ad`): second order, refused with `text`. */
typedef ember_status (*backward_fn)(const ember_tensor *, const ember_tensor *, ember_tensor **);
static void backward_tracked_refused(backward_fn fn, const int64_t first[2], ember_autodiff ad,
                                     const char *text) {
    ember_context *ctx = tu_cpu_context();
    ember_tensor *x = mk_f32(ctx, TU_CPU, 2, first, &rng), *dy = mk_f32(ctx, TU_CPU, 2, S23, &rng);
    for (int which = 0; which < 2; which++) {
        ember_tensor *tr = which ? x : dy;
        TU_OK(ember_tensor_set_autodiff(tr, ad));
        snap sx, sd;
        snap_take(x, &sx);
        snap_take(dy, &sd);
        ember_tensor *out;
        EXPECT_REFUSED_OUT(out, fn(x, dy, &out), EMBER_ERR_NOT_DIFFERENTIABLE, text);
        snap_check(x, &sx);
        snap_check(dy, &sd);
        TU_OK(ember_tensor_set_autodiff(tr, EMBER_AUTODIFF_DISABLED));
    }
    ember_tensor_free(x);
    ember_tensor_free(dy);
    ember_context_destroy(ctx);
}

static void test_linear_x_backward_not_differentiable(void) {
    backward_tracked_refused(ember_linear_x_backward, (const int64_t[2]){4, 3},
                             EMBER_AUTODIFF_NO_CHECKPOINTING,
                             "Can't differentiate linear_x_backward.");
}

static void test_linear_weight_backward_not_differentiable(void) {
    backward_tracked_refused(ember_linear_weight_backward, (const int64_t[2]){2, 4},
                             EMBER_AUTODIFF_BALANCED,
                             "Can't differentiate linear_weight_backward.");
}

/* ---------------- the seed list ---------------- */

/* burn-router interpreter.rs:98: "Local transfer of {dtype:?} tensors is not supported yet". */
static void test_dtype_transfer(void) {
    ember_context *ctx = mock_context();
    const ember_dtype dts[2] = {EMBER_F16, EMBER_BF16};
    const char *texts[2] = {"Local transfer of F16 tensors is not supported yet",
                            "Local transfer of BF16 tensors is not supported yet"};
    uint16_t h[6] = {0x3c00, 0x4000, 0xc000, 0x3800, 0x0000, 0xbc00};
    for (int i = 0; i < 2; i++) {
        ember_tensor *t = NULL;
        TU_OK(ember_tensor_from_data(ctx, TU_CPU, dts[i], 2, S23, h, &t));
        snap s;
        snap_take(t, &s);
        ember_tensor *out;
        EXPECT_REFUSED_OUT(out, ember_to_device(t, MOCK1, &out), EMBER_ERR_DTYPE_TRANSFER,
                           texts[i]);
        EXPECT_REFUSED(ember_check_to_device(t, MOCK1), EMBER_ERR_DTYPE_TRANSFER, texts[i]);
        snap_check(t, &s);
        ember_tensor_free(t);
        /* creating one there directly is refused the same way */
        EXPECT_REFUSED_OUT(out, ember_tensor_from_data(ctx, MOCK0, dts[i], 2, S23, h, &out),
                           EMBER_ERR_DTYPE_TRANSFER, texts[i]);
    }
    ember_context_destroy(ctx);
}

/* burn-dispatch macros.rs:1563/1582: a read transaction with a quantized tensor. */
static void test_read_many_quantized(void) {
    ember_context *ctx = mock_context();
    ember_qscheme s = q8s();
    ember_tensor *f = mk_f32(ctx, TU_CPU, 2, S23, &rng);
    ember_tensor *q = mk_q(ctx, MOCK0, &s, 2, S23, &rng);
    float d0[6], d1[6];
    memset(d0, 0xab, sizeof d0);
    memset(d1, 0xab, sizeof d1);
    unsigned char pristine[sizeof d0];
    memset(pristine, 0xab, sizeof pristine);
    const ember_tensor *ts[2] = {f, q};
    void *dsts[2] = {d0, d1};
    size_t nb[2] = {sizeof d0, sizeof d1};
    snap sf, sq;
    snap_take(f, &sf);
    snap_take(q, &sq);
    mock_reset_counters();
    EXPECT_REFUSED(ember_tensor_read_many(ts, dsts, nb, 2), EMBER_ERR_QUANT_UNSUPPORTED,
                   "Quantization not supported yet");
    CU_ASSERT(memcmp(d0, pristine, sizeof d0) == 0); /* nothing written, not even tensor 0 */
    CU_ASSERT(memcmp(d1, pristine, sizeof d1) == 0);
    CU_ASSERT_EQUAL(mock.sync[0] + mock.download[0], 0); /* and no device touched */
    snap_check(f, &sf);
    snap_check(q, &sq);
    ember_tensor_free(f);
    ember_tensor_free(q);
    ember_context_destroy(ctx);
}

/* burn-backend primitive.rs:104: "Quantization scheme is not valid for dtype {other:?}". */
static void test_qscheme_of_float(void) {
    ember_context *ctx = mock_context();
    ember_tensor *f = mk_f32(ctx, TU_CPU, 2, S23, &rng);
    snap s;
    snap_take(f, &s);
    ember_qscheme out;
    memset(&out, 0x5a, sizeof out);
    EXPECT_REFUSED(ember_tensor_qscheme(f, &out), EMBER_ERR_NOT_QUANTIZED,
                   "Quantization scheme is not valid for dtype F32");
    ember_tensor *o;
    EXPECT_REFUSED_OUT(o, ember_requantize_to_device(f, MOCK0, &o), EMBER_ERR_NOT_QUANTIZED,
                       "Quantization scheme is not valid for dtype F32");
    snap_check(f, &s);
    ember_tensor_free(f);
    ember_context_destroy(ctx);
}

/* A scheme refused both by quantize (of a random [4, 4] F32 tensor, left untouched) and by
 * qscheme_validate, with code and text. */
static void quantize_refused(const ember_qscheme *s, ember_status code, const char *text) {
    ember_context *ctx = tu_cpu_context();
    ember_tensor *x = mk_f32(ctx, TU_CPU, 2, S44, &rng);
    snap sx;
    snap_take(x, &sx);
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_quantize(x, s, &out), code, text);
    EXPECT_REFUSED(ember_qscheme_validate(s), code, text);
    snap_check(x, &sx);
    ember_tensor_free(x);
    ember_context_destroy(ctx);
}

/* burn-backend cubecl.rs:89/94, burn-cubecl ops/qtensor.rs:102: "Can't store native sub-byte
 * values" for Q4*, Q2* and E2M1 with the Native store. */
static void test_sub_byte_native(void) {
    const ember_qvalue vals[5] = {EMBER_Q4F, EMBER_Q4S, EMBER_Q2F, EMBER_Q2S, EMBER_E2M1};
    for (int i = 0; i < 5; i++) {
        ember_qscheme s = ember_qscheme_per_tensor(vals[i], EMBER_QSTORE_NATIVE);
        quantize_refused(&s, EMBER_ERR_SUB_BYTE_NATIVE, "Can't store native sub-byte values");
    }
}

/* burn-router ops/qtensor.rs:31: BackendRouter's dequantize stub; ember: dequantize only on the
 * producing backend and device. */
static void test_foreign_dequantize(void) {
    ember_context *ctx = mock_context();
    ember_qscheme s = q8s();
    ember_tensor *qc = mk_q(ctx, TU_CPU, &s, 2, S23, &rng),
                 *qm = mk_q(ctx, MOCK0, &s, 2, S23, &rng);
    const ember_tensor *qs[3] = {qc, qc, qm};
    const ember_device devs[3] = {MOCK0, MOCK1, TU_CPU};
    for (int i = 0; i < 3; i++) {
        snap sq;
        snap_take(qs[i], &sq);
        ember_tensor *out;
        EXPECT_REFUSED_OUT(out, ember_backend_dequantize(ctx, devs[i], qs[i], &out),
                           EMBER_ERR_FOREIGN_DEQUANTIZE, NULL);
        snap_check(qs[i], &sq);
    }
    /* mock1 is a different device of the same backend as qm's producer: also foreign */
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_backend_dequantize(ctx, MOCK1, qm, &out),
                       EMBER_ERR_FOREIGN_DEQUANTIZE, NULL);
    ember_tensor_free(qc);
    ember_tensor_free(qm);
    ember_context_destroy(ctx);
}

/* ---------------- §5.3: backend mismatch and the autodiff context ---------------- */

/* burn-dispatch macros.rs:844 etc.: "The provided tensors are not on the same backend. Got
 * backends {:?} and {:?}." for the float binary ops (and q_matmul's (F,F) pair, which is the float
 * matmul). */
static void test_binary_backend_mismatch(void) {
    ember_context *ctx = mock_context();
    ember_tensor *a = mk_f32(ctx, TU_CPU, 2, S23, &rng), *b = mk_f32(ctx, MOCK0, 2, S23, &rng);
    ember_tensor *c = mk_f32(ctx, MOCK0, 2, S32, &rng);
    snap sa, sb, sc;
    snap_take(a, &sa);
    snap_take(b, &sb);
    snap_take(c, &sc);
    const char *text =
        "The provided tensors are not on the same backend. Got backends cpu and opencl.";
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_add(a, b, &out), EMBER_ERR_BACKEND_MISMATCH, text);
    EXPECT_REFUSED_OUT(out, ember_mul(a, b, &out), EMBER_ERR_BACKEND_MISMATCH, text);
    EXPECT_REFUSED_OUT(out, ember_matmul(a, c, &out), EMBER_ERR_BACKEND_MISMATCH, text);
    EXPECT_REFUSED_OUT(out, ember_q_matmul(a, c, &out), EMBER_ERR_BACKEND_MISMATCH, text);
    EXPECT_REFUSED(ember_check_q_matmul(a, c), EMBER_ERR_BACKEND_MISMATCH, text);
    snap_check(a, &sa);
    snap_check(b, &sb);
    snap_check(c, &sc);
    ember_tensor_free(a);
    ember_tensor_free(b);
    ember_tensor_free(c);
    ember_context_destroy(ctx);
}

/* burn-dispatch macros.rs:1129 etc.: "Input tensor {} is on the wrong device". */
static void test_device_mismatch(void) {
    ember_context *ctx = mock_context();
    ember_qscheme s = q8s();
    ember_tensor *f0 = mk_f32(ctx, MOCK0, 2, S23, &rng), *q1 = mk_q(ctx, MOCK1, &s, 2, S32, &rng);
    ember_tensor *f1 = mk_f32(ctx, MOCK1, 2, S23, &rng), *g1 = mk_f32(ctx, MOCK1, 2, S32, &rng);
    snap s0, s1, s2, s3;
    snap_take(f0, &s0);
    snap_take(q1, &s1);
    snap_take(f1, &s2);
    snap_take(g1, &s3);
    const char *text = "Input tensor 1 is on the wrong device";
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_q_matmul(f0, q1, &out), EMBER_ERR_DEVICE_MISMATCH, text);
    EXPECT_REFUSED(ember_check_q_matmul(f0, q1), EMBER_ERR_DEVICE_MISMATCH, text);
    EXPECT_REFUSED_OUT(out, ember_add(f0, f1, &out), EMBER_ERR_DEVICE_MISMATCH, text);
    EXPECT_REFUSED_OUT(out, ember_matmul(f0, g1, &out), EMBER_ERR_DEVICE_MISMATCH, text);
    snap_check(f0, &s0);
    snap_check(q1, &s1);
    snap_check(f1, &s2);
    snap_check(g1, &s3);
    ember_tensor *all[] = {f0, q1, f1, g1};
    for (int i = 0; i < 4; i++)
        ember_tensor_free(all[i]);
    ember_context_destroy(ctx);
}

/* burn-dispatch device.rs:216-219 (validate_checkpointing), also q_matmul [I2]. ember's
 * NO_CHECKPOINTING is burn's GradientCheckpointingStrategy::Disabled. */
static void test_checkpoint_mismatch(void) {
    ember_context *ctx = tu_cpu_context();
    ember_tensor *a = mk_f32(ctx, TU_CPU, 2, S23, &rng), *b = mk_f32(ctx, TU_CPU, 2, S32, &rng);
    ember_tensor *c = mk_f32(ctx, TU_CPU, 2, S23, &rng);
    TU_OK(ember_tensor_set_autodiff(a, EMBER_AUTODIFF_BALANCED));
    TU_OK(ember_tensor_set_autodiff(b, EMBER_AUTODIFF_NO_CHECKPOINTING));
    TU_OK(ember_tensor_set_autodiff(c, EMBER_AUTODIFF_NO_CHECKPOINTING));
    snap sa, sb, sc;
    snap_take(a, &sa);
    snap_take(b, &sb);
    snap_take(c, &sc);
    const char *ab = "Gradient checkpointing strategy mismatch: Balanced vs Disabled. Tensors in "
                     "the same operation must share a strategy.";
    const char *ba = "Gradient checkpointing strategy mismatch: Disabled vs Balanced.";
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_q_matmul(a, b, &out), EMBER_ERR_CHECKPOINT_MISMATCH, ab);
    EXPECT_REFUSED(ember_check_q_matmul(a, b), EMBER_ERR_CHECKPOINT_MISMATCH, ab);
    EXPECT_REFUSED_OUT(out, ember_matmul(a, b, &out), EMBER_ERR_CHECKPOINT_MISMATCH, ab);
    EXPECT_REFUSED_OUT(out, ember_add(a, c, &out), EMBER_ERR_CHECKPOINT_MISMATCH, ab);
    EXPECT_REFUSED_OUT(out, ember_mul(c, a, &out), EMBER_ERR_CHECKPOINT_MISMATCH, ba);
    /* the internal helper every op uses */
    ember_autodiff r = EMBER_AUTODIFF_COUNT;
    EXPECT_REFUSED(
        ember__autodiff_merge("op", EMBER_AUTODIFF_NO_CHECKPOINTING, EMBER_AUTODIFF_BALANCED, &r),
        EMBER_ERR_CHECKPOINT_MISMATCH, ba);
    CU_ASSERT_EQUAL(r, EMBER_AUTODIFF_COUNT);
    snap_check(a, &sa);
    snap_check(b, &sb);
    snap_check(c, &sc);
    ember_tensor_free(a);
    ember_tensor_free(b);
    ember_tensor_free(c);
    ember_context_destroy(ctx);
}

/* burn-dispatch macros.rs:398: unimplemented!("Autodiff tensor cannot be moved between backends.")
 */
static void test_autodiff_transfer(void) {
    ember_context *ctx = mock_context();
    const ember_autodiff ads[2] = {EMBER_AUTODIFF_BALANCED, EMBER_AUTODIFF_NO_CHECKPOINTING};
    for (int i = 0; i < 2; i++) {
        ember_tensor *t = mk_f32(ctx, TU_CPU, 2, S23, &rng), *u = mk_f32(ctx, MOCK1, 2, S23, &rng);
        TU_OK(ember_tensor_set_autodiff(t, ads[i]));
        TU_OK(ember_tensor_set_autodiff(u, ads[i]));
        snap st, su;
        snap_take(t, &st);
        snap_take(u, &su);
        ember_tensor *out;
        EXPECT_REFUSED_OUT(out, ember_to_device(t, MOCK0, &out), EMBER_ERR_AUTODIFF_TRANSFER,
                           "Autodiff tensor cannot be moved between backends.");
        EXPECT_REFUSED(ember_check_to_device(t, MOCK0), EMBER_ERR_AUTODIFF_TRANSFER,
                       "Autodiff tensor cannot be moved between backends.");
        EXPECT_REFUSED_OUT(out, ember_to_device(u, TU_CPU, &out), EMBER_ERR_AUTODIFF_TRANSFER,
                           "Autodiff tensor cannot be moved between backends.");
        snap_check(t, &st);
        snap_check(u, &su);
        ember_tensor_free(t);
        ember_tensor_free(u);
    }
    ember_context_destroy(ctx);
}

/* [I2] "only float tensors may use an autodiff primitive" (burn's quantized primitive is never an
 * autodiff primitive, spec §3.4): a quantized or integer tensor cannot be tracked. */
static void test_autodiff_context_non_float(void) {
    ember_context *ctx = tu_cpu_context();
    ember_qscheme s = q8s();
    ember_tensor *q = mk_q(ctx, TU_CPU, &s, 2, S23, &rng);
    int32_t iv[6] = {1, 2, 3, 4, 5, 6};
    ember_tensor *it = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_I32, 2, S23, iv, &it));
    ember_tensor *ts[2] = {q, it};
    for (int i = 0; i < 2; i++) {
        snap sn;
        snap_take(ts[i], &sn);
        EXPECT_REFUSED(ember_tensor_set_autodiff(ts[i], EMBER_AUTODIFF_BALANCED),
                       EMBER_ERR_AUTODIFF_CONTEXT,
                       "only float tensors may use an autodiff primitive");
        CU_ASSERT_EQUAL(ember_tensor_autodiff(ts[i]), EMBER_AUTODIFF_DISABLED);
        snap_check(ts[i], &sn);
    }
    ember_tensor_free(q);
    ember_tensor_free(it);
    ember_context_destroy(ctx);
}

/* burn-dispatch ops/qtensor.rs:298/301/317/320 [I]: q_matmul's autodiff pre-check. ember's tensor
 * has one autodiff field, so kind and context cannot disagree, and the public API never tracks a
 * quantized tensor; a corrupted handle (forged here) still meets the pre-check. */
static void test_q_matmul_tracked_quantized_operand(void) {
    ember_context *ctx = tu_cpu_context();
    ember_qscheme s = q8s();
    ember_tensor *f = mk_f32(ctx, TU_CPU, 2, S23, &rng), *q = mk_q(ctx, TU_CPU, &s, 2, S32, &rng);
    q->autodiff = EMBER_AUTODIFF_BALANCED; /* forged: unreachable through the API */
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_q_matmul(f, q, &out), EMBER_ERR_AUTODIFF_CONTEXT,
                       "only float tensors may use an autodiff primitive");
    EXPECT_REFUSED(ember_check_q_matmul(q, f), EMBER_ERR_AUTODIFF_CONTEXT,
                   "only float tensors may use an autodiff primitive");
    q->autodiff = EMBER_AUTODIFF_DISABLED;
    ember_tensor_free(f);
    ember_tensor_free(q);
    ember_context_destroy(ctx);
}

/* burn-dispatch macros.rs:110/129: "Distributed operations are not supported for device {other:?}"
 * (a device variant not compiled in): ember's BACKEND_UNAVAILABLE for a device that does not
 * exist. The text is ember's: burn's "Distributed" names the wrong thing. */
static void test_unknown_device(void) {
    ember_context *ctx = tu_cpu_context(); /* no OpenCL backend at all */
    ember_tensor *t = mk_f32(ctx, TU_CPU, 2, S23, &rng);
    snap s;
    snap_take(t, &s);
    const ember_device bad[3] = {
        {EMBER_BACKEND_CPU, 1}, {EMBER_BACKEND_OPENCL, 0}, {EMBER_BACKEND_CPU, -1}};
    const char *texts[3] = {"no device cpu:1", "the opencl backend is not available",
                            "no device cpu:-1"};
    for (int i = 0; i < 3; i++) {
        ember_tensor *out;
        EXPECT_REFUSED_OUT(out, ember_to_device(t, bad[i], &out), EMBER_ERR_BACKEND_UNAVAILABLE,
                           texts[i]);
        EXPECT_REFUSED(ember_check_to_device(t, bad[i]), EMBER_ERR_BACKEND_UNAVAILABLE, texts[i]);
    }
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_to_device(t, (ember_device){(ember_backend)7, 0}, &out),
                       EMBER_ERR_INVALID_ARGUMENT, "bad backend value 7");
    snap_check(t, &s);
    ember_tensor_free(t);
    ember_context_destroy(ctx);
}

/* burn-dispatch ops/qtensor.rs:48 [M] / 235 [I]: .expect("Should read data") when the host
 * readback of a cross-backend move fails. ember returns the backend's status (DEVICE, with the
 * OpenCL error in the detail). */
static void test_readback_failed(void) {
    ember_context *ctx = mock_context();
    ember_tensor *t = mk_f32(ctx, MOCK0, 2, S23, &rng);
    snap s;
    snap_take(t, &s);
    mock.fail_download = 1;
    const ember_device dsts[2] = {TU_CPU, MOCK1}; /* into host memory; via a staging buffer */
    for (int i = 0; i < 2; i++) {
        ember_tensor *out;
        EXPECT_REFUSED_OUT(out, ember_to_device(t, dsts[i], &out), EMBER_ERR_DEVICE,
                           "clEnqueueReadBuffer failed");
    }
    float d[6];
    const ember_tensor *ts[1] = {t};
    void *dd[1] = {d};
    size_t nb[1] = {sizeof d};
    EXPECT_REFUSED(ember_tensor_read_many(ts, dd, nb, 1), EMBER_ERR_DEVICE,
                   "clEnqueueReadBuffer failed");
    mock.fail_download = 0;
    snap_check(t, &s);
    ember_tensor_free(t);
    ember_context_destroy(ctx);
}

/* burn-dispatch tensor.rs:41-80: "Should be float, got int" when an op meets the wrong kind. */
static void test_q_matmul_non_float_operand(void) {
    ember_context *ctx = tu_cpu_context();
    ember_qscheme s = q8s();
    int32_t iv[6] = {1, 2, 3, 4, 5, 6};
    ember_tensor *it = NULL, *q = mk_q(ctx, TU_CPU, &s, 2, S32, &rng);
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_I32, 2, S23, iv, &it));
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_q_matmul(it, q, &out), EMBER_ERR_DTYPE_MISMATCH, "lhs is I32");
    EXPECT_REFUSED(ember_check_q_matmul(it, q), EMBER_ERR_DTYPE_MISMATCH, "lhs is I32");
    ember_tensor_free(it);
    ember_tensor_free(q);
    ember_context_destroy(ctx);
}

/* burn-backend quantization/scheme.rs:27-30: "Tensor {shape:?} must be evenly divisible by block
 * size {block:?}" -- for q_matmul under Propagate, where the output is re-quantized with the
 * rhs's block scheme (quantize_dynamic). */
static void test_q_matmul_propagate_block_shape(void) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.quant_propagation = EMBER_QUANT_PROPAGATE;
    ember_context *ctx = NULL;
    TU_OK(ember_context_create(&o, &ctx));
    const int64_t blk[2] = {2, 2};
    ember_qscheme s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, blk);
    ember_tensor *a = mk_f32(ctx, TU_CPU, 2, S34, &rng), *q = mk_q(ctx, TU_CPU, &s, 2, S44, &rng);
    snap sa, sq;
    snap_take(a, &sa);
    snap_take(q, &sq);
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_q_matmul(a, q, &out), EMBER_ERR_BLOCK_SHAPE,
                       "Tensor [3, 4] must be evenly divisible by block size [2, 2]");
    EXPECT_REFUSED(ember_check_q_matmul(a, q), EMBER_ERR_BLOCK_SHAPE,
                   "Tensor [3, 4] must be evenly divisible by block size [2, 2]");
    /* and quantize itself refuses such a shape */
    EXPECT_REFUSED_OUT(out, ember_quantize(a, &s, &out), EMBER_ERR_BLOCK_SHAPE,
                       "must be evenly divisible by block size");
    snap_check(a, &sa);
    snap_check(q, &sq);
    ember_tensor_free(a);
    ember_tensor_free(q);
    ember_context_destroy(ctx);
}

/* ---------------- §5.1: quantization schemes (quant/'s guards) ---------------- */

/* burn-std quantization.rs:367/440/460, cubecl-common scheme.rs:313: UE8M0 scales. */
static void test_ue8m0_scales(void) {
    const int64_t blk[1] = {2};
    ember_qscheme s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk);
    s.block_scale = EMBER_SCALE_UE8M0;
    quantize_refused(&s, EMBER_ERR_SCALE_DTYPE, "UE8M0 scales are not yet supported");
}

/* burn-backend cubecl.rs:95: "{other:?} doesn't support native packing". */
static void test_native_packing(void) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_PACKED_NATIVE);
    quantize_refused(&s, EMBER_ERR_UNSUPPORTED_SCHEME, "Q8S doesn't support native packing");
}

/* burn-ndarray tensor.rs:734 etc.: QuantMode::Lookup is refused. */
static void test_lookup_mode(void) {
    ember_context *ctx = tu_cpu_context();
    ember_tensor *x = mk_f32(ctx, TU_CPU, 2, S44, &rng);
    ember_qscheme s = q8s();
    s.mode = EMBER_QMODE_LOOKUP;
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_quantize(x, &s, &out), EMBER_ERR_UNSUPPORTED_SCHEME,
                       "lookup quantization");
    ember_tensor_free(x);
    ember_context_destroy(ctx);
}

/* burn-cubecl ops/qtensor.rs:246, burn-ndarray ops/qtensor.rs:76: "Invalid dtype (expected
 * DType::QFloat, got {:?})" when a quantized-only call meets a float tensor. ember: dequantizing a
 * float is NOT_QUANTIZED (burn's scheme() text); DTYPE_MISMATCH is the plain read of a QFloat
 * tensor, the same mix-up the other way round. */
static void test_dequantize_float(void) {
    ember_context *ctx = tu_cpu_context();
    ember_tensor *x = mk_f32(ctx, TU_CPU, 2, S23, &rng);
    ember_qscheme s = q8s();
    ember_tensor *q = mk_q(ctx, TU_CPU, &s, 2, S23, &rng);
    snap sx, sq;
    snap_take(x, &sx);
    snap_take(q, &sq);
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_dequantize(x, &out), EMBER_ERR_NOT_QUANTIZED,
                       "Quantization scheme is not valid for dtype F32");
    float dst[6];
    memset(dst, 0x7e, sizeof dst);
    EXPECT_REFUSED(ember_tensor_read(q, dst, sizeof dst), EMBER_ERR_DTYPE_MISMATCH, "QFloat");
    for (int i = 0; i < 6; i++)
        CU_ASSERT(((unsigned char *)dst)[i] == 0x7e);
    snap_check(x, &sx);
    snap_check(q, &sq);
    ember_tensor_free(x);
    ember_tensor_free(q);
    ember_context_destroy(ctx);
}

/* burn-ndarray ops/qtensor.rs:169: "Quantization not supported for scheme {scheme:?}" -- a device
 * whose kernels lack the scheme (the mock holds no E5M2). Moving such a tensor there with
 * ember_requantize_to_device is refused before any work, as a transfer of a dtype the
 * destination cannot hold. */
static void test_scheme_not_supported_on_device(void) {
    ember_context *ctx = mock_context();
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_E5M2, EMBER_QSTORE_NATIVE);
    ember_tensor *xm = mk_f32(ctx, MOCK0, 2, S44, &rng);
    ember_tensor *qc = mk_q(ctx, TU_CPU, &s, 2, S44, &rng);
    snap sx, sq;
    snap_take(xm, &sx);
    snap_take(qc, &sq);
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_quantize(xm, &s, &out), EMBER_ERR_UNSUPPORTED_SCHEME,
                       "Quantization not supported for scheme E5M2");
    EXPECT_REFUSED_OUT(out, ember_requantize_to_device(qc, MOCK0, &out), EMBER_ERR_DTYPE_TRANSFER,
                       "Local transfer of QFloat(E5M2, Native) tensors is not supported yet");
    snap_check(xm, &sx);
    snap_check(qc, &sq);
    ember_tensor_free(xm);
    ember_tensor_free(qc);
    ember_context_destroy(ctx);
}

/* burn-std quantization.rs:323-326: "Packing must be on innermost dimension for splitting off
 * values" (assert_eq) and burn-cubecl ops/qtensor.rs:88 "Can't store in u32". */
static void test_packing_dim(void) {
    ember_context *ctx = tu_cpu_context();
    ember_tensor *x = mk_f32(ctx, TU_CPU, 2, S44, &rng);
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
    s.packing_dim = 1;
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_quantize(x, &s, &out), EMBER_ERR_PACKED_SHAPE,
                       "packing must be on the innermost dimension");
    ember_tensor_free(x);
    ember_context_destroy(ctx);
}

/* burn-std quantization.rs:254-258 and burn-backend quantization/scheme.rs:115: the two-level
 * scheme's rules. */
static void test_two_level_rules(void) {
    ember_context *ctx = tu_cpu_context();
    const int64_t s8[1] = {16}, blk[1] = {4};
    ember_tensor *x = mk_f32(ctx, TU_CPU, 1, s8, &rng);
    ember_qscheme a = ember_qscheme_per_block(EMBER_E2M1, EMBER_QSTORE_PACKED_NATIVE, 1, blk);
    a.block_scale = EMBER_SCALE_UE4M3;
    a.tensor_level = 1;
    a.tensor_scale = EMBER_SCALE_F16;
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_quantize(x, &a, &out), EMBER_ERR_UNSUPPORTED_SCHEME,
                       "a two-level scheme stores its per-tensor scale as f32, got F16");
    a.tensor_scale = EMBER_SCALE_F32;
    a.block_scale = EMBER_SCALE_F32;
    EXPECT_REFUSED_OUT(
        out, ember_quantize(x, &a, &out), EMBER_ERR_UNSUPPORTED_SCHEME,
        "block scales in F32 reach f32's range, which a per-tensor scale cannot absorb");
    ember_tensor_free(x);
    ember_context_destroy(ctx);
}

/* burn-std quantization.rs:227-232: "{} quantized values do not fill a tensor of shape {shape:?}"
 * -- ember's from_bytes checks the length exactly. */
static void test_bytes_do_not_fill(void) {
    ember_context *ctx = tu_cpu_context();
    ember_qscheme s = q8s();
    unsigned char bytes[64] = {0};
    ember_tensor *out;
    /* [2,3] Q8S needs 6 values + 4 bytes of scale */
    EXPECT_REFUSED_OUT(out, ember_qtensor_from_bytes(ctx, TU_CPU, &s, 2, S23, bytes, 9, &out),
                       EMBER_ERR_SHAPE_MISMATCH, "expected 10 bytes");
    TU_OK(ember_qtensor_from_bytes(ctx, TU_CPU, &s, 2, S23, bytes, 10, &out));
    ember_tensor_free(out);
    ember_context_destroy(ctx);
}

/* burn-ndarray ops/quantization.rs:54-59: "Invalid per-block quantization: {num_blocks} blocks for
 * a {shape:?} tensor with {block_size:?} blocks" -- static scales that are not the block grid. */
static void test_invalid_per_block_scales(void) {
    ember_context *ctx = tu_cpu_context();
    const int64_t blk[1] = {2}, wrong[2] = {4, 3};
    ember_qscheme s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk);
    ember_tensor *x = mk_f32(ctx, TU_CPU, 2, S44, &rng), *sc = NULL;
    float ones[12];
    for (int i = 0; i < 12; i++)
        ones[i] = 1.0f;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, wrong, ones, &sc));
    snap sx, ss;
    snap_take(x, &sx);
    snap_take(sc, &ss);
    ember_tensor *out;
    EXPECT_REFUSED_OUT(out, ember_quantize_static(x, &s, sc, &out), EMBER_ERR_BLOCK_SHAPE,
                       "Invalid per-block quantization: 12 blocks for a [4, 4] tensor");
    snap_check(x, &sx);
    snap_check(sc, &ss);
    /* burn-cubecl ops/qtensor.rs:262-266: the scales must be an f32 tensor */
    const int64_t grid[2] = {4, 2};
    uint16_t h[8] = {0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00};
    ember_tensor *sh = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F16, 2, grid, h, &sh));
    EXPECT_REFUSED_OUT(out, ember_quantize_static(x, &s, sh, &out), EMBER_ERR_DTYPE_MISMATCH,
                       "the scales are F16; they must be F32");
    ember_tensor_free(sh);
    ember_tensor_free(x);
    ember_tensor_free(sc);
    ember_context_destroy(ctx);
}

static CU_TestInfo headline[] = {
    {"q_matmul inputs are on different backends", test_q_matmul_different_backends},
    {"Local transfer of quantized tensors", test_quant_transfer},
    {"Can't differentiate linear_bias_backward.", test_linear_bias_backward_not_differentiable},
    {"Can't differentiate linear_x_backward.", test_linear_x_backward_not_differentiable},
    {"Can't differentiate linear_weight_backward.", test_linear_weight_backward_not_differentiable},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo seed[] = {
    {"Local transfer of {dtype:?} tensors", test_dtype_transfer},
    {"Quantization not supported yet (read transaction)", test_read_many_quantized},
    {"Quantization scheme is not valid for dtype", test_qscheme_of_float},
    {"Can't store native sub-byte values", test_sub_byte_native},
    {"router dequantize stub: foreign dequantize", test_foreign_dequantize},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo dispatch_guards[] = {
    {"not on the same backend (binary ops)", test_binary_backend_mismatch},
    {"Input tensor is on the wrong device", test_device_mismatch},
    {"Gradient checkpointing strategy mismatch", test_checkpoint_mismatch},
    {"Autodiff tensor cannot be moved between backends.", test_autodiff_transfer},
    {"only float tensors may use an autodiff primitive", test_autodiff_context_non_float},
    {"q_matmul autodiff pre-check", test_q_matmul_tracked_quantized_operand},
    {"unknown device", test_unknown_device},
    {"Should read data", test_readback_failed},
    {"Should be float, got int", test_q_matmul_non_float_operand},
    {"block size under Propagate", test_q_matmul_propagate_block_shape},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo quant_guards[] = {
    {"UE8M0 scales are not yet supported", test_ue8m0_scales},
    {"doesn't support native packing", test_native_packing},
    {"lookup quantization", test_lookup_mode},
    {"Invalid dtype (expected DType::QFloat): quantized/float mix-up", test_dequantize_float},
    {"Quantization not supported for scheme (device)", test_scheme_not_supported_on_device},
    {"Packing must be on innermost dimension / Can't store in u32", test_packing_dim},
    {"two-level scheme rules", test_two_level_rules},
    {"quantized values do not fill a tensor", test_bytes_do_not_fill},
    {"Invalid per-block quantization", test_invalid_per_block_scales},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"headline panics", suite_init, NULL, NULL, NULL, headline},
    {"seed list", suite_init, NULL, NULL, NULL, seed},
    {"dispatch guards", suite_init, NULL, NULL, NULL, dispatch_guards},
    {"quantization guards", suite_init, NULL, NULL, NULL, quant_guards},
    CU_SUITE_INFO_NULL,
};

int main(void) { return tu_run("test_panics", suites); }
