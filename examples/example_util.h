/* examples/example_util.h: the small helpers the example programs share (header only: each
 * example is one .c file and one executable). An example may stop at its first error: CHECK says
 * what failed and why, and exits. */
#ifndef EMBER_EXAMPLE_UTIL_H
#define EMBER_EXAMPLE_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <ember/ember.h>

#define CHECK(expr) ex_check_ok((expr), #expr, __FILE__, __LINE__)
static inline void ex_check_ok(ember_status st, const char *what, const char *file, int line) {
    if (st == EMBER_OK)
        return;
    fflush(stdout);
    fprintf(stderr, "%s:%d: %s\n  -> %s: %s\n", file, line, what, ember_status_name(st),
            ember_last_error());
    exit(1);
}

static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
