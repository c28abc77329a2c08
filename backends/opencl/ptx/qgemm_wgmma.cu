/* qgemm_wgmma.cu: generator source of qgemm_wgmma_sm90a.ptx, the sm_90a int8 GEMM of ember's OpenCL
 * backend (Hopper wgmma). The library ships the PTX (loaded with clCreateProgramWithBinary); this file
 * and build.sh regenerate it (CUDA toolkit needed only for that):
 *     nvcc -gencode=arch=compute_90a,code=compute_90a -ptx -O3 qgemm_wgmma.cu -o qgemm_wgmma_sm90a.ptx
 * Plain C-style CUDA: no CUDA runtime calls, no dynamic shared memory, static shared memory < 48 KiB
 * (OpenCL cannot raise the limit), kernels extern "C" so the entry names are stable.
 *
 * Kernels qgemm_wgmma_<BM>x<BN>... (list at the end): C[M,N] (+)= A[M,K] . B[K,N], CTA tile BM x BN,
 *   WGS warpgroups (128 WGS threads) each owning MH m64 row blocks of the tile (BM = 64 WGS MH), one
 *   wgmma m64nBNk32 per row block per k32 stage; thread 0 also issues the bulk copies (a separate
 *   producer warp costs registers the accumulators need). Why one warpgroup with a 64 x 256 tile: the
 *   kernel is bound by the bytes it can keep in flight from L2 (a shorter B prefetch distance costs
 *   10 %), a CTA may hold < 48 KiB under OpenCL, so more CTAs per SM are the only way to more bytes in
 *   flight; 64 x 256 keeps 128 accumulators a thread without serialised wgmmas in 166 registers, three
 *   CTAs per SM (bench/results/gpu-notes.md, runs 11-15; clusters cannot be launched through OpenCL).
 *   B: pre-packed by ember__cl_pack_b_wgmma (cl_pack_mma.c) into [N/BN][K/32] stages of BN x 32 bytes,
 *      each in wgmma's K-major no-swizzle canonical layout (core matrix = 8 columns x 16 k-bytes, 128 B
 *      contiguous; core (n8 group ng, k16 half h) at (2 ng + h) * 128), with the k permutation below;
 *      thread 0 moves one stage with one 1-D bulk copy
 *      (cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes) completing on full[slot].
 *   A: row-major int8 [M][lda], lda % 16 == 0; each thread fetches its own wgmma A fragment
 *      bytes (16 per row per k64, 2 MH rows) with cp.async into a private shared-memory slot DA blocks ahead and
 *      reads them (8 bytes a row per k32 stage) into registers just before its wgmma (A from registers). To make that one 16-byte load, k is
 *      permuted inside each k64 block: wgmma logical k = 32 s + 16 h + 4 t + i (k32 step s, half h,
 *      quad t, byte i) reads physical k = 16 t + 8 s + 4 h + i; B is packed with the same permutation,
 *      so the sum is unchanged (integer addition is exact in any order).
 *   Split-K: get_group_id(1) (blockIdx.y) takes k64 blocks [y * kps, (y + 1) * kps). Mode 1 adds into a
 *   zeroed C with atomics; modes 0 / 2 with more than one split reduce in-kernel: partial tiles go to
 *   the workspace `ws` (tiles * splits * BM * BN ints) and the last split of each tile (atomic
 *   counter in `counters`, tiles ints, zero before the first launch, left zero by every launch) sums
 *   them and runs the epilogue.
 *   Epilogue `mode` as in qgemm_mma.cl: 0 int32 store, 1 int32 atomic add, 2 float with scales
 *   (0.0f + (sa[m / sas] * sb[n / sbs]) * (float)acc, the CPU backend's; sas / sbs = rows / columns
 *   sharing a scale, 0 = per-tensor). Last arguments c_off_lo, c_off_hi: the 64-bit
 *   element offset added to C, as two 32-bit halves (every 64-bit parameter of this module is a buffer
 *   pointer: build.sh marks all of them `.ptr .global` for NVIDIA's OpenCL).
 *   desc_swap: 0 = LBO is the K-direction core-matrix stride (PTX ISA); 1 = swapped (diagnostic).
 */
#include <stdint.h>

#include "wgmma_ops.h"


__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity)
{
    asm volatile(
        "{\n.reg .pred P1;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
        "@!P1 bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
        "r"(parity)
        : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void bulk_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

__device__ __forceinline__ uint64_t make_desc(const void *p, uint32_t lbo, uint32_t sbo)
{
    uint64_t d = 0;
    d |= (uint64_t)((smem_u32(p) >> 4) & 0x3FFF);
    d |= (uint64_t)((lbo >> 4) & 0x3FFF) << 16;
    d |= (uint64_t)((sbo >> 4) & 0x3FFF) << 32;
    return d; /* base offset 0, swizzle 0 (none) */
}

__device__ __forceinline__ uint4 lda16(const int8_t *A, int lda, int M, int K, int m, int k)
{
    if (m < M && k < K) return __ldg((const uint4 *)(A + (size_t)m * lda + k));
    return make_uint4(0, 0, 0, 0);
}

__device__ __forceinline__ void epi_store(int mode, int *C, int ldc, int M, int N, int m, int n, int v0, int v1,
                                          const float *sa, int sas, const float *sb, int sbs)
{
    if (m >= M) return;
    if (mode == 0) {
        int *p = C + (size_t)m * ldc + n;
        if (n + 1 < N && (((uintptr_t)p) & 7) == 0) {
            *(int2 *)p = make_int2(v0, v1);
        } else {
            if (n < N) p[0] = v0;
            if (n + 1 < N) p[1] = v1;
        }
    } else if (mode == 1) {
        int *p = C + (size_t)m * ldc + n;
        if (n < N && v0) atomicAdd(p, v0);
        if (n + 1 < N && v1) atomicAdd(p + 1, v1);
    } else {
        float *Cf = (float *)C;
        /* sas / sbs: rows (columns) sharing one scale, 0 = per-tensor */
        float s = sa[sas ? m / sas : 0];
        if (n < N) Cf[(size_t)m * ldc + n] = __fadd_rn(0.0f, __fmul_rn(__fmul_rn(s, sb[sbs ? n / sbs : 0]), (float)v0));
        if (n + 1 < N)
            Cf[(size_t)m * ldc + n + 1] =
                __fadd_rn(0.0f, __fmul_rn(__fmul_rn(s, sb[sbs ? (n + 1) / sbs : 0]), (float)v1));
    }
}

template <int BN>
__device__ __forceinline__ void wgmma_bn(int *d, const unsigned *a, uint64_t desc);

template <> __device__ __forceinline__ void wgmma_bn<256>(int *d, const unsigned *a, uint64_t desc)
{
    wgmma_n256(d, a, desc, 1);
}
template <> __device__ __forceinline__ void wgmma_bn<64>(int *d, const unsigned *a, uint64_t desc)
{
    wgmma_n64(d, a, desc, 1);
}
template <> __device__ __forceinline__ void wgmma_bn<128>(int *d, const unsigned *a, uint64_t desc)
{
    wgmma_n128(d, a, desc, 1);
}

/* WGS warpgroups per CTA (NT = 128 WGS threads), MH = 2 / WGS m64 halves of the 128-row tile per
 * warpgroup: WGS 2 = one half each (the 256-thread kernels), WGS 1 = one warpgroup issuing both halves'
 * wgmmas (128 threads, 2 x BN / 2 accumulators a thread: three 128 x 128 CTAs fit an SM's registers). */
template <int BN, int STAGES, int DA, int WGS, int MH>
__device__ __forceinline__ void qgemm_body(const int8_t *__restrict__ A, int lda, const int8_t *__restrict__ Bp,
                                           int *C, int ldc, int M, int N, int K, int kps, int mode,
                                           const float *sa, int sas, const float *sb, int sbs, int desc_swap,
                                           uint8_t *sB, uint4 *sA, uint64_t *full, uint64_t *empty,
                                           int *ws, int *counters)
{
    constexpr int STAGE_BYTES = BN * 32;
    constexpr int NACC = BN / 2;
    constexpr int NT = 128 * WGS, NWARP = NT / 32, BM = 64 * WGS * MH;
    const int tid = threadIdx.x;
    const int warp = tid >> 5, lane = tid & 31;

    const int nkb = (K + 63) >> 6;         /* k64 blocks */
    const int ntn = (N + BN - 1) / BN;     /* packed n tiles */
    const int ntm = (M + BM - 1) / BM;
    const int pid = blockIdx.x;
    const int gw = 8 * ntn;
    const int first_m = (pid / gw) * 8;
    const int gsz = min(ntm - first_m, 8);
    const int pm = first_m + (pid % gw) % gsz;
    const int pn = (pid % gw) / gsz;
    const int m0 = pm * BM, n0 = pn * BN;
    const int kb0 = blockIdx.y * kps;
    const int kb1 = min(nkb, kb0 + kps);
    const int fixup = gridDim.y > 1 && mode != 1; /* split-K reduced in-kernel (see below) */
    if (kb0 >= kb1 && !fixup) return;
    const int nb = kb0 < kb1 ? kb1 - kb0 : 0; /* k64 blocks of this CTA */
    const int nst = 2 * nb;       /* k32 stages */

    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], NWARP);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    const int8_t *bsrc = Bp + ((size_t)pn * (size_t)(2 * nkb) + (size_t)(2 * kb0)) * STAGE_BYTES;
    if (tid == 0) {
        for (int it = 0; it < STAGES && it < nst; it++) {
            mbar_expect_tx(&full[it], STAGE_BYTES);
            bulk_g2s(sB + it * STAGE_BYTES, bsrc + (size_t)it * STAGE_BYTES, STAGE_BYTES, &full[it]);
        }
    }

    /* consumers: thread (warpgroup wg, warp w, g, t) holds rows row0[h], row1[h] of half wg * MH + h */
    const int wg = warp >> 2, w = warp & 3;
    const int g = lane >> 2, t = lane & 3;
    int row0[MH], row1[MH];
#pragma unroll
    for (int h = 0; h < MH; h++) {
        row0[h] = m0 + (wg * MH + h) * 64 + w * 16 + g;
        row1[h] = row0[h] + 8;
    }
    const uint32_t lbo = desc_swap ? 256u : 128u, sbo = desc_swap ? 128u : 256u;

    int acc[MH][NACC];
#pragma unroll
    for (int h = 0; h < MH; h++)
#pragma unroll
        for (int i = 0; i < NACC; i++) acc[h][i] = 0;

    /* one k32 stage: wait full, wgmma (one per half), keep one group in flight, release the previous slot */
#define STAGE(it_, areg)                                                                                   \
    do {                                                                                                   \
        int slot_ = (it_) % STAGES;                                                                        \
        mbar_wait(&full[slot_], ((it_) / STAGES) & 1);                                                     \
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");                                            \
        const uint64_t desc_ = make_desc(sB + slot_ * STAGE_BYTES, lbo, sbo);                              \
        _Pragma("unroll") for (int h_ = 0; h_ < MH; h_++) wgmma_bn<BN>(acc[h_], areg[h_], desc_);          \
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");                                     \
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");                                     \
        if ((it_) > 0) {                                                                                   \
            int ps_ = ((it_) - 1) % STAGES;                                                                \
            if (lane == 0) mbar_arrive(&empty[ps_]);                                                       \
            /* thread 0 refills the released slot with stage it_ - 1 + STAGES */                          \
            if (tid == 0 && (it_) - 1 + STAGES < nst) {                                                    \
                mbar_wait(&empty[ps_], (((it_) - 1) / STAGES) & 1);                                        \
                mbar_expect_tx(&full[ps_], STAGE_BYTES);                                                   \
                bulk_g2s(sB + ps_ * STAGE_BYTES, bsrc + (size_t)((it_) - 1 + STAGES) * STAGE_BYTES,        \
                         STAGE_BYTES, &full[ps_]);                                                         \
            }                                                                                              \
            __syncwarp();                                                                                  \
        }                                                                                                  \
    } while (0)

    /* A: each thread stages its own 16-byte chunks per k64 block (rows row0/row1 of each half, bytes
     * 16t..16t+15) in shared memory with cp.async, DA blocks ahead, and reads them back right before
     * use: a global load straight into the A registers would make every wgmma.fence wait for the
     * prefetch. Slot of (block, half h, row r): sA[((blk % DA) * 2 MH + 2 h + r) * NT + tid]. */
    const uint32_t sa_base = smem_u32(sA) + 16u * (uint32_t)tid;
#define A_ISSUE(blk)                                                                                       \
    do {                                                                                                   \
        int k_ = (kb0 + (blk)) * 64 + 16 * t;                                                              \
        _Pragma("unroll") for (int h_ = 0; h_ < MH; h_++) {                                                \
            uint32_t d_ = sa_base + (uint32_t)((((blk) % DA) * 2 * MH + 2 * h_) * NT * 16);                 \
            const int8_t *s0_ = A + (size_t)(row0[h_] < M ? row0[h_] : 0) * lda + (k_ < K ? k_ : 0);        \
            const int8_t *s1_ = A + (size_t)(row1[h_] < M ? row1[h_] : 0) * lda + (k_ < K ? k_ : 0);        \
            uint32_t n0_ = (row0[h_] < M && k_ < K) ? 16u : 0u, n1_ = (row1[h_] < M && k_ < K) ? 16u : 0u;  \
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d_), "l"(s0_), "r"(n0_)      \
                         : "memory");                                                                      \
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d_ + (uint32_t)NT * 16u),    \
                         "l"(s1_), "r"(n1_)                                                                \
                         : "memory");                                                                      \
        }                                                                                                  \
    } while (0)

#pragma unroll
    for (int d = 0; d < DA - 1; d++) {
        if (d < nb) A_ISSUE(d);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    for (int b = 0; b < nb; b++) {
        if (b + DA - 1 < nb) A_ISSUE(b + DA - 1);
        asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group %0;" ::"n"(DA - 1) : "memory");
        /* each k32 stage reads its 8 bytes of every chunk just before use (fewer live registers) */
        const uint2 *sl = (const uint2 *)(sA + (b % DA) * 2 * MH * NT + tid);
#pragma unroll
        for (int s = 0; s < 2; s++) {
            unsigned a_[MH][4];
#pragma unroll
            for (int h = 0; h < MH; h++) {
                uint2 q0 = sl[2 * (2 * h) * NT + s], q1 = sl[2 * (2 * h + 1) * NT + s];
                a_[h][0] = q0.x; a_[h][1] = q1.x; a_[h][2] = q0.y; a_[h][3] = q1.y;
            }
            STAGE(2 * b + s, a_);
        }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");

    if (fixup) {
        /* Split-K without a memset: every split stores its int32 partial tile to the workspace
         * (ws[(tile * splits + split) * BM * BN + (h * NACC + i) * NT + tid]); the split that arrives
         * last at the tile's counter adds the others' partials (exact integers: the order does not
         * matter), resets the counter for the next launch and runs the epilogue. */
        __shared__ int s_last;
        const int tile = blockIdx.x, nsplit = gridDim.y;
        int *wb = ws + ((size_t)tile * nsplit + blockIdx.y) * (size_t)(BM * BN);
#pragma unroll
        for (int h = 0; h < MH; h++)
#pragma unroll
            for (int i = 0; i < NACC; i++) __stcg(wb + (h * NACC + i) * NT + tid, acc[h][i]);
        __threadfence();
        __syncthreads();
        if (tid == 0) s_last = atomicAdd(&counters[tile], 1) == nsplit - 1;
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        for (int z = 0; z < nsplit; z++) {
            if (z == (int)blockIdx.y) continue;
            const int *p = ws + ((size_t)tile * nsplit + z) * (size_t)(BM * BN);
#pragma unroll
            for (int h = 0; h < MH; h++)
#pragma unroll
                for (int i = 0; i < NACC; i++) acc[h][i] += __ldcg(p + (h * NACC + i) * NT + tid);
        }
        if (tid == 0) counters[tile] = 0;
    }
#undef A_ISSUE
#undef STAGE

#pragma unroll
    for (int h = 0; h < MH; h++)
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
            int n = n0 + j * 8 + 2 * t;
            epi_store(mode, C, ldc, M, N, row0[h], n, acc[h][4 * j + 0], acc[h][4 * j + 1], sa, sas, sb, sbs);
            epi_store(mode, C, ldc, M, N, row1[h], n, acc[h][4 * j + 2], acc[h][4 * j + 3], sa, sas, sb, sbs);
        }
}

#define QGEMM_WGMMA_KERNEL(name, BN_, ST_, DA_, WGS_, MH_, MINB)                                              \
    extern "C" __global__ void __launch_bounds__(128 * WGS_, MINB)                                         \
        name(const int8_t *__restrict__ A, int lda, const int8_t *__restrict__ Bp, int *C, int ldc, int M,    \
             int N, int K, int kps, int mode, const float *sa, int sas, const float *sb, int sbs,           \
             int desc_swap, unsigned c_off_lo, unsigned c_off_hi, int *ws, int *counters)                  \
    {                                                                                                      \
        C += (long long)(((unsigned long long)c_off_hi << 32) | c_off_lo);                                 \
        __shared__ __align__(128) uint8_t sB[ST_ * BN_ * 32];                                              \
        __shared__ __align__(16) uint4 sA[DA_ * 2 * 128 * WGS_ * MH_];                                      \
        __shared__ __align__(8) uint64_t full[ST_], empty[ST_];                                            \
        qgemm_body<BN_, ST_, DA_, WGS_, MH_>(A, lda, Bp, C, ldc, M, N, K, kps, mode, sa, sas, sb, sbs, desc_swap, \
                                        sB, sA, full, empty, ws, counters);                                \
    }

/* name, BN, B stages (k32), A blocks (k64) ahead, warpgroups, m64 row blocks per warpgroup (tile rows
 * BM = 64 x warpgroups x row blocks), CTAs per SM; static shared memory < 48 KiB. Work-group size
 * 128 x warpgroups. The backend runs w1_64x256_s4a3 (grids of >= 396 tiles: 3 CTAs per SM, 166
 * registers) and w1_64x128_s6 (4 CTAs per SM, with split-K); the others are measured beside them
 * (bench/gpu/run.sh; 128x128_a3 was the first round's kernel). */
QGEMM_WGMMA_KERNEL(qgemm_wgmma_128x128_a3, 128, 4, 3, 2, 1, 2)
QGEMM_WGMMA_KERNEL(qgemm_wgmma_128x64_s8, 64, 8, 3, 2, 1, 2)
QGEMM_WGMMA_KERNEL(qgemm_wgmma_w1_64x256_s4, 256, 4, 2, 1, 1, 3)
QGEMM_WGMMA_KERNEL(qgemm_wgmma_w1_64x256_s4a3, 256, 4, 3, 1, 1, 3)
QGEMM_WGMMA_KERNEL(qgemm_wgmma_w1_64x128_s6, 128, 6, 4, 1, 1, 4)

/* Diagnostic: echoes its parameters into C[0..12] (checks the OpenCL argument passing of this module). */
extern "C" __global__ void qgemm_wgmma_probe(const int8_t *A, int lda, const int8_t *Bp, int *C, int ldc, int M,
                                             int N, int K, int kps, int mode, const float *sa, int sas,
                                             const float *sb, int sbs, int desc_swap, unsigned c_off_lo,
                                             unsigned c_off_hi, int *ws, int *counters)
{
    (void)ws;
    (void)counters;
    (void)c_off_lo;
    (void)c_off_hi;
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        C[0] = lda; C[1] = ldc; C[2] = M; C[3] = N; C[4] = K; C[5] = kps; C[6] = mode;
        C[7] = sas; C[8] = sbs; C[9] = desc_swap; C[10] = A[0]; C[11] = Bp[0];
        C[12] = (int)(sa[0] * 1000.0f) + (int)(sb[0] * 1000000.0f);
    }
}
