/* backends/cpu/qgemm.c: tier selection, operand packing and the threaded driver of the int8
 * matmul, plus the scalar tier (the reference every other tier is tested against). See qgemm.h
 * for the packed layouts. Baseline x86-64 only here (SSE2 for the packing shuffles). */
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <emmintrin.h>
#define EMBER__X86 1
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "qgemm.h"

/* ------------------------------------------------------------------ tiers */

const char *ember__qtier_name(ember__qtier t) {
    switch (t) {
    case EMBER__QT_SCALAR:
        return "scalar";
    case EMBER__QT_AVX2:
        return "avx2";
    case EMBER__QT_AVX512:
        return "avx512_vnni";
    case EMBER__QT_AMX:
        return "amx";
    default:
        return "unknown";
    }
}

#ifdef EMBER__X86
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static int amx_permission(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    /* ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18; idempotent, per process. */
    static int cached = -1;
    int c = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (c < 0) {
        c = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
        __atomic_store_n(&cached, c, __ATOMIC_RELEASE);
    }
    return c;
#else
    return 0;
#endif
}
#endif

static int qtier_probe(ember__qtier t) {
    if (t == EMBER__QT_SCALAR)
        return 1;
#ifdef EMBER__X86
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE */
        return 0;
    uint64_t xcr0 = xgetbv0();
    if ((xcr0 & 0x6) != 0x6)
        return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    int avx2 = (b >> 5) & 1;
    int avx512 = ((b >> 16) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1) && ((b >> 17) & 1) &&
                 ((c >> 11) & 1) && (xcr0 & 0xe0) == 0xe0;
    int amx = ((d >> 24) & 1) && ((d >> 25) & 1);
    switch (t) {
    case EMBER__QT_AVX2:
        return avx2;
    case EMBER__QT_AVX512:
        return avx2 && avx512;
    case EMBER__QT_AMX:
        return avx2 && avx512 && amx && amx_permission();
    default:
        return 0;
    }
#else
    return 0;
#endif
}

int ember__avx2_no_vnni = 0;

/* CPUID.(EAX=7, ECX=1):EAX bit 4, on a machine with the AVX2 tier (the OS saves the ymm state) */
static int avxvnni_probe(void) {
#ifdef EMBER__X86
    unsigned a, b, c, d;
    return ember__qtier_available(EMBER__QT_AVX2) && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
           ((a >> 4) & 1);
#else
    return 0;
#endif
}

int ember__avx2_vnni(void) {
    static int cache; /* 0 unknown, 1 no, 2 yes */
    int c = __atomic_load_n(&cache, __ATOMIC_ACQUIRE);
    if (!c) {
        c = avxvnni_probe() ? 2 : 1;
        __atomic_store_n(&cache, c, __ATOMIC_RELEASE);
    }
    return c == 2 && !ember__avx2_no_vnni;
}

/* CPUID traps to the hypervisor in a VM (tens of microseconds here): probe once per process. */
int ember__qtier_available(ember__qtier t) {
    static int cache[EMBER__QT_COUNT]; /* 0 unknown, 1 no, 2 yes */
    if ((unsigned)t >= EMBER__QT_COUNT)
        return 0;
    int c = __atomic_load_n(&cache[t], __ATOMIC_ACQUIRE);
    if (!c) {
        c = qtier_probe(t) ? 2 : 1;
        __atomic_store_n(&cache[t], c, __ATOMIC_RELEASE);
    }
    return c == 2;
}

ember__qtier ember__qtier_select(const char *cap) {
    ember__qtier top = EMBER__QT_AMX;
    if (cap && *cap) {
        if (!strcmp(cap, "scalar") || !strcmp(cap, "none"))
            top = EMBER__QT_SCALAR;
        else if (!strcmp(cap, "avx2"))
            top = EMBER__QT_AVX2;
        else if (!strcmp(cap, "avx512") || !strcmp(cap, "avx512_vnni"))
            top = EMBER__QT_AVX512;
    }
    for (int t = (int)top; t > 0; t--)
        if (ember__qtier_available((ember__qtier)t))
            return (ember__qtier)t;
    return EMBER__QT_SCALAR;
}

/* ------------------------------------------------------------------ packing B */

static int64_t round_up(int64_t x, int64_t r) { return (x + r - 1) / r * r; }

static size_t round_up64(size_t x) { return (x + 63) & ~(size_t)63; }

/* bytes rounded up to whole 2 MiB pages (a mapping advised huge only in whole pages gets them) */
static size_t whole_pages(size_t bytes) {
    const size_t page = (size_t)2 << 20;
    return (bytes + page - 1) / page * page;
}

/* Whether bytes fill their whole 2 MiB pages to within an eighth: a region wastes little. */
static int fills_pages(size_t bytes) { return bytes && (whole_pages(bytes) - bytes) * 8 <= bytes; }

/* A pack's values (voff bytes, a multiple of 64) and then sbytes of scales into p->b and p->sb
 * (p->b NULL when no memory can be had). From 4 MiB in all, or where they fill their 2 MiB pages
 * (fills_pages), they take a region of their own (ember__cpu_region_get: 2 MiB-aligned, advised
 * huge, recycled through the context's cache of freed regions), p->b_map its size and p->b_owner
 * the state to give it back to; below 4 MiB such a region is rounded up to whole 2 MiB pages (an
 * eighth more at most), so that every page of it can be huge. Below 4 MiB, values that fill their
 * pages alone (512 x 4096 int8, 4096 x 1024 in nibbles) take a region and the scales a heap
 * allocation of their own (p->sb_heap). The rest is 64-byte aligned heap memory (p->b_map 0) from
 * the context's cache of freed buffers (ember__cpu_temp_get), and back there when the pack is
 * freed: pages an earlier pack or tensor faulted in. Packing a 1000 x 1000 int8 B and freeing it in
 * a loop (Zen 5 VM, 2 threads, medians of 15): 1436 us a pack from glibc, which mapped and faulted
 * the 1 MiB afresh each time, against 100 us.
 *
 * Why: the kernels stream a pack panel by panel, one TLB entry per 2 MiB instead of per 4 KiB.
 * Advised huge (2 threads, two packs of the same B in one process, alternated, medians of 11-15,
 * 48 MiB written between calls): 128 x 4096^2 3140 / 3120 -> 3247 / 3289 GOPS, 32 x 4096^2 1295 /
 * 1253 -> 1322 / 1324, 8 x 4096^2 352 / 364 -> 382 / 369; 2048^3 and 4096^3 within 1%. The 4-bit
 * decode row reads 12% slower off huge pages (the 8-bit one 6%), and a pack from
 * glibc's heap lands on pages other buffers touched first, which the advice does not make huge.
 * Before this, the values were placed on a 2 MiB boundary inside a heap allocation 2 MiB larger:
 * in seven full tables Q4 / Q8 at M = 1 read 1.72-2.03, but in ten later ones 1.12-1.26 in eight,
 * as the heap's state decided (bench/results/cpu.md, twelfth session). A plain 2 MiB-aligned heap
 * allocation had cost first calls up to 53%: glibc then mapped and faulted fresh memory on every
 * call that packs; the cache of freed regions keeps that reuse.
 * The values that fill their pages below 4 MiB: on the heap such a pack faulted in every 4 KiB
 * page at its first call, 512 of them for 2 MiB at 5.5 us each on a Zen 5 VM, where a huge page
 * costs one fault of ~140 us (none when the region comes from the cache): a first call at 512 x
 * 512 x 4096 (VNNI tier, 2 threads) took 4.1-4.4 ms against 1.3 cached. */
static void pack_values_alloc(ember__cpu_state *s, ember__qpack *p, size_t voff, size_t sbytes) {
    const size_t total = voff + sbytes;
    p->b_owner = s;
    if (total >= EMBER__CPU_REGION_MIN || fills_pages(total)) {
        p->b = ember__cpu_region_get(s, total >= EMBER__CPU_REGION_MIN ? total : whole_pages(total),
                                     &p->b_map);
        p->sb = p->b ? p->b + voff : NULL;
    } else if (fills_pages(voff)) {
        p->b = ember__cpu_region_get(s, whole_pages(voff), &p->b_map);
        p->sb = p->sb_heap = p->b ? ember__cpu_temp_get(s, sbytes) : NULL;
        if (!p->sb_heap) {
            ember__cpu_region_put(s, p->b, p->b_map);
            p->b = NULL;
            p->b_map = 0;
        }
    } else {
        p->b = ember__cpu_temp_get(s, total);
        p->sb = p->b ? p->b + voff : NULL;
    }
}

typedef struct pack_b_arg {
    ember__qpack *p;
    const float *scales; /* [nch][n], or NULL: all 1 */
    ember__qrow_fn row;
    const void *src;
    const int8_t *plain;   /* plain int8 rows (row callback unused), 8-bit only */
    const uint8_t *plain4; /* packed 4-bit rows as stored (row callback unused), 4-bit only */
    int64_t ldb;           /* bytes from one row of plain or plain4 to the next */
    int avx512;
    int stream; /* 8-bit values written with streaming stores (a large B) */
} pack_b_arg;

#define PACK_NB 256 /* columns per packing task */
#define SCALE_PFD 4 /* rows of scales fetched ahead by a packing task */
/* Plain B: rows are prefetched this far ahead of the packer. Measured (2 threads, same process,
 * alternated, medians of 7, pack + product as a first call): 2048^3 3010 -> 3419 GOPS, 4096^3
 * 2911 -> 3300, 512 x 4096^2 2592 -> 2932. */
#define PLAIN_PFD 16

/* Interleave 4 rows of 16 int8 (r0..r3) into 64 bytes: column-major groups of 4, biased. */
static void interleave16(const int8_t *r0, const int8_t *r1, const int8_t *r2, const int8_t *r3,
                         uint8_t *dst, int bias128) {
#ifdef EMBER__X86
    __m128i a = _mm_loadu_si128((const __m128i *)r0), b = _mm_loadu_si128((const __m128i *)r1);
    __m128i c = _mm_loadu_si128((const __m128i *)r2), d = _mm_loadu_si128((const __m128i *)r3);
    __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
    __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
    __m128i x0 = _mm_unpacklo_epi16(ab0, cd0), x1 = _mm_unpackhi_epi16(ab0, cd0);
    __m128i x2 = _mm_unpacklo_epi16(ab1, cd1), x3 = _mm_unpackhi_epi16(ab1, cd1);
    __m128i bias = _mm_set1_epi8(bias128 ? (char)0x80 : 8);
    if (bias128) {
        x0 = _mm_xor_si128(x0, bias), x1 = _mm_xor_si128(x1, bias);
        x2 = _mm_xor_si128(x2, bias), x3 = _mm_xor_si128(x3, bias);
    } else {
        x0 = _mm_add_epi8(x0, bias), x1 = _mm_add_epi8(x1, bias);
        x2 = _mm_add_epi8(x2, bias), x3 = _mm_add_epi8(x3, bias);
    }
    _mm_store_si128((__m128i *)dst, x0);
    _mm_store_si128((__m128i *)(dst + 16), x1);
    _mm_store_si128((__m128i *)(dst + 32), x2);
    _mm_store_si128((__m128i *)(dst + 48), x3);
#else
    const int8_t *r[4] = {r0, r1, r2, r3};
    for (int c = 0; c < 16; c++)
        for (int q = 0; q < 4; q++)
            dst[c * 4 + q] = (uint8_t)(r[q][c] + (bias128 ? 128 : 8));
#endif
}

/* 4-bit B as stored, rows fetched this far ahead (each row's piece of a task lies ldb bytes from
 * the next, out of reach of the hardware prefetchers, as for plain int8 B) */
#define PLAIN4_PFD 16

#ifdef EMBER__X86
/* 16 values (8 bytes, columns past nv zero) of a 4-bit row as biased bytes in column order: the
 * nibble u of each value xor 8, which is v + 8 for the two's complement value v it holds (the
 * generic path's int8 value plus its bias 8, in 4 bits) */
static inline __m128i plain4_piece(const uint8_t *row, int64_t nv) {
    __m128i x;
    if (nv >= 16) {
        x = _mm_loadl_epi64((const __m128i *)(const void *)row);
    } else {
        uint8_t t[8] = {0};
        if (nv > 0)
            memcpy(t, row, (size_t)(nv + 1) / 2);
        if (nv > 0 && nv % 2)
            t[nv / 2] &= 0x0f; /* the column past nv */
        x = _mm_loadl_epi64((const __m128i *)(const void *)t);
    }
    const __m128i m = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(x, m), hi = _mm_and_si128(_mm_srli_epi16(x, 4), m);
    return _mm_xor_si128(_mm_unpacklo_epi8(lo, hi), _mm_set1_epi8(8));
}

/* 4 rows of 16 biased values -> 64 bytes, byte 4c + q holding row q's column c */
static inline void plain4_quad(const __m128i r[4], __m128i out[4]) {
    const __m128i ab0 = _mm_unpacklo_epi8(r[0], r[1]), ab1 = _mm_unpackhi_epi8(r[0], r[1]);
    const __m128i cd0 = _mm_unpacklo_epi8(r[2], r[3]), cd1 = _mm_unpackhi_epi8(r[2], r[3]);
    out[0] = _mm_unpacklo_epi16(ab0, cd0);
    out[1] = _mm_unpackhi_epi16(ab0, cd0);
    out[2] = _mm_unpacklo_epi16(ab1, cd1);
    out[3] = _mm_unpackhi_epi16(ab1, cd1);
}

/* The panels of columns [j0, j0 + jn) (nv of them real) from 4-bit B as stored: per 8 K rows and
 * 16 columns, 64 bytes whose byte 4c + q holds rows k0 + q (low nibble) and k0 + 4 + q (high) of
 * column c, biased by 8 (the generic path's bytes: unpack, interleave16, nibble merge).
 * Padding rows and columns hold 8 (the value 0). */
static void plain4_task(const pack_b_arg *a, int64_t j0, int64_t jn, int64_t nv) {
    const ember__qpack *p = a->p;
    const __m128i zero = _mm_set1_epi8(8), m = _mm_set1_epi8(0x0f);
    for (int64_t k0 = 0; k0 < p->kp; k0 += 8) {
        if (k0 + PLAIN4_PFD < p->k)
            for (int64_t r = k0 + PLAIN4_PFD; r < k0 + PLAIN4_PFD + 8 && r < p->k; r++)
                for (int64_t c = 0; c < (nv + 1) / 2; c += 64)
                    __builtin_prefetch(a->plain4 + r * a->ldb + j0 / 2 + c, 0, 3);
        for (int64_t jj = 0; jj < jn; jj += 16) {
            __m128i rows[8], lo[4], hi[4];
            for (int r = 0; r < 8; r++)
                rows[r] = k0 + r < p->k && jj < nv
                              ? plain4_piece(a->plain4 + (k0 + r) * a->ldb + (j0 + jj) / 2, nv - jj)
                              : zero;
            plain4_quad(rows, lo);
            plain4_quad(rows + 4, hi);
            const int64_t panel = (j0 + jj) / 32, half = ((j0 + jj) % 32) / 16;
            uint8_t *dst = p->b + (panel * (p->kp / 8) + k0 / 8) * 128 + half * 64;
            for (int q = 0; q < 4; q++)
                _mm_store_si128((__m128i *)(void *)(dst + 16 * q),
                                _mm_or_si128(_mm_and_si128(lo[q], m),
                                             _mm_slli_epi16(_mm_and_si128(hi[q], m), 4)));
        }
    }
}
#else
/* value j of row r of 4-bit B as stored, biased as in the packed panels (8 past the values) */
static int plain4_nib(const pack_b_arg *a, int64_t r, int64_t j, int64_t nv) {
    if (r >= a->p->k || j >= nv)
        return 8;
    return ((a->plain4[r * a->ldb + j / 2] >> (4 * (j % 2))) & 0xf) ^ 8;
}

/* plain4_task's bytes, value by value */
static void plain4_task(const pack_b_arg *a, int64_t j0, int64_t jn, int64_t nv) {
    const ember__qpack *p = a->p;
    for (int64_t k0 = 0; k0 < p->kp; k0 += 8)
        for (int64_t jj = 0; jj < jn; jj += 16) {
            const int64_t panel = (j0 + jj) / 32, half = ((j0 + jj) % 32) / 16;
            uint8_t *dst = p->b + (panel * (p->kp / 8) + k0 / 8) * 128 + half * 64;
            for (int c = 0; c < 16; c++)
                for (int q = 0; q < 4; q++)
                    dst[4 * c + q] =
                        (uint8_t)(plain4_nib(a, k0 + q, j0 + jj + c, j0 + nv) |
                                  plain4_nib(a, k0 + 4 + q, j0 + jj + c, j0 + nv) << 4);
        }
}
#endif

static void pack_b_task(void *varg, int64_t task, int thread) {
    (void)thread;
    pack_b_arg *a = varg;
    ember__qpack *p = a->p;
    const int64_t j0 = task * PACK_NB;
    const int64_t jn = p->np - j0 < PACK_NB ? p->np - j0 : PACK_NB;           /* multiple of 32 */
    const int64_t nv = p->n - j0 < jn ? (p->n - j0 > 0 ? p->n - j0 : 0) : jn; /* real columns */
    /* the task's panels' scales, in their order (panel-major: each panel's chunks one after the
     * other); padding columns 0. f16 only when every scale is exactly one (ember__f32_exact_f16) */
    for (int64_t c = 0; c < p->nch; c++) /* a row of scales at a time: 1 KiB read in order */
        for (int64_t jp = j0; jp < j0 + jn; jp += 32) {
            const int64_t d = ember__qpack_sidx(p, c, jp);
            if (a->scales && a->avx512) {
                /* the row SCALE_PFD rows on (rows are n scales apart: no hardware prefetch) */
                if (jp == j0 && c + SCALE_PFD < p->nch)
                    for (int64_t l = 0; l < nv; l += 16)
                        __builtin_prefetch(a->scales + (c + SCALE_PFD) * p->n + j0 + l, 0, 3);
                /* (a padding panel reads none: any address will do) */
                ember__qscales32_avx512(
                    jp < p->n ? a->scales + c * p->n + jp : a->scales, p->n - jp, p->sb16,
                    p->sb16 ? (void *)((uint16_t *)p->sb + d) : (void *)((float *)p->sb + d));
                continue;
            }
            for (int64_t jj = 0; jj < 32; jj++) {
                const int64_t j = jp + jj;
                const float f = j < p->n ? (a->scales ? a->scales[c * p->n + j] : 1.0f) : 0.0f;
                if (p->sb16) {
                    uint16_t h = 0;
                    (void)ember__f32_exact_f16(f, &h);
                    ((uint16_t *)p->sb)[d + jj] = h;
                } else {
                    ((float *)p->sb)[d + jj] = f;
                }
            }
        }
    /* 8 rows of PACK_NB values (zero padded) */
    int8_t rows[8][PACK_NB] __attribute__((aligned(64)));
    uint8_t tmp[2][64] __attribute__((aligned(64)));
    const int64_t kstep = p->bits == 8 ? 4 : 8;
    if (p->bits == 8 && a->avx512) { /* rows in place (plain) or through the callback */
        const int64_t pstride = (p->kp / 4) * 128;
        for (int64_t k0 = 0; k0 < p->kp; k0 += 4) {
            const int8_t *rp[4];
            for (int r = 0; r < 4; r++) {
                if (k0 + r >= p->k || nv <= 0) {
                    rp[r] = NULL;
                } else if (a->plain) {
                    rp[r] = a->plain + (k0 + r) * a->ldb + j0;
                    /* the row PLAIN_PFD ahead: each row's piece lies on its own page, out of
                     * reach of the hardware prefetchers */
                    if (k0 + r + PLAIN_PFD < p->k)
                        for (int64_t c = 0; c < nv; c += 64)
                            __builtin_prefetch(rp[r] + PLAIN_PFD * a->ldb + c, 0, 3);
                } else {
                    a->row(a->src, k0 + r, j0, nv, rows[r]);
                    rp[r] = rows[r];
                }
            }
            ember__qpack8_avx512(rp, nv, jn, p->b + (j0 / 32) * pstride + (k0 / 4) * 128, pstride,
                                 a->stream);
        }
#ifdef EMBER__X86
        if (a->stream)
            _mm_sfence(); /* the streamed panels, before the pool's join */
#endif
        return;
    }
    if (a->plain4) {
        plain4_task(a, j0, jn, nv);
        return;
    }
    for (int64_t k0 = 0; k0 < p->kp; k0 += kstep) {
        for (int64_t r = 0; r < kstep; r++) {
            if (k0 + r < p->k && nv > 0) {
                a->row(a->src, k0 + r, j0, nv, rows[r]);
                if (nv < jn)
                    memset(rows[r] + nv, 0, (size_t)(jn - nv));
            } else {
                memset(rows[r], 0, (size_t)jn);
            }
        }
        for (int64_t jj = 0; jj < jn; jj += 16) {
            const int64_t panel = (j0 + jj) / 32, half = ((j0 + jj) % 32) / 16;
            if (p->bits == 8) {
                uint8_t *dst = p->b + (panel * (p->kp / 4) + k0 / 4) * 128 + half * 64;
                interleave16(rows[0] + jj, rows[1] + jj, rows[2] + jj, rows[3] + jj, dst, 1);
            } else {
                interleave16(rows[0] + jj, rows[1] + jj, rows[2] + jj, rows[3] + jj, tmp[0], 0);
                interleave16(rows[4] + jj, rows[5] + jj, rows[6] + jj, rows[7] + jj, tmp[1], 0);
                uint8_t *dst = p->b + (panel * (p->kp / 8) + k0 / 8) * 128 + half * 64;
                for (int q = 0; q < 64; q++)
                    dst[q] = (uint8_t)((tmp[0][q] & 0xf) | (tmp[1][q] << 4));
            }
        }
    }
}

ember_status ember__qpack_b(ember__qpack *p, int64_t k, int64_t n, int64_t kc, int bits,
                            ember__qrow_fn row, const void *src, const float *scales) {
    return ember__qpack_b_mt(NULL, p, k, n, kc, bits, row, src, scales);
}

static ember_status qpack_b_any(ember__cpu_state *s, ember__qpack *p, int64_t k, int64_t n,
                                int64_t kc, int bits, ember__qrow_fn row, const void *src,
                                const int8_t *plain, const uint8_t *plain4, int64_t ldb,
                                const float *scales);

ember_status ember__qpack_b_mt(ember__cpu_state *s, ember__qpack *p, int64_t k, int64_t n,
                               int64_t kc, int bits, ember__qrow_fn row, const void *src,
                               const float *scales) {
    return qpack_b_any(s, p, k, n, kc, bits, row, src, NULL, NULL, 0, scales);
}

ember_status ember__qpack_b_plain(ember__cpu_state *s, ember__qpack *p, int64_t k, int64_t n,
                                  int64_t ldb, int64_t kc, const int8_t *B, const float *scales) {
    return qpack_b_any(s, p, k, n, kc, 8, NULL, NULL, B, NULL, ldb, scales);
}

ember_status ember__qpack_b_plain4(ember__cpu_state *s, ember__qpack *p, int64_t k, int64_t n,
                                   int64_t ldb, int64_t kc, const uint8_t *B, const float *scales) {
    return qpack_b_any(s, p, k, n, kc, 4, NULL, NULL, NULL, B, ldb, scales);
}

static void plain_row(const void *src, int64_t kk, int64_t j0, int64_t nj, int8_t *dst) {
    const pack_b_arg *a = src;
    memcpy(dst, a->plain + kk * a->ldb + j0, (size_t)nj);
}

static ember_status qpack_b_any(ember__cpu_state *s, ember__qpack *p, int64_t k, int64_t n,
                                int64_t kc, int bits, ember__qrow_fn row, const void *src,
                                const int8_t *plain, const uint8_t *plain4, int64_t ldb,
                                const float *scales) {
    memset(p, 0, sizeof *p);
    p->k = k;
    p->n = n;
    p->kp = round_up(k > 0 ? k : 1, 64);
    p->np = round_up(n > 0 ? n : 1, 32);
    p->bits = bits;
    p->bias = bits == 8 ? 128 : 8;
    if (kc <= 0 || kc >= k) {
        p->kc = p->kp;
        p->nch = 1;
    } else {
        p->kc = kc;
        p->nch = k / kc;
    }
    size_t vbytes = (size_t)p->kp * (size_t)p->np / (bits == 8 ? 1 : 2);
    size_t nsc = (size_t)p->nch * (size_t)p->np;
    /* f16 scales when every one is exactly an f16 (halves the scale traffic of small blocks) */
    int sb16 = p->nch > 1 && scales != NULL;
    if (sb16 && ember__qtier_available(EMBER__QT_AVX512)) {
        sb16 = ember__qall_f16_avx512(scales, (size_t)p->nch * (size_t)n);
    } else {
        for (size_t i = 0; sb16 && i < (size_t)p->nch * (size_t)n; i++) {
            uint16_t h;
            sb16 = ember__f32_exact_f16(scales[i], &h);
        }
    }
    p->sb16 = sb16;
    /* the scales follow the values in one allocation (pack_values_alloc): from 4 MiB a region of
     * the context's (2 MiB pages, recycled), where a separate allocation of their own faulted in
     * every 4 KiB page at each first call (a 4096 x 11008 weight in blocks of 32: 2.75 MiB of f16
     * scales, 9 ms of page faults on a Zen 5 VM); apart only below 4 MiB, where the values alone
     * fill their region */
    pack_values_alloc(s, p, round_up64(vbytes), nsc * (sb16 ? 2 : 4));
    if (!p->b) {
        ember__qpack_free(p);
        EMBER_FAIL(EMBER_ERR_OUT_OF_MEMORY, "cpu q_matmul: no memory to pack a %lld x %lld operand",
                   (long long)k, (long long)n);
    }
    /* 8-bit values from 2 MiB up are written with streaming stores (no read for ownership of each
     * line), as A is for the tiles. bench_qgemm --shape, 2 threads, three alternations in one
     * binary, first calls (B packed every call) GOPS ordinary -> streaming: 2048^3 3945 / 4332 /
     * 4208 -> 4392 / 4772 / 4352, 4096^3 5408 / 5083 / 4873 -> 5522 / 5363 / 5146, 512 x 4096^2
     * 2766 / 2758 / 2773 -> 3108 / 3261 / 3120; at 1024^3 (1 MiB) no gain. */
    pack_b_arg a = {p,
                    scales,
                    row,
                    src,
                    plain,
                    plain4,
                    ldb,
                    ember__qtier_available(EMBER__QT_AVX512),
                    bits == 8 && vbytes >= ((size_t)2 << 20)};
    if (plain && !a.avx512) { /* the SSE2 path reads rows through a callback */
        a.row = plain_row;
        a.src = &a;
    }
    ember__cpu_parallel_for(s, (p->np + PACK_NB - 1) / PACK_NB, pack_b_task, &a);
    return EMBER_OK;
}

typedef struct s8_src {
    const int8_t *b;
    int64_t ldb;
} s8_src;

static void s8_row(const void *src, int64_t kk, int64_t j0, int64_t nj, int8_t *dst) {
    const s8_src *s = src;
    memcpy(dst, s->b + kk * s->ldb + j0, (size_t)nj);
}

ember_status ember__qpack_b_s8(ember__cpu_state *s, ember__qpack *p, int64_t k, int64_t n,
                               int64_t ldb, int64_t kc, int bits, const int8_t *B,
                               const float *scales) {
    if (bits == 8)
        return ember__qpack_b_plain(s, p, k, n, ldb, kc, B, scales);
    s8_src src = {B, ldb};
    return ember__qpack_b_mt(s, p, k, n, kc, bits, s8_row, &src, scales);
}

void ember__qpack_free(ember__qpack *p) {
    if (!p)
        return;
    if (p->b_map)
        ember__cpu_region_put(p->b_owner, p->b, p->b_map);
    else
        ember__cpu_temp_put(p->b_owner, p->b); /* the scales with it */
    if (p->sb_heap)
        ember__cpu_temp_put(p->b_owner, p->sb_heap);
    p->b = NULL;
    p->b_map = 0;
    p->b_owner = NULL;
    p->sb = p->sb_heap = NULL;
}

size_t ember__qpack_bytes(const ember__qpack *p) {
    return (size_t)p->kp * (size_t)p->np / (p->bits == 8 ? 1 : 2) +
           (size_t)p->nch * (size_t)p->np * (p->sb16 ? 2 : 4);
}

/* ------------------------------------------------------------------ scalar tier */

/* The value of packed B at (kk, j), unbiased. */
static int packed_b(const ember__qpack *p, int64_t kk, int64_t j) {
    const int64_t panel = j / 32, half = (j % 32) / 16, col = j % 16;
    if (p->bits == 8) {
        uint8_t v = p->b[(panel * (p->kp / 4) + kk / 4) * 128 + half * 64 + col * 4 + kk % 4];
        return (int)v - 128;
    }
    uint8_t v = p->b[(panel * (p->kp / 8) + kk / 8) * 128 + half * 64 + col * 4 + kk % 4];
    int u = (kk % 8) < 4 ? (v & 0xf) : (v >> 4);
    return u - 8;
}

void ember__qblock_scalar(const ember__qjob *jb, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                          int thread) {
    (void)thread;
    const ember__qpack *p = jb->p;
    if (i1 > jb->m)
        i1 = jb->m;
    if (j1 > p->n)
        j1 = p->n;
    for (int64_t i = i0; i < i1; i++) {
        const int8_t *a = jb->a + i * p->kp;
        for (int64_t j = j0; j < j1; j++) {
            float acc = 0.0f;
            for (int64_t c = 0; c < p->nch; c++) {
                int32_t dot = 0;
                for (int64_t kk = c * p->kc; kk < (c + 1) * p->kc; kk++)
                    dot += (int32_t)a[kk] * packed_b(p, kk, j);
                if (jb->c32) {
                    jb->c32[i * jb->ldc + j] = dot;
                } else {
                    acc += jb->sa[i * p->nch + c] * ember__qpack_scale(p, c, j) * (float)dot;
                }
            }
            if (!jb->c32)
                jb->c[i * jb->ldc + j] = acc;
        }
    }
}

/* ------------------------------------------------------------------ driver */

/* Per-call buffers for the threads that take tasks. Pool thread ids run up to the context's
 * thread count (up to 1024), and a call needs no more buffers than it has tasks: a thread takes
 * the next free buffer the first time it runs one of the call's tasks and keeps it. (Buffers
 * were once indexed by thread id in a fixed array of 64: beyond 64 threads, out of bounds.) */
#define SLOT_IDS 1025 /* thread ids: the caller and up to 1024 more */
typedef struct slot_map {
    atomic_int next;
    int16_t of[SLOT_IDS]; /* per thread id: its buffer, -1 before its first task here */
} slot_map;

static void slots_init(slot_map *m) {
    atomic_init(&m->next, 0);
    memset(m->of, 0xff, sizeof m->of);
}

/* thread's buffer: each entry is written and read by its own thread only */
static int slot_of(slot_map *m, int thread) {
    int q = m->of[thread];
    if (q < 0) {
        q = atomic_fetch_add_explicit(&m->next, 1, memory_order_relaxed);
        m->of[thread] = (int16_t)q;
    }
    return q;
}

/* A call's working memory: the context's reusable scratch region where it is free, else a fresh
 * allocation (*scratch says which; NULL when neither can be had). */
static uint8_t *call_mem(ember__cpu_state *s, size_t bytes, int *scratch) {
    uint8_t *mem = ember__cpu_scratch_get(s, bytes);
    *scratch = mem != NULL;
    return mem ? mem : ember__aligned_alloc(bytes);
}

static void call_mem_done(ember__cpu_state *s, uint8_t *mem, int scratch) {
    if (scratch)
        ember__cpu_scratch_put(s);
    else
        ember__aligned_free(mem);
}

typedef struct pack_a_arg {
    const ember__qpack *p;
    const int8_t *A;
    int64_t lda, m, mp;
    int8_t *ap;
    int32_t *rs;
    int amx, avx512;
    int pad; /* the padding rows too (zeros): the AMX block kernels load whole 16-row tiles */
} pack_a_arg;

/* Sum of n int8 values (SSE2: PSADBW on the values biased to unsigned). */
static int32_t sum_s8(const int8_t *x, int64_t n) {
    int64_t i = 0;
    int32_t s = 0;
#ifdef EMBER__X86
    __m128i acc = _mm_setzero_si128();
    const __m128i bias = _mm_set1_epi8((char)0x80), zero = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(x + i)), bias);
        acc = _mm_add_epi64(acc, _mm_sad_epu8(v, zero));
    }
    s = (int32_t)(_mm_cvtsi128_si64(acc) + _mm_cvtsi128_si64(_mm_unpackhi_epi64(acc, acc))) -
        (int32_t)(128 * i);
#endif
    for (; i < n; i++)
        s += x[i];
    return s;
}

/* Rows [16*task, 16*task + 16) of A into the packed buffer. */
static void pack_a_task(void *varg, int64_t task, int thread) {
    (void)thread;
    const pack_a_arg *a = varg;
    const ember__qpack *p = a->p;
    const int64_t kp = p->kp, k = p->k;
    const int fast = a->avx512 && (p->nch == 1 || p->kc % 64 == 0 || p->kc == 32);
    for (int64_t i = task * 16; i < task * 16 + 16; i++) {
        if (!a->pad && i >= a->m)
            break; /* the vector tiers and the thin kernels never read the padding rows */
        const int8_t *src = i < a->m ? a->A + i * a->lda : NULL;
        if (fast) {
            if (a->amx)
                ember__qa_row_avx512(src, k, kp, p->kc, p->nch, a->ap + ember__qa_amx_off(i, kp),
                                     EMBER__QA_STEP, a->rs + i * p->nch);
            else
                ember__qa_row_avx512(src, k, kp, p->kc, p->nch, a->ap + i * kp, 64,
                                     a->rs + i * p->nch);
            continue;
        }
        for (int64_t c = 0; c < p->nch; c++) {
            int64_t k0 = c * p->kc, k1 = (c + 1) * p->kc < k ? (c + 1) * p->kc : k;
            a->rs[i * p->nch + c] = src && k1 > k0 ? sum_s8(src + k0, k1 - k0) : 0;
        }
        if (a->amx) {
            int8_t *base = a->ap + ember__qa_amx_off(i, kp);
            for (int64_t k0 = 0; k0 < kp; k0 += 64) {
                int8_t *dst = base + (k0 / 64) * EMBER__QA_STEP;
                int64_t nv = src ? (k - k0 < 64 ? k - k0 : 64) : 0;
                if (nv == 64)
                    memcpy(dst, src + k0, 64);
                else if (nv > 0)
                    memcpy(dst, src + k0, (size_t)nv);
                if (nv < 64)
                    memset(dst + (nv > 0 ? nv : 0), 0, (size_t)(64 - (nv > 0 ? nv : 0)));
            }
        } else {
            int8_t *dst = a->ap + i * kp;
            if (src) {
                memcpy(dst, src, (size_t)k);
                memset(dst + k, 0, (size_t)(kp - k));
            } else {
                memset(dst, 0, (size_t)kp);
            }
        }
    }
}

typedef struct run_arg {
    const ember__qjob *job;
    ember__qblock_fn fn;
    int64_t mb, nb, ntn;
    slot_map *slots;
    const pack_a_arg *pa;     /* A, packed by the tasks that need it */
    atomic_uchar *pstate;     /* per 16 rows of A: 0 to pack, 1 being packed, 2 packed */
    _Atomic uint64_t *ranges; /* per thread's run of tasks: the unclaimed [lo, hi) as lo | hi << 32
                                 (NULL: tasks in the pool's order) */
    int nranges;
} run_arg;

/* The next task for the thread with buffer slot `slot` (its run: the slot-th): the front of its own
 * run, else the back of another's. -1 when every run is empty, which the pool never lets happen:
 * it makes one run_task call per task. */
static int64_t claim_task(const run_arg *r, int slot) {
    for (int d = 0; d < r->nranges; d++) {
        _Atomic uint64_t *c = &r->ranges[(slot + d) % r->nranges];
        uint64_t v = atomic_load_explicit(c, memory_order_relaxed);
        for (;;) {
            const uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
            if (lo >= hi)
                break;
            const uint64_t nv = d == 0 ? v + 1 : v - ((uint64_t)1 << 32);
            if (atomic_compare_exchange_weak_explicit(c, &v, nv, memory_order_relaxed,
                                                      memory_order_relaxed))
                return d == 0 ? (int64_t)lo : (int64_t)hi - 1;
        }
    }
    return -1;
}

/* Rows [i0, i1) of A packed before a task multiplies them. The tasks of one row block claim its
 * 16-row pieces in turn and pack them (threads that start on the same rows share the work), then
 * wait for the pieces that others claimed: each is being packed by a running task, which waits on
 * nothing. The packed rows are then hot in the cache of the thread that uses them first; a
 * separate pack phase before the product wrote all of A first (out to memory when large) and
 * cost a second wake of the pool. */
static void ensure_packed(const run_arg *r, int64_t i0, int64_t i1, int thread) {
    const int64_t q0 = i0 / 16, q1 = (i1 + 15) / 16;
    int64_t q = q0;
    for (; q < q1; q++) {
        unsigned char z = 0;
        if (atomic_load_explicit(&r->pstate[q], memory_order_relaxed) == 0 &&
            atomic_compare_exchange_strong_explicit(&r->pstate[q], &z, 1, memory_order_relaxed,
                                                    memory_order_relaxed)) {
            pack_a_task((void *)r->pa, q, thread);
            atomic_store_explicit(&r->pstate[q], 2, memory_order_release);
        }
    }
    int spins = 0;
    for (q = q0; q < q1; q++)
        while (atomic_load_explicit(&r->pstate[q], memory_order_acquire) != 2)
            ember__cpu_wait_step(&spins);
}

static void run_task(void *varg, int64_t task, int thread) {
    const run_arg *r = varg;
    if (r->ranges && (task = claim_task(r, slot_of(r->slots, thread))) < 0)
        return;
    const int64_t ti = task / r->ntn, tj = task % r->ntn;
    const int64_t i0 = ti * r->mb, j0 = tj * r->nb;
    int64_t i1 = i0 + r->mb, j1 = j0 + r->nb;
    if (i1 > r->job->mp)
        i1 = r->job->mp;
    ensure_packed(r, i0, i1, thread);
    thread = slot_of(r->slots, thread); /* the kernels index their scratch with it */
    if (j1 > r->job->p->np)
        j1 = r->job->p->np;
    r->fn(r->job, i0, i1, j0, j1, thread);
}

static ember__qblock_fn block_fn(ember__qtier t) {
    switch (t) {
    case EMBER__QT_AMX:
        return ember__qblock_amx;
    case EMBER__QT_AVX512:
        return ember__qblock_avx512;
    case EMBER__QT_AVX2:
        return ember__qblock_avx2;
    default:
        return ember__qblock_scalar;
    }
}

/* A product this small runs on the calling thread alone (ember__cpu_small_work): its estimated
 * time on one thread (the tier's rate per thread, roughly measured) is under 15 us and B (bbytes)
 * fits one core's L2.
 * Handing half of it to the pool's worker cost more than it saved, the more so where the worker
 * has gone to sleep since the last call (bench_qgemm runs other libraries between ember's calls).
 * bench_qgemm --shape, one thread against two, e_q8 GOPS: Zen 5 (VNNI tier) 128^3 643-675 /
 * 411-517, 64 x 256 x 256 659 / 528, 8 x 512 x 512 774 / 673, 160^3 590 / 566, but 192^3 741 /
 * 1245; the H200 host's Xeon (AMX tier) 256^3 1304 / 835, 32 x 256 x 512 1260 / 889, 64 x 256 x 256
 * 996 / 620, 128^3 403 / 437, but 512^3 878 / 2992, and its VNNI tier 128^3 384 / 313, 256^3 589 /
 * 1042. One row is bound by reading B, which two threads do faster (1 x 1024^2 on the Xeon: 50 /
 * 86): B of 1 MiB there is past the L2 bound. Through the public API on Zen 5 (2 threads, medians
 * of 400 calls, back to back / each after a 200 us busy gap, before -> after): 128^3 10.5 / 41.3
 * us -> 7.6 / 8.0, 8 x 512 x 512 9.1 / 49.3 -> 6.3 / 6.7, 32 x 512 x 256 14.9 / 63.2 -> 12.1 /
 * 11.8, 160^3 17.5 / 31.7 -> 15.7 / 16.6. */
static int serial_product(ember__qtier t, int64_t m, int64_t n, int64_t k, double bbytes) {
    const double per_thread = t == EMBER__QT_AMX      ? 2.5e12
                              : t == EMBER__QT_AVX512 ? 0.6e12
                              : t == EMBER__QT_AVX2   ? 0.3e12
                                                      : 0.05e12;
    return ember__cpu_small_work(2.0 * (double)m * (double)n * (double)k / per_thread, bbytes);
}

static ember_status qgemm_run(ember__cpu_state *s, ember__qtier t, int64_t m, const int8_t *A,
                              int64_t lda, const float *sa, const ember__qpack *p, float *C,
                              int32_t *C32, int64_t ldc) {
    if (m <= 0 || p->n <= 0)
        return EMBER_OK;
    if (t != EMBER__QT_SCALAR && !ember__qtier_available(t))
        t = ember__qtier_select(NULL);
    /* Decode shapes are bound by reading B. One row: AVX-512 VNNI streams it at the bandwidth
     * limit. 2..16 rows of 8-bit B in one chunk: AMX with m-row tiles (VNNI would be bound by its
     * multiplies); other 4-bit B is unpacked in VNNI registers. */
    int thin = 0;
    if (t == EMBER__QT_AMX && m <= 16) {
        thin = m >= 2 && p->bits == 8 && p->nch == 1 && !p->sb16;
        /* Blocks along K: m-row tiles, a chunk at a time, then the scaling
         * (ember__qblock_amx_thin_chunked), for 8-bit B from 2 rows and for 4-bit B at blocks of
         * 64 and more from 8 rows; elsewhere VNNI was level or ahead. bench_qgemm --shape
         * M,4096,4096 --block B, 2 threads, VNNI -> tiles, GOPS, e_q8b: 2 rows 97 -> 104 (B = 32),
         * 3 rows 148 -> 194 (64), 8 rows 256 -> 403 (32), 297 -> 413 (128), 16 rows 413 -> 582
         * (64); e_q4: 8 rows 491 -> 562 (64), 544 -> 618 (128), 16 rows 605 -> 948 (64); 4 rows
         * 442 -> 376 (64), 8 rows 488 -> 421 (32). */
        if (m >= 2 && p->nch > 1 && C && (p->bits == 8 || (m >= 8 && p->kc % 64 == 0)))
            thin = 2;
        if (!thin)
            t = EMBER__QT_AVX512;
    }
    /* Short scale blocks along K need a scaled epilogue every block: on AMX the tiles multiply
     * signed panels and the scaling of one block is issued beside the products of the next
     * (qgemm_amx.c, block_chunked; on this machine the two do not run side by side, so the
     * product takes their sum: bench/results/cpu.md). 4-bit B: 434-447 GOPS against 294-302 on
     * VNNI at M = 512, K = N = 4096, blocks of 32. */
    const int serial =
        serial_product(t, m, p->n, p->k, (double)p->kp * (double)p->np * p->bits / 8.0);
    const int nt = s && !serial ? s->num_threads : 1;
    /* AMX works on 32-row blocks; the vector tiers pad rows to 32 as well (cheap). */
    const int64_t mp = round_up(m, 32);
    const int amx = t == EMBER__QT_AMX;
    const size_t abytes = round_up64((size_t)mp * (size_t)p->kp);
    const size_t rsn = (size_t)mp * (size_t)p->nch;
    const size_t rbytes = round_up64(rsn * sizeof(int32_t)),
                 sbytes = round_up64(rsn * sizeof(float));
    /* AMX per thread at work: the int32 sums of a task, then for 4-bit B two unpacked panels
     * (2 x 32 x kp), for block scales along K a signed panel (32 x kp); the thin kernels keep
     * what they need on their stacks */
    const size_t per =
        amx && !thin ? EMBER__AMX_ACC_BYTES +
                           (p->bits == 4 || (p->nch > 1 && C) ? (size_t)64 * (size_t)p->kp : 0)
                     : 0;
    /* Task shape: small M splits N finely (bandwidth bound); large M uses square-ish blocks. */
    int64_t mb, nb;
    if (mp <= 64) {
        mb = mp;
        int64_t want = (int64_t)nt * 8;
        nb = round_up((p->np + want - 1) / want, 32);
        if (nb < 32)
            nb = 32;
        if (amx && nb > 256) /* the AMX scratch holds tasks of up to 256 columns */
            nb = 256;
    } else {
        if (amx) {
            /* Tasks of 256 rows (A's rows x K, up to 1 MiB at K = 4096, stay in L2 across the
             * task's panels: qgemm_amx.c, block_panels), 512 columns up to K = 2048 and 256
             * beyond (the sums of the task's blocks then fit the scratch). Measured (2048^3,
             * whole K, one interleaved run, medians of 15): 2352 GOPS against 1932 with 512 x 256
             * tasks in slices of 512. Over 512 rows at K = 4096, 256 rows against 512: 4096^3
             * 1.26-1.34 -> 1.34-1.43 of oneDNN reordered (bench_qgemm, seven alternations); at
             * 512 rows too since the panel order (one binary, calls back to back, alternated,
             * GOPS: 512 x 4096^2 4751 / 4768 -> 5570 / 5362; with 256 MiB written between calls
             * level, 4247 / 4164 -> 4257 / 4188). With block scales along K (block_chunked walks
             * the whole K per 32 x 32 block) 256 rows were measured before: 512 x 4096^2, 8-bit,
             * blocks of 32 / 64 / 128, 1005 / 1634 / 1858 -> 1072 / 1771 / 2411 GOPS; 4-bit blocks
             * of 32 1009 -> 1069. */
            mb = 256;
            nb = p->kp <= 2048 ? 512 : 256;
        } else {
            mb = 64;
            nb = 128;
        }
        if (mb > mp)
            mb = mp;
        /* enough tasks for the threads */
        while (nb > 32 && ((mp + mb - 1) / mb) * ((p->np + nb - 1) / nb) < 4 * nt)
            nb /= 2;
    }
    const int64_t nti = (mp + mb - 1) / mb, ntn = (p->np + nb - 1) / nb; /* row, column blocks */
    const int64_t ntasks = nti * ntn;
    const int64_t nscr = per ? (ntasks < nt ? ntasks : nt) : 0; /* buffers: one a thread at work */
    const size_t pbytes = round_up64((size_t)nscr * sizeof(uint8_t *));
    const size_t psbytes = round_up64((size_t)(mp / 16));
    /* With several row blocks, each thread owns a run of tasks (claim_task; run_arg.ranges) */
    const int nranges = nti > 1 && nt > 1 ? nt : 0;
    const size_t rgbytes = round_up64((size_t)nranges * sizeof(uint64_t));
    const size_t total = abytes + rbytes + sbytes + pbytes + psbytes + rgbytes + per * (size_t)nscr;
    int from_scratch;
    uint8_t *mem = call_mem(s, total, &from_scratch);
    EMBER_FAIL_IF(!mem, EMBER_ERR_OUT_OF_MEMORY,
                  "cpu q_matmul: no memory for a %lld x %lld operand", (long long)m,
                  (long long)p->k);
    /* carved in order: packed A, row sums, A scales, the buffer pointers, the pack states, the
     * runs, the per-thread buffers */
    uint8_t *cur = mem;
    int8_t *ap = (int8_t *)cur;
    int32_t *rs = (int32_t *)(void *)(cur += abytes);
    float *sap = (float *)(void *)(cur += rbytes);
    uint8_t **scratch = (uint8_t **)(void *)(cur += sbytes);
    atomic_uchar *pstate = (atomic_uchar *)(void *)(cur += pbytes);
    _Atomic uint64_t *ranges = nranges ? (_Atomic uint64_t *)(void *)(cur + psbytes) : NULL;
    cur += psbytes + rgbytes;
    for (int64_t q = 0; q < nscr; q++)
        scratch[q] = cur + per * (size_t)q;
    for (int q = 0; q < nranges; q++) {
        const uint64_t lo = (uint64_t)(ntasks * q / nranges),
                       hi = (uint64_t)(ntasks * (q + 1) / nranges);
        atomic_init(&ranges[q], lo | hi << 32);
    }
    for (size_t i = 0; i < rsn; i++)
        sap[i] = (i < (size_t)m * (size_t)p->nch) ? (sa ? sa[i] : 1.0f) : 0.0f;
    /* A is packed by the tasks, a row block when first needed (ensure_packed). Measured against
     * a pack phase before the product (which streamed A to memory from 2 MiB up), one binary,
     * calls back to back, alternated, medians of 20-40, 2 threads, GOPS: 2048^3 4711 / 4646 ->
     * 5521 / 5468, 4096^3 5489 -> 5716, 512 x 4096^2 4724 -> 5009; 1024^3, 128 x 4096^2, 32 x
     * 4096^2, 8 and 1 x 4096^2, 128 x 11008 x 4096 level. In bench_qgemm's rounds (other rows
     * between the calls) 2048^3 read 4818 / 4965 / 4833 -> 5012 / 4923 / 4693. */
    pack_a_arg pa = {.p = p,
                     .A = A,
                     .lda = lda,
                     .m = m,
                     .mp = mp,
                     .ap = ap,
                     .rs = rs,
                     .amx = amx,
                     .avx512 = t >= EMBER__QT_AVX512 && ember__qtier_available(EMBER__QT_AVX512),
                     .pad = amx && !thin};
    for (int64_t q = 0; q < mp / 16; q++)
        atomic_init(&pstate[q], 0);

    ember__qjob job = {p, ap, rs, sap, m, mp, C, C32, ldc, scratch, 0, 0, 0};
    /* C of 16 MiB or more is streamed to memory (qgemm_amx.c, store_row): it would not stay in
     * the caches, and streaming skips the read for ownership of each line. A smaller C is written
     * with ordinary stores, its lines fetched for writing a few per K step ahead of the epilogue
     * (job.pfw; the way oneDNN's AMX kernels write their output), so that the product's operands
     * and C share the caches without stalls. bench_qgemm, 2 threads, cached B, the build before
     * (streaming from 1 MiB where K <= 2048, ordinary stores without the early fetch below 16 MiB
     * beyond) and this one alternated three times, e_q8 / oneDNN reordered: 1024^3 0.92-0.96 ->
     * 1.12-1.22, 512 x 4096^2 1.39-1.53 -> 1.52-1.54, 128 x 11008 x 4096 1.84-2.04 -> 2.00-2.14,
     * the rest within the noise (first calls at 1024^3 1.28-1.40 -> 1.13-1.39 of oneDNN plain).
     * Not streaming at 2048^3 was +4%, at 4096^3 -7%; ordinary stores without the early fetch
     * lost at 1024^3. */
    const double cbytes = (double)m * (double)p->n * sizeof(float);
    job.nt_store = C && cbytes >= (double)(16 << 20);
    job.pfw = C && !job.nt_store;
    if (p->nch > 1) { /* e.g. a per-tensor or per-row A against block scales of B */
        int same = 1;
        for (int64_t i = 0; i < m && same; i++)
            for (int64_t c = 1; c < p->nch; c++)
                if (sap[i * p->nch + c] != sap[i * p->nch]) {
                    same = 0;
                    break;
                }
        job.sa_row = same;
    }
    slot_map slots;
    slots_init(&slots);
    /* With several row blocks, each thread owns a run of tasks: the tasks are numbered row block
     * by row block, the run split evenly among the threads (task numbers [q * ntasks / nt, (q + 1)
     * * ntasks / nt) for the thread that reaches the call q-th), and a thread takes its own run
     * from the front, then the other runs from their backs (claim_task). A thread then keeps its
     * row block of A, packed by itself into its own cache, for all of that row block's column
     * blocks, and the threads walk the column blocks of B side by side. With the pool's shared
     * counter (row-major numbering beyond as many row blocks as threads) the threads took the
     * tasks of one row block in turn: each kept A for half of them and used A packed by the other;
     * a thread that wakes late or runs slow only moves where the runs meet. bench_qgemm --shape,
     * the build before and this one alternated through a switch, 2 threads, medians of GOPS (e_q8
     * / oneDNN reordered): 1024^3 3832 -> 4680 (1.36 -> 1.66, ten alternations), 2048^3 4936 ->
     * 5366 (1.42 -> 1.55, eight), 4096^3 5132 -> 5335 (1.51 -> 1.60, six); first calls at 2048^3
     * 4318 -> 4703; e_q4 at 1024^3 1190 -> 1370. With as many row blocks as threads it replaces
     * the column-major numbering that did the same for lockstep threads (512 x 4096^2: 4273 ->
     * 4292, eight). A single row block keeps the shared counter: runs of columns were level at
     * 32 / 128 x 4096^2 and 128 x 11008 x 4096, and within the noise at 1 and 8 x 4096^2. */
    run_arg r = {
        &job,
        thin == 2 ? ember__qblock_amx_thin_chunked : (thin ? ember__qblock_amx_thin : block_fn(t)),
        mb,
        nb,
        ntn,
        &slots,
        &pa,
        pstate,
        ranges,
        nranges};
    /* Tile work runs on every thread. (Until this commit a register-only probe, once per
     * context, put it on one thread where the two vCPUs seemed to share one AMX unit. The probe's
     * verdict did not hold: the VM's state changes within seconds, and in a bench run where it
     * had said "shared", oneDNN on two threads reached 2520-2908 GOPS at 2048^3-4096^3 against
     * 1115-1173 on one, and ember on one 1506-1732. Measured with the unit shared, two threads
     * against one (same process, alternated, medians of 9, three rounds): 2048^3 1162 / 1297,
     * 1075 / 980, 973 / 1022; 1024^3 1596 / 1564, 1215 / 1434, 1475 / 1390: within the noise.) */
    ember__cpu_parallel_for(serial ? NULL : s, ntasks, run_task, &r);
    call_mem_done(s, mem, from_scratch);
    return EMBER_OK;
}

ember_status ember__qgemm(ember__cpu_state *s, ember__qtier t, int64_t m, const int8_t *A,
                          int64_t lda, const float *sa, const ember__qpack *p, float *C,
                          int64_t ldc) {
    return qgemm_run(s, t, m, A, lda, sa, p, C, NULL, ldc);
}

ember_status ember__qgemm_s32(ember__cpu_state *s, ember__qtier t, int64_t m, const int8_t *A,
                              int64_t lda, const ember__qpack *p, int32_t *C, int64_t ldc) {
    return qgemm_run(s, t, m, A, lda, NULL, p, NULL, C, ldc);
}

/* ------------------------------------------------------------------ direct (unpacked) */

typedef struct direct_arg {
    const ember__qdirect *d;
    int64_t nb;
    int amx;
    uint8_t *work; /* one buffer of wbytes a thread at work */
    size_t wbytes;
    slot_map *slots;
} direct_arg;

static void direct_task(void *varg, int64_t task, int thread) {
    const direct_arg *a = varg;
    uint8_t *w = a->work + a->wbytes * (size_t)slot_of(a->slots, thread);
    if (a->amx)
        ember__qdirect_amx(a->d, task * a->nb, (task + 1) * a->nb, w);
    else
        ember__qdirect_avx512(a->d, task * a->nb, (task + 1) * a->nb, w);
}

ember_status ember__qgemm_direct(ember__cpu_state *s, int64_t m, int64_t n, int64_t k,
                                 const int8_t *A, int64_t lda, const float *sa, const int8_t *B,
                                 int64_t ldb, const float *sb, float *C, int32_t *C32,
                                 int64_t ldc) {
    /* AMX for 2..128 rows (where the context's tier is AMX), AVX-512 VNNI for 1..16 */
    const int amx = m >= 2 && m <= EMBER__DIRECT_AMX_M && ember__qtier_available(EMBER__QT_AMX) &&
                    (!s || ember__cpu_tier(s) == EMBER__QT_AMX);
    if (!amx && (!ember__qtier_available(EMBER__QT_AVX512) ||
                 (s && ember__cpu_tier(s) < EMBER__QT_AVX512) || m > EMBER__DIRECT_M_SMALL ||
                 (m > EMBER__DIRECT_M && (double)k * (double)n > (double)EMBER__DIRECT_SMALL_B)))
        return EMBER_ERR_QUANT_UNSUPPORTED;
    if (m <= 0 || n <= 0)
        return EMBER_OK;
    if (k <= 0) { /* empty sums */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                if (C32)
                    C32[i * ldc + j] = 0;
                else
                    C[i * ldc + j] = 0.0f;
            }
        return EMBER_OK;
    }
    /* A's rows padded with zeros to whole groups of 4 k (VNNI: the kernel reads 4 bytes at a
     * time) or whole tiles (AMX: 64 k), their sums (VNNI only: the bias correction), and a buffer
     * for each thread at work */
    const int serial =
        serial_product(amx ? EMBER__QT_AMX : EMBER__QT_AVX512, m, n, k, (double)k * (double)n);
    const int nt = s && !serial ? s->num_threads : 1;
    /* two tasks a thread, wide ones: each reads its columns of B's rows as sequential runs */
    int64_t nb = round_up((n + 2 * nt - 1) / (2 * nt), 64);
    if (nb < 256)
        nb = 256;
    const int64_t ntasks = (n + nb - 1) / nb;
    const int64_t nw = ntasks < nt ? ntasks : nt; /* buffers: one a thread at work */
    const int64_t k4 = round_up(k, amx ? 64 : 4);
    /* AMX loads 16 rows of A a tile: rows a multiple of 4 KiB apart would all fall in one L1 set */
    const int64_t lda4 = amx && k4 % 4096 == 0 ? k4 + 64 : k4;
    const int64_t mrows = amx && m > 32 ? round_up(m, 32) : m; /* AMX: whole 32-row blocks */
    const size_t abytes = round_up64((size_t)(mrows * lda4)), rbytes = round_up64((size_t)m * 4);
    const size_t wbytes =
        round_up64(amx ? ember__qdirect_amx_work_bytes() : ember__qdirect_work_bytes());
    const size_t total = abytes + rbytes + wbytes * (size_t)nw;
    int from_scratch;
    uint8_t *mem = call_mem(s, total, &from_scratch);
    EMBER_FAIL_IF(!mem, EMBER_ERR_OUT_OF_MEMORY,
                  "cpu q_matmul: no memory for a %lld x %lld operand", (long long)m, (long long)k);
    int8_t *ap = (int8_t *)mem;
    int32_t *rs = (int32_t *)(mem + abytes);
    for (int64_t i = 0; i < m; i++) {
        memcpy(ap + i * lda4, A + i * lda, (size_t)k);
        memset(ap + i * lda4 + k, 0, (size_t)(lda4 - k));
        rs[i] = amx ? 0 : sum_s8(A + i * lda, k); /* AMX multiplies signed B: no bias */
    }
    memset(ap + m * lda4, 0, (size_t)((mrows - m) * lda4));
    ember__qdirect d = {m, n, k, ap, B, lda4, ldb, sa, sb, C, C32, ldc, rs};
    slot_map slots;
    slots_init(&slots);
    direct_arg a = {&d, nb, amx, mem + abytes + rbytes, wbytes, &slots};
    ember__cpu_parallel_for(serial ? NULL : s, ntasks, direct_task, &a);
    call_mem_done(s, mem, from_scratch);
    return EMBER_OK;
}
