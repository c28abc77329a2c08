/* cl_pack_mma.c: B pre-packing for the OpenCL tensor-core kernels (see cl_pack_mma.h).
 *
 * Block (j, kb) covers columns 8j..8j+7 and k 64kb..64kb+63; it is 512 bytes at offset
 * (j * nkb + kb) * 512. Byte 16 l + 4 q + i of a block (lane l, g = l / 4, t = l % 4) holds
 * B[64 kb + 16 q + 4 t + i][8 j + g]: each lane's 16 bytes are its two m16n8k32 B registers for
 * the k-steps at 0 and 32 of the block, so one 16-byte load per lane feeds two mma.sync. */
#include "cl_pack_mma.h"

#include <string.h>

size_t ember__cl_pack_b_mma_size(int64_t k, int64_t n) {
    if (k <= 0 || n <= 0)
        return 0;
    uint64_t nb8 = ((uint64_t)n + 7u) / 8u, nkb = ((uint64_t)k + 63u) / 64u;
    if (nb8 > SIZE_MAX / 512u / nkb)
        return 0;
    return (size_t)(nb8 * nkb * 512u);
}

void ember__cl_pack_b_mma(const int8_t *b, int64_t k, int64_t n, int64_t stride_k, int64_t stride_n,
                          int8_t *dst) {
    int64_t nb8 = (n + 7) / 8, nkb = (k + 63) / 64;
    for (int64_t j = 0; j < nb8; j++) {
        for (int64_t kb = 0; kb < nkb; kb++) {
            int8_t *blk = dst + (size_t)(j * nkb + kb) * 512u;
            for (int l = 0; l < 32; l++) {
                int64_t col = 8 * j + l / 4;
                for (int q = 0; q < 4; q++) {
                    for (int i = 0; i < 4; i++) {
                        int64_t row = 64 * kb + 16 * q + 4 * (l % 4) + i;
                        int8_t v = 0;
                        if (row < k && col < n)
                            v = b[row * stride_k + col * stride_n];
                        blk[16 * l + 4 * q + i] = v;
                    }
                }
            }
        }
    }
}

size_t ember__cl_pack_b_wgmma_size(int64_t k, int64_t n, int bn) {
    if (k <= 0 || n <= 0 || (bn != 64 && bn != 128 && bn != 256))
        return 0;
    uint64_t nt = ((uint64_t)n + (uint64_t)bn - 1u) / (uint64_t)bn,
             nst = 2u * (((uint64_t)k + 63u) / 64u);
    uint64_t stage = (uint64_t)bn * 32u;
    if (nt > SIZE_MAX / stage / nst)
        return 0;
    return (size_t)(nt * nst * stage);
}

void ember__cl_pack_b_wgmma(const int8_t *b, int64_t k, int64_t n, int64_t stride_k,
                            int64_t stride_n, int bn, int8_t *dst) {
    int64_t nt = (n + bn - 1) / bn, nst = 2 * ((k + 63) / 64);
    for (int64_t tn = 0; tn < nt; tn++) {
        for (int64_t st = 0; st < nst; st++) {
            int8_t *stage = dst + (size_t)(tn * nst + st) * (size_t)bn * 32u;
            int64_t kb = st / 2, s = st % 2;
            for (int col = 0; col < bn; col++) {
                int64_t nn = tn * bn + col;
                int ng = col / 8, r = col % 8;
                for (int h = 0; h < 2; h++) {
                    for (int j = 0; j < 16; j++) {
                        int t = j / 4, i = j % 4;
                        int64_t kk = 64 * kb + 16 * t + 8 * s + 4 * h + i;
                        int8_t v = 0;
                        if (kk < k && nn < n)
                            v = b[kk * stride_k + nn * stride_n];
                        stage[(2 * ng + h) * 128 + r * 16 + j] = v;
                    }
                }
            }
        }
    }
}
