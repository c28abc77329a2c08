/* backends/opencl/cl_nn.c: the OpenCL backend's entries for the neural-network ops of ember/nn.h
 * (dispatch/nn.h), on the device's buffers, with the kernels of kernels/nn.cl. Without these the
 * dispatcher would download the operands, run the host kernel and upload the result on every
 * call. The dispatcher has checked everything (shapes, dtypes, targets and indices in range).
 *
 * Exactness: relu, relu_backward, axpy, argmax and select give the host kernels' bits; softmax and
 * cross-entropy agree with them within a few f32 ulps (nn.cl says why). */
#include <stdio.h>

#include "../../dispatch/nn.h"
#include "cl_backend.h"

/* The power-of-two work-group size of the row reductions (<= 256, <= the device's limit). */
static size_t wg_rows(const ember__cl_device *d) {
    size_t l = 1;
    while (l * 2 <= 256 && l * 2 <= d->max_wg)
        l *= 2;
    return l;
}

static ember_status launch1(ember__cl_state *s, int dev, const char *op, const char *kernel,
                            int nargs, const ember__cl_arg *args, size_t n) {
    size_t l = ember__cl_wg1(&s->dev[dev]);
    size_t g = ember__cl_round_up(n, l);
    return ember__cl_launch(s, dev, op, "nn", "-DL=1", kernel, nargs, args, 1, &g, &l);
}

static ember_status cl_relu(void *state, int dev, const ember_tensor *x, ember_tensor *out) {
    if (x->numel == 0)
        return EMBER_OK;
    cl_long n = (cl_long)x->numel;
    cl_mem X = ember__cl_mem(x), O = ember__cl_mem(out);
    const ember__cl_arg args[] = {EMBER_CL_ARG(n), EMBER_CL_ARG(X), EMBER_CL_ARG(O)};
    return launch1(state, dev, "relu", "relu_f32", 3, args, x->numel);
}

static ember_status cl_relu_backward(void *state, int dev, const ember_tensor *y,
                                     const ember_tensor *dy, ember_tensor *dx) {
    if (y->numel == 0)
        return EMBER_OK;
    cl_long n = (cl_long)y->numel;
    cl_mem Y = ember__cl_mem(y), DY = ember__cl_mem(dy), DX = ember__cl_mem(dx);
    const ember__cl_arg args[] = {EMBER_CL_ARG(n), EMBER_CL_ARG(Y), EMBER_CL_ARG(DY),
                                  EMBER_CL_ARG(DX)};
    return launch1(state, dev, "relu_backward", "relu_backward_f32", 4, args, y->numel);
}

static ember_status cl_axpy(void *state, int dev, float alpha, const ember_tensor *x,
                            const ember_tensor *y, ember_tensor *out) {
    if (x->numel == 0)
        return EMBER_OK;
    cl_long n = (cl_long)x->numel;
    cl_float a = alpha;
    cl_mem X = ember__cl_mem(x), Y = ember__cl_mem(y), O = ember__cl_mem(out);
    const ember__cl_arg args[] = {EMBER_CL_ARG(n), EMBER_CL_ARG(a), EMBER_CL_ARG(X),
                                  EMBER_CL_ARG(Y), EMBER_CL_ARG(O)};
    return launch1(state, dev, "axpy", "axpy_f32", 5, args, x->numel);
}

static ember_status cl_argmax(void *state, int dev, const ember_tensor *x, int64_t outer, int64_t n,
                              int64_t inner, ember_tensor *out) {
    if (outer * inner == 0)
        return EMBER_OK;
    cl_long o = outer, nn = n, in = inner;
    cl_mem X = ember__cl_mem(x), O = ember__cl_mem(out);
    const ember__cl_arg args[] = {EMBER_CL_ARG(o), EMBER_CL_ARG(nn), EMBER_CL_ARG(in),
                                  EMBER_CL_ARG(X), EMBER_CL_ARG(O)};
    return launch1(state, dev, "argmax", "argmax_f32", 5, args, (size_t)(outer * inner));
}

static ember_status cl_select(void *state, int dev, const ember_tensor *x,
                              const ember_tensor *indices, int64_t outer, int64_t n,
                              size_t inner_bytes, ember_tensor *out) {
    ember__cl_state *s = state;
    const int64_t n_idx = (int64_t)indices->numel;
    if (inner_bytes == 0 || outer == 0 || n_idx == 0)
        return EMBER_OK;
    cl_int wide = inner_bytes % 4 == 0, i64 = indices->dtype == EMBER_I64;
    cl_long o = outer, nn = n, ni = n_idx, w = (cl_long)(wide ? inner_bytes / 4 : inner_bytes);
    cl_mem X = ember__cl_mem(x), I = ember__cl_mem(indices), O = ember__cl_mem(out);
    const ember__cl_arg args[] = {EMBER_CL_ARG(o), EMBER_CL_ARG(nn),   EMBER_CL_ARG(ni),
                                  EMBER_CL_ARG(w), EMBER_CL_ARG(wide), EMBER_CL_ARG(X),
                                  EMBER_CL_ARG(I), EMBER_CL_ARG(i64),  EMBER_CL_ARG(O)};
    size_t l[2] = {ember__cl_wg1(&s->dev[dev]), 1};
    size_t g[2] = {ember__cl_round_up((size_t)w, l[0]), (size_t)(outer * n_idx)};
    return ember__cl_launch(s, dev, "select", "nn", "-DL=1", "select_rows", 9, args, 2, g, l);
}

static ember_status cl_softmax(void *state, int dev, const ember_tensor *x, int64_t rows,
                               int64_t cols, ember_tensor *out) {
    ember__cl_state *s = state;
    if (rows == 0 || cols == 0)
        return EMBER_OK;
    size_t l = wg_rows(&s->dev[dev]), g = (size_t)rows * l;
    char opts[32];
    snprintf(opts, sizeof opts, "-DL=%zu", l);
    cl_long c = cols;
    cl_mem X = ember__cl_mem(x), O = ember__cl_mem(out);
    const ember__cl_arg args[] = {EMBER_CL_ARG(c), EMBER_CL_ARG(X), EMBER_CL_ARG(O)};
    return ember__cl_launch(s, dev, "softmax", "nn", opts, "softmax_f32", 3, args, 1, &g, &l);
}

static ember_status cl_cross_entropy(void *state, int dev, const ember_tensor *x,
                                     const ember_tensor *targets, int64_t rows, int64_t cols,
                                     ember_tensor *loss, ember_tensor *dlogits) {
    ember__cl_state *s = state;
    const char *op = dlogits ? "cross_entropy_backward" : "cross_entropy";
    size_t l = wg_rows(&s->dev[dev]), g = (size_t)rows * l;
    char opts[32];
    snprintf(opts, sizeof opts, "-DL=%zu", l);
    const size_t acc = s->dev[dev].has_fp64 ? sizeof(cl_double) : sizeof(cl_float);
    cl_mem row_loss;
    EMBER_TRY(ember__cl_temp(s, dev, op, (size_t)rows * acc, NULL, &row_loss));
    cl_long r = rows, c = cols;
    cl_int t64 = targets->dtype == EMBER_I64, grad = dlogits != NULL;
    cl_mem X = ember__cl_mem(x), T = ember__cl_mem(targets);
    /* an unused output still needs a valid cl_mem argument: the row losses stand in */
    cl_mem G = dlogits ? ember__cl_mem(dlogits) : row_loss;
    const ember__cl_arg args[] = {EMBER_CL_ARG(r),        EMBER_CL_ARG(c),   EMBER_CL_ARG(X),
                                  EMBER_CL_ARG(T),        EMBER_CL_ARG(t64), EMBER_CL_ARG(grad),
                                  EMBER_CL_ARG(row_loss), EMBER_CL_ARG(G)};
    ember_status st =
        ember__cl_launch(s, dev, op, "nn", opts, "cross_entropy_f32", 8, args, 1, &g, &l);
    if (st == EMBER_OK && loss) {
        cl_mem L = ember__cl_mem(loss);
        const ember__cl_arg margs[] = {EMBER_CL_ARG(r), EMBER_CL_ARG(row_loss), EMBER_CL_ARG(L)};
        st = ember__cl_launch(s, dev, op, "nn", opts, "ce_mean_f32", 3, margs, 1, &l, &l);
    }
    clReleaseMemObject(row_loss); /* the runtime keeps it alive until the kernels are done */
    return st;
}

const struct ember__nn_ops ember__cl_nn_ops = {
    .relu_f32 = cl_relu,
    .relu_backward_f32 = cl_relu_backward,
    .softmax_f32 = cl_softmax,
    .cross_entropy_f32 = cl_cross_entropy,
    .axpy_f32 = cl_axpy,
    .argmax_f32 = cl_argmax,
    .select = cl_select,
};
