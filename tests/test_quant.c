/* tests/test_quant.c: every golden vector of spec/burn-semantics.md §6.1-§6.4, bit-exact (values,
 * scales as f32 bits, packed words, serialized bytes), through the public API on the CPU backend,
 * once with the best kernel tier and once with the scalar tier forced. */
#include <float.h>
#include <math.h>
#include <stdio.h>

#include "backends/cpu/cpu_quant.h"
#include "quant/quant_impl.h"
#include "test_util.h"

static ember_context *ctx;

static int suite_init(void) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    return ember_context_create(&o, &ctx) == EMBER_OK ? 0 : 1;
}
static int suite_clean(void) {
    ember_context_destroy(ctx);
    ember__cpu_quant_force_scalar(0);
    return 0;
}

static uint32_t bits(float f) { return ember__f32_bits(f); }

static ember_tensor *f32_tensor(int rank, const int64_t *shape, const float *x) {
    ember_tensor *t = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, rank, shape, x, &t));
    return t;
}

/* Quantize x (rank/shape) with s; check q, the stored scales' f32 bits, the dequantized values'
 * bits (when xd is not NULL), under both kernel tiers. */
static void check_golden(const char *id, int rank, const int64_t *shape, const float *x,
                         const ember_qscheme *s, const int8_t *want_q, const uint32_t *want_sbits,
                         size_t nscales, const float *xd) {
    for (int tier = 0; tier < 2; tier++) {
        ember__cpu_quant_force_scalar(tier);
        ember_tensor *xt = f32_tensor(rank, shape, x), *q = NULL, *d = NULL;
        TU_OK(ember_quantize(xt, s, &q));
        CU_ASSERT_PTR_NOT_NULL_FATAL(q);
        size_t n = (size_t)ember_tensor_numel(xt);
        int8_t got[64];
        TU_OK(ember_qtensor_values(q, got, 64));
        for (size_t i = 0; i < n; i++) {
            CU_ASSERT_EQUAL(got[i], want_q[i]);
            if (got[i] != want_q[i])
                fprintf(stderr, "  %s tier %d: q[%zu] = %d, want %d\n", id, tier, i, got[i],
                        want_q[i]);
        }
        size_t ns = 0;
        TU_OK(ember_qtensor_scale_count(q, &ns));
        CU_ASSERT_EQUAL(ns, nscales);
        float sc[16];
        TU_OK(ember_qtensor_scales(q, sc, 16));
        for (size_t i = 0; i < nscales; i++) {
            CU_ASSERT_EQUAL(bits(sc[i]), want_sbits[i]);
            if (bits(sc[i]) != want_sbits[i])
                fprintf(stderr, "  %s tier %d: scale %zu = %a (0x%08x), want 0x%08x\n", id, tier, i,
                        (double)sc[i], bits(sc[i]), want_sbits[i]);
        }
        if (xd) {
            TU_OK(ember_dequantize(q, &d));
            float out[64];
            TU_OK(ember_tensor_read(d, out, sizeof out));
            for (size_t i = 0; i < n; i++) {
                CU_ASSERT_EQUAL(bits(out[i]), bits(xd[i]));
                if (bits(out[i]) != bits(xd[i]))
                    fprintf(stderr, "  %s tier %d: x'[%zu] = %.9g, want %.9g\n", id, tier, i,
                            (double)out[i], (double)xd[i]);
            }
        }
        ember_tensor_free(d);
        ember_tensor_free(q);
        ember_tensor_free(xt);
    }
    ember__cpu_quant_force_scalar(0);
}

static void check_bytes(const ember_tensor *q, const uint8_t *want, size_t n) {
    size_t len = 0;
    TU_OK(ember_qtensor_to_bytes(q, NULL, 0, &len));
    CU_ASSERT_EQUAL_FATAL(len, n);
    uint8_t got[256];
    TU_OK(ember_qtensor_to_bytes(q, got, sizeof got, &len));
    CU_ASSERT_EQUAL(memcmp(got, want, n), 0);
    if (memcmp(got, want, n) != 0) {
        fprintf(stderr, "  bytes:");
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %02x", got[i]);
        fprintf(stderr, "\n");
    }
}

/* ---- §6.1 per-tensor Q8S ---- */

static void test_t1_ties(void) {
    const int64_t sh[] = {8};
    const float x[] = {127, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, 0, -127};
    const int8_t q[] = {127, 3, -3, 1, -1, 2, 0, -127};
    const float xd[] = {127, 3, -3, 1, -1, 2, 0, -127};
    const uint32_t s[] = {0x3F800000};
    ember_qscheme sc = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    check_golden("T1", 1, sh, x, &sc, q, s, 1, xd);
}

static void test_t1b_ties(void) {
    const int64_t sh[] = {6};
    const float x[] = {254, 5, -5, 1, 3, -1};
    const int8_t q[] = {127, 3, -3, 1, 2, -1};
    const float xd[] = {254, 6, -6, 2, 4, -2};
    const uint32_t s[] = {0x40000000};
    ember_qscheme sc = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    check_golden("T1b", 1, sh, x, &sc, q, s, 1, xd);
}

static void test_t2_burn(void) {
    const int64_t sh[] = {4};
    const float x[] = {-1.8f, -1.0f, 0.0f, 0.5f};
    const int8_t q[] = {-127, -71, 0, 35};
    const float xd[] = {-1.79999995f, -1.00629926f, 0, 0.496062994f};
    const uint32_t s[] = {0x3C6836D4};
    ember_qscheme sc = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    check_golden("T2", 1, sh, x, &sc, q, s, 1, xd);
    /* burn's serialized TensorData bytes */
    ember_tensor *xt = f32_tensor(1, sh, x), *qt = NULL;
    TU_OK(ember_quantize(xt, &sc, &qt));
    const uint8_t want[] = {0x81, 0xb9, 0x00, 0x23, 0xd4, 0x36, 0x68, 0x3c};
    check_bytes(qt, want, sizeof want);
    /* and back: from_bytes gives the same tensor */
    ember_tensor *q2 = NULL;
    TU_OK(ember_qtensor_from_bytes(ctx, TU_CPU, &sc, 1, sh, want, sizeof want, &q2));
    check_bytes(q2, want, sizeof want);
    int8_t v[4];
    TU_OK(ember_qtensor_values(q2, v, 4));
    CU_ASSERT_EQUAL(memcmp(v, q, 4), 0);
    ember_tensor_free(q2);
    ember_tensor_free(qt);
    ember_tensor_free(xt);
}

static void test_t3_t4_t6(void) {
    ember_qscheme sc = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    {
        const int64_t sh[] = {4};
        const float x[] = {3, 3, 3, 3};
        const int8_t q[] = {127, 127, 127, 127};
        const float xd[] = {3, 3, 3, 3};
        const uint32_t s[] = {0x3CC18306};
        check_golden("T3", 1, sh, x, &sc, q, s, 1, xd);
    }
    {
        const int64_t sh[] = {4};
        const float x[] = {-4, -2, -1, -0.5f};
        const int8_t q[] = {-127, -64, -32, -16};
        const float xd[] = {-4, -2.01574802f, -1.00787401f, -0.503937006f};
        const uint32_t s[] = {0x3D010204};
        check_golden("T4", 1, sh, x, &sc, q, s, 1, xd);
    }
    {
        const int64_t sh[] = {6};
        const float x[] = {0, 1, 2, 3, 4, 5};
        const int8_t q[] = {0, 25, 51, 76, 102, 127};
        const float xd[] = {0, 0.984251976f, 2.00787401f, 2.99212599f, 4.01574802f, 5};
        const uint32_t s[] = {0x3D214285};
        check_golden("T6", 1, sh, x, &sc, q, s, 1, xd);
    }
}

/* T5: an all-zero tensor stores FLT_MIN rounded up to the scale dtype (burn-flex). */
static void test_t5_zeros(void) {
    const int64_t sh[] = {4};
    const float x[] = {0, 0, 0, 0};
    const int8_t q[] = {0, 0, 0, 0};
    const float xd[] = {0, 0, 0, 0};
    ember_qscheme sc = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    const uint32_t s32[] = {0x00800000};
    check_golden("T5 F32", 1, sh, x, &sc, q, s32, 1, xd);
    sc.tensor_scale = EMBER_SCALE_F16;
    const uint32_t s16[] = {bits(0x1p-24f)};
    check_golden("T5 F16", 1, sh, x, &sc, q, s16, 1, xd);
    sc.tensor_scale = EMBER_SCALE_BF16;
    check_golden("T5 BF16", 1, sh, x, &sc, q, s32, 1, xd);
    sc.tensor_scale = EMBER_SCALE_UE4M3;
    const uint32_t s43[] = {bits(0x1p-9f)};
    check_golden("T5 UE4M3", 1, sh, x, &sc, q, s43, 1, xd);
}

/* ---- §6.2 other value types ---- */

static void test_t7_to_t11(void) {
    {
        const int64_t sh[] = {4};
        const float x[] = {-1, 0.5f, 1, -0.25f};
        const int8_t q[] = {-127, 64, 127, -32};
        const uint32_t s[] = {0x3C008081};
        ember_qscheme sc = ember_qscheme_per_tensor(EMBER_Q8F, EMBER_QSTORE_NATIVE);
        check_golden("T7", 1, sh, x, &sc, q, s, 1, NULL);
        sc.store = EMBER_QSTORE_PACKED_U32;
        check_golden("T7 packed", 1, sh, x, &sc, q, s, 1, NULL);
    }
    const int64_t sh8[] = {8};
    const float x4[] = {-1, -0.5f, 0, 0.25f, 0.5f, 0.75f, 1, 0.1f};
    {
        const int8_t q[] = {-7, -3, 0, 2, 3, 5, 7, 1};
        const uint32_t s[] = {0x3E124925};
        const float xd[] = {-1,           -0.428571463f, 0, 0.285714298f,
                            0.428571463f, 0.714285731f,  1, 0.142857149f};
        ember_qscheme sc = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
        check_golden("T8", 1, sh8, x4, &sc, q, s, 1, xd);
        ember_tensor *xt = f32_tensor(1, sh8, x4), *qt = NULL;
        TU_OK(ember_quantize(xt, &sc, &qt));
        const uint8_t want[] = {0xD9, 0x20, 0x53, 0x17, 0x25, 0x49, 0x12, 0x3E};
        check_bytes(qt, want, sizeof want);
        ember_tensor_free(qt);
        ember_tensor_free(xt);
    }
    {
        const int8_t q[] = {-7, -4, 0, 2, 4, 6, 7, 1};
        const uint32_t s[] = {0x3E088889};
        ember_qscheme sc = ember_qscheme_per_tensor(EMBER_Q4F, EMBER_QSTORE_PACKED_U32);
        check_golden("T9", 1, sh8, x4, &sc, q, s, 1, NULL);
    }
    const float x2[] = {-0.9f, -0.4f, 0, 0.6f, 0.3f, 1, -1, 0.49f};
    {
        const int8_t q[] = {-1, 0, 0, 1, 0, 1, -1, 0};
        const uint32_t s[] = {0x3F800000};
        ember_qscheme sc = ember_qscheme_per_tensor(EMBER_Q2S, EMBER_QSTORE_PACKED_U32);
        check_golden("T10", 1, sh8, x2, &sc, q, s, 1, NULL);
        ember_tensor *xt = f32_tensor(1, sh8, x2), *qt = NULL;
        TU_OK(ember_quantize(xt, &sc, &qt));
        const uint8_t want[] = {0x43, 0x34, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3F};
        check_bytes(qt, want, sizeof want);
        ember_tensor_free(qt);
        ember_tensor_free(xt);
    }
    {
        const int8_t q[] = {-1, -1, 0, 1, 0, 1, -2, 1};
        const uint32_t s[] = {0x3F2AAAAB};
        ember_qscheme sc = ember_qscheme_per_tensor(EMBER_Q2F, EMBER_QSTORE_PACKED_U32);
        check_golden("T11", 1, sh8, x2, &sc, q, s, 1, NULL);
    }
}

/* ---- §6.3 block-wise ---- */

static void test_b1(void) {
    const int64_t sh[] = {2, 4}, blk[] = {4};
    const float x[] = {1, -2, 0.5f, 4, 0.1f, 0.2f, -0.3f, 0.05f};
    const int8_t q[] = {32, -64, 16, 127, 42, 85, -127, 21};
    const uint32_t s[] = {0x3D010204, 0x3B1ACF38};
    const float xd[] = {1.00787401f,   -2.01574802f, 0.503937006f,  4,
                        0.0992126018f, 0.200787395f, -0.300000012f, 0.0496063009f};
    ember_qscheme sc = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk);
    check_golden("B1", 2, sh, x, &sc, q, s, 2, xd);
    ember_tensor *xt = f32_tensor(2, sh, x), *qt = NULL;
    TU_OK(ember_quantize(xt, &sc, &qt));
    uint8_t want[16];
    memcpy(want, q, 8);
    memcpy(want + 8, s, 8); /* little-endian host */
    check_bytes(qt, want, 16);
    ember_tensor_free(qt);
    ember_tensor_free(xt);
}

static void test_b2_rect_blocks(void) {
    const int64_t sh[] = {2, 4}, blk[] = {2, 2};
    const float x[] = {1, 2, 10, -20, 3, -4, 5, 0};
    const int8_t q[] = {32, 64, 64, -127, 95, -127, 32, 0};
    const uint32_t s[] = {0x3D010204, bits(20.0f / 127.0f)};
    CU_ASSERT_EQUAL(bits(0.157480314f), bits(20.0f / 127.0f));
    const float xd[] = {1.00787401f, 2.01574802f, 10.0787401f, -20,
                        2.99212599f, -4,          5.03937006f, 0};
    ember_qscheme sc = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, blk);
    check_golden("B2", 2, sh, x, &sc, q, s, 2, xd);
    /* block_of = [0, 0, 1, 1, 0, 0, 1, 1] */
    ember__qlayout L;
    CU_ASSERT_EQUAL_FATAL(ember__qlayout_compute(&sc, 2, sh, &L), EMBER_OK);
    const size_t want_b[] = {0, 0, 1, 1, 0, 0, 1, 1};
    for (size_t i = 0; i < 8; i++)
        CU_ASSERT_EQUAL(ember__block_of(&L, 2, sh, i), want_b[i]);
    CU_ASSERT_EQUAL(L.grid_rank, 2);
    CU_ASSERT_EQUAL(L.grid[0], 1);
    CU_ASSERT_EQUAL(L.grid[1], 2);
}

static ember_qscheme two_level_q8s_4(void) {
    const int64_t blk[] = {4};
    ember_qscheme sc = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk);
    sc.block_scale = EMBER_SCALE_UE4M3;
    sc.tensor_level = 1;
    sc.tensor_scale = EMBER_SCALE_F32;
    return sc;
}

static void test_b3_two_level(void) {
    const int64_t sh[] = {8};
    const float x[] = {1, -2, 0.5f, 4, 0.1f, 0.2f, -0.3f, 0.05f};
    const int8_t q[] = {32, -64, 16, 127, 40, 79, -119, 20};
    const uint32_t s[] = {bits(448.0f), bits(36.0f)};
    const float xd[] = {1.00787401f,  -2.01574802f, 0.503937006f,  4,
                        0.101237357f, 0.199943766f, -0.301181138f, 0.0506186783f};
    ember_qscheme sc = two_level_q8s_4();
    check_golden("B3", 1, sh, x, &sc, q, s, 2, xd);
    ember_tensor *xt = f32_tensor(1, sh, x), *qt = NULL;
    TU_OK(ember_quantize(xt, &sc, &qt));
    float g = 0;
    TU_OK(ember_qtensor_global_scale(qt, &g));
    CU_ASSERT_EQUAL(bits(g), 0x38937005u);
    /* effective scales g * s_b */
    float eff[2];
    TU_OK(ember__qtensor_effective_scales(qt, eff));
    CU_ASSERT_EQUAL(bits(eff[0]), bits(0.0314960629f));
    CU_ASSERT_EQUAL(bits(eff[1]), bits(0.00253093382f));
    uint8_t want[14];
    memcpy(want, q, 8);
    want[8] = 0x7E;
    want[9] = 0x61;
    want[10] = 0x05;
    want[11] = 0x70;
    want[12] = 0x93;
    want[13] = 0x38;
    check_bytes(qt, want, 14);
    /* from_bytes of those 14 bytes dequantizes to the same values */
    ember_tensor *q2 = NULL, *d = NULL;
    TU_OK(ember_qtensor_from_bytes(ctx, TU_CPU, &sc, 1, sh, want, 14, &q2));
    TU_OK(ember_dequantize(q2, &d));
    float out[8];
    TU_OK(ember_tensor_read(d, out, sizeof out));
    for (int i = 0; i < 8; i++)
        CU_ASSERT_EQUAL(bits(out[i]), bits(xd[i]));
    ember_tensor_free(d);
    ember_tensor_free(q2);
    ember_tensor_free(qt);
    ember_tensor_free(xt);
}

/* ---- §6.4 u32 packing ---- */

typedef struct pack_case {
    ember_qvalue v;
    int n;
    int8_t q[16];
    int nwords;
    uint32_t words[2];
} pack_case;

static const pack_case pack_cases[] = {
    {EMBER_Q8S, 4, {-128, 2, -3, 127}, 1, {0x7FFD0280u}},
    {EMBER_Q8S, 5, {-128, 2, -3, 127, 55}, 2, {0x7FFD0280u, 0x00000037u}},
    {EMBER_Q4S, 8, {-7, -3, 0, 1, 2, 3, 7, -1}, 1, {0xF73210D9u}},
    {EMBER_Q4S, 3, {1, 2, 3}, 1, {0x00000321u}},
    {EMBER_Q4S, 8, {-7, -3, 0, 2, 3, 5, 7, 1}, 1, {0x175320D9u}},
    {EMBER_Q2S, 16, {-1, 0, 1, 1, -1, -1, 0, 0, 1, 0, -1, 0, 1, 1, 1, -1}, 1, {0xD5310F53u}},
    {EMBER_Q2S, 8, {-1, 0, 0, 1, 0, 1, -1, 0}, 1, {0x00003443u}},
    {EMBER_Q2F, 4, {-2, -1, 0, 1}, 1, {0x0000004Eu}},
};

static void test_packing_words(void) {
    for (size_t c = 0; c < sizeof pack_cases / sizeof pack_cases[0]; c++) {
        const pack_case *pc = &pack_cases[c];
        ember_qscheme sc = ember_qscheme_per_tensor(pc->v, EMBER_QSTORE_PACKED_U32);
        for (int tier = 0; tier < 2; tier++) {
            const ember__cpu_qkern *k =
                tier ? &ember__cpu_qkern_scalar : ember__cpu_qkern_select(ember__cpu_state_of(ctx));
            uint8_t buf[8];
            memset(buf, 0xAA, sizeof buf);
            k->pack(&sc, (const uint8_t *)pc->q, (size_t)pc->n, buf);
            for (int w = 0; w < pc->nwords; w++) {
                uint32_t got = (uint32_t)buf[4 * w] | (uint32_t)buf[4 * w + 1] << 8 |
                               (uint32_t)buf[4 * w + 2] << 16 | (uint32_t)buf[4 * w + 3] << 24;
                CU_ASSERT_EQUAL(got, pc->words[w]);
                if (got != pc->words[w])
                    fprintf(stderr, "  pack case %zu tier %d word %d: 0x%08x want 0x%08x\n", c,
                            tier, w, got, pc->words[w]);
            }
            int8_t back[16];
            k->unpack(&sc, buf, (size_t)pc->n, (uint8_t *)back);
            CU_ASSERT_EQUAL(memcmp(back, pc->q, (size_t)pc->n), 0);
        }
        /* the same words through from_bytes (any value the bits hold, e.g. -128 under Q8S) */
        const int64_t sh[] = {pc->n};
        uint8_t bytes[12];
        for (int w = 0; w < pc->nwords; w++)
            for (int b = 0; b < 4; b++)
                bytes[4 * w + b] = (uint8_t)(pc->words[w] >> (8 * b));
        const float one = 1.0f;
        memcpy(bytes + 4 * pc->nwords, &one, 4);
        ember_tensor *q = NULL;
        TU_OK(ember_qtensor_from_bytes(ctx, TU_CPU, &sc, 1, sh, bytes, (size_t)(4 * pc->nwords + 4),
                                       &q));
        int8_t v[16];
        TU_OK(ember_qtensor_values(q, v, 16));
        CU_ASSERT_EQUAL(memcmp(v, pc->q, (size_t)pc->n), 0);
        /* dequantize with scale 1 gives the integers back */
        ember_tensor *d = NULL;
        TU_OK(ember_dequantize(q, &d));
        float out[16];
        TU_OK(ember_tensor_read(d, out, sizeof out));
        for (int i = 0; i < pc->n; i++)
            CU_ASSERT_EQUAL(out[i], (float)pc->q[i]);
        ember_tensor_free(d);
        ember_tensor_free(q);
    }
}

/* [3, 3] Q4 PackedU32 occupies 3 words, not 2 (storage_elements rounds up per row). */
static void test_packed_rows(void) {
    const int64_t sh[] = {3, 3};
    ember_qscheme sc = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
    ember__qlayout L;
    CU_ASSERT_EQUAL_FATAL(ember__qlayout_compute(&sc, 2, sh, &L), EMBER_OK);
    CU_ASSERT_EQUAL(L.values_bytes, 12);
    CU_ASSERT_EQUAL(L.total_bytes, 16);
    const float x[] = {1, 2, 3, -1, -2, -3, 7, 0, -7};
    ember_tensor *xt = f32_tensor(2, sh, x), *q = NULL;
    TU_OK(ember_quantize(xt, &sc, &q));
    uint8_t b[16];
    size_t len;
    TU_OK(ember_qtensor_to_bytes(q, b, sizeof b, &len));
    CU_ASSERT_EQUAL(len, 16);
    /* s = 1: row 0 = 0x321, row 1 = 0xDEF (-1, -2, -3), row 2 = 0x907 (7, 0, -7) */
    const uint8_t want[12] = {0x21, 0x03, 0, 0, 0xEF, 0x0D, 0, 0, 0x07, 0x09, 0, 0};
    CU_ASSERT_EQUAL(memcmp(b, want, 12), 0);
    ember_tensor_free(q);
    ember_tensor_free(xt);
}

/* Scale dtype round-up (spec §4.3). */
static void test_round_up(void) {
    CU_ASSERT_EQUAL(ember__scale_round_up(0.1f, EMBER_SCALE_F32), 0.1f);
    /* F16: bits rounded up by 2^13 */
    float r = ember__scale_round_up(0.1f, EMBER_SCALE_F16);
    CU_ASSERT(r >= 0.1f);
    CU_ASSERT_EQUAL(ember__f16_to_f32(ember__f32_to_f16(r)), r);
    CU_ASSERT_EQUAL(bits(r), (bits(0.1f) + 0x1fffu) & ~0x1fffu);
    CU_ASSERT_EQUAL(ember__scale_round_up(1e6f, EMBER_SCALE_F16), 65504.0f);
    CU_ASSERT_EQUAL(ember__scale_round_up(1e-6f, EMBER_SCALE_F16),
                    ceilf(1e-6f * 0x1p24f) * 0x1p-24f);
    CU_ASSERT_EQUAL(ember__scale_round_up(0.3f, EMBER_SCALE_BF16),
                    ember__f32_from_bits((bits(0.3f) + 0xffffu) & ~0xffffu));
    CU_ASSERT_EQUAL(ember__scale_round_up(447.999969f, EMBER_SCALE_UE4M3), 448.0f);
    CU_ASSERT_EQUAL(ember__scale_round_up(33.5999985f, EMBER_SCALE_UE4M3), 36.0f);
    CU_ASSERT_EQUAL(ember__scale_round_up(500.0f, EMBER_SCALE_UE4M3), 448.0f);
    CU_ASSERT_EQUAL(ember__scale_round_up(0x1p-8f + 0x1p-12f, EMBER_SCALE_UE4M3),
                    0x1p-8f + 0x1p-9f);
    CU_ASSERT(isnan(ember__scale_round_up(NAN, EMBER_SCALE_F16)));
    /* stored UE4M3 bytes */
    uint8_t b;
    ember__scale_encode(448.0f, EMBER_SCALE_UE4M3, &b);
    CU_ASSERT_EQUAL(b, 0x7E);
    ember__scale_encode(36.0f, EMBER_SCALE_UE4M3, &b);
    CU_ASSERT_EQUAL(b, 0x61);
}

/* fp8 / fp4 encodings: every bit pattern decodes and re-encodes to itself (finite ones). */
static void test_fp_codecs(void) {
    const ember_qvalue vs[] = {EMBER_E4M3, EMBER_E5M2, EMBER_E2M1};
    for (int k = 0; k < 3; k++) {
        int n = vs[k] == EMBER_E2M1 ? 16 : 256;
        for (int c = 0; c < n; c++) {
            float f = ember__fp_decode(vs[k], (uint8_t)c);
            if (!isfinite(f))
                continue;
            CU_ASSERT_EQUAL(ember__fp_encode(vs[k], f), (uint8_t)c);
        }
    }
    CU_ASSERT_EQUAL(ember__fp_decode(EMBER_E4M3, 0x7E), 448.0f);
    CU_ASSERT_EQUAL(ember__fp_decode(EMBER_E5M2, 0x7B), 57344.0f);
    CU_ASSERT_EQUAL(ember__fp_decode(EMBER_E2M1, 0x7), 6.0f);
    CU_ASSERT_EQUAL(ember__fp_decode(EMBER_E2M1, 0x1), 0.5f);
    CU_ASSERT_EQUAL(ember__fp_decode(EMBER_E4M3, 0x01), 0x1p-9f);
    /* nearest, ties to even: 2.5 -> 2 (E2M1 0x4), 3.5 -> 4 (0x6), 5 -> 4 (tie, even mantissa) */
    CU_ASSERT_EQUAL(ember__fp_encode(EMBER_E2M1, 2.5f), 0x4);
    CU_ASSERT_EQUAL(ember__fp_encode(EMBER_E2M1, 3.5f), 0x6);
    CU_ASSERT_EQUAL(ember__fp_encode(EMBER_E2M1, 5.0f), 0x6);
    CU_ASSERT_EQUAL(ember__fp_encode(EMBER_E2M1, 0.25f), 0x0);
    CU_ASSERT_EQUAL(ember__fp_encode(EMBER_E2M1, 0.75f), 0x2);
    CU_ASSERT_EQUAL(ember__fp_encode(EMBER_E2M1, -6.0f), 0xF);
    CU_ASSERT_EQUAL(ember__fp_encode(EMBER_E4M3, 0x1p-10f), 0x00); /* tie to even: 0 */
    CU_ASSERT_EQUAL(ember__fp_encode(EMBER_E4M3, 0x1p-10f * 3), 0x02);
    CU_ASSERT_EQUAL(ember__fp_encode(EMBER_E4M3, -0.0f), 0x80);
}

/* An E2M1 NVFP4-style tensor: per-tensor scale, fp values clamp and encode to nearest. */
static void test_fp_quantize(void) {
    const int64_t sh[] = {8};
    const float x[] = {-6, -3, -1.25f, 0, 0.2f, 1, 2.9f, 6};
    ember_qscheme sc = ember_qscheme_per_tensor(EMBER_E2M1, EMBER_QSTORE_PACKED_NATIVE);
    /* s = 6/6 = 1; codes of the nearest values -6, -3, -1 (1.25 -> 1), 0, 0 (0.2), 1, 3, 6 */
    const int8_t q[] = {0xF, 0xD, 0xA, 0x0, 0x0, 0x2, 0x5, 0x7};
    const uint32_t s[] = {0x3F800000};
    const float xd[] = {-6, -3, -1, 0, 0, 1, 3, 6};
    check_golden("E2M1", 1, sh, x, &sc, q, s, 1, xd);
    ember_tensor *xt = f32_tensor(1, sh, x), *qt = NULL;
    TU_OK(ember_quantize(xt, &sc, &qt));
    const uint8_t want[] = {0xDF, 0x0A, 0x20, 0x75, 0x00, 0x00, 0x80, 0x3F};
    check_bytes(qt, want, sizeof want);
    ember_tensor_free(qt);
    ember_tensor_free(xt);
}

static CU_TestInfo golden_tests[] = {
    {"T1 ties (half away from zero)", test_t1_ties},
    {"T1b ties", test_t1b_ties},
    {"T2 burn test + bytes", test_t2_burn},
    {"T3 T4 T6", test_t3_t4_t6},
    {"T5 zeros guard", test_t5_zeros},
    {"T7-T11 value types", test_t7_to_t11},
    {"B1 per-block rows", test_b1},
    {"B2 rectangular blocks", test_b2_rect_blocks},
    {"B3 two-level", test_b3_two_level},
    {"6.4 packing words", test_packing_words},
    {"packed rows pad per row", test_packed_rows},
    {"scale round-up", test_round_up},
    {"fp codecs", test_fp_codecs},
    {"fp quantize E2M1", test_fp_quantize},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"quant golden vectors", suite_init, suite_clean, NULL, NULL, golden_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return tu_run("test_quant", suites); }
