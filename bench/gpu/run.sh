#!/bin/bash
# bench/gpu/run.sh: build + check + time ember's GPU kernels and cuBLAS in one call on the GPU machine.
# From a folder holding backends/opencl and bench/gpu (after `source .gpu/setup.sh`):
#   bash bench/gpu/run.sh [quick]
set -o pipefail
OUT=${OUT:-.}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
gcc -O2 -std=gnu11 -o qgemm_gpu bench/gpu/qgemm_gpu.c backends/opencl/cl_pack_mma.c -lOpenCL -lm || exit 1
PTX=backends/opencl/ptx/qgemm_wgmma_sm90a.ptx
[ -n "$SKIP_MMA" ] || timeout ${EMBER_T:-240} ./qgemm_gpu backends/opencl/kernels "" $1 mma 2>&1 | tee $OUT/ember_mma.log
[ -f $PTX ] && timeout ${EMBER_TW:-150} ./qgemm_gpu backends/opencl/kernels $PTX $1 wg 2>&1 | tee $OUT/ember_wg.log
[ -n "$SKIP_CUBLAS" ] || PYTHONUNBUFFERED=1 timeout 200 python3 bench/gpu/cublas_ref.py $1 2>&1 | tee $OUT/cublas.log
python3 bench/gpu/combine.py
