/* quant.cl: burn's quantization on the device (spec/burn-semantics.md §4), bit-identical to the
 * CPU backend (quant/ is the reference).
 *
 * Per element:  quantize    q  = clamp(round_half_away(x / s), a, b)       (integer values)
 *                            q  = encode_rne(clamp(x / s, -max, max))       (E4M3, E5M2, E2M1)
 *               dequantize  x' = s * q                                      (one f32 multiply)
 * where s is the effective f32 scale of the element's block: the stored scale decoded, times the
 * global f32 scale for two-level schemes (g * s_b, rounded once to f32). The division is exact
 * (correctly rounded) f32: the host builds with -cl-fp32-correctly-rounded-divide-sqrt where the
 * device supports it, else divides in double (EMBER_HAVE_FP64; double rounding is innocuous for a
 * quotient of two floats), else uses the device's division (documented as possibly inexact).
 * FP_CONTRACT is off so that no multiply is fused with anything.
 *
 * Layout of a quantized buffer (burn's QuantizedBytes): values at byte 0, block scales at
 * `scales_off` (one per block, row-major over the grid, `sdt` = ember_scale_dtype: 0 F32, 1 F16,
 * 2 BF16, 4 UE4M3; little-endian), the f32 global scale at `global_off` (two-level only, else -1).
 * Values: the tensor as `rows` lines of L (= last dim) values, each line stored as U units of
 * `unit_bytes` (1 or 4) holding `per` fields of `bits` bits, value j of a unit at bits
 * [j*bits, (j+1)*bits), least significant first; a partial last unit is zero-padded. Native 8-bit:
 * per 1, unit 1 byte; PackedU32: per 32/bits, unit 4 bytes (a little-endian u32); PackedNative
 * E2M1: per 2, unit 1 byte.
 * vkind: 0 two's-complement integer of `bits` bits, 1 E4M3, 2 E5M2, 3 E2M1.
 *
 * Blocks: block dims `block` (left-padded with 1s to the rank; the whole shape for per-tensor)
 * and the grid ceil(shape/block) come as long8; block_of(i) maps a row-major element index to
 * the row-major block index (spec §4.5). */
#pragma OPENCL FP_CONTRACT OFF
#ifdef EMBER_HAVE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

static float div_exact(float x, float s) {
#if defined(EMBER_CR_DIVIDE) || !defined(EMBER_HAVE_FP64)
    return x / s;
#else
    return (float)((double)x / (double)s);
#endif
}

static long block_of(long i, int rank, const long *shape, const long *block, const long *grid) {
    long b = 0, stride = 1;
    for (int d = rank - 1; d >= 0; d--) {
        const long c = i % shape[d];
        i /= shape[d];
        b += (c / block[d]) * stride;
        stride *= grid[d];
    }
    return b;
}

/* ---- minifloat codecs: ebits/mbits/bias of E4M3 (4, 3, 7), E5M2 (5, 2, 15), E2M1 (2, 1, 1) ---- */

static void mf_params(int vkind, int *mbits, int *bias, float *maxv) {
    if (vkind == 1) {
        *mbits = 3;
        *bias = 7;
        *maxv = 448.0f;
    } else if (vkind == 2) {
        *mbits = 2;
        *bias = 15;
        *maxv = 57344.0f;
    } else {
        *mbits = 1;
        *bias = 1;
        *maxv = 6.0f;
    }
}

/* v already clamped to [-max, max] and not NaN; round to nearest, ties to even. */
static uint mf_encode(float v, int vkind, int bits) {
    int mbits, bias;
    float maxv;
    mf_params(vkind, &mbits, &bias, &maxv);
    const uint sign = (as_uint(v) >> 31) << (bits - 1);
    const float a = fabs(v);
    const int minexp = 1 - bias;
    uint code;
    if (a < ldexp(1.0f, minexp)) { /* subnormal range: multiples of 2^(minexp - mbits) */
        code = (uint)rint(ldexp(a, mbits - minexp));
    } else {
        int e = (int)((as_uint(a) >> 23) & 0xffu) - 127;
        float mant = rint(ldexp(a, mbits - e)); /* in [2^mbits, 2^(mbits+1)] */
        if (mant >= ldexp(1.0f, mbits + 1)) {
            e++;
            mant = ldexp(1.0f, mbits);
        }
        code = ((uint)(e + bias) << mbits) | ((uint)mant - (1u << mbits));
    }
    return sign | code;
}

static float mf_decode(uint code, int vkind, int bits) {
    int mbits, bias;
    float maxv;
    mf_params(vkind, &mbits, &bias, &maxv);
    const int ebits = bits - 1 - mbits;
    const uint sign = (code >> (bits - 1)) & 1u;
    const uint e = (code >> mbits) & ((1u << ebits) - 1u);
    const uint m = code & ((1u << mbits) - 1u);
    float v;
    if (vkind == 1 && e == 15u && m == 7u)
        v = NAN;
    else if (vkind == 2 && e == 31u)
        v = m ? NAN : INFINITY;
    else if (e == 0u)
        v = ldexp((float)m, 1 - bias - mbits);
    else
        v = ldexp((float)(m | (1u << mbits)), (int)e - bias - mbits);
    return sign ? -v : v;
}

/* ---- scale dtypes ---- */

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

static float load_scale(__global const uchar *p, int sdt) {
    switch (sdt) {
    case 0:
        return as_float((uint)p[0] | ((uint)p[1] << 8) | ((uint)p[2] << 16) | ((uint)p[3] << 24));
    case 1:
        return as_float(f16_bits_to_f32_bits((uint)p[0] | ((uint)p[1] << 8)));
    case 2:
        return as_float(((uint)p[0] | ((uint)p[1] << 8)) << 16);
    default: /* UE4M3: an E4M3 bit pattern */
        return mf_decode((uint)p[0], 1, 8);
    }
}

/* The effective scale of block b. */
static float eff_scale(__global const uchar *q, long scales_off, int sdt, int ssize, long b,
                       long global_off) {
    float s = load_scale(q + scales_off + b * ssize, sdt);
    if (global_off >= 0)
        s = load_scale(q + global_off, 0) * s;
    return s;
}

/* ---- kernels ---- */

/* One work-group per block: alpha[b] = max |x| over the block, bad[b] = 1 when the block holds a
 * NaN or an Inf. Partial blocks at the edges are clipped. */
__kernel void q_absmax(__global const float *x, __global float *alpha, __global int *bad,
                       const int rank, const long8 shape8, const long8 block8, const long8 grid8,
                       __local float *red, __local int *redbad) {
    long shape[8], block[8], grid[8], bc[8];
    vstore8(shape8, 0, shape);
    vstore8(block8, 0, block);
    vstore8(grid8, 0, grid);
    const long b = (long)get_group_id(0);
    const int lid = (int)get_local_id(0), lsz = (int)get_local_size(0);
    long t = b, bn = 1;
    for (int d = rank - 1; d >= 0; d--) {
        bc[d] = t % grid[d];
        t /= grid[d];
        bn *= block[d];
    }
    float m = 0.0f;
    int nf = 0;
    for (long e = lid; e < bn; e += lsz) {
        long rem = e, idx = 0, mul = 1;
        int inside = 1;
        for (int d = rank - 1; d >= 0; d--) {
            const long w = rem % block[d];
            rem /= block[d];
            const long co = bc[d] * block[d] + w;
            inside = inside && co < shape[d];
            idx += co * mul;
            mul *= shape[d];
        }
        if (inside) {
            const float v = x[idx];
            if (!isfinite(v))
                nf = 1;
            else
                m = fmax(m, fabs(v));
        }
    }
    red[lid] = m;
    redbad[lid] = nf;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int step = lsz / 2; step > 0; step /= 2) {
        if (lid < step) {
            red[lid] = fmax(red[lid], red[lid + step]);
            redbad[lid] |= redbad[lid + step];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        alpha[b] = red[0];
        bad[b] = redbad[0];
    }
}

/* One work item per storage unit: quantize its `per` values with the effective scales eff[]. */
__kernel void q_quantize(__global const float *x, __global uchar *qv, __global const float *eff,
                         const long rows, const long L, const long U, const int per,
                         const int bits, const int unit_bytes, const int vkind, const int qa,
                         const int qb, const int rank, const long8 shape8, const long8 block8,
                         const long8 grid8) {
    const long u = (long)get_global_id(0);
    if (u >= rows * U)
        return;
    long shape[8], block[8], grid[8];
    vstore8(shape8, 0, shape);
    vstore8(block8, 0, block);
    vstore8(grid8, 0, grid);
    const long r = u / U, cu = u % U;
    const uint mask = bits == 32 ? 0xffffffffu : ((1u << bits) - 1u);
    uint word = 0;
    for (int j = 0; j < per; j++) {
        const long c = cu * per + j;
        if (c >= L)
            break;
        const long i = r * L + c;
        const float s = eff[block_of(i, rank, shape, block, grid)];
        const float v = div_exact(x[i], s);
        uint field;
        if (vkind == 0) {
            const float q = fmin(fmax(round(v), (float)qa), (float)qb);
            field = (uint)(int)q & mask;
        } else {
            int mbits, bias;
            float maxv;
            mf_params(vkind, &mbits, &bias, &maxv);
            field = mf_encode(fmin(fmax(v, -maxv), maxv), vkind, bits) & mask;
        }
        word |= field << (j * bits);
    }
    if (unit_bytes == 4)
        ((__global uint *)qv)[u] = word;
    else
        qv[u] = (uchar)word;
}

/* One work item per element: out[i] = s_eff(block_of(i)) * value(i), as f32. */
__kernel void q_dequantize(__global const uchar *q, __global float *out, const long numel,
                           const long L, const long U, const int per, const int bits,
                           const int unit_bytes, const int vkind, const long scales_off,
                           const int sdt, const int ssize, const long global_off, const int rank,
                           const long8 shape8, const long8 block8, const long8 grid8) {
    const long i = (long)get_global_id(0);
    if (i >= numel)
        return;
    long shape[8], block[8], grid[8];
    vstore8(shape8, 0, shape);
    vstore8(block8, 0, block);
    vstore8(grid8, 0, grid);
    const long r = i / L, c = i % L;
    const long u = r * U + c / per;
    const int j = (int)(c % per);
    const uint word = unit_bytes == 4 ? ((__global const uint *)q)[u] : (uint)q[u];
    const uint field = (word >> (j * bits)) & (bits == 32 ? 0xffffffffu : ((1u << bits) - 1u));
    float v;
    if (vkind == 0)
        v = (float)(((int)(field << (32 - bits))) >> (32 - bits)); /* sign-extend */
    else
        v = mf_decode(field, vkind, bits);
    const long b = block_of(i, rank, shape, block, grid);
    out[i] = eff_scale(q, scales_off, sdt, ssize, b, global_off) * v;
}

/* out[0] = sa * sb: the epilogue factor of a per-tensor int8 matmul, from the stored scales. */
__kernel void q_scale_prod(__global const uchar *qa, const long a_soff, const int a_sdt,
                           __global const uchar *qb, const long b_soff, const int b_sdt,
                           __global float *out) {
    if (get_global_id(0) == 0)
        out[0] = load_scale(qa + a_soff, a_sdt) * load_scale(qb + b_soff, b_sdt);
}
