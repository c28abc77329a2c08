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
 * quotient of two floats), else corrects the device's quotient with fma residuals (div_exact).
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

/* x / s correctly rounded. With EMBER_SOFT_DIV (devices with neither correctly rounded division
 * nor fp64; tests force it to cover it): start from the device's quotient (OpenCL allows 2.5 ulp)
 * and step to the neighbour whose residual x - c*s, exact through fma, is smallest; a quotient of
 * two floats is never exactly halfway between two floats, so the nearest is unique. */
static float div_exact(float x, float s) {
#if defined(EMBER_SOFT_DIV) || (!defined(EMBER_CR_DIVIDE) && !defined(EMBER_HAVE_FP64))
    float q = x / s;
    if (!isfinite(q) || q == 0.0f)
        return q;
#ifdef EMBER_SOFT_DIV_TEST
    q = nextafter(nextafter(q, INFINITY), INFINITY); /* tests: start 2 ulp off */
#endif
    float r = fabs(fma(-q, s, x));
    for (int it = 0; it < 4; it++) {
        const float up = nextafter(q, INFINITY), dn = nextafter(q, -INFINITY);
        const float ru = fabs(fma(-up, s, x)), rd = fabs(fma(-dn, s, x));
        if (ru < r && ru <= rd) {
            q = up;
            r = ru;
        } else if (rd < r) {
            q = dn;
            r = rd;
        } else {
            break;
        }
    }
    return q;
#elif defined(EMBER_CR_DIVIDE)
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

/* Block layouts with a fast index (bmode): 0 per-tensor (one block); 1 row blocks (every block
 * dim 1 but the last: block b covers elements [b / gL * L + (b % gL) * bL, ... + bL) of a line of
 * L, gL = grid[rank-1], bL = block[rank-1]); 2 any rectangle (block_of over all axes). */
static long block_index(long i, int bmode, int rank, const long *shape, const long *block,
                        const long *grid) {
    if (bmode == 0)
        return 0;
    if (bmode == 1) {
        const long L = shape[rank - 1];
        return (i / L) * grid[rank - 1] + (i % L) / block[rank - 1];
    }
    return block_of(i, rank, shape, block, grid);
}

/* The element index of the e-th element of block b (row-major within the block), or -1 when that
 * position lies past the tensor's edge (a partial block). bc: b's coordinates in the grid. */
static long block_elem(long b, long e, int bmode, int rank, const long *shape, const long *block,
                       const long *grid, const long *bc) {
    if (bmode == 0)
        return e;
    if (bmode == 1) {
        const long L = shape[rank - 1], gL = grid[rank - 1], bL = block[rank - 1];
        const long c = (b % gL) * bL + e;
        return c < L ? (b / gL) * L + c : -1;
    }
    long rem = e, idx = 0, mul = 1;
    for (int d = rank - 1; d >= 0; d--) {
        const long w = rem % block[d];
        rem /= block[d];
        const long co = bc[d] * block[d] + w;
        if (co >= shape[d])
            return -1;
        idx += co * mul;
        mul *= shape[d];
    }
    return idx;
}

/* Per block b: alpha_bits[b] = max |x| over the block (as the bits of a non-negative float, which
 * order like the floats: atomic_max works on them), bad[b] = 1 when the block holds a NaN or an
 * Inf. Both start at 0 (the host clears them). Each block's elements are split into chunks of
 * `chunk`; gpb = chunks per block.
 * q_absmax_seq (CPU devices): one work item per chunk, walking it contiguously, one atomic each.
 * q_absmax_wg (other devices): one work-group per chunk, items interleaved (coalesced), a local
 * reduction, one atomic per group; the local size is a power of two. */
static void absmax_setup(long b, int rank, const long8 shape8, const long8 block8,
                         const long8 grid8, long *shape, long *block, long *grid, long *bc,
                         long *bn) {
    vstore8(shape8, 0, shape);
    vstore8(block8, 0, block);
    vstore8(grid8, 0, grid);
    long t = b;
    *bn = 1;
    for (int d = rank - 1; d >= 0; d--) {
        bc[d] = t % grid[d];
        t /= grid[d];
        *bn *= block[d];
    }
}

__kernel void q_absmax_seq(__global const float *x, __global uint *alpha_bits,
                           __global int *bad, const long nchunks, const long gpb,
                           const long chunk, const int bmode, const int rank,
                           const long8 shape8, const long8 block8, const long8 grid8) {
    const long w = (long)get_global_id(0);
    if (w >= nchunks)
        return;
    long shape[8], block[8], grid[8], bc[8], bn;
    const long b = w / gpb, e0 = (w % gpb) * chunk;
    absmax_setup(b, rank, shape8, block8, grid8, shape, block, grid, bc, &bn);
    const long e1 = min(e0 + chunk, bn);
    float m = 0.0f;
    int nf = 0;
    if (bmode == 0) {
        for (long e = e0; e < e1; e++) {
            const float v = x[e];
            nf |= !isfinite(v);
            m = fmax(m, fabs(v));
        }
    } else {
        for (long e = e0; e < e1; e++) {
            const long idx = block_elem(b, e, bmode, rank, shape, block, grid, bc);
            if (idx >= 0) {
                const float v = x[idx];
                nf |= !isfinite(v);
                m = fmax(m, fabs(v));
            }
        }
    }
    if (nf)
        atomic_or(&bad[b], 1);
    else if (m > 0.0f)
        atomic_max(&alpha_bits[b], as_uint(m));
}

__kernel void q_absmax_wg(__global const float *x, __global uint *alpha_bits, __global int *bad,
                          const long gpb, const long chunk, const int bmode, const int rank,
                          const long8 shape8, const long8 block8, const long8 grid8,
                          __local float *red, __local int *redbad) {
    long shape[8], block[8], grid[8], bc[8], bn;
    const long g = (long)get_group_id(0);
    const long b = g / gpb, e0 = (g % gpb) * chunk;
    const int lid = (int)get_local_id(0), lsz = (int)get_local_size(0);
    absmax_setup(b, rank, shape8, block8, grid8, shape, block, grid, bc, &bn);
    const long e1 = min(e0 + chunk, bn);
    float m = 0.0f;
    int nf = 0;
    for (long e = e0 + lid; e < e1; e += lsz) {
        const long idx = block_elem(b, e, bmode, rank, shape, block, grid, bc);
        if (idx >= 0) {
            const float v = x[idx];
            nf |= !isfinite(v);
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
        if (redbad[0])
            atomic_or(&bad[b], 1);
        else if (red[0] > 0.0f)
            atomic_max(&alpha_bits[b], as_uint(red[0]));
    }
}

/* One work item per storage unit: quantize its `per` values with the effective scales eff[]. */
__kernel void q_quantize(__global const float *x, __global uchar *qv, __global const float *eff,
                         const long rows, const long L, const long U, const int per,
                         const int bits, const int unit_bytes, const int vkind, const int qa,
                         const int qb, const int bmode, const int rank, const long8 shape8,
                         const long8 block8, const long8 grid8) {
    const long u = (long)get_global_id(0);
    if (u >= rows * U)
        return;
    long shape[8], block[8], grid[8];
    vstore8(shape8, 0, shape);
    vstore8(block8, 0, block);
    vstore8(grid8, 0, grid);
    /* Native (per 1): unit u is element u, no line arithmetic */
    const long r = per == 1 ? 0 : u / U, cu = per == 1 ? u : u % U;
    const uint mask = bits == 32 ? 0xffffffffu : ((1u << bits) - 1u);
    uint word = 0;
    for (int j = 0; j < per; j++) {
        const long c = cu * per + j;
        if (per != 1 && c >= L)
            break;
        const long i = r * L + c;
        const float s = eff[block_index(i, bmode, rank, shape, block, grid)];
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
                           const int sdt, const int ssize, const long global_off, const int bmode,
                           const int rank, const long8 shape8, const long8 block8,
                           const long8 grid8) {
    const long i = (long)get_global_id(0);
    if (i >= numel)
        return;
    long shape[8], block[8], grid[8];
    vstore8(shape8, 0, shape);
    vstore8(block8, 0, block);
    vstore8(grid8, 0, grid);
    long u = i; /* Native (per 1): unit i is element i, no line arithmetic */
    int j = 0;
    if (per != 1) {
        const long r = i / L, c = i % L;
        u = r * U + c / per;
        j = (int)(c % per);
    }
    const uint word = unit_bytes == 4 ? ((__global const uint *)q)[u] : (uint)q[u];
    const uint field = (word >> (j * bits)) & (bits == 32 ? 0xffffffffu : ((1u << bits) - 1u));
    float v;
    if (vkind == 0)
        v = (float)(((int)(field << (32 - bits))) >> (32 - bits)); /* sign-extend */
    else
        v = mf_decode(field, vkind, bits);
    const long b = block_index(i, bmode, rank, shape, block, grid);
    out[i] = eff_scale(q, scales_off, sdt, ssize, b, global_off) * v;
}

/* out[b] = the effective scale of block b (b < n), from q's stored scales. */
__kernel void q_eff_scales(__global const uchar *q, const long scales_off, const int sdt,
                           const int ssize, const long global_off, const long n,
                           __global float *out) {
    const long b = (long)get_global_id(0);
    if (b < n)
        out[b] = eff_scale(q, scales_off, sdt, ssize, b, global_off);
}

/* out[0] = sa * sb: the epilogue factor of a per-tensor int8 matmul, from the stored scales. */
__kernel void q_scale_prod(__global const uchar *qa, const long a_soff, const int a_sdt,
                           __global const uchar *qb, const long b_soff, const int b_sdt,
                           __global float *out) {
    if (get_global_id(0) == 0)
        out[0] = load_scale(qa + a_soff, a_sdt) * load_scale(qb + b_soff, b_sdt);
}
