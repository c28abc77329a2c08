/* fuzz/fuzz_ops.c: ember_tensor_from_data on arbitrary dtypes, shapes, devices and data, then every
 * op of ember/ops.h, ember/nn.h and ember/quant.h on those tensors (and on the op's own outputs),
 * with operands sometimes NULL or foreign pointers.
 *
 * Input: a count of tensors, each as (dtype, rank, dims, device, autodiff, elements), then a
 * program: (op, operand, operand, operand, argument) bytes until the input ends. Checked after
 * every call: a known status; a failure leaves a detail and a NULL output; no input changed (its
 * elements, or its QuantizedBytes, are read before and after); the check functions agree with the
 * ops they mirror; a successful output is a readable, live tensor; nothing leaks (fuzz_util.h). */
#include "fuzz_util.h"

#define POOL 8

static ember_tensor *pool[POOL];
static int npool;
/* a foreign pointer: readable memory that is not an ember tensor */
static uint32_t fake[256];

static void make_tensor(fz_reader *r) {
    ember_context *ctx = fz_context();
    ember_dtype dt = (ember_dtype)fz_int(r, EMBER_DTYPE_COUNT + 1);
    int rank = fz_rank(r);
    int64_t shape[EMBER_MAX_RANK + 2] = {0};
    for (int i = 0; i < rank && i < EMBER_MAX_RANK + 2; i++)
        shape[i] = fz_dim(r);
    ember_device dev = fz_device(r);
    uint8_t flags = fz_u8(r);
    const ember_dtype_traits *tr = ember_dtype_get_traits(dt);
    size_t numel = fz_numel(rank, shape, 512);
    void *data = NULL;
    if (tr && numel != SIZE_MAX && !(flags & 0x80)) {
        size_t es = tr->size ? tr->size : 1;
        data = malloc(numel * es + 1);
        unsigned char *b = data;
        for (size_t i = 0; i < numel; i++) {
            if (dt == EMBER_F32) {
                float f = fz_f32(r);
                memcpy(b + 4 * i, &f, 4);
            } else if (dt == EMBER_BOOL) {
                b[i] = fz_u8(r) & ((flags & 0x40) ? 0xff : 1); /* sometimes not 0/1 */
            } else {
                for (size_t k = 0; k < es; k++)
                    b[es * i + k] = fz_u8(r);
            }
        }
    }
    ember_tensor *t = (ember_tensor *)(uintptr_t)1;
    ember_status st = ember_tensor_from_data(ctx, dev, dt, rank, shape, data, &t);
    fz_check_status(st, &t);
    if (st == EMBER_OK) {
        FZ_CHECK(ember_tensor_dtype(t) == dt && ember_tensor_rank(t) == rank);
        FZ_CHECK(data != NULL || numel == 0 || tr->size == 0);
        if (data && numel && tr->size) { /* the elements are what was given */
            void *back = malloc(numel * tr->size);
            FZ_CHECK(ember_tensor_read(t, back, numel * tr->size) == EMBER_OK);
            FZ_CHECK(memcmp(back, data, numel * tr->size) == 0);
            free(back);
        }
        ember_autodiff a = (ember_autodiff)((flags >> 1) % 3);
        st = ember_tensor_set_autodiff(t, a);
        fz_check_status(st, NULL);
        if (st == EMBER_OK)
            FZ_CHECK(ember_tensor_autodiff(t) == a);
        /* a zero-size tensor may have a huge dim; ops on it may then rightly make huge
         * outputs (the bias gradient of [0, 2^31] is 2^31 zeros): keep such ones out of the pool */
        int small = 1;
        for (int i = 0; i < rank; i++)
            small &= shape[i] <= 64;
        if (small)
            pool[npool++] = t;
        else
            ember_tensor_free(t);
    }
    free(data);
}

static const ember_tensor *operand(fz_reader *r) {
    uint8_t b = fz_u8(r);
    if (b == 0xff)
        return NULL;
    if (b == 0xfe)
        return (const ember_tensor *)fake;
    return npool ? pool[b % npool] : NULL;
}

static void keep(ember_tensor *out) {
    if (!out)
        return;
    /* a successful output is live and readable */
    FZ_CHECK(ember_tensor_rank(out) >= 1);
    fz_snap s = fz_snapshot(out);
    FZ_CHECK(s.ok || ember_tensor_numel(out) > 4096);
    free(s.bytes);
    if (npool < POOL)
        pool[npool++] = out;
    else
        ember_tensor_free(out);
}

enum {
    OP_MATMUL,
    OP_QMATMUL,
    OP_LINEAR,
    OP_ADD,
    OP_MUL,
    OP_LXB,
    OP_LWB,
    OP_LBB,
    OP_RELU,
    OP_RELUB,
    OP_SOFTMAX,
    OP_CE,
    OP_CEB,
    OP_AXPY,
    OP_AXPY_IN,
    OP_ARGMAX,
    OP_READ,
    OP_READ_MANY,
    OP_TO_DEVICE,
    OP_QUANTIZE,
    OP_QUANTIZE_STATIC,
    OP_DEQUANTIZE,
    OP_DEQUANTIZE_TO,
    OP_BACKEND_DEQ,
    OP_QREAD,
    OP_REQUANT,
    OP_AUTODIFF,
    OP_FREE,
    OP_ACCESSORS,
    OP_COUNT
};

static void step(fz_reader *r) {
    ember_context *ctx = fz_context();
    int op = fz_u8(r) % OP_COUNT;
    const ember_tensor *a = operand(r), *b = operand(r), *c = operand(r);
    uint8_t arg = fz_u8(r);
    fz_snap sa = fz_snapshot(a), sb = fz_snapshot(b), sc = fz_snapshot(c);
    ember_tensor *out = (ember_tensor *)(uintptr_t)1;
    ember_status st = EMBER_OK;
    int checks_inputs = 1;
    switch (op) {
    case OP_MATMUL:
        st = ember_matmul(a, b, &out);
        break;
    case OP_QMATMUL: {
        ember_status ck = ember_check_q_matmul(a, b);
        fz_check_status(ck, NULL);
        st = ember_q_matmul(a, b, &out);
        if (ck != EMBER_OK)
            FZ_CHECK(st == ck);
        break;
    }
    case OP_LINEAR:
        st = ember_linear(a, b, (arg & 1) ? c : NULL, &out);
        break;
    case OP_ADD:
        st = ember_add(a, b, &out);
        break;
    case OP_MUL:
        st = ember_mul(a, b, &out);
        break;
    case OP_LXB:
        st = ember_linear_x_backward(a, b, &out);
        break;
    case OP_LWB:
        st = ember_linear_weight_backward(a, b, &out);
        break;
    case OP_LBB:
        st = ember_linear_bias_backward(a, &out);
        break;
    case OP_RELU:
        st = ember_relu(a, &out);
        break;
    case OP_RELUB:
        st = ember_relu_backward(a, b, &out);
        break;
    case OP_SOFTMAX:
        st = ember_softmax(a, &out);
        break;
    case OP_CE:
        st = ember_cross_entropy(a, b, &out);
        break;
    case OP_CEB:
        st = ember_cross_entropy_backward(a, b, &out);
        break;
    case OP_AXPY:
        st = ember_axpy((float)(int8_t)arg / 8.0f, a, b, &out);
        break;
    case OP_AXPY_IN: {
        /* the one op that writes into an operand: b changes on success only */
        st = ember_axpy_inplace((float)(int8_t)arg / 8.0f, a, (ember_tensor *)b);
        fz_check_status(st, NULL);
        out = NULL;
        if (st == EMBER_OK) {
            checks_inputs = 0;
            free(sa.bytes);
            free(sb.bytes);
            free(sc.bytes);
        }
        break;
    }
    case OP_ARGMAX:
        st = ember_argmax(a, (int)(int8_t)arg % 10, &out);
        break;
    case OP_READ: {
        unsigned char buf[4096 + 64];
        size_t cap = (arg & 1) ? sizeof buf : (size_t)arg * 4;
        st = ember_tensor_read(a, (arg & 2) ? NULL : buf, cap);
        fz_check_status(st, NULL);
        out = NULL;
        break;
    }
    case OP_READ_MANY: {
        static unsigned char b0[4096], b1[4096], b2[4096];
        const ember_tensor *ts[3] = {a, b, c};
        void *const dsts[3] = {b0, b1, b2};
        size_t caps[3] = {sizeof b0, (arg & 4) ? 3 : sizeof b1, sizeof b2};
        int n = (int)(arg % 5) - 1; /* -1..3 */
        st = ember_tensor_read_many((arg & 8) ? NULL : ts, dsts, caps, n);
        fz_check_status(st, NULL);
        out = NULL;
        break;
    }
    case OP_TO_DEVICE: {
        ember_device d = fz_device(r);
        ember_status ck = ember_check_to_device(a, d);
        fz_check_status(ck, NULL);
        st = ember_to_device(a, d, &out);
        if (ck != EMBER_OK)
            FZ_CHECK(st == ck);
        if (st == EMBER_OK)
            FZ_CHECK(ember_tensor_device(out).backend == d.backend &&
                     ember_tensor_device(out).index == d.index);
        break;
    }
    case OP_QUANTIZE: {
        ember_qscheme s = fz_scheme(r);
        st = ember_quantize(a, (arg & 1) ? NULL : &s, &out);
        if (st == EMBER_OK)
            FZ_CHECK(ember_qscheme_validate(&s) == EMBER_OK &&
                     ember_tensor_dtype(out) == EMBER_QFLOAT);
        break;
    }
    case OP_QUANTIZE_STATIC: {
        ember_qscheme s = fz_scheme(r);
        st = ember_quantize_static(a, &s, b, &out);
        break;
    }
    case OP_DEQUANTIZE:
        st = ember_dequantize(a, &out);
        break;
    case OP_DEQUANTIZE_TO:
        st = ember_dequantize_to(a, (ember_dtype)(arg % 10), &out);
        break;
    case OP_BACKEND_DEQ:
        st = ember_backend_dequantize(ctx, fz_device(r), a, &out);
        break;
    case OP_QREAD: {
        int8_t vals[4096];
        float scales[1024], g;
        size_t cnt = 0, len = 0;
        ember_qscheme s;
        fz_check_status(ember_tensor_qscheme(a, &s), NULL);
        fz_check_status(ember_qtensor_values(a, vals, (size_t)arg * 16), NULL);
        fz_check_status(ember_qtensor_scale_count(a, &cnt), NULL);
        fz_check_status(ember_qtensor_scales(a, scales, (size_t)arg * 4), NULL);
        fz_check_status(ember_qtensor_global_scale(a, &g), NULL);
        fz_check_status(ember_qtensor_to_bytes(a, NULL, 0, &len), NULL);
        st = ember_qtensor_to_bytes(a, vals, (size_t)arg * 16, &len);
        fz_check_status(st, NULL);
        out = NULL;
        break;
    }
    case OP_REQUANT:
        st = ember_requantize_to_device(a, fz_device(r), &out);
        break;
    case OP_AUTODIFF: {
        ember_autodiff before = ember_tensor_autodiff(a);
        st = ember_tensor_set_autodiff((ember_tensor *)a, (ember_autodiff)(arg % 4));
        fz_check_status(st, NULL);
        if (st != EMBER_OK && a)
            FZ_CHECK(ember_tensor_autodiff(a) == before);
        out = NULL;
        break;
    }
    case OP_FREE: { /* free a pool entry (never the fake one): later ops see the rest */
        if (npool) {
            int i = arg % npool;
            ember_tensor_free(pool[i]);
            pool[i] = pool[--npool];
        }
        ember_tensor_free(NULL);
        ember_tensor_free((ember_tensor *)fake); /* ignored */
        out = NULL;
        free(sa.bytes);
        free(sb.bytes);
        free(sc.bytes);
        return;
    }
    default: { /* accessors on anything */
        (void)ember_tensor_device(a);
        (void)ember_tensor_dtype(a);
        (void)ember_tensor_rank(a);
        (void)ember_tensor_dim(a, (int)(int8_t)arg);
        (void)ember_tensor_numel(a);
        (void)ember_tensor_context(a);
        int yes = 0;
        ember_qscheme s = fz_scheme(r);
        st = ember_device_supports(ctx, fz_device(r), (ember_op)(arg % 10),
                                   (ember_dtype)fz_int(r, 10), (arg & 0x80) ? NULL : &s, &yes);
        fz_check_status(st, NULL);
        out = NULL;
        break;
    }
    }
    if (out != NULL || st != EMBER_OK)
        fz_check_status(st, &out);
    if (checks_inputs) {
        fz_check_snapshot(a, &sa);
        fz_check_snapshot(b, &sb);
        fz_check_snapshot(c, &sc);
    }
    if (st == EMBER_OK && out)
        keep(out);
}

static void fz_one(const uint8_t *data, size_t size) {
    fz_reader r = {data, size};
    memset(fake, 0xA5, sizeof fake);
    fake[0] = 0x12345678u; /* never ember's magic */
    npool = 0;
    int n = 1 + fz_u8(&r) % 4;
    for (int i = 0; i < n; i++)
        make_tensor(&r);
    for (int steps = 0; r.n && steps < 32; steps++)
        step(&r);
    for (int i = 0; i < npool; i++)
        ember_tensor_free(pool[i]);
    npool = 0;
}
