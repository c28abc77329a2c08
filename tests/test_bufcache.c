/* tests/test_bufcache.c: the CPU backend's cache of freed tensor buffers
 * (backends/cpu/cpu_bufcache.c) and ember_context_trim.
 *
 * Checks: a freed buffer of 256 KiB or more is handed to the next allocation that fits (at most 1/8
 * larger) and holds the new tensor's data; smaller buffers and ones too large for the request go
 * back to the allocator; the cap evicts the oldest entries; ember_context_trim gives everything
 * back (ember's live-block count returns to where it was) and the context keeps working; a cap of 0
 * turns the cache off; bad settings (option and EMBER_CPU_BUFFER_CACHE_MIB) fail context creation
 * with INVALID_ARGUMENT and a detail; an op whose output lands in a reused buffer (stale contents)
 * gives bit-identical results to a context without the cache. OpenCL (device 0, when there is one):
 * the device's cache of freed buffers (any size; the same 1/8 rule), its setting, trim, and
 * q_matmul through the device's persistent temporaries (scratch slots that grow and are reused by
 * smaller calls) giving the bits of a context without the buffer cache, call after call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_backend.h"
#ifdef EMBER_WITH_OPENCL
#include "backends/opencl/cl_backend.h"
#endif
#include "test_util.h"

static const ember_device CPU = {EMBER_BACKEND_CPU, 0};

static ember_context *ctx_with_cap(long long mib) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    o.cpu_buffer_cache_mib = mib;
    ember_context *c = NULL;
    TU_OK(ember_context_create(&o, &c));
    return c;
}

static ember__bufcache *cache_of(ember_context *c) { return &ember__cpu_state_of(c)->cache; }

/* A fresh F32 tensor of n elements filled from seed. */
static ember_tensor *filled(ember_context *c, int64_t n, uint64_t seed, float **data) {
    float *d = malloc((size_t)n * sizeof *d);
    uint64_t s = seed;
    tu_rand_f32(&s, d, (size_t)n, -1.0f, 1.0f);
    ember_tensor *t = NULL;
    TU_OK(ember_tensor_from_data(c, CPU, EMBER_F32, 1, &n, d, &t));
    if (data)
        *data = d;
    else
        free(d);
    return t;
}

static void test_reuse_and_contents(void) {
    ember_context *c = ctx_with_cap(64);
    const int64_t n = 1 << 18; /* 1 MiB of f32 */
    ember_tensor *t = filled(c, n, 1, NULL);
    void *buf = t->buf;
    ember_tensor_free(t);
    CU_ASSERT_EQUAL(cache_of(c)->n, 1);
    float *want;
    ember_tensor *u = filled(c, n - 1000, 2, &want); /* within 1/8: reuses the buffer */
    CU_ASSERT_PTR_EQUAL(u->buf, buf);
    CU_ASSERT_EQUAL(cache_of(c)->hits, 1);
    CU_ASSERT_EQUAL(cache_of(c)->n, 0);
    float *got = malloc((size_t)n * sizeof *got);
    TU_OK(ember_tensor_read(u, got, (size_t)(n - 1000) * sizeof *got));
    CU_ASSERT_EQUAL(memcmp(got, want, (size_t)(n - 1000) * sizeof *got), 0);
    ember_tensor_free(u);
    /* a request much smaller than the cached buffer does not take it */
    ember_tensor *small = filled(c, n / 2, 3, NULL);
    CU_ASSERT_PTR_NOT_EQUAL(small->buf, buf);
    CU_ASSERT_EQUAL(cache_of(c)->hits, 1);
    CU_ASSERT_EQUAL(cache_of(c)->n, 1);
    ember_tensor_free(small);
    free(want);
    free(got);
    ember_context_destroy(c); /* frees what is cached: LeakSanitizer / valgrind check it */
}

static void test_small_buffers_not_cached(void) {
    ember_context *c = ctx_with_cap(64);
    long live = ember__alloc_live();
    ember_tensor *t = filled(c, 1024, 4, NULL); /* 4 KiB */
    ember_tensor_free(t);
    CU_ASSERT_EQUAL(cache_of(c)->n, 0);
    CU_ASSERT_EQUAL(ember__alloc_live(), live);
    ember_context_destroy(c);
}

static void test_trim(void) {
    ember_context *c = ctx_with_cap(64);
    long live = ember__alloc_live();
    ember_tensor *a = filled(c, 1 << 18, 5, NULL), *b = filled(c, 1 << 17, 6, NULL);
    ember_tensor_free(a);
    ember_tensor_free(b);
    CU_ASSERT_EQUAL(cache_of(c)->n, 2);
    CU_ASSERT_EQUAL(ember__alloc_live(), live + 2); /* kept, not leaked */
    TU_OK(ember_context_trim(c));
    CU_ASSERT_EQUAL(cache_of(c)->n, 0);
    CU_ASSERT_EQUAL(cache_of(c)->held, 0);
    CU_ASSERT_EQUAL(ember__alloc_live(), live);
    TU_OK(ember_context_trim(c));                  /* empty: still fine */
    ember_tensor *d = filled(c, 1 << 18, 7, NULL); /* the context works on */
    ember_tensor_free(d);
    CU_ASSERT_EQUAL(cache_of(c)->n, 1);
    ember_context_destroy(c);
    TU_ASSERT_STATUS(ember_context_trim(NULL), EMBER_ERR_MISUSE, "context is NULL");
}

static void test_cap_evicts_oldest(void) {
    ember_context *c = ctx_with_cap(2); /* 2 MiB */
    ember_tensor *t[3];
    void *buf[3];
    for (int i = 0; i < 3; i++) {
        t[i] = filled(c, (1 << 18) - (1 << 14), 10 + (uint64_t)i, NULL); /* 0.94 MiB each */
        buf[i] = t[i]->buf;
    }
    for (int i = 0; i < 3; i++)
        ember_tensor_free(t[i]);
    ember__bufcache *k = cache_of(c);
    CU_ASSERT_EQUAL(k->n, 2);
    CU_ASSERT(k->held <= ((size_t)2 << 20));
    CU_ASSERT_PTR_EQUAL(k->e[0].p, buf[1]); /* the first freed went */
    CU_ASSERT_PTR_EQUAL(k->e[1].p, buf[2]);
    /* a buffer larger than the whole cap is never kept */
    ember_tensor *big = filled(c, 1 << 20, 13, NULL); /* 4 MiB */
    ember_tensor_free(big);
    CU_ASSERT_EQUAL(k->n, 2);
    ember_context_destroy(c);
}

static void test_off(void) {
    ember_context *c = ctx_with_cap(0);
    long live = ember__alloc_live();
    ember_tensor *t = filled(c, 1 << 18, 20, NULL);
    ember_tensor_free(t);
    CU_ASSERT_EQUAL(cache_of(c)->n, 0);
    CU_ASSERT_EQUAL(ember__alloc_live(), live);
    ember_context_destroy(c);

    setenv("EMBER_CPU_BUFFER_CACHE_MIB", "0", 1);
    c = ctx_with_cap(-1); /* -1: the environment decides */
    CU_ASSERT_EQUAL(cache_of(c)->cap, 0);
    ember_context_destroy(c);
    setenv("EMBER_CPU_BUFFER_CACHE_MIB", "3", 1);
    c = ctx_with_cap(-1);
    CU_ASSERT_EQUAL(cache_of(c)->cap, (size_t)3 << 20);
    ember_context_destroy(c);
    c = ctx_with_cap(5); /* the option wins over the environment */
    CU_ASSERT_EQUAL(cache_of(c)->cap, (size_t)5 << 20);
    ember_context_destroy(c);
    unsetenv("EMBER_CPU_BUFFER_CACHE_MIB");
    c = ctx_with_cap(-1);
    CU_ASSERT_EQUAL(cache_of(c)->cap, ember__cpu_bufcache_default_cap());
    CU_ASSERT(cache_of(c)->cap > 0 && cache_of(c)->cap <= ((size_t)512 << 20));
    ember_context_destroy(c);
}

static void test_bad_settings(void) {
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    ember_context *c = (ember_context *)(uintptr_t)0x1;
    o.cpu_buffer_cache_mib = -2;
    TU_ASSERT_STATUS(ember_context_create(&o, &c), EMBER_ERR_INVALID_ARGUMENT,
                     "cpu_buffer_cache_mib -2 is outside");
    CU_ASSERT_PTR_NULL(c);
    o.cpu_buffer_cache_mib = ((long long)1 << 30) + 1;
    c = (ember_context *)(uintptr_t)0x1;
    TU_ASSERT_STATUS(ember_context_create(&o, &c), EMBER_ERR_INVALID_ARGUMENT,
                     "cpu_buffer_cache_mib");
    CU_ASSERT_PTR_NULL(c);
    o.cpu_buffer_cache_mib = -1;
    const char *bad[] = {"abc", "-1", "12MiB", "99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("EMBER_CPU_BUFFER_CACHE_MIB", bad[i], 1);
        c = (ember_context *)(uintptr_t)0x1;
        TU_ASSERT_STATUS(ember_context_create(&o, &c), EMBER_ERR_INVALID_ARGUMENT,
                         "EMBER_CPU_BUFFER_CACHE_MIB");
        CU_ASSERT_PTR_NULL(c);
    }
    unsetenv("EMBER_CPU_BUFFER_CACHE_MIB");
}

/* q_matmul writing into a reused (stale) buffer: the same bytes as a context without the cache. */
static void test_qmatmul_in_reused_buffer(void) {
    const int64_t m = 96, k = 256, n = 1024; /* output 384 KiB: cached */
    ember_context *on = ctx_with_cap(64), *off = ctx_with_cap(0);
    float *x = malloc((size_t)(m * k) * sizeof *x), *w = malloc((size_t)(k * n) * sizeof *w);
    uint64_t s = tu_seed();
    float *r[2] = {malloc((size_t)(m * n) * sizeof(float)),
                   malloc((size_t)(m * n) * sizeof(float))};
    for (int round = 0; round < 3; round++) {
        tu_rand_f32(&s, x, (size_t)(m * k), -2.0f, 2.0f);
        tu_rand_f32(&s, w, (size_t)(k * n), -1.0f, 1.0f);
        tu_q8_matmul(on, CPU, m, k, n, x, w, r[0]);
        tu_q8_matmul(off, CPU, m, k, n, x, w, r[1]);
        CU_ASSERT_EQUAL(memcmp(r[0], r[1], (size_t)(m * n) * sizeof(float)), 0);
    }
    CU_ASSERT(cache_of(on)->hits >= 2); /* rounds 2 and 3 reused round 1's buffers */
    free(x);
    free(w);
    free(r[0]);
    free(r[1]);
    ember_context_destroy(on);
    ember_context_destroy(off);
}

#ifdef EMBER_WITH_OPENCL
static const ember_device CL0 = {EMBER_BACKEND_OPENCL, 0};

/* A context whose OpenCL buffer cache holds mib MiB (-1: the default), or NULL without a device. */
static ember_context *cl_ctx(long long mib) {
    ember_options o = ember_options_default();
    o.opencl_buffer_cache_mib = mib;
    ember_context *c = NULL;
    TU_OK(ember_context_create(&o, &c));
    if (c && ember_device_count(c, EMBER_BACKEND_OPENCL) == 0) {
        ember_context_destroy(c);
        return NULL;
    }
    return c;
}

static ember__cl_device *cl_dev(ember_context *c) {
    return &((ember__cl_state *)c->be[EMBER_BACKEND_OPENCL].state)->dev[0];
}

static void test_cl_reuse_trim(void) {
    ember_context *c = cl_ctx(16);
    if (!c)
        return; /* no OpenCL device: nothing to check */
    long live = ember__alloc_live();
    float d1[1000], d2[990], got[990];
    uint64_t s = tu_seed();
    tu_rand_f32(&s, d1, 1000, -1.0f, 1.0f);
    tu_rand_f32(&s, d2, 990, -1.0f, 1.0f);
    const int64_t n1 = 1000, n2 = 990, n3 = 400;
    ember_tensor *t = NULL, *u = NULL, *v = NULL;
    TU_OK(ember_tensor_from_data(c, CL0, EMBER_F32, 1, &n1, d1, &t));
    void *buf = t->buf;
    ember_tensor_free(t);
    CU_ASSERT_EQUAL(cl_dev(c)->bcache.n, 1);
    TU_OK(ember_tensor_from_data(c, CL0, EMBER_F32, 1, &n2, d2, &u)); /* within 1/8: reused */
    CU_ASSERT_PTR_EQUAL(u->buf, buf);
    CU_ASSERT_EQUAL(cl_dev(c)->bcache.hits, 1);
    TU_OK(ember_tensor_read(u, got, sizeof got));
    CU_ASSERT_EQUAL(memcmp(got, d2, sizeof got), 0);
    /* the reused buffer is bounded by the new tensor's size, not by the larger cl_mem */
    CU_ASSERT_EQUAL(((ember__cl_buf *)u->buf)->bytes, sizeof d2);
    CU_ASSERT_EQUAL(((ember__cl_buf *)u->buf)->cap, sizeof d1);
    float big[1000];
    TU_ASSERT_STATUS(c->be[EMBER_BACKEND_OPENCL].ops->download(c->be[EMBER_BACKEND_OPENCL].state, 0,
                                                               u->buf, 0, big, sizeof big),
                     EMBER_ERR_INVALID_ARGUMENT, "do not fit a buffer of 3960 bytes");
    ember_tensor_free(u);
    TU_OK(ember_tensor_from_data(c, CL0, EMBER_F32, 1, &n3, d1, &v)); /* far smaller: not reused */
    CU_ASSERT_PTR_NOT_EQUAL(v->buf, buf);
    CU_ASSERT_EQUAL(cl_dev(c)->bcache.hits, 1);
    ember_tensor_free(v);
    CU_ASSERT_EQUAL(cl_dev(c)->bcache.n, 2);
    CU_ASSERT_EQUAL(ember__alloc_live(), live + 2); /* two handles kept */
    TU_OK(ember_context_trim(c));
    CU_ASSERT_EQUAL(cl_dev(c)->bcache.n, 0);
    CU_ASSERT_EQUAL(cl_dev(c)->bcache.held, 0);
    CU_ASSERT_EQUAL(ember__alloc_live(), live);
    ember_context_destroy(c);

    c = cl_ctx(0); /* off */
    TU_OK(ember_tensor_from_data(c, CL0, EMBER_F32, 1, &n1, d1, &t));
    ember_tensor_free(t);
    CU_ASSERT_EQUAL(cl_dev(c)->bcache.n, 0);
    CU_ASSERT_EQUAL(cl_dev(c)->bcache.cap, 0);
    ember_context_destroy(c);
    setenv("EMBER_OPENCL_BUFFER_CACHE_MIB", "7", 1);
    c = cl_ctx(-1);
    CU_ASSERT_EQUAL(cl_dev(c)->bcache.cap, (size_t)7 << 20);
    ember_context_destroy(c);
    setenv("EMBER_OPENCL_BUFFER_CACHE_MIB", "x7", 1);
    ember_options o = ember_options_default();
    c = (ember_context *)(uintptr_t)0x1;
    TU_ASSERT_STATUS(ember_context_create(&o, &c), EMBER_ERR_INVALID_ARGUMENT,
                     "EMBER_OPENCL_BUFFER_CACHE_MIB=\"x7\"");
    CU_ASSERT_PTR_NULL(c);
    unsetenv("EMBER_OPENCL_BUFFER_CACHE_MIB");
    o.opencl_buffer_cache_mib = -3;
    c = (ember_context *)(uintptr_t)0x1;
    TU_ASSERT_STATUS(ember_context_create(&o, &c), EMBER_ERR_INVALID_ARGUMENT,
                     "opencl_buffer_cache_mib -3");
    CU_ASSERT_PTR_NULL(c);
}

/* q_matmul on the device, shapes growing and shrinking (the scratch slots grow, then serve
 * smaller calls), outputs landing in reused buffers: the bits of a context without the cache. */
static void test_cl_qmatmul_reuse(void) {
    ember_context *on = cl_ctx(16), *off = cl_ctx(0);
    if (!on || !off) {
        ember_context_destroy(on);
        ember_context_destroy(off);
        return;
    }
    static const int64_t shapes[][3] = {
        {5, 64, 40}, {33, 256, 130}, {2, 64, 40}, {33, 256, 130}, {1, 300, 17}};
    uint64_t s = tu_seed();
    for (size_t r = 0; r < sizeof shapes / sizeof shapes[0]; r++) {
        const int64_t m = shapes[r][0], k = shapes[r][1], n = shapes[r][2];
        float *x = malloc((size_t)(m * k) * sizeof *x), *w = malloc((size_t)(k * n) * sizeof *w);
        float *res[2] = {malloc((size_t)(m * n) * 4), malloc((size_t)(m * n) * 4)};
        tu_rand_f32(&s, x, (size_t)(m * k), -2.0f, 2.0f);
        tu_rand_f32(&s, w, (size_t)(k * n), -1.0f, 1.0f);
        tu_q8_matmul(on, CL0, m, k, n, x, w, res[0]);
        tu_q8_matmul(off, CL0, m, k, n, x, w, res[1]);
        CU_ASSERT_EQUAL(memcmp(res[0], res[1], (size_t)(m * n) * 4), 0);
        free(x);
        free(w);
        free(res[0]);
        free(res[1]);
    }
    CU_ASSERT(cl_dev(on)->bcache.hits > 0);
    ember_context_destroy(on);
    ember_context_destroy(off);
}
#endif

static CU_TestInfo bufcache_tests[] = {
    {"a freed buffer is reused and holds the new data", test_reuse_and_contents},
    {"buffers under 256 KiB are not cached", test_small_buffers_not_cached},
    {"context_trim gives the cache back", test_trim},
    {"the cap evicts the oldest buffers", test_cap_evicts_oldest},
    {"cap 0 / environment / option precedence", test_off},
    {"bad settings fail context creation", test_bad_settings},
    {"q_matmul into a reused buffer is bit-identical", test_qmatmul_in_reused_buffer},
#ifdef EMBER_WITH_OPENCL
    {"opencl: reuse, bounds, trim, settings", test_cl_reuse_trim},
    {"opencl: q_matmul with reused buffers and scratch", test_cl_qmatmul_reuse},
#endif
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"bufcache", NULL, NULL, NULL, NULL, bufcache_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return tu_run("test_bufcache", suites); }
