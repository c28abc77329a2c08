/* elementwise.cl: broadcast add / mul, column sums, float dtype conversions.
 *
 * binary_f32: out[idx] = A[a-offset(idx)] op B[b-offset(idx)] over out's shape (rank <= 8).
 *   shape, a_stride, b_stride are in elements, left-padded to `rank` axes; a stride is 0 on an
 *   axis the operand broadcasts. One work item per output element; op 0 = add, 1 = mul.
 * sum_rows_f32: out[j] = sum over r of X[r*cols + j], X viewed as [rows, cols]. One work item
 *   per column, accumulating in double when the device has cl_khr_fp64 (EMBER_HAVE_FP64), as the
 *   CPU backend does, else in float with Kahan compensation.
 * convert_*: F32 <-> BF16 / F16 on raw 16-bit patterns with integer arithmetic only, rounding to
 *   nearest even and keeping NaN quiet, bit-identical to dispatch/half.c (no cl_khr_fp16 needed
 *   for the arithmetic; F16 tensors only live on fp16 devices by ember's rule). */
#ifdef EMBER_HAVE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

__kernel void binary_f32(const int op, const int rank, const long total, const long8 shape8,
                         const long8 as8, const long8 bs8, __global const float *A,
                         __global const float *B, __global float *out) {
    const long o = (long)get_global_id(0);
    if (o >= total)
        return;
    long shape[8], as[8], bs[8];
    vstore8(shape8, 0, shape);
    vstore8(as8, 0, as);
    vstore8(bs8, 0, bs);
    long rem = o, ao = 0, bo = 0;
    for (int d = rank - 1; d >= 0; d--) {
        const long c = rem % shape[d];
        rem /= shape[d];
        ao += c * as[d];
        bo += c * bs[d];
    }
    out[o] = op == 0 ? A[ao] + B[bo] : A[ao] * B[bo];
}

__kernel void sum_rows_f32(__global const float *X, const long rows, const long cols,
                           __global float *out) {
    const long j = (long)get_global_id(0);
    if (j >= cols)
        return;
#ifdef EMBER_HAVE_FP64
    double acc = 0.0;
    for (long r = 0; r < rows; r++)
        acc += (double)X[r * cols + j];
    out[j] = (float)acc;
#else
    float acc = 0.0f, comp = 0.0f;
    for (long r = 0; r < rows; r++) {
        const float y = X[r * cols + j] - comp;
        const float t = acc + y;
        comp = (t - acc) - y;
        acc = t;
    }
    out[j] = acc;
#endif
}

static ushort f32_to_bf16_bits(uint x) {
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
        return (ushort)((x >> 16) | 0x40u);
    const uint lsb = (x >> 16) & 1u;
    x += 0x7fffu + lsb;
    return (ushort)(x >> 16);
}

static ushort f32_to_f16_bits(uint x) {
    const uint sign = (x >> 16) & 0x8000u;
    const uint exp = (x >> 23) & 0xffu;
    uint man = x & 0x7fffffu;
    if (exp == 0xffu)
        return (ushort)(sign | 0x7c00u | (man ? (0x200u | (man >> 13)) : 0u));
    const int e = (int)exp - 127 + 15;
    if (e >= 0x1f)
        return (ushort)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10)
            return (ushort)sign;
        man |= 0x800000u;
        const uint shift = (uint)(14 - e);
        uint half_man = man >> shift;
        const uint rem = man & ((1u << shift) - 1u);
        const uint halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (half_man & 1u)))
            half_man++;
        return (ushort)(sign | half_man);
    }
    uint h = sign | ((uint)e << 10) | (man >> 13);
    const uint rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (ushort)h;
}

static uint f16_bits_to_f32_bits(uint h) {
    const uint sign = (h & 0x8000u) << 16;
    const uint exp = (h >> 10) & 0x1fu;
    uint man = h & 0x3ffu;
    if (exp == 0x1fu)
        return sign | 0x7f800000u | (man << 13);
    if (exp == 0u) {
        if (man == 0u)
            return sign;
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while (!(man & 0x400u));
        man &= 0x3ffu;
        return sign | ((uint)(127 - 15 - e) << 23) | (man << 13);
    }
    return sign | ((exp - 15u + 127u) << 23) | (man << 13);
}

/* kind: 0 F32 -> BF16, 1 BF16 -> F32, 2 F32 -> F16, 3 F16 -> F32 */
__kernel void convert_f(const int kind, const long n, __global const uint *src32,
                        __global const ushort *src16, __global uint *dst32,
                        __global ushort *dst16) {
    const long i = (long)get_global_id(0);
    if (i >= n)
        return;
    switch (kind) {
    case 0:
        dst16[i] = f32_to_bf16_bits(src32[i]);
        break;
    case 1:
        dst32[i] = (uint)src16[i] << 16;
        break;
    case 2:
        dst16[i] = f32_to_f16_bits(src32[i]);
        break;
    default:
        dst32[i] = f16_bits_to_f32_bits(src16[i]);
        break;
    }
}
