/* fuzz/fuzz_qbytes.c: ember_qtensor_from_bytes with arbitrary scheme fields, shapes, devices and
 * bytes (burn's QuantizedBytes as an untrusted file would give them).
 *
 * Input: a header decoded by fz_reader (scheme, rank, dims, device, a length mode), then the
 * payload. Checked: the call never crashes; a known status; NULL output on failure; the payload is
 * not written to; when accepted, the tensor reports the scheme and shape it was given,
 * to_bytes gives the payload back byte for byte, and every reader (values, scales, global scale,
 * dequantize, q_matmul with itself, to_device, requantize) answers with a known status. */
#include "fuzz_util.h"

static void fz_one(const uint8_t *data, size_t size) {
    fz_reader r = {data, size};
    ember_context *ctx = fz_context();
    ember_qscheme s = fz_scheme(&r);
    int rank = fz_rank(&r);
    int64_t shape[EMBER_MAX_RANK + 2] = {0};
    for (int i = 0; i < EMBER_MAX_RANK + 2; i++)
        shape[i] = (i < rank) ? fz_dim(&r) : 0;
    ember_device dev = fz_device(&r);
    uint8_t lenmode = fz_u8(&r);
    /* the payload: what is left, copied so that a write into it would show */
    size_t len = r.n;
    unsigned char *payload = malloc(len ? len : 1);
    if (!payload)
        return;
    if (len)
        memcpy(payload, r.p, len);
    size_t claimed = len;
    if ((lenmode & 7) == 1 && claimed)
        claimed--; /* claim less than given: must still be refused or read within */
    ember_tensor *q = (ember_tensor *)(uintptr_t)1;
    ember_status st;
    switch (lenmode >> 6) {
    case 0:
        st = ember_qtensor_from_bytes(ctx, dev, &s, rank, shape, payload, claimed, &q);
        break;
    case 1:
        st = ember_qtensor_from_bytes(ctx, dev, &s, rank, shape, NULL, claimed, &q);
        break;
    case 2:
        st = ember_qtensor_from_bytes(ctx, dev, (lenmode & 8) ? NULL : &s, rank,
                                      (lenmode & 16) ? NULL : shape, payload, claimed, &q);
        break;
    default:
        st = ember_qtensor_from_bytes(ctx, dev, &s, rank, shape, payload, claimed, &q);
        break;
    }
    fz_check_status(st, &q);
    FZ_CHECK(len == 0 || memcmp(payload, r.p, len) == 0);
    if (st != EMBER_OK) {
        free(payload);
        return;
    }
    FZ_CHECK(fz_device_exists(dev));
    FZ_CHECK(ember_qscheme_validate(&s) == EMBER_OK);
    FZ_CHECK(ember_tensor_dtype(q) == EMBER_QFLOAT && ember_tensor_rank(q) == rank);
    for (int i = 0; i < rank; i++)
        FZ_CHECK(ember_tensor_dim(q, i) == shape[i]);
    ember_qscheme back;
    FZ_CHECK(ember_tensor_qscheme(q, &back) == EMBER_OK);
    FZ_CHECK(back.value == s.value && back.store == s.store && back.block_rank == s.block_rank);

    /* to_bytes gives the payload back */
    size_t need = 0;
    FZ_CHECK(ember_qtensor_to_bytes(q, NULL, 0, &need) == EMBER_OK);
    FZ_CHECK(need == claimed);
    unsigned char *out = malloc(need ? need : 1);
    size_t got = 0;
    if (need) {
        size_t small = 0;
        FZ_CHECK(ember_qtensor_to_bytes(q, out, need - 1, &small) == EMBER_ERR_INVALID_ARGUMENT);
        FZ_CHECK(small == need);
    }
    FZ_CHECK(ember_qtensor_to_bytes(q, out, need, &got) == EMBER_OK);
    FZ_CHECK(got == need && memcmp(out, payload, need) == 0);
    free(out);

    /* the readers */
    int64_t numel = ember_tensor_numel(q);
    if (numel >= 0 && numel <= 1 << 16) {
        int8_t *vals = malloc((size_t)numel + 1);
        st = ember_qtensor_values(q, vals, (size_t)numel);
        fz_check_status(st, NULL);
        FZ_CHECK(st == EMBER_OK);
        if (numel > 0)
            FZ_CHECK(ember_qtensor_values(q, vals, (size_t)numel - 1) != EMBER_OK);
        free(vals);
    }
    size_t nsc = 0;
    FZ_CHECK(ember_qtensor_scale_count(q, &nsc) == EMBER_OK);
    if (nsc <= 1 << 16) {
        float *sc = malloc((nsc + 1) * sizeof *sc);
        FZ_CHECK(ember_qtensor_scales(q, sc, nsc) == EMBER_OK);
        if (nsc)
            FZ_CHECK(ember_qtensor_scales(q, sc, nsc - 1) != EMBER_OK);
        free(sc);
    }
    float g = 0;
    st = ember_qtensor_global_scale(q, &g);
    FZ_CHECK(st == (s.block_rank > 0 && s.tensor_level ? EMBER_OK : EMBER_ERR_INVALID_ARGUMENT));

    /* compute on whatever the bytes say (NaN, Inf or negative scales included): no crash */
    ember_tensor *t = NULL;
    if (numel <= 4096) {
        st = ember_dequantize(q, &t);
        fz_check_status(st, &t);
        ember_tensor_free(t);
        t = NULL;
        st = ember_dequantize_to(q, (ember_dtype)(lenmode & 7), &t);
        fz_check_status(st, &t);
        ember_tensor_free(t);
        t = NULL;
        if (rank >= 2 && numel <= 256) {
            ember_status ck = ember_check_q_matmul(q, q);
            st = ember_q_matmul(q, q, &t);
            fz_check_status(st, &t);
            if (ck != EMBER_OK)
                FZ_CHECK(st == ck); /* the check is the op's guards, exactly */
            ember_tensor_free(t);
            t = NULL;
        }
        ember_device other = {dev.backend == EMBER_BACKEND_CPU && fz_ncl_ ? EMBER_BACKEND_OPENCL
                                                                          : EMBER_BACKEND_CPU,
                              0};
        st = ember_to_device(q, other, &t);
        fz_check_status(st, &t);
        if (other.backend != dev.backend)
            FZ_CHECK(st == EMBER_ERR_QUANT_TRANSFER);
        ember_tensor_free(t);
        t = NULL;
        if (lenmode & 32) {
            st = ember_requantize_to_device(q, other, &t);
            fz_check_status(st, &t);
            ember_tensor_free(t);
            t = NULL;
        }
    }
    /* nothing above changed it */
    out = malloc(need ? need : 1);
    FZ_CHECK(ember_qtensor_to_bytes(q, out, need, &got) == EMBER_OK);
    FZ_CHECK(memcmp(out, payload, need) == 0);
    free(out);
    ember_tensor_free(q);
    free(payload);
}
