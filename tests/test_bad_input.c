/* tests/test_bad_input.c: the bad-input catalogue (docs/BAD-INPUT.md), executable.
 *
 * One row per class of bad input a caller can pass: the call, the status it must get, a substring
 * of the detail. Each row also checks the common contract: the output pointer is NULL and
 * ember_last_error() is not empty. With EMBER_BAD_INPUT_MD=1 the test prints the rows as the
 * markdown table of docs/BAD-INPUT.md, with the detail ember actually gave, so the document is
 * regenerated from what the code does:
 *   EMBER_BAD_INPUT_MD=1 ./tests/test_bad_input | sed -n '/^| /p' */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_backend.h"

static ember_context *ctx; /* CPU + the two-device mock in the OpenCL slot */
static int markdown;
static int rows;

#define SENTINEL ((ember_tensor *)(uintptr_t)1)

/* Check one row and print it in markdown. out: the call's output (NULL when it has none). */
static void row(const char *klass, const char *call, ember_status got, ember_status want,
                const char *needle, ember_tensor **out) {
    rows++;
    const char *detail = ember_last_error();
    int ok = got == want && (want == EMBER_OK || detail[0] != '\0') &&
             (!needle || strstr(detail, needle) != NULL) && (!out || want == EMBER_OK || !*out);
    if (!ok)
        fprintf(stderr, "bad input row \"%s\": %s gave %s (%s), want %s containing \"%s\"\n", klass,
                call, ember_status_name(got), detail, ember_status_name(want),
                needle ? needle : "");
    CU_ASSERT(ok);
    if (markdown) {
        char d[200];
        snprintf(d, sizeof d, "%s", want == EMBER_OK ? "" : detail);
        for (char *p = d; *p; p++)
            if (*p == '|')
                *p = '/';
        printf("| %s | `%s` | `%s` | %s |\n", klass, call, ember_status_name(got), d);
    }
    if (out && *out && *out != SENTINEL && want != EMBER_OK)
        *out = NULL;
    ember_clear_error();
}

static int suite_init(void) {
    markdown = getenv("EMBER_BAD_INPUT_MD") != NULL;
    return 0;
}

static int suite_clean(void) { return 0; }

static ember_tensor *f32(ember_device d, int rank, const int64_t *shape, const float *v) {
    ember_tensor *t = NULL;
    CU_ASSERT_FATAL(ember_tensor_from_data(ctx, d, EMBER_F32, rank, shape, v, &t) == EMBER_OK);
    return t;
}

static void test_catalogue(void) {
    ctx = mock_context();
    if (markdown)
        printf(
            "\n| class of bad input | call | status | detail ember gives |\n|---|---|---|---|\n");
    const int64_t s23[] = {2, 3}, s34[] = {3, 4}, s6[] = {6};
    const float v[12] = {1, -2, 3, -4, 5, -6, 7, -8, 9, -10, 11, -12};
    ember_tensor *out = SENTINEL;
    ember_tensor *a = f32(TU_CPU, 2, s23, v), *b = f32(TU_CPU, 2, s34, v);
    ember_qscheme q8 = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_tensor *qa = NULL;
    TU_OK(ember_quantize(a, &q8, &qa));

    /* ---- handles ---- */
    row("NULL output pointer", "ember_tensor_from_data(..., NULL)",
        ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, s23, v, NULL), EMBER_ERR_INVALID_ARGUMENT,
        "out is NULL", NULL);
    out = SENTINEL;
    row("NULL context", "ember_tensor_from_data(NULL, ...)",
        ember_tensor_from_data(NULL, TU_CPU, EMBER_F32, 2, s23, v, &out), EMBER_ERR_MISUSE,
        "context is NULL", &out);
    uint32_t foreign[64];
    memset(foreign, 0x5A, sizeof foreign);
    out = SENTINEL;
    row("foreign pointer as a context", "ember_tensor_from_data((ember_context *)junk, ...)",
        ember_tensor_from_data((ember_context *)foreign, TU_CPU, EMBER_F32, 2, s23, v, &out),
        EMBER_ERR_MISUSE, "not a live ember context", &out);
    out = SENTINEL;
    row("NULL tensor", "ember_matmul(NULL, b, &out)", ember_matmul(NULL, b, &out), EMBER_ERR_MISUSE,
        "tensor is NULL", &out);
    out = SENTINEL;
    row("foreign pointer as a tensor", "ember_matmul((ember_tensor *)junk, b, &out)",
        ember_matmul((const ember_tensor *)foreign, b, &out), EMBER_ERR_MISUSE,
        "not an ember tensor", &out);
    if (!TU_SANITIZER &&
        !getenv("EMBER_UNDER_VALGRIND")) { /* the sanitizers and valgrind report the read */
        ember_tensor *dead = f32(TU_CPU, 2, s23, v);
        ember_tensor_free(dead);
        out = SENTINEL;
        row("freed tensor (memory still mapped)", "ember_relu(freed, &out)", ember_relu(dead, &out),
            EMBER_ERR_MISUSE, "already freed", &out);
    }
    ember_tensor_free(NULL);
    ember_tensor_free((ember_tensor *)foreign); /* ignored: not a live tensor */
    ember_context_destroy((ember_context *)foreign);

    /* ---- context options ---- */
    ember_options o = ember_options_default();
    ember_context *c2 = (ember_context *)(uintptr_t)1;
    o.num_threads = -1;
    row("thread count out of range", "ember_context_create({num_threads = -1})",
        ember_context_create(&o, &c2), EMBER_ERR_INVALID_ARGUMENT, "num_threads -1", NULL);
    CU_ASSERT_PTR_NULL(c2);
    o = ember_options_default();
    o.cpu_max_isa = "sse9";
    row("unknown ISA name", "ember_context_create({cpu_max_isa = \"sse9\"})",
        ember_context_create(&o, &c2), EMBER_ERR_INVALID_ARGUMENT, "sse9", NULL);
    o = ember_options_default();
    o.enable_opencl = 2;
    row("flag that is not 0/1", "ember_context_create({enable_opencl = 2})",
        ember_context_create(&o, &c2), EMBER_ERR_INVALID_ARGUMENT, "enable_opencl", NULL);

    /* ---- dtypes, ranks, shapes, data ---- */
    out = SENTINEL;
    row("dtype outside the enum", "ember_tensor_from_data(..., (ember_dtype)42, ...)",
        ember_tensor_from_data(ctx, TU_CPU, (ember_dtype)42, 2, s23, v, &out),
        EMBER_ERR_INVALID_ARGUMENT, "bad dtype value 42", &out);
    out = SENTINEL;
    row("QFloat through from_data", "ember_tensor_from_data(..., EMBER_QFLOAT, ...)",
        ember_tensor_from_data(ctx, TU_CPU, EMBER_QFLOAT, 2, s23, v, &out),
        EMBER_ERR_INVALID_ARGUMENT, "ember_quantize", &out);
    out = SENTINEL;
    row("rank 0", "ember_tensor_from_data(..., rank 0, ...)",
        ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 0, s23, v, &out), EMBER_ERR_INVALID_ARGUMENT,
        "rank 0 is outside 1..8", &out);
    const int64_t s9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    out = SENTINEL;
    row("rank 9 (above EMBER_MAX_RANK)", "ember_tensor_from_data(..., rank 9, ...)",
        ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 9, s9, v, &out), EMBER_ERR_INVALID_ARGUMENT,
        "rank 9", &out);
    const int64_t neg[] = {2, -3};
    out = SENTINEL;
    row("negative dim", "ember_tensor_from_data(..., {2, -3}, ...)",
        ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, neg, v, &out), EMBER_ERR_INVALID_ARGUMENT,
        "negative", &out);
    const int64_t huge[] = {INT64_MAX, 4};
    out = SENTINEL;
    row("element count that overflows", "ember_tensor_from_data(..., {INT64_MAX, 4}, ...)",
        ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, huge, v, &out), EMBER_ERR_SHAPE_MISMATCH,
        "overflows", &out);
    const int64_t big[] = {(int64_t)1 << 61};
    out = SENTINEL;
    row("byte size that overflows", "ember_tensor_from_data(..., F32 {2^61}, ...)",
        ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 1, big, v, &out), EMBER_ERR_SHAPE_MISMATCH,
        "byte size overflows", &out);
    out = SENTINEL;
    row("NULL shape", "ember_tensor_from_data(..., shape NULL, ...)",
        ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, NULL, v, &out),
        EMBER_ERR_INVALID_ARGUMENT, "shape is NULL", &out);
    out = SENTINEL;
    row("NULL data for a non-empty tensor", "ember_tensor_from_data(..., data NULL, ...)",
        ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, s23, NULL, &out),
        EMBER_ERR_INVALID_ARGUMENT, "data is NULL", &out);
    const int64_t empty[] = {0, 5};
    out = SENTINEL;
    row("empty tensor (a 0 dim): accepted", "ember_tensor_from_data(..., {0, 5}, NULL, ...)",
        ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, empty, NULL, &out), EMBER_OK, NULL, &out);
    ember_tensor_free(out);
    if (!TU_SANITIZER) { /* ASan / TSan abort on such a request */
        /* 2^61 bytes: more than any x86-64 / AArch64 address space (57 bits at most), so the
         * allocation fails whatever the system's overcommit policy. (2^45 bytes did not: on a
         * machine that overcommits without limit, the H200 host, it was granted, and the upload
         * then read 2^45 bytes from the 48-byte array v.) */
        const int64_t vast[] = {(int64_t)1 << 59};
        out = SENTINEL;
        row("a tensor larger than memory", "ember_tensor_from_data(..., dummy, F32 {2^59}, ...)",
            ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 1, vast, v, &out),
            EMBER_ERR_OUT_OF_MEMORY, NULL, &out);
    }
    float small[2];
    row("destination buffer too small", "ember_tensor_read(t, dst, 8)",
        ember_tensor_read(a, small, sizeof small), EMBER_ERR_INVALID_ARGUMENT, "needs 24", NULL);
    row("plain read of a quantized tensor", "ember_tensor_read(q, ...)",
        ember_tensor_read(qa, small, sizeof small), EMBER_ERR_DTYPE_MISMATCH, "QFloat", NULL);
    CU_ASSERT_EQUAL(ember_tensor_dim(a, 7), -1);
    row("axis out of range", "ember_tensor_dim(t, 7)", ember_last_error_status(),
        EMBER_ERR_INVALID_ARGUMENT, "axis 7", NULL);

    /* ---- devices ---- */
    out = SENTINEL;
    row("backend outside the enum", "ember_tensor_from_data(ctx, {7, 0}, ...)",
        ember_tensor_from_data(ctx, (ember_device){(ember_backend)7, 0}, EMBER_F32, 2, s23, v,
                               &out),
        EMBER_ERR_INVALID_ARGUMENT, "bad backend value 7", &out);
    out = SENTINEL;
    row("device index that does not exist", "ember_tensor_from_data(ctx, cpu:1, ...)",
        ember_tensor_from_data(ctx, (ember_device){EMBER_BACKEND_CPU, 1}, EMBER_F32, 2, s23, v,
                               &out),
        EMBER_ERR_BACKEND_UNAVAILABLE, "no device cpu:1", &out);
    const uint16_t h[6] = {0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00, 0x3c00};
    out = SENTINEL;
    row("dtype the device cannot hold", "ember_tensor_from_data(ctx, mock opencl:0, F16, ...)",
        ember_tensor_from_data(ctx, MOCK0, EMBER_F16, 2, s23, h, &out), EMBER_ERR_DTYPE_TRANSFER,
        "F16", &out);

    /* ---- schemes ---- */
    ember_qscheme s = q8;
    s.value = (ember_qvalue)99;
    row("scheme value outside the enum", "ember_qscheme_validate({value = 99})",
        ember_qscheme_validate(&s), EMBER_ERR_INVALID_ARGUMENT, "bad value 99", NULL);
    row("NULL scheme", "ember_quantize(x, NULL, &out)", ember_quantize(a, NULL, &out),
        EMBER_ERR_INVALID_ARGUMENT, NULL, &out);
    s = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_NATIVE);
    row("sub-byte values stored natively", "ember_qscheme_validate(Q4S, Native)",
        ember_qscheme_validate(&s), EMBER_ERR_SUB_BYTE_NATIVE, "sub-byte", NULL);
    s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_PACKED_NATIVE);
    row("native packing of a non-fp4 value", "ember_qscheme_validate(Q8S, PackedNative)",
        ember_qscheme_validate(&s), EMBER_ERR_UNSUPPORTED_SCHEME, "native packing", NULL);
    s = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
    s.packing_dim = 1;
    row("packing on an outer axis", "ember_qscheme_validate(Q4S PackedU32, packing_dim 1)",
        ember_qscheme_validate(&s), EMBER_ERR_PACKED_SHAPE, "Can't store in u32", NULL);
    s = q8;
    s.mode = EMBER_QMODE_LOOKUP;
    row("lookup mode", "ember_qscheme_validate({mode = LOOKUP})", ember_qscheme_validate(&s),
        EMBER_ERR_UNSUPPORTED_SCHEME, "lookup", NULL);
    s = q8;
    s.tensor_scale = EMBER_SCALE_UE8M0;
    row("UE8M0 scales", "ember_qscheme_validate({tensor_scale = UE8M0})",
        ember_qscheme_validate(&s), EMBER_ERR_SCALE_DTYPE, "UE8M0", NULL);
    const int64_t b6[6] = {1, 1, 1, 1, 1, 4}, b0[1] = {0}, b300[1] = {300}, b4[1] = {4};
    s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 6, b6);
    row("block rank 6", "ember_qscheme_per_block(..., 6, ...)", ember_qscheme_validate(&s),
        EMBER_ERR_INVALID_ARGUMENT, "block rank 6", NULL);
    s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, b0);
    row("block dim 0", "ember_qscheme_per_block(..., {0})", ember_qscheme_validate(&s),
        EMBER_ERR_INVALID_ARGUMENT, "block dim 0 is 0", NULL);
    s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, b300);
    row("block dim above 255", "ember_qscheme_per_block(..., {300})", ember_qscheme_validate(&s),
        EMBER_ERR_INVALID_ARGUMENT, "1..255", NULL);
    s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, b4);
    s.tensor_level = 1;
    row("two-level with F32 block scales", "ember_qscheme_validate(two-level, block F32)",
        ember_qscheme_validate(&s), EMBER_ERR_UNSUPPORTED_SCHEME, "cannot absorb", NULL);
    s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, b4);
    out = SENTINEL;
    row("block that does not divide the shape", "ember_quantize([2, 3], per_block {4})",
        ember_quantize(a, &s, &out), EMBER_ERR_BLOCK_SHAPE, "evenly divisible", &out);

    /* ---- values ---- */
    float nanv[6] = {1, 2, NAN, 4, 5, 6}, infv[6] = {1, 2, 3, INFINITY, 5, 6};
    ember_tensor *tn = f32(TU_CPU, 2, s23, nanv), *ti = f32(TU_CPU, 2, s23, infv);
    out = SENTINEL;
    row("NaN to quantize", "ember_quantize(x with NaN, ...)", ember_quantize(tn, &q8, &out),
        EMBER_ERR_NON_FINITE, NULL, &out);
    out = SENTINEL;
    row("Inf to quantize", "ember_quantize(x with Inf, ...)", ember_quantize(ti, &q8, &out),
        EMBER_ERR_NON_FINITE, NULL, &out);
    ember_tensor_free(tn);
    ember_tensor_free(ti);
    const int64_t ti64[] = {2, 0}, s2[] = {2};
    ember_tensor *ints = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_I64, 1, s2, ti64, &ints));
    out = SENTINEL;
    row("integer tensor to quantize", "ember_quantize(I64 x, ...)", ember_quantize(ints, &q8, &out),
        EMBER_ERR_DTYPE_MISMATCH, NULL, &out);
    const int64_t bad_t[] = {2, 7};
    ember_tensor *tgt = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_I64, 1, s2, bad_t, &tgt));
    out = SENTINEL;
    row("class index out of range", "ember_cross_entropy(logits [2, 3], targets {2, 7})",
        ember_cross_entropy(a, tgt, &out), EMBER_ERR_INVALID_ARGUMENT, "7", &out);
    ember_tensor_free(tgt);
    out = SENTINEL;
    row("argmax axis out of range", "ember_argmax(x, 5, &out)", ember_argmax(a, 5, &out),
        EMBER_ERR_INVALID_ARGUMENT, "axis", &out);

    /* ---- serialized bytes ---- */
    unsigned char bytes[64];
    size_t len = 0;
    TU_OK(ember_qtensor_to_bytes(qa, bytes, sizeof bytes, &len));
    out = SENTINEL;
    row("QuantizedBytes of the wrong length", "ember_qtensor_from_bytes(..., len - 1, ...)",
        ember_qtensor_from_bytes(ctx, TU_CPU, &q8, 2, s23, bytes, len - 1, &out),
        EMBER_ERR_SHAPE_MISMATCH, "expected 10 bytes", &out);
    out = SENTINEL;
    row("NULL bytes", "ember_qtensor_from_bytes(..., NULL, len, ...)",
        ember_qtensor_from_bytes(ctx, TU_CPU, &q8, 2, s23, NULL, len, &out),
        EMBER_ERR_INVALID_ARGUMENT, NULL, &out);
    float nan_scale = NAN;
    memcpy(bytes + 6, &nan_scale, 4);
    out = SENTINEL;
    row("a NaN scale inside QuantizedBytes: accepted, as burn", "ember_qtensor_from_bytes(...)",
        ember_qtensor_from_bytes(ctx, TU_CPU, &q8, 2, s23, bytes, len, &out), EMBER_OK, NULL, &out);
    ember_tensor_free(out);
    size_t need = 0;
    row("serialize into a buffer too small", "ember_qtensor_to_bytes(q, dst, 3, &len)",
        ember_qtensor_to_bytes(qa, bytes, 3, &need), EMBER_ERR_INVALID_ARGUMENT, NULL, NULL);
    CU_ASSERT_EQUAL(need, len);

    /* ---- shapes of ops ---- */
    out = SENTINEL;
    row("matmul inner dims differ", "ember_matmul([2, 3], [2, 3])", ember_matmul(a, a, &out),
        EMBER_ERR_SHAPE_MISMATCH, "[2, 3]", &out);
    ember_tensor *v6 = f32(TU_CPU, 1, s6, v);
    out = SENTINEL;
    row("shapes that do not broadcast", "ember_add([2, 3], [6])", ember_add(a, v6, &out),
        EMBER_ERR_SHAPE_MISMATCH, NULL, &out);
    ember_tensor_free(v6);

    /* ---- burn's guards ---- */
    ember_tensor *am = f32(MOCK0, 2, s23, v), *bm1 = f32(MOCK1, 2, s34, v), *qm = NULL;
    TU_OK(ember_quantize(am, &q8, &qm));
    out = SENTINEL;
    row("operands on two backends", "ember_matmul(cpu, opencl)", ember_matmul(a, bm1, &out),
        EMBER_ERR_BACKEND_MISMATCH, "not on the same backend", &out);
    out = SENTINEL;
    row("operands on two devices of one backend", "ember_matmul(opencl:0, opencl:1)",
        ember_matmul(am, bm1, &out), EMBER_ERR_DEVICE_MISMATCH, NULL, &out);
    out = SENTINEL;
    row("quantized tensor moved", "ember_to_device(q on opencl:0, cpu:0)",
        ember_to_device(qm, TU_CPU, &out), EMBER_ERR_QUANT_TRANSFER, "Local transfer", &out);
    ember_tensor *hf = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F16, 2, s23, h, &hf));
    out = SENTINEL;
    row("dtype the destination cannot hold", "ember_to_device(F16, mock opencl:0)",
        ember_to_device(hf, MOCK0, &out), EMBER_ERR_DTYPE_TRANSFER, "F16", &out);
    ember_tensor_free(hf);
    out = SENTINEL;
    row("dequantize off the producer", "ember_backend_dequantize(ctx, cpu:0, q from opencl:0)",
        ember_backend_dequantize(ctx, TU_CPU, qm, &out), EMBER_ERR_FOREIGN_DEQUANTIZE, NULL, &out);
    const ember_tensor *ts[1] = {qa};
    void *const dsts[1] = {small};
    const size_t caps[1] = {sizeof small};
    row("quantized tensor in read_many", "ember_tensor_read_many({q}, ...)",
        ember_tensor_read_many(ts, dsts, caps, 1), EMBER_ERR_QUANT_UNSUPPORTED,
        "Quantization not supported yet", NULL);
    out = SENTINEL;
    row("dequantize of a float tensor", "ember_dequantize(F32 x, &out)", ember_dequantize(a, &out),
        EMBER_ERR_NOT_QUANTIZED, "not valid for dtype F32", &out);
    row("tracking a quantized tensor", "ember_tensor_set_autodiff(q, BALANCED)",
        ember_tensor_set_autodiff(qa, EMBER_AUTODIFF_BALANCED), EMBER_ERR_AUTODIFF_CONTEXT, NULL,
        NULL);
    ember_tensor *tb1 = f32(TU_CPU, 2, s34, v), *tb2 = f32(TU_CPU, 2, s34, v);
    TU_OK(ember_tensor_set_autodiff(tb1, EMBER_AUTODIFF_BALANCED));
    TU_OK(ember_tensor_set_autodiff(tb2, EMBER_AUTODIFF_NO_CHECKPOINTING));
    out = SENTINEL;
    row("two checkpointing strategies", "ember_add(Balanced, Disabled-strategy)",
        ember_add(tb1, tb2, &out), EMBER_ERR_CHECKPOINT_MISMATCH, "checkpointing", &out);
    out = SENTINEL;
    row("tracked input to a backward op", "ember_linear_bias_backward(tracked dy, &db)",
        ember_linear_bias_backward(tb1, &out), EMBER_ERR_NOT_DIFFERENTIABLE, "Can't differentiate",
        &out);
    out = SENTINEL;
    row("tracked tensor to another backend", "ember_to_device(tracked cpu, opencl:0)",
        ember_to_device(tb1, MOCK0, &out), EMBER_ERR_AUTODIFF_TRANSFER, NULL, &out);
    ember_tensor_free(tb1);
    ember_tensor_free(tb2);

    ember_tensor_free(ints);
    ember_tensor_free(qm);
    ember_tensor_free(am);
    ember_tensor_free(bm1);
    ember_tensor_free(qa);
    ember_tensor_free(a);
    ember_tensor_free(b);
    ember_context_destroy(ctx);
    if (markdown)
        printf("\n%d rows\n", rows);
}

int main(void) {
    CU_TestInfo tests[] = {
        {"every class of bad input", test_catalogue},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {
        {"bad input", suite_init, suite_clean, NULL, NULL, tests},
        CU_SUITE_INFO_NULL,
    };
    return tu_run("test_bad_input", suites);
}
