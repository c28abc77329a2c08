/* bench/bench_dnnl.h: oneDNN's s8 x s8 -> s32 matmul, the comparison of ember's int8 rows
 * (bench_matmul.c, bench_qgemm.c). Compiled only with EMBER_BENCH_HAVE_DNNL (CMake links
 * DNNL::dnnl when it finds it). Two settings: B reordered once into the layout oneDNN prefers
 * (format_tag any: the inference setting, like ember's cached pack), or B plain row-major (the
 * primitive packs internally on every call, like ember's first call). The primitive itself is
 * created once, untimed, in both. Threads: oneDNN's OpenMP runtime (OMP_NUM_THREADS, or
 * bench_dnnl_threads). */
#ifndef EMBER_BENCH_DNNL_H
#define EMBER_BENCH_DNNL_H
#ifdef EMBER_BENCH_HAVE_DNNL
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <string.h>

typedef struct bench_dnnl {
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
    char impl[96]; /* the implementation oneDNN picked, e.g. "brg:avx512_core_amx" */
    int ok;
} bench_dnnl;

/* Set oneDNN's OpenMP thread count (a no-op when the runtime is not loaded). */
static inline void bench_dnnl_threads(int n) {
    void (*set)(int) = NULL;
    void *sym = dlsym(RTLD_DEFAULT, "omp_set_num_threads");
    if (sym) {
        memcpy(&set, &sym, sizeof set);
        set(n);
    }
}

/* A [m, k] s8, B [k, n] s8, C [m, n] s32, all row-major and owned by the caller. 1 when ready. */
static inline int bench_dnnl_setup(bench_dnnl *d, int64_t m, int64_t n, int64_t k, int8_t *A,
                                   int8_t *B, int32_t *C, int reorder) {
    memset(d, 0, sizeof *d);
    if (dnnl_engine_create(&d->eng, dnnl_cpu, 0) != dnnl_success)
        return 0;
    dnnl_stream_create(&d->strm, d->eng, dnnl_stream_default_flags);
    dnnl_memory_desc_t amd, bmd, bwant, cmd;
    dnnl_dims_t ad = {m, k}, bd = {k, n}, cd = {m, n};
    if (dnnl_memory_desc_init_by_tag(&amd, 2, ad, dnnl_s8, dnnl_ab) ||
        dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_s8, dnnl_ab) ||
        dnnl_memory_desc_init_by_tag(&bwant, 2, bd, dnnl_s8,
                                     reorder ? dnnl_format_tag_any : dnnl_ab) ||
        dnnl_memory_desc_init_by_tag(&cmd, 2, cd, dnnl_s32, dnnl_ab))
        return 0;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    if (dnnl_matmul_desc_init(&md, &amd, &bwant, NULL, &cmd) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &md, NULL, d->eng, NULL) != dnnl_success)
        return 0;
    const char *impl = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    snprintf(d->impl, sizeof d->impl, "%s", impl ? impl : "?");
    const dnnl_memory_desc_t *bq = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    dnnl_primitive_create(&d->prim, pd);
    dnnl_memory_create(&d->a, &amd, d->eng, A);
    dnnl_memory_create(&d->c, &cmd, d->eng, C);
    if (reorder) {
        dnnl_memory_t braw;
        dnnl_primitive_desc_t rpd;
        dnnl_primitive_t r;
        dnnl_memory_create(&braw, &bmd, d->eng, B);
        dnnl_memory_create(&d->b, bq, d->eng, DNNL_MEMORY_ALLOCATE);
        dnnl_reorder_primitive_desc_create(&rpd, &bmd, d->eng, bq, d->eng, NULL);
        dnnl_primitive_create(&r, rpd);
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, braw}, {DNNL_ARG_TO, d->b}};
        dnnl_primitive_execute(r, d->strm, 2, args);
        dnnl_stream_wait(d->strm);
        dnnl_primitive_destroy(r);
        dnnl_primitive_desc_destroy(rpd);
        dnnl_memory_destroy(braw);
    } else {
        dnnl_memory_create(&d->b, &bmd, d->eng, B);
    }
    dnnl_primitive_desc_destroy(pd);
    d->ok = 1;
    return 1;
}

static inline int bench_dnnl_run(bench_dnnl *d) {
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, d->a}, {DNNL_ARG_WEIGHTS, d->b}, {DNNL_ARG_DST, d->c}};
    if (dnnl_primitive_execute(d->prim, d->strm, 3, args) != dnnl_success)
        return -1;
    return dnnl_stream_wait(d->strm) == dnnl_success ? 0 : -1;
}

static inline void bench_dnnl_free(bench_dnnl *d) {
    if (d->prim)
        dnnl_primitive_destroy(d->prim);
    if (d->a)
        dnnl_memory_destroy(d->a);
    if (d->b)
        dnnl_memory_destroy(d->b);
    if (d->c)
        dnnl_memory_destroy(d->c);
    if (d->strm)
        dnnl_stream_destroy(d->strm);
    if (d->eng)
        dnnl_engine_destroy(d->eng);
    memset(d, 0, sizeof *d);
}
#endif
#endif
