/* backends/cpu/qgemm_avx512.c: the AVX-512 VNNI tier. A micro-kernel of MR (1..6) rows x 32
 * columns: VPDPBUSD multiplies the biased unsigned B bytes by a broadcast of 4 signed A bytes, so
 * neither operand needs converting; per K chunk the int32 sums lose the bias (bias * row sum of A)
 * and are scaled into float accumulators. 4-bit B is unpacked from nibbles in registers. */
#include <immintrin.h>

#include "qgemm.h"

#define EMBER__INLINE static inline __attribute__((always_inline))

EMBER__INLINE __m512 load_scales(const ember__qpack *p, int64_t c, int64_t j) {
    if (p->sb16)
        return _mm512_cvtph_ps(
            _mm256_loadu_si256((const __m256i *)((const uint16_t *)p->sb + c * p->np + j)));
    return _mm512_loadu_ps((const float *)p->sb + c * p->np + j);
}

/* rows [i, i + MR) x columns [j, j + 32) (j % 32 == 0) */
EMBER__INLINE void micro(const ember__qjob *jb, int64_t i, int64_t j, const int MR) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp, kc = p->kc, nch = p->nch;
    const int8_t *a = jb->a + i * kp;
    const int32_t *rs = jb->rs + i * nch;
    const float *sa = jb->sa + i * nch;
    __m512 facc[6][2];
    __m512i acc[6][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
        facc[r][0] = facc[r][1] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int64_t c = 0; c < nch; c++) {
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++)
            acc[r][0] = acc[r][1] = _mm512_setzero_si512();
        const int64_t k0 = c * kc, k1 = k0 + kc;
        if (p->bits == 8) {
            const uint8_t *b0 = p->b + (j / 16) * (kp / 4) * 64;
            const uint8_t *b1 = b0 + (kp / 4) * 64;
            for (int64_t kk = k0; kk < k1; kk += 4) {
                __m512i v0 = _mm512_load_si512(b0 + kk * 16);
                __m512i v1 = _mm512_load_si512(b1 + kk * 16);
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
            const uint8_t *b0 = p->b + (j / 16) * (kp / 8) * 64;
            const uint8_t *b1 = b0 + (kp / 8) * 64;
            for (int64_t kk = k0; kk < k1; kk += 8) {
                __m512i w0 = _mm512_load_si512(b0 + kk * 8);
                __m512i w1 = _mm512_load_si512(b1 + kk * 8);
                __m512i l0 = _mm512_and_si512(w0, m4), h0 = _mm512_and_si512(_mm512_srli_epi16(w0, 4), m4);
                __m512i l1 = _mm512_and_si512(w1, m4), h1 = _mm512_and_si512(_mm512_srli_epi16(w1, 4), m4);
#pragma GCC unroll 6
                for (int r = 0; r < MR; r++) {
                    int32_t x0, x1;
                    __builtin_memcpy(&x0, a + r * kp + kk, 4);
                    __builtin_memcpy(&x1, a + r * kp + kk + 4, 4);
                    __m512i y0 = _mm512_set1_epi32(x0), y1 = _mm512_set1_epi32(x1);
                    acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], l0, y0);
                    acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], l1, y0);
                    acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], h0, y1);
                    acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], h1, y1);
                }
            }
        }
        if (jb->c32) {
            /* exact int32 out (single chunk) */
            const int64_t nv = p->n - j;
            __mmask16 k0m = nv >= 16 ? 0xffff : (__mmask16)((1u << (nv > 0 ? nv : 0)) - 1);
            __mmask16 k1m = nv >= 32 ? 0xffff : (nv > 16 ? (__mmask16)((1u << (nv - 16)) - 1) : 0);
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
    __mmask16 k0m = nv >= 16 ? 0xffff : (__mmask16)((1u << (nv > 0 ? nv : 0)) - 1);
    __mmask16 k1m = nv >= 32 ? 0xffff : (nv > 16 ? (__mmask16)((1u << (nv - 16)) - 1) : 0);
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
    static void (*const fns[7])(const ember__qjob *, int64_t, int64_t) = {
        NULL, micro1, micro2, micro3, micro4, micro5, micro6};
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
