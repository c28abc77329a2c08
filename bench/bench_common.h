/* bench/bench_common.h: what every ember benchmark shares: the OpenBLAS core set-up, timing and
 * medians, and one row format printed three ways (a fixed-width table for people, --csv, --json).
 *
 * Fields of a row, the same names in CSV and JSON (STYLE.md):
 *   backend,device,kernel,dtype,m,n,k,reps,median_ms,min_ms,gops,max_abs_err,ember_version,
 *   blas_core
 * `kernel` names the path that actually ran; `blas_core` is the OpenBLAS core of this process.
 * The human table adds `vs_ref`: the row's GOPS over the reference row of the same shape (the
 * direct cblas_sgemm call), measured in the same run, interleaved. */
#ifndef EMBER_BENCH_COMMON_H
#define EMBER_BENCH_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ember/ember.h>

#include "blas_coretype.h"

char *openblas_get_corename(void);
int openblas_get_num_threads(void);

typedef enum bench_format { BENCH_TABLE, BENCH_CSV, BENCH_JSON } bench_format;

typedef struct bench_row {
    char backend[16], device[32], kernel[48], dtype[16];
    int64_t m, n, k;
    int reps;
    double median_ms, min_ms, gops, max_abs_err;
    double vs_ref; /* table only; 0 when there is no reference row */
} bench_row;

static inline double bench_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median and minimum of n samples (sorted in place). */
static inline void bench_stats(double *v, int n, double *median, double *min) {
    qsort(v, (size_t)n, sizeof v[0], bench_cmp_double);
    *min = v[0];
    *median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static inline const char *bench_blas_core(void) {
    const char *c = openblas_get_corename();
    return c ? c : "unknown";
}

static inline void bench_header(bench_format f, const char *title) {
    if (f == BENCH_CSV) {
        printf("backend,device,kernel,dtype,m,n,k,reps,median_ms,min_ms,gops,max_abs_err,"
               "ember_version,blas_core\n");
    } else if (f == BENCH_JSON) {
        printf("[\n");
    } else {
        printf("ember %s %s: OpenBLAS core %s, %d OpenBLAS threads; medians of interleaved runs\n",
               ember_version_string(), title, bench_blas_core(), openblas_get_num_threads());
        printf("%-8s %-8s %-22s %-5s %6s %6s %6s %4s %10s %10s %9s %7s %11s %-10s\n", "backend",
               "device", "kernel", "dtype", "m", "n", "k", "reps", "median_ms", "min_ms", "GOPS",
               "vs_ref", "max_abs_err", "blas_core");
    }
}

static inline void bench_print_row(bench_format f, const bench_row *r, int first) {
    if (f == BENCH_CSV) {
        printf("%s,%s,%s,%s,%lld,%lld,%lld,%d,%.4f,%.4f,%.2f,%.3g,%s,%s\n", r->backend, r->device,
               r->kernel, r->dtype, (long long)r->m, (long long)r->n, (long long)r->k, r->reps,
               r->median_ms, r->min_ms, r->gops, r->max_abs_err, ember_version_string(),
               bench_blas_core());
    } else if (f == BENCH_JSON) {
        printf(
            "%s  {\"backend\": \"%s\", \"device\": \"%s\", \"kernel\": \"%s\", \"dtype\": \"%s\", "
            "\"m\": %lld, \"n\": %lld, \"k\": %lld, \"reps\": %d, \"median_ms\": %.4f, "
            "\"min_ms\": %.4f, \"gops\": %.2f, \"max_abs_err\": %.3g, \"ember_version\": "
            "\"%s\", \"blas_core\": \"%s\"}",
            first ? "" : ",\n", r->backend, r->device, r->kernel, r->dtype, (long long)r->m,
            (long long)r->n, (long long)r->k, r->reps, r->median_ms, r->min_ms, r->gops,
            r->max_abs_err, ember_version_string(), bench_blas_core());
    } else {
        char ratio[16] = "-";
        if (r->vs_ref > 0)
            snprintf(ratio, sizeof ratio, "%.2fx", r->vs_ref);
        printf("%-8s %-8s %-22s %-5s %6lld %6lld %6lld %4d %10.3f %10.3f %9.1f %7s %11.2e %-10s\n",
               r->backend, r->device, r->kernel, r->dtype, (long long)r->m, (long long)r->n,
               (long long)r->k, r->reps, r->median_ms, r->min_ms, r->gops, ratio, r->max_abs_err,
               bench_blas_core());
    }
    fflush(stdout);
}

static inline void bench_footer(bench_format f) {
    if (f == BENCH_JSON)
        printf("\n]\n");
}

/* The order of one round of interleaved rows: 0..n-1 shuffled (Fisher-Yates) from the xorshift
 * state *x, so that no row always follows the same one (a row meets what the row before it left
 * in the caches); the caller seeds *x, so runs repeat. */
static inline void bench_shuffle(int *order, int n, uint64_t *x) {
    for (int q = 0; q < n; q++)
        order[q] = q;
    for (int q = n - 1; q > 0; q--) {
        *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
        const int pick = (int)(*x % (uint64_t)(q + 1)), tmp = order[q];
        order[q] = order[pick];
        order[pick] = tmp;
    }
}

/* One step of xorshift64* from the state *s (never 0): 64 random bits. */
static inline uint64_t bench_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dull;
}

/* xorshift64*: reproducible inputs in [-1, 1). */
static inline void bench_fill(float *x, size_t n, uint64_t seed) {
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(bench_next(&s) >> 11) / 4503599627370496.0 - 1.0);
}

/* xorshift64*: reproducible random bytes (operands for the tile-unit probes, whose speed depends
 * on the bits that change) */
static inline void bench_fill_bytes(uint8_t *x, size_t n, uint64_t seed) {
    uint64_t s = seed | 1;
    for (size_t i = 0; i < n; i++)
        x[i] = (uint8_t)(bench_next(&s) >> 56);
}

#endif
