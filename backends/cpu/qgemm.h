/* backends/cpu/qgemm.h (private): ember's int8 matmul kernels for the CPU backend.
 *
 * One product in four tiers (scalar, avx2, avx512_vnni, amx), chosen at run time from CPUID and the
 * Linux AMX permission, capped by EMBER_CPU_MAX_ISA / ember_options.cpu_max_isa:
 *
 *     C[m, n] = sum over K chunks c of  sa[i, c] * sb[c, j] * (A_c[i, :] . B_c[:, j])
 *
 * A is int8 (row-major, any lda); B is a pre-packed operand (ember__qpack). The dot products are
 * exact int32 sums; a "chunk" is the K extent over which both operands' scales are constant (the
 * whole K for per-tensor / per-row / per-column scales, the K block for per-block scales).
 *
 * Packed B layout (shared by every tier, so one cache serves them all). K is padded with zeros to
 * kp (a multiple of 64), N to np (a multiple of 32). Values are stored unsigned with a bias
 * (q + bias: 128 for 8-bit, 8 for 4-bit), which lets the VNNI instructions (u8 x s8) and AMX
 * TDPBSUD (s8 x u8) take A as it is; the kernels subtract bias * (sum of the A chunk's row).
 *   bits 8: [np/16][kp/4][16][4] bytes: for 16 columns, for each group of 4 k, 4 bytes per column
 *           (the VNNI / AMX B-tile layout: one 64-byte row per k group).
 *   bits 4: [np/16][kp/8][64] bytes: byte b of row r holds k group 2r in its low nibble and k group
 *           2r+1 in its high nibble (same column / k order as the 8-bit rows). Q2 values are held in
 *           this 4-bit form too (bias 8).
 * Scales: sb[c * np + j], f32 (or f16 when sb16 is set: every scale is exactly an f16).
 * Memory: kp * np bytes (8-bit) or kp * np / 2 (4-bit), plus nch * np * 4 (or 2) bytes of scales.
 */
#ifndef EMBER_CPU_QGEMM_H
#define EMBER_CPU_QGEMM_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_backend.h"

typedef enum ember__qtier {
    EMBER__QT_SCALAR = 0,
    EMBER__QT_AVX2,
    EMBER__QT_AVX512, /* AVX-512 VNNI */
    EMBER__QT_AMX,
    EMBER__QT_COUNT
} ember__qtier;

/* "scalar", "avx2", "avx512_vnni", "amx"; "unknown" otherwise. */
const char *ember__qtier_name(ember__qtier t);
/* 1 when this machine (and process) can run tier t. The AMX check requests the tile-data
 * permission from Linux once (arch_prctl ARCH_REQ_XCOMP_PERM). */
int ember__qtier_available(ember__qtier t);
/* The best available tier at or below the cap ("" or NULL: no cap; "scalar", "avx2",
 * "avx512" / "avx512_vnni", "amx"). An unknown cap string is treated as no cap. */
ember__qtier ember__qtier_select(const char *cap);

typedef struct ember__qpack {
    int64_t k, n;   /* logical */
    int64_t kp, np; /* padded: kp % 64 == 0, np % 32 == 0 */
    int64_t kc;     /* chunk length along K (kp when nch == 1) */
    int64_t nch;    /* chunks */
    int bits;       /* 8 or 4 */
    int bias;       /* 128 (8-bit) or 8 (4-bit) */
    int sb16;       /* scales stored as f16 */
    uint8_t *b;     /* values, 64-byte aligned */
    void *sb;       /* [nch][np] scales (f32 or f16) */
} ember__qpack;

/* The packer reads B through this callback: values of row kk, columns [j0, j0 + nj), as int8
 * into dst. Called concurrently from the pool's threads (different column ranges). */
typedef void (*ember__qrow_fn)(const void *src, int64_t kk, int64_t j0, int64_t nj, int8_t *dst);

/* Pack B [k, n] (row kk given by row(src, kk, dst)) into p; bits 8 or 4 (values must fit: 4-bit
 * values in [-8, 7]). kc: chunk length (a multiple of 32 dividing k) or 0 for one chunk. scales:
 * [nch][n] effective f32 scales (NULL: all 1). Returns EMBER_OK or OUT_OF_MEMORY (p left empty). */
ember_status ember__qpack_b(ember__qpack *p, int64_t k, int64_t n, int64_t kc, int bits,
                            ember__qrow_fn row, const void *src, const float *scales);
/* The same, packing column blocks on the context's threads (s may be NULL). */
ember_status ember__qpack_b_mt(ember__cpu_state *s, ember__qpack *p, int64_t k, int64_t n,
                               int64_t kc, int bits, ember__qrow_fn row, const void *src,
                               const float *scales);
/* Convenience: pack a plain int8 row-major B [k, n] with leading dimension ldb. */
ember_status ember__qpack_b_s8(ember__qpack *p, int64_t k, int64_t n, int64_t ldb, int64_t kc,
                               int bits, const int8_t *B, const float *scales);
void ember__qpack_free(ember__qpack *p);
size_t ember__qpack_bytes(const ember__qpack *p);

/* C[i, j] (ldc) = sum_c sa[i * nch + c] * sb[c, j] * dot_c(A row i, B col j) for i < m, j < n.
 * A: int8 row-major with lda (>= k). sa: [m][nch] scales of A (NULL: all 1).
 * Runs on tier t with the context's threads (s may be NULL: one thread).
 * Returns EMBER_OK or OUT_OF_MEMORY. */
ember_status ember__qgemm(ember__cpu_state *s, ember__qtier t, int64_t m, const int8_t *A,
                          int64_t lda, const float *sa, const ember__qpack *p, float *C,
                          int64_t ldc);
/* Exact int32 products on tier t (test hook): C32[i, j] = sum_k A[i, k] * B[k, j] over the whole
 * K (p must have one chunk). */
ember_status ember__qgemm_s32(ember__cpu_state *s, ember__qtier t, int64_t m, const int8_t *A,
                              int64_t lda, const ember__qpack *p, int32_t *C, int64_t ldc);

/* ---- between qgemm.c and the tier files ---- */
/* The packed A of one call: rows padded to mp (multiple of 32), K to kp, zeros in the padding.
 * Layout per tier: AMX: [mp/16][kp/64][16][64] (tile blocks); others: row-major, stride kp.
 * rs[i * nch + c]: sum of row i's values in chunk c (int32). */
typedef struct ember__qjob {
    const ember__qpack *p;
    const int8_t *a;
    const int32_t *rs;
    const float *sa; /* [mp][nch], padded rows 0 */
    int64_t m, mp;
    float *c; /* float out, or NULL when c32 is used */
    int32_t *c32; /* exact int32 out (single chunk only, test hook) */
    int64_t ldc;
    uint8_t **scratch; /* per-thread buffers (AMX 4-bit: 32 x kp bytes each), else NULL */
} ember__qjob;

/* Compute rows [i0, i1) x columns [j0, j1) of the job (i0 % 32 == 0, j0 % 32 == 0) on pool
 * thread `thread`. */
typedef void (*ember__qblock_fn)(const ember__qjob *j, int64_t i0, int64_t i1, int64_t j0,
                                 int64_t j1, int thread);
void ember__qblock_scalar(const ember__qjob *j, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                          int thread);
void ember__qblock_avx2(const ember__qjob *j, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                          int thread);
void ember__qblock_avx512(const ember__qjob *j, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                          int thread);
void ember__qblock_amx(const ember__qjob *j, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                          int thread);

/* Shared epilogue helper: the scale of B for chunk c, column j. */
static inline float ember__qpack_scale(const ember__qpack *p, int64_t c, int64_t j) {
    if (p->sb16)
        return ember__f16_to_f32(((const uint16_t *)p->sb)[c * p->np + j]);
    return ((const float *)p->sb)[c * p->np + j];
}

#endif
