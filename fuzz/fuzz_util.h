/* fuzz/fuzz_util.h: what every ember fuzz harness shares.
 *
 * - fz_reader: reads typed values from the fuzzer's bytes (0 once they run out), in the manner
 *   of LLVM's FuzzedDataProvider, so that every input decodes to some call.
 * - fz_context(): one context per process (made once: creating one per input would cost more than
 *   the calls under test), CPU with one thread, OpenCL on when EMBER_FUZZ_OPENCL=1 and a device
 *   exists (PoCL is slow to build kernels; the bounded CTest runs keep it off).
 * - FZ_CHECK(cond): a violated contract is a crash the fuzzer reports (__builtin_trap).
 * - fz_check_status(): the status is a known code, a failure left a detail in ember_last_error()
 *   and NULLed the output.
 * - fz_leak_guard: ember's own live-block count must come back to where it was. The first use of
 *   a kernel may legitimately cache something for the context's life (OpenCL programs), so a
 *   harness that sees growth runs the input once more: growth on the repeat is a leak.
 *
 * A harness defines fz_one(const uint8_t *data, size_t size) and includes this file; the
 * LLVMFuzzerTestOneInput entry below wraps it with the leak guard. Built with libFuzzer
 * (clang -fsanitize=fuzzer) or with fuzz/standalone.c (any compiler: replays and mutates the
 * corpus for a bounded time). */
#ifndef EMBER_FUZZ_UTIL_H
#define EMBER_FUZZ_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ember/ember.h>

#include "dispatch/alloc.h"

#define FZ_CHECK(cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: fuzz check failed: %s (last error: %s)\n", __FILE__, __LINE__, \
                    #cond, ember_last_error());                                                    \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

typedef struct fz_reader {
    const uint8_t *p;
    size_t n;
} fz_reader;

static inline uint8_t fz_u8(fz_reader *r) {
    if (!r->n)
        return 0;
    r->n--;
    return *r->p++;
}

static inline uint32_t fz_u32(fz_reader *r) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)fz_u8(r) << (8 * i);
    return v;
}

static inline uint64_t fz_u64(fz_reader *r) {
    return (uint64_t)fz_u32(r) | (uint64_t)fz_u32(r) << 32;
}

/* Mostly small, sometimes the edges: 0..limit-1 from the low bits, and one value in 16 picked from
 * a table of troublemakers (negative, huge, the largest int). */
static inline int fz_int(fz_reader *r, int limit) {
    uint8_t b = fz_u8(r);
    if ((b & 0xF0) == 0xF0) {
        static const int edge[] = {-1, -2, 0x7fffffff, (int)0x80000000u, 255, 256, 9, 65536};
        return edge[b & 7];
    }
    return limit > 0 ? (int)(b % limit) : (int)b;
}

/* A dimension: 0..6 mostly; sometimes negative, 2^31, 2^40 or INT64_MAX. */
static inline int64_t fz_dim(fz_reader *r) {
    uint8_t b = fz_u8(r);
    if (b < 0xE0)
        return b % 7;
    static const int64_t edge[] = {
        -1, INT64_MIN, INT64_MAX, (int64_t)1 << 31, (int64_t)1 << 40, (int64_t)1 << 62, 64, 33};
    return edge[b & 7];
}

/* rank 1..4 mostly, sometimes 0, 8, 9 or negative. */
static inline int fz_rank(fz_reader *r) {
    uint8_t b = fz_u8(r);
    if (b < 0xF0)
        return 1 + b % 4;
    static const int edge[] = {0, 8, 9, -1, 5, 6, 7, 100};
    return edge[b & 7];
}

/* A float: from the bytes, with NaN / Inf / huge / tiny mixed in, in a bounded range otherwise. */
static inline float fz_f32(fz_reader *r) {
    uint8_t k = fz_u8(r);
    switch (k & 0x1F) {
    case 0:
        return NAN;
    case 1:
        return INFINITY;
    case 2:
        return -INFINITY;
    case 3:
        return 3.0e38f;
    case 4:
        return 1.0e-40f; /* subnormal */
    case 5:
        return -0.0f;
    case 6: {
        uint32_t u = fz_u32(r);
        float f;
        memcpy(&f, &u, sizeof f);
        return f; /* any bit pattern */
    }
    default:
        return (float)(int8_t)fz_u8(r) / 16.0f;
    }
}

/* Element count of a shape, or SIZE_MAX when it is invalid, overflows, or exceeds `cap`. */
static inline size_t fz_numel(int rank, const int64_t *shape, size_t cap) {
    if (rank < 1 || rank > EMBER_MAX_RANK)
        return SIZE_MAX;
    size_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0)
            return SIZE_MAX;
        if (shape[i] == 0)
            return 0; /* fine whatever the other dims are (but see ember's overflow check) */
    }
    for (int i = 0; i < rank; i++) {
        if ((uint64_t)shape[i] > cap || n > cap / (size_t)shape[i])
            return SIZE_MAX;
        n *= (size_t)shape[i];
    }
    return n;
}

/* ---- the shared context ---- */

static ember_context *fz_ctx_;
static int fz_ncl_;

static inline ember_context *fz_context(void) {
    if (!fz_ctx_) {
        ember_options o = ember_options_default();
        o.num_threads = 1;
        const char *e = getenv("EMBER_FUZZ_OPENCL");
        o.enable_opencl = (e && *e == '1') ? 1 : 0;
        if (ember_context_create(&o, &fz_ctx_) != EMBER_OK) {
            fprintf(stderr, "fuzz: cannot create a context: %s\n", ember_last_error());
            abort();
        }
        fz_ncl_ = ember_device_count(fz_ctx_, EMBER_BACKEND_OPENCL);
    }
    return fz_ctx_;
}

/* A device: mostly cpu:0, opencl:0 when there is one, sometimes one that does not exist. */
static inline ember_device fz_device(fz_reader *r) {
    uint8_t b = fz_u8(r);
    ember_device d = {EMBER_BACKEND_CPU, 0};
    switch (b & 0x0F) {
    case 0:
    case 1:
    case 2:
    case 3:
    case 4:
    case 5:
    case 6:
    case 7:
    case 8:
        break;
    case 9:
    case 10:
    case 11:
    case 12:
        if (fz_ncl_ > 0)
            d.backend = EMBER_BACKEND_OPENCL;
        break;
    case 13:
        d.index = 1;
        break; /* no such CPU device */
    case 14:
        d.backend = EMBER_BACKEND_OPENCL;
        d.index = fz_ncl_;
        break; /* one past the end */
    default:
        d.backend = (ember_backend)(2 + (b >> 4));
        break; /* no such backend */
    }
    return d;
}

static inline int fz_device_exists(ember_device d) {
    if (d.backend == EMBER_BACKEND_CPU)
        return d.index == 0;
    if (d.backend == EMBER_BACKEND_OPENCL)
        return d.index >= 0 && d.index < fz_ncl_;
    return 0;
}

/* A scheme built field by field from the bytes, each field sometimes out of its enum's range. */
static inline ember_qscheme fz_scheme(fz_reader *r) {
    ember_qscheme s;
    memset(&s, 0, sizeof s);
    uint8_t how = fz_u8(r);
    if ((how & 3) == 0) {
        s = ember_qscheme_per_tensor((ember_qvalue)fz_int(r, EMBER_QVALUE_COUNT + 1),
                                     (ember_qstore)fz_int(r, EMBER_QSTORE_COUNT + 1));
        return s;
    }
    if ((how & 3) == 1) {
        int64_t blk[EMBER_MAX_BLOCK_RANK];
        int br = fz_int(r, EMBER_MAX_BLOCK_RANK + 1);
        for (int i = 0; i < EMBER_MAX_BLOCK_RANK; i++)
            blk[i] = fz_dim(r);
        s = ember_qscheme_per_block((ember_qvalue)fz_int(r, EMBER_QVALUE_COUNT + 1),
                                    (ember_qstore)fz_int(r, EMBER_QSTORE_COUNT + 1), br,
                                    br >= 0 && br <= EMBER_MAX_BLOCK_RANK ? blk : NULL);
        if (fz_u8(r) & 1) {
            s.tensor_level = 1;
            s.block_scale = (ember_scale_dtype)fz_int(r, EMBER_SCALE_DTYPE_COUNT + 1);
        }
        return s;
    }
    s.value = (ember_qvalue)fz_int(r, EMBER_QVALUE_COUNT + 1);
    s.store = (ember_qstore)fz_int(r, EMBER_QSTORE_COUNT + 1);
    s.packing_dim = fz_int(r, 4);
    s.block_rank = fz_int(r, EMBER_MAX_BLOCK_RANK + 2);
    for (int i = 0; i < EMBER_MAX_BLOCK_RANK; i++)
        s.block[i] = fz_dim(r);
    s.block_scale = (ember_scale_dtype)fz_int(r, EMBER_SCALE_DTYPE_COUNT + 1);
    s.tensor_level = fz_int(r, 3);
    s.tensor_scale = (ember_scale_dtype)fz_int(r, EMBER_SCALE_DTYPE_COUNT + 1);
    s.mode = (ember_qmode)fz_int(r, EMBER_QMODE_COUNT + 1);
    return s;
}

/* ---- contract checks ---- */

static inline int fz_known_status(ember_status st) {
    return strcmp(ember_status_name(st), "EMBER_UNKNOWN_STATUS") != 0;
}

/* Every call: a known status; on failure a detail and a NULL output (out may be NULL: no output).
 */
static inline void fz_check_status(ember_status st, ember_tensor *const *out) {
    FZ_CHECK(fz_known_status(st));
    if (st != EMBER_OK) {
        FZ_CHECK(ember_last_error()[0] != '\0');
        FZ_CHECK(ember_last_error_status() == st);
        if (out)
            FZ_CHECK(*out == NULL);
    } else if (out) {
        FZ_CHECK(*out != NULL);
    }
}

/* A snapshot of a tensor's contents (plain: its elements; quantized: its QuantizedBytes), to
 * check that an op did not modify an input. Small tensors only (the harnesses keep them small). */
typedef struct fz_snap {
    unsigned char *bytes;
    size_t len;
    int ok;
} fz_snap;

static inline fz_snap fz_snapshot(const ember_tensor *t) {
    fz_snap s = {NULL, 0, 0};
    if (!t)
        return s;
    if (ember_tensor_dtype(t) == EMBER_QFLOAT) {
        size_t len = 0;
        if (ember_qtensor_to_bytes(t, NULL, 0, &len) != EMBER_OK)
            return s;
        s.bytes = malloc(len ? len : 1);
        if (!s.bytes)
            return s;
        if (ember_qtensor_to_bytes(t, s.bytes, len, &s.len) != EMBER_OK)
            return s;
    } else {
        const ember_dtype_traits *tr = ember_dtype_get_traits(ember_tensor_dtype(t));
        if (!tr)
            return s;
        s.len = (size_t)ember_tensor_numel(t) * tr->size;
        s.bytes = malloc(s.len ? s.len : 1);
        if (!s.bytes)
            return s;
        if (ember_tensor_read(t, s.bytes, s.len) != EMBER_OK)
            return s;
    }
    s.ok = 1;
    return s;
}

/* The tensor still holds what the snapshot saw. */
static inline void fz_check_snapshot(const ember_tensor *t, fz_snap *s) {
    if (s->ok) {
        fz_snap now = fz_snapshot(t);
        FZ_CHECK(now.ok && now.len == s->len && memcmp(now.bytes, s->bytes, s->len) == 0);
        free(now.bytes);
    }
    free(s->bytes);
    s->bytes = NULL;
}

/* ---- entry point with the leak guard ---- */

static void fz_one(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_context();
    long before = ember__alloc_live();
    fz_one(data, size);
    long after = ember__alloc_live();
    if (after != before) { /* a first-use cache, or a leak: a repeat tells */
        before = after;
        fz_one(data, size);
        after = ember__alloc_live();
        if (after != before) {
            fprintf(stderr, "fuzz: ember leaked %ld block(s) on this input\n", after - before);
            __builtin_trap();
        }
    }
    ember_clear_error();
    return 0;
}

#endif
