/* dispatch/quant_api.c: the public quantization entry points (include/ember/quant.h).
 *
 * The dispatcher validates handles, schemes, shapes and devices, allocates the output with its
 * layout (burn's QuantizedBytes, exactly: values, block scales, global f32 scale), and only then
 * calls the device's backend entries (quantize / dequantize / convert / upload / download), so the
 * same code serves every backend. Host-side decoding of values and scales (ember_qtensor_values,
 * _scales) uses quant/'s reference functions on downloaded bytes. */
#include <stdio.h>

#include "../quant/quant_impl.h"
#include "internal.h"

static int is_float_dtype(ember_dtype dt) {
    return dt == EMBER_F32 || dt == EMBER_F16 || dt == EMBER_BF16;
}

static int same_device(ember_device a, ember_device b) {
    return a.backend == b.backend && a.index == b.index;
}

static const ember_backend_ops *ops_of(const ember_tensor *t) {
    return t->ctx->be[t->device.backend].ops;
}
static void *state_of(const ember_tensor *t) { return t->ctx->be[t->device.backend].state; }

/* NOT_QUANTIZED with burn's text when t is not QFloat. */
static ember_status require_quantized(const ember_tensor *t, const char *op) {
    EMBER_FAIL_IF(t->dtype != EMBER_QFLOAT, EMBER_ERR_NOT_QUANTIZED,
                  "%s: Quantization scheme is not valid for dtype %s", op,
                  ember_dtype_name(t->dtype));
    return EMBER_OK;
}

ember_status ember__qtensor_alloc(ember_context *ctx, ember_device dev, const ember_qscheme *s,
                                  int rank, const int64_t *shape, ember_tensor **out) {
    ember__qlayout L;
    EMBER_TRY(ember__qlayout_make("quantize", s, rank, shape, &L));
    ember_tensor *t;
    EMBER_TRY(ember__tensor_alloc(ctx, dev, EMBER_QFLOAT, rank, shape, L.total_bytes, &t));
    t->scheme = *s;
    t->q = L;
    t->producer = dev;
    *out = t;
    return EMBER_OK;
}

/* Download bytes [off, off + n) of a quantized tensor into fresh host memory (*dst, to be freed
 * with ember__free). */
static ember_status download_part(const ember_tensor *q, size_t off, size_t n, uint8_t **dst,
                                  const char *op) {
    uint8_t *h = ember__malloc(n ? n : 1);
    EMBER_FAIL_IF(!h, EMBER_ERR_OUT_OF_MEMORY, "%s: no memory for %zu bytes", op, n);
    if (n) {
        ember_status st = ops_of(q)->download(state_of(q), q->device.index, q->buf, off, h, n);
        if (st != EMBER_OK) {
            ember__free(h);
            return st;
        }
    }
    *dst = h;
    return EMBER_OK;
}

ember_status ember__qtensor_effective_scales(const ember_tensor *q, float *dst) {
    if (q->device.backend == EMBER_BACKEND_CPU) { /* host memory: read in place */
        ember__qref_effective_scales(&q->scheme, &q->q, q->buf, dst);
        return EMBER_OK;
    }
    const size_t off = q->q.scales_offset;
    uint8_t *h = NULL;
    EMBER_TRY(download_part(q, off, q->q.total_bytes - off, &h, "effective scales"));
    /* ember__qref_effective_scales reads at the layout's offsets: shift the base back */
    ember__qlayout L = q->q;
    L.global_offset -= off;
    L.scales_offset = 0;
    ember__qref_effective_scales(&q->scheme, &L, h, dst);
    ember__free(h);
    return EMBER_OK;
}

/* ---- quantize ---- */

static ember_status check_scales(const char *op, const ember_tensor *x, const ember_qscheme *s,
                                 const ember__qlayout *L, const ember_tensor *scales) {
    EMBER_TRY(ember__check_tensor(scales, "quantize_static scales"));
    EMBER_FAIL_IF(scales->ctx != x->ctx, EMBER_ERR_MISUSE,
                  "%s: the scales belong to another context than the input", op);
    if (!same_device(scales->device, x->device)) {
        char a[32], b[32];
        EMBER_FAIL_IF(scales->device.backend != x->device.backend, EMBER_ERR_BACKEND_MISMATCH,
                      "%s: The provided tensors are not on the same backend. Got backends %s and "
                      "%s (input on %s, scales on %s).",
                      op, ember_backend_name(x->device.backend),
                      ember_backend_name(scales->device.backend),
                      ember__device_str(x->device, a, sizeof a),
                      ember__device_str(scales->device, b, sizeof b));
        EMBER_FAIL(EMBER_ERR_DEVICE_MISMATCH,
                   "%s: Input tensor scales is on the wrong device (input on %s, scales on %s)", op,
                   ember__device_str(x->device, a, sizeof a),
                   ember__device_str(scales->device, b, sizeof b));
    }
    EMBER_FAIL_IF(scales->dtype != EMBER_F32, EMBER_ERR_DTYPE_MISMATCH,
                  "%s: the scales are %s; they must be F32", op, ember_dtype_name(scales->dtype));
    int ok;
    if (s->block_rank == 0) {
        ok = scales->numel == 1;
    } else {
        ok = scales->rank == L->grid_rank;
        for (int d = 0; ok && d < L->grid_rank; d++)
            ok = scales->shape[d] == L->grid[d];
    }
    if (!ok) {
        char xs[200], bs[100], gs[200], ss[200];
        EMBER_FAIL(EMBER_ERR_BLOCK_SHAPE,
                   "%s: Invalid per-block quantization: %zu blocks for a %s tensor with %s blocks "
                   "(the scales tensor is %s; it must have the block grid's shape %s)",
                   op, scales->numel, ember__shape_str(x->rank, x->shape, xs, sizeof xs),
                   s->block_rank ? ember__shape_str(s->block_rank, s->block, bs, sizeof bs)
                                 : "per-tensor",
                   ember__shape_str(scales->rank, scales->shape, ss, sizeof ss),
                   ember__shape_str(L->grid_rank, L->grid, gs, sizeof gs));
    }
    /* the values: finite and not negative (zero takes the FLT_MIN guard, as dynamic scales do) */
    float *h = ember__malloc(scales->nbytes ? scales->nbytes : 1);
    EMBER_FAIL_IF(!h, EMBER_ERR_OUT_OF_MEMORY, "%s: no memory to check the scales", op);
    ember_status st = EMBER_OK;
    if (scales->nbytes)
        st = ops_of(scales)->download(state_of(scales), scales->device.index, scales->buf, 0, h,
                                      scales->nbytes);
    for (size_t i = 0; st == EMBER_OK && i < scales->numel; i++) {
        if (!isfinite(h[i]))
            st = ember__fail(EMBER_ERR_NON_FINITE, __FILE__, __func__, __LINE__,
                             "%s: scale %zu is %g; scales must be finite", op, i, (double)h[i]);
        else if (h[i] < 0.0f)
            st = ember__fail(EMBER_ERR_INVALID_ARGUMENT, __FILE__, __func__, __LINE__,
                             "%s: scale %zu is %g; scales must not be negative", op, i,
                             (double)h[i]);
    }
    ember__free(h);
    return st;
}

static ember_status quantize_common(const char *op, const ember_tensor *x, const ember_qscheme *s,
                                    const ember_tensor *scales, ember_tensor **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    EMBER_TRY(ember__check_tensor(x, op));
    EMBER_FAIL_IF(!is_float_dtype(x->dtype), EMBER_ERR_DTYPE_MISMATCH,
                  "%s: the input is %s; quantize takes F32, F16 or BF16", op,
                  ember_dtype_name(x->dtype));
    ember__qlayout L;
    EMBER_TRY(ember__qlayout_make(op, s, x->rank, x->shape, &L));
    if (!scales)
        EMBER_TRY(ember__qlayout_check_divisible(op, s, x->rank, x->shape));
    else
        EMBER_TRY(check_scales(op, x, s, &L, scales));

    ember_context *ctx = x->ctx;
    const ember_device dev = x->device;
    const ember_backend_ops *ops = ctx->be[dev.backend].ops;
    void *state = ctx->be[dev.backend].state;
    char db[32];
    EMBER_FAIL_IF(!ops->quantize, EMBER_ERR_BACKEND_UNAVAILABLE,
                  "%s: device %s has no quantize kernel", op,
                  ember__device_str(dev, db, sizeof db));
    EMBER_FAIL_IF(!ops->holds(state, dev.index, EMBER_QFLOAT, s), EMBER_ERR_UNSUPPORTED_SCHEME,
                  "%s: Quantization not supported for scheme %s/%s on device %s", op,
                  ember_qvalue_name(s->value), ember_qstore_name(s->store),
                  ember__device_str(dev, db, sizeof db));

    const ember_tensor *xin = x;
    ember_tensor *tmp = NULL;
    if (x->dtype != EMBER_F32) {
        EMBER_FAIL_IF(!ops->convert, EMBER_ERR_BACKEND_UNAVAILABLE,
                      "%s: device %s cannot convert %s to F32", op,
                      ember__device_str(dev, db, sizeof db), ember_dtype_name(x->dtype));
        size_t nb;
        EMBER_TRY(ember__shape_bytes(EMBER_F32, x->rank, x->shape, NULL, &nb));
        EMBER_TRY(ember__tensor_alloc(ctx, dev, EMBER_F32, x->rank, x->shape, nb, &tmp));
        ember_status st = ops->convert(state, dev.index, x, tmp);
        if (st != EMBER_OK) {
            ember__tensor_destroy(tmp);
            return st;
        }
        xin = tmp;
    }
    ember_tensor *q;
    ember_status st = ember__qtensor_alloc(ctx, dev, s, x->rank, x->shape, &q);
    if (st == EMBER_OK) {
        st = ops->quantize(state, dev.index, xin, scales, q);
        if (st != EMBER_OK)
            ember__tensor_destroy(q);
    }
    ember__tensor_destroy(tmp);
    if (st != EMBER_OK)
        return st;
    *out = q;
    return EMBER_OK;
}

ember_status ember_quantize(const ember_tensor *x, const ember_qscheme *s, ember_tensor **out) {
    return quantize_common("quantize", x, s, NULL, out);
}

ember_status ember_quantize_static(const ember_tensor *x, const ember_qscheme *s,
                                   const ember_tensor *scales, ember_tensor **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "quantize_static: out is NULL");
    *out = NULL;
    EMBER_FAIL_IF(!scales, EMBER_ERR_INVALID_ARGUMENT,
                  "quantize_static: scales is NULL (use ember_quantize for dynamic scales)");
    return quantize_common("quantize_static", x, s, scales, out);
}

/* ---- dequantize ---- */

static ember_status dequantize_on(const char *op, const ember_tensor *q, ember_dtype dt,
                                  ember_tensor **out) {
    EMBER_TRY(require_quantized(q, op));
    EMBER_FAIL_IF(!is_float_dtype(dt), EMBER_ERR_INVALID_ARGUMENT,
                  "%s: the output dtype must be F32, F16 or BF16, got %s", op,
                  ember_dtype_name(dt));
    ember_context *ctx = q->ctx;
    const ember_device dev = q->producer;
    const ember_backend_ops *ops = ctx->be[dev.backend].ops;
    void *state = ctx->be[dev.backend].state;
    char db[32];
    EMBER_FAIL_IF(!ops || !ops->dequantize, EMBER_ERR_BACKEND_UNAVAILABLE,
                  "%s: device %s has no dequantize kernel", op,
                  ember__device_str(dev, db, sizeof db));
    if (dt != EMBER_F32) {
        EMBER_FAIL_IF(!ops->holds(state, dev.index, dt, NULL) || !ops->convert,
                      EMBER_ERR_DTYPE_TRANSFER, "%s: device %s cannot hold %s", op,
                      ember__device_str(dev, db, sizeof db), ember_dtype_name(dt));
    }
    size_t nb;
    EMBER_TRY(ember__shape_bytes(EMBER_F32, q->rank, q->shape, NULL, &nb));
    ember_tensor *f;
    EMBER_TRY(ember__tensor_alloc(ctx, dev, EMBER_F32, q->rank, q->shape, nb, &f));
    ember_status st = ops->dequantize(state, dev.index, q, f);
    if (st != EMBER_OK) {
        ember__tensor_destroy(f);
        return st;
    }
    if (dt == EMBER_F32) {
        *out = f;
        return EMBER_OK;
    }
    ember_tensor *h = NULL;
    st = ember__shape_bytes(dt, q->rank, q->shape, NULL, &nb);
    if (st == EMBER_OK)
        st = ember__tensor_alloc(ctx, dev, dt, q->rank, q->shape, nb, &h);
    if (st == EMBER_OK) {
        st = ops->convert(state, dev.index, f, h);
        if (st != EMBER_OK) {
            ember__tensor_destroy(h);
            h = NULL;
        }
    }
    ember__tensor_destroy(f);
    if (st != EMBER_OK)
        return st;
    *out = h;
    return EMBER_OK;
}

ember_status ember_dequantize_to(const ember_tensor *q, ember_dtype dt, ember_tensor **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "dequantize: out is NULL");
    *out = NULL;
    EMBER_TRY(ember__check_tensor(q, "dequantize"));
    return dequantize_on("dequantize", q, dt, out);
}

ember_status ember_dequantize(const ember_tensor *q, ember_tensor **out) {
    return ember_dequantize_to(q, EMBER_F32, out);
}

ember_status ember_backend_dequantize(ember_context *ctx, ember_device dev, const ember_tensor *q,
                                      ember_tensor **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "backend_dequantize: out is NULL");
    *out = NULL;
    EMBER_TRY(ember__check_context(ctx, "backend_dequantize"));
    EMBER_TRY(ember__check_tensor(q, "backend_dequantize"));
    EMBER_FAIL_IF(q->ctx != ctx, EMBER_ERR_MISUSE,
                  "backend_dequantize: the tensor belongs to another context");
    EMBER_TRY(ember__check_device(ctx, dev, "backend_dequantize"));
    EMBER_TRY(require_quantized(q, "backend_dequantize"));
    if (!same_device(q->producer, dev)) {
        char a[32], b[32];
        EMBER_FAIL(EMBER_ERR_FOREIGN_DEQUANTIZE,
                   "backend_dequantize: the tensor was quantized on %s; only that backend and "
                   "device can dequantize it (asked on %s)",
                   ember__device_str(q->producer, a, sizeof a),
                   ember__device_str(dev, b, sizeof b));
    }
    return dequantize_on("backend_dequantize", q, EMBER_F32, out);
}

/* ---- inspection ---- */

ember_status ember_tensor_qscheme(const ember_tensor *t, ember_qscheme *out) {
    EMBER_TRY(ember__check_tensor(t, "tensor_qscheme"));
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "tensor_qscheme: out is NULL");
    EMBER_TRY(require_quantized(t, "tensor_qscheme"));
    *out = t->scheme;
    return EMBER_OK;
}

ember_status ember_qtensor_values(const ember_tensor *q, int8_t *dst, size_t count) {
    EMBER_TRY(ember__check_tensor(q, "qtensor_values"));
    EMBER_TRY(require_quantized(q, "qtensor_values"));
    EMBER_FAIL_IF(!dst && q->numel > 0, EMBER_ERR_INVALID_ARGUMENT, "qtensor_values: dst is NULL");
    EMBER_FAIL_IF(count < q->numel, EMBER_ERR_INVALID_ARGUMENT,
                  "qtensor_values: dst holds %zu values, the tensor has %zu", count, q->numel);
    if (q->numel == 0)
        return EMBER_OK;
    uint8_t *h = NULL;
    EMBER_TRY(download_part(q, 0, q->q.values_bytes, &h, "qtensor_values"));
    const size_t last = (size_t)q->shape[q->rank - 1];
    const size_t rb = q->scheme.store == EMBER_QSTORE_NATIVE
                          ? last
                          : ember__packed_row_bytes(&q->scheme, (int64_t)last);
    for (size_t r = 0; r < q->numel / last; r++)
        ember__unpack_codes(&q->scheme, h + r * rb, last, (uint8_t *)dst + r * last);
    ember__free(h);
    return EMBER_OK;
}

ember_status ember_qtensor_scale_count(const ember_tensor *q, size_t *count) {
    EMBER_TRY(ember__check_tensor(q, "qtensor_scale_count"));
    EMBER_FAIL_IF(!count, EMBER_ERR_INVALID_ARGUMENT, "qtensor_scale_count: count is NULL");
    EMBER_TRY(require_quantized(q, "qtensor_scale_count"));
    *count = q->q.nscales;
    return EMBER_OK;
}

ember_status ember_qtensor_scales(const ember_tensor *q, float *dst, size_t count) {
    EMBER_TRY(ember__check_tensor(q, "qtensor_scales"));
    EMBER_TRY(require_quantized(q, "qtensor_scales"));
    EMBER_FAIL_IF(!dst && q->q.nscales > 0, EMBER_ERR_INVALID_ARGUMENT,
                  "qtensor_scales: dst is NULL");
    EMBER_FAIL_IF(count < q->q.nscales, EMBER_ERR_INVALID_ARGUMENT,
                  "qtensor_scales: dst holds %zu scales, the tensor has %zu", count, q->q.nscales);
    const size_t n = q->q.nscales * q->q.scale_size;
    uint8_t *h = NULL;
    EMBER_TRY(download_part(q, q->q.scales_offset, n, &h, "qtensor_scales"));
    const ember_scale_dtype d = ember__qscheme_scale_dtype(&q->scheme);
    for (size_t i = 0; i < q->q.nscales; i++)
        dst[i] = ember__scale_decode(h + i * q->q.scale_size, d);
    ember__free(h);
    return EMBER_OK;
}

ember_status ember_qtensor_global_scale(const ember_tensor *q, float *out) {
    EMBER_TRY(ember__check_tensor(q, "qtensor_global_scale"));
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "qtensor_global_scale: out is NULL");
    EMBER_TRY(require_quantized(q, "qtensor_global_scale"));
    EMBER_FAIL_IF(!q->q.global_bytes, EMBER_ERR_INVALID_ARGUMENT,
                  "qtensor_global_scale: the scheme (%s, %s) is not two-level; it has no global "
                  "scale",
                  ember_qvalue_name(q->scheme.value),
                  q->scheme.block_rank ? "per-block" : "per-tensor");
    uint8_t *h = NULL;
    EMBER_TRY(download_part(q, q->q.global_offset, 4, &h, "qtensor_global_scale"));
    *out = ember__scale_decode(h, EMBER_SCALE_F32);
    ember__free(h);
    return EMBER_OK;
}

/* ---- serialized bytes ---- */

ember_status ember_qtensor_to_bytes(const ember_tensor *q, void *dst, size_t cap, size_t *len) {
    EMBER_TRY(ember__check_tensor(q, "qtensor_to_bytes"));
    EMBER_FAIL_IF(!len, EMBER_ERR_INVALID_ARGUMENT, "qtensor_to_bytes: len is NULL");
    EMBER_TRY(require_quantized(q, "qtensor_to_bytes"));
    const size_t need = q->q.total_bytes;
    *len = need;
    if (!dst)
        return EMBER_OK;
    EMBER_FAIL_IF(cap < need, EMBER_ERR_INVALID_ARGUMENT,
                  "qtensor_to_bytes: dst holds %zu bytes, the tensor needs %zu", cap, need);
    if (!need)
        return EMBER_OK;
    return ops_of(q)->download(state_of(q), q->device.index, q->buf, 0, dst, need);
}

ember_status ember_qtensor_from_bytes(ember_context *ctx, ember_device dev, const ember_qscheme *s,
                                      int rank, const int64_t *shape, const void *bytes, size_t len,
                                      ember_tensor **out) {
    static const char op[] = "qtensor_from_bytes";
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "%s: out is NULL", op);
    *out = NULL;
    EMBER_TRY(ember__check_context(ctx, op));
    ember__qlayout L;
    EMBER_TRY(ember__qlayout_make(op, s, rank, shape, &L));
    EMBER_TRY(ember__check_device(ctx, dev, op));
    EMBER_FAIL_IF(!bytes && len > 0, EMBER_ERR_INVALID_ARGUMENT, "%s: bytes is NULL", op);
    if (len != L.total_bytes) {
        char sb[200];
        EMBER_FAIL(EMBER_ERR_SHAPE_MISMATCH,
                   "%s: expected %zu bytes for a %s %s tensor of shape %s (%zu of values, %zu "
                   "scale%s of %zu byte%s, %zu of global scale), got %zu",
                   op, L.total_bytes, ember_qvalue_name(s->value), ember_qstore_name(s->store),
                   ember__shape_str(rank, shape, sb, sizeof sb), L.values_bytes, L.nscales,
                   L.nscales == 1 ? "" : "s", L.scale_size, L.scale_size == 1 ? "" : "s",
                   L.global_bytes, len);
    }
    const ember_backend_ops *ops = ctx->be[dev.backend].ops;
    void *state = ctx->be[dev.backend].state;
    char db[32];
    EMBER_FAIL_IF(!ops->holds(state, dev.index, EMBER_QFLOAT, s), EMBER_ERR_UNSUPPORTED_SCHEME,
                  "%s: Quantization not supported for scheme %s/%s on device %s", op,
                  ember_qvalue_name(s->value), ember_qstore_name(s->store),
                  ember__device_str(dev, db, sizeof db));
    ember_tensor *q;
    EMBER_TRY(ember__qtensor_alloc(ctx, dev, s, rank, shape, &q));
    if (len) {
        ember_status st = ops->upload(state, dev.index, q->buf, 0, bytes, len);
        if (st != EMBER_OK) {
            ember__tensor_destroy(q);
            return st;
        }
    }
    *out = q;
    return EMBER_OK;
}
