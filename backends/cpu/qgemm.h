/* backends/cpu/qgemm.h (private): ember's int8 matmul kernels for the CPU backend.
 *
 * One product in four tiers (scalar, avx2, avx512_vnni, amx), chosen at run time from CPUID and the
 * Linux AMX permission, capped by EMBER_CPU_MAX_ISA / ember_options.cpu_max_isa:
 *
 *     C[m, n] = sum over K chunks c of  sa[i, c] * sb[c, j] * (A_c[i, :] . B_c[:, j])
 *
 * A is int8 (row-major, any lda); B is a pre-packed operand (ember__qpack). The dot products are
 * exact int32 sums (for chunks shorter than 2^17 values; the q_matmul entry declines longer); a
 * "chunk" is the K extent over which both operands' scales are constant (the whole K for per-tensor
 * / per-row / per-column scales, the K block for per-block scales).
 *
 * Packed B layout (shared by every tier, so one cache serves them all). K is padded with zeros to
 * kp (a multiple of 64), N to np (a multiple of 32). Values are stored unsigned with a bias
 * (q + bias: 128 for 8-bit, 8 for 4-bit), which lets the VNNI instructions (u8 x s8) and AMX
 * TDPBSUD (s8 x u8) take A as it is; the kernels subtract bias * (sum of the A chunk's row).
 *   bits 8: [np/32][kp/4][2][16][4] bytes: for 32 columns, for each group of 4 k, two 64-byte
 *           halves (columns 0-15, 16-31) of 4 bytes per column: each half row is a VNNI operand
 *           and a row of an AMX B tile (loaded with stride 128), and a K step of a 32-column panel
 *           is one contiguous run.
 *   bits 4: [np/32][kp/8][2][64] bytes: byte b of half row h of row r holds k group 2r in its low
 *           nibble and k group 2r+1 in its high nibble (same column / k order as the 8-bit rows).
 *           Q2 values are held in this 4-bit form too (bias 8).
 * Scales: sb[(j / 32) * nch * 32 + c * 32 + j % 32] (ember__qpack_sidx: panel-major, one chunk:
 * sb[j]), f32 (or f16 when sb16 is set: every scale is exactly an f16).
 * Memory: kp * np bytes (8-bit) or kp * np / 2 (4-bit), plus nch * np * 4 (or 2) bytes of scales.
 *
 * First calls with few rows skip the pack (ember__qgemm_direct): B is read as it is stored, in
 * chunks interleaved in registers into the same groups of 4 k (column order permuted, restored in
 * the epilogue), on AMX (2..128 rows) or AVX-512 VNNI (1..16 rows).
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
/* 1 when the AVX2 tier may multiply 8-bit B with AVX-VNNI (VEX VPDPBUSD on ymm: Alder Lake and
 * later client cores, Sapphire Rapids and later, Zen 5), unless ember__avx2_no_vnni is set. */
int ember__avx2_vnni(void);
/* Test hook: 1 makes the AVX2 tier keep its 16-bit products (the path of AVX2 without
 * AVX-VNNI) on a machine that has AVX-VNNI. Set only while no product runs. */
extern int ember__avx2_no_vnni;
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
    uint8_t *b;     /* values, 64-byte aligned (a 2 MiB-aligned region of their own from 4 MiB, and
                       where they fill whole 2 MiB pages: pack_values_alloc in qgemm.c) */
    void *sb;       /* scales (f32 or f16), [np/32][nch][32] (ember__qpack_sidx), in b's
                       allocation after the values, or in sb_heap */
    void *sb_heap;  /* the scales' own heap allocation, where the values alone fill a region; or
                       NULL */
    size_t b_map;   /* b's region size (ember__cpu_region_get), 0: b is heap memory */
    ember__cpu_state *b_owner; /* the state whose region cache b goes back to (or NULL) */
} ember__qpack;

/* The packer reads B through this callback: values of row kk, columns [j0, j0 + nj), as int8
 * into dst. Called concurrently from the pool's threads (different column ranges). */
typedef void (*ember__qrow_fn)(const void *src, int64_t kk, int64_t j0, int64_t nj, int8_t *dst);

/* Pack B [k, n] (row kk given by row(src, kk, dst)) into p; bits 8 or 4 (values must fit: 4-bit
 * values in [-8, 7]). kc: chunk length (a multiple of 32 dividing k) or 0 for one chunk. scales:
 * [nch][n] effective f32 scales (NULL: all 1). Returns EMBER_OK or OUT_OF_MEMORY (p left empty). */
ember_status ember__qpack_b(ember__qpack *p, int64_t k, int64_t n, int64_t kc, int bits,
                            ember__qrow_fn row, const void *src, const float *scales);
/* Plain int8 B [k, n] with leading dimension ldb: rows read in place (no callback). */
ember_status ember__qpack_b_plain(ember__cpu_state *s, ember__qpack *p, int64_t k, int64_t n,
                                  int64_t ldb, int64_t kc, const int8_t *B, const float *scales);
/* Packed 4-bit B [k, n] as stored (value j of row kk in byte kk * ldb + j / 2, low nibble first:
 * two's complement nibbles, or any 4-bit codes), read in place on the context's threads (s may be
 * NULL): the nibbles go to the panels' layout directly, without an int8 row per K row. */
ember_status ember__qpack_b_plain4(ember__cpu_state *s, ember__qpack *p, int64_t k, int64_t n,
                                   int64_t ldb, int64_t kc, const uint8_t *B, const float *scales);
/* The same, packing column blocks on the context's threads (s may be NULL). */
ember_status ember__qpack_b_mt(ember__cpu_state *s, ember__qpack *p, int64_t k, int64_t n,
                               int64_t kc, int bits, ember__qrow_fn row, const void *src,
                               const float *scales);
/* Convenience: pack a plain int8 row-major B [k, n] with leading dimension ldb, on the context's
 * threads and into its region cache (s may be NULL). */
ember_status ember__qpack_b_s8(ember__cpu_state *s, ember__qpack *p, int64_t k, int64_t n,
                               int64_t ldb, int64_t kc, int bits, const int8_t *B,
                               const float *scales);
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

/* Without packing (a first call with few rows, 8-bit B, one chunk): C[i, j] = sa[i] * sb[j] *
 * (A row i . B column j) with B int8 row-major [k, n] (ldb), sa [m] and sb [n] (NULL: 1). Exact
 * int32 sums into C32 instead when C32 is given. AMX (the context's tier) takes 2..128 rows,
 * AVX-512 VNNI 1..16 (1..64 for a B of at most EMBER__DIRECT_SMALL_B values). Returns
 * EMBER_ERR_QUANT_UNSUPPORTED (nothing recorded, nothing written) where neither can: pack
 * instead. */
ember_status ember__qgemm_direct(ember__cpu_state *s, int64_t m, int64_t n, int64_t k,
                                 const int8_t *A, int64_t lda, const float *sa, const int8_t *B,
                                 int64_t ldb, const float *sb, float *C, int32_t *C32, int64_t ldc);

/* ---- between qgemm.c and the tier files ---- */
typedef struct ember__qdirect {
    int64_t m, n, k;
    const int8_t *a, *b; /* a: m rows of roundup(k, 4) bytes (zero padded), stride lda */
    int64_t lda, ldb;
    const float *sa, *sb;
    float *c;
    int32_t *c32;
    int64_t ldc;
    const int32_t *rs; /* the sum of each row of A */
} ember__qdirect;
/* The direct kernel's rows: any B up to EMBER__DIRECT_M rows; up to EMBER__DIRECT_M_SMALL rows
 * where B has at most EMBER__DIRECT_SMALL_B values (its pack would cost more than the product).
 * Its columns per pass over B: EMBER__DIRECT_W up to 16 rows, fewer above (16 x W sums). */
#define EMBER__DIRECT_M 16
#define EMBER__DIRECT_M_SMALL 64
#define EMBER__DIRECT_SMALL_B ((int64_t)1 << 20)
#define EMBER__DIRECT_W 2048
/* columns [j0, j1) (j0 % 64 == 0), every row (qgemm_avx512.c); work: a 64-byte aligned buffer of
 * ember__qdirect_work_bytes() for this call alone */
void ember__qdirect_avx512(const ember__qdirect *d, int64_t j0, int64_t j1, void *work);
size_t ember__qdirect_work_bytes(void);
/* The same on AMX for 2..EMBER__DIRECT_AMX_M rows (qgemm_amx.c): d->a zero padded to whole
 * tiles (lda a multiple of 64, K padded to 64; over 32 rows, rows padded to a multiple of 32), no
 * bias (TDPBSSD), rs unused. */
#define EMBER__DIRECT_AMX_M 128
void ember__qdirect_amx(const ember__qdirect *d, int64_t j0, int64_t j1, void *work);
size_t ember__qdirect_amx_work_bytes(void);
/* shared by both (qgemm_avx512.c): the 4 rows [kk, kk + 4) of B's columns [jt, jt + jn) into
 * dst, 256 bytes a piece of 64 columns (piece p at dst + p * pstride), interleaved in groups of 4
 * k, signed; and the column order of a piece's four interleaved registers restored */
void ember__qdirect_stage(const ember__qdirect *d, int64_t kk, int64_t jt, int64_t jn, uint8_t *dst,
                          int64_t pstride);
/* Both kernels' staged chunk: each piece's ng groups one after another (256 bytes each, a tile's
 * rows 256 bytes apart), and each piece 256 bytes further than the last one ends, so that the
 * pieces one group writes fall in different L1 sets. The stride from piece to piece: */
static inline int64_t ember__qdirect_piece_stride(int64_t ng) { return (ng + 1) * 256; }
/* and the bytes of a chunk of kc K rows (kc % 4 == 0) over w columns (w % 64 == 0) */
static inline size_t ember__qdirect_chunk_bytes(int64_t kc, int64_t w) {
    return (size_t)(w / 64) * (size_t)ember__qdirect_piece_stride(kc / 4);
}
#ifdef __AVX512F__
void ember__qdirect_order(const __m512i x[4], __m512i out[4]);
#endif

/* Packed A on the AMX tier ([mp/32][kp/64][32][64], see ember__qjob): the offset of row i's
 * first 64 values (row block i / 32, row i % 32 in it). The rest of the row follows K step by K
 * step, EMBER__QA_STEP bytes apart (value k at + (k / 64) * EMBER__QA_STEP + k % 64); the 32 rows
 * of a K step are one run, tile 0 (rows 0-15) then tile 1 (rows 16-31). */
#define EMBER__QA_STEP 2048
static inline int64_t ember__qa_amx_off(int64_t i, int64_t kp) {
    return (i / 32) * (kp / 64) * EMBER__QA_STEP + (i % 32) * 64;
}

/* The packed A of one call: rows padded to mp (multiple of 32), K to kp, zeros in the padding.
 * Layout per tier: AMX: [mp/32][kp/64][32][64] (two tiles per K step); others: row-major, stride
 * kp. rs[i * nch + c]: sum of row i's values in chunk c (int32). */
typedef struct ember__qjob {
    const ember__qpack *p;
    const int8_t *a;
    const int32_t *rs;
    const float *sa; /* [mp][nch], padded rows 0 */
    int64_t m, mp;
    float *c;     /* float out, or NULL when c32 is used */
    int32_t *c32; /* exact int32 out (single chunk only, test hook) */
    int64_t ldc;
    uint8_t **scratch; /* per-thread buffers (AMX: EMBER__AMX_ACC_BYTES, + 2 x 32 x kp bytes
                          for 4-bit B or several chunks), 64-byte aligned */
    int sa_row;        /* every row's A scale is the same in all its chunks (sa[i * nch + c] ==
                          sa[i * nch]): a kernel may apply it once per row after the chunk sums
                          (sum over c of x_c * sb_c, then times sa; the AVX2 and AVX-512 kernels
                          and AMX's chunked tile path do, which rounds differently from sa * sb
                          per chunk but saves a multiply per 16 sums and chunk) */
    int nt_store;      /* C is large: full aligned rows of 64 bytes may be written with streaming
                          stores (the kernel fences before it returns) */
    int pfw;           /* C is written with ordinary stores: a kernel may fetch its lines for
                          writing ahead of the epilogue */
} ember__qjob;

/* AMX per-thread int32 sums of a whole task: up to 512 rows x 256 columns (the driver's tasks). */
#define EMBER__AMX_ACC_BYTES ((size_t)512 * 256 * 4)

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
/* AMX for 2 <= m <= 16 rows, 8-bit B, one chunk, f32 scales (qgemm_amx.c). */
void ember__qblock_amx_thin(const ember__qjob *j, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                            int thread);
/* The same for B (8- or 4-bit) in several K chunks (block scales along K), float out. */
void ember__qblock_amx_thin_chunked(const ember__qjob *j, int64_t i0, int64_t i1, int64_t j0,
                                    int64_t j1, int thread);

/* The q_matmul vtable entry (cpu_qmatmul.c; contract in dispatch/backend.h). */
ember_status ember__cpu_q_matmul(void *state, int dev, const ember__gemm *g, const ember_tensor *a,
                                 const ember_tensor *b, ember_tensor *out);

/* The CPU backend's kernel state (backends/cpu/threadpool.c): the persistent pool of
 * num_threads - 1 workers and the int8 tier, in s->kernels. start: EMBER_OK or OUT_OF_MEMORY
 * (fewer workers than asked when pthread_create fails: still correct). stop joins and frees. */
ember_status ember__cpu_pool_start(ember__cpu_state *s);
void ember__cpu_pool_stop(ember__cpu_state *s);
/* The context's reusable scratch region of at least `bytes` (64-byte aligned; from
 * EMBER__SCRATCH_HUGE bytes a 2 MiB-aligned mapping on transparent huge pages, threadpool.c), held
 * until ember__cpu_scratch_put; NULL when it is in use by another call or cannot grow (then
 * allocate). */
#define EMBER__SCRATCH_HUGE ((size_t)2 << 20)
void *ember__cpu_scratch_get(ember__cpu_state *s, size_t bytes);
void ember__cpu_scratch_put(ember__cpu_state *s);
/* The scratch region freed (ember_context_trim), unless a call holds it: then it stays, and the
 * next trim frees it. */
void ember__cpu_scratch_release(ember__cpu_state *s);
/* The tier chosen at init (scalar without kernel state). */
ember__qtier ember__cpu_tier(const ember__cpu_state *s);

/* Peak microbenchmarks (bench only): register-only loops; return the int8 ops done. Call the AMX
 * one only where ember__qtier_available(EMBER__QT_AMX). */
double ember__qpeak_amx(int64_t iters);
double ember__qpeak_vnni(int64_t iters);
/* The AMX 2 x 2 tile loop with its operands in L2 (not a register-only loop): `passes` over one
 * cached-product task of 256 x 512 x 2048 held in buf (EMBER__QPEAK_L2_BYTES, 64-byte aligned):
 * the ceiling of a kernel whose blocks' operands do not fit L1. Returns the int8 ops done. */
#define EMBER__QPEAK_L2_BYTES ((size_t)(256 + 512) * 2048)
double ember__qpeak_amx_l2(int64_t passes, const uint8_t *buf);
/* The 2 x 2 tile step with its four operand tiles loaded from L1 each step, cycling through four
 * sets of tiles in buf (EMBER__QPEAK_L1_BYTES, 64-byte aligned): the products' own ceiling when
 * their operands change every step, as in a product (fill buf with random bytes: the tile unit is
 * slower on changing random operands than on the fixed ones of the register-only loop). Returns
 * the int8 ops done. */
#define EMBER__QPEAK_L1_BYTES ((size_t)16 * 1024)
double ember__qpeak_amx_l1(int64_t iters, const uint8_t *buf);

/* AVX-512 packing of a k group of 8-bit B (qgemm_avx512.c): rows[0..3] (NULL: zeros), columns
 * [0, nv) read, [0, jn) written (jn % 32 == 0), column c at dst + (c/32)*pstride + (c%32/16)*64.
 * stream: written with streaming stores (dst 64-byte aligned); the caller fences. */
void ember__qpack8_avx512(const int8_t *const rows[4], int64_t nv, int64_t jn, uint8_t *dst,
                          int64_t pstride, int stream);
/* The 32 scales of a panel row, src[0..nv) and zeros past nv (nv <= 32; may be <= 0), into dst as
 * f16 (sb16: each one exactly an f16) or f32 */
void ember__qscales32_avx512(const float *src, int64_t nv, int sb16, void *dst);
/* 1 when every one of x[0..n) is exactly an f16 (ember__f32_exact_f16), else 0 */
int ember__qall_f16_avx512(const float *x, size_t n);
/* AVX-512 packing of one A row (qgemm_avx512.c): 64-byte pieces at dst + q * pstride, and the
 * sums per K chunk (kc % 64 == 0, kc == 32 or nch == 1) into rs. src NULL: a zero padding row. */
void ember__qa_row_avx512(const int8_t *src, int64_t k, int64_t kp, int64_t kc, int64_t nch,
                          int8_t *dst, int64_t pstride, int32_t *rs);

/* Where the scale of chunk c, column j sits in p->sb: panel-major, [np/32][nch][32], so that a
 * panel's scales for every chunk are one contiguous run (the kernels walk the chunks of one panel
 * in turn; chunk-major rows put each chunk's 32 scales on a page of their own). With one chunk
 * this is j. */
static inline int64_t ember__qpack_sidx(const ember__qpack *p, int64_t c, int64_t j) {
    return (j / 32) * p->nch * 32 + c * 32 + j % 32;
}

/* Whether f is exactly an IEEE binary16 value (zeros, infinities, normals and subnormals; not
 * NaN), and then its bits in *h (those ember__f32_to_f16 gives). Inline: the pack tests every
 * scale of B (a 4096 x 11008 weight in blocks of 32 has 1.4 M), where the round trip through
 * the out-of-line converters cost 7 ms. */
static inline int ember__f32_exact_f16(float f, uint16_t *h) {
    uint32_t u;
    __builtin_memcpy(&u, &f, 4);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t e = (u >> 23) & 0xffu, m = u & 0x7fffffu;
    if (e == 0xffu) { /* Inf (NaN is not exact) */
        *h = (uint16_t)(sign | 0x7c00u);
        return m == 0;
    }
    if (e == 0) { /* zero (f32 subnormals lie below f16's range) */
        *h = sign;
        return m == 0;
    }
    const int ex = (int)e - 127;
    if (ex > 15 || ex < -24)
        return 0;
    if (ex >= -14) { /* normal */
        *h = (uint16_t)(sign | (uint32_t)(ex + 15) << 10 | m >> 13);
        return (m & 0x1fffu) == 0;
    }
    const uint32_t full = 0x800000u | m, sh = (uint32_t)(13 - 14 - ex); /* subnormal */
    *h = (uint16_t)(sign | full >> sh);
    return (full & ((1u << sh) - 1u)) == 0;
}

/* Shared epilogue helper: the scale of B for chunk c, column j. */
static inline float ember__qpack_scale(const ember__qpack *p, int64_t c, int64_t j) {
    if (p->sb16)
        return ember__f16_to_f32(((const uint16_t *)p->sb)[ember__qpack_sidx(p, c, j)]);
    return ((const float *)p->sb)[ember__qpack_sidx(p, c, j)];
}

#ifdef __AVX512F__
#include <immintrin.h>
/* For the AVX-512 and AMX tiers: lanes [0, nv) of a 16-column half (the tail of the last panel) */
static inline __attribute__((always_inline)) __mmask16 ember__tail_mask16(int64_t nv) {
    if (nv >= 16)
        return (__mmask16)0xffff;
    if (nv <= 0)
        return (__mmask16)0;
    return (__mmask16)((1u << (unsigned)nv) - 1u);
}

/* 16 scales of B from p->sb[idx] (idx from ember__qpack_sidx), as f32; sb16 is p->sb16, or the
 * constant a kernel specialised for one scale format passes */
static inline __attribute__((always_inline)) __m512
ember__qpack_scales16(const ember__qpack *p, int64_t idx, const int sb16) {
    if (sb16)
        return _mm512_cvtph_ps(
            _mm256_loadu_si256((const __m256i *)((const uint16_t *)p->sb + idx)));
    return _mm512_loadu_ps((const float *)p->sb + idx);
}
#endif

#ifdef __AVX2__
#include <immintrin.h>
#include <string.h>
/* For the AVX2 kernels (qgemm_avx2.c, fq_matmul_avx2.c): nq (<= 8) vectors of 8 lanes (f32, or
 * int32 bits) to o, the first nv lanes (all of them when nv >= 8 * nq), through a buffer when the
 * row ends inside them */
static inline __attribute__((always_inline)) void ember__store_lanes8(void *o, const __m256 *v,
                                                                      const int nq, int64_t nv) {
    float tmp[64];
    float *d = nv >= 8 * nq ? (float *)o : tmp;
#pragma GCC unroll 8
    for (int q = 0; q < nq; q++)
        _mm256_storeu_ps(d + 8 * q, v[q]);
    if (d == tmp)
        memcpy(o, tmp, (size_t)nv * 4);
}
#endif

#endif
