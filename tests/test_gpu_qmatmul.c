/* tests/test_gpu_qmatmul.c: the NVIDIA tensor-core paths of q_matmul ("wgmma", "mma"; forced with
 * EMBER_OPENCL_KERNEL) against the exact reference, on the bench shapes and on edge shapes (M, N, K
 * not multiples of any tile, M = 1, batch 2), fresh random data each run.
 *
 * Per path: a context is created with EMBER_OPENCL_KERNEL=<path>; the first OpenCL device whose
 * int8_matmul_path is that path's label is used (exit 77 when no NVIDIA device offers "mma").
 * Operands are quantized per tensor (Q8S) on the GPU through the public API, the product is taken
 * with ember_q_matmul, and every output element (small shapes) or 4096 random elements (bench
 * shapes) must equal 0 + (sa * sb) * (float)acc bit for bit, acc the exact int32 sum of the stored
 * int8 values (the CPU backend's epilogue). When the CPU backend has the integer path too, the
 * whole output must also equal the CPU's, bit for bit. Per-row / per-column scales (two-level F16
 * too) are checked the same way against the stored values and effective scales. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dispatch/internal.h"
#include "quant/quant_impl.h"
#include "test_util.h"

static ember_context *ctx;
static ember_device gpu;
static uint64_t rng;
static const char *path_name, *path_label;

static void read_raw(const ember_tensor *t, void *dst) {
    const ember_backend_ops *o = ctx->be[t->device.backend].ops;
    TU_OK(
        o->download(ctx->be[t->device.backend].state, t->device.index, t->buf, 0, dst, t->nbytes));
}

/* Elements of O (batch x m x n) that differ from 0 + (sa * sb) * (float)acc, acc the exact int32
 * sum of the stored int8 values of qa (batch x m x k) and qb (batch x k x n, or one k x n matrix
 * for every batch entry when bcast_b); all elements (full) or 4096 sampled. */
static long exact_errors(const ember_tensor *qa, const ember_tensor *qb, const float *O,
                         int64_t batch, int64_t m, int64_t n, int64_t k, int full, int bcast_b) {
    size_t no = (size_t)(batch * m * n);
    int8_t *ab = malloc(qa->nbytes), *bb = malloc(qb->nbytes);
    read_raw(qa, ab);
    read_raw(qb, bb);
    float sa, sb;
    memcpy(&sa, ab + qa->q.scales_offset, 4);
    memcpy(&sb, bb + qb->q.scales_offset, 4);
    long bad = 0, checked = (long)(full ? no : 4096);
    for (long c = 0; c < checked; c++) {
        size_t idx = full ? (size_t)c : (size_t)(((uint64_t)rand() << 31 ^ (uint64_t)rand()) % no);
        int64_t bi = (int64_t)idx / (m * n), i = ((int64_t)idx / n) % m, j = (int64_t)idx % n;
        int32_t acc = 0;
        for (int64_t p = 0; p < k; p++)
            acc += (int32_t)ab[(bi * m + i) * k + p] *
                   (int32_t)bb[((bcast_b ? 0 : bi) * k + p) * n + j];
        volatile float prod = sa * sb;
        volatile float term = prod * (float)acc;
        float want = 0.0f + term;
        if (memcmp(&want, &O[idx], 4) != 0) {
            if (bad < 3)
                fprintf(stderr, "  %s %lldx%lldx%lldx%lld: out[%zu] = %.9g, want %.9g\n", path_name,
                        (long long)batch, (long long)m, (long long)n, (long long)k, idx, O[idx],
                        want);
            bad++;
        }
    }
    free(ab);
    free(bb);
    return bad;
}

static void one_case(int64_t batch, int64_t m, int64_t n, int64_t k, int full) {
    size_t na = (size_t)(batch * m * k), nb = (size_t)(batch * k * n), no = (size_t)(batch * m * n);
    float *A = malloc(na * 4), *B = malloc(nb * 4), *O = malloc(no * 4);
    CU_ASSERT_FATAL(A && B && O);
    tu_rand_f32(&rng, A, na, -2.0f, 2.0f);
    tu_rand_f32(&rng, B, nb, -0.5f, 0.5f);
    int64_t ash[3] = {batch, m, k}, bsh[3] = {batch, k, n};
    ember_tensor *qa = NULL, *qb = NULL;
    tu_q8_matmul_nd(ctx, gpu, 3, ash, bsh, A, B, O, no * 4, &qa, &qb);
    CU_ASSERT_EQUAL(exact_errors(qa, qb, O, batch, m, n, k, full, 0), 0);
    if (ctx->be[EMBER_BACKEND_CPU].ops->q_matmul && m * n * k <= (int64_t)1 << 33) {
        /* the CPU backend from the same floats (quantization is bit-identical across backends) */
        float *P = malloc(no * 4);
        CU_ASSERT_FATAL(P != NULL);
        tu_q8_matmul_nd(ctx, TU_CPU, 3, ash, bsh, A, B, P, no * 4, NULL, NULL);
        CU_ASSERT_EQUAL(memcmp(P, O, no * 4), 0);
        free(P);
    }
    ember_tensor_free(qa);
    ember_tensor_free(qb);
    free(A);
    free(B);
    free(O);
}

/* Per-row lhs / per-column rhs scales (plain matrices): 0 + (sa[i / bm] * sb[j / bn]) * (float)acc
 * from the stored values and effective scales, all elements (full) or 4096 sampled. */
static void pc_case(const ember_qscheme *qa, const ember_qscheme *qb, int64_t m, int64_t n,
                    int64_t k, int64_t bm, int64_t bn, int full) {
    size_t na = (size_t)(m * k), nb = (size_t)(k * n), no = (size_t)(m * n);
    float *A = malloc(na * 4), *B = malloc(nb * 4), *O = malloc(no * 4);
    int8_t *av = malloc(na), *bv = malloc(nb);
    CU_ASSERT_FATAL(A && B && O && av && bv);
    tu_rand_f32(&rng, A, na, -2.0f, 2.0f);
    tu_rand_f32(&rng, B, nb, -0.5f, 0.5f);
    for (int64_t j = 0; j < k && m > 1; j++) /* row 1 much smaller: its scale differs a lot */
        A[k + j] *= 0.01f;
    int64_t ash[2] = {m, k}, bsh[2] = {k, n};
    ember_tensor *xa = NULL, *xb = NULL, *aq = NULL, *bq = NULL, *o = NULL;
    TU_OK(ember_tensor_from_data(ctx, gpu, EMBER_F32, 2, ash, A, &xa));
    TU_OK(ember_tensor_from_data(ctx, gpu, EMBER_F32, 2, bsh, B, &xb));
    TU_OK(ember_quantize(xa, qa, &aq));
    TU_OK(ember_quantize(xb, qb, &bq));
    TU_OK(ember_q_matmul(aq, bq, &o));
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    TU_OK(ember_tensor_read(o, O, no * 4));
    float *sa = malloc((size_t)aq->q.nscales * 4), *sb = malloc((size_t)bq->q.nscales * 4);
    TU_OK(ember_qtensor_values(aq, av, na));
    TU_OK(ember_qtensor_values(bq, bv, nb));
    TU_OK(ember__qtensor_effective_scales(aq, sa));
    TU_OK(ember__qtensor_effective_scales(bq, sb));
    long bad = 0, checked = (long)(full ? no : 4096);
    for (long c = 0; c < checked; c++) {
        size_t idx = full ? (size_t)c : (size_t)(((uint64_t)rand() << 31 ^ (uint64_t)rand()) % no);
        int64_t i = (int64_t)idx / n, j = (int64_t)idx % n;
        int32_t acc = 0;
        for (int64_t p = 0; p < k; p++)
            acc += (int32_t)av[i * k + p] * (int32_t)bv[p * n + j];
        volatile float f = sa[i / bm] * sb[j / bn];
        volatile float term = f * (float)acc;
        float want = 0.0f + term;
        if (memcmp(&want, &O[idx], 4) != 0) {
            if (bad < 3)
                fprintf(stderr, "  %s per-channel %lldx%lldx%lld: out[%zu] = %.9g, want %.9g\n",
                        path_name, (long long)m, (long long)n, (long long)k, idx, O[idx], want);
            bad++;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    ember_tensor *all[] = {xa, xb, aq, bq, o};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        ember_tensor_free(all[i]);
    free(sa);
    free(sb);
    free(av);
    free(bv);
    free(A);
    free(B);
    free(O);
}

static void test_per_channel(void) {
    /* burn's block dims stop at 255, so a scale that spans all of K needs K <= 255 */
    const int64_t K[3] = {200, 255, 255};
    ember_qscheme pt = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    for (int c = 0; c < 3; c++) {
        int64_t k = K[c];
        int64_t row[2] = {1, k}, row2[2] = {2, k}, col[2] = {k, 1}, col4[2] = {k, 4};
        ember_qscheme ar = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, row);
        ember_qscheme ar2 = ember_qscheme_per_block(EMBER_Q8F, EMBER_QSTORE_PACKED_U32, 2, row2);
        ember_qscheme bc = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, col);
        ember_qscheme bc4 = ember_qscheme_per_block(EMBER_Q8F, EMBER_QSTORE_PACKED_U32, 2, col4);
        bc4.block_scale = EMBER_SCALE_F16;
        bc4.tensor_level = 1; /* two-level: g * s_b */
        if (c == 0) {
            pc_case(&ar, &bc, 12, 40, k, 1, 1, 1);
            pc_case(&pt, &bc, 1, 40, k, 1, 1, 1);
            pc_case(&ar, &pt, 12, 40, k, 1, 40, 1);
            pc_case(&ar2, &bc4, 12, 40, k, 2, 4, 1);
        } else if (c == 1) {
            pc_case(&ar, &bc, 130, 260, k, 1, 1, 1);
            pc_case(&ar2, &bc4, 130, 260, k, 2, 4, 1);
        } else {
            pc_case(&ar, &bc, 512, 4096, k, 1, 1, 0);
            pc_case(&pt, &bc, 16, 4096, k, 16, 1, 0);
            pc_case(&pt, &bc, 1, 11008, k, 1, 1, 0);
        }
    }
}

static void test_edges(void) {
    one_case(1, 1, 8, 64, 1);
    one_case(1, 1, 1000, 1000, 1);
    one_case(1, 3, 77, 130, 1);
    one_case(1, 16, 33, 70, 1);
    one_case(1, 17, 200, 96, 1);
    one_case(1, 33, 129, 4100, 1);
    one_case(1, 130, 260, 272, 1);
    one_case(1, 300, 515, 2049, 1);
    one_case(2, 9, 13, 31, 1);
    one_case(2, 129, 70, 200, 1);
    /* >= 396 tiles of 64 x 256: the wgmma path's 64 x 256 kernel, with partial tiles on both axes
     */
    one_case(1, 1300, 4900, 100, 1);
}

static void test_bench_shapes(void) {
    one_case(1, 1, 4096, 4096, 0);
    one_case(1, 16, 4096, 4096, 0);
    one_case(1, 128, 4096, 4096, 0);
    one_case(1, 512, 4096, 4096, 0);
    one_case(1, 128, 11008, 4096, 0);
    one_case(1, 1, 11008, 4096, 0);
    one_case(1, 4096, 4096, 4096, 0);
}

/* The packed rhs kept in the tensor's pack cache (cl_qmatmul_mma.c): a weight W used by several
 * calls (two matrices, batch offsets; then broadcast over a batch of 3) is packed on the first
 * tensor-core call and reused; a call needing another layout (M = 1: the skinny kernel) packs its
 * own. Every result exact. */
static void test_pack_cache(void) {
    const int64_t k = 200, n = 300;
    ember_qscheme qs = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    for (int bc = 0; bc < 2; bc++) {
        const int64_t wb = bc ? 1 : 2, batch = bc ? 3 : 2;
        float *W = malloc((size_t)(wb * k * n) * 4);
        CU_ASSERT_FATAL(W != NULL);
        tu_rand_f32(&rng, W, (size_t)(wb * k * n), -0.5f, 0.5f);
        int64_t wsh[3] = {wb, k, n};
        ember_tensor *xw = NULL, *qw = NULL;
        TU_OK(
            ember_tensor_from_data(ctx, gpu, EMBER_F32, 3, wsh, W, &xw)); /* [1][k][n]: broadcast */
        TU_OK(ember_quantize(xw, &qs, &qw));
        CU_ASSERT_PTR_NULL(qw->pack.data);
        static const int64_t ms[] = {100, 100, 1, 40};
        for (size_t c = 0; c < sizeof ms / sizeof ms[0]; c++) {
            const int64_t m = ms[c];
            size_t na = (size_t)(batch * m * k), no = (size_t)(batch * m * n);
            float *A = malloc(na * 4), *O = malloc(no * 4);
            CU_ASSERT_FATAL(A && O);
            tu_rand_f32(&rng, A, na, -2.0f, 2.0f);
            int64_t ash[3] = {batch, m, k};
            ember_tensor *xa = NULL, *qa = NULL, *o = NULL;
            TU_OK(ember_tensor_from_data(ctx, gpu, EMBER_F32, 3, ash, A, &xa));
            TU_OK(ember_quantize(xa, &qs, &qa));
            TU_OK(ember_q_matmul(qa, qw, &o));
            CU_ASSERT_PTR_NOT_NULL_FATAL(o);
            TU_OK(ember_tensor_read(o, O, no * 4));
            CU_ASSERT_EQUAL(exact_errors(qa, qw, O, batch, m, n, k, 1, bc), 0);
            if (c == 0)
                CU_ASSERT_PTR_NOT_NULL(qw->pack.data); /* filled by the first call */
            ember_tensor_free(xa);
            ember_tensor_free(qa);
            ember_tensor_free(o);
            free(A);
            free(O);
        }
        ember_tensor_free(xw);
        ember_tensor_free(qw);
        free(W);
    }
}

static int suite_init(void) {
    rng = tu_seed();
    srand((unsigned)rng);
    return 0;
}

/* A context with EMBER_OPENCL_KERNEL=name, and its first device on that path; 0 if none. */
static int open_path(const char *name, const char *label) {
    setenv("EMBER_OPENCL_KERNEL", name, 1);
    if (ember_context_create(NULL, &ctx) != EMBER_OK) {
        fprintf(stderr, "context_create: %s\n", ember_last_error());
        return -1;
    }
    int nd = ember_device_count(ctx, EMBER_BACKEND_OPENCL);
    for (int i = 0; i < nd; i++) {
        ember_device d = {EMBER_BACKEND_OPENCL, i};
        ember_device_info info;
        if (ember_device_describe(ctx, d, &info) == EMBER_OK &&
            (strcmp(info.int8_matmul_path, label) == 0 || getenv("EMBER_TEST_GPU_ANY"))) {
            fprintf(stderr, "\n  opencl:%d = %s | %s | int8 %s\n", i, info.name, info.driver,
                    info.int8_matmul_path);
            gpu = d;
            path_name = name;
            path_label = label;
            return 1;
        }
    }
    ember_context_destroy(ctx);
    ctx = NULL;
    return 0;
}

int main(void) {
    if (!getenv("EMBER_OPENCL_CACHE_DIR")) {
        mkdir("ember-cl-cache", 0755);
        setenv("EMBER_OPENCL_CACHE_DIR", "ember-cl-cache", 1);
    }
    static const char *const paths[2][2] = {{"wgmma", "opencl.wgmma_sm90a"},
                                            {"mma", "opencl.mma_sm80"}};
    int ran = 0, rc = 0;
    for (int p = 0; p < 2; p++) {
        int got = open_path(paths[p][0], paths[p][1]);
        if (got < 0)
            return 1;
        if (!got) {
            fprintf(stderr, "test_gpu_qmatmul: no device on path %s\n", paths[p][0]);
            continue;
        }
        ran++;
        CU_TestInfo tests[] = {{"edge shapes, exact", test_edges},
                               {"per-row / per-column scales, exact", test_per_channel},
                               {"bench shapes, exact (sampled)", test_bench_shapes},
                               {"packed rhs cached across calls", test_pack_cache},
                               CU_TEST_INFO_NULL};
        char suite[64];
        snprintf(suite, sizeof suite, "q_matmul on %s", path_label);
        CU_SuiteInfo suites[] = {{suite, suite_init, NULL, NULL, NULL, tests}, CU_SUITE_INFO_NULL};
        rc |= tu_run("test_gpu_qmatmul", suites);
        ember_context_destroy(ctx);
        ctx = NULL;
    }
    if (!ran) {
        fprintf(stderr, "test_gpu_qmatmul: no NVIDIA tensor-core OpenCL device: skipped\n");
        return 77;
    }
    return rc;
}
