/* backends/cpu/fq_matmul.h (private): the fused float path of q_matmul for a float lhs against
 * quantized weights, (F,Q): burn's dequantize-then-matmul without the dequantized copy of the
 * weights.
 *
 * out[i][j] = sum over k, in order, of a[i][k] * w[k][j], where w[k][j] = e(k, j) * (float)q[k][j]
 * is exactly burn's dequantized weight (one f32 multiply, quant_impl.h step 7) and e(k, j) the
 * effective scale of its block. The sums are f32 (fused multiply-add on the AVX-512 tier), so the
 * result is burn's up to float rounding, as any float matmul is; the weights' int8 values are read
 * as they are stored, once, and never packed or cached. */
#ifndef EMBER_CPU_FQ_MATMUL_H
#define EMBER_CPU_FQ_MATMUL_H

#include "cpu_backend.h"

/* Rows of one task (a block of the lhs's rows: the tasks of a product with more rows take them
 * in blocks of at most this many). Each row's sums are the same whatever its block, so the rows
 * of a product are those of the same rows multiplied alone, bit for bit.
 *
 * The AVX-512 kernel takes any number of rows. It was limited to this many, the dequantize +
 * OpenBLAS path taking more; but that path writes and reads a dequantized copy of the weights
 * every call (4 bytes a weight), and its sgemm was not faster than the fused kernel's (about 65%
 * of the FMA peak at 64 rows). Measured on a Zen 5 (2 threads, 4096 x 11008 Q4S weights in blocks
 * of 32 with f16 scales, public-API calls back to back, medians): 65 rows 110.7 (OpenBLAS Haswell
 * kernels) / 105.0 (SkylakeX) -> 16.6 ms, 128 rows 135.0 -> 30.5, 512 rows 300.1 / 194.0 ->
 * 119.6; 64 rows 15.3 ms either way.
 * The AVX2 kernel takes up to EMBER__FQ_AVX2_MAX_ROWS rows, the portable one up to this many
 * (beyond, dequantize + OpenBLAS). With a Zen 5 capped at avx2 (bench_matmul, Q8S weights, same
 * run, OpenBLAS's Haswell kernels), fused against dequantize + sgemm: 65 x 11008 x 4096 36.5
 * against 50.1 ms, 128 x 11008 x 4096 67.4 against 77.2; level at 192-256 rows (256 x 11008 x
 * 4096 132.8 against 128.5, 256 x 4096^2 47.2 against 48.0); behind from 512 (512 x 4096^2 102.4
 * against 93.4, 2048^3 95.5 against 90.4). */
#define EMBER__FQ_MAX_ROWS 64
#define EMBER__FQ_AVX2_MAX_ROWS 256
/* columns of one task (a multiple of 64); a task keeps its rows' f32 sums on the stack of the
 * thread that runs it (rows x EMBER__FQ_TASK_COLS x 4 bytes: 64 KiB at most, the calling thread's
 * too, which takes tasks) */
#define EMBER__FQ_TASK_COLS 256

typedef struct ember__fq_job {
    const float *a; /* [m][k], row stride k */
    const uint8_t
        *b; /* [k][n] values as stored: int8 (bits 8) or two's complement nibbles, value
               j of a row in byte j / 2, low nibble first (bits 4); rows ldb bytes apart */
    int64_t ldb;
    int bits;
    /* the scales: e(k, j) = glob * t (two-level) or t, t the stored scale at index
     * (k / bk) * nbn + (bn == 1 ? j : 0) of sc, stored as sd (EMBER_SCALE_F32, _F16 or _BF16:
     * 4, 2 or 2 bytes; ember_dequantize's e exactly) */
    const void *sc;
    ember_scale_dtype sd;
    int two_level;
    float glob;
    int64_t m, n, k;
    int64_t bk;  /* K extent of a scale block (k for one block along K) */
    int64_t bn;  /* columns of a scale block: 1 (a scale per column), a multiple of 16, or >= n
                    (one scale across the columns); the scale of column j is at e0 + j / bn */
    int64_t nbn; /* scale blocks along n */
    float *c;    /* [m][n], row stride n */
    int64_t pfb; /* the scale prefetch's distance in block rows: 1, or for blocks of fewer than 16
                    K rows the block row at least 16 K rows on */
} ember__fq_job;

#ifdef __F16C__
#include <immintrin.h>
#include <string.h>
/* The effective scale at index i of the job's scales (ember_dequantize's e; sd is F32, F16 or
 * BF16), for the SIMD kernels (built with F16C). The scales follow the values in the tensor's
 * bytes, so they may sit off their alignment: read through memcpy. */
static inline __attribute__((always_inline)) float ember__fq_scale(const ember__fq_job *jb,
                                                                   int64_t i) {
    const uint8_t *p = (const uint8_t *)jb->sc + (size_t)i * (jb->sd == EMBER_SCALE_F32 ? 4 : 2);
    float v;
    if (jb->sd == EMBER_SCALE_F32) {
        memcpy(&v, p, 4);
    } else {
        uint16_t h;
        memcpy(&h, p, 2);
        if (jb->sd == EMBER_SCALE_F16) {
            v = _cvtsh_ss(h);
        } else { /* bf16: the upper half of an f32 */
            const uint32_t u = (uint32_t)h << 16;
            memcpy(&v, &u, 4);
        }
    }
    return jb->two_level ? jb->glob * v : v;
}
#endif

/* The scales of columns [j, j + ncols) (those below n) within a block row: offsets *s0..*s1
 * (*s1 < *s0 when there are none). Callers take it once per pass: a division per column block. */
static inline void ember__fq_scale_span(const ember__fq_job *jb, int64_t j, int64_t ncols,
                                        int64_t *s0, int64_t *s1) {
    const int64_t j1 = (j + ncols < jb->n ? j + ncols : jb->n) - 1; /* the last column */
    *s0 = j / jb->bn;
    *s1 = j1 < j ? *s0 - 1 : j1 / jb->bn;
}

/* Fetch scales s0..s1 (ember__fq_scale_span) of the block rows that hold K rows [ka, kb) into L1.
 * The kernels' column-block tables (a block per K row, [1, 32]) fetch the next K chunk's as they
 * make a chunk's table: a block row's scales of a task lie on a line of their own, and fetched 16
 * K rows ahead as the table's loop ran, they came too late (Zen 5, 4096 x 11008 Q4S [1, 32], 2
 * threads, three alternations: 1 row 1.03-1.11 -> 0.84-0.95 ms, 4 rows 2.09-2.51 -> 1.99-2.06;
 * with the scales kept in L1 by a wrong-result probe, 0.72-0.84; [32, 1]: 0.69-0.71). */
static inline void ember__fq_scales_prefetch_rows(const ember__fq_job *jb, int64_t ka, int64_t kb,
                                                  int64_t s0, int64_t s1) {
    const size_t es = jb->sd == EMBER_SCALE_F32 ? 4 : 2; /* f32, or f16 / bf16 */
    if (kb > jb->k)
        kb = jb->k;
    for (int64_t b = ka / jb->bk; b * jb->bk < kb && s0 <= s1; b++) {
        const uintptr_t a = (uintptr_t)jb->sc + (size_t)(b * jb->nbn + s0) * es;
        const uintptr_t end = (uintptr_t)jb->sc + (size_t)(b * jb->nbn + s1 + 1) * es;
        for (uintptr_t l = a & ~(uintptr_t)63; l < end; l += 64)
            __builtin_prefetch((const void *)l, 0, 3);
    }
}

/* Called as scale-block row kb starts: fetch scales s0..s1 (ember__fq_scale_span) of a later
 * block row (if there is one) into L1: the next one, or for blocks of fewer than 16 K rows the one
 * at least 16 K rows on (jb->pfb). A row of scales is n / bn scales long, so each block's lie on
 * lines of their own: loaded when the block starts, they missed the caches at every block (a
 * profile of 4 x 4096 x 11008, Q4S blocks of 32, put 38% of its samples right after the scale
 * loads). The SIMD kernels fetch the next block's as a block starts (bench/results/cpu.md,
 * nineteenth session); with a block per K row ([1, 32] blocks) the next row's came too late. */
static inline void ember__fq_scales_prefetch(const ember__fq_job *jb, int64_t kb, int64_t s0,
                                             int64_t s1) {
    const int64_t k0 = (kb + jb->pfb) * jb->bk; /* that block row's first K row */
    ember__fq_scales_prefetch_rows(jb, k0, k0 + 1, s0, s1);
}

/* Columns [j0, j1) of the job (j0 a multiple of 64), every row (jb->m <= EMBER__FQ_MAX_ROWS: a
 * task's block of rows): portable C and AVX-512. */
void ember__fq_cols_c(const ember__fq_job *jb, int64_t j0, int64_t j1);
void ember__fq_cols_avx512(const ember__fq_job *jb, int64_t j0, int64_t j1);
/* The same on AVX2 (any j0 multiple of 32): the AVX-512 kernel's results, bit for bit. */
void ember__fq_cols_avx2(const ember__fq_job *jb, int64_t j0, int64_t j1);

/* The most rows of the lhs the fused path takes on the state's tier (INT64_MAX on AVX-512,
 * EMBER__FQ_AVX2_MAX_ROWS on AVX2, EMBER__FQ_MAX_ROWS on the portable kernel) */
int64_t ember__cpu_fq_max_rows(const ember__cpu_state *s);

/* The (F,Q) entry: EMBER_ERR_QUANT_UNSUPPORTED (nothing done) when the operands are not a float
 * F32 lhs (any rows on the AVX-512 kernel, at most EMBER__FQ_AVX2_MAX_ROWS on the AVX2 one and
 * EMBER__FQ_MAX_ROWS on the portable one) against 8-bit Native or 4-bit PackedU32 weights whose
 * scales are per tensor, or per column, per block of a multiple of 16 columns ([1, 32]: burn's
 * per_block([32]) on a [d_in, d_out] weight) or one across the columns, in blocks along K of any
 * length (within one matrix of a batch); then the dispatcher runs burn's dequantize + float
 * matmul. Blocks of a multiple of 16 columns, measured (Zen 5, 2 threads, 4096 x 11008, [1, 32]
 * with F16 scales, the build before, which left them to dequantize + sgemm, and this one): 1 row
 * Q8S 16.4 -> 1.48 ms, Q4S 14.1 -> 0.98; 128 rows 66.0 -> 36.9, 65.5 -> 36.2. */
ember_status ember__cpu_fq_matmul(ember__cpu_state *s, const ember__gemm *g, const ember_tensor *a,
                                  const ember_tensor *b, ember_tensor *out);

#endif
