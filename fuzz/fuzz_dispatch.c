/* fuzz/fuzz_dispatch.c: the dispatcher's guards under random op sequences over tensors on random
 * backends and devices, each call checked against a model of burn's guards.
 *
 * Devices: cpu:0 and a second backend in the OpenCL slot. By default that is a mock (the CPU
 * backend's vtable with kind OPENCL and two devices, unable to hold F16/BF16 or E5M2 schemes, no
 * host pointer), so that every cross-backend and cross-device guard is reachable without a GPU and
 * fast; with EMBER_FUZZ_OPENCL=1 and a device, the real OpenCL backend (one device).
 *
 * The harness keeps each tensor's metadata (dtype, device, producer, autodiff, shape) and, for each
 * call, the set of statuses the model allows: exactly one guard where exactly one applies (e.g.
 * QUANT_TRANSFER for a quantized tensor sent to another device, FOREIGN_DEQUANTIZE for a backend
 * dequantize off the producer, QUANT_UNSUPPORTED for read_many over a quantized tensor,
 * AUTODIFF_CONTEXT for tracking a quantized tensor, BACKEND_MISMATCH / DEVICE_MISMATCH for
 * operands apart, CHECKPOINT_MISMATCH for two strategies, NOT_DIFFERENTIABLE for a tracked
 * backward input), any of them where several apply, and OK where none does and the op is
 * well-formed. Also: the check functions return exactly what their op returns; refused calls leave
 * outputs NULL, inputs unchanged and destination buffers unwritten; nothing leaks.
 *
 * Input: a program of 3-byte steps (op, operand, operand) with the step's extra bytes after. */
#include "fuzz_util.h"

#include "dispatch/internal.h"

extern const ember_backend_ops ember__cpu_ops;

static ember_context *dctx;
static int ndev2;   /* devices of the second backend */
static int is_mock; /* the second backend is the mock */
static ember_backend_ops mock_ops;

static int mock_device_count(void *state) {
    (void)state;
    return 2;
}

static int mock_holds(void *state, int dev, ember_dtype dt, const ember_qscheme *s) {
    (void)state;
    (void)dev;
    if (dt == EMBER_QFLOAT)
        return s && ember__qscheme_is_valid(s) && s->value != EMBER_E5M2;
    return (unsigned)dt < EMBER_DTYPE_COUNT && dt != EMBER_F16 && dt != EMBER_BF16;
}

static void setup(void) {
    if (dctx)
        return;
    const char *e = getenv("EMBER_FUZZ_OPENCL");
    if (e && *e == '1') {
        dctx = fz_context();
        ndev2 = ember_device_count(dctx, EMBER_BACKEND_OPENCL);
        if (ndev2 > 0)
            return;
    }
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.num_threads = 1;
    if (ember_context_create(&o, &dctx) != EMBER_OK)
        abort();
    mock_ops = ember__cpu_ops;
    mock_ops.name = "mock";
    mock_ops.kind = EMBER_BACKEND_OPENCL;
    mock_ops.device_count = mock_device_count;
    mock_ops.holds = mock_holds;
    mock_ops.supports = NULL;
    mock_ops.host_ptr = NULL;
    mock_ops.q_matmul = NULL;
    void *state = NULL;
    if (ember__cpu_ops.init(dctx, &dctx->opts, &state) != EMBER_OK)
        abort();
    dctx->be[EMBER_BACKEND_OPENCL].ops = &mock_ops;
    dctx->be[EMBER_BACKEND_OPENCL].state = state;
    ndev2 = 2;
    is_mock = 1;
}

static int holds2(ember_dtype dt, const ember_qscheme *s) {
    if (is_mock)
        return mock_holds(NULL, 0, dt, s);
    int yes = 0;
    ember_device d = {EMBER_BACKEND_OPENCL, 0};
    if (ember_device_supports(dctx, d, EMBER_OP_STORE, dt, s, &yes) != EMBER_OK)
        return 0;
    return yes;
}

/* ---- the pool ---- */
#define POOL 8
typedef struct meta {
    ember_tensor *t;
    ember_qscheme scheme; /* QFLOAT */
} meta;
static meta pool[POOL];
static int npool;

static const ember_device DEVS[4] = {{EMBER_BACKEND_CPU, 0},
                                     {EMBER_BACKEND_OPENCL, 0},
                                     {EMBER_BACKEND_OPENCL, 1},
                                     {EMBER_BACKEND_CPU, 0}};

static ember_device pick_device(uint8_t b) {
    ember_device d = DEVS[b % 4];
    if (d.backend == EMBER_BACKEND_OPENCL && d.index >= ndev2)
        d.index = 0;
    if ((b & 0xF0) == 0xF0) { /* one that does not exist */
        d.backend = (b & 1) ? EMBER_BACKEND_OPENCL : EMBER_BACKEND_CPU;
        d.index = (b & 1) ? ndev2 : 1;
    }
    return d;
}

static int same_dev(ember_device a, ember_device b) {
    return a.backend == b.backend && a.index == b.index;
}

static int exists(ember_device d) {
    if (d.backend == EMBER_BACKEND_CPU)
        return d.index == 0;
    return d.backend == EMBER_BACKEND_OPENCL && d.index >= 0 && d.index < ndev2;
}

static const int64_t SHAPES[][2] = {{2, 4}, {4, 8}, {4, 4}, {8, 4}, {3, 4}, {1, 8}};

static ember_qscheme pick_scheme(uint8_t b) {
    static const int64_t blk4[] = {4};
    switch (b % 5) {
    case 0:
        return ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    case 1:
        return ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
    case 2:
        return ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk4);
    case 3:
        return ember_qscheme_per_tensor(EMBER_E5M2, EMBER_QSTORE_NATIVE);
    default:
        return ember_qscheme_per_tensor(EMBER_Q8F, EMBER_QSTORE_NATIVE);
    }
}

/* Make a float tensor and maybe quantize it; push it to the pool. */
static void make(fz_reader *r) {
    if (npool >= POOL)
        return;
    uint8_t k = fz_u8(r), sh = fz_u8(r), dv = fz_u8(r) & 0x0F, ad = fz_u8(r);
    const int64_t *shape = SHAPES[sh % 6];
    ember_device dev = pick_device(dv);
    static const ember_dtype dts[] = {EMBER_F32, EMBER_F32, EMBER_BF16, EMBER_I64, EMBER_QFLOAT};
    ember_dtype dt = dts[k % 5];
    float f[32];
    int64_t i64[32];
    uint16_t h[32];
    for (int i = 0; i < 32; i++) {
        f[i] = (float)((i * 7 + k) % 13) - 6.0f;
        i64[i] = i % 4;
        h[i] = 0x3f80;
    }
    const void *data = dt == EMBER_I64    ? (const void *)i64
                       : dt == EMBER_BF16 ? (const void *)h
                                          : (const void *)f;
    ember_dtype mk = dt == EMBER_QFLOAT ? EMBER_F32 : dt;
    ember_tensor *t = NULL;
    ember_status st = ember_tensor_from_data(dctx, dev, mk, 2, shape, data, &t);
    fz_check_status(st, &t);
    if (dev.backend == EMBER_BACKEND_OPENCL && mk == EMBER_BF16 && !holds2(EMBER_BF16, NULL))
        FZ_CHECK(st == EMBER_ERR_DTYPE_TRANSFER);
    if (st != EMBER_OK)
        return;
    meta m;
    memset(&m, 0, sizeof m);
    if (dt == EMBER_QFLOAT) {
        m.scheme = pick_scheme(k >> 3);
        ember_tensor *q = NULL;
        st = ember_quantize(t, &m.scheme, &q);
        fz_check_status(st, &q);
        if (dev.backend == EMBER_BACKEND_OPENCL && !holds2(EMBER_QFLOAT, &m.scheme))
            FZ_CHECK(st != EMBER_OK); /* the device cannot hold the result */
        ember_tensor_free(t);
        if (st != EMBER_OK)
            return;
        t = q;
    } else if (ad % 3) {
        FZ_CHECK(ember_tensor_set_autodiff(t, (ember_autodiff)(ad % 3)) ==
                 (mk == EMBER_I64 ? EMBER_ERR_AUTODIFF_CONTEXT : EMBER_OK));
    }
    m.t = t;
    pool[npool++] = m;
}

/* ---- the model ---- */
typedef struct allowed {
    ember_status s[8];
    int n;
    int ok; /* EMBER_OK allowed */
} allowed;

static void allow(allowed *a, ember_status s) {
    if (a->n < 8)
        a->s[a->n++] = s;
}

static void expect(const allowed *a, ember_status got, const char *op) {
    if (got == EMBER_OK && a->ok)
        return;
    for (int i = 0; i < a->n; i++)
        if (got == a->s[i])
            return;
    fprintf(stderr, "%s: got %s (%s), the model allows%s", op, ember_status_name(got),
            ember_last_error(), a->ok ? " EMBER_OK" : "");
    for (int i = 0; i < a->n; i++)
        fprintf(stderr, " %s", ember_status_name(a->s[i]));
    fprintf(stderr, "\n");
    FZ_CHECK(0);
}

static int tracked(const ember_tensor *t) { return ember_tensor_autodiff(t) != 0; }
static int quantized(const ember_tensor *t) { return ember_tensor_dtype(t) == EMBER_QFLOAT; }

/* Binary ops (matmul, q_matmul, add): the placement and autodiff guards. Returns 1 when a guard
 * applies. */
static int binary_guards(allowed *al, const ember_tensor *a, const ember_tensor *b) {
    int any = 0;
    ember_device da = ember_tensor_device(a), db = ember_tensor_device(b);
    if (da.backend != db.backend) {
        allow(al, EMBER_ERR_BACKEND_MISMATCH);
        any = 1;
    } else if (da.index != db.index) {
        allow(al, EMBER_ERR_DEVICE_MISMATCH);
        any = 1;
    }
    ember_autodiff xa = ember_tensor_autodiff(a), xb = ember_tensor_autodiff(b);
    if (xa && xb && xa != xb) {
        allow(al, EMBER_ERR_CHECKPOINT_MISMATCH);
        any = 1;
    }
    return any;
}

static void step(fz_reader *r) {
    uint8_t op = fz_u8(r);
    if (op % 12 == 0 || npool == 0) {
        make(r);
        return;
    }
    meta *ma = &pool[fz_u8(r) % npool], *mb = &pool[fz_u8(r) % npool];
    const ember_tensor *a = ma->t, *b = mb->t;
    fz_snap sa = fz_snapshot(a), sb = fz_snapshot(b);
    allowed al;
    memset(&al, 0, sizeof al);
    ember_tensor *out = (ember_tensor *)(uintptr_t)1;
    ember_status st;
    const char *name = "";
    int keep_out = 0;
    switch (op % 12) {
    case 1: { /* to_device + its check */
        name = "to_device";
        ember_device d = pick_device(fz_u8(r));
        ember_device from = ember_tensor_device(a);
        if (!exists(d)) {
            allow(&al, EMBER_ERR_BACKEND_UNAVAILABLE);
            if (quantized(a))
                allow(&al, EMBER_ERR_QUANT_TRANSFER);
        } else if (quantized(a)) {
            allow(&al, EMBER_ERR_QUANT_TRANSFER);
            al.ok = same_dev(from, d); /* burn: a same-device move is a no-op */
        } else {
            int faults = 0;
            if (tracked(a) && d.backend != from.backend) {
                allow(&al, EMBER_ERR_AUTODIFF_TRANSFER);
                faults++;
            }
            if (d.backend == EMBER_BACKEND_OPENCL && !holds2(ember_tensor_dtype(a), NULL)) {
                allow(&al, EMBER_ERR_DTYPE_TRANSFER);
                faults++;
            }
            al.ok = faults == 0;
        }
        ember_status ck = ember_check_to_device(a, d);
        fz_check_status(ck, NULL);
        st = ember_to_device(a, d, &out);
        FZ_CHECK(st == ck);
        keep_out = 1;
        break;
    }
    case 2:
    case 3: { /* q_matmul (+ check) / matmul */
        name = op % 12 == 2 ? "q_matmul" : "matmul";
        int g = binary_guards(&al, a, b);
        int64_t k_a = ember_tensor_dim(a, 1), k_b = ember_tensor_dim(b, 0);
        if (!g) {
            ember_dtype ta = ember_tensor_dtype(a), tb = ember_tensor_dtype(b);
            int fa = ta == EMBER_F32 || ta == EMBER_QFLOAT,
                fb = tb == EMBER_F32 || tb == EMBER_QFLOAT;
            al.ok = k_a == k_b && fa && fb;
            if (k_a != k_b)
                allow(&al, EMBER_ERR_SHAPE_MISMATCH);
            if (!fa || !fb || ta == EMBER_BF16 || tb == EMBER_BF16) {
                al.ok |= k_a == k_b && (ta == EMBER_BF16 || tb == EMBER_BF16) && ta != EMBER_I64 &&
                         tb != EMBER_I64;
                allow(&al, EMBER_ERR_DTYPE_MISMATCH);
            }
            /* a block scheme on a shape its block does not divide, a scheme the kernel lacks */
            allow(&al, EMBER_ERR_BLOCK_SHAPE);
            allow(&al, EMBER_ERR_UNSUPPORTED_SCHEME);
        } else {
            /* several faults at once: any of the guards or the shape/dtype checks, never OK */
            allow(&al, EMBER_ERR_SHAPE_MISMATCH);
            allow(&al, EMBER_ERR_DTYPE_MISMATCH);
        }
        if (op % 12 == 2) {
            ember_status ck = ember_check_q_matmul(a, b);
            fz_check_status(ck, NULL);
            st = ember_q_matmul(a, b, &out);
            if (ck != EMBER_OK)
                FZ_CHECK(st == ck);
        } else {
            st = ember_matmul(a, b, &out);
        }
        break;
    }
    case 4: { /* add */
        name = "add";
        int g = binary_guards(&al, a, b);
        allow(&al, EMBER_ERR_SHAPE_MISMATCH);
        allow(&al, EMBER_ERR_DTYPE_MISMATCH);
        allow(&al, EMBER_ERR_QUANT_UNSUPPORTED);
        al.ok = !g;
        st = ember_add(a, b, &out);
        if (!g && ember_tensor_dtype(a) == EMBER_F32 && ember_tensor_dtype(b) == EMBER_F32 &&
            ember_tensor_dim(a, 0) == ember_tensor_dim(b, 0) &&
            ember_tensor_dim(a, 1) == ember_tensor_dim(b, 1))
            FZ_CHECK(st == EMBER_OK);
        break;
    }
    case 5: { /* ember_backend_dequantize */
        name = "backend_dequantize";
        ember_device d = pick_device(fz_u8(r));
        if (!exists(d))
            allow(&al, EMBER_ERR_BACKEND_UNAVAILABLE);
        if (!quantized(a))
            allow(&al, EMBER_ERR_NOT_QUANTIZED);
        if (!same_dev(d, ember_tensor_device(a)))
            allow(&al, EMBER_ERR_FOREIGN_DEQUANTIZE);
        al.ok = al.n == 0;
        st = ember_backend_dequantize(dctx, d, a, &out);
        break;
    }
    case 6: { /* dequantize / qscheme */
        name = "dequantize";
        if (quantized(a))
            al.ok = 1;
        else
            allow(&al, EMBER_ERR_NOT_QUANTIZED);
        st = ember_dequantize(a, &out);
        ember_qscheme s;
        FZ_CHECK(ember_tensor_qscheme(a, &s) ==
                 (quantized(a) ? EMBER_OK : EMBER_ERR_NOT_QUANTIZED));
        break;
    }
    case 7: { /* read_many: refused as a whole when any is quantized, nothing written */
        name = "read_many";
        static unsigned char d0[256], d1[256];
        memset(d0, 0xCD, sizeof d0);
        memset(d1, 0xCD, sizeof d1);
        const ember_tensor *ts[2] = {a, b};
        void *const dsts[2] = {d0, d1};
        const size_t caps[2] = {sizeof d0, sizeof d1};
        if (quantized(a) || quantized(b))
            allow(&al, EMBER_ERR_QUANT_UNSUPPORTED);
        else
            al.ok = 1;
        st = ember_tensor_read_many(ts, dsts, caps, 2);
        out = NULL;
        if (st != EMBER_OK)
            for (size_t i = 0; i < sizeof d0; i++)
                FZ_CHECK(d0[i] == 0xCD && d1[i] == 0xCD);
        break;
    }
    case 8: { /* set_autodiff */
        name = "set_autodiff";
        ember_autodiff m = (ember_autodiff)(fz_u8(r) % 3);
        ember_autodiff before = ember_tensor_autodiff(a);
        if (ember_tensor_dtype(a) == EMBER_F32 || ember_tensor_dtype(a) == EMBER_BF16)
            al.ok = 1;
        else
            allow(&al, EMBER_ERR_AUTODIFF_CONTEXT);
        if (m == EMBER_AUTODIFF_DISABLED)
            al.ok = 1; /* untracking a quantized or integer tensor is not a contradiction */
        st = ember_tensor_set_autodiff(ma->t, m);
        out = NULL;
        if (st != EMBER_OK)
            FZ_CHECK(ember_tensor_autodiff(a) == before);
        free(sa.bytes);
        free(sb.bytes);
        expect(&al, st, name);
        fz_check_status(st, NULL);
        return; /* the tensor legitimately changed (its context) */
    }
    case 9: { /* linear backward: a tracked input is a second-order derivative */
        name = "linear_x_backward";
        int g = binary_guards(&al, a, b);
        allow(&al, EMBER_ERR_SHAPE_MISMATCH);
        allow(&al, EMBER_ERR_DTYPE_MISMATCH);
        allow(&al, EMBER_ERR_QUANT_UNSUPPORTED);
        if (tracked(a) || tracked(b))
            allow(&al, EMBER_ERR_NOT_DIFFERENTIABLE);
        al.ok = !g && !tracked(a) && !tracked(b) && !quantized(a) && !quantized(b);
        st = ember_linear_x_backward(a, b, &out);
        break;
    }
    case 10: { /* quantize on the tensor's device */
        name = "quantize";
        ember_qscheme s = pick_scheme(fz_u8(r));
        ember_dtype dt = ember_tensor_dtype(a);
        al.ok = dt == EMBER_F32 || dt == EMBER_BF16;
        allow(&al, EMBER_ERR_DTYPE_MISMATCH);
        allow(&al, EMBER_ERR_BLOCK_SHAPE);
        allow(&al, EMBER_ERR_DTYPE_TRANSFER);
        allow(&al, EMBER_ERR_UNSUPPORTED_SCHEME);
        allow(&al, EMBER_ERR_QUANT_UNSUPPORTED);
        st = ember_quantize(a, &s, &out);
        if (st == EMBER_OK && npool < POOL) {
            pool[npool].t = out;
            pool[npool].scheme = s;
            npool++;
            out = NULL;
        }
        break;
    }
    default: { /* requantize_to_device: the explicit way around QUANT_TRANSFER */
        name = "requantize_to_device";
        ember_device d = pick_device(fz_u8(r));
        /* every fault that applies is allowed (the order of the checks is not the contract) */
        if (!exists(d))
            allow(&al, EMBER_ERR_BACKEND_UNAVAILABLE);
        if (!quantized(a)) {
            allow(&al, EMBER_ERR_NOT_QUANTIZED);
            allow(&al, EMBER_ERR_DTYPE_MISMATCH);
        }
        if (exists(d) && quantized(a)) {
            al.ok = 1;
            allow(&al, EMBER_ERR_DTYPE_TRANSFER);
            allow(&al, EMBER_ERR_UNSUPPORTED_SCHEME);
            allow(&al, EMBER_ERR_QUANT_UNSUPPORTED);
        }
        st = ember_requantize_to_device(a, d, &out);
        break;
    }
    }
    expect(&al, st, name);
    if (out != NULL || st != EMBER_OK)
        fz_check_status(st, out == (ember_tensor *)(uintptr_t)1 ? NULL : &out);
    fz_check_snapshot(a, &sa);
    fz_check_snapshot(b, &sb);
    if (st == EMBER_OK && out && out != (ember_tensor *)(uintptr_t)1) {
        if (keep_out && npool < POOL) {
            pool[npool].t = out;
            pool[npool].scheme = ma->scheme;
            npool++;
        } else {
            ember_tensor_free(out);
        }
    }
}

static void fz_one(const uint8_t *data, size_t size) {
    setup();
    fz_reader r = {data, size};
    npool = 0;
    for (int steps = 0; r.n && steps < 48; steps++)
        step(&r);
    for (int i = 0; i < npool; i++)
        ember_tensor_free(pool[i].t);
    npool = 0;
}
