/* backends/cpu/cpu_qmatmul.c: the CPU backend's q_matmul entry (dispatch/backend.h): the integer
 * path of burn's q_matmul on ember's int8 kernels (qgemm.h).
 *
 * (Q,Q): A [.., m, k] and B [.., k, n] with integer values (Q8F, Q8S, Q4F, Q4S, Q2F, Q2S; Native or
 * PackedU32 on the last axis). The products are exact int32 sums over each K chunk over which both
 * operands' effective scales are constant, then out = sum over chunks sa * sb * sum (F32 out):
 * burn's dequantize-then-matmul up to float rounding. Handled scale shapes: per-tensor, blocks of
 * any size along m (A) and n (B), and along K either the whole K or blocks dividing K whose
 * shorter length (the chunk) is a multiple of 32 and divides the longer. Anything else (fp8/fp4
 * values, partial K blocks, chunks not a multiple of 32, packing off the last axis, a chunk of
 * 2^17 or more values, whose int32 sum could overflow) is declined
 * with EMBER_ERR_QUANT_UNSUPPORTED (nothing recorded) and the dispatcher falls back to burn's
 * dequantize + float matmul.
 *
 * (F,Q) / (Q,F): burn keeps the float operand float. By default (F,Q) with an F32 lhs (any
 * number of rows on the AVX-512 and AMX tiers, up to 256 on AVX2, 64 below) against 8-bit
 * Native or 4-bit PackedU32 weights runs the fused float path (fq_matmul.c: each weight
 * dequantized in registers as it is read, f32 sums; no dequantized copy); the other cases are
 * declined, for the dispatcher's dequantize + OpenBLAS path. (Q,Q) whose B scales change along K
 * faster than every 32 rows (burn's per_block([32]) on a [d_in, d_out] weight) runs the fused
 * path on A's dequantized floats (float_lhs_fused). With ember_options.dynamic_activation_quant
 * (opt-in, LOSSY) the float operand is quantized on the fly to Q8S, symmetric, per row of a float A
 * (per column of a float B): scale = max|x| / 127, q = round(x / scale); then the integer kernel
 * (W8A8). The error is that of an 8-bit quantization of the activations, on top of the weights'
 * own.
 *
 * Weight pre-packing: the first (Q,Q) call (or (F,Q) under dynamic_activation_quant) packs each
 * matrix of B into the kernel layout (qgemm.h) and keeps it in the tensor's pack cache until the
 * tensor is freed. Exception: a first call with few rows (m <= 128, 8-bit Native B, one K chunk)
 * multiplies B as it is stored (ember__qgemm_direct) and only marks the tensor; the second use
 * packs it. A call that fails leaves the cache as it was. Memory cost per [k, n] matrix:
 * roundup(k, 64) * roundup(n, 32) bytes for 8-bit values (half that for Q4 and Q2, which are kept
 * as nibbles), plus 4 bytes (2 when every effective scale is an f16) per column per K chunk for
 * the scales: about 1x the Q8 tensor, 1x-1.25x the Q4 tensor. A call whose scale chunking differs
 * from the cached one packs into a temporary instead. */
#include <math.h>
#include <string.h>

#include "../../quant/quant_impl.h"
#include "cpu_quant.h"
#include "fq_matmul.h"
#include "qgemm.h"

#define QCACHE_KIND 0x51384201 /* "Q8B" v1: data is a qcache */
#define QCACHE_SEEN 0x51384200 /* used once, unpacked (a decode-sized first call); data NULL */

typedef struct qcache {
    int64_t nmat, kc;
    ember__qpack p[];
} qcache;

static void qcache_release(void *state, void *data) {
    (void)state;
    qcache *c = data;
    for (int64_t i = 0; i < c->nmat; i++)
        ember__qpack_free(&c->p[i]);
    ember__free(c);
}

static int int_value(const ember_qscheme *s) {
    switch (s->value) {
    case EMBER_Q8F:
    case EMBER_Q8S:
    case EMBER_Q4F:
    case EMBER_Q4S:
    case EMBER_Q2F:
    case EMBER_Q2S:
        break;
    default:
        return 0;
    }
    if (s->mode != EMBER_QMODE_SYMMETRIC)
        return 0;
    if (s->store == EMBER_QSTORE_NATIVE)
        return ember__qvalue_get_info(s->value)->bits == 8;
    return s->store == EMBER_QSTORE_PACKED_U32 && s->packing_dim == 0;
}

/* The K extent over which q's scale is constant along `axis` (rank-1 for A, rank-2 for B), or
 * -1 when it does not tile K. */
static int64_t k_block(const ember_tensor *q, int axis, int64_t k) {
    int64_t b = q->q.grid_rank != q->rank ? k : q->q.block_full[axis];
    if (b >= k)
        return k;
    return k % b == 0 ? b : -1;
}

/* The common chunk of two K extents (each k or a divisor of k), or -1. */
static int64_t chunk_of(int64_t la, int64_t lb, int64_t k) {
    int64_t lo = la < lb ? la : lb, hi = la < lb ? lb : la;
    if (lo < 0 || hi % lo != 0)
        return -1;
    if (lo == k)
        return 0; /* one chunk */
    return lo % 32 == 0 ? lo : -1;
}

/* Row access to a quantized operand's values as int8. */
typedef struct qsrc {
    const ember_tensor *t;
    const uint8_t *base; /* the values */
    int64_t last;        /* the last axis length */
    size_t row_bytes;
    int64_t row0; /* first row of this matrix */
    /* packed values to int8: the CPU quant tier's unpack (AVX-512: 64 values at a time; the
     * same bytes as ember__unpack_codes, test_quant_props) */
    void (*unpack)(const ember_qscheme *s, const uint8_t *src, size_t n, uint8_t *codes);
} qsrc;

static void qsrc_init(qsrc *q, const ember_tensor *t, int64_t elem_off, const ember__cpu_state *s) {
    q->t = t;
    q->unpack = ember__cpu_qkern_select(s)->unpack;
    q->base = t->buf;
    q->last = t->shape[t->rank - 1];
    q->row_bytes = t->scheme.store == EMBER_QSTORE_NATIVE
                       ? (size_t)q->last
                       : ember__packed_row_bytes(&t->scheme, q->last);
    q->row0 = elem_off / q->last;
}

/* values [j0, j0 + nj) of row r (j0 a multiple of 16 when packed) */
static void qsrc_row(const qsrc *q, int64_t r, int64_t j0, int64_t nj, int8_t *dst) {
    const uint8_t *row = q->base + (size_t)(q->row0 + r) * q->row_bytes;
    if (q->t->scheme.store == EMBER_QSTORE_NATIVE) {
        memcpy(dst, row + j0, (size_t)nj);
        return;
    }
    const int bits = ember__qvalue_get_info(q->t->scheme.value)->bits;
    q->unpack(&q->t->scheme, row + (size_t)j0 * (size_t)bits / 8, (size_t)nj, (uint8_t *)dst);
}

static void qsrc_row_cb(const void *src, int64_t kk, int64_t j0, int64_t nj, int8_t *dst) {
    qsrc_row(src, kk, j0, nj, dst);
}

/* A float B column-quantized (dynamic activation quant of a float rhs) */
typedef struct fsrc {
    const int8_t *q; /* [k][n] */
    int64_t n;
} fsrc;

static void fsrc_row_cb(const void *src, int64_t kk, int64_t j0, int64_t nj, int8_t *dst) {
    const fsrc *f = src;
    memcpy(dst, f->q + kk * f->n + j0, (size_t)nj);
}

/* Pack matrix `mat` of quantized B (elements from b_off) with chunk kc; scales from eff. */
static ember_status pack_qb(ember__cpu_state *s, const ember_tensor *b, const float *eff,
                            int64_t b_off, int64_t k, int64_t n, int64_t kc, ember__qpack *p) {
    const int64_t nch = kc ? k / kc : 1;
    /* a chunk's first row holds its scales; along a row, the block index grows by one every
     * block_full[last] columns (the grid's last axis has stride 1) */
    const int64_t bl = b->q.grid_rank == b->rank ? b->q.block_full[b->rank - 1] : 0;
    const int64_t krows = kc ? kc : k; /* a chunk's K rows */
    const size_t base = ember__block_of(&b->q, b->rank, b->shape, (size_t)b_off);
    float *sb = NULL;
    const float *sbp;
    if (bl == 1 && (nch == 1 || ember__block_of(&b->q, b->rank, b->shape,
                                                (size_t)(b_off + krows * n)) == base + (size_t)n)) {
        /* a scale per column and chunk, laid out as the chunks' rows: eff itself ([32, 1] blocks:
         * copying it cost 2.9 ms for 1.4 M scales) */
        sbp = eff + base;
    } else {
        sb = ember__cpu_temp_get(s, (size_t)(nch * n) * sizeof(float));
        EMBER_FAIL_IF(!sb, EMBER_ERR_OUT_OF_MEMORY, "cpu q_matmul: no memory for the rhs scales");
        for (int64_t c = 0; c < nch; c++) {
            const size_t bc =
                ember__block_of(&b->q, b->rank, b->shape, (size_t)(b_off + c * krows * n));
            for (int64_t j = 0; j < n; j++)
                sb[c * n + j] = eff[bc + (bl ? (size_t)(j / bl) : 0)];
        }
        sbp = sb;
    }
    qsrc src;
    qsrc_init(&src, b, b_off, s);
    const int bits = ember__qvalue_get_info(b->scheme.value)->bits == 8 ? 8 : 4;
    ember_status st;
    if (b->scheme.store == EMBER_QSTORE_NATIVE) /* int8 rows read in place */
        st = ember__qpack_b_plain(s, p, k, n, n, kc, (const int8_t *)b->buf + b_off, sbp);
    else if (ember__qvalue_get_info(b->scheme.value)->bits == 4) /* nibbles read in place */
        st = ember__qpack_b_plain4(s, p, k, n, (int64_t)src.row_bytes, kc,
                                   src.base + (size_t)src.row0 * src.row_bytes, sbp);
    else
        st = ember__qpack_b_mt(s, p, k, n, kc, bits, qsrc_row_cb, &src, sbp);
    if (sb)
        ember__cpu_temp_put(s, sb);
    return st;
}

/* The packed matrices of B, from the cache (filled on first use) or, when the cache holds
 * another chunking, into *tmp (caller frees). */
static ember_status cached_pack(ember__cpu_state *s, const ember_tensor *b, int64_t k, int64_t n,
                                int64_t kc, qcache **out, qcache **tmp, int *created) {
    ember_tensor *bt = (ember_tensor *)b; /* the cache is mutable state of a const handle */
    *out = *tmp = NULL;
    *created = 0;
    const int64_t nmat = (int64_t)(b->numel / (size_t)(k * n));
    pthread_mutex_lock(&bt->pack.lock);
    qcache *c = bt->pack.kind == QCACHE_KIND ? bt->pack.data : NULL;
    if (c && c->kc == kc) {
        pthread_mutex_unlock(&bt->pack.lock);
        *out = c;
        return EMBER_OK;
    }
    ember_status st = EMBER_OK;
    float *eff = ember__cpu_temp_get(s, b->q.nscales * sizeof(float));
    qcache *nc = ember__calloc(1, sizeof *nc + (size_t)nmat * sizeof(ember__qpack));
    if (!eff || !nc) {
        ember__cpu_temp_put(s, eff);
        ember__free(nc);
        pthread_mutex_unlock(&bt->pack.lock);
        EMBER_FAIL(EMBER_ERR_OUT_OF_MEMORY, "cpu q_matmul: no memory to pack the rhs");
    }
    nc->kc = kc;
    ember__cpu_effective_scales(s, b, eff);
    for (int64_t i = 0; st == EMBER_OK && i < nmat; i++) {
        st = pack_qb(s, b, eff, i * k * n, k, n, kc, &nc->p[i]);
        if (st == EMBER_OK)
            nc->nmat = i + 1;
    }
    ember__cpu_temp_put(s, eff);
    if (st != EMBER_OK) {
        qcache_release(NULL, nc);
        pthread_mutex_unlock(&bt->pack.lock);
        return st;
    }
    if (!bt->pack.data) {
        size_t bytes = 0;
        for (int64_t i = 0; i < nmat; i++)
            bytes += ember__qpack_bytes(&nc->p[i]);
        bt->pack.data = nc;
        bt->pack.bytes = bytes;
        bt->pack.kind = QCACHE_KIND;
        bt->pack.release = qcache_release;
        *out = nc;
        *created = 1;
    } else {
        *tmp = *out = nc;
    }
    pthread_mutex_unlock(&bt->pack.lock);
    return EMBER_OK;
}

/* A as int8 rows (m x k) and its scales sa[i * nch + c]. When A is Native int8 the values are
 * used in place (*rows points into the buffer); else *own is the unpacked copy. */
static ember_status prepare_qa(const ember_tensor *a, const float *effa, int64_t a_off, int64_t m,
                               int64_t k, int64_t kc, const int8_t **rows, int8_t **own,
                               float *sa) {
    const int64_t nch = kc ? k / kc : 1;
    *own = NULL;
    if (a->scheme.store == EMBER_QSTORE_NATIVE) {
        *rows = (const int8_t *)a->buf + a_off;
    } else {
        int8_t *u = ember__malloc((size_t)(m * k));
        EMBER_FAIL_IF(!u, EMBER_ERR_OUT_OF_MEMORY, "cpu q_matmul: no memory to unpack the lhs");
        qsrc src;
        qsrc_init(&src, a, a_off, NULL);
        for (int64_t i = 0; i < m; i++)
            qsrc_row(&src, i, 0, k, u + i * k);
        *rows = u;
        *own = u;
    }
    for (int64_t i = 0; i < m; i++)
        for (int64_t c = 0; c < nch; c++)
            sa[i * nch + c] = effa[ember__block_of(&a->q, a->rank, a->shape,
                                                   (size_t)(a_off + i * k + c * (kc ? kc : k)))];
    return EMBER_OK;
}

/* A first call with few rows (m <= 128) on an 8-bit Native B with one K chunk runs on B as it is
 * stored (ember__qgemm_direct: AMX, or AVX-512 VNNI up to 16 rows, 64 for a B of up to 1 M
 * values): packing all of B into a fresh buffer would cost more than the product.
 * The tensor is marked, and its next use packs it (a weight used once is never packed). */
static int direct_first_call(const ember_tensor *b, int64_t m, int64_t nch) {
    if (m > 128 || nch != 1 || b->scheme.store != EMBER_QSTORE_NATIVE)
        return 0;
    ember_tensor *bt = (ember_tensor *)b;
    pthread_mutex_lock(&bt->pack.lock);
    int first = bt->pack.data == NULL && bt->pack.kind != QCACHE_SEEN;
    pthread_mutex_unlock(&bt->pack.lock);
    return first;
}

static ember_status run_direct(ember__cpu_state *s, const ember__gemm *g, const ember_tensor *a,
                               const ember_tensor *b, const float *effa, ember_tensor *out,
                               int64_t m, int64_t n, int64_t k, float *sa) {
    float *eff = ember__malloc(b->q.nscales * sizeof(float));
    float *sb = ember__malloc((size_t)n * sizeof(float));
    ember_status st = eff && sb ? EMBER_OK : EMBER_ERR_OUT_OF_MEMORY;
    if (st == EMBER_OK)
        ember__cpu_effective_scales(s, b, eff);
    for (int64_t bi = 0; st == EMBER_OK && bi < g->batch; bi++) {
        const int8_t *rows = NULL;
        int8_t *own = NULL;
        st = prepare_qa(a, effa, g->a_off[bi], m, k, 0, &rows, &own, sa);
        for (int64_t j = 0; st == EMBER_OK && j < n; j++)
            sb[j] = eff[ember__block_of(&b->q, b->rank, b->shape, (size_t)(g->b_off[bi] + j))];
        if (st == EMBER_OK) {
            const int8_t *bb = (const int8_t *)b->buf + g->b_off[bi];
            float *cc = (float *)out->buf + bi * m * n;
            st = ember__qgemm_direct(s, m, n, k, rows, k, sa, bb, n, sb, cc, NULL, n);
        }
        ember__free(own);
    }
    ember__free(eff);
    ember__free(sb);
    if (st == EMBER_ERR_OUT_OF_MEMORY)
        EMBER_FAIL(st, "cpu q_matmul: out of memory");
    if (st == EMBER_OK) {
        ember_tensor *bt = (ember_tensor *)b;
        pthread_mutex_lock(&bt->pack.lock);
        if (!bt->pack.data)
            bt->pack.kind = QCACHE_SEEN;
        pthread_mutex_unlock(&bt->pack.lock);
    }
    return st;
}

/* B's scales change along K faster than the integer kernels can take (blocks of fewer than 32 K
 * rows, e.g. burn's per_block([32]) on a [d_in, d_out] weight: a scale per 32 columns of each K
 * row): no int32 sum spans more than one scale. The product is then burn's float one, through
 * the fused path (fq_matmul.c) where it takes B: a quantized A dequantized first (the same floats
 * as ember_dequantize, m x k of them), a float A (dynamic_activation_quant, which cannot help
 * here) as it is. EMBER_ERR_QUANT_UNSUPPORTED (nothing done) when the fused path does not take
 * B: the dispatcher dequantizes both operands, as before. Measured (Zen 5, 2 threads, 4096 x
 * 11008 weights in blocks [1, 32] with F16 scales, Q8S activations per tensor, the build before
 * and this one): 1 row Q8S 15.4 -> 1.53 ms, Q4S 15.3 -> 1.00; 128 rows 68.0 -> 38.3 and 66.9 ->
 * 35.8 (blocks [32, 1], which the integer kernels take: 0.27-0.77 and 9.0-9.6 ms). */
static ember_status float_lhs_fused(ember__cpu_state *s, const ember__gemm *g,
                                    const ember_tensor *a, const ember_tensor *b,
                                    ember_tensor *out) {
    if (a->dtype != EMBER_QFLOAT)
        return ember__cpu_fq_matmul(s, g, a, b, out);
    ember_tensor af; /* A's floats: only dtype and buf are read */
    memset(&af, 0, sizeof af);
    af.ctx = a->ctx;
    af.device = a->device;
    af.dtype = EMBER_F32;
    af.rank = a->rank;
    memcpy(af.shape, a->shape, sizeof af.shape);
    af.numel = a->numel;
    af.nbytes = a->numel * sizeof(float);
    af.buf = ember__cpu_temp_get(s, af.nbytes);
    EMBER_FAIL_IF(!af.buf, EMBER_ERR_OUT_OF_MEMORY, "cpu q_matmul: no memory for the lhs floats");
    ember_status st = ember__cpu_dequantize(s, 0, a, &af);
    if (st == EMBER_OK)
        st = ember__cpu_fq_matmul(s, g, &af, b, out);
    ember__cpu_temp_put(s, af.buf);
    return st;
}

ember_status ember__cpu_q_matmul(void *state, int dev, const ember__gemm *g, const ember_tensor *a,
                                 const ember_tensor *b, ember_tensor *out) {
    (void)dev;
    ember__cpu_state *s = state;
    const int aq = a->dtype == EMBER_QFLOAT, bq = b->dtype == EMBER_QFLOAT;
    const int64_t m = g->m, n = g->n, k = g->k;
    if (g->trans_a || g->trans_b || m <= 0 || n <= 0 || k <= 0)
        return EMBER_ERR_QUANT_UNSUPPORTED;
    if ((aq && !int_value(&a->scheme)) || (bq && !int_value(&b->scheme)))
        return EMBER_ERR_QUANT_UNSUPPORTED;
    if (!aq && bq && !s->ctx->opts.dynamic_activation_quant)
        return ember__cpu_fq_matmul(s, g, a, b, out); /* burn's float path, fused where it fits */
    if ((!aq || !bq) && !s->ctx->opts.dynamic_activation_quant)
        return EMBER_ERR_QUANT_UNSUPPORTED;
    if ((!aq && a->dtype != EMBER_F32) || (!bq && b->dtype != EMBER_F32))
        return EMBER_ERR_QUANT_UNSUPPORTED;
    const int64_t la = aq ? k_block(a, a->rank - 1, k) : k;
    const int64_t lb = bq ? k_block(b, b->rank - 2, k) : k;
    const int64_t kc = chunk_of(la, lb, k);
    /* int32 holds every chunk sum while chunk * 128 * 128 < 2^31 */
    if (kc < 0 || (kc ? kc : k) > ((int64_t)1 << 17) - 1)
        return bq ? float_lhs_fused(s, g, a, b, out) : EMBER_ERR_QUANT_UNSUPPORTED;
    const int64_t nch = kc ? k / kc : 1;
    const ember__qtier tier = ember__cpu_tier(s);

    float *effa = NULL, *sa = ember__malloc((size_t)(m * nch) * sizeof(float));
    int8_t *aq8 = NULL; /* dynamic quant of a float A */
    const ember__cpu_qkern *qk = ember__cpu_qkern_select(s);
    ember_status st = EMBER_OK;
    if (!sa)
        EMBER_FAIL(EMBER_ERR_OUT_OF_MEMORY, "cpu q_matmul: no memory for the lhs scales");
    if (aq) {
        effa = ember__malloc(a->q.nscales * sizeof(float));
        if (effa)
            ember__cpu_effective_scales(s, a, effa);
        else
            st = EMBER_ERR_OUT_OF_MEMORY;
    } else { /* from the context's buffer cache: fresh heap pages fault in every call */
        aq8 = ember__cpu_temp_get(s, (size_t)(m * k));
        if (!aq8)
            st = EMBER_ERR_OUT_OF_MEMORY;
    }
    qcache *pc = NULL, *ptmp = NULL;
    int8_t *bq8 = NULL;
    float *bsc = NULL;
    uint32_t *bmax = NULL; /* a float rhs's column maxima, as f32 bits */
    int created = 0;
    if (st == EMBER_OK && aq && bq && direct_first_call(b, m, nch)) {
        st = run_direct(s, g, a, b, effa, out, m, n, k, sa);
        if (st != EMBER_ERR_QUANT_UNSUPPORTED) {
            ember__free(effa);
            ember__free(sa);
            return st;
        }
        st = EMBER_OK; /* no direct kernel here: pack */
    }
    if (st == EMBER_OK && bq)
        st = cached_pack(s, b, k, n, kc, &pc, &ptmp, &created);
    if (st == EMBER_OK && !bq) {
        bq8 = ember__cpu_temp_get(s, (size_t)(k * n));
        bsc = ember__malloc((size_t)(nch * n) * sizeof(float));
        bmax = ember__malloc((size_t)n * sizeof(uint32_t));
        if (!bq8 || !bsc || !bmax)
            st = EMBER_ERR_OUT_OF_MEMORY;
    }
    if (st == EMBER_ERR_OUT_OF_MEMORY)
        ember__fail(st, __FILE__, __func__, __LINE__, "cpu q_matmul: out of memory");

    float *C = out->buf;
    for (int64_t bi = 0; st == EMBER_OK && bi < g->batch; bi++) {
        const int8_t *rows = NULL;
        int8_t *own = NULL;
        if (aq) {
            st = prepare_qa(a, effa, g->a_off[bi], m, k, kc, &rows, &own, sa);
            if (st != EMBER_OK)
                break;
        } else {
            /* each row by the quant tier's kernels: its largest magnitude, then
             * clamp(round(x / sc), -127, 127) with sc = amax / 127, the bytes of ember_quantize
             * with a block per row (test_w8a8_rows). A value loop with roundf took 3.3 ms of a 128
             * x 4096 x 11008 call (Zen 5), and its fmaxf passed over a NaN, which then went to an
             * int8 conversion. */
            const float *x = (const float *)a->buf + g->a_off[bi];
            for (int64_t i = 0; i < m; i++) {
                uint32_t mb;
                qk->amax_blocks(x + i * k, (size_t)k, 0, &mb);
                if (mb >= 0x7f800000u) { /* NaN / Inf: burn's float path says what they give */
                    st = EMBER_ERR_QUANT_UNSUPPORTED;
                    break;
                }
                float amax;
                memcpy(&amax, &mb, sizeof amax);
                const float sc = amax > 0.0f ? amax / 127.0f : 1.0f;
                qk->quant_int_blocks(x + i * k, (size_t)k, 0, &sc, -127.0f, 127.0f, aq8 + i * k);
                for (int64_t c = 0; c < nch; c++)
                    sa[i * nch + c] = sc;
            }
            if (st != EMBER_OK)
                break;
            rows = aq8;
        }
        ember__qpack tmp;
        const ember__qpack *p;
        int own_pack = 0;
        if (bq) {
            p = &pc->p[g->b_off[bi] / (k * n)];
        } else {
            /* each column's largest magnitude (the quant tier's kernel, a row at a time, as f32
             * bits; fmaxf passed over a NaN), its scale, then the values row by row */
            const float *x = (const float *)b->buf + g->b_off[bi];
            memset(bmax, 0, (size_t)n * sizeof *bmax);
            for (int64_t kk = 0; kk < k; kk++)
                qk->amax_acc(x + kk * n, (size_t)n, bmax);
            for (int64_t j = 0; j < n; j++) {
                if (bmax[j] >= 0x7f800000u) /* NaN / Inf: burn's float path */
                    st = EMBER_ERR_QUANT_UNSUPPORTED;
                float amax;
                memcpy(&amax, &bmax[j], sizeof amax);
                bsc[j] = amax > 0.0f ? amax / 127.0f : 1.0f;
            }
            if (st != EMBER_OK) {
                ember__free(own);
                break;
            }
            for (int64_t c = 1; c < nch; c++)
                memcpy(bsc + c * n, bsc, (size_t)n * sizeof(float));
            for (int64_t kk = 0; kk < k; kk++)
                qk->quant_int_blocks(x + kk * n, (size_t)n, 1, bsc, -127.0f, 127.0f, bq8 + kk * n);
            fsrc f = {bq8, n};
            st = ember__qpack_b_mt(s, &tmp, k, n, kc, 8, fsrc_row_cb, &f, bsc);
            p = &tmp;
            own_pack = st == EMBER_OK;
        }
        if (st == EMBER_OK)
            st = ember__qgemm(s, tier, m, rows, k, sa, p, C + bi * m * n, n);
        if (own_pack)
            ember__qpack_free(&tmp);
        ember__free(own);
    }
    if (ptmp)
        qcache_release(NULL, ptmp);
    if (st != EMBER_OK && created) { /* a failed call leaves the tensor as it found it */
        ember_tensor *bt = (ember_tensor *)b;
        pthread_mutex_lock(&bt->pack.lock);
        if (bt->pack.data == pc) {
            qcache_release(NULL, pc);
            bt->pack.data = NULL;
            bt->pack.bytes = 0;
            bt->pack.kind = 0;
            bt->pack.release = NULL;
        }
        pthread_mutex_unlock(&bt->pack.lock);
    }
    ember__free(effa);
    ember__free(sa);
    ember__cpu_temp_put(s, aq8);
    ember__cpu_temp_put(s, bq8);
    ember__free(bmax);
    ember__free(bsc);
    return st;
}
