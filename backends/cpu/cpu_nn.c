/* backends/cpu/cpu_nn.c: the neural-network ops of ember/nn.h on the host: the host kernels the
 * dispatcher's fallback uses for any backend without its own (dispatch/nn.h), and the CPU
 * backend's entries, which run those kernels on the CPU buffers in place.
 *
 * Reductions (softmax and cross-entropy sums) accumulate in double so that a result does not
 * depend on the row length beyond f32 rounding of the output. */
#include <math.h>
#include <string.h>

#include "../../dispatch/nn.h"
#include "cpu_backend.h"

void ember__nn_relu(const float *x, float *out, size_t n) {
    /* burn: mask_fill(x <= 0, 0): -0.0 becomes +0.0, NaN passes through */
    for (size_t i = 0; i < n; i++)
        out[i] = x[i] <= 0.0f ? 0.0f : x[i];
}

void ember__nn_relu_backward(const float *y, const float *dy, float *dx, size_t n) {
    /* burn: grad.mask_fill(output <= 0, 0) */
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] <= 0.0f ? 0.0f : dy[i];
}

/* The maximum of a row, ignoring NaN (which then propagates through the exponentials). */
static float row_max(const float *x, int64_t cols) {
    float m = -INFINITY;
    for (int64_t j = 0; j < cols; j++)
        if (x[j] > m)
            m = x[j];
    return m;
}

void ember__nn_softmax(const float *x, float *out, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *o = out + r * cols;
        const double m = row_max(xr, cols);
        double s = 0.0;
        for (int64_t j = 0; j < cols; j++)
            s += exp((double)xr[j] - m);
        for (int64_t j = 0; j < cols; j++)
            o[j] = (float)(exp((double)xr[j] - m) / s);
    }
}

static int64_t target_at(const void *targets, ember_dtype tdt, int64_t r) {
    return tdt == EMBER_I64 ? ((const int64_t *)targets)[r] : ((const int32_t *)targets)[r];
}

void ember__nn_cross_entropy(const float *x, const void *targets, ember_dtype tdt, int64_t rows,
                             int64_t cols, float *loss, float *dlogits) {
    double total = 0.0;
    const double inv_rows = 1.0 / (double)rows;
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        const int64_t t = target_at(targets, tdt, r);
        const double m = row_max(xr, cols);
        double s = 0.0;
        for (int64_t j = 0; j < cols; j++)
            s += exp((double)xr[j] - m);
        total += m + log(s) - (double)xr[t]; /* logsumexp - the target's logit */
        if (dlogits) {
            float *g = dlogits + r * cols;
            for (int64_t j = 0; j < cols; j++) {
                double p = exp((double)xr[j] - m) / s;
                g[j] = (float)((p - (j == t ? 1.0 : 0.0)) * inv_rows);
            }
        }
    }
    if (loss)
        *loss = (float)(total * inv_rows);
}

void ember__nn_axpy(float alpha, const float *x, const float *y, float *out, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = alpha * x[i] + y[i];
}

void ember__nn_argmax(const float *x, int64_t outer, int64_t n, int64_t inner, int64_t *out) {
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            const float *p = x + o * n * inner + i;
            int64_t best = 0;
            float bv = p[0];
            for (int64_t k = 1; k < n && !isnan(bv); k++) {
                float v = p[k * inner];
                if (isnan(v) || v > bv) {
                    best = k;
                    bv = v;
                }
            }
            out[o * inner + i] = best;
        }
    }
}

void ember__nn_select(const void *x, const void *indices, ember_dtype idt, int64_t outer, int64_t n,
                      int64_t n_idx, size_t inner_bytes, void *out) {
    const unsigned char *src = x;
    unsigned char *dst = out;
    if (inner_bytes == 0)
        return; /* empty slices: nothing to copy */
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < n_idx; i++, dst += inner_bytes) {
            int64_t k = target_at(indices, idt, i);
            memcpy(dst, src + ((size_t)(o * n + k)) * inner_bytes, inner_bytes);
        }
}

/* ---- the CPU backend's entries: the buffers are host memory ---- */

static ember_status cpu_relu(void *state, int dev, const ember_tensor *x, ember_tensor *out) {
    (void)state;
    (void)dev;
    ember__nn_relu(x->buf, out->buf, x->numel);
    return EMBER_OK;
}

static ember_status cpu_relu_backward(void *state, int dev, const ember_tensor *y,
                                      const ember_tensor *dy, ember_tensor *dx) {
    (void)state;
    (void)dev;
    ember__nn_relu_backward(y->buf, dy->buf, dx->buf, y->numel);
    return EMBER_OK;
}

static ember_status cpu_softmax(void *state, int dev, const ember_tensor *x, int64_t rows,
                                int64_t cols, ember_tensor *out) {
    (void)state;
    (void)dev;
    ember__nn_softmax(x->buf, out->buf, rows, cols);
    return EMBER_OK;
}

static ember_status cpu_cross_entropy(void *state, int dev, const ember_tensor *x,
                                      const ember_tensor *targets, int64_t rows, int64_t cols,
                                      ember_tensor *loss, ember_tensor *dlogits) {
    (void)state;
    (void)dev;
    ember__nn_cross_entropy(x->buf, targets->buf, targets->dtype, rows, cols,
                            loss ? (float *)loss->buf : NULL,
                            dlogits ? (float *)dlogits->buf : NULL);
    return EMBER_OK;
}

static ember_status cpu_axpy(void *state, int dev, float alpha, const ember_tensor *x,
                             const ember_tensor *y, ember_tensor *out) {
    (void)state;
    (void)dev;
    ember__nn_axpy(alpha, x->buf, y->buf, out->buf, x->numel);
    return EMBER_OK;
}

static ember_status cpu_argmax(void *state, int dev, const ember_tensor *x, int64_t outer,
                               int64_t n, int64_t inner, ember_tensor *out) {
    (void)state;
    (void)dev;
    ember__nn_argmax(x->buf, outer, n, inner, out->buf);
    return EMBER_OK;
}

static ember_status cpu_select(void *state, int dev, const ember_tensor *x,
                               const ember_tensor *indices, int64_t outer, int64_t n,
                               size_t inner_bytes, ember_tensor *out) {
    (void)state;
    (void)dev;
    ember__nn_select(x->buf, indices->buf, indices->dtype, outer, n, (int64_t)indices->numel,
                     inner_bytes, out->buf);
    return EMBER_OK;
}

const struct ember__nn_ops ember__cpu_nn_ops = {
    .relu_f32 = cpu_relu,
    .relu_backward_f32 = cpu_relu_backward,
    .softmax_f32 = cpu_softmax,
    .cross_entropy_f32 = cpu_cross_entropy,
    .axpy_f32 = cpu_axpy,
    .argmax_f32 = cpu_argmax,
    .select = cpu_select,
};
