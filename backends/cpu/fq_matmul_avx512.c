/* backends/cpu/fq_matmul_avx512.c: the AVX-512 kernel of the fused (F,Q) path (fq_matmul.h).
 *
 * A task's columns are taken 64 at a time (four zmm of 16 f32), the rows 4 at a time, K in
 * chunks of FQ_KC so that a chunk of the task's weights (FQ_KC rows of its columns, 32 KiB at 256
 * columns) stays in L1 while every group of rows multiplies it; the f32 sums wait in acc between
 * chunks (stored and reloaded exactly, so each sum is still taken in K order). Per K step and 64
 * columns: the 64 values as f32 (8-bit: sign-extended and converted, 4 x VPMOVSXBD + VCVTDQ2PS;
 * 4-bit: looked up by nibble, nib32, the even and odd columns of each 32 in registers of their
 * own, which the sums and scales follow until the store), times their scales (the dequantized
 * weights, bit for bit ember_dequantize's), then one VFMADD per row and zmm with the row's value
 * broadcast. */
#include <immintrin.h>

#include "fq_matmul.h"
#include "qgemm.h"

#define FQ_KC 128
/* The weights are read a row of the task (256 bytes) at a time, each row in another page, which
 * the hardware prefetchers do not follow: the first group of a task fetches the whole row FQ_PF2
 * K steps ahead into L2, every group its own line FQ_PF steps ahead into L1. Measured (one
 * process, 2 threads, 1 x 4096^2 Q8S per tensor, medians of 40 calls): with the weights pushed out
 * of the caches by a 64 MiB sgemm before each call 1.87 -> 1.13-1.25 ms, back to back 0.79 ->
 * 0.64-0.67 ms; without the L1 fetch 1.31-1.34 / 0.75-0.87. */
#define FQ_PF 16
#define FQ_PF2 64

/* 32 4-bit values (16 bytes at p, bytes off in m read nothing) as f32 by table lookup: the even
 * columns (low nibbles) in *ev, the odd ones (high nibbles) in *od. Each byte goes to a dword
 * lane (VPMOVZXBD), and VPERMPS reads a lane's low 4 bits as the index into tab, the 16 values a
 * two's complement nibble stands for: 3 instructions for 32 values, where spreading the nibbles
 * to bytes in column order, extracting, sign-extending and converting them took about 4.5 per
 * 16. The same floats, in another column order (interleave undoes it). */
static inline __attribute__((always_inline)) void nib32(const uint8_t *p, __mmask16 m, __m512 tab,
                                                        __m512 *ev, __m512 *od) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p));
    *ev = _mm512_permutexvar_ps(b, tab);
    *od = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), tab);
}

/* f32 values of the 16 two's complement nibbles, by nibble */
static inline __attribute__((always_inline)) __m512 nib_table(void) {
    return _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
}

/* columns [0, 32) in x0, x1 -> the even ones in *ev, the odd in *od (nib32's order) */
static inline __attribute__((always_inline)) void deinterleave(__m512 x0, __m512 x1, __m512 *ev,
                                                               __m512 *od) {
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    *ev = _mm512_permutex2var_ps(x0, ie, x1);
    *od = _mm512_permutex2var_ps(x0, _mm512_add_epi32(ie, _mm512_set1_epi32(1)), x1);
}

/* nib32's order back to columns: [0, 16) in *x0, [16, 32) in *x1 */
static inline __attribute__((always_inline)) void interleave(__m512 ev, __m512 od, __m512 *x0,
                                                             __m512 *x1) {
    const __m512i i0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    *x0 = _mm512_permutex2var_ps(ev, i0, od);
    *x1 = _mm512_permutex2var_ps(ev, _mm512_add_epi32(i0, _mm512_set1_epi32(8)), od);
}

/* 16 effective scales from index i (lanes off in mk read nothing) */
static inline __attribute__((always_inline)) __m512 scales16(const ember__fq_job *jb, int64_t i,
                                                             __mmask16 mk) {
    __m512 t;
    if (jb->sd == EMBER_SCALE_F32) {
        t = _mm512_maskz_loadu_ps(mk, (const float *)jb->sc + i);
    } else {
        const __m256i h = _mm256_maskz_loadu_epi16(mk, (const uint16_t *)jb->sc + i);
        t = jb->sd == EMBER_SCALE_F16
                ? _mm512_cvtph_ps(h)
                : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return jb->two_level ? _mm512_mul_ps(_mm512_set1_ps(jb->glob), t) : t;
}

/* the scales of columns [j, j + 64) for scale-block row kb: a scale per column, or (bn > 1)
 * blocks of bn columns whose scale is the same in each 16 lanes (bn a multiple of 16, or all the
 * columns): off[t], the offset of columns j + 16t's scale within the block row (ember__fq_offs16),
 * broadcast; none read for 16 columns past n */
static inline __attribute__((always_inline)) void scales(const ember__fq_job *jb, int64_t kb,
                                                         int64_t j, const __mmask16 mk[4],
                                                         const int64_t off[4], __m512 s[4]) {
    const int64_t e0 = kb * jb->nbn;
    if (jb->bn != 1) {
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            s[t] = !mk[t] ? _mm512_setzero_ps()
                   : t % 2 && off[t] == off[t - 1]
                       ? s[t - 1] /* 32 columns, one block */
                       : _mm512_set1_ps(ember__fq_scale(jb, e0 + off[t]));
        return;
    }
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++)
        s[t] = scales16(jb, e0 + j + 16 * t, mk[t]);
}

/* off[t] for scales(): the offset of columns j + 16t's scale within a block row (bn > 1) */
static inline __attribute__((always_inline)) void offs16(const ember__fq_job *jb, int64_t j,
                                                         int64_t off[4]) {
    for (int t = 0; t < 4; t++)
        off[t] = jb->bn == 1 ? 0 : (j + 16 * t) / jb->bn;
}

/* A pass over K steps of columns [j, j + 64): the scales of the current block along K (in nib32's
 * order for 4-bit values) and what reads the weights needs. */
typedef struct wpass {
    const ember__fq_job *jb;
    int64_t j, kb, next;
    int64_t off[4], s0, s1; /* scales()'s offsets, the prefetch's span */
    const float *cs; /* column blocks (col_fast): the strip's scales in the chunk's table, K row
                        k0 first (col_scales), or NULL */
    int64_t k0;
    const __mmask16 *mk;
    int full, pf_task;
    __mmask32 m4; /* 4-bit: the bytes of the valid columns */
    __m512 s[4], tab;
} wpass;

static inline __attribute__((always_inline)) void wpass_scales(wpass *w) {
    scales(w->jb, w->kb, w->j, w->mk, w->off, w->s);
    ember__fq_scales_prefetch(w->jb, w->kb, w->s0, w->s1);
    /* in nib32's order; a scale per 32 columns or more is the same in either order (and columns
     * past n, 0, stay 0 either way: their values are 0 too) */
    if (w->jb->bits == 4 && (w->jb->bn == 1 || w->jb->bn % 32)) {
        deinterleave(w->s[0], w->s[1], &w->s[0], &w->s[1]);
        deinterleave(w->s[2], w->s[3], &w->s[2], &w->s[3]);
    }
}

static inline __attribute__((always_inline)) void wpass_init(wpass *w, const ember__fq_job *jb,
                                                             int64_t j, const __mmask16 mk[4],
                                                             int full, int64_t k0, int pf_task,
                                                             const float *cs) {
    const int64_t nvb = (jb->n - j + 1) / 2;
    w->jb = jb;
    w->j = j;
    w->cs = cs;
    w->k0 = k0;
    w->mk = mk;
    w->full = full;
    w->pf_task = pf_task;
    w->m4 = nvb >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << nvb) - 1u);
    w->kb = k0 / jb->bk;
    w->next = (w->kb + 1) * jb->bk;
    w->tab = nib_table();
    if (cs)
        return;
    offs16(jb, j, w->off);
    ember__fq_scale_span(jb, j, 64, &w->s0, &w->s1);
    wpass_scales(w);
}

/* The dequantized weights of K step kk (the pass's steps in order): 64 columns, in nib32's
 * order for 4-bit values. The weights' rows are fetched FQ_PF steps ahead into L1 and, by the
 * pass that starts a task (pf_task), the whole row of the task FQ_PF2 steps ahead into L2. */
static inline __attribute__((always_inline)) void wpass_step(wpass *w, int64_t kk, int bits,
                                                             __m512 out[4]) {
    const ember__fq_job *jb = w->jb;
    const int64_t k = jb->k, ldb = jb->ldb;
    if (w->cs) { /* a scale per 16 columns from the chunk's table; for 4-bit values the same for
                    each 32 (col_fast: blocks divide the columns), so in nib32's order too */
        const float *r = w->cs + (kk - w->k0) * 16;
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            w->s[t] = _mm512_set1_ps(r[t]);
    } else if (kk == w->next) {
        w->kb++;
        w->next += jb->bk;
        wpass_scales(w);
    }
    const uint8_t *q = jb->b + kk * ldb + (bits == 8 ? w->j : w->j / 2);
    if (kk + FQ_PF < k)
        _mm_prefetch((const char *)(q + FQ_PF * ldb), _MM_HINT_T0);
    if (w->pf_task && kk + FQ_PF2 < k)
        for (int l = 0; l < 64 * bits / 128; l++)
            _mm_prefetch((const char *)(q + FQ_PF2 * ldb + 64 * l), _MM_HINT_T1);
    if (bits == 8) {
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const __m128i v = w->full ? _mm_loadu_si128((const __m128i *)(q + 16 * t))
                                      : _mm_maskz_loadu_epi8(w->mk[t], q + 16 * t);
            out[t] = _mm512_mul_ps(w->s[t], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)));
        }
    } else { /* even and odd columns of [j, j + 32), then of [j + 32, j + 64) */
        nib32(q, (__mmask16)w->m4, w->tab, &out[0], &out[1]);
        nib32(q + 16, (__mmask16)(w->m4 >> 16), w->tab, &out[2], &out[3]);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            out[t] = _mm512_mul_ps(w->s[t], out[t]);
    }
}

/* Scale blocks of columns (bn a multiple of 16 below n, 32 for 4-bit values: burn's
 * per_block([32]) on a [d_in, d_out] weight, [1, 32]) take their scales from a table made once per
 * K chunk and task (col_scales), where each K step started a scale block: the block's scales read
 * one by one, converted, and the next block's fetched, at every K row. Zen 5, 2 threads, 4096 x
 * 11008, Q4S [1, 32] with f16 scales, public API, best of 25, the build before and this one
 * alternated three times: 4 rows 3.5-5.3 -> 2.0-3.3 ms ([32, 1]: 1.4-2.1), 16 rows 6.3-8.6 ->
 * 5.6-7.1, 128 rows 33.3-41.6 -> 31.1-37.8, 1 row 1.01-1.38 -> 0.95-1.38; Q8S 4 rows 3.4-6.7 ->
 * 2.2-3.1 (the machine's speed varied twofold within the session). */
static inline int col_fast(const ember__fq_job *jb) {
    return jb->bn > 1 && jb->bn < jb->n && jb->bn % (jb->bits == 4 ? 32 : 16) == 0;
}

/* For K rows [k0, k1) and the task's columns [j0, j1) (at most 256, j0 a multiple of 16):
 * cs[(kk - k0) * 16 + u] = the effective scale of columns j0 + 16u onwards (0 for those past j1),
 * the values ember__fq_scale gives. Per block row: its scales of the task (at most 16, consecutive)
 * in one vector, spread to the 16-column groups by a permute. The next chunk's block rows are
 * fetched (ember__fq_scales_prefetch_rows). */
static void col_scales(const ember__fq_job *jb, int64_t j0, int64_t j1, int64_t k0, int64_t k1,
                       float *cs) {
    int64_t s0, s1;
    ember__fq_scale_span(jb, j0, j1 - j0, &s0, &s1);
    const __mmask16 ms = ember__tail_mask16(s1 - s0 + 1);
    /* aligned as GCC would align it: GCC 13 aligns a local array of 64 bytes to 64 on its own and
     * loads it with an aligned move, which AddressSanitizer's fake stack (use-after-return
     * detection, on by default in GCC 13's runtime) does not honour unless the declaration asks */
    int32_t idx[16] __attribute__((aligned(64)));
    __mmask16 mu = 0;
    for (int u = 0; u < 16; u++) {
        const int64_t c = j0 + 16 * u;
        idx[u] = c < j1 ? (int32_t)(c / jb->bn - s0) : 0;
        mu |= (__mmask16)((c < j1) << u);
    }
    const __m512i vi = _mm512_loadu_si512(idx);
    int64_t kb = k0 / jb->bk, next = k0;
    __m512 row = _mm512_setzero_ps();
    for (int64_t kk = k0; kk < k1; kk++) {
        if (kk == next) {
            row = _mm512_maskz_permutexvar_ps(mu, vi, scales16(jb, kb * jb->nbn + s0, ms));
            kb++;
            next = kb * jb->bk;
        }
        _mm512_store_ps(cs + (kk - k0) * 16, row);
    }
    ember__fq_scales_prefetch_rows(jb, k1, k1 + (k1 - k0), s0, s1); /* the next chunk's */
}

/* rows [i0, i0 + R) x columns [j, j + 64) over K steps [k0, k1), sums from and back to acc (row
 * stride EMBER__FQ_TASK_COLS); the weights of each step from wbuf (64 floats a step, from
 * dequant64) or, without it, dequantized here */
static inline __attribute__((always_inline)) void
group(const ember__fq_job *jb, int64_t i0, const int R, int64_t j, const __mmask16 mk[4], int full,
      int64_t k0, int64_t k1, float *acc, int pf_task, const float *wbuf, const float *cs) {
    const int64_t k = jb->k;
    __m512 c[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            c[r][t] = _mm512_load_ps(acc + r * EMBER__FQ_TASK_COLS + 16 * t);
    wpass wp; /* made with wbuf too, unused then: GCC 12 saw it read uninitialized */
    wpass_init(&wp, jb, j, mk, full, k0, pf_task, cs);
    for (int64_t kk = k0; kk < k1; kk++) {
        __m512 w[4];
        if (wbuf) {
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
                w[t] = _mm512_load_ps(wbuf + (kk - k0) * 64 + 16 * t);
        } else if (jb->bits == 8) {
            wpass_step(&wp, kk, 8, w);
        } else {
            wpass_step(&wp, kk, 4, w);
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m512 x = _mm512_set1_ps(jb->a[(i0 + r) * k + kk]);
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
                c[r][t] = _mm512_fmadd_ps(x, w[t], c[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            _mm512_store_ps(acc + r * EMBER__FQ_TASK_COLS + 16 * t, c[r][t]);
}

/* The dequantized weights of columns [j, j + 64) over K steps [k0, k1) into wbuf (64 floats a
 * step, 32 KiB for a chunk of FQ_KC), for more than 8 rows: each group of 4 rows made them again
 * before. The same weights, so the same sums. Measured (Zen 5, Q4S blocks of 32, one process per
 * build, medians): K = 4096, N = 512, one thread (weights in L2), 12 / 16 / 32 / 64 rows 366-375
 * / 487-494 / 920-932 / 1875-1884 us -> 309-316 / 426-432 / 734 / 1391-1403; K = 4096, N =
 * 11008, 2 threads, 16 rows 7.0-8.2 -> 5.4-5.8 ms, 64 rows 22.9-24.9 -> 17.3-17.4 (Q8S per
 * tensor 20.1-22.3 -> 16.3-16.7). From 5 to 8 rows it read level. */
static void dequant64(const ember__fq_job *jb, int64_t j, const __mmask16 mk[4], int full,
                      int64_t k0, int64_t k1, int pf_task, float *wbuf, const float *cs) {
    wpass wp;
    wpass_init(&wp, jb, j, mk, full, k0, pf_task, cs);
    for (int64_t kk = k0; kk < k1; kk++) {
        __m512 w[4];
        if (jb->bits == 8)
            wpass_step(&wp, kk, 8, w);
        else
            wpass_step(&wp, kk, 4, w);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            _mm512_store_ps(wbuf + (kk - k0) * 64 + 16 * t, w[t]);
    }
}

/* One row of the lhs against a task of 256 full columns (a decode row): each K row's bytes of the
 * task at once (256 of 8-bit values, 128 of 4-bit), into 16 sums, with the same products in the
 * same order as group() (so the same results); the scales of the current block along K are
 * made once per block into sb, as group() makes them. The weights are read once, a row of the
 * task after the other, instead of four times a line. Measured (2 threads, the build before and
 * this alternated):
 * - 1 x 4096^2 Q8S per tensor, bench_matmul (2 ms idle before each call, the weights from
 *   memory): 1.22-1.38 -> 1.12-1.19 ms; 1 x 11008 x 4096 3.01-3.05 -> 2.70-2.91 ms.
 * - Public-API calls back to back (medians of 200), 1 x 4096^2: Q8S per tensor 620-685 -> 500-546
 *   us; Q8S blocks of 32 (f16 scales) 653-689 -> 545-586; Q4S blocks of 32 (f16) 703-764 ->
 *   641-679 (eight alternations; one outlier of 818).
 * - The row fetched only 96 rows ahead into L1 was faster back to back (462-497 us, Q8S per
 *   tensor) but slower from memory (1.39-1.45 and 3.58-3.68 ms: sixteen L1 fill buffers bound
 *   its fetches).
 * Dequantizing and multiplying (VPMOVSXBD, VCVTDQ2PS, VMULPS, VFMADD: four instructions per 16
 * weights on the two vector ports; 4-bit adds the nibbles' spreading) holds it near 8 bytes a
 * cycle a thread for 8-bit. */
static inline __attribute__((always_inline)) void row1(const ember__fq_job *jb, int64_t j0,
                                                       const int bits) {
    const int64_t k = jb->k, ldb = jb->ldb;
    const int lines = bits * 256 / 8 / 64; /* a K row of the task: 4 lines (8-bit) or 2 */
    const __mmask16 all[4] = {0xffff, 0xffff, 0xffff, 0xffff};
    float sb[256] __attribute__((aligned(64))); /* the scales of the current K block */
    __m512 c[16];
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++)
        c[t] = _mm512_setzero_ps();
    const __m512 tab = nib_table();
    /* scale blocks of columns (col_fast): each 16 or 32 columns' scale broadcast from the chunk's
     * table (col_scales) as the row is taken, where making the task's 256 scales into sb at
     * every K row cost more than the row's products. The same scale values, so the same
     * products. */
    const int colblk = col_fast(jb);
    float cs[FQ_KC * 16] __attribute__((aligned(64)));
    int64_t off[16], s0, s1; /* the offset of each 16 columns' scale within a block row (bn > 1),
                                the prefetch's span: once per task, not per block */
    for (int g = 0; g < 4; g++)
        offs16(jb, j0 + 64 * g, off + 4 * g);
    ember__fq_scale_span(jb, j0, 256, &s0, &s1);
    int64_t kb = -1, next = 0;
    for (int64_t kk = 0; kk < k; kk++) {
        if (kk == next) { /* a new scale block along K */
            kb++;
            next += jb->bk;
            for (int g = 0; g < 4 && !colblk; g++) { /* colblk: from the table */
                __m512 sg[4];
                scales(jb, kb, j0 + 64 * g, all, off + 4 * g, sg);
                if (bits == 4) /* in nib32's order */
                    for (int h = 0; h < 2; h++)
                        deinterleave(sg[2 * h], sg[2 * h + 1], &sg[2 * h], &sg[2 * h + 1]);
                for (int t = 0; t < 4; t++)
                    _mm512_store_ps(sb + 64 * g + 16 * t, sg[t]);
            }
            /* the next block's scales, fetched ahead (fq_matmul.h). Measured (Zen 5, 4096 x
             * 11008, blocks of 32, f16 scales, medians, without -> with, alternated through a
             * switch): 2 threads, Q4S 2 / 4 / 8 / 16 rows 2744-3327 / 3550 / 4407-4440 /
             * 6230-6545 us -> 1630-1746 / 2181-2320 / 3020-3340 / 5160-5243, Q8S 3149-3800 /
             * 4086-4283 / 5189-5532 / 6899-7320 -> 2187-2270 / 2603-2658 / 3642-3644 /
             * 5731-5814, 1 row level to -10%; decode_step's F x Q step, Q8S blocks of 32
             * 3.48-3.72 -> 2.68-3.04 ms, Q4S 2.45-2.80 -> 2.12-2.22. */
            if (!colblk)
                ember__fq_scales_prefetch(jb, kb, s0, s1);
        }
        if (colblk && kk % FQ_KC == 0)
            col_scales(jb, j0, j0 + 256, kk, kk + FQ_KC < k ? kk + FQ_KC : k, cs);
        const uint8_t *q = jb->b + kk * ldb + (bits == 8 ? j0 : j0 / 2);
        /* the whole K row FQ_PF2 rows ahead into L2 and FQ_PF rows ahead into L1, as group()
         * fetches it */
        if (kk + FQ_PF2 < k)
            for (int l = 0; l < lines; l++)
                _mm_prefetch((const char *)(q + FQ_PF2 * ldb + 64 * l), _MM_HINT_T1);
        if (kk + FQ_PF < k)
            for (int l = 0; l < lines; l++)
                _mm_prefetch((const char *)(q + FQ_PF * ldb + 64 * l), _MM_HINT_T0);
        const __m512 x = _mm512_set1_ps(jb->a[kk]);
        if (colblk) {
            const float *r = cs + (kk % FQ_KC) * 16;
#pragma GCC unroll 8
            for (int h = 0; h < 8; h++) {
                if (bits == 4) { /* both halves of nib32's order take the one scale */
                    const __m512 sv = _mm512_set1_ps(r[2 * h]);
                    __m512 ev, od;
                    nib32(q + 16 * h, 0xffff, tab, &ev, &od);
                    c[2 * h] = _mm512_fmadd_ps(x, _mm512_mul_ps(sv, ev), c[2 * h]);
                    c[2 * h + 1] = _mm512_fmadd_ps(x, _mm512_mul_ps(sv, od), c[2 * h + 1]);
                } else {
#pragma GCC unroll 2
                    for (int t = 0; t < 2; t++) {
                        const __m128i v = _mm_loadu_si128((const __m128i *)(q + 32 * h + 16 * t));
                        const __m512 w = _mm512_mul_ps(_mm512_set1_ps(r[2 * h + t]),
                                                       _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)));
                        c[2 * h + t] = _mm512_fmadd_ps(x, w, c[2 * h + t]);
                    }
                }
            }
            continue;
        }
        if (bits == 4) { /* 32 columns at a time, in nib32's order */
#pragma GCC unroll 8
            for (int h = 0; h < 8; h++) {
                __m512 ev, od;
                nib32(q + 16 * h, 0xffff, tab, &ev, &od);
                c[2 * h] =
                    _mm512_fmadd_ps(x, _mm512_mul_ps(_mm512_load_ps(sb + 32 * h), ev), c[2 * h]);
                c[2 * h + 1] = _mm512_fmadd_ps(
                    x, _mm512_mul_ps(_mm512_load_ps(sb + 32 * h + 16), od), c[2 * h + 1]);
            }
            continue;
        }
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                const __m128i v = _mm_loadu_si128((const __m128i *)(q + 64 * g + 16 * t));
                const __m512 w = _mm512_mul_ps(_mm512_load_ps(sb + 64 * g + 16 * t),
                                               _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)));
                c[4 * g + t] = _mm512_fmadd_ps(x, w, c[4 * g + t]);
            }
        }
    }
    if (bits == 4)
#pragma GCC unroll 8
        for (int h = 0; h < 8; h++)
            interleave(c[2 * h], c[2 * h + 1], &c[2 * h], &c[2 * h + 1]);
#pragma GCC unroll 16
    for (int t = 0; t < 16; t++)
        _mm512_storeu_ps(jb->c + j0 + 16 * t, c[t]);
}

void ember__fq_cols_avx512(const ember__fq_job *jb, int64_t j0, int64_t j1) {
    if (j1 > jb->n)
        j1 = jb->n;
    if (jb->m == 1 && j1 - j0 == 256) { /* a decode row, a task of full columns */
        if (jb->bits == 8)
            row1(jb, j0, 8);
        else
            row1(jb, j0, 4);
        return;
    }
    const int64_t m = jb->m, k = jb->k, n = jb->n;
    float acc[EMBER__FQ_MAX_ROWS * EMBER__FQ_TASK_COLS] __attribute__((aligned(64)));
    float wbuf[FQ_KC * 64] __attribute__((aligned(64))); /* more than 8 rows: dequant64 */
    float cs[FQ_KC * 16] __attribute__((aligned(64)));   /* col_fast: the chunk's scales */
    const int cf = col_fast(jb);
    for (int64_t i = 0; i < m * EMBER__FQ_TASK_COLS; i++)
        acc[i] = 0.0f;
    for (int64_t k0 = 0; k0 < k; k0 += FQ_KC) {
        const int64_t k1 = k0 + FQ_KC < k ? k0 + FQ_KC : k;
        if (cf)
            col_scales(jb, j0, j1, k0, k1, cs);
        for (int64_t j = j0; j < j1; j += 64) {
            const int64_t nv = j1 - j;
            __mmask16 mk[4];
            for (int t = 0; t < 4; t++)
                mk[t] = ember__tail_mask16(nv - 16 * t);
            const int full = nv >= 64;
            float *aj = acc + (j - j0);
            const float *wb = NULL, *cj = cf ? cs + (j - j0) / 16 : NULL;
            if (m > 8) {
                dequant64(jb, j, mk, full, k0, k1, j == j0, wbuf, cj);
                wb = wbuf;
            }
            for (int64_t i0 = 0; i0 < m; i0 += 4) {
                float *ai = aj + i0 * EMBER__FQ_TASK_COLS;
                const int pf = i0 == 0 && j == j0;
                switch (m - i0 >= 4 ? 4 : (int)(m - i0)) {
                case 4:
                    group(jb, i0, 4, j, mk, full, k0, k1, ai, pf, wb, cj);
                    break;
                case 3:
                    group(jb, i0, 3, j, mk, full, k0, k1, ai, pf, wb, cj);
                    break;
                case 2:
                    group(jb, i0, 2, j, mk, full, k0, k1, ai, pf, wb, cj);
                    break;
                default:
                    group(jb, i0, 1, j, mk, full, k0, k1, ai, pf, wb, cj);
                    break;
                }
            }
        }
    }
    for (int64_t i = 0; i < m; i++) {
        const float *ai = acc + i * EMBER__FQ_TASK_COLS;
        if (jb->bits == 4) /* the sums are in nib32's order, 32 columns at a time */
            for (int64_t j = j0; j < j1; j += 32) {
                __m512 x0, x1;
                interleave(_mm512_load_ps(ai + (j - j0)), _mm512_load_ps(ai + (j - j0) + 16), &x0,
                           &x1);
                _mm512_mask_storeu_ps(jb->c + i * n + j, ember__tail_mask16(j1 - j), x0);
                _mm512_mask_storeu_ps(jb->c + i * n + j + 16, ember__tail_mask16(j1 - j - 16), x1);
            }
        else
            for (int64_t j = j0; j < j1; j += 16)
                _mm512_mask_storeu_ps(jb->c + i * n + j, ember__tail_mask16(j1 - j),
                                      _mm512_load_ps(ai + (j - j0)));
    }
}
