/* tests/test_opencl_build.c: the OpenCL backend's machinery: device selection by environment,
 * the int8 path choice, CL error names, the kernel-build failure path (a deliberately broken
 * kernel, built through the same code as the embedded ones), and the on-disk program cache.
 * Exit 77 (skipped) when no OpenCL device is found. Only tiny programs are built. */
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/opencl/cl_backend.h"
#include "dispatch/internal.h"
#include "test_util.h"

static uint64_t rng;

static ember__cl_state *cls_of(ember_context *c) { return c->be[EMBER_BACKEND_OPENCL].state; }

/* A context created with the given environment (NULL unsets); the environment is restored. */
static ember_context *ctx_with(const char *platform, const char *device, const char *kernel,
                               const char *cache) {
    const char *names[4] = {"EMBER_OPENCL_PLATFORM", "EMBER_OPENCL_DEVICE", "EMBER_OPENCL_KERNEL",
                            "EMBER_OPENCL_CACHE_DIR"};
    const char *vals[4] = {platform, device, kernel, cache};
    char *saved[4];
    for (int i = 0; i < 4; i++) {
        const char *v = getenv(names[i]);
        saved[i] = v ? strdup(v) : NULL;
        if (vals[i])
            setenv(names[i], vals[i], 1);
        else
            unsetenv(names[i]);
    }
    ember_context *c = NULL;
    TU_OK(ember_context_create(NULL, &c));
    for (int i = 0; i < 4; i++) {
        if (saved[i])
            setenv(names[i], saved[i], 1);
        else
            unsetenv(names[i]);
        free(saved[i]);
    }
    return c;
}

static void test_selection(void) {
    ember_context *all = ctx_with(NULL, NULL, NULL, NULL);
    int n = ember_device_count(all, EMBER_BACKEND_OPENCL);
    CU_ASSERT_TRUE(n >= 1);
    char dname[128], pname[128];
    snprintf(dname, sizeof dname, "%s", cls_of(all)->dev[0].name);
    snprintf(pname, sizeof pname, "%s", cls_of(all)->dev[0].platform_name);
    ember_context_destroy(all);
    /* a substring: the first 6 characters, in upper case (matching ignores case) */
    char dsub[8] = "", psub[8] = "";
    for (int i = 0; i < 6 && dname[i]; i++)
        dsub[i] = (char)toupper((unsigned char)dname[i]);
    for (int i = 0; i < 6 && pname[i]; i++)
        psub[i] = (char)toupper((unsigned char)pname[i]);

    struct {
        const char *platform, *device;
        int min, max;
    } cases[] = {
        {"0", NULL, 1, n},
        {psub, NULL, 1, n},
        {"999", NULL, 0, 0},
        {"zz-no-such-platform", NULL, 0, 0},
        {NULL, "0", 1, 1},
        {NULL, dsub, 1, n},
        {NULL, "zz-no-such-device", 0, 0},
        {NULL, "4096", 0, 0},
        {psub, dsub, 1, n},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ember_context *c = ctx_with(cases[i].platform, cases[i].device, NULL, NULL);
        int got = ember_device_count(c, EMBER_BACKEND_OPENCL);
        if (got < cases[i].min || got > cases[i].max)
            fprintf(stderr, "  platform=%s device=%s: %d devices\n",
                    cases[i].platform ? cases[i].platform : "-",
                    cases[i].device ? cases[i].device : "-", got);
        CU_ASSERT_TRUE(got >= cases[i].min && got <= cases[i].max);
        if (got == 1 && cases[i].device && strcmp(cases[i].device, "0") == 0)
            CU_ASSERT_STRING_EQUAL(cls_of(c)->dev[0].name, dname);
        if (got == 0) { /* 0 devices is not an error, and naming one is BACKEND_UNAVAILABLE */
            ember_device_info info;
            ember_device d = {EMBER_BACKEND_OPENCL, 0};
            TU_ASSERT_STATUS(ember_device_describe(c, d, &info), EMBER_ERR_BACKEND_UNAVAILABLE,
                             "opencl:0");
        }
        ember_context_destroy(c);
    }
    /* OpenCL off */
    ember_options o = ember_options_default();
    o.enable_opencl = 0;
    ember_context *c = NULL;
    TU_OK(ember_context_create(&o, &c));
    CU_ASSERT_EQUAL(ember_device_count(c, EMBER_BACKEND_OPENCL), 0);
    ember_context_destroy(c);
}

static void test_int8_path(void) {
    ember_context *c = ctx_with(NULL, NULL, NULL, NULL);
    const ember__cl_device *d = &cls_of(c)->dev[0];
    const char *best = d->has_dot4 ? "opencl.dot4" : "opencl.generic";
    ember_device_info info;
    ember_device dev = {EMBER_BACKEND_OPENCL, 0};
    TU_OK(ember_device_describe(c, dev, &info));
    if (strcmp(info.int8_matmul_path, "opencl.dot4") != 0 &&
        strcmp(info.int8_matmul_path, "opencl.generic") != 0)
        fprintf(stderr, "  a tensor-core path: %s\n", info.int8_matmul_path);
    else
        CU_ASSERT_STRING_EQUAL(info.int8_matmul_path, best);
    ember_context_destroy(c);
    static const struct {
        const char *forced;
        const char *want; /* NULL: generic unless the device has that path */
    } cases[] = {{"generic", "opencl.generic"},
                 {"dot4", NULL},
                 {"mma", NULL},
                 {"wgmma", NULL},
                 {"no-such-path", "opencl.generic"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c = ctx_with(NULL, NULL, cases[i].forced, NULL);
        d = &cls_of(c)->dev[0];
        const char *want = cases[i].want;
        if (!want) {
            want = "opencl.generic";
            const ember__cl_qpath *p;
            for (size_t j = 0; (p = ember__cl_qpath_at(j)) != NULL; j++)
                if (strcmp(p->name, cases[i].forced) == 0 && p->available(d))
                    want = p->label;
        }
        CU_ASSERT_STRING_EQUAL(d->int8_path, want);
        ember_context_destroy(c);
    }
}

static void test_error_names(void) {
    CU_ASSERT_STRING_EQUAL(ember__cl_error_name(CL_SUCCESS), "CL_SUCCESS");
    CU_ASSERT_STRING_EQUAL(ember__cl_error_name(CL_INVALID_VALUE), "CL_INVALID_VALUE");
    CU_ASSERT_STRING_EQUAL(ember__cl_error_name(CL_OUT_OF_RESOURCES), "CL_OUT_OF_RESOURCES");
    CU_ASSERT_STRING_EQUAL(ember__cl_error_name(CL_INVALID_WORK_GROUP_SIZE),
                           "CL_INVALID_WORK_GROUP_SIZE");
    CU_ASSERT_STRING_EQUAL(ember__cl_error_name(CL_BUILD_PROGRAM_FAILURE),
                           "CL_BUILD_PROGRAM_FAILURE");
    CU_ASSERT_STRING_EQUAL(ember__cl_error_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR");
    CU_ASSERT_STRING_EQUAL(ember__cl_error_name(-12345), "CL_UNKNOWN_ERROR");
    TU_ASSERT_STATUS(
        ember__cl_fail("gemm_f32", "clEnqueueNDRangeKernel", 0, CL_INVALID_KERNEL_ARGS),
        EMBER_ERR_DEVICE,
        "gemm_f32: clEnqueueNDRangeKernel failed on opencl:0: CL_INVALID_KERNEL_ARGS (-52)");

    /* real CL errors from the device, through the backend's own paths */
    ember_context *c = ctx_with(NULL, NULL, NULL, NULL);
    ember__cl_state *s = cls_of(c);
    size_t one = 1;
    TU_ASSERT_STATUS(ember__cl_launch(s, 0, "test_op", "elementwise", "", "no_such_kernel", 0, NULL,
                                      1, &one, NULL),
                     EMBER_ERR_DEVICE,
                     "test_op: clCreateKernel failed on opencl:0: CL_INVALID_KERNEL_NAME");
    /* a work-group that does not divide the global size (OpenCL 1.x rule; 2.0+ devices may
     * accept non-uniform groups, then the launch succeeds) */
    cl_mem m;
    TU_OK(ember__cl_temp(s, 0, "test", 64, NULL, &m));
    cl_long z = 0;
    const ember__cl_arg args[4] = {EMBER_CL_ARG(m), EMBER_CL_ARG(z), EMBER_CL_ARG(z),
                                   EMBER_CL_ARG(m)};
    size_t g = 5, l = 3;
    ember_status st =
        ember__cl_launch(s, 0, "test_op", "elementwise", "", "sum_rows_f32", 4, args, 1, &g, &l);
    if (st != EMBER_OK)
        TU_ASSERT_STATUS(st, EMBER_ERR_DEVICE,
                         "clEnqueueNDRangeKernel failed on opencl:0: CL_INVALID_WORK_GROUP_SIZE");
    /* reads past the end of a buffer: CL_INVALID_VALUE */
    char buf[8];
    TU_ASSERT_STATUS(ember__cl_read(s, 0, "test_op", m, 60, buf, 8), EMBER_ERR_DEVICE,
                     "clEnqueueReadBuffer failed on opencl:0: CL_INVALID_VALUE (-30)");
    clReleaseMemObject(m);
    TU_ASSERT_STATUS(ember__cl_program_get(s, 0, "no_such_source", "", NULL),
                     EMBER_ERR_INVALID_ARGUMENT, "no_such_source");
    ember_context_destroy(c);
}

static void test_build_failure(void) {
    ember_context *c = ctx_with(NULL, NULL, NULL, NULL);
    ember__cl_state *s = cls_of(c);
    const char *broken = "__kernel void broken(__global int *o) {\n"
                         "    o[get_global_id(0)] = ember_undeclared_identifier;\n"
                         "}\n";
    cl_program p = (cl_program)(uintptr_t)1;
    for (int round = 0; round < 2; round++) { /* a failure is not cached: same answer again */
        TU_ASSERT_STATUS(ember__cl_program_get_src(s, 0, "broken_test", broken, "", &p),
                         EMBER_ERR_KERNEL_BUILD, "build log");
        CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "ember_undeclared_identifier"));
        CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "broken_test"));
        CU_ASSERT_PTR_NOT_NULL(strstr(ember_last_error(), "CL_BUILD_PROGRAM_FAILURE"));
    }
    CU_ASSERT_PTR_EQUAL(p, (cl_program)(uintptr_t)1); /* untouched on failure */
    /* bad options are a build failure too */
    const char *fine = "__kernel void fine(__global int *o) { o[0] = 1; }\n";
    TU_ASSERT_STATUS(
        ember__cl_program_get_src(s, 0, "fine_test", fine, "-cl-no-such-option-xyz", &p),
        EMBER_ERR_KERNEL_BUILD, "fine_test");
    TU_OK(ember__cl_program_get_src(s, 0, "fine_test", fine, "", &p));
    cl_program again = NULL;
    TU_OK(ember__cl_program_get_src(s, 0, "fine_test", fine, "", &again));
    CU_ASSERT_PTR_EQUAL(p, again); /* built once, then from the memory cache */
    ember_context_destroy(c);
}

static int count_bins(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".clbin") && !strstr(e->d_name, ".tmp"))
            n++;
    closedir(d);
    return n;
}

/* Build a program with a unique source, run its kernel, return the value it wrote. */
static int run_unique(ember_context *c, const char *src) {
    ember__cl_state *s = cls_of(c);
    cl_program p;
    if (ember__cl_program_get_src(s, 0, "cache_test", src, "-DVALUE=7", &p) != EMBER_OK) {
        fprintf(stderr, "  %s\n", ember_last_error());
        return -1;
    }
    cl_int err;
    cl_kernel k = clCreateKernel(p, "unique", &err);
    cl_mem m;
    TU_OK(ember__cl_temp(s, 0, "test", 4, NULL, &m));
    clSetKernelArg(k, 0, sizeof m, &m);
    size_t one = 1;
    clEnqueueNDRangeKernel(s->dev[0].queue, k, 1, NULL, &one, NULL, 0, NULL, NULL);
    int v = -1;
    TU_OK(ember__cl_read(s, 0, "test", m, 0, &v, 4));
    clReleaseKernel(k);
    clReleaseMemObject(m);
    return v;
}

static void test_disk_cache(void) {
    char dir[] = "ember-cl-cache-test-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char src[256];
    snprintf(src, sizeof src,
             "/* %llu */ __kernel void unique(__global int *o) { o[0] = VALUE * 6; }\n",
             (unsigned long long)tu_next(&rng));
    /* 1. a fresh build is written to the cache */
    ember_context *c = ctx_with(NULL, NULL, NULL, dir);
    CU_ASSERT_EQUAL(run_unique(c, src), 42);
    ember_context_destroy(c);
    CU_ASSERT_EQUAL(count_bins(dir), 1);
    /* 2. a new context loads it (and it still runs) */
    c = ctx_with(NULL, NULL, NULL, dir);
    CU_ASSERT_EQUAL(run_unique(c, src), 42);
    ember_context_destroy(c);
    CU_ASSERT_EQUAL(count_bins(dir), 1);
    /* 3. a corrupt file falls back silently to the source and is rewritten */
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512] = "";
    while (d && (e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".clbin"))
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (d)
        closedir(d);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("not a binary", f);
    fclose(f);
    c = ctx_with(NULL, NULL, NULL, dir);
    CU_ASSERT_EQUAL(run_unique(c, src), 42);
    ember_context_destroy(c);
    struct stat stt;
    CU_ASSERT_EQUAL(stat(path, &stt), 0);
    CU_ASSERT_TRUE(stt.st_size > 12);
    /* 4. an unusable directory is ignored */
    c = ctx_with(NULL, NULL, NULL, "/nonexistent/ember/cache");
    CU_ASSERT_EQUAL(run_unique(c, src), 42);
    ember_context_destroy(c);
    remove(path);
    rmdir(dir);
}

/* Several threads racing on a fresh context: each program is built once (under the device's
 * lock) and every thread gets the right answer. */
typedef struct race_arg {
    ember_context *ctx;
    int ok;
} race_arg;

static void *race_body(void *p) {
    race_arg *r = p;
    const ember_device cl = {EMBER_BACKEND_OPENCL, 0};
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1}, c[4] = {0};
    int64_t sa[2] = {2, 3}, sb[2] = {3, 2};
    ember_tensor *ta = NULL, *tb = NULL, *tc = NULL;
    r->ok = ember_tensor_from_data(r->ctx, cl, EMBER_F32, 2, sa, a, &ta) == EMBER_OK &&
            ember_tensor_from_data(r->ctx, cl, EMBER_F32, 2, sb, b, &tb) == EMBER_OK &&
            ember_matmul(ta, tb, &tc) == EMBER_OK &&
            ember_tensor_read(tc, c, sizeof c) == EMBER_OK && c[0] == 4 && c[1] == 5 &&
            c[2] == 10 && c[3] == 11;
    ember_tensor_free(ta);
    ember_tensor_free(tb);
    ember_tensor_free(tc);
    return NULL;
}

static void test_threads(void) {
    ember_context *c = ctx_with(NULL, NULL, NULL, NULL);
    pthread_t th[4];
    race_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i].ctx = c;
        args[i].ok = 0;
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, race_body, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CU_ASSERT_TRUE(args[i].ok);
    }
    int programs = 0;
    for (ember__cl_program *p = cls_of(c)->dev[0].programs; p; p = p->next)
        programs++;
    CU_ASSERT_EQUAL(programs, 1); /* gemm, once */
    ember_context_destroy(c);
}

/* Kernel objects are made once per (program, kernel name) and device, then reused: two adds and
 * two matmuls leave two entries, the results stay right, and the context's end releases them
 * (LeakSanitizer / valgrind check the entries). */
static void test_kernel_cache(void) {
    ember_context *ctx = ctx_with(NULL, NULL, NULL, NULL);
    const ember_device cl = {EMBER_BACKEND_OPENCL, 0};
    float a[4] = {1, 2, 3, 4}, c[4];
    int64_t sh[2] = {2, 2};
    ember_tensor *t = NULL;
    TU_OK(ember_tensor_from_data(ctx, cl, EMBER_F32, 2, sh, a, &t));
    ember__cl_device *d = &((ember__cl_state *)ctx->be[EMBER_BACKEND_OPENCL].state)->dev[0];
    int before = 0, after = 0;
    for (ember__cl_kentry *e = d->kernels; e; e = e->next)
        before++;
    for (int r = 0; r < 2; r++) {
        ember_tensor *s = NULL, *m = NULL;
        TU_OK(ember_add(t, t, &s));
        TU_OK(ember_matmul(t, t, &m));
        TU_OK(ember_tensor_read(s, c, sizeof c));
        CU_ASSERT_TRUE(c[0] == 2 && c[1] == 4 && c[2] == 6 && c[3] == 8);
        TU_OK(ember_tensor_read(m, c, sizeof c));
        CU_ASSERT_TRUE(c[0] == 7 && c[1] == 10 && c[2] == 15 && c[3] == 22);
        ember_tensor_free(s);
        ember_tensor_free(m);
    }
    for (ember__cl_kentry *e = d->kernels; e; e = e->next)
        after++;
    CU_ASSERT_EQUAL(after - before, 2);
    ember_tensor_free(t);
    ember_context_destroy(ctx);
}

/* Allocation failures while a fresh context builds its first program and runs an op: each one
 * reported as OUT_OF_MEMORY, nothing leaked, and the op works once allocations succeed. */
static void test_alloc_failures(void) {
    float a[4] = {1, 2, 3, 4}, c[4];
    int64_t sh[2] = {2, 2};
    const ember_device cl = {EMBER_BACKEND_OPENCL, 0};
    int ok = 0;
    for (long n = 1; n < 40 && !ok; n++) {
        ember_context *ctx = ctx_with(NULL, NULL, NULL, NULL);
        ember_tensor *t = NULL, *o = NULL;
        TU_OK(ember_tensor_from_data(ctx, cl, EMBER_F32, 2, sh, a, &t));
        long live = ember__alloc_live();
        ember__alloc_fail_at(n);
        ember_status st = ember_matmul(t, t, &o);
        ember__alloc_fail_at(0);
        if (st == EMBER_OK) {
            ok = 1;
            TU_OK(ember_tensor_read(o, c, sizeof c));
            CU_ASSERT_TRUE(c[0] == 7 && c[1] == 10 && c[2] == 15 && c[3] == 22);
            ember_tensor_free(o);
        } else {
            CU_ASSERT_EQUAL(st, EMBER_ERR_OUT_OF_MEMORY);
            CU_ASSERT_PTR_NULL(o);
            TU_OK(ember_context_trim(ctx)); /* a freed output kept for reuse is no leak */
            CU_ASSERT_EQUAL(ember__alloc_live(), live);
        }
        ember_tensor_free(t);
        ember_context_destroy(ctx);
    }
    CU_ASSERT_TRUE(ok);
}

/* An int8 path whose program does not build on this device: q_matmul demotes the device to the
 * generic path, once, and still answers (exactly as generic would). */
static int always_avail(const ember__cl_device *d) {
    (void)d;
    return 1;
}

static ember_status run_unbuildable(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q) {
    (void)q;
    cl_program p;
    return ember__cl_program_get_src(
        s, dev, "qgemm_unbuildable",
        "__kernel void k(__global int *o) { o[0] = no_such_builtin(); }", "", &p);
}

static const ember__cl_qpath unbuildable = {"unbuildable", "opencl.unbuildable", always_avail,
                                            run_unbuildable, 1};

static void test_qpath_demotion(void) {
    ember_context *c = ctx_with(NULL, NULL, NULL, NULL);
    ember__cl_device *d = &cls_of(c)->dev[0];
    d->qpath = &unbuildable;
    snprintf(d->int8_path, sizeof d->int8_path, "%s", unbuildable.label);
    const ember_device cl = {EMBER_BACKEND_OPENCL, 0};
    const float a[6] = {1, 2, 3, -1, 0.5f, 0}, w[6] = {0.5f, -1, 2, 0.25f, -0.75f, 1.5f};
    float out[4] = {NAN, NAN, NAN, NAN};
    tu_q8_matmul(c, cl, 2, 3, 2, a, w, out);
    /* spec §6.5 (Q x Q), burn's dequantize-then-matmul, within float rounding */
    const float want[4] = {2.24800062f, 3.99417162f, 0.492156982f, 1.12493026f};
    for (int i = 0; i < 4; i++)
        CU_ASSERT_TRUE(fabsf(out[i] - want[i]) <= 2e-6f * fabsf(want[i]));
    ember_device_info info;
    TU_OK(ember_device_describe(c, cl, &info));
    CU_ASSERT_STRING_EQUAL(info.int8_matmul_path, "opencl.generic");
    ember_context_destroy(c);
}

/* A tensor-core path (defined in its own file as ember__cl_qpath_mma / _wgmma, weak references in
 * the library) comes before dot4 and generic; generic is last. A custom path installed on a
 * device runs the per-tensor products; without per_channel it leaves per-row / per-column ones to
 * generic. (The test does not define the weak symbols itself: the GPU engineer's file will.) */
static int custom_calls;

static ember_status custom_run(ember__cl_state *s, int dev, const ember__cl_qgemm_args *q) {
    custom_calls++;
    const ember__cl_qpath *p, *last = NULL;
    for (size_t i = 0; (p = ember__cl_qpath_at(i)) != NULL; i++)
        last = p; /* generic */
    return last->run(s, dev, q);
}

static const ember__cl_qpath custom = {"custom", "opencl.custom", always_avail, custom_run, 0};

static void test_qpath_custom(void) {
    const ember__cl_qpath *p;
    size_t n = 0, i_dot4 = 99, i_generic = 99;
    for (; (p = ember__cl_qpath_at(n)) != NULL; n++) {
        if (strcmp(p->name, "dot4") == 0)
            i_dot4 = n;
        if (strcmp(p->name, "generic") == 0)
            i_generic = n;
    }
    CU_ASSERT_TRUE(n >= 2 && i_generic == n - 1 && i_dot4 == n - 2);

    ember_context *c = ctx_with(NULL, NULL, NULL, NULL);
    ember__cl_device *d = &cls_of(c)->dev[0];
    d->qpath = &custom;
    const ember_device cl = {EMBER_BACKEND_OPENCL, 0};
    float a[4] = {1, -2, 3, 4}, out[4];
    int64_t sh[2] = {2, 2}, col[2] = {2, 1};
    ember_qscheme q8 = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    ember_qscheme pc = ember_qscheme_per_block(EMBER_Q8S, EMBER_QSTORE_NATIVE, 2, col);
    ember_tensor *t = NULL, *q = NULL, *qc = NULL, *o = NULL, *o2 = NULL;
    TU_OK(ember_tensor_from_data(c, cl, EMBER_F32, 2, sh, a, &t));
    TU_OK(ember_quantize(t, &q8, &q));
    TU_OK(ember_quantize(t, &pc, &qc));
    custom_calls = 0;
    TU_OK(ember_q_matmul(q, q, &o));
    CU_ASSERT_EQUAL(custom_calls, 1);
    if (o) { /* q = [32, -64, 95, 127] (s = 4/127): exact int sums times s*s */
        TU_OK(ember_tensor_read(o, out, sizeof out));
        float s = 4.0f / 127.0f;
        CU_ASSERT_EQUAL(out[0], 0.0f + (s * s) * (float)(32 * 32 + -64 * 95));
    }
    TU_OK(ember_q_matmul(q, qc, &o2)); /* per-column rhs: generic, not custom */
    CU_ASSERT_EQUAL(custom_calls, 1);
    ember_tensor_free(t);
    ember_tensor_free(q);
    ember_tensor_free(qc);
    ember_tensor_free(o);
    ember_tensor_free(o2);
    ember_context_destroy(c);
}

/* No platform at all (the ICD loader pointed at an empty vendor directory, in a child process so
 * that the loader starts afresh): the context is created and the OpenCL backend has 0 devices. */
static void test_no_platform(void) {
    /* under valgrind, /proc/self/exe is valgrind's own tool: no child to run (valgrind.mk) */
    if (getenv("EMBER_UNDER_VALGRIND"))
        return;
    char dir[] = "ember-empty-icd-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    pid_t pid = fork();
    CU_ASSERT_TRUE_FATAL(pid >= 0);
    if (pid == 0) {
        setenv("OCL_ICD_VENDORS", dir, 1);
        execl("/proc/self/exe", "test_opencl_build", "--probe-count", (char *)NULL);
        _exit(99);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    rmdir(dir);
    CU_ASSERT_TRUE(WIFEXITED(status));
    CU_ASSERT_EQUAL(WEXITSTATUS(status), 0); /* context created, 0 OpenCL devices */
}

/* Two OpenCL devices (PoCL started with POCL_DEVICES="pthread pthread", in a child process):
 * transfers opencl:0 -> opencl:1 -> cpu keep every bit, ops across the two devices are refused
 * with DEVICE_MISMATCH, a quantized tensor does not move (QUANT_TRANSFER, source intact), and each
 * device computes on its own. Skipped (passes) where the platform is not PoCL. */
static void test_two_devices(void) {
    ember_context *c = ctx_with(NULL, NULL, NULL, NULL);
    int pocl = strstr(cls_of(c)->dev[0].platform_name, "Portable") != NULL;
    ember_context_destroy(c);
    if (!pocl || getenv("EMBER_UNDER_VALGRIND")) /* valgrind: see test_no_platform */
        return;
    pid_t pid = fork();
    CU_ASSERT_TRUE_FATAL(pid >= 0);
    if (pid == 0) {
        setenv("POCL_DEVICES", "pthread pthread", 1);
        execl("/proc/self/exe", "test_opencl_build", "--probe-two", (char *)NULL);
        _exit(99);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CU_ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) != 0)
        fprintf(stderr, "  two-device probe failed at step %d\n", WEXITSTATUS(status));
    CU_ASSERT_EQUAL(WEXITSTATUS(status), 0);
}

/* The child of test_two_devices: 0 when every step holds, else the failing step's number. */
static int probe_two(void) {
    ember_context *c = NULL;
    if (ember_context_create(NULL, &c) != EMBER_OK)
        return 1;
    int step = 0;
    const ember_device d0 = {EMBER_BACKEND_OPENCL, 0}, d1 = {EMBER_BACKEND_OPENCL, 1};
    const ember_device cpu = {EMBER_BACKEND_CPU, 0};
    float x[64], y[64];
    for (int i = 0; i < 64; i++)
        x[i] = (float)i * 0.37f - 7.0f;
    int64_t sh[2] = {8, 8};
    ember_tensor *a = NULL, *b = NULL, *h = NULL, *m = NULL, *q = NULL, *qm = NULL, *o1 = NULL;
    ember_qscheme q8 = ember_qscheme_per_tensor(EMBER_Q8S, EMBER_QSTORE_NATIVE);
    if (ember_device_count(c, EMBER_BACKEND_OPENCL) != 2) {
        step = 2;
        goto out;
    }
    if (ember_tensor_from_data(c, d0, EMBER_F32, 2, sh, x, &a) != EMBER_OK ||
        ember_to_device(a, d1, &b) != EMBER_OK || ember_tensor_device(b).index != 1 ||
        ember_to_device(b, cpu, &h) != EMBER_OK || ember_tensor_read(h, y, sizeof y) != EMBER_OK ||
        memcmp(x, y, sizeof x) != 0) {
        step = 3;
        goto out;
    }
    if (ember_matmul(a, b, &m) != EMBER_ERR_DEVICE_MISMATCH || m != NULL ||
        !strstr(ember_last_error(), "opencl:1")) {
        step = 4;
        goto out;
    }
    if (ember_quantize(a, &q8, &q) != EMBER_OK ||
        ember_to_device(q, d1, &qm) != EMBER_ERR_QUANT_TRANSFER || qm != NULL) {
        step = 5;
        goto out;
    }
    { /* the source is intact and still dequantizes on its producer */
        ember_tensor *dq = NULL;
        int ok = ember_dequantize(q, &dq) == EMBER_OK && ember_tensor_device(dq).index == 0;
        ember_tensor_free(dq);
        if (!ok) {
            step = 6;
            goto out;
        }
    }
    if (ember_matmul(b, b, &o1) != EMBER_OK || ember_tensor_device(o1).index != 1 ||
        ember_tensor_read(o1, y, sizeof y) != EMBER_OK) {
        step = 7;
        goto out;
    }
    for (int i = 0; i < 8 && !step; i++)
        for (int j = 0; j < 8; j++) {
            double r = 0;
            for (int k = 0; k < 8; k++)
                r += (double)x[i * 8 + k] * (double)x[k * 8 + j];
            if (fabs(y[i * 8 + j] - r) > 1e-4 * (1 + fabs(r)))
                step = 8;
        }
out:
    ember_tensor_free(a);
    ember_tensor_free(b);
    ember_tensor_free(h);
    ember_tensor_free(m);
    ember_tensor_free(q);
    ember_tensor_free(qm);
    ember_tensor_free(o1);
    ember_context_destroy(c);
    return step;
}

/* The child of test_no_platform: exit 0 when a context is created and has no OpenCL device. */
static int probe_count(void) {
    ember_context *c = NULL;
    if (ember_context_create(NULL, &c) != EMBER_OK)
        return 2;
    int n = ember_device_count(c, EMBER_BACKEND_OPENCL);
    ember_device d = {EMBER_BACKEND_OPENCL, 0};
    ember_device_info info;
    ember_status st = ember_device_describe(c, d, &info);
    ember_context_destroy(c);
    return n == 0 && st == EMBER_ERR_BACKEND_UNAVAILABLE ? 0 : 3;
}

static int suite_init(void) {
    rng = tu_seed();
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--probe-count") == 0)
        return probe_count();
    if (argc > 1 && strcmp(argv[1], "--probe-two") == 0)
        return probe_two();
    ember_context *probe = NULL;
    if (ember_context_create(NULL, &probe) != EMBER_OK) {
        fprintf(stderr, "context_create: %s\n", ember_last_error());
        return 1;
    }
    int n = ember_device_count(probe, EMBER_BACKEND_OPENCL);
    ember_context_destroy(probe);
    if (n == 0) {
        fprintf(stderr, "test_opencl_build: no OpenCL device: skipped\n");
        return 77;
    }
    CU_TestInfo tests[] = {{"selection by EMBER_OPENCL_PLATFORM / _DEVICE", test_selection},
                           {"no platform: 0 devices, not an error", test_no_platform},
                           {"two devices: transfers and guards", test_two_devices},
                           {"int8 path and EMBER_OPENCL_KERNEL", test_int8_path},
                           {"CL error names in the detail", test_error_names},
                           {"kernel build failure", test_build_failure},
                           {"disk cache", test_disk_cache},
                           {"threads racing on a fresh context", test_threads},
                           {"an int8 path that does not build is demoted", test_qpath_demotion},
                           {"path order; a custom path runs", test_qpath_custom},
                           {"allocation failures on first use", test_alloc_failures},
                           {"kernel objects are made once and reused", test_kernel_cache},
                           CU_TEST_INFO_NULL};
    CU_SuiteInfo suites[] = {{"opencl machinery", suite_init, NULL, NULL, NULL, tests},
                             CU_SUITE_INFO_NULL};
    return tu_run("test_opencl_build", suites);
}
