/* dispatch/ops_nn.c: the dispatcher of the neural-network ops (ember/nn.h).
 *
 * Each op checks its operands (handles, dtypes, one backend and device, shapes, autodiff), then
 * allocates the output on the operands' device and runs the backend's entry from its nn table
 * (dispatch/nn.h). A backend without the entry gets the host fallback: operands are downloaded
 * (or used in place where the device shares host memory), the host kernel runs, and the outputs
 * are uploaded. On any failure the outputs are freed and *out is NULL. */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "nn.h"

int ember__nn_force_fallback = 0;

/* ---- checks ---- */

static ember_status check_f32(const char *op, const char *what, const ember_tensor *t) {
    char name[64];
    snprintf(name, sizeof name, "%s %s", op, what);
    EMBER_TRY(ember__check_tensor(t, name));
    EMBER_FAIL_IF(t->dtype == EMBER_QFLOAT, EMBER_ERR_DTYPE_MISMATCH,
                  "%s: the %s is quantized (QFloat); %s takes F32 (dequantize it first)", op, what,
                  op);
    EMBER_FAIL_IF(t->dtype != EMBER_F32, EMBER_ERR_DTYPE_MISMATCH, "%s: the %s is %s; %s takes F32",
                  op, what, ember_dtype_name(t->dtype), op);
    return EMBER_OK;
}

static ember_status check_same_shape(const char *op, const ember_tensor *a, const ember_tensor *b) {
    if (a->rank == b->rank && memcmp(a->shape, b->shape, (size_t)a->rank * sizeof a->shape[0]) == 0)
        return EMBER_OK;
    char sa[200], sb[200];
    EMBER_FAIL(EMBER_ERR_SHAPE_MISMATCH, "%s: shapes %s and %s differ (no broadcasting)", op,
               ember__shape_str(a->rank, a->shape, sa, sizeof sa),
               ember__shape_str(b->rank, b->shape, sb, sizeof sb));
}

/* A backward op on a tracked input would be a second-order derivative. */
static ember_status check_untracked(const char *op, const ember_tensor *t) {
    EMBER_FAIL_IF(t->autodiff != EMBER_AUTODIFF_DISABLED, EMBER_ERR_NOT_DIFFERENTIABLE,
                  "%s: Can't differentiate %s.", op, op);
    return EMBER_OK;
}

/* ---- plumbing ---- */

static const struct ember__nn_ops *nn_of(const ember_tensor *t) {
    if (ember__nn_force_fallback)
        return NULL;
    return t->ctx->be[t->device.backend].ops->nn;
}

static void *state_of(const ember_tensor *t) { return t->ctx->be[t->device.backend].state; }

static ember_status alloc_out(const ember_tensor *like, ember_dtype dt, int rank,
                              const int64_t *shape, ember_tensor **out) {
    size_t nbytes;
    EMBER_TRY(ember__shape_bytes(dt, rank, shape, NULL, &nbytes));
    return ember__tensor_alloc(like->ctx, like->device, dt, rank, shape, nbytes, out);
}

/* The host fallback. An operand is read where it lies when the device shares host memory
 * (host_ptr), else downloaded into a scratch copy; an output is written likewise and uploaded. */
enum { HOST_RELU, HOST_RELU_BW, HOST_SOFTMAX, HOST_CE, HOST_AXPY, HOST_ARGMAX, HOST_SELECT };

typedef struct host_job {
    int kind;
    const ember_tensor *in[2];
    ember_tensor *out[2]; /* NULL entries are skipped; out[i] may be one of in[] (in place) */
    float alpha;
    int64_t rows, cols, outer, n, inner;
    size_t inner_bytes; /* select: the bytes of one slice */
} host_job;

static void *host_ptr(const ember_tensor *t) {
    const ember_backend_ops *ops = t->ctx->be[t->device.backend].ops;
    if (ember__nn_force_fallback > 1 || !ops->host_ptr)
        return NULL;
    return ops->host_ptr(state_of(t), t->device.index, t->buf);
}

static void host_kernel(const host_job *j, void *const *in, void *const *out) {
    switch (j->kind) {
    case HOST_RELU:
        ember__nn_relu(in[0], out[0], j->in[0]->numel);
        break;
    case HOST_RELU_BW:
        ember__nn_relu_backward(in[0], in[1], out[0], j->in[0]->numel);
        break;
    case HOST_SOFTMAX:
        ember__nn_softmax(in[0], out[0], j->rows, j->cols);
        break;
    case HOST_CE:
        ember__nn_cross_entropy(in[0], in[1], j->in[1]->dtype, j->rows, j->cols, out[0], out[1]);
        break;
    case HOST_AXPY:
        ember__nn_axpy(j->alpha, in[0], in[1], out[0], j->in[0]->numel);
        break;
    case HOST_ARGMAX:
        ember__nn_argmax(in[0], j->outer, j->n, j->inner, out[0]);
        break;
    default: /* HOST_SELECT */
        ember__nn_select(in[0], in[1], j->in[1]->dtype, j->outer, j->n, (int64_t)j->in[1]->numel,
                         j->inner_bytes, out[0]);
        break;
    }
}

static ember_status run_host(const char *op, const host_job *j) {
    void *in[2] = {NULL, NULL}, *out[2] = {NULL, NULL};
    void *owned[4] = {NULL, NULL, NULL, NULL};
    ember_status st = EMBER_OK;
    for (int i = 0; i < 2 && st == EMBER_OK; i++) {
        const ember_tensor *t = j->in[i];
        if (!t)
            continue;
        if ((in[i] = host_ptr(t)) != NULL)
            continue;
        owned[i] = in[i] = ember__malloc(t->nbytes ? t->nbytes : 1);
        if (!in[i]) {
            st = ember__fail(EMBER_ERR_OUT_OF_MEMORY, __FILE__, __func__, __LINE__,
                             "%s: no memory for a host copy of %zu bytes", op, t->nbytes);
            break;
        }
        if (t->nbytes)
            st = t->ctx->be[t->device.backend].ops->download(state_of(t), t->device.index, t->buf,
                                                             0, in[i], t->nbytes);
    }
    for (int i = 0; i < 2 && st == EMBER_OK; i++) {
        ember_tensor *t = j->out[i];
        if (!t)
            continue;
        for (int k = 0; k < 2; k++)
            if (t == j->in[k] && owned[k]) /* in place: write into the downloaded copy */
                out[i] = in[k];
        if (out[i] || (out[i] = host_ptr(t)) != NULL)
            continue;
        owned[2 + i] = out[i] = ember__malloc(t->nbytes ? t->nbytes : 1);
        if (!out[i])
            st = ember__fail(EMBER_ERR_OUT_OF_MEMORY, __FILE__, __func__, __LINE__,
                             "%s: no memory for a host copy of %zu bytes", op, t->nbytes);
    }
    if (st == EMBER_OK)
        host_kernel(j, in, out);
    for (int i = 0; i < 2 && st == EMBER_OK; i++) {
        ember_tensor *t = j->out[i];
        if (!t || !t->nbytes || host_ptr(t))
            continue;
        st = t->ctx->be[t->device.backend].ops->upload(state_of(t), t->device.index, t->buf, 0,
                                                       out[i], t->nbytes);
    }
    for (int i = 0; i < 4; i++)
        ember__free(owned[i]);
    return st;
}

/* Hand back `t` as the op's output when st is OK, else free it. */
static ember_status finish(ember_status st, ember_tensor *t, ember_tensor **out) {
    if (st != EMBER_OK) {
        ember__tensor_destroy(t);
        return st;
    }
    *out = t;
    return EMBER_OK;
}

/* ---- relu ---- */

ember_status ember_relu(const ember_tensor *x, ember_tensor **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "relu: out is NULL");
    *out = NULL;
    EMBER_TRY(check_f32("relu", "input", x));
    ember_tensor *y;
    EMBER_TRY(alloc_out(x, EMBER_F32, x->rank, x->shape, &y));
    y->autodiff = x->autodiff;
    const struct ember__nn_ops *nn = nn_of(x);
    ember_status st;
    if (nn && nn->relu_f32) {
        st = nn->relu_f32(state_of(x), x->device.index, x, y);
    } else {
        host_job j = {.kind = HOST_RELU, .in = {x, NULL}, .out = {y, NULL}};
        st = run_host("relu", &j);
    }
    return finish(st, y, out);
}

ember_status ember_relu_backward(const ember_tensor *y, const ember_tensor *dy, ember_tensor **dx) {
    static const char op[] = "relu_backward";
    EMBER_FAIL_IF(!dx, EMBER_ERR_INVALID_ARGUMENT, "%s: dx is NULL", op);
    *dx = NULL;
    EMBER_TRY(check_f32(op, "output", y));
    EMBER_TRY(check_f32(op, "grad", dy));
    EMBER_TRY(ember__check_same_device(op, y, dy));
    EMBER_TRY(check_same_shape(op, y, dy));
    EMBER_TRY(check_untracked(op, y));
    EMBER_TRY(check_untracked(op, dy));
    ember_tensor *g;
    EMBER_TRY(alloc_out(y, EMBER_F32, y->rank, y->shape, &g));
    const struct ember__nn_ops *nn = nn_of(y);
    ember_status st;
    if (nn && nn->relu_backward_f32) {
        st = nn->relu_backward_f32(state_of(y), y->device.index, y, dy, g);
    } else {
        host_job j = {.kind = HOST_RELU_BW, .in = {y, dy}, .out = {g, NULL}};
        st = run_host(op, &j);
    }
    return finish(st, g, dx);
}

/* ---- softmax ---- */

ember_status ember_softmax(const ember_tensor *x, ember_tensor **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "softmax: out is NULL");
    *out = NULL;
    EMBER_TRY(check_f32("softmax", "input", x));
    const int64_t cols = x->shape[x->rank - 1];
    const int64_t rows = cols ? (int64_t)x->numel / cols : 0;
    ember_tensor *y;
    EMBER_TRY(alloc_out(x, EMBER_F32, x->rank, x->shape, &y));
    y->autodiff = x->autodiff;
    const struct ember__nn_ops *nn = nn_of(x);
    ember_status st;
    if (nn && nn->softmax_f32) {
        st = nn->softmax_f32(state_of(x), x->device.index, x, rows, cols, y);
    } else {
        host_job j = {
            .kind = HOST_SOFTMAX, .in = {x, NULL}, .out = {y, NULL}, .rows = rows, .cols = cols};
        st = run_host("softmax", &j);
    }
    return finish(st, y, out);
}

/* ---- cross-entropy ---- */

/* Every value of the I64 / I32 tensor idx must lie in [0, limit): read them to the host (index
 * tensors are small) and name the first one outside, with its flat position. */
static ember_status check_index_range(const char *op, const char *what, const ember_tensor *idx,
                                      int64_t limit, const char *range_name) {
    const void *host = host_ptr(idx);
    void *owned = NULL;
    if (!host && idx->nbytes) {
        owned = ember__malloc(idx->nbytes);
        EMBER_FAIL_IF(!owned, EMBER_ERR_OUT_OF_MEMORY,
                      "%s: no memory for a host copy of the %ss (%zu bytes)", op, what,
                      idx->nbytes);
        ember_status st = idx->ctx->be[idx->device.backend].ops->download(
            state_of(idx), idx->device.index, idx->buf, 0, owned, idx->nbytes);
        if (st != EMBER_OK) {
            ember__free(owned);
            return st;
        }
        host = owned;
    }
    int64_t bad_at = -1, bad = 0;
    for (int64_t r = 0; r < (int64_t)idx->numel && bad_at < 0; r++) {
        int64_t t =
            idx->dtype == EMBER_I64 ? ((const int64_t *)host)[r] : ((const int32_t *)host)[r];
        if (t < 0 || t >= limit) {
            bad_at = r;
            bad = t;
        }
    }
    ember__free(owned);
    EMBER_FAIL_IF(bad_at >= 0, EMBER_ERR_INVALID_ARGUMENT,
                  "%s: %s %lld at flat index %lld is outside %s [0, %lld)", op, what,
                  (long long)bad, (long long)bad_at, range_name, (long long)limit);
    return EMBER_OK;
}

/* The checks shared by the loss and its gradient; rows and cols of the [rows, cols] view. */
static ember_status check_cross_entropy(const char *op, const ember_tensor *logits,
                                        const ember_tensor *targets, int64_t *rows, int64_t *cols) {
    char sa[200], sb[200];
    EMBER_TRY(check_f32(op, "logits", logits));
    EMBER_TRY(ember__check_tensor(targets, "cross_entropy targets"));
    EMBER_FAIL_IF(targets->dtype != EMBER_I64 && targets->dtype != EMBER_I32,
                  EMBER_ERR_DTYPE_MISMATCH, "%s: the targets are %s; class indices are I64 or I32",
                  op, ember_dtype_name(targets->dtype));
    EMBER_TRY(ember__check_same_device(op, logits, targets));
    if (logits->rank < 2 || targets->rank != logits->rank - 1 ||
        memcmp(targets->shape, logits->shape, (size_t)targets->rank * sizeof targets->shape[0]))
        EMBER_FAIL(EMBER_ERR_SHAPE_MISMATCH,
                   "%s: logits %s and targets %s: the targets must have the logits' shape without "
                   "its last (class) axis, and the logits rank >= 2",
                   op, ember__shape_str(logits->rank, logits->shape, sa, sizeof sa),
                   ember__shape_str(targets->rank, targets->shape, sb, sizeof sb));
    *cols = logits->shape[logits->rank - 1];
    *rows = (int64_t)targets->numel;
    EMBER_FAIL_IF(*rows == 0, EMBER_ERR_INVALID_ARGUMENT,
                  "%s: logits %s hold no rows (the mean over an empty batch)", op,
                  ember__shape_str(logits->rank, logits->shape, sa, sizeof sa));

    /* every target must name a class */
    return check_index_range(op, "target", targets, *cols, "the classes");
}

static ember_status run_cross_entropy(const char *op, const ember_tensor *logits,
                                      const ember_tensor *targets, int64_t rows, int64_t cols,
                                      ember_tensor *loss, ember_tensor *dlogits) {
    const struct ember__nn_ops *nn = nn_of(logits);
    if (nn && nn->cross_entropy_f32)
        return nn->cross_entropy_f32(state_of(logits), logits->device.index, logits, targets, rows,
                                     cols, loss, dlogits);
    host_job j = {.kind = HOST_CE,
                  .in = {logits, targets},
                  .out = {loss, dlogits},
                  .rows = rows,
                  .cols = cols};
    return run_host(op, &j);
}

ember_status ember_cross_entropy(const ember_tensor *logits, const ember_tensor *targets,
                                 ember_tensor **loss) {
    static const char op[] = "cross_entropy";
    EMBER_FAIL_IF(!loss, EMBER_ERR_INVALID_ARGUMENT, "%s: loss is NULL", op);
    *loss = NULL;
    int64_t rows, cols;
    EMBER_TRY(check_cross_entropy(op, logits, targets, &rows, &cols));
    ember_tensor *l;
    const int64_t one = 1;
    EMBER_TRY(alloc_out(logits, EMBER_F32, 1, &one, &l));
    l->autodiff = logits->autodiff;
    return finish(run_cross_entropy(op, logits, targets, rows, cols, l, NULL), l, loss);
}

ember_status ember_cross_entropy_backward(const ember_tensor *logits, const ember_tensor *targets,
                                          ember_tensor **dlogits) {
    static const char op[] = "cross_entropy_backward";
    EMBER_FAIL_IF(!dlogits, EMBER_ERR_INVALID_ARGUMENT, "%s: dlogits is NULL", op);
    *dlogits = NULL;
    int64_t rows, cols;
    EMBER_TRY(check_f32(op, "logits", logits));
    EMBER_TRY(check_untracked(op, logits));
    EMBER_TRY(check_cross_entropy(op, logits, targets, &rows, &cols));
    ember_tensor *g;
    EMBER_TRY(alloc_out(logits, EMBER_F32, logits->rank, logits->shape, &g));
    return finish(run_cross_entropy(op, logits, targets, rows, cols, NULL, g), g, dlogits);
}

/* ---- axpy ---- */

static ember_status check_axpy(const char *op, const ember_tensor *x, const ember_tensor *y,
                               ember_autodiff *merged) {
    EMBER_TRY(check_f32(op, "x", x));
    EMBER_TRY(check_f32(op, "y", y));
    EMBER_TRY(ember__check_same_device(op, x, y));
    EMBER_TRY(check_same_shape(op, x, y));
    return ember__autodiff_merge(op, x->autodiff, y->autodiff, merged);
}

static ember_status run_axpy(const char *op, float alpha, const ember_tensor *x,
                             const ember_tensor *y, ember_tensor *out) {
    const struct ember__nn_ops *nn = nn_of(x);
    if (nn && nn->axpy_f32)
        return nn->axpy_f32(state_of(x), x->device.index, alpha, x, y, out);
    host_job j = {.kind = HOST_AXPY, .in = {x, y}, .out = {out, NULL}, .alpha = alpha};
    return run_host(op, &j);
}

ember_status ember_axpy(float alpha, const ember_tensor *x, const ember_tensor *y,
                        ember_tensor **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "axpy: out is NULL");
    *out = NULL;
    ember_autodiff ad;
    EMBER_TRY(check_axpy("axpy", x, y, &ad));
    ember_tensor *o;
    EMBER_TRY(alloc_out(x, EMBER_F32, x->rank, x->shape, &o));
    o->autodiff = ad;
    return finish(run_axpy("axpy", alpha, x, y, o), o, out);
}

ember_status ember_axpy_inplace(float alpha, const ember_tensor *x, ember_tensor *y) {
    ember_autodiff ad;
    EMBER_TRY(check_axpy("axpy_inplace", x, y, &ad));
    EMBER_TRY(run_axpy("axpy_inplace", alpha, x, y, y));
    /* y's values changed: a backend's cached copy of y in its kernel layout is stale */
    pthread_mutex_lock(&y->pack.lock);
    if (y->pack.data && y->pack.release)
        y->pack.release(state_of(y), y->pack.data);
    y->pack.data = NULL;
    y->pack.bytes = 0;
    pthread_mutex_unlock(&y->pack.lock);
    return EMBER_OK;
}

/* ---- argmax ---- */

ember_status ember_argmax(const ember_tensor *x, int axis, ember_tensor **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "argmax: out is NULL");
    *out = NULL;
    EMBER_TRY(check_f32("argmax", "input", x));
    EMBER_FAIL_IF(axis < 0 || axis >= x->rank, EMBER_ERR_INVALID_ARGUMENT,
                  "argmax: axis %d is outside 0..%d", axis, x->rank - 1);
    char sb[200];
    EMBER_FAIL_IF(x->shape[axis] == 0, EMBER_ERR_INVALID_ARGUMENT,
                  "argmax: axis %d of %s is empty (no index to return)", axis,
                  ember__shape_str(x->rank, x->shape, sb, sizeof sb));
    const ember_backend_ops *ops = x->ctx->be[x->device.backend].ops;
    if (!ops->holds(state_of(x), x->device.index, EMBER_I64, NULL)) {
        char db[32];
        EMBER_FAIL(EMBER_ERR_DTYPE_TRANSFER,
                   "argmax: Local transfer of I64 tensors is not supported yet (device %s cannot "
                   "hold the I64 indices)",
                   ember__device_str(x->device, db, sizeof db));
    }
    int64_t shape[EMBER_MAX_RANK], outer = 1, inner = 1;
    for (int d = 0; d < x->rank; d++) {
        shape[d] = d == axis ? 1 : x->shape[d];
        if (d < axis)
            outer *= x->shape[d];
        else if (d > axis)
            inner *= x->shape[d];
    }
    ember_tensor *o;
    EMBER_TRY(alloc_out(x, EMBER_I64, x->rank, shape, &o));
    const struct ember__nn_ops *nn = nn_of(x);
    ember_status st;
    if (nn && nn->argmax_f32) {
        st = nn->argmax_f32(state_of(x), x->device.index, x, outer, x->shape[axis], inner, o);
    } else {
        host_job j = {.kind = HOST_ARGMAX,
                      .in = {x, NULL},
                      .out = {o, NULL},
                      .outer = outer,
                      .n = x->shape[axis],
                      .inner = inner};
        st = run_host("argmax", &j);
    }
    return finish(st, o, out);
}

/* ---- select ---- */

ember_status ember_select(const ember_tensor *x, int axis, const ember_tensor *indices,
                          ember_tensor **out) {
    static const char op[] = "select";
    char sb[200];
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "select: out is NULL");
    *out = NULL;
    EMBER_TRY(ember__check_tensor(x, "select input"));
    EMBER_TRY(ember__check_tensor(indices, "select indices"));
    EMBER_FAIL_IF(x->dtype == EMBER_QFLOAT, EMBER_ERR_DTYPE_MISMATCH,
                  "select: the input is quantized (QFloat); select takes plain tensors "
                  "(dequantize it first)");
    EMBER_FAIL_IF(indices->dtype != EMBER_I64 && indices->dtype != EMBER_I32,
                  EMBER_ERR_DTYPE_MISMATCH, "select: the indices are %s; indices are I64 or I32",
                  ember_dtype_name(indices->dtype));
    EMBER_TRY(ember__check_same_device(op, x, indices));
    EMBER_FAIL_IF(axis < 0 || axis >= x->rank, EMBER_ERR_INVALID_ARGUMENT,
                  "select: axis %d is outside 0..%d", axis, x->rank - 1);
    EMBER_FAIL_IF(indices->rank != 1, EMBER_ERR_SHAPE_MISMATCH,
                  "select: indices %s: the indices are a rank-1 tensor",
                  ember__shape_str(indices->rank, indices->shape, sb, sizeof sb));
    EMBER_TRY(check_index_range(op, "index", indices, x->shape[axis], "the axis"));
    int64_t shape[EMBER_MAX_RANK], outer = 1;
    size_t inner_bytes = ember_dtype_get_traits(x->dtype)->size;
    for (int d = 0; d < x->rank; d++) {
        shape[d] = d == axis ? indices->shape[0] : x->shape[d];
        if (d < axis)
            outer *= x->shape[d];
        else if (d > axis)
            inner_bytes *= (size_t)x->shape[d];
    }
    ember_tensor *o;
    EMBER_TRY(alloc_out(x, x->dtype, x->rank, shape, &o));
    o->autodiff = x->autodiff;
    const struct ember__nn_ops *nn = nn_of(x);
    ember_status st;
    if (nn && nn->select) {
        st = nn->select(state_of(x), x->device.index, x, indices, outer, x->shape[axis],
                        inner_bytes, o);
    } else {
        host_job j = {.kind = HOST_SELECT,
                      .in = {x, indices},
                      .out = {o, NULL},
                      .outer = outer,
                      .n = x->shape[axis],
                      .inner_bytes = inner_bytes};
        st = run_host(op, &j);
    }
    return finish(st, o, out);
}
