/* tests/test_opencl_build.c: the OpenCL backend's machinery: device selection by environment,
 * the int8 path choice, CL error names, the kernel-build failure path (a deliberately broken
 * kernel, built through the same code as the embedded ones), and the on-disk program cache.
 * Exit 77 (skipped) when no OpenCL device is found. Only tiny programs are built. */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
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
        {"0", NULL, 1, n},       {psub, NULL, 1, n},      {"999", NULL, 0, 0},
        {"zz-no-such-platform", NULL, 0, 0},             {NULL, "0", 1, 1},
        {NULL, dsub, 1, n},      {NULL, "zz-no-such-device", 0, 0},
        {NULL, "4096", 0, 0},    {psub, dsub, 1, n},
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
    } cases[] = {{"generic", "opencl.generic"}, {"dot4", NULL}, {"mma", NULL}, {"wgmma", NULL},
                 {"no-such-path", "opencl.generic"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c = ctx_with(NULL, NULL, cases[i].forced, NULL);
        d = &cls_of(c)->dev[0];
        const char *want = cases[i].want;
        if (!want) {
            want = "opencl.generic";
            for (const ember__cl_qpath *p = ember__cl_qpaths; p->name; p++)
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
    TU_ASSERT_STATUS(ember__cl_fail("gemm_f32", "clEnqueueNDRangeKernel", 0, CL_INVALID_KERNEL_ARGS),
                     EMBER_ERR_DEVICE,
                     "gemm_f32: clEnqueueNDRangeKernel failed on opencl:0: CL_INVALID_KERNEL_ARGS (-52)");

    /* real CL errors from the device, through the backend's own paths */
    ember_context *c = ctx_with(NULL, NULL, NULL, NULL);
    ember__cl_state *s = cls_of(c);
    size_t one = 1;
    TU_ASSERT_STATUS(ember__cl_launch(s, 0, "test_op", "elementwise", "", "no_such_kernel", 0, NULL,
                                      1, &one, NULL),
                     EMBER_ERR_DEVICE, "test_op: clCreateKernel failed on opencl:0: CL_INVALID_KERNEL_NAME");
    /* a work-group that does not divide the global size (OpenCL 1.x rule; 2.0+ devices may
     * accept non-uniform groups, then the launch succeeds) */
    cl_mem m;
    TU_OK(ember__cl_temp(s, 0, "test", 64, NULL, &m));
    cl_long z = 0;
    const ember__cl_arg args[4] = {EMBER_CL_ARG(m), EMBER_CL_ARG(z), EMBER_CL_ARG(z),
                                   EMBER_CL_ARG(m)};
    size_t g = 5, l = 3;
    ember_status st = ember__cl_launch(s, 0, "test_op", "elementwise", "", "sum_rows_f32", 4, args,
                                       1, &g, &l);
    if (st != EMBER_OK)
        TU_ASSERT_STATUS(st, EMBER_ERR_DEVICE, "clEnqueueNDRangeKernel failed on opencl:0: CL_INVALID_WORK_GROUP_SIZE");
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
    TU_ASSERT_STATUS(ember__cl_program_get_src(s, 0, "fine_test", fine, "-cl-no-such-option-xyz", &p),
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

static int suite_init(void) {
    rng = tu_seed();
    return 0;
}

int main(void) {
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
                           {"int8 path and EMBER_OPENCL_KERNEL", test_int8_path},
                           {"CL error names in the detail", test_error_names},
                           {"kernel build failure", test_build_failure},
                           {"disk cache", test_disk_cache},
                           CU_TEST_INFO_NULL};
    CU_SuiteInfo suites[] = {{"opencl machinery", suite_init, NULL, NULL, NULL, tests},
                             CU_SUITE_INFO_NULL};
    return tu_run("test_opencl_build", suites);
}
