/* tests/test_dispatch.c: the dispatcher's behaviour: the router (to_device, requantize), read
 * transactions, the autodiff context, and q_matmul's arms against dequantize-then-matmul.
 *
 * Float results are compared with a float64 reference computed from the same (dequantized)
 * inputs, with the bound |err| <= 4·k·2^-24·Σ|a||b| (float accumulation in any order); inputs are
 * fresh random values each run (EMBER_TEST_SEED reproduces a run). The guard paths themselves are
 * in test_panics.c; here are the ones that are not burn panics (misuse, OOM walks, the check
 * functions against the ops). */
#include <math.h>
#include <stdlib.h>

#include "mock_backend.h"

static uint64_t rng;

static int suite_init(void) {
    rng = tu_seed();
    return 0;
}

static ember_qscheme q8s(void) { return ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE); }

/* t's elements as f32 on the host (F32 only), malloc'd. */
static float *read_f32(const ember_tensor *t) {
    size_t n = (size_t)ember_tensor_numel(t);
    float *x = malloc((n ? n : 1) * sizeof *x);
    TU_OK(ember_tensor_read(t, x, n * sizeof *x));
    return x;
}

/* The values of an F32 tensor, or the dequantized values of a quantized one, on the host. */
static float *host_values(const ember_tensor *t) {
    if (ember_tensor_dtype(t) != EMBER_QFLOAT)
        return read_f32(t);
    ember_tensor *f = NULL;
    TU_OK(ember_dequantize(t, &f));
    float *x = read_f32(f);
    ember_tensor_free(f);
    return x;
}

/* Check y = a @ b (batch-broadcast) against float64 on the host values of a and b. */
static void check_matmul(const ember_tensor *a, const ember_tensor *b, const ember_tensor *y,
                         double extra_rel) {
    const ember_tensor *ops[2] = {a, b};
    float *va = host_values(ops[0]), *vb = host_values(ops[1]);
    float *vy = host_values(y);
    int ra = ember_tensor_rank(a), rb = ember_tensor_rank(b), ry = ember_tensor_rank(y);
    int r = ra > rb ? ra : rb;
    CU_ASSERT_EQUAL_FATAL(ry, r);
    int64_t m = ember_tensor_dim(a, ra - 2), k = ember_tensor_dim(a, ra - 1);
    int64_t n = ember_tensor_dim(b, rb - 1);
    CU_ASSERT_EQUAL(ember_tensor_dim(y, r - 2), m);
    CU_ASSERT_EQUAL(ember_tensor_dim(y, r - 1), n);
    int64_t batch = 1;
    for (int i = 0; i < r - 2; i++)
        batch *= ember_tensor_dim(y, i);
    int bad = 0;
    for (int64_t t = 0; t < batch; t++) {
        /* the batch index of y, then a's and b's (broadcast) offsets */
        int64_t rem = t, oa = 0, ob = 0, sa = m * k, sb = k * n;
        for (int i = r - 3; i >= 0; i--) {
            int64_t dy = ember_tensor_dim(y, i), idx = rem % dy;
            rem /= dy;
            int ia = i - (r - ra), ib = i - (r - rb);
            int64_t da = ia >= 0 ? ember_tensor_dim(a, ia) : 1;
            int64_t db = ib >= 0 ? ember_tensor_dim(b, ib) : 1;
            if (da != 1)
                oa += idx * sa;
            if (db != 1)
                ob += idx * sb;
            sa *= da;
            sb *= db;
        }
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double acc = 0, mag = 0;
                for (int64_t l = 0; l < k; l++) {
                    double p = (double)va[oa + i * k + l] * (double)vb[ob + l * n + j];
                    acc += p;
                    mag += fabs(p);
                }
                double got = vy[t * m * n + i * n + j];
                double tol = 4.0 * (double)(k + 1) * 5.9604645e-8 * mag + extra_rel * mag + 1e-30;
                if (fabs(got - acc) > tol && bad++ < 5)
                    fprintf(stderr, "  y[%lld,%lld,%lld] = %.9g, want %.9g (tol %.3g)\n",
                            (long long)t, (long long)i, (long long)j, got, acc, tol);
            }
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(va);
    free(vb);
    free(vy);
}

/* ================= autodiff context ================= */

static void test_autodiff_set_get(void) {
    ember_context *ctx = tu_cpu_context();
    const ember_dtype fl[3] = {EMBER_F32, EMBER_F16, EMBER_BF16};
    const int64_t s[1] = {4};
    const uint32_t raw[4] = {0x3f800000u, 0, 0, 0};
    for (int i = 0; i < 3; i++) {
        ember_tensor *t = NULL;
        TU_OK(ember_tensor_from_data(ctx, TU_CPU, fl[i], 1, s, raw, &t));
        CU_ASSERT_EQUAL(ember_tensor_autodiff(t), EMBER_AUTODIFF_DISABLED);
        for (int a = EMBER_AUTODIFF_DISABLED; a < EMBER_AUTODIFF_COUNT; a++) {
            TU_OK(ember_tensor_set_autodiff(t, (ember_autodiff)a));
            CU_ASSERT_EQUAL(ember_tensor_autodiff(t), (ember_autodiff)a);
        }
        TU_ASSERT_STATUS(ember_tensor_set_autodiff(t, EMBER_AUTODIFF_COUNT),
                         EMBER_ERR_INVALID_ARGUMENT, "bad autodiff value");
        TU_ASSERT_STATUS(ember_tensor_set_autodiff(t, (ember_autodiff)-1),
                         EMBER_ERR_INVALID_ARGUMENT, "bad autodiff value");
        CU_ASSERT_EQUAL(ember_tensor_autodiff(t), EMBER_AUTODIFF_NO_CHECKPOINTING);
        ember_tensor_free(t);
    }
    /* untracking is allowed on anything, and a no-op off floats */
    ember_qscheme qs = q8s();
    const int64_t s2[2] = {2, 2};
    ember_tensor *q = mk_q(ctx, TU_CPU, &qs, 2, s2, &rng);
    TU_OK(ember_tensor_set_autodiff(q, EMBER_AUTODIFF_DISABLED));
    CU_ASSERT_EQUAL(ember_tensor_autodiff(q), EMBER_AUTODIFF_DISABLED);
    ember_tensor_free(q);
    TU_ASSERT_STATUS(ember_tensor_set_autodiff(NULL, EMBER_AUTODIFF_BALANCED), EMBER_ERR_MISUSE,
                     "tensor is NULL");
    ember_context_destroy(ctx);
}

static void test_autodiff_merge_table(void) {
    const ember_autodiff D = EMBER_AUTODIFF_DISABLED, B = EMBER_AUTODIFF_BALANCED,
                         N = EMBER_AUTODIFF_NO_CHECKPOINTING;
    const ember_autodiff a[9] = {D, D, D, B, B, B, N, N, N}, b[9] = {D, B, N, D, B, N, D, B, N};
    const int ok[9] = {1, 1, 1, 1, 1, 0, 1, 0, 1};
    const ember_autodiff want[9] = {D, B, N, B, B, D, N, D, N};
    for (int i = 0; i < 9; i++) {
        ember_autodiff r = EMBER_AUTODIFF_COUNT;
        ember_status st = ember__autodiff_merge("test", a[i], b[i], &r);
        if (ok[i]) {
            CU_ASSERT_EQUAL(st, EMBER_OK);
            CU_ASSERT_EQUAL(r, want[i]);
        } else {
            TU_ASSERT_STATUS(st, EMBER_ERR_CHECKPOINT_MISMATCH, "test: Gradient checkpointing");
            CU_ASSERT_EQUAL(r, EMBER_AUTODIFF_COUNT);
        }
    }
    CU_ASSERT_STRING_EQUAL(ember__autodiff_strategy_name(B), "Balanced");
    CU_ASSERT_STRING_EQUAL(ember__autodiff_strategy_name(N), "Disabled");
}

/* ================= router ================= */

static void test_to_device_every_dtype(void) {
    ember_context *ctx = mock_context();
    const ember_dtype dts[8] = {EMBER_F32, EMBER_F16, EMBER_BF16, EMBER_I64,
                                EMBER_I32, EMBER_I8,  EMBER_U8,   EMBER_BOOL};
    const int64_t shape[3] = {2, 3, 5};
    unsigned char src[2 * 3 * 5 * 8], back[sizeof src];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (unsigned char)(tu_next(&rng) & 0x7f); /* valid for every dtype, bool aside */
    for (int d = 0; d < 8; d++) {
        size_t es = ember_dtype_get_traits(dts[d])->size;
        if (dts[d] == EMBER_BOOL)
            for (size_t i = 0; i < 30; i++)
                src[i] &= 1;
        ember_tensor *t = NULL;
        TU_OK(ember_tensor_from_data(ctx, TU_CPU, dts[d], 3, shape, src, &t));
        /* a path through the mock when it holds the dtype: cpu -> m0 -> m1 -> cpu */
        const int holds = dts[d] != EMBER_F16 && dts[d] != EMBER_BF16;
        const ember_device path[4] = {TU_CPU, MOCK0, MOCK1, TU_CPU};
        const int steps = holds ? 4 : 2;
        ember_tensor *cur = t;
        for (int s = 1; s < steps; s++) {
            ember_device dst = holds ? path[s] : TU_CPU;
            ember_tensor *nx = OUT_SENTINEL;
            TU_OK(ember_to_device(cur, dst, &nx));
            CU_ASSERT_PTR_NOT_NULL_FATAL(nx);
            CU_ASSERT(nx != cur);
            CU_ASSERT_EQUAL(ember_tensor_device(nx).backend, dst.backend);
            CU_ASSERT_EQUAL(ember_tensor_device(nx).index, dst.index);
            CU_ASSERT_EQUAL(ember_tensor_dtype(nx), dts[d]);
            CU_ASSERT_EQUAL(ember_tensor_rank(nx), 3);
            for (int i = 0; i < 3; i++)
                CU_ASSERT_EQUAL(ember_tensor_dim(nx, i), shape[i]);
            if (cur != t)
                ember_tensor_free(cur);
            cur = nx;
        }
        memset(back, 0, sizeof back);
        TU_OK(ember_tensor_read(cur, back, sizeof back));
        CU_ASSERT(memcmp(back, src, 30 * es) == 0);
        memset(back, 0, sizeof back);
        TU_OK(ember_tensor_read(t, back, sizeof back)); /* the source is intact */
        CU_ASSERT(memcmp(back, src, 30 * es) == 0);
        ember_tensor_free(cur);
        ember_tensor_free(t);
    }
    ember_context_destroy(ctx);
}

static void test_to_device_empty_and_autodiff(void) {
    ember_context *ctx = mock_context();
    const int64_t z[2] = {0, 3};
    ember_tensor *e = NULL, *o = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, z, NULL, &e));
    TU_OK(ember_to_device(e, MOCK0, &o));
    CU_ASSERT_EQUAL(ember_tensor_numel(o), 0);
    CU_ASSERT_EQUAL(ember_tensor_dim(o, 1), 3);
    ember_tensor_free(o);
    ember_tensor_free(e);

    /* a tracked tensor moves within its backend and keeps its context; untracked moves anywhere */
    const int64_t s[2] = {3, 2};
    ember_tensor *t = mk_f32(ctx, MOCK0, 2, s, &rng);
    TU_OK(ember_tensor_set_autodiff(t, EMBER_AUTODIFF_BALANCED));
    TU_OK(ember_to_device(t, MOCK1, &o));
    CU_ASSERT_EQUAL(ember_tensor_autodiff(o), EMBER_AUTODIFF_BALANCED);
    CU_ASSERT_EQUAL(ember_tensor_autodiff(t), EMBER_AUTODIFF_BALANCED);
    ember_tensor_free(o);
    TU_OK(ember_to_device(t, MOCK0, &o));
    CU_ASSERT_EQUAL(ember_tensor_autodiff(o), EMBER_AUTODIFF_BALANCED);
    ember_tensor_free(o);
    TU_OK(ember_tensor_set_autodiff(t, EMBER_AUTODIFF_DISABLED));
    TU_OK(ember_to_device(t, TU_CPU, &o));
    CU_ASSERT_EQUAL(ember_tensor_autodiff(o), EMBER_AUTODIFF_DISABLED);
    ember_tensor_free(o);
    ember_tensor_free(t);
    ember_context_destroy(ctx);
}

static void test_to_device_misuse(void) {
    ember_context *ctx = tu_cpu_context();
    const int64_t s[1] = {3};
    ember_tensor *t = mk_f32(ctx, TU_CPU, 1, s, &rng), *o = OUT_SENTINEL;
    TU_ASSERT_STATUS(ember_to_device(t, TU_CPU, NULL), EMBER_ERR_INVALID_ARGUMENT, "out is NULL");
    TU_ASSERT_STATUS(ember_to_device(NULL, TU_CPU, &o), EMBER_ERR_MISUSE, "to_device");
    CU_ASSERT_PTR_NULL(o);
    TU_ASSERT_STATUS(ember_check_to_device(NULL, TU_CPU), EMBER_ERR_MISUSE, "to_device");
    ember_tensor_free(t);
    ember_tensor fake; /* a foreign pointer (a freed one would be a use after free here) */
    memset(&fake, 0, sizeof fake);
    o = OUT_SENTINEL;
    TU_ASSERT_STATUS(ember_to_device(&fake, TU_CPU, &o), EMBER_ERR_MISUSE, "foreign pointer");
    CU_ASSERT_PTR_NULL(o);
    ember_context_destroy(ctx);
}

/* The check gives exactly the op's status and detail, allocating nothing. */
static void expect_same_to_device(const ember_tensor *t, ember_device d) {
    char detail[4096];
    ember_clear_error();
    long live0 = ember__alloc_live();
    ember__alloc_fail_at(1000000000L); /* counts allocations */
    ember_status cs = ember_check_to_device(t, d);
    long allocs = ember__alloc_count();
    ember__alloc_fail_at(0);
    CU_ASSERT_EQUAL(allocs, 0);
    CU_ASSERT_EQUAL(ember__alloc_live(), live0);
    snprintf(detail, sizeof detail, "%s", ember_last_error());
    ember_clear_error();
    ember_tensor *o = NULL;
    ember_status os = ember_to_device(t, d, &o);
    CU_ASSERT_EQUAL(cs, os);
    if (os != EMBER_OK) {
        CU_ASSERT_STRING_EQUAL(detail, ember_last_error());
    } else {
        CU_ASSERT_STRING_EQUAL(detail, "");
    }
    ember_tensor_free(o);
}

static void test_check_to_device_matches_op(void) {
    ember_context *ctx = mock_context();
    const int64_t s[2] = {2, 4};
    ember_qscheme qs = q8s();
    ember_tensor *f = mk_f32(ctx, TU_CPU, 2, s, &rng), *q = mk_q(ctx, TU_CPU, &qs, 2, s, &rng);
    ember_tensor *tr = mk_f32(ctx, TU_CPU, 2, s, &rng), *h = NULL;
    uint16_t hv[8] = {0};
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F16, 2, s, hv, &h));
    TU_OK(ember_tensor_set_autodiff(tr, EMBER_AUTODIFF_BALANCED));
    const ember_tensor *ts[4] = {f, q, tr, h};
    const ember_device ds[5] = {
        TU_CPU, MOCK0, MOCK1, {EMBER_BACKEND_CPU, 3}, {EMBER_BACKEND_OPENCL, 2}};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++)
            expect_same_to_device(ts[i], ds[j]);
    ember_tensor_free(f);
    ember_tensor_free(q);
    ember_tensor_free(tr);
    ember_tensor_free(h);
    expect_same_to_device(NULL, TU_CPU);
    ember_context_destroy(ctx);
}

/* Every allocation of a move fails in turn: OUT_OF_MEMORY, no output, nothing leaked. */
static void test_to_device_oom(void) {
    ember_context *ctx = mock_context();
    const int64_t s[2] = {3, 5};
    ember_tensor *t = mk_f32(ctx, MOCK0, 2, s, &rng);
    const ember_device ds[3] = {TU_CPU, MOCK1, MOCK0}; /* download; staging buffer; host copy */
    for (int d = 0; d < 3; d++) {
        int done = 0;
        for (long n = 1; n < 50 && !done; n++) {
            long live0 = ember__alloc_live();
            ember__alloc_fail_at(n);
            ember_tensor *o = OUT_SENTINEL;
            ember_status st = ember_to_device(t, ds[d], &o);
            ember__alloc_fail_at(0);
            if (st == EMBER_OK) {
                done = 1;
                ember_tensor_free(o);
            } else {
                TU_ASSERT_STATUS(st, EMBER_ERR_OUT_OF_MEMORY, NULL);
                CU_ASSERT_PTR_NULL(o);
            }
            CU_ASSERT_EQUAL(ember__alloc_live(), live0);
        }
        CU_ASSERT(done);
    }
    ember_tensor_free(t);
    ember_context_destroy(ctx);
}

static void test_requantize_to_device(void) {
    ember_context *ctx = mock_context();
    const int64_t blk[1] = {4};
    ember_qscheme schemes[4] = {
        q8s(), ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32),
        ember_qscheme_per_block(EMBER_Q8F, EMBER_QSTORE_NATIVE, 1, blk),
        ember_qscheme_per_block(EMBER_E2M1, EMBER_QSTORE_PACKED_NATIVE, 1, blk)};
    schemes[3].block_scale = EMBER_SCALE_UE4M3; /* two-level, NVFP4 style */
    schemes[3].tensor_level = 1;
    schemes[3].tensor_scale = EMBER_SCALE_F32;
    const int64_t s[2] = {3, 8};
    const ember_device dsts[3] = {MOCK0, MOCK1, TU_CPU};
    for (int k = 0; k < 4; k++) {
        ember_tensor *q = mk_q(ctx, TU_CPU, &schemes[k], 2, s, &rng);
        if (!q)
            continue;
        int8_t v0[24], v1[24];
        float sc0[8], sc1[8];
        size_t ns = 0;
        TU_OK(ember_qtensor_values(q, v0, 24));
        TU_OK(ember_qtensor_scale_count(q, &ns));
        CU_ASSERT_FATAL(ns <= 8);
        TU_OK(ember_qtensor_scales(q, sc0, ns));
        ember_tensor *cur = q;
        for (int d = 0; d < 3; d++) {
            ember_tensor *o = OUT_SENTINEL;
            TU_OK(ember_requantize_to_device(cur, dsts[d], &o));
            CU_ASSERT_PTR_NOT_NULL_FATAL(o);
            CU_ASSERT_EQUAL(ember_tensor_dtype(o), EMBER_QFLOAT);
            CU_ASSERT_EQUAL(ember_tensor_device(o).backend, dsts[d].backend);
            CU_ASSERT_EQUAL(ember_tensor_device(o).index, dsts[d].index);
            ember_qscheme got;
            TU_OK(ember_tensor_qscheme(o, &got));
            CU_ASSERT_EQUAL(got.value, schemes[k].value);
            CU_ASSERT_EQUAL(got.store, schemes[k].store);
            CU_ASSERT_EQUAL(got.block_rank, schemes[k].block_rank);
            /* the new tensor was produced there: it dequantizes there */
            ember_tensor *deq = NULL;
            TU_OK(ember_backend_dequantize(ctx, dsts[d], o, &deq));
            if (!got.tensor_level) {
                /* single-level schemes travel bit-exactly */
                TU_OK(ember_qtensor_values(o, v1, 24));
                CU_ASSERT(memcmp(v0, v1, sizeof v0) == 0);
                TU_OK(ember_qtensor_scales(o, sc1, ns));
                CU_ASSERT(memcmp(sc0, sc1, ns * sizeof(float)) == 0);
            } else {
                /* two-level: the scales are re-normalised (the global scale may move by an
                 * ulp, a UE4M3 block scale by a step), so the values agree within one
                 * quantization step of the source (E2M1 steps are at most 2 units) */
                float *x0 = host_values(q), *x1 = read_f32(deq), eff[8];
                TU_OK(ember__qtensor_effective_scales(q, eff));
                for (int i = 0; i < 24; i++)
                    CU_ASSERT(fabsf(x0[i] - x1[i]) <= 2.5f * eff[i / 4]);
                free(x0);
                free(x1);
            }
            ember_tensor_free(deq);
            if (cur != q)
                ember_tensor_free(cur);
            cur = o;
        }
        ember_tensor_free(cur);
        TU_OK(ember_qtensor_values(q, v1, 24)); /* the source is intact */
        CU_ASSERT(memcmp(v0, v1, sizeof v0) == 0);
        ember_tensor_free(q);
    }
    /* misuse */
    ember_tensor *q = mk_q(ctx, TU_CPU, &schemes[0], 2, s, &rng), *o = OUT_SENTINEL;
    TU_ASSERT_STATUS(ember_requantize_to_device(q, MOCK0, NULL), EMBER_ERR_INVALID_ARGUMENT,
                     "out is NULL");
    TU_ASSERT_STATUS(ember_requantize_to_device(NULL, MOCK0, &o), EMBER_ERR_MISUSE,
                     "requantize_to_device");
    CU_ASSERT_PTR_NULL(o);
    o = OUT_SENTINEL;
    TU_ASSERT_STATUS(ember_requantize_to_device(q, (ember_device){EMBER_BACKEND_OPENCL, 2}, &o),
                     EMBER_ERR_BACKEND_UNAVAILABLE, "no device opencl:2");
    CU_ASSERT_PTR_NULL(o);
    /* allocation failures anywhere along the way */
    int done = 0;
    for (long n = 1; n < 200 && !done; n++) {
        long live0 = ember__alloc_live();
        ember__alloc_fail_at(n);
        o = OUT_SENTINEL;
        ember_status st = ember_requantize_to_device(q, MOCK1, &o);
        ember__alloc_fail_at(0);
        if (st == EMBER_OK) {
            done = 1;
            ember_tensor_free(o);
        } else {
            TU_ASSERT_STATUS(st, EMBER_ERR_OUT_OF_MEMORY, NULL);
            CU_ASSERT_PTR_NULL(o);
            CU_ASSERT_EQUAL(ember__alloc_live(), live0);
        }
    }
    CU_ASSERT(done);
    ember_tensor_free(q);
    ember_context_destroy(ctx);
}

/* ================= read transactions ================= */

static void test_read_many_values_and_syncs(void) {
    ember_context *ctx = mock_context();
    const int64_t s[2] = {4, 3};
    const ember_device ds[5] = {TU_CPU, MOCK0, MOCK1, MOCK0, MOCK0};
    ember_tensor *ts[5];
    float *want[5], got[5][12];
    for (int i = 0; i < 5; i++) {
        ts[i] = mk_f32(ctx, ds[i], 2, s, &rng);
        want[i] = read_f32(ts[i]);
    }
    void *dsts[5];
    size_t nb[5];
    for (int i = 0; i < 5; i++) {
        dsts[i] = got[i];
        nb[i] = sizeof got[i];
    }
    mock_reset_counters();
    TU_OK(ember_tensor_read_many((const ember_tensor *const *)ts, dsts, nb, 5));
    for (int i = 0; i < 5; i++)
        CU_ASSERT(memcmp(got[i], want[i], sizeof got[i]) == 0);
    CU_ASSERT_EQUAL(mock.sync[0], 1); /* one sync per device, however many tensors */
    CU_ASSERT_EQUAL(mock.sync[1], 1);
    CU_ASSERT_EQUAL(mock.download[0], 3);
    CU_ASSERT_EQUAL(mock.download[1], 1);
    TU_OK(ember_tensor_read_many(NULL, NULL, NULL, 0)); /* an empty transaction */
    for (int i = 0; i < 5; i++) {
        free(want[i]);
        ember_tensor_free(ts[i]);
    }
    ember_context_destroy(ctx);
}

static void test_read_many_errors(void) {
    ember_context *ctx = mock_context();
    const int64_t s[1] = {4};
    ember_tensor *a = mk_f32(ctx, TU_CPU, 1, s, &rng), *b = mk_f32(ctx, MOCK0, 1, s, &rng);
    float d0[4], d1[4];
    unsigned char pristine[sizeof d0];
    memset(pristine, 0xcd, sizeof pristine);
    const ember_tensor *ts[2] = {a, b};
    void *dsts[2] = {d0, d1};
    size_t nb[2] = {sizeof d0, sizeof d1};
#define RESET()                                                                                    \
    do {                                                                                           \
        memset(d0, 0xcd, sizeof d0);                                                               \
        memset(d1, 0xcd, sizeof d1);                                                               \
    } while (0)
#define UNTOUCHED()                                                                                \
    do {                                                                                           \
        CU_ASSERT(memcmp(d0, pristine, sizeof d0) == 0);                                           \
        CU_ASSERT(memcmp(d1, pristine, sizeof d1) == 0);                                           \
    } while (0)
    RESET();
    TU_ASSERT_STATUS(ember_tensor_read_many(ts, dsts, nb, -1), EMBER_ERR_INVALID_ARGUMENT,
                     "n is negative");
    TU_ASSERT_STATUS(ember_tensor_read_many(NULL, dsts, nb, 2), EMBER_ERR_INVALID_ARGUMENT,
                     "ts is NULL");
    TU_ASSERT_STATUS(ember_tensor_read_many(ts, NULL, nb, 2), EMBER_ERR_INVALID_ARGUMENT,
                     "dsts is NULL");
    TU_ASSERT_STATUS(ember_tensor_read_many(ts, dsts, NULL, 2), EMBER_ERR_INVALID_ARGUMENT,
                     "dst_bytes is NULL");
    UNTOUCHED();
    size_t small[2] = {sizeof d0, sizeof d1 - 1};
    TU_ASSERT_STATUS(ember_tensor_read_many(ts, dsts, small, 2), EMBER_ERR_INVALID_ARGUMENT,
                     "dsts[1] holds 15 bytes, tensor 1 needs 16");
    UNTOUCHED();
    void *nulls[2] = {d0, NULL};
    TU_ASSERT_STATUS(ember_tensor_read_many(ts, nulls, nb, 2), EMBER_ERR_INVALID_ARGUMENT,
                     "dsts[1] is NULL");
    UNTOUCHED();
    ember_tensor fake;
    memset(&fake, 0, sizeof fake);
    const ember_tensor *withfake[2] = {a, &fake};
    TU_ASSERT_STATUS(ember_tensor_read_many(withfake, dsts, nb, 2), EMBER_ERR_MISUSE,
                     "tensor_read_many: tensor 1: not an ember tensor (foreign pointer)");
    UNTOUCHED();
    const ember_tensor *withnull[2] = {NULL, b};
    TU_ASSERT_STATUS(ember_tensor_read_many(withnull, dsts, nb, 2), EMBER_ERR_MISUSE,
                     "tensor 0: tensor is NULL");
    UNTOUCHED();
#undef RESET
#undef UNTOUCHED
    ember_tensor_free(a);
    ember_tensor_free(b);
    ember_context_destroy(ctx);
}

/* ================= q_matmul ================= */

static ember_context *ctx_with(ember_quant_propagation p) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.quant_propagation = p;
    ember_context *ctx = NULL;
    TU_OK(ember_context_create(&o, &ctx));
    return ctx;
}

typedef struct mm_case {
    int ra, rb;
    int64_t a[4], b[4];
} mm_case;

static const mm_case mm_cases[] = {
    {2, 2, {5, 8}, {8, 3}},       {2, 2, {1, 16}, {16, 7}},        {2, 2, {9, 32}, {32, 16}},
    {3, 3, {2, 3, 8}, {2, 8, 4}}, {4, 3, {2, 1, 3, 8}, {3, 8, 8}}, /* batch broadcast, and ranks
                                                                      differ */
    {3, 2, {4, 2, 16}, {16, 8}},                                   /* a shared weight */
};

static void run_arms(ember_context *ctx, const ember_qscheme *sa, const ember_qscheme *sb) {
    for (size_t c = 0; c < sizeof mm_cases / sizeof mm_cases[0]; c++) {
        const mm_case *mc = &mm_cases[c];
        ember_tensor *fa = mk_f32(ctx, TU_CPU, mc->ra, mc->a, &rng);
        ember_tensor *fb = mk_f32(ctx, TU_CPU, mc->rb, mc->b, &rng);
        ember_tensor *qa = NULL, *qb = NULL;
        /* a block scheme meets only the shapes it divides */
        ember_status sta = ember_quantize(fa, sa, &qa), stb = ember_quantize(fb, sb, &qb);
        CU_ASSERT(sta == EMBER_OK || sta == EMBER_ERR_BLOCK_SHAPE);
        CU_ASSERT(stb == EMBER_OK || stb == EMBER_ERR_BLOCK_SHAPE);
        if (!qa || !qb) {
            ember_tensor_free(fa);
            ember_tensor_free(fb);
            ember_tensor_free(qa);
            ember_tensor_free(qb);
            continue;
        }
        const ember_tensor *L[3] = {fa, qa, qa}, *R[3] = {qb, fb, qb};
        for (int arm = 0; arm < 3; arm++) {
            ember_tensor *y = OUT_SENTINEL;
            TU_OK(ember_q_matmul(L[arm], R[arm], &y));
            CU_ASSERT_PTR_NOT_NULL_FATAL(y);
            CU_ASSERT_EQUAL(ember_tensor_dtype(y), EMBER_F32);
            CU_ASSERT_EQUAL(ember_tensor_autodiff(y), EMBER_AUTODIFF_DISABLED);
            check_matmul(L[arm], R[arm], y, 0.0);
            /* ember_matmul routes here: the same result */
            ember_tensor *y2 = NULL;
            TU_OK(ember_matmul(L[arm], R[arm], &y2));
            float *v1 = read_f32(y), *v2 = read_f32(y2);
            CU_ASSERT(memcmp(v1, v2, (size_t)ember_tensor_numel(y) * sizeof(float)) == 0);
            free(v1);
            free(v2);
            ember_tensor_free(y);
            ember_tensor_free(y2);
        }
        ember_tensor_free(fa);
        ember_tensor_free(fb);
        ember_tensor_free(qa);
        ember_tensor_free(qb);
    }
}

/* (F,Q), (Q,F), (Q,Q) equal dequantize-then-matmul on random data, for several schemes. */
static void test_q_matmul_arms_random(void) {
    ember_context *ctx = ctx_with(EMBER_QUANT_INHIBIT);
    ember_qscheme s8s = q8s(), s8f = ember_qscheme_per_tensor(EMBER_Q8F, EMBER_QSTORE_NATIVE);
    ember_qscheme s4 = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
    ember_qscheme s8u = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_PACKED_U32);
    const int64_t blk[1] = {4};
    ember_qscheme sb = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk);
    run_arms(ctx, &s8s, &s8s);
    run_arms(ctx, &s8f, &s8s);
    run_arms(ctx, &s8u, &s4);
    run_arms(ctx, &sb, &sb);
    ember_context_destroy(ctx);
}

/* spec §6.5: A (2x3 f32) x Q(W) (3x2 Q8S per-tensor). */
static const float G_A[6] = {1, 2, 3, -1, 0.5f, 0};
static const float G_W[6] = {0.5f, -1, 2, 0.25f, -0.75f, 1.5f};
static const int64_t G_SA[2] = {2, 3}, G_SW[2] = {3, 2};

static void near(const float *got, const double *want, int n, double rel) {
    for (int i = 0; i < n; i++) {
        double tol = rel * fabs(want[i]) + 1e-7;
        if (fabs(got[i] - want[i]) > tol) {
            fprintf(stderr, "  [%d] = %.9g, want %.9g\n", i, got[i], want[i]);
            CU_FAIL("value off the golden vector");
        }
    }
}

static void test_q_matmul_golden(void) {
    ember_context *ctx = ctx_with(EMBER_QUANT_INHIBIT);
    ember_qscheme s = q8s();
    ember_tensor *a = NULL, *w = NULL, *qa = NULL, *qw = NULL, *y = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, G_SA, G_A, &a));
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, G_SW, G_W, &w));
    TU_OK(ember_quantize(w, &s, &qw));
    TU_OK(ember_quantize(a, &s, &qa));
    int8_t v[6];
    TU_OK(ember_qtensor_values(qw, v, 6));
    const int8_t want_qw[6] = {32, -64, 127, 16, -48, 95};
    CU_ASSERT(memcmp(v, want_qw, 6) == 0);
    TU_OK(ember_qtensor_values(qa, v, 6));
    const int8_t want_qa[6] = {42, 85, 127, -42, 21, 0};
    CU_ASSERT(memcmp(v, want_qa, 6) == 0);

    /* Float x Quant */
    TU_OK(ember_q_matmul(a, qw, &y));
    float got[4];
    TU_OK(ember_tensor_read(y, got, sizeof got));
    const double fq[4] = {2.23622036, 3.98425174, 0.496062994, 1.1338582};
    near(got, fq, 4, 1e-6);
    ember_tensor_free(y);
    /* Quant x Quant (device float dtype F32) */
    TU_OK(ember_q_matmul(qa, qw, &y));
    CU_ASSERT_EQUAL(ember_tensor_dtype(y), EMBER_F32);
    TU_OK(ember_tensor_read(y, got, sizeof got));
    const double qq[4] = {2.24800062, 3.99417162, 0.492156982, 1.12493026};
    near(got, qq, 4, 1e-6);
    ember_tensor_free(y);
    ember_tensor_free(a);
    ember_tensor_free(w);
    ember_tensor_free(qa);
    ember_tensor_free(qw);
    ember_context_destroy(ctx);

    /* Propagate: re-quantized with the rhs's scheme */
    ctx = ctx_with(EMBER_QUANT_PROPAGATE);
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, G_SA, G_A, &a));
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, G_SW, G_W, &w));
    TU_OK(ember_quantize(w, &s, &qw));
    TU_OK(ember_q_matmul(a, qw, &y));
    CU_ASSERT_EQUAL_FATAL(ember_tensor_dtype(y), EMBER_QFLOAT);
    CU_ASSERT_EQUAL(ember_tensor_autodiff(y), EMBER_AUTODIFF_DISABLED);
    ember_qscheme got_s;
    TU_OK(ember_tensor_qscheme(y, &got_s));
    CU_ASSERT_EQUAL(got_s.value, EMBER_Q8S);
    CU_ASSERT_EQUAL(got_s.store, EMBER_QSTORE_NATIVE);
    int8_t qy[4];
    TU_OK(ember_qtensor_values(y, qy, 4));
    const int8_t want_qy[4] = {71, 127, 16, 36};
    CU_ASSERT(memcmp(qy, want_qy, 4) == 0);
    float sc = 0;
    TU_OK(ember_qtensor_scales(y, &sc, 1));
    /* the scale follows the output's max, whose last ulp may move (spec §6.5) */
    CU_ASSERT_DOUBLE_EQUAL(sc, 0.0313720591, 0.0313720591 * 4e-7);
    ember_tensor_free(y);
    /* Propagate with the quantized operand on the left takes the lhs's scheme */
    ember_tensor *wt = NULL, *qat = NULL;
    ember_qscheme s4 = ember_qscheme_per_tensor(EMBER_Q8F, EMBER_QSTORE_PACKED_U32);
    TU_OK(ember_quantize(a, &s4, &qat));
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, G_SW, G_W, &wt));
    TU_OK(ember_q_matmul(qat, wt, &y));
    TU_OK(ember_tensor_qscheme(y, &got_s));
    CU_ASSERT_EQUAL(got_s.value, EMBER_Q8F);
    CU_ASSERT_EQUAL(got_s.store, EMBER_QSTORE_PACKED_U32);
    ember_tensor_free(y);
    /* both quantized: the rhs's */
    TU_OK(ember_q_matmul(qat, qw, &y));
    TU_OK(ember_tensor_qscheme(y, &got_s));
    CU_ASSERT_EQUAL(got_s.value, EMBER_Q8S);
    CU_ASSERT_EQUAL(got_s.store, EMBER_QSTORE_NATIVE);
    ember_tensor_free(y);
    ember_tensor_free(wt);
    ember_tensor_free(qat);
    ember_tensor_free(a);
    ember_tensor_free(w);
    ember_tensor_free(qw);
    ember_context_destroy(ctx);
}

/* The output takes the float operand's dtype (F16, BF16 computed in f32). */
static void test_q_matmul_half_output(void) {
    ember_context *ctx = ctx_with(EMBER_QUANT_INHIBIT);
    ember_qscheme s = q8s();
    const int64_t sa[2] = {4, 16}, sb[2] = {16, 8};
    const ember_dtype dts[2] = {EMBER_F16, EMBER_BF16};
    for (int i = 0; i < 2; i++) {
        float x[64];
        uint16_t h[64];
        tu_rand_f32(&rng, x, 64, -1, 1);
        for (int j = 0; j < 64; j++)
            h[j] = dts[i] == EMBER_F16 ? ember__f32_to_f16(x[j]) : ember__f32_to_bf16(x[j]);
        ember_tensor *a = NULL, *a32 = NULL, *q = mk_q(ctx, TU_CPU, &s, 2, sb, &rng), *y = NULL;
        TU_OK(ember_tensor_from_data(ctx, TU_CPU, dts[i], 2, sa, h, &a));
        for (int j = 0; j < 64; j++) /* the exact values of the half operand */
            x[j] = dts[i] == EMBER_F16 ? ember__f16_to_f32(h[j]) : ember__bf16_to_f32(h[j]);
        TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F32, 2, sa, x, &a32));
        TU_OK(ember_q_matmul(a, q, &y));
        CU_ASSERT_EQUAL(ember_tensor_dtype(y), dts[i]);
        /* the same product from the F32 copy, then rounded to the half dtype */
        uint16_t hy[32];
        TU_OK(ember_tensor_read(y, hy, sizeof hy));
        ember_tensor *yr = NULL;
        TU_OK(ember_q_matmul(a32, q, &yr));
        float r[32];
        TU_OK(ember_tensor_read(yr, r, sizeof r));
        float *w = host_values(q);
        /* burn dequantizes W to the half dtype too: allow that rounding on every term, plus the
         * final rounding of the output */
        double rel = dts[i] == EMBER_F16 ? 1.0 / 2048 : 1.0 / 256;
        for (int row = 0; row < 4; row++)
            for (int col = 0; col < 8; col++) {
                int j = row * 8 + col;
                double mag = 0;
                for (int l = 0; l < 16; l++)
                    mag += fabs((double)x[row * 16 + l] * (double)w[l * 8 + col]);
                float g =
                    dts[i] == EMBER_F16 ? ember__f16_to_f32(hy[j]) : ember__bf16_to_f32(hy[j]);
                double tol = 2 * rel * mag + rel * fabs((double)r[j]) + 1e-6;
                CU_ASSERT(fabs((double)g - (double)r[j]) <= tol);
            }
        free(w);
        ember_tensor_free(a);
        ember_tensor_free(a32);
        ember_tensor_free(q);
        ember_tensor_free(y);
        ember_tensor_free(yr);
    }
    ember_context_destroy(ctx);
}

/* With an enabled context the output is a fresh tracked leaf with the float operand's strategy. */
static void test_q_matmul_autodiff_output(void) {
    ember_context *ctx = ctx_with(EMBER_QUANT_INHIBIT);
    ember_qscheme s = q8s();
    const int64_t sa[2] = {3, 4}, sb[2] = {4, 5};
    ember_tensor *a = mk_f32(ctx, TU_CPU, 2, sa, &rng), *qb = mk_q(ctx, TU_CPU, &s, 2, sb, &rng);
    ember_tensor *b = mk_f32(ctx, TU_CPU, 2, sb, &rng), *qa = mk_q(ctx, TU_CPU, &s, 2, sa, &rng);
    const ember_autodiff ads[3] = {EMBER_AUTODIFF_DISABLED, EMBER_AUTODIFF_BALANCED,
                                   EMBER_AUTODIFF_NO_CHECKPOINTING};
    for (int i = 0; i < 3; i++) {
        TU_OK(ember_tensor_set_autodiff(a, ads[i]));
        TU_OK(ember_tensor_set_autodiff(b, ads[i]));
        ember_tensor *y = NULL;
        TU_OK(ember_q_matmul(a, qb, &y));
        CU_ASSERT_EQUAL(ember_tensor_autodiff(y), ads[i]);
        ember_tensor_free(y);
        TU_OK(ember_q_matmul(qa, b, &y));
        CU_ASSERT_EQUAL(ember_tensor_autodiff(y), ads[i]);
        ember_tensor_free(y);
        TU_OK(ember_q_matmul(qa, qb, &y));
        CU_ASSERT_EQUAL(ember_tensor_autodiff(y), EMBER_AUTODIFF_DISABLED);
        ember_tensor_free(y);
        CU_ASSERT_EQUAL(ember_tensor_autodiff(qa), EMBER_AUTODIFF_DISABLED);
        CU_ASSERT_EQUAL(ember_tensor_autodiff(qb), EMBER_AUTODIFF_DISABLED);
    }
    ember_tensor_free(a);
    ember_tensor_free(b);
    ember_tensor_free(qa);
    ember_tensor_free(qb);
    ember_context_destroy(ctx);
}

/* (F,F) is the float matmul, bit for bit. */
static void test_q_matmul_float_pair(void) {
    ember_context *ctx = ctx_with(EMBER_QUANT_PROPAGATE); /* no effect on floats */
    const int64_t sa[3] = {2, 3, 4}, sb[2] = {4, 5};
    ember_tensor *a = mk_f32(ctx, TU_CPU, 3, sa, &rng), *b = mk_f32(ctx, TU_CPU, 2, sb, &rng);
    ember_tensor *y1 = NULL, *y2 = NULL;
    TU_OK(ember_q_matmul(a, b, &y1));
    TU_OK(ember_matmul(a, b, &y2));
    CU_ASSERT_EQUAL(ember_tensor_dtype(y1), EMBER_F32);
    float *v1 = read_f32(y1), *v2 = read_f32(y2);
    CU_ASSERT(memcmp(v1, v2, 30 * sizeof(float)) == 0);
    check_matmul(a, b, y1, 0.0);
    free(v1);
    free(v2);
    ember_tensor_free(y1);
    ember_tensor_free(y2);
    TU_OK(ember_check_q_matmul(a, b));
    ember_tensor_free(a);
    ember_tensor_free(b);
    ember_context_destroy(ctx);
}

/* ---- the backend's q_matmul entry ---- */

static struct {
    int calls, mode; /* mode 0: decline; 1: fill 42; 2: fail */
    ember__gemm last;
    ember_backend_ops ops;
} hook;

static ember_status hook_q_matmul(void *state, int dev, const ember__gemm *g, const ember_tensor *a,
                                  const ember_tensor *b, ember_tensor *out) {
    (void)state;
    (void)dev;
    (void)a;
    (void)b;
    hook.calls++;
    hook.last = *g;
    if (hook.mode == 0)
        return EMBER_ERR_QUANT_UNSUPPORTED;
    if (hook.mode == 2)
        EMBER_FAIL(EMBER_ERR_DEVICE, "hook: kernel launch failed");
    float *o = out->buf;
    for (size_t i = 0; i < out->numel; i++)
        o[i] = 42.0f;
    return EMBER_OK;
}

/* Empty operands: an empty output, or (k = 0) an all-zero one, on every arm. */
static void test_q_matmul_empty(void) {
    ember_context *ctx = ctx_with(EMBER_QUANT_INHIBIT);
    hook.ops = *ctx->be[EMBER_BACKEND_CPU].ops; /* an entry that must not see empty shapes */
    hook.ops.q_matmul = hook_q_matmul;
    hook.calls = 0;
    hook.mode = 1;
    const ember_backend_ops *saved = ctx->be[EMBER_BACKEND_CPU].ops;
    ctx->be[EMBER_BACKEND_CPU].ops = &hook.ops;
    ember_qscheme s = q8s();
    const int64_t A[3][2] = {{0, 4}, {2, 0}, {2, 4}}, B[3][2] = {{4, 3}, {0, 3}, {4, 0}};
    for (int c = 0; c < 3; c++) {
        ember_tensor *fa = mk_f32(ctx, TU_CPU, 2, A[c], &rng),
                     *fb = mk_f32(ctx, TU_CPU, 2, B[c], &rng);
        ember_tensor *qa = NULL, *qb = NULL;
        TU_OK(ember_quantize(fa, &s, &qa));
        TU_OK(ember_quantize(fb, &s, &qb));
        const ember_tensor *L[3] = {fa, qa, qa}, *R[3] = {qb, fb, qb};
        for (int arm = 0; arm < 3 && qa && qb; arm++) {
            ember_tensor *y = NULL;
            TU_OK(ember_q_matmul(L[arm], R[arm], &y));
            CU_ASSERT_EQUAL(ember_tensor_dim(y, 0), A[c][0]);
            CU_ASSERT_EQUAL(ember_tensor_dim(y, 1), B[c][1]);
            float z[8];
            memset(z, 0x55, sizeof z);
            TU_OK(ember_tensor_read(y, z, sizeof z));
            for (int64_t i = 0; i < ember_tensor_numel(y); i++)
                CU_ASSERT_EQUAL(z[i], 0.0f);
            ember_tensor_free(y);
        }
        ember_tensor_free(fa);
        ember_tensor_free(fb);
        ember_tensor_free(qa);
        ember_tensor_free(qb);
    }
    CU_ASSERT_EQUAL(hook.calls, 0);
    ctx->be[EMBER_BACKEND_CPU].ops = saved;
    ember_context_destroy(ctx);
}

static void test_q_matmul_backend_entry(void) {
    ember_context *ctx = ctx_with(EMBER_QUANT_INHIBIT);
    hook.ops = *ctx->be[EMBER_BACKEND_CPU].ops;
    hook.ops.q_matmul = hook_q_matmul;
    const ember_backend_ops *saved = ctx->be[EMBER_BACKEND_CPU].ops;
    ctx->be[EMBER_BACKEND_CPU].ops = &hook.ops;
    ember_qscheme s = q8s();
    const int64_t sa[3] = {2, 3, 8}, sb[2] = {8, 5};
    ember_tensor *a = mk_f32(ctx, TU_CPU, 3, sa, &rng), *qb = mk_q(ctx, TU_CPU, &s, 2, sb, &rng);

    /* declined: burn's fallback, same values */
    hook.mode = 0;
    hook.calls = 0;
    ember_tensor *y = NULL;
    TU_OK(ember_q_matmul(a, qb, &y));
    CU_ASSERT_EQUAL(hook.calls, 1);
    CU_ASSERT_EQUAL(hook.last.m, 3);
    CU_ASSERT_EQUAL(hook.last.n, 5);
    CU_ASSERT_EQUAL(hook.last.k, 8);
    CU_ASSERT_EQUAL(hook.last.batch, 2);
    check_matmul(a, qb, y, 0.0);
    ember_tensor_free(y);

    /* taken: the entry's result is the output */
    hook.mode = 1;
    TU_OK(ember_q_matmul(a, qb, &y));
    CU_ASSERT_EQUAL(hook.calls, 2);
    float *v = read_f32(y);
    for (int i = 0; i < 30; i++)
        CU_ASSERT_EQUAL(v[i], 42.0f);
    free(v);
    ember_tensor_free(y);

    /* a real failure is returned as is, with nothing leaked */
    hook.mode = 2;
    long live0 = ember__alloc_live();
    y = OUT_SENTINEL;
    TU_ASSERT_STATUS(ember_q_matmul(a, qb, &y), EMBER_ERR_DEVICE, "kernel launch failed");
    CU_ASSERT_PTR_NULL(y);
    CU_ASSERT_EQUAL(ember__alloc_live(), live0);

    /* an F16 float operand is not for the entry (it takes F32): straight to the fallback */
    hook.mode = 1;
    hook.calls = 0;
    uint16_t h[48] = {0};
    for (int i = 0; i < 48; i++)
        h[i] = ember__f32_to_f16((float)(i % 7) - 3.0f);
    ember_tensor *ah = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_F16, 3, sa, h, &ah));
    TU_OK(ember_q_matmul(ah, qb, &y));
    CU_ASSERT_EQUAL(hook.calls, 0);
    CU_ASSERT_EQUAL(ember_tensor_dtype(y), EMBER_F16);
    ember_tensor_free(y);
    ember_tensor_free(ah);

    ctx->be[EMBER_BACKEND_CPU].ops = saved;
    ember_tensor_free(a);
    ember_tensor_free(qb);
    ember_context_destroy(ctx);
}

/* ---- the check function against the op ---- */

static void expect_same_q_matmul(const ember_tensor *a, const ember_tensor *b) {
    char detail[4096];
    ember_clear_error();
    long live0 = ember__alloc_live();
    ember__alloc_fail_at(1000000000L);
    ember_status cs = ember_check_q_matmul(a, b);
    long allocs = ember__alloc_count();
    ember__alloc_fail_at(0);
    CU_ASSERT_EQUAL(allocs, 0);
    CU_ASSERT_EQUAL(ember__alloc_live(), live0);
    snprintf(detail, sizeof detail, "%s", ember_last_error());
    ember_clear_error();
    ember_tensor *o = NULL;
    ember_status os = ember_q_matmul(a, b, &o);
    CU_ASSERT_EQUAL(cs, os);
    if (cs != os)
        fprintf(stderr, "  check %s (%s), op %s (%s)\n", ember_status_name(cs), detail,
                ember_status_name(os), ember_last_error());
    if (os != EMBER_OK) {
        CU_ASSERT_STRING_EQUAL(detail, ember_last_error());
    }
    ember_tensor_free(o);
}

static void test_check_q_matmul_matches_op(void) {
    const ember_quant_propagation props[2] = {EMBER_QUANT_INHIBIT, EMBER_QUANT_PROPAGATE};
    for (int p = 0; p < 2; p++) {
        ember_context *ctx = mock_context();
        ctx->opts.quant_propagation = props[p];
        const int64_t blk[2] = {2, 2};
        ember_qscheme s = q8s(),
                      sbk = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, blk);
        const int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s34[2] = {3, 4}, s44[2] = {4, 4};
        const int64_t s1[1] = {3}, b3[3] = {3, 2, 3}, b2[3] = {2, 3, 2};
        ember_tensor *t[12];
        t[0] = mk_f32(ctx, TU_CPU, 2, s23, &rng);
        t[1] = mk_q(ctx, TU_CPU, &s, 2, s32, &rng);
        t[2] = mk_f32(ctx, MOCK0, 2, s32, &rng);
        t[3] = mk_q(ctx, MOCK1, &s, 2, s32, &rng);
        t[4] = mk_f32(ctx, TU_CPU, 1, s1, &rng);
        t[5] = mk_q(ctx, TU_CPU, &s, 2, s23, &rng);
        t[6] = mk_f32(ctx, TU_CPU, 3, b3, &rng);
        t[7] = mk_q(ctx, TU_CPU, &s, 3, b2, &rng);
        t[8] = mk_f32(ctx, TU_CPU, 2, s34, &rng);
        t[9] = mk_q(ctx, TU_CPU, &sbk, 2, s44, &rng);
        int32_t iv[6] = {0};
        TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_I32, 2, s23, iv, &t[10]));
        t[11] = mk_f32(ctx, TU_CPU, 2, s32, &rng);
        TU_OK(ember_tensor_set_autodiff(t[11], EMBER_AUTODIFF_BALANCED));
        for (int i = 0; i < 12; i++)
            for (int j = 0; j < 12; j++)
                expect_same_q_matmul(t[i], t[j]);
        expect_same_q_matmul(NULL, t[1]);
        expect_same_q_matmul(t[0], NULL);
        for (int i = 0; i < 12; i++)
            ember_tensor_free(t[i]);
        ember_context_destroy(ctx);
    }
}

static void test_q_matmul_misuse_and_oom(void) {
    ember_context *ctx = ctx_with(EMBER_QUANT_PROPAGATE);
    ember_qscheme s = q8s();
    const int64_t sa[2] = {3, 8}, sb[2] = {8, 4};
    ember_tensor *a = mk_f32(ctx, TU_CPU, 2, sa, &rng), *qb = mk_q(ctx, TU_CPU, &s, 2, sb, &rng);
    ember_tensor *qa = mk_q(ctx, TU_CPU, &s, 2, sa, &rng);
    TU_ASSERT_STATUS(ember_q_matmul(a, qb, NULL), EMBER_ERR_INVALID_ARGUMENT, "out is NULL");
    ember_tensor *y = OUT_SENTINEL;
    TU_ASSERT_STATUS(ember_q_matmul(NULL, qb, &y), EMBER_ERR_MISUSE, "q_matmul lhs");
    CU_ASSERT_PTR_NULL(y);
    const ember_tensor *L[3] = {a, qa, qa}, *R[3] = {qb, a, qb};
    const int64_t sa2[2] = {8, 3};
    ember_tensor *a83 = mk_f32(ctx, TU_CPU, 2, sa2, &rng);
    R[1] = a83;
    for (int arm = 0; arm < 3; arm++) {
        int done = 0;
        /* A backend may keep a packed copy of a quantized operand in its handle (weight
         * pre-packing, freed with the tensor): fill it first so that it is not counted as a leak
         * (two calls: the CPU backend packs on the second use of a decode-sized product). */
        for (int warm = 0; warm < 2; warm++) {
            y = NULL;
            TU_OK(ember_q_matmul(L[arm], R[arm], &y));
            ember_tensor_free(y);
        }
        for (long n = 1; n < 100 && !done; n++) {
            long live0 = ember__alloc_live();
            ember__alloc_fail_at(n);
            y = OUT_SENTINEL;
            ember_status st = ember_q_matmul(L[arm], R[arm], &y);
            ember__alloc_fail_at(0);
            if (st == EMBER_OK) {
                done = 1;
                CU_ASSERT_EQUAL(ember_tensor_dtype(y), EMBER_QFLOAT);
                ember_tensor_free(y);
            } else {
                TU_ASSERT_STATUS(st, EMBER_ERR_OUT_OF_MEMORY, NULL);
                CU_ASSERT_PTR_NULL(y);
                CU_ASSERT_EQUAL(ember__alloc_live(), live0);
            }
        }
        CU_ASSERT(done);
    }
    ember_tensor_free(a);
    ember_tensor_free(a83);
    ember_tensor_free(qa);
    ember_tensor_free(qb);
    ember_context_destroy(ctx);
}

static CU_TestInfo autodiff_tests[] = {
    {"set / get, only floats", test_autodiff_set_get},
    {"merge table (spec 1.2)", test_autodiff_merge_table},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo router_tests[] = {
    {"every dtype, every path", test_to_device_every_dtype},
    {"empty tensors, autodiff kept", test_to_device_empty_and_autodiff},
    {"misuse", test_to_device_misuse},
    {"check_to_device = to_device's guards", test_check_to_device_matches_op},
    {"allocation failures", test_to_device_oom},
    {"requantize_to_device", test_requantize_to_device},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo read_many_tests[] = {
    {"values, one sync per device", test_read_many_values_and_syncs},
    {"errors write nothing", test_read_many_errors},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo q_matmul_tests[] = {
    {"three arms = dequantize then matmul", test_q_matmul_arms_random},
    {"golden vectors (spec 6.5), Propagate", test_q_matmul_golden},
    {"F16 / BF16 float operand", test_q_matmul_half_output},
    {"autodiff: a fresh tracked leaf", test_q_matmul_autodiff_output},
    {"(F,F) is the float matmul", test_q_matmul_float_pair},
    {"backend entry: taken, declined, failing", test_q_matmul_backend_entry},
    {"empty operands", test_q_matmul_empty},
    {"check_q_matmul = q_matmul's guards", test_check_q_matmul_matches_op},
    {"misuse, allocation failures", test_q_matmul_misuse_and_oom},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"autodiff", suite_init, NULL, NULL, NULL, autodiff_tests},
    {"router", suite_init, NULL, NULL, NULL, router_tests},
    {"read_many", suite_init, NULL, NULL, NULL, read_many_tests},
    {"q_matmul", suite_init, NULL, NULL, NULL, q_matmul_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return tu_run("test_dispatch", suites); }
