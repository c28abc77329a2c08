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

#endif
