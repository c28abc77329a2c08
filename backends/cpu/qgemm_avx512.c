/* backends/cpu/qgemm_avx512.c: the AVX-512 VNNI tier. A micro-kernel of MR (1..6) rows x 32
 * columns: VPDPBUSD multiplies the biased unsigned B bytes by a broadcast of 4 signed A bytes, so
 * neither operand needs converting; per K chunk the int32 sums lose the bias (bias * row sum of A)
 * and are scaled into float accumulators. 4-bit B is unpacked from nibbles in registers. */
#include <immintrin.h>

#include "qgemm.h"

#define EMBER__INLINE static inline __attribute__((always_inline))

/* lanes [0, nv) of 16 */
EMBER__INLINE __mmask16 tail_mask(int64_t nv) {
    if (nv >= 16)
        return (__mmask16)0xffff;
    if (nv <= 0)
        return (__mmask16)0;
    return (__mmask16)((1u << (unsigned)nv) - 1u);
}

EMBER__INLINE __m512 load_scales(const ember__qpack *p, int64_t c, int64_t j) {
    if (p->sb16)
        return _mm512_cvtph_ps(_mm256_loadu_si256(
            (const __m256i *)((const uint16_t *)p->sb + ember__qpack_sidx(p, c, j))));
    return _mm512_loadu_ps((const float *)p->sb + ember__qpack_sidx(p, c, j));
}

/* 4-bit B: each K chunk prefetches the bytes this far ahead into L2. The 4-bit decode row is
 * slower per byte than the 8-bit one (the unpack and a scaled epilogue per block of 32), and
 * cold, it drew B at ~17 GB/s where the 8-bit row drew ~30. Measured (M = 1, K = N = 4096, blocks
 * of 32, 2 threads, one process, 48 MiB written between calls, medians of 21): 85 / 85 -> 117 /
 * 106 GOPS (4 KiB ahead: 109 / 99; 16 KiB: 116 / 103); the 8-bit row did not gain from the same. */
#define Q4_PF_BYTES 8192

/* rows [i, i + MR) x columns [j, j + 32) (j % 32 == 0) */
EMBER__INLINE void micro(const ember__qjob *jb, int64_t i, int64_t j, const int MR) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp, kc = p->kc, nch = p->nch;
    const int8_t *a = jb->a + i * kp;
    const int32_t *rs = jb->rs + i * nch;
    const float *sa = jb->sa + i * nch;
    __m512 facc[6][2];
    __m512i acc[6][2], acch[3][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
        facc[r][0] = facc[r][1] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const int64_t bbytes = (p->np / 32) * (kp / 8) * 128; /* 4-bit values */
    for (int64_t c = 0; c < nch; c++) {
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++)
            acc[r][0] = acc[r][1] = _mm512_setzero_si512();
        for (int r = 0; r < 3; r++)
            acch[r][0] = acch[r][1] = _mm512_setzero_si512();
        const int64_t k0 = c * kc, k1 = k0 + kc;
        if (p->bits == 8) {
            const uint8_t *b0 = p->b + (j / 32) * (kp / 4) * 128;
            for (int64_t kk = k0; kk < k1; kk += 4) {
                __m512i v0 = _mm512_load_si512(b0 + kk * 32);
                __m512i v1 = _mm512_load_si512(b0 + kk * 32 + 64);
#pragma GCC unroll 6
                for (int r = 0; r < MR; r++) {
                    int32_t w;
                    __builtin_memcpy(&w, a + r * kp + kk, 4);
                    __m512i x = _mm512_set1_epi32(w);
                    acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], v0, x);
                    acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], v1, x);
                }
            }
        } else {
            const uint8_t *b0 = p->b + (j / 32) * (kp / 8) * 128;
            /* this chunk's bytes Q4_PF_BYTES further on (into the next panel at the end), to L2 */
            const int64_t pf = (j / 32) * (kp / 8) * 128 + k0 * 16 + Q4_PF_BYTES;
            for (int64_t l = 0; l < kc * 16 && pf + l < bbytes; l += 64)
                _mm_prefetch((const char *)(p->b + pf + l), _MM_HINT_T1);
            for (int64_t kk = k0; kk < k1; kk += 8) {
                __m512i w0 = _mm512_load_si512(b0 + kk * 16);
                __m512i w1 = _mm512_load_si512(b0 + kk * 16 + 64);
                __m512i l0 = _mm512_and_si512(w0, m4), l1 = _mm512_and_si512(w1, m4), h0, h1;
                if (MR <= 3) { /* high nibbles in place (16 x value): shifted once per chunk */
                    h0 = _mm512_andnot_si512(m4, w0);
                    h1 = _mm512_andnot_si512(m4, w1);
                } else {
                    h0 = _mm512_and_si512(_mm512_srli_epi16(w0, 4), m4);
                    h1 = _mm512_and_si512(_mm512_srli_epi16(w1, 4), m4);
                }
#pragma GCC unroll 6
                for (int r = 0; r < MR; r++) {
                    int32_t x0, x1;
                    __builtin_memcpy(&x0, a + r * kp + kk, 4);
                    __builtin_memcpy(&x1, a + r * kp + kk + 4, 4);
                    __m512i y0 = _mm512_set1_epi32(x0), y1 = _mm512_set1_epi32(x1);
                    acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], l0, y0);
                    acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], l1, y0);
                    if (MR <= 3) { /* decode rows: two chains per column half hide the latency */
                        acch[r][0] = _mm512_dpbusd_epi32(acch[r][0], h0, y1);
                        acch[r][1] = _mm512_dpbusd_epi32(acch[r][1], h1, y1);
                    } else {
                        acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], h0, y1);
                        acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], h1, y1);
                    }
                }
            }
            /* every term of acch is a multiple of 16 (and |acch| < 2^31: 240 * 128 * k < 2^31 for
             * the chunks the entry admits), so the shift is exact */
            if (MR <= 3)
#pragma GCC unroll 6
                for (int r = 0; r < MR; r++) {
                    acc[r][0] = _mm512_add_epi32(acc[r][0], _mm512_srai_epi32(acch[r][0], 4));
                    acc[r][1] = _mm512_add_epi32(acc[r][1], _mm512_srai_epi32(acch[r][1], 4));
                }
        }
        if (jb->c32) {
            /* exact int32 out (single chunk) */
            const int64_t nv = p->n - j;
            const __mmask16 k0m = tail_mask(nv), k1m = tail_mask(nv - 16);
#pragma GCC unroll 6
            for (int r = 0; r < MR; r++) {
                __m512i corr = _mm512_set1_epi32(p->bias * rs[r * nch + c]);
                int32_t *o = jb->c32 + (i + r) * jb->ldc + j;
                _mm512_mask_storeu_epi32(o, k0m, _mm512_sub_epi32(acc[r][0], corr));
                _mm512_mask_storeu_epi32(o + 16, k1m, _mm512_sub_epi32(acc[r][1], corr));
            }
            return;
        }
        __m512 s0 = load_scales(p, c, j), s1 = load_scales(p, c, j + 16);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m512i corr = _mm512_set1_epi32(p->bias * rs[r * nch + c]);
            __m512 sar = _mm512_set1_ps(sa[r * nch + c]);
            __m512 x0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][0], corr));
            __m512 x1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][1], corr));
            facc[r][0] = _mm512_fmadd_ps(x0, _mm512_mul_ps(sar, s0), facc[r][0]);
            facc[r][1] = _mm512_fmadd_ps(x1, _mm512_mul_ps(sar, s1), facc[r][1]);
        }
    }
    const int64_t nv = p->n - j;
    const __mmask16 k0m = tail_mask(nv), k1m = tail_mask(nv - 16);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        float *o = jb->c + (i + r) * jb->ldc + j;
        _mm512_mask_storeu_ps(o, k0m, facc[r][0]);
        _mm512_mask_storeu_ps(o + 16, k1m, facc[r][1]);
    }
}

static void micro1(const ember__qjob *jb, int64_t i, int64_t j) { micro(jb, i, j, 1); }
static void micro2(const ember__qjob *jb, int64_t i, int64_t j) { micro(jb, i, j, 2); }
static void micro3(const ember__qjob *jb, int64_t i, int64_t j) { micro(jb, i, j, 3); }
static void micro4(const ember__qjob *jb, int64_t i, int64_t j) { micro(jb, i, j, 4); }
static void micro5(const ember__qjob *jb, int64_t i, int64_t j) { micro(jb, i, j, 5); }
static void micro6(const ember__qjob *jb, int64_t i, int64_t j) { micro(jb, i, j, 6); }

void ember__qblock_avx512(const ember__qjob *jb, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                          int thread) {
    (void)thread;
    static void (*const fns[7])(const ember__qjob *, int64_t,
                                int64_t) = {NULL, micro1, micro2, micro3, micro4, micro5, micro6};
    if (i1 > jb->m)
        i1 = jb->m;
    for (int64_t j = j0; j < j1 && j < jb->p->n; j += 32)
        for (int64_t i = i0; i < i1;) {
            int64_t r = i1 - i;
            int mr = r >= 6 ? 6 : (int)r;
            /* prefer 4 + 4 over 6 + 2 at the tail: same work, fewer registers spilled */
            fns[mr](jb, i, j);
            i += mr;
        }
}

/* Register-only VPDPBUSD zmm loop for the peak microbenchmark: returns the int8 ops done. */
double ember__qpeak_vnni(int64_t iters) {
    __m512i acc[12];
    for (int r = 0; r < 12; r++)
        acc[r] = _mm512_set1_epi32(r);
    __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(2);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 12
        for (int r = 0; r < 12; r++)
            acc[r] = _mm512_dpbusd_epi32(acc[r], x, y);
        __asm__ volatile("" : "+v"(x));
    }
    int32_t out[16];
    __m512i s = acc[0];
    for (int r = 1; r < 12; r++)
        s = _mm512_add_epi32(s, acc[r]);
    _mm512_storeu_si512(out, s);
    __asm__ volatile("" : : "r"(out[0]) : "memory");
    return (double)iters * 12.0 * 64 * 2;
}

/* One row of A into the packed buffer: 64-byte pieces (piece q, values [64q, 64q + 64), zeros past
 * k) at dst + q * pstride for q < kp / 64, and the row's sums per K chunk (kc a multiple of 64,
 * or nch == 1) into rs[0..nch). src NULL: a padding row (zeros, sums 0). */
void ember__qa_row_avx512(const int8_t *src, int64_t k, int64_t kp, int64_t kc, int64_t nch,
                          int8_t *dst, int64_t pstride, int32_t *rs) {
    const __m512i bias = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    const int64_t per = nch == 1 ? kp / 64 : kc / 64; /* pieces per chunk */
    int64_t q = 0;
    for (int64_t c = 0; c < nch; c++) {
        __m512i acc = _mm512_setzero_si512();
        int64_t nvals = 0;
        for (int64_t e = 0; e < per; e++, q++) {
            const int64_t k0 = q * 64;
            __m512i v;
            if (!src || k0 >= k) {
                v = zero;
            } else if (k - k0 >= 64) {
                v = _mm512_loadu_si512(src + k0);
                nvals += 64;
            } else {
                v = _mm512_maskz_loadu_epi8((__mmask64)((1ull << (k - k0)) - 1), src + k0);
                nvals += k - k0;
            }
            _mm512_storeu_si512(dst + q * pstride, v);
            acc = _mm512_add_epi64(acc, _mm512_sad_epu8(_mm512_xor_si512(v, bias), zero));
        }
        /* the sad sums counted every zero-padded byte as 128 too */
        rs[c] = (int32_t)(_mm512_reduce_add_epi64(acc) - 128 * per * 64);
        (void)nvals;
    }
}

/* ---- direct kernel: int8 B read as it is stored (row-major), no packing ----
 * For a first call with few rows: the products of two B rows k, k+1 and the A pair
 * (a[k], a[k+1]) are formed with VPMADDWD on sign-extended words (exact), 64 columns a step.
 * unpacklo/hi_epi16 work per 128-bit lane, so accumulator lo holds columns 8L..8L+3 in lane L and
 * hi columns 8L+4..8L+7; one permutation per output block restores the order. */

/* rows [i, i + MR), columns [j, j + 64) (tail masked), whole K */
EMBER__INLINE void direct_micro(const ember__qdirect *d, int64_t i, int64_t j, const int MR) {
    const int64_t k = d->k, n = d->n;
    const int64_t nv = n - j < 64 ? n - j : 64;
    const __mmask64 lm = nv >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << nv) - 1);
    __m512i acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++)
        acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = _mm512_setzero_si512();
    const int8_t *b = d->b + j;
    int64_t kk = 0;
    for (; kk + 2 <= k; kk += 2) {
        /* a 64-byte piece per row at a large stride: no hardware prefetcher follows that */
        _mm_prefetch((const char *)(b + (kk + 24) * d->ldb), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + (kk + 25) * d->ldb), _MM_HINT_T0);
        __m512i r0 = _mm512_maskz_loadu_epi8(lm, b + kk * d->ldb);
        __m512i r1 = _mm512_maskz_loadu_epi8(lm, b + (kk + 1) * d->ldb);
        __m512i w0 = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(r0));
        __m512i w1 = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(r1));
        __m512i v0 = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(r0, 1));
        __m512i v1 = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(r1, 1));
        __m512i p0 = _mm512_unpacklo_epi16(w0, w1), p1 = _mm512_unpackhi_epi16(w0, w1);
        __m512i p2 = _mm512_unpacklo_epi16(v0, v1), p3 = _mm512_unpackhi_epi16(v0, v1);
#pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            const int8_t *a = d->a + (i + r) * d->lda + kk;
            uint32_t pair =
                (uint32_t)(uint16_t)(int16_t)a[0] | ((uint32_t)(uint16_t)(int16_t)a[1] << 16);
            __m512i x = _mm512_set1_epi32((int32_t)pair);
            acc[r][0] = _mm512_add_epi32(acc[r][0], _mm512_madd_epi16(p0, x));
            acc[r][1] = _mm512_add_epi32(acc[r][1], _mm512_madd_epi16(p1, x));
            acc[r][2] = _mm512_add_epi32(acc[r][2], _mm512_madd_epi16(p2, x));
            acc[r][3] = _mm512_add_epi32(acc[r][3], _mm512_madd_epi16(p3, x));
        }
    }
    if (kk < k) { /* the odd last row, paired with zeros */
        __m512i r0 = _mm512_maskz_loadu_epi8(lm, b + kk * d->ldb);
        __m512i w0 = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(r0));
        __m512i v0 = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(r0, 1));
        const __m512i z = _mm512_setzero_si512();
        __m512i p0 = _mm512_unpacklo_epi16(w0, z), p1 = _mm512_unpackhi_epi16(w0, z);
        __m512i p2 = _mm512_unpacklo_epi16(v0, z), p3 = _mm512_unpackhi_epi16(v0, z);
#pragma GCC unroll 4
        for (int r = 0; r < MR; r++) {
            __m512i x = _mm512_set1_epi32(
                (int32_t)(uint32_t)(uint16_t)(int16_t)d->a[(i + r) * d->lda + kk]);
            acc[r][0] = _mm512_add_epi32(acc[r][0], _mm512_madd_epi16(p0, x));
            acc[r][1] = _mm512_add_epi32(acc[r][1], _mm512_madd_epi16(p1, x));
            acc[r][2] = _mm512_add_epi32(acc[r][2], _mm512_madd_epi16(p2, x));
            acc[r][3] = _mm512_add_epi32(acc[r][3], _mm512_madd_epi16(p3, x));
        }
    }
    /* lane L of lo: columns 8L..8L+3, of hi: 8L+4..8L+7 -> columns 0..15 and 16..31 */
    const __m512i ia = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i ib =
        _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
#pragma GCC unroll 4
    for (int r = 0; r < MR; r++) {
        __m512i c[4] = {_mm512_permutex2var_epi32(acc[r][0], ia, acc[r][1]),
                        _mm512_permutex2var_epi32(acc[r][0], ib, acc[r][1]),
                        _mm512_permutex2var_epi32(acc[r][2], ia, acc[r][3]),
                        _mm512_permutex2var_epi32(acc[r][2], ib, acc[r][3])};
        for (int q = 0; q < 4; q++) {
            const __mmask16 m = tail_mask(nv - 16 * q);
            if (!m)
                break;
            if (d->c32) {
                _mm512_mask_storeu_epi32(d->c32 + (i + r) * d->ldc + j + 16 * q, m, c[q]);
                continue;
            }
            __m512 s = _mm512_mul_ps(_mm512_set1_ps(d->sa ? d->sa[i + r] : 1.0f),
                                     d->sb ? _mm512_maskz_loadu_ps(m, d->sb + j + 16 * q)
                                           : _mm512_set1_ps(1.0f));
            _mm512_mask_storeu_ps(d->c + (i + r) * d->ldc + j + 16 * q, m,
                                  _mm512_mul_ps(_mm512_cvtepi32_ps(c[q]), s));
        }
    }
}

static void dmicro1(const ember__qdirect *d, int64_t i, int64_t j) { direct_micro(d, i, j, 1); }
static void dmicro2(const ember__qdirect *d, int64_t i, int64_t j) { direct_micro(d, i, j, 2); }
static void dmicro3(const ember__qdirect *d, int64_t i, int64_t j) { direct_micro(d, i, j, 3); }
static void dmicro4(const ember__qdirect *d, int64_t i, int64_t j) { direct_micro(d, i, j, 4); }

void ember__qdirect_avx512(const ember__qdirect *d, int64_t j0, int64_t j1) {
    static void (*const fns[5])(const ember__qdirect *, int64_t, int64_t) = {NULL, dmicro1, dmicro2,
                                                                             dmicro3, dmicro4};
    for (int64_t j = j0; j < j1 && j < d->n; j += 64)
        for (int64_t i = 0; i < d->m;) {
            int64_t r = d->m - i;
            int mr = r >= 4 ? 4 : (int)r;
            fns[mr](d, i, j);
            i += mr;
        }
}

/* Packing 4 rows of int8 B (k group) into the 8-bit layout, 64 columns a step: byte interleave
 * (r0, r1), (r2, r3), then word interleave, gives in 128-bit lane L of x0..x3 the columns
 * 16L..16L+15 in order; a 4 x 4 transpose of 128-bit lanes puts each 16-column group in one
 * register. rows[q] NULL: zeros. Columns [0, nv) are read, [0, jn) written (jn % 32 == 0);
 * column c goes to dst + (c / 32) * pstride + ((c % 32) / 16) * 64. */
void ember__qpack8_avx512(const int8_t *const rows[4], int64_t nv, int64_t jn, uint8_t *dst,
                          int64_t pstride) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    for (int64_t c = 0; c < jn; c += 64) {
        const int64_t left = nv - c;
        const __mmask64 m =
            left >= 64 ? ~(__mmask64)0 : (left > 0 ? (((__mmask64)1 << left) - 1) : 0);
        __m512i r[4];
        for (int q = 0; q < 4; q++)
            r[q] = rows[q] ? _mm512_maskz_loadu_epi8(m, rows[q] + c) : _mm512_setzero_si512();
        __m512i ab0 = _mm512_unpacklo_epi8(r[0], r[1]), ab1 = _mm512_unpackhi_epi8(r[0], r[1]);
        __m512i cd0 = _mm512_unpacklo_epi8(r[2], r[3]), cd1 = _mm512_unpackhi_epi8(r[2], r[3]);
        __m512i x0 = _mm512_unpacklo_epi16(ab0, cd0), x1 = _mm512_unpackhi_epi16(ab0, cd0);
        __m512i x2 = _mm512_unpacklo_epi16(ab1, cd1), x3 = _mm512_unpackhi_epi16(ab1, cd1);
        __m512i t0 = _mm512_shuffle_i64x2(x0, x1, 0x44), t1 = _mm512_shuffle_i64x2(x0, x1, 0xee);
        __m512i t2 = _mm512_shuffle_i64x2(x2, x3, 0x44), t3 = _mm512_shuffle_i64x2(x2, x3, 0xee);
        __m512i o[4] = {_mm512_shuffle_i64x2(t0, t2, 0x88), _mm512_shuffle_i64x2(t0, t2, 0xdd),
                        _mm512_shuffle_i64x2(t1, t3, 0x88), _mm512_shuffle_i64x2(t1, t3, 0xdd)};
        for (int g = 0; g < 4 && c + 16 * g < jn; g++) {
            const int64_t col = c + 16 * g;
            _mm512_store_si512(dst + (col / 32) * pstride + ((col % 32) / 16) * 64,
                               _mm512_xor_si512(o[g], bias));
        }
    }
}
