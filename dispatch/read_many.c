/* dispatch/read_many.c: a read transaction (burn's transaction_op, spec §1.6).
 *
 * An engine reads several tensors at the end of a step; ember waits once per device and then
 * copies each tensor out. Everything is validated before the first byte is written, so a refused
 * transaction (a quantized tensor: burn's todo!("Quantization not supported yet"), a bad handle, a
 * short destination) leaves every destination untouched. Unlike burn's vector ops, one
 * transaction may span devices and backends: each device is synchronised once. */
#include <stdio.h>

#include "internal.h"

ember_status ember_tensor_read_many(const ember_tensor *const *ts, void *const *dsts,
                                    const size_t *dst_bytes, int n) {
    EMBER_FAIL_IF(n < 0, EMBER_ERR_INVALID_ARGUMENT, "tensor_read_many: n is negative (%d)", n);
    if (n == 0)
        return EMBER_OK;
    EMBER_FAIL_IF(!ts || !dsts || !dst_bytes, EMBER_ERR_INVALID_ARGUMENT,
                  "tensor_read_many: %s is NULL",
                  !ts     ? "ts"
                  : !dsts ? "dsts"
                          : "dst_bytes");
    for (int i = 0; i < n; i++) {
        char what[48];
        snprintf(what, sizeof what, "tensor_read_many: tensor %d", i);
        EMBER_TRY(ember__check_tensor(ts[i], what));
    }
    for (int i = 0; i < n; i++) {
        const ember_tensor *t = ts[i];
        if (t->dtype == EMBER_QFLOAT) {
            char db[32];
            EMBER_FAIL(EMBER_ERR_QUANT_UNSUPPORTED,
                       "tensor_read_many: Quantization not supported yet (tensor %d is QFloat(%s, "
                       "%s) on %s; nothing was read: read it with ember_qtensor_to_bytes or "
                       "dequantize it)",
                       i, ember_qvalue_name(t->scheme.value), ember_qstore_name(t->scheme.store),
                       ember__device_str(t->device, db, sizeof db));
        }
    }
    for (int i = 0; i < n; i++) {
        const ember_tensor *t = ts[i];
        EMBER_FAIL_IF(!dsts[i] && t->nbytes > 0, EMBER_ERR_INVALID_ARGUMENT,
                      "tensor_read_many: dsts[%d] is NULL", i);
        EMBER_FAIL_IF(dst_bytes[i] < t->nbytes, EMBER_ERR_INVALID_ARGUMENT,
                      "tensor_read_many: dsts[%d] holds %zu bytes, tensor %d needs %zu", i,
                      dst_bytes[i], i, t->nbytes);
    }

    /* One sync per distinct (context, device): the first tensor of each group syncs it. */
    for (int i = 0; i < n; i++) {
        const ember_tensor *t = ts[i];
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = ts[j]->ctx == t->ctx && ts[j]->device.backend == t->device.backend &&
                   ts[j]->device.index == t->device.index;
        if (seen)
            continue;
        const ember_backend_ops *ops = t->ctx->be[t->device.backend].ops;
        if (ops->sync)
            EMBER_TRY(ops->sync(t->ctx->be[t->device.backend].state, t->device.index));
    }
    for (int i = 0; i < n; i++) {
        const ember_tensor *t = ts[i];
        if (t->nbytes == 0)
            continue;
        const ember_backend_ops *ops = t->ctx->be[t->device.backend].ops;
        EMBER_TRY(ops->download(t->ctx->be[t->device.backend].state, t->device.index, t->buf, 0,
                                dsts[i], t->nbytes));
    }
    return EMBER_OK;
}
