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
#include "test_util.h"

/* A little-endian u32 read from any address (the bytes of a serialized tensor are unaligned). */
static uint32_t le32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

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
    TU_OK(o->download(ctx->be[t->device.backend].state, t->device.index, t->buf, 0, dst,
                      t->nbytes));
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
    size_t asz = (size_t)(batch * m * k), bsz = (size_t)(batch * k * n), csz = (size_t)(batch * m * n);
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
                double tol = 4.0 * (double)(k + 2) * FLT_EPSILON * (fabs(alpha) * mag + fabs(beta * C0[o]));
                for (int w = 0; w < 2; w++)
                    if (fabs(outs[w][o] - ref) > tol + 1e-30) {
                        fprintf(stderr, "  gemm ta%d tb%d %lldx%lldx%lld: %s C[%zu] = %.9g, ref %.9g\n",
                                ta, tb, (long long)m, (long long)n, (long long)k,
                                w ? "cpu" : "opencl", o, outs[w][o], ref);
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

static void test_gemm(void) {
    gemm_case(0, 0, 37, 53, 29, 1, 1.0f, 0.0f);    /* ragged edges in every dimension */
    gemm_case(1, 0, 65, 17, 70, 2, 1.0f, 0.0f);    /* trans_a, batch with offsets */
    gemm_case(0, 1, 8, 130, 33, 3, 0.5f, 2.0f);    /* trans_b, alpha and beta */
    gemm_case(1, 1, 1, 1, 1, 1, 1.0f, 0.0f);
    gemm_case(0, 0, 3, 4, 0, 1, 1.0f, 1.5f);       /* k = 0: C = beta * C */
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
        TU_OK(ctx->be[devs[w].backend].ops->sum_rows_f32(ctx->be[devs[w].backend].state, 0, x,
                                                          rows, cols, o));
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
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -3e-39f, 65504.0f,
                             65520.0f, 6.1e-5f, 5.96e-8f, 2.98e-8f, 1.0f + 0x1p-8f, 1.0f + 0x1p-11f,
                             3.0f + 0x1p-10f, FLT_MAX, FLT_MIN};
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

/* ---------------------------------------------------------------- quantization */

/* Scheme facts for the host reference (written from spec §4, independently of cl_quant.c). */
static int qbits(ember_qvalue v) {
    return (v == EMBER_Q8F || v == EMBER_Q8S || v == EMBER_E4M3 || v == EMBER_E5M2) ? 8
           : (v == EMBER_Q2F || v == EMBER_Q2S)                                  ? 2
                                                                                 : 4;
}
static void qrange(ember_qvalue v, float *a, float *b) {
    static const float r[EMBER_QVALUE_COUNT][2] = {
        {-128, 127}, {-127, 127}, {-8, 7}, {-7, 7}, {-2, 1}, {-1, 1}, {-448, 448}, {-57344, 57344},
        {-6, 6}};
    *a = r[v][0];
    *b = r[v][1];
}
static int is_fp(ember_qvalue v) { return v == EMBER_E4M3 || v == EMBER_E5M2 || v == EMBER_E2M1; }
static int per_unit(const ember_qscheme *s) {
    return s->store == EMBER_QSTORE_PACKED_U32 ? 32 / qbits(s->value)
           : s->store == EMBER_QSTORE_PACKED_NATIVE ? 2
                                                   : 1;
}
static ember_scale_dtype sdt(const ember_qscheme *s) {
    return s->block_rank ? s->block_scale : s->tensor_scale;
}

/* The minifloat value of a code (formula), for the brute-force encoder and the decoder. */
static float mf_value(ember_qvalue v, uint32_t code) {
    int bits = v == EMBER_E2M1 ? 4 : 8, mb = v == EMBER_E4M3 ? 3 : v == EMBER_E5M2 ? 2 : 1;
    int bias = v == EMBER_E4M3 ? 7 : v == EMBER_E5M2 ? 15 : 1;
    int eb = bits - 1 - mb;
    uint32_t sign = code >> (bits - 1), e = (code >> mb) & ((1u << eb) - 1), m = code & ((1u << mb) - 1);
    float val;
    if (v == EMBER_E4M3 && e == 15 && m == 7)
        val = NAN;
    else if (v == EMBER_E5M2 && e == 31)
        val = m ? NAN : INFINITY;
    else
        val = e ? ldexpf(1.0f + (float)m / (float)(1 << mb), (int)e - bias)
                : ldexpf((float)m / (float)(1 << mb), 1 - bias);
    return sign ? -val : val;
}

/* Nearest code by exhaustive search, ties to the even code; the sign of zero kept. */
static uint32_t mf_encode_ref(ember_qvalue v, float x) {
    int bits = v == EMBER_E2M1 ? 4 : 8;
    uint32_t best = 0;
    double bd = INFINITY;
    for (uint32_t c = 0; c < (1u << (bits - 1)); c++) {
        float val = mf_value(v, c);
        if (isnan(val) || isinf(val))
            continue;
        double dd = fabs((double)fabsf(x) - (double)val);
        if (dd < bd || (dd == bd && !(c & 1u))) {
            bd = dd;
            best = c;
        }
    }
    return signbit(x) ? best | (1u << (bits - 1)) : best;
}

typedef struct qlay {
    size_t values_bytes, nscales, ssize, scales_off, global_off, global_bytes, total;
    int64_t block[EMBER_MAX_RANK], grid[EMBER_MAX_RANK];
} qlay;

static qlay qlayout(const ember_qscheme *s, int rank, const int64_t *shape) {
    qlay l;
    memset(&l, 0, sizeof l);
    int64_t L = shape[rank - 1], rows = 1;
    for (int d = 0; d < rank - 1; d++)
        rows *= shape[d];
    int per = per_unit(s);
    int64_t units = (L + per - 1) / per;
    l.values_bytes = (size_t)(rows * units * (s->store == EMBER_QSTORE_PACKED_U32 ? 4 : 1));
    l.nscales = 1;
    for (int d = 0; d < rank; d++) {
        int j = d - (rank - s->block_rank);
        l.block[d] = s->block_rank ? (j >= 0 ? s->block[j] : 1) : shape[d];
        l.grid[d] = s->block_rank ? (shape[d] + l.block[d] - 1) / l.block[d] : 1;
        l.nscales *= (size_t)l.grid[d];
    }
    l.ssize = ember__cl_scale_size(sdt(s));
    l.scales_off = l.values_bytes;
    l.global_off = l.scales_off + l.nscales * l.ssize;
    l.global_bytes = (s->block_rank && s->tensor_level) ? 4 : 0;
    l.total = l.global_off + l.global_bytes;
    return l;
}

static size_t block_of(size_t i, int rank, const int64_t *shape, const qlay *l) {
    size_t b = 0, stride = 1;
    for (int d = rank - 1; d >= 0; d--) {
        size_t c = i % (size_t)shape[d];
        i /= (size_t)shape[d];
        b += (c / (size_t)l->block[d]) * stride;
        stride *= (size_t)l->grid[d];
    }
    return b;
}

/* An unfilled quantized tensor on dev with burn's layout. */
static ember_tensor *qalloc(ember_device dev, const ember_qscheme *s, int rank,
                            const int64_t *shape) {
    qlay l = qlayout(s, rank, shape);
    ember_tensor *t = NULL;
    TU_OK(ember__tensor_alloc(ctx, dev, EMBER_QFLOAT, rank, shape, l.total, &t));
    if (!t)
        return NULL;
    t->scheme = *s;
    t->q.values_bytes = l.values_bytes;
    t->q.scales_offset = l.scales_off;
    t->q.scale_size = l.ssize;
    t->q.nscales = l.nscales;
    t->q.global_offset = l.global_off;
    t->q.global_bytes = l.global_bytes;
    t->q.total_bytes = l.total;
    return t;
}

/* The host reference: quantize x (numel values, shape) into bytes[l.total] and dequantize them
 * into deq[]. Scales through ember__cl_scales_finish (checked against burn's vectors below). */
static void ref_quantize(const ember_qscheme *s, int rank, const int64_t *shape, const float *x,
                         const float *static_scales, uint8_t *bytes, float *deq) {
    qlay l = qlayout(s, rank, shape);
    size_t numel = 1;
    for (int d = 0; d < rank; d++)
        numel *= (size_t)shape[d];
    float a, b;
    qrange(s->value, &a, &b);
    float *raw = calloc(l.nscales, 4), *eff = calloc(l.nscales, 4);
    for (size_t i = 0; i < numel; i++) {
        size_t bl = block_of(i, rank, shape, &l);
        raw[bl] = fmaxf(raw[bl], fabsf(x[i]));
    }
    for (size_t i = 0; i < l.nscales; i++)
        raw[i] = static_scales ? static_scales[i] : (2.0f * raw[i]) / (b - a);
    float g;
    memset(bytes, 0, l.total);
    ember__cl_scales_finish(s, raw, l.nscales, bytes + l.scales_off, &g, eff);
    if (l.global_bytes)
        memcpy(bytes + l.global_off, &g, 4);
    int bits = qbits(s->value), per = per_unit(s);
    int64_t L = shape[rank - 1], U = (L + per - 1) / per;
    int ub = s->store == EMBER_QSTORE_PACKED_U32 ? 4 : 1;
    uint32_t mask = (1u << bits) - 1u;
    for (size_t i = 0; i < numel; i++) {
        size_t bl = block_of(i, rank, shape, &l);
        float v = x[i] / eff[bl], qv;
        uint32_t field;
        if (is_fp(s->value)) {
            field = mf_encode_ref(s->value, fminf(fmaxf(v, a), b));
            qv = mf_value(s->value, field);
        } else {
            int32_t qi = (int32_t)fminf(fmaxf(roundf(v), a), b);
            field = (uint32_t)qi & mask;
            qv = (float)qi; /* the stored integer: no -0 */
        }
        deq[i] = eff[bl] * qv;
        size_t r = i / (size_t)L, c = i % (size_t)L;
        size_t unit = r * (size_t)U + c / (size_t)per, j = c % (size_t)per;
        uint32_t sh = (uint32_t)j * (uint32_t)bits;
        uint8_t *p = bytes + unit * (size_t)ub + sh / 8;
        *p = (uint8_t)(*p | (uint8_t)(field << (sh % 8)));
    }
    free(raw);
    free(eff);
}

/* Quantize x on opencl:0 (static scales when given), compare the bytes with the reference,
 * dequantize and compare bit for bit. Returns the quantized tensor's bytes in out_bytes if given. */
static void q_roundtrip(const ember_qscheme *s, int rank, const int64_t *shape, const float *x,
                        const float *static_scales, uint8_t *out_bytes) {
    qlay l = qlayout(s, rank, shape);
    size_t numel = 1;
    for (int d = 0; d < rank; d++)
        numel *= (size_t)shape[d];
    uint8_t *want = malloc(l.total + 1), *got = malloc(l.total + 1);
    float *deq_want = malloc(numel * 4 + 4), *deq_got = malloc(numel * 4 + 4);
    ref_quantize(s, rank, shape, x, static_scales, want, deq_want);
    ember_tensor *xt = from_f32(CL0, rank, shape, x), *st = NULL;
    if (static_scales) {
        int64_t gsh[EMBER_MAX_RANK];
        memcpy(gsh, l.grid, sizeof gsh);
        st = from_f32(CL0, rank, gsh, static_scales);
    }
    ember_tensor *q = qalloc(CL0, s, rank, shape);
    TU_OK(clops()->quantize(cls(), 0, xt, st, q));
    read_raw(q, got);
    int same = memcmp(got, want, l.total) == 0;
    if (!same) {
        for (size_t i = 0; i < l.total; i++)
            if (got[i] != want[i]) {
                fprintf(stderr, "  %s/%s block_rank %d: byte %zu of %zu: got %02x want %02x\n",
                        ember_qvalue_name(s->value), ember_qstore_name(s->store), s->block_rank, i,
                        l.total, got[i], want[i]);
                break;
            }
    }
    CU_ASSERT_TRUE(same);
    ember_tensor *d = alloc_t(CL0, EMBER_F32, rank, shape);
    TU_OK(clops()->dequantize(cls(), 0, q, d));
    TU_OK(ember_tensor_read(d, deq_got, numel * 4));
    CU_ASSERT_TRUE(bits_equal(deq_got, deq_want, numel));
    if (out_bytes)
        memcpy(out_bytes, got, l.total);
    ember_tensor_free(xt);
    ember_tensor_free(st);
    ember_tensor_free(q);
    ember_tensor_free(d);
    free(want);
    free(got);
    free(deq_want);
    free(deq_got);
}

static float f32_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
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
    CU_ASSERT_EQUAL(le32(bytes + 8), 0x3F800000u);
    /* T2: burn's test, serialized bytes 81 b9 00 23 d4 36 68 3c */
    const float t2[4] = {-1.8f, -1.0f, 0.0f, 0.5f};
    const uint8_t t2b[8] = {0x81, 0xb9, 0x00, 0x23, 0xd4, 0x36, 0x68, 0x3c};
    q_roundtrip(&q8s, 1, s4, t2, NULL, bytes);
    CU_ASSERT_EQUAL(memcmp(bytes, t2b, 8), 0);
    /* T5 zeros: the stored scale is FLT_MIN */
    const float t5[4] = {0, 0, 0, 0};
    q_roundtrip(&q8s, 1, s4, t5, NULL, bytes);
    CU_ASSERT_EQUAL(le32(bytes + 4), 0x00800000u);
    /* T6 */
    const float t6[6] = {0, 1, 2, 3, 4, 5};
    const int8_t t6q[6] = {0, 25, 51, 76, 102, 127};
    q_roundtrip(&q8s, 1, s6, t6, NULL, bytes);
    CU_ASSERT_EQUAL(memcmp(bytes, t6q, 6), 0);
    CU_ASSERT_EQUAL(le32(bytes + 6), 0x3D214285u);
    /* T7 Q8F */
    ember_qscheme q8f = ember_qscheme_per_tensor(EMBER_Q8F, EMBER_QSTORE_NATIVE);
    const float t7[4] = {-1, 0.5f, 1, -0.25f};
    const int8_t t7q[4] = {-127, 64, 127, -32};
    q_roundtrip(&q8f, 1, s4, t7, NULL, bytes);
    CU_ASSERT_EQUAL(memcmp(bytes, t7q, 4), 0);
    CU_ASSERT_EQUAL(le32(bytes + 4), 0x3C008081u);
    /* T8 Q4S packed: word 0x175320D9 */
    ember_qscheme q4s = ember_qscheme_per_tensor(EMBER_Q4S, EMBER_QSTORE_PACKED_U32);
    const float t8[8] = {-1, -0.5f, 0, 0.25f, 0.5f, 0.75f, 1, 0.1f};
    q_roundtrip(&q4s, 1, s8, t8, NULL, bytes);
    CU_ASSERT_EQUAL(le32(bytes), 0x175320D9u);
    CU_ASSERT_EQUAL(le32(bytes + 4), 0x3E124925u);
    /* T9 Q4F, T10 Q2S (word 0x00003443), T11 Q2F */
    ember_qscheme q4f = ember_qscheme_per_tensor(EMBER_Q4F, EMBER_QSTORE_PACKED_U32);
    q_roundtrip(&q4f, 1, s8, t8, NULL, bytes);
    CU_ASSERT_EQUAL(le32(bytes + 4), 0x3E088889u);
    const float t10[8] = {-0.9f, -0.4f, 0, 0.6f, 0.3f, 1, -1, 0.49f};
    ember_qscheme q2s = ember_qscheme_per_tensor(EMBER_Q2S, EMBER_QSTORE_PACKED_U32);
    q_roundtrip(&q2s, 1, s8, t10, NULL, bytes);
    CU_ASSERT_EQUAL(le32(bytes), 0x00003443u);
    ember_qscheme q2f = ember_qscheme_per_tensor(EMBER_Q2F, EMBER_QSTORE_PACKED_U32);
    q_roundtrip(&q2f, 1, s8, t10, NULL, bytes);
    CU_ASSERT_EQUAL(le32(bytes + 4), 0x3F2AAAABu);
    /* §6.4: Q8S packed, 5 values: words 0x7FFD0280, 0x00000037 (zero-padded) via static scale 1 */
    ember_qscheme q8p = ember_qscheme_per_tensor(EMBER_Q8F, EMBER_QSTORE_PACKED_U32);
    const float p5[5] = {-128, 2, -3, 127, 55}, one = 1.0f;
    q_roundtrip(&q8p, 1, s5, p5, &one, bytes);
    CU_ASSERT_EQUAL(le32(bytes), 0x7FFD0280u);
    CU_ASSERT_EQUAL(le32(bytes + 4), 0x00000037u);
    /* B1: per_block([4]) on [2,4] */
    int64_t s24[2] = {2, 4}, blk4[1] = {4}, blk22[2] = {2, 2};
    ember_qscheme b1 = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, blk4);
    const float xb1[8] = {1, -2, 0.5f, 4, 0.1f, 0.2f, -0.3f, 0.05f};
    const int8_t b1q[8] = {32, -64, 16, 127, 42, 85, -127, 21};
    q_roundtrip(&b1, 2, s24, xb1, NULL, bytes);
    CU_ASSERT_EQUAL(memcmp(bytes, b1q, 8), 0);
    CU_ASSERT_EQUAL(le32(bytes + 12), 0x3B1ACF38u);
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
    CU_ASSERT_EQUAL(le32(bytes + 10), 0x38937005u);
    (void)f32_of;
}

/* Every scheme the quant issue names, random data, against the reference: per-tensor, per-block
 * (1-D and 2-D blocks, every scale dtype), two-level, static scales; ragged packed rows. */
static void test_quant_random(void) {
    static const struct {
        ember_qvalue v;
        ember_qstore s;
    } kinds[] = {{EMBER_Q8F, EMBER_QSTORE_NATIVE},     {EMBER_Q8S, EMBER_QSTORE_NATIVE},
                 {EMBER_Q8S, EMBER_QSTORE_PACKED_U32}, {EMBER_Q4F, EMBER_QSTORE_PACKED_U32},
                 {EMBER_Q4S, EMBER_QSTORE_PACKED_U32}, {EMBER_Q2F, EMBER_QSTORE_PACKED_U32},
                 {EMBER_Q2S, EMBER_QSTORE_PACKED_U32}, {EMBER_E4M3, EMBER_QSTORE_NATIVE},
                 {EMBER_E5M2, EMBER_QSTORE_NATIVE},    {EMBER_E4M3, EMBER_QSTORE_PACKED_U32},
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
    q_roundtrip(&sb, 3, shape, x, ss, NULL);
    /* larger tensor per-tensor: many work-groups in the reduction's single block */
    int64_t big[2] = {64, 300};
    float *xb = malloc(64 * 300 * 4);
    tu_rand_f32(&rng, xb, 64 * 300, -100.0f, 100.0f);
    ember_qscheme q8 = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    q_roundtrip(&q8, 2, big, xb, NULL, NULL);
    free(xb);
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
                R[(bi * m + i) * n + j] = (float)acc * (sa * sb);
            }
    CU_ASSERT_TRUE(bits_equal(O, R, no));
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
    qmm_case(EMBER_Q8S, EMBER_QSTORE_NATIVE, EMBER_Q8S, EMBER_QSTORE_NATIVE, 1, 45, 70, 100);
    qmm_case(EMBER_Q8F, EMBER_QSTORE_PACKED_U32, EMBER_Q8S, EMBER_QSTORE_PACKED_U32, 2, 9, 13, 31);
    qmm_case(EMBER_Q8S, EMBER_QSTORE_NATIVE, EMBER_Q8F, EMBER_QSTORE_PACKED_U32, 1, 1, 67, 64);
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
                            CU_TEST_INFO_NULL};
    CU_TestInfo quant[] = {{"golden vectors (spec 6)", test_quant_golden},
                           {"every scheme, random data", test_quant_random},
                           {"NaN / Inf input", test_quant_non_finite},
                           {"q_matmul int8 exact", test_q_matmul},
                           {"q_matmul golden and fallbacks", test_q_matmul_golden},
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
