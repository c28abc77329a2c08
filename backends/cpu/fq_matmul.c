/* backends/cpu/fq_matmul.c: the fused float path of q_matmul, (F,Q) (fq_matmul.h).
 *
 * burn's default for a float lhs against quantized weights dequantizes the weights and runs a
 * float matmul. For a decode-sized lhs that spends nearly all the time writing and reading the
 * dequantized copy (4 bytes a weight, made again on every call): measured on the 2-vCPU VM,
 * examples/decode_step's F x Q step at 4096 -> 11008 -> 4096 took 69 ms with Q8S weights. Here
 * each weight is dequantized in registers as it is read (e * (float)q, the same f32 multiply as
 * ember_dequantize) and multiplied into f32 sums at once; the columns are split over the context's
 * threads in tasks of EMBER__FQ_TASK_COLS, the rows in blocks of at most EMBER__FQ_MAX_ROWS. The
 * weights are not packed: this path reads them as stored. */
#include <stdint.h>
#include <string.h>

#include "../../quant/quant_impl.h"
#include "cpu_quant.h"
#include "fq_matmul.h"
#include "qgemm.h"

/* the effective scale at index i of the job's scales */
static float scale_at(const ember__fq_job *jb, int64_t i) {
    const float t = ember__scale_decode(
        (const uint8_t *)jb->sc + (size_t)i * ember__scale_dtype_size(jb->sd), jb->sd);
    return jb->two_level ? jb->glob * t : t;
}

/* the portable kernel (tiers below AVX-512): a task's sums in acc, one row of dequantized weights
 * at a time */
void ember__fq_cols_c(const ember__fq_job *jb, int64_t j0, int64_t j1) {
    if (j1 > jb->n)
        j1 = jb->n;
    const int64_t w = j1 - j0, m = jb->m, k = jb->k, n = jb->n;
    float acc[EMBER__FQ_MAX_ROWS][EMBER__FQ_TASK_COLS];
    float wrow[EMBER__FQ_TASK_COLS];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < w; j++)
            acc[i][j] = 0.0f;
    for (int64_t kk = 0; kk < k; kk++) {
        const uint8_t *row = jb->b + kk * jb->ldb;
        const int64_t e0 = (kk / jb->bk) * jb->nbn;
        for (int64_t j = 0; j < w; j++) {
            const int64_t c = j0 + j;
            const int q =
                jb->bits == 8 ? (int8_t)row[c] : (((row[c >> 1] >> ((c & 1) * 4)) & 0xF) ^ 8) - 8;
            wrow[j] = scale_at(jb, e0 + c / jb->bn) * (float)q;
        }
        for (int64_t i = 0; i < m; i++) {
            const float x = jb->a[i * k + kk];
            for (int64_t j = 0; j < w; j++)
                acc[i][j] += x * wrow[j];
        }
    }
    for (int64_t i = 0; i < m; i++)
        memcpy(jb->c + i * n + j0, acc[i], (size_t)w * sizeof(float));
}

typedef struct fq_run {
    ember__fq_job job; /* batch 0's, all its rows; the tasks differ in a, b, c and m */
    const ember__gemm *g;
    const float *a0;
    const uint8_t *b0;
    float *c0;
    int64_t col_tasks;
    int64_t row_blocks, block_rows; /* the lhs's rows in row_blocks blocks of block_rows (the
                                       last one shorter) */
    int64_t sstride;                /* scales of one [k, n] matrix */
    void (*cols)(const ember__fq_job *, int64_t, int64_t);
} fq_run;

/* Task t: batch bi, column task ct, row block rb, with rb the fastest: the tasks taken together
 * by the threads share their columns' weights (read from memory once, from the caches after). */
static void fq_task(void *arg, int64_t t, int thread) {
    (void)thread;
    const fq_run *r = arg;
    const int64_t rb = t % r->row_blocks, ct = t / r->row_blocks % r->col_tasks,
                  bi = t / r->row_blocks / r->col_tasks;
    ember__fq_job jb = r->job;
    const int64_t i0 = rb * r->block_rows;
    jb.m = jb.m - i0 < r->block_rows ? jb.m - i0 : r->block_rows;
    jb.a = r->a0 + r->g->a_off[bi] + i0 * jb.k;
    jb.b = r->b0 + (r->g->b_off[bi] / jb.n) * jb.ldb; /* rows start afresh when packed */
    jb.sc = (const uint8_t *)jb.sc +
            (size_t)(r->g->b_off[bi] / (jb.k * jb.n) * r->sstride) * ember__scale_dtype_size(jb.sd);
    jb.c = r->c0 + (bi * r->job.m + i0) * jb.n;
    r->cols(&jb, ct * EMBER__FQ_TASK_COLS, (ct + 1) * EMBER__FQ_TASK_COLS);
}

typedef void (*fq_cols_fn)(const ember__fq_job *, int64_t, int64_t);

/* the kernel of the state's tier */
static fq_cols_fn fq_cols_for(const ember__cpu_state *s) {
    const ember__qtier tier = ember__cpu_tier(s);
    return tier >= EMBER__QT_AVX512 && ember__qtier_available(EMBER__QT_AVX512)
               ? ember__fq_cols_avx512
           : tier >= EMBER__QT_AVX2 && ember__qtier_available(EMBER__QT_AVX2) ? ember__fq_cols_avx2
                                                                              : ember__fq_cols_c;
}

int64_t ember__cpu_fq_max_rows(const ember__cpu_state *s) {
    const fq_cols_fn cols = fq_cols_for(s);
    return cols == ember__fq_cols_avx512 ? INT64_MAX
           : cols == ember__fq_cols_avx2 ? EMBER__FQ_AVX2_MAX_ROWS
                                         : EMBER__FQ_MAX_ROWS;
}

ember_status ember__cpu_fq_matmul(ember__cpu_state *s, const ember__gemm *g, const ember_tensor *a,
                                  const ember_tensor *b, ember_tensor *out) {
    const int64_t m = g->m, n = g->n, k = g->k;
    if (a->dtype != EMBER_F32 || b->dtype != EMBER_QFLOAT || out->dtype != EMBER_F32 ||
        g->trans_a || g->trans_b || m < 1 || n < 1 || k < 1)
        return EMBER_ERR_QUANT_UNSUPPORTED;
    const int bits = ember__qvalue_get_info(b->scheme.value)->bits;
    if (!(b->scheme.store == EMBER_QSTORE_NATIVE && bits == 8) &&
        !(b->scheme.store == EMBER_QSTORE_PACKED_U32 && b->scheme.packing_dim == 0 && bits == 4))
        return EMBER_ERR_QUANT_UNSUPPORTED;
    const int64_t ldb = bits == 8 ? n : (int64_t)ember__packed_row_bytes(&b->scheme, n);
    int64_t bk = k, bn = n, nbn = 1, sstride = 0; /* sstride: scales of one [k, n] matrix */
    if (b->q.grid_rank == b->rank) { /* blocks: per column or across n, none across matrices */
        const int r = b->rank;
        for (int d = 0; d < r - 2; d++)
            if (b->q.block_full[d] != 1)
                return EMBER_ERR_QUANT_UNSUPPORTED;
        bk = b->q.block_full[r - 2] < k ? b->q.block_full[r - 2] : k;
        bn = b->q.block_full[r - 1];
        nbn = b->q.grid[r - 1];
        sstride = b->q.grid[r - 2] * b->q.grid[r - 1];
        if (bn != 1 && bn < n && bn % 16) /* the kernels take 16 columns' scales at once */
            return EMBER_ERR_QUANT_UNSUPPORTED;
    }
    const fq_cols_fn cols = fq_cols_for(s);
    if (m > ember__cpu_fq_max_rows(s))
        return EMBER_ERR_QUANT_UNSUPPORTED; /* see EMBER__FQ_MAX_ROWS */
    /* the scales as stored where they are f32, f16 or bf16 (the global f32 scale of a two-level
     * scheme applied as ember_dequantize does); other formats decoded once per call */
    const ember__qlayout *L = &b->q;
    ember_scale_dtype sd = b->scheme.block_scale;
    const int as_stored = (L->scale_size == 4 && sd == EMBER_SCALE_F32) ||
                          (L->scale_size == 2 && (sd == EMBER_SCALE_F16 || sd == EMBER_SCALE_BF16));
    float *eff = NULL, glob = 1.0f;
    const void *sc = (const uint8_t *)b->buf + L->scales_offset;
    int two_level = L->global_bytes == 4;
    if (!as_stored) {
        eff = ember__malloc(L->nscales * sizeof(float));
        EMBER_FAIL_IF(!eff, EMBER_ERR_OUT_OF_MEMORY, "cpu q_matmul: no memory for the rhs scales");
        ember__cpu_effective_scales(s, b, eff);
        sc = eff;
        sd = EMBER_SCALE_F32;
        two_level = 0;
    } else if (two_level) {
        glob = ember__scale_decode((const uint8_t *)b->buf + L->global_offset, EMBER_SCALE_F32);
    }
    /* rows in blocks of at most EMBER__FQ_MAX_ROWS, as even as multiples of 4 make them (65 rows:
     * 36 and 29) */
    const int64_t row_blocks = (m + EMBER__FQ_MAX_ROWS - 1) / EMBER__FQ_MAX_ROWS;
    int64_t block_rows = ((m + row_blocks - 1) / row_blocks + 3) / 4 * 4;
    if (block_rows > EMBER__FQ_MAX_ROWS)
        block_rows = EMBER__FQ_MAX_ROWS;
    const int64_t pfb = bk >= 16 ? 1 : (16 + bk - 1) / bk;
    fq_run r = {{NULL, NULL, ldb, bits, sc, sd, two_level, glob, m, n, k, bk, bn, nbn, NULL, pfb},
                g,
                (const float *)a->buf,
                (const uint8_t *)b->buf,
                (float *)out->buf,
                (n + EMBER__FQ_TASK_COLS - 1) / EMBER__FQ_TASK_COLS,
                (m + block_rows - 1) / block_rows,
                block_rows,
                sstride,
                cols};
    /* A product this small runs on the calling thread alone (ember__cpu_small_work): under 15 us
     * of one thread's multiply-adds (about 30 G a second with the AVX-512 kernel, 15 with the AVX2
     * one) and weights within 256 KiB. Waking the pool's worker when it has gone to sleep
     * (an engine's calls come with its other work between them) cost 40-50 us on a Zen 5 VM.
     * ember_q_matmul, F32 lhs against Q8S per tensor, 2 threads, medians of 400 calls, each after
     * a 200 us busy gap / back to back: 1 x 512 x 512 50.6 / 6.3 us on the pool against 8.1 / 7.8
     * on one thread, 4 x 512 x 512 46.5 / 11.8 against 21.6 / 13.9 (it stays on the pool: 35 us).
     * Back to back, with the worker still polling, the one thread costs up to half the bound: 1 x
     * 512 x 512 7.0 -> 9.1 us; after a gap it saves the wake: 50.1 -> 11.3. */
    const double rate = cols == ember__fq_cols_avx512 ? 30e9
                        : cols == ember__fq_cols_avx2 ? 15e9
                                                      : 1e9;
    const int serial = ember__cpu_small_work(
        (double)g->batch * (double)m * (double)n * (double)k / rate, (double)k * (double)ldb);
    ember__cpu_parallel_for(serial ? NULL : s, g->batch * r.col_tasks * r.row_blocks, fq_task, &r);
    ember__free(eff);
    return EMBER_OK;
}
