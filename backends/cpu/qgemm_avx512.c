/* backends/cpu/qgemm_avx512.c: the AVX-512 VNNI tier. A micro-kernel of MR (1..6) rows x 32
 * columns: VPDPBUSD multiplies the biased unsigned B bytes by a broadcast of 4 signed A bytes, so
 * neither operand needs converting; per K chunk the int32 sums lose the bias (bias * row sum of A)
 * and are scaled into float accumulators. 4-bit B is unpacked from nibbles in registers. */
#include <immintrin.h>

#include "qgemm.h"

#define EMBER__INLINE static inline __attribute__((always_inline))

EMBER__INLINE __m512 load_scales(const ember__qpack *p, int64_t c, int64_t j) {
    return ember__qpack_scales16(p, ember__qpack_sidx(p, c, j), p->sb16);
}

/* A chunk's scale of B (s) as it multiplies the chunk's int32 sums of a row whose A scale is
 * sa: sa * s, or s alone where every chunk of a row has the same A scale (jb->sa_row), which
 * row_scale then applies once to the row's float sums after the last chunk (qgemm.h). At blocks
 * of 32 that drops one of the epilogue's three float operations per 16 sums: bench_qgemm --shape
 * 512,4096,4096 on a Zen 5 (VNNI tier, 2 threads, A scaled per tensor), alternated: e_q4
 * 1205 / 1206 -> 1341 / 1343 GOPS, e_q8b 1065-1134 -> 1253-1254. */
EMBER__INLINE __m512 chunk_scale(const ember__qjob *jb, float sa, __m512 s) {
    return jb->sa_row ? s : _mm512_mul_ps(_mm512_set1_ps(sa), s);
}
EMBER__INLINE __m512 row_scale(const ember__qjob *jb, float sa, __m512 f) {
    return jb->sa_row ? _mm512_mul_ps(f, _mm512_set1_ps(sa)) : f;
}

/* acc + the products of unsigned u and signed s bytes (VPDPBUSD), the sum in acc's register.
 * Written as an asm statement whose operand is read and written in place ("+v"): from
 * _mm512_dpbusd_epi32, GCC 12 copied every accumulator to a spare register and back around each
 * product (the 6-row loop: 48 instructions for 12 products, the register-only peak loop 37 for
 * 12), and the front end, not the multiplier, bound the loops. With this: 24 and 15. Measured
 * (bench_qgemm, the VNNI tier forced with EMBER_CPU_MAX_ISA=avx512_vnni, 2 threads, one run
 * each): e_q8 at 1024^3 / 2048^3 / 4096^3 928 / 860 / 927 -> 1066 / 1065 / 1093 GOPS; the
 * register-only peak 1426 -> 1947. */
EMBER__INLINE __m512i dpb(__m512i acc, __m512i u, __m512i s) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
    return acc;
}

/* The decode kernels of micro() fetch B's bytes this far ahead into L2: 4-bit B of 2-8 rows
 * (panel_sums) and 8-bit B of one row (micro's own loop). The one-row kernel for K chunks
 * (row_panel) fetched 4-bit B so until the twenty-third session; it has distances of its own
 * (ROW_PF_L1, ROW_PF_L2). Measured when it was the 4-bit decode row's: slower per byte than the
 * 8-bit one (the unpack and a scaled epilogue per block of 32), cold, it drew B at ~17 GB/s where
 * the 8-bit row drew ~30; with the prefetch (M = 1, K = N = 4096, blocks of 32, 2 threads, one
 * process, 48 MiB written between calls, medians of 21): 85 / 85 -> 117 / 106 GOPS (4 KiB ahead:
 * 109 / 99; 16 KiB: 116 / 103). 8-bit B, one row (micro with MR = 1:
 * per-tensor or per-column scales): that harness read it level (B from memory), but in
 * bench_qgemm --shape 1,4096,4096 (31 rounds, B in L3), without and with alternated, medians of
 * e_q8: 87 -> 91.5 GOPS (eight alternations; 94.5% -> 102% of the in-round roofline) and 84 ->
 * 86.5 (ten; 94% -> 104.5%). */
#define B_PF_BYTES 8192

/* The 128 bytes of B B_PF_BYTES past w (into the next panel at a panel's end), to L2; past the
 * last panel (B's values end at p->b + bbytes), nothing: a prefetch never faults, but it would be
 * wasted. */
EMBER__INLINE void b_prefetch(const ember__qpack *p, const uint8_t *w, int64_t bbytes) {
    if (w - p->b + B_PF_BYTES < bbytes) {
        _mm_prefetch((const char *)(w + B_PF_BYTES), _MM_HINT_T1);
        _mm_prefetch((const char *)(w + B_PF_BYTES + 64), _MM_HINT_T1);
    }
}

/* The first row group of a pass (lead) reads B from memory, where a decode-sized product or the
 * first pass over a panel finds it: it fetches its own stream this far ahead into L1, two lines
 * per 128 bytes it reads. The next-panel slices (pf) cover only an eighth of a panel per row group,
 * so with fewer than eight groups most of a panel came at the loads' demand. bench_qgemm --shape
 * M,4096,4096 on a Zen 5 (VNNI tier, 2 threads), without and with, alternated, e_q8 GOPS: M = 8
 * 593-628 -> 687-719 (61-64% -> 67-76% of the in-round roofline), M = 4 356-380 -> 360-409
 * (72-76% -> 81-87%), M = 32 1226-1283 -> 1296-1351; M = 128 level; e_q8b at M = 8 413-438 ->
 * 460-492. 3 KiB and 4 KiB ahead read level, 1 and 8 KiB lower; into L2 instead of L1 level.
 * Near the end of B it fetches past B's last byte: a prefetch never faults. */
#define B_LEAD_BYTES 4096

/* The int32 sums of rows [0, MR) of a (row stride kp) against the 32-column panel of B at b0
 * over K [k0, k1), added to acc (started by the caller at minus the bias term), for 8-bit B with
 * several rows (micro's one-row 8-bit decode loop is its own) and for 4-bit B. pf: a slice of
 * the next panel to fetch into L2 (or NULL); lead: the lead prefetch of 8-bit B. */
EMBER__INLINE void panel_sums(const ember__qpack *p, const int8_t *a, const uint8_t *b0, int64_t k0,
                              int64_t k1, const int MR, const int bits, const uint8_t *pf,
                              const int lead, __m512i acc[][2]) {
    const int64_t kp = p->kp;
    if (bits == 8) {
        for (int64_t kk = k0; kk < k1; kk += 4) {
            if (pf && !(kk & 15)) /* a line of the next panel every 16 k */
                _mm_prefetch((const char *)(pf + kk * 4), _MM_HINT_T1);
            if (lead) {
                _mm_prefetch((const char *)(b0 + kk * 32 + B_LEAD_BYTES), _MM_HINT_T0);
                _mm_prefetch((const char *)(b0 + kk * 32 + B_LEAD_BYTES + 64), _MM_HINT_T0);
            }
            const __m512i v0 = _mm512_load_si512(b0 + kk * 32);
            const __m512i v1 = _mm512_load_si512(b0 + kk * 32 + 64);
#pragma GCC unroll 8
            for (int r = 0; r < MR; r++) {
                int32_t w;
                __builtin_memcpy(&w, a + r * kp + kk, 4);
                const __m512i x = _mm512_set1_epi32(w);
                acc[r][0] = dpb(acc[r][0], v0, x);
                acc[r][1] = dpb(acc[r][1], v1, x);
            }
        }
        return;
    }
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const int64_t bbytes = (p->np / 32) * (kp / 8) * 128; /* 4-bit values */
    __m512i acch[3][2];
    for (int r = 0; r < 3; r++)
        acch[r][0] = acch[r][1] = _mm512_setzero_si512();
    for (int64_t kk = k0; kk < k1; kk += 8) {
        b_prefetch(p, b0 + kk * 16, bbytes);
        if (pf && !(kk & 31)) /* a line of the next panel every 32 k */
            _mm_prefetch((const char *)(pf + kk * 2), _MM_HINT_T1);
        const __m512i w0 = _mm512_load_si512(b0 + kk * 16);
        const __m512i w1 = _mm512_load_si512(b0 + kk * 16 + 64);
        const __m512i l0 = _mm512_and_si512(w0, m4), l1 = _mm512_and_si512(w1, m4);
        __m512i h0, h1;
        if (MR <= 3) { /* high nibbles in place (16 x value): shifted once per chunk */
            h0 = _mm512_andnot_si512(m4, w0);
            h1 = _mm512_andnot_si512(m4, w1);
        } else {
            h0 = _mm512_and_si512(_mm512_srli_epi16(w0, 4), m4);
            h1 = _mm512_and_si512(_mm512_srli_epi16(w1, 4), m4);
        }
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            int32_t x0, x1;
            __builtin_memcpy(&x0, a + r * kp + kk, 4);
            __builtin_memcpy(&x1, a + r * kp + kk + 4, 4);
            const __m512i y0 = _mm512_set1_epi32(x0), y1 = _mm512_set1_epi32(x1);
            acc[r][0] = dpb(acc[r][0], l0, y0);
            acc[r][1] = dpb(acc[r][1], l1, y0);
            if (MR <= 3) { /* decode rows: two chains per column half hide the latency */
                acch[r][0] = dpb(acch[r][0], h0, y1);
                acch[r][1] = dpb(acch[r][1], h1, y1);
            } else {
                acc[r][0] = dpb(acc[r][0], h0, y1);
                acc[r][1] = dpb(acc[r][1], h1, y1);
            }
        }
    }
    /* every term of acch is a multiple of 16 (and |acch| < 2^31: 240 * 128 * k < 2^31 for the
     * chunks the entry admits), so the shift is exact */
    if (MR <= 3)
#pragma GCC unroll 3
        for (int r = 0; r < MR; r++) {
            acc[r][0] = _mm512_add_epi32(acc[r][0], _mm512_srai_epi32(acch[r][0], 4));
            acc[r][1] = _mm512_add_epi32(acc[r][1], _mm512_srai_epi32(acch[r][1], 4));
        }
}

/* rows [i, i + MR) x columns [j, j + 32) (j % 32 == 0) */
EMBER__INLINE void micro(const ember__qjob *jb, int64_t i, int64_t j, const int MR,
                         const uint8_t *pf, const int lead) {
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
    const int64_t bbytes8 = (p->np / 32) * (kp / 4) * 128; /* 8-bit values */
    for (int64_t c = 0; c < nch; c++) {
        /* the sums start at minus the bias term (bias * the A chunk's row sum) */
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++)
            acc[r][0] = acc[r][1] = _mm512_set1_epi32(-p->bias * rs[r * nch + c]);
        const int64_t k0 = c * kc, k1 = k0 + kc;
        if (p->bits == 8 && MR == 1) {
            /* Decode: four chains (two K groups of 4 a step, each over both column halves), so
             * that two products of each half are in flight per step of 8 k instead of one per 4;
             * the chunk is a multiple of 32 long. bench_qgemm --shape 1,4096,4096 (41 rounds),
             * against two chains, one binary through a switch, ten alternations: e_q8 at 92-100%
             * (median 96%) of the in-round roofline against 88-98% (91.5%). B_PF_BYTES: the same
             * prefetch, a line per 64 bytes. */
            const uint8_t *b0 = p->b + (j / 32) * (kp / 4) * 128;
            __m512i e0 = _mm512_setzero_si512(), e1 = e0;
            for (int64_t kk = k0; kk < k1; kk += 8) {
                const uint8_t *w = b0 + kk * 32;
                b_prefetch(p, w, bbytes8);
                b_prefetch(p, w + 128, bbytes8);
                int32_t x0, x1;
                __builtin_memcpy(&x0, a + kk, 4);
                __builtin_memcpy(&x1, a + kk + 4, 4);
                const __m512i y0 = _mm512_set1_epi32(x0), y1 = _mm512_set1_epi32(x1);
                acc[0][0] = dpb(acc[0][0], _mm512_load_si512(w), y0);
                acc[0][1] = dpb(acc[0][1], _mm512_load_si512(w + 64), y0);
                e0 = dpb(e0, _mm512_load_si512(w + 128), y1);
                e1 = dpb(e1, _mm512_load_si512(w + 192), y1);
            }
            acc[0][0] = _mm512_add_epi32(acc[0][0], e0);
            acc[0][1] = _mm512_add_epi32(acc[0][1], e1);
        } else {
            const uint8_t *b0 = p->b + (j / 32) * (kp / 4) * 128 / (8 / p->bits);
            if (p->bits == 8)
                panel_sums(p, a, b0, k0, k1, MR, 8, pf, lead, acc);
            else
                panel_sums(p, a, b0, k0, k1, MR, 4, pf, lead, acc);
        }
        if (jb->c32) {
            /* exact int32 out (single chunk) */
            const int64_t nv = p->n - j;
            const __mmask16 k0m = ember__tail_mask16(nv), k1m = ember__tail_mask16(nv - 16);
#pragma GCC unroll 6
            for (int r = 0; r < MR; r++) {
                int32_t *o = jb->c32 + (i + r) * jb->ldc + j;
                _mm512_mask_storeu_epi32(o, k0m, acc[r][0]);
                _mm512_mask_storeu_epi32(o + 16, k1m, acc[r][1]);
            }
            return;
        }
        const __m512 s0 = load_scales(p, c, j), s1 = load_scales(p, c, j + 16);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            const float sar = sa[r * nch + c];
            __m512 x0 = _mm512_cvtepi32_ps(acc[r][0]);
            __m512 x1 = _mm512_cvtepi32_ps(acc[r][1]);
            facc[r][0] = _mm512_fmadd_ps(x0, chunk_scale(jb, sar, s0), facc[r][0]);
            facc[r][1] = _mm512_fmadd_ps(x1, chunk_scale(jb, sar, s1), facc[r][1]);
        }
    }
    const int64_t nv = p->n - j;
    const __mmask16 k0m = ember__tail_mask16(nv), k1m = ember__tail_mask16(nv - 16);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        float *o = jb->c + (i + r) * jb->ldc + j;
        _mm512_mask_storeu_ps(o, k0m, row_scale(jb, sa[r * nch], facc[r][0]));
        _mm512_mask_storeu_ps(o + 16, k1m, row_scale(jb, sa[r * nch], facc[r][1]));
    }
}

/* rows [i, i + MR) x columns [j, j + 32 * NP): NP (1 or 2) 32-column panels of 8-bit B in one K
 * chunk, 2 * NP x MR sums. NP = 2 (MR <= 6: 24 registers) makes each broadcast of A feed four
 * products instead of two. Against micro's 32 columns (both with dpb; bench_qgemm, VNNI tier, 2
 * threads, one run each): e_q8 at 1024^3 / 2048^3 / 4096^3 1066 / 1065 / 1093 -> 1187 / 1152 /
 * 1220 GOPS, M = 32 / 128 / 512 x 4096^2 639 / 935 / 1057 -> 748 / 995 / 1187. NP = 1 takes 7 or 8
 * rows (16 sums) in one pass over B where two row groups of 64 columns would read each panel
 * twice (the second time without any transfer from memory under it). The columns past n are
 * masked (the second panel may be partial). */
EMBER__INLINE void microw(const ember__qjob *jb, int64_t i, int64_t j, const int MR, const int NP,
                          const uint8_t *pf, const int lead) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp;
    const int8_t *a = jb->a + i * kp;
    __m512i c0[8], c1[8], c2[8], c3[8];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
        c0[r] = c1[r] = c2[r] = c3[r] = _mm512_set1_epi32(-p->bias * jb->rs[i + r]);
    const uint8_t *b0 = p->b + (j / 32) * (kp / 4) * 128, *b1 = b0 + (kp / 4) * 128;
    for (int64_t kk = 0; kk < kp; kk += 4) {
        if (pf && !(kk & 4)) /* a line of the next panels every 8 k */
            _mm_prefetch((const char *)(pf + kk * 8), _MM_HINT_T1);
        if (lead) {
            _mm_prefetch((const char *)(b0 + kk * 32 + B_LEAD_BYTES), _MM_HINT_T0);
            _mm_prefetch((const char *)(b0 + kk * 32 + B_LEAD_BYTES + 64), _MM_HINT_T0);
            if (NP == 2) {
                _mm_prefetch((const char *)(b1 + kk * 32 + B_LEAD_BYTES), _MM_HINT_T0);
                _mm_prefetch((const char *)(b1 + kk * 32 + B_LEAD_BYTES + 64), _MM_HINT_T0);
            }
        }
        const __m512i v0 = _mm512_load_si512(b0 + kk * 32),
                      v1 = _mm512_load_si512(b0 + kk * 32 + 64);
        __m512i v2 = v0, v3 = v1;
        if (NP == 2) {
            v2 = _mm512_load_si512(b1 + kk * 32);
            v3 = _mm512_load_si512(b1 + kk * 32 + 64);
        }
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            int32_t w;
            __builtin_memcpy(&w, a + r * kp + kk, 4);
            const __m512i x = _mm512_set1_epi32(w);
            c0[r] = dpb(c0[r], v0, x);
            c1[r] = dpb(c1[r], v1, x);
            if (NP == 2) {
                c2[r] = dpb(c2[r], v2, x);
                c3[r] = dpb(c3[r], v3, x);
            }
        }
    }
    const int64_t nv = p->n - j;
    const __mmask16 k0 = ember__tail_mask16(nv), k1 = ember__tail_mask16(nv - 16),
                    k2 = ember__tail_mask16(nv - 32), k3 = ember__tail_mask16(nv - 48);
    if (jb->c32) {
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            int32_t *o = jb->c32 + (i + r) * jb->ldc + j;
            _mm512_mask_storeu_epi32(o, k0, c0[r]);
            _mm512_mask_storeu_epi32(o + 16, k1, c1[r]);
            if (NP == 2) {
                _mm512_mask_storeu_epi32(o + 32, k2, c2[r]);
                _mm512_mask_storeu_epi32(o + 48, k3, c3[r]);
            }
        }
        return;
    }
    const __m512 s0 = load_scales(p, 0, j), s1 = load_scales(p, 0, j + 16);
    __m512 s2 = s0, s3 = s1;
    if (NP == 2) {
        s2 = load_scales(p, 0, j + 32);
        s3 = load_scales(p, 0, j + 48);
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        const __m512 sar = _mm512_set1_ps(jb->sa[i + r]);
        float *o = jb->c + (i + r) * jb->ldc + j;
        _mm512_mask_storeu_ps(o, k0,
                              _mm512_mul_ps(_mm512_cvtepi32_ps(c0[r]), _mm512_mul_ps(sar, s0)));
        _mm512_mask_storeu_ps(o + 16, k1,
                              _mm512_mul_ps(_mm512_cvtepi32_ps(c1[r]), _mm512_mul_ps(sar, s1)));
        if (NP == 2) {
            _mm512_mask_storeu_ps(o + 32, k2,
                                  _mm512_mul_ps(_mm512_cvtepi32_ps(c2[r]), _mm512_mul_ps(sar, s2)));
            _mm512_mask_storeu_ps(o + 48, k3,
                                  _mm512_mul_ps(_mm512_cvtepi32_ps(c3[r]), _mm512_mul_ps(sar, s3)));
        }
    }
}

/* rows [i, i + MR) (MR 7 or 8) x columns [j, j + 32) of B in K chunks (4-bit, or 8-bit with block
 * scales), float out: every row in one pass over the panel. micro() holds at most 6 rows' float
 * sums in registers beside their int32 sums, so 7 or 8 rows took two passes, each reading and
 * (4-bit) unpacking the panel; here the float sums wait in L1 (facc) and each chunk's scaled
 * sums are added there. Each chunk's int32 sums come from panel_sums, as micro()'s do, and are
 * scaled with the same float operations, so the results are micro()'s bit for bit. */
EMBER__INLINE void micro_rows8(const ember__qjob *jb, int64_t i, int64_t j, const int MR,
                               const int bits) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp, kc = p->kc, nch = p->nch;
    const int8_t *a = jb->a + i * kp;
    const int32_t *rs = jb->rs + i * nch;
    const float *sa = jb->sa + i * nch;
    float facc[8][32] __attribute__((aligned(64)));
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        _mm512_store_ps(facc[r], _mm512_setzero_ps());
        _mm512_store_ps(facc[r] + 16, _mm512_setzero_ps());
    }
    __m512i acc[8][2];
    const uint8_t *b0 = p->b + (j / 32) * (kp / 4) * 128 / (8 / bits);
    for (int64_t c = 0; c < nch; c++) {
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++)
            acc[r][0] = acc[r][1] = _mm512_set1_epi32(-p->bias * rs[r * nch + c]);
        panel_sums(p, a, b0, c * kc, (c + 1) * kc, MR, bits, NULL, 1, acc);
        const __m512 s0 = load_scales(p, c, j), s1 = load_scales(p, c, j + 16);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            const __m512 t0 = chunk_scale(jb, sa[r * nch + c], s0),
                         t1 = chunk_scale(jb, sa[r * nch + c], s1);
            const __m512 x0 = _mm512_cvtepi32_ps(acc[r][0]), x1 = _mm512_cvtepi32_ps(acc[r][1]);
            _mm512_store_ps(facc[r], _mm512_fmadd_ps(x0, t0, _mm512_load_ps(facc[r])));
            _mm512_store_ps(facc[r] + 16, _mm512_fmadd_ps(x1, t1, _mm512_load_ps(facc[r] + 16)));
        }
    }
    const int64_t nv = p->n - j;
    const __mmask16 k0m = ember__tail_mask16(nv), k1m = ember__tail_mask16(nv - 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        float *o = jb->c + (i + r) * jb->ldc + j;
        _mm512_mask_storeu_ps(o, k0m, row_scale(jb, sa[r * nch], _mm512_load_ps(facc[r])));
        _mm512_mask_storeu_ps(o + 16, k1m,
                              row_scale(jb, sa[r * nch], _mm512_load_ps(facc[r] + 16)));
    }
}

/* A fresh register holding v (or zero): an accumulator's starting value. From one shared value
 * (the bias term, or zero) GCC 12 kept one chain in that value's register and copied the others
 * to a spare register and back around every product (the one-row loop: 45 instructions a step of
 * 8 products; 25 with these). */
EMBER__INLINE __m512i acc_from(__m512i v) {
    __m512i x;
    __asm__ volatile("vmovdqa64 %1, %0" : "=v"(x) : "v"(v));
    return x;
}
EMBER__INLINE __m512i acc_zero(void) {
    __m512i x;
    __asm__ volatile("vpxord %0, %0, %0" : "=v"(x));
    return x;
}

/* How far ahead the one-row kernel fetches its stream of B: for each 64-byte line it reads, the
 * line ROW_PF_L1 bytes on into L1 and the line ROW_PF_L2 bytes on into L2 (see row_panel). */
#define ROW_PF_L1 2048
#define ROW_PF_L2 16384

/* Four sets of chains over a run of one panel's bytes (bc), the row's values at ac: on
 * each pass of kk (from 0 to klen by kadv) set q takes the 8 k at B bytes bc + q * qb + kk * 4 *
 * bits against A values ac + q * qa + kk. Set q's chains: a0 / a1 (columns 0-15 / 16-31, the
 * first 4 k; for 4-bit B the low nibbles), h0 / h1 (the next 4 k; 4-bit: 16 x the high nibbles').
 * pf: fetch ahead (ROW_PF_L1 into L1, ROW_PF_L2 into L2) every line read. */
EMBER__INLINE void row_sets(const int8_t *ac, const uint8_t *bc, int64_t qa, int64_t qb,
                            int64_t klen, const int64_t kadv, const int bits, const int pf,
                            __m512i *a0, __m512i *a1, __m512i *h0, __m512i *h1) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int64_t kk = 0; kk < klen; kk += kadv) {
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            int32_t x0, x1;
            __builtin_memcpy(&x0, ac + q * qa + kk, 4);
            __builtin_memcpy(&x1, ac + q * qa + kk + 4, 4);
            const __m512i y0 = _mm512_set1_epi32(x0), y1 = _mm512_set1_epi32(x1);
            const uint8_t *w = bc + q * qb + kk * 4 * bits;
            if (pf)
                for (int l = 0; l < bits / 2; l++) { /* the 2 (4-bit) or 4 lines of this step */
                    _mm_prefetch((const char *)(w + ROW_PF_L1 + 64 * l), _MM_HINT_T0);
                    _mm_prefetch((const char *)(w + ROW_PF_L2 + 64 * l), _MM_HINT_T1);
                }
            if (bits == 4) {
                const __m512i w0 = _mm512_load_si512(w), w1 = _mm512_load_si512(w + 64);
                a0[q] = dpb(a0[q], _mm512_and_si512(w0, m4), y0);
                a1[q] = dpb(a1[q], _mm512_and_si512(w1, m4), y0);
                h0[q] = dpb(h0[q], _mm512_andnot_si512(m4, w0), y1);
                h1[q] = dpb(h1[q], _mm512_andnot_si512(m4, w1), y1);
            } else {
                a0[q] = dpb(a0[q], _mm512_load_si512(w), y0);
                a1[q] = dpb(a1[q], _mm512_load_si512(w + 64), y0);
                h0[q] = dpb(h0[q], _mm512_load_si512(w + 128), y1);
                h1[q] = dpb(h1[q], _mm512_load_si512(w + 192), y1);
            }
        }
    }
}

/* f0 / f1 += chunk c's int32 sums (a + h, h of 4-bit B still 16 x) at its scales */
EMBER__INLINE void row_scaled(const ember__qjob *jb, const float *sa, int64_t sj, int64_t c,
                              const int bits, const int sb16, __m512i a0, __m512i a1, __m512i h0,
                              __m512i h1, __m512 *f0, __m512 *f1) {
    const ember__qpack *p = jb->p;
    if (bits == 4) { /* every term of h is a multiple of 16 (see micro): exact */
        h0 = _mm512_srai_epi32(h0, 4);
        h1 = _mm512_srai_epi32(h1, 4);
    }
    const __m512 s0 = chunk_scale(jb, sa[c], ember__qpack_scales16(p, sj + c * 32, sb16));
    const __m512 s1 = chunk_scale(jb, sa[c], ember__qpack_scales16(p, sj + c * 32 + 16, sb16));
    *f0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0, h0)), s0, *f0);
    *f1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a1, h1)), s1, *f1);
}

/* One row of A (decode) against one 32-column panel of B (j) in K chunks (4-bit B, or 8-bit B
 * with block scales), float out. A panel's chunks lie one after another, so the kernel reads B
 * as one stream (and its scales as another): four chunks at a time, each chunk in chains of its
 * own (16 in flight), their scaled sums added to f in chunk order; the chunks left over (or all,
 * where there are fewer than four) one at a time, each over four sets of chains that take its
 * steps of 8 k in turn (summed in int32, exact, before the scaling). Each chunk's sums are scaled
 * and added in the same order and with the same float operations as before: the results did not
 * change by a bit. (micro() with MR = 1 did this work before the one-row kernel (c14dad9): at
 * blocks of 32 its bookkeeping per chunk cost more than the 16 products; here the sums start at
 * minus the bias term and the value width and scale format are fixed per call.) Until the
 * twenty-sixth session it took four panels a pass (each broadcast of A fed 16 products), reading
 * four streams 64 KiB apart (K = 4096) and their scales, and fetched each 1 KiB ahead into L1; e_q4
 * read 81-86% of its roofline in bench_qgemm on the H200 host's Xeon, where a build that only read
 * B in that order read 82-98%. Now each line read fetches the line 2 KiB on into L1 and 16 KiB on
 * into L2. bench_qgemm --shape 1,4096,4096 on that Xeon (2 threads), the old kernel and variants of
 * this one alternated five times in one run, medians (ranges):
 * - old: Q4 / Q8 1.54 (1.45-1.59), e_q4 at 86% of its roofline; e_q8b / e_q8 0.84
 * - this one: 1.67 (1.62-1.73), 92%; e_q8b / e_q8 0.92
 * - the L1 fetch 1 / 4 KiB ahead: 1.63 / 1.64; the L2 fetch 8 / 32 KiB ahead: 1.66 / 1.61
 * In an earlier run of the same shape (five alternations): the old kernel 1.50 (1.48-1.53), the
 * stream with an L1 fetch only (4, 8 or 16 KiB ahead) 1.45-1.47, an L2 fetch only (16 KiB) 1.56,
 * both (2 + 16 KiB) 1.59 (1.55-1.67). The committed build against the one before it, two binaries
 * alternated in later runs: 1.44-1.55 -> 1.55-1.70 (five times), 1.44-1.80 -> 1.53-1.77 (four). On
 * the Zen 5 all of them read within that machine's noise. (bench/results/cpu.md, twenty-sixth
 * session.) */
EMBER__INLINE void row_panel(const ember__qjob *jb, int64_t i, int64_t j, const int bits,
                             const int sb16) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp, kc = p->kc, nch = p->nch;
    const int64_t pbytes = kp * bits * 4, cbytes = kc * bits * 4; /* a panel, a panel's chunk */
    const int8_t *a = jb->a + i * kp;
    const int32_t *rs = jb->rs + i * nch;
    const float *sa = jb->sa + i * nch;
    const uint8_t *b = p->b + (j / 32) * pbytes;
    const int64_t sj = ember__qpack_sidx(p, 0, j);
    /* a run fetches ahead while ROW_PF_L2 bytes past its end still lie in B's values */
    const int64_t pf_end = (p->np / 32) * pbytes - ROW_PF_L2;
    __m512 f0 = _mm512_setzero_ps(), f1 = _mm512_setzero_ps();
    __m512i a0[4], a1[4], h0[4], h1[4];
    int64_t c = 0;
    for (; c + 4 <= nch; c += 4) { /* four chunks, a set of chains each */
        const uint8_t *bc = b + c * cbytes;
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const __m512i bias = _mm512_set1_epi32(-p->bias * rs[c + q]);
            a0[q] = acc_from(bias);
            a1[q] = acc_from(bias);
            h0[q] = acc_zero();
            h1[q] = acc_zero();
        }
        if (__builtin_expect(bc + 4 * cbytes - p->b <= pf_end, 1))
            row_sets(a + c * kc, bc, kc, cbytes, kc, 8, bits, 1, a0, a1, h0, h1);
        else
            row_sets(a + c * kc, bc, kc, cbytes, kc, 8, bits, 0, a0, a1, h0, h1);
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
            row_scaled(jb, sa, sj, c + q, bits, sb16, a0[q], a1[q], h0[q], h1[q], &f0, &f1);
    }
    for (; c < nch; c++) { /* one chunk, its steps over four sets of chains in turn */
        const uint8_t *bc = b + c * cbytes;
        a0[0] = acc_from(_mm512_set1_epi32(-p->bias * rs[c]));
        a1[0] = acc_from(a0[0]);
        h0[0] = acc_zero();
        h1[0] = acc_zero();
#pragma GCC unroll 3
        for (int q = 1; q < 4; q++) {
            a0[q] = acc_zero();
            a1[q] = acc_zero();
            h0[q] = acc_zero();
            h1[q] = acc_zero();
        }
        if (__builtin_expect(bc + cbytes - p->b <= pf_end, 1))
            row_sets(a + c * kc, bc, 8, 32 * bits, kc, 32, bits, 1, a0, a1, h0, h1);
        else
            row_sets(a + c * kc, bc, 8, 32 * bits, kc, 32, bits, 0, a0, a1, h0, h1);
        /* int32 sums wrap modulo 2^32, and the chunk's whole sum fits (see micro): exact */
        const __m512i s0 =
            _mm512_add_epi32(_mm512_add_epi32(a0[0], a0[1]), _mm512_add_epi32(a0[2], a0[3]));
        const __m512i s1 =
            _mm512_add_epi32(_mm512_add_epi32(a1[0], a1[1]), _mm512_add_epi32(a1[2], a1[3]));
        const __m512i t0 =
            _mm512_add_epi32(_mm512_add_epi32(h0[0], h0[1]), _mm512_add_epi32(h0[2], h0[3]));
        const __m512i t1 =
            _mm512_add_epi32(_mm512_add_epi32(h1[0], h1[1]), _mm512_add_epi32(h1[2], h1[3]));
        row_scaled(jb, sa, sj, c, bits, sb16, s0, s1, t0, t1, &f0, &f1);
    }
    const int64_t nv = p->n - j;
    float *o = jb->c + i * jb->ldc + j;
    _mm512_mask_storeu_ps(o, ember__tail_mask16(nv), row_scale(jb, sa[0], f0));
    _mm512_mask_storeu_ps(o + 16, ember__tail_mask16(nv - 16), row_scale(jb, sa[0], f1));
}

EMBER__INLINE void row_body(const ember__qjob *jb, int64_t i, int64_t j0, int64_t j1,
                            const int bits, const int sb16) {
    for (int64_t j = j0; j < j1 && j < jb->p->n; j += 32)
        row_panel(jb, i, j, bits, sb16);
}

typedef void (*row_fn)(const ember__qjob *, int64_t, int64_t, int64_t);
static void row4_f16(const ember__qjob *jb, int64_t i, int64_t j0, int64_t j1) {
    row_body(jb, i, j0, j1, 4, 1);
}
static void row4_f32(const ember__qjob *jb, int64_t i, int64_t j0, int64_t j1) {
    row_body(jb, i, j0, j1, 4, 0);
}
static void row8_f16(const ember__qjob *jb, int64_t i, int64_t j0, int64_t j1) {
    row_body(jb, i, j0, j1, 8, 1);
}
static void row8_f32(const ember__qjob *jb, int64_t i, int64_t j0, int64_t j1) {
    row_body(jb, i, j0, j1, 8, 0);
}

typedef void (*micro_fn)(const ember__qjob *, int64_t, int64_t, const uint8_t *, int);
#define MICRO_FN(name, body)                                                                       \
    static void name(const ember__qjob *jb, int64_t i, int64_t j, const uint8_t *pf, int lead) {   \
        body;                                                                                      \
    }
MICRO_FN(micro64_1, microw(jb, i, j, 1, 2, pf, lead))
MICRO_FN(micro64_2, microw(jb, i, j, 2, 2, pf, lead))
MICRO_FN(micro64_3, microw(jb, i, j, 3, 2, pf, lead))
MICRO_FN(micro64_4, microw(jb, i, j, 4, 2, pf, lead))
MICRO_FN(micro64_5, microw(jb, i, j, 5, 2, pf, lead))
MICRO_FN(micro64_6, microw(jb, i, j, 6, 2, pf, lead))
MICRO_FN(micro32_7, microw(jb, i, j, 7, 1, pf, lead))
MICRO_FN(micro32_8, microw(jb, i, j, 8, 1, pf, lead))
MICRO_FN(rows8_7_8, micro_rows8(jb, i, j, 7, 8); (void)pf; (void)lead)
MICRO_FN(rows8_8_8, micro_rows8(jb, i, j, 8, 8); (void)pf; (void)lead)
MICRO_FN(rows8_7_4, micro_rows8(jb, i, j, 7, 4); (void)pf; (void)lead)
MICRO_FN(rows8_8_4, micro_rows8(jb, i, j, 8, 4); (void)pf; (void)lead)
MICRO_FN(micro1, micro(jb, i, j, 1, pf, lead))
MICRO_FN(micro2, micro(jb, i, j, 2, pf, lead))
MICRO_FN(micro3, micro(jb, i, j, 3, pf, lead))
MICRO_FN(micro4, micro(jb, i, j, 4, pf, lead))
MICRO_FN(micro5, micro(jb, i, j, 5, pf, lead))
MICRO_FN(micro6, micro(jb, i, j, 6, pf, lead))

void ember__qblock_avx512(const ember__qjob *jb, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                          int thread) {
    (void)thread;
    static const micro_fn fns[7] = {NULL, micro1, micro2, micro3, micro4, micro5, micro6};
    if (i1 > jb->m)
        i1 = jb->m;
    const ember__qpack *p = jb->p;
    if (i1 - i0 == 1 && jb->c && (p->bits == 4 || p->nch > 1)) { /* one row, K chunks */
        const row_fn f =
            p->bits == 4 ? (p->sb16 ? row4_f16 : row4_f32) : (p->sb16 ? row8_f16 : row8_f32);
        f(jb, i0, j0, j1);
        return;
    }
    int64_t j = j0;
    /* 7 or 8 rows (decode): every panel in one pass of all the rows, B streamed once, where two
     * row groups (6 and 1-2 rows) each read every panel. bench_qgemm --shape M,4096,4096, Zen 5,
     * VNNI tier, 2 threads, alternated, GOPS:
     * - 8-bit B in one K chunk (microw, NP = 1), both builds with the lead prefetch: e_q8 at 8 rows
     *   621-679 -> 672-763 (68-75% -> 73-91% of the in-round roofline), 7 rows 528-585 ->
     *   543-669; without either change 528-561 and 414-474.
     * - B in K chunks, float out (micro_rows8), blocks of 32: e_q8b at 8 rows 487-541 -> 523-639
     *   (ten alternations), at 7 rows 395-459 -> 432-574 (three); e_q4 732-835 -> 755-966 and
     *   690-742 -> 797-899. */
    if (i1 - i0 == 7 || i1 - i0 == 8) {
        const int r8 = i1 - i0 == 8;
        micro_fn f = NULL;
        if (p->bits == 8 && p->nch == 1)
            f = r8 ? micro32_8 : micro32_7;
        else if (jb->c)
            f = p->bits == 8 ? (r8 ? rows8_8_8 : rows8_7_8) : (r8 ? rows8_8_4 : rows8_7_4);
        if (f) {
            for (; j < j1 && j < p->n; j += 32)
                f(jb, i0, j, NULL, 1);
            return;
        }
    }
    /* 8-bit B in one K chunk, tasks of two rows and more: 64 columns a pass (micro64), then
     * a last lone panel as below */
    if (p->bits == 8 && p->nch == 1 && i1 - i0 >= 2) {
        static const micro_fn f64[7] = {NULL,      micro64_1, micro64_2, micro64_3,
                                        micro64_4, micro64_5, micro64_6};
        const int64_t pair = p->kp * 64, per = p->kp * 8; /* two panels' bytes; a group's slice */
        const int64_t bbytes = (p->np / 32) * (p->kp / 4) * 128; /* all of B's values */
        /* Each row group fetches the next two panels' bytes into L2, a slice each (a line per 8 k,
         * kp * 8 bytes: the pair's 64 * kp bytes by the eighth group), so that the pass after
         * this one does not start on B from L3: read at the kernel's rate, its first row group
         * wanted ~75 GB/s from L3 on one thread. bench_qgemm, VNNI tier, 2 threads, three
         * alternations: 2048^3 1153-1249 -> 1239-1364 GOPS, 512 x 4096^2 1152-1186 -> 1241-1371
         * (one thread at 2048^3: 580-625 -> 633-656). */
        for (; j + 32 < j1 && j + 32 < p->n; j += 64) {
            const int64_t next = (j / 32 + 2) * (p->kp / 4) * 128; /* offset of the next pair */
            int64_t g = 0;
            for (int64_t i = i0; i < i1; g++) {
                int64_t r = i1 - i;
                int mr = r >= 6 ? 6 : (int)r;
                const int64_t off = next + g * per;
                f64[mr](jb, i, j, g * per < pair && off + per <= bbytes ? p->b + off : NULL,
                        g == 0);
                i += mr;
            }
        }
    }
    /* 32 columns a pass; as above, each row group of a pass fetches a slice of the next panel
     * (an eighth of it) into L2. VNNI tier, 2 threads, three alternations: e_q8b (blocks of 32)
     * at 512 x 4096^2 652-679 -> 802-812 GOPS, at 2048^3 707-732 -> 754-804; e_q4 736-761 ->
     * 770-798 and level at 2048^3. */
    const int64_t panel = p->kp * (p->bits == 8 ? 32 : 16), slice = panel / 8;
    const int64_t pbytes = (p->np / 32) * panel; /* all of B's values */
    for (; j < j1 && j < jb->p->n; j += 32) {
        const int64_t next = (j / 32 + 1) * panel;
        int64_t g = 0;
        for (int64_t i = i0; i < i1; g++) {
            int64_t r = i1 - i;
            int mr = r >= 6 ? 6 : (int)r;
            const int64_t off = next + g * slice;
            const int pfon = mr > 1 && g < 8 && off + slice <= pbytes;
            fns[mr](jb, i, j, pfon ? p->b + off : NULL, g == 0);
            i += mr;
        }
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
            acc[r] = dpb(acc[r], x, y);
        __asm__ volatile("" : "+v"(x));
    }
    int32_t out[16] __attribute__((aligned(64))); /* as fq_matmul_avx512.c's col_scales says */
    __m512i s = acc[0];
    for (int r = 1; r < 12; r++)
        s = _mm512_add_epi32(s, acc[r]);
    _mm512_storeu_si512(out, s);
    __asm__ volatile("" : : "r"(out[0]) : "memory");
    return (double)iters * 12.0 * 64 * 2;
}

/* 64 bytes to dst, with a streaming store where stream is set (dst 64-byte aligned then) */
EMBER__INLINE void store64(void *dst, __m512i v, int stream) {
    if (stream)
        _mm512_stream_si512((__m512i *)dst, v);
    else
        _mm512_storeu_si512(dst, v);
}

void ember__qscales32_avx512(const float *src, int64_t nv, int sb16, void *dst) {
    for (int h = 0; h < 2; h++) {
        const __m512 v = _mm512_maskz_loadu_ps(ember__tail_mask16(nv - 16 * h), src + 16 * h);
        if (sb16)
            _mm256_storeu_si256((__m256i *)dst + h,
                                _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        else
            _mm512_storeu_ps((float *)dst + 16 * h, v);
    }
}

/* 16 at a time: exact when the round trip through f16 gives the same bits and the value is not a
 * NaN (an f32 subnormal or a value beyond f16's range comes back as another value) */
int ember__qall_f16_avx512(const float *x, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __m512 r =
            _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __mmask16 same =
            _mm512_cmpeq_epi32_mask(_mm512_castps_si512(v), _mm512_castps_si512(r)) &
            _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
        if (same != (__mmask16)0xffff)
            return 0;
    }
    for (; i < n; i++) {
        uint16_t h;
        if (!ember__f32_exact_f16(x[i], &h))
            return 0;
    }
    return 1;
}

/* The 64 values [k0, k0 + 64) of row src (zeros past k; src NULL: zeros) */
EMBER__INLINE __m512i a_piece(const int8_t *src, int64_t k, int64_t k0) {
    if (!src || k0 >= k)
        return _mm512_setzero_si512();
    if (k - k0 >= 64)
        return _mm512_loadu_si512(src + k0);
    return _mm512_maskz_loadu_epi8((__mmask64)((1ull << (k - k0)) - 1), src + k0);
}

/* One row of A into the packed buffer: 64-byte pieces (piece q, values [64q, 64q + 64), zeros past
 * k) at dst + q * pstride for q < kp / 64, and the row's sums per K chunk (kc a multiple of 64 or
 * 32, or nch == 1) into rs[0..nch). src NULL: a padding row (zeros, sums 0). */
void ember__qa_row_avx512(const int8_t *src, int64_t k, int64_t kp, int64_t kc, int64_t nch,
                          int8_t *dst, int64_t pstride, int32_t *rs) {
    const __m512i bias = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    if (nch > 1 && kc == 32) { /* two chunks a piece: PSADBW's lanes 0-3 and 4-7 */
        for (int64_t q = 0; q < kp / 64; q++) {
            const __m512i v = a_piece(src, k, q * 64);
            _mm512_storeu_si512(dst + q * pstride, v);
            const __m512i sad = _mm512_sad_epu8(_mm512_xor_si512(v, bias), zero);
            /* each half counted its 32 bytes (padding zeros included) as 128 too */
            const int64_t lo = _mm256_extract_epi64(_mm512_castsi512_si256(sad), 0) +
                               _mm256_extract_epi64(_mm512_castsi512_si256(sad), 1) +
                               _mm256_extract_epi64(_mm512_castsi512_si256(sad), 2) +
                               _mm256_extract_epi64(_mm512_castsi512_si256(sad), 3);
            const int64_t hi = _mm512_reduce_add_epi64(sad) - lo;
            if (2 * q < nch)
                rs[2 * q] = (int32_t)(lo - 128 * 32);
            if (2 * q + 1 < nch)
                rs[2 * q + 1] = (int32_t)(hi - 128 * 32);
        }
        return;
    }
    const int64_t per = nch == 1 ? kp / 64 : kc / 64; /* pieces per chunk */
    int64_t q = 0;
    for (int64_t c = 0; c < nch; c++) {
        __m512i acc = _mm512_setzero_si512();
        for (int64_t e = 0; e < per; e++, q++) {
            const __m512i v = a_piece(src, k, q * 64);
            _mm512_storeu_si512(dst + q * pstride, v);
            acc = _mm512_add_epi64(acc, _mm512_sad_epu8(_mm512_xor_si512(v, bias), zero));
        }
        /* the sad sums counted every zero-padded byte as 128 too */
        rs[c] = (int32_t)(_mm512_reduce_add_epi64(acc) - 128 * per * 64);
    }
}

/* ---- direct kernel: int8 B read as it is stored (row-major), no packing ----
 * For a first call with few rows. A task's columns are walked in pieces of up to
 * EMBER__DIRECT_W columns and K chunks of DIRECT_KC rows. Each chunk of B is read once, four rows
 * at a time from left to right (four sequential streams the hardware prefetchers follow; column
 * strips of 64 bytes a row, one page each, ran at half the bandwidth), interleaved in registers
 * into groups of 4 k per column, biased to unsigned (the layout VPDPBUSD takes) and staged in a
 * per-thread buffer, each 64-column piece's groups one after the other; then every group of up
 * to 6 rows of A multiplies a staged piece with VPDPBUSD (biased B x a broadcast of 4 signed A
 * bytes), its sums carried between chunks in a second per-thread buffer, also piece by piece
 * ([piece][row][64]). The bias comes off once at the end (128 x the row's sum). The interleave
 * leaves in lane L of register q the columns 16L + 4q .. 16L + 4q + 3; a 4 x 4 transpose of
 * 128-bit lanes restores the order once per output block.
 * Until 2026-12-01 both buffers were laid out group-major and row-major: a piece's staged groups
 * lay 8 KiB apart and its rows' sums too (a pass of 2048 columns), all in the same L1 sets, and
 * more of them than the ways; the rows went in groups of 4 and the chunks were 32 rows deep.
 * The multiply ran at a third of the cached kernel's rate, so that from 8 rows the first call
 * was slower than packing B would have been (bench_qgemm, Zen 5, VNNI tier, 2 threads, e_q8
 * first call at M x 4096^2, GOPS: 4 rows 259, 8 rows 332, 12 rows 297, 16 rows 295, and 17 rows,
 * which pack, 585). In a harness (first calls after 32 MiB written, medians of 15, 16 rows):
 * 275 -> 488-497 with piece-major buffers, 553-565 with chunks of 64 rows too, 637-640 with
 * chunks of 128 (fewer round trips of the sums). bench_qgemm with all three, one run each: 8
 * rows 486, 12 rows 546, 13 rows 282 -> 679, 16 rows 712, 16 x 4096 x 11008 283 -> 635 (oneDNN
 * without reorder beside them: 237, 267, 382, 456, 367). Taking 17-32 rows here too read level
 * with packing at K = N = 4096 (20 rows 735 against 639, 24 rows 756 against 704, 32 rows 882
 * against 875), and 48-64 rows lost (992-1192 against 820-945), but on a small B, whose pack and
 * two calls of the pool cost more than its product, it won: 17-64 rows take this kernel where B
 * has at most 1 M values (qgemm.c), the pass narrowed to keep 16 x 2048 sums. Two alternations
 * each, first calls: 20 x 1024^2 242 / 283 -> 591 / 567 GOPS, 32 x 1000^2 331 / 395 -> 641 /
 * 662, 64 x 1000^2 587 / 607 -> 628 / 751; 2 MiB Bs level (32 x 2048 x 1024, 64 x 512 x 4096). */
#define DIRECT_KC 128
#define DIRECT_PFD 4

/* 4 rows of 64 int8 (rows past K are zero) -> 4 interleaved registers at dst, biased to unsigned
 * (x + 128, for VPDPBUSD) where bias is set, signed as they are otherwise (for AMX's TDPBSSD) */
EMBER__INLINE void direct_stage4(__m512i r0, __m512i r1, __m512i r2, __m512i r3, uint8_t *dst,
                                 const int bias) {
    const __m512i b = _mm512_set1_epi8((char)0x80);
    __m512i ab0 = _mm512_unpacklo_epi8(r0, r1), ab1 = _mm512_unpackhi_epi8(r0, r1);
    __m512i cd0 = _mm512_unpacklo_epi8(r2, r3), cd1 = _mm512_unpackhi_epi8(r2, r3);
    __m512i x[4] = {_mm512_unpacklo_epi16(ab0, cd0), _mm512_unpackhi_epi16(ab0, cd0),
                    _mm512_unpacklo_epi16(ab1, cd1), _mm512_unpackhi_epi16(ab1, cd1)};
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++)
        _mm512_store_si512(dst + 64 * q, bias ? _mm512_xor_si512(x[q], b) : x[q]);
}

/* the group of 4 rows [kk, kk + 4) of the jn columns from jt -> dst: 256 bytes a piece of 64
 * columns, piece pc at dst + pc * pstride */
EMBER__INLINE void direct_stage_group(const ember__qdirect *d, int64_t kk, int64_t jt, int64_t jn,
                                      uint8_t *dst, int64_t pstride, const int bias) {
    const int64_t ldb = d->ldb, k = d->k;
    const int8_t *r0 = d->b + kk * ldb + jt;
    int64_t nfull = jn / 64;
    if (kk + 4 <= k) {
        /* the same piece of the rows DIRECT_PFD ahead, where they exist */
        const int pf = kk + DIRECT_PFD + 4 <= k;
        const int8_t *f0 = r0 + DIRECT_PFD * ldb;
        for (int64_t pc = 0; pc < nfull; pc++) {
            const int64_t o = pc * 64;
            if (pf) {
                _mm_prefetch((const char *)(f0 + o), _MM_HINT_T0);
                _mm_prefetch((const char *)(f0 + ldb + o), _MM_HINT_T0);
                _mm_prefetch((const char *)(f0 + 2 * ldb + o), _MM_HINT_T0);
                _mm_prefetch((const char *)(f0 + 3 * ldb + o), _MM_HINT_T0);
            }
            direct_stage4(_mm512_loadu_si512(r0 + o), _mm512_loadu_si512(r0 + ldb + o),
                          _mm512_loadu_si512(r0 + 2 * ldb + o),
                          _mm512_loadu_si512(r0 + 3 * ldb + o), dst + pc * pstride, bias);
        }
    } else {
        nfull = 0; /* the last, partial group (or one past K): every piece takes the path below */
    }
    for (int64_t pc = nfull; pc * 64 < jn; pc++) { /* the partial last piece, or group */
        const int64_t left = jn - pc * 64;
        const __mmask64 lm = left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
        __m512i r[4];
        for (int q = 0; q < 4; q++)
            r[q] = kk + q < k ? _mm512_maskz_loadu_epi8(lm, r0 + q * ldb + pc * 64)
                              : _mm512_setzero_si512();
        direct_stage4(r[0], r[1], r[2], r[3], dst + pc * pstride, bias);
    }
}

void ember__qdirect_stage(const ember__qdirect *d, int64_t kk, int64_t jt, int64_t jn, uint8_t *dst,
                          int64_t pstride) {
    direct_stage_group(d, kk, jt, jn, dst, pstride, 0);
}

/* Lanes back in order: x[q] holds in lane L the columns 16L + 4q .. 16L + 4q + 3; out[c] gets
 * columns 16c .. 16c + 15 */
void ember__qdirect_order(const __m512i x[4], __m512i out[4]) {
    __m512i t0 = _mm512_shuffle_i64x2(x[0], x[1], 0x44),
            t1 = _mm512_shuffle_i64x2(x[0], x[1], 0xee);
    __m512i t2 = _mm512_shuffle_i64x2(x[2], x[3], 0x44),
            t3 = _mm512_shuffle_i64x2(x[2], x[3], 0xee);
    out[0] = _mm512_shuffle_i64x2(t0, t2, 0x88);
    out[1] = _mm512_shuffle_i64x2(t0, t2, 0xdd);
    out[2] = _mm512_shuffle_i64x2(t1, t3, 0x88);
    out[3] = _mm512_shuffle_i64x2(t1, t3, 0xdd);
}

/* rows [i, i + MR) x one piece of 64 columns: its ng staged groups of 4 k at sp (256 bytes a
 * group) from kk; the piece's sums in acc (64 a row, row i at acc + 64 i) */
EMBER__INLINE void direct_rows(const ember__qdirect *d, const uint8_t *sp, int32_t *acc, int64_t i,
                               int64_t kk, int64_t ng, int first, const int MR) {
    __m512i c[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
            c[r][q] =
                first ? _mm512_setzero_si512() : _mm512_load_si512(acc + (i + r) * 64 + q * 16);
    const uint8_t *a0 = (const uint8_t *)d->a + i * d->lda + kk;
    for (int64_t g = 0; g < ng; g++, sp += 256) {
        const __m512i b0 = _mm512_load_si512(sp), b1 = _mm512_load_si512(sp + 64);
        const __m512i b2 = _mm512_load_si512(sp + 128), b3 = _mm512_load_si512(sp + 192);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            int32_t av;
            __builtin_memcpy(&av, a0 + r * d->lda + 4 * g, 4);
            const __m512i x = _mm512_set1_epi32(av);
            c[r][0] = dpb(c[r][0], b0, x);
            c[r][1] = dpb(c[r][1], b1, x);
            c[r][2] = dpb(c[r][2], b2, x);
            c[r][3] = dpb(c[r][3], b3, x);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++)
            _mm512_store_si512(acc + (i + r) * 64 + q * 16, c[r][q]);
}

#define DIRECT_ROWS(MR)                                                                            \
    static void drows##MR(const ember__qdirect *d, const uint8_t *sp, int32_t *acc, int64_t i,     \
                          int64_t kk, int64_t ng, int first) {                                     \
        direct_rows(d, sp, acc, i, kk, ng, first, MR);                                             \
    }
DIRECT_ROWS(1)
DIRECT_ROWS(2)
DIRECT_ROWS(3)
DIRECT_ROWS(4)
DIRECT_ROWS(5)
DIRECT_ROWS(6)

size_t ember__qdirect_work_bytes(void) {
    return ember__qdirect_chunk_bytes(DIRECT_KC, EMBER__DIRECT_W) +
           (size_t)16 * EMBER__DIRECT_W * 4;
}

void ember__qdirect_avx512(const ember__qdirect *d, int64_t j0, int64_t j1, void *work) {
    static void (*const fns[7])(const ember__qdirect *, const uint8_t *, int32_t *, int64_t,
                                int64_t, int64_t,
                                int) = {NULL, drows1, drows2, drows3, drows4, drows5, drows6};
    int32_t *acc = work; /* [piece][m][64] */
    uint8_t *st = (uint8_t *)work + (size_t)16 * EMBER__DIRECT_W * 4;
    /* the pass narrows over 16 rows: the sums stay within 16 x EMBER__DIRECT_W */
    const int64_t W = d->m <= 16 ? EMBER__DIRECT_W : (16 * EMBER__DIRECT_W / d->m) / 64 * 64;
    if (j1 > d->n)
        j1 = d->n;
    const int64_t k = d->k, m = d->m;
    /* rows in groups of at most 6, as even as they come (16: 5, 5, 6) */
    const int64_t ngr = (m + 5) / 6;
    for (int64_t jt = j0; jt < j1; jt += W) {
        const int64_t jn = j1 - jt < W ? j1 - jt : W;
        const int npc = (int)((jn + 63) / 64);
        for (int64_t kc = 0; kc < k; kc += DIRECT_KC) {
            const int64_t ng = ((k - kc < DIRECT_KC ? k - kc : DIRECT_KC) + 3) / 4;
            const int64_t ps = ember__qdirect_piece_stride(ng);
            for (int64_t g = 0; g < ng; g++)
                direct_stage_group(d, kc + 4 * g, jt, jn, st + g * 256, ps, 1);
            for (int pc = 0; pc < npc; pc++)
                for (int64_t gr = 0, i = 0; gr < ngr; gr++) {
                    const int mr = (int)((m * (gr + 1)) / ngr - i);
                    fns[mr](d, st + pc * ps, acc + (size_t)pc * (size_t)m * 64, i, kc, ng, kc == 0);
                    i += mr;
                }
        }
        /* the bias off, the lanes back in order, scaled or exact out */
        for (int64_t i = 0; i < m; i++) {
            const __m512i corr = _mm512_set1_epi32(128 * d->rs[i]);
            const __m512 sar = _mm512_set1_ps(d->sa ? d->sa[i] : 1.0f);
            for (int pc = 0; pc < npc; pc++) {
                const int32_t *s = acc + ((int64_t)pc * m + i) * 64;
                const __m512i x[4] = {_mm512_load_si512(s), _mm512_load_si512(s + 16),
                                      _mm512_load_si512(s + 32), _mm512_load_si512(s + 48)};
                __m512i o[4];
                ember__qdirect_order(x, o);
                for (int q = 0; q < 4; q++) {
                    const int64_t j = jt + pc * 64 + q * 16;
                    const __mmask16 msk = ember__tail_mask16(j1 - j);
                    if (!msk)
                        break;
                    const __m512i v = _mm512_sub_epi32(o[q], corr);
                    if (d->c32) {
                        _mm512_mask_storeu_epi32(d->c32 + i * d->ldc + j, msk, v);
                        continue;
                    }
                    const __m512 sc = _mm512_mul_ps(
                        sar, d->sb ? _mm512_maskz_loadu_ps(msk, d->sb + j) : _mm512_set1_ps(1.0f));
                    _mm512_mask_storeu_ps(d->c + i * d->ldc + j, msk,
                                          _mm512_mul_ps(_mm512_cvtepi32_ps(v), sc));
                }
            }
        }
    }
}

/* Packing 4 rows of int8 B (k group) into the 8-bit layout, 64 columns a step: byte interleave
 * (r0, r1), (r2, r3), then word interleave, gives in 128-bit lane L of x0..x3 the columns
 * 16L..16L+15 in order; a 4 x 4 transpose of 128-bit lanes puts each 16-column group in one
 * register. rows[q] NULL: zeros. Columns [0, nv) are read, [0, jn) written (jn % 32 == 0);
 * column c goes to dst + (c / 32) * pstride + ((c % 32) / 16) * 64. */
/* 64 values of a row to pack from column c, masked (NULL: zeros) */
EMBER__INLINE __m512i pack_row(const int8_t *row, __mmask64 m, int64_t c) {
    return row ? _mm512_maskz_loadu_epi8(m, row + c) : _mm512_setzero_si512();
}

void ember__qpack8_avx512(const int8_t *const rows[4], int64_t nv, int64_t jn, uint8_t *dst,
                          int64_t pstride, int stream) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    for (int64_t c = 0; c < jn; c += 64) {
        const int64_t left = nv - c;
        const __mmask64 m =
            left >= 64 ? ~(__mmask64)0 : (left > 0 ? (((__mmask64)1 << left) - 1) : 0);
        /* the four rows and the four results in named registers: at -O2 (the default build),
         * GCC 12 kept arrays of them on the stack: packing a 4096 x 4096 B on 2 threads (Zen 5)
         * took 1140-1293 us, 743-846 at -O3, and 646-730 now; a first call at 128 x 4096^2
         * (VNNI tier) 1049-1071 -> 1116-1163 GOPS */
        const __m512i r0 = pack_row(rows[0], m, c), r1 = pack_row(rows[1], m, c);
        const __m512i r2 = pack_row(rows[2], m, c), r3 = pack_row(rows[3], m, c);
        __m512i ab0 = _mm512_unpacklo_epi8(r0, r1), ab1 = _mm512_unpackhi_epi8(r0, r1);
        __m512i cd0 = _mm512_unpacklo_epi8(r2, r3), cd1 = _mm512_unpackhi_epi8(r2, r3);
        __m512i x0 = _mm512_unpacklo_epi16(ab0, cd0), x1 = _mm512_unpackhi_epi16(ab0, cd0);
        __m512i x2 = _mm512_unpacklo_epi16(ab1, cd1), x3 = _mm512_unpackhi_epi16(ab1, cd1);
        __m512i t0 = _mm512_shuffle_i64x2(x0, x1, 0x44), t1 = _mm512_shuffle_i64x2(x0, x1, 0xee);
        __m512i t2 = _mm512_shuffle_i64x2(x2, x3, 0x44), t3 = _mm512_shuffle_i64x2(x2, x3, 0xee);
        const __m512i o0 = _mm512_shuffle_i64x2(t0, t2, 0x88),
                      o1 = _mm512_shuffle_i64x2(t0, t2, 0xdd);
        const __m512i o2 = _mm512_shuffle_i64x2(t1, t3, 0x88),
                      o3 = _mm512_shuffle_i64x2(t1, t3, 0xdd);
        /* columns c.. c + 63: two halves of panel c / 32, then (when jn reaches them) two of the
         * next; c % 64 == 0 */
        uint8_t *d = dst + (c / 32) * pstride;
        store64(d, _mm512_xor_si512(o0, bias), stream);
        if (c + 16 < jn)
            store64(d + 64, _mm512_xor_si512(o1, bias), stream);
        if (c + 32 < jn)
            store64(d + pstride, _mm512_xor_si512(o2, bias), stream);
        if (c + 48 < jn)
            store64(d + pstride + 64, _mm512_xor_si512(o3, bias), stream);
    }
}
