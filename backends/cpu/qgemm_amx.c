/* backends/cpu/qgemm_amx.c: the AMX tier. 32 x 32 output blocks on four int32 accumulator
 * tiles (tmm0-3), two A tiles (tmm4-5, 16 rows x 64 k from the tile-blocked packed A) and two B
 * tiles (tmm6-7, the packed B rows as they are), multiplied with TDPBSUD (signed A x biased
 * unsigned B). K steps of 64, or 32 when the scale blocks along K are 32 long. 4-bit B is
 * unpacked one 32-column panel at a time into a per-thread buffer (32 x kp bytes), never whole.
 * First calls of 2..128 rows multiply B as it is stored (ember__qdirect_amx, below): B staged
 * chunk by chunk in a permuted tile layout, signed, with TDPBSSD.
 *
 * The tile configuration is loaded through inline asm taking the whole struct as a memory operand:
 * GCC 12 was seen dropping the stores that fill it before _tile_loadconfig (notes/cpu.md). */
#include <immintrin.h>
#include <string.h>

#include "qgemm.h"

typedef struct tilecfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

_Static_assert(sizeof(tilecfg) == 64, "the AMX tile configuration is 64 bytes");

/* ldtilecfg from a filled configuration (inline asm on the whole struct: see the top) */
static void tile_load_config(const tilecfg *cfg) {
    __asm__ volatile("ldtilecfg %0" : : "m"(*cfg) : "memory");
}

static void tile_config(int ks) {
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    for (int t = 4; t < 6; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = (uint16_t)ks;
    }
    for (int t = 6; t < 8; t++) {
        cfg.rows[t] = (uint8_t)(ks / 4);
        cfg.colsb[t] = 64;
    }
    tile_load_config(&cfg);
}

/* One K step of a 2 x 2 block: A tiles (tmm4, tmm5) at A0 and A1, B tiles (tmm6, tmm7) at B0 and
 * B1, row strides LDA and LDB, products into tmm0-3 with DP (_tile_dpbsud on biased unsigned B,
 * _tile_dpbssd on signed B). Loads and products interleave so that the tile unit starts on the
 * first pair while the others load. */
#define AMX_STEP22(DP, A0, A1, LDA, B0, B1, LDB)                                                   \
    do {                                                                                           \
        _tile_loadd(4, (A0), (LDA));                                                               \
        _tile_loadd(6, (B0), (LDB));                                                               \
        DP(0, 4, 6);                                                                               \
        _tile_loadd(7, (B1), (LDB));                                                               \
        DP(1, 4, 7);                                                                               \
        _tile_loadd(5, (A1), (LDA));                                                               \
        DP(2, 5, 6);                                                                               \
        DP(3, 5, 7);                                                                               \
    } while (0)
/* The step of the K-sliced loops (block_panels, block_pipelined), software-pipelined: A's tiles
 * come through TILELOADDT1 (a hint that the data is used once: it is not kept in L1, where the B
 * slice is reused while each A piece passes once). AMX_LOAD22_SA loads the first step's operand
 * tiles; AMX_STEP22_SA_PIPE issues one step's products and reloads each operand tile with the next
 * step's (at A0N, A1N, B0N, B1N, when MORE) as soon as its last product of this step is issued,
 * instead of at the top of the next step: a product waits behind fewer loads. Tile-loop
 * microbenchmark (2 threads, K slice 1024, 8 row blocks, 16 panels): 8.0-9.0 against 7.5-8.4 TOPS,
 * with C streamed out 7.6-8.7 against 6.8-7.9. In the product, bench_qgemm alternated: 2048^3
 * median 4811 against 4674 GOPS (ten runs each), 1024^3 +2%, 128 x 4096^2 +2.5%. The pipeline
 * also runs across row blocks: a block's last step loads the next block's first operand tiles
 * (the same B slice), so they arrive while the sums are stored and the next block's loaded.
 * bench_qgemm alternated, medians: 2048^3 4383 against 4222 GOPS (ten runs each), 4096^3 4742
 * against 4618 (five), 128 x 4096^2 3080 against 3028 (six), 1024^3 3460 against 3440 (twelve). */
#define AMX_LOAD22_SA(A0, A1, LDA, B0, B1, LDB)                                                    \
    do {                                                                                           \
        _tile_stream_loadd(4, (A0), (LDA));                                                        \
        _tile_loadd(6, (B0), (LDB));                                                               \
        _tile_loadd(7, (B1), (LDB));                                                               \
        _tile_stream_loadd(5, (A1), (LDA));                                                        \
    } while (0)
#define AMX_STEP22_SA_PIPE(DP, MORE, A0N, A1N, LDA, B0N, B1N, LDB)                                 \
    do {                                                                                           \
        DP(0, 4, 6);                                                                               \
        DP(1, 4, 7);                                                                               \
        if (MORE)                                                                                  \
            _tile_stream_loadd(4, (A0N), (LDA));                                                   \
        DP(2, 5, 6);                                                                               \
        if (MORE)                                                                                  \
            _tile_loadd(6, (B0N), (LDB));                                                          \
        DP(3, 5, 7);                                                                               \
        if (MORE) {                                                                                \
            _tile_loadd(7, (B1N), (LDB));                                                          \
            _tile_stream_loadd(5, (A1N), (LDA));                                                   \
        }                                                                                          \
    } while (0)

/* One K step of a 1 x 2 block (the thin kernels): A tile tmm4 at A0, B tiles tmm6 and tmm7 at B0
 * and B0 + 64 (row stride 128), products into tmm0 and tmm1 with DP. */
#define AMX_STEP12(DP, A0, LDA, B0)                                                                \
    do {                                                                                           \
        _tile_loadd(4, (A0), (LDA));                                                               \
        _tile_loadd(6, (B0), 128);                                                                 \
        DP(0, 4, 6);                                                                               \
        _tile_loadd(7, (B0) + 64, 128);                                                            \
        DP(1, 4, 7);                                                                               \
    } while (0)

/* the four accumulator tiles of a 32 x 32 block stored to / loaded from P (int32, row stride 32):
 * OP is _tile_stored or _tile_loadd */
#define AMX_ACC4(OP, P)                                                                            \
    do {                                                                                           \
        OP(0, (P), 128);                                                                           \
        OP(1, (P) + 16, 128);                                                                      \
        OP(2, (P) + 16 * 32, 128);                                                                 \
        OP(3, (P) + 16 * 32 + 16, 128);                                                            \
    } while (0)
#define AMX_STORE4(P) AMX_ACC4(_tile_stored, P)
#define AMX_LOAD4(P) AMX_ACC4(_tile_loadd, P)

/* the four accumulator tiles cleared */
#define AMX_ZERO4()                                                                                \
    do {                                                                                           \
        _tile_zero(0);                                                                             \
        _tile_zero(1);                                                                             \
        _tile_zero(2);                                                                             \
        _tile_zero(3);                                                                             \
    } while (0)

/* 4-bit 32-column panel -> the 8-bit layout [kp/4][2][64] (still biased by 8) */
static void unpack_panel(const ember__qpack *p, int64_t j, uint8_t *dst) {
    const int64_t kp = p->kp;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const uint8_t *src = p->b + (j / 32) * (kp / 8) * 128;
    for (int64_t r = 0; r < kp / 8; r++)
        for (int h = 0; h < 2; h++) {
            __m512i v = _mm512_load_si512(src + r * 128 + h * 64);
            _mm512_store_si512(dst + 2 * r * 128 + h * 64, _mm512_and_si512(v, m4));
            _mm512_store_si512(dst + (2 * r + 1) * 128 + h * 64,
                               _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
        }
}

/* nrows 4-bit rows of a 32-column panel (8 k each) -> 2 * nrows rows of the 8-bit layout
 * [.][2][64], signed (the bias of 8 removed), for TDPBSSD: no row-sum correction afterwards */
static inline __attribute__((always_inline)) void unpack_rows_signed(const uint8_t *src,
                                                                     int64_t nrows, uint8_t *dst) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
    for (int64_t r = 0; r < nrows; r++)
        for (int h = 0; h < 2; h++) {
            __m512i v = _mm512_load_si512(src + r * 128 + h * 64);
            _mm512_store_si512(dst + 2 * r * 128 + h * 64,
                               _mm512_sub_epi8(_mm512_and_si512(v, m4), eight));
            _mm512_store_si512(
                dst + (2 * r + 1) * 128 + h * 64,
                _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), eight));
        }
}

/* a whole 4-bit 32-column panel -> the 8-bit layout [kp/4][2][64], signed */
static void unpack_panel_signed(const ember__qpack *p, int64_t j, uint8_t *dst) {
    unpack_rows_signed(p->b + (j / 32) * (p->kp / 8) * 128, p->kp / 8, dst);
}

/* 8-bit 32-column panel -> the same layout, signed (the bias of 128 removed), for TDPBSSD */
static void signed_panel8(const ember__qpack *p, int64_t j, uint8_t *dst) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const uint8_t *src = p->b + (j / 32) * (p->kp / 4) * 128;
    for (int64_t o = 0; o < p->kp * 32; o += 64)
        _mm512_store_si512(dst + o, _mm512_xor_si512(_mm512_load_si512(src + o), bias));
}

/* One 32 x 32 block, one K chunk [k0, k1), int32 sums into out[32][32]. */
static void tile_block(const int8_t *a0, const int8_t *a1, const uint8_t *b0, const uint8_t *b1,
                       int64_t k0, int64_t k1, int ks, int32_t *out) {
    AMX_ZERO4();
    if (ks == 64) {
        for (int64_t k = k0; k < k1; k += 64) {
            AMX_STEP22(_tile_dpbsud, a0 + k * 32, a1 + k * 32, 64, b0 + k * 32, b1 + k * 32, 128);
        }
    } else {
        for (int64_t k = k0; k < k1; k += 32) {
            /* A blocks are 64 wide: the 32-k half sits at column offset k % 64 */
            const int64_t ao = (k / 64) * 2048 + (k % 64);
            AMX_STEP22(_tile_dpbsud, a0 + ao, a1 + ao, 64, b0 + k * 32, b1 + k * 32, 128);
        }
    }
    AMX_STORE4(out);
}

/* 32 floats of a row of C at o (columns past n masked off). Where C is large (jb->nt_store), a
 * full row piece on a 64-byte boundary is written with streaming stores: it skips the read for
 * ownership of each line of C and does not push the operands out of the caches. Measured (2
 * threads, same process, alternated, medians of 9, a 48 MiB buffer written between calls):
 * 2048^3 2579 -> 3477 GOPS, 4096^3 3283 -> 3764, 512 x 4096^2 3231 -> 3669; back to back
 * without the buffer 1024^3 2021 -> 2632, 128 x 4096^2 3217 -> 4086. The caller of
 * ember__cpu_parallel_for sees the rows after the kernel's _mm_sfence. */
static inline __attribute__((always_inline)) void
store_row(const ember__qjob *jb, float *o, __m512 x0, __m512 x1, __mmask16 k0m, __mmask16 k1m) {
    if (jb->nt_store && (k0m & k1m) == 0xffff && ((uintptr_t)o & 63) == 0) {
        _mm512_stream_ps(o, x0);
        _mm512_stream_ps(o + 16, x1);
    } else {
        _mm512_mask_storeu_ps(o, k0m, x0);
        _mm512_mask_storeu_ps(o + 16, k1m, x1);
    }
}

/* Scale rows [r0, r1) of a finished 32 x 32 int32 block (one chunk) into the float output. */
static inline __attribute__((always_inline)) void
epi_rows(const ember__qjob *jb, const int32_t *buf, int64_t i, int64_t j, int64_t r0, int64_t r1,
         __m512 s0, __m512 s1, __mmask16 k0m, __mmask16 k1m) {
    const int bias = jb->p->bias;
    for (int64_t r = r0; r < r1; r++) {
        __m512i corr = _mm512_set1_epi32(bias * jb->rs[i + r]);
        __m512 sar = _mm512_set1_ps(jb->sa[i + r]);
        __m512 x0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(buf + r * 32), corr));
        __m512 x1 =
            _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(buf + r * 32 + 16), corr));
        store_row(jb, jb->c + (i + r) * jb->ldc + j, _mm512_mul_ps(x0, _mm512_mul_ps(sar, s0)),
                  _mm512_mul_ps(x1, _mm512_mul_ps(sar, s1)), k0m, k1m);
    }
}

/* The 32 floats of C at row i, column j fetched for writing ahead of their scaling (a C written
 * with ordinary stores, job->pfw) */
static inline __attribute__((always_inline)) void fetch_c_row(const ember__qjob *jb, int64_t i,
                                                              int64_t j) {
    const char *o = (const char *)(jb->c + i * jb->ldc + j);
    __builtin_prefetch(o, 1, 3);
    __builtin_prefetch(o + 64, 1, 3);
}

/* One K chunk, float output (the common case), in the GotoBLAS order: the K extent is walked in
 * slices; within a slice every 32-column panel of the task's B is taken in turn, and its slice
 * (up to KSLICE_L1 x 32 bytes, 32 KiB) stays in L1 while every 32-row block of the task
 * multiplies it; the task's A slice (rows x slice) stays in L2 across the panels and reaches the
 * tiles through TILELOADDT1, which does not put it in L1 (each A piece is used once per panel:
 * with ordinary loads it pushed the B slice out of L1), and the int32 sums of all the task's
 * blocks wait in per-thread scratch between slices. The next B slice is prefetched into L2
 * meanwhile. In the last slice the f32 scaling of each block is spread over the K steps of the
 * next block of the same panel (vector work while the tile unit multiplies). This order serves K
 * in one slice, one row block, and tasks whose A is over PANEL_A_MAX; other tasks whose K takes
 * several slices run in panel order (block_panels, below). */
#define KSLICE 512
/* The K slice: the whole (padded) K up to KSLICE_L1, so that each 32 x 32 block accumulates in
 * its tiles from start to end (no int32 round trips through scratch, one drain per block);
 * beyond, slices of KSLICE_L1 up to K = 2048 and for products of 512 rows or more, slices of
 * KSLICE otherwise (the driver uses taller tasks beyond 2048, see qgemm_run). Measured against
 * the whole K up to 2048 and slices of 512 beyond, with ordinary A loads (one binary, calls back
 * to back, alternated, medians of 5-40, 2 threads, GOPS): 1024^3 4028 / 4076 -> 4867 / 4979
 * (A streamed only), 2048^3 4977 / 5002 -> 5642 / 5691, 4096^3 5572 -> 6037, 512 x 4096^2 5161
 * -> 5302, 128 x 11008 x 4096 5365 -> 5575; with 256 MiB written between calls 1024^3 2908 ->
 * 3138, 2048^3 4578 -> 5015. Slices of 1024 at 128 and 256 rows (K = 4096) lost with B coming
 * from memory (3299 -> 2862, 4181 -> 4002); streaming A alone there: 3172 -> 3272. */
#define KSLICE_L1 1024
/* 4-bit rows [kbeg, kend) of a 32-column panel -> the 8-bit layout at dst + kbeg * 32 */
static void unpack_slice(const ember__qpack *p, int64_t j, int64_t kbeg, int64_t kend,
                         uint8_t *dst) {
    const int64_t kp = p->kp;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const uint8_t *src = p->b + (j / 32) * (kp / 8) * 128;
    for (int64_t r = kbeg / 8; r < kend / 8; r++)
        for (int h = 0; h < 2; h++) {
            __m512i v = _mm512_load_si512(src + r * 128 + h * 64);
            _mm512_store_si512(dst + 2 * r * 128 + h * 64, _mm512_and_si512(v, m4));
            _mm512_store_si512(dst + (2 * r + 1) * 128 + h * 64,
                               _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
        }
}

/* The K steps [kbeg, kend) of the 32-column panel at column j as the tiles read them (K step
 * kbeg + x at the result + x * 32): 8-bit B as packed, 4-bit B unpacked into u first. */
static inline const uint8_t *panel_slice(const ember__qpack *p, int64_t j, int64_t kbeg,
                                         int64_t kend, uint8_t *u) {
    if (p->bits == 8)
        return p->b + (j / 32) * (p->kp / 4) * 128 + kbeg * 32;
    unpack_slice(p, j, kbeg, kend, u);
    return u + kbeg * 32;
}

/* The first operand tiles of a K slice starting at kbeg: row block i0's A tiles (tile-blocked
 * packed A of padded depth kp) and the slice's first B tiles at bs, bs + 64. */
static inline __attribute__((always_inline)) void row_first(const int8_t *a, int64_t i0, int64_t kp,
                                                            int64_t kbeg, const uint8_t *bs) {
    const int8_t *f0 = a + ember__qa_amx_off(i0, kp) + kbeg * 32;
    AMX_LOAD22_SA(f0, f0 + 1024, 64, bs, bs + 64, 128);
}

/* Step st of the `steps` of a row block (A tiles at a0, a0 + 1024) over the B slice at bs (K
 * slice from kbeg): this step's products, each operand tile then reloaded with the next step's;
 * after the last step, with the next row block's first (the same B slice) where next_rows, so
 * that they arrive while the sums are stored and the next block's sums loaded. */
static inline __attribute__((always_inline)) void row_step(int64_t st, int64_t steps,
                                                           const int8_t *a0, int64_t kp,
                                                           int64_t kbeg, const uint8_t *bs,
                                                           int next_rows) {
    if (st + 1 < steps) {
        const int64_t kn = kbeg + (st + 1) * 64;
        AMX_STEP22_SA_PIPE(_tile_dpbsud, 1, a0 + kn * 32, a0 + 1024 + kn * 32, 64,
                           bs + (st + 1) * 2048, bs + 64 + (st + 1) * 2048, 128);
    } else {
        const int8_t *n0 = a0 + ember__qa_amx_off(32, kp) + kbeg * 32;
        AMX_STEP22_SA_PIPE(_tile_dpbsud, next_rows, n0, n0 + 1024, 64, bs, bs + 64, 128);
    }
}

/* The cached product in panel order: each 32-column panel of the task is finished (all its K
 * slices, every row block) before the next, the sums of its row blocks waiting in scratch between
 * slices. Its B slice stays in L1 across the row blocks as in block_pipelined, and B is read as
 * one stream (a panel's slices lie one after the other, and the next panel after them); the
 * task's A (rows x K, at most PANEL_A_MAX) stays in L2 across the panels. The f32 scaling of a
 * finished panel's rows is spread evenly over every K step of the next panel: in block_pipelined
 * all of it falls in the last slice, and at 2048^3 (two slices of 1024) the stores of C to memory
 * then came at twice the rate and cost 10% (one binary, calls back to back: the scaling removed
 * altogether 5.5 -> 6.2 TOPS; with the whole K in one slice, where it is spread over every step,
 * 1%). Used where K takes two slices or more. Against block_pipelined, one binary, calls back to
 * back, alternated, medians of 5-30, 2 threads, GOPS: 2048^3 5442 / 5565 -> 5707 / 5779, 4096^3
 * 6006 -> 6204, 128 x 4096^2 3756 -> 4772; with 256 MiB written between calls (B from memory)
 * 2048^3 4933 / 4938 -> 5119 / 5278, 128 x 4096^2 3174 -> 3397. With K in one slice (1024^3) it
 * lost 2-7%: the sums of two panels in scratch crowd the 32 KiB B panel out of L1. Slices of 1024
 * here against 512 at 128 and 256 rows (K = 4096): 3687 / 3822 -> 4450 / 4672 and 4766 / 4617 ->
 * 5373 / 5185, B from memory level (3404 / 3540 -> 3362 / 3362, 4168 / 4104 -> 4235 / 4136). */
#define PANEL_A_MAX ((int64_t)1 << 20)
/* C rows fetched for writing this many rows ahead of the scaling (ordinary stores, job->pfw) */
#define PANEL_PFW_AHEAD 8
/* A finished panel waiting for its scaling: its sums (a 32 x 32 block per row block) in acc (NULL:
 * none yet), its first row i0, column j and rows, the rows scaled so far, B's scales and the
 * column masks. */
typedef struct panel_epi {
    int32_t (*acc)[32 * 32];
    int64_t i0, j, rows, done;
    __m512 s0, s1;
    __mmask16 k0, k1;
} panel_epi;

/* Rows [e->done, upto) of the waiting panel scaled into C; with job->pfw, the row PANEL_PFW_AHEAD
 * further fetched for writing. */
static inline __attribute__((always_inline)) void panel_epi_to(const ember__qjob *jb, panel_epi *e,
                                                               int64_t upto) {
    for (; e->acc && e->done < upto; e->done++) {
        const int64_t q = e->done;
        if (jb->pfw && q + PANEL_PFW_AHEAD < e->rows)
            fetch_c_row(jb, e->i0 + q + PANEL_PFW_AHEAD, e->j);
        epi_rows(jb, e->acc[q / 32], e->i0 + (q / 32) * 32, e->j, q % 32, q % 32 + 1, e->s0, e->s1,
                 e->k0, e->k1);
    }
}

static void block_panels(const ember__qjob *jb, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                         uint8_t *unp, int32_t (*acc)[32 * 32]) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp, KSL = KSLICE_L1;
    const int64_t nip = (i1 - i0 + 31) / 32, njp = (j1 - j0 + 31) / 32;
    const int64_t nkb = (kp + KSL - 1) / KSL;
    const int64_t rows = i1 - i0;           /* rows of C a panel finishes */
    const int64_t psteps = nip * (kp / 64); /* K steps of a panel, over its row blocks */
    const char *bend = (const char *)p->b + (p->np / 32) * (kp / 4) * 128;
    panel_epi e = {NULL, i0, 0, rows, 0, _mm512_setzero_ps(), _mm512_setzero_ps(), 0, 0};
    for (int64_t jp = 0; jp < njp; jp++) {
        const int64_t j = j0 + jp * 32;
        int32_t(*cur)[32 * 32] = acc + (jp % 2) * nip;
        uint8_t *u = unp + (jp % 2) * 32 * kp; /* 4-bit: two panels, one in use */
        int64_t sidx = 0;                      /* K steps of this panel done */
        for (int64_t kb = 0; kb < nkb; kb++) {
            const int64_t kbeg = kb * KSL, kend = kbeg + KSL < kp ? kbeg + KSL : kp;
            const int64_t steps = (kend - kbeg) / 64;
            const uint8_t *bs = panel_slice(p, j, kbeg, kend, u);
            /* the slice after this one in memory (this panel's next, or the next panel's first),
             * prefetched into L2 a piece per K step */
            const char *nx = p->bits == 8 ? (const char *)bs + (kend - kbeg) * 32 : NULL;
            int64_t per_step = 0;
            if (nx && nx < bend) {
                const int64_t nkend = kend + KSL < kp ? kend + KSL : kp;
                const int64_t nbytes = (kend < kp ? nkend - kend : (KSL < kp ? KSL : kp)) * 32;
                per_step = (nbytes / (nip * steps) + 63) & ~(int64_t)63;
            } else {
                nx = NULL;
            }
            row_first(jb->a, i0, kp, kbeg, bs);
            for (int64_t ii = 0; ii < nip; ii++) {
                const int64_t i = i0 + ii * 32;
                const int8_t *a0 = jb->a + ember__qa_amx_off(i, kp);
                int32_t *ac = cur[ii];
                if (kb == 0) {
                    AMX_ZERO4();
                } else {
                    AMX_LOAD4(ac);
                }
                const char *pfb = nx ? nx + ii * steps * per_step : NULL;
                for (int64_t st = 0; st < steps; st++, sidx++) {
                    row_step(st, steps, a0, kp, kbeg, bs, ii + 1 < nip);
                    if (pfb)
                        for (int64_t l = 0; l < per_step; l += 64)
                            if (pfb + st * per_step + l < bend)
                                _mm_prefetch(pfb + st * per_step + l, _MM_HINT_T1);
                    panel_epi_to(jb, &e, (sidx + 1) * rows / psteps);
                }
                AMX_STORE4(ac);
            }
        }
        /* this panel is scaled during the next one (any rows left of the previous first) */
        panel_epi_to(jb, &e, rows);
        e.acc = cur;
        e.j = j;
        e.done = 0;
        e.s0 = _mm512_loadu_ps((const float *)p->sb + j);
        e.s1 = _mm512_loadu_ps((const float *)p->sb + j + 16);
        e.k0 = ember__tail_mask16(p->n - j);
        e.k1 = ember__tail_mask16(p->n - j - 16);
        if (jb->pfw)
            for (int64_t q = 0; q < PANEL_PFW_AHEAD && q < rows; q++)
                fetch_c_row(jb, i0 + q, j);
    }
    panel_epi_to(jb, &e, rows);
}

static void block_pipelined(const ember__qjob *jb, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                            uint8_t *unp, int32_t (*acc)[32 * 32]) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp;
    int32_t buf[2][32 * 32] __attribute__((aligned(64)));
    if (i1 > jb->m)
        i1 = jb->m;
    if (j1 > p->n)
        j1 = p->n;
    const int64_t nip = (i1 - i0 + 31) / 32, njp = (j1 - j0 + 31) / 32;
    /* one row block (up to 32 rows) takes the whole K too: its B slices are used once, and
     * slices would only add the round trips of its sums. Measured at 32 x 4096^2 (2 threads,
     * one process, alternated, medians of 15): 1447 / 1574 / 1470 -> 1635 / 1715 / 1806 GOPS;
     * at 64 rows (two blocks) the slices stayed ahead (2336 / 2280 / 2490 against 2143 / 2250 /
     * 2177). */
    if (nip >= 2 && kp > KSLICE_L1 && nip * 32 * kp <= PANEL_A_MAX &&
        2 * nip * (int64_t)sizeof(acc[0]) <= (int64_t)EMBER__AMX_ACC_BYTES) {
        block_panels(jb, i0, i1, j0, j1, unp, acc);
        return;
    }
    const int64_t KSL =
        nip == 1 || kp <= KSLICE_L1 ? kp : (kp <= 2048 || jb->m >= 512 ? KSLICE_L1 : KSLICE);
    const int64_t nkb = (kp + KSL - 1) / KSL;
    for (int64_t kb = 0; kb < nkb; kb++) {
        const int64_t kbeg = kb * KSL, kend = kbeg + KSL < kp ? kbeg + KSL : kp;
        const int64_t steps = (kend - kbeg) / 64;
        const int last = kb == nkb - 1;
        const int64_t per = (32 + steps - 1) / steps; /* epilogue rows per K step */
        for (int64_t jp = 0; jp < njp; jp++) {
            const int64_t j = j0 + jp * 32;
            uint8_t *u = unp + (jp % 2) * 32 * kp; /* 4-bit: two panels, one in use */
            const uint8_t *bs = panel_slice(p, j, kbeg, kend, u);
            /* the B slice used next, prefetched into L2 a piece per K step of each row block */
            const char *nx = NULL;
            if (p->bits == 8) {
                if (jp + 1 < njp)
                    nx = (const char *)(p->b + ((j + 32) / 32) * (kp / 4) * 128 + kbeg * 32);
                else if (!last)
                    nx = (const char *)(p->b + (j0 / 32) * (kp / 4) * 128 + kend * 32);
            }
            const int64_t nxbytes =
                nx ? (jp + 1 < njp ? kend - kbeg : (kend + KSL < kp ? KSL : kp - kend)) * 32 : 0;
            const int64_t slice = nxbytes / nip, per_step = slice / steps;
            const int64_t nv = p->n - j;
            const __mmask16 k0m = ember__tail_mask16(nv), k1m = ember__tail_mask16(nv - 16);
            const __m512 s0 = _mm512_loadu_ps((const float *)p->sb + j);
            const __m512 s1 = _mm512_loadu_ps((const float *)p->sb + j + 16);
            int cur = 0;
            int64_t prev_i = -1, prev_rows = 0;
            row_first(jb->a, i0, kp, kbeg, bs);
            for (int64_t ii = 0; ii < nip; ii++) {
                const int64_t i = i0 + ii * 32;
                const int8_t *a0 = jb->a + ember__qa_amx_off(i, kp);
                const int32_t *pb = buf[cur ^ 1];
                int32_t *ac = acc[jp * nip + ii];
                const char *pfb = nx ? nx + ii * slice : NULL;
                if (kb == 0) {
                    AMX_ZERO4();
                } else {
                    AMX_LOAD4(ac);
                }
                for (int64_t st = 0; st < steps; st++) {
                    row_step(st, steps, a0, kp, kbeg, bs, ii + 1 < nip);
                    for (int64_t l = 0; l < per_step; l += 64)
                        _mm_prefetch(pfb + st * per_step + l, _MM_HINT_T1);
                    if (jb->pfw && last && st * per < 32) {
                        /* this block's rows of C, fetched for writing ahead of its epilogue
                         * (which runs during the next block's steps) */
                        const int64_t r0 = st * per, r1 = r0 + per < 32 ? r0 + per : 32;
                        for (int64_t r = r0; r < r1 && i + r < jb->m; r++)
                            fetch_c_row(jb, i + r, j);
                    }
                    if (last && prev_i >= 0 && st * per < prev_rows) {
                        int64_t r1 = st * per + per;
                        epi_rows(jb, pb, prev_i, j, st * per, r1 < prev_rows ? r1 : prev_rows, s0,
                                 s1, k0m, k1m);
                    }
                }
                int32_t *dst = last ? buf[cur] : ac;
                AMX_STORE4(dst);
                if (last) {
                    prev_i = i;
                    prev_rows = jb->m - i < 32 ? jb->m - i : 32;
                    cur ^= 1;
                }
            }
            if (prev_i >= 0)
                epi_rows(jb, buf[cur ^ 1], prev_i, j, 0, prev_rows, s0, s1, k0m, k1m);
        }
    }
}

/* ---- first calls with 2..128 rows: B as it is stored ----
 * B is read in K chunks of DAMX_KC rows, four rows at a time across the task's columns (up to
 * EMBER__DIRECT_W), interleaved in registers into groups of 4 k (qgemm_avx512.c,
 * ember__qdirect_stage; no bias: TDPBSSD multiplies signed by signed) and staged per thread. A
 * staged group is a B tile row: 16 consecutive groups of one register q of a 64-column piece
 * form a tile whose 16 columns are 16L + 4q + e (lane L, dword e), so the C tiles come out in
 * that order and the epilogue puts it right (ember__qdirect_order). The tile unit's work is small
 * at these row counts: the cost is reading and interleaving B once, which the AMX first-call
 * path did too but then shuffled 128-bit lanes into column order and kept its sums in scratch
 * per 512-deep slice; the VNNI kernel did the multiplies on the vector ports the staging needs.
 * Measured (bench_qgemm, 2 threads, K = N = 4096, first calls, three alternations against the
 * previous routing): 8 rows 189-211 -> 343-383 GOPS, 32 rows 750-765 -> 1091-1188 (oneDNN
 * without reorder beside them: 186-215 and 669-709). Chunks of 128 rows of B: 64 gave 490-970 at
 * 32 rows (the sums' round trips), 256 gave 899-1143.
 * A piece's staged groups lie one after another (a tile's rows 256 bytes apart), each piece 256
 * bytes further than the last one ends; until 2026-12-01 the groups were laid whole one after
 * another, so that a tile's 16 rows lay a group's width apart (8 KiB in a 2048-column pass), all
 * in one L1 set, and the taller tasks' 32 KiB piece could not stay in L1 across their row blocks;
 * A's rows, 4096 bytes apart at K = 4096, are now padded off that multiple (qgemm.c). On the H200
 * host's Xeon (loaded: AMX peak 4.2-5.9 TOPS; logs/2026-12-01-s22-dev1.txt and -dev2.txt), first
 * calls over oneDNN without reorder in the same run, seven rounds of each build (three without
 * the 256-byte skew, which read level): 128 x 4096^2 1.17-1.33 (median 1.19) -> 1.23-1.37
 * (1.26), 32 x 4096^2 1.41-1.57 (1.53) -> 1.40-1.66 (1.60), 8 x 4096^2 2.01-2.20 (2.09) ->
 * 1.92-2.30 (2.25); 128 x 11008 x 4096 (three) 1.24-1.26 -> 1.36-1.59. */
#define DAMX_KC 128

/* tasks of more than 32 rows: narrower passes and deeper chunks (more tile work per round trip of
 * the sums), the same buffer. Measured against the AMX slice-packing path (ember__qgemm_raw, since
 * removed) that took these rows before (bench_qgemm, 2 threads, three alternations): 128 x 4096^2
 * 1662-1983 -> 1885-2294 GOPS, 128 x 11008 x 4096 1437-1515 -> 1664-1803; passes of 256-1024
 * columns and chunks of 256-1024 rows were within the noise of these.
 * The 2 x 2 step of these tasks (17 rows and more) is the cached kernel's pipelined one
 * (AMX_STEP22_SA_PIPE: A's tiles past L1, each operand tile reloaded as soon as its last product
 * is issued), where it was AMX_STEP22. On the H200 host's Xeon (loaded), an in-process A/B of the
 * two kernels, medians of the ratios of 31 paired calls: 128 x 4096^2 1.05-1.10, 128 x 11008 x
 * 4096 1.07-1.10, 32 x 4096^2 1.04-1.07; bench_qgemm alternated four times, first call over oneDNN
 * without reorder: 128 x 4096^2 1.26 / 1.31 / 1.31 / 1.26 -> 1.33 / 1.32 / 1.35 / 1.23, 128 x
 * 11008 x 4096 1.45 / 1.32 / 1.23 / 1.25 -> 1.40 / 1.50 / 1.63 / 1.34, 32 x 4096^2 level. In that
 * harness a 128-row call's tile work alone (B staged once) took 45-81% of the call and the
 * staging alone 21-32%: the two add up, and staging the next chunk between the tile blocks of
 * this one (double-buffered) did not overlap them (0.83-1.05); fetching B further ahead, the next
 * chunk into L2 during the tile work, passes of 1024 columns, or A and the buffers on huge pages
 * did not help either (0.83-1.27, mostly under 1; bench/results/cpu.md). */
#define DAMX_W_TALL 512
#define DAMX_KC_TALL 512

/* (K + 4) x W: ember__qdirect_chunk_bytes, written out for the compiler */
_Static_assert((DAMX_KC_TALL + 4) * DAMX_W_TALL <= (DAMX_KC + 4) * EMBER__DIRECT_W &&
                   DAMX_W_TALL / 64 * 128 <= EMBER__DIRECT_W / 64 * 32,
               "the taller tasks' staged chunk and sums fit the buffer the shorter ones size");

size_t ember__qdirect_amx_work_bytes(void) {
    return ember__qdirect_chunk_bytes(DAMX_KC, EMBER__DIRECT_W) +
           (size_t)(EMBER__DIRECT_W / 64) * 4 * 32 * 16 * 4;
}

static void damx_config(int64_t m) {
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    const int h0 = m > 16 ? 16 : (int)m, h1 = m > 16 ? (int)m - 16 : 0;
    for (int t = 0; t < 8; t++)
        cfg.colsb[t] = 64;
    if (m <= 16) { /* C tiles 0-3 (registers q = 0..3), A 4, B 6 */
        for (int t = 0; t < 5; t++)
            cfg.rows[t] = (uint8_t)h0;
        cfg.rows[6] = 16;
        cfg.colsb[5] = cfg.colsb[7] = 0;
    } else { /* C (half, q): 0 (0, q), 1 (0, q + 1), 2 (1, q), 3 (1, q + 1); A halves 4, 5; B 6, 7
              */
        cfg.rows[0] = cfg.rows[1] = cfg.rows[4] = 16;
        cfg.rows[2] = cfg.rows[3] = cfg.rows[5] = (uint8_t)h1;
        cfg.rows[6] = cfg.rows[7] = 16;
    }
    tile_load_config(&cfg);
}

void ember__qdirect_amx(const ember__qdirect *d, int64_t j0, int64_t j1, void *work) {
    const int64_t m = d->m, k = d->k, lda = d->lda;
    /* over 32 rows: whole blocks of 32 (A's padding rows are zeros), rs rows per (piece, q) */
    const int tall = m > 32;
    const int64_t nrb = tall ? (m + 31) / 32 : 1, rs = nrb * 32;
    const int64_t W = tall ? DAMX_W_TALL : EMBER__DIRECT_W, KC = tall ? DAMX_KC_TALL : DAMX_KC;
    /* int32 sums [piece][q][rs rows][16], then the staged chunk */
    int32_t *acc = work;
    uint8_t *st = (uint8_t *)work + (size_t)(W / 64) * 4 * (size_t)rs * 16 * 4;
    if (j1 > d->n)
        j1 = d->n;
    damx_config(tall ? 32 : m);
    for (int64_t jt = j0; jt < j1; jt += W) {
        const int64_t jn = j1 - jt < W ? j1 - jt : W;
        const int64_t npc = (jn + 63) / 64;
        for (int64_t kc = 0; kc < k; kc += KC) {
            /* whole tiles of 16 groups: groups past K are staged as zeros */
            const int64_t ng = ((k - kc < KC ? k - kc : KC) + 63) / 64 * 16;
            const int64_t ps = ember__qdirect_piece_stride(ng); /* qgemm.h */
            for (int64_t g = 0; g < ng; g++)
                ember__qdirect_stage(d, kc + 4 * g, jt, jn, st + g * 256, ps);
            const int first = kc == 0;
            for (int64_t pc = 0; pc < npc; pc++) {
                int32_t *ap = acc + pc * 4 * rs * 16; /* this piece's sums, [q][rs][16] */
                const uint8_t *bp = st + pc * ps;
                if (m <= 16) {
                    if (first) {
                        AMX_ZERO4();
                    } else {
                        _tile_loadd(0, ap, 64);
                        _tile_loadd(1, ap + rs * 16, 64);
                        _tile_loadd(2, ap + 2 * rs * 16, 64);
                        _tile_loadd(3, ap + 3 * rs * 16, 64);
                    }
                    for (int64_t s = 0; s < ng / 16; s++) {
                        const uint8_t *b = bp + s * 16 * 256;
                        _tile_loadd(4, d->a + kc + s * 64, lda);
                        _tile_loadd(6, b, 256);
                        _tile_dpbssd(0, 4, 6);
                        _tile_loadd(6, b + 64, 256);
                        _tile_dpbssd(1, 4, 6);
                        _tile_loadd(6, b + 128, 256);
                        _tile_dpbssd(2, 4, 6);
                        _tile_loadd(6, b + 192, 256);
                        _tile_dpbssd(3, 4, 6);
                    }
                    _tile_stored(0, ap, 64);
                    _tile_stored(1, ap + rs * 16, 64);
                    _tile_stored(2, ap + 2 * rs * 16, 64);
                    _tile_stored(3, ap + 3 * rs * 16, 64);
                    continue;
                }
                for (int64_t rb = 0; rb < nrb; rb++)
                    for (int q = 0; q < 4; q += 2) {
                        int32_t *c0 = ap + (q * rs + rb * 32) * 16, *c1 = c0 + rs * 16;
                        const int8_t *a0 = d->a + rb * 32 * lda + kc;
                        const uint8_t *b = bp + q * 64;
                        /* the first step's operands ahead of the sums (see the pipelined step) */
                        AMX_LOAD22_SA(a0, a0 + 16 * lda, lda, b, b + 64, 256);
                        if (first) {
                            AMX_ZERO4();
                        } else {
                            _tile_loadd(0, c0, 64);
                            _tile_loadd(1, c1, 64);
                            _tile_loadd(2, c0 + 16 * 16, 64);
                            _tile_loadd(3, c1 + 16 * 16, 64);
                        }
                        const int64_t ns = ng / 16;
                        for (int64_t s = 0; s < ns; s++) {
                            const int8_t *an = a0 + (s + 1) * 64;
                            const uint8_t *bn = b + (s + 1) * 16 * 256;
                            AMX_STEP22_SA_PIPE(_tile_dpbssd, s + 1 < ns, an, an + 16 * lda, lda, bn,
                                               bn + 64, 256);
                        }
                        _tile_stored(0, c0, 64);
                        _tile_stored(1, c1, 64);
                        _tile_stored(2, c0 + 16 * 16, 64);
                        _tile_stored(3, c1 + 16 * 16, 64);
                    }
            }
        }
        /* the lanes back in order, scaled or exact out */
        for (int64_t i = 0; i < m; i++) {
            const __m512 sar = _mm512_set1_ps(d->sa ? d->sa[i] : 1.0f);
            for (int64_t pc = 0; pc < npc; pc++) {
                const int32_t *s = acc + pc * 4 * rs * 16 + i * 16;
                const __m512i x[4] = {_mm512_load_si512(s), _mm512_load_si512(s + rs * 16),
                                      _mm512_load_si512(s + 2 * rs * 16),
                                      _mm512_load_si512(s + 3 * rs * 16)};
                __m512i o[4];
                ember__qdirect_order(x, o);
                for (int q = 0; q < 4; q++) {
                    const int64_t j = jt + pc * 64 + q * 16, left = j1 - j;
                    if (left <= 0)
                        break;
                    const __mmask16 msk = (__mmask16)(left >= 16 ? 0xffffu : (1u << left) - 1u);
                    if (d->c32) {
                        _mm512_mask_storeu_epi32(d->c32 + i * d->ldc + j, msk, o[q]);
                        continue;
                    }
                    const __m512 sc = _mm512_mul_ps(
                        sar, d->sb ? _mm512_maskz_loadu_ps(msk, d->sb + j) : _mm512_set1_ps(1.0f));
                    _mm512_mask_storeu_ps(d->c + i * d->ldc + j, msk,
                                          _mm512_mul_ps(_mm512_cvtepi32_ps(o[q]), sc));
                }
            }
        }
    }
    _tile_release();
}

/* Rows [0, rows) of a finished block's int32 sums (buf, row stride 32; biased unsigned B) into the
 * exact int32 output (jb->c32, the test hook) at row i, column j: the bias term of K chunk c
 * (bias x the row's sum of A over the chunk) removed, columns past n masked off. */
static inline void store_s32_rows(const ember__qjob *jb, const int32_t *buf, int64_t i, int64_t j,
                                  int64_t c, int64_t rows, __mmask16 k0m, __mmask16 k1m) {
    const ember__qpack *p = jb->p;
    for (int64_t r = 0; r < rows; r++) {
        const __m512i corr = _mm512_set1_epi32(p->bias * jb->rs[(i + r) * p->nch + c]);
        int32_t *o = jb->c32 + (i + r) * jb->ldc + j;
        _mm512_mask_storeu_epi32(o, k0m, _mm512_sub_epi32(_mm512_load_si512(buf + r * 32), corr));
        _mm512_mask_storeu_epi32(o + 16, k1m,
                                 _mm512_sub_epi32(_mm512_load_si512(buf + r * 32 + 16), corr));
    }
}

/* The 32 column scales of B for K chunk c, columns [j, j + 32), as f32 (stored F16 or F32). */
static inline void col_scales(const ember__qpack *p, int64_t c, int64_t j, __m512 *s0, __m512 *s1) {
    const int64_t idx = ember__qpack_sidx(p, c, j);
    *s0 = ember__qpack_scales16(p, idx, p->sb16);
    *s1 = ember__qpack_scales16(p, idx + 16, p->sb16);
}

/* Scale the int32 sums of n (1 or 2) consecutive chunks c, c + 1 (bufs[q]: rows x 32, row stride
 * 32) into the float block, chunk after chunk: x * sb summed over the chunks, times the row's A
 * scale at the end where every chunk has the same one (sa_row), else x * (sa * sb) summed. first:
 * c is the row block's first chunk (facc holds nothing yet); last: c + n - 1 is its last (rows of
 * C are written instead of facc). sgn 0: the sums are of biased unsigned B, the bias term comes
 * off first. Two chunks read and write the float sums once for both (epi_pair, below). */
static inline __attribute__((always_inline)) void
epi_chunks(const ember__qjob *jb, const int32_t *const bufs[2], const int n, float *facc, int64_t i,
           int64_t j, int64_t c, int64_t rows, int first, int last, int sgn, __mmask16 k0m,
           __mmask16 k1m) {
    const ember__qpack *p = jb->p;
    const int64_t nch = p->nch;
    __m512 s[2][2];
    for (int q = 0; q < n; q++)
        col_scales(p, c + q, j, &s[q][0], &s[q][1]);
    for (int64_t r = 0; r < rows; r++) {
        const float *sar = jb->sa + (i + r) * nch + c;
        __m512 x0 = _mm512_setzero_ps(), x1 = x0;
        for (int q = 0; q < n; q++) {
            __m512i y0 = _mm512_load_si512(bufs[q] + r * 32),
                    y1 = _mm512_load_si512(bufs[q] + r * 32 + 16);
            if (!sgn) { /* biased unsigned B: remove bias * (row sum of the A chunk) */
                const __m512i corr = _mm512_set1_epi32(p->bias * jb->rs[(i + r) * nch + c + q]);
                y0 = _mm512_sub_epi32(y0, corr);
                y1 = _mm512_sub_epi32(y1, corr);
            }
            __m512 t0 = s[q][0], t1 = s[q][1];
            if (!jb->sa_row) {
                const __m512 ra = _mm512_set1_ps(sar[q]);
                t0 = _mm512_mul_ps(ra, t0);
                t1 = _mm512_mul_ps(ra, t1);
            }
            const __m512 z0 = _mm512_cvtepi32_ps(y0), z1 = _mm512_cvtepi32_ps(y1);
            if (q == 0 && first) {
                x0 = _mm512_mul_ps(z0, t0);
                x1 = _mm512_mul_ps(z1, t1);
            } else {
                x0 = _mm512_fmadd_ps(z0, t0, q == 0 ? _mm512_load_ps(facc + r * 32) : x0);
                x1 = _mm512_fmadd_ps(z1, t1, q == 0 ? _mm512_load_ps(facc + r * 32 + 16) : x1);
            }
        }
        if (last) {
            if (jb->sa_row) {
                const __m512 ra = _mm512_set1_ps(sar[0]);
                x0 = _mm512_mul_ps(x0, ra);
                x1 = _mm512_mul_ps(x1, ra);
            }
            store_row(jb, jb->c + (i + r) * jb->ldc + j, x0, x1, k0m, k1m);
        } else {
            _mm512_store_ps(facc + r * 32, x0);
            _mm512_store_ps(facc + r * 32 + 16, x1);
        }
    }
}

/* One chunk: mode 0 the first (stores into facc), 1 a middle one (adds), 2 the last (adds and
 * writes rows of C). */
static inline __attribute__((always_inline)) void
epi_chunk(const ember__qjob *jb, const int32_t *buf, float *facc, int64_t i, int64_t j, int64_t c,
          int64_t rows, int mode, int sgn, __mmask16 k0m, __mmask16 k1m) {
    const int32_t *const bufs[2] = {buf, buf};
    epi_chunks(jb, bufs, 1, facc, i, j, c, rows, mode == 0, mode == 2, sgn, k0m, k1m);
}

/* Two chunks' signed int32 sums (ba: chunk c, bb: chunk c + 1; rows x 32, row stride 32) into
 * the float block at once: the operations epi_chunk does for c, then for c + 1, in that order (the
 * same results), with the float sums read and written once for both instead of once each. first:
 * c is the row block's first chunk (nothing in facc yet); last: c + 1 is its last (rows of C are
 * written). The scaling, which does not overlap the tile work on this machine, was bound by its
 * stores (the tiles' sums and the float sums, 4 lines a row and chunk): 3 a chunk now. Measured
 * on the H200 host's Xeon (2 cores pinned, noisy; one binary, with and without, alternated, GOPS,
 * blocks of 32): 512 x 4096^2 e_q4 1172 / 1290 / 1317 / 984 -> 1340 / 1309 / 1308 / 1171, e_q8b
 * 1082 / 1137 / 1251 / 933 -> 1303 / 1230 / 1217 / 1101; 128 x 4096^2 e_q4 1133 / 1119 / 1198 /
 * 904 -> 1340 / 1181 / 1230 / 1085, e_q8b 1026 / 959 / 1100 / 829 -> 1206 / 1065 / 1109 / 939;
 * 1024^3 e_q4 1080-1188 -> 1180-1389 (and a first 870); 2048^3 level (e_q4 1236-1450 against
 * 1268-1409). */
static inline __attribute__((always_inline)) void
epi_pair(const ember__qjob *jb, const int32_t *ba, const int32_t *bb, float *facc, int64_t i,
         int64_t j, int64_t c, int64_t rows, int first, int last, __mmask16 k0m, __mmask16 k1m) {
    const int32_t *const bufs[2] = {ba, bb};
    epi_chunks(jb, bufs, 2, facc, i, j, c, rows, first, last, 1, k0m, k1m);
}

/* Several K chunks (scale blocks along K, kc % 32 == 0), float output: per 32 x 32 block the
 * chunks are multiplied in turn, and after the tile work of an even chunk c the scaling of chunks
 * c - 2 and c - 1 (vector work, epi_pair; a last odd chunk alone, epi_chunk) is issued (two int32
 * buffers). (Measured in a standalone loop, the two did
 * not overlap on this machine: tile work 83-91 cycles a chunk, scaling 116-127, together 193-211,
 * whatever the order; bench/results/cpu.md.) Panels are made signed once per task panel
 * (4-bit: unpacked; 8-bit: the bias flipped off) and serve every row block of the task: TDPBSSD,
 * and no row-sum correction in the epilogue. Same sums as the other paths: exact int32 per
 * chunk, then mul (x * (sa * sb)) and add in chunk order. */
static void block_chunked(const ember__qjob *jb, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                          int ks, uint8_t *unp) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp, kc = p->kc, nch = p->nch;
    int32_t buf[2][32 * 32] __attribute__((aligned(64)));
    float facc[32 * 32] __attribute__((aligned(64)));
    if (i1 > jb->m)
        i1 = jb->m;
    for (int64_t j = j0; j < j1 && j < p->n; j += 32) {
        const uint8_t *b0 = unp;
        if (p->bits == 8)
            signed_panel8(p, j, unp);
        else
            unpack_panel_signed(p, j, unp);
        const uint8_t *b1 = b0 + 64;
        const int64_t nv = p->n - j;
        const __mmask16 k0m = ember__tail_mask16(nv), k1m = ember__tail_mask16(nv - 16);
        for (int64_t i = i0; i < i1; i += 32) {
            const int8_t *a0 = jb->a + ember__qa_amx_off(i, kp);
            const int8_t *a1 = a0 + 1024;
            const int64_t rows = jb->m - i < 32 ? jb->m - i : 32;
            if (kc == ks) {
                /* one tile step per chunk: the two 16-row halves staggered, so that the tile
                 * unit multiplies one half while the other half's sums are stored */
                for (int64_t c = 0; c < nch; c++) {
                    const int64_t k = c * kc, ao = (k / 64) * 2048 + (k % 64);
                    _tile_zero(0);
                    _tile_zero(1);
                    _tile_loadd(4, a0 + ao, 64);
                    _tile_loadd(6, b0 + k * 32, 128);
                    _tile_loadd(7, b1 + k * 32, 128);
                    _tile_dpbssd(0, 4, 6);
                    _tile_dpbssd(1, 4, 7);
                    if (c > 0) {
                        _tile_stored(2, buf[(c - 1) & 1] + 16 * 32, 128);
                        _tile_stored(3, buf[(c - 1) & 1] + 16 * 32 + 16, 128);
                    }
                    _tile_zero(2);
                    _tile_zero(3);
                    _tile_loadd(5, a1 + ao, 64);
                    _tile_dpbssd(2, 5, 6);
                    _tile_dpbssd(3, 5, 7);
                    if (c >= 2 && !(c & 1)) /* chunks c - 2 and c - 1 */
                        epi_pair(jb, buf[c & 1], buf[(c - 1) & 1], facc, i, j, c - 2, rows, c == 2,
                                 0, k0m, k1m);
                    _tile_stored(0, buf[c & 1], 128);
                    _tile_stored(1, buf[c & 1] + 16, 128);
                }
                _tile_stored(2, buf[(nch - 1) & 1] + 16 * 32, 128);
                _tile_stored(3, buf[(nch - 1) & 1] + 16 * 32 + 16, 128);
                if (!(nch & 1))
                    epi_pair(jb, buf[(nch - 2) & 1], buf[(nch - 1) & 1], facc, i, j, nch - 2, rows,
                             nch == 2, 1, k0m, k1m);
                else
                    epi_chunk(jb, buf[(nch - 1) & 1], facc, i, j, nch - 1, rows, 2, 1, k0m, k1m);
                continue;
            }
            for (int64_t c = 0; c < nch; c++) {
                AMX_ZERO4();
                for (int64_t k = c * kc; k < (c + 1) * kc; k += ks) {
                    const int64_t ao = (k / 64) * 2048 + (k % 64);
                    AMX_STEP22(_tile_dpbssd, a0 + ao, a1 + ao, 64, b0 + k * 32, b1 + k * 32, 128);
                }
                if (c >= 2 && !(c & 1)) /* chunks c - 2 and c - 1 */
                    epi_pair(jb, buf[c & 1], buf[(c - 1) & 1], facc, i, j, c - 2, rows, c == 2, 0,
                             k0m, k1m);
                int32_t *dst = buf[c & 1];
                AMX_STORE4(dst);
            }
            if (!(nch & 1))
                epi_pair(jb, buf[(nch - 2) & 1], buf[(nch - 1) & 1], facc, i, j, nch - 2, rows,
                         nch == 2, 1, k0m, k1m);
            else
                epi_chunk(jb, buf[(nch - 1) & 1], facc, i, j, nch - 1, rows, 2, 1, k0m, k1m);
        }
    }
}

void ember__qblock_amx(const ember__qjob *jb, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                       int thread) {
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp, nch = p->nch, kc = p->kc;
    const int ks = (kc % 64 == 0) ? 64 : 32;
    int32_t buf[32 * 32] __attribute__((aligned(64)));
    float facc[32 * 32] __attribute__((aligned(64)));
    uint8_t *unp = NULL;
    /* the driver's per-thread scratch: the int32 sums of the row blocks (MB_MAX x 32), then the
     * unpacked 4-bit panel or block_chunked's signed panel (32 x kp) */
    int32_t(*acc)[32 * 32] = (int32_t(*)[32 * 32])(void *)jb->scratch[thread];
    if (p->bits == 4 || (nch > 1 && jb->c)) /* an unpacked or signed panel (block_chunked) */
        unp = jb->scratch[thread] + EMBER__AMX_ACC_BYTES;
    tile_config(ks);
    if (i1 > jb->mp)
        i1 = jb->mp;
    if ((nch == 1 && jb->c && !p->sb16 &&
         ((i1 < jb->m ? i1 : jb->m) - i0 + 31) / 32 * (((j1 < p->n ? j1 : p->n) - j0 + 31) / 32) *
                 (int64_t)(32 * 32 * 4) <=
             (int64_t)EMBER__AMX_ACC_BYTES)) {
        block_pipelined(jb, i0, i1, j0, j1, unp, acc);
        if (jb->nt_store)
            _mm_sfence(); /* the streamed rows of C, before the pool's join */
        _tile_release();
        return;
    }
    if (nch > 1 && jb->c) {
        block_chunked(jb, i0, i1, j0, j1, ks, unp);
        if (jb->nt_store)
            _mm_sfence();
        _tile_release();
        return;
    }
    for (int64_t j = j0; j < j1 && j < p->n; j += 32) {
        const uint8_t *b0, *b1;
        if (p->bits == 8) {
            b0 = p->b + (j / 32) * (kp / 4) * 128;
            b1 = b0 + 64;
        } else {
            unpack_panel(p, j, unp);
            b0 = unp;
            b1 = unp + 64;
        }
        const int64_t nv = p->n - j;
        const __mmask16 k0m = ember__tail_mask16(nv), k1m = ember__tail_mask16(nv - 16);
        for (int64_t i = i0; i < i1 && i < jb->m; i += 32) {
            const int8_t *a0 = jb->a + ember__qa_amx_off(i, kp);
            const int8_t *a1 = a0 + 1024;
            const int64_t rows = jb->m - i < 32 ? jb->m - i : 32;
            for (int64_t c = 0; c < nch; c++) {
                tile_block(a0, a1, b0, b1, c * kc, (c + 1) * kc, ks, buf);
                if (jb->c32) {
                    store_s32_rows(jb, buf, i, j, c, rows, k0m, k1m);
                    continue;
                }
                __m512 s0, s1;
                col_scales(p, c, j, &s0, &s1);
                for (int64_t r = 0; r < rows; r++) {
                    __m512i corr = _mm512_set1_epi32(p->bias * jb->rs[(i + r) * nch + c]);
                    __m512 sar = _mm512_set1_ps(jb->sa[(i + r) * nch + c]);
                    __m512 x0 =
                        _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_load_si512(buf + r * 32), corr));
                    __m512 x1 = _mm512_cvtepi32_ps(
                        _mm512_sub_epi32(_mm512_load_si512(buf + r * 32 + 16), corr));
                    x0 = _mm512_mul_ps(x0, _mm512_mul_ps(sar, s0));
                    x1 = _mm512_mul_ps(x1, _mm512_mul_ps(sar, s1));
                    if (nch == 1) {
                        float *o = jb->c + (i + r) * jb->ldc + j;
                        _mm512_mask_storeu_ps(o, k0m, x0);
                        _mm512_mask_storeu_ps(o + 16, k1m, x1);
                    } else if (c == 0) {
                        _mm512_store_ps(facc + r * 32, x0);
                        _mm512_store_ps(facc + r * 32 + 16, x1);
                    } else {
                        _mm512_store_ps(facc + r * 32,
                                        _mm512_add_ps(_mm512_load_ps(facc + r * 32), x0));
                        _mm512_store_ps(facc + r * 32 + 16,
                                        _mm512_add_ps(_mm512_load_ps(facc + r * 32 + 16), x1));
                    }
                }
            }
            if (nch > 1 && !jb->c32)
                for (int64_t r = 0; r < rows; r++) {
                    float *o = jb->c + (i + r) * jb->ldc + j;
                    _mm512_mask_storeu_ps(o, k0m, _mm512_load_ps(facc + r * 32));
                    _mm512_mask_storeu_ps(o + 16, k1m, _mm512_load_ps(facc + r * 32 + 16));
                }
        }
    }
    _tile_release();
}

/* The 2 x 2 tile loop fed from L2, for the bench's second ceiling: one task of a cached product
 * at K = 2048 as block_pipelined walks it (256 rows x 512 columns: A 512 KiB and B 1 MiB, in the
 * packed layouts, together in L2), each 32 x 32 block over the whole K with its sums in the tiles,
 * without the epilogue. A block's A (64 KiB) and B panel (64 KiB) do not fit L1 together, so the
 * tile loads come from L2. buf: EMBER__QPEAK_L2_BYTES (64-byte aligned, any values). */
double ember__qpeak_amx_l2(int64_t passes, const uint8_t *buf) {
    const int64_t kp = 2048, nip = 8, njp = 16;
    const int8_t *a = (const int8_t *)buf;  /* [nip][kp/64][32][64] */
    const uint8_t *b = buf + nip * 32 * kp; /* [njp][kp/4][128] */
    int32_t out[32 * 32] __attribute__((aligned(64)));
    tile_config(64);
    for (int64_t it = 0; it < passes; it++)
        for (int64_t jp = 0; jp < njp; jp++) {
            const uint8_t *b0 = b + jp * (kp / 4) * 128, *b1 = b0 + 64;
            for (int64_t ii = 0; ii < nip; ii++) {
                const int8_t *a0 = a + ember__qa_amx_off(ii * 32, kp), *a1 = a0 + 1024;
                AMX_ZERO4();
                for (int64_t k = 0; k < kp; k += 64)
                    AMX_STEP22(_tile_dpbsud, a0 + k * 32, a1 + k * 32, 64, b0 + k * 32, b1 + k * 32,
                               128);
                AMX_STORE4(out);
            }
        }
    _tile_release();
    __asm__ volatile("" : : "r"(out[0]) : "memory");
    return (double)passes * (double)(nip * 32) * (double)(njp * 32) * (double)kp * 2.0;
}

/* The step of the register-only loop with its operands loaded from L1, a new set each step (four
 * sets in buf). Measured (standalone, 1 thread, medians): random bytes 4.9-5.4 TOPS against
 * 6.3-6.8 with zeros, which run at the register-only loop's rate; with two threads 8.6-9.6
 * against 9.2-12.3. The register-only loop itself reads about the same on random and zero
 * tiles: what costs is operands that change. */
double ember__qpeak_amx_l1(int64_t iters, const uint8_t *buf) {
    const int8_t *a = (const int8_t *)buf; /* [4 sets][A0, A1, B0, B1][1024] */
    tile_config(64);
    AMX_ZERO4();
    for (int64_t it = 0; it < iters; it++) {
        const int8_t *t = a + (it & 3) * 4096;
        AMX_STEP22(_tile_dpbssd, t, t + 1024, 64, t + 2048, t + 3072, 64);
    }
    _tile_release();
    return (double)iters * 4.0 * 16 * 16 * 64 * 2;
}

/* Register-only TDPBSSD loop for the peak microbenchmark: returns the int8 ops done (2 per MAC). */
double ember__qpeak_amx(int64_t iters) {
    static const int8_t zeros[1024] __attribute__((aligned(64))) = {0};
    tile_config(64);
    _tile_loadd(4, zeros, 64);
    _tile_loadd(5, zeros, 64);
    _tile_loadd(6, zeros, 64);
    _tile_loadd(7, zeros, 64);
    AMX_ZERO4();
    for (int64_t it = 0; it < iters; it++) {
        _tile_dpbssd(0, 4, 6);
        _tile_dpbssd(1, 4, 7);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    _tile_release();
    return (double)iters * 4.0 * 16 * 16 * 64 * 2;
}

/* The thin kernels' tiles: tmm0-1 sums of `rows` rows, tmm4 A (rows x ks bytes), tmm6-7 B (ks / 4
 * rows of 64 bytes). */
static void thin_config(int rows, int ks) {
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[0] = cfg.rows[1] = cfg.rows[4] = (uint8_t)rows;
    cfg.colsb[0] = cfg.colsb[1] = 64;
    cfg.colsb[4] = (uint16_t)ks;
    cfg.rows[6] = cfg.rows[7] = (uint8_t)(ks / 4);
    cfg.colsb[6] = cfg.colsb[7] = 64;
    tile_load_config(&cfg);
}

/* The thin kernels fetch B's bytes this far ahead into L2. Chunked (below): without it, in
 * bench_qgemm, e_q8b at 16 x 4096^2 read 395 against 506-534 GOPS with, blocks of 32. Plain:
 * bench_qgemm --shape (31-41 rounds), without and with alternated, medians of e_q8 GOPS: 8 x
 * 4096^2 615 -> 624 and 528 -> 586 (eight alternations each; 83-88% -> 94-98% of the in-round
 * roofline), 16 x 4096^2 712 -> 771, 2 x 4096^2 150 -> 155, 4 x 4096 x 11008 200 -> 208 (five).
 * Earlier sessions measured the plain kernel's prefetch level in bench runs of 11 rounds.
 * The same bytes are also fetched THIN_PF_L1 ahead into L1 (the next 2048-byte step of the plain
 * kernel), as the one-row VNNI kernel fetches its stream into both (qgemm_avx512.c, row_panel):
 * the tile loads had met B in L2. H200 host's Xeon, bench_qgemm --shape, 2 threads, four
 * alternations in one run, e_q8 GOPS (share of the in-round roofline): 8 x 4096^2 345 / 329 /
 * 372 / 400 (80-93%, median 84.5%) -> 430 / 386 / 386 / 444 (95-100%, median 98.5%); 16 x
 * 4096^2 645 / 649 / 620 / 806 -> 680 / 705 / 690 / 893. 4 KiB ahead into L1 read 96-98% at 8
 * rows; 16 KiB into L2 with it, 92-98%. */
#define THIN_PF 8192
#define THIN_PF_L1 2048

/* The plain thin kernel writes C for this many 32-column panels at a time (a task's 256 columns
 * at most: 16 KiB of sums on the stack) */
#define THIN_PANELS 8

/* A thin kernel's K step: the `bytes` of B THIN_PF past bk (this step's) to L2 and THIN_PF_L1
 * past it to L1, unless they lie past B's values (bbytes from p->b) */
static inline __attribute__((always_inline)) void
thin_prefetch(const ember__qpack *p, const uint8_t *bk, int64_t bytes, int64_t bbytes) {
    if (bk - p->b + THIN_PF + bytes <= bbytes)
        for (int64_t q = 0; q < bytes; q += 64) {
            _mm_prefetch((const char *)(bk + THIN_PF + q), _MM_HINT_T1);
            _mm_prefetch((const char *)(bk + THIN_PF_L1 + q), _MM_HINT_T0);
        }
}

/* Decode shapes (2 <= m <= 16, 8-bit B, one K chunk): one A tile of m rows against two B tiles;
 * the tile products cost in proportion to m, so this streams B at the bandwidth limit where the
 * VNNI kernel is bound by its multiplies. The sums of up to THIN_PANELS panels stay in a buffer
 * until their products are all issued, and their rows of C are written together: each switch
 * from the tile loop to the vector epilogue stalled the stream of B. Measured against the
 * epilogue after every panel (bench_qgemm --shape 8,4096,4096, 31 rounds, ten alternations,
 * medians): e_q8 630 -> 647 GOPS, 79% -> 83% of the in-round roofline; 16 and 3 x 4096^2
 * level or ahead (775 -> 790, 225 -> 246); in full tables (six pairs of the two builds) M = 8
 * read within the noise (medians 84.5% both). In a standalone loop (two threads, 16 MiB from L3,
 * tasks of 256 columns) the same change read 53-54.5 -> 56-56.5 GB/s against 57-58 for a plain
 * read pass. */
void ember__qblock_amx_thin(const ember__qjob *jb, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                            int thread) {
    (void)thread;
    (void)i1;
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp;
    const int rows = (int)(jb->m - i0 < 16 ? jb->m - i0 : 16);
    const int64_t bbytes = (p->np / 32) * kp * 32; /* all of B's values */
    int32_t bufs[THIN_PANELS][16 * 32] __attribute__((aligned(64)));
    thin_config(rows, 64);
    const int8_t *a0 = jb->a + ember__qa_amx_off(i0, kp);
    const int64_t jend = j1 < p->n ? j1 : p->n;
    for (int64_t jc = j0; jc < jend; jc += 32 * THIN_PANELS) {
        const int64_t je = jc + 32 * THIN_PANELS < jend ? jc + 32 * THIN_PANELS : jend;
        for (int64_t j = jc; j < je; j += 32) {
            const uint8_t *b0 = p->b + (j / 32) * (kp / 4) * 128;
            int32_t *buf = bufs[(j - jc) / 32];
            _tile_zero(0);
            _tile_zero(1);
            for (int64_t k = 0; k < kp; k += 64) {
                const uint8_t *bk = b0 + k * 32; /* this step's 2048 bytes */
                thin_prefetch(p, bk, 2048, bbytes);
                AMX_STEP12(_tile_dpbsud, a0 + k * 32, 64, bk);
            }
            _tile_stored(0, buf, 128);
            _tile_stored(1, buf + 16, 128);
        }
        for (int64_t j = jc; j < je; j += 32) {
            const int32_t *buf = bufs[(j - jc) / 32];
            const int64_t nv = p->n - j;
            const __mmask16 k0m = ember__tail_mask16(nv), k1m = ember__tail_mask16(nv - 16);
            if (jb->c32) { /* exact int32 out */
                store_s32_rows(jb, buf, i0, j, 0, rows, k0m, k1m);
                continue;
            }
            const float *sb = (const float *)p->sb + j;
            epi_rows(jb, buf, i0, j, 0, rows, _mm512_loadu_ps(sb), _mm512_loadu_ps(sb + 16), k0m,
                     k1m);
        }
    }
    if (jb->nt_store)
        _mm_sfence(); /* epi_rows streams the rows of a large C: visible before the pool's join */
    _tile_release();
}

/* Decode shapes with scale blocks along K (2 <= m <= 16, several K chunks, float out): the thin
 * kernel's m-row tiles, a chunk at a time; each chunk's sums are scaled into float accumulators
 * (as block_chunked does for 32 rows), and the rows of C are written once at the end. 8-bit B
 * is multiplied as packed (TDPBSUD, the bias taken off in the scaling); 4-bit B is unpacked a K
 * step at a time into a small signed staging buffer (TDPBSSD). On VNNI (MR rows a pass) these
 * shapes were bound by the multiplies. */
void ember__qblock_amx_thin_chunked(const ember__qjob *jb, int64_t i0, int64_t i1, int64_t j0,
                                    int64_t j1, int thread) {
    (void)thread;
    (void)i1;
    const ember__qpack *p = jb->p;
    const int64_t kp = p->kp, kc = p->kc, nch = p->nch;
    const int ks = kc % 64 == 0 ? 64 : 32;
    const int rows = (int)(jb->m - i0 < 16 ? jb->m - i0 : 16);
    const int four = p->bits == 4;      /* each K step unpacked, signed, into stage: TDPBSSD */
    const int64_t bpk = four ? 16 : 32; /* a panel's bytes per k */
    const int64_t bbytes = (p->np / 32) * kp * bpk; /* all of B's values */
    int32_t buf[16 * 32] __attribute__((aligned(64)));
    float facc[16 * 32] __attribute__((aligned(64)));
    uint8_t stage[2][2048] __attribute__((aligned(64)));
    thin_config(rows, ks);
    const int8_t *a0 = jb->a + ember__qa_amx_off(i0, kp);
    for (int64_t j = j0; j < j1 && j < p->n; j += 32) {
        const uint8_t *b0 = p->b + (j / 32) * kp * bpk;
        const int64_t nv = p->n - j;
        const __mmask16 k0m = ember__tail_mask16(nv), k1m = ember__tail_mask16(nv - 16);
        for (int64_t c = 0; c < nch; c++) {
            _tile_zero(0);
            _tile_zero(1);
            for (int64_t k = c * kc; k < (c + 1) * kc; k += ks) {
                const int8_t *ak = a0 + (k / 64) * 2048 + (k % 64);
                const uint8_t *bk = b0 + k * bpk; /* this step's ks * bpk bytes */
                thin_prefetch(p, bk, ks * bpk, bbytes);
                if (four) {
                    uint8_t *d = stage[(k / ks) & 1];
                    unpack_rows_signed(bk, ks / 8, d);
                    AMX_STEP12(_tile_dpbssd, ak, 64, d);
                } else {
                    AMX_STEP12(_tile_dpbsud, ak, 64, bk);
                }
            }
            _tile_stored(0, buf, 128);
            _tile_stored(1, buf + 16, 128);
            epi_chunk(jb, buf, facc, i0, j, c, rows, c == 0 ? 0 : (c == nch - 1 ? 2 : 1), four, k0m,
                      k1m);
        }
    }
    if (jb->nt_store)
        _mm_sfence(); /* epi_chunk streams rows of a large C: visible before the pool's join */
    _tile_release();
}
