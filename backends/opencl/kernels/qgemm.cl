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
 * Scales: per-tensor (one factor, scale[0] = sa * sb) or, with per_channel, per row of A and
 * per column of B: f = sa[r / a_group] * sb[c / b_group], one f32 multiply per element, then
 * 0.0f + f * (float)acc as above (the CPU's single-chunk epilogue). Blocks that split K take the
 * dequantize + f32 GEMM route.
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
         __global float *out, __global const float *scale, const int per_channel,
         __global const float *sa, const long a_group, __global const float *sb,
         const long b_group) {
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
            if (col < n) {
                const float f = per_channel ? sa[row / a_group] * sb[col / b_group] : s;
                out[row * n + col] = 0.0f + f * convert_float_rte(acc[r][c]);
            }
        }
    }
}

/* qgemm_i8_rows: the same product and epilogue without local memory or barriers (CPU devices,
 * see gemm_f32_rows in gemm.cl). Work item (jb, ib, batch) computes the RM x 16
 * block at rows ib*RM, columns jb*16 with int16 accumulators (a char16 load of B's row per k);
 * edges and TRANS_B take a scalar loop. Global size: (ceil(n/16), ceil(m/RM), batch). */
#ifndef RM
#define RM 8
#endif

static int qa_at(__global const char *A, int trans_a, long lda, long i, long p) {
    return (int)(trans_a ? A[p * lda + i] : A[i * lda + p]);
}

__kernel void qgemm_i8_rows(const int trans_a, const int trans_b, const long m, const long n,
                            const long k, __global const char *A, __global const long *a_off,
                            const long lda, __global const char *B, __global const long *b_off,
                            const long ldb, __global float *out, __global const float *scale,
                            const int per_channel, __global const float *sa, const long a_group,
                            __global const float *sb, const long b_group) {
    const long j0 = (long)get_global_id(0) * 16, i0 = (long)get_global_id(1) * RM;
    const long bi = (long)get_global_id(2);
    if (j0 >= n || i0 >= m)
        return;
    A += a_off[bi];
    B += b_off[bi];
    out += bi * m * n;
    const int rows = (int)min((long)RM, m - i0);
    const float s = scale[0];
    if (!trans_b && j0 + 16 <= n) {
        int16 acc[RM];
        for (int r = 0; r < RM; r++)
            acc[r] = (int16)(0);
        for (long p = 0; p < k; p++) {
            const int16 b = convert_int16(vload16(0, B + p * ldb + j0));
            for (int r = 0; r < RM; r++)
                if (r < rows)
                    acc[r] += qa_at(A, trans_a, lda, i0 + r, p) * b;
        }
        float16 sbv = (float16)(s);
        if (per_channel) {
            float t[16];
            for (int c = 0; c < 16; c++)
                t[c] = sb[(j0 + c) / b_group];
            sbv = vload16(0, t);
        }
        for (int r = 0; r < rows; r++) {
            const float16 f = per_channel ? sa[(i0 + r) / a_group] * sbv : (float16)(s);
            vstore16((float16)(0.0f) + f * convert_float16_rte(acc[r]), 0, out + (i0 + r) * n + j0);
        }
        return;
    }
    const int cols = (int)min((long)16, n - j0);
    for (int c = 0; c < cols; c++) {
        const long j = j0 + c;
        int acc[RM];
        for (int r = 0; r < RM; r++)
            acc[r] = 0;
        for (long p = 0; p < k; p++) {
            const int b = (int)(trans_b ? B[j * ldb + p] : B[p * ldb + j]);
            for (int r = 0; r < RM; r++)
                if (r < rows)
                    acc[r] += qa_at(A, trans_a, lda, i0 + r, p) * b;
        }
        for (int r = 0; r < rows; r++) {
            const float f = per_channel ? sa[(i0 + r) / a_group] * sb[j / b_group] : s;
            out[(i0 + r) * n + j] = 0.0f + f * convert_float_rte(acc[r]);
        }
    }
}
