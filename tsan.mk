# tsan.mk: `make tsan`, the whole test suite under ThreadSanitizer. Included by the top Makefile
# (`include tsan.mk`); also usable alone: `make -f tsan.mk tsan`.
#   make tsan                       build build-tsan/ with -fsanitize=thread and run every CTest
#                                   test under it (about 1.5 min on 2 cores once built), with
#                                   test_threads running TSAN_SECONDS (default 20) of 8 threads
#                                   on CPU + OpenCL
#   make tsan TSAN_TESTS=regex      only the tests whose name matches (ctest -R)
# Any ThreadSanitizer report fails (halt_on_error). A test that fails without a report has its
# output printed (the last 150 lines of each), so a CI log names it and shows why. tests/tsan.supp
# suppresses only races inside the OpenCL runtime and OpenBLAS, which are not instrumented (see
# the file).
TSAN_BUILD ?= build-tsan
TSAN_SECONDS ?= 20
TSAN_TESTS ?= .
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
	grep -E '^ *[0-9]+/[0-9]+ Test|threads x|tests passed|tests failed' ctest-tsan.log; \
	if grep -n 'WARNING: ThreadSanitizer' ctest-tsan.log; then \
	  echo "ember: ThreadSanitizer report (see $(TSAN_BUILD)/ctest-tsan.log)" >&2; exit 1; fi; \
	if [ $$rc -ne 0 ]; then \
	  for n in $$(sed -n '/tests FAILED:/,$$s/^[[:space:]]*\([0-9][0-9]*\) - .*/\1/p' ctest-tsan.log); do \
	    echo "== the output of failed test $$n"; grep "^$$n: " ctest-tsan.log | tail -150; done; fi; \
	exit $$rc
