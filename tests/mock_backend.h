/* tests/mock_backend.h: a second backend for the dispatcher's tests, so that every cross-backend
 * and cross-device guard runs without an OpenCL device (CI without PoCL, ASan builds).
 *
 * mock_context() makes a CPU-only context and installs, in its empty OpenCL slot, a copy of the
 * CPU backend's vtable that differs where the guards look:
 *   - kind EMBER_BACKEND_OPENCL, name "mock", two devices (opencl:0 and opencl:1);
 *   - it cannot hold F16 or BF16 (as an OpenCL device without cl_khr_fp16): DTYPE_TRANSFER;
 *   - it cannot hold E5M2-quantized tensors (a scheme its kernels lack);
 *   - no host pointer, so moves go through download / upload (and a staging buffer between two
 *     mock devices), and it counts sync() and download() calls per device;
 *   - download can be made to fail (mock.fail_download) like a failed OpenCL read.
 * Its buffers are host memory from the ember allocator, so the CPU's compute entries work on them
 * unchanged. Test code only: it reaches into the private structs. */
#ifndef EMBER_TEST_MOCK_BACKEND_H
#define EMBER_TEST_MOCK_BACKEND_H

#include "../dispatch/internal.h"
#include "test_util.h"

extern const ember_backend_ops ember__cpu_ops;

static struct {
    int sync[2], download[2];
    int fail_download;
    ember_backend_ops ops;
} mock;

#define MOCK0 ((ember_device){EMBER_BACKEND_OPENCL, 0})
#define MOCK1 ((ember_device){EMBER_BACKEND_OPENCL, 1})

static inline int mock_device_count(void *state) {
    (void)state;
    return 2;
}

static inline int mock_holds(void *state, int dev, ember_dtype dt, const ember_qscheme *s) {
    (void)state;
    (void)dev;
    if (dt == EMBER_QFLOAT && s && s->value == EMBER_E5M2)
        return 0;
    return (unsigned)dt < EMBER_DTYPE_COUNT && dt != EMBER_F16 && dt != EMBER_BF16;
}

static inline ember_status mock_sync(void *state, int dev) {
    (void)state;
    mock.sync[dev]++;
    return EMBER_OK;
}

static inline ember_status mock_download(void *state, int dev, const void *buf, size_t off,
                                         void *dst, size_t bytes) {
    (void)state;
    if (mock.fail_download)
        EMBER_FAIL(EMBER_ERR_DEVICE, "mock: clEnqueueReadBuffer failed (CL_OUT_OF_RESOURCES)");
    mock.download[dev]++;
    memcpy(dst, (const char *)buf + off, bytes);
    return EMBER_OK;
}

static inline void mock_reset_counters(void) {
    memset(mock.sync, 0, sizeof mock.sync);
    memset(mock.download, 0, sizeof mock.download);
    mock.fail_download = 0;
}

/* A CPU-only context with the mock backend as "opencl" (two devices). */
static inline ember_context *mock_context(void) {
    ember_context *ctx = tu_cpu_context();
    mock.ops = ember__cpu_ops;
    mock.ops.name = "mock";
    mock.ops.kind = EMBER_BACKEND_OPENCL;
    mock.ops.device_count = mock_device_count;
    mock.ops.holds = mock_holds;
    mock.ops.supports = NULL;
    mock.ops.sync = mock_sync;
    mock.ops.download = mock_download;
    mock.ops.host_ptr = NULL;
    mock.ops.q_matmul = NULL;
    void *state = NULL;
    if (ember__cpu_ops.init(ctx, &ctx->opts, &state) != EMBER_OK)
        CU_FAIL_FATAL("mock backend: init failed");
    ctx->be[EMBER_BACKEND_OPENCL].ops = &mock.ops;
    ctx->be[EMBER_BACKEND_OPENCL].state = state;
    mock_reset_counters();
    return ctx;
}

/* ---- helpers shared by the guard tests ---- */

/* A tensor's observable state, to assert that a refused call left its inputs untouched. */
typedef struct snap {
    ember_dtype dtype;
    ember_device device;
    ember_autodiff autodiff;
    int rank;
    int64_t shape[EMBER_MAX_RANK];
    size_t nbytes;
    unsigned char *bytes; /* the raw buffer, read through the backend */
} snap;

static inline void snap_take(const ember_tensor *t, snap *s) {
    memset(s, 0, sizeof *s);
    s->dtype = t->dtype;
    s->device = t->device;
    s->autodiff = t->autodiff;
    s->rank = t->rank;
    memcpy(s->shape, t->shape, sizeof s->shape);
    s->nbytes = t->nbytes;
    s->bytes = malloc(t->nbytes + 1);
    const ember_backend_ops *ops = t->ctx->be[t->device.backend].ops;
    int saved = mock.fail_download;
    mock.fail_download = 0;
    if (t->nbytes)
        ops->download(t->ctx->be[t->device.backend].state, t->device.index, t->buf, 0, s->bytes,
                      t->nbytes);
    mock.fail_download = saved;
}

/* CU-asserts that t still matches s, then frees s. */
static inline void snap_check(const ember_tensor *t, snap *s) {
    CU_ASSERT_EQUAL(t->magic, EMBER__TENSOR_MAGIC);
    CU_ASSERT_EQUAL(t->dtype, s->dtype);
    CU_ASSERT_EQUAL(t->device.backend, s->device.backend);
    CU_ASSERT_EQUAL(t->device.index, s->device.index);
    CU_ASSERT_EQUAL(t->autodiff, s->autodiff);
    CU_ASSERT_EQUAL(t->rank, s->rank);
    CU_ASSERT(memcmp(t->shape, s->shape, sizeof s->shape) == 0);
    CU_ASSERT_EQUAL(t->nbytes, s->nbytes);
    unsigned char *now = malloc(s->nbytes + 1);
    const ember_backend_ops *ops = t->ctx->be[t->device.backend].ops;
    int saved = mock.fail_download;
    mock.fail_download = 0;
    if (s->nbytes)
        ops->download(t->ctx->be[t->device.backend].state, t->device.index, t->buf, 0, now,
                      s->nbytes);
    mock.fail_download = saved;
    CU_ASSERT(memcmp(now, s->bytes, s->nbytes) == 0);
    free(now);
    free(s->bytes);
    s->bytes = NULL;
}

static inline ember_tensor *mk_f32(ember_context *ctx, ember_device dev, int rank,
                                   const int64_t *shape, uint64_t *rng) {
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)shape[i];
    float *x = malloc((n ? n : 1) * sizeof *x);
    tu_rand_f32(rng, x, n, -2.0f, 2.0f);
    ember_tensor *t = NULL;
    TU_OK(ember_tensor_from_data(ctx, dev, EMBER_F32, rank, shape, x, &t));
    free(x);
    return t;
}

/* A random F32 tensor quantized with scheme s on dev (NULL and a CU failure if that fails). */
static inline ember_tensor *mk_q(ember_context *ctx, ember_device dev, const ember_qscheme *s,
                                 int rank, const int64_t *shape, uint64_t *rng) {
    ember_tensor *f = mk_f32(ctx, dev, rank, shape, rng);
    ember_tensor *q = NULL;
    TU_OK(ember_quantize(f, s, &q));
    ember_tensor_free(f);
    return q;
}

#endif
