/* dispatch/error.h (private): recording failures, in the zstd manner.
 *
 * EMBER_FAIL(code, fmt, ...) records the detail (printf-style) together with the file, function and
 * line where it was detected, in the calling thread's last-error slot, and returns code from the
 * enclosing function. EMBER_FAIL_IF(cond, code, fmt, ...) does that when cond holds, so every early
 * return explains itself and the happy path stays on the left margin. With EMBER_LOG=debug each
 * failure is also printed to stderr. */
#ifndef EMBER_DISPATCH_ERROR_H
#define EMBER_DISPATCH_ERROR_H

#include <ember/status.h>

#if defined(__GNUC__) || defined(__clang__)
#define EMBER__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define EMBER__PRINTF(a, b)
#endif

/* Record a failure; returns code so that `return ember__fail(...)` reads naturally. */
ember_status ember__fail(ember_status code, const char *file, const char *func, int line,
                         const char *fmt, ...) EMBER__PRINTF(5, 6);

#define EMBER_FAIL(code, ...) return ember__fail((code), __FILE__, __func__, __LINE__, __VA_ARGS__)
#define EMBER_FAIL_IF(cond, code, ...)                                                             \
    do {                                                                                           \
        if (cond)                                                                                  \
            EMBER_FAIL(code, __VA_ARGS__);                                                         \
    } while (0)
/* Propagate a status from a callee that already recorded its detail. */
#define EMBER_TRY(expr)                                                                            \
    do {                                                                                           \
        ember_status ember__st = (expr);                                                           \
        if (ember__st != EMBER_OK)                                                                 \
            return ember__st;                                                                      \
    } while (0)

/* Logging level read from EMBER_LOG at context creation (0 off, 1 error, 2 debug). Atomic: one
 * thread may create a context (and set it) while another records a failure (and reads it). */
extern _Atomic int ember__log_level;

#endif
