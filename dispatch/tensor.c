/* dispatch/tensor.c: tensor handles: creation, reading, freeing, accessors, the dtype table. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static const ember_dtype_traits dtype_table[EMBER_DTYPE_COUNT] = {
    [EMBER_F32] = {.name = "F32", .size = 4, .is_float = 1},
    [EMBER_F16] = {.name = "F16", .size = 2, .is_float = 1},
    [EMBER_BF16] = {.name = "BF16", .size = 2, .is_float = 1},
    [EMBER_I64] = {.name = "I64", .size = 8},
    [EMBER_I32] = {.name = "I32", .size = 4},
    [EMBER_I8] = {.name = "I8", .size = 1},
    [EMBER_U8] = {.name = "U8", .size = 1},
    [EMBER_BOOL] = {.name = "Bool", .size = 1},
    [EMBER_QFLOAT] = {.name = "QFloat", .size = 0, .is_quantized = 1},
};

const ember_dtype_traits *ember_dtype_get_traits(ember_dtype dt) {
    return ((unsigned)dt < EMBER_DTYPE_COUNT) ? &dtype_table[dt] : NULL;
}

const char *ember_dtype_name(ember_dtype dt) {
    return ((unsigned)dt < EMBER_DTYPE_COUNT) ? dtype_table[dt].name : "unknown";
}

const char *ember__shape_str(int rank, const int64_t *shape, char *buf, size_t cap) {
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int i = 0; i < rank && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
    return buf;
}

ember_status ember__check_tensor(const ember_tensor *t, const char *what) {
    EMBER_FAIL_IF(!t, EMBER_ERR_MISUSE, "%s: tensor is NULL", what);
    EMBER_FAIL_IF(t->magic == EMBER__DEAD_MAGIC, EMBER_ERR_MISUSE, "%s: tensor was already freed",
                  what);
    EMBER_FAIL_IF(t->magic != EMBER__TENSOR_MAGIC, EMBER_ERR_MISUSE,
                  "%s: not an ember tensor (foreign pointer)", what);
    EMBER_FAIL_IF(!t->ctx || t->ctx->magic != EMBER__CONTEXT_MAGIC, EMBER_ERR_MISUSE,
                  "%s: the tensor's context was destroyed", what);
    return EMBER_OK;
}

ember_status ember__shape_bytes(ember_dtype dt, int rank, const int64_t *shape, size_t *numel,
                                size_t *nbytes) {
    EMBER_FAIL_IF((unsigned)dt >= EMBER_DTYPE_COUNT, EMBER_ERR_INVALID_ARGUMENT,
                  "bad dtype value %d", (int)dt);
    EMBER_FAIL_IF(rank < 1 || rank > EMBER_MAX_RANK, EMBER_ERR_INVALID_ARGUMENT,
                  "rank %d is outside 1..%d", rank, EMBER_MAX_RANK);
    EMBER_FAIL_IF(!shape, EMBER_ERR_INVALID_ARGUMENT, "shape is NULL");
    size_t n = 1;
    for (int i = 0; i < rank; i++) {
        EMBER_FAIL_IF(shape[i] < 0, EMBER_ERR_INVALID_ARGUMENT, "dim %d is negative (%lld)", i,
                      (long long)shape[i]);
        /* counts and byte sizes must also fit int64_t / ptrdiff_t (offsets are signed) */
        if (!ember__mul_size(n, (size_t)shape[i], &n) || (uint64_t)shape[i] > SIZE_MAX ||
            n > (size_t)PTRDIFF_MAX) {
            char sb[160];
            EMBER_FAIL(EMBER_ERR_SHAPE_MISMATCH, "shape %s: the element count overflows",
                       ember__shape_str(rank, shape, sb, sizeof sb));
        }
    }
    size_t bytes = 0;
    if (dt != EMBER_QFLOAT &&
        (!ember__mul_size(n, dtype_table[dt].size, &bytes) || bytes > (size_t)PTRDIFF_MAX)) {
        char sb[160];
        EMBER_FAIL(EMBER_ERR_SHAPE_MISMATCH, "shape %s of %s: the byte size overflows",
                   ember__shape_str(rank, shape, sb, sizeof sb), dtype_table[dt].name);
    }
    if (numel)
        *numel = n;
    if (nbytes)
        *nbytes = bytes;
    return EMBER_OK;
}

ember_status ember__tensor_alloc(ember_context *ctx, ember_device dev, ember_dtype dt, int rank,
                                 const int64_t *shape, size_t nbytes, ember_tensor **out) {
    size_t numel;
    EMBER_TRY(ember__shape_bytes(dt, rank, shape, &numel, NULL));
    const ember_backend_ops *ops = ctx->be[dev.backend].ops;
    void *state = ctx->be[dev.backend].state;
    ember_tensor *t = ember__calloc(1, sizeof *t);
    EMBER_FAIL_IF(!t, EMBER_ERR_OUT_OF_MEMORY, "no memory for a tensor handle");
    ember_status st = ops->buffer_alloc(state, dev.index, nbytes, &t->buf);
    if (st != EMBER_OK) {
        ember__free(t);
        return st;
    }
    if (pthread_mutex_init(&t->pack.lock, NULL) != 0) {
        ops->buffer_free(state, dev.index, t->buf);
        ember__free(t);
        EMBER_FAIL(EMBER_ERR_OUT_OF_MEMORY, "cannot create a tensor's lock");
    }
    t->magic = EMBER__TENSOR_MAGIC;
    t->ctx = ctx;
    t->device = dev;
    t->dtype = dt;
    t->rank = rank;
    memcpy(t->shape, shape, (size_t)rank * sizeof shape[0]);
    t->numel = numel;
    t->nbytes = nbytes;
    t->autodiff = EMBER_AUTODIFF_DISABLED;
    t->producer = dev;
    *out = t;
    return EMBER_OK;
}

void ember__tensor_destroy(ember_tensor *t) {
    if (!t)
        return;
    ember_context *ctx = t->ctx;
    const ember_backend_ops *ops = ctx->be[t->device.backend].ops;
    void *state = ctx->be[t->device.backend].state;
    if (t->pack.data && t->pack.release)
        t->pack.release(state, t->pack.data);
    pthread_mutex_destroy(&t->pack.lock);
    ops->buffer_free(state, t->device.index, t->buf);
    t->magic = EMBER__DEAD_MAGIC;
    ember__free(t);
}

ember_status ember_tensor_from_data(ember_context *ctx, ember_device dev, ember_dtype dt, int rank,
                                    const int64_t *shape, const void *data, ember_tensor **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "tensor_from_data: out is NULL");
    *out = NULL;
    EMBER_TRY(ember__check_context(ctx, "tensor_from_data"));
    EMBER_FAIL_IF((unsigned)dt >= EMBER_DTYPE_COUNT, EMBER_ERR_INVALID_ARGUMENT,
                  "tensor_from_data: bad dtype value %d", (int)dt);
    EMBER_FAIL_IF(dt == EMBER_QFLOAT, EMBER_ERR_INVALID_ARGUMENT,
                  "tensor_from_data: QFloat tensors are made by ember_quantize or "
                  "ember_qtensor_from_bytes");
    size_t numel, nbytes;
    ember_status st = ember__shape_bytes(dt, rank, shape, &numel, &nbytes);
    if (st != EMBER_OK) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", ember_last_error());
        EMBER_FAIL(st, "tensor_from_data: %s", tmp);
    }
    EMBER_FAIL_IF(!data && nbytes > 0, EMBER_ERR_INVALID_ARGUMENT,
                  "tensor_from_data: data is NULL");
    EMBER_TRY(ember__check_device(ctx, dev, "tensor_from_data"));
    const ember_backend_ops *ops = ctx->be[dev.backend].ops;
    void *state = ctx->be[dev.backend].state;
    if (!ops->holds(state, dev.index, dt, NULL)) {
        char db[32];
        EMBER_FAIL(EMBER_ERR_DTYPE_TRANSFER,
                   "tensor_from_data: Local transfer of %s tensors is not supported yet (device %s "
                   "cannot hold %s)",
                   ember_dtype_name(dt), ember__device_str(dev, db, sizeof db),
                   ember_dtype_name(dt));
    }
    ember_tensor *t;
    EMBER_TRY(ember__tensor_alloc(ctx, dev, dt, rank, shape, nbytes, &t));
    if (nbytes) {
        st = ops->upload(state, dev.index, t->buf, 0, data, nbytes);
        if (st != EMBER_OK) {
            ember__tensor_destroy(t);
            return st;
        }
    }
    *out = t;
    return EMBER_OK;
}

ember_status ember_tensor_read(const ember_tensor *t, void *dst, size_t dst_bytes) {
    EMBER_TRY(ember__check_tensor(t, "tensor_read"));
    EMBER_FAIL_IF(t->dtype == EMBER_QFLOAT, EMBER_ERR_DTYPE_MISMATCH,
                  "tensor_read: the tensor is QFloat; read quantized tensors with "
                  "ember_qtensor_values / ember_qtensor_to_bytes");
    EMBER_FAIL_IF(!dst && t->nbytes > 0, EMBER_ERR_INVALID_ARGUMENT, "tensor_read: dst is NULL");
    EMBER_FAIL_IF(dst_bytes < t->nbytes, EMBER_ERR_INVALID_ARGUMENT,
                  "tensor_read: dst holds %zu bytes, the tensor needs %zu", dst_bytes, t->nbytes);
    if (t->nbytes == 0)
        return EMBER_OK;
    const ember_backend_ops *ops = t->ctx->be[t->device.backend].ops;
    return ops->download(t->ctx->be[t->device.backend].state, t->device.index, t->buf, 0, dst,
                         t->nbytes);
}

void ember_tensor_free(ember_tensor *t) {
    if (!t || t->magic != EMBER__TENSOR_MAGIC)
        return;
    if (!t->ctx || t->ctx->magic != EMBER__CONTEXT_MAGIC)
        return; /* its context is gone: the memory went with it */
    ember__tensor_destroy(t);
}

static int live(const ember_tensor *t) {
    return ember__check_tensor(t, "tensor accessor") == EMBER_OK;
}

ember_device ember_tensor_device(const ember_tensor *t) {
    ember_device bad = {EMBER_BACKEND_CPU, -1};
    return live(t) ? t->device : bad;
}

ember_dtype ember_tensor_dtype(const ember_tensor *t) {
    return live(t) ? t->dtype : EMBER_DTYPE_COUNT;
}

int ember_tensor_rank(const ember_tensor *t) { return live(t) ? t->rank : 0; }

int64_t ember_tensor_dim(const ember_tensor *t, int axis) {
    if (!live(t))
        return -1;
    if (axis < 0 || axis >= t->rank) {
        ember__fail(EMBER_ERR_INVALID_ARGUMENT, __FILE__, __func__, __LINE__,
                    "tensor_dim: axis %d is outside 0..%d", axis, t->rank - 1);
        return -1;
    }
    return t->shape[axis];
}

int64_t ember_tensor_numel(const ember_tensor *t) { return live(t) ? (int64_t)t->numel : 0; }

ember_context *ember_tensor_context(const ember_tensor *t) { return live(t) ? t->ctx : NULL; }

ember_autodiff ember_tensor_autodiff(const ember_tensor *t) {
    return live(t) ? t->autodiff : EMBER_AUTODIFF_DISABLED;
}
