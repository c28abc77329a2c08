# valgrind.mk: `make check-valgrind`, valgrind memcheck over the whole CTest suite. Included by the
# top Makefile (`include valgrind.mk`); also usable alone: `make -f valgrind.mk check-valgrind`.
#
# A separate, unsanitized build (VALGRIND_BUILD, default build-valgrind) in which CTest starts every
# test executable through valgrind (CMAKE_CROSSCOMPILING_EMULATOR; CMake script tests such as
# install_consumer run as they are). Any memcheck error (invalid read/write, use of uninitialised
# memory in a branch, invalid free) or any definite / indirect leak makes valgrind exit 99 and the
# test fail; the log of a failed run is printed (the output of each failed test with it).
# tests/valgrind.supp suppresses only what the OpenCL runtime (ICD loader, PoCL and its
# LLVM) and OpenBLAS do inside themselves; every entry says why. The fuzz CTest entries run their
# usual few seconds (they are time-bounded), so they execute fewer inputs here.
#   make check-valgrind                 the whole suite
#   make check-valgrind VALGRIND_TESTS=alloc   only the tests whose name matches (ctest -R)
VALGRIND_BUILD ?= build-valgrind
VALGRIND_JOBS ?= 2
VALGRIND_TESTS ?=
VALGRIND_FLAGS := --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect \
  --errors-for-leak-kinds=definite,indirect --num-callers=40 --track-fds=no \
  --suppressions=$(CURDIR)/tests/valgrind.supp --gen-suppressions=all
# valgrind runs code 20-50x slower: tests that loop for a time get the same time, the rest more.
# EMBER_UNDER_VALGRIND: the tests skip their deliberate reads of a freed handle (the magic check).
VALGRIND_ENV := EMBER_UNDER_VALGRIND=1 EMBER_THREADS_SECONDS=2 OPENBLAS_NUM_THREADS=1 \
  EMBER_OPENCL_CACHE_DIR=$(CURDIR)/$(VALGRIND_BUILD)/ember-cl-cache

.PHONY: check-valgrind
check-valgrind:
	@command -v valgrind >/dev/null || { echo "ember: check-valgrind needs valgrind (apt-get install valgrind)" >&2; exit 1; }
	cmake -S . -B $(VALGRIND_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g" -DEMBER_BUILD_BENCH=OFF -DEMBER_TEST_TIMEOUT=3600 \
	  "-DCMAKE_CROSSCOMPILING_EMULATOR=valgrind;$(subst $() $(),;,$(strip $(VALGRIND_FLAGS)))"
	cmake --build $(VALGRIND_BUILD) -j$(VALGRIND_JOBS)
	mkdir -p $(VALGRIND_BUILD)/ember-cl-cache
	cd $(VALGRIND_BUILD) && $(VALGRIND_ENV) ctest --output-on-failure -j$(VALGRIND_JOBS) \
	  --timeout 3000 $(if $(VALGRIND_TESTS),-R '$(VALGRIND_TESTS)') > ctest-valgrind.log 2>&1; \
	rc=$$?; grep -E '^ *[0-9]+/[0-9]+ Test|tests passed|tests failed' ctest-valgrind.log; \
	if grep -nE '^==[0-9]+== (Invalid|Conditional|Use of uninitialised|Mismatched|Syscall param)|definitely lost: [1-9]|indirectly lost: [1-9]' \
	     ctest-valgrind.log; then \
	  echo "ember: valgrind report (see $(VALGRIND_BUILD)/ctest-valgrind.log)" >&2; exit 1; fi; \
	if [ $$rc -ne 0 ]; then cat ctest-valgrind.log; fi; \
	exit $$rc
