/* dispatch/half.c: F16 and BF16 conversions, round to nearest even, NaN kept (quiet), as the
 * `half` crate that burn uses. */
#include <string.h>

#include "internal.h"

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t ember__f32_to_f16(float f) {
    uint32_t x = bits_of(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) /* Inf or NaN: keep NaN quiet and non-zero */
        return (uint16_t)(sign | 0x7c00u | (man ? (0x200u | (man >> 13)) : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 0x1f) /* overflow to Inf */
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) { /* subnormal or zero in f16 */
        if (e < -10)
            return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half_man = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (half_man & 1u)))
            half_man++;
        return (uint16_t)(sign | half_man);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* may carry into the exponent, up to Inf: correct */
    return (uint16_t)h;
}

float ember__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f)
        return float_of(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return float_of(sign);
        /* subnormal: normalise */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while (!(man & 0x400u));
        man &= 0x3ffu;
        return float_of(sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13));
    }
    return float_of(sign | ((exp - 15 + 127) << 23) | (man << 13));
}

uint16_t ember__f32_to_bf16(float f) {
    uint32_t x = bits_of(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
        return (uint16_t)((x >> 16) | 0x40u);
    uint32_t lsb = (x >> 16) & 1u;
    x += 0x7fffu + lsb;
    return (uint16_t)(x >> 16);
}

float ember__bf16_to_f32(uint16_t h) { return float_of((uint32_t)h << 16); }
