#!/bin/sh
# Regenerates qgemm_wgmma_sm90a.ptx (CUDA toolkit >= 12.3 needed here only; the library build needs none).
# NVIDIA's OpenCL runtime turns a cl_mem argument into a device address only for a parameter marked
# `.ptr .global` (as its own OpenCL compiler emits); nvcc marks none, so every .u64 kernel parameter
# (all of them are buffer pointers in these kernels) gets the marking here.
set -e
cd "$(dirname "$0")"
python3 gen_wgmma_ops.py > wgmma_ops.h
nvcc -gencode=arch=compute_90a,code=compute_90a -ptx -O3 qgemm_wgmma.cu -o qgemm_wgmma_sm90a.ptx.tmp
sed -E 's/^(\s*)\.param \.u64 ([A-Za-z0-9_]+_param_[0-9]+)/\1.param .u64 .ptr .global .align 4 \2/' \
    qgemm_wgmma_sm90a.ptx.tmp > qgemm_wgmma_sm90a.ptx
rm -f qgemm_wgmma_sm90a.ptx.tmp
ptxas -arch=sm_90a -v qgemm_wgmma_sm90a.ptx -o /dev/null 2>&1 | grep -E "Used|spill|C75" || true
