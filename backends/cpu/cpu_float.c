/* backends/cpu/cpu_float.c: f32 ops on the CPU: GEMM through OpenBLAS (cblas), elementwise and
 * reductions in plain C. */
#include <cblas.h>
#include <string.h>

#include "cpu_backend.h"

/* OpenBLAS extension, declared in its cblas.h on Debian but not by every cblas.h. */
char *openblas_get_corename(void);

const char *ember__cpu_blas_core(void) {
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
}

ember_status ember__cpu_gemm_f32(void *state, int dev, const ember__gemm *g, const ember_tensor *a,
                                 const ember_tensor *b, ember_tensor *c) {
    (void)state;
    (void)dev;
    const float *A = a->buf, *B = b->buf;
    float *C = c->buf;
    const int lda = (int)(g->trans_a ? g->m : g->k);
    const int ldb = (int)(g->trans_b ? g->k : g->n);
    for (int64_t i = 0; i < g->batch; i++) {
        float *Ci = C + i * g->m * g->n;
        if (g->m == 0 || g->n == 0)
            continue;
        if (g->k == 0) { /* an empty sum: C = beta * C */
            for (int64_t j = 0; j < g->m * g->n; j++)
                Ci[j] = g->beta == 0.0f ? 0.0f : g->beta * Ci[j];
            continue;
        }
        cblas_sgemm(CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
                    g->trans_b ? CblasTrans : CblasNoTrans, (int)g->m, (int)g->n, (int)g->k,
                    g->alpha, A + g->a_off[i], lda, B + g->b_off[i], ldb, g->beta, Ci, (int)g->n);
    }
    return EMBER_OK;
}

ember_status ember__cpu_binary_f32(void *state, int dev, ember__binop op, const ember__bcast *bc,
                                   const ember_tensor *a, const ember_tensor *b,
                                   ember_tensor *out) {
    (void)state;
    (void)dev;
    const float *A = a->buf, *B = b->buf;
    float *O = out->buf;
    const int r = bc->rank;
    int64_t idx[EMBER_MAX_RANK] = {0};
    int64_t inner = bc->shape[r - 1];
    int64_t sa = bc->a_stride[r - 1], sb = bc->b_stride[r - 1];
    size_t total = out->numel;
    size_t o = 0;
    int64_t ao = 0, bo = 0;
    while (o < total) {
        if (op == EMBER__BINOP_ADD)
            for (int64_t j = 0; j < inner; j++)
                O[o + (size_t)j] = A[ao + j * sa] + B[bo + j * sb];
        else
            for (int64_t j = 0; j < inner; j++)
                O[o + (size_t)j] = A[ao + j * sa] * B[bo + j * sb];
        o += (size_t)inner;
        /* advance the outer index (odometer over axes 0..r-2) */
        for (int d = r - 2; d >= 0; d--) {
            idx[d]++;
            ao += bc->a_stride[d];
            bo += bc->b_stride[d];
            if (idx[d] < bc->shape[d])
                break;
            ao -= bc->a_stride[d] * idx[d];
            bo -= bc->b_stride[d] * idx[d];
            idx[d] = 0;
        }
        if (inner == 0)
            break;
    }
    return EMBER_OK;
}

ember_status ember__cpu_sum_rows_f32(void *state, int dev, const ember_tensor *x, int64_t rows,
                                     int64_t cols, ember_tensor *out) {
    (void)state;
    (void)dev;
    const float *X = x->buf;
    float *O = out->buf;
    /* accumulate in double so the result does not depend on how many rows there are */
    double *acc = ember__calloc((size_t)(cols ? cols : 1), sizeof(double));
    EMBER_FAIL_IF(!acc, EMBER_ERR_OUT_OF_MEMORY, "linear_bias_backward: no memory");
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++)
            acc[j] += X[r * cols + j];
    for (int64_t j = 0; j < cols; j++)
        O[j] = (float)acc[j];
    ember__free(acc);
    return EMBER_OK;
}

ember_status ember__cpu_convert(void *state, int dev, const ember_tensor *x, ember_tensor *out) {
    (void)state;
    (void)dev;
    size_t n = x->numel;
    if (x->dtype == out->dtype) {
        memcpy(out->buf, x->buf, x->nbytes);
        return EMBER_OK;
    }
    float *tmp = NULL;
    const float *src;
    if (x->dtype == EMBER_F32) {
        src = x->buf;
    } else {
        tmp = ember__malloc(n * sizeof(float) + 1);
        EMBER_FAIL_IF(!tmp, EMBER_ERR_OUT_OF_MEMORY, "convert: no memory");
        const uint16_t *h = x->buf;
        for (size_t i = 0; i < n; i++)
            tmp[i] = x->dtype == EMBER_F16 ? ember__f16_to_f32(h[i]) : ember__bf16_to_f32(h[i]);
        src = tmp;
    }
    if (out->dtype == EMBER_F32) {
        memcpy(out->buf, src, n * sizeof(float));
    } else {
        uint16_t *h = out->buf;
        for (size_t i = 0; i < n; i++)
            h[i] = out->dtype == EMBER_F16 ? ember__f32_to_f16(src[i]) : ember__f32_to_bf16(src[i]);
    }
    ember__free(tmp);
    return EMBER_OK;
}
