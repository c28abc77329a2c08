/* tests/test_opencl.c: every OpenCL op against the CPU backend (or, for quantization until the
 * CPU backend has it, against burn's golden vectors and a host reference) on fresh random data.
 *
 * Exit 77 (skipped) when no OpenCL device is found. Float results are compared with a float64
 * reference with the tolerance stated at each check; quantized results and every op that is one
 * f32 operation per element are compared bit for bit. The backend entries are called through the
 * vtable (the dispatcher validates before it calls them; here the inputs are valid by
 * construction). EMBER_OPENCL_CACHE_DIR defaults to ./ember-cl-cache so that reruns skip PoCL's
 * slow compiles. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "backends/opencl/cl_backend.h"
#include "dispatch/internal.h"
#include "quant/quant_impl.h"
#include "test_util.h"

static ember_context *ctx;
static const ember_device CL0 = {EMBER_BACKEND_OPENCL, 0};
static uint64_t rng;

static ember__cl_state *cls(void) { return ctx->be[EMBER_BACKEND_OPENCL].state; }
static const ember_backend_ops *clops(void) { return ctx->be[EMBER_BACKEND_OPENCL].ops; }

static ember_tensor *from_f32(ember_device d, int rank, const int64_t *shape, const float *data) {
    ember_tensor *t = NULL;
    TU_OK(ember_tensor_from_data(ctx, d, EMBER_F32, rank, shape, data, &t));
    return t;
}

static ember_tensor *alloc_t(ember_device d, ember_dtype dt, int rank, const int64_t *shape) {
    size_t numel, nbytes;
    ember_tensor *t = NULL;
    TU_OK(ember__shape_bytes(dt, rank, shape, &numel, &nbytes));
    TU_OK(ember__tensor_alloc(ctx, d, dt, rank, shape, nbytes, &t));
    return t;
}

static void read_raw(const ember_tensor *t, void *dst) {
    const ember_backend_ops *o = ctx->be[t->device.backend].ops;
    TU_OK(
        o->download(ctx->be[t->device.backend].state, t->device.index, t->buf, 0, dst, t->nbytes));
}

static int bits_equal(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0) {
            fprintf(stderr, "  element %zu: %.9g (0x%08x) vs %.9g\n", i, a[i],
                    *(const uint32_t *)(const void *)&a[i], b[i]);
            return 0;
        }
    return 1;
}

/* ---------------------------------------------------------------- devices */

static void test_describe(void) {
    CU_ASSERT_TRUE(ember_device_count(ctx, EMBER_BACKEND_OPENCL) >= 1);
    ember_device_info info;
    TU_OK(ember_device_describe(ctx, CL0, &info));
    CU_ASSERT_TRUE(info.name[0] != '\0');
    CU_ASSERT_TRUE(info.vendor[0] != '\0');
    CU_ASSERT_TRUE(info.driver[0] != '\0');
    CU_ASSERT_PTR_NOT_NULL(strstr(info.version, "OpenCL"));
    CU_ASSERT_TRUE(strncmp(info.int8_matmul_path, "opencl.", 7) == 0);
    CU_ASSERT_TRUE(info.memory_bytes > 0);
    CU_ASSERT_TRUE(info.compute_units > 0);
    fprintf(stderr, "\n  opencl:0 = %s | %s | %s | %s | mem %llu | ext \"%s\" | int8 %s\n",
            info.name, info.vendor, info.driver, info.version,
            (unsigned long long)info.memory_bytes, info.extensions, info.int8_matmul_path);
    ember_device bad = {EMBER_BACKEND_OPENCL, 99};
    TU_ASSERT_STATUS(ember_device_describe(ctx, bad, &info), EMBER_ERR_BACKEND_UNAVAILABLE,
                     "opencl:99");
}

static void test_supports(void) {
    const ember__cl_device *d = &cls()->dev[0];
    int ans = -1;
    TU_OK(ember_device_supports(ctx, CL0, EMBER_OP_STORE, EMBER_F16, NULL, &ans));
    CU_ASSERT_EQUAL(ans, d->has_fp16); /* no F16 storage without cl_khr_fp16 */
    CU_ASSERT_EQUAL(d->has_fp16, strstr(d->extensions, "cl_khr_fp16") != NULL);
    TU_OK(ember_device_supports(ctx, CL0, EMBER_OP_STORE, EMBER_BF16, NULL, &ans));
    CU_ASSERT_EQUAL(ans, 1);
    TU_OK(ember_device_supports(ctx, CL0, EMBER_OP_MATMUL, EMBER_F32, NULL, &ans));
    CU_ASSERT_EQUAL(ans, 1);
    TU_OK(ember_device_supports(ctx, CL0, EMBER_OP_MATMUL, EMBER_I32, NULL, &ans));
    CU_ASSERT_EQUAL(ans, 0);
    TU_OK(ember_device_supports(ctx, CL0, EMBER_OP_STORE, EMBER_I64, NULL, &ans));
    CU_ASSERT_EQUAL(ans, 1);
    ember_qscheme q4 = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
    TU_OK(ember_device_supports(ctx, CL0, EMBER_OP_QUANTIZE, EMBER_QFLOAT, &q4, &ans));
    CU_ASSERT_EQUAL(ans, 1);
    TU_OK(ember_device_supports(ctx, CL0, EMBER_OP_Q_MATMUL, EMBER_QFLOAT, &q4, &ans));
    CU_ASSERT_EQUAL(ans, 1);
    ember_qscheme bad = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_NATIVE);
    TU_OK(ember_device_supports(ctx, CL0, EMBER_OP_STORE, EMBER_QFLOAT, &bad, &ans));
    CU_ASSERT_EQUAL(ans, 0);
    /* tensor_from_data follows holds(): F16 on a device without fp16 is DTYPE_TRANSFER */
    if (!d->has_fp16) {
        uint16_t h[2] = {0x3c00, 0x4000};
        int64_t shape[1] = {2};
        ember_tensor *t = (ember_tensor *)(uintptr_t)1;
        TU_ASSERT_STATUS(ember_tensor_from_data(ctx, CL0, EMBER_F16, 1, shape, h, &t),
                         EMBER_ERR_DTYPE_TRANSFER, "F16");
        CU_ASSERT_PTR_NULL(t);
    }
}

/* ---------------------------------------------------------------- memory */

static void test_upload_download(void) {
    float x[1000], y[1000];
    tu_rand_f32(&rng, x, 1000, -10.0f, 10.0f);
    int64_t shape[2] = {10, 100};
    ember_tensor *t = from_f32(CL0, 2, shape, x);
    TU_OK(ember_tensor_read(t, y, sizeof y));
    CU_ASSERT_TRUE(bits_equal(x, y, 1000));
    /* partial transfers at an offset */
    float part[7] = {1, 2, 3, 4, 5, 6, 7}, back[7];
    TU_OK(clops()->upload(cls(), 0, t->buf, 40 * 4, part, sizeof part));
    TU_OK(clops()->download(cls(), 0, t->buf, 40 * 4, back, sizeof back));
    CU_ASSERT_TRUE(bits_equal(part, back, 7));
    /* out of bounds: refused before any CL call */
    TU_ASSERT_STATUS(clops()->download(cls(), 0, t->buf, 3990, back, 16),
                     EMBER_ERR_INVALID_ARGUMENT, "do not fit");
    CU_ASSERT_PTR_NULL(clops()->host_ptr(cls(), 0, t->buf));
    TU_OK(clops()->sync(cls(), 0));
    ember_tensor_free(t);
    /* an empty tensor */
    int64_t zero[2] = {0, 3};
    ember_tensor *e = from_f32(CL0, 2, zero, x);
    CU_ASSERT_EQUAL(ember_tensor_numel(e), 0);
    TU_OK(ember_tensor_read(e, y, 0));
    ember_tensor_free(e);
}

/* ---------------------------------------------------------------- f32 ops */

/* One GEMM case on both backends against a float64 reference:
 * |C - ref| <= 4 * k * FLT_EPSILON * sum_k |a||b| + |beta * c0| * FLT_EPSILON. */
static void gemm_case(int ta, int tb, int64_t m, int64_t n, int64_t k, int64_t batch, float alpha,
                      float beta) {
    size_t asz = (size_t)(batch * m * k), bsz = (size_t)(batch * k * n),
           csz = (size_t)(batch * m * n);
    float *A = malloc(asz * 4 + 4), *B = malloc(bsz * 4 + 4), *C0 = malloc(csz * 4 + 4);
    float *Ccl = malloc(csz * 4 + 4), *Ccpu = malloc(csz * 4 + 4);
    tu_rand_f32(&rng, A, asz, -1.0f, 1.0f);
    tu_rand_f32(&rng, B, bsz, -1.0f, 1.0f);
    tu_rand_f32(&rng, C0, csz, -1.0f, 1.0f);
    int64_t ash[3] = {batch, ta ? k : m, ta ? m : k}, bsh[3] = {batch, tb ? n : k, tb ? k : n};
    int64_t csh[3] = {batch, m, n};
    int64_t aoff[4], boff[4];
    for (int64_t i = 0; i < batch; i++) {
        aoff[i] = i * m * k;
        boff[i] = (batch - 1 - i) * k * n; /* reversed: offsets are honoured, not assumed */
    }
    ember__gemm g = {ta, tb, m, n, k, batch, aoff, boff, alpha, beta};
    ember_device devs[2] = {CL0, TU_CPU};
    float *outs[2] = {Ccl, Ccpu};
    for (int w = 0; w < 2; w++) {
        ember_tensor *a = from_f32(devs[w], 3, ash, A), *b = from_f32(devs[w], 3, bsh, B);
        ember_tensor *c = from_f32(devs[w], 3, csh, C0);
        const ember_backend_ops *o = ctx->be[devs[w].backend].ops;
        TU_OK(o->gemm_f32(ctx->be[devs[w].backend].state, 0, &g, a, b, c));
        TU_OK(ember_tensor_read(c, outs[w], csz * 4));
        ember_tensor_free(a);
        ember_tensor_free(b);
        ember_tensor_free(c);
    }
    int bad = 0;
    for (int64_t bi = 0; bi < batch && !bad; bi++)
        for (int64_t i = 0; i < m && !bad; i++)
            for (int64_t j = 0; j < n && !bad; j++) {
                double acc = 0, mag = 0;
                for (int64_t p = 0; p < k; p++) {
                    double av = ta ? A[aoff[bi] + p * m + i] : A[aoff[bi] + i * k + p];
                    double bv = tb ? B[boff[bi] + j * k + p] : B[boff[bi] + p * n + j];
                    acc += av * bv;
                    mag += fabs(av * bv);
                }
                size_t o = (size_t)(bi * m * n + i * n + j);
                double ref = alpha * acc + (beta != 0.0f ? beta * (double)C0[o] : 0.0);
                double tol =
                    4.0 * (double)(k + 2) * FLT_EPSILON * (fabs(alpha) * mag + fabs(beta * C0[o]));
                for (int w = 0; w < 2; w++)
                    if (fabs(outs[w][o] - ref) > tol + 1e-30) {
                        fprintf(stderr,
                                "  gemm ta%d tb%d %lldx%lldx%lld: %s C[%zu] = %.9g, ref %.9g\n", ta,
                                tb, (long long)m, (long long)n, (long long)k, w ? "cpu" : "opencl",
                                o, outs[w][o], ref);
                        bad = 1;
                    }
            }
    CU_ASSERT_FALSE(bad);
    free(A);
    free(B);
    free(C0);
    free(Ccl);
    free(Ccpu);
}

/* Both kernel shapes (tiled with local memory; barrier-free rows), whatever the device. */
static void test_gemm(void) {
    for (int variant = 1; variant <= 2; variant++) {
        cls()->gemm_variant = variant;
        gemm_case(0, 0, 37, 53, 29, 1, 1.0f, 0.0f); /* ragged edges in every dimension */
        gemm_case(1, 0, 65, 17, 70, 2, 1.0f, 0.0f); /* trans_a, batch with offsets */
        gemm_case(0, 1, 8, 130, 33, 3, 0.5f, 2.0f); /* trans_b, alpha and beta */
        gemm_case(0, 0, 19, 64, 40, 1, 1.0f, 1.0f); /* whole 16-column strips, beta 1 */
        gemm_case(1, 1, 1, 1, 1, 1, 1.0f, 0.0f);
        gemm_case(0, 0, 3, 4, 0, 1, 1.0f, 1.5f); /* k = 0: C = beta * C */
    }
    cls()->gemm_variant = 0;
}

static void binary_case(ember__binop op, int ra, const int64_t *sa, int rb, const int64_t *sb) {
    /* broadcast strides as the dispatcher builds them */
    ember__bcast bc;
    memset(&bc, 0, sizeof bc);
    bc.rank = ra > rb ? ra : rb;
    int64_t out_shape[EMBER_MAX_RANK];
    int64_t stra = 1, strb = 1;
    size_t na = 1, nb = 1, no = 1;
    for (int d = bc.rank - 1; d >= 0; d--) {
        int ia = d - (bc.rank - ra), ib = d - (bc.rank - rb);
        int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
        out_shape[d] = da > db ? da : db;
        bc.shape[d] = out_shape[d];
        bc.a_stride[d] = da == 1 ? 0 : stra;
        bc.b_stride[d] = db == 1 ? 0 : strb;
        stra *= da;
        strb *= db;
        no *= (size_t)out_shape[d];
    }
    for (int i = 0; i < ra; i++)
        na *= (size_t)sa[i];
    for (int i = 0; i < rb; i++)
        nb *= (size_t)sb[i];
    float *A = malloc(na * 4), *B = malloc(nb * 4), *O1 = malloc(no * 4), *O2 = malloc(no * 4);
    tu_rand_f32(&rng, A, na, -3.0f, 3.0f);
    tu_rand_f32(&rng, B, nb, -3.0f, 3.0f);
    ember_device devs[2] = {CL0, TU_CPU};
    float *outs[2] = {O1, O2};
    for (int w = 0; w < 2; w++) {
        ember_tensor *a = from_f32(devs[w], ra, sa, A), *b = from_f32(devs[w], rb, sb, B);
        ember_tensor *o = alloc_t(devs[w], EMBER_F32, bc.rank, out_shape);
        TU_OK(ctx->be[devs[w].backend].ops->binary_f32(ctx->be[devs[w].backend].state, 0, op, &bc,
                                                       a, b, o));
        TU_OK(ember_tensor_read(o, outs[w], no * 4));
        ember_tensor_free(a);
        ember_tensor_free(b);
        ember_tensor_free(o);
    }
    CU_ASSERT_TRUE(bits_equal(O1, O2, no)); /* one f32 operation per element: exact */
    free(A);
    free(B);
    free(O1);
    free(O2);
}

static void test_binary(void) {
    int64_t a1[3] = {3, 1, 5}, b1[2] = {4, 1};
    binary_case(EMBER__BINOP_ADD, 3, a1, 2, b1);
    binary_case(EMBER__BINOP_MUL, 3, a1, 2, b1);
    int64_t a2[2] = {17, 33}, b2[2] = {17, 33};
    binary_case(EMBER__BINOP_ADD, 2, a2, 2, b2);
    int64_t a3[1] = {1}, b3[4] = {2, 3, 4, 5};
    binary_case(EMBER__BINOP_MUL, 1, a3, 4, b3);
}

static void test_sum_rows(void) {
    const int64_t rows = 123, cols = 77;
    float *X = malloc((size_t)(rows * cols) * 4), o1[77], o2[77];
    tu_rand_f32(&rng, X, (size_t)(rows * cols), -5.0f, 5.0f);
    int64_t sh[2] = {rows, cols}, osh[1] = {cols};
    ember_device devs[2] = {CL0, TU_CPU};
    float *outs[2] = {o1, o2};
    for (int w = 0; w < 2; w++) {
        ember_tensor *x = from_f32(devs[w], 2, sh, X), *o = alloc_t(devs[w], EMBER_F32, 1, osh);
        TU_OK(ctx->be[devs[w].backend].ops->sum_rows_f32(ctx->be[devs[w].backend].state, 0, x, rows,
                                                         cols, o));
        TU_OK(ember_tensor_read(o, outs[w], sizeof o1));
        ember_tensor_free(x);
        ember_tensor_free(o);
    }
    if (cls()->dev[0].has_fp64) {
        CU_ASSERT_TRUE(bits_equal(o1, o2, (size_t)cols)); /* both sum in double */
    } else {
        for (int64_t j = 0; j < cols; j++) /* Kahan in f32: within 2 ulp of the double sum */
            CU_ASSERT_TRUE(fabsf(o1[j] - o2[j]) <= 2.0f * FLT_EPSILON * (fabsf(o2[j]) + 1.0f));
    }
    free(X);
}

/* F32 <-> BF16 (tensors) and F32 <-> F16 (raw buffers: the kernel is integer code and runs on any
 * device), bit for bit against dispatch/half.c, with the special values. */
static void test_convert(void) {
    enum { N = 4096 };
    float *x = malloc(N * 4), *back = malloc(N * 4), *ref = malloc(N * 4);
    uint16_t *h = malloc(N * 2), *href = malloc(N * 2);
    tu_rand_f32(&rng, x, N, -70000.0f, 70000.0f);
    const float special[] = {0.0f,     -0.0f,    INFINITY,       -INFINITY,       NAN,
                             1e-40f,   -3e-39f,  65504.0f,       65520.0f,        6.1e-5f,
                             5.96e-8f, 2.98e-8f, 1.0f + 0x1p-8f, 1.0f + 0x1p-11f, 3.0f + 0x1p-10f,
                             FLT_MAX,  FLT_MIN};
    memcpy(x, special, sizeof special);
    for (size_t i = 100; i < 600; i++) /* small values: the f16 subnormal range */
        x[i] = x[i] * 1e-9f;
    for (size_t i = 600; i < 700; i++) { /* exact ties of bf16 */
        uint32_t u = (uint32_t)tu_next(&rng) & 0xffff0000u;
        u |= 0x8000u;
        memcpy(&x[i], &u, 4);
        if (isnan(x[i]))
            x[i] = 1.0f;
    }
    int64_t sh[1] = {N};
    ember_tensor *t = from_f32(CL0, 1, sh, x);
    ember_tensor *b16 = alloc_t(CL0, EMBER_BF16, 1, sh), *f32 = alloc_t(CL0, EMBER_F32, 1, sh);
    TU_OK(clops()->convert(cls(), 0, t, b16));
    TU_OK(clops()->convert(cls(), 0, b16, f32));
    read_raw(b16, h);
    TU_OK(ember_tensor_read(f32, back, N * 4));
    for (size_t i = 0; i < N; i++) {
        href[i] = ember__f32_to_bf16(x[i]);
        ref[i] = ember__bf16_to_f32(href[i]);
    }
    CU_ASSERT_EQUAL(memcmp(h, href, N * 2), 0);
    CU_ASSERT_EQUAL(memcmp(back, ref, N * 4), 0);
    /* F16 on raw buffers */
    cl_mem m16, m32;
    TU_OK(ember__cl_temp(cls(), 0, "test", N * 2, NULL, &m16));
    TU_OK(ember__cl_temp(cls(), 0, "test", N * 4, NULL, &m32));
    TU_OK(ember__cl_convert_mem(cls(), 0, "test", ember__cl_mem(t), EMBER_F32, m16, EMBER_F16, N));
    TU_OK(ember__cl_convert_mem(cls(), 0, "test", m16, EMBER_F16, m32, EMBER_F32, N));
    TU_OK(ember__cl_read(cls(), 0, "test", m16, 0, h, N * 2));
    TU_OK(ember__cl_read(cls(), 0, "test", m32, 0, back, N * 4));
    for (size_t i = 0; i < N; i++) {
        href[i] = ember__f32_to_f16(x[i]);
        ref[i] = ember__f16_to_f32(href[i]);
    }
    CU_ASSERT_EQUAL(memcmp(h, href, N * 2), 0);
    CU_ASSERT_EQUAL(memcmp(back, ref, N * 4), 0);
    clReleaseMemObject(m16);
    clReleaseMemObject(m32);
    ember_tensor_free(t);
    ember_tensor_free(b16);
    ember_tensor_free(f32);
    free(x);
    free(back);
    free(ref);
    free(h);
    free(href);
}

/* ---------------------------------------------------------------- the public API on OpenCL */

/* Read t (on any device) as floats into a fresh array of t's numel. */
static float *read_all(const ember_tensor *t) {
    size_t n = (size_t)ember_tensor_numel(t);
    float *v = malloc(n * 4 + 4);
    TU_OK(ember_tensor_read(t, v, n * 4));
    return v;
}

/* |a - b| <= tol * (1 + |b|) element-wise. */
static int close_to(const float *a, const float *b, size_t n, float tol) {
    for (size_t i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= tol * (1.0f + fabsf(b[i])))) {
            fprintf(stderr, "  element %zu: %.9g vs %.9g\n", i, a[i], b[i]);
            return 0;
        }
    return 1;
}

typedef ember_status (*binop_fn)(const ember_tensor *, const ember_tensor *, ember_tensor **);

/* op(a, b) on opencl:0 and on the CPU from the same random data; outputs compared with tol
 * (0: bit for bit) and the output must live on the operands' device. */
static void api_case(binop_fn op, int ra, const int64_t *sa, int rb, const int64_t *sb, float tol) {
    size_t na = 1, nb = 1;
    for (int i = 0; i < ra; i++)
        na *= (size_t)sa[i];
    for (int i = 0; i < rb; i++)
        nb *= (size_t)sb[i];
    float *A = malloc(na * 4), *B = malloc(nb * 4);
    tu_rand_f32(&rng, A, na, -1.0f, 1.0f);
    tu_rand_f32(&rng, B, nb, -1.0f, 1.0f);
    ember_tensor *ac = from_f32(CL0, ra, sa, A), *bc = from_f32(CL0, rb, sb, B);
    ember_tensor *ah = from_f32(TU_CPU, ra, sa, A), *bh = from_f32(TU_CPU, rb, sb, B);
    ember_tensor *oc = NULL, *oh = NULL;
    TU_OK(op(ac, bc, &oc));
    TU_OK(op(ah, bh, &oh));
    if (oc && oh) {
        CU_ASSERT_EQUAL(ember_tensor_device(oc).backend, EMBER_BACKEND_OPENCL);
        CU_ASSERT_EQUAL(ember_tensor_numel(oc), ember_tensor_numel(oh));
        float *vc = read_all(oc), *vh = read_all(oh);
        size_t n = (size_t)ember_tensor_numel(oh);
        CU_ASSERT_TRUE(tol == 0.0f ? bits_equal(vc, vh, n) : close_to(vc, vh, n, tol));
        free(vc);
        free(vh);
    }
    ember_tensor_free(ac);
    ember_tensor_free(bc);
    ember_tensor_free(ah);
    ember_tensor_free(bh);
    ember_tensor_free(oc);
    ember_tensor_free(oh);
    free(A);
    free(B);
}

static ember_status linear_nobias(const ember_tensor *x, const ember_tensor *w, ember_tensor **o) {
    return ember_linear(x, w, NULL, o);
}

/* matmul (batched, broadcast), add, mul, linear and its backward family through the dispatcher
 * on OpenCL against the same calls on the CPU. Tolerance for the GEMMs: 1e-5 relative (k <= 70,
 * inputs in [-1, 1)); elementwise ops bit for bit. */
static void test_api_float(void) {
    int64_t a[3] = {2, 5, 7}, b[3] = {1, 7, 9}, a2[2] = {13, 70}, b2[2] = {70, 11};
    api_case(ember_matmul, 3, a, 3, b, 1e-5f);
    api_case(ember_matmul, 2, a2, 2, b2, 1e-5f);
    int64_t x[3] = {3, 4, 5}, y[1] = {5}, z[2] = {4, 1};
    api_case(ember_add, 3, x, 1, y, 0.0f);
    api_case(ember_mul, 3, x, 2, z, 0.0f);
    int64_t lx[2] = {6, 10}, lw[2] = {10, 3}, dy[2] = {6, 3};
    api_case(linear_nobias, 2, lx, 2, lw, 1e-5f);
    api_case(ember_linear_x_backward, 2, lw, 2, dy, 1e-5f);
    api_case(ember_linear_weight_backward, 2, lx, 2, dy, 1e-5f);
    /* linear with a bias, and the bias gradient */
    float X[60], W[30], Bv[3], DY[18];
    tu_rand_f32(&rng, X, 60, -1, 1);
    tu_rand_f32(&rng, W, 30, -1, 1);
    tu_rand_f32(&rng, Bv, 3, -1, 1);
    tu_rand_f32(&rng, DY, 18, -1, 1);
    int64_t bsh[1] = {3};
    float *res[2][2];
    ember_device devs[2] = {CL0, TU_CPU};
    for (int w = 0; w < 2; w++) {
        ember_tensor *xt = from_f32(devs[w], 2, lx, X), *wt = from_f32(devs[w], 2, lw, W);
        ember_tensor *bt = from_f32(devs[w], 1, bsh, Bv), *dt = from_f32(devs[w], 2, dy, DY);
        ember_tensor *o = NULL, *db = NULL;
        TU_OK(ember_linear(xt, wt, bt, &o));
        TU_OK(ember_linear_bias_backward(dt, &db));
        res[w][0] = o ? read_all(o) : calloc(18, 4);
        res[w][1] = db ? read_all(db) : calloc(3, 4);
        ember_tensor_free(xt);
        ember_tensor_free(wt);
        ember_tensor_free(bt);
        ember_tensor_free(dt);
        ember_tensor_free(o);
        ember_tensor_free(db);
    }
    CU_ASSERT_TRUE(close_to(res[0][0], res[1][0], 18, 1e-5f));
    CU_ASSERT_TRUE(close_to(res[0][1], res[1][1], 3, 1e-6f));
    for (int w = 0; w < 2; w++) {
        free(res[w][0]);
        free(res[w][1]);
    }
}

/* to_device CPU -> OpenCL -> CPU keeps every bit; F32 and BF16; OpenCL -> OpenCL when there are
 * two devices. */
static void test_api_transfer(void) {
    float x[300], back[300];
    tu_rand_f32(&rng, x, 300, -1e6f, 1e6f);
    int64_t sh[2] = {15, 20};
    ember_tensor *h = from_f32(TU_CPU, 2, sh, x), *c = NULL, *h2 = NULL;
    TU_OK(ember_to_device(h, CL0, &c));
    TU_OK(ember_to_device(c, TU_CPU, &h2));
    if (h2) {
        TU_OK(ember_tensor_read(h2, back, sizeof back));
        CU_ASSERT_TRUE(bits_equal(back, x, 300));
    }
    if (ember_device_count(ctx, EMBER_BACKEND_OPENCL) >= 2) {
        ember_device cl1 = {EMBER_BACKEND_OPENCL, 1};
        ember_tensor *c1 = NULL;
        TU_OK(ember_to_device(c, cl1, &c1));
        if (c1) {
            TU_OK(ember_tensor_read(c1, back, sizeof back));
            CU_ASSERT_TRUE(bits_equal(back, x, 300));
        }
        ember_tensor_free(c1);
    }
    uint16_t hb[300], hb2[300];
    for (int i = 0; i < 300; i++)
        hb[i] = ember__f32_to_bf16(x[i]);
    ember_tensor *bf = NULL, *bfc = NULL;
    TU_OK(ember_tensor_from_data(ctx, TU_CPU, EMBER_BF16, 2, sh, hb, &bf));
    TU_OK(ember_to_device(bf, CL0, &bfc));
    if (bfc) {
        TU_OK(ember_tensor_read(bfc, hb2, sizeof hb2));
        CU_ASSERT_EQUAL(memcmp(hb, hb2, sizeof hb), 0);
    }
    ember_tensor_free(h);
    ember_tensor_free(c);
    ember_tensor_free(h2);
    ember_tensor_free(bf);
    ember_tensor_free(bfc);
}

/* ---------------------------------------------------------------- quantization */

/* An unfilled quantized tensor on dev (quant/'s layout), for calling the vtable directly. */
static ember_tensor *qalloc(ember_device dev, const ember_qscheme *s, int rank,
                            const int64_t *shape) {
    ember_tensor *t = NULL;
    TU_OK(ember__qtensor_alloc(ctx, dev, s, rank, shape, &t));
    return t;
}

static ember_tensor *quantize_on(ember_device dev, const ember_qscheme *s, int rank,
                                 const int64_t *shape, const float *x, const float *static_scales,
                                 const ember__qlayout *L) {
    ember_tensor *xt = from_f32(dev, rank, shape, x), *q = NULL;
    if (static_scales) {
        ember_tensor *st = from_f32(dev, L->grid_rank, L->grid, static_scales);
        TU_OK(ember_quantize_static(xt, s, st, &q));
        ember_tensor_free(st);
    } else {
        TU_OK(ember_quantize(xt, s, &q));
    }
    ember_tensor_free(xt);
    return q;
}

/* Quantize x on opencl:0 and on the CPU backend through the public API (static scales when
 * given): the QuantizedBytes must be identical to each other and to quant/'s reference, and the
 * dequantized floats (on each producer) identical bit for bit. The bytes go to out_bytes. */
static void q_roundtrip(const ember_qscheme *s, int rank, const int64_t *shape, const float *x,
                        const float *static_scales, uint8_t *out_bytes) {
    ember__qlayout L;
    TU_OK(ember__qlayout_compute(s, rank, shape, &L));
    size_t numel = 1;
    for (int d = 0; d < rank; d++)
        numel *= (size_t)shape[d];
    uint8_t *want = calloc(L.total_bytes + 1, 1), *got_cl = malloc(L.total_bytes + 1);
    uint8_t *got_cpu = malloc(L.total_bytes + 1);
    float *deq_cl = malloc(numel * 4 + 4), *deq_cpu = malloc(numel * 4 + 4);
    TU_OK(ember__qref_quantize(s, &L, rank, shape, x, static_scales, want));
    ember_tensor *qc = quantize_on(CL0, s, rank, shape, x, static_scales, &L);
    ember_tensor *qh = quantize_on(TU_CPU, s, rank, shape, x, static_scales, &L);
    if (!qc || !qh)
        goto done;
    CU_ASSERT_EQUAL(ember_tensor_device(qc).backend, EMBER_BACKEND_OPENCL);
    size_t len = 0;
    TU_OK(ember_qtensor_to_bytes(qc, got_cl, L.total_bytes, &len));
    CU_ASSERT_EQUAL(len, L.total_bytes);
    TU_OK(ember_qtensor_to_bytes(qh, got_cpu, L.total_bytes, &len));
    int same = memcmp(got_cl, got_cpu, L.total_bytes) == 0;
    for (size_t i = 0; !same && i < L.total_bytes; i++)
        if (got_cl[i] != got_cpu[i]) {
            fprintf(stderr,
                    "  %s/%s block_rank %d two-level %d: byte %zu of %zu: opencl %02x cpu %02x\n",
                    ember_qvalue_name(s->value), ember_qstore_name(s->store), s->block_rank,
                    s->tensor_level, i, L.total_bytes, got_cl[i], got_cpu[i]);
            break;
        }
    CU_ASSERT_TRUE(same);
    CU_ASSERT_EQUAL(memcmp(got_cl, want, L.total_bytes), 0);
    ember_tensor *dc = NULL, *dh = NULL;
    TU_OK(ember_dequantize(qc, &dc));
    TU_OK(ember_dequantize(qh, &dh));
    if (dc && dh) {
        CU_ASSERT_EQUAL(ember_tensor_device(dc).backend, EMBER_BACKEND_OPENCL);
        TU_OK(ember_tensor_read(dc, deq_cl, numel * 4));
        TU_OK(ember_tensor_read(dh, deq_cpu, numel * 4));
        CU_ASSERT_TRUE(bits_equal(deq_cl, deq_cpu, numel));
    }
    ember_tensor_free(dc);
    ember_tensor_free(dh);
    if (out_bytes)
        memcpy(out_bytes, got_cl, L.total_bytes);
done:
    ember_tensor_free(qc);
    ember_tensor_free(qh);
    free(want);
    free(got_cl);
    free(got_cpu);
    free(deq_cl);
    free(deq_cpu);
}

static uint32_t u32_at(const uint8_t *p, size_t off) {
    uint32_t u;
    memcpy(&u, p + off, 4);
    return u;
}

/* spec §6.1 - §6.4: burn's own numbers. */
static void test_quant_golden(void) {
    uint8_t bytes[64];
    int64_t s8[1] = {8}, s4[1] = {4}, s6[1] = {6}, s5[1] = {5};
    ember_qscheme q8s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    /* T1 ties: half away from zero */
    const float t1[8] = {127, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, 0, -127};
    const int8_t t1q[8] = {127, 3, -3, 1, -1, 2, 0, -127};
    q_roundtrip(&q8s, 1, s8, t1, NULL, bytes);
    CU_ASSERT_EQUAL(memcmp(bytes, t1q, 8), 0);
    CU_ASSERT_EQUAL(u32_at(bytes, 8), 0x3F800000u);
    /* T2: burn's test, serialized bytes 81 b9 00 23 d4 36 68 3c */
    const float t2[4] = {-1.8f, -1.0f, 0.0f, 0.5f};
    const uint8_t t2b[8] = {0x81, 0xb9, 0x00, 0x23, 0xd4, 0x36, 0x68, 0x3c};
    q_roundtrip(&q8s, 1, s4, t2, NULL, bytes);
    CU_ASSERT_EQUAL(memcmp(bytes, t2b, 8), 0);
    /* T5 zeros: the stored scale is FLT_MIN */
    const float t5[4] = {0, 0, 0, 0};
    q_roundtrip(&q8s, 1, s4, t5, NULL, bytes);
    CU_ASSERT_EQUAL(u32_at(bytes, 4), 0x00800000u);
    /* T6 */
    const float t6[6] = {0, 1, 2, 3, 4, 5};
    const int8_t t6q[6] = {0, 25, 51, 76, 102, 127};
    q_roundtrip(&q8s, 1, s6, t6, NULL, bytes);
    CU_ASSERT_EQUAL(memcmp(bytes, t6q, 6), 0);
    CU_ASSERT_EQUAL(u32_at(bytes, 6), 0x3D214285u);
    /* T7 Q8F */
    ember_qscheme q8f = ember_qscheme_per_tensor(EMBER_Q8F, EMBER_QSTORE_NATIVE);
    const float t7[4] = {-1, 0.5f, 1, -0.25f};
    const int8_t t7q[4] = {-127, 64, 127, -32};
    q_roundtrip(&q8f, 1, s4, t7, NULL, bytes);
    CU_ASSERT_EQUAL(memcmp(bytes, t7q, 4), 0);
    CU_ASSERT_EQUAL(u32_at(bytes, 4), 0x3C008081u);
    /* T8 Q4S packed: word 0x175320D9 */
    ember_qscheme q4s = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
    const float t8[8] = {-1, -0.5f, 0, 0.25f, 0.5f, 0.75f, 1, 0.1f};
    q_roundtrip(&q4s, 1, s8, t8, NULL, bytes);
    CU_ASSERT_EQUAL(u32_at(bytes, 0), 0x175320D9u);
    CU_ASSERT_EQUAL(u32_at(bytes, 4), 0x3E124925u);
    /* T9 Q4F, T10 Q2S (word 0x00003443), T11 Q2F */
    ember_qscheme q4f = ember_qscheme_per_tensor(EMBER_Q4F, EMBER_QSTORE_PACKED_U32);
    q_roundtrip(&q4f, 1, s8, t8, NULL, bytes);
    CU_ASSERT_EQUAL(u32_at(bytes, 4), 0x3E088889u);
    const float t10[8] = {-0.9f, -0.4f, 0, 0.6f, 0.3f, 1, -1, 0.49f};
    ember_qscheme q2s = ember_qscheme_per_tensor(EMBER_Q2S, EMBER_QSTORE_PACKED_U32);
    q_roundtrip(&q2s, 1, s8, t10, NULL, bytes);
    CU_ASSERT_EQUAL(u32_at(bytes, 0), 0x00003443u);
    ember_qscheme q2f = ember_qscheme_per_tensor(EMBER_Q2F, EMBER_QSTORE_PACKED_U32);
    q_roundtrip(&q2f, 1, s8, t10, NULL, bytes);
    CU_ASSERT_EQUAL(u32_at(bytes, 4), 0x3F2AAAABu);
    /* §6.4: Q8S packed, 5 values: words 0x7FFD0280, 0x00000037 (zero-padded) via static scale 1 */
    ember_qscheme q8p = ember_qscheme_per_tensor(EMBER_Q8F, EMBER_QSTORE_PACKED_U32);
    const float p5[5] = {-128, 2, -3, 127, 55}, one = 1.0f;
    q_roundtrip(&q8p, 1, s5, p5, &one, bytes);
    CU_ASSERT_EQUAL(u32_at(bytes, 0), 0x7FFD0280u);
    CU_ASSERT_EQUAL(u32_at(bytes, 4), 0x00000037u);
    /* B1: per_block([4]) on [2,4] */
    int64_t s24[2] = {2, 4}, blk4[1] = {4}, blk22[2] = {2, 2};
    ember_qscheme b1 = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk4);
    const float xb1[8] = {1, -2, 0.5f, 4, 0.1f, 0.2f, -0.3f, 0.05f};
    const int8_t b1q[8] = {32, -64, 16, 127, 42, 85, -127, 21};
    q_roundtrip(&b1, 2, s24, xb1, NULL, bytes);
    CU_ASSERT_EQUAL(memcmp(bytes, b1q, 8), 0);
    CU_ASSERT_EQUAL(u32_at(bytes, 12), 0x3B1ACF38u);
    /* B2: per_block([2,2]) rectangles */
    ember_qscheme b2 = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, blk22);
    const float xb2[8] = {1, 2, 10, -20, 3, -4, 5, 0};
    const int8_t b2q[8] = {32, 64, 64, -127, 95, -127, 32, 0};
    q_roundtrip(&b2, 2, s24, xb2, NULL, bytes);
    CU_ASSERT_EQUAL(memcmp(bytes, b2q, 8), 0);
    /* B3: two-level, UE4M3 block scales: 7E 61 then g = 0x38937005 */
    ember_qscheme b3 = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk4);
    b3.block_scale = EMBER_SCALE_UE4M3;
    b3.tensor_level = 1;
    b3.tensor_scale = EMBER_SCALE_F32;
    const int8_t b3q[8] = {32, -64, 16, 127, 40, 79, -119, 20};
    q_roundtrip(&b3, 1, s8, xb1, NULL, bytes);
    CU_ASSERT_EQUAL(memcmp(bytes, b3q, 8), 0);
    CU_ASSERT_EQUAL(bytes[8], 0x7E);
    CU_ASSERT_EQUAL(bytes[9], 0x61);
    CU_ASSERT_EQUAL(u32_at(bytes, 10), 0x38937005u);
}

/* Every scheme the quant issue names, random data, against the reference: per-tensor, per-block
 * (1-D and 2-D blocks, every scale dtype), two-level, static scales; ragged packed rows. */
static void test_quant_random(void) {
    static const struct {
        ember_qvalue v;
        ember_qstore s;
    } kinds[] = {{EMBER_Q8F, EMBER_QSTORE_NATIVE},         {EMBER_Q8S, EMBER_QSTORE_NATIVE},
                 {EMBER_Q8S, EMBER_QSTORE_PACKED_U32},     {EMBER_Q4F, EMBER_QSTORE_PACKED_U32},
                 {EMBER_Q4S, EMBER_QSTORE_PACKED_U32},     {EMBER_Q2F, EMBER_QSTORE_PACKED_U32},
                 {EMBER_Q2S, EMBER_QSTORE_PACKED_U32},     {EMBER_E4M3, EMBER_QSTORE_NATIVE},
                 {EMBER_E5M2, EMBER_QSTORE_NATIVE},        {EMBER_E4M3, EMBER_QSTORE_PACKED_U32},
                 {EMBER_E2M1, EMBER_QSTORE_PACKED_NATIVE}, {EMBER_E2M1, EMBER_QSTORE_PACKED_U32}};
    int64_t shape[3] = {3, 6, 20}; /* the last dim leaves partial words for every packing */
    size_t numel = 3 * 6 * 20;
    float x[360];
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        tu_rand_f32(&rng, x, numel, -4.0f, 4.0f);
        x[7] = 0.0f;
        x[8] = -0.0f;
        ember_qscheme s = ember_qscheme_per_tensor(kinds[k].v, kinds[k].s);
        q_roundtrip(&s, 3, shape, x, NULL, NULL);
        int64_t b1[1] = {5}, b2[2] = {3, 4};
        ember_qscheme pb = ember_qscheme_per_block(kinds[k].v, kinds[k].s, 1, b1);
        q_roundtrip(&pb, 3, shape, x, NULL, NULL);
        pb = ember_qscheme_per_block(kinds[k].v, kinds[k].s, 2, b2);
        pb.block_scale = (ember_scale_dtype)(k % 2 ? EMBER_SCALE_F16 : EMBER_SCALE_BF16);
        q_roundtrip(&pb, 3, shape, x, NULL, NULL);
        pb.block_scale = EMBER_SCALE_UE4M3;
        pb.tensor_level = 1;
        q_roundtrip(&pb, 3, shape, x, NULL, NULL);
    }
    /* one block all zeros, scales in F16 (the FLT_MIN guard rounds up to 2^-24) */
    int64_t b1[1] = {20};
    for (size_t i = 0; i < 20; i++)
        x[i] = 0.0f;
    ember_qscheme z = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, b1);
    z.block_scale = EMBER_SCALE_F16;
    q_roundtrip(&z, 3, shape, x, NULL, NULL);
    /* static scales, per-tensor and per-block, with a tiny one (rounded up) */
    ember_qscheme st = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
    float s1 = 0.37f;
    q_roundtrip(&st, 3, shape, x, &s1, NULL);
    ember_qscheme sb = ember_qscheme_per_block(EMBER_Q8F, EMBER_QSTORE_NATIVE, 1, b1);
    sb.block_scale = EMBER_SCALE_BF16;
    float ss[18];
    tu_rand_f32(&rng, ss, 18, 0.001f, 0.1f);
    ss[3] = 1e-30f;
    ss[4] = 0.0f; /* takes the FLT_MIN guard */
    q_roundtrip(&sb, 3, shape, x, ss, NULL);
    /* larger tensor per-tensor: many work-groups in the reduction's single block */
    int64_t big[2] = {64, 300};
    float *xb = malloc(64 * 300 * 4);
    tu_rand_f32(&rng, xb, 64 * 300, -100.0f, 100.0f);
    ember_qscheme q8 = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    q_roundtrip(&q8, 2, big, xb, NULL, NULL);
    free(xb);
}

/* The work-group absmax kernel (other devices than CPUs) forced on this device, and the CPU
 * one forced: per-tensor, row blocks, rectangles, two-level, a tensor of many chunks. */
static void test_quant_absmax_kernels(void) {
    float *x = malloc(64 * 1000 * 4);
    tu_rand_f32(&rng, x, 64 * 1000, -50.0f, 50.0f);
    x[12345] = 77.0f; /* the max deep inside: in a later chunk */
    int64_t big[2] = {64, 1000}, sh[3] = {3, 6, 20}, b1[1] = {5}, b2[2] = {3, 4};
    for (int variant = 1; variant <= 2; variant++) {
        cls()->gemm_variant = variant;
        ember_qscheme pt = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
        q_roundtrip(&pt, 2, big, x, NULL, NULL);
        ember_qscheme rb = ember_qscheme_per_block(EMBER_Q4S, EMBER_QSTORE_PACKED_U32, 1, b1);
        q_roundtrip(&rb, 3, sh, x, NULL, NULL);
        ember_qscheme rr = ember_qscheme_per_block(EMBER_E2M1, EMBER_QSTORE_PACKED_NATIVE, 2, b2);
        rr.block_scale = EMBER_SCALE_UE4M3;
        rr.tensor_level = 1;
        q_roundtrip(&rr, 3, sh, x, NULL, NULL);
        float bad[8] = {1, 2, 3, 4, 5, 6, 7, NAN};
        int64_t s8[1] = {8};
        ember_tensor *t = from_f32(CL0, 1, s8, bad), *q = NULL;
        TU_ASSERT_STATUS(ember_quantize(t, &pt, &q), EMBER_ERR_NON_FINITE, "NaN or Inf");
        CU_ASSERT_PTR_NULL(q);
        ember_tensor_free(t);
    }
    cls()->gemm_variant = 0;
    free(x);
}

/* The fma-corrected software division (for devices with neither exact division nor fp64),
 * forced here: the same bytes as the CPU. Values near rounding ties of x / s stress it. */
static void test_quant_soft_div(void) {
    for (int mode = 1; mode <= 2; mode++) {
        cls()->soft_div = mode;
        float x[512];
        int64_t sh[2] = {8, 64}, blk[1] = {16};
        tu_rand_f32(&rng, x, 512, -3.0f, 3.0f);
        x[0] = 3.0f; /* alpha = 3: s = 3/127, and x = (j + 0.5) * s lands within an ulp of ties */
        for (int j = 1; j < 200; j++)
            x[j] = ((float)(j % 120) + 0.5f) * (3.0f / 127.0f);
        ember_qscheme q8 = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
        q_roundtrip(&q8, 2, sh, x, NULL, NULL);
        ember_qscheme q4 = ember_qscheme_per_block(EMBER_Q4F, EMBER_QSTORE_PACKED_U32, 1, blk);
        q4.block_scale = EMBER_SCALE_F16;
        q_roundtrip(&q4, 2, sh, x, NULL, NULL);
        ember_qscheme e4 = ember_qscheme_per_tensor(EMBER_E4M3, EMBER_QSTORE_NATIVE);
        q_roundtrip(&e4, 2, sh, x, NULL, NULL);
    }
    cls()->soft_div = 0;
}

static void test_quant_non_finite(void) {
    float x[6] = {1, 2, NAN, 4, 5, 6};
    int64_t sh[2] = {2, 3};
    ember_qscheme s = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_tensor *xt = from_f32(CL0, 2, sh, x), *q = qalloc(CL0, &s, 2, sh);
    TU_ASSERT_STATUS(clops()->quantize(cls(), 0, xt, NULL, q), EMBER_ERR_NON_FINITE, "NaN or Inf");
    x[2] = 3;
    x[5] = -INFINITY;
    ember_tensor_free(xt);
    xt = from_f32(CL0, 2, sh, x);
    TU_ASSERT_STATUS(clops()->quantize(cls(), 0, xt, NULL, q), EMBER_ERR_NON_FINITE, "opencl:0");
    ember_tensor_free(xt);
    ember_tensor_free(q);
}

/* ---------------------------------------------------------------- q_matmul */

/* (Q, Q) per-tensor Q8 on the integer path: out = (float)acc * (sa * sb), exactly. */
static void qmm_case(ember_qvalue va, ember_qstore sa_, ember_qvalue vb, ember_qstore sb_,
                     int64_t batch, int64_t m, int64_t n, int64_t k) {
    size_t na = (size_t)(batch * m * k), nb = (size_t)(batch * k * n), no = (size_t)(batch * m * n);
    float *A = malloc(na * 4), *B = malloc(nb * 4), *O = malloc(no * 4), *R = malloc(no * 4);
    tu_rand_f32(&rng, A, na, -2.0f, 2.0f);
    tu_rand_f32(&rng, B, nb, -0.5f, 0.5f);
    int64_t ash[3] = {batch, m, k}, bsh[3] = {batch, k, n}, osh[3] = {batch, m, n};
    ember_qscheme qa = ember_qscheme_per_tensor(va, sa_), qb = ember_qscheme_per_tensor(vb, sb_);
    ember_tensor *at = from_f32(CL0, 3, ash, A), *bt = from_f32(CL0, 3, bsh, B);
    ember_tensor *aq = qalloc(CL0, &qa, 3, ash), *bq = qalloc(CL0, &qb, 3, bsh);
    ember_tensor *ot = alloc_t(CL0, EMBER_F32, 3, osh);
    TU_OK(clops()->quantize(cls(), 0, at, NULL, aq));
    TU_OK(clops()->quantize(cls(), 0, bt, NULL, bq));
    int64_t aoff[4], boff[4];
    for (int64_t i = 0; i < batch; i++) {
        aoff[i] = i * m * k;
        boff[i] = i * k * n;
    }
    ember__gemm g = {0, 0, m, n, k, batch, aoff, boff, 1.0f, 0.0f};
    TU_OK(clops()->q_matmul(cls(), 0, &g, aq, bq, ot));
    TU_OK(ember_tensor_read(ot, O, no * 4));
    /* the reference from the stored bytes */
    uint8_t *abytes = malloc(aq->nbytes), *bbytes = malloc(bq->nbytes);
    read_raw(aq, abytes);
    read_raw(bq, bbytes);
    float sa, sb;
    memcpy(&sa, abytes + aq->q.scales_offset, 4);
    memcpy(&sb, bbytes + bq->q.scales_offset, 4);
    int64_t ra = sa_ == EMBER_QSTORE_PACKED_U32 ? (k + 3) / 4 * 4 : k;
    int64_t rb = sb_ == EMBER_QSTORE_PACKED_U32 ? (n + 3) / 4 * 4 : n;
    for (int64_t bi = 0; bi < batch; bi++)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int32_t acc = 0;
                for (int64_t p = 0; p < k; p++)
                    acc += (int32_t)(int8_t)abytes[(bi * m + i) * ra + p] *
                           (int32_t)(int8_t)bbytes[(bi * k + p) * rb + j];
                R[(bi * m + i) * n + j] = 0.0f + (sa * sb) * (float)acc;
            }
    CU_ASSERT_TRUE(bits_equal(O, R, no));
    /* the public API on both backends: the same bits (the CPU's integer path has the same
     * epilogue; the scales and values are the same bytes) */
    float *Pc = malloc(no * 4), *Ph = malloc(no * 4);
    ember_device devs[2] = {CL0, TU_CPU};
    float *outs[2] = {Pc, Ph};
    for (int w = 0; w < 2; w++) {
        ember_tensor *xa = from_f32(devs[w], 3, ash, A), *xb = from_f32(devs[w], 3, bsh, B);
        ember_tensor *qa_ = NULL, *qb_ = NULL, *o = NULL;
        TU_OK(ember_quantize(xa, &qa, &qa_));
        TU_OK(ember_quantize(xb, &qb, &qb_));
        TU_OK(ember_q_matmul(qa_, qb_, &o));
        if (o) {
            CU_ASSERT_EQUAL(ember_tensor_device(o).backend, devs[w].backend);
            TU_OK(ember_tensor_read(o, outs[w], no * 4));
        }
        ember_tensor_free(xa);
        ember_tensor_free(xb);
        ember_tensor_free(qa_);
        ember_tensor_free(qb_);
        ember_tensor_free(o);
    }
    CU_ASSERT_TRUE(bits_equal(Pc, R, no));
    /* the CPU backend's integer path: per-tensor results bit-identical (issue 6) */
    CU_ASSERT_PTR_NOT_NULL(ctx->be[EMBER_BACKEND_CPU].ops->q_matmul);
    CU_ASSERT_TRUE(bits_equal(Ph, R, no));
    free(Pc);
    free(Ph);
    free(abytes);
    free(bbytes);
    ember_tensor_free(at);
    ember_tensor_free(bt);
    ember_tensor_free(aq);
    ember_tensor_free(bq);
    ember_tensor_free(ot);
    free(A);
    free(B);
    free(O);
    free(R);
}

static void test_q_matmul(void) {
    for (int variant = 1; variant <= 2; variant++) {
        cls()->gemm_variant = variant;
        qmm_case(EMBER_Q8S, EMBER_QSTORE_NATIVE, EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, 45, 70, 100);
        qmm_case(EMBER_Q8F, EMBER_QSTORE_PACKED_U32, EMBER_Q8S, EMBER_QSTORE_PACKED_U32, 2, 9, 13,
                 31);
        qmm_case(EMBER_Q8S, EMBER_QSTORE_NATIVE, EMBER_Q8F, EMBER_QSTORE_PACKED_U32, 1, 1, 67, 64);
    }
    cls()->gemm_variant = 0;
}

/* (Q, Q) with per-row lhs / per-column rhs scales on the integer path: called through the vtable
 * (it must take them, not decline) and through the public API; exactly
 * 0 + (sa[i / bm] * sb[j / bn]) * (float)acc from the stored bytes and effective scales. */
static void qmm_pc_case(const ember_qscheme *qa, const ember_qscheme *qb, int64_t m, int64_t n,
                        int64_t k, int64_t bm, int64_t bn) {
    size_t na = (size_t)(m * k), nb = (size_t)(k * n), no = (size_t)(m * n);
    float *A = malloc(na * 4), *B = malloc(nb * 4), *O = malloc(no * 4), *R = malloc(no * 4);
    float *P = malloc(no * 4), *H = malloc(no * 4);
    tu_rand_f32(&rng, A, na, -2.0f, 2.0f);
    tu_rand_f32(&rng, B, nb, -0.5f, 0.5f);
    for (int64_t j = 0; j < k; j++) /* row 1 of A much smaller: its scale differs a lot */
        A[k + j] *= 0.01f;
    int64_t ash[2] = {m, k}, bsh[2] = {k, n}, osh[2] = {m, n};
    ember_tensor *at = from_f32(CL0, 2, ash, A), *bt = from_f32(CL0, 2, bsh, B);
    ember_tensor *aq = NULL, *bq = NULL, *o = NULL;
    TU_OK(ember_quantize(at, qa, &aq));
    TU_OK(ember_quantize(bt, qb, &bq));
    ember_tensor *ot = alloc_t(CL0, EMBER_F32, 2, osh);
    int64_t z = 0;
    ember__gemm g = {0, 0, m, n, k, 1, &z, &z, 1.0f, 0.0f};
    TU_OK(clops()->q_matmul(cls(), 0, &g, aq, bq, ot));
    TU_OK(ember_tensor_read(ot, O, no * 4));
    TU_OK(ember_q_matmul(aq, bq, &o));
    if (o)
        TU_OK(ember_tensor_read(o, P, no * 4));
    /* the reference */
    int8_t *av = malloc(na), *bv = malloc(nb);
    float *sa = malloc(aq->q.nscales * 4), *sb = malloc(bq->q.nscales * 4);
    TU_OK(ember_qtensor_values(aq, av, na));
    TU_OK(ember_qtensor_values(bq, bv, nb));
    TU_OK(ember__qtensor_effective_scales(aq, sa));
    TU_OK(ember__qtensor_effective_scales(bq, sb));
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            int32_t acc = 0;
            for (int64_t p = 0; p < k; p++)
                acc += (int32_t)av[i * k + p] * (int32_t)bv[p * n + j];
            R[i * n + j] = 0.0f + (sa[i / bm] * sb[j / bn]) * (float)acc;
        }
    CU_ASSERT_TRUE(bits_equal(O, R, no));
    CU_ASSERT_TRUE(bits_equal(P, R, no));
    /* the CPU backend from the same floats, through its integer path: bit-identical */
    ember_tensor *ah = from_f32(TU_CPU, 2, ash, A), *bh = from_f32(TU_CPU, 2, bsh, B);
    ember_tensor *ahq = NULL, *bhq = NULL, *oh = NULL;
    TU_OK(ember_quantize(ah, qa, &ahq));
    TU_OK(ember_quantize(bh, qb, &bhq));
    TU_OK(ember_q_matmul(ahq, bhq, &oh));
    if (oh) {
        TU_OK(ember_tensor_read(oh, H, no * 4));
        CU_ASSERT_TRUE(bits_equal(H, R, no));
    }
    ember_tensor *all[] = {at, bt, aq, bq, o, ot, ah, bh, ahq, bhq, oh};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ember_tensor_free(all[i]);
    free(av);
    free(bv);
    free(sa);
    free(sb);
    free(A);
    free(B);
    free(O);
    free(R);
    free(P);
    free(H);
}

static void test_q_matmul_per_channel(void) {
    const int64_t m = 12, n = 40, k = 200;
    int64_t row[2] = {1, k}, row2[2] = {2, k}, col[2] = {k, 1}, col4[2] = {k, 4};
    ember_qscheme pt = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_qscheme ar = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, row);
    ember_qscheme ar2 = ember_qscheme_per_block(EMBER_Q8F, EMBER_QSTORE_PACKED_U32, 2, row2);
    ember_qscheme bc = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, col);
    ember_qscheme bc4 = ember_qscheme_per_block(EMBER_Q8F, EMBER_QSTORE_PACKED_U32, 2, col4);
    bc4.block_scale = EMBER_SCALE_F16;
    bc4.tensor_level = 1; /* two-level: g * s_b */
    for (int variant = 1; variant <= 2; variant++) {
        cls()->gemm_variant = variant;
        qmm_pc_case(&ar, &bc, m, n, k, 1, 1);
        qmm_pc_case(&pt, &bc, m, n, k, m, 1);
        qmm_pc_case(&ar, &pt, m, n, k, 1, n);
        qmm_pc_case(&ar2, &bc4, m, n, k, 2, 4);
    }
    cls()->gemm_variant = 0;
}

/* spec §6.5 (Quant x Quant): burn's dequantize-then-matmul numbers, within float rounding. */
static void test_q_matmul_golden(void) {
    const float A[6] = {1, 2, 3, -1, 0.5f, 0}, W[6] = {0.5f, -1, 2, 0.25f, -0.75f, 1.5f};
    const float want[4] = {2.24800062f, 3.99417162f, 0.492156982f, 1.12493026f};
    int64_t ash[2] = {2, 3}, wsh[2] = {3, 2}, osh[2] = {2, 2};
    ember_qscheme q8 = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_tensor *at = from_f32(CL0, 2, ash, A), *wt = from_f32(CL0, 2, wsh, W);
    ember_tensor *aq = qalloc(CL0, &q8, 2, ash), *wq = qalloc(CL0, &q8, 2, wsh);
    ember_tensor *ot = alloc_t(CL0, EMBER_F32, 2, osh);
    TU_OK(clops()->quantize(cls(), 0, at, NULL, aq));
    TU_OK(clops()->quantize(cls(), 0, wt, NULL, wq));
    int64_t z = 0;
    ember__gemm g = {0, 0, 2, 2, 3, 1, &z, &z, 1.0f, 0.0f};
    TU_OK(clops()->q_matmul(cls(), 0, &g, aq, wq, ot));
    float got[4];
    TU_OK(ember_tensor_read(ot, got, sizeof got));
    for (int i = 0; i < 4; i++)
        CU_ASSERT_TRUE(fabsf(got[i] - want[i]) <= 2e-6f * fabsf(want[i]));
    /* combinations the integer path leaves to the dispatcher: no detail recorded */
    ember_clear_error();
    ember_qscheme q4 = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
    ember_tensor *q4t = qalloc(CL0, &q4, 2, wsh);
    CU_ASSERT_EQUAL(clops()->q_matmul(cls(), 0, &g, aq, q4t, ot), EMBER_ERR_QUANT_UNSUPPORTED);
    CU_ASSERT_EQUAL(clops()->q_matmul(cls(), 0, &g, at, wq, ot), EMBER_ERR_QUANT_UNSUPPORTED);
    g.beta = 1.0f;
    CU_ASSERT_EQUAL(clops()->q_matmul(cls(), 0, &g, aq, wq, ot), EMBER_ERR_QUANT_UNSUPPORTED);
    CU_ASSERT_STRING_EQUAL(ember_last_error(), "");
    ember_tensor_free(q4t);
    ember_tensor_free(at);
    ember_tensor_free(wt);
    ember_tensor_free(aq);
    ember_tensor_free(wq);
    ember_tensor_free(ot);
}

/* The arms the integer path leaves to the dispatcher, through the public API on both backends:
 * (F, Q), (Q, F), and (Q, Q) per-block (dequantize on the producer + f32 GEMM); float rounding. */
static void test_q_matmul_fallbacks(void) {
    float A[4 * 32], W[32 * 6];
    tu_rand_f32(&rng, A, 128, -1, 1);
    tu_rand_f32(&rng, W, 192, -1, 1);
    int64_t ash[2] = {4, 32}, wsh[2] = {32, 6}, blk[1] = {8};
    ember_qscheme pt = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
    ember_qscheme pb = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk);
    ember_device devs[2] = {CL0, TU_CPU};
    float out[3][2][24];
    for (int w = 0; w < 2; w++) {
        ember_tensor *a = from_f32(devs[w], 2, ash, A), *wt = from_f32(devs[w], 2, wsh, W);
        ember_tensor *aq = NULL, *wq = NULL, *wq2 = NULL, *o[3] = {NULL, NULL, NULL};
        TU_OK(ember_quantize(wt, &pt, &wq));
        TU_OK(ember_quantize(a, &pb, &aq));
        TU_OK(ember_quantize(wt, &pt, &wq2));
        TU_OK(ember_q_matmul(a, wq, &o[0]));   /* (F, Q) */
        TU_OK(ember_q_matmul(aq, wt, &o[1]));  /* (Q, F) */
        TU_OK(ember_q_matmul(aq, wq2, &o[2])); /* (Q, Q), per-block lhs */
        for (int i = 0; i < 3; i++) {
            if (o[i]) {
                CU_ASSERT_EQUAL(ember_tensor_device(o[i]).backend, devs[w].backend);
                TU_OK(ember_tensor_read(o[i], out[i][w], sizeof out[i][w]));
            }
            ember_tensor_free(o[i]);
        }
        ember_tensor_free(a);
        ember_tensor_free(wt);
        ember_tensor_free(aq);
        ember_tensor_free(wq);
        ember_tensor_free(wq2);
    }
    for (int i = 0; i < 3; i++)
        CU_ASSERT_TRUE(close_to(out[i][0], out[i][1], 24, 1e-5f));
}

/* Allocation failures inside quantize: every one reported, nothing leaked. */
static void test_quantize_alloc_failures(void) {
    float x[40];
    tu_rand_f32(&rng, x, 40, -1.0f, 1.0f);
    int64_t sh[2] = {4, 10}, blk[1] = {5};
    ember_qscheme s = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk);
    ember_tensor *xt = from_f32(CL0, 2, sh, x), *q = qalloc(CL0, &s, 2, sh);
    /* warm the program cache first: its allocations live until shutdown */
    TU_OK(clops()->quantize(cls(), 0, xt, NULL, q));
    int ok = 0;
    for (long n = 1; n < 50 && !ok; n++) {
        long live = ember__alloc_live();
        ember__alloc_fail_at(n);
        ember_status st = clops()->quantize(cls(), 0, xt, NULL, q);
        ember__alloc_fail_at(0);
        CU_ASSERT_EQUAL(ember__alloc_live(), live);
        if (st == EMBER_OK)
            ok = 1;
        else
            CU_ASSERT_EQUAL(st, EMBER_ERR_OUT_OF_MEMORY);
    }
    CU_ASSERT_TRUE(ok);
    ember_tensor_free(xt);
    ember_tensor_free(q);
}

static int suite_init(void) {
    rng = tu_seed();
    return 0;
}

int main(void) {
    if (!getenv("EMBER_OPENCL_CACHE_DIR")) {
        mkdir("ember-cl-cache", 0755);
        setenv("EMBER_OPENCL_CACHE_DIR", "ember-cl-cache", 1);
    }
    if (ember_context_create(NULL, &ctx) != EMBER_OK) {
        fprintf(stderr, "context_create: %s\n", ember_last_error());
        return 1;
    }
    if (ember_device_count(ctx, EMBER_BACKEND_OPENCL) == 0) {
        fprintf(stderr, "test_opencl: no OpenCL device: skipped\n");
        ember_context_destroy(ctx);
        return 77;
    }
    CU_TestInfo devices[] = {{"describe", test_describe},
                             {"supports and holds", test_supports},
                             {"upload / download", test_upload_download},
                             CU_TEST_INFO_NULL};
    CU_TestInfo f32ops[] = {{"gemm_f32 vs cpu and f64", test_gemm},
                            {"binary_f32 broadcast vs cpu", test_binary},
                            {"sum_rows_f32 vs cpu", test_sum_rows},
                            {"convert bf16 / f16 vs half.c", test_convert},
                            {"public float ops vs cpu", test_api_float},
                            {"to_device round trips", test_api_transfer},
                            CU_TEST_INFO_NULL};
    CU_TestInfo quant[] = {{"golden vectors (spec 6)", test_quant_golden},
                           {"every scheme, random data", test_quant_random},
                           {"both absmax kernels", test_quant_absmax_kernels},
                           {"software division", test_quant_soft_div},
                           {"NaN / Inf input", test_quant_non_finite},
                           {"q_matmul int8 exact", test_q_matmul},
                           {"q_matmul per-row / per-column int8", test_q_matmul_per_channel},
                           {"q_matmul golden and fallbacks", test_q_matmul_golden},
                           {"q_matmul (F,Q) (Q,F) per-block vs cpu", test_q_matmul_fallbacks},
                           {"quantize allocation failures", test_quantize_alloc_failures},
                           CU_TEST_INFO_NULL};
    CU_SuiteInfo suites[] = {{"opencl devices", suite_init, NULL, NULL, NULL, devices},
                             {"opencl f32 ops", suite_init, NULL, NULL, NULL, f32ops},
                             {"opencl quantization", suite_init, NULL, NULL, NULL, quant},
                             CU_SUITE_INFO_NULL};
    int rc = tu_run("test_opencl", suites);
    ember_context_destroy(ctx);
    return rc;
}
