#!/bin/bash
# bench/gpu/final.sh: the one-call final run on the GPU machine, from a checkout of the project
# (after `source .gpu/setup.sh`): the bench table (ember paths + cuBLAS + fp8, bench/gpu/run.sh),
# then a Release build of the library and its gpu + opencl CTests on the NVIDIA device (-Werror off:
# that machine's gcc flags maybe-uninitialized in dispatch/ files at -O2, not in this work).
OUT=${OUT:-.}
export OUT
EMBER_TW=150 EMBER_SPLITS=2,3,4 bash bench/gpu/run.sh > $OUT/bench_stdout.txt 2>&1
echo "== build + ctest" | tee -a $OUT/all.log
( cmake -S . -B /tmp/bg -DEMBER_WERROR=OFF -DCMAKE_BUILD_TYPE=Release -DEMBER_BUILD_EXAMPLES=OFF \
    -DEMBER_BUILD_BENCH=OFF > /tmp/build.log 2>&1 && cmake --build /tmp/bg -j16 >> /tmp/build.log 2>&1 ) \
  || { tail -30 /tmp/build.log | tee -a $OUT/all.log; }
if [ -d /tmp/bg/tests ]; then
  (cd /tmp/bg && EMBER_OPENCL_DEVICE=NVIDIA timeout 240 ctest -L 'gpu|opencl' --output-on-failure --timeout 220 2>&1 \
    | tail -40 | tee -a $OUT/all.log)
fi
if [ -f /tmp/bg/libember.so ]; then # the public API path: first call (packs the weight) vs later calls
  gcc -O2 -std=gnu11 -I include -I /tmp/bg/include -o /tmp/api_gpu bench/gpu/api_gpu.c -L /tmp/bg -lember \
      -Wl,-rpath,/tmp/bg -lm && EMBER_OPENCL_DEVICE=NVIDIA timeout 120 /tmp/api_gpu 2>&1 | tee -a $OUT/all.log
fi
grep -E "^(stream|empty kernel)" $OUT/all.log
tail -16 $OUT/bench_stdout.txt
rm -f $OUT/bench_stdout.txt
