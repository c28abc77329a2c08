/* fuzz/fuzz_quantize.c: scheme construction (per_tensor, per_block, or every field by hand, out of
 * range included) + ember_qscheme_validate + ember_quantize / ember_quantize_static on F32, F16 and
 * BF16 data of arbitrary shape (NaN, Inf, subnormals, huge values included).
 *
 * Input: scheme, dtype, rank, dims, flags, then the elements. Checked:
 * - validate and quantize agree: a scheme validate refuses is refused by quantize too; a
 *   successful quantize had a valid scheme and finite input;
 * - a result: every integer value is inside its type's range; every effective scale is finite and
 *   positive; F32 input with an integer type dequantizes to within half a step of the input
 *   (|x - x'| <= s/2, s the effective scale of the element's block; not for subnormal scales,
 *   whose rounding can push amax / s past the range, as in burn, nor for a scale saturated at
 *   its dtype's largest value, nor where s * q overflows f32 near FLT_MAX); quantizing twice gives
 * the same bytes; to_bytes -> from_bytes -> to_bytes is the identity; with EMBER_FUZZ_OPENCL=1,
 *   quantizing on the OpenCL device gives the same bytes as on the CPU (API.md: identical on
 *   every device);
 * - quantize_static with the stored scales of the result reproduces its values (per-tensor and
 *   one-level schemes with F32 scales). */
#include "fuzz_util.h"

static int int_range(ember_qvalue v, int *lo, int *hi) {
    switch (v) {
    case EMBER_Q8F:
        *lo = -128;
        *hi = 127;
        return 1;
    case EMBER_Q8S:
        *lo = -127;
        *hi = 127;
        return 1;
    case EMBER_Q4F:
        *lo = -8;
        *hi = 7;
        return 1;
    case EMBER_Q4S:
        *lo = -7;
        *hi = 7;
        return 1;
    case EMBER_Q2F:
        *lo = -2;
        *hi = 1;
        return 1;
    case EMBER_Q2S:
        *lo = -1;
        *hi = 1;
        return 1;
    default:
        return 0;
    }
}

static unsigned char *bytes_of(const ember_tensor *q, size_t *len) {
    FZ_CHECK(ember_qtensor_to_bytes(q, NULL, 0, len) == EMBER_OK);
    unsigned char *b = malloc(*len ? *len : 1);
    size_t got = 0;
    FZ_CHECK(ember_qtensor_to_bytes(q, b, *len, &got) == EMBER_OK && got == *len);
    return b;
}

/* The index of the block holding flat element i. */
static size_t block_of(size_t i, int rank, const int64_t *shape, const ember_qscheme *s) {
    if (s->block_rank == 0)
        return 0;
    int64_t blk[EMBER_MAX_RANK];
    int first = 0;
    while (first < s->block_rank - 1 && s->block[first] == 1)
        first++;
    int crank = s->block_rank - first;
    for (int d = 0; d < rank; d++)
        blk[d] = d < rank - crank ? 1 : s->block[first + d - (rank - crank)];
    size_t idx[EMBER_MAX_RANK];
    for (int d = rank - 1; d >= 0; d--) {
        idx[d] = i % (size_t)shape[d];
        i /= (size_t)shape[d];
    }
    size_t b = 0;
    for (int d = 0; d < rank; d++) {
        size_t g = (size_t)((shape[d] + blk[d] - 1) / blk[d]);
        b = b * g + idx[d] / (size_t)blk[d];
    }
    return b;
}

static void fz_one(const uint8_t *data, size_t size) {
    fz_reader r = {data, size};
    ember_context *ctx = fz_context();
    ember_qscheme s = fz_scheme(&r);
    uint8_t dtb = fz_u8(&r);
    ember_dtype dt = (dtb & 0xF0) == 0xF0 ? (ember_dtype)(dtb & 0x0F) : (ember_dtype)(dtb % 3);
    int rank = fz_rank(&r);
    int64_t shape[EMBER_MAX_RANK + 2] = {0};
    for (int i = 0; i < rank && i < EMBER_MAX_RANK + 2; i++)
        shape[i] = fz_dim(&r);
    uint8_t flags = fz_u8(&r);
    ember_status vst = ember_qscheme_validate(&s);
    fz_check_status(vst, NULL);
    FZ_CHECK(ember_qscheme_validate(NULL) == EMBER_ERR_INVALID_ARGUMENT);

    size_t numel = fz_numel(rank, shape, 2048);
    const ember_dtype_traits *tr = ember_dtype_get_traits(dt);
    if (numel == SIZE_MAX || !tr || tr->size == 0)
        return;
    for (int i = 0; i < rank; i++)
        if (shape[i] > 2048)
            return; /* zero-size with a huge dim: outputs could be huge, from_data covers it */
    unsigned char *x = malloc(numel * tr->size + 1);
    float *xf = malloc(numel * sizeof(float) + 4);
    int finite = 1;
    for (size_t i = 0; i < numel; i++) {
        if (dt == EMBER_F32) {
            float f = (flags & 1) ? (float)(int8_t)fz_u8(&r) : fz_f32(&r);
            memcpy(x + 4 * i, &f, 4);
            xf[i] = f;
            finite &= isfinite(f) != 0;
        } else {
            for (size_t k = 0; k < tr->size; k++)
                x[tr->size * i + k] = fz_u8(&r);
        }
    }
    ember_tensor *t = NULL;
    ember_status st =
        ember_tensor_from_data(ctx, (ember_device){EMBER_BACKEND_CPU, 0}, dt, rank, shape, x, &t);
    fz_check_status(st, &t);
    if (st != EMBER_OK)
        goto done;

    ember_tensor *q = (ember_tensor *)(uintptr_t)1;
    st = ember_quantize(t, &s, &q);
    fz_check_status(st, &q);
    if (vst != EMBER_OK)
        FZ_CHECK(st != EMBER_OK);
    if (dt == EMBER_F32 && !finite && st == EMBER_OK)
        FZ_CHECK(0); /* NaN/Inf was quantized */
    if (!tr->is_float)
        FZ_CHECK(st != EMBER_OK);
    if (st != EMBER_OK) {
        ember_tensor_free(t);
        goto done;
    }
    FZ_CHECK(vst == EMBER_OK);

    size_t len = 0;
    unsigned char *qb = bytes_of(q, &len);
    /* values in range, scales finite and positive */
    int lo, hi;
    int8_t *vals = malloc(numel + 1);
    FZ_CHECK(ember_qtensor_values(q, vals, numel) == EMBER_OK);
    if (int_range(s.value, &lo, &hi))
        for (size_t i = 0; i < numel; i++)
            FZ_CHECK(vals[i] >= lo && vals[i] <= hi);
    size_t nsc = 0;
    FZ_CHECK(ember_qtensor_scale_count(q, &nsc) == EMBER_OK);
    float *sc = malloc((nsc + 1) * sizeof *sc);
    FZ_CHECK(ember_qtensor_scales(q, sc, nsc) == EMBER_OK);
    float g = 1.0f;
    if (s.block_rank > 0 && s.tensor_level)
        FZ_CHECK(ember_qtensor_global_scale(q, &g) == EMBER_OK);
    FZ_CHECK(isfinite(g) && g > 0);
    for (size_t i = 0; i < nsc; i++)
        FZ_CHECK(isfinite(sc[i]) && sc[i] > 0 && g * sc[i] > 0); /* effective too: no 0 / 0 */

    /* within half a step (F32 input, integer types, one-level: the effective scale is exact) */
    ember_tensor *dq = NULL;
    st = ember_dequantize(q, &dq);
    fz_check_status(st, &dq);
    FZ_CHECK(st == EMBER_OK);
    if (dt == EMBER_F32 && int_range(s.value, &lo, &hi) && !(s.block_rank > 0 && s.tensor_level)) {
        static const float sat_of[] = {3.4028235e38f, 65504.0f, 3.3895314e38f, 1.7014118e38f,
                                       448.0f};
        ember_scale_dtype sd = s.block_rank > 0 ? s.block_scale : s.tensor_scale;
        float sat = (unsigned)sd < EMBER_SCALE_DTYPE_COUNT ? sat_of[sd] : 0.0f;
        float *y = malloc(numel * sizeof *y + 4);
        FZ_CHECK(ember_tensor_read(dq, y, numel * sizeof *y) == EMBER_OK);
        for (size_t i = 0; i < numel; i++) {
            double step = (double)sc[block_of(i, rank, shape, &s)];
            double err = fabs((double)y[i] - (double)xf[i]);
            /* a subnormal scale (input near 1e-43) is rounded to a few bits: amax / s may then
             * exceed the range and clamp, as in burn (same f32 division); no bound there */
            if (step < 1e-30)
                continue;
            /* a scale saturated at its dtype's largest value (UE4M3: 448, F16: 65504) cannot
             * cover amax: values clamp, by design */
            if (step >= (double)sat)
                continue;
            /* the full-range formats (Q8F/Q4F/Q2F: q down to -2^(b-1), s = 2 amax / (2^b - 1))
             * can dequantize an input near FLT_MAX to s * q beyond it: +-inf in f32, as burn's
             * own multiply gives */
            if (isinf(y[i]) && fabs((double)xf[i]) > 1e38)
                continue;
            if (!(err <= 0.5 * step * (1 + 1e-6) + 1e-6 * fabs((double)xf[i]))) {
                fprintf(stderr, "element %zu: x %.9g dequantized %.9g, scale %.9g\n", i,
                        (double)xf[i], (double)y[i], step);
                FZ_CHECK(0);
            }
        }
        free(y);
    }
    ember_tensor_free(dq);

    /* deterministic */
    ember_tensor *q2 = NULL;
    FZ_CHECK(ember_quantize(t, &s, &q2) == EMBER_OK);
    size_t len2 = 0;
    unsigned char *qb2 = bytes_of(q2, &len2);
    FZ_CHECK(len2 == len && memcmp(qb, qb2, len) == 0);
    free(qb2);
    ember_tensor_free(q2);

    /* bytes round trip */
    ember_tensor *q3 = NULL;
    FZ_CHECK(ember_qtensor_from_bytes(ctx, (ember_device){EMBER_BACKEND_CPU, 0}, &s, rank, shape,
                                      qb, len, &q3) == EMBER_OK);
    unsigned char *qb3 = bytes_of(q3, &len2);
    FZ_CHECK(len2 == len && memcmp(qb, qb3, len) == 0);
    free(qb3);
    ember_tensor_free(q3);

    /* static quantization with the scales it found gives the same values */
    if (s.block_rank == 0 || !s.tensor_level) {
        int64_t grid[EMBER_MAX_RANK];
        int grank = 1;
        grid[0] = 1;
        if (s.block_rank > 0) {
            grank = rank;
            size_t n = 1;
            /* the grid shape: from the block (same canonicalisation as block_of) */
            int first = 0;
            while (first < s.block_rank - 1 && s.block[first] == 1)
                first++;
            int crank = s.block_rank - first;
            for (int d = 0; d < rank; d++) {
                int64_t b = d < rank - crank ? 1 : s.block[first + d - (rank - crank)];
                grid[d] = (shape[d] + b - 1) / b;
                n *= (size_t)grid[d];
            }
            FZ_CHECK(n == nsc);
        }
        ember_tensor *scales = NULL, *q4 = NULL;
        FZ_CHECK(ember_tensor_from_data(ctx, (ember_device){EMBER_BACKEND_CPU, 0}, EMBER_F32, grank,
                                        grid, sc, &scales) == EMBER_OK);
        st = ember_quantize_static(t, &s, scales, &q4);
        fz_check_status(st, &q4);
        FZ_CHECK(st == EMBER_OK);
        int8_t *vals4 = malloc(numel + 1);
        FZ_CHECK(ember_qtensor_values(q4, vals4, numel) == EMBER_OK);
        FZ_CHECK(numel == 0 || memcmp(vals, vals4, numel) == 0);
        free(vals4);
        ember_tensor_free(q4);
        ember_tensor_free(scales);
    }

    /* the same bytes on every device */
    if (fz_ncl_ > 0 && (flags & 2)) {
        ember_tensor *tc = NULL, *qc = NULL;
        st = ember_to_device(t, (ember_device){EMBER_BACKEND_OPENCL, 0}, &tc);
        fz_check_status(st, &tc);
        if (st == EMBER_OK) {
            st = ember_quantize(tc, &s, &qc);
            fz_check_status(st, &qc);
            FZ_CHECK(st == EMBER_OK);
            unsigned char *qbc = bytes_of(qc, &len2);
            FZ_CHECK(len2 == len);
            for (size_t i = 0; i < len; i++)
                if (qb[i] != qbc[i]) {
                    fprintf(stderr, "byte %zu of %zu: cpu %02x, opencl %02x\n", i, len, qb[i],
                            qbc[i]);
                    for (size_t k = 0; k < len && k < 16; k++)
                        fprintf(stderr, " %02x/%02x", qb[k], qbc[k]);
                    for (size_t k = 0; k < 16; k++)
                        fprintf(stderr, " x%02x", x[k]);
                    fprintf(stderr, "\nrank %d shape %lld %lld dtype %d\n", rank,
                            (long long)shape[0], (long long)shape[1], (int)dt);
                    FZ_CHECK(0);
                }
            free(qbc);
            ember_tensor_free(qc);
            ember_tensor_free(tc);
        }
    }
    free(sc);
    free(vals);
    free(qb);
    ember_tensor_free(q);
    ember_tensor_free(t);
done:
    free(x);
    free(xf);
}
