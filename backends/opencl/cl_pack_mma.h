/* cl_pack_mma.h: host-side weight packing for the tensor-core kernels of
 * backends/opencl/kernels/qgemm_mma.cl (the mma.sync path, and the layout the sm_90a PTX path
 * reads too). See the header comment of qgemm_mma.cl for the packed layout. */
#ifndef EMBER_CL_PACK_MMA_H
#define EMBER_CL_PACK_MMA_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of the packed copy of a B of K rows and N columns: ceil(N/8) * ceil(K/64) * 512.
 * @return : 0 when K or N is not positive or the size overflows size_t. */
size_t ember__cl_pack_b_mma_size(int64_t k, int64_t n);

/* Pack B, element (kk, nn) at b[kk * stride_k + nn * stride_n] (row-major [K][N]: stride_k = N,
 * stride_n = 1; column-major: stride_k = 1, stride_n = K), into dst, which holds
 * ember__cl_pack_b_mma_size(k, n) bytes. Padding (kk >= K or nn >= N) is written as zero, so the
 * kernels need no bounds on B. Pure function of its inputs; no allocation, no failure. */
void ember__cl_pack_b_mma(const int8_t *b, int64_t k, int64_t n, int64_t stride_k, int64_t stride_n,
                          int8_t *dst);

/* Bytes of the packed copy of B for the sm_90a wgmma kernels of tile width bn (64, 128 or 256):
 * ceil(N/bn) * 2 * ceil(K/64) * bn * 32. @return : 0 on a bad argument or overflow. */
size_t ember__cl_pack_b_wgmma_size(int64_t k, int64_t n, int bn);

/* Pack B (strides as above) for the qgemm_wgmma_*x<bn> kernels
 * (backends/opencl/ptx/qgemm_wgmma.cu): [ceil(N/bn)][2 ceil(K/64)] stages of bn x 32 bytes, each in
 * wgmma's K-major no-swizzle layout (core matrix (n8 group ng, k16 half h) at (2 ng + h) * 128,
 * column r of it at + 16 r), with the k permutation of the kernel (stage s of k64 block kb, logical
 * k 16 h + 4 t + i holds B[64 kb + 16 t + 8 (s % 2) + 4 h + i]). Padding is zero. */
void ember__cl_pack_b_wgmma(const int8_t *b, int64_t k, int64_t n, int64_t stride_k,
                            int64_t stride_n, int bn, int8_t *dst);

#endif
