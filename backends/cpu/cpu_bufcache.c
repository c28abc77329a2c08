/* backends/cpu/cpu_bufcache.c: the CPU backend's cache of freed tensor buffers.
 *
 * Every op allocates its output. A fresh multi-megabyte buffer costs a page fault per 4 KiB page
 * (or per 2 MiB huge page) on its first write, plus the kernel's zeroing of each page: measured
 * here on ember_q_matmul at 2048^3 (16 MiB f32 output), 7-19 ms per call with ~800 faults
 * against 4.1-4.7 ms once no call faulted. So freed buffers of at least EMBER__BUFCACHE_MIN bytes
 * are kept, up to a cap, and handed to the next allocation that fits (a buffer at most 1/8 larger
 * than asked). Nothing about a tensor's semantics changes: buffer contents are never promised (ops
 * write their whole output).
 *
 * Cap: EMBER_CPU_BUFFER_CACHE_MIB (read at context creation; 0 disables), default 512 MiB but at
 * most 1/8 of physical memory. ember_context_trim() gives everything cached back; the context's end
 * too. Under AddressSanitizer a cached buffer is poisoned, so a use after ember_tensor_free still
 * reports. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_backend.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMBER__ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMBER__ASAN 1
#endif
#endif
#ifdef EMBER__ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

ember_status ember__bufcache_init(ember__bufcache *c, size_t cap_bytes) {
    memset(c, 0, sizeof *c);
    c->cap = cap_bytes;
    EMBER_FAIL_IF(pthread_mutex_init(&c->lock, NULL) != 0, EMBER_ERR_OUT_OF_MEMORY,
                  "cpu backend: cannot create the buffer cache's lock");
    c->ready = 1;
    return EMBER_OK;
}

/* Take entry i out (lock held), keeping the others oldest first; returns its (unpoisoned) buffer.
 */
static void *take(ember__bufcache *c, int i) {
    void *p = c->e[i].p;
    UNPOISON(p, c->e[i].bytes);
    c->held -= c->e[i].bytes;
    memmove(&c->e[i], &c->e[i + 1], (size_t)(c->n - 1 - i) * sizeof c->e[0]);
    c->n--;
    return p;
}

void ember__bufcache_trim(ember__bufcache *c) {
    if (!c->ready)
        return;
    pthread_mutex_lock(&c->lock);
    while (c->n > 0)
        ember__aligned_free(take(c, c->n - 1));
    pthread_mutex_unlock(&c->lock);
}

void ember__bufcache_destroy(ember__bufcache *c) {
    if (!c->ready)
        return;
    ember__bufcache_trim(c);
    pthread_mutex_destroy(&c->lock);
    c->ready = 0;
}

void *ember__bufcache_get(ember__bufcache *c, size_t bytes) {
    if (!c->ready || c->cap == 0 || bytes < EMBER__BUFCACHE_MIN)
        return NULL;
    void *p = NULL;
    pthread_mutex_lock(&c->lock);
    int best = -1;
    for (int i = 0; i < c->n; i++) /* the smallest that fits, no more than 1/8 too large */
        if (c->e[i].bytes >= bytes && c->e[i].bytes - bytes <= bytes / 8 &&
            (best < 0 || c->e[i].bytes < c->e[best].bytes))
            best = i;
    if (best >= 0) {
        p = take(c, best);
        c->hits++;
    }
    pthread_mutex_unlock(&c->lock);
    return p;
}

int ember__bufcache_put(ember__bufcache *c, void *p) {
    if (!c->ready || c->cap == 0 || !p)
        return 0;
    size_t bytes = malloc_usable_size(p);
    if (bytes < EMBER__BUFCACHE_MIN || bytes > c->cap)
        return 0;
    pthread_mutex_lock(&c->lock);
    /* Make room: the oldest entries (index 0 first) go. */
    while (c->n > 0 && (c->held + bytes > c->cap || c->n == EMBER__BUFCACHE_SLOTS))
        ember__aligned_free(take(c, 0));
    c->e[c->n].p = p;
    c->e[c->n].bytes = bytes;
    c->n++;
    c->held += bytes;
    POISON(p, bytes);
    pthread_mutex_unlock(&c->lock);
    return 1;
}

size_t ember__bufcache_default_cap(void) {
    size_t cap = (size_t)512 << 20;
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0) {
        size_t eighth = (size_t)pages / 8 * (size_t)psz;
        if (eighth < cap)
            cap = eighth;
    }
    return cap;
}
