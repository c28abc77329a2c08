/* gemm.cl: batched f32 GEMM, tiled in local memory and in registers.
 *
 *   for i in [0, batch):  C_i = alpha * op(A_i) @ op(B_i) + beta * C_i      (beta 0: C_i not read)
 *
 * Layout (all row-major, element offsets):
 *   A_i starts at A + a_off[i]: [m, k] with row stride k, or [k, m] with row stride m (TRANS_A);
 *   B_i starts at B + b_off[i]: [k, n] with row stride n, or [n, k] with row stride k (TRANS_B);
 *   C_i is the dense [m, n] block at C + i*m*n.
 * No scales: f32 throughout; the accumulation order is the k order within each work item, so
 * results differ from OpenBLAS only by rounding (the tests allow for it).
 *
 * Work decomposition: a work-group of (TN/WN) x (TM/WM) items computes one TM x TN tile of C; item
 * (tx, ty) owns the WM x WN outputs at rows ty + r*(TM/WM), columns tx + c*(TN/WN) (strided, so
 * that neighbouring items touch neighbouring columns: coalesced stores). Each step stages a TM x
 * TK panel of A and a TK x TN panel of B in local memory (zero-filled past the edges).
 * Global size: (ceil(n/TN)*(TN/WN), ceil(m/TM)*(TM/WM), batch).
 *
 * Tunables (-D from the host; defaults below): TM, TN (tile), TK (depth), WM, WN (per item). */
#ifndef TM
#define TM 64
#endif
#ifndef TN
#define TN 64
#endif
#ifndef TK
#define TK 16
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
gemm_f32(const int trans_a, const int trans_b, const long m, const long n, const long k,
         __global const float *A, __global const long *a_off, __global const float *B,
         __global const long *b_off, __global float *C, const float alpha, const float beta) {
    __local float As[TK][TM + 1];
    __local float Bs[TK][TN + 1];
    const int tx = (int)get_local_id(0), ty = (int)get_local_id(1);
    const int tid = ty * LX + tx;
    const long bi = (long)get_global_id(2);
    const long row0 = (long)get_group_id(1) * TM, col0 = (long)get_group_id(0) * TN;
    A += a_off[bi];
    B += b_off[bi];
    C += bi * m * n;
    const long lda = trans_a ? m : k, ldb = trans_b ? k : n;

    float acc[WM][WN];
    for (int r = 0; r < WM; r++)
        for (int c = 0; c < WN; c++)
            acc[r][c] = 0.0f;

    for (long k0 = 0; k0 < k; k0 += TK) {
        for (int e = tid; e < TM * TK; e += LX * LY) {
            int i, kk;
            if (trans_a) { /* A is [k, m]: consecutive items read consecutive rows of C */
                kk = e / TM;
                i = e % TM;
            } else {
                i = e / TK;
                kk = e % TK;
            }
            const long r = row0 + i, c = k0 + kk;
            float v = 0.0f;
            if (r < m && c < k)
                v = trans_a ? A[c * lda + r] : A[r * lda + c];
            As[kk][i] = v;
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
            float v = 0.0f;
            if (r < k && c < n)
                v = trans_b ? B[c * ldb + r] : B[r * ldb + c];
            Bs[kk][j] = v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < TK; kk++) {
            float a[WM], b[WN];
            for (int r = 0; r < WM; r++)
                a[r] = As[kk][ty + r * LY];
            for (int c = 0; c < WN; c++)
                b[c] = Bs[kk][tx + c * LX];
            for (int r = 0; r < WM; r++)
                for (int c = 0; c < WN; c++)
                    acc[r][c] += a[r] * b[c];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    for (int r = 0; r < WM; r++) {
        const long row = row0 + ty + r * LY;
        if (row >= m)
            continue;
        for (int c = 0; c < WN; c++) {
            const long col = col0 + tx + c * LX;
            if (col >= n)
                continue;
            float v = alpha * acc[r][c];
            if (beta != 0.0f)
                v += beta * C[row * n + col];
            C[row * n + col] = v;
        }
    }
}

/* gemm_f32_rows: the same product without local memory or barriers, for CPU devices (PoCL runs
 * each work item's body as a loop; barrier-free code keeps the accumulators in registers, and a
 * row strip per item walks memory contiguously). ember runs it on CPU devices.
 * Work item (jb, ib, batch) computes the RM x 16 block at rows ib*RM, columns jb*16: per k, one
 * float16 load of B's row (contiguous), RM broadcasts of A, RM vector multiply-adds. Edges (and
 * TRANS_B) take a scalar loop. Global size: (ceil(n/16), ceil(m/RM), batch), any local size.
 * Tunable: RM (rows per item, default 8). */
#ifndef RM
#define RM 8
#endif

static float a_at(__global const float *A, int trans_a, long lda, long i, long p) {
    return trans_a ? A[p * lda + i] : A[i * lda + p];
}

__kernel void gemm_f32_rows(const int trans_a, const int trans_b, const long m, const long n,
                            const long k, __global const float *A, __global const long *a_off,
                            __global const float *B, __global const long *b_off,
                            __global float *C, const float alpha, const float beta) {
    const long j0 = (long)get_global_id(0) * 16, i0 = (long)get_global_id(1) * RM;
    const long bi = (long)get_global_id(2);
    if (j0 >= n || i0 >= m)
        return;
    A += a_off[bi];
    B += b_off[bi];
    C += bi * m * n;
    const long lda = trans_a ? m : k, ldb = trans_b ? k : n;
    const int rows = (int)min((long)RM, m - i0);
    if (!trans_b && j0 + 16 <= n) {
        float16 acc[RM];
        for (int r = 0; r < RM; r++)
            acc[r] = (float16)(0.0f);
        for (long p = 0; p < k; p++) {
            const float16 b = vload16(0, B + p * ldb + j0);
            for (int r = 0; r < RM; r++)
                if (r < rows)
                    acc[r] += a_at(A, trans_a, lda, i0 + r, p) * b;
        }
        for (int r = 0; r < rows; r++) {
            float16 v = alpha * acc[r];
            if (beta != 0.0f)
                v += beta * vload16(0, C + (i0 + r) * n + j0);
            vstore16(v, 0, C + (i0 + r) * n + j0);
        }
        return;
    }
    const int cols = (int)min((long)16, n - j0);
    for (int c = 0; c < cols; c++) {
        const long j = j0 + c;
        float acc[RM];
        for (int r = 0; r < RM; r++)
            acc[r] = 0.0f;
        for (long p = 0; p < k; p++) {
            const float b = trans_b ? B[j * ldb + p] : B[p * ldb + j];
            for (int r = 0; r < RM; r++)
                if (r < rows)
                    acc[r] += a_at(A, trans_a, lda, i0 + r, p) * b;
        }
        for (int r = 0; r < rows; r++) {
            float v = alpha * acc[r];
            if (beta != 0.0f)
                v += beta * C[(i0 + r) * n + j];
            C[(i0 + r) * n + j] = v;
        }
    }
}
