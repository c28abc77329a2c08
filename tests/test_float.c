/* tests/test_float.c: the CPU float ops (matmul, linear, burn's linear backward family, add, mul)
 * against a float64 reference on fresh random data, and every error path of them.
 *
 * Tolerance (stated once, used everywhere): an f32 result r of a sum of k products is accepted
 * when |r - ref| <= (k + 2) * FLT_EPSILON * sum_i |a_i * b_i| + 1e-30, the classic bound on
 * recursive summation (gamma_k), which also covers blocked / FMA orders. F16 / BF16 results add
 * the rounding of the output: |ref| * 2^-11 + 2^-25 (F16) or |ref| * 2^-8 (BF16). Inputs are
 * rounded to their dtype first and the reference uses the rounded values. Elementwise ops are
 * exact up to one rounding: FLT_EPSILON * |ref| (plus the output rounding). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dispatch/internal.h"
#include "test_util.h"

static ember_context *ctx;

static int suite_init(void) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    return ember_context_create(&o, &ctx) == EMBER_OK ? 0 : 1;
}

static int suite_clean(void) {
    ember_context_destroy(ctx);
    return 0;
}

/* ---- helpers ---- */

static size_t numel_of(int rank, const int64_t *shape) {
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)shape[i];
    return n;
}

/* A random tensor of dtype dt (values in [-1, 1), rounded to dt); host copy in *host (f32 values
 * exactly as stored), malloc'd. */
static ember_tensor *rand_tensor(uint64_t *rng, ember_dtype dt, int rank, const int64_t *shape,
                                 float **host) {
    size_t n = numel_of(rank, shape);
    float *h = malloc((n ? n : 1) * sizeof *h);
    uint16_t *hh = malloc((n ? n : 1) * sizeof *hh);
    tu_rand_f32(rng, h, n, -1.0f, 1.0f);
    const void *data = h;
    if (dt == EMBER_F16 || dt == EMBER_BF16) {
        for (size_t i = 0; i < n; i++) {
            hh[i] = dt == EMBER_F16 ? ember__f32_to_f16(h[i]) : ember__f32_to_bf16(h[i]);
            h[i] = dt == EMBER_F16 ? ember__f16_to_f32(hh[i]) : ember__bf16_to_f32(hh[i]);
        }
        data = hh;
    }
    ember_tensor *t = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, dt, rank, shape, data, &t));
    free(hh);
    *host = h;
    return t;
}

/* Read a float tensor as f32 (malloc'd). */
static float *read_f32(const ember_tensor *t) {
    size_t n = (size_t)ember_tensor_numel(t);
    ember_dtype dt = ember_tensor_dtype(t);
    float *h = malloc((n ? n : 1) * sizeof *h);
    if (dt == EMBER_F32) {
        TU_OK(ember_tensor_read(t, h, n * sizeof *h));
    } else {
        uint16_t *hh = malloc((n ? n : 1) * sizeof *hh);
        TU_OK(ember_tensor_read(t, hh, n * sizeof *hh));
        for (size_t i = 0; i < n; i++)
            h[i] = dt == EMBER_F16 ? ember__f16_to_f32(hh[i]) : ember__bf16_to_f32(hh[i]);
        free(hh);
    }
    return h;
}

static double out_rounding(ember_dtype dt) {
    return dt == EMBER_F16 ? ldexp(1.0, -11) : dt == EMBER_BF16 ? ldexp(1.0, -8) : 0.0;
}

/* F16 subnormals (below 2^-14) are spaced 2^-24 apart: half of that, absolute. */
static double out_abs(ember_dtype dt) { return dt == EMBER_F16 ? ldexp(1.0, -25) : 0.0; }

/* Compare got with ref (n values); bound[i] is the sum of |products| of element i and k the
 * length of its sums. Reports the first failure. */
static void check_close(const char *what, const float *got, const double *ref, const double *bound,
                        size_t n, int64_t k, ember_dtype dt) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double tol = (double)(k + 2) * FLT_EPSILON * bound[i] + fabs(ref[i]) * out_rounding(dt) +
                     out_abs(dt) + 1e-30;
        if (!(fabs((double)got[i] - ref[i]) <= tol)) {
            if (!bad)
                fprintf(stderr, "  %s: element %zu: got %.9g, want %.9g (tol %.3g)\n", what, i,
                        (double)got[i], ref[i], tol);
            bad++;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* The offset, in an operand of shape `shape` (rank r, right-aligned under the output's batch
 * axes), of the output multi-index idx (rank R), broadcasting size-1 axes. Only the first
 * `nb` output axes are considered (the rest are handled by the caller). */
static size_t bcast_off(const int64_t *idx, int R, int nb, const int64_t *shape, int r, int rb) {
    /* operand batch axes: shape[0..rb), aligned to output axes [nb - rb, nb) */
    (void)R;
    size_t off = 0;
    for (int i = 0; i < rb; i++) {
        int oi = nb - rb + i;
        int64_t v = shape[i] == 1 ? 0 : idx[oi];
        off = off * (size_t)shape[i] + (size_t)v;
    }
    (void)r;
    return off;
}

/* Reference batched matmul in double: a [.., m, k] @ b [.., k, n] with broadcast batch axes. */
static void ref_matmul(const float *A, int ra, const int64_t *sa, const float *B, int rb,
                       const int64_t *sb, int ro, const int64_t *so, double *ref, double *bound) {
    int64_t m = sa[ra - 2], k = sa[ra - 1], n = sb[rb - 1];
    int nb = ro - 2;
    size_t batch = numel_of(nb, so);
    int64_t idx[EMBER_MAX_RANK] = {0};
    for (size_t t = 0; t < batch; t++) {
        size_t rem = t;
        for (int i = nb - 1; i >= 0; i--) {
            idx[i] = (int64_t)(rem % (size_t)so[i]);
            rem /= (size_t)so[i];
        }
        size_t ao = bcast_off(idx, ro, nb, sa, ra, ra - 2) * (size_t)(m * k);
        size_t bo = bcast_off(idx, ro, nb, sb, rb, rb - 2) * (size_t)(k * n);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0, s_abs = 0;
                for (int64_t p = 0; p < k; p++) {
                    double prod = (double)A[ao + (size_t)(i * k + p)] * B[bo + (size_t)(p * n + j)];
                    s += prod;
                    s_abs += fabs(prod);
                }
                size_t o = t * (size_t)(m * n) + (size_t)(i * n + j);
                ref[o] = s;
                bound[o] = s_abs;
            }
    }
}

static void assert_shape(const ember_tensor *t, int rank, const int64_t *shape) {
    CU_ASSERT_EQUAL_FATAL(ember_tensor_rank(t), rank);
    for (int i = 0; i < rank; i++)
        CU_ASSERT_EQUAL(ember_tensor_dim(t, i), shape[i]);
}

static void matmul_case(uint64_t *rng, ember_dtype dt, int ra, const int64_t *sa, int rb,
                        const int64_t *sb, int ro, const int64_t *so) {
    float *A, *B;
    ember_tensor *a = rand_tensor(rng, dt, ra, sa, &A);
    ember_tensor *b = rand_tensor(rng, dt, rb, sb, &B);
    ember_tensor *c = NULL;
    TU_OK(ember_matmul(a, b, &c));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    assert_shape(c, ro, so);
    CU_ASSERT_EQUAL(ember_tensor_dtype(c), dt);
    size_t n = numel_of(ro, so);
    double *ref = malloc((n ? n : 1) * sizeof *ref), *bound = malloc((n ? n : 1) * sizeof *bound);
    ref_matmul(A, ra, sa, B, rb, sb, ro, so, ref, bound);
    float *got = read_f32(c);
    check_close("matmul", got, ref, bound, n, sa[ra - 1], dt);
    free(got);
    free(ref);
    free(bound);
    free(A);
    free(B);
    ember_tensor_free(a);
    ember_tensor_free(b);
    ember_tensor_free(c);
}

static uint64_t rng_for(uint64_t salt) { return tu_seed() ^ (salt * 0x9e3779b97f4a7c15ull); }

/* ---- matmul ---- */

static void test_matmul_2d(void) {
    uint64_t rng = rng_for(1);
    const int64_t sa[] = {7, 13}, sb[] = {13, 5}, so[] = {7, 5};
    matmul_case(&rng, EMBER_F32, 2, sa, 2, sb, 2, so);
    const int64_t la[] = {64, 96}, lb[] = {96, 80}, lo[] = {64, 80};
    matmul_case(&rng, EMBER_F32, 2, la, 2, lb, 2, lo);
    const int64_t va[] = {1, 33}, vb[] = {33, 1}, vo[] = {1, 1};
    matmul_case(&rng, EMBER_F32, 2, va, 2, vb, 2, vo);
}

static void test_matmul_batch_broadcast(void) {
    uint64_t rng = rng_for(2);
    /* burn's case: equal ranks, size-1 axes stretch on either side */
    const int64_t sa[] = {3, 1, 2, 4}, sb[] = {1, 5, 4, 3}, so[] = {3, 5, 2, 3};
    matmul_case(&rng, EMBER_F32, 4, sa, 4, sb, 4, so);
    /* equal batch dims, no broadcast */
    const int64_t ea[] = {4, 6, 7}, eb[] = {4, 7, 3}, eo[] = {4, 6, 3};
    matmul_case(&rng, EMBER_F32, 3, ea, 3, eb, 3, eo);
    /* different ranks: the lower one is left-padded with 1s */
    const int64_t da[] = {2, 1, 4, 3, 5}, db[] = {3, 4, 5, 6}, dout[] = {2, 3, 4, 3, 6};
    matmul_case(&rng, EMBER_F32, 5, da, 4, db, 5, dout);
    /* one rhs for every batch (folded into one GEMM), with and without size-1 batch axes */
    const int64_t wa[] = {2, 3, 4, 5}, wb[] = {5, 2}, wo[] = {2, 3, 4, 2};
    matmul_case(&rng, EMBER_F32, 4, wa, 2, wb, 4, wo);
    const int64_t fa[] = {3, 4, 5}, fb[] = {1, 5, 2}, fo[] = {3, 4, 2};
    matmul_case(&rng, EMBER_F32, 3, fa, 3, fb, 3, fo);
    matmul_case(&rng, EMBER_BF16, 3, fa, 3, fb, 3, fo);
    /* the lhs broadcast instead: not foldable */
    const int64_t ga[] = {1, 4, 5}, gb[] = {3, 5, 2}, go[] = {3, 4, 2};
    matmul_case(&rng, EMBER_F32, 3, ga, 3, gb, 3, go);
    /* rank 8 */
    const int64_t ra[] = {2, 1, 2, 1, 2, 1, 3, 4}, rb[] = {1, 2, 1, 2, 1, 2, 4, 2},
                  ro[] = {2, 2, 2, 2, 2, 2, 3, 2};
    matmul_case(&rng, EMBER_F32, 8, ra, 8, rb, 8, ro);
}

static void test_matmul_empty(void) {
    uint64_t rng = rng_for(3);
    /* k = 0: an empty sum, the output is all zeros */
    const int64_t sa[] = {2, 0}, sb[] = {0, 3}, so[] = {2, 3};
    matmul_case(&rng, EMBER_F32, 2, sa, 2, sb, 2, so);
    /* m = 0 and an empty batch axis: empty outputs */
    const int64_t ma[] = {0, 3}, mb[] = {3, 2}, mo[] = {0, 2};
    matmul_case(&rng, EMBER_F32, 2, ma, 2, mb, 2, mo);
    const int64_t za[] = {0, 2, 3}, zb[] = {3, 2}, zo[] = {0, 2, 2};
    matmul_case(&rng, EMBER_F32, 3, za, 2, zb, 3, zo);
}

static void test_matmul_half(void) {
    uint64_t rng = rng_for(4);
    const int64_t sa[] = {2, 9, 17}, sb[] = {1, 17, 6}, so[] = {2, 9, 6};
    matmul_case(&rng, EMBER_F16, 3, sa, 3, sb, 3, so);
    matmul_case(&rng, EMBER_BF16, 3, sa, 3, sb, 3, so);
}

/* ---- linear ---- */

static void linear_case(uint64_t *rng, ember_dtype dt, int rx, const int64_t *sx, int64_t d_out,
                        int with_bias) {
    const int64_t d_in = sx[rx - 1];
    const int64_t sw[] = {d_in, d_out};
    float *X, *W, *Bv = NULL;
    ember_tensor *x = rand_tensor(rng, dt, rx, sx, &X);
    ember_tensor *w = rand_tensor(rng, dt, 2, sw, &W);
    ember_tensor *b = with_bias ? rand_tensor(rng, dt, 1, &d_out, &Bv) : NULL;
    ember_tensor *y = NULL;
    TU_OK(ember_linear(x, w, b, &y));
    CU_ASSERT_PTR_NOT_NULL_FATAL(y);
    int64_t so[EMBER_MAX_RANK];
    memcpy(so, sx, (size_t)rx * sizeof sx[0]);
    so[rx - 1] = d_out;
    assert_shape(y, rx, so);
    CU_ASSERT_EQUAL(ember_tensor_dtype(y), dt);
    size_t rows = numel_of(rx - 1, sx), n = rows * (size_t)d_out;
    double *ref = malloc((n ? n : 1) * sizeof *ref), *bound = malloc((n ? n : 1) * sizeof *bound);
    for (size_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < d_out; j++) {
            double s = with_bias ? Bv[j] : 0.0, sa = fabs(s);
            for (int64_t p = 0; p < d_in; p++) {
                double prod = (double)X[r * (size_t)d_in + (size_t)p] * W[p * d_out + j];
                s += prod;
                sa += fabs(prod);
            }
            ref[r * (size_t)d_out + (size_t)j] = s;
            bound[r * (size_t)d_out + (size_t)j] = sa;
        }
    float *got = read_f32(y);
    check_close("linear", got, ref, bound, n, d_in + 1, dt);
    free(got);
    free(ref);
    free(bound);
    free(X);
    free(W);
    free(Bv);
    ember_tensor_free(x);
    ember_tensor_free(w);
    ember_tensor_free(b);
    ember_tensor_free(y);
}

static void test_linear(void) {
    uint64_t rng = rng_for(5);
    const int64_t x2[] = {6, 11};
    linear_case(&rng, EMBER_F32, 2, x2, 7, 0);
    linear_case(&rng, EMBER_F32, 2, x2, 7, 1);
    const int64_t x3[] = {2, 3, 5};
    linear_case(&rng, EMBER_F32, 3, x3, 4, 1);
    linear_case(&rng, EMBER_F32, 3, x3, 4, 0);
    const int64_t x1[] = {9}; /* a 1-D x gives a 1-D y */
    linear_case(&rng, EMBER_F32, 1, x1, 3, 1);
    const int64_t x4[] = {2, 2, 3, 8};
    linear_case(&rng, EMBER_F16, 4, x4, 5, 1);
    linear_case(&rng, EMBER_BF16, 4, x4, 5, 1);
}

/* ---- the backward family ---- */

static void test_linear_x_backward(void) {
    uint64_t rng = rng_for(6);
    const ember_dtype dts[] = {EMBER_F32, EMBER_F16};
    for (int t = 0; t < 2; t++) {
        const int64_t d_in = 5, d_out = 4, sw[] = {5, 4}, sdy[] = {2, 3, 4}, sdx[] = {2, 3, 5};
        float *W, *DY;
        ember_tensor *w = rand_tensor(&rng, dts[t], 2, sw, &W);
        ember_tensor *dy = rand_tensor(&rng, dts[t], 3, sdy, &DY);
        ember_tensor *dx = NULL;
        TU_OK(ember_linear_x_backward(w, dy, &dx));
        CU_ASSERT_PTR_NOT_NULL_FATAL(dx);
        assert_shape(dx, 3, sdx);
        CU_ASSERT_EQUAL(ember_tensor_dtype(dx), dts[t]);
        double ref[30], bound[30];
        for (int r = 0; r < 6; r++)
            for (int i = 0; i < d_in; i++) {
                double s = 0, sa = 0;
                for (int j = 0; j < d_out; j++) { /* dy @ Wᵀ */
                    double p = (double)DY[r * d_out + j] * W[i * d_out + j];
                    s += p;
                    sa += fabs(p);
                }
                ref[r * d_in + i] = s;
                bound[r * d_in + i] = sa;
            }
        float *got = read_f32(dx);
        check_close("linear_x_backward", got, ref, bound, 30, d_out, dts[t]);
        free(got);
        free(W);
        free(DY);
        ember_tensor_free(w);
        ember_tensor_free(dy);
        ember_tensor_free(dx);
    }
}

static void test_linear_weight_backward(void) {
    uint64_t rng = rng_for(7);
    const ember_dtype dts[] = {EMBER_F32, EMBER_BF16};
    for (int t = 0; t < 2; t++) {
        const int64_t d_in = 5, d_out = 4, sx[] = {2, 3, 5}, sdy[] = {2, 3, 4}, sdw[] = {5, 4};
        float *X, *DY;
        ember_tensor *x = rand_tensor(&rng, dts[t], 3, sx, &X);
        ember_tensor *dy = rand_tensor(&rng, dts[t], 3, sdy, &DY);
        ember_tensor *dw = NULL;
        TU_OK(ember_linear_weight_backward(x, dy, &dw));
        CU_ASSERT_PTR_NOT_NULL_FATAL(dw);
        assert_shape(dw, 2, sdw);
        double ref[20], bound[20];
        for (int i = 0; i < d_in; i++)
            for (int j = 0; j < d_out; j++) {
                double s = 0, sa = 0;
                for (int r = 0; r < 6; r++) { /* flatten(x)ᵀ @ flatten(dy): sums the batch */
                    double p = (double)X[r * d_in + i] * DY[r * d_out + j];
                    s += p;
                    sa += fabs(p);
                }
                ref[i * d_out + j] = s;
                bound[i * d_out + j] = sa;
            }
        float *got = read_f32(dw);
        check_close("linear_weight_backward", got, ref, bound, 20, 6, dts[t]);
        free(got);
        free(X);
        free(DY);
        ember_tensor_free(x);
        ember_tensor_free(dy);
        ember_tensor_free(dw);
    }
}

static void test_linear_bias_backward(void) {
    uint64_t rng = rng_for(8);
    /* sums every axis but the last */
    const int64_t sdy[] = {2, 3, 7};
    float *DY;
    ember_tensor *dy = rand_tensor(&rng, EMBER_F32, 3, sdy, &DY);
    ember_tensor *db = NULL;
    TU_OK(ember_linear_bias_backward(dy, &db));
    CU_ASSERT_PTR_NOT_NULL_FATAL(db);
    const int64_t sdb[] = {7};
    assert_shape(db, 1, sdb);
    double ref[7], bound[7];
    for (int j = 0; j < 7; j++) {
        ref[j] = bound[j] = 0;
        for (int r = 0; r < 6; r++) {
            ref[j] += DY[r * 7 + j];
            bound[j] += fabs(DY[r * 7 + j]);
        }
    }
    float *got = read_f32(db);
    check_close("linear_bias_backward", got, ref, bound, 7, 6, EMBER_F32);
    free(got);
    ember_tensor_free(db);
    ember_tensor_free(dy);
    free(DY);
    /* a 1-D output_grad is its own sum; F16 keeps its dtype */
    const int64_t s1[] = {5};
    dy = rand_tensor(&rng, EMBER_F16, 1, s1, &DY);
    TU_OK(ember_linear_bias_backward(dy, &db));
    CU_ASSERT_EQUAL(ember_tensor_dtype(db), EMBER_F16);
    got = read_f32(db);
    for (int j = 0; j < 5; j++)
        CU_ASSERT_EQUAL(got[j], DY[j]);
    free(got);
    free(DY);
    ember_tensor_free(db);
    ember_tensor_free(dy);
}

/* ---- add / mul ---- */

static void binary_case(uint64_t *rng, int is_mul, ember_dtype dt, int ra, const int64_t *sa,
                        int rb, const int64_t *sb, int ro, const int64_t *so) {
    float *A, *B;
    ember_tensor *a = rand_tensor(rng, dt, ra, sa, &A);
    ember_tensor *b = rand_tensor(rng, dt, rb, sb, &B);
    ember_tensor *c = NULL;
    TU_OK(is_mul ? ember_mul(a, b, &c) : ember_add(a, b, &c));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    assert_shape(c, ro, so);
    CU_ASSERT_EQUAL(ember_tensor_dtype(c), dt);
    size_t n = numel_of(ro, so);
    float *got = read_f32(c);
    size_t bad = 0;
    int64_t idx[EMBER_MAX_RANK];
    for (size_t o = 0; o < n; o++) {
        size_t rem = o;
        for (int i = ro - 1; i >= 0; i--) {
            idx[i] = (int64_t)(rem % (size_t)so[i]);
            rem /= (size_t)so[i];
        }
        size_t ao = bcast_off(idx, ro, ro, sa, ra, ra), bo = bcast_off(idx, ro, ro, sb, rb, rb);
        double ref = is_mul ? (double)A[ao] * B[bo] : (double)A[ao] + B[bo];
        double tol = fabs(ref) * (FLT_EPSILON + out_rounding(dt)) + out_abs(dt);
        if (!(fabs(got[o] - ref) <= tol) && bad++ == 0)
            fprintf(stderr, "  %s: element %zu: got %.9g want %.9g\n", is_mul ? "mul" : "add", o,
                    (double)got[o], ref);
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(got);
    free(A);
    free(B);
    ember_tensor_free(a);
    ember_tensor_free(b);
    ember_tensor_free(c);
}

static void test_add_mul(void) {
    uint64_t rng = rng_for(9);
    for (int mul = 0; mul < 2; mul++) {
        const int64_t s[] = {3, 4};
        binary_case(&rng, mul, EMBER_F32, 2, s, 2, s, 2, s);
        const int64_t a[] = {2, 1, 3}, b[] = {4, 1}, o[] = {2, 4, 3};
        binary_case(&rng, mul, EMBER_F32, 3, a, 2, b, 3, o);
        const int64_t one[] = {1}, big[] = {2, 3, 5};
        binary_case(&rng, mul, EMBER_F32, 1, one, 3, big, 3, big);
        binary_case(&rng, mul, EMBER_F32, 3, big, 1, one, 3, big);
        const int64_t row[] = {5};
        binary_case(&rng, mul, EMBER_F16, 3, big, 1, row, 3, big);
        binary_case(&rng, mul, EMBER_BF16, 1, row, 3, big, 3, big);
        const int64_t e1[] = {0, 3}, e2[] = {1, 3};
        binary_case(&rng, mul, EMBER_F32, 2, e1, 2, e2, 2, e1);
    }
}

/* ---- autodiff context of the outputs (burn's validate_checkpointing) ---- */

static void test_autodiff_merge(void) {
    uint64_t rng = rng_for(10);
    const int64_t s[] = {3, 3};
    float *A, *B;
    ember_tensor *a = rand_tensor(&rng, EMBER_F32, 2, s, &A);
    ember_tensor *b = rand_tensor(&rng, EMBER_F32, 2, s, &B);
    ember_tensor *c = NULL;
    a->autodiff = EMBER_AUTODIFF_BALANCED; /* tests reach the field directly */
    TU_OK(ember_matmul(a, b, &c));
    CU_ASSERT_EQUAL(c->autodiff, EMBER_AUTODIFF_BALANCED);
    ember_tensor_free(c);
    TU_OK(ember_add(b, a, &c));
    CU_ASSERT_EQUAL(c->autodiff, EMBER_AUTODIFF_BALANCED);
    ember_tensor_free(c);
    b->autodiff = EMBER_AUTODIFF_NO_CHECKPOINTING;
    c = (ember_tensor *)&rng;
    TU_ASSERT_STATUS(ember_mul(a, b, &c), EMBER_ERR_CHECKPOINT_MISMATCH,
                     "Gradient checkpointing strategy mismatch");
    CU_ASSERT_PTR_NULL(c);
    c = (ember_tensor *)&rng;
    TU_ASSERT_STATUS(ember_matmul(a, b, &c), EMBER_ERR_CHECKPOINT_MISMATCH,
                     "Tensors in the same operation must share a strategy");
    CU_ASSERT_PTR_NULL(c);
    CU_ASSERT_EQUAL(a->autodiff, EMBER_AUTODIFF_BALANCED);
    CU_ASSERT_EQUAL(b->autodiff, EMBER_AUTODIFF_NO_CHECKPOINTING);
    free(A);
    free(B);
    ember_tensor_free(a);
    ember_tensor_free(b);
}

/* ---- error paths ---- */

/* Operands kept with a snapshot of their contents, to show that a failing op left them alone. */
typedef struct snap {
    const ember_tensor *t;
    ember_tensor copy; /* the handle's fields */
    void *data;
    size_t bytes;
} snap;

static void snap_take(snap *s, const ember_tensor *t) {
    s->t = t;
    s->copy = *t;
    s->bytes = t->nbytes;
    s->data = malloc(s->bytes ? s->bytes : 1);
    memcpy(s->data, t->buf, s->bytes);
}

static void snap_check(snap *s) {
    const ember_tensor *t = s->t;
    CU_ASSERT_EQUAL(t->magic, EMBER__TENSOR_MAGIC);
    CU_ASSERT_EQUAL(t->dtype, s->copy.dtype);
    CU_ASSERT_EQUAL(t->rank, s->copy.rank);
    CU_ASSERT_EQUAL(memcmp(t->shape, s->copy.shape, sizeof t->shape), 0);
    CU_ASSERT_EQUAL(t->autodiff, s->copy.autodiff);
    CU_ASSERT_EQUAL(t->buf, s->copy.buf);
    CU_ASSERT_EQUAL(memcmp(t->buf, s->data, s->bytes), 0);
    free(s->data);
}

typedef struct fixture {
    uint64_t rng;
    float *h[16];
    ember_tensor *t[16];
    int n;
} fixture;

static ember_tensor *fx_add(fixture *f, ember_dtype dt, int rank, const int64_t *shape) {
    CU_ASSERT_FATAL(f->n < (int)(sizeof f->t / sizeof f->t[0]));
    ember_tensor *t = rand_tensor(&f->rng, dt, rank, shape, &f->h[f->n]);
    f->t[f->n++] = t;
    return t;
}

static void fx_free(fixture *f) {
    for (int i = 0; i < f->n; i++) {
        ember_tensor_free(f->t[i]);
        free(f->h[i]);
    }
}

/* A fake handle of another backend / device (never freed; only its fields are read). */
static ember_tensor fake_on(const ember_tensor *like, ember_backend b, int index) {
    ember_tensor f = *like;
    f.device.backend = b;
    f.device.index = index;
    return f;
}

static void test_matmul_errors(void) {
    fixture f = {.rng = rng_for(11)};
    const int64_t s23[] = {2, 3}, s45[] = {4, 5}, s35[] = {3, 5}, s3[] = {3};
    const int64_t b234[] = {2, 3, 4}, b345[] = {3, 4, 5};
    ember_tensor *a = fx_add(&f, EMBER_F32, 2, s23), *b = fx_add(&f, EMBER_F32, 2, s45);
    ember_tensor *ok = fx_add(&f, EMBER_F32, 2, s35), *v = fx_add(&f, EMBER_F32, 1, s3);
    ember_tensor *h = fx_add(&f, EMBER_F16, 2, s35), *x = fx_add(&f, EMBER_F32, 3, b234);
    ember_tensor *y = fx_add(&f, EMBER_F32, 3, b345);
    int32_t ints[15] = {1, 2, 3};
    ember_tensor *i32 = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_I32, 2, s35, ints, &i32));
    snap sa, sb;
    snap_take(&sa, a);
    snap_take(&sb, b);
    ember_tensor *o;

    TU_ASSERT_STATUS(ember_matmul(a, ok, NULL), EMBER_ERR_INVALID_ARGUMENT, "matmul: out is NULL");
    EXPECT_REFUSED_OUT(o, ember_matmul(NULL, ok, &o), EMBER_ERR_MISUSE,
                       "matmul lhs: tensor is NULL");
    EXPECT_REFUSED_OUT(o, ember_matmul(a, NULL, &o), EMBER_ERR_MISUSE,
                       "matmul rhs: tensor is NULL");
    uint64_t junk[64];
    memset(junk, 0x5a, sizeof junk);
    EXPECT_REFUSED_OUT(o, ember_matmul(a, (const ember_tensor *)junk, &o), EMBER_ERR_MISUSE,
                       "foreign pointer");
    ember_tensor dead = *a;
    dead.magic = EMBER__DEAD_MAGIC; /* what ember_tensor_free leaves behind */
    EXPECT_REFUSED_OUT(o, ember_matmul(&dead, ok, &o), EMBER_ERR_MISUSE, "already freed");
    /* inner dims differ: both shapes in the detail */
    EXPECT_REFUSED_OUT(o, ember_matmul(a, b, &o), EMBER_ERR_SHAPE_MISMATCH, "[2, 3]");
    CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "[4, 5]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "matmul"));
    /* batch axes that cannot broadcast */
    EXPECT_REFUSED_OUT(o, ember_matmul(x, y, &o), EMBER_ERR_SHAPE_MISMATCH, "[2, 3, 4]");
    CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "[3, 4, 5]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "broadcast"));
    /* rank 1 is not promoted */
    EXPECT_REFUSED_OUT(o, ember_matmul(v, ok, &o), EMBER_ERR_SHAPE_MISMATCH, "[3]");
    CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "rank >= 2"));
    /* dtypes */
    EXPECT_REFUSED_OUT(o, ember_matmul(a, h, &o), EMBER_ERR_DTYPE_MISMATCH, "F32");
    CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "F16"));
    EXPECT_REFUSED_OUT(o, ember_matmul(a, i32, &o), EMBER_ERR_DTYPE_MISMATCH, "I32");
    /* backend and device guards, checked before anything else of the operands */
    ember_tensor on_cl = fake_on(ok, EMBER_BACKEND_OPENCL, 0);
    EXPECT_REFUSED_OUT(
        o, ember_matmul(a, &on_cl, &o), EMBER_ERR_BACKEND_MISMATCH,
        "matmul: The provided tensors are not on the same backend. Got backends cpu and "
        "opencl.");
    ember_tensor on_cl1 = fake_on(b, EMBER_BACKEND_OPENCL, 1);
    ember_tensor on_cl0 = fake_on(ok, EMBER_BACKEND_OPENCL, 0);
    EXPECT_REFUSED_OUT(o, ember_matmul(&on_cl1, &on_cl0, &o), EMBER_ERR_DEVICE_MISMATCH,
                       "Input tensor 1 is on the wrong device");
    CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "opencl:1"));
    /* a tensor of another context is on another device instance */
    ember_context *ctx2 = tu_cpu_context();
    float one[15] = {1};
    ember_tensor *other = NULL;
    TU_OK(ember_tensor_from_data(ctx2, TU_CPU, EMBER_F32, 2, s35, one, &other));
    EXPECT_REFUSED_OUT(o, ember_matmul(a, other, &o), EMBER_ERR_DEVICE_MISMATCH,
                       "different ember contexts");
    ember_tensor_free(other);
    ember_context_destroy(ctx2);
    snap_check(&sa);
    snap_check(&sb);
    ember_tensor_free(i32);
    fx_free(&f);
}

static void test_linear_errors(void) {
    fixture f = {.rng = rng_for(12)};
    const int64_t sx[] = {2, 4}, sw[] = {4, 3}, sw_bad[] = {5, 3}, sw3[] = {1, 4, 3}, sb[] = {3},
                  sb_bad[] = {4}, sb2[] = {1, 3};
    ember_tensor *x = fx_add(&f, EMBER_F32, 2, sx), *w = fx_add(&f, EMBER_F32, 2, sw);
    ember_tensor *wbad = fx_add(&f, EMBER_F32, 2, sw_bad), *w3 = fx_add(&f, EMBER_F32, 3, sw3);
    ember_tensor *b = fx_add(&f, EMBER_F32, 1, sb), *bbad = fx_add(&f, EMBER_F32, 1, sb_bad);
    ember_tensor *b2 = fx_add(&f, EMBER_F32, 2, sb2), *bh = fx_add(&f, EMBER_F16, 1, sb);
    ember_tensor *wh = fx_add(&f, EMBER_BF16, 2, sw);
    snap s1, s2, s3;
    snap_take(&s1, x);
    snap_take(&s2, w);
    snap_take(&s3, b);
    ember_tensor *o;
    TU_ASSERT_STATUS(ember_linear(x, w, b, NULL), EMBER_ERR_INVALID_ARGUMENT, "out is NULL");
    EXPECT_REFUSED_OUT(o, ember_linear(NULL, w, b, &o), EMBER_ERR_MISUSE,
                       "linear x: tensor is NULL");
    EXPECT_REFUSED_OUT(o, ember_linear(x, NULL, b, &o), EMBER_ERR_MISUSE, "linear weight");
    ember_tensor dead = *b;
    dead.magic = EMBER__DEAD_MAGIC;
    EXPECT_REFUSED_OUT(o, ember_linear(x, w, &dead, &o), EMBER_ERR_MISUSE, "linear bias");
    EXPECT_REFUSED_OUT(o, ember_linear(x, wbad, b, &o), EMBER_ERR_SHAPE_MISMATCH, "[2, 4]");
    CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "[5, 3]"));
    EXPECT_REFUSED_OUT(o, ember_linear(x, w3, NULL, &o), EMBER_ERR_SHAPE_MISMATCH, "[1, 4, 3]");
    EXPECT_REFUSED_OUT(o, ember_linear(x, w, bbad, &o), EMBER_ERR_SHAPE_MISMATCH, "bias [4]");
    CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "[4, 3]"));
    EXPECT_REFUSED_OUT(o, ember_linear(x, w, b2, &o), EMBER_ERR_SHAPE_MISMATCH, "bias [1, 3]");
    EXPECT_REFUSED_OUT(o, ember_linear(x, w, bh, &o), EMBER_ERR_DTYPE_MISMATCH, "F16");
    EXPECT_REFUSED_OUT(o, ember_linear(x, wh, NULL, &o), EMBER_ERR_DTYPE_MISMATCH, "BF16");
    ember_tensor bcl = fake_on(b, EMBER_BACKEND_OPENCL, 0),
                 wcl = fake_on(w, EMBER_BACKEND_OPENCL, 0);
    EXPECT_REFUSED_OUT(o, ember_linear(x, w, &bcl, &o), EMBER_ERR_BACKEND_MISMATCH,
                       "Got backends cpu and opencl.");
    EXPECT_REFUSED_OUT(o, ember_linear(x, &wcl, b, &o), EMBER_ERR_BACKEND_MISMATCH,
                       "linear: The provided tensors are not on the same backend.");
    snap_check(&s1);
    snap_check(&s2);
    snap_check(&s3);
    fx_free(&f);
}

static void test_backward_errors(void) {
    fixture f = {.rng = rng_for(13)};
    const int64_t sw[] = {5, 4}, sdy[] = {2, 3, 4}, sx[] = {2, 3, 5}, sx_bad[] = {3, 2, 5},
                  sdy_bad[] = {2, 3, 6};
    ember_tensor *w = fx_add(&f, EMBER_F32, 2, sw), *dy = fx_add(&f, EMBER_F32, 3, sdy);
    ember_tensor *x = fx_add(&f, EMBER_F32, 3, sx), *xbad = fx_add(&f, EMBER_F32, 3, sx_bad);
    ember_tensor *dybad = fx_add(&f, EMBER_F32, 3, sdy_bad), *dyh = fx_add(&f, EMBER_F16, 3, sdy);
    snap s1, s2, s3;
    snap_take(&s1, w);
    snap_take(&s2, dy);
    snap_take(&s3, x);
    ember_tensor *o;
    TU_ASSERT_STATUS(ember_linear_x_backward(w, dy, NULL), EMBER_ERR_INVALID_ARGUMENT,
                     "dx is NULL");
    TU_ASSERT_STATUS(ember_linear_weight_backward(x, dy, NULL), EMBER_ERR_INVALID_ARGUMENT,
                     "dw is NULL");
    TU_ASSERT_STATUS(ember_linear_bias_backward(dy, NULL), EMBER_ERR_INVALID_ARGUMENT,
                     "db is NULL");
    EXPECT_REFUSED_OUT(o, ember_linear_x_backward(NULL, dy, &o), EMBER_ERR_MISUSE,
                       "tensor is NULL");
    EXPECT_REFUSED_OUT(o, ember_linear_weight_backward(x, NULL, &o), EMBER_ERR_MISUSE,
                       "tensor is NULL");
    EXPECT_REFUSED_OUT(o, ember_linear_bias_backward(NULL, &o), EMBER_ERR_MISUSE, "tensor is NULL");

    /* a tracked input: burn's sentinel, whichever input it is, whatever the strategy */
    const ember_autodiff strategies[] = {EMBER_AUTODIFF_BALANCED, EMBER_AUTODIFF_NO_CHECKPOINTING};
    for (int s = 0; s < 2; s++) {
        w->autodiff = strategies[s];
        EXPECT_REFUSED_OUT(o, ember_linear_x_backward(w, dy, &o), EMBER_ERR_NOT_DIFFERENTIABLE,
                           NULL);
        CU_ASSERT_STRING_EQUAL(ember_last_error(), "Can't differentiate linear_x_backward.");
        w->autodiff = EMBER_AUTODIFF_DISABLED;
        dy->autodiff = strategies[s];
        EXPECT_REFUSED_OUT(o, ember_linear_x_backward(w, dy, &o), EMBER_ERR_NOT_DIFFERENTIABLE,
                           NULL);
        CU_ASSERT_STRING_EQUAL(ember_last_error(), "Can't differentiate linear_x_backward.");
        EXPECT_REFUSED_OUT(o, ember_linear_weight_backward(x, dy, &o), EMBER_ERR_NOT_DIFFERENTIABLE,
                           NULL);
        CU_ASSERT_STRING_EQUAL(ember_last_error(), "Can't differentiate linear_weight_backward.");
        EXPECT_REFUSED_OUT(o, ember_linear_bias_backward(dy, &o), EMBER_ERR_NOT_DIFFERENTIABLE,
                           NULL);
        CU_ASSERT_STRING_EQUAL(ember_last_error(), "Can't differentiate linear_bias_backward.");
        dy->autodiff = EMBER_AUTODIFF_DISABLED;
        x->autodiff = strategies[s];
        EXPECT_REFUSED_OUT(o, ember_linear_weight_backward(x, dy, &o), EMBER_ERR_NOT_DIFFERENTIABLE,
                           NULL);
        CU_ASSERT_STRING_EQUAL(ember_last_error(), "Can't differentiate linear_weight_backward.");
        x->autodiff = EMBER_AUTODIFF_DISABLED;
    }
    /* the sentinel fires before any shape check, as burn's does */
    dybad->autodiff = EMBER_AUTODIFF_BALANCED;
    EXPECT_REFUSED_OUT(o, ember_linear_x_backward(w, dybad, &o), EMBER_ERR_NOT_DIFFERENTIABLE,
                       "Can't differentiate linear_x_backward.");
    dybad->autodiff = EMBER_AUTODIFF_DISABLED;

    /* shapes */
    EXPECT_REFUSED_OUT(o, ember_linear_x_backward(w, dybad, &o), EMBER_ERR_SHAPE_MISMATCH,
                       "[5, 4]");
    CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "[2, 3, 6]"));
    EXPECT_REFUSED_OUT(o, ember_linear_x_backward(x, dy, &o), EMBER_ERR_SHAPE_MISMATCH,
                       "[2, 3, 5]");
    EXPECT_REFUSED_OUT(o, ember_linear_weight_backward(xbad, dy, &o), EMBER_ERR_SHAPE_MISMATCH,
                       "[3, 2, 5]");
    CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "[2, 3, 4]"));
    EXPECT_REFUSED_OUT(o, ember_linear_weight_backward(w, dy, &o), EMBER_ERR_SHAPE_MISMATCH,
                       "[5, 4]");
    /* dtypes and backends */
    EXPECT_REFUSED_OUT(o, ember_linear_x_backward(w, dyh, &o), EMBER_ERR_DTYPE_MISMATCH, "F16");
    EXPECT_REFUSED_OUT(o, ember_linear_weight_backward(x, dyh, &o), EMBER_ERR_DTYPE_MISMATCH,
                       "F16");
    ember_tensor dycl = fake_on(dy, EMBER_BACKEND_OPENCL, 0);
    EXPECT_REFUSED_OUT(o, ember_linear_x_backward(w, &dycl, &o), EMBER_ERR_BACKEND_MISMATCH,
                       "linear_x_backward: The provided tensors are not on the same backend.");
    EXPECT_REFUSED_OUT(o, ember_linear_weight_backward(x, &dycl, &o), EMBER_ERR_BACKEND_MISMATCH,
                       "Got backends cpu and opencl.");
    int32_t ints[24] = {0};
    ember_tensor *i32 = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_I32, 3, sdy, ints, &i32));
    EXPECT_REFUSED_OUT(o, ember_linear_bias_backward(i32, &o), EMBER_ERR_DTYPE_MISMATCH, "I32");
    ember_tensor_free(i32);
    snap_check(&s1);
    snap_check(&s2);
    snap_check(&s3);
    fx_free(&f);
}

static void test_add_mul_errors(void) {
    fixture f = {.rng = rng_for(14)};
    const int64_t s23[] = {2, 3}, s4[] = {4}, s32[] = {3, 2};
    ember_tensor *a = fx_add(&f, EMBER_F32, 2, s23), *b = fx_add(&f, EMBER_F32, 1, s4);
    ember_tensor *c = fx_add(&f, EMBER_F32, 2, s32), *h = fx_add(&f, EMBER_BF16, 2, s23);
    snap s1, s2;
    snap_take(&s1, a);
    snap_take(&s2, b);
    ember_tensor *o;
    for (int mul = 0; mul < 2; mul++) {
        const char *op = mul ? "mul" : "add";
        ember_status (*fn)(const ember_tensor *, const ember_tensor *, ember_tensor **) =
            mul ? ember_mul : ember_add;
        TU_ASSERT_STATUS(fn(a, b, NULL), EMBER_ERR_INVALID_ARGUMENT, "out is NULL");
        EXPECT_REFUSED_OUT(o, fn(NULL, b, &o), EMBER_ERR_MISUSE, "lhs: tensor is NULL");
        CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), op));
        EXPECT_REFUSED_OUT(o, fn(a, b, &o), EMBER_ERR_SHAPE_MISMATCH, "[2, 3]");
        CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "[4]"));
        CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), op));
        EXPECT_REFUSED_OUT(o, fn(a, c, &o), EMBER_ERR_SHAPE_MISMATCH, "[3, 2]");
        EXPECT_REFUSED_OUT(o, fn(a, h, &o), EMBER_ERR_DTYPE_MISMATCH, "BF16");
        ember_tensor bcl = fake_on(a, EMBER_BACKEND_OPENCL, 0);
        EXPECT_REFUSED_OUT(
            o, fn(&bcl, a, &o), EMBER_ERR_BACKEND_MISMATCH,
            "The provided tensors are not on the same backend. Got backends opencl and "
            "cpu.");
    }
    snap_check(&s1);
    snap_check(&s2);
    fx_free(&f);
}

/* Every allocation of an op failing in turn: OUT_OF_MEMORY, *out NULL, nothing leaked; then the
 * op succeeds once no allocation is made to fail. */
static void oom_walk(const char *what, ember_status (*run)(ember_tensor **, void *), void *arg) {
    for (long n = 1; n < 64; n++) {
        long live = ember__alloc_live();
        ember_tensor *o = (ember_tensor *)(uintptr_t)0x1;
        ember__alloc_fail_at(n);
        ember_status st = run(&o, arg);
        ember__alloc_fail_at(0);
        if (st == EMBER_OK) {
            CU_ASSERT_PTR_NOT_NULL(o);
            ember_tensor_free(o);
            CU_ASSERT_EQUAL(ember__alloc_live(), live);
            return;
        }
        if (st != EMBER_ERR_OUT_OF_MEMORY)
            fprintf(stderr, "  %s: allocation %ld: %s (%s)\n", what, n, ember_status_name(st),
                    ember_last_error());
        CU_ASSERT_EQUAL(st, EMBER_ERR_OUT_OF_MEMORY);
        CU_ASSERT_PTR_NULL(o);
        CU_ASSERT_EQUAL(ember__alloc_live(), live);
    }
    CU_FAIL("the op never succeeded");
}

typedef struct oom_args {
    ember_tensor *a, *b, *c;
} oom_args;

static ember_status run_matmul(ember_tensor **o, void *p) {
    oom_args *g = p;
    return ember_matmul(g->a, g->b, o);
}
static ember_status run_linear(ember_tensor **o, void *p) {
    oom_args *g = p;
    return ember_linear(g->a, g->b, g->c, o);
}
static ember_status run_add(ember_tensor **o, void *p) {
    oom_args *g = p;
    return ember_add(g->a, g->c, o);
}
static ember_status run_xb(ember_tensor **o, void *p) {
    oom_args *g = p;
    return ember_linear_x_backward(g->b, g->a, o);
}
static ember_status run_wb(ember_tensor **o, void *p) {
    oom_args *g = p;
    return ember_linear_weight_backward(g->a, g->a, o);
}
static ember_status run_bb(ember_tensor **o, void *p) {
    oom_args *g = p;
    return ember_linear_bias_backward(g->a, o);
}

static void test_out_of_memory(void) {
    fixture f = {.rng = rng_for(15)};
    const ember_dtype dts[] = {EMBER_F32, EMBER_F16};
    for (int t = 0; t < 2; t++) {
        const int64_t sa[] = {2, 3, 4}, sb[] = {4, 4}, sc[] = {4};
        oom_args g = {fx_add(&f, dts[t], 3, sa), fx_add(&f, dts[t], 2, sb),
                      fx_add(&f, dts[t], 1, sc)};
        oom_walk("matmul", run_matmul, &g);
        oom_walk("linear", run_linear, &g);
        oom_walk("add", run_add, &g);
        oom_walk("linear_x_backward", run_xb, &g);
        oom_walk("linear_weight_backward", run_wb, &g);
        oom_walk("linear_bias_backward", run_bb, &g);
    }
    fx_free(&f);
}

static CU_TestInfo float_tests[] = {
    {"matmul 2-D", test_matmul_2d},
    {"matmul batch broadcasting", test_matmul_batch_broadcast},
    {"matmul empty dims", test_matmul_empty},
    {"matmul F16 / BF16", test_matmul_half},
    {"linear with and without bias, batched", test_linear},
    {"linear_x_backward", test_linear_x_backward},
    {"linear_weight_backward", test_linear_weight_backward},
    {"linear_bias_backward", test_linear_bias_backward},
    {"add / mul broadcasting", test_add_mul},
    {"autodiff context of outputs", test_autodiff_merge},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo error_tests[] = {
    {"matmul errors", test_matmul_errors},     {"linear errors", test_linear_errors},
    {"backward errors", test_backward_errors}, {"add / mul errors", test_add_mul_errors},
    {"out of memory", test_out_of_memory},     CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"float ops", suite_init, suite_clean, NULL, NULL, float_tests},
    {"float op errors", suite_init, suite_clean, NULL, NULL, error_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return tu_run("test_float", suites); }
