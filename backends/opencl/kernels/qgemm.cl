/* qgemm.cl: batched int8 GEMM with exact int32 accumulation and ember's per-tensor epilogue.
 *
 *   for i in [0, batch):  out_i[r, c] = (float)(sum_k A_i[r, k] * B_i[k, c]) * scale[0]
 *
 * The epilogue is the CPU backend's (backends/cpu/qgemm.c: acc = 0.0f; acc += sa * sb * (float)dot),
 * operation for operation, so that per-tensor results are bit-identical on every backend: the
 * int32 sum is exact (no saturation; |sum| < 2^31 for k < 2^17), converted to f32 rounding to
 * nearest even, multiplied once by scale[0] = sa * sb (the two effective per-tensor scales
 * multiplied first, in f32; kernel q_scale_prod in quant.cl), then added to +0.0f (which turns
 * an underflowed -0 into +0, as the CPU's accumulator does). FP_CONTRACT is off.
 * In C: out = 0.0f + (sa * sb) * (float)acc.
 *
 * Layout: A_i is int8 [m, k] at byte a_off[i] of A, element (r, c) at byte r*lda + c (TRANS_A:
 * stored [k, m], at c*lda + r); B_i is int8 [k, n] at byte b_off[i] of B, (r, c) at r*ldb + c
 * (TRANS_B: stored [n, k], at c*ldb + r). lda / ldb are in bytes, so PackedU32 Q8 rows padded to
 * whole words are read in place. out_i is the dense row-major f32 [m, n] block at i*m*n.
 * No block scales here: per-block schemes take the dequantize + f32 GEMM route.
 *
 * Work decomposition as in gemm.cl: a (TN/WN) x (TM/WM) work-group computes a TM x TN tile, each
 * item WM x WN outputs at strided positions; A and B panels of depth TK are staged in local
 * memory with k innermost for both (As[row][k], Bs[col][k]) so that four consecutive k of a row
 * and of a column are one char4: EMBER_DOT4 (set by the host for the "opencl.dot4" path, on
 * devices with cl_khr_integer_dot_product) multiplies them with dot(); otherwise ("opencl.generic")
 * with four int multiply-adds. Both give the same exact sum.
 *
 * Tunables (-D; defaults below): TM, TN, TK (multiple of 4), WM, WN. */
#pragma OPENCL FP_CONTRACT OFF
#ifdef EMBER_DOT4
#pragma OPENCL EXTENSION cl_khr_integer_dot_product : enable
#endif
#ifndef TM
#define TM 64
#endif
#ifndef TN
#define TN 64
#endif
#ifndef TK
#define TK 32
#endif
#ifndef WM
#define WM 4
#endif
#ifndef WN
#define WN 4
#endif
#define LX (TN / WN)
#define LY (TM / WM)

__kernel __attribute__((reqd_work_group_size(LX, LY, 1))) void
qgemm_i8(const int trans_a, const int trans_b, const long m, const long n, const long k,
         __global const char *A, __global const long *a_off, const long lda,
         __global const char *B, __global const long *b_off, const long ldb,
         __global float *out, __global const float *scale) {
    __local char As[TM][TK];
    __local char Bs[TN][TK];
    const int tx = (int)get_local_id(0), ty = (int)get_local_id(1);
    const int tid = ty * LX + tx;
    const long bi = (long)get_global_id(2);
    const long row0 = (long)get_group_id(1) * TM, col0 = (long)get_group_id(0) * TN;
    A += a_off[bi];
    B += b_off[bi];
    out += bi * m * n;

    int acc[WM][WN];
    for (int r = 0; r < WM; r++)
        for (int c = 0; c < WN; c++)
            acc[r][c] = 0;

    for (long k0 = 0; k0 < k; k0 += TK) {
        for (int e = tid; e < TM * TK; e += LX * LY) {
            int i, kk;
            if (trans_a) {
                kk = e / TM;
                i = e % TM;
            } else {
                i = e / TK;
                kk = e % TK;
            }
            const long r = row0 + i, c = k0 + kk;
            char v = 0;
            if (r < m && c < k)
                v = trans_a ? A[c * lda + r] : A[r * lda + c];
            As[i][kk] = v;
        }
        for (int e = tid; e < TK * TN; e += LX * LY) {
            int j, kk;
            if (trans_b) {
                j = e / TK;
                kk = e % TK;
            } else {
                kk = e / TN;
                j = e % TN;
            }
            const long r = k0 + kk, c = col0 + j;
            char v = 0;
            if (r < k && c < n)
                v = trans_b ? B[c * ldb + r] : B[r * ldb + c];
            Bs[j][kk] = v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < TK; kk += 4) {
            char4 a[WM], b[WN];
            for (int r = 0; r < WM; r++)
                a[r] = vload4(0, &As[ty + r * LY][kk]);
            for (int c = 0; c < WN; c++)
                b[c] = vload4(0, &Bs[tx + c * LX][kk]);
            for (int r = 0; r < WM; r++)
                for (int c = 0; c < WN; c++) {
#ifdef EMBER_DOT4
                    acc[r][c] += dot(a[r], b[c]);
#else
                    const int4 p = convert_int4(a[r]) * convert_int4(b[c]);
                    acc[r][c] += (p.x + p.y) + (p.z + p.w);
#endif
                }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    const float s = scale[0];
    for (int r = 0; r < WM; r++) {
        const long row = row0 + ty + r * LY;
        if (row >= m)
            continue;
        for (int c = 0; c < WN; c++) {
            const long col = col0 + tx + c * LX;
            if (col < n)
                out[row * n + col] = 0.0f + s * convert_float_rte(acc[r][c]);
        }
    }
}
