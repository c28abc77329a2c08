/* backends/cpu/cpu_backend.c: the CPU backend's vtable: device, memory and op entries. */
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../dispatch/nn.h"
#include "cpu_backend.h"
#include "cpu_quant.h"
#include "qgemm.h"

/* Freed tensor buffers are kept for reuse (dispatch/bufcache.h). Why: a fresh multi-megabyte
 * buffer costs a page fault per 4 KiB page (or per 2 MiB huge page) on its first write, plus the
 * kernel's zeroing of each page: measured on ember_q_matmul at 2048^3 (16 MiB f32 output), 7-19 ms
 * per call with ~800 faults against 4.1-4.7 ms once no call faulted. Cap: cpu_buffer_cache_mib /
 * EMBER_CPU_BUFFER_CACHE_MIB (0 disables), by default the value below. */
size_t ember__cpu_bufcache_default_cap(void) {
    size_t cap = (size_t)512 << 20;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0) {
        size_t eighth = (size_t)pages / 8 * (size_t)psz;
        if (eighth < cap)
            cap = eighth;
    }
    return cap;
}

static void cached_buffer_free(void *p, size_t bytes) {
    (void)bytes;
    ember__aligned_free(p);
}

/* Packed operands of 4 MiB or more live in regions of their own (ember__cpu_region_get): every
 * 2 MiB page of them on a huge page, whatever the heap did before. From glibc's heap they landed
 * on pages other buffers had touched first, which advice does not make huge; the 4-bit decode row
 * read 12% slower off huge pages. Freed regions are kept (as freed tensor buffers are), so that a
 * call that packs a temporary does not map and fault fresh memory every time. */
void *ember__cpu_region_get(ember__cpu_state *s, size_t bytes, size_t *len) {
    void *p = s ? ember__bufcache_take(&s->packs, bytes, len) : NULL;
    if (p)
        return p;
    p = ember__map_huge(bytes);
    *len = p ? bytes : 0;
    return p;
}

void ember__cpu_region_put(ember__cpu_state *s, void *p, size_t len) {
    if (p && (!s || !ember__bufcache_put(&s->packs, p, len)))
        ember__map_free(p, len);
}

static ember_status cpu_init(ember_context *ctx, const ember_options *opts, void **state) {
    ember__cpu_state *s = ember__calloc(1, sizeof *s);
    EMBER_FAIL_IF(!s, EMBER_ERR_OUT_OF_MEMORY, "cpu backend: no memory for its state");
    s->ctx = ctx;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    s->num_threads = opts->num_threads > 0 ? opts->num_threads : (online > 0 ? (int)online : 1);
    snprintf(s->max_isa, sizeof s->max_isa, "%s", opts->cpu_max_isa ? opts->cpu_max_isa : "");
    s->pin_threads = opts->cpu_pin_threads != 0; /* -1 (the default) and 1: on */
    s->spin_us = opts->cpu_spin_us < 0 ? EMBER_CPU_SPIN_US_DEFAULT : opts->cpu_spin_us;
    long long mib = opts->cpu_buffer_cache_mib;
    size_t cap = mib < 0 ? ember__cpu_bufcache_default_cap() : (size_t)mib << 20;
    ember_status st = ember__bufcache_init(&s->cache, cap, EMBER__CPU_BUFCACHE_MIN,
                                           EMBER__CPU_BUFCACHE_SLOTS, 1, cached_buffer_free);
    if (st != EMBER_OK) {
        ember__free(s);
        return st;
    }
    st = ember__bufcache_init(&s->packs, cap, EMBER__CPU_REGION_SMALLEST, EMBER__CPU_BUFCACHE_SLOTS,
                              1, ember__map_free);
    if (st == EMBER_OK)
        st = ember__cpu_pool_start(s);
    if (st != EMBER_OK) {
        ember__bufcache_destroy(&s->packs);
        ember__bufcache_destroy(&s->cache);
        ember__free(s);
        return st;
    }
    /* the AVX2 tier on a CPU with AVX-VNNI multiplies bytes (qgemm_avx2.c): named so */
    const ember__qtier tier = ember__cpu_tier(s);
    snprintf(s->int8_path, sizeof s->int8_path, "cpu.%s%s", ember__qtier_name(tier),
             tier == EMBER__QT_AVX2 && ember__avx2_vnni() ? "+avx_vnni" : "");
    *state = s;
    return EMBER_OK;
}

static void cpu_shutdown(void *state) {
    if (!state)
        return;
    ember__cpu_pool_stop(state);
    ember__bufcache_destroy(&((ember__cpu_state *)state)->packs);
    ember__bufcache_destroy(&((ember__cpu_state *)state)->cache);
    ember__free(state);
}

/* ember_context_trim: the caches of freed buffers and freed pack regions emptied, and the int8
 * kernels' scratch region freed unless a call on another thread holds it */
static void cpu_trim(void *state) {
    ember__bufcache_trim(&((ember__cpu_state *)state)->cache);
    ember__bufcache_trim(&((ember__cpu_state *)state)->packs);
    ember__cpu_scratch_release(state);
}

static int cpu_device_count(void *state) {
    (void)state;
    return 1;
}

static ember_status cpu_device_describe(void *state, int dev, ember_device_info *out) {
    ember__cpu_state *s = state;
    (void)dev;
    char model[128] = "cpu";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) == 0) {
                char *c = strchr(line, ':');
                if (c) {
                    c++;
                    while (*c == ' ')
                        c++;
                    c[strcspn(c, "\n")] = '\0';
                    snprintf(model, sizeof model, "%s", c);
                }
                break;
            }
        }
        fclose(f);
    }
    snprintf(out->name, sizeof out->name, "%s", model);
    snprintf(out->vendor, sizeof out->vendor, "host");
    snprintf(out->driver, sizeof out->driver, "ember %s", ember_version_string());
    snprintf(out->int8_matmul_path, sizeof out->int8_matmul_path, "%s", s->int8_path);
    snprintf(out->blas_core, sizeof out->blas_core, "%s", ember__cpu_blas_core());
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    out->memory_bytes = (pages > 0 && psz > 0) ? (uint64_t)pages * (uint64_t)psz : 0;
    out->compute_units = s->num_threads;
    return EMBER_OK;
}

static int cpu_holds(void *state, int dev, ember_dtype dt, const ember_qscheme *s) {
    (void)state;
    (void)dev;
    (void)s;
    return (unsigned)dt < EMBER_DTYPE_COUNT;
}

static ember_status cpu_buffer_alloc(void *state, int dev, size_t bytes, void **buf) {
    (void)dev;
    void *p = ember__bufcache_get(&((ember__cpu_state *)state)->cache, bytes);
    if (p) {
        *buf = p;
        return EMBER_OK;
    }
    p = ember__aligned_alloc(bytes);
    EMBER_FAIL_IF(!p, EMBER_ERR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes", bytes);
    /* Large tensors: ask for transparent huge pages, so that the first write into a fresh output
     * (every op allocates one) faults 2 MiB at a time instead of 4 KiB (measured with bench_quant:
     * API dequantize of 64 MiB from ~40% to ~65% of memcpy). Advice only: failure is harmless. */
    if (bytes >= ((size_t)4 << 20)) {
        const uintptr_t page = 4096, lo = ((uintptr_t)p + page - 1) & ~(page - 1);
        const uintptr_t hi = ((uintptr_t)p + bytes) & ~(page - 1);
        if (hi > lo)
            (void)madvise((void *)lo, (size_t)(hi - lo), MADV_HUGEPAGE);
    }
    *buf = p;
    return EMBER_OK;
}

static void cpu_buffer_free(void *state, int dev, void *buf) {
    (void)dev;
    if (!buf ||
        !ember__bufcache_put(&((ember__cpu_state *)state)->cache, buf, malloc_usable_size(buf)))
        ember__aligned_free(buf);
}

void *ember__cpu_temp_get(ember__cpu_state *s, size_t bytes) {
    void *p = NULL;
    if (!s)
        return ember__aligned_alloc(bytes ? bytes : 1);
    return cpu_buffer_alloc(s, 0, bytes ? bytes : 1, &p) == EMBER_OK ? p : NULL;
}

void ember__cpu_temp_put(ember__cpu_state *s, void *p) {
    if (!s)
        ember__aligned_free(p);
    else
        cpu_buffer_free(s, 0, p);
}

static ember_status cpu_upload(void *state, int dev, void *buf, size_t off, const void *src,
                               size_t bytes) {
    (void)state;
    (void)dev;
    memcpy((char *)buf + off, src, bytes);
    return EMBER_OK;
}

static ember_status cpu_download(void *state, int dev, const void *buf, size_t off, void *dst,
                                 size_t bytes) {
    (void)state;
    (void)dev;
    memcpy(dst, (const char *)buf + off, bytes);
    return EMBER_OK;
}

static void *cpu_host_ptr(void *state, int dev, void *buf) {
    (void)state;
    (void)dev;
    return buf;
}

const ember_backend_ops ember__cpu_ops = {
    .name = "cpu",
    .kind = EMBER_BACKEND_CPU,
    .api_version = EMBER__BACKEND_API_VERSION,
    .nn = &ember__cpu_nn_ops, /* backends/cpu/cpu_nn.c */
    .init = cpu_init,
    .trim = cpu_trim,
    .shutdown = cpu_shutdown,
    .device_count = cpu_device_count,
    .device_describe = cpu_device_describe,
    .holds = cpu_holds,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .host_ptr = cpu_host_ptr,
    .gemm_f32 = ember__cpu_gemm_f32,
    .binary_f32 = ember__cpu_binary_f32,
    .sum_rows_f32 = ember__cpu_sum_rows_f32,
    .convert = ember__cpu_convert,
    .quantize = ember__cpu_quantize,
    .dequantize = ember__cpu_dequantize,
    .q_matmul = ember__cpu_q_matmul, /* backends/cpu/cpu_qmatmul.c */
};
