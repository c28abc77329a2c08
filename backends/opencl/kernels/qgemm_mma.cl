/* qgemm_mma.cl: int8 x int8 -> int32 matrix product on NVIDIA tensor cores (sm_80 and later)
 * through inline PTX `mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32`, for NVIDIA's OpenCL
 * (OpenCL C 1.2). Two kernels:
 *
 *   qgemm_mma_tile    C[M,N] (+)= A[M,K] . B[K,N]: BM x BN work-group tiles, BK = 64, STAGES-deep
 *                     local-memory ring filled with cp.async (16-byte, zero-filling), split-K over
 *                     get_group_id(1). The large-M kernel.
 *   qgemm_mma_skinny  M <= 16 * SK_MT: one work-group per 8 output columns; its SK_WARPS warps
 *                     share the K range and stream B straight from global memory into registers
 *                     (B is pre-packed in fragment order, so each warp load is 512 contiguous
 *                     bytes). The weight-streaming (GEMV-like) kernel.
 *
 * Layouts (all row-major, byte strides):
 *   A   int8 [M][lda], the first K bytes of a row used. lda % 16 == 0 and the buffer 16-byte
 *       aligned (cp.async reads 16-byte chunks; bytes past K are never read, they are zero-filled).
 *   Bp  B [K][N] pre-packed by ember__cl_pack_b_mma() (backends/opencl/cl_pack_mma.c) into
 *       n8 x k64 fragment blocks: block (j, kb) (columns 8j..8j+7, k 64kb..64kb+63) is 512 bytes at
 *       offset (j * nkb + kb) * 512 with nkb = ceil(K / 64); inside a block lane l (g = l / 4,
 *       t = l % 4) owns bytes [16 l, 16 l + 16) = B[64kb + 16q + 4t + i][8j + g] for q = 0..3,
 *       i = 0..3 (q-major), i.e. the two .b32 B registers of the k-steps k0 = 0 and k0 = 32.
 *       Padding (k >= K or n >= N) is zero. nb8 = ceil(N / 8) blocks along N.
 *   C   int32 [M][ldc] (modes 0, 1) or float [M][ldc] (mode 2).
 *
 * Epilogue (`mode`):
 *   0  C[m][n]  = acc                       (int32 store; split-K must be 1)
 *   1  C[m][n] += acc                       (int32 atomic add; C zeroed first; any split-K)
 *   2  C[m][n]  = 0.0f + (sa[m / sa_group] * sb[n / sb_group]) * (float)acc   (the CPU backend's
 *      epilogue, qgemm.cl's too: the 0.0f + turns an underflowed -0 into +0). The arguments named
 *      sa_stride / sb_stride are these groups: rows (columns) sharing one scale; 0 = per-tensor
 *      (index 0), 1 = per-row of A / per-column of B. (split-K 1)
 *   Per-block-along-K scales are not fused: run split-K aligned to the quant block with mode 1 per
 *   block is wrong for floats, so the backend leaves that scheme to the dequantize fallback.
 *   The integer sum is exact in every mode and independent of the launch shape.
 *
 * Build options (-D): BM, BN (tile), WM, WN (warp tile; WM % 16 == 0, WN % 8 == 0), STAGES.
 * Arguments (both kernels): A, lda, Bp, C, ldc, M, N, K, kps, mode, sa, sa_stride, sb, sb_stride,
 *   c_off (elements added to C first: the batch offset of the output).
 * Work sizes: qgemm_mma_tile: local (32 * (BM/WM) * (BN/WN), 1, 1),
 *   global (ceil(M/BM) * ceil(N/BN) * local0, splits, 1); `kps` = k64 blocks per split.
 *   qgemm_mma_skinny: local (32 * SK_WARPS, 1, 1), global (nb8 * local0, splits, 1).
 * Local memory: STAGES * (BM + BN) * 64 bytes, which must stay under 48 KiB.
 */

#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef WM
#define WM 64
#endif
#ifndef WN
#define WN 64
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef SK_WARPS
#define SK_WARPS 8
#endif
#ifndef SK_MT
#define SK_MT 1
#endif
#ifndef SK_U
#define SK_U 4
#endif

#define WARPS_M (BM / WM)
#define WARPS_N (BN / WN)
#define NTHR (32 * WARPS_M * WARPS_N)
#define MT (WM / 16)
#define NT8 (WN / 8)

#ifdef EMBER_CLANG_CHECK
/* Local syntax/register check with clang -target nvptx64-nvidia-nvcl (no OpenCL library). */
#define LID() ((uint)__nvvm_read_ptx_sreg_tid_x())
#define GGID0() ((long)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x())
#define GGID1() ((long)__nvvm_read_ptx_sreg_ctaid_y() * __nvvm_read_ptx_sreg_ntid_y() + __nvvm_read_ptx_sreg_tid_y())
#define GID0() ((uint)__nvvm_read_ptx_sreg_ctaid_x())
#define GID1() ((uint)__nvvm_read_ptx_sreg_ctaid_y())
#define BARRIER() __asm__ volatile("bar.sync 0;" ::: "memory")
#define ATOMIC_ADD(p, v) __asm__ volatile("red.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory")
#else
#define LID() ((uint)get_local_id(0))
#define GGID0() ((long)get_global_id(0))
#define GGID1() ((long)get_global_id(1))
#define GID0() ((uint)get_group_id(0))
#define GID1() ((uint)get_group_id(1))
#define BARRIER() barrier(CLK_LOCAL_MEM_FENCE)
#define ATOMIC_ADD(p, v) atomic_add((p), (v))
#endif

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int iclamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

static inline uint lds_addr(__local const void *p) { return (uint)(ulong)p; }

/* 16-byte global -> local copy, `n` (0..16) source bytes, the rest zero-filled. */
static inline void cp_async16(__local void *dst, const __global void *src, uint n)
{
    __asm__ volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     ::"r"(lds_addr(dst)), "l"((ulong)src), "r"(n) : "memory");
}
static inline void cp_async_commit(void) { __asm__ volatile("cp.async.commit_group;" ::: "memory"); }
#define CP_ASYNC_WAIT_ALL() __asm__ volatile("cp.async.wait_group 0;" ::: "memory")
#if STAGES == 2
#define CP_ASYNC_WAIT_PIPE() __asm__ volatile("cp.async.wait_group 0;" ::: "memory")
#elif STAGES == 3
#define CP_ASYNC_WAIT_PIPE() __asm__ volatile("cp.async.wait_group 1;" ::: "memory")
#elif STAGES == 4
#define CP_ASYNC_WAIT_PIPE() __asm__ volatile("cp.async.wait_group 2;" ::: "memory")
#else
#error "STAGES must be 2, 3 or 4"
#endif

static inline void ldsm_x4(__local const void *p, uint *r)
{
    __asm__ volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(lds_addr(p)));
}

#define MMA_S8(c, a0, a1, a2, a3, b0, b1)                                                      \
    __asm__ volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "          \
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                                  \
                     : "+r"((c)[0]), "+r"((c)[1]), "+r"((c)[2]), "+r"((c)[3])                  \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))

/* A tile: BM rows of 64 bytes, 16-byte chunk c of row r stored at chunk c ^ ((r >> 1) & 3),
 * so the 8 rows an ldmatrix phase reads fall in 8 distinct bank groups. */
#define A_SWZ(r, c) ((uint)(r) * 64u + ((((uint)(c)) ^ (((uint)(r) >> 1) & 3u)) << 4))

static inline void epi_store(int mode, __global int *C, __global float *Cf, int ldc, int M, int N,
                             int m, int n, int v0, int v1, __global const float *sa, int sa_stride,
                             __global const float *sb, int sb_stride)
{
    if (m >= M) return;
    if (mode == 0) {
        if (n + 1 < N && ((((ulong)C + 4ul * ((ulong)m * (ulong)ldc + (ulong)n)) & 7ul) == 0)) {
            *(__global int2 *)(C + (size_t)m * ldc + n) = (int2)(v0, v1);
        } else {
            if (n < N) C[(size_t)m * ldc + n] = v0;
            if (n + 1 < N) C[(size_t)m * ldc + n + 1] = v1;
        }
    } else if (mode == 1) {
        if (n < N && v0) ATOMIC_ADD(C + (size_t)m * ldc + n, v0);
        if (n + 1 < N && v1) ATOMIC_ADD(C + (size_t)m * ldc + n + 1, v1);
    } else {
        float s = sa[sa_stride ? m / sa_stride : 0];
        if (n < N) Cf[(size_t)m * ldc + n] = 0.0f + (s * sb[sb_stride ? n / sb_stride : 0]) * (float)v0;
        if (n + 1 < N)
            Cf[(size_t)m * ldc + n + 1] = 0.0f + (s * sb[sb_stride ? (n + 1) / sb_stride : 0]) * (float)v1;
    }
}

static inline void load_stage(__local char *as, __local char *bs, __global const char *A, int lda,
                              __global const char *Bp, int M, int K, int m0, int n0, int nkb, int nb8,
                              int kb, int tid)
{
#pragma unroll
    for (int q = 0; q < (BM * 4) / NTHR; q++) {
        int c = tid + q * NTHR;
        int r = c >> 2, ch = c & 3;
        int k = kb * 64 + ch * 16;
        int n = (m0 + r < M) ? iclamp(K - k, 0, 16) : 0;
        const __global char *src = n ? A + (size_t)(m0 + r) * lda + k : A;
        cp_async16(as + A_SWZ(r, ch), src, (uint)n);
    }
#pragma unroll
    for (int q = 0; q < (BN * 4) / NTHR; q++) {
        int c = tid + q * NTHR;
        int blk = c >> 5, w = c & 31;
        int j = (n0 >> 3) + blk;
        const __global char *src = j < nb8 ? Bp + ((size_t)j * nkb + kb) * 512 + w * 16 : Bp;
        cp_async16(bs + c * 16, src, j < nb8 ? 16u : 0u);
    }
}

__kernel __attribute__((reqd_work_group_size(NTHR, 1, 1)))
void qgemm_mma_tile(__global const char *A, int lda, __global const char *Bp,
                    __global int *C, int ldc, int M, int N, int K, int kps, int mode,
                    __global const float *sa, int sa_stride, __global const float *sb, int sb_stride,
                    long c_off)
{
    C += c_off;
    __local uint4 As4[STAGES * BM * 4];
    __local uint4 Bs4[STAGES * BN * 4];
    __local char *As = (__local char *)As4;
    __local char *Bs = (__local char *)Bs4;

    const uint tid = LID();
    const uint lane = tid & 31u, warp = tid >> 5;
    const uint warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
    const int nkb = (K + 63) >> 6;
    const int nb8 = (N + 7) >> 3;

    /* tile raster: groups of 8 m-tiles walk along n, so neighbours share B tiles in L2 */
    const int ntm = (M + BM - 1) / BM, ntn = (N + BN - 1) / BN;
    const int pid = (int)GID0();
    const int gw = 8 * ntn;
    const int first_m = (pid / gw) * 8;
    const int gsz = imin(ntm - first_m, 8);
    const int pm = first_m + (pid % gw) % gsz;
    const int pn = (pid % gw) / gsz;
    const int m0 = pm * BM, n0 = pn * BN;

    const int kb0 = (int)GID1() * kps;
    const int kb1 = imin(nkb, kb0 + kps);
    if (kb0 >= kb1) return;
    const int nk = kb1 - kb0;

    int acc[MT][NT8][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT8; j++) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0;


#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < nk) load_stage(As + s * (BM * 64), Bs + s * (BN * 64), A, lda, Bp, M, K, m0, n0, nkb, nb8, kb0 + s, (int)tid);
        cp_async_commit();
    }

    /* per-lane ldmatrix row / chunk for A: lanes 0-7 rows 0-7 chunk 0, 8-15 rows 8-15 chunk 0,
     * 16-23 rows 0-7 chunk 1, 24-31 rows 8-15 chunk 1 -> registers a0..a3 of m16n8k32 */
    const uint a_row = warp_m * WM + (lane & 7u) + ((lane >> 3) & 1u) * 8u;
    const uint a_ch = lane >> 4;

    for (int it = 0; it < nk; it++) {
        CP_ASYNC_WAIT_PIPE();
        BARRIER();
        {
            int nx = it + STAGES - 1;
            if (nx < nk)
                load_stage(As + (nx % STAGES) * (BM * 64), Bs + (nx % STAGES) * (BN * 64), A, lda, Bp, M, K,
                           m0, n0, nkb, nb8, kb0 + nx, (int)tid);
            cp_async_commit();
        }
        const int slot = it % STAGES;
        __local const char *as = As + slot * (BM * 64);
        __local const char *bs = Bs + slot * (BN * 64) + warp_n * (WN / 8) * 512 + lane * 16;
        uint4 b[NT8];
#pragma unroll
        for (int j = 0; j < NT8; j++) b[j] = *(__local const uint4 *)(bs + j * 512);
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
            uint a[MT][4];
#pragma unroll
            for (int i = 0; i < MT; i++) {
                uint r = a_row + (uint)i * 16u;
                ldsm_x4(as + A_SWZ(r, a_ch + 2u * (uint)ks), a[i]);
            }
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int j = 0; j < NT8; j++) {
                    if (ks == 0) MMA_S8(acc[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b[j].x, b[j].y);
                    else MMA_S8(acc[i][j], a[i][0], a[i][1], a[i][2], a[i][3], b[j].z, b[j].w);
                }
        }
    }
    CP_ASYNC_WAIT_ALL();

    const int g = (int)(lane >> 2), t = (int)(lane & 3u);
    __global float *Cf = (__global float *)C;
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT8; j++) {
            int m = m0 + (int)warp_m * WM + i * 16 + g;
            int n = n0 + (int)warp_n * WN + j * 8 + t * 2;
            epi_store(mode, C, Cf, ldc, M, N, m, n, acc[i][j][0], acc[i][j][1], sa, sa_stride, sb, sb_stride);
            epi_store(mode, C, Cf, ldc, M, N, m + 8, n, acc[i][j][2], acc[i][j][3], sa, sa_stride, sb, sb_stride);
        }
}

/* 4 bytes A[m][k..k+3] as one .b32 (zero past M rows or K columns). */
static inline uint lda4(__global const char *A, int lda, int M, int K, int m, int k)
{
    if (m >= M || k >= K) return 0u;
    __global const char *p = A + (size_t)m * lda + k;
    if (k + 4 <= K) return *(__global const uint *)p;
    uint v = 0;
    for (int i = 0; i < 4 && k + i < K; i++) v |= ((uint)(uchar)p[i]) << (8 * i);
    return v;
}

__kernel __attribute__((reqd_work_group_size(32 * SK_WARPS, 1, 1)))
void qgemm_mma_skinny(__global const char *A, int lda, __global const uint4 *Bp,
                      __global int *C, int ldc, int M, int N, int K, int kps, int mode,
                      __global const float *sa, int sa_stride, __global const float *sb, int sb_stride,
                      long c_off)
{
    C += c_off;
    __local int red[SK_WARPS][SK_MT * 4][32];
    const uint tid = LID();
    const uint lane = tid & 31u, warp = tid >> 5;
    const int g = (int)(lane >> 2), t = (int)(lane & 3u);
    const int nkb = (K + 63) >> 6;
    const int j8 = (int)GID0();
    const int kb0 = (int)GID1() * kps;
    const int kb1 = imin(nkb, kb0 + kps);

    int acc[SK_MT][4];
#pragma unroll
    for (int i = 0; i < SK_MT; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0;

    __global const uint4 *bp = Bp + (size_t)j8 * nkb * 32 + lane;
    for (int kb = kb0 + (int)warp; kb < kb1; kb += SK_WARPS * SK_U) {
        uint4 b[SK_U];
#pragma unroll
        for (int u = 0; u < SK_U; u++) {
            int k = kb + u * SK_WARPS;
            b[u] = k < kb1 ? bp[(size_t)k * 32] : (uint4)(0u, 0u, 0u, 0u);
        }
#pragma unroll
        for (int u = 0; u < SK_U; u++) {
            int k = kb + u * SK_WARPS;
            if (k < kb1) {
#pragma unroll
                for (int i = 0; i < SK_MT; i++) {
                    int m = i * 16 + g, kk = k * 64 + t * 4;
                    uint a0 = lda4(A, lda, M, K, m, kk), a1 = lda4(A, lda, M, K, m + 8, kk);
                    uint a2 = lda4(A, lda, M, K, m, kk + 16), a3 = lda4(A, lda, M, K, m + 8, kk + 16);
                    MMA_S8(acc[i], a0, a1, a2, a3, b[u].x, b[u].y);
                    a0 = lda4(A, lda, M, K, m, kk + 32);
                    a1 = lda4(A, lda, M, K, m + 8, kk + 32);
                    a2 = lda4(A, lda, M, K, m, kk + 48);
                    a3 = lda4(A, lda, M, K, m + 8, kk + 48);
                    MMA_S8(acc[i], a0, a1, a2, a3, b[u].z, b[u].w);
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < SK_MT; i++)
#pragma unroll
        for (int q = 0; q < 4; q++) red[warp][i * 4 + q][lane] = acc[i][q];
    BARRIER();
    if (warp != 0) return;
#pragma unroll
    for (int i = 0; i < SK_MT; i++) {
        int v[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            int s = 0;
#pragma unroll
            for (int w = 0; w < SK_WARPS; w++) s += red[w][i * 4 + q][lane];
            v[q] = s;
        }
        int m = i * 16 + g, n = j8 * 8 + t * 2;
        __global float *Cf = (__global float *)C;
        epi_store(mode, C, Cf, ldc, M, N, m, n, v[0], v[1], sa, sa_stride, sb, sb_stride);
        epi_store(mode, C, Cf, ldc, M, N, m + 8, n, v[2], v[3], sa, sa_stride, sb, sb_stride);
    }
}

/* ---- operand preparation for the backend (one work-item per output byte) ----
 * Operand element (r, c) of a matrix at byte off[idx] of `src`: r * ld + c, or with trans c * ld + r. */
static inline char elem(__global const char *src, __global const long *off, int idx, long ld, int trans,
                        long r, long c)
{
    return src[off[idx] + (trans ? c * ld + r : r * ld + c)];
}

/* A [M][K] -> dst [M][ldd] (ldd = K rounded up to 16), zero past K. global (ldd, M). */
__kernel void qgemm_prep_a(__global const char *a, __global const long *a_off, int idx, long lda, int trans,
                           int M, int K, __global char *dst, int ldd)
{
    int k = (int)GGID0(), m = (int)GGID1();
    if (m >= M || k >= ldd) return;
    dst[(size_t)m * ldd + k] = k < K ? elem(a, a_off, idx, lda, trans, m, k) : (char)0;
}

/* B [K][N] -> the mma fragment packing of ember__cl_pack_b_mma (cl_pack_mma.c). global (bytes). */
__kernel void qgemm_pack_b_mma(__global const char *b, __global const long *b_off, int idx, long ldb, int trans,
                               int K, int N, __global char *dst, long bytes)
{
    long x = GGID0();
    if (x >= bytes) return;
    int nkb = (K + 63) >> 6;
    long blk = x >> 9;
    int w = (int)(x & 511);
    long j = blk / nkb, kb = blk % nkb;
    int l = w >> 4, q = (w >> 2) & 3, i = w & 3;
    long row = 64 * kb + 16 * q + 4 * (l & 3) + i, col = 8 * j + (l >> 2);
    dst[x] = (row < K && col < N) ? elem(b, b_off, idx, ldb, trans, row, col) : (char)0;
}

/* B [K][N] -> the wgmma packing of ember__cl_pack_b_wgmma for tile width bn. global (bytes). */
__kernel void qgemm_pack_b_wgmma(__global const char *b, __global const long *b_off, int idx, long ldb,
                                 int trans, int K, int N, int bn, __global char *dst, long bytes)
{
    long x = GGID0();
    if (x >= bytes) return;
    long nst = 2 * ((K + 63) >> 6);
    long stage = x / (bn * 32);
    int within = (int)(x % (bn * 32));
    long tn = stage / nst, st = stage % nst;
    int core = within >> 7, ng = core >> 1, h = core & 1, r = (within >> 4) & 7, jj = within & 15;
    int t = jj >> 2, i = jj & 3;
    long kk = 64 * (st >> 1) + 16 * t + 8 * (st & 1) + 4 * h + i, nn = tn * bn + 8 * ng + r;
    dst[x] = (kk < K && nn < N) ? elem(b, b_off, idx, ldb, trans, kk, nn) : (char)0;
}
