/* tests/test_opencl_faults.c: OpenCL fault injection.
 *
 * The OpenCL backend calls the OpenCL API directly, so the shim is a link-time wrapper: this test
 * is linked (tests/reliability.cmake) with -Wl,--wrap=clXxx for every call below, and the linker
 * sends ember's calls to __wrap_clXxx here, which either forwards to the real entry point
 * (__real_clXxx) or fails. Failable: buffer creation, every enqueue (write, read, copy, fill,
 * kernel), clFinish, program creation and build, kernel creation and arguments, and the context and
 * queue creation of context_create. The wrappers also count the cl_mem, cl_program and cl_kernel
 * objects alive, so that a leaked device object is seen as well as a leaked host block.
 *
 * For each public call (on OpenCL device 0; CPU <-> OpenCL moves too), the walker fails the 1st,
 * 2nd, ... OpenCL call it makes until it succeeds, and asserts on each failure:
 *   - the status is the one for the call that failed: EMBER_ERR_KERNEL_BUILD for clBuildProgram,
 *     EMBER_ERR_OUT_OF_MEMORY or EMBER_ERR_DEVICE for clCreateBuffer (by the CL error: both are
 *     injected in turn), EMBER_ERR_DEVICE for everything else, with the CL call's name and the
 *     error's in the detail; OK is accepted only where ember documents a silent fallback (a
 *     rejected cached binary is rebuilt from source);
 *   - the output is NULL (no half-built tensor), ember's live-block count and the live CL objects
 *     are back to where they were, the inputs are untouched;
 *   - the context still works (an add on the device gives the right numbers).
 * Program creation and build are walked on fresh contexts (programs are cached per context),
 * failing only those calls; everything else on a warm context. Without -Wl,--wrap (EMBER_CL_WRAP
 * undefined) or without an OpenCL device the test is skipped (exit 77). Prints the number of faults
 * injected. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dispatch/internal.h"
#if defined(EMBER_WITH_OPENCL)
#include "backends/opencl/cl_backend.h"
#endif
#include "test_util.h"

#if defined(EMBER_WITH_OPENCL) && defined(EMBER_CL_WRAP)
#include <CL/cl.h>

/* ---- the shim ---- */
static long fault_at;      /* 0: off; else fail the fault_at-th failable call from arming */
static long fault_calls;   /* failable calls since arming */
static const char *failed; /* the name of the call made to fail */
static int buffer_oom;     /* clCreateBuffer fails with an out-of-memory code (else invalid) */
static long live_mem, live_prog, live_kernel;
static long binary_calls; /* clCreateProgramWithBinary calls that reached the driver */

static void arm(long n) {
    fault_at = n;
    fault_calls = 0;
    failed = NULL;
}

static int programs_only; /* count (and fail) only program creation and build calls */

/* 1 when this call must fail. */
static int fault(const char *name) {
    if (fault_at <= 0)
        return 0;
    if (programs_only && strncmp(name, "clCreateProgram", 15) != 0 &&
        strcmp(name, "clBuildProgram") != 0)
        return 0;
    if (++fault_calls == fault_at) {
        fault_at = 0;
        failed = name;
        return 1;
    }
    return 0;
}

#define REAL(ret, name, params)                                                                    \
    ret __real_##name params;                                                                      \
    ret __wrap_##name params;

REAL(cl_mem, clCreateBuffer, (cl_context, cl_mem_flags, size_t, void *, cl_int *))
REAL(cl_int, clReleaseMemObject, (cl_mem))
REAL(cl_int, clEnqueueWriteBuffer,
     (cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint, const cl_event *,
      cl_event *))
REAL(cl_int, clEnqueueReadBuffer,
     (cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint, const cl_event *,
      cl_event *))
REAL(cl_int, clEnqueueCopyBuffer,
     (cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint, const cl_event *,
      cl_event *))
REAL(cl_int, clEnqueueFillBuffer,
     (cl_command_queue, cl_mem, const void *, size_t, size_t, size_t, cl_uint, const cl_event *,
      cl_event *))
REAL(cl_int, clEnqueueNDRangeKernel,
     (cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *, const size_t *, cl_uint,
      const cl_event *, cl_event *))
REAL(cl_int, clFinish, (cl_command_queue))
REAL(cl_int, clBuildProgram,
     (cl_program, cl_uint, const cl_device_id *, const char *,
      void(CL_CALLBACK *)(cl_program, void *), void *))
REAL(cl_program, clCreateProgramWithSource,
     (cl_context, cl_uint, const char **, const size_t *, cl_int *))
REAL(cl_program, clCreateProgramWithBinary,
     (cl_context, cl_uint, const cl_device_id *, const size_t *, const unsigned char **, cl_int *,
      cl_int *))
REAL(cl_int, clReleaseProgram, (cl_program))
REAL(cl_kernel, clCreateKernel, (cl_program, const char *, cl_int *))
REAL(cl_int, clReleaseKernel, (cl_kernel))
REAL(cl_int, clSetKernelArg, (cl_kernel, cl_uint, size_t, const void *))
REAL(cl_context, clCreateContext,
     (const cl_context_properties *, cl_uint, const cl_device_id *,
      void(CL_CALLBACK *)(const char *, const void *, size_t, void *), void *, cl_int *))
REAL(cl_command_queue, clCreateCommandQueueWithProperties,
     (cl_context, cl_device_id, const cl_queue_properties *, cl_int *))

cl_mem __wrap_clCreateBuffer(cl_context c, cl_mem_flags f, size_t n, void *h, cl_int *err) {
    if (fault("clCreateBuffer")) {
        if (err)
            *err = buffer_oom ? CL_MEM_OBJECT_ALLOCATION_FAILURE : CL_INVALID_CONTEXT;
        return NULL;
    }
    cl_mem m = __real_clCreateBuffer(c, f, n, h, err);
    if (m)
        live_mem++;
    return m;
}

cl_int __wrap_clReleaseMemObject(cl_mem m) {
    if (m)
        live_mem--;
    return __real_clReleaseMemObject(m);
}

cl_int __wrap_clEnqueueWriteBuffer(cl_command_queue q, cl_mem m, cl_bool b, size_t off, size_t n,
                                   const void *p, cl_uint ne, const cl_event *ev, cl_event *e) {
    if (fault("clEnqueueWriteBuffer"))
        return CL_OUT_OF_RESOURCES;
    return __real_clEnqueueWriteBuffer(q, m, b, off, n, p, ne, ev, e);
}

cl_int __wrap_clEnqueueReadBuffer(cl_command_queue q, cl_mem m, cl_bool b, size_t off, size_t n,
                                  void *p, cl_uint ne, const cl_event *ev, cl_event *e) {
    if (fault("clEnqueueReadBuffer"))
        return CL_OUT_OF_RESOURCES;
    return __real_clEnqueueReadBuffer(q, m, b, off, n, p, ne, ev, e);
}

cl_int __wrap_clEnqueueCopyBuffer(cl_command_queue q, cl_mem a, cl_mem b, size_t ao, size_t bo,
                                  size_t n, cl_uint ne, const cl_event *ev, cl_event *e) {
    if (fault("clEnqueueCopyBuffer"))
        return CL_MEM_COPY_OVERLAP;
    return __real_clEnqueueCopyBuffer(q, a, b, ao, bo, n, ne, ev, e);
}

cl_int __wrap_clEnqueueFillBuffer(cl_command_queue q, cl_mem m, const void *p, size_t ps,
                                  size_t off, size_t n, cl_uint ne, const cl_event *ev,
                                  cl_event *e) {
    if (fault("clEnqueueFillBuffer"))
        return CL_OUT_OF_RESOURCES;
    return __real_clEnqueueFillBuffer(q, m, p, ps, off, n, ne, ev, e);
}

cl_int __wrap_clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint d, const size_t *o,
                                     const size_t *g, const size_t *l, cl_uint ne,
                                     const cl_event *ev, cl_event *e) {
    if (fault("clEnqueueNDRangeKernel"))
        return CL_INVALID_WORK_GROUP_SIZE;
    return __real_clEnqueueNDRangeKernel(q, k, d, o, g, l, ne, ev, e);
}

cl_int __wrap_clFinish(cl_command_queue q) {
    if (fault("clFinish"))
        return CL_OUT_OF_RESOURCES;
    return __real_clFinish(q);
}

cl_int __wrap_clBuildProgram(cl_program p, cl_uint n, const cl_device_id *d, const char *o,
                             void(CL_CALLBACK *cb)(cl_program, void *), void *u) {
    if (fault("clBuildProgram"))
        return CL_BUILD_PROGRAM_FAILURE;
    return __real_clBuildProgram(p, n, d, o, cb, u);
}

cl_program __wrap_clCreateProgramWithSource(cl_context c, cl_uint n, const char **s,
                                            const size_t *l, cl_int *err) {
    if (fault("clCreateProgramWithSource")) {
        if (err)
            *err = CL_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    cl_program p = __real_clCreateProgramWithSource(c, n, s, l, err);
    if (p)
        live_prog++;
    return p;
}

cl_program __wrap_clCreateProgramWithBinary(cl_context c, cl_uint n, const cl_device_id *d,
                                            const size_t *l, const unsigned char **b,
                                            cl_int *status, cl_int *err) {
    if (fault("clCreateProgramWithBinary")) {
        if (err)
            *err = CL_INVALID_BINARY;
        return NULL;
    }
    binary_calls++;
    cl_program p = __real_clCreateProgramWithBinary(c, n, d, l, b, status, err);
    if (p)
        live_prog++;
    return p;
}

cl_int __wrap_clReleaseProgram(cl_program p) {
    if (p)
        live_prog--;
    return __real_clReleaseProgram(p);
}

cl_kernel __wrap_clCreateKernel(cl_program p, const char *name, cl_int *err) {
    if (fault("clCreateKernel")) {
        if (err)
            *err = CL_INVALID_KERNEL_NAME;
        return NULL;
    }
    cl_kernel k = __real_clCreateKernel(p, name, err);
    if (k)
        live_kernel++;
    return k;
}

cl_int __wrap_clReleaseKernel(cl_kernel k) {
    if (k)
        live_kernel--;
    return __real_clReleaseKernel(k);
}

cl_int __wrap_clSetKernelArg(cl_kernel k, cl_uint i, size_t n, const void *v) {
    if (fault("clSetKernelArg"))
        return CL_INVALID_ARG_SIZE;
    return __real_clSetKernelArg(k, i, n, v);
}

cl_context __wrap_clCreateContext(const cl_context_properties *p, cl_uint n, const cl_device_id *d,
                                  void(CL_CALLBACK *cb)(const char *, const void *, size_t, void *),
                                  void *u, cl_int *err) {
    if (fault("clCreateContext")) {
        if (err)
            *err = CL_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    return __real_clCreateContext(p, n, d, cb, u, err);
}

cl_command_queue __wrap_clCreateCommandQueueWithProperties(cl_context c, cl_device_id d,
                                                           const cl_queue_properties *p,
                                                           cl_int *err) {
    if (fault("clCreateCommandQueueWithProperties")) {
        if (err)
            *err = CL_OUT_OF_RESOURCES;
        return NULL;
    }
    return __real_clCreateCommandQueueWithProperties(c, d, p, err);
}

/* ---- the walker ---- */
static int context_works(ember_context *c);
static ember_context *ctx;
static const ember_device CL0 = {EMBER_BACKEND_OPENCL, 0};
static long injected, walks;

static int suite_init(void) {
    ember_options o = ember_options_default();
    o.num_threads = 2;
    if (ember_context_create(&o, &ctx) != EMBER_OK)
        return 1;
    /* warm: context_works() runs after every fault, and its first add builds a program */
    return !context_works(ctx);
}

static int suite_clean(void) {
    ember_context_destroy(ctx);
    printf("\ninjected %ld OpenCL faults over %ld walks\n", injected, walks);
    return 0;
}

#define NIN 2
typedef struct env {
    ember_context *ctx;
    ember_tensor *in[NIN];
    ember_tensor *out;
    int param;
} env;

static uint64_t rng = 0xC1FA17ull;

static ember_status f32(env *e, int slot, ember_device dev, int rank, const int64_t *shape) {
    float v[64];
    size_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (size_t)shape[i];
    tu_rand_f32(&rng, v, n, 0.25f, 2.0f);
    return ember_tensor_from_data(e->ctx, dev, EMBER_F32, rank, shape, v, &e->in[slot]);
}

static ember_status quant(env *e, int slot, int rank, const int64_t *shape,
                          const ember_qscheme *s) {
    EMBER_TRY(f32(e, slot, CL0, rank, shape));
    ember_tensor *t = e->in[slot];
    e->in[slot] = NULL;
    ember_status st = ember_quantize(t, s, &e->in[slot]);
    ember_tensor_free(t);
    return st;
}

static void env_free(env *e) {
    for (int i = 0; i < NIN; i++) {
        ember_tensor_free(e->in[i]);
        e->in[i] = NULL;
    }
    ember_tensor_free(e->out);
    e->out = NULL;
}

/* the inputs' contents, read with faults off */
static unsigned char *contents(const ember_tensor *t, size_t *len) {
    *len = 0;
    if (!t)
        return NULL;
    unsigned char *b;
    if (ember_tensor_dtype(t) == EMBER_QFLOAT) {
        CU_ASSERT_FATAL(ember_qtensor_to_bytes(t, NULL, 0, len) == EMBER_OK);
        b = malloc(*len + 1);
        CU_ASSERT_FATAL(ember_qtensor_to_bytes(t, b, *len, len) == EMBER_OK);
    } else {
        *len = (size_t)ember_tensor_numel(t) * ember_dtype_get_traits(ember_tensor_dtype(t))->size;
        b = malloc(*len + 1);
        CU_ASSERT_FATAL(ember_tensor_read(t, b, *len) == EMBER_OK);
    }
    return b;
}

static int context_works(ember_context *c) {
    const int64_t shape[] = {2};
    const float a[] = {1, 2}, b[] = {10, 20};
    float y[2] = {0, 0};
    ember_tensor *ta = NULL, *tb = NULL, *ty = NULL;
    int ok = ember_tensor_from_data(c, CL0, EMBER_F32, 1, shape, a, &ta) == EMBER_OK &&
             ember_tensor_from_data(c, CL0, EMBER_F32, 1, shape, b, &tb) == EMBER_OK &&
             ember_add(ta, tb, &ty) == EMBER_OK && ember_tensor_read(ty, y, sizeof y) == EMBER_OK &&
             y[0] == 11.0f && y[1] == 22.0f;
    ember_tensor_free(ta);
    ember_tensor_free(tb);
    ember_tensor_free(ty);
    return ok;
}

typedef ember_status (*setup_fn)(env *e);
typedef ember_status (*call_fn)(env *e);

static ember_status expected_for(const char *fn) {
    if (strcmp(fn, "clBuildProgram") == 0)
        return EMBER_ERR_KERNEL_BUILD;
    if (strcmp(fn, "clCreateBuffer") == 0 && buffer_oom)
        return EMBER_ERR_OUT_OF_MEMORY;
    return EMBER_ERR_DEVICE;
}

/* Fail OpenCL call 1, 2, ... of `call` until it succeeds. fresh: a new context per attempt (so
 * that programs are built inside the call). */
static void walk(const char *name, int param, int fresh, setup_fn setup, call_fn call) {
    env e;
    memset(&e, 0, sizeof e);
    e.param = param;
    e.ctx = ctx;
    CU_ASSERT_EQUAL_FATAL(setup(&e), EMBER_OK); /* warm ctx's program cache */
    if (call(&e) != EMBER_OK) {
        fprintf(stderr, "%s: fails without a fault: %s\n", name, ember_last_error());
        CU_FAIL(name);
        env_free(&e);
        return;
    }
    env_free(&e);
    walks++;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long n = 1; n < 300; n++) {
        long live = ember__alloc_live(), mem = live_mem, prog = live_prog, kern = live_kernel;
        e.ctx = ctx;
        if (fresh) {
            ember_options o = ember_options_default();
            o.num_threads = 2;
            /* fresh == 2: without ember's on-disk program cache, so programs build from source */
            char *cache = getenv("EMBER_OPENCL_CACHE_DIR");
            char saved[512] = "";
            if (cache)
                snprintf(saved, sizeof saved, "%s", cache);
            if (fresh == 2)
                unsetenv("EMBER_OPENCL_CACHE_DIR");
            CU_ASSERT_FATAL(ember_context_create(&o, &e.ctx) == EMBER_OK);
            if (fresh == 2 && cache)
                setenv("EMBER_OPENCL_CACHE_DIR", saved, 1);
            CU_ASSERT_FATAL(ember_device_count(e.ctx, EMBER_BACKEND_OPENCL) > 0);
        }
        CU_ASSERT_EQUAL_FATAL(setup(&e), EMBER_OK);
        size_t len[NIN];
        unsigned char *before[NIN];
        for (int i = 0; i < NIN; i++)
            before[i] = contents(e.in[i], &len[i]);
        buffer_oom = (int)(n & 1);
        e.out = (ember_tensor *)(uintptr_t)1;
        ember_clear_error();
        arm(n);
        ember_status st = call(&e);
        fault_at = 0; /* disarm, keeping `failed` */
        if (e.out == (ember_tensor *)(uintptr_t)1)
            e.out = NULL;
        int same = 1;
        for (int i = 0; i < NIN; i++) {
            size_t l2;
            unsigned char *now = contents(e.in[i], &l2);
            same &= l2 == len[i] && (!len[i] || memcmp(now, before[i], len[i]) == 0);
            free(now);
            free(before[i]);
        }
        CU_ASSERT(same || (st == EMBER_OK && e.param == -1)); /* -1: writes its input */
        const char *fn = failed;
        if (!fn) { /* the call made fewer than n failable calls: done */
            if (st != EMBER_OK)
                fprintf(stderr, "%s: fails with no fault injected (call %ld): %s\n", name, n,
                        ember_last_error());
            CU_ASSERT_EQUAL(st, EMBER_OK);
            env_free(&e);
            if (fresh)
                ember_context_destroy(e.ctx);
            injected += n - 1;
            CU_ASSERT_EQUAL(ember__alloc_live(), live);
            CU_ASSERT_EQUAL(live_mem, mem);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (getenv("EMBER_FAULTS_VERBOSE"))
                fprintf(stderr, "%-45s param %2d: %3ld faults, %6.0f ms\n", name, param, n - 1,
                        1e3 * (double)(t1.tv_sec - t0.tv_sec) +
                            1e-6 * (double)(t1.tv_nsec - t0.tv_nsec));
            return;
        }
        ember_status want = expected_for(fn);
        /* a rejected cached binary is rebuilt from source: the documented silent fallback */
        int fallback = st == EMBER_OK && (strcmp(fn, "clCreateProgramWithBinary") == 0 ||
                                          strcmp(fn, "clBuildProgram") == 0);
        /* context_create leaves out a device it cannot open: OK with fewer devices */
        fallback |= st == EMBER_OK && e.param == 99;
        if ((st != want && !fallback) || (st != EMBER_OK && e.out) ||
            (st == EMBER_ERR_DEVICE && !strstr(ember_last_error(), fn))) {
            fprintf(stderr, "%s: failing %s (call %ld) gave %s (%s), want %s; out %p\n", name, fn,
                    n, ember_status_name(st), ember_last_error(), ember_status_name(want),
                    (void *)e.out);
            CU_FAIL("wrong status or detail");
        }
        if (st != EMBER_OK)
            CU_ASSERT_PTR_NULL(e.out);
        e.out = st == EMBER_OK ? e.out : NULL;
        env_free(&e);
        CU_ASSERT(context_works(e.ctx));
        if (fresh)
            ember_context_destroy(e.ctx);
        if (ember__alloc_live() != live || live_mem != mem || live_kernel != kern ||
            (fresh && live_prog != prog)) {
            fprintf(stderr,
                    "%s: failing %s (call %ld) leaked: %ld host block(s), %ld cl_mem, %ld "
                    "cl_kernel, %ld cl_program\n",
                    name, fn, n, ember__alloc_live() - live, live_mem - mem, live_kernel - kern,
                    live_prog - prog);
            CU_FAIL("leak");
        }
    }
    fprintf(stderr, "%s: never succeeded\n", name);
    CU_FAIL(name);
}

/* ---- cases ---- */
static const int64_t S23[] = {2, 3}, S34[] = {3, 4}, S3[] = {3}, S28[] = {2, 8}, S88[] = {8, 8},
                     S48[] = {4, 8};

static ember_status none(env *e) {
    (void)e;
    return EMBER_OK;
}
static ember_status a23(env *e) { return f32(e, 0, CL0, 2, S23); }
static ember_status a23_cpu(env *e) { return f32(e, 0, TU_CPU, 2, S23); }
static ember_status a23_b34(env *e) {
    EMBER_TRY(f32(e, 0, CL0, 2, S23));
    return f32(e, 1, CL0, 2, S34);
}
static ember_status a23_b3(env *e) {
    EMBER_TRY(f32(e, 0, CL0, 2, S23));
    return f32(e, 1, CL0, 1, S3);
}
static ember_status x48(env *e) { return f32(e, 0, CL0, 2, S48); }
static ember_status q48(env *e) {
    ember_qscheme s = tu_qscheme_sample(e->param);
    return quant(e, 0, 2, S48, &s);
}
static ember_status qmm_in(env *e) { /* 0 (Q,Q), 1 (F,Q), 2 (Q,F) */
    ember_qscheme s = tu_qscheme_sample(0);
    EMBER_TRY(e->param == 1 ? f32(e, 0, CL0, 2, S28) : quant(e, 0, 2, S28, &s));
    return e->param == 2 ? f32(e, 1, CL0, 2, S88) : quant(e, 1, 2, S88, &s);
}

static ember_status c_from_data(env *e) {
    float v[6] = {1, 2, 3, 4, 5, 6};
    return ember_tensor_from_data(e->ctx, CL0, EMBER_F32, 2, S23, v, &e->out);
}
static ember_status c_read(env *e) {
    float y[6];
    return ember_tensor_read(e->in[0], y, sizeof y);
}
static ember_status c_read_many(env *e) {
    float y0[6], y1[12];
    const ember_tensor *ts[2] = {e->in[0], e->in[1]};
    void *const d[2] = {y0, y1};
    const size_t caps[2] = {sizeof y0, sizeof y1};
    return ember_tensor_read_many(ts, d, caps, 2);
}
static ember_status c_to_cl(env *e) { return ember_to_device(e->in[0], CL0, &e->out); }
static ember_status c_to_cpu(env *e) { return ember_to_device(e->in[0], TU_CPU, &e->out); }
static ember_status c_matmul(env *e) { return ember_matmul(e->in[0], e->in[1], &e->out); }
static ember_status c_q_matmul(env *e) { return ember_q_matmul(e->in[0], e->in[1], &e->out); }
static ember_status c_add(env *e) { return ember_add(e->in[0], e->in[1], &e->out); }
static ember_status c_lbb(env *e) { return ember_linear_bias_backward(e->in[0], &e->out); }
static ember_status c_softmax(env *e) { return ember_softmax(e->in[0], &e->out); }
static ember_status c_axpy_in(env *e) { return ember_axpy_inplace(0.5f, e->in[0], e->in[0]); }
static ember_status c_quantize(env *e) {
    ember_qscheme s = tu_qscheme_sample(e->param);
    return ember_quantize(e->in[0], &s, &e->out);
}
static ember_status c_dequantize(env *e) { return ember_dequantize(e->in[0], &e->out); }
static ember_status c_qvalues(env *e) {
    int8_t v[32];
    float sc[8];
    EMBER_TRY(ember_qtensor_values(e->in[0], v, sizeof v));
    return ember_qtensor_scales(e->in[0], sc, 8);
}
static ember_status c_from_bytes(env *e) {
    unsigned char b[256];
    size_t len = 0;
    EMBER_TRY(ember_qtensor_to_bytes(e->in[0], b, sizeof b, &len));
    ember_qscheme s = tu_qscheme_sample(e->param);
    return ember_qtensor_from_bytes(e->ctx, CL0, &s, 2, S48, b, len, &e->out);
}
static ember_status c_requant_cpu(env *e) {
    return ember_requantize_to_device(e->in[0], TU_CPU, &e->out);
}
static ember_status c_context(env *e) {
    (void)e;
    ember_options o = ember_options_default();
    ember_context *c = NULL;
    ember_status st = ember_context_create(&o, &c);
    /* a device that cannot be opened is left out: 0 devices, not an error */
    if (st == EMBER_OK) {
        CU_ASSERT(ember_device_count(c, EMBER_BACKEND_OPENCL) <= 1);
        ember_context_destroy(c);
    }
    return st;
}

static void test_faults(void) {
    walk("tensor_from_data", 0, 0, none, c_from_data);
    walk("tensor_read", 0, 0, a23, c_read);
    walk("tensor_read_many", 0, 0, a23_b34, c_read_many);
    walk("to_device cpu -> opencl", 0, 0, a23_cpu, c_to_cl);
    walk("to_device opencl -> opencl", 0, 0, a23, c_to_cl);
    walk("to_device opencl -> cpu", 0, 0, a23, c_to_cpu);
    walk("matmul", 0, 0, a23_b34, c_matmul);
    walk("add", 0, 0, a23_b3, c_add);
    walk("linear_bias_backward", 0, 0, a23, c_lbb);
    walk("softmax (host fallback or kernel)", 0, 0, a23, c_softmax);
    walk("axpy_inplace (x is y: unchanged on failure)", -1, 0, a23, c_axpy_in);
    for (int k = 0; k < 4; k++) {
        walk("quantize", k, 0, x48, c_quantize);
        walk("dequantize", k, 0, q48, c_dequantize);
        walk("quantized readers", k, 0, q48, c_qvalues);
        walk("qtensor_from_bytes", k, 0, q48, c_from_bytes);
        walk("requantize_to_device cpu", k, 0, q48, c_requant_cpu);
    }
    for (int arm_ = 0; arm_ < 3; arm_++)
        walk("q_matmul", arm_, 0, qmm_in, c_q_matmul);
}

/* Program creation and build fail inside the op that needs the program first. */
static void test_build_faults(void) {
    /* only the program calls fail here: the rest of each op is walked on the warm context */
    programs_only = 1;
    walk("matmul on a fresh context", 0, 1, a23_b34, c_matmul);
    walk("quantize on a fresh context", 0, 1, x48, c_quantize);
    walk("q_matmul on a fresh context", 0, 1, qmm_in, c_q_matmul);
    walk("q_matmul (F,Q) on a fresh context", 1, 1, qmm_in, c_q_matmul);
    /* without the binary cache: every program from source, so a failed build is KERNEL_BUILD */
    walk("matmul, fresh context, no binary cache", 0, 2, a23_b34, c_matmul);
    walk("q_matmul, fresh context, no binary cache", 0, 2, qmm_in, c_q_matmul);
    programs_only = 0;
}

/* ember's on-disk program cache: a damaged file (truncated, garbage, altered by one byte) is
 * refused by ember itself and never handed to the driver, whose binary parser need not be safe
 * (PoCL reads past the end of a short file); the program is rebuilt from source and the file
 * rewritten. An intact file is used. */
static void test_corrupt_cache_file(void) {
    char dir[] = "/tmp/ember-cl-cache-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    const char *old = getenv("EMBER_OPENCL_CACHE_DIR");
    char saved[512] = "";
    if (old)
        snprintf(saved, sizeof saved, "%s", old);
    setenv("EMBER_OPENCL_CACHE_DIR", dir, 1);
    for (int round = 0; round < 5; round++) {
        /* round 0 fills the cache; 1..3 damage every file first; 4 uses the rewritten files */
        if (round >= 1 && round <= 3) {
            char cmd[700];
            /* 1: garbage; 2: cut in half; 3: 8 bytes of the binary overwritten */
            static const char *const how[] = {
                "", "for f in %s/*.clbin; do printf 'not a binary' > \"$f\"; done",
                "for f in %s/*.clbin; do n=$(stat -c %%s \"$f\"); truncate -s $((n / 2)) \"$f\"; "
                "done",
                "for f in %s/*.clbin; do printf 'ZQZQZQZQ' | dd of=\"$f\" bs=1 seek=100 "
                "conv=notrunc "
                "status=none; done"};
            snprintf(cmd, sizeof cmd, how[round], dir);
            CU_ASSERT_EQUAL(system(cmd), 0);
        }
        ember_context *c = NULL;
        ember_options o = ember_options_default();
        CU_ASSERT_FATAL(ember_context_create(&o, &c) == EMBER_OK);
        env e;
        memset(&e, 0, sizeof e);
        e.ctx = c;
        CU_ASSERT_FATAL(a23_b34(&e) == EMBER_OK);
        binary_calls = 0;
        CU_ASSERT_EQUAL(ember_matmul(e.in[0], e.in[1], &e.out), EMBER_OK);
        if (round >= 1 && round <= 3)
            CU_ASSERT_EQUAL(binary_calls, 0); /* refused before the driver */
        if (round == 4)
            CU_ASSERT(binary_calls >= 1); /* the rewritten file is good */
        env_free(&e);
        ember_context_destroy(c);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
    if (old)
        setenv("EMBER_OPENCL_CACHE_DIR", saved, 1);
    else
        unsetenv("EMBER_OPENCL_CACHE_DIR");
}

static void test_context_faults(void) { walk("context_create", 99, 0, none, c_context); }

int main(void) {
    /* Device buffers come from clCreateBuffer on every allocation: a freed buffer kept in the
     * device's cache and handed to the next tensor would hide that call from the walker (the
     * cache itself is tested in test_bufcache). */
    setenv("EMBER_OPENCL_BUFFER_CACHE_MIB", "0", 1);
    /* likewise kernel objects: one per launch, so that clCreateKernel is walked on every op */
    ember__cl_kernel_cache = 0;
    ember_context *probe = NULL;
    if (ember_context_create(NULL, &probe) != EMBER_OK ||
        ember_device_count(probe, EMBER_BACKEND_OPENCL) == 0) {
        ember_context_destroy(probe);
        printf("test_opencl_faults: no OpenCL device: skipped\n");
        return 77;
    }
    ember_context_destroy(probe);
    CU_TestInfo tests[] = {
        {"every OpenCL call of every op fails in turn", test_faults},
        {"program creation and build", test_build_faults},
        {"context and queue creation", test_context_faults},
        {"a damaged program cache file never reaches the driver", test_corrupt_cache_file},
        CU_TEST_INFO_NULL,
    };
    CU_SuiteInfo suites[] = {
        {"OpenCL faults", suite_init, suite_clean, NULL, NULL, tests},
        CU_SUITE_INFO_NULL,
    };
    return tu_run("test_opencl_faults", suites);
}

#else
int main(void) {
    printf("test_opencl_faults: needs the OpenCL backend and -Wl,--wrap (tests/reliability.cmake): "
           "skipped\n");
    return 77;
}
#endif
