/* dispatch/alloc.c: the one allocator (see alloc.h), with the failure-injection hook. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "alloc.h"

static atomic_long fail_at; /* 0: off; else fail when the count reaches it */
static atomic_long count;   /* allocations since the hook was set */
static atomic_long live;    /* blocks allocated and not yet freed */

void ember__alloc_fail_at(long n) {
    atomic_store(&count, 0);
    atomic_store(&fail_at, n);
}

long ember__alloc_count(void) { return atomic_load(&count); }
long ember__alloc_live(void) { return atomic_load(&live); }

/* 1 when this allocation must fail (the hook is armed and its turn has come). */
static int inject(void) {
    long n = atomic_fetch_add(&count, 1) + 1;
    long f = atomic_load(&fail_at);
    if (f > 0 && n == f) {
        atomic_store(&fail_at, 0);
        return 1;
    }
    return 0;
}

int ember__mul_size(size_t a, size_t b, size_t *out) {
    if (a != 0 && b > SIZE_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

int ember__add_size(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a)
        return 0;
    *out = a + b;
    return 1;
}

void *ember__malloc(size_t n) {
    if (inject())
        return NULL;
    void *p = malloc(n ? n : 1);
    if (p)
        atomic_fetch_add(&live, 1);
    return p;
}

void *ember__calloc(size_t c, size_t s) {
    size_t n;
    if (!ember__mul_size(c, s, &n) || inject())
        return NULL;
    void *p = calloc(n ? n : 1, 1);
    if (p)
        atomic_fetch_add(&live, 1);
    return p;
}

void *ember__realloc(void *p, size_t n) {
    if (!p)
        return ember__malloc(n);
    if (inject())
        return NULL;
    return realloc(p, n ? n : 1);
}

void ember__free(void *p) {
    if (!p)
        return;
    atomic_fetch_sub(&live, 1);
    free(p);
}

void *ember__aligned_alloc(size_t n) {
    size_t r;
    if (!ember__add_size(n ? n : 1, 63, &r) || inject())
        return NULL;
    r &= ~(size_t)63;
    void *p = aligned_alloc(64, r);
    if (p)
        atomic_fetch_add(&live, 1);
    return p;
}

void ember__aligned_free(void *p) { ember__free(p); }

#define HUGE_2M ((size_t)2 << 20)
#define PAGE_4K ((size_t)4096)

/* The length a mapping of n bytes takes: n (at least 1) rounded up to whole 4 KiB pages; 0 when
 * that overflows. ember__map_huge maps it and ember__map_free unmaps it. */
static int map_len(size_t n, size_t *len) {
    if (!ember__add_size(n ? n : 1, PAGE_4K - 1, len))
        return 0;
    *len &= ~(PAGE_4K - 1);
    return 1;
}

void *ember__map_huge(size_t n) {
    size_t len, span;
    if (!map_len(n, &len) || !ember__add_size(len, HUGE_2M, &span) || inject())
        return NULL;
    /* 2 MiB more than asked, then the part before the first 2 MiB boundary and after the end
     * unmapped again */
    uint8_t *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    uint8_t *a = (uint8_t *)(((uintptr_t)m + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
    if (a > m)
        (void)munmap(m, (size_t)(a - m));
    if (m + span > a + len)
        (void)munmap(a + len, (size_t)(m + span - (a + len)));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (len >= HUGE_2M) /* advice only: a failure changes nothing */
        (void)madvise(a, len & ~(HUGE_2M - 1), MADV_HUGEPAGE);
#endif
    atomic_fetch_add(&live, 1);
    return a;
}

void ember__map_free(void *p, size_t n) {
    size_t len;
    if (!p)
        return;
    atomic_fetch_sub(&live, 1);
    if (map_len(n, &len)) /* n was mapped, so its length did not overflow */
        (void)munmap(p, len);
}

char *ember__strdup(const char *s) {
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = ember__malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}
