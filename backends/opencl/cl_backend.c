/* backends/opencl/cl_backend.c: the OpenCL backend's vtable: devices, capabilities, memory.
 * (cl_backend.h describes the design: device selection, buffers, errors, programs.) */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* clCreateCommandQueue (1.x devices) is deprecated in the 2.0+ headers */
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include "cl_backend.h"

#define CL_LOG(...)                                                                                \
    do {                                                                                           \
        if (ember__log_level >= 2)                                                                 \
            fprintf(stderr, "ember: opencl: " __VA_ARGS__);                                        \
    } while (0)

/* ---- selection: an index, or a case-insensitive substring ---- */

static int all_digits(const char *s) {
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return 0;
    return 1;
}

static int contains_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return 1;
    }
    return n == 0;
}

/* Does entry `idx` called `name` pass selector `sel` ("" passes everything)? */
static int selected(const char *sel, int idx, const char *name) {
    if (!sel[0])
        return 1;
    if (all_digits(sel))
        return atoi(sel) == idx;
    return contains_ci(name, sel);
}

/* ---- device facts ---- */

static void info_str(cl_device_id d, cl_device_info what, char *buf, size_t cap) {
    buf[0] = '\0';
    size_t n = 0;
    if (clGetDeviceInfo(d, what, cap - 1, buf, &n) != CL_SUCCESS) {
        /* too long for buf: take what fits */
        size_t need = 0;
        if (clGetDeviceInfo(d, what, 0, NULL, &need) == CL_SUCCESS && need > 0) {
            char *tmp = ember__malloc(need + 1);
            if (tmp && clGetDeviceInfo(d, what, need, tmp, NULL) == CL_SUCCESS) {
                tmp[need] = '\0';
                snprintf(buf, cap, "%s", tmp);
            }
            ember__free(tmp);
        }
        return;
    }
    buf[n < cap ? n : cap - 1] = '\0';
}

static int has_ext(const char *exts, const char *name) {
    size_t n = strlen(name);
    for (const char *p = exts; (p = strstr(p, name)) != NULL; p += n)
        if ((p == exts || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0'))
            return 1;
    return 0;
}

/* Fill d's facts from the device; the extension list is read whole (it can be long). */
static void device_facts(ember__cl_device *d) {
    info_str(d->id, CL_DEVICE_NAME, d->name, sizeof d->name);
    info_str(d->id, CL_DEVICE_VENDOR, d->vendor, sizeof d->vendor);
    info_str(d->id, CL_DRIVER_VERSION, d->driver, sizeof d->driver);
    info_str(d->id, CL_DEVICE_VERSION, d->version, sizeof d->version);
    clGetPlatformInfo(d->platform, CL_PLATFORM_NAME, sizeof d->platform_name, d->platform_name,
                      NULL);
    d->platform_name[sizeof d->platform_name - 1] = '\0';
    clGetPlatformInfo(d->platform, CL_PLATFORM_VERSION, sizeof d->platform_version,
                      d->platform_version, NULL);
    d->platform_version[sizeof d->platform_version - 1] = '\0';

    char *exts = NULL;
    size_t need = 0;
    if (clGetDeviceInfo(d->id, CL_DEVICE_EXTENSIONS, 0, NULL, &need) == CL_SUCCESS && need) {
        exts = ember__malloc(need + 1);
        if (exts && clGetDeviceInfo(d->id, CL_DEVICE_EXTENSIONS, need, exts, NULL) == CL_SUCCESS)
            exts[need] = '\0';
        else if (exts)
            exts[0] = '\0';
    }
    const char *e = exts ? exts : "";
    d->has_fp16 = has_ext(e, "cl_khr_fp16");
    d->has_fp64 = has_ext(e, "cl_khr_fp64");
    d->has_dot4 = has_ext(e, "cl_khr_integer_dot_product");
    static const char *const used[] = {"cl_khr_fp16", "cl_khr_fp64", "cl_khr_integer_dot_product",
                                       "cl_khr_subgroups", "cl_nv_pragma_unroll"};
    size_t off = 0;
    d->extensions[0] = '\0';
    for (size_t i = 0; i < sizeof used / sizeof used[0]; i++)
        if (has_ext(e, used[i]) && off < sizeof d->extensions)
            off += (size_t)snprintf(d->extensions + off, sizeof d->extensions - off, "%s%s",
                                    off ? " " : "", used[i]);
    ember__free(exts);

    cl_device_fp_config fp = 0;
    if (clGetDeviceInfo(d->id, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) == CL_SUCCESS)
        d->cr_divide = (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
    cl_ulong mem = 0, maxalloc = 0;
    clGetDeviceInfo(d->id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
    clGetDeviceInfo(d->id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof maxalloc, &maxalloc, NULL);
    d->mem_bytes = mem;
    d->max_alloc = maxalloc;
    size_t wg = 0;
    clGetDeviceInfo(d->id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL);
    d->max_wg = wg ? wg : 1;
    cl_uint cu = 0;
    clGetDeviceInfo(d->id, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    d->compute_units = (int)cu;
    clGetDeviceInfo(d->id, CL_DEVICE_TYPE, sizeof d->type, &d->type, NULL);
}

/* A cached ember__cl_buf released for good (the buffer cache's release function). */
static void cl_buf_release(void *p, size_t bytes) {
    (void)bytes;
    ember__cl_buf *b = p;
    if (b->mem)
        clReleaseMemObject(b->mem);
    ember__free(b);
}

/* Give d a context, a queue, its locks and a buffer cache of cache_cap bytes. CL errors here mean
 * "skip this device". */
static int device_open(ember__cl_device *d, size_t cache_cap) {
    cl_int err = CL_SUCCESS;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)d->platform, 0};
    d->ctx = clCreateContext(props, 1, &d->id, NULL, NULL, &err);
    if (!d->ctx || err != CL_SUCCESS) {
        CL_LOG("skipping %s: clCreateContext: %s\n", d->name, ember__cl_error_name(err));
        d->ctx = NULL;
        return 0;
    }
    /* OpenCL 2.0+ devices: the new call; 1.x devices only have the old one */
    if (strncmp(d->version, "OpenCL 1.", 9) != 0)
        d->queue = clCreateCommandQueueWithProperties(d->ctx, d->id, NULL, &err);
    else
        d->queue = clCreateCommandQueue(d->ctx, d->id, 0, &err);
    if (!d->queue || err != CL_SUCCESS) {
        CL_LOG("skipping %s: clCreateCommandQueue: %s\n", d->name, ember__cl_error_name(err));
        clReleaseContext(d->ctx);
        d->ctx = NULL;
        d->queue = NULL;
        return 0;
    }
    /* the device's locks (the program list, q_matmul's temporaries, kernel objects) and its
     * buffer cache; on a failure what was made so far is undone and the device is skipped */
    pthread_mutex_t *locks[] = {&d->lock, &d->qlock, &d->klock};
    const size_t nlocks = sizeof locks / sizeof locks[0];
    size_t made = 0;
    while (made < nlocks && pthread_mutex_init(locks[made], NULL) == 0)
        made++;
    if (made == nlocks && ember__bufcache_init(&d->bcache, cache_cap, 1, EMBER__CL_BCACHE_SLOTS, 0,
                                               cl_buf_release) == EMBER_OK)
        return 1;
    while (made-- > 0)
        pthread_mutex_destroy(locks[made]);
    clReleaseCommandQueue(d->queue);
    clReleaseContext(d->ctx);
    d->ctx = NULL;
    d->queue = NULL;
    return 0;
}

static void device_close(ember__cl_device *d) {
    if (d->queue) /* the queued work first: it may use the kernels, scratch and cached buffers */
        clFinish(d->queue);
    for (ember__cl_kentry *e = d->kernels, *next; e; e = next) {
        next = e->next;
        clReleaseKernel(e->k);
        ember__free(e);
    }
    d->kernels = NULL;
    pthread_mutex_destroy(&d->klock);
    ember__cl_program *p = d->programs;
    while (p) {
        ember__cl_program *next = p->next;
        clReleaseProgram(p->prog);
        ember__free(p->options);
        ember__free(p);
        p = next;
    }
    d->programs = NULL;
    ember__cl_scratch_release(d);
    ember__bufcache_destroy(&d->bcache);
    if (d->queue)
        clReleaseCommandQueue(d->queue);
    if (d->ctx)
        clReleaseContext(d->ctx);
    pthread_mutex_destroy(&d->qlock);
    pthread_mutex_destroy(&d->lock);
}

/* ---- vtable: init / shutdown / devices ---- */

static void cl_shutdown(void *state) {
    ember__cl_state *s = state;
    if (!s)
        return;
    for (int i = 0; i < s->ndev; i++)
        device_close(&s->dev[i]);
    ember__free(s->dev);
    ember__free(s);
}

static ember_status cl_init(ember_context *ctx, const ember_options *opts, void **state) {
    ember__cl_state *s = ember__calloc(1, sizeof *s);
    EMBER_FAIL_IF(!s, EMBER_ERR_OUT_OF_MEMORY, "opencl backend: no memory for its state");
    s->ctx = ctx;
    snprintf(s->cache_dir, sizeof s->cache_dir, "%s", ctx->opencl_cache_dir);
    /* EMBER_OPENCL_KERNEL, read with the other settings at context creation (config_load) */
    const char *forced = ctx->opencl_kernel;

    cl_uint nplat = 0;
    cl_int err = clGetPlatformIDs(0, NULL, &nplat);
    if (err != CL_SUCCESS || nplat == 0) {
        CL_LOG("no platform (%s): 0 devices\n", ember__cl_error_name(err));
        *state = s;
        return EMBER_OK;
    }
    cl_platform_id *plats = ember__calloc(nplat, sizeof *plats);
    if (!plats) {
        ember__free(s);
        EMBER_FAIL(EMBER_ERR_OUT_OF_MEMORY, "opencl backend: no memory for the platform list");
    }
    if (clGetPlatformIDs(nplat, plats, NULL) != CL_SUCCESS)
        nplat = 0;
    /* Two passes: count the candidates, then open them. */
    size_t cap = 0;
    for (cl_uint p = 0; p < nplat; p++) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) == CL_SUCCESS)
            cap += nd;
    }
    s->dev = cap ? ember__calloc(cap, sizeof *s->dev) : NULL;
    if (cap && !s->dev) {
        ember__free(plats);
        ember__free(s);
        EMBER_FAIL(EMBER_ERR_OUT_OF_MEMORY, "opencl backend: no memory for the device list");
    }
    int candidate = 0; /* the index EMBER_OPENCL_DEVICE counts in: over the selected platforms */
    for (cl_uint p = 0; p < nplat && (size_t)s->ndev < cap; p++) {
        char pname[128] = "";
        clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname, pname, NULL);
        pname[sizeof pname - 1] = '\0';
        if (!selected(ctx->opencl_platform, (int)p, pname)) {
            CL_LOG("platform %u (%s) not selected by EMBER_OPENCL_PLATFORM=%s\n", p, pname,
                   ctx->opencl_platform);
            continue;
        }
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0)
            continue;
        cl_device_id *ids = ember__calloc(nd, sizeof *ids);
        if (!ids) {
            ember__free(plats);
            cl_shutdown(s);
            EMBER_FAIL(EMBER_ERR_OUT_OF_MEMORY, "opencl backend: no memory for the device list");
        }
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, nd, ids, NULL) != CL_SUCCESS)
            nd = 0;
        for (cl_uint i = 0; i < nd && (size_t)s->ndev < cap; i++) {
            ember__cl_device *d = &s->dev[s->ndev];
            memset(d, 0, sizeof *d);
            d->platform = plats[p];
            d->id = ids[i];
            device_facts(d);
            int idx = candidate++;
            if (!selected(ctx->opencl_device, idx, d->name)) {
                CL_LOG("device %d (%s) not selected by EMBER_OPENCL_DEVICE=%s\n", idx, d->name,
                       ctx->opencl_device);
                continue;
            }
            size_t cache_cap; /* opencl_buffer_cache_mib, by default 256 MiB or 1/16 of memory */
            if (opts->opencl_buffer_cache_mib >= 0) {
                cache_cap = (size_t)opts->opencl_buffer_cache_mib << 20;
            } else {
                cache_cap = (size_t)256 << 20;
                if (d->mem_bytes && d->mem_bytes / 16 < cache_cap)
                    cache_cap = (size_t)(d->mem_bytes / 16);
            }
            if (!device_open(d, cache_cap))
                continue;
            ember__cl_qpath_choose(d, forced);
            CL_LOG("opencl:%d = %s (%s, %s), int8 path %s\n", s->ndev, d->name, d->platform_name,
                   d->version, d->int8_path);
            s->ndev++;
        }
        ember__free(ids);
    }
    ember__free(plats);
    if (s->ndev == 0)
        CL_LOG("no device selected: 0 devices\n");
    *state = s;
    return EMBER_OK;
}

static int cl_device_count(void *state) {
    const ember__cl_state *s = state;
    return s ? s->ndev : 0;
}

static ember_status cl_device_describe(void *state, int dev, ember_device_info *out) {
    const ember__cl_device *d = &((ember__cl_state *)state)->dev[dev];
    snprintf(out->name, sizeof out->name, "%s", d->name);
    snprintf(out->vendor, sizeof out->vendor, "%s", d->vendor);
    snprintf(out->driver, sizeof out->driver, "%s", d->driver);
    pthread_mutex_lock((pthread_mutex_t *)&d->lock); /* q_matmul may demote the path */
    snprintf(out->int8_matmul_path, sizeof out->int8_matmul_path, "%s", d->int8_path);
    pthread_mutex_unlock((pthread_mutex_t *)&d->lock);
    snprintf(out->version, sizeof out->version, "%s", d->version);
    snprintf(out->extensions, sizeof out->extensions, "%s", d->extensions);
    out->memory_bytes = d->mem_bytes;
    out->compute_units = d->compute_units;
    return EMBER_OK;
}

/* Storage: every dtype is bytes to a device except F16, which needs cl_khr_fp16 (so that F16
 * data can be computed with where it lives; the router answers DTYPE_TRANSFER otherwise). Every
 * valid scheme is stored as its bytes. */
static int cl_holds(void *state, int dev, ember_dtype dt, const ember_qscheme *s) {
    const ember__cl_device *d = &((ember__cl_state *)state)->dev[dev];
    if ((unsigned)dt >= EMBER_DTYPE_COUNT)
        return 0;
    if (dt == EMBER_F16)
        return d->has_fp16;
    if (dt == EMBER_QFLOAT)
        return s && ember__qscheme_is_valid(s);
    return 1;
}

/* Ops: float ops on the float dtypes held (F16/BF16 run in f32 after a conversion on the
 * device); quantize from float; dequantize and q_matmul of every valid scheme (an integer path
 * for per-tensor Q8, dequantize + gemm otherwise); integer and bool dtypes are storage only. */
static int cl_supports(void *state, int dev, ember_op op, ember_dtype dt, const ember_qscheme *s) {
    if (!cl_holds(state, dev, dt, s))
        return 0;
    int is_float = dt == EMBER_F32 || dt == EMBER_F16 || dt == EMBER_BF16;
    switch (op) {
    case EMBER_OP_STORE:
        return 1;
    case EMBER_OP_MATMUL:
    case EMBER_OP_ADD:
    case EMBER_OP_MUL:
    case EMBER_OP_LINEAR:
        return is_float;
    case EMBER_OP_QUANTIZE:
        return is_float || dt == EMBER_QFLOAT;
    case EMBER_OP_DEQUANTIZE:
    case EMBER_OP_Q_MATMUL:
        return dt == EMBER_QFLOAT || is_float;
    default:
        return 0;
    }
}

/* ---- memory ---- */

static ember_status cl_buffer_alloc(void *state, int dev, size_t bytes, void **buf) {
    ember__cl_state *s = state;
    ember__cl_device *d = &s->dev[dev];
    EMBER_FAIL_IF(bytes > d->max_alloc && d->max_alloc, EMBER_ERR_OUT_OF_MEMORY,
                  "opencl:%d: %zu bytes exceed the device's largest allocation (%llu bytes)", dev,
                  bytes, (unsigned long long)d->max_alloc);
    ember__cl_buf *hit = ember__bufcache_get(&d->bcache, bytes);
    if (hit) { /* a freed buffer of cap >= bytes (at most 1/8 more) */
        hit->bytes = bytes;
        *buf = hit;
        return EMBER_OK;
    }
    ember__cl_buf *b = ember__calloc(1, sizeof *b);
    EMBER_FAIL_IF(!b, EMBER_ERR_OUT_OF_MEMORY, "opencl: no memory for a buffer handle");
    b->bytes = bytes;
    b->cap = bytes;
    if (bytes) {
        cl_int err = CL_SUCCESS;
        b->mem = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
        if (!b->mem || err != CL_SUCCESS) {
            ember__free(b);
            if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
                err == CL_OUT_OF_HOST_MEMORY || err == CL_INVALID_BUFFER_SIZE)
                EMBER_FAIL(EMBER_ERR_OUT_OF_MEMORY,
                           "buffer_alloc: clCreateBuffer of %zu bytes failed on opencl:%d: %s (%d)",
                           bytes, dev, ember__cl_error_name(err), (int)err);
            return ember__cl_fail("buffer_alloc", "clCreateBuffer", dev, err);
        }
    }
    *buf = b;
    return EMBER_OK;
}

static void cl_buffer_free(void *state, int dev, void *buf) {
    ember__cl_buf *b = buf;
    if (b && !ember__bufcache_put(&((ember__cl_state *)state)->dev[dev].bcache, b, b->cap))
        cl_buf_release(b, b->cap);
}

static void cl_trim(void *state) {
    ember__cl_state *s = state;
    for (int i = 0; s && i < s->ndev; i++)
        ember__bufcache_trim(&s->dev[i].bcache);
}

static ember_status cl_upload(void *state, int dev, void *buf, size_t off, const void *src,
                              size_t bytes) {
    ember__cl_buf *b = buf;
    if (!bytes)
        return EMBER_OK;
    EMBER_FAIL_IF(!b->mem || off > b->bytes || bytes > b->bytes - off, EMBER_ERR_INVALID_ARGUMENT,
                  "upload: %zu bytes at offset %zu do not fit a buffer of %zu bytes on opencl:%d",
                  bytes, off, b->bytes, dev);
    return ember__cl_write(state, dev, "upload", b->mem, off, src, bytes);
}

static ember_status cl_download(void *state, int dev, const void *buf, size_t off, void *dst,
                                size_t bytes) {
    const ember__cl_buf *b = buf;
    if (!bytes)
        return EMBER_OK;
    EMBER_FAIL_IF(!b->mem || off > b->bytes || bytes > b->bytes - off, EMBER_ERR_INVALID_ARGUMENT,
                  "download: %zu bytes at offset %zu do not fit a buffer of %zu bytes on opencl:%d",
                  bytes, off, b->bytes, dev);
    return ember__cl_read(state, dev, "download", b->mem, off, dst, bytes);
}

static ember_status cl_sync(void *state, int dev) {
    ember__cl_state *s = state;
    EMBER_CL_TRY("sync", "clFinish", dev, clFinish(s->dev[dev].queue));
    return EMBER_OK;
}

static void *cl_host_ptr(void *state, int dev, void *buf) {
    (void)state;
    (void)dev;
    (void)buf;
    return NULL;
}

const ember_backend_ops ember__opencl_ops = {
    .name = "opencl",
    .kind = EMBER_BACKEND_OPENCL,
    .api_version = EMBER__BACKEND_API_VERSION,
    .nn = &ember__cl_nn_ops, /* backends/opencl/cl_nn.c */
    .init = cl_init,
    .trim = cl_trim,
    .shutdown = cl_shutdown,
    .device_count = cl_device_count,
    .device_describe = cl_device_describe,
    .holds = cl_holds,
    .supports = cl_supports,
    .buffer_alloc = cl_buffer_alloc,
    .buffer_free = cl_buffer_free,
    .upload = cl_upload,
    .download = cl_download,
    .sync = cl_sync,
    .host_ptr = cl_host_ptr,
    .gemm_f32 = ember__cl_gemm_f32,
    .binary_f32 = ember__cl_binary_f32,
    .sum_rows_f32 = ember__cl_sum_rows_f32,
    .convert = ember__cl_convert,
    .quantize = ember__cl_quantize,
    .dequantize = ember__cl_dequantize,
    .q_matmul = ember__cl_q_matmul,
};
