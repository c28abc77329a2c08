/* nn.cl: the neural-network ops of ember/nn.h on an OpenCL device (backends/opencl/cl_nn.c).
 *
 * relu_f32, relu_backward_f32, axpy_f32, argmax_f32, select_rows give the very bits of
 * the host kernels (backends/cpu/cpu_nn.c): the same comparisons, one rounding per axpy element
 * (contraction into fma is off in this file), the same first-index rule for ties and NaN.
 * softmax_f32 and cross_entropy_f32 reduce a row in one work-group (a power-of-two size L, given
 * as -DL=..): the maximum, then the sum of exp(x - max) in double where the device has cl_khr_fp64
 * (as the host does), else in float; their results match the host within a few f32 ulps, not bit
 * for bit (another exp, another summation order). cross_entropy_f32 writes each row's
 * logsumexp - x[target] into `row_loss`; ce_mean_f32 (one work-group) sums those into the mean. */
#pragma OPENCL FP_CONTRACT OFF
#ifdef EMBER_HAVE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double acc_t; /* exp / log below are acc_t's overloads */
#else
typedef float acc_t;
#endif

__kernel void relu_f32(const long n, __global const float *x, __global float *out) {
    const long i = (long)get_global_id(0);
    if (i < n)
        out[i] = x[i] <= 0.0f ? 0.0f : x[i];
}

__kernel void relu_backward_f32(const long n, __global const float *y, __global const float *dy,
                                __global float *dx) {
    const long i = (long)get_global_id(0);
    if (i < n)
        dx[i] = y[i] <= 0.0f ? 0.0f : dy[i];
}

__kernel void axpy_f32(const long n, const float alpha, __global const float *x,
                       __global const float *y, __global float *out) {
    const long i = (long)get_global_id(0);
    if (i < n) {
        const float ax = alpha * x[i];
        out[i] = ax + y[i];
    }
}

/* x viewed as [outer, n, inner]: one work item per (o, i). */
__kernel void argmax_f32(const long outer, const long n, const long inner,
                         __global const float *x, __global long *out) {
    const long id = (long)get_global_id(0);
    if (id >= outer * inner)
        return;
    const long o = id / inner, i = id % inner;
    __global const float *p = x + o * n * inner + i;
    long best = 0;
    float bv = p[0];
    for (long k = 1; k < n && !isnan(bv); k++) {
        const float v = p[k * inner];
        if (isnan(v) || v > bv) {
            best = k;
            bv = v;
        }
    }
    out[id] = best;
}

static long index_at(__global const int *idx, const int idx64, const long i) {
    return idx64 ? ((__global const long *)idx)[i] : (long)idx[i];
}

/* out[o, i, :] = x[o, idx[i], :], a slice being `w` words: 4-byte words when `wide`, else bytes.
 * Dimension 0 runs over the words of a slice, dimension 1 over (o, i) = o * n_idx + i. */
__kernel void select_rows(const long outer, const long n, const long n_idx, const long w,
                          const int wide, __global const uchar *x, __global const int *idx,
                          const int idx64, __global uchar *out) {
    const long j = (long)get_global_id(0), row = (long)get_global_id(1);
    if (j >= w || row >= outer * n_idx)
        return;
    const long o = row / n_idx, i = row % n_idx;
    const long src = (o * n + index_at(idx, idx64, i)) * w + j, dst = row * w + j;
    if (wide)
        ((__global uint *)out)[dst] = ((__global const uint *)x)[src];
    else
        out[dst] = x[src];
}

/* ---- row reductions over one work-group of L items ---- */

static float group_max(__local float *red, float v) {
    const int t = (int)get_local_id(0);
    red[t] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L / 2; h > 0; h >>= 1) {
        if (t < h && red[t + h] > red[t])
            red[t] = red[t + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float m = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return m;
}

static acc_t group_sum(__local acc_t *red, acc_t v) {
    const int t = (int)get_local_id(0);
    red[t] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L / 2; h > 0; h >>= 1) {
        if (t < h)
            red[t] += red[t + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const acc_t s = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return s;
}

/* The maximum of row xr ignoring NaN (as the host's row_max: NaN then propagates through exp),
 * and the sum of exp(x - max). */
static void row_stats(__global const float *xr, const long cols, __local float *redf,
                      __local acc_t *reda, acc_t *m_out, acc_t *s_out) {
    const int t = (int)get_local_id(0);
    float m = -INFINITY;
    for (long j = t; j < cols; j += L)
        if (xr[j] > m)
            m = xr[j];
    const acc_t mm = (acc_t)group_max(redf, m);
    acc_t s = 0;
    for (long j = t; j < cols; j += L)
        s += exp((acc_t)xr[j] - mm);
    *s_out = group_sum(reda, s);
    *m_out = mm;
}

/* One work-group per row. */
__kernel __attribute__((reqd_work_group_size(L, 1, 1))) void
softmax_f32(const long cols, __global const float *x, __global float *out) {
    __local float redf[L];
    __local acc_t reda[L];
    const long r = (long)get_group_id(0);
    __global const float *xr = x + r * cols;
    __global float *o = out + r * cols;
    acc_t m, s;
    row_stats(xr, cols, redf, reda, &m, &s);
    for (long j = (long)get_local_id(0); j < cols; j += L)
        o[j] = (float)(exp((acc_t)xr[j] - m) / s);
}

/* One work-group per row: row_loss[r] = logsumexp(x_r) - x_r[t]; with want_grad, dlogits[r, j] =
 * (softmax_j - [j == t]) / rows. */
__kernel __attribute__((reqd_work_group_size(L, 1, 1))) void
cross_entropy_f32(const long rows, const long cols, __global const float *x,
                  __global const int *targets, const int t64, const int want_grad,
                  __global acc_t *row_loss, __global float *dlogits) {
    __local float redf[L];
    __local acc_t reda[L];
    const long r = (long)get_group_id(0);
    __global const float *xr = x + r * cols;
    const long t = index_at(targets, t64, r);
    acc_t m, s;
    row_stats(xr, cols, redf, reda, &m, &s);
    if (get_local_id(0) == 0)
        row_loss[r] = m + log(s) - (acc_t)xr[t];
    if (want_grad) {
        const acc_t inv_rows = (acc_t)1 / (acc_t)rows;
        __global float *g = dlogits + r * cols;
        for (long j = (long)get_local_id(0); j < cols; j += L) {
            const acc_t p = exp((acc_t)xr[j] - m) / s;
            g[j] = (float)((p - (j == t ? (acc_t)1 : (acc_t)0)) * inv_rows);
        }
    }
}

/* One work-group: loss[0] = the mean of the rows' losses. */
__kernel __attribute__((reqd_work_group_size(L, 1, 1))) void
ce_mean_f32(const long rows, __global const acc_t *row_loss, __global float *loss) {
    __local acc_t reda[L];
    acc_t s = 0;
    for (long r = (long)get_local_id(0); r < rows; r += L)
        s += row_loss[r];
    s = group_sum(reda, s);
    if (get_local_id(0) == 0)
        loss[0] = (float)(s * ((acc_t)1 / (acc_t)rows));
}
