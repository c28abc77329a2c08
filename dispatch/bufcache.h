/* dispatch/bufcache.h (private): a cache of freed tensor buffers, shared by the backends.
 *
 * Every op allocates its output, so a backend pays a fresh allocation per call: page faults on
 * the host (backends/cpu/cpu_backend.c), a driver allocation and release on an OpenCL device
 * (backends/opencl/cl_backend.c). A backend keeps its freed buffers here, up to `cap` bytes, and
 * the next allocation takes the smallest one that fits and is at most 1/8 larger than asked;
 * the oldest entries are released first to make room. The cache knows buffers only as opaque
 * pointers with a size; `release` frees one for good, given the size it was kept with (on
 * eviction, trim and destroy, under the cache's lock). With `poison` the buffers are host memory,
 * poisoned for AddressSanitizer while they are cached, so that a use after ember_tensor_free still
 * reports. */
#ifndef EMBER_DISPATCH_BUFCACHE_H
#define EMBER_DISPATCH_BUFCACHE_H

#include <pthread.h>
#include <stddef.h>

#include <ember/status.h>

#define EMBER__BUFCACHE_SLOTS_MAX 64

typedef void (*ember__bufcache_release_fn)(void *p, size_t bytes);

typedef struct ember__bufcache {
    pthread_mutex_t lock;
    int ready;   /* the lock exists */
    int n;       /* entries, oldest first */
    int slots;   /* entries kept at most (<= EMBER__BUFCACHE_SLOTS_MAX) */
    int poison;  /* host memory: poisoned for AddressSanitizer while cached */
    size_t cap;  /* bytes held at most; 0: the cache is off */
    size_t min;  /* smaller buffers are not kept */
    size_t held; /* bytes held now */
    long hits;   /* allocations served from the cache (tests read it) */
    ember__bufcache_release_fn release;
    struct {
        void *p;
        size_t bytes;
    } e[EMBER__BUFCACHE_SLOTS_MAX];
} ember__bufcache;

ember_status ember__bufcache_init(ember__bufcache *c, size_t cap, size_t min, int slots, int poison,
                                  ember__bufcache_release_fn release);
/* Release everything cached and the lock; a cache never initialised is ignored. */
void ember__bufcache_destroy(ember__bufcache *c);
/* Release everything cached (ember_context_trim). */
void ember__bufcache_trim(ember__bufcache *c);
/* A cached buffer of at least `bytes` (at most 1/8 more), taken out of the cache, or NULL. */
void *ember__bufcache_get(ember__bufcache *c, size_t bytes);
/* The same, with the size it was kept with in *kept (when a buffer is returned). */
void *ember__bufcache_take(ember__bufcache *c, size_t bytes, size_t *kept);
/* Keep p, a buffer of `bytes`; 0 when the cache declines it (the caller releases it). */
int ember__bufcache_put(ember__bufcache *c, void *p, size_t bytes);

#endif
