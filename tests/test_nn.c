/* tests/test_nn.c: the neural-network ops of ember/nn.h (relu, relu_backward, softmax,
 * cross_entropy and its gradient, axpy, argmax): values against float64 references on fresh random
 * inputs, burn's edge cases (NaN, -0.0, ties, large logits), every guard and error path (status,
 * detail, NULL output, untouched inputs, no leak under allocation failure), and the host fallback
 * (download, compute, upload) that a backend without nn entries gets, which must give the very
 * numbers of the CPU entries. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch/internal.h"
#include "dispatch/nn.h"
#include "test_util.h"

static ember_context *ctx;
static uint64_t rng;

static int init_suite(void) {
    ctx = tu_cpu_context();
    rng = tu_seed() ^ 0x6e6e5f6f7073ull;
    return ctx ? 0 : 1;
}

static int clean_suite(void) {
    ember_context_destroy(ctx);
    ctx = NULL;
    ember__nn_force_fallback = 0;
    return 0;
}

static ember_tensor *mk(ember_dtype dt, int rank, const int64_t *shape, const void *data) {
    ember_tensor *t = NULL;
    ember_status st = ember_tensor_from_data(ctx, TU_CPU, dt, rank, shape, data, &t);
    if (st != EMBER_OK)
        fprintf(stderr, "tensor_from_data: %s\n", ember_last_error());
    CU_ASSERT_FATAL(st == EMBER_OK);
    return t;
}

static ember_tensor *mkf(int rank, const int64_t *shape, const float *data) {
    return mk(EMBER_F32, rank, shape, data);
}

static void rd(const ember_tensor *t, void *dst, size_t bytes) {
    CU_ASSERT_EQUAL_FATAL(ember_tensor_read(t, dst, bytes), EMBER_OK);
}

/* The tensor still holds exactly `want` (inputs are never modified). */
static void assert_holds(const ember_tensor *t, const void *want, size_t bytes) {
    void *got = malloc(bytes ? bytes : 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    rd(t, got, bytes);
    CU_ASSERT_EQUAL(memcmp(got, want, bytes), 0);
    free(got);
}

static float *rand_f32(size_t n, float lo, float hi) {
    float *p = malloc(n * sizeof *p + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    tu_rand_f32(&rng, p, n, lo, hi);
    return p;
}

/* Every value check runs on the CPU entries (level 0), the host fallback working in place on the
 * CPU's host buffers (1), and the fallback with explicit download / upload copies (2). */
#define FOR_EACH_PATH(level) for (int level = 0; level <= 2; level++)

/* ---- relu ---- */

static void test_relu_values(void) {
    const int64_t shape[3] = {3, 5, 7};
    const size_t n = 3 * 5 * 7;
    float *x = rand_f32(n, -2.0f, 2.0f);
    x[0] = -0.0f;
    x[1] = NAN;
    x[2] = 0.0f;
    x[3] = -INFINITY;
    x[4] = INFINITY;
    FOR_EACH_PATH(level) {
        ember__nn_force_fallback = level;
        ember_tensor *tx = mkf(3, shape, x), *ty = NULL;
        TU_OK(ember_relu(tx, &ty));
        CU_ASSERT_EQUAL(ember_tensor_rank(ty), 3);
        CU_ASSERT_EQUAL(ember_tensor_dim(ty, 2), 7);
        CU_ASSERT_EQUAL(ember_tensor_dtype(ty), EMBER_F32);
        float y[3 * 5 * 7];
        rd(ty, y, sizeof y);
        for (size_t i = 0; i < n; i++) {
            if (isnan(x[i])) {
                CU_ASSERT(isnan(y[i])); /* burn: NaN <= 0 is false, NaN passes */
            } else if (x[i] > 0.0f) {
                CU_ASSERT_EQUAL(y[i], x[i]);
            } else {
                CU_ASSERT(y[i] == 0.0f && !signbit(y[i])); /* -0.0 becomes +0.0 */
            }
        }
        assert_holds(tx, x, n * sizeof *x);
        ember_tensor_free(ty);
        ember_tensor_free(tx);
    }
    ember__nn_force_fallback = 0;
    free(x);
}

static void test_relu_backward_values(void) {
    const int64_t shape[2] = {4, 33};
    const size_t n = 4 * 33;
    float *x = rand_f32(n, -1.0f, 1.0f), *dy = rand_f32(n, -3.0f, 3.0f);
    x[0] = 0.0f;
    x[1] = -0.0f;
    FOR_EACH_PATH(level) {
        ember__nn_force_fallback = level;
        ember_tensor *tx = mkf(2, shape, x), *ty = NULL, *tdy = mkf(2, shape, dy), *tdx = NULL;
        TU_OK(ember_relu(tx, &ty));
        TU_OK(ember_relu_backward(ty, tdy, &tdx));
        float dx[4 * 33];
        rd(tdx, dx, sizeof dx);
        for (size_t i = 0; i < n; i++)
            CU_ASSERT_EQUAL(dx[i], x[i] > 0.0f ? dy[i] : 0.0f);
        assert_holds(tdy, dy, n * sizeof *dy);
        ember_tensor_free(tdx);
        /* the mask of the input is the mask of the output */
        TU_OK(ember_relu_backward(tx, tdy, &tdx));
        float dx2[4 * 33];
        rd(tdx, dx2, sizeof dx2);
        CU_ASSERT_EQUAL(memcmp(dx, dx2, sizeof dx), 0);
        ember_tensor_free(tdx);
        ember_tensor_free(ty);
        ember_tensor_free(tx);
        ember_tensor_free(tdy);
    }
    ember__nn_force_fallback = 0;
    free(x);
    free(dy);
}

/* ---- softmax and cross-entropy, against float64 ---- */

static void ref_softmax_row(const float *x, int64_t c, double *p) {
    double m = -INFINITY, s = 0.0;
    for (int64_t j = 0; j < c; j++)
        m = x[j] > m ? x[j] : m;
    for (int64_t j = 0; j < c; j++)
        s += exp((double)x[j] - m);
    for (int64_t j = 0; j < c; j++)
        p[j] = exp((double)x[j] - m) / s;
}

static void test_softmax_values(void) {
    const int64_t shape[3] = {2, 3, 17};
    const size_t n = 2 * 3 * 17;
    float *x = rand_f32(n, -8.0f, 8.0f);
    for (int j = 0; j < 17; j++) /* large logits: a naive exp would overflow */
        x[17 + j] = 1000.0f + (float)j;
    FOR_EACH_PATH(level) {
        ember__nn_force_fallback = level;
        ember_tensor *tx = mkf(3, shape, x), *ty = NULL;
        TU_OK(ember_softmax(tx, &ty));
        float y[2 * 3 * 17];
        rd(ty, y, sizeof y);
        for (int r = 0; r < 6; r++) {
            double p[17], sum = 0.0;
            ref_softmax_row(x + r * 17, 17, p);
            for (int j = 0; j < 17; j++) {
                /* f32 output of a float64 computation: one rounding */
                CU_ASSERT(fabs(y[r * 17 + j] - p[j]) <= 1e-7 + 1e-6 * p[j]);
                sum += y[r * 17 + j];
            }
            CU_ASSERT(fabs(sum - 1.0) < 1e-5);
        }
        assert_holds(tx, x, n * sizeof *x);
        ember_tensor_free(ty);
        ember_tensor_free(tx);
    }
    ember__nn_force_fallback = 0;
    free(x);
}

static void test_softmax_edge(void) {
    /* a row of -Inf gives NaN (burn: (x - max).exp() with max = -Inf); rank 1 works */
    const int64_t shape[1] = {3};
    float x[3] = {-INFINITY, -INFINITY, -INFINITY}, y[3];
    ember_tensor *tx = mkf(1, shape, x), *ty = NULL;
    TU_OK(ember_softmax(tx, &ty));
    rd(ty, y, sizeof y);
    CU_ASSERT(isnan(y[0]) && isnan(y[1]) && isnan(y[2]));
    ember_tensor_free(ty);
    ember_tensor_free(tx);
    /* an empty last axis: an empty result */
    const int64_t es[2] = {4, 0};
    ember_tensor *te = mkf(2, es, x);
    TU_OK(ember_softmax(te, &ty));
    CU_ASSERT_EQUAL(ember_tensor_numel(ty), 0);
    ember_tensor_free(ty);
    ember_tensor_free(te);
}

static void check_cross_entropy(ember_dtype tdt) {
    enum { R = 13, C = 10 };
    const int64_t ls[2] = {R, C}, ts[1] = {R};
    float *x = rand_f32(R * C, -4.0f, 4.0f);
    int64_t t64[R];
    int32_t t32[R];
    for (int r = 0; r < R; r++)
        t32[r] = (int32_t)(t64[r] = (int64_t)(tu_next(&rng) % C));
    t64[0] = 0;
    t64[1] = C - 1;
    t32[0] = 0;
    t32[1] = C - 1;
    const void *tdata = tdt == EMBER_I64 ? (const void *)t64 : (const void *)t32;
    const size_t tbytes = tdt == EMBER_I64 ? sizeof t64 : sizeof t32;

    double ref_loss = 0.0, ref_grad[R * C];
    for (int r = 0; r < R; r++) {
        double p[C];
        ref_softmax_row(x + r * C, C, p);
        ref_loss += -log(p[t64[r]]);
        for (int j = 0; j < C; j++)
            ref_grad[r * C + j] = (p[j] - (j == t64[r])) / R;
    }
    ref_loss /= R;

    FOR_EACH_PATH(level) {
        ember__nn_force_fallback = level;
        ember_tensor *tx = mkf(2, ls, x), *tt = mk(tdt, 1, ts, tdata), *tl = NULL, *tg = NULL;
        TU_OK(ember_cross_entropy(tx, tt, &tl));
        CU_ASSERT_EQUAL(ember_tensor_rank(tl), 1);
        CU_ASSERT_EQUAL(ember_tensor_dim(tl, 0), 1);
        float loss;
        rd(tl, &loss, sizeof loss);
        CU_ASSERT(fabs(loss - ref_loss) <= 1e-6 * (1.0 + ref_loss));
        TU_OK(ember_cross_entropy_backward(tx, tt, &tg));
        float g[R * C];
        rd(tg, g, sizeof g);
        for (int i = 0; i < R * C; i++)
            CU_ASSERT(fabs(g[i] - ref_grad[i]) <= 1e-8 + 1e-6 * fabs(ref_grad[i]));
        assert_holds(tx, x, sizeof(float) * R * C);
        assert_holds(tt, tdata, tbytes);
        ember_tensor_free(tl);
        ember_tensor_free(tg);
        ember_tensor_free(tx);
        ember_tensor_free(tt);
    }
    ember__nn_force_fallback = 0;
    free(x);
}

static void test_cross_entropy_i64(void) { check_cross_entropy(EMBER_I64); }
static void test_cross_entropy_i32(void) { check_cross_entropy(EMBER_I32); }

/* The gradient is the derivative of the loss: central differences on a few coordinates. */
static void test_cross_entropy_gradient_is_derivative(void) {
    enum { R = 3, C = 5 };
    const int64_t ls[2] = {R, C}, ts[1] = {R};
    float *x = rand_f32(R * C, -1.0f, 1.0f);
    int64_t t[R] = {4, 0, 2};
    ember_tensor *tx = mkf(2, ls, x), *tt = mk(EMBER_I64, 1, ts, t), *tg = NULL;
    TU_OK(ember_cross_entropy_backward(tx, tt, &tg));
    float g[R * C];
    rd(tg, g, sizeof g);
    for (int i = 0; i < R * C; i += 4) {
        const float h = 1e-2f;
        float lp, lm, xp[R * C], xm[R * C];
        memcpy(xp, x, sizeof xp);
        memcpy(xm, x, sizeof xm);
        xp[i] += h;
        xm[i] -= h;
        ember_tensor *a = mkf(2, ls, xp), *b = mkf(2, ls, xm), *la = NULL, *lb = NULL;
        TU_OK(ember_cross_entropy(a, tt, &la));
        TU_OK(ember_cross_entropy(b, tt, &lb));
        rd(la, &lp, sizeof lp);
        rd(lb, &lm, sizeof lm);
        CU_ASSERT(fabs((lp - lm) / (2.0 * h) - g[i]) < 2e-3);
        ember_tensor_free(a);
        ember_tensor_free(b);
        ember_tensor_free(la);
        ember_tensor_free(lb);
    }
    ember_tensor_free(tg);
    ember_tensor_free(tx);
    ember_tensor_free(tt);
    free(x);
}

/* Leading axes fold into rows: logits [2, 3, 4] with targets [2, 3]. */
static void test_cross_entropy_batched_axes(void) {
    const int64_t ls3[3] = {2, 3, 4}, ts2[2] = {2, 3}, ls2[2] = {6, 4}, ts1[1] = {6};
    float *x = rand_f32(24, -2.0f, 2.0f);
    int64_t t[6] = {0, 1, 2, 3, 0, 3};
    ember_tensor *a = mkf(3, ls3, x), *ta = mk(EMBER_I64, 2, ts2, t);
    ember_tensor *b = mkf(2, ls2, x), *tb = mk(EMBER_I64, 1, ts1, t);
    ember_tensor *la = NULL, *lb = NULL, *ga = NULL, *gb = NULL;
    TU_OK(ember_cross_entropy(a, ta, &la));
    TU_OK(ember_cross_entropy(b, tb, &lb));
    TU_OK(ember_cross_entropy_backward(a, ta, &ga));
    TU_OK(ember_cross_entropy_backward(b, tb, &gb));
    CU_ASSERT_EQUAL(ember_tensor_rank(ga), 3);
    float va, vb, gva[24], gvb[24];
    rd(la, &va, sizeof va);
    rd(lb, &vb, sizeof vb);
    rd(ga, gva, sizeof gva);
    rd(gb, gvb, sizeof gvb);
    CU_ASSERT_EQUAL(va, vb);
    CU_ASSERT_EQUAL(memcmp(gva, gvb, sizeof gva), 0);
    ember_tensor *all[] = {a, ta, b, tb, la, lb, ga, gb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ember_tensor_free(all[i]);
    free(x);
}

/* ---- axpy ---- */

static void test_axpy_values(void) {
    const int64_t shape[2] = {7, 19};
    const size_t n = 7 * 19;
    float *x = rand_f32(n, -1.0f, 1.0f), *y = rand_f32(n, -5.0f, 5.0f);
    const float alpha = -0.0375f;
    FOR_EACH_PATH(level) {
        ember__nn_force_fallback = level;
        ember_tensor *tx = mkf(2, shape, x), *ty = mkf(2, shape, y), *to = NULL;
        TU_OK(ember_axpy(alpha, tx, ty, &to));
        float o[7 * 19];
        rd(to, o, sizeof o);
        for (size_t i = 0; i < n; i++) /* one product and one sum in f32: 2 roundings */
            CU_ASSERT(fabs(o[i] - ((double)alpha * x[i] + y[i])) <= 2.5e-7 * (fabs(y[i]) + 1.0));
        assert_holds(tx, x, n * sizeof *x);
        assert_holds(ty, y, n * sizeof *y);
        /* in place gives the same numbers */
        TU_OK(ember_axpy_inplace(alpha, tx, ty));
        assert_holds(ty, o, sizeof o);
        assert_holds(tx, x, n * sizeof *x);
        /* x may be y: y = y + 0.5 y */
        TU_OK(ember_axpy_inplace(0.5f, ty, ty));
        float o2[7 * 19];
        rd(ty, o2, sizeof o2);
        for (size_t i = 0; i < n; i++)
            CU_ASSERT_EQUAL(o2[i], 0.5f * o[i] + o[i]);
        ember_tensor_free(to);
        ember_tensor_free(tx);
        ember_tensor_free(ty);
    }
    ember__nn_force_fallback = 0;
    free(x);
    free(y);
}

/* An in-place update makes a backend's cached copy of y (its kernel layout) stale: it is dropped.
 */
static int released;
static void fake_release(void *state, void *data) {
    (void)state;
    released++;
    free(data);
}

static void test_axpy_inplace_drops_pack_cache(void) {
    const int64_t shape[1] = {8};
    float *x = rand_f32(8, -1.0f, 1.0f);
    ember_tensor *tx = mkf(1, shape, x), *ty = mkf(1, shape, x);
    ty->pack.data = malloc(16);
    ty->pack.bytes = 16;
    ty->pack.release = fake_release;
    released = 0;
    TU_ASSERT_STATUS(ember_axpy_inplace(1.0f, tx, NULL), EMBER_ERR_MISUSE, NULL);
    CU_ASSERT_EQUAL(released, 0); /* a failed call leaves y (and its cache) alone */
    TU_OK(ember_axpy_inplace(1.0f, tx, ty));
    CU_ASSERT_EQUAL(released, 1);
    CU_ASSERT_PTR_NULL(ty->pack.data);
    ember_tensor_free(ty); /* no second release */
    CU_ASSERT_EQUAL(released, 1);
    ember_tensor_free(tx);
    free(x);
}

/* ---- argmax ---- */

static void test_argmax_values(void) {
    const int64_t shape[3] = {3, 4, 5};
    float *x = rand_f32(60, -1.0f, 1.0f);
    FOR_EACH_PATH(level) {
        ember__nn_force_fallback = level;
        ember_tensor *tx = mkf(3, shape, x);
        for (int axis = 0; axis < 3; axis++) {
            ember_tensor *ti = NULL;
            TU_OK(ember_argmax(tx, axis, &ti));
            CU_ASSERT_EQUAL(ember_tensor_dtype(ti), EMBER_I64);
            CU_ASSERT_EQUAL(ember_tensor_rank(ti), 3);
            for (int d = 0; d < 3; d++)
                CU_ASSERT_EQUAL(ember_tensor_dim(ti, d), d == axis ? 1 : shape[d]);
            int64_t idx[60];
            rd(ti, idx, (size_t)ember_tensor_numel(ti) * sizeof(int64_t));
            int64_t stride[3] = {20, 5, 1}, k = 0;
            for (int64_t a = 0; a < (axis == 0 ? 1 : 3); a++)
                for (int64_t b = 0; b < (axis == 1 ? 1 : 4); b++)
                    for (int64_t c = 0; c < (axis == 2 ? 1 : 5); c++, k++) {
                        int64_t base = a * 20 + b * 5 + c, best = 0;
                        for (int64_t j = 1; j < shape[axis]; j++)
                            if (x[base + j * stride[axis]] > x[base + best * stride[axis]])
                                best = j;
                        CU_ASSERT_EQUAL(idx[k], best);
                    }
            ember_tensor_free(ti);
        }
        assert_holds(tx, x, sizeof(float) * 60);
        ember_tensor_free(tx);
    }
    ember__nn_force_fallback = 0;
    free(x);
}

static void test_argmax_ties_and_nan(void) {
    const int64_t shape[2] = {4, 4};
    const float x[16] = {1,         3,         3,         2, /* tie: the first wins */
                         NAN,       5,         NAN,       1, /* NaN is the largest, the first one */
                         -1,        NAN,       9,         9, /* a NaN after a number */
                         -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    const int64_t want[4] = {1, 0, 1, 0};
    FOR_EACH_PATH(level) {
        ember__nn_force_fallback = level;
        ember_tensor *tx = mkf(2, shape, x), *ti = NULL;
        TU_OK(ember_argmax(tx, 1, &ti));
        int64_t got[4];
        rd(ti, got, sizeof got);
        CU_ASSERT_EQUAL(memcmp(got, want, sizeof got), 0);
        ember_tensor_free(ti);
        ember_tensor_free(tx);
    }
    ember__nn_force_fallback = 0;
}

/* ---- select ---- */

static void test_select_values(void) {
    const int64_t shape[3] = {3, 4, 5}, ni[1] = {6};
    float *x = rand_f32(60, -1.0f, 1.0f);
    int64_t xi[60];
    for (int i = 0; i < 60; i++)
        xi[i] = (int64_t)(tu_next(&rng) >> 1);
    const int32_t idx32[6] = {2, 0, 2, 1, 0, 0}; /* repeats, any order; all < 3 */
    int64_t idx64[6];
    for (int i = 0; i < 6; i++)
        idx64[i] = idx32[i];
    FOR_EACH_PATH(level) {
        ember__nn_force_fallback = level;
        ember_tensor *tx = mkf(3, shape, x), *txi = mk(EMBER_I64, 3, shape, xi);
        ember_tensor *ti32 = mk(EMBER_I32, 1, ni, idx32), *ti64 = mk(EMBER_I64, 1, ni, idx64);
        for (int axis = 0; axis < 3; axis++) {
            ember_tensor *o = NULL, *oi = NULL;
            TU_OK(ember_select(tx, axis, ti32, &o));
            TU_OK(ember_select(txi, axis, ti64, &oi));
            CU_ASSERT_EQUAL(ember_tensor_dtype(o), EMBER_F32);
            CU_ASSERT_EQUAL(ember_tensor_dtype(oi), EMBER_I64);
            int64_t os[3] = {shape[0], shape[1], shape[2]};
            os[axis] = 6;
            for (int d = 0; d < 3; d++)
                CU_ASSERT_EQUAL(ember_tensor_dim(o, d), os[d]);
            float got[6 * 20];
            int64_t goti[6 * 20];
            rd(o, got, sizeof(float) * (size_t)(os[0] * os[1] * os[2]));
            rd(oi, goti, sizeof(int64_t) * (size_t)(os[0] * os[1] * os[2]));
            int64_t k = 0;
            for (int64_t a = 0; a < os[0]; a++)
                for (int64_t b = 0; b < os[1]; b++)
                    for (int64_t c = 0; c < os[2]; c++, k++) {
                        int64_t src[3] = {a, b, c};
                        src[axis] = idx64[src[axis]];
                        int64_t flat = src[0] * 20 + src[1] * 5 + src[2];
                        CU_ASSERT_EQUAL(got[k], x[flat]);
                        CU_ASSERT_EQUAL(goti[k], xi[flat]);
                    }
            ember_tensor_free(o);
            ember_tensor_free(oi);
        }
        assert_holds(tx, x, sizeof(float) * 60);
        assert_holds(ti32, idx32, sizeof idx32);
        ember_tensor_free(tx);
        ember_tensor_free(txi);
        ember_tensor_free(ti32);
        ember_tensor_free(ti64);
    }
    ember__nn_force_fallback = 0;
    free(x);
}

static void test_select_edge_and_guards(void) {
    const int64_t shape[2] = {3, 4}, n0[1] = {0}, n2[1] = {2}, s22[2] = {1, 2};
    float x[12] = {0};
    tu_rand_f32(&rng, x, 12, -1.0f, 1.0f);
    const int64_t good[2] = {1, 2}, neg[2] = {0, -1}, big[2] = {3, 0};
    const float fidx[2] = {0, 1};
    ember_tensor *tx = mkf(2, shape, x), *e = mk(EMBER_I64, 1, n0, good), *o = NULL;
    ember_tensor *tg = mk(EMBER_I64, 1, n2, good), *tn = mk(EMBER_I64, 1, n2, neg);
    ember_tensor *tb = mk(EMBER_I64, 1, n2, big), *tf = mkf(1, n2, fidx);
    ember_tensor *t2 = mk(EMBER_I64, 2, s22, good);

    TU_OK(ember_select(tx, 0, e, &o)); /* no indices: an empty result */
    CU_ASSERT_EQUAL(ember_tensor_dim(o, 0), 0);
    CU_ASSERT_EQUAL(ember_tensor_dim(o, 1), 4);
    ember_tensor_free(o);
    const int64_t s30[2] = {3, 0};
    ember_tensor *ez = mkf(2, s30, x); /* empty slices: a [2, 0] result */
    FOR_EACH_PATH(level) {
        ember__nn_force_fallback = level;
        TU_OK(ember_select(ez, 0, tg, &o));
        CU_ASSERT_EQUAL(ember_tensor_dim(o, 0), 2);
        CU_ASSERT_EQUAL(ember_tensor_numel(o), 0);
        ember_tensor_free(o);
    }
    ember__nn_force_fallback = 0;
    ember_tensor_free(ez);

    TU_ASSERT_STATUS(ember_select(tx, 0, tg, NULL), EMBER_ERR_INVALID_ARGUMENT, "out is NULL");
    o = (ember_tensor *)&o;
    TU_ASSERT_STATUS(ember_select(NULL, 0, tg, &o), EMBER_ERR_MISUSE, "select input");
    CU_ASSERT_PTR_NULL(o);
    TU_ASSERT_STATUS(ember_select(tx, 0, NULL, &o), EMBER_ERR_MISUSE, "select indices");
    TU_ASSERT_STATUS(ember_select(tx, 0, tf, &o), EMBER_ERR_DTYPE_MISMATCH, "the indices are F32");
    TU_ASSERT_STATUS(ember_select(tx, 2, tg, &o), EMBER_ERR_INVALID_ARGUMENT,
                     "axis 2 is outside 0..1");
    TU_ASSERT_STATUS(ember_select(tx, 0, t2, &o), EMBER_ERR_SHAPE_MISMATCH, "rank-1");
    FOR_EACH_PATH(level) {
        ember__nn_force_fallback = level;
        o = (ember_tensor *)&o;
        TU_ASSERT_STATUS(ember_select(tx, 0, tn, &o), EMBER_ERR_INVALID_ARGUMENT,
                         "index -1 at flat index 1 is outside the axis [0, 3)");
        CU_ASSERT_PTR_NULL(o);
        TU_ASSERT_STATUS(ember_select(tx, 0, tb, &o), EMBER_ERR_INVALID_ARGUMENT,
                         "index 3 at flat index 0");
        TU_OK(ember_select(tx, 1, tb, &o)); /* 3 is a valid column */
        ember_tensor_free(o);
    }
    ember__nn_force_fallback = 0;

    /* a quantized input is refused */
    ember_qscheme qs = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_tensor *q = NULL;
    TU_OK(ember_quantize(tx, &qs, &q));
    o = (ember_tensor *)&o;
    TU_ASSERT_STATUS(ember_select(q, 0, tg, &o), EMBER_ERR_DTYPE_MISMATCH, "QFloat");
    CU_ASSERT_PTR_NULL(o);
    /* so is every other nn op's */
    TU_ASSERT_STATUS(ember_relu(q, &o), EMBER_ERR_DTYPE_MISMATCH, "quantized (QFloat)");
    TU_ASSERT_STATUS(ember_softmax(q, &o), EMBER_ERR_DTYPE_MISMATCH, "dequantize it first");

    /* autodiff: the float output carries x's context */
    TU_OK(ember_tensor_set_autodiff(tx, EMBER_AUTODIFF_BALANCED));
    TU_OK(ember_select(tx, 0, tg, &o));
    CU_ASSERT_EQUAL(ember_tensor_autodiff(o), EMBER_AUTODIFF_BALANCED);
    ember_tensor_free(o);

    assert_holds(tx, x, sizeof x);
    ember_tensor *all[] = {tx, e, tg, tn, tb, tf, t2, q};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ember_tensor_free(all[i]);
}

/* ---- autodiff contexts ---- */

static void set_ad(ember_tensor *t, ember_autodiff a) { TU_OK(ember_tensor_set_autodiff(t, a)); }

static void test_autodiff(void) {
    const int64_t shape[2] = {2, 3}, ts[1] = {2};
    float *x = rand_f32(6, -1.0f, 1.0f);
    const int64_t t[2] = {0, 2};
    ember_tensor *a = mkf(2, shape, x), *b = mkf(2, shape, x), *tt = mk(EMBER_I64, 1, ts, t);
    ember_tensor *o = NULL;
    set_ad(a, EMBER_AUTODIFF_BALANCED);

    /* forward ops carry the context */
    TU_OK(ember_relu(a, &o));
    CU_ASSERT_EQUAL(ember_tensor_autodiff(o), EMBER_AUTODIFF_BALANCED);
    ember_tensor_free(o);
    TU_OK(ember_softmax(a, &o));
    CU_ASSERT_EQUAL(ember_tensor_autodiff(o), EMBER_AUTODIFF_BALANCED);
    ember_tensor_free(o);
    TU_OK(ember_cross_entropy(a, tt, &o));
    CU_ASSERT_EQUAL(ember_tensor_autodiff(o), EMBER_AUTODIFF_BALANCED);
    ember_tensor_free(o);
    TU_OK(ember_axpy(1.0f, b, a, &o)); /* Disabled + Balanced = Balanced */
    CU_ASSERT_EQUAL(ember_tensor_autodiff(o), EMBER_AUTODIFF_BALANCED);
    ember_tensor_free(o);
    TU_OK(ember_axpy(1.0f, b, b, &o));
    CU_ASSERT_EQUAL(ember_tensor_autodiff(o), EMBER_AUTODIFF_DISABLED);
    ember_tensor_free(o);
    TU_OK(ember_axpy_inplace(1.0f, a, b)); /* y keeps its own context */
    CU_ASSERT_EQUAL(ember_tensor_autodiff(b), EMBER_AUTODIFF_DISABLED);

    /* two strategies do not merge */
    set_ad(b, EMBER_AUTODIFF_NO_CHECKPOINTING);
    o = (ember_tensor *)&o;
    TU_ASSERT_STATUS(ember_axpy(1.0f, a, b, &o), EMBER_ERR_CHECKPOINT_MISMATCH,
                     "Gradient checkpointing strategy mismatch: Balanced vs Disabled");
    CU_ASSERT_PTR_NULL(o);
    TU_ASSERT_STATUS(ember_axpy_inplace(1.0f, a, b), EMBER_ERR_CHECKPOINT_MISMATCH,
                     "Tensors in the same operation must share a strategy");

    /* backward ops refuse tracked inputs: second order */
    o = (ember_tensor *)&o;
    TU_ASSERT_STATUS(ember_relu_backward(a, b, &o), EMBER_ERR_NOT_DIFFERENTIABLE,
                     "Can't differentiate relu_backward.");
    CU_ASSERT_PTR_NULL(o);
    set_ad(b, EMBER_AUTODIFF_DISABLED);
    TU_ASSERT_STATUS(ember_relu_backward(b, a, &o), EMBER_ERR_NOT_DIFFERENTIABLE,
                     "Can't differentiate relu_backward.");
    TU_ASSERT_STATUS(ember_cross_entropy_backward(a, tt, &o), EMBER_ERR_NOT_DIFFERENTIABLE,
                     "Can't differentiate cross_entropy_backward.");
    CU_ASSERT_PTR_NULL(o);
    /* and their results are untracked */
    TU_OK(ember_cross_entropy_backward(b, tt, &o));
    CU_ASSERT_EQUAL(ember_tensor_autodiff(o), EMBER_AUTODIFF_DISABLED);
    ember_tensor_free(o);
    TU_OK(ember_argmax(a, 1, &o));
    CU_ASSERT_EQUAL(ember_tensor_autodiff(o), EMBER_AUTODIFF_DISABLED);
    ember_tensor_free(o);

    ember_tensor_free(a);
    ember_tensor_free(b);
    ember_tensor_free(tt);
    free(x);
}

/* ---- guards ---- */

static void test_guards_handles(void) {
    const int64_t shape[2] = {2, 3};
    float x[6] = {1, -2, 3, -4, 5, -6};
    ember_tensor *a = mkf(2, shape, x), *o;
    /* (a freed handle is not probed here: reading freed memory is what ASan reports) */
    int junk[64] = {0};
    const ember_tensor *foreign = (const ember_tensor *)junk;

    TU_ASSERT_STATUS(ember_relu(a, NULL), EMBER_ERR_INVALID_ARGUMENT, "relu: out is NULL");
    TU_ASSERT_STATUS(ember_softmax(a, NULL), EMBER_ERR_INVALID_ARGUMENT, "out is NULL");
    TU_ASSERT_STATUS(ember_argmax(a, 0, NULL), EMBER_ERR_INVALID_ARGUMENT, "out is NULL");
    TU_ASSERT_STATUS(ember_axpy(1.0f, a, a, NULL), EMBER_ERR_INVALID_ARGUMENT, "out is NULL");
    TU_ASSERT_STATUS(ember_relu_backward(a, a, NULL), EMBER_ERR_INVALID_ARGUMENT, "dx is NULL");
    TU_ASSERT_STATUS(ember_cross_entropy(a, a, NULL), EMBER_ERR_INVALID_ARGUMENT, "loss is NULL");
    TU_ASSERT_STATUS(ember_cross_entropy_backward(a, a, NULL), EMBER_ERR_INVALID_ARGUMENT,
                     "dlogits is NULL");

    o = (ember_tensor *)&o;
    TU_ASSERT_STATUS(ember_relu(NULL, &o), EMBER_ERR_MISUSE, "relu input: tensor is NULL");
    CU_ASSERT_PTR_NULL(o);
    o = (ember_tensor *)&o;
    TU_ASSERT_STATUS(ember_softmax(foreign, &o), EMBER_ERR_MISUSE, "softmax input: not an ember");
    CU_ASSERT_PTR_NULL(o);
    TU_ASSERT_STATUS(ember_argmax(foreign, 0, &o), EMBER_ERR_MISUSE, "foreign pointer");
    TU_ASSERT_STATUS(ember_relu_backward(a, NULL, &o), EMBER_ERR_MISUSE,
                     "relu_backward grad: tensor is NULL");
    TU_ASSERT_STATUS(ember_axpy(1.0f, a, foreign, &o), EMBER_ERR_MISUSE, "axpy y");
    TU_ASSERT_STATUS(ember_axpy_inplace(1.0f, NULL, a), EMBER_ERR_MISUSE, "axpy_inplace x");
    TU_ASSERT_STATUS(ember_axpy_inplace(1.0f, a, NULL), EMBER_ERR_MISUSE, "axpy_inplace y");
    TU_ASSERT_STATUS(ember_cross_entropy(a, NULL, &o), EMBER_ERR_MISUSE,
                     "cross_entropy targets: tensor is NULL");
    TU_ASSERT_STATUS(ember_cross_entropy_backward(NULL, a, &o), EMBER_ERR_MISUSE,
                     "cross_entropy_backward logits");
    CU_ASSERT_PTR_NULL(o);
    assert_holds(a, x, sizeof x);
    ember_tensor_free(a);
}

static void test_guards_dtypes_shapes(void) {
    const int64_t s23[2] = {2, 3}, s32[2] = {3, 2}, s2[1] = {2}, s3[1] = {3};
    float x[6] = {1, -2, 3, -4, 5, -6};
    const int32_t i6[6] = {0}, good_t[3] = {0, 2, 1};
    const uint16_t h6[6] = {0};
    const int8_t b2[2] = {0, 1};
    ember_tensor *a = mkf(2, s23, x), *b = mkf(2, s32, x), *ti = mk(EMBER_I32, 2, s23, i6);
    ember_tensor *th = mk(EMBER_F16, 2, s23, h6), *t2 = mk(EMBER_I32, 1, s2, good_t);
    ember_tensor *t3 = mk(EMBER_I32, 1, s3, good_t), *tb = mk(EMBER_I8, 1, s2, b2), *o = NULL;

    TU_ASSERT_STATUS(ember_relu(ti, &o), EMBER_ERR_DTYPE_MISMATCH, "relu: the input is I32");
    TU_ASSERT_STATUS(ember_softmax(th, &o), EMBER_ERR_DTYPE_MISMATCH, "the input is F16");
    TU_ASSERT_STATUS(ember_argmax(ti, 0, &o), EMBER_ERR_DTYPE_MISMATCH, "argmax");
    TU_ASSERT_STATUS(ember_axpy(1.0f, a, th, &o), EMBER_ERR_DTYPE_MISMATCH, "the y is F16");
    TU_ASSERT_STATUS(ember_relu_backward(a, ti, &o), EMBER_ERR_DTYPE_MISMATCH, "grad is I32");
    TU_ASSERT_STATUS(ember_cross_entropy(ti, t2, &o), EMBER_ERR_DTYPE_MISMATCH, "logits is I32");
    TU_ASSERT_STATUS(ember_cross_entropy(a, tb, &o), EMBER_ERR_DTYPE_MISMATCH,
                     "the targets are I8");
    TU_ASSERT_STATUS(ember_cross_entropy_backward(a, a, &o), EMBER_ERR_DTYPE_MISMATCH,
                     "the targets are F32");

    TU_ASSERT_STATUS(ember_relu_backward(a, b, &o), EMBER_ERR_SHAPE_MISMATCH,
                     "shapes [2, 3] and [3, 2] differ");
    TU_ASSERT_STATUS(ember_axpy(1.0f, a, b, &o), EMBER_ERR_SHAPE_MISMATCH, "[2, 3] and [3, 2]");
    TU_ASSERT_STATUS(ember_axpy_inplace(1.0f, a, b), EMBER_ERR_SHAPE_MISMATCH, "axpy_inplace");
    TU_ASSERT_STATUS(ember_cross_entropy(a, t3, &o), EMBER_ERR_SHAPE_MISMATCH,
                     "logits [2, 3] and targets [3]");
    ember_tensor *r1 = mkf(1, s3, x);
    TU_ASSERT_STATUS(ember_cross_entropy(r1, t3, &o), EMBER_ERR_SHAPE_MISMATCH, "rank >= 2");
    CU_ASSERT_PTR_NULL(o);
    ember_tensor_free(r1);

    TU_ASSERT_STATUS(ember_argmax(a, 2, &o), EMBER_ERR_INVALID_ARGUMENT, "axis 2 is outside 0..1");
    TU_ASSERT_STATUS(ember_argmax(a, -1, &o), EMBER_ERR_INVALID_ARGUMENT, "axis -1");
    const int64_t s40[2] = {4, 0};
    ember_tensor *e = mkf(2, s40, x);
    TU_ASSERT_STATUS(ember_argmax(e, 1, &o), EMBER_ERR_INVALID_ARGUMENT, "is empty");
    TU_OK(ember_argmax(e, 0, &o)); /* [1, 0]: nothing to compute, but valid */
    CU_ASSERT_EQUAL(ember_tensor_numel(o), 0);
    ember_tensor_free(o);
    o = NULL;
    CU_ASSERT_PTR_NULL(o);

    assert_holds(a, x, sizeof x);
    ember_tensor *all[] = {a, b, ti, th, t2, t3, tb, e};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ember_tensor_free(all[i]);
}

static void test_guards_targets(void) {
    const int64_t ls[2] = {3, 4}, ts[1] = {3}, es[2] = {0, 4}, ets[1] = {0};
    float x[12] = {0};
    tu_rand_f32(&rng, x, 12, -1.0f, 1.0f);
    const int64_t neg[3] = {0, -1, 2}, big[3] = {0, 1, 4};
    const int32_t big32[3] = {3, 3, 7};
    ember_tensor *l = mkf(2, ls, x), *tn = mk(EMBER_I64, 1, ts, neg),
                 *tb = mk(EMBER_I64, 1, ts, big);
    ember_tensor *tb32 = mk(EMBER_I32, 1, ts, big32), *o = NULL;
    FOR_EACH_PATH(level) {
        ember__nn_force_fallback = level;
        o = (ember_tensor *)&o;
        TU_ASSERT_STATUS(ember_cross_entropy(l, tn, &o), EMBER_ERR_INVALID_ARGUMENT,
                         "target -1 at flat index 1 is outside the classes [0, 4)");
        CU_ASSERT_PTR_NULL(o);
        TU_ASSERT_STATUS(ember_cross_entropy_backward(l, tb, &o), EMBER_ERR_INVALID_ARGUMENT,
                         "target 4 at flat index 2");
        TU_ASSERT_STATUS(ember_cross_entropy(l, tb32, &o), EMBER_ERR_INVALID_ARGUMENT,
                         "target 7 at flat index 2");
        CU_ASSERT_PTR_NULL(o);
    }
    ember__nn_force_fallback = 0;
    ember_tensor *el = mkf(2, es, x), *et = mk(EMBER_I64, 1, ets, neg);
    TU_ASSERT_STATUS(ember_cross_entropy(el, et, &o), EMBER_ERR_INVALID_ARGUMENT, "hold no rows");
    assert_holds(l, x, sizeof x);
    assert_holds(tn, neg, sizeof neg);
    ember_tensor *all[] = {l, tn, tb, tb32, el, et};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ember_tensor_free(all[i]);
}

static void test_guards_devices(void) {
    /* tensors of two contexts: the same device name, but not the same device */
    ember_context *other = tu_cpu_context();
    const int64_t shape[2] = {2, 3}, ts[1] = {2};
    float x[6] = {1, 2, 3, 4, 5, 6};
    const int64_t t[2] = {0, 1};
    ember_tensor *a = mkf(2, shape, x), *b = NULL, *tt = NULL, *o = NULL;
    TU_OK(ember_tensor_from_data(other, TU_CPU, EMBER_F32, 2, shape, x, &b));
    TU_OK(ember_tensor_from_data(other, TU_CPU, EMBER_I64, 1, ts, t, &tt));
    TU_ASSERT_STATUS(ember_axpy(1.0f, a, b, &o), EMBER_ERR_DEVICE_MISMATCH, "axpy");
    TU_ASSERT_STATUS(ember_axpy_inplace(1.0f, b, a), EMBER_ERR_DEVICE_MISMATCH, "axpy_inplace");
    TU_ASSERT_STATUS(ember_relu_backward(a, b, &o), EMBER_ERR_DEVICE_MISMATCH, "relu_backward");
    TU_ASSERT_STATUS(ember_cross_entropy(a, tt, &o), EMBER_ERR_DEVICE_MISMATCH, "cross_entropy");
    CU_ASSERT_PTR_NULL(o);
    assert_holds(a, x, sizeof x);
    ember_tensor_free(a);
    ember_tensor_free(b);
    ember_tensor_free(tt);
    ember_context_destroy(other);
}

/* ---- allocation failures: every allocation of every op, on every path ---- */

typedef struct oom_case {
    const char *name;
    int kind;
} oom_case;

static ember_status run_case(int kind, ember_tensor *x, ember_tensor *y, ember_tensor *t,
                             ember_tensor **o) {
    switch (kind) {
    case 0:
        return ember_relu(x, o);
    case 1:
        return ember_relu_backward(x, y, o);
    case 2:
        return ember_softmax(x, o);
    case 3:
        return ember_cross_entropy(x, t, o);
    case 4:
        return ember_cross_entropy_backward(x, t, o);
    case 5:
        return ember_axpy(0.5f, x, y, o);
    case 6:
        *o = NULL;
        return ember_axpy_inplace(0.5f, x, y);
    case 7:
        return ember_argmax(x, 1, o);
    default:
        return ember_select(x, 1, t, o);
    }
}

static void test_out_of_memory(void) {
    const int64_t shape[2] = {5, 6}, ts[1] = {5};
    float *xv = rand_f32(30, -1.0f, 1.0f), *yv = rand_f32(30, -1.0f, 1.0f);
    const int64_t tv[5] = {0, 5, 2, 3, 1};
    FOR_EACH_PATH(level) {
        ember__nn_force_fallback = level;
        for (int kind = 0; kind < 9; kind++) {
            ember_tensor *x = mkf(2, shape, xv), *y = mkf(2, shape, yv);
            ember_tensor *t = mk(EMBER_I64, 1, ts, tv);
            int failures = 0;
            for (long k = 1; k < 64; k++) {
                long live = ember__alloc_live();
                ember_tensor *o = (ember_tensor *)&o;
                ember__alloc_fail_at(k);
                ember_status st = run_case(kind, x, y, t, &o);
                ember__alloc_fail_at(0);
                if (st == EMBER_OK) {
                    ember_tensor_free(o);
                    break;
                }
                failures++;
                CU_ASSERT_EQUAL(st, EMBER_ERR_OUT_OF_MEMORY);
                CU_ASSERT_PTR_NULL(o);
                CU_ASSERT_EQUAL(ember__alloc_live(), live);
                assert_holds(x, xv, sizeof(float) * 30);
                assert_holds(y, yv, sizeof(float) * 30); /* in place: y unchanged on failure */
            }
            /* the handle (and the host copies at level 2) are allocations that can fail */
            if (kind != 6 || level == 2)
                CU_ASSERT(failures >= 1);
            ember_tensor_free(x);
            ember_tensor_free(y);
            ember_tensor_free(t);
        }
    }
    ember__nn_force_fallback = 0;
    free(xv);
    free(yv);
}

/* ---- OpenCL (or any non-CPU device): its own kernels and the host fallback against the CPU ----
 * Shapes: [9, 10] and [37, 300] (rows longer than a work-group, a class count that is no power of
 * two). With the device's kernels (backends/opencl/cl_nn.c) relu, relu_backward, axpy, argmax and
 * select must give the CPU's bits; softmax and cross-entropy (loss and gradient) agree within
 * |d - h| <= 1e-6 + 1e-5 |h| (another exp, another summation order). With the host fallback forced
 * every op gives the CPU's bits. */

static int nn_exact_kind(int kind) { return kind != 2 && kind != 3 && kind != 4; }

static void other_device_case(ember_context *c2, ember_device dev, int64_t rows, int64_t cols,
                              int fallback) {
    const int64_t shape[2] = {rows, cols}, ts[1] = {rows};
    const size_t n = (size_t)(rows * cols);
    float *x = rand_f32(n, -3.0f, 3.0f);
    x[1] = -0.0f; /* relu's -0.0 -> +0.0, and a tie for argmax below */
    x[2] = x[3];
    int64_t *t = malloc((size_t)rows * sizeof *t);
    for (int64_t i = 0; i < rows; i++)
        t[i] = (int64_t)(tu_next(&rng) % (uint64_t)cols);
    ember_tensor *hx = NULL, *ht = NULL, *dx = NULL, *dt = NULL;
    TU_OK(ember_tensor_from_data(c2, TU_CPU, EMBER_F32, 2, shape, x, &hx));
    TU_OK(ember_tensor_from_data(c2, TU_CPU, EMBER_I64, 1, ts, t, &ht));
    TU_OK(ember_tensor_from_data(c2, dev, EMBER_F32, 2, shape, x, &dx));
    if (ember_tensor_from_data(c2, dev, EMBER_I64, 1, ts, t, &dt) != EMBER_OK)
        dt = NULL; /* a device without I64: cross-entropy takes I32 there */
    char *hb = malloc(n * 8), *db = malloc(n * 8);
    for (int kind = 0; kind < 9; kind++) {
        if ((kind == 3 || kind == 4 || kind == 7 || kind == 8) && !dt)
            continue;
        ember_tensor *ho = NULL, *dout = NULL;
        ember_tensor *hy = kind == 6 ? NULL : hx, *dy = kind == 6 ? NULL : dx;
        if (kind == 6) { /* in place needs fresh y on each side */
            TU_OK(ember_tensor_from_data(c2, TU_CPU, EMBER_F32, 2, shape, x, &hy));
            TU_OK(ember_tensor_from_data(c2, dev, EMBER_F32, 2, shape, x, &dy));
        }
        ember__nn_force_fallback = 0;
        TU_OK(run_case(kind, hx, hy, ht, &ho));
        ember__nn_force_fallback = fallback;
        TU_OK(run_case(kind, dx, dy, dt, &dout));
        ember__nn_force_fallback = 0;
        const ember_tensor *hr = kind == 6 ? hy : ho, *dr = kind == 6 ? dy : dout;
        const size_t cnt = (size_t)ember_tensor_numel(hr);
        const size_t esz = ember_tensor_dtype(hr) == EMBER_I64 ? 8 : 4;
        TU_OK(ember_tensor_read(hr, hb, cnt * esz));
        TU_OK(ember_tensor_read(dr, db, cnt * esz));
        if (fallback || nn_exact_kind(kind)) {
            if (memcmp(hb, db, cnt * esz) != 0) {
                fprintf(stderr, "nn on %s, %lldx%lld, kind %d, fallback %d: not the CPU's bits\n",
                        ember_backend_name(dev.backend), (long long)rows, (long long)cols, kind,
                        fallback);
                CU_FAIL("device result differs from the CPU's");
            }
        } else {
            const float *h = (const float *)hb, *d = (const float *)db;
            size_t bad = 0;
            for (size_t i = 0; i < cnt; i++)
                if (!(fabsf(d[i] - h[i]) <= 1e-6f + 1e-5f * fabsf(h[i])))
                    bad++;
            if (bad)
                fprintf(stderr, "nn on %s, %lldx%lld, kind %d: %zu of %zu values off\n",
                        ember_backend_name(dev.backend), (long long)rows, (long long)cols, kind,
                        bad, cnt);
            CU_ASSERT_EQUAL(bad, 0);
        }
        ember_tensor_free(ho);
        ember_tensor_free(dout);
        if (kind == 6) {
            ember_tensor_free(hy);
            ember_tensor_free(dy);
        }
    }
    /* a device and the CPU do not mix */
    ember_tensor *o = NULL;
    TU_ASSERT_STATUS(ember_axpy(1.0f, hx, dx, &o), EMBER_ERR_BACKEND_MISMATCH,
                     "The provided tensors are not on the same backend. Got backends cpu and "
                     "opencl.");
    CU_ASSERT_PTR_NULL(o);
    ember_tensor_free(hx);
    ember_tensor_free(ht);
    ember_tensor_free(dx);
    ember_tensor_free(dt);
    free(hb);
    free(db);
    free(x);
    free(t);
}

static void test_other_devices(void) {
    ember_context *c2 = NULL;
    if (ember_context_create(NULL, &c2) != EMBER_OK) {
        CU_FAIL("context_create");
        return;
    }
    int n = ember_device_count(c2, EMBER_BACKEND_OPENCL);
    for (int d = 0; d < n; d++) {
        ember_device dev = {EMBER_BACKEND_OPENCL, d};
        for (int fallback = 0; fallback <= 2; fallback += 2) {
            other_device_case(c2, dev, 9, 10, fallback);
            other_device_case(c2, dev, 37, 300, fallback);
        }
        /* select of slices that are no whole number of 4-byte words: U8 [6, 7, 3] along axis 1 */
        const int64_t us[3] = {6, 7, 3}, is[1] = {5};
        unsigned char u[126];
        for (int i = 0; i < 126; i++)
            u[i] = (unsigned char)tu_next(&rng);
        const int32_t idx[5] = {6, 0, 3, 3, 1};
        ember_tensor *hu = NULL, *hi = NULL, *du = NULL, *di = NULL, *ho = NULL, *dout = NULL;
        TU_OK(ember_tensor_from_data(c2, TU_CPU, EMBER_U8, 3, us, u, &hu));
        TU_OK(ember_tensor_from_data(c2, TU_CPU, EMBER_I32, 1, is, idx, &hi));
        if (ember_tensor_from_data(c2, dev, EMBER_U8, 3, us, u, &du) == EMBER_OK &&
            ember_tensor_from_data(c2, dev, EMBER_I32, 1, is, idx, &di) == EMBER_OK) {
            unsigned char hb[90], db[90];
            TU_OK(ember_select(hu, 1, hi, &ho));
            TU_OK(ember_select(du, 1, di, &dout));
            TU_OK(ember_tensor_read(ho, hb, sizeof hb));
            TU_OK(ember_tensor_read(dout, db, sizeof db));
            CU_ASSERT_EQUAL(memcmp(hb, db, sizeof hb), 0);
            CU_ASSERT_EQUAL(hb[0], u[6 * 3]); /* out[0, 0, 0] = x[0, idx[0] = 6, 0] */
            CU_ASSERT_EQUAL(hb[3], u[0]);     /* out[0, 1, 0] = x[0, idx[1] = 0, 0] */
        }
        ember_tensor_free(hu);
        ember_tensor_free(hi);
        ember_tensor_free(du);
        ember_tensor_free(di);
        ember_tensor_free(ho);
        ember_tensor_free(dout);
    }
    ember_context_destroy(c2);
}

static CU_TestInfo nn_tests[] = {
    {"relu values", test_relu_values},
    {"relu_backward values", test_relu_backward_values},
    {"softmax values", test_softmax_values},
    {"softmax edge cases", test_softmax_edge},
    {"cross_entropy I64 targets", test_cross_entropy_i64},
    {"cross_entropy I32 targets", test_cross_entropy_i32},
    {"cross_entropy gradient is the derivative", test_cross_entropy_gradient_is_derivative},
    {"cross_entropy folds leading axes", test_cross_entropy_batched_axes},
    {"axpy and axpy_inplace values", test_axpy_values},
    {"axpy_inplace drops a stale pack cache", test_axpy_inplace_drops_pack_cache},
    {"argmax values on every axis", test_argmax_values},
    {"argmax ties and NaN", test_argmax_ties_and_nan},
    {"select values on every axis", test_select_values},
    {"select edge cases and guards", test_select_edge_and_guards},
    {"autodiff contexts", test_autodiff},
    {"guards: handles and NULL outputs", test_guards_handles},
    {"guards: dtypes and shapes", test_guards_dtypes_shapes},
    {"guards: targets", test_guards_targets},
    {"guards: devices", test_guards_devices},
    {"allocation failures", test_out_of_memory},
    {"other devices match the CPU", test_other_devices},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"nn", init_suite, clean_suite, NULL, NULL, nn_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return tu_run("test_nn", suites); }
