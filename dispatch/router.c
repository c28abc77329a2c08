/* dispatch/router.c: moving tensors between devices (burn's to_device, spec §1.3 and §2.2).
 *
 * A plain tensor moves between any two devices: a direct copy when both sides expose host memory,
 * else through the backends' download / upload (a host round trip, as burn's cross-backend move).
 * The guards come first, in one function shared by ember_to_device and ember_check_to_device so the
 * two cannot disagree:
 *   - a quantized tensor never moves: burn's router refuses it ("Local transfer of quantized
 * tensors is not supported yet"), and a silent move would have to re-encode the values and scales
 * on a backend that did not produce them. ember_requantize_to_device is the explicit way out;
 *   - a tracked tensor stays on its backend ("Autodiff tensor cannot be moved between backends.");
 *   - the destination must hold the dtype ("Local transfer of F16 tensors is not supported yet").
 * On any failure nothing is allocated and the source is untouched. */
#include <string.h>

#include "internal.h"

static ember_status check_to_device(const ember_tensor *t, ember_device dst) {
    EMBER_TRY(ember__check_tensor(t, "to_device"));
    EMBER_TRY(ember__check_device(t->ctx, dst, "to_device"));
    char sb[32], db[32];
    ember__device_str(t->device, sb, sizeof sb);
    ember__device_str(dst, db, sizeof db);
    EMBER_FAIL_IF(t->dtype == EMBER_QFLOAT, EMBER_ERR_QUANT_TRANSFER,
                  "to_device: Local transfer of quantized tensors is not supported yet (a "
                  "QFloat(%s, %s) tensor on %s, asked for %s; nothing was moved: dequantize it "
                  "first, or call ember_requantize_to_device)",
                  ember_qvalue_name(t->scheme.value), ember_qstore_name(t->scheme.store), sb, db);
    EMBER_FAIL_IF(t->autodiff != EMBER_AUTODIFF_DISABLED && dst.backend != t->device.backend,
                  EMBER_ERR_AUTODIFF_TRANSFER,
                  "to_device: Autodiff tensor cannot be moved between backends. (a tracked %s "
                  "tensor, strategy %s, on %s, asked for %s)",
                  ember_dtype_name(t->dtype), ember__autodiff_strategy_name(t->autodiff), sb, db);
    const ember_backend_ops *ops = t->ctx->be[dst.backend].ops;
    EMBER_FAIL_IF(!ops->holds(t->ctx->be[dst.backend].state, dst.index, t->dtype, NULL),
                  EMBER_ERR_DTYPE_TRANSFER,
                  "to_device: Local transfer of %s tensors is not supported yet (device %s cannot "
                  "hold %s; the tensor stays on %s)",
                  ember_dtype_name(t->dtype), db, ember_dtype_name(t->dtype), sb);
    return EMBER_OK;
}

ember_status ember_check_to_device(const ember_tensor *t, ember_device dst) {
    return check_to_device(t, dst);
}

/* Copy src's bytes into dst (same size), on whatever devices they live. */
static ember_status copy_buffer(const ember_tensor *src, ember_tensor *dst) {
    size_t n = src->nbytes;
    if (n == 0)
        return EMBER_OK;
    ember_context *ctx = src->ctx;
    const ember_backend_ops *so = ctx->be[src->device.backend].ops;
    const ember_backend_ops *dop = ctx->be[dst->device.backend].ops;
    void *ss = ctx->be[src->device.backend].state;
    void *ds = ctx->be[dst->device.backend].state;
    int si = src->device.index, di = dst->device.index;
    void *hs = so->host_ptr ? so->host_ptr(ss, si, src->buf) : NULL;
    void *hd = dop->host_ptr ? dop->host_ptr(ds, di, dst->buf) : NULL;
    if (hs && so->sync) /* queued work may still write the source */
        EMBER_TRY(so->sync(ss, si));
    if (hs && hd) {
        memcpy(hd, hs, n);
        return EMBER_OK;
    }
    if (hs)
        return dop->upload(ds, di, dst->buf, 0, hs, n);
    if (hd)
        return so->download(ss, si, src->buf, 0, hd, n);
    void *tmp = ember__malloc(n);
    EMBER_FAIL_IF(!tmp, EMBER_ERR_OUT_OF_MEMORY,
                  "to_device: no memory for a %zu-byte host staging buffer", n);
    ember_status st = so->download(ss, si, src->buf, 0, tmp, n);
    if (st == EMBER_OK)
        st = dop->upload(ds, di, dst->buf, 0, tmp, n);
    ember__free(tmp);
    return st;
}

ember_status ember_to_device(const ember_tensor *t, ember_device dst, ember_tensor **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "to_device: out is NULL");
    *out = NULL;
    EMBER_TRY(check_to_device(t, dst));
    ember_tensor *c;
    EMBER_TRY(ember__tensor_alloc(t->ctx, dst, t->dtype, t->rank, t->shape, t->nbytes, &c));
    ember_status st = copy_buffer(t, c);
    if (st != EMBER_OK) {
        ember__tensor_destroy(c);
        return st;
    }
    c->autodiff = t->autodiff; /* the copy keeps the context (same backend, or untracked) */
    *out = c;
    return EMBER_OK;
}

/* Dequantize on the producer, move the floats, quantize there with the same scheme and the same
 * (effective) scales. Passing the scales rather than recomputing them keeps single-level schemes
 * bit-exact: s·q / s rounds back to q. A two-level scheme re-normalises its block scales against
 * a new global scale, which may move the global scale by an ulp and a UE4M3 block scale by one
 * step, so its values agree within one quantization step. */
ember_status ember_requantize_to_device(const ember_tensor *q, ember_device dst,
                                        ember_tensor **out) {
    EMBER_FAIL_IF(!out, EMBER_ERR_INVALID_ARGUMENT, "requantize_to_device: out is NULL");
    *out = NULL;
    EMBER_TRY(ember__check_tensor(q, "requantize_to_device"));
    EMBER_FAIL_IF(q->dtype != EMBER_QFLOAT, EMBER_ERR_NOT_QUANTIZED,
                  "requantize_to_device: Quantization scheme is not valid for dtype %s (the tensor "
                  "is not quantized: move it with ember_to_device)",
                  ember_dtype_name(q->dtype));
    EMBER_TRY(ember__check_device(q->ctx, dst, "requantize_to_device"));
    ember_context *ctx = q->ctx;
    const ember_backend_ops *ops = ctx->be[dst.backend].ops;
    void *state = ctx->be[dst.backend].state;
    if (!ops->holds(state, dst.index, EMBER_F32, NULL) ||
        !ops->holds(state, dst.index, EMBER_QFLOAT, &q->scheme)) {
        char db[32];
        EMBER_FAIL(EMBER_ERR_DTYPE_TRANSFER,
                   "requantize_to_device: Local transfer of QFloat(%s, %s) tensors is not "
                   "supported yet (device %s cannot hold that scheme)",
                   ember_qvalue_name(q->scheme.value), ember_qstore_name(q->scheme.store),
                   ember__device_str(dst, db, sizeof db));
    }

    ember_status st;
    ember_tensor *f = NULL, *g = NULL, *s = NULL, *r = NULL;
    size_t ns = q->q.nscales ? q->q.nscales : 1;
    float *scales = ember__malloc(ns * sizeof *scales);
    if (!scales) {
        EMBER_FAIL(EMBER_ERR_OUT_OF_MEMORY, "requantize_to_device: no memory for %zu scales", ns);
    }
    st = ember__qtensor_effective_scales(q, scales);
    if (st == EMBER_OK)
        st = ember_dequantize(q, &f); /* runs on the producer */
    if (st == EMBER_OK)
        st = ember_to_device(f, dst, &g);
    if (st == EMBER_OK)
        st = ember_tensor_from_data(ctx, dst, EMBER_F32, q->q.grid_rank, q->q.grid, scales, &s);
    if (st == EMBER_OK)
        st = ember_quantize_static(g, &q->scheme, s, &r);
    ember__free(scales);
    ember__tensor_destroy(f);
    ember__tensor_destroy(g);
    ember__tensor_destroy(s);
    if (st != EMBER_OK)
        return st;
    *out = r;
    return EMBER_OK;
}
