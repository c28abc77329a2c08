/* wgmma_cuda_check.cu: runs the sm_90a kernels of backends/opencl/ptx/qgemm_wgmma.cu natively through
 * CUDA (diagnostic only: tells a kernel bug from an OpenCL interop problem; compute-sanitizer-able).
 *   nvcc -gencode=arch=compute_90a,code=sm_90a -O2 -I backends/opencl/ptx bench/gpu/wgmma_cuda_check.cu \
 *        backends/opencl/cl_pack_mma.c -o wgcheck && ./wgcheck [small] */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../backends/opencl/ptx/qgemm_wgmma.cu"
extern "C" {
#include "../../backends/opencl/cl_pack_mma.h"
}

#define CU(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("%s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));            \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static int run(int M, int N, int K, int bn, int swap, int splits, int timeit, int a3 = 0)
{
    int lda = (K + 15) / 16 * 16;
    size_t ab = (size_t)M * lda, bb = (size_t)K * N, pb = ember__cl_pack_b_wgmma_size(K, N, bn);
    int8_t *ha = (int8_t *)calloc(ab, 1), *hb = (int8_t *)malloc(bb), *hp = (int8_t *)malloc(pb);
    for (size_t i = 0; i < ab; i++) ha[i] = (int8_t)(rand() & 255);
    for (size_t i = 0; i < bb; i++) hb[i] = (int8_t)(rand() & 255);
    ember__cl_pack_b_wgmma(hb, K, N, N, 1, bn, hp);
    int8_t *dA, *dP;
    int *dC;
    float *ds;
    CU(cudaMalloc(&dA, ab));
    CU(cudaMalloc(&dP, pb));
    CU(cudaMalloc(&dC, (size_t)M * N * 4));
    CU(cudaMalloc(&ds, 4 * (size_t)(M > N ? M : N)));
    CU(cudaMemcpy(dA, ha, ab, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dP, hp, pb, cudaMemcpyHostToDevice));
    CU(cudaMemset(dC, 0, (size_t)M * N * 4));
    int nkb = (K + 63) / 64, kps = (nkb + splits - 1) / splits;
    /* bn 256: w1_64x256_s4a3; a3: 128x128_a3; else w1_64x128_s6 (64-row tiles, 128 threads) */
    int bm = (bn == 128 && a3) ? 128 : 64;
    int tiles = ((M + bm - 1) / bm) * ((N + bn - 1) / bn);
    dim3 grid(tiles, splits), block(bm == 128 ? 256 : 128);
    int mode = splits > 1 ? 1 : 0;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    int reps = timeit ? 20 : 1;
    for (int r = 0; r < reps + (timeit ? 3 : 0); r++) {
        if (r == (timeit ? 3 : 0)) cudaEventRecord(e0);
        if (mode == 1) cudaMemsetAsync(dC, 0, (size_t)M * N * 4);
        if (bn == 256)
            qgemm_wgmma_w1_64x256_s4a3<<<grid, block>>>(dA, lda, dP, dC, N, M, N, K, kps, mode, ds, 0, ds, 0, swap, 0u, 0u, nullptr, nullptr);
        else if (a3)
            qgemm_wgmma_128x128_a3<<<grid, block>>>(dA, lda, dP, dC, N, M, N, K, kps, mode, ds, 0, ds, 0, swap, 0u, 0u, nullptr, nullptr);
        else
            qgemm_wgmma_w1_64x128_s6<<<grid, block>>>(dA, lda, dP, dC, N, M, N, K, kps, mode, ds, 0, ds, 0, swap, 0u, 0u, nullptr, nullptr);
    }
    cudaEventRecord(e1);
    CU(cudaGetLastError());
    CU(cudaDeviceSynchronize());
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    int *hc = (int *)malloc((size_t)M * N * 4);
    CU(cudaMemcpy(hc, dC, (size_t)M * N * 4, cudaMemcpyDeviceToHost));
    long bad = 0, chk = 0;
    long total = (long)M * N;
    for (long c = 0; c < (total < 20000 ? total : 4000); c++) {
        long idx = total < 20000 ? c : (long)(((unsigned long)rand() * 2654435761ul) % (unsigned long)total);
        int m = (int)(idx / N), n = (int)(idx % N);
        int s = 0;
        for (int k = 0; k < K; k++) s += (int)ha[(size_t)m * lda + k] * (int)hb[(size_t)k * N + n];
        chk++;
        if (s != hc[idx]) {
            if (bad < 3) printf("   (%d,%d) got %d want %d\n", m, n, hc[idx], s);
            bad++;
        }
    }
    double us = ms * 1e3 / reps;
    printf("cuda wgmma%s bn=%d swap=%d splits=%d %dx%dx%d: %s (%ld/%ld bad)%s", a3 ? "_a3" : "", bn, swap, splits, M, N, K,
           bad ? "FAIL" : "exact", bad, chk, timeit ? "" : "\n");
    if (timeit) printf("  %.2f us  %.1f TOPS\n", us, 2.0 * M * N * (double)K / (us * 1e-6) / 1e12);
    cudaFree(dA); cudaFree(dP); cudaFree(dC); cudaFree(ds);
    free(ha); free(hb); free(hp); free(hc);
    return bad ? 2 : 0;
}

int main(int argc, char **argv)
{
    int small = argc > 1 && !strcmp(argv[1], "small");
    if (argc > 1 && !strcmp(argv[1], "one")) { /* one launch of each kernel at 4096^3, for ncu */
        run(4096, 4096, 4096, 256, 0, 1, 0);
        run(4096, 4096, 4096, 128, 0, 1, 0, 1);
        return run(4096, 4096, 4096, 128, 0, 1, 0);
    }
    int rc = 0;
    for (int swap = 0; swap < 1; swap++)
        for (int bn = 256; bn >= 128; bn /= 2) {
            rc |= run(1, 8, 64, bn, swap, 1, 0);
            rc |= run(130, 260, 272, bn, swap, 1, 0);
            rc |= run(130, 260, 272, bn, swap, 3, 0);
            if (!small) rc |= run(300, 515, 2049, bn, swap, 1, 0);
            if (bn == 128) rc |= run(300, 515, 2049, bn, swap, 2, 0, 1);
        }
    if (!small) {
        run(4096, 4096, 4096, 256, 0, 1, 1);
        run(4096, 4096, 4096, 128, 0, 1, 1);
        run(4096, 4096, 4096, 128, 0, 1, 1, 1);
        run(8192, 8192, 8192, 128, 0, 1, 1);
        run(8192, 8192, 8192, 256, 0, 1, 1);
        run(128, 4096, 4096, 256, 0, 8, 1);
        run(512, 4096, 4096, 256, 0, 2, 1);
    }
    return rc;
}
