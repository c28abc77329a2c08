/* tests/test_quant_errors.c: every validation error of the quantization API: the status, a
 * substring of ember_last_error() (burn's text where there is one), a NULL output, and an input
 * left untouched. Allocation failures leave nothing behind. */
#include <float.h>
#include <math.h>
#include <stdio.h>

#include "dispatch/internal.h"
#include "test_util.h"

static ember_context *ctx;
static ember_tensor *x; /* [2, 5] F32 */
static float xdata[10] = {1, -2, 3, -4, 5, 0.5f, -0.25f, 0.125f, 7, -8};
static const int64_t xshape[] = {2, 5};

static int suite_init(void) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    if (ember_context_create(&o, &ctx) != EMBER_OK)
        return 1;
    return ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, xshape, xdata, &x) == EMBER_OK ? 0 : 1;
}
static int suite_clean(void) {
    ember_tensor_free(x);
    ember_context_destroy(ctx);
    return 0;
}

static void assert_x_untouched(void) {
    float back[10];
    TU_OK(ember_tensor_read(x, back, sizeof back));
    CU_ASSERT_EQUAL(memcmp(back, xdata, sizeof back), 0);
}

/* quantize x with s: expect code + needle, *out NULL, x untouched. */
static void expect_quantize(const ember_qscheme *s, ember_status code, const char *needle) {
    ember_tensor *out = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_quantize(x, s, &out), code, needle);
    CU_ASSERT_PTR_NULL(out);
    assert_x_untouched();
}

static void test_sub_byte_native(void) {
    const ember_qvalue subs[] = {EMBER_Q4F, EMBER_Q4S, EMBER_Q2F, EMBER_Q2S, EMBER_E2M1};
    for (int i = 0; i < 5; i++) {
        ember_qscheme s = ember_qscheme_per_tensor(subs[i], EMBER_QSTORE_NATIVE);
        expect_quantize(&s, EMBER_ERR_SUB_BYTE_NATIVE, "Can't store native sub-byte values");
        TU_ASSERT_STATUS(ember_qscheme_validate(&s), EMBER_ERR_SUB_BYTE_NATIVE, "sub-byte");
    }
}

static void test_unsupported_scheme(void) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_PACKED_NATIVE);
    expect_quantize(&s, EMBER_ERR_UNSUPPORTED_SCHEME, "Q8S doesn't support native packing");
    s = ember_qscheme_per_tensor(EMBER_E4M3, EMBER_QSTORE_PACKED_NATIVE);
    expect_quantize(&s, EMBER_ERR_UNSUPPORTED_SCHEME, "E4M3 doesn't support native packing");
    s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    s.mode = EMBER_QMODE_LOOKUP;
    expect_quantize(&s, EMBER_ERR_UNSUPPORTED_SCHEME, "lookup quantization");
    const int64_t blk[] = {5};
    s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk);
    s.block_scale = EMBER_SCALE_F16;
    s.tensor_level = 1;
    s.tensor_scale = EMBER_SCALE_F16;
    expect_quantize(&s, EMBER_ERR_UNSUPPORTED_SCHEME,
                    "a two-level scheme stores its per-tensor scale as f32");
    s.tensor_scale = EMBER_SCALE_F32;
    s.block_scale = EMBER_SCALE_F32;
    expect_quantize(&s, EMBER_ERR_UNSUPPORTED_SCHEME, "reach f32's range");
    s.block_scale = EMBER_SCALE_BF16;
    expect_quantize(&s, EMBER_ERR_UNSUPPORTED_SCHEME, "block scales in BF16 reach f32's range");
}

static void test_packed_shape(void) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
    s.packing_dim = 1;
    expect_quantize(&s, EMBER_ERR_PACKED_SHAPE, "Can't store in u32");
    s = ember_qscheme_per_tensor(EMBER_E2M1, EMBER_QSTORE_PACKED_NATIVE);
    s.packing_dim = 1;
    expect_quantize(&s, EMBER_ERR_PACKED_SHAPE, "innermost");
    /* a partial last word is not an error: [2, 5] Q4 packs into one word per row */
    s.packing_dim = 0;
    s.value = EMBER_Q4S;
    s.store = EMBER_QSTORE_PACKED_U32;
    ember_tensor *q = NULL;
    TU_OK(ember_quantize(x, &s, &q));
    size_t len = 0;
    TU_OK(ember_qtensor_to_bytes(q, NULL, 0, &len));
    CU_ASSERT_EQUAL(len, 2 * 4 + 4);
    ember_tensor_free(q);
}

static void test_scale_dtype(void) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    s.tensor_scale = EMBER_SCALE_UE8M0;
    expect_quantize(&s, EMBER_ERR_SCALE_DTYPE, "UE8M0 scales are not yet supported");
    const int64_t blk[] = {5};
    s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk);
    s.block_scale = EMBER_SCALE_UE8M0;
    expect_quantize(&s, EMBER_ERR_SCALE_DTYPE, "UE8M0 scales are not yet supported");
    s.block_scale = EMBER_SCALE_UE4M3;
    s.tensor_level = 1;
    s.tensor_scale = EMBER_SCALE_UE8M0;
    expect_quantize(&s, EMBER_ERR_SCALE_DTYPE, "UE8M0");
}

static void test_block_shape(void) {
    /* dynamic per-block: burn's reduce_blocks requires whole blocks */
    const int64_t b4[] = {4};
    ember_qscheme s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, b4);
    expect_quantize(&s, EMBER_ERR_BLOCK_SHAPE,
                    "Tensor [2, 5] must be evenly divisible by block size [4]");
    const int64_t b32[] = {3, 5};
    s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, b32);
    expect_quantize(&s, EMBER_ERR_BLOCK_SHAPE, "must be evenly divisible by block size [3, 5]");
    /* a block with more (non-1) dims than the tensor */
    const int64_t b3[] = {2, 1, 5};
    s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 3, b3);
    expect_quantize(&s, EMBER_ERR_BLOCK_SHAPE, "more dims than the tensor");
    /* leading 1s are dropped: [1, 1, 5] on [2, 5] is [5] and fine */
    const int64_t b115[] = {1, 1, 5};
    s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 3, b115);
    ember_tensor *q = NULL;
    TU_OK(ember_quantize(x, &s, &q));
    size_t n = 0;
    TU_OK(ember_qtensor_scale_count(q, &n));
    CU_ASSERT_EQUAL(n, 2);
    ember_tensor_free(q);
    /* static: scales must have the block grid's shape ([2, 2] for [4] on [2, 5]) */
    s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, b4);
    const float sc[4] = {0.1f, 0.1f, 0.1f, 0.1f};
    const int64_t bad_shape[] = {4}, good_shape[] = {2, 2};
    ember_tensor *scales = NULL, *out = (ember_tensor *)(uintptr_t)1;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 1, bad_shape, sc, &scales));
    TU_ASSERT_STATUS(
        ember_quantize_static(x, &s, scales, &out), EMBER_ERR_BLOCK_SHAPE,
        "Invalid per-block quantization: 4 blocks for a [2, 5] tensor with [4] blocks");
    CU_ASSERT_PTR_NULL(out);
    ember_tensor_free(scales);
    /* with the right grid the partial edge block gets its own scale */
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, good_shape, sc, &scales));
    TU_OK(ember_quantize_static(x, &s, scales, &out));
    ember_tensor_free(out);
    ember_tensor_free(scales);
    assert_x_untouched();
}

static void test_not_quantized(void) {
    ember_qscheme s;
    memset(&s, 0x5A, sizeof s);
    ember_qscheme before = s;
    TU_ASSERT_STATUS(ember_tensor_qscheme(x, &s), EMBER_ERR_NOT_QUANTIZED,
                     "Quantization scheme is not valid for dtype F32");
    CU_ASSERT_EQUAL(memcmp(&s, &before, sizeof s), 0);
    int8_t v[10];
    float f[10];
    size_t len = 0;
    ember_tensor *out = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_qtensor_values(x, v, 10), EMBER_ERR_NOT_QUANTIZED, "dtype F32");
    TU_ASSERT_STATUS(ember_qtensor_scales(x, f, 10), EMBER_ERR_NOT_QUANTIZED, "dtype F32");
    TU_ASSERT_STATUS(ember_qtensor_scale_count(x, &len), EMBER_ERR_NOT_QUANTIZED, "dtype F32");
    TU_ASSERT_STATUS(ember_qtensor_global_scale(x, f), EMBER_ERR_NOT_QUANTIZED, "dtype F32");
    TU_ASSERT_STATUS(ember_qtensor_to_bytes(x, NULL, 0, &len), EMBER_ERR_NOT_QUANTIZED,
                     "dtype F32");
    TU_ASSERT_STATUS(ember_dequantize(x, &out), EMBER_ERR_NOT_QUANTIZED, "dtype F32");
    CU_ASSERT_PTR_NULL(out);
    out = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_backend_dequantize(ctx, TU_CPU, x, &out), EMBER_ERR_NOT_QUANTIZED,
                     "dtype F32");
    CU_ASSERT_PTR_NULL(out);
    assert_x_untouched();
}

static void test_non_finite(void) {
    const float bad_vals[] = {NAN, INFINITY, -INFINITY};
    const int64_t b5[] = {5}, b15[] = {1, 5}, rect[] = {2, 5}, col[] = {2, 1};
    ember_qscheme schemes[6];
    schemes[0] = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    schemes[1] = ember_qscheme_per_block(EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 1, b5); /* fused */
    schemes[2] = ember_qscheme_per_block(EMBER_Q8F, EMBER_QSTORE_NATIVE, 2, rect);   /* generic */
    schemes[3] = ember_qscheme_per_block(EMBER_E2M1, EMBER_QSTORE_PACKED_NATIVE, 2, b15);
    schemes[3].block_scale = EMBER_SCALE_UE4M3;
    schemes[3].tensor_level = 1; /* two-level */
    schemes[4] = ember_qscheme_per_tensor(EMBER_E4M3, EMBER_QSTORE_PACKED_U32);
    schemes[5] = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, col); /* block rows */
    for (int b = 0; b < 3; b++)
        for (int k = 0; k < 6; k++)
            for (int pos = 0; pos < 10; pos += 7) {
                float d[10];
                memcpy(d, xdata, sizeof d);
                d[pos] = bad_vals[b];
                ember_tensor *t = NULL, *out = (ember_tensor *)(uintptr_t)1;
                TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, xshape, d, &t));
                TU_ASSERT_STATUS(ember_quantize(t, &schemes[k], &out), EMBER_ERR_NON_FINITE,
                                 "NaN or Inf");
                CU_ASSERT_PTR_NULL(out);
                float back[10];
                TU_OK(ember_tensor_read(t, back, sizeof back));
                CU_ASSERT_EQUAL(memcmp(back, d, sizeof d), 0);
                /* static quantization refuses it as well */
                const int64_t one = 1;
                const float sc = 0.5f;
                ember_tensor *st = NULL;
                TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 1, &one, &sc, &st));
                TU_ASSERT_STATUS(ember_quantize_static(t, &schemes[0], st, &out),
                                 EMBER_ERR_NON_FINITE, "NaN or Inf");
                CU_ASSERT_PTR_NULL(out);
                ember_tensor_free(st);
                ember_tensor_free(t);
            }
    /* F16 input holding Inf */
    uint16_t h[10] = {0x3c00, 0x7c00, 0, 0, 0, 0, 0, 0, 0, 0};
    ember_tensor *t = NULL, *out = (ember_tensor *)(uintptr_t)1;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F16, 2, xshape, h, &t));
    TU_ASSERT_STATUS(ember_quantize(t, &schemes[0], &out), EMBER_ERR_NON_FINITE, "NaN or Inf");
    CU_ASSERT_PTR_NULL(out);
    ember_tensor_free(t);
    /* static scales must be finite and not negative */
    const int64_t one = 1;
    const float bad_sc[] = {NAN, INFINITY, -0.5f};
    const ember_status want[] = {EMBER_ERR_NON_FINITE, EMBER_ERR_NON_FINITE,
                                 EMBER_ERR_INVALID_ARGUMENT};
    const char *needle[] = {"scales must be finite", "scales must be finite",
                            "must not be negative"};
    for (int i = 0; i < 3; i++) {
        ember_tensor *st = NULL;
        TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 1, &one, &bad_sc[i], &st));
        out = (ember_tensor *)(uintptr_t)1;
        TU_ASSERT_STATUS(ember_quantize_static(x, &schemes[0], st, &out), want[i], needle[i]);
        CU_ASSERT_PTR_NULL(out);
        ember_tensor_free(st);
    }
    assert_x_untouched();
}

static void test_bytes_errors(void) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    const int64_t sh[] = {4};
    const uint8_t b[] = {0x81, 0xb9, 0x00, 0x23, 0xd4, 0x36, 0x68, 0x3c, 0x00};
    ember_tensor *q = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_qtensor_from_bytes(ctx, TU_CPU, &s, 1, sh, b, 9, &q),
                     EMBER_ERR_SHAPE_MISMATCH, "expected 8 bytes");
    CU_ASSERT_PTR_NULL(q);
    q = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_qtensor_from_bytes(ctx, TU_CPU, &s, 1, sh, b, 7, &q),
                     EMBER_ERR_SHAPE_MISMATCH, "got 7");
    CU_ASSERT_PTR_NULL(q);
    /* two-level: values + block scales + 4-byte global */
    const int64_t blk[] = {4}, sh8[] = {8};
    ember_qscheme t = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk);
    t.block_scale = EMBER_SCALE_UE4M3;
    t.tensor_level = 1;
    uint8_t b14[14] = {0};
    q = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_qtensor_from_bytes(ctx, TU_CPU, &t, 1, sh8, b14, 10, &q),
                     EMBER_ERR_SHAPE_MISMATCH, "expected 14 bytes");
    CU_ASSERT_PTR_NULL(q);
    TU_ASSERT_STATUS(ember_qtensor_from_bytes(ctx, TU_CPU, &t, 1, sh8, b14, 14, NULL),
                     EMBER_ERR_INVALID_ARGUMENT, "out is NULL");
    q = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_qtensor_from_bytes(ctx, TU_CPU, &t, 1, sh8, NULL, 14, &q),
                     EMBER_ERR_INVALID_ARGUMENT, "bytes is NULL");
    CU_ASSERT_PTR_NULL(q);
    q = (ember_tensor *)(uintptr_t)1;
    ember_qscheme bad = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_NATIVE);
    TU_ASSERT_STATUS(ember_qtensor_from_bytes(ctx, TU_CPU, &bad, 1, sh, b, 8, &q),
                     EMBER_ERR_SUB_BYTE_NATIVE, "Can't store native sub-byte values");
    CU_ASSERT_PTR_NULL(q);
    q = (ember_tensor *)(uintptr_t)1;
    const ember_device nodev = {EMBER_BACKEND_CPU, 3};
    TU_ASSERT_STATUS(ember_qtensor_from_bytes(ctx, nodev, &s, 1, sh, b, 8, &q),
                     EMBER_ERR_BACKEND_UNAVAILABLE, "no device cpu:3");
    CU_ASSERT_PTR_NULL(q);
    q = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_qtensor_from_bytes(NULL, TU_CPU, &s, 1, sh, b, 8, &q), EMBER_ERR_MISUSE,
                     "context is NULL");
    CU_ASSERT_PTR_NULL(q);

    /* to_bytes: dst NULL gives the size; cap too small refuses and says the size */
    q = NULL;
    TU_OK(ember_qtensor_from_bytes(ctx, TU_CPU, &s, 1, sh, b, 8, &q));
    size_t len = 0;
    TU_OK(ember_qtensor_to_bytes(q, NULL, 0, &len));
    CU_ASSERT_EQUAL(len, 8);
    uint8_t small[7];
    memset(small, 0xEE, sizeof small);
    len = 0;
    TU_ASSERT_STATUS(ember_qtensor_to_bytes(q, small, 7, &len), EMBER_ERR_INVALID_ARGUMENT,
                     "the tensor needs 8");
    CU_ASSERT_EQUAL(len, 8);
    for (int i = 0; i < 7; i++)
        CU_ASSERT_EQUAL(small[i], 0xEE);
    TU_ASSERT_STATUS(ember_qtensor_to_bytes(q, small, 7, NULL), EMBER_ERR_INVALID_ARGUMENT,
                     "len is NULL");
    /* values / scales with too little room; global scale of a one-level scheme */
    int8_t v[3];
    float f[1];
    TU_ASSERT_STATUS(ember_qtensor_values(q, v, 3), EMBER_ERR_INVALID_ARGUMENT,
                     "dst holds 3 values, the tensor has 4");
    TU_ASSERT_STATUS(ember_qtensor_scales(q, f, 0), EMBER_ERR_INVALID_ARGUMENT,
                     "dst holds 0 scales, the tensor has 1");
    TU_ASSERT_STATUS(ember_qtensor_global_scale(q, f), EMBER_ERR_INVALID_ARGUMENT, "not two-level");
    TU_ASSERT_STATUS(ember_tensor_read(q, f, sizeof f), EMBER_ERR_DTYPE_MISMATCH, "QFloat");
    ember_tensor_free(q);
}

static void test_misuse_and_dtypes(void) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_tensor *out = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_quantize(NULL, &s, &out), EMBER_ERR_MISUSE, "tensor is NULL");
    CU_ASSERT_PTR_NULL(out);
    TU_ASSERT_STATUS(ember_quantize(x, &s, NULL), EMBER_ERR_INVALID_ARGUMENT, "out is NULL");
    out = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_quantize(x, NULL, &out), EMBER_ERR_INVALID_ARGUMENT, "scheme is NULL");
    CU_ASSERT_PTR_NULL(out);
    /* a foreign pointer (reading a freed handle would be a use-after-free under ASan) */
    uint64_t junk[64];
    memset(junk, 0x42, sizeof junk);
    out = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_quantize((const ember_tensor *)junk, &s, &out), EMBER_ERR_MISUSE,
                     "not an ember tensor");
    CU_ASSERT_PTR_NULL(out);
    out = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_dequantize((const ember_tensor *)junk, &out), EMBER_ERR_MISUSE,
                     "not an ember tensor");
    CU_ASSERT_PTR_NULL(out);
    ember_tensor *t = NULL;
    /* non-float input */
    const int32_t iv[10] = {0};
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_I32, 2, xshape, iv, &t));
    out = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_quantize(t, &s, &out), EMBER_ERR_DTYPE_MISMATCH,
                     "the input is I32; quantize takes F32, F16 or BF16");
    CU_ASSERT_PTR_NULL(out);
    ember_tensor_free(t);
    /* already quantized */
    ember_tensor *q = NULL;
    TU_OK(ember_quantize(x, &s, &q));
    out = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_quantize(q, &s, &out), EMBER_ERR_DTYPE_MISMATCH, "the input is QFloat");
    CU_ASSERT_PTR_NULL(out);
    /* dequantize_to a non-float dtype */
    out = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_dequantize_to(q, EMBER_I8, &out), EMBER_ERR_INVALID_ARGUMENT,
                     "must be F32, F16 or BF16");
    CU_ASSERT_PTR_NULL(out);
    /* static scales: NULL, wrong dtype */
    out = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_quantize_static(x, &s, NULL, &out), EMBER_ERR_INVALID_ARGUMENT,
                     "scales is NULL");
    CU_ASSERT_PTR_NULL(out);
    const int64_t one = 1;
    const uint16_t h1 = 0x3c00;
    ember_tensor *sc16 = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F16, 1, &one, &h1, &sc16));
    out = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_quantize_static(x, &s, sc16, &out), EMBER_ERR_DTYPE_MISMATCH,
                     "the scales are F16; they must be F32");
    CU_ASSERT_PTR_NULL(out);
    ember_tensor_free(sc16);
    /* scales from another context */
    ember_context *other = NULL;
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    TU_OK(ember_context_create(&o, &other));
    const float f1 = 1.0f;
    ember_tensor *sco = NULL;
    TU_OK(ember_tensor_from_data(other, TU_CPU, EMBER_F32, 1, &one, &f1, &sco));
    out = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_quantize_static(x, &s, sco, &out), EMBER_ERR_MISUSE, "another context");
    CU_ASSERT_PTR_NULL(out);
    out = (ember_tensor *)(uintptr_t)1;
    TU_ASSERT_STATUS(ember_backend_dequantize(other, TU_CPU, q, &out), EMBER_ERR_MISUSE,
                     "another context");
    CU_ASSERT_PTR_NULL(out);
    ember_tensor_free(sco);
    ember_context_destroy(other);
    ember_tensor_free(q);
    assert_x_untouched();
}

/* backend_dequantize refuses a tensor another device produced (burn's router stub). The CPU-only
 * context has one device, so the producer is rewritten to another device for this check. */
static void test_foreign_dequantize(void) {
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_tensor *q = NULL, *out = (ember_tensor *)(uintptr_t)1;
    TU_OK(ember_quantize(x, &s, &q));
    CU_ASSERT_EQUAL(q->producer.backend, EMBER_BACKEND_CPU);
    CU_ASSERT_EQUAL(q->producer.index, 0);
    const ember_device saved = q->producer;
    q->producer = (ember_device){EMBER_BACKEND_OPENCL, 0};
    TU_ASSERT_STATUS(ember_backend_dequantize(ctx, TU_CPU, q, &out), EMBER_ERR_FOREIGN_DEQUANTIZE,
                     "quantized on opencl:0");
    CU_ASSERT_PTR_NULL(out);
    q->producer = saved;
    TU_OK(ember_backend_dequantize(ctx, TU_CPU, q, &out));
    ember_tensor_free(out);
    out = (ember_tensor *)(uintptr_t)1;
    const ember_device cl = {EMBER_BACKEND_OPENCL, 0};
    TU_ASSERT_STATUS(ember_backend_dequantize(ctx, cl, q, &out), EMBER_ERR_BACKEND_UNAVAILABLE,
                     "opencl");
    CU_ASSERT_PTR_NULL(out);
    ember_tensor_free(q);
}

/* Every allocation failure on the way gives OUT_OF_MEMORY, a NULL output and no leak. */
static void test_alloc_failures(void) {
    const int64_t blk[] = {2, 5};
    ember_qscheme schemes[2] = {ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32),
                                ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, blk)};
    for (int k = 0; k < 2; k++) {
        for (long n = 1; n < 50; n++) {
            long live = ember__alloc_live();
            ember_tensor *q = (ember_tensor *)(uintptr_t)1;
            ember__alloc_fail_at(n);
            ember_status st = ember_quantize(x, &schemes[k], &q);
            ember__alloc_fail_at(0);
            if (st == EMBER_OK) {
                ember_tensor *d = NULL;
                ember__alloc_fail_at(1);
                TU_ASSERT_STATUS(ember_dequantize(q, &d), EMBER_ERR_OUT_OF_MEMORY, NULL);
                ember__alloc_fail_at(0);
                CU_ASSERT_PTR_NULL(d);
                ember_tensor_free(q);
                CU_ASSERT_EQUAL(ember__alloc_live(), live);
                break;
            }
            CU_ASSERT_EQUAL(st, EMBER_ERR_OUT_OF_MEMORY);
            CU_ASSERT_PTR_NULL(q);
            CU_ASSERT_EQUAL(ember__alloc_live(), live);
        }
    }
    assert_x_untouched();
}

static CU_TestInfo error_tests[] = {
    {"SUB_BYTE_NATIVE", test_sub_byte_native},
    {"UNSUPPORTED_SCHEME", test_unsupported_scheme},
    {"PACKED_SHAPE", test_packed_shape},
    {"SCALE_DTYPE", test_scale_dtype},
    {"BLOCK_SHAPE", test_block_shape},
    {"NOT_QUANTIZED", test_not_quantized},
    {"NON_FINITE", test_non_finite},
    {"bytes errors", test_bytes_errors},
    {"misuse and dtypes", test_misuse_and_dtypes},
    {"FOREIGN_DEQUANTIZE", test_foreign_dequantize},
    {"allocation failures", test_alloc_failures},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"quant errors", suite_init, suite_clean, NULL, NULL, error_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return tu_run("test_quant_errors", suites); }
