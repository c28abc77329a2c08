/* tests/test_quant_props.c: properties of quantize / dequantize on fresh random tensors, for every
 * valid (value, level, store) combination and every scale dtype:
 *   - the CPU backend's bytes equal quant/reference.c's, with the AVX-512 and the scalar tier;
 *   - dequantize equals the reference bit for bit, on both tiers;
 *   - |x - x'| <= e/2 (+ the rounding of the f32 operations) for integer values, half a step of
 *     the fp format for fp values (e = the block's effective scale);
 *   - quantize(dequantize(q)) == q: with q's own scales every code comes back, and for one-level
 *     schemes ember_quantize_static(dequantize(q), stored scales) reproduces q's bytes exactly;
 *   - to_bytes o from_bytes is the identity (also on random bytes: any bits are accepted).
 * Static quantization with partial edge blocks is checked against the reference too. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backends/cpu/cpu_quant.h"
#include "quant/quant_impl.h"
#include "test_util.h"

static ember_context *ctx;
static uint64_t rng;

static int suite_init(void) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    rng = tu_seed();
    return ember_context_create(&o, &ctx) == EMBER_OK ? 0 : 1;
}
static int suite_clean(void) {
    ember_context_destroy(ctx);
    ember__cpu_quant_force_scalar(0);
    return 0;
}

typedef struct level {
    const char *name;
    int block_rank;
    int64_t block[3];
    int two;
    ember_scale_dtype sd;
    /* shapes that divide into the blocks */
    int rank[2];
    int64_t shape[2][3];
} level;

static const level levels[] = {
    {"per-tensor F32", 0, {0}, 0, EMBER_SCALE_F32, {2, 1}, {{7, 45}, {70001}}},
    {"per-tensor F16", 0, {0}, 0, EMBER_SCALE_F16, {3, 1}, {{3, 2, 100}, {129}}},
    {"per-tensor BF16", 0, {0}, 0, EMBER_SCALE_BF16, {2, 1}, {{5, 33}, {1000}}},
    {"per-tensor UE4M3", 0, {0}, 0, EMBER_SCALE_UE4M3, {2, 1}, {{9, 17}, {66}}},
    {"block [32] F32", 1, {32}, 0, EMBER_SCALE_F32, {2, 3}, {{6, 96}, {2, 3, 64}}},
    {"block [32] F16", 1, {32}, 0, EMBER_SCALE_F16, {2, 1}, {{4, 70016}, {160}}},
    {"block [1,8] BF16", 2, {1, 8}, 0, EMBER_SCALE_BF16, {2, 1}, {{5, 24}, {40}}},
    {"block [32] UE4M3", 1, {32}, 0, EMBER_SCALE_UE4M3, {2, 1}, {{3, 128}, {96}}},
    {"block [2,16] F32", 2, {2, 16}, 0, EMBER_SCALE_F32, {2, 3}, {{4, 48}, {4, 6, 48}}},
    {"block [2,4,8] F16", 3, {2, 4, 8}, 0, EMBER_SCALE_F16, {3, 3}, {{2, 8, 16}, {4, 4, 8}}},
    {"block [3] F32", 1, {3}, 0, EMBER_SCALE_F32, {2, 1}, {{4, 9}, {300}}},
    {"two-level [16] UE4M3", 1, {16}, 1, EMBER_SCALE_UE4M3, {2, 1}, {{4, 64}, {70016}}},
    {"two-level [16] F16", 1, {16}, 1, EMBER_SCALE_F16, {2, 1}, {{3, 32}, {48}}},
    {"two-level [2,8] UE4M3", 2, {2, 8}, 1, EMBER_SCALE_UE4M3, {2, 2}, {{4, 16}, {6, 24}}},
    /* blocks across rows, one column wide (a weight's blocks along K): the CPU's tiles hold whole
     * block rows, or a block row's columns in several tiles when the rows are long (8 x 20000) */
    {"block [32,1] F16", 2, {32, 1}, 0, EMBER_SCALE_F16, {2, 3}, {{64, 300}, {2, 64, 70}}},
    {"block [4,1] F32", 2, {4, 1}, 0, EMBER_SCALE_F32, {2, 2}, {{8, 20000}, {12, 7}}},
    {"two-level [16,1] F16", 2, {16, 1}, 1, EMBER_SCALE_F16, {2, 2}, {{32, 40}, {48, 3}}},
    {"block [5,1] BF16", 2, {5, 1}, 0, EMBER_SCALE_BF16, {2, 3}, {{15, 9}, {3, 10, 33}}},
};
#define NLEVELS (sizeof levels / sizeof levels[0])

static ember_qscheme make_scheme(ember_qvalue v, ember_qstore st, const level *lv) {
    ember_qscheme s = lv->block_rank ? ember_qscheme_per_block(v, st, lv->block_rank, lv->block)
                                     : ember_qscheme_per_tensor(v, st);
    if (lv->block_rank) {
        s.block_scale = lv->sd;
        if (lv->two) {
            s.tensor_level = 1;
            s.tensor_scale = EMBER_SCALE_F32;
        }
    } else {
        s.tensor_scale = lv->sd;
    }
    return s;
}

static size_t numel_of(int rank, const int64_t *shape) {
    size_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= (size_t)shape[d];
    return n;
}

/* Random values with a random magnitude per tensor, a few exact zeros, and per-row scale spread
 * so that blocks get different scales. */
static void fill(float *x, size_t n) {
    static const float mags[] = {1e-3f, 1.0f, 37.5f, 1000.0f};
    float m = mags[tu_next(&rng) % 4];
    tu_rand_f32(&rng, x, n, -m, m);
    for (size_t i = 0; i < n; i++) {
        if (tu_next(&rng) % 97 == 0)
            x[i] = 0.0f;
        if ((i / 40) % 3 == 1)
            x[i] *= 0.01f;
    }
}

static int failures;

static void report(const char *what, ember_qvalue v, ember_qstore st, const level *lv, int rank,
                   const int64_t *shape) {
    char sb[64];
    if (failures++ < 20)
        fprintf(stderr, "  FAIL %s: %s/%s %s shape %s\n", what, ember_qvalue_name(v),
                ember_qstore_name(st), lv->name, ember__shape_str(rank, shape, sb, sizeof sb));
}

/* Half a step of the fp format around |v| (plus the subnormal floor). */
static float fp_half_step(ember_qvalue v, float a) {
    int m = v == EMBER_E4M3 ? 3 : v == EMBER_E5M2 ? 2 : 1;
    int emin = v == EMBER_E4M3 ? -6 : v == EMBER_E5M2 ? -14 : 0;
    return fmaxf(a * ldexpf(1.0f, -(m + 1)), ldexpf(1.0f, emin - m - 1));
}

static void check_combo(ember_qvalue v, ember_qstore st, const level *lv, int rank,
                        const int64_t *shape) {
    ember_qscheme s = make_scheme(v, st, lv);
    const size_t n = numel_of(rank, shape);
    ember__qlayout L;
    CU_ASSERT_EQUAL_FATAL(ember__qlayout_compute(&s, rank, shape, &L), EMBER_OK);
    float *x = malloc(n * sizeof *x), *ref_d = malloc(n * sizeof *ref_d);
    float *d = malloc(n * sizeof *d), *eff = malloc(L.nscales * sizeof *eff);
    uint8_t *ref = malloc(L.total_bytes), *got = malloc(L.total_bytes);
    uint8_t *got2 = malloc(L.total_bytes);
    int8_t *codes = malloc(n);
    CU_ASSERT_FATAL(x && ref_d && d && eff && ref && got && got2 && codes);
    fill(x, n);
    CU_ASSERT_EQUAL_FATAL(ember__qref_quantize(&s, &L, rank, shape, x, NULL, ref), EMBER_OK);
    ember__qref_dequantize(&s, &L, rank, shape, ref, ref_d);
    ember__qref_effective_scales(&s, &L, ref, eff);

    ember_tensor *xt = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, rank, shape, x, &xt));
    for (int tier = 0; tier < 2; tier++) {
        ember__cpu_quant_force_scalar(tier);
        ember_tensor *q = NULL, *dt = NULL;
        TU_OK(ember_quantize(xt, &s, &q));
        if (!q)
            break;
        size_t len = 0;
        TU_OK(ember_qtensor_to_bytes(q, got, L.total_bytes, &len));
        CU_ASSERT_EQUAL(len, L.total_bytes);
        if (memcmp(got, ref, L.total_bytes) != 0) {
            CU_FAIL("quantize bytes differ from the reference");
            report(tier ? "bytes (scalar tier)" : "bytes (best tier)", v, st, lv, rank, shape);
        }
        TU_OK(ember_dequantize(q, &dt));
        TU_OK(ember_tensor_read(dt, d, n * sizeof *d));
        if (memcmp(d, ref_d, n * sizeof *d) != 0) {
            CU_FAIL("dequantize differs from the reference");
            report(tier ? "dequantize (scalar tier)" : "dequantize (best tier)", v, st, lv, rank,
                   shape);
        }
        /* to_bytes o from_bytes */
        ember_tensor *q2 = NULL;
        TU_OK(ember_qtensor_from_bytes(ctx, TU_CPU, &s, rank, shape, got, len, &q2));
        TU_OK(ember_qtensor_to_bytes(q2, got2, L.total_bytes, &len));
        CU_ASSERT_EQUAL(memcmp(got, got2, L.total_bytes), 0);
        /* quantize_static(dequantize(q), stored scales) == q for one-level schemes */
        if (!lv->two && tier == 0) {
            const int64_t one = 1;
            ember_tensor *sct = NULL, *q3 = NULL;
            if (lv->block_rank)
                TU_OK(
                    ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, L.grid_rank, L.grid, eff, &sct));
            else
                TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 1, &one, eff, &sct));
            TU_OK(ember_quantize_static(dt, &s, sct, &q3));
            if (q3) {
                TU_OK(ember_qtensor_to_bytes(q3, got2, L.total_bytes, &len));
                if (memcmp(got, got2, L.total_bytes) != 0) {
                    CU_FAIL("quantize_static(dequantize(q)) != q");
                    report("requantize", v, st, lv, rank, shape);
                }
            }
            ember_tensor_free(q3);
            ember_tensor_free(sct);
        }
        ember_tensor_free(q2);
        ember_tensor_free(dt);
        ember_tensor_free(q);
    }
    ember__cpu_quant_force_scalar(0);

    /* error bound and code round trip, element by element, with the effective scales */
    const ember__qvalue_info *vi = ember__qvalue_get_info(v);
    ember_tensor *qq = NULL;
    TU_OK(ember_qtensor_from_bytes(ctx, TU_CPU, &s, rank, shape, ref, L.total_bytes, &qq));
    TU_OK(ember_qtensor_values(qq, codes, n));
    int bad_bound = 0, bad_rt = 0;
    for (size_t i = 0; i < n; i++) {
        float e = eff[ember__block_of(&L, rank, shape, i)];
        float err = fabsf(x[i] - ref_d[i]);
        float tol = vi->is_fp ? e * fp_half_step(v, fabsf(x[i] / e)) * 1.0001f + fabsf(x[i]) * 1e-6f
                              : e * 0.5f * 1.0001f + fabsf(x[i]) * 1e-6f;
        /* a raw scale above the scale dtype's max saturates (UE4M3 448): values past the range
         * clamp. An unsaturated scale keeps |x|/e within half_range up to the f32 rounding of the
         * scale (a relative 1e-7), so anything beyond 1e-6 is saturation (seed 2176619814 gave
         * 1.50146 for Q2F with a saturated UE4M3 scale: within the old 0.1% slack). */
        int saturated = fabsf(x[i]) / e > vi->half_range * 1.000001f;
        if (!(err <= tol) && !saturated)
            bad_bound++;
        uint8_t c2 = ember__quantize_code(v, vi, ref_d[i], e);
        if (c2 != (uint8_t)codes[i])
            bad_rt++;
    }
    CU_ASSERT_EQUAL(bad_bound, 0);
    if (bad_bound)
        report("error bound", v, st, lv, rank, shape);
    CU_ASSERT_EQUAL(bad_rt, 0);
    if (bad_rt)
        report("quantize(dequantize(q)) codes", v, st, lv, rank, shape);
    ember_tensor_free(qq);
    ember_tensor_free(xt);
    free(x);
    free(ref_d);
    free(d);
    free(eff);
    free(ref);
    free(got);
    free(got2);
    free(codes);
}

static void test_all_combinations(void) {
    for (int v = 0; v < EMBER_QVALUE_COUNT; v++)
        for (int st = 0; st < EMBER_QSTORE_COUNT; st++)
            for (size_t l = 0; l < NLEVELS; l++) {
                ember_qscheme s = make_scheme((ember_qvalue)v, (ember_qstore)st, &levels[l]);
                if (!ember__qscheme_is_valid(&s))
                    continue;
                for (int k = 0; k < 2; k++)
                    check_combo((ember_qvalue)v, (ember_qstore)st, &levels[l], levels[l].rank[k],
                                levels[l].shape[k]);
            }
}

/* Static scales with partial edge blocks: each partial block has its own scale. blk {2, 8} (grid
 * 3 x 5), or {2, 1} (3 x 37: blocks across rows one column wide, whose last block row, 1 row of
 * 2, ends inside the CPU's tile). */
static void static_partial_blocks(int bi) {
    const int64_t shape[] = {5, 37};
    const int64_t blk[] = {2, bi ? 1 : 8};
    const int64_t g1 = bi ? 37 : 5;
    const ember_qvalue vs[] = {EMBER_Q8S, EMBER_Q4F, EMBER_Q2S, EMBER_E4M3, EMBER_E2M1};
    const ember_qstore sts[] = {EMBER_QSTORE_NATIVE, EMBER_QSTORE_PACKED_U32,
                                EMBER_QSTORE_PACKED_U32, EMBER_QSTORE_NATIVE,
                                EMBER_QSTORE_PACKED_NATIVE};
    const ember_scale_dtype sds[] = {EMBER_SCALE_F32, EMBER_SCALE_F16, EMBER_SCALE_BF16,
                                     EMBER_SCALE_UE4M3};
    for (int k = 0; k < 5; k++)
        for (int sdi = 0; sdi < 4; sdi++)
            for (int two = 0; two < 2; two++) {
                ember_qscheme s = ember_qscheme_per_block(vs[k], sts[k], 2, blk);
                s.block_scale = sds[sdi];
                s.tensor_level = two;
                if (!ember__qscheme_is_valid(&s))
                    continue;
                ember__qlayout L;
                CU_ASSERT_EQUAL_FATAL(ember__qlayout_compute(&s, 2, shape, &L), EMBER_OK);
                CU_ASSERT_EQUAL(L.grid[0], 3);
                CU_ASSERT_EQUAL(L.grid[1], g1);
                float x[5 * 37], raw[3 * 37];
                fill(x, 5 * 37);
                tu_rand_f32(&rng, raw, (size_t)(3 * g1), 0.001f, 0.5f);
                raw[3] = 0.0f; /* a zero scale takes the FLT_MIN guard */
                uint8_t ref[1024], got[1024];
                CU_ASSERT_FATAL(L.total_bytes <= sizeof ref);
                CU_ASSERT_EQUAL(ember__qref_quantize(&s, &L, 2, shape, x, raw, ref), EMBER_OK);
                ember_tensor *xt = NULL, *sc = NULL;
                TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, shape, x, &xt));
                TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, L.grid, raw, &sc));
                for (int tier = 0; tier < 2; tier++) {
                    ember__cpu_quant_force_scalar(tier);
                    ember_tensor *q = NULL;
                    TU_OK(ember_quantize_static(xt, &s, sc, &q));
                    size_t len = 0;
                    TU_OK(ember_qtensor_to_bytes(q, got, sizeof got, &len));
                    CU_ASSERT_EQUAL(len, L.total_bytes);
                    CU_ASSERT_EQUAL(memcmp(got, ref, L.total_bytes), 0);
                    ember_tensor_free(q);
                }
                ember__cpu_quant_force_scalar(0);
                ember_tensor_free(sc);
                ember_tensor_free(xt);
            }
}

static void test_static_partial_blocks(void) {
    for (int bi = 0; bi < 2; bi++)
        static_partial_blocks(bi);
}

/* from_bytes accepts any bits; to_bytes gives them back unchanged. */
static void test_random_bytes_identity(void) {
    const int64_t shape[] = {3, 13};
    const int64_t blk[] = {4};
    for (int v = 0; v < EMBER_QVALUE_COUNT; v++)
        for (int st = 0; st < EMBER_QSTORE_COUNT; st++) {
            ember_qscheme s = ember_qscheme_per_block((ember_qvalue)v, (ember_qstore)st, 1, blk);
            if (!ember__qscheme_is_valid(&s))
                continue;
            ember__qlayout L;
            CU_ASSERT_EQUAL_FATAL(ember__qlayout_compute(&s, 2, shape, &L), EMBER_OK);
            uint8_t b[256], back[256];
            for (size_t i = 0; i < L.total_bytes; i++)
                b[i] = (uint8_t)tu_next(&rng);
            ember_tensor *q = NULL;
            TU_OK(ember_qtensor_from_bytes(ctx, TU_CPU, &s, 2, shape, b, L.total_bytes, &q));
            size_t len = 0;
            TU_OK(ember_qtensor_to_bytes(q, back, sizeof back, &len));
            CU_ASSERT_EQUAL(len, L.total_bytes);
            CU_ASSERT_EQUAL(memcmp(b, back, len), 0);
            ember_tensor_free(q);
        }
}

/* Vector and scalar kernels on odd lengths and offsets, directly. */
static void test_kernels_direct(void) {
    const ember__cpu_qkern *best = ember__cpu_qkern_select(ember__cpu_state_of(ctx));
    const ember__cpu_qkern *sc = &ember__cpu_qkern_scalar;
    fprintf(stderr, "  (best CPU quant tier here: %s)\n", best->name);
#if defined(__x86_64__)
    /* AVX-512 picks the vector kernels unless the context is capped below them (the cap may come
     * from EMBER_CPU_MAX_ISA) */
    const char *cap = ember__cpu_state_of(ctx)->max_isa;
    const int capped = strcmp(cap, "scalar") == 0 || strcmp(cap, "avx2") == 0;
    if (!capped && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        CU_ASSERT_STRING_EQUAL(best->name, "avx512");
#endif
    enum { N = 1000 };
    float x[N], e[N], o1[N], o2[N];
    int8_t q1[N], q2[N];
    uint32_t m1[N], m2[N];
    for (int rep = 0; rep < 20; rep++) {
        fill(x, N);
        tu_rand_f32(&rng, e, N, 1e-4f, 2.0f);
        x[5] = 0.5f * e[0]; /* exact ties */
        x[6] = -2.5f * e[0];
        size_t len = (size_t)(tu_next(&rng) % N) + 1, bl = (size_t)(tu_next(&rng) % 70);
        if (rep % 4 == 0)
            bl = 1; /* a scale per value (blocks across rows): the kernels' own path */
        best->amax_blocks(x, len, bl, m1);
        sc->amax_blocks(x, len, bl, m2);
        size_t nb = bl ? (len + bl - 1) / bl : 1;
        CU_ASSERT_EQUAL(memcmp(m1, m2, nb * sizeof m1[0]), 0);
        /* a column maximum over two rows: from random maxima, then x's magnitudes */
        for (size_t i = 0; i < len; i++)
            m1[i] = m2[i] = (uint32_t)(tu_next(&rng) % 0x40000000u);
        best->amax_acc(x, len, m1);
        sc->amax_acc(x, len, m2);
        CU_ASSERT_EQUAL(memcmp(m1, m2, len * sizeof m1[0]), 0);
        for (size_t i = 0; i < len; i++) {
            uint32_t b;
            memcpy(&b, &x[i], 4);
            b &= 0x7fffffffu;
            CU_ASSERT_FATAL(m2[i] >= b);
        }
        best->quant_int_blocks(x, len, bl, e, -127, 127, q1);
        sc->quant_int_blocks(x, len, bl, e, -127, 127, q2);
        CU_ASSERT_EQUAL(memcmp(q1, q2, len), 0);
        best->dequant_int_blocks(q1, len, bl, e, o1);
        sc->dequant_int_blocks(q1, len, bl, e, o2);
        CU_ASSERT_EQUAL(memcmp(o1, o2, len * sizeof o1[0]), 0);
        const ember_qvalue vs[] = {EMBER_Q4S, EMBER_Q2F, EMBER_E2M1, EMBER_Q8F};
        for (int k = 0; k < 4; k++) {
            ember_qscheme s = ember_qscheme_per_tensor(vs[k], vs[k] == EMBER_E2M1 && rep % 2
                                                                  ? EMBER_QSTORE_PACKED_NATIVE
                                                                  : EMBER_QSTORE_PACKED_U32);
            uint8_t codes[N], p1[N + 8], p2[N + 8], u1[N], u2[N];
            const ember__qvalue_info *vi = ember__qvalue_get_info(vs[k]);
            for (size_t i = 0; i < len; i++) {
                codes[i] = (uint8_t)(tu_next(&rng) & ((1u << vi->bits) - 1));
                if (!vi->is_fp && vi->bits < 8 && (codes[i] & (1u << (vi->bits - 1))))
                    codes[i] |= (uint8_t)(0xff << vi->bits);
            }
            size_t pb = ember__packed_row_bytes(&s, (int64_t)len);
            best->pack(&s, codes, len, p1);
            sc->pack(&s, codes, len, p2);
            CU_ASSERT_EQUAL(memcmp(p1, p2, pb), 0);
            best->unpack(&s, p1, len, u1);
            sc->unpack(&s, p1, len, u2);
            CU_ASSERT_EQUAL(memcmp(u1, u2, len), 0);
            CU_ASSERT_EQUAL(memcmp(u1, codes, len), 0);
        }
    }
}

/* Near-ties: x within a few ulps of (k + 0.5) * e, for scales across the f32 range (tiny,
 * subnormal and huge ones included): the vector tier must round exactly as the scalar division. */
/* The scale decoder of the best tier: ember__scale_decode's bits for every F16 and BF16 pattern
 * (NaN payloads, signaling ones included, subnormals, Inf), random F32 bits, UE4M3 and UE8M0
 * bytes, with and without a global scale, at lengths that leave tails */
static void test_scales_decode(void) {
    const ember__cpu_qkern *k = ember__cpu_qkern_select(ember__cpu_state_of(ctx));
    enum { N = 65536 + 7 };
    uint8_t *src = malloc((size_t)N * 4);
    float *out = malloc((size_t)N * sizeof(float));
    CU_ASSERT_FATAL(src && out);
    const ember_scale_dtype ds[] = {EMBER_SCALE_F16, EMBER_SCALE_BF16, EMBER_SCALE_F32,
                                    EMBER_SCALE_UE4M3, EMBER_SCALE_UE8M0};
    for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++) {
        const ember_scale_dtype d = ds[di];
        const size_t sz = ember__scale_dtype_size(d);
        for (size_t i = 0; i < (size_t)N; i++) { /* 2-byte dtypes: every pattern in turn */
            const uint32_t v = sz == 2 ? (uint32_t)(i & 0xffff) : (uint32_t)tu_next(&rng);
            for (size_t b = 0; b < sz; b++)
                src[i * sz + b] = (uint8_t)(v >> (8 * b));
        }
        for (int two = 0; two < 2; two++)
            for (size_t n = N; n + 40 > N; n -= 13) {
                const float g = two ? 0.37f : 1.0f;
                k->scales_f32(src, n, d, two, g, out);
                size_t bad = 0;
                for (size_t i = 0; i < n; i++) {
                    const float t = ember__scale_decode(src + i * sz, d), w = two ? g * t : t;
                    bad += memcmp(&w, &out[i], 4) != 0;
                }
                CU_ASSERT_EQUAL(bad, 0);
                if (bad)
                    fprintf(stderr, "  scales_f32 (%s) dtype %d two %d n %zu: %zu differ\n",
                            k->name, (int)d, two, n, bad);
            }
    }
    free(src);
    free(out);
}

static void test_near_ties(void) {
    const ember__cpu_qkern *best = ember__cpu_qkern_select(ember__cpu_state_of(ctx));
    const ember__cpu_qkern *sc = &ember__cpu_qkern_scalar;
    enum { N = 4096 };
    static float x[N];
    static int8_t q1[N], q2[N];
    const float los[] = {-127, -128, -7, -8, -1, -2}, his[] = {127, 127, 7, 7, 1, 1};
    long mismatches = 0;
    for (int rep = 0; rep < 200; rep++) {
        float e;
        uint64_t pick = tu_next(&rng) % 8;
        if (pick == 0)
            e = ldexpf(1.0f + (float)(tu_next(&rng) % 1000) / 1000.0f,
                       -130 + (int)(tu_next(&rng) % 10));
        else if (pick == 1)
            e = ldexpf(1.0f + (float)(tu_next(&rng) % 1000) / 1000.0f,
                       120 + (int)(tu_next(&rng) % 7));
        else
            e = ldexpf(1.0f + (float)(tu_next(&rng) % 100000) / 100000.0f,
                       (int)(tu_next(&rng) % 60) - 30);
        for (int i = 0; i < N; i++) {
            float k = (float)((int)(tu_next(&rng) % 1100) - 550) + 0.5f;
            float v = k * e;
            int steps = (int)(tu_next(&rng) % 9) - 4;
            for (int j = 0; j < steps; j++)
                v = nextafterf(v, INFINITY);
            for (int j = 0; j > steps; j--)
                v = nextafterf(v, -INFINITY);
            x[i] = isfinite(v) ? v : 0.0f;
        }
        const int r = rep % 6;
        best->quant_int_blocks(x, N, 0, &e, los[r], his[r], q1);
        sc->quant_int_blocks(x, N, 0, &e, los[r], his[r], q2);
        for (int i = 0; i < N; i++)
            mismatches += q1[i] != q2[i];
    }
    CU_ASSERT_EQUAL(mismatches, 0);
}

/* Any thread count splits the work into the same bytes; cpu_max_isa "scalar" selects the scalar
 * tier. */
static void test_threads_and_isa_cap(void) {
    const int nts[] = {1, 3, 7};
    const int64_t big[] = {3, 70016}, rect_shape[] = {6, 4, 96}, b32[] = {32}, b2[] = {2, 2, 16};
    enum { NBIG = 3 * 70016 };
    static float x[NBIG];
    fill(x, NBIG);
    ember_qscheme schemes[3] = {ember_qscheme_per_tensor(EMBER_Q4F, EMBER_QSTORE_PACKED_U32),
                                ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, b32),
                                ember_qscheme_per_block(EMBER_Q2S, EMBER_QSTORE_PACKED_U32, 3, b2)};
    const int64_t *shapes[3] = {big, big, rect_shape};
    const int ranks[3] = {2, 2, 3};
    for (int k = 0; k < 3; k++) {
        ember__qlayout L;
        CU_ASSERT_EQUAL_FATAL(ember__qlayout_compute(&schemes[k], ranks[k], shapes[k], &L),
                              EMBER_OK);
        uint8_t *ref = malloc(L.total_bytes), *got = malloc(L.total_bytes);
        CU_ASSERT_FATAL(ref && got);
        CU_ASSERT_EQUAL(ember__qref_quantize(&schemes[k], &L, ranks[k], shapes[k], x, NULL, ref),
                        EMBER_OK);
        for (int t = 0; t < 3; t++) {
            ember_options o = ember_options_default();
            o.enable_opencl = 0;
            o.num_threads = nts[t];
            o.cpu_max_isa = t == 2 ? "scalar" : NULL;
            ember_context *c2 = NULL;
            TU_OK(ember_context_create(&o, &c2));
            if (t == 2)
                CU_ASSERT_STRING_EQUAL(ember__cpu_qkern_select(ember__cpu_state_of(c2))->name,
                                       "scalar");
            ember_tensor *xt = NULL, *q = NULL;
            TU_OK(ember_tensor_from_data(c2, TU_CPU, EMBER_F32, ranks[k], shapes[k], x, &xt));
            TU_OK(ember_quantize(xt, &schemes[k], &q));
            size_t len = 0;
            TU_OK(ember_qtensor_to_bytes(q, got, L.total_bytes, &len));
            CU_ASSERT_EQUAL(memcmp(got, ref, L.total_bytes), 0);
            ember_tensor_free(q);
            ember_tensor_free(xt);
            ember_context_destroy(c2);
        }
        free(ref);
        free(got);
    }
}

/* F16 / BF16 input converts to F32 first; F16 / BF16 output rounds the f32 result. */
static void test_half_io(void) {
    const int64_t shape[] = {4, 40};
    float x[160];
    fill(x, 160);
    uint16_t h[160];
    float xf[160];
    for (int i = 0; i < 160; i++) {
        h[i] = ember__f32_to_f16(x[i]);
        xf[i] = ember__f16_to_f32(h[i]);
    }
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_tensor *xh = NULL, *xt = NULL, *q1 = NULL, *q2 = NULL, *d = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F16, 2, shape, h, &xh));
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, shape, xf, &xt));
    TU_OK(ember_quantize(xh, &s, &q1));
    TU_OK(ember_quantize(xt, &s, &q2));
    uint8_t b1[256], b2[256];
    size_t l1, l2;
    TU_OK(ember_qtensor_to_bytes(q1, b1, sizeof b1, &l1));
    TU_OK(ember_qtensor_to_bytes(q2, b2, sizeof b2, &l2));
    CU_ASSERT_EQUAL(l1, l2);
    CU_ASSERT_EQUAL(memcmp(b1, b2, l1), 0);
    float f[160];
    ember_tensor *df = NULL;
    TU_OK(ember_dequantize(q1, &df));
    TU_OK(ember_tensor_read(df, f, sizeof f));
    const ember_dtype dts[] = {EMBER_F16, EMBER_BF16};
    for (int k = 0; k < 2; k++) {
        TU_OK(ember_dequantize_to(q1, dts[k], &d));
        CU_ASSERT_EQUAL(ember_tensor_dtype(d), dts[k]);
        uint16_t o[160];
        TU_OK(ember_tensor_read(d, o, sizeof o));
        for (int i = 0; i < 160; i++)
            CU_ASSERT_EQUAL(o[i], k == 0 ? ember__f32_to_f16(f[i]) : ember__f32_to_bf16(f[i]));
        ember_tensor_free(d);
        d = NULL;
    }
    ember_tensor_free(df);
    ember_tensor_free(q1);
    ember_tensor_free(q2);
    ember_tensor_free(xh);
    ember_tensor_free(xt);
}

/* Quantized tensors record their producer; backend_dequantize on it works. */
static void test_producer(void) {
    const int64_t shape[] = {8};
    float x[8];
    fill(x, 8);
    ember_tensor *xt = NULL, *q = NULL, *d = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 1, shape, x, &xt));
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8F, EMBER_QSTORE_PACKED_U32);
    TU_OK(ember_quantize(xt, &s, &q));
    CU_ASSERT_EQUAL(ember_tensor_dtype(q), EMBER_QFLOAT);
    CU_ASSERT_EQUAL(ember_tensor_device(q).backend, EMBER_BACKEND_CPU);
    CU_ASSERT_EQUAL(ember_tensor_autodiff(q), EMBER_AUTODIFF_DISABLED);
    ember_qscheme back;
    TU_OK(ember_tensor_qscheme(q, &back));
    CU_ASSERT_EQUAL(memcmp(&back, &s, sizeof s), 0);
    TU_OK(ember_backend_dequantize(ctx, TU_CPU, q, &d));
    CU_ASSERT_EQUAL(ember_tensor_dtype(d), EMBER_F32);
    ember_tensor_free(d);
    ember_tensor_free(q);
    ember_tensor_free(xt);
}

/* Zero-sized tensors quantize to values-free buffers. */
static void test_empty(void) {
    const int64_t shape[] = {0, 32};
    const int64_t blk[] = {32};
    ember_tensor *xt = NULL, *q = NULL, *d = NULL;
    float dummy = 0;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, shape, &dummy, &xt));
    ember_qscheme s = ember_qscheme_per_block(EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 1, blk);
    TU_OK(ember_quantize(xt, &s, &q));
    size_t len = 99, n = 99;
    TU_OK(ember_qtensor_to_bytes(q, NULL, 0, &len));
    CU_ASSERT_EQUAL(len, 0);
    TU_OK(ember_qtensor_scale_count(q, &n));
    CU_ASSERT_EQUAL(n, 0);
    TU_OK(ember_dequantize(q, &d));
    ember_tensor_free(d);
    ember_tensor_free(q);
    s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    TU_OK(ember_quantize(xt, &s, &q));
    TU_OK(ember_qtensor_to_bytes(q, NULL, 0, &len));
    CU_ASSERT_EQUAL(len, 4); /* one scale: FLT_MIN */
    float sc = 0;
    TU_OK(ember_qtensor_scales(q, &sc, 1));
    CU_ASSERT_EQUAL(sc, FLT_MIN);
    ember_tensor_free(q);
    ember_tensor_free(xt);
}

static CU_TestInfo prop_tests[] = {
    {"every (value, level, store, scale dtype)", test_all_combinations},
    {"static scales, partial edge blocks", test_static_partial_blocks},
    {"from_bytes o to_bytes on random bytes", test_random_bytes_identity},
    {"vector and scalar kernels agree", test_kernels_direct},
    {"near-ties: vector == division", test_near_ties},
    {"scale decoder: ember__scale_decode's bits", test_scales_decode},
    {"thread counts and cpu_max_isa", test_threads_and_isa_cap},
    {"F16 / BF16 in and out", test_half_io},
    {"producer and backend_dequantize", test_producer},
    {"empty tensors", test_empty},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"quant properties", suite_init, suite_clean, NULL, NULL, prop_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return tu_run("test_quant_props", suites); }
