/* dispatch/nn.h (private): the backend entries of the neural-network ops (ember/nn.h) and the
 * host kernels behind them.
 *
 * A backend points ember_backend_ops.nn at one `const struct ember__nn_ops`. Every entry is
 * optional: when the table or an entry is NULL the dispatcher (dispatch/ops_nn.c) downloads the
 * operands, runs the host kernel below and uploads the result. The CPU backend's entries
 * (backends/cpu/cpu_nn.c) run the same host kernels on its buffers in place, so the numbers are
 * the same on every device that takes the fallback.
 *
 * As for the rest of the vtable, the dispatcher has checked everything before an entry runs:
 * live tensors on this device, F32 floats, shapes that agree, outputs allocated, targets in
 * range. */
#ifndef EMBER_DISPATCH_NN_H
#define EMBER_DISPATCH_NN_H

#include <stddef.h>
#include <stdint.h>

#include "internal.h"

struct ember__nn_ops {
    /* out = max(x, 0); same shape */
    ember_status (*relu_f32)(void *state, int dev, const ember_tensor *x, ember_tensor *out);
    /* dx = y > 0 ? dy : 0 */
    ember_status (*relu_backward_f32)(void *state, int dev, const ember_tensor *y,
                                      const ember_tensor *dy, ember_tensor *dx);
    /* softmax of each of the `rows` rows of `cols` values */
    ember_status (*softmax_f32)(void *state, int dev, const ember_tensor *x, int64_t rows,
                                int64_t cols, ember_tensor *out);
    /* mean cross-entropy of x [rows, cols] against targets (I64 or I32, rows values in
     * [0, cols)): loss ([1]) and/or dlogits ([rows, cols]); either output may be NULL */
    ember_status (*cross_entropy_f32)(void *state, int dev, const ember_tensor *x,
                                      const ember_tensor *targets, int64_t rows, int64_t cols,
                                      ember_tensor *loss, ember_tensor *dlogits);
    /* out = alpha * x + y; out may be y (in place), x may be y */
    ember_status (*axpy_f32)(void *state, int dev, float alpha, const ember_tensor *x,
                             const ember_tensor *y, ember_tensor *out);
    /* x viewed as [outer, n, inner]: out[o, i] (I64) = the first index of the maximum over n */
    ember_status (*argmax_f32)(void *state, int dev, const ember_tensor *x, int64_t outer,
                               int64_t n, int64_t inner, ember_tensor *out);
    /* any plain dtype: x viewed as [outer, n, inner_bytes]; out[o, i, :] = x[o, indices[i], :]
     * for the indices (I64 or I32, each in [0, n)) */
    ember_status (*select)(void *state, int dev, const ember_tensor *x, const ember_tensor *indices,
                           int64_t outer, int64_t n, size_t inner_bytes, ember_tensor *out);
};

/* ---- host kernels (backends/cpu/cpu_nn.c): plain C on host memory, no failure ---- */
void ember__nn_relu(const float *x, float *out, size_t n);
void ember__nn_relu_backward(const float *y, const float *dy, float *dx, size_t n);
void ember__nn_softmax(const float *x, float *out, int64_t rows, int64_t cols);
/* targets: rows values of dtype tdt (EMBER_I64 or EMBER_I32), each in [0, cols). loss (one
 * float) and dlogits ([rows, cols]) may each be NULL. */
void ember__nn_cross_entropy(const float *x, const void *targets, ember_dtype tdt, int64_t rows,
                             int64_t cols, float *loss, float *dlogits);
void ember__nn_axpy(float alpha, const float *x, const float *y, float *out, size_t n);
void ember__nn_argmax(const float *x, int64_t outer, int64_t n, int64_t inner, int64_t *out);
/* indices: n_idx values of dtype idt (EMBER_I64 or EMBER_I32), each in [0, n) */
void ember__nn_select(const void *x, const void *indices, ember_dtype idt, int64_t outer, int64_t n,
                      int64_t n_idx, size_t inner_bytes, void *out);

/* The CPU backend's table. */
extern const struct ember__nn_ops ember__cpu_nn_ops;

/* Test hook: when non-zero, the dispatcher ignores every backend's nn table and takes the host
 * fallback (download, compute, upload), so that tests exercise that path on the CPU. */
extern int ember__nn_force_fallback;

#endif
