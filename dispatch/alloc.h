/* dispatch/alloc.h (private): the one allocator every part of ember uses.
 *
 * All heap memory ember owns goes through these functions, so that tests can inject allocation
 * failures (ember__alloc_fail_at) and count live blocks. Sizes are checked for overflow. A failed
 * allocation returns NULL; callers turn that into EMBER_ERR_OUT_OF_MEMORY. */
#ifndef EMBER_DISPATCH_ALLOC_H
#define EMBER_DISPATCH_ALLOC_H

#include <stddef.h>

void *ember__malloc(size_t n);
void *ember__calloc(size_t count, size_t size);
void *ember__realloc(void *p, size_t n);
void ember__free(void *p);
/* 64-byte aligned memory (for kernels and host tensor buffers); free with ember__aligned_free. */
void *ember__aligned_alloc(size_t n);
void ember__aligned_free(void *p);
/* Memory of its own mapping for large operands: round_up(n, 4 KiB) bytes of fresh anonymous
 * memory starting on a 2 MiB boundary, its whole 2 MiB pages advised huge (Linux transparent huge
 * pages; the tail short of 2 MiB stays on 4 KiB pages). Counted and failure-injected like the
 * others. Free with ember__map_free(p, n) (the same n). */
void *ember__map_huge(size_t n);
void ember__map_free(void *p, size_t n);
/* Copy of a NUL-terminated string, or NULL. */
char *ember__strdup(const char *s);

/* Test hook: when n > 0, the n-th allocation from now on (counting from 1) fails and the counter
 * stops; 0 disables. Returns nothing; ember__alloc_count() tells how many allocations were made
 * since the hook was set (so a test can walk n = 1, 2, ... until the call succeeds). */
void ember__alloc_fail_at(long n);
long ember__alloc_count(void);
/* Blocks currently live (allocated and not freed) through this allocator. */
long ember__alloc_live(void);

/* Overflow-checked arithmetic on sizes: return 0 on overflow, 1 otherwise. */
int ember__mul_size(size_t a, size_t b, size_t *out);
int ember__add_size(size_t a, size_t b, size_t *out);

#endif
