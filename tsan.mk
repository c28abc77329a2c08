# tsan.mk: `make tsan`, the thread tests under ThreadSanitizer. Included by the top Makefile
# (`include tsan.mk`); also usable alone: `make -f tsan.mk tsan`.
#   make tsan                       build build-tsan/ with -fsanitize=thread and run test_threads
#                                   for TSAN_SECONDS (default 20) with 8 threads on CPU + OpenCL,
#                                   test_cpu_qgemm (the kernels on the thread pool; ~45 s under
#                                   TSan on 2 cores) and test_bufcache (the buffer caches)
#   make tsan TSAN_TESTS=.          every CTest test under TSan (ctest -R regex; slower)
# Any ThreadSanitizer report fails (halt_on_error). tests/tsan.supp suppresses only races inside
# the OpenCL runtime and OpenBLAS, which are not instrumented (see the file).
TSAN_BUILD ?= build-tsan
TSAN_SECONDS ?= 20
TSAN_TESTS ?= ^test_threads$$|^test_cpu_qgemm$$|^test_bufcache$$
TSAN_JOBS ?= 2

.PHONY: tsan
tsan:
	cmake -S . -B $(TSAN_BUILD) -DEMBER_SANITIZE=thread -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g" -DEMBER_BUILD_BENCH=OFF -DEMBER_BUILD_EXAMPLES=OFF
	cmake --build $(TSAN_BUILD) -j$(TSAN_JOBS)
	mkdir -p $(TSAN_BUILD)/ember-cl-cache
	cd $(TSAN_BUILD) && EMBER_THREADS_SECONDS=$(TSAN_SECONDS) \
	  EMBER_OPENCL_CACHE_DIR=$(CURDIR)/$(TSAN_BUILD)/ember-cl-cache \
	  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tests/tsan.supp" \
	  ctest --output-on-failure -V -R '$(TSAN_TESTS)' > ctest-tsan.log 2>&1; rc=$$?; \
	grep -E 'threads x|tests passed|tests failed' ctest-tsan.log; \
	if grep -n 'WARNING: ThreadSanitizer' ctest-tsan.log; then \
	  echo "ember: ThreadSanitizer report (see $(TSAN_BUILD)/ctest-tsan.log)" >&2; exit 1; fi; \
	exit $$rc
