/* backends/cpu/fq_matmul_avx2.c: the AVX2 kernel of the fused (F,Q) path (fq_matmul.h), for CPUs
 * without AVX-512.
 *
 * A task's columns are taken 32 at a time (four ymm of 8 f32), the rows up to 3 at a time, over
 * the whole K: the sums stay in registers, each taken in K order. Per K step and 32 columns: the
 * 32 values as int8 (4-bit ones spread from their nibbles and sign-extended first),
 * sign-extended and converted (VPMOVSXBD + VCVTDQ2PS), times their scales (the dequantized
 * weights, bit for bit ember_dequantize's: the scales of the current block along K are made
 * once per block), then one VFMADD per row and ymm with the row's value broadcast. The products
 * are those of the AVX-512 kernel, in the same order, so both give the same results.
 *
 * Until 2026-11-30 the tiers below AVX-512 ran the portable C kernel: 18 ms for 1 x 4096^2 Q8S
 * per tensor, 29 ms with Q4S blocks of 32, on this 2-vCPU VM with the CPU capped at avx2 (the
 * integer Q x Q product there: 0.3 ms). */
#include <immintrin.h>
#include <string.h>

#include "fq_matmul.h"
#include "qgemm.h"

/* rows of the weights fetched ahead: into L2 by the first row group of a pass, into L1 by every
 * group (a K row of the pass is 32 bytes, the next one ldb bytes on) */
#define FQ2_PF 16
#define FQ2_PF2 64

/* Where scales32 finds a strip's scales, made once per strip: the offset of each 8 columns' scale
 * within a block row (bn > 1: blocks of bn columns, a multiple of 16, or all the columns), the
 * prefetch's span (fq_matmul.h) */
typedef struct strip_sc {
    int64_t off[4], s0, s1;
} strip_sc;

static inline __attribute__((always_inline)) void strip_sc_init(const ember__fq_job *jb, int64_t j,
                                                                strip_sc *ss) {
    for (int t = 0; t < 4; t++)
        ss->off[t] = jb->bn == 1 ? 0 : (j + 8 * t) / jb->bn;
    ember__fq_scale_span(jb, j, 32, &ss->s0, &ss->s1);
}

/* Blocks of columns (bn > 1: a multiple of 16, or all the columns): the scales of a strip's 32
 * columns, one per 8 lanes (one per 16), in sb[0..3] for scale8 to broadcast; in values32's split
 * order too. 0 only where all 16 columns lie past n (nv valid): in the split order each group of
 * 8 holds even or odd columns from all 16. */
static inline __attribute__((always_inline)) void
block_scales4(const ember__fq_job *jb, int64_t e0, int64_t nv, const strip_sc *ss, float *sb) {
    for (int t = 0; t < 4; t += 2)
        sb[t] = sb[t + 1] = 8 * t < nv ? ember__fq_scale(jb, e0 + ss->off[t]) : 0.0f;
}

/* 16 effective scales from index i of the job's scales as f32, 8 in *lo and 8 in *hi (all 16 are
 * read: the caller keeps i + 16 within the scales) */
static inline __attribute__((always_inline)) void scales16(const ember__fq_job *jb, int64_t i,
                                                           __m256 *lo, __m256 *hi) {
    if (jb->sd == EMBER_SCALE_F32) {
        const float *p = (const float *)jb->sc + i;
        *lo = _mm256_loadu_ps(p);
        *hi = _mm256_loadu_ps(p + 8);
    } else {
        const uint16_t *p = (const uint16_t *)jb->sc + i;
        const __m128i h0 = _mm_loadu_si128((const __m128i *)(const void *)p),
                      h1 = _mm_loadu_si128((const __m128i *)(const void *)(p + 8));
        if (jb->sd == EMBER_SCALE_F16) {
            *lo = _mm256_cvtph_ps(h0);
            *hi = _mm256_cvtph_ps(h1);
        } else { /* bf16: the upper half of an f32 */
            *lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h0), 16));
            *hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h1), 16));
        }
    }
    if (jb->two_level) {
        *lo = _mm256_mul_ps(_mm256_set1_ps(jb->glob), *lo);
        *hi = _mm256_mul_ps(_mm256_set1_ps(jb->glob), *hi);
    }
}

/* the scales of columns [j, j + 32) for scale-block row kb (lanes past n: 0), into sb; the next
 * block's are fetched into L1 (each block's scales sit on lines of their own, which missed the
 * caches at every block start; fq_matmul.h, ember__fq_scales_prefetch). Zen 5 capped at avx2, 4096
 * x 11008, blocks of 32, 2 threads, medians, before -> after: 1 row Q4S 2952-3094 -> 2498-2609 us,
 * Q8S 2551-3192 -> 1971-2002; 2 rows Q8S 3594-3991 -> 3268-3431; 4 and 8 rows level. Blocks of bn
 * columns: each 8 lanes' scale broadcast (a block per K row, [1, 32], makes the scales at every K
 * row: lane by lane, with a division each, that took 25x the row's products). */
static inline __attribute__((always_inline)) void scales32(const ember__fq_job *jb, int64_t kb,
                                                           int64_t j, int64_t nv, float *sb,
                                                           const strip_sc *ss) {
    const int64_t e0 = kb * jb->nbn;
    ember__fq_scales_prefetch(jb, kb, ss->s0, ss->s1);
    if (jb->bn != 1) {
        block_scales4(jb, e0, nv, ss, sb);
        return;
    }
    if (nv >= 32) { /* a scale per column, 32 of them: sixteen at a time */
        for (int h = 0; h < 2; h++) {
            __m256 lo, hi;
            scales16(jb, e0 + j + 16 * h, &lo, &hi);
            _mm256_store_ps(sb + 16 * h, lo);
            _mm256_store_ps(sb + 16 * h + 8, hi);
        }
        return;
    }
    for (int64_t t = 0; t < 32; t++) {
        if (t >= nv) {
            sb[t] = 0.0f;
            continue;
        }
        sb[t] = ember__fq_scale(jb, e0 + j + t);
    }
}

/* the scales of lanes [8t, 8t + 8) made by scales32: sb[t] broadcast for blocks of columns (the
 * same value in each lane, or 0 for lanes past n, whose values are 0), else sb's eight */
static inline __attribute__((always_inline)) __m256 scale8(const ember__fq_job *jb, const float *sb,
                                                           int t) {
    return jb->bn != 1 ? _mm256_broadcast_ss(sb + t) : _mm256_load_ps(sb + 8 * t);
}

/* 32 values of K row q (8-bit: 32 bytes; 4-bit: 16 bytes, value j in byte j / 2, low nibble
 * first) as four ymm of f32 (columns past nv: 0; nothing past them is read). split (4-bit): the
 * even columns apart from the odd ones (below). */
static inline __attribute__((always_inline)) void
values32(const uint8_t *q, const int bits, int64_t nv, __m256 v[4], const int split) {
    uint8_t tmp[32];
    if (bits == 8) {
        const uint8_t *s = q;
        if (nv < 32) {
            memset(tmp, 0, sizeof tmp);
            memcpy(tmp, q, (size_t)nv);
            s = tmp;
        }
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            v[t] = _mm256_cvtepi32_ps(
                _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(s + 8 * t))));
        return;
    }
    const uint8_t *s = q;
    if (nv < 32) {
        memset(tmp, 0, 16);
        memcpy(tmp, q, (size_t)((nv + 1) / 2));
        s = tmp;
    }
    if (split) {
        /* each byte in a dword lane; a nibble u (0..15) with bit 3 flipped is q + 8 for the two's
         * complement value q it stands for, so 0x4B000000 | (u ^ 8), as f32, is 2^23 + q + 8
         * exactly, and less 2^23 + 8 it is q exactly, what VCVTDQ2PS makes of it: 14
         * instructions for 32 values against 18 below, but 3 more registers, which the 3-row pass
         * has not got (it spilled: 3 x 4096 x 11008 3743-3962 -> 3892-4497 us). The one-row pass
         * takes it: Zen 5 capped at avx2, 1 x 4096 x 11008 Q4S blocks of 32, 2 threads 2381-2468
         * -> 2009-2067 us, one thread 4427-4554 -> 3825-3926 (three alternations). v[0] / v[1] are
         * the even / odd columns of [0, 16), v[2] / v[3] those of [16, 32) (evens_odds32 orders
         * the scales so, interleave32 the sums back). */
        const __m256i mask = _mm256_set1_epi32(0x0F), magic = _mm256_set1_epi32(0x4B000008);
        const __m256 bias = _mm256_set1_ps(8388616.0f); /* 2^23 + 8 */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(s + 8 * h)));
            const __m256i lo = _mm256_xor_si256(_mm256_and_si256(b, mask), magic);
            const __m256i hi = _mm256_xor_si256(_mm256_srli_epi32(b, 4), magic);
            v[2 * h] = _mm256_sub_ps(_mm256_castsi256_ps(lo), bias);
            v[2 * h + 1] = _mm256_sub_ps(_mm256_castsi256_ps(hi), bias);
        }
        return;
    }
    /* a byte a 16-bit lane, then low nibble to the even byte and high nibble to the odd one */
    const __m256i x = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)s));
    const __m256i lo = _mm256_and_si256(x, _mm256_set1_epi16(0x0F));
    const __m256i y = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_srli_epi16(x, 4), 8));
    const __m256i e = _mm256_set1_epi8(8);
    const __m256i z = _mm256_sub_epi8(_mm256_xor_si256(y, e), e); /* two's complement nibbles */
    const __m128i z0 = _mm256_castsi256_si128(z), z1 = _mm256_extracti128_si256(z, 1);
    v[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(z0));
    v[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(z0, 8)));
    v[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(z1));
    v[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(z1, 8)));
}

/* 32 floats by column -> values32's split order: the even and odd of [0, 16), then of [16, 32) */
static inline __attribute__((always_inline)) void evens_odds32(float *sb) {
    float t[32];
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 8; i++) {
            t[16 * h + i] = sb[16 * h + 2 * i];
            t[16 * h + 8 + i] = sb[16 * h + 2 * i + 1];
        }
    memcpy(sb, t, sizeof t);
}

/* values32's split order back to columns, in place: c[0..3] */
static inline __attribute__((always_inline)) void interleave32(__m256 c[4]) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m256 lo = _mm256_unpacklo_ps(c[2 * h], c[2 * h + 1]),
                     hi = _mm256_unpackhi_ps(c[2 * h], c[2 * h + 1]);
        c[2 * h] = _mm256_permute2f128_ps(lo, hi, 0x20);
        c[2 * h + 1] = _mm256_permute2f128_ps(lo, hi, 0x31);
    }
}

/* A walk over the K rows of a 32-column strip, in order: the current scale block's scales and
 * the strip's scale offsets (pass() and strip_many() both make the weights through it) */
typedef struct strip_walk {
    float sb[32] __attribute__((aligned(32)));
    strip_sc ss;
    int64_t j, nv, kb, next;
} strip_walk;

static inline __attribute__((always_inline)) void walk_init(const ember__fq_job *jb, int64_t j,
                                                            int64_t nv, strip_walk *sw) {
    strip_sc_init(jb, j, &sw->ss);
    sw->j = j;
    sw->nv = nv;
    sw->kb = -1;
    sw->next = 0;
}

/* K row kk's 32 dequantized weights (column order), the rows ahead fetched (into L2 with pf_l2).
 * tr: K row kk's scales in a column-block table (col_table: a scale per 16 columns, the strip's
 * first), or NULL: the walk's. */
static inline __attribute__((always_inline)) void walk_row(const ember__fq_job *jb, strip_walk *sw,
                                                           int64_t kk, const int bits, int pf_l2,
                                                           const float *tr, __m256 w[4]) {
    const int64_t k = jb->k, ldb = jb->ldb;
    if (!tr && kk == sw->next) { /* a new scale block along K */
        sw->kb++;
        sw->next += jb->bk;
        scales32(jb, sw->kb, sw->j, sw->nv, sw->sb, &sw->ss);
    }
    const uint8_t *q = jb->b + kk * ldb + (bits == 8 ? sw->j : sw->j / 2);
    if (kk + FQ2_PF < k)
        _mm_prefetch((const char *)(q + FQ2_PF * ldb), _MM_HINT_T0);
    if (pf_l2 && kk + FQ2_PF2 < k)
        _mm_prefetch((const char *)(q + FQ2_PF2 * ldb), _MM_HINT_T1);
    __m256 v[4];
    values32(q, bits, sw->nv, v, 0);
#pragma GCC unroll 4
    for (int t = 0; t < 4; t++)
        w[t] = _mm256_mul_ps(tr ? _mm256_broadcast_ss(tr + t / 2) : scale8(jb, sw->sb, t), v[t]);
}

/* rows [i0, i0 + R) (R <= 3) x columns [j, j + 32) (nv of them valid), the whole K; or with a
 * column-block table tb (the strip's first scale of K row k0), K rows [k0, k1), the sums from and
 * back to acc (row stride EMBER__FQ_TASK_COLS; stored and reloaded exactly, so each is still taken
 * in K order) until the last chunk stores them to the output */
static inline __attribute__((always_inline)) void pass(const ember__fq_job *jb, int64_t i0,
                                                       const int R, int64_t j, int64_t nv,
                                                       const int bits, int pf_l2, int64_t k0,
                                                       int64_t k1, const float *tb, float *acc) {
    const int64_t k = jb->k;
    strip_walk sw;
    walk_init(jb, j, nv, &sw);
    __m256 c[3][4];
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            c[r][t] =
                tb ? _mm256_load_ps(acc + r * EMBER__FQ_TASK_COLS + 8 * t) : _mm256_setzero_ps();
    for (int64_t kk = k0; kk < k1; kk++) {
        __m256 w[4];
        walk_row(jb, &sw, kk, bits, pf_l2, tb ? tb + (kk - k0) * 16 : NULL, w);
#pragma GCC unroll 3
        for (int r = 0; r < R; r++) {
            const __m256 x = _mm256_set1_ps(jb->a[(i0 + r) * k + kk]);
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
                c[r][t] = _mm256_fmadd_ps(x, w[t], c[r][t]);
        }
    }
#pragma GCC unroll 3
    for (int r = 0; r < R; r++) {
        if (tb && k1 < k)
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
                _mm256_store_ps(acc + r * EMBER__FQ_TASK_COLS + 8 * t, c[r][t]);
        else
            ember__store_lanes8(jb->c + (i0 + r) * jb->n + j, c[r], 4, nv);
    }
}

/* one row (a decode row) x columns [j, j + 64) (nv of them valid), the whole K: a K row's 64
 * values a step (one line of 8-bit weights), each weight consumed as it is made. With a
 * column-block table, K rows [k0, k1) and the sums in acc, as pass(). */
static inline __attribute__((always_inline)) void pass64(const ember__fq_job *jb, int64_t i0,
                                                         int64_t j, int64_t nv, const int bits,
                                                         int64_t k0, int64_t k1, const float *tb,
                                                         float *acc) {
    const int64_t k = jb->k, ldb = jb->ldb;
    float sb[64] __attribute__((aligned(32)));
    __m256 c[8];
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++)
        c[t] = tb ? _mm256_load_ps(acc + 8 * t) : _mm256_setzero_ps();
    int64_t kb = -1, next = 0;
    const int64_t nv0 = nv < 32 ? nv : 32, nv1 = nv - nv0;
    strip_sc ss0, ss1;
    strip_sc_init(jb, j, &ss0);
    strip_sc_init(jb, j + 32, &ss1);
    const int64_t s1 = nv1 > 0 ? ss1.s1 : ss0.s1; /* the pass's last scale, for the prefetch */
    for (int64_t kk = k0; kk < k1; kk++) {
        const float *tr = tb ? tb + (kk - k0) * 16 : NULL; /* the table's scales of K row kk */
        if (!tb && kk == next) {                           /* a new scale block along K */
            kb++;
            next += jb->bk;
            if (jb->bn != 1) {
                /* blocks of columns (burn's per_block([32]) on a [d_in, d_out] weight: a block per
                 * K row): one prefetch for the pass, then each strip's scales straight into
                 * scale8's places. Zen 5 capped at avx2, 2 threads, 1 x 4096 x 11008 Q4S [1, 32]:
                 * through scales32 5.0-6.3 ms, this way 3.2-3.4 ([32, 1]: 1.8). */
                ember__fq_scales_prefetch(jb, kb, ss0.s0, s1);
                block_scales4(jb, kb * jb->nbn, nv0, &ss0, sb);
                block_scales4(jb, kb * jb->nbn, nv1, &ss1, sb + 32);
            } else {
                scales32(jb, kb, j, nv0, sb, &ss0);
                scales32(jb, kb, j + 32, nv1, sb + 32, &ss1);
                if (bits == 4) { /* in values32's split order */
                    evens_odds32(sb);
                    evens_odds32(sb + 32);
                }
            }
        }
        const uint8_t *q = jb->b + kk * ldb + (bits == 8 ? j : j / 2);
        if (kk + FQ2_PF2 < k)
            _mm_prefetch((const char *)(q + FQ2_PF2 * ldb), _MM_HINT_T1);
        if (kk + FQ2_PF < k)
            _mm_prefetch((const char *)(q + FQ2_PF * ldb), _MM_HINT_T0);
        const __m256 x = _mm256_set1_ps(jb->a[i0 * k + kk]);
        __m256 v[4];
        values32(q, bits, nv0, v, 1);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) {
            const __m256 sv = tr ? _mm256_broadcast_ss(tr + t / 2) : scale8(jb, sb, t);
            c[t] = _mm256_fmadd_ps(x, _mm256_mul_ps(sv, v[t]), c[t]);
        }
        if (nv1 > 0) {
            values32(q + (bits == 8 ? 32 : 16), bits, nv1, v, 1);
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++) {
                const __m256 sv = tr ? _mm256_broadcast_ss(tr + 2 + t / 2) : scale8(jb, sb + 32, t);
                c[4 + t] = _mm256_fmadd_ps(x, _mm256_mul_ps(sv, v[t]), c[4 + t]);
            }
        }
    }
    if (tb && k1 < k) { /* the sums wait for the next chunk (in values32's split order) */
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++)
            _mm256_store_ps(acc + 8 * t, c[t]);
        return;
    }
    if (bits == 4) {
        interleave32(c);
        interleave32(c + 4);
    }
    ember__store_lanes8(jb->c + i0 * jb->n + j, c, 8, nv);
}

/* More than FQ2_MANY rows: each K chunk's dequantized weights (FQ2_KC K rows of a 32-column
 * strip, 32 KiB of f32) are made once into a buffer and every group of 3 rows multiplies them,
 * the sums waiting in acc between chunks (stored and reloaded exactly: each still taken in K
 * order, the same products as pass(), so the same results). Before, every group of 3 rows made
 * the weights again. Zen 5 capped at avx2, 2 threads, 4096 x 11008, one binary through a switch,
 * medians: Q4S blocks of 32 9 / 16 / 64 rows 8.6 / 16.2 / 60.8 -> 6.2 / 9.8 / 30.8 ms, Q8S per
 * tensor 64 rows 62.9 -> 31.5. */
#define FQ2_KC 256
#define FQ2_MANY 8

/* rows [i0, i0 + R) (R <= 3) x the strip's 32 columns over the chunk's nk K rows of wbuf, sums
 * from and back to acc (32 floats a row) */
static inline __attribute__((always_inline)) void group_wbuf(const ember__fq_job *jb, int64_t i0,
                                                             const int R, int64_t k0, int64_t nk,
                                                             const float *wbuf, float *acc) {
    const int64_t k = jb->k;
    __m256 c[3][4];
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            c[r][t] = _mm256_load_ps(acc + r * 32 + 8 * t);
    const float *a = jb->a + i0 * k + k0;
    for (int64_t kk = 0; kk < nk; kk++) {
#pragma GCC unroll 3
        for (int r = 0; r < R; r++) {
            const __m256 x = _mm256_set1_ps(a[r * k + kk]);
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
                c[r][t] = _mm256_fmadd_ps(x, _mm256_load_ps(wbuf + kk * 32 + 8 * t), c[r][t]);
        }
    }
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            _mm256_store_ps(acc + r * 32 + 8 * t, c[r][t]);
}

/* K rows [k0, k0 + nk) of a strip: its weights made once into wbuf (walk_row, as pass() makes
 * them; tb: the strip's scales in a column-block table from K row k0, or NULL: the walk's), then
 * every group of 3 rows on them, the sums from and back to acc (32 floats a row) */
static inline __attribute__((always_inline)) void chunk_rows(const ember__fq_job *jb,
                                                             strip_walk *sw, int64_t k0, int64_t nk,
                                                             const int bits, const float *tb,
                                                             float *wbuf, float *acc) {
    for (int64_t kk = k0; kk < k0 + nk; kk++) {
        __m256 w[4];
        walk_row(jb, sw, kk, bits, 1, tb ? tb + (kk - k0) * 16 : NULL, w);
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            _mm256_store_ps(wbuf + (kk - k0) * 32 + 8 * t, w[t]);
    }
    for (int64_t i0 = 0; i0 < jb->m; i0 += 3) {
        switch (jb->m - i0 >= 3 ? 3 : (int)(jb->m - i0)) {
        case 3:
            group_wbuf(jb, i0, 3, k0, nk, wbuf, acc + i0 * 32);
            break;
        case 2:
            group_wbuf(jb, i0, 2, k0, nk, wbuf, acc + i0 * 32);
            break;
        default:
            group_wbuf(jb, i0, 1, k0, nk, wbuf, acc + i0 * 32);
            break;
        }
    }
}

/* every row (more than FQ2_MANY) x columns [j, j + 32) (nv of them valid), the whole K */
static inline __attribute__((always_inline)) void strip_many(const ember__fq_job *jb, int64_t j,
                                                             int64_t nv, const int bits) {
    const int64_t k = jb->k, m = jb->m;
    float acc[EMBER__FQ_MAX_ROWS * 32] __attribute__((aligned(32)));
    float wbuf[FQ2_KC * 32] __attribute__((aligned(32)));
    strip_walk sw;
    walk_init(jb, j, nv, &sw);
    memset(acc, 0, (size_t)m * 32 * sizeof(float));
    for (int64_t k0 = 0; k0 < k; k0 += FQ2_KC) {
        const int64_t nk = k - k0 < FQ2_KC ? k - k0 : FQ2_KC;
        chunk_rows(jb, &sw, k0, nk, bits, NULL, wbuf, acc);
    }
    for (int64_t i = 0; i < m; i++) {
        __m256 c[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++)
            c[t] = _mm256_load_ps(acc + i * 32 + 8 * t);
        ember__store_lanes8(jb->c + i * jb->n + j, c, 4, nv);
    }
}

/* Scale blocks of columns (bn a multiple of 16 below n: burn's per_block([32]) on a [d_in, d_out]
 * weight, [1, 32]) with up to FQ2_MANY rows take their scales from a table made once per K chunk
 * of FQ2_TC rows and task (col_table), where each K row started a scale block in every pass:
 * a strip's scales read one by one, converted, the next block's fetched, for each group of rows
 * again. The same scale values, so the same products. Zen 5 capped at avx2, 2 threads, 4096 x
 * 11008, Q4S [1, 32] with f16 scales, public API, best of 15-20, three alternations: 1 row
 * 4.0-5.1 -> 2.0 ms ([32, 1]: 1.8-1.9), 2 rows 5.6-5.7 -> 3.1-3.3 (2.6-2.75), 4 rows 11.7-14.5 ->
 * 5.9-6.3 (5.4-5.5), 8 rows 17.1-17.5 -> 8.8-9.2 (8.5-8.8). */
#define FQ2_TC 256

static inline int col_fast(const ember__fq_job *jb) {
    return jb->bn > 1 && jb->bn < jb->n && jb->bn % 16 == 0;
}

/* For K rows [k0, k1) and the task's columns [j0, j1) (at most EMBER__FQ_TASK_COLS, j0 a multiple
 * of 16): tb[(kk - k0) * 16 + u] = the effective scale of columns j0 + 16u onwards (0 for those
 * past j1), the values ember__fq_scale gives, each block row's once: its scales of the task (at
 * most 16, consecutive) in two vectors, spread to the 16-column groups by permutes; through
 * ember__fq_scale where 16 scales from the first would run past the last block row's end. The
 * next chunk's block rows are fetched (ember__fq_scales_prefetch_rows). */
static void col_table(const ember__fq_job *jb, int64_t j0, int64_t j1, int64_t k0, int64_t k1,
                      float *tb) {
    int64_t s0, s1, off[16];
    ember__fq_scale_span(jb, j0, j1 - j0, &s0, &s1);
    int32_t ix[16] __attribute__((aligned(32))), keep[16] __attribute__((aligned(32)));
    int nu = 0;
    for (int u = 0; u < 16; u++) {
        const int in = j0 + 16 * u < j1;
        off[u] = in ? (j0 + 16 * u) / jb->bn : s0;
        ix[u] = (int32_t)(off[u] - s0);
        keep[u] = in ? -1 : 0;
        nu += in;
    }
    const __m256i i0 = _mm256_load_si256((const __m256i *)(const void *)ix),
                  i1 = _mm256_load_si256((const __m256i *)(const void *)(ix + 8)),
                  k0m = _mm256_load_si256((const __m256i *)(const void *)keep),
                  k1m = _mm256_load_si256((const __m256i *)(const void *)(keep + 8)),
                  e8 = _mm256_set1_epi32(7);
    const int64_t nscales = (jb->k + jb->bk - 1) / jb->bk * jb->nbn; /* all of them */
    __m256 r0 = _mm256_setzero_ps(), r1 = r0;
    int64_t kb = k0 / jb->bk, next = k0;
    for (int64_t kk = k0; kk < k1; kk++) {
        if (kk == next) {
            const int64_t e0 = kb * jb->nbn;
            if (e0 + s0 + 16 <= nscales) {
                __m256 lo, hi;
                scales16(jb, e0 + s0, &lo, &hi);
                /* lane u: lo[ix] where ix < 8, else hi[ix - 8] */
                r0 = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, i0),
                                      _mm256_permutevar8x32_ps(hi, i0),
                                      _mm256_castsi256_ps(_mm256_cmpgt_epi32(i0, e8)));
                r1 = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, i1),
                                      _mm256_permutevar8x32_ps(hi, i1),
                                      _mm256_castsi256_ps(_mm256_cmpgt_epi32(i1, e8)));
                r0 = _mm256_and_ps(r0, _mm256_castsi256_ps(k0m));
                r1 = _mm256_and_ps(r1, _mm256_castsi256_ps(k1m));
            } else {
                float row[16] __attribute__((aligned(32))) = {0};
                for (int u = 0; u < nu; u++)
                    row[u] = ember__fq_scale(jb, e0 + off[u]);
                r0 = _mm256_load_ps(row);
                r1 = _mm256_load_ps(row + 8);
            }
            kb++;
            next = kb * jb->bk;
        }
        _mm256_store_ps(tb + (kk - k0) * 16, r0);
        _mm256_store_ps(tb + (kk - k0) * 16 + 8, r1);
    }
    ember__fq_scales_prefetch_rows(jb, k1, k1 + (k1 - k0), s0, s1); /* the next chunk's */
}

/* cols() for col_fast weights and up to FQ2_MANY rows: K in chunks of FQ2_TC rows, each chunk's
 * table made once for every pass and group of rows */
static inline __attribute__((always_inline)) void cols_table(const ember__fq_job *jb, int64_t j0,
                                                             int64_t j1, const int bits) {
    const int64_t k = jb->k, m = jb->m;
    float tb[FQ2_TC * 16] __attribute__((aligned(32)));
    float acc[FQ2_MANY * EMBER__FQ_TASK_COLS] __attribute__((aligned(32)));
    memset(acc, 0, (size_t)m * EMBER__FQ_TASK_COLS * sizeof(float));
    for (int64_t k0 = 0; k0 < k; k0 += FQ2_TC) {
        const int64_t k1 = k - k0 < FQ2_TC ? k : k0 + FQ2_TC;
        col_table(jb, j0, j1, k0, k1, tb);
        if (m == 1) {
            for (int64_t j = j0; j < j1; j += 64)
                pass64(jb, 0, j, j1 - j < 64 ? j1 - j : 64, bits, k0, k1, tb + (j - j0) / 16,
                       acc + (j - j0));
            continue;
        }
        for (int64_t j = j0; j < j1; j += 32) {
            const int64_t nv = j1 - j < 32 ? j1 - j : 32;
            const float *t = tb + (j - j0) / 16;
            for (int64_t i0 = 0; i0 < m; i0 += 3) {
                const int pf = i0 == 0;
                float *a = acc + i0 * EMBER__FQ_TASK_COLS + (j - j0);
                switch (m - i0 >= 3 ? 3 : (int)(m - i0)) {
                case 3:
                    pass(jb, i0, 3, j, nv, bits, pf, k0, k1, t, a);
                    break;
                case 2:
                    pass(jb, i0, 2, j, nv, bits, pf, k0, k1, t, a);
                    break;
                default:
                    pass(jb, i0, 1, j, nv, bits, pf, k0, k1, t, a);
                    break;
                }
            }
        }
    }
}

/* cols_table() for more than FQ2_MANY rows: per K chunk the task's table, then strip by strip the
 * chunk's weights made once (as strip_many makes them) and every group of rows on them, each
 * strip's sums waiting in acc ([strip][row][32]). Zen 5 capped at avx2, 2 threads, 4096 x 11008,
 * Q4S [1, 32] with f16 scales, best of 15, three alternations: 16 rows 12.7-15.3 -> 9.8-10.9 ms
 * ([32, 1]: 9.7-10.6), 64 rows 33.7-37.3 -> 29.6-32.1 (30.0-32.6). */
static inline __attribute__((always_inline)) void
cols_table_many(const ember__fq_job *jb, int64_t j0, int64_t j1, const int bits) {
    const int64_t k = jb->k, m = jb->m, nstrips = (j1 - j0 + 31) / 32;
    float acc[EMBER__FQ_MAX_ROWS * EMBER__FQ_TASK_COLS] __attribute__((aligned(32)));
    float wbuf[FQ2_KC * 32] __attribute__((aligned(32)));
    float tb[FQ2_TC * 16] __attribute__((aligned(32)));
    memset(acc, 0, (size_t)(nstrips * m * 32) * sizeof(float));
    for (int64_t k0 = 0; k0 < k; k0 += FQ2_KC) {
        const int64_t nk = k - k0 < FQ2_KC ? k - k0 : FQ2_KC;
        col_table(jb, j0, j1, k0, k0 + nk, tb);
        for (int64_t st = 0; st < nstrips; st++) {
            const int64_t j = j0 + 32 * st, nv = j1 - j < 32 ? j1 - j : 32;
            float *as = acc + st * m * 32;
            strip_walk sw;
            walk_init(jb, j, nv, &sw);
            chunk_rows(jb, &sw, k0, nk, bits, tb + 2 * st, wbuf, as);
        }
    }
    for (int64_t st = 0; st < nstrips; st++) {
        const int64_t j = j0 + 32 * st, nv = j1 - j < 32 ? j1 - j : 32;
        for (int64_t i = 0; i < m; i++) {
            __m256 c[4];
#pragma GCC unroll 4
            for (int t = 0; t < 4; t++)
                c[t] = _mm256_load_ps(acc + (st * m + i) * 32 + 8 * t);
            ember__store_lanes8(jb->c + i * jb->n + j, c, 4, nv);
        }
    }
}

static inline __attribute__((always_inline)) void cols(const ember__fq_job *jb, int64_t j0,
                                                       int64_t j1, const int bits) {
    if (col_fast(jb)) {
        if (jb->m <= FQ2_MANY)
            cols_table(jb, j0, j1, bits);
        else
            cols_table_many(jb, j0, j1, bits);
        return;
    }
    if (jb->m == 1) {
        for (int64_t j = j0; j < j1; j += 64)
            pass64(jb, 0, j, j1 - j < 64 ? j1 - j : 64, bits, 0, jb->k, NULL, NULL);
        return;
    }
    for (int64_t j = j0; j < j1; j += 32) {
        const int64_t nv = j1 - j < 32 ? j1 - j : 32;
        if (jb->m > FQ2_MANY) {
            strip_many(jb, j, nv, bits);
            continue;
        }
        for (int64_t i0 = 0; i0 < jb->m; i0 += 3) {
            const int pf = i0 == 0;
            switch (jb->m - i0 >= 3 ? 3 : (int)(jb->m - i0)) {
            case 3:
                pass(jb, i0, 3, j, nv, bits, pf, 0, jb->k, NULL, NULL);
                break;
            case 2:
                pass(jb, i0, 2, j, nv, bits, pf, 0, jb->k, NULL, NULL);
                break;
            default:
                pass(jb, i0, 1, j, nv, bits, pf, 0, jb->k, NULL, NULL);
                break;
            }
        }
    }
}

void ember__fq_cols_avx2(const ember__fq_job *jb, int64_t j0, int64_t j1) {
    if (j1 > jb->n)
        j1 = jb->n;
    if (jb->bits == 8)
        cols(jb, j0, j1, 8);
    else
        cols(jb, j0, j1, 4);
}
