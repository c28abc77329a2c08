/* tests/util/test_util.h: helpers shared by the CUnit suites. */
#ifndef EMBER_TEST_UTIL_H
#define EMBER_TEST_UTIL_H

#include <CUnit/CUnit.h>
#include <stdint.h>
#include <string.h>

#include <ember/ember.h>

#include "dispatch/alloc.h" /* ember__alloc_live: the refusal checks below */

/* Run the suites in `suites` (a CU_SuiteInfo table, CU_SUITE_INFO_NULL-terminated) and return the
 * process exit code: non-zero when any test failed or CUnit itself failed. */
int tu_run(const char *name, CU_SuiteInfo *suites);

/* A fresh random seed per run (printed, and taken from EMBER_TEST_SEED when set). */
uint64_t tu_seed(void);
/* xorshift64* generator; tu_rand_f32 fills uniform values in [lo, hi). */
uint64_t tu_next(uint64_t *s);
void tu_rand_f32(uint64_t *s, float *dst, size_t n, float lo, float hi);

/* Assert a status and that ember_last_error() contains `needle` (NULL: anything). */
void tu_check_status(const char *file, int line, ember_status got, ember_status want,
                     const char *needle);
#define TU_ASSERT_STATUS(expr, code, needle)                                                       \
    tu_check_status(__FILE__, __LINE__, (expr), (code), (needle))

/* 1 in a build whose sanitizer owns the allocator (AddressSanitizer, ThreadSanitizer): a read of
 * freed memory is reported and an absurd request aborts instead of returning NULL, so tests that
 * read a freed handle on purpose (the magic check) or ask for 2^45 bytes simulate or skip that. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TU_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TU_SANITIZER 1
#endif
#endif
#ifndef TU_SANITIZER
#define TU_SANITIZER 0
#endif

#define TU_OK(expr) TU_ASSERT_STATUS(expr, EMBER_OK, (const char *)NULL)

/* A non-NULL pointer that is no tensor: an output slot must be NULL after a failure. */
#define OUT_SENTINEL ((ember_tensor *)(uintptr_t)0x5e471e0)

/* The call fails with code and text, allocating nothing net. */
#define EXPECT_REFUSED(call, code, text)                                                           \
    do {                                                                                           \
        long live0_ = ember__alloc_live();                                                         \
        TU_ASSERT_STATUS((call), (code), (text));                                                  \
        CU_ASSERT_EQUAL(ember__alloc_live(), live0_);                                              \
    } while (0)

/* The same for a call that writes a tensor through &out: out is set to OUT_SENTINEL first and
 * must be NULL after the failure. */
#define EXPECT_REFUSED_OUT(out, call, code, text)                                                  \
    do {                                                                                           \
        (out) = OUT_SENTINEL;                                                                      \
        EXPECT_REFUSED(call, code, text);                                                          \
        CU_ASSERT_PTR_NULL(out);                                                                   \
    } while (0)

/* A CPU-only context with defaults (the OpenCL backend off); CU_FAIL on error. */
ember_context *tu_cpu_context(void);
extern const ember_device TU_CPU;

/* A sample of quantization schemes that take different code paths, by index: 0 Q8S per tensor,
 * 1 Q4S PackedU32 per tensor, 2 Q8S blocks of 4 on the last axis, 3 E2M1 PackedNative blocks of 4
 * with a tensor-level scale and UE4M3 block scales, 4 E4M3 per tensor, 5 and up Q8F per tensor. */
ember_qscheme tu_qscheme_sample(int k);
/* Quantize x (shape xs) and w (shape ws), both of rank `rank` (Q8S per tensor), on dev of context
 * c, q_matmul them and read the f32 product into r (rbytes). The quantized operands go to *qx and
 * *qw when those are given (the caller frees them); every other tensor is freed again. CU failures
 * on any error. */
void tu_q8_matmul_nd(ember_context *c, ember_device dev, int rank, const int64_t *xs,
                     const int64_t *ws, const float *x, const float *w, float *r, size_t rbytes,
                     ember_tensor **qx, ember_tensor **qw);
/* The same for x [m, k] and w [k, n] into r [m, n], nothing kept. */
void tu_q8_matmul(ember_context *c, ember_device dev, int64_t m, int64_t k, int64_t n,
                  const float *x, const float *w, float *r);
/* A setting that must not change results: fresh random x [m, k] and w [k, n] q_matmul'd (as
 * tu_q8_matmul) on the CPU of each context made by make(setting[i]) for i = 0, 1 (each destroyed
 * after its product); asserts the two products are the same bits. */
void tu_q8_same_bits(ember_context *(*make)(long long), const long long setting[2], int64_t m,
                     int64_t k, int64_t n);

#endif
