/* backends/cpu/qgemm_avx2.c: the AVX2 tier. Exact int32 sums need 16-bit products without
 * saturation, so B bytes are widened to s16 and multiplied with VPMADDWD against the A row's 4
 * values of the k group (also widened): each dword holds a pair sum; a final horizontal add gives
 * the column sums. Micro-kernel: MR (1..2) rows x 16 columns. Where the CPU has AVX-VNNI
 * (ember__avx2_vnni), B is multiplied as bytes instead, as in the AVX-512 tier: 8-bit B in one K
 * chunk up to 6 rows x 16 columns (micro_vnni) or, for one or two rows, whole panels
 * (micro_vnni32); B in K chunks (4-bit, or 8-bit with block scales) 4 rows x 16 columns
 * (micro_vnnik4), then 2 or 1 (micro_vnnik) or, for one row, whole panels (row_vnnik). */
#include <immintrin.h>
#include <string.h>

#include "qgemm.h"

#define EMBER__INLINE static inline __attribute__((always_inline))

EMBER__INLINE __m256 load_scales8(const ember__qpack *p, int64_t c, int64_t j) {
    if (p->sb16)
        return _mm256_cvtph_ps(_mm_loadu_si128(
            (const __m128i *)((const uint16_t *)p->sb + ember__qpack_sidx(p, c, j))));
    return _mm256_loadu_ps((const float *)p->sb + ember__qpack_sidx(p, c, j));
}

/* A chunk's scale of B (s) as it multiplies the chunk's int32 sums of a row whose A scale is
 * sa: sa * s, or s alone where every chunk of a row has the same A scale (jb->sa_row), which
 * row_scale8 then applies once to the row's float sums after the last chunk (see qgemm.h).
 * bench_qgemm --shape 512,4096,4096, Zen 5, AVX2 tier (AVX-VNNI), 2 threads, three alternations:
 * e_q4 538-581 -> 588-601 GOPS, e_q8b 471-509 -> 506-530. */
EMBER__INLINE __m256 chunk_scale8(const ember__qjob *jb, float sa, __m256 s) {
    return jb->sa_row ? s : _mm256_mul_ps(_mm256_set1_ps(sa), s);
}
EMBER__INLINE __m256 row_scale8(const ember__qjob *jb, float sa, __m256 f) {
    return jb->sa_row ? _mm256_mul_ps(f, _mm256_set1_ps(sa)) : f;
}

/* the 4 values a[0..3] as s16, repeated over the register */
EMBER__INLINE __m256i a_words(const int8_t *a) {
    int32_t w;
    __builtin_memcpy(&w, a, 4);
    __m128i x = _mm_cvtepi8_epi16(_mm_cvtsi32_si128(w));
    return _mm256_broadcastq_epi64(x);
}

/* 8 column sums from two pair-sum accumulators (columns 0-3 and 4-7) */
EMBER__INLINE __m256i fold(__m256i x, __m256i y) {
    return _mm256_permute4x64_epi64(_mm256_hadd_epi32(x, y), 0xd8);
}

EMBER__INLINE void micro(const ember__qjob *jb, int64_t i, int64_t j, const int MR) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp, kc = p->kc, nch = p->nch;
    const int8_t *a = jb->a + i * kp;
    const int32_t *rs = jb->rs + i * nch;
    const float *sa = jb->sa + i * nch;
    __m256 facc[2][2];
    __m256i acc[2][4];
    for (int r = 0; r < MR; r++)
        facc[r][0] = facc[r][1] = _mm256_setzero_ps();
    const __m128i m4 = _mm_set1_epi8(0x0f);
    int32_t outbuf[2][16];
    for (int64_t c = 0; c < nch; c++) {
        for (int r = 0; r < MR; r++)
            for (int q = 0; q < 4; q++)
                acc[r][q] = _mm256_setzero_si256();
        const int64_t k0 = c * kc, k1 = k0 + kc;
        if (p->bits == 8) {
            const uint8_t *b = p->b + (j / 32) * (kp / 4) * 128 + ((j % 32) / 16) * 64;
            for (int64_t kk = k0; kk < k1; kk += 4) {
                const uint8_t *row = b + kk * 32;
                __m256i aw[2];
                for (int r = 0; r < MR; r++)
                    aw[r] = a_words(a + r * kp + kk);
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++) {
                    __m256i w =
                        _mm256_cvtepu8_epi16(_mm_load_si128((const __m128i *)(row + q * 16)));
                    for (int r = 0; r < MR; r++)
                        acc[r][q] = _mm256_add_epi32(acc[r][q], _mm256_madd_epi16(w, aw[r]));
                }
            }
        } else {
            const uint8_t *b = p->b + (j / 32) * (kp / 8) * 128 + ((j % 32) / 16) * 64;
            for (int64_t kk = k0; kk < k1; kk += 8) {
                const uint8_t *row = b + kk * 16;
                __m256i al[2], ah[2];
                for (int r = 0; r < MR; r++) {
                    al[r] = a_words(a + r * kp + kk);
                    ah[r] = a_words(a + r * kp + kk + 4);
                }
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++) {
                    __m128i v = _mm_load_si128((const __m128i *)(row + q * 16));
                    __m256i lo = _mm256_cvtepu8_epi16(_mm_and_si128(v, m4));
                    __m256i hi = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(v, 4), m4));
                    for (int r = 0; r < MR; r++) {
                        acc[r][q] = _mm256_add_epi32(acc[r][q], _mm256_madd_epi16(lo, al[r]));
                        acc[r][q] = _mm256_add_epi32(acc[r][q], _mm256_madd_epi16(hi, ah[r]));
                    }
                }
            }
        }
        for (int r = 0; r < MR; r++) {
            __m256i corr = _mm256_set1_epi32(p->bias * rs[r * nch + c]);
            __m256i x0 = _mm256_sub_epi32(fold(acc[r][0], acc[r][1]), corr);
            __m256i x1 = _mm256_sub_epi32(fold(acc[r][2], acc[r][3]), corr);
            if (jb->c32) {
                _mm256_storeu_si256((__m256i *)outbuf[r], x0);
                _mm256_storeu_si256((__m256i *)(outbuf[r] + 8), x1);
                continue;
            }
            const float sar = sa[r * nch + c];
            facc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(x0),
                                         chunk_scale8(jb, sar, load_scales8(p, c, j)), facc[r][0]);
            facc[r][1] =
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(x1),
                                chunk_scale8(jb, sar, load_scales8(p, c, j + 8)), facc[r][1]);
        }
    }
    const int64_t nv = p->n - j < 16 ? p->n - j : 16;
    for (int r = 0; r < MR; r++) {
        if (jb->c32) {
            int32_t *o = jb->c32 + (i + r) * jb->ldc + j;
            for (int64_t q = 0; q < nv; q++)
                o[q] = outbuf[r][q];
            continue;
        }
        facc[r][0] = row_scale8(jb, sa[r * nch], facc[r][0]);
        facc[r][1] = row_scale8(jb, sa[r * nch], facc[r][1]);
        ember__store_lanes8(jb->c + (i + r) * jb->ldc + j, facc[r], 2, nv);
    }
}

/* acc + the products of unsigned u and signed s bytes (AVX-VNNI: the VEX form of VPDPBUSD, on
 * ymm0-15), the sum in acc's register (an asm operand read and written in place: from the
 * intrinsic GCC 12 copied the accumulator around each product, see qgemm_avx512.c) */
EMBER__INLINE __m256i dpb8(__m256i acc, __m256i u, __m256i s) {
    __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
    return acc;
}

/* the 4 signed bytes at a, broadcast to every dword (the A operand of VPDPBUSD) */
EMBER__INLINE __m256i bcast4(const int8_t *a) {
    int32_t w;
    __builtin_memcpy(&w, a, 4);
    return _mm256_set1_epi32(w);
}

/* AVX-VNNI: rows [i, i + MR) (MR <= 6) x columns [j, j + 16) of 8-bit B in one K chunk. The
 * biased unsigned B bytes multiply a broadcast of 4 signed A bytes with exact int32 sums, as in
 * the AVX-512 tier: 2 x MR sums, 32 products an instruction against VPMADDWD's 16. */
EMBER__INLINE void micro_vnni(const ember__qjob *jb, int64_t i, int64_t j, const int MR) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp;
    const int8_t *a = jb->a + i * kp;
    __m256i c0[6], c1[6];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
        c0[r] = c1[r] = _mm256_set1_epi32(-p->bias * jb->rs[i + r]);
    const uint8_t *b = p->b + (j / 32) * (kp / 4) * 128 + ((j % 32) / 16) * 64;
    const uint8_t *bend = p->b + (p->np / 32) * (kp / 4) * 128;
    for (int64_t kk = 0; kk < kp; kk += 4) {
        /* both halves' lines 8 KiB ahead into L2 (this one's and the other half's, which the
         * next call reads): 1 x 4096^2 65-66% -> 79-85% of the roofline, 8 x 4096^2 40-41% ->
         * 56-62% (this one's line alone: 69-73%, 52-54%) */
        if (b + kk * 32 + 8192 + 128 <= bend) {
            _mm_prefetch((const char *)(b + kk * 32 + 8192), _MM_HINT_T1);
            _mm_prefetch((const char *)(b + kk * 32 + 8192 + 64), _MM_HINT_T1);
        }
        const __m256i v0 = _mm256_load_si256((const __m256i *)(b + kk * 32));
        const __m256i v1 = _mm256_load_si256((const __m256i *)(b + kk * 32 + 32));
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            const __m256i x = bcast4(a + r * kp + kk);
            c0[r] = dpb8(c0[r], v0, x);
            c1[r] = dpb8(c1[r], v1, x);
        }
    }
    const int64_t nv = p->n - j < 16 ? p->n - j : 16;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    if (!jb->c32) {
        s0 = load_scales8(p, 0, j);
        s1 = load_scales8(p, 0, j + 8);
    }
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        if (jb->c32) {
            const __m256 v[2] = {_mm256_castsi256_ps(c0[r]), _mm256_castsi256_ps(c1[r])};
            ember__store_lanes8(jb->c32 + (i + r) * jb->ldc + j, v, 2, nv);
            continue;
        }
        const __m256 sar = _mm256_set1_ps(jb->sa[i + r]);
        const __m256 x[2] = {_mm256_mul_ps(_mm256_cvtepi32_ps(c0[r]), _mm256_mul_ps(sar, s0)),
                             _mm256_mul_ps(_mm256_cvtepi32_ps(c1[r]), _mm256_mul_ps(sar, s1))};
        ember__store_lanes8(jb->c + (i + r) * jb->ldc + j, x, 2, nv);
    }
}

/* AVX-VNNI, decode rows: rows [i, i + MR) (MR <= 2) x the 32 columns of panel j / 32, both halves
 * of each 128-byte group at once, with two sets of sums for MR = 1 (8 chains) */
EMBER__INLINE void micro_vnni32(const ember__qjob *jb, int64_t i, int64_t j, const int MR) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp;
    const int8_t *a = jb->a + i * kp;
    __m256i c[2][4], e[4];
#pragma GCC unroll 2
    for (int r = 0; r < MR; r++)
        c[r][0] = c[r][1] = c[r][2] = c[r][3] = _mm256_set1_epi32(-p->bias * jb->rs[i + r]);
    e[0] = e[1] = e[2] = e[3] = _mm256_setzero_si256();
    const uint8_t *b = p->b + (j / 32) * (kp / 4) * 128;
    const uint8_t *bend = p->b + (p->np / 32) * (kp / 4) * 128;
    for (int64_t kk = 0; kk < kp; kk += 8) {
        const uint8_t *w = b + kk * 32; /* 256 bytes: two k groups of 32 columns */
        if (w + 8192 + 256 <= bend)
            for (int q = 0; q < 256; q += 64)
                _mm_prefetch((const char *)(w + 8192 + q), _MM_HINT_T1);
        __m256i v[8];
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++)
            v[q] = _mm256_load_si256((const __m256i *)(w + 32 * q));
#pragma GCC unroll 2
        for (int r = 0; r < MR; r++) {
            const __m256i x0 = bcast4(a + r * kp + kk), x1 = bcast4(a + r * kp + kk + 4);
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++)
                c[r][q] = dpb8(c[r][q], v[q], x0);
            if (MR == 1) {
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++)
                    e[q] = dpb8(e[q], v[4 + q], x1);
            } else {
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++)
                    c[r][q] = dpb8(c[r][q], v[4 + q], x1);
            }
        }
    }
    if (MR == 1)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
            c[0][q] = _mm256_add_epi32(c[0][q], e[q]);
    const int64_t nv = p->n - j < 32 ? p->n - j : 32;
#pragma GCC unroll 2
    for (int r = 0; r < MR; r++) {
        __m256 x[4];
        if (jb->c32) {
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++)
                x[q] = _mm256_castsi256_ps(c[r][q]);
            ember__store_lanes8(jb->c32 + (i + r) * jb->ldc + j, x, 4, nv);
            continue;
        }
        const __m256 sar = _mm256_set1_ps(jb->sa[i + r]);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
            x[q] = _mm256_mul_ps(_mm256_cvtepi32_ps(c[r][q]),
                                 _mm256_mul_ps(sar, load_scales8(p, 0, j + 8 * q)));
        ember__store_lanes8(jb->c + (i + r) * jb->ldc + j, x, 4, nv);
    }
}

/* The operands of a k group of 8 at w for one 16-column half of a panel of B in K chunks: l0 /
 * l1 multiply A's k 0-3 (columns 0-7 / 8-15), h0 / h1 its k 4-7. 4-bit: one byte holds k 0-3 in
 * its low nibble and k 4-7 in its high one (masked, the high ones shifted down); 8-bit: two 4-k
 * groups 128 bytes apart. The group's bytes 8 KiB ahead (up to bend) are fetched into L2. */
EMBER__INLINE void kgroup16(const uint8_t *w, const uint8_t *bend, const int bits, __m256i *l0,
                            __m256i *l1, __m256i *h0, __m256i *h1) {
    const int64_t gb = bits * 32; /* bytes of a k group of 8, both halves */
    if (w + 8192 + gb <= bend)
        for (int q = 0; q < gb; q += 64)
            _mm_prefetch((const char *)(w + 8192 + q), _MM_HINT_T1);
    if (bits == 4) {
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        const __m256i w0 = _mm256_load_si256((const __m256i *)w);
        const __m256i w1 = _mm256_load_si256((const __m256i *)(w + 32));
        *l0 = _mm256_and_si256(w0, m4);
        *l1 = _mm256_and_si256(w1, m4);
        *h0 = _mm256_and_si256(_mm256_srli_epi16(w0, 4), m4);
        *h1 = _mm256_and_si256(_mm256_srli_epi16(w1, 4), m4);
    } else {
        *l0 = _mm256_load_si256((const __m256i *)w);
        *l1 = _mm256_load_si256((const __m256i *)(w + 32));
        *h0 = _mm256_load_si256((const __m256i *)(w + 128));
        *h1 = _mm256_load_si256((const __m256i *)(w + 160));
    }
}

/* AVX-VNNI, B in K chunks (4-bit, or 8-bit with block scales): rows [i, i + MR) (MR <= 2) x
 * columns [j, j + 16), each chunk's sums scaled into float accumulators as micro does (the same
 * float operations, so the same results). A k group of 8 is two operand pairs per column half
 * (kgroup16). One row keeps the two pairs in separate sums (four chains). */
EMBER__INLINE void micro_vnnik(const ember__qjob *jb, int64_t i, int64_t j, const int MR,
                               const int bits) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp, kc = p->kc, nch = p->nch;
    const int8_t *a = jb->a + i * kp;
    const int32_t *rs = jb->rs + i * nch;
    const float *sa = jb->sa + i * nch;
    __m256 f0[2], f1[2];
#pragma GCC unroll 2
    for (int r = 0; r < MR; r++)
        f0[r] = f1[r] = _mm256_setzero_ps();
    const int64_t gb = bits * 32; /* bytes of a k group of 8, both halves */
    const uint8_t *b = p->b + (j / 32) * (kp / 8) * gb + ((j % 32) / 16) * 64;
    const uint8_t *bend = p->b + (p->np / 32) * (kp / 8) * gb;
    for (int64_t c = 0; c < nch; c++) {
        __m256i c0[2], c1[2], e0 = _mm256_setzero_si256(), e1 = e0;
#pragma GCC unroll 2
        for (int r = 0; r < MR; r++)
            c0[r] = c1[r] = _mm256_set1_epi32(-p->bias * rs[r * nch + c]);
        for (int64_t kk = c * kc; kk < (c + 1) * kc; kk += 8) {
            __m256i l0, l1, h0, h1;
            kgroup16(b + (kk / 8) * gb, bend, bits, &l0, &l1, &h0, &h1);
#pragma GCC unroll 2
            for (int r = 0; r < MR; r++) {
                const __m256i y0 = bcast4(a + r * kp + kk), y1 = bcast4(a + r * kp + kk + 4);
                c0[r] = dpb8(c0[r], l0, y0);
                c1[r] = dpb8(c1[r], l1, y0);
                if (MR == 1) {
                    e0 = dpb8(e0, h0, y1);
                    e1 = dpb8(e1, h1, y1);
                } else {
                    c0[r] = dpb8(c0[r], h0, y1);
                    c1[r] = dpb8(c1[r], h1, y1);
                }
            }
        }
        if (MR == 1) {
            c0[0] = _mm256_add_epi32(c0[0], e0);
            c1[0] = _mm256_add_epi32(c1[0], e1);
        }
        const __m256 s0 = jb->c32 ? _mm256_setzero_ps() : load_scales8(p, c, j);
        const __m256 s1 = jb->c32 ? _mm256_setzero_ps() : load_scales8(p, c, j + 8);
#pragma GCC unroll 2
        for (int r = 0; r < MR; r++) {
            if (jb->c32) { /* exact int32 out (single chunk): the bits kept in f0 / f1 */
                f0[r] = _mm256_castsi256_ps(c0[r]);
                f1[r] = _mm256_castsi256_ps(c1[r]);
                continue;
            }
            const float sar = sa[r * nch + c];
            f0[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c0[r]), chunk_scale8(jb, sar, s0), f0[r]);
            f1[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c1[r]), chunk_scale8(jb, sar, s1), f1[r]);
        }
    }
    const int64_t nv = p->n - j < 16 ? p->n - j : 16;
#pragma GCC unroll 2
    for (int r = 0; r < MR; r++) {
        if (!jb->c32) {
            f0[r] = row_scale8(jb, sa[r * nch], f0[r]);
            f1[r] = row_scale8(jb, sa[r * nch], f1[r]);
        }
        const __m256 x[2] = {f0[r], f1[r]};
        ember__store_lanes8(jb->c32 ? (void *)(jb->c32 + (i + r) * jb->ldc + j)
                                    : (void *)(jb->c + (i + r) * jb->ldc + j),
                            x, 2, nv);
    }
}

/* AVX-VNNI, B in K chunks, one row (decode): the 32 columns of panel j / 32 at once (the
 * panel's bytes in order), one sum per 8 columns */
EMBER__INLINE void row_vnnik(const ember__qjob *jb, int64_t i, int64_t j, const int bits) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp, kc = p->kc, nch = p->nch;
    const int8_t *a = jb->a + i * kp;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 f[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++)
        f[q] = _mm256_setzero_ps();
    const int64_t gb = bits * 32; /* bytes of a k group of 8 */
    const uint8_t *b = p->b + (j / 32) * (kp / 8) * gb;
    const uint8_t *bend = p->b + (p->np / 32) * (kp / 8) * gb;
    for (int64_t c = 0; c < nch; c++) {
        __m256i acc[4];
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
            acc[q] = _mm256_set1_epi32(-p->bias * jb->rs[i * nch + c]);
        for (int64_t kk = c * kc; kk < (c + 1) * kc; kk += 8) {
            const uint8_t *w = b + (kk / 8) * gb;
            if (w + 8192 + gb <= bend)
                for (int q = 0; q < gb; q += 64)
                    _mm_prefetch((const char *)(w + 8192 + q), _MM_HINT_T1);
            const __m256i y0 = bcast4(a + kk), y1 = bcast4(a + kk + 4);
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                /* columns 8q..8q+7: 4-bit at (q / 2) * 64 + (q % 2) * 32, 8-bit at 32q */
                if (bits == 4) {
                    const __m256i v =
                        _mm256_load_si256((const __m256i *)(w + (q / 2) * 64 + (q % 2) * 32));
                    acc[q] = dpb8(acc[q], _mm256_and_si256(v, m4), y0);
                    acc[q] = dpb8(acc[q], _mm256_and_si256(_mm256_srli_epi16(v, 4), m4), y1);
                } else {
                    acc[q] = dpb8(acc[q], _mm256_load_si256((const __m256i *)(w + 32 * q)), y0);
                    acc[q] =
                        dpb8(acc[q], _mm256_load_si256((const __m256i *)(w + 128 + 32 * q)), y1);
                }
            }
        }
        const float sar = jb->sa[i * nch + c];
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            if (jb->c32) {
                f[q] = _mm256_castsi256_ps(acc[q]);
                continue;
            }
            f[q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[q]),
                                   chunk_scale8(jb, sar, load_scales8(p, c, j + 8 * q)), f[q]);
        }
    }
    if (!jb->c32)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
            f[q] = row_scale8(jb, jb->sa[i * nch], f[q]);
    const int64_t nv = p->n - j < 32 ? p->n - j : 32;
    ember__store_lanes8(jb->c32 ? (void *)(jb->c32 + i * jb->ldc + j)
                                : (void *)(jb->c + i * jb->ldc + j),
                        f, 4, nv);
}

/* micro_vnnik for 4 rows: the float sums wait in fb between chunks (loaded and stored exactly,
 * the same operations), which leaves the registers to 8 integer sums. bench_qgemm, AVX2 tier with
 * AVX-VNNI, 2 threads, two alternations against 2 rows a pass: e_q4 (blocks of 32) at 1024^3
 * 334-348 -> 432-446 GOPS, at 128 x 4096^2 343-347 -> 423-447; e_q8b 357-358 -> 442-448 and
 * 326-334 -> 415-438. */
EMBER__INLINE void micro_vnnik4(const ember__qjob *jb, int64_t i, int64_t j, const int bits) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp, kc = p->kc, nch = p->nch;
    const int8_t *a = jb->a + i * kp;
    const int32_t *rs = jb->rs + i * nch;
    const float *sa = jb->sa + i * nch;
    float fb[4][16] __attribute__((aligned(32)));
    memset(fb, 0, sizeof fb);
    const int64_t gb = bits * 32; /* bytes of a k group of 8, both halves */
    const uint8_t *b = p->b + (j / 32) * (kp / 8) * gb + ((j % 32) / 16) * 64;
    const uint8_t *bend = p->b + (p->np / 32) * (kp / 8) * gb;
    for (int64_t c = 0; c < nch; c++) {
        __m256i c0[4], c1[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            c0[r] = c1[r] = _mm256_set1_epi32(-p->bias * rs[r * nch + c]);
        for (int64_t kk = c * kc; kk < (c + 1) * kc; kk += 8) {
            __m256i l0, l1, h0, h1;
            kgroup16(b + (kk / 8) * gb, bend, bits, &l0, &l1, &h0, &h1);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                const __m256i y0 = bcast4(a + r * kp + kk), y1 = bcast4(a + r * kp + kk + 4);
                c0[r] = dpb8(c0[r], l0, y0);
                c1[r] = dpb8(c1[r], l1, y0);
                c0[r] = dpb8(c0[r], h0, y1);
                c1[r] = dpb8(c1[r], h1, y1);
            }
        }
        if (jb->c32) { /* exact int32 out (single chunk) */
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                _mm256_store_ps(fb[r], _mm256_castsi256_ps(c0[r]));
                _mm256_store_ps(fb[r] + 8, _mm256_castsi256_ps(c1[r]));
            }
            continue;
        }
        const __m256 s0 = load_scales8(p, c, j), s1 = load_scales8(p, c, j + 8);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const float sar = sa[r * nch + c];
            _mm256_store_ps(fb[r],
                            _mm256_fmadd_ps(_mm256_cvtepi32_ps(c0[r]), chunk_scale8(jb, sar, s0),
                                            _mm256_load_ps(fb[r])));
            _mm256_store_ps(fb[r] + 8,
                            _mm256_fmadd_ps(_mm256_cvtepi32_ps(c1[r]), chunk_scale8(jb, sar, s1),
                                            _mm256_load_ps(fb[r] + 8)));
        }
    }
    const int64_t nv = p->n - j < 16 ? p->n - j : 16;
    for (int r = 0; r < 4; r++) {
        if (!jb->c32) {
            _mm256_store_ps(fb[r], row_scale8(jb, sa[r * nch], _mm256_load_ps(fb[r])));
            _mm256_store_ps(fb[r] + 8, row_scale8(jb, sa[r * nch], _mm256_load_ps(fb[r] + 8)));
        }
        void *o = jb->c32 ? (void *)(jb->c32 + (i + r) * jb->ldc + j)
                          : (void *)(jb->c + (i + r) * jb->ldc + j);
        memcpy(o, fb[r], (size_t)nv * 4);
    }
}

static void vnnik4_4(const ember__qjob *jb, int64_t i, int64_t j) { micro_vnnik4(jb, i, j, 4); }
static void vnnik8_4(const ember__qjob *jb, int64_t i, int64_t j) { micro_vnnik4(jb, i, j, 8); }

static void vnnik4_1(const ember__qjob *jb, int64_t i, int64_t j) { micro_vnnik(jb, i, j, 1, 4); }
static void vnnik4_2(const ember__qjob *jb, int64_t i, int64_t j) { micro_vnnik(jb, i, j, 2, 4); }
static void vnnik8_1(const ember__qjob *jb, int64_t i, int64_t j) { micro_vnnik(jb, i, j, 1, 8); }
static void vnnik8_2(const ember__qjob *jb, int64_t i, int64_t j) { micro_vnnik(jb, i, j, 2, 8); }

static void vnni1(const ember__qjob *jb, int64_t i, int64_t j) { micro_vnni(jb, i, j, 1); }
static void vnni2(const ember__qjob *jb, int64_t i, int64_t j) { micro_vnni(jb, i, j, 2); }
static void vnni3(const ember__qjob *jb, int64_t i, int64_t j) { micro_vnni(jb, i, j, 3); }
static void vnni4(const ember__qjob *jb, int64_t i, int64_t j) { micro_vnni(jb, i, j, 4); }
static void vnni5(const ember__qjob *jb, int64_t i, int64_t j) { micro_vnni(jb, i, j, 5); }
static void vnni6(const ember__qjob *jb, int64_t i, int64_t j) { micro_vnni(jb, i, j, 6); }

/* kept out of line: inlined into ember__qblock_avx2 beside the AVX-VNNI loop, the 4-bit loop
 * spilled more (e_q4 on this tier 117-124 -> 95-106 GOPS) */
__attribute__((noinline)) static void micro1(const ember__qjob *jb, int64_t i, int64_t j) {
    micro(jb, i, j, 1);
}
__attribute__((noinline)) static void micro2(const ember__qjob *jb, int64_t i, int64_t j) {
    micro(jb, i, j, 2);
}

void ember__qblock_avx2(const ember__qjob *jb, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                        int thread) {
    (void)thread;
    if (i1 > jb->m)
        i1 = jb->m;
    /* AVX-VNNI, B in K chunks (4-bit, or 8-bit with block scales) */
    if ((jb->p->bits == 4 || jb->p->nch > 1) && ember__avx2_vnni()) {
        const int four = jb->p->bits == 4;
        /* a decode row: whole panels (1 x 4096^2, 4-bit blocks of 32: 90-98 -> 113-121 GOPS,
         * Q4 / Q8 1.12-1.21 -> 1.48-1.66; 8-bit blocks of 32 57-67 -> 65-74) */
        if (i1 - i0 == 1) {
            for (int64_t j = j0; j < j1 && j < jb->p->n; j += 32)
                if (four)
                    row_vnnik(jb, i0, j, 4);
                else
                    row_vnnik(jb, i0, j, 8);
            return;
        }
        for (int64_t j = j0; j < j1 && j < jb->p->n; j += 16)
            for (int64_t i = i0; i < i1;) {
                if (i1 - i >= 4) {
                    (four ? vnnik4_4 : vnnik8_4)(jb, i, j);
                    i += 4;
                } else if (i1 - i >= 2) {
                    (four ? vnnik4_2 : vnnik8_2)(jb, i, j);
                    i += 2;
                } else {
                    (four ? vnnik4_1 : vnnik8_1)(jb, i, j);
                    i += 1;
                }
            }
        return;
    }
    /* AVX-VNNI, tasks of one or two rows (decode): whole panels (1 x 4096^2: 77-85% of the
     * roofline with micro_vnni's half panels, 90-99% with these) */
    if (jb->p->bits == 8 && jb->p->nch == 1 && ember__avx2_vnni() && i1 - i0 <= 2) {
        for (int64_t j = j0; j < j1 && j < jb->p->n; j += 32) {
            if (i1 - i0 == 2)
                micro_vnni32(jb, i0, j, 2);
            else
                micro_vnni32(jb, i0, j, 1);
        }
        return;
    }
    if (jb->p->bits == 8 && jb->p->nch == 1 && ember__avx2_vnni()) {
        static void (*const fns[7])(const ember__qjob *, int64_t,
                                    int64_t) = {NULL, vnni1, vnni2, vnni3, vnni4, vnni5, vnni6};
        for (int64_t j = j0; j < j1 && j < jb->p->n; j += 16)
            for (int64_t i = i0; i < i1;) {
                const int mr = i1 - i >= 6 ? 6 : (int)(i1 - i);
                fns[mr](jb, i, j);
                i += mr;
            }
        return;
    }
    for (int64_t j = j0; j < j1 && j < jb->p->n; j += 16)
        for (int64_t i = i0; i < i1;) {
            if (i1 - i >= 2) {
                micro2(jb, i, j);
                i += 2;
            } else {
                micro1(jb, i, j);
                i += 1;
            }
        }
}
