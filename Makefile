# ember: the two commands.
#   make test    install missing Debian packages, configure build/ (-Werror), build, run ctest
#   make bench   the same set-up, then run every benchmark (OpenBLAS on its right core type)
#   make examples  fetch the UCI digits, build and run examples/ (examples.mk)
#   make test-tiers  the suite again with the CPU capped at avx2, then scalar
#   make asan    build-asan/ with AddressSanitizer + UndefinedBehaviorSanitizer, run ctest there
# Variables: BUILD, ASAN_BUILD, JOBS, CMAKE_FLAGS (extra -D options for both builds).

PACKAGES := cmake gcc make pkg-config libopenblas-dev libcunit1-dev ocl-icd-opencl-dev \
            opencl-c-headers pocl-opencl-icd clinfo libdnnl-dev
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= 2
CMAKE_FLAGS ?=
# Tests run with assert() live (no -DNDEBUG), optimised as the library ships.
TEST_CFLAGS := -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g"
ASAN_CFLAGS := -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g"
# detect_stack_use_after_return=1: locals on AddressSanitizer's fake stack, as GCC 13's runtime
# does by default (GCC 12's does not); on the AMX host that setting found a local array GCC 13
# had aligned to 64 bytes on its own and loaded with an aligned move, which the fake stack does
# not honour (bench/results/logs/2026-12-01-s22-dev4-asan.txt). Both toolchains now run alike.
# What in a sanitizer log is a report (a finding, as opposed to a test that failed)
SANITIZER_REPORT := ERROR: (Address|Leak)Sanitizer|runtime error:|SUMMARY: (Address|Undefined)
# intercept_tls_get_addr=0: GCC 12's runtime (as up to GCC 13 / LLVM 16) records a thread's dynamic
# TLS blocks by intercepting __tls_get_addr and takes any block whose address is 16 bytes past a
# 4 KiB boundary for glibc 2.19's layout, reading the two words before it as the block's start and
# size. glibc 2.25 and later have no such header, so when a malloc'd block of PoCL's or LLVM's
# dynamic TLS lands there by chance the recorded range is garbage and LeakSanitizer's tracer
# segfaults scanning it at exit ("Tracer caught signal 11", google/sanitizers#1322): the test has
# passed and no leak is reported, yet the process fails. Where the block lands depends on the
# allocations before it (the environment, the path of the build tree), so a given build crashes
# every time or never: test_opencl_build in build-asan/ crashed 6 runs of 6 on 2026-12-01 and
# passed 3 of 3 with the flag. The cost: LeakSanitizer no longer scans those dynamic TLS blocks
# for pointers, which can only add reports (memory reachable only from there would read as
# leaked), never hide one; a deliberate 777-byte leak in test_opencl_build is still reported.
# tests/util/test_util.c sets the same default in every test binary for runs outside make.
SANITIZER_ENV := ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:intercept_tls_get_addr=0 \
                 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
                 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

# Debian's OpenBLAS 0.3.21 does not recognise recent Xeons and falls back to its Prescott (SSE3)
# kernels, 5-7x slower; on a CPU with AVX-512 ember's own tools ask for SkylakeX. A value already
# in the environment wins. Tests do not set it (they must pass with whatever the machine has).
BLAS_CORE := $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && \
                     grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo && \
                     echo SkylakeX)

.PHONY: all deps configure build test test-tiers bench asan clean examples
all: build

# Install only what is missing, as root or through sudo.
deps:
	@if ! command -v dpkg-query >/dev/null 2>&1; then \
	  echo "ember: not a Debian system; make sure these are installed: $(PACKAGES)"; exit 0; fi; \
	missing=""; \
	for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed$$' || \
	    missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	echo "ember: installing$$missing"; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; \
	elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; \
	else echo "ember: need root or sudo to install$$missing" >&2; exit 1; fi; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing

configure: deps
	cmake -S . -B $(BUILD) -DEMBER_WERROR=ON $(TEST_CFLAGS) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j$(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# The suite again with the CPU capped at the tiers a machine without AVX-512 runs (avx2, scalar):
# it keeps the tests honest about what they expect of the tier (CI runs on an AMX machine).
test-tiers: build
	cd $(BUILD) && for cap in avx2 scalar; do \
	  echo "== EMBER_CPU_MAX_ISA=$$cap"; \
	  EMBER_CPU_MAX_ISA=$$cap ctest --output-on-failure -j$(JOBS) || exit 1; \
	done

bench: build
	@core="$${OPENBLAS_CORETYPE:-$(BLAS_CORE)}"; \
	for b in $(BUILD)/bench/bench_*; do \
	  [ -x "$$b" ] || continue; \
	  echo "== $$b (OPENBLAS_CORETYPE=$${core:-unset})"; \
	  if [ -n "$$core" ]; then OPENBLAS_CORETYPE="$$core" "$$b" || exit 1; \
	  else "$$b" || exit 1; fi; \
	done

# Any sanitizer report fails, even one that would not change a test's exit status. Warnings are
# gated by `make test` (-Werror); here they are shown but not fatal, because the sanitizers'
# instrumentation makes GCC report -Wconversion false positives in code that is clean without it.
asan: deps
	cmake -S . -B $(ASAN_BUILD) -DEMBER_WERROR=OFF -DEMBER_SANITIZE=address,undefined \
	  $(ASAN_CFLAGS) $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	@cd $(ASAN_BUILD) && $(SANITIZER_ENV) ctest --output-on-failure -V -j$(JOBS) \
	  > ctest-sanitizers.log 2>&1; rc=$$?; \
	grep -E '^ *[0-9]+/[0-9]+ Test|tests passed|tests failed' ctest-sanitizers.log | sed 's/^/  /'; \
	if grep -nE '$(SANITIZER_REPORT)' \
	     ctest-sanitizers.log; then \
	  echo "ember: sanitizer report (see $(ASAN_BUILD)/ctest-sanitizers.log)" >&2; exit 1; fi; \
	if [ $$rc -ne 0 ]; then cat ctest-sanitizers.log; exit $$rc; fi

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)

# make examples: fetch the digits, build and run both examples (examples.mk)
include examples.mk
examples-build: configure

# make fuzz / fuzz-opencl (fuzz.mk), make tsan (tsan.mk), make check-valgrind (valgrind.mk)
include fuzz.mk
include tsan.mk
include valgrind.mk
