/* dispatch/bufcache.c: the cache of freed tensor buffers (bufcache.h has the policy). */
#include <string.h>

#include "bufcache.h"
#include "error.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMBER__ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMBER__ASAN 1
#endif
#endif
#ifdef EMBER__ASAN
#include <sanitizer/asan_interface.h>
#define POISON(c, p, n)                                                                            \
    do {                                                                                           \
        if ((c)->poison)                                                                           \
            ASAN_POISON_MEMORY_REGION((p), (n));                                                   \
    } while (0)
#define UNPOISON(c, p, n)                                                                          \
    do {                                                                                           \
        if ((c)->poison)                                                                           \
            ASAN_UNPOISON_MEMORY_REGION((p), (n));                                                 \
    } while (0)
#else
#define POISON(c, p, n) ((void)(c), (void)(p), (void)(n))
#define UNPOISON(c, p, n) ((void)(c), (void)(p), (void)(n))
#endif

ember_status ember__bufcache_init(ember__bufcache *c, size_t cap, size_t min, int slots, int poison,
                                  ember__bufcache_release_fn release) {
    memset(c, 0, sizeof *c);
    c->cap = cap;
    c->min = min;
    c->slots = slots < EMBER__BUFCACHE_SLOTS_MAX ? slots : EMBER__BUFCACHE_SLOTS_MAX;
    c->poison = poison;
    c->release = release;
    EMBER_FAIL_IF(pthread_mutex_init(&c->lock, NULL) != 0, EMBER_ERR_OUT_OF_MEMORY,
                  "cannot create a buffer cache's lock");
    c->ready = 1;
    return EMBER_OK;
}

/* Take entry i out (lock held), keeping the others oldest first; returns its (unpoisoned)
 * buffer. */
static void *take(ember__bufcache *c, int i, size_t *bytes) {
    void *p = c->e[i].p;
    *bytes = c->e[i].bytes;
    UNPOISON(c, p, c->e[i].bytes);
    c->held -= c->e[i].bytes;
    memmove(&c->e[i], &c->e[i + 1], (size_t)(c->n - 1 - i) * sizeof c->e[0]);
    c->n--;
    return p;
}

void ember__bufcache_trim(ember__bufcache *c) {
    if (!c->ready)
        return;
    pthread_mutex_lock(&c->lock);
    size_t bytes;
    while (c->n > 0) {
        void *p = take(c, c->n - 1, &bytes);
        c->release(p, bytes);
    }
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
    size_t kept;
    return ember__bufcache_take(c, bytes, &kept);
}

void *ember__bufcache_take(ember__bufcache *c, size_t bytes, size_t *kept) {
    if (!c->ready || c->cap == 0 || bytes == 0 || bytes < c->min)
        return NULL;
    void *p = NULL;
    pthread_mutex_lock(&c->lock);
    int best = -1;
    for (int i = 0; i < c->n; i++) /* the smallest that fits, no more than 1/8 too large */
        if (c->e[i].bytes >= bytes && c->e[i].bytes - bytes <= bytes / 8 &&
            (best < 0 || c->e[i].bytes < c->e[best].bytes))
            best = i;
    if (best >= 0) {
        p = take(c, best, kept);
        c->hits++;
    }
    pthread_mutex_unlock(&c->lock);
    return p;
}

int ember__bufcache_put(ember__bufcache *c, void *p, size_t bytes) {
    if (!c->ready || c->cap == 0 || !p || bytes == 0 || bytes < c->min || bytes > c->cap)
        return 0;
    pthread_mutex_lock(&c->lock);
    /* Make room: the oldest entries (index 0 first) go. */
    while (c->n > 0 && (c->held + bytes > c->cap || c->n == c->slots)) {
        size_t old;
        void *q = take(c, 0, &old);
        c->release(q, old);
    }
    c->e[c->n].p = p;
    c->e[c->n].bytes = bytes;
    c->n++;
    c->held += bytes;
    POISON(c, p, bytes);
    pthread_mutex_unlock(&c->lock);
    return 1;
}
