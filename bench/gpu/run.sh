#!/bin/bash
# bench/gpu/run.sh: build + check + time ember's GPU kernels and cuBLAS in one call on the GPU machine.
# From a folder holding backends/opencl and bench/gpu (after `source .gpu/setup.sh`):
#   bash bench/gpu/run.sh [quick]      env: SKIP_MMA, SKIP_WG, SKIP_CUBLAS, CUDA_CHECK=1
set -o pipefail
OUT=${OUT:-.}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
gcc -O2 -std=gnu11 -ffp-contract=off -o qgemm_gpu bench/gpu/qgemm_gpu.c backends/opencl/cl_pack_mma.c -lOpenCL -lm || exit 1
PTX=backends/opencl/ptx/qgemm_wgmma_sm90a.ptx
if [ -n "$CUDA_CHECK" ]; then
  nvcc -gencode=arch=compute_90a,code=sm_90a -O2 -I backends/opencl/ptx bench/gpu/wgmma_cuda_check.cu \
       backends/opencl/cl_pack_mma.c -o wgcheck 2>&1 | grep -v Warn
  if ! timeout 60 ./wgcheck > wg.txt 2>&1; then
    cat wg.txt; timeout 120 compute-sanitizer --tool memcheck ./wgcheck small 2>&1 | head -60 | tee -a $OUT/all.log
  fi
  cat wg.txt | tee -a $OUT/all.log
  if [ -n "$NCU" ]; then
    timeout 150 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
      --section MemoryWorkloadAnalysis -k regex:qgemm_wgmma -c 2 ./wgcheck one > $OUT/ncu.txt 2>&1
    grep -E "qgemm_wgmma_|Throughput|Stall|Issue|Warp Cycles|Hit Rate|Duration|Eligible|Active Warps|Bandwidth|Busy" $OUT/ncu.txt | head -80
  fi
fi
[ -n "$SKIP_MMA" ] || timeout ${EMBER_T:-240} ./qgemm_gpu backends/opencl/kernels "" $1 mma 2>&1 | grep -v noinline | tee -a $OUT/all.log
if [ -z "$SKIP_WG" ] && [ -f $PTX ]; then
  # WG_GROUPS: space-separated groups of comma-joined kernel names, one process (and JSON) per group
  g=0
  for k in ${WG_GROUPS:-qgemm_wgmma_w1_64x256_s4a3,qgemm_wgmma_w1_64x128_s6,qgemm_wgmma_128x128_a3}; do
    g=$((g + 1))
    EMBER_WG_ONLY=$k EMBER_JSON=wg$g timeout ${EMBER_TW:-100} ./qgemm_gpu backends/opencl/kernels $PTX $1 wg 2>&1 | tee -a $OUT/all.log
  done
  # PTX2 (optional): a second module, e.g. an earlier version, timed in the same run as a control
  [ -z "$PTX2" ] || EMBER_WG_ONLY=${PTX2_KERNELS:-qgemm_wgmma_128x128_a3} EMBER_JSON=wg_ptx2 timeout ${EMBER_TW:-100} \
    ./qgemm_gpu backends/opencl/kernels $PTX2 $1 wg 2>&1 | sed 's/wgmma_/ptx2_/' | tee -a $OUT/all.log
fi
[ -n "$SKIP_CUBLAS" ] || PYTHONUNBUFFERED=1 timeout 200 python3 bench/gpu/cublas_ref.py $1 2>&1 | tee -a $OUT/all.log
python3 bench/gpu/combine.py
