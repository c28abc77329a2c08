/* backends/cpu/qgemm_avx2.c: the AVX2 tier (no VNNI assumed). Exact int32 sums need 16-bit
 * products without saturation, so B bytes are widened to s16 and multiplied with VPMADDWD against
 * the A row's 4 values of the k group (also widened): each dword holds a pair sum; a final
 * horizontal add gives the column sums. Micro-kernel: MR (1..2) rows x 16 columns. */
#include <immintrin.h>

#include "qgemm.h"

#define EMBER__INLINE static inline __attribute__((always_inline))

EMBER__INLINE __m256 load_scales8(const ember__qpack *p, int64_t c, int64_t j) {
    if (p->sb16)
        return _mm256_cvtph_ps(_mm_loadu_si128(
            (const __m128i *)((const uint16_t *)p->sb + ember__qpack_sidx(p, c, j))));
    return _mm256_loadu_ps((const float *)p->sb + ember__qpack_sidx(p, c, j));
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
            __m256 sar = _mm256_set1_ps(sa[r * nch + c]);
            facc[r][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(x0),
                                         _mm256_mul_ps(sar, load_scales8(p, c, j)), facc[r][0]);
            facc[r][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(x1),
                                         _mm256_mul_ps(sar, load_scales8(p, c, j + 8)), facc[r][1]);
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
        float *o = jb->c + (i + r) * jb->ldc + j;
        if (nv == 16) {
            _mm256_storeu_ps(o, facc[r][0]);
            _mm256_storeu_ps(o + 8, facc[r][1]);
        } else {
            float tmp[16];
            _mm256_storeu_ps(tmp, facc[r][0]);
            _mm256_storeu_ps(tmp + 8, facc[r][1]);
            for (int64_t q = 0; q < nv; q++)
                o[q] = tmp[q];
        }
    }
}

static void micro1(const ember__qjob *jb, int64_t i, int64_t j) { micro(jb, i, j, 1); }
static void micro2(const ember__qjob *jb, int64_t i, int64_t j) { micro(jb, i, j, 2); }

void ember__qblock_avx2(const ember__qjob *jb, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                        int thread) {
    (void)thread;
    if (i1 > jb->m)
        i1 = jb->m;
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
