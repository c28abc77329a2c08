/* backends/cpu/cpu_quant.c: the CPU backend's quantize and dequantize entries, threaded, with
 * the scalar kernel tier. The arithmetic is quant/quant_impl.h's (division by the stored scale,
 * round half away from zero); the AVX-512 tier (cpu_quant_avx512.c) gives the same bytes.
 *
 * Work split: the tensor is viewed as R rows of Lc values (the last axis). Tiles of about 64K
 * values (whole rows, or column ranges of one row aligned to lcm(block, 64)) are the tasks of
 * ember__cpu_parallel_for; a tile is walked in sub-chunks of about 2048 values, each starting on
 * a block boundary and a packed-word boundary.
 *
 * Blocks one value wide along the last axis and b rows tall ([b, 1]: a weight [K, N] in blocks
 * along K) have a scale per value of a row: the kernels take that case with vectors of scales,
 * a tile holds whole block rows (b rows of up to 64K / b columns), pass (1) combines a block
 * row's maxima in the tile before one atomic max per block, and the rows of a block row reuse
 * the effective scales decoded for the first. Measured (Zen 5, 2 threads, 4096 x 11008, blocks
 * [32, 1] with F16 scales, medians, the build before and this one alternated): quantize
 * 307-312 -> 66-72 ms, dequantize 72-76 -> 10-12 ms (Q8S and Q4S alike; per tensor 8-9 and
 * 5 ms); the scalar tier (capped at avx2) 312-332 -> 135-147 and 57-104 -> 25-78 ms.
 *
 * Dynamic quantization, in passes:
 *   - one-level blocks that run along the last axis ([32], [1, 64], ...): one fused pass; each
 *     sub-chunk computes its blocks' max |x|, scales, stored scales and values;
 *   - one-level blocks one column wide down the rows ([32, 1]): one pass of whole block rows
 *     (task_fused_cols);
 *   - otherwise: (1) max |x| per block (per tile, then an atomic max per block; per-tensor reduces
 *     locally first), (2) raw scales -> stored scales (two-level: the global scale first),
 *     (3) values, reading each block's effective scale back from the stored bytes.
 * Static quantization runs (1) as a finiteness check only, then (2) on the given scales, then (3).
 * A NaN or Inf input gives EMBER_ERR_NON_FINITE (the half-written output is the caller's to free).
 */
#include <stdatomic.h>
#include <stdio.h>

#include "cpu_quant.h"

#define TILE_TARGET ((size_t)1 << 16) /* values per task */
/* Per-task scratch lives on the stack (about 32 KiB): the calling thread takes part in
 * ember__cpu_parallel_for, so keep it modest. */
#define SUB_TARGET ((size_t)2048) /* values per sub-chunk */
#define MAX_SUB ((size_t)16384)   /* a sub-chunk is at most lcm(255, 64) = 16320 values */
#define MAX_SUB_BLOCKS 2048       /* blocks per sub-chunk, at most (SUB_TARGET / 1) */
#define NONFINITE_BITS 0x7f800000u

/* ---- scalar tier ---- */

static void s_amax_blocks(const float *x, size_t len, size_t bl, uint32_t *m) {
    if (!bl)
        bl = len ? len : 1;
    size_t k = 0;
    for (size_t i = 0; i < len; i += bl, k++) {
        size_t end = i + bl < len ? i + bl : len;
        uint32_t mx = 0;
        for (size_t j = i; j < end; j++) {
            uint32_t b = ember__f32_bits(x[j]) & 0x7fffffffu;
            mx = b > mx ? b : mx;
        }
        m[k] = mx;
    }
    if (len == 0)
        m[0] = 0;
}

static void s_amax_acc(const float *x, size_t len, uint32_t *acc) {
    for (size_t i = 0; i < len; i++) {
        const uint32_t b = ember__f32_bits(x[i]) & 0x7fffffffu;
        acc[i] = b > acc[i] ? b : acc[i];
    }
}

static void s_quant_int_blocks(const float *x, size_t len, size_t bl, const float *e, float lo,
                               float hi, int8_t *q) {
    if (!bl)
        bl = len ? len : 1;
    for (size_t i = 0, k = 0; i < len; i += bl, k++) {
        size_t end = i + bl < len ? i + bl : len;
        const float ek = e[k];
        for (size_t j = i; j < end; j++)
            q[j] = (int8_t)ember__quantize_int(x[j], ek, lo, hi);
    }
}

static void s_dequant_int_blocks(const int8_t *q, size_t len, size_t bl, const float *e,
                                 float *out) {
    if (!bl)
        bl = len ? len : 1;
    for (size_t i = 0, k = 0; i < len; i += bl, k++) {
        size_t end = i + bl < len ? i + bl : len;
        const float ek = e[k];
        for (size_t j = i; j < end; j++)
            out[j] = ek * (float)q[j];
    }
}

static void s_scales_f32(const uint8_t *src, size_t n, ember_scale_dtype d, int two, float g,
                         float *dst) {
    const size_t sz = ember__scale_dtype_size(d);
    for (size_t i = 0; i < n; i++) {
        const float t = ember__scale_decode(src + i * sz, d);
        dst[i] = two ? g * t : t;
    }
}

const ember__cpu_qkern ember__cpu_qkern_scalar = {
    .name = "scalar",
    .amax_blocks = s_amax_blocks,
    .amax_acc = s_amax_acc,
    .quant_int_blocks = s_quant_int_blocks,
    .dequant_int_blocks = s_dequant_int_blocks,
    .pack = ember__pack_codes,
    .unpack = ember__unpack_codes,
    .scales_f32 = s_scales_f32,
};

static atomic_int force_scalar;

void ember__cpu_quant_force_scalar(int on) { atomic_store(&force_scalar, on ? 1 : 0); }

const ember__cpu_qkern *ember__cpu_qkern_select(const ember__cpu_state *s) {
    if (atomic_load(&force_scalar))
        return &ember__cpu_qkern_scalar;
    if (s && (strcmp(s->max_isa, "scalar") == 0 || strcmp(s->max_isa, "avx2") == 0))
        return &ember__cpu_qkern_scalar;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (ember__cpu_qkern_avx512.amax_blocks && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
        return &ember__cpu_qkern_avx512;
#endif
    return &ember__cpu_qkern_scalar;
}

/* ---- geometry and the job shared by the passes ---- */

typedef struct geom {
    int rank;
    int64_t shape[EMBER_MAX_RANK], blk[EMBER_MAX_RANK];
    size_t gstride[EMBER_MAX_RANK];
    size_t R, Lc;   /* rows, values per row */
    size_t bl;      /* block length along the last axis; 0: per-tensor (one block) */
    size_t rpt, cc; /* rows per tile, columns per tile */
    size_t ncol;    /* tiles per row */
    size_t sub;     /* values per sub-chunk */
    int64_t ntasks;
} geom;

static size_t gcd_size(size_t a, size_t b) {
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static void geom_init(geom *g, const ember_tensor *t, const ember_qscheme *s,
                      const ember__qlayout *L) {
    memset(g, 0, sizeof *g);
    g->rank = t->rank;
    memcpy(g->shape, t->shape, sizeof g->shape);
    g->Lc = (size_t)t->shape[t->rank - 1];
    g->R = g->Lc ? t->numel / g->Lc : 0;
    if (s->block_rank > 0) {
        memcpy(g->blk, L->block_full, sizeof g->blk);
        g->bl = (size_t)L->block_full[t->rank - 1];
        g->gstride[t->rank - 1] = 1;
        for (int d = t->rank - 2; d >= 0; d--)
            g->gstride[d] = g->gstride[d + 1] * (size_t)L->grid[d + 1];
    }
    const size_t a = g->bl ? g->bl / gcd_size(g->bl, 64) * 64 : 64;
    if (g->Lc <= TILE_TARGET) {
        g->cc = g->Lc ? g->Lc : 1;
        g->ncol = 1;
        g->rpt = TILE_TARGET / (g->Lc ? g->Lc : 1);
        g->rpt = g->rpt ? g->rpt : 1;
    } else {
        g->cc = TILE_TARGET / a * a;
        g->cc = g->cc ? g->cc : a;
        g->ncol = (g->Lc + g->cc - 1) / g->cc;
        g->rpt = 1;
    }
    if (g->bl == 1 && t->rank >= 2) {
        /* blocks across rows ([b, 1]): a tile holds whole block rows (b rows, from a block row's
         * start where b divides the axis), so that pass (1) publishes each block's maximum once
         * per tile */
        const size_t br = (size_t)g->blk[t->rank - 2] < TILE_TARGET / 64
                              ? (size_t)g->blk[t->rank - 2]
                              : TILE_TARGET / 64;
        if (g->Lc * br <= TILE_TARGET) {
            g->cc = g->Lc ? g->Lc : 1;
            g->ncol = 1;
            g->rpt = TILE_TARGET / g->cc / br * br;
        } else {
            g->rpt = br;
            g->cc = TILE_TARGET / br / 64 * 64;
            g->ncol = (g->Lc + g->cc - 1) / g->cc;
        }
    }
    g->ntasks = g->R ? (int64_t)(((g->R + g->rpt - 1) / g->rpt) * g->ncol) : 0;
    g->sub = a >= SUB_TARGET ? a : SUB_TARGET / a * a;
}

/* The block index of (row r, column 0) over the block grid. */
static size_t gbase(const geom *g, size_t r) {
    if (!g->bl)
        return 0;
    size_t b = 0;
    for (int d = g->rank - 2; d >= 0; d--) {
        size_t n = (size_t)g->shape[d];
        size_t c = r % n;
        r /= n;
        b += c / (size_t)g->blk[d] * g->gstride[d];
    }
    return b;
}

typedef struct qjob {
    geom g;
    const ember__cpu_qkern *k;
    const ember_qscheme *s;
    const ember__qvalue_info *vi;
    ember_scale_dtype sd;
    size_t ssz;             /* bytes per stored scale */
    int two;                /* two-level */
    float global;           /* two-level global scale (else 1) */
    const float *x;         /* quantize input */
    float *out;             /* dequantize output */
    uint8_t *vals;          /* the values part of the quantized buffer */
    uint8_t *sbytes;        /* the stored scales */
    size_t row_bytes;       /* bytes per row of values */
    size_t per, ub;         /* values per storage unit, bytes per unit */
    int finite_only;        /* pass (1) for static quantization */
    _Atomic uint32_t *amax; /* pass (1): per block, or one */
    const float *raw;       /* pass (2) input */
    size_t nscales, fin_chunk;
    atomic_int bad; /* a NaN / Inf was seen */
} qjob;

static void tile_of(const geom *g, int64_t task, size_t *r0, size_t *r1, size_t *c0, size_t *c1) {
    size_t rt = (size_t)task / g->ncol, ct = (size_t)task % g->ncol;
    *r0 = rt * g->rpt;
    *r1 = *r0 + g->rpt < g->R ? *r0 + g->rpt : g->R;
    *c0 = ct * g->cc;
    *c1 = *c0 + g->cc < g->Lc ? *c0 + g->cc : g->Lc;
}

static size_t nblocks(const geom *g, size_t len) { return g->bl ? (len + g->bl - 1) / g->bl : 1; }

static void atomic_max_u32(_Atomic uint32_t *a, uint32_t v) {
    uint32_t cur = atomic_load_explicit(a, memory_order_relaxed);
    while (v > cur && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                             memory_order_relaxed)) {
    }
}

/* The effective scales of nb consecutive blocks from block b0, from the stored bytes, into e,
 * unless e already holds them (*have: the b0 and nb e was made for, or b0 == SIZE_MAX): the rows
 * of a block row ([b, 1] blocks) use the same scales. */
static void eff_from_bytes(const qjob *j, size_t b0, size_t nb, float *e, size_t have[2]) {
    if (have[0] == b0 && have[1] == nb)
        return;
    have[0] = b0;
    have[1] = nb;
    j->k->scales_f32(j->sbytes + b0 * j->ssz, nb, j->sd, j->two, j->global, e);
}

/* Pass (1). */
static void task_amax(void *arg, int64_t task, int thread) {
    (void)thread;
    qjob *j = arg;
    const geom *g = &j->g;
    const size_t bl = j->finite_only ? 0 : g->bl;
    uint32_t m[MAX_SUB_BLOCKS];
    uint32_t local = 0;
    size_t r0, r1, c0, c1;
    tile_of(g, task, &r0, &r1, &c0, &c1);
    if (bl == 1) { /* blocks across rows ([b, 1]: a block per value of a row): the maxima of the
                      tile's rows in one block row are taken here, then published once */
        uint32_t acc[MAX_SUB_BLOCKS];
        for (size_t c = c0; c < c1; c += g->sub) {
            const size_t len = c1 - c < g->sub ? c1 - c : g->sub;
            for (size_t r = r0; r < r1;) {
                const size_t gb = gbase(g, r);
                memset(acc, 0, len * sizeof acc[0]);
                for (; r < r1 && gbase(g, r) == gb; r++)
                    j->k->amax_acc(j->x + r * g->Lc + c, len, acc);
                for (size_t i = 0; i < len; i++)
                    atomic_max_u32(&j->amax[gb + c + i], acc[i]);
            }
        }
        return;
    }
    for (size_t r = r0; r < r1; r++) {
        const size_t gb = gbase(g, r);
        for (size_t c = c0; c < c1; c += g->sub) {
            const size_t len = c1 - c < g->sub ? c1 - c : g->sub;
            j->k->amax_blocks(j->x + r * g->Lc + c, len, bl, m);
            if (!bl) {
                local = m[0] > local ? m[0] : local;
                continue;
            }
            const size_t nb = nblocks(g, len), b0 = gb + c / bl;
            for (size_t i = 0; i < nb; i++)
                atomic_max_u32(&j->amax[b0 + i], m[i]);
        }
    }
    if (!bl)
        atomic_max_u32(&j->amax[0], local);
}

/* Quantize one sub-chunk with effective scales e (one per block): values into place. */
static void quant_sub(qjob *j, size_t r, size_t c, size_t len, const float *e, uint8_t *tmp) {
    const geom *g = &j->g;
    const float *x = j->x + r * g->Lc + c;
    const int native = j->s->store == EMBER_QSTORE_NATIVE;
    uint8_t *codes = native ? j->vals + r * g->Lc + c : tmp;
    if (!j->vi->is_fp) {
        j->k->quant_int_blocks(x, len, g->bl, e, j->vi->lo, j->vi->hi, (int8_t *)codes);
    } else {
        const size_t bl = g->bl ? g->bl : len;
        for (size_t i = 0; i < len; i++)
            codes[i] = ember__quantize_code(j->s->value, j->vi, x[i], e[i / bl]);
    }
    if (!native)
        j->k->pack(j->s, codes, len, j->vals + r * j->row_bytes + c / j->per * j->ub);
}

/* Pass (3). */
static void task_quant(void *arg, int64_t task, int thread) {
    (void)thread;
    qjob *j = arg;
    const geom *g = &j->g;
    float e[MAX_SUB_BLOCKS];
    uint8_t tmp[MAX_SUB];
    size_t r0, r1, c0, c1, have[2] = {SIZE_MAX, 0};
    tile_of(g, task, &r0, &r1, &c0, &c1);
    for (size_t r = r0; r < r1; r++) {
        const size_t gb = gbase(g, r);
        for (size_t c = c0; c < c1; c += g->sub) {
            const size_t len = c1 - c < g->sub ? c1 - c : g->sub;
            eff_from_bytes(j, g->bl ? gb + c / g->bl : 0, nblocks(g, len), e, have);
            quant_sub(j, r, c, len, e, tmp);
        }
    }
}

/* The one-level scales of nb blocks from block b0, from their maxima m (f32 bits of |x|): stored
 * (ember__scale_store_one of the raw scale, as pass (2) makes them) and into e as the values'
 * divisors. 0, with j->bad set, at a NaN or Inf. */
static int scales_of_maxima(qjob *j, const uint32_t *m, size_t nb, size_t b0, float *e) {
    for (size_t i = 0; i < nb; i++) {
        if (m[i] >= NONFINITE_BITS) {
            atomic_store(&j->bad, 1);
            return 0;
        }
        const float raw = ember__raw_scale(ember__f32_from_bits(m[i]), j->vi);
        const float t = ember__scale_store_one(raw, j->sd);
        ember__scale_encode(t, j->sd, j->sbytes + (b0 + i) * j->ssz);
        e[i] = t;
    }
    return 1;
}

/* The fused pass for one-level blocks along the last axis. */
static void task_fused(void *arg, int64_t task, int thread) {
    (void)thread;
    qjob *j = arg;
    const geom *g = &j->g;
    float e[MAX_SUB_BLOCKS];
    uint32_t m[MAX_SUB_BLOCKS];
    uint8_t tmp[MAX_SUB];
    size_t r0, r1, c0, c1;
    tile_of(g, task, &r0, &r1, &c0, &c1);
    for (size_t r = r0; r < r1; r++) {
        const size_t gb = gbase(g, r);
        for (size_t c = c0; c < c1; c += g->sub) {
            const size_t len = c1 - c < g->sub ? c1 - c : g->sub;
            j->k->amax_blocks(j->x + r * g->Lc + c, len, g->bl, m);
            if (!scales_of_maxima(j, m, nblocks(g, len), gb + c / g->bl, e))
                return;
            quant_sub(j, r, c, len, e, tmp);
        }
    }
}

/* One pass for one-level blocks down the columns ([b, 1], whole blocks in every tile: the tile's
 * rows are whole block rows): per block row and column range, the b rows' maxima, the scales,
 * then the values, the rows still in L2. The three passes (maxima through atomics, scales, values)
 * read the input from memory twice. Measured (Zen 5, 2 threads, bench_quant, 64 MiB [4096, 4096]
 * in [32, 1] blocks, kernel path): quantize 25.1 -> 6.4-7.5 ms ([32]: 3.4-4.2); 4096 x 11008,
 * public API: 66-72 -> 16-21 ms. The same bytes: the scales are task_fused's (scales_of_maxima)
 * and the values divide by them as pass (3) does. */
static void task_fused_cols(void *arg, int64_t task, int thread) {
    (void)thread;
    qjob *j = arg;
    const geom *g = &j->g;
    const size_t br = (size_t)g->blk[g->rank - 2];
    float e[MAX_SUB_BLOCKS];
    uint32_t acc[MAX_SUB_BLOCKS];
    uint8_t tmp[MAX_SUB];
    size_t r0, r1, c0, c1;
    tile_of(g, task, &r0, &r1, &c0, &c1);
    for (size_t c = c0; c < c1; c += g->sub) {
        const size_t len = c1 - c < g->sub ? c1 - c : g->sub;
        for (size_t r = r0; r < r1; r += br) { /* a block row: br rows, a block per column */
            const size_t gb = gbase(g, r);
            memset(acc, 0, len * sizeof acc[0]);
            for (size_t rr = r; rr < r + br; rr++)
                j->k->amax_acc(j->x + rr * g->Lc + c, len, acc);
            if (!scales_of_maxima(j, acc, len, gb + c, e))
                return;
            for (size_t rr = r; rr < r + br; rr++)
                quant_sub(j, rr, c, len, e, tmp);
        }
    }
}

/* task_fused_cols takes the tensor: one-level blocks one column wide whose other dims are 1 but
 * the next-to-last, of b rows dividing that axis, and tiles of whole block rows */
static int fused_cols_ok(const qjob *j, const ember_tensor *q) {
    const geom *g = &j->g;
    if (j->two || g->bl != 1 || q->rank < 2 || q->q.grid_rank != q->rank)
        return 0;
    for (int d = 0; d < q->rank - 2; d++)
        if (q->q.block_full[d] != 1)
            return 0;
    const size_t br = (size_t)q->q.block_full[q->rank - 2];
    return (size_t)q->shape[q->rank - 2] % br == 0 && g->rpt % br == 0;
}

/* Pass (2), dynamic with blocks: raw scales from the block maxima. */
static void task_raw(void *arg, int64_t task, int thread) {
    (void)thread;
    qjob *j = arg;
    float *raw = (float *)j->raw;
    size_t i0 = (size_t)task * j->fin_chunk;
    size_t i1 = i0 + j->fin_chunk < j->nscales ? i0 + j->fin_chunk : j->nscales;
    for (size_t i = i0; i < i1; i++) {
        uint32_t b = atomic_load_explicit(&j->amax[i], memory_order_relaxed);
        if (b >= NONFINITE_BITS)
            atomic_store(&j->bad, 1);
        raw[i] = ember__raw_scale(ember__f32_from_bits(b), j->vi);
    }
}

/* Pass (2): stored scales. */
static void task_finish(void *arg, int64_t task, int thread) {
    (void)thread;
    qjob *j = arg;
    size_t i0 = (size_t)task * j->fin_chunk;
    size_t i1 = i0 + j->fin_chunk < j->nscales ? i0 + j->fin_chunk : j->nscales;
    ember__qscales_finish_range(j->s, j->raw, i0, i1, j->global, j->sbytes, NULL);
}

static void job_init(qjob *j, ember__cpu_state *st, const ember_tensor *q) {
    memset(j, 0, sizeof *j);
    const ember_qscheme *s = &q->scheme;
    geom_init(&j->g, q, s, &q->q);
    j->k = ember__cpu_qkern_select(st);
    j->s = s;
    j->vi = ember__qvalue_get_info(s->value);
    j->sd = ember__qscheme_scale_dtype(s);
    j->ssz = ember__scale_dtype_size(j->sd);
    j->two = ember__qscheme_two_level(s);
    j->global = 1.0f;
    j->vals = q->buf;
    j->sbytes = (uint8_t *)q->buf + q->q.scales_offset;
    j->row_bytes =
        s->store == EMBER_QSTORE_NATIVE ? j->g.Lc : ember__packed_row_bytes(s, (int64_t)j->g.Lc);
    j->per = (size_t)ember__qstore_per_unit(s);
    j->ub = (size_t)ember__qstore_unit_bytes(s);
    j->nscales = q->q.nscales;
    j->fin_chunk = 16384;
    atomic_init(&j->bad, 0);
}

static int64_t fin_tasks(const qjob *j) {
    return (int64_t)((j->nscales + j->fin_chunk - 1) / j->fin_chunk);
}

#define NON_FINITE_MSG                                                                             \
    "quantize: the input holds a NaN or Inf (only finite values can be quantized)"

ember_status ember__cpu_quantize(void *state, int dev, const ember_tensor *x,
                                 const ember_tensor *scales, ember_tensor *q) {
    (void)dev;
    ember__cpu_state *st = state;
    qjob j;
    job_init(&j, st, q);
    j.x = x->buf;
    const ember_qscheme *s = &q->scheme;
    const int dynamic = scales == NULL;

    if (dynamic && !j.two && s->block_rank > 0 && ember__qlayout_row_blocks(&q->q, q->rank)) {
        ember__cpu_parallel_for(st, j.g.ntasks, task_fused, &j);
        EMBER_FAIL_IF(atomic_load(&j.bad), EMBER_ERR_NON_FINITE, NON_FINITE_MSG);
        return EMBER_OK;
    }
    if (dynamic && s->block_rank > 0 && fused_cols_ok(&j, q)) {
        ember__cpu_parallel_for(st, j.g.ntasks, task_fused_cols, &j);
        EMBER_FAIL_IF(atomic_load(&j.bad), EMBER_ERR_NON_FINITE, NON_FINITE_MSG);
        return EMBER_OK;
    }

    /* (1) block maxima, or a finiteness check */
    const int per_block = dynamic && s->block_rank > 0;
    j.finite_only = !dynamic;
    const size_t na = per_block ? (q->q.nscales ? q->q.nscales : 1) : 1;
    j.amax = ember__malloc(na * sizeof *j.amax);
    EMBER_FAIL_IF(!j.amax, EMBER_ERR_OUT_OF_MEMORY, "quantize: no memory for %zu block maxima", na);
    for (size_t i = 0; i < na; i++)
        atomic_init(&j.amax[i], 0u);
    ember__cpu_parallel_for(st, j.g.ntasks, task_amax, &j);

    /* (2) raw scales -> stored scales */
    float one_raw;
    float *raw_buf = NULL;
    if (!per_block) {
        uint32_t b = atomic_load(&j.amax[0]);
        if (b >= NONFINITE_BITS) {
            ember__free(j.amax);
            EMBER_FAIL(EMBER_ERR_NON_FINITE, NON_FINITE_MSG);
        }
        if (dynamic) {
            one_raw = ember__raw_scale(ember__f32_from_bits(b), j.vi);
            j.raw = &one_raw;
        } else {
            j.raw = scales->buf;
        }
    } else {
        raw_buf = ember__malloc(j.nscales ? j.nscales * sizeof *raw_buf : 1);
        if (!raw_buf) {
            ember__free(j.amax);
            EMBER_FAIL(EMBER_ERR_OUT_OF_MEMORY, "quantize: no memory for %zu scales", j.nscales);
        }
        j.raw = raw_buf;
        ember__cpu_parallel_for(st, fin_tasks(&j), task_raw, &j);
        if (atomic_load(&j.bad)) {
            ember__free(raw_buf);
            ember__free(j.amax);
            EMBER_FAIL(EMBER_ERR_NON_FINITE, NON_FINITE_MSG);
        }
    }
    if (j.two) {
        j.global = ember__qscales_global(s, j.raw, j.nscales);
        ember__scale_encode(j.global, EMBER_SCALE_F32, (uint8_t *)q->buf + q->q.global_offset);
    }
    ember__cpu_parallel_for(st, fin_tasks(&j), task_finish, &j);
    ember__free(raw_buf);
    ember__free(j.amax);
    j.amax = NULL;
    j.raw = NULL;

    /* (3) values */
    ember__cpu_parallel_for(st, j.g.ntasks, task_quant, &j);
    return EMBER_OK;
}

static void task_dequant(void *arg, int64_t task, int thread) {
    (void)thread;
    qjob *j = arg;
    const geom *g = &j->g;
    float e[MAX_SUB_BLOCKS];
    uint8_t tmp[MAX_SUB];
    float lut[256];
    if (j->vi->is_fp)
        for (int i = 0; i < 256; i++)
            lut[i] = ember__fp_decode(j->s->value, (uint8_t)i);
    const int native = j->s->store == EMBER_QSTORE_NATIVE;
    size_t r0, r1, c0, c1, have[2] = {SIZE_MAX, 0};
    tile_of(g, task, &r0, &r1, &c0, &c1);
    for (size_t r = r0; r < r1; r++) {
        const size_t gb = gbase(g, r);
        for (size_t c = c0; c < c1; c += g->sub) {
            const size_t len = c1 - c < g->sub ? c1 - c : g->sub;
            eff_from_bytes(j, g->bl ? gb + c / g->bl : 0, nblocks(g, len), e, have);
            const uint8_t *codes = j->vals + r * g->Lc + c;
            if (!native) {
                j->k->unpack(j->s, j->vals + r * j->row_bytes + c / j->per * j->ub, len, tmp);
                codes = tmp;
            }
            float *out = j->out + r * g->Lc + c;
            if (!j->vi->is_fp) {
                j->k->dequant_int_blocks((const int8_t *)codes, len, g->bl, e, out);
            } else {
                const size_t bl = g->bl ? g->bl : len;
                for (size_t i = 0; i < len; i++)
                    out[i] = e[i / bl] * lut[codes[i]];
            }
        }
    }
}

ember_status ember__cpu_dequantize(void *state, int dev, const ember_tensor *q, ember_tensor *out) {
    (void)dev;
    ember__cpu_state *st = state;
    qjob j;
    job_init(&j, st, q);
    j.out = out->buf;
    if (j.two)
        j.global =
            ember__scale_decode((const uint8_t *)q->buf + q->q.global_offset, EMBER_SCALE_F32);
    ember__cpu_parallel_for(st, j.g.ntasks, task_dequant, &j);
    return EMBER_OK;
}

void ember__cpu_effective_scales(const ember__cpu_state *s, const ember_tensor *q, float *dst) {
    const ember__qlayout *L = &q->q;
    const uint8_t *bytes = q->buf;
    const float g =
        L->global_bytes ? ember__scale_decode(bytes + L->global_offset, EMBER_SCALE_F32) : 1.0f;
    ember__cpu_qkern_select(s)->scales_f32(bytes + L->scales_offset, L->nscales,
                                           ember__qscheme_scale_dtype(&q->scheme),
                                           L->global_bytes != 0, g, dst);
}
