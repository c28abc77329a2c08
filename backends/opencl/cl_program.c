/* backends/opencl/cl_program.c: CL error names, the program cache (memory and disk), launches.
 *
 * The program cache, in the manner of CLBlast's ProgramCache and ggml's cl-program-cache.h:
 * - Activation: always in memory; on disk only when EMBER_OPENCL_CACHE_DIR names a directory.
 * - Key: in memory (device, source text, options); on disk a 64-bit FNV-1a hash of (source,
 *   options, device name, device version, driver version, platform version), the file
 *   <dir>/ember-<16 hex>.clbin holding the binary clGetProgramInfo(CL_PROGRAM_BINARIES) gave,
 *   behind a header with its length and hash (checked before the driver sees it).
 * - Concurrency: the device's lock is held while a program is looked up and built, so two
 *   threads never build the same program twice; a disk file is written to <file>.<pid>.<n>.tmp
 *   and renamed into place.
 * - Failure: any problem with the disk cache (missing, short, rejected by
 *   clCreateProgramWithBinary or clBuildProgram, unwritable directory) falls back silently to the
 *   source; a source that does not build is EMBER_ERR_KERNEL_BUILD with the log in the detail. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cl_backend.h"
#include "cl_sources.h"

const char *ember__cl_error_name(cl_int err) {
    switch (err) {
#define E(x)                                                                                       \
    case x:                                                                                        \
        return #x;
        E(CL_SUCCESS)
        E(CL_DEVICE_NOT_FOUND)
        E(CL_DEVICE_NOT_AVAILABLE)
        E(CL_COMPILER_NOT_AVAILABLE)
        E(CL_MEM_OBJECT_ALLOCATION_FAILURE)
        E(CL_OUT_OF_RESOURCES)
        E(CL_OUT_OF_HOST_MEMORY)
        E(CL_PROFILING_INFO_NOT_AVAILABLE)
        E(CL_MEM_COPY_OVERLAP)
        E(CL_IMAGE_FORMAT_MISMATCH)
        E(CL_IMAGE_FORMAT_NOT_SUPPORTED)
        E(CL_BUILD_PROGRAM_FAILURE)
        E(CL_MAP_FAILURE)
        E(CL_MISALIGNED_SUB_BUFFER_OFFSET)
        E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        E(CL_COMPILE_PROGRAM_FAILURE)
        E(CL_LINKER_NOT_AVAILABLE)
        E(CL_LINK_PROGRAM_FAILURE)
        E(CL_DEVICE_PARTITION_FAILED)
        E(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
        E(CL_INVALID_VALUE)
        E(CL_INVALID_DEVICE_TYPE)
        E(CL_INVALID_PLATFORM)
        E(CL_INVALID_DEVICE)
        E(CL_INVALID_CONTEXT)
        E(CL_INVALID_QUEUE_PROPERTIES)
        E(CL_INVALID_COMMAND_QUEUE)
        E(CL_INVALID_HOST_PTR)
        E(CL_INVALID_MEM_OBJECT)
        E(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
        E(CL_INVALID_IMAGE_SIZE)
        E(CL_INVALID_SAMPLER)
        E(CL_INVALID_BINARY)
        E(CL_INVALID_BUILD_OPTIONS)
        E(CL_INVALID_PROGRAM)
        E(CL_INVALID_PROGRAM_EXECUTABLE)
        E(CL_INVALID_KERNEL_NAME)
        E(CL_INVALID_KERNEL_DEFINITION)
        E(CL_INVALID_KERNEL)
        E(CL_INVALID_ARG_INDEX)
        E(CL_INVALID_ARG_VALUE)
        E(CL_INVALID_ARG_SIZE)
        E(CL_INVALID_KERNEL_ARGS)
        E(CL_INVALID_WORK_DIMENSION)
        E(CL_INVALID_WORK_GROUP_SIZE)
        E(CL_INVALID_WORK_ITEM_SIZE)
        E(CL_INVALID_GLOBAL_OFFSET)
        E(CL_INVALID_EVENT_WAIT_LIST)
        E(CL_INVALID_EVENT)
        E(CL_INVALID_OPERATION)
        E(CL_INVALID_GL_OBJECT)
        E(CL_INVALID_BUFFER_SIZE)
        E(CL_INVALID_MIP_LEVEL)
        E(CL_INVALID_GLOBAL_WORK_SIZE)
        E(CL_INVALID_PROPERTY)
        E(CL_INVALID_IMAGE_DESCRIPTOR)
        E(CL_INVALID_COMPILER_OPTIONS)
        E(CL_INVALID_LINKER_OPTIONS)
        E(CL_INVALID_DEVICE_PARTITION_COUNT)
        E(CL_INVALID_PIPE_SIZE)
        E(CL_INVALID_DEVICE_QUEUE)
        E(CL_INVALID_SPEC_ID)
        E(CL_MAX_SIZE_RESTRICTION_EXCEEDED)
#undef E
    case -1001:
        return "CL_PLATFORM_NOT_FOUND_KHR";
    default:
        return "CL_UNKNOWN_ERROR";
    }
}

ember_status ember__cl_fail(const char *op, const char *call, int dev, cl_int err) {
    return ember__fail(EMBER_ERR_DEVICE, __FILE__, op, __LINE__,
                       "%s: %s failed on opencl:%d: %s (%d)", op, call, dev,
                       ember__cl_error_name(err), (int)err);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t fnv1a_str(uint64_t h, const char *s) {
    return fnv1a(h, s, strlen(s) + 1); /* the NUL separates the fields */
}

void ember__cl_base_options(const ember__cl_device *d, const char *extra, char *buf, size_t cap) {
    snprintf(buf, cap, "%s%s%s%s%s",
             d->cr_divide ? "-cl-fp32-correctly-rounded-divide-sqrt -DEMBER_CR_DIVIDE=1 " : "",
             d->has_fp64 ? "-DEMBER_HAVE_FP64=1 " : "", d->has_fp16 ? "-DEMBER_HAVE_FP16=1 " : "",
             d->has_dot4 ? "-DEMBER_HAVE_DOT4=1 " : "", extra ? extra : "");
}

/* ---- the disk cache ---- */

static void disk_path(const ember__cl_state *s, uint64_t key, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/ember-%016llx.clbin", s->cache_dir, (unsigned long long)key);
}

static uint64_t disk_key(const ember__cl_device *d, const char *src, const char *options) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv1a_str(h, "ember-clbin-2"); /* 2: files carry a checked header (below) */
    h = fnv1a_str(h, src);
    h = fnv1a_str(h, options);
    h = fnv1a_str(h, d->name);
    h = fnv1a_str(h, d->version);
    h = fnv1a_str(h, d->driver);
    h = fnv1a_str(h, d->platform_version);
    return h;
}

/* A cache file is a 24-byte header, then the driver's binary: "EMBRCLB2", the binary's length
 * and its FNV-1a hash (both u64 little-endian). A file that is short, long, truncated or altered
 * never reaches the driver: drivers parse binaries without bounds checks (PoCL reads past the end
 * of a 12-byte file; found by valgrind on test_opencl_build's corrupt-file case). */
#define DISK_MAGIC "EMBRCLB2"
#define DISK_HEADER 24

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A built program from the disk cache, or NULL (silently) on any problem. */
static cl_program disk_load(const ember__cl_state *s, const ember__cl_device *d, uint64_t key,
                            const char *options) {
    char path[640];
    disk_path(s, key, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *file = NULL;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        len = ftell(f);
    if (len > DISK_HEADER && len < (1l << 30) && fseek(f, 0, SEEK_SET) == 0 &&
        (file = ember__malloc((size_t)len)) != NULL &&
        fread(file, 1, (size_t)len, f) != (size_t)len) {
        ember__free(file);
        file = NULL;
    }
    fclose(f);
    if (!file)
        return NULL;
    const unsigned char *bin = file + DISK_HEADER;
    size_t blen = (size_t)len - DISK_HEADER;
    if (memcmp(file, DISK_MAGIC, 8) != 0 || get_u64(file + 8) != (uint64_t)blen ||
        get_u64(file + 16) != fnv1a(0xcbf29ce484222325ull, bin, blen)) {
        ember__free(file);
        return NULL;
    }
    const unsigned char *bins[1] = {bin};
    cl_int status = CL_SUCCESS, err = CL_SUCCESS;
    cl_program p = clCreateProgramWithBinary(d->ctx, 1, &d->id, &blen, bins, &status, &err);
    ember__free(file);
    if (!p || err != CL_SUCCESS || status != CL_SUCCESS) {
        if (p)
            clReleaseProgram(p);
        return NULL;
    }
    if (clBuildProgram(p, 1, &d->id, options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

static void disk_store(const ember__cl_state *s, uint64_t key, cl_program p) {
    size_t blen = 0;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof blen, &blen, NULL) != CL_SUCCESS ||
        blen == 0)
        return;
    unsigned char *bin = ember__malloc(blen);
    if (!bin)
        return;
    unsigned char *bins[1] = {bin};
    if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS) {
        static int seq;
        char path[640], tmp[700];
        disk_path(s, key, path, sizeof path);
        snprintf(tmp, sizeof tmp, "%s.%ld.%d.tmp", path, (long)getpid(),
                 __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
        FILE *f = fopen(tmp, "wb");
        if (f) {
            unsigned char head[DISK_HEADER];
            memcpy(head, DISK_MAGIC, 8);
            put_u64(head + 8, (uint64_t)blen);
            put_u64(head + 16, fnv1a(0xcbf29ce484222325ull, bin, blen));
            int ok = fwrite(head, 1, sizeof head, f) == sizeof head;
            ok = ok && fwrite(bin, 1, blen, f) == blen;
            ok = (fclose(f) == 0) && ok;
            if (!ok || rename(tmp, path) != 0)
                remove(tmp);
        }
    }
    ember__free(bin);
}

/* ---- building ---- */

static ember_status build_from_source(ember__cl_device *d, int dev, const char *label,
                                      const char *src, const char *options, cl_program *out) {
    cl_int err = CL_SUCCESS;
    size_t len = strlen(src);
    cl_program p = clCreateProgramWithSource(d->ctx, 1, &src, &len, &err);
    if (!p || err != CL_SUCCESS)
        return ember__cl_fail(label, "clCreateProgramWithSource", dev, err);
    err = clBuildProgram(p, 1, &d->id, options, NULL, NULL);
    if (err == CL_SUCCESS) {
        *out = p;
        return EMBER_OK;
    }
    if (err != CL_BUILD_PROGRAM_FAILURE && err != CL_INVALID_BUILD_OPTIONS &&
        err != CL_COMPILE_PROGRAM_FAILURE) {
        clReleaseProgram(p);
        return ember__cl_fail(label, "clBuildProgram", dev, err);
    }
    /* The log: up to what the detail can carry, flattened to one line. */
    char log[3072] = "";
    size_t loglen = 0;
    if (clGetProgramBuildInfo(p, d->id, CL_PROGRAM_BUILD_LOG, 0, NULL, &loglen) == CL_SUCCESS &&
        loglen > 0) {
        char *full = ember__malloc(loglen + 1);
        if (full && clGetProgramBuildInfo(p, d->id, CL_PROGRAM_BUILD_LOG, loglen, full, NULL) ==
                        CL_SUCCESS) {
            full[loglen] = '\0';
            snprintf(log, sizeof log, "%s", full);
        }
        ember__free(full);
    }
    for (char *c = log; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    clReleaseProgram(p);
    return ember__fail(EMBER_ERR_KERNEL_BUILD, __FILE__, __func__, __LINE__,
                       "%s: building the OpenCL program for opencl:%d (%s) failed: %s (%d); "
                       "options \"%s\"; build log: %s",
                       label, dev, d->name, ember__cl_error_name(err), (int)err, options, log);
}

ember_status ember__cl_program_cached(ember__cl_state *s, int dev, const char *src,
                                      const char *options, ember__cl_build_fn build, void *arg,
                                      cl_program *out) {
    ember__cl_device *d = &s->dev[dev];
    pthread_mutex_lock(&d->lock);
    /* the embedded sources are found by address: hashing a kernel file (tens of KB) on every
     * launch cost host time per op */
    for (ember__cl_program *p = d->programs; p; p = p->next) {
        if (p->src == src && strcmp(p->options, options) == 0) {
            *out = p->prog;
            pthread_mutex_unlock(&d->lock);
            return EMBER_OK;
        }
    }
    uint64_t h = fnv1a(0xcbf29ce484222325ull, src, strlen(src));
    for (ember__cl_program *p = d->programs; p; p = p->next) {
        if (p->src_hash == h && strcmp(p->options, options) == 0 && strcmp(p->src, src) == 0) {
            *out = p->prog;
            pthread_mutex_unlock(&d->lock);
            return EMBER_OK;
        }
    }
    ember__cl_program *e = ember__calloc(1, sizeof *e);
    char *opt = ember__strdup(options);
    if (!e || !opt) {
        ember__free(e);
        ember__free(opt);
        pthread_mutex_unlock(&d->lock);
        EMBER_FAIL(EMBER_ERR_OUT_OF_MEMORY, "opencl:%d: no memory for a program cache entry", dev);
    }
    cl_program prog = NULL;
    ember_status st = build(s, dev, arg, &prog);
    if (st != EMBER_OK) {
        ember__free(e);
        ember__free(opt);
        pthread_mutex_unlock(&d->lock);
        return st;
    }
    e->src = src;
    e->src_hash = h;
    e->options = opt;
    e->prog = prog;
    e->next = d->programs;
    d->programs = e;
    *out = prog;
    pthread_mutex_unlock(&d->lock);
    return EMBER_OK;
}

/* ember__cl_program_get_src's builder: the on-disk cache, else the compiler (and the disk). */
typedef struct src_build {
    const char *label, *src, *options;
} src_build;

static ember_status build_src(ember__cl_state *s, int dev, void *arg, cl_program *out) {
    const src_build *b = arg;
    ember__cl_device *d = &s->dev[dev];
    cl_program prog = NULL;
    uint64_t key = 0;
    if (s->cache_dir[0]) {
        key = disk_key(d, b->src, b->options);
        prog = disk_load(s, d, key, b->options);
    }
    if (!prog) {
        EMBER_TRY(build_from_source(d, dev, b->label, b->src, b->options, &prog));
        if (s->cache_dir[0])
            disk_store(s, key, prog);
    }
    *out = prog;
    return EMBER_OK;
}

ember_status ember__cl_program_get_src(ember__cl_state *s, int dev, const char *label,
                                       const char *src, const char *options, cl_program *out) {
    src_build b = {label, src, options};
    return ember__cl_program_cached(s, dev, src, options, build_src, &b, out);
}

ember_status ember__cl_program_get(ember__cl_state *s, int dev, const char *name,
                                   const char *options, cl_program *out) {
    for (const ember__cl_source_entry *e = ember__cl_sources; e->name; e++)
        if (strcmp(e->name, name) == 0)
            return ember__cl_program_get_src(s, dev, name, *e->src, options, out);
    EMBER_FAIL(EMBER_ERR_INVALID_ARGUMENT, "opencl: no embedded kernel source named \"%s\"", name);
}

int ember__cl_kernel_cache = 1;

/* Set the arguments of k and enqueue it. */
static ember_status set_and_enqueue(ember__cl_state *s, int dev, const char *op, cl_kernel k,
                                    int nargs, const ember__cl_arg *args, cl_uint dims,
                                    const size_t *global, const size_t *local) {
    for (int i = 0; i < nargs; i++) {
        cl_int err = clSetKernelArg(k, (cl_uint)i, args[i].size, args[i].ptr);
        if (err != CL_SUCCESS)
            return ember__cl_fail(op, "clSetKernelArg", dev, err);
    }
    cl_int err =
        clEnqueueNDRangeKernel(s->dev[dev].queue, k, dims, NULL, global, local, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        return ember__cl_fail(op, "clEnqueueNDRangeKernel", dev, err);
    return EMBER_OK;
}

ember_status ember__cl_run_kernel(ember__cl_state *s, int dev, const char *op, cl_program p,
                                  const char *kernel, int nargs, const ember__cl_arg *args,
                                  cl_uint dims, const size_t *global, const size_t *local) {
    ember__cl_device *d = &s->dev[dev];
    const int cache = ember__cl_kernel_cache && strlen(kernel) < sizeof d->kernels->name;
    if (cache) {
        pthread_mutex_lock(&d->klock);
        for (ember__cl_kentry *e = d->kernels; e; e = e->next)
            if (e->prog == p && strcmp(e->name, kernel) == 0) {
                ember_status st =
                    set_and_enqueue(s, dev, op, e->k, nargs, args, dims, global, local);
                pthread_mutex_unlock(&d->klock);
                return st;
            }
    }
    cl_int err = CL_SUCCESS;
    cl_kernel k = clCreateKernel(p, kernel, &err);
    if (!k || err != CL_SUCCESS) {
        if (cache)
            pthread_mutex_unlock(&d->klock);
        return ember__cl_fail(op, "clCreateKernel", dev, err);
    }
    ember__cl_kentry *e = cache ? ember__malloc(sizeof *e) : NULL;
    if (e) { /* kept for the next launches (no memory for the entry: used once) */
        e->prog = p;
        snprintf(e->name, sizeof e->name, "%s", kernel);
        e->k = k;
        e->next = d->kernels;
        d->kernels = e;
    }
    ember_status st = set_and_enqueue(s, dev, op, k, nargs, args, dims, global, local);
    if (cache)
        pthread_mutex_unlock(&d->klock);
    if (!e)
        clReleaseKernel(k);
    return st;
}

ember_status ember__cl_launch(ember__cl_state *s, int dev, const char *op, const char *prog,
                              const char *options, const char *kernel, int nargs,
                              const ember__cl_arg *args, cl_uint dims, const size_t *global,
                              const size_t *local) {
    for (cl_uint i = 0; i < dims; i++)
        if (global[i] == 0)
            return EMBER_OK; /* nothing to do */
    char opts[512];
    ember__cl_base_options(&s->dev[dev], options, opts, sizeof opts);
    cl_program p = NULL;
    EMBER_TRY(ember__cl_program_get(s, dev, prog, opts, &p));
    return ember__cl_run_kernel(s, dev, op, p, kernel, nargs, args, dims, global, local);
}

ember_status ember__cl_temp(ember__cl_state *s, int dev, const char *op, size_t bytes,
                            const void *data, cl_mem *out) {
    cl_int err = CL_SUCCESS;
    cl_mem m = clCreateBuffer(s->dev[dev].ctx, CL_MEM_READ_WRITE, bytes ? bytes : 1, NULL, &err);
    if (!m || err != CL_SUCCESS) {
        /* as buffer_alloc: the device's out-of-memory codes are OUT_OF_MEMORY for the caller */
        if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
            err == CL_OUT_OF_HOST_MEMORY || err == CL_INVALID_BUFFER_SIZE)
            return ember__fail(
                EMBER_ERR_OUT_OF_MEMORY, __FILE__, op, __LINE__,
                "%s: clCreateBuffer of %zu bytes (scratch) failed on opencl:%d: %s (%d)", op,
                bytes ? bytes : 1, dev, ember__cl_error_name(err), (int)err);
        return ember__cl_fail(op, "clCreateBuffer", dev, err);
    }
    if (data && bytes) {
        err = clEnqueueWriteBuffer(s->dev[dev].queue, m, CL_TRUE, 0, bytes, data, 0, NULL, NULL);
        if (err != CL_SUCCESS) {
            clReleaseMemObject(m);
            return ember__cl_fail(op, "clEnqueueWriteBuffer", dev, err);
        }
    }
    *out = m;
    return EMBER_OK;
}

ember_status ember__cl_read(ember__cl_state *s, int dev, const char *op, cl_mem m, size_t off,
                            void *dst, size_t bytes) {
    if (!bytes)
        return EMBER_OK;
    EMBER_CL_TRY(
        op, "clEnqueueReadBuffer", dev,
        clEnqueueReadBuffer(s->dev[dev].queue, m, CL_TRUE, off, bytes, dst, 0, NULL, NULL));
    return EMBER_OK;
}

ember_status ember__cl_write(ember__cl_state *s, int dev, const char *op, cl_mem m, size_t off,
                             const void *src, size_t bytes) {
    if (!bytes)
        return EMBER_OK;
    EMBER_CL_TRY(
        op, "clEnqueueWriteBuffer", dev,
        clEnqueueWriteBuffer(s->dev[dev].queue, m, CL_TRUE, off, bytes, src, 0, NULL, NULL));
    return EMBER_OK;
}
