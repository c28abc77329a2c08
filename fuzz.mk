# fuzz.mk: `make fuzz`, the long fuzzing runs (the bounded ones are CTest entries: fuzz/CMakeLists.txt).
# Included by the top Makefile (`include fuzz.mk`); also usable alone: `make -f fuzz.mk fuzz`.
#   make fuzz                 build build-fuzz/ with clang (libFuzzer + ASan + UBSan) and run every
#                             harness for FUZZ_SECONDS each (default 300), one after another
#   make fuzz FUZZ_JOBS=2     run the harnesses two at a time
#   make fuzz-opencl          the same with EMBER_FUZZ_OPENCL=1 (harnesses also use OpenCL device 0;
#                             fuzz_quantize then checks CPU and OpenCL give identical bytes). LSan is
#                             off there (PoCL's JIT-compiled code leaks by design, with stacks no
#                             suppression can name); ember's own live-block check per input stays.
#   make fuzz-one FUZZ_HARNESS=qbytes   one harness
# New inputs go to $(FUZZ_BUILD)/fuzz/found-<harness>/ (never into the committed corpus: copy what is
# worth keeping into fuzz/corpus/<harness>/ by hand); crashes to $(FUZZ_BUILD)/fuzz/crash-*; each
# run's log, with libFuzzer's final stats (stat::number_of_executed_units), to
# $(FUZZ_BUILD)/fuzz/<harness>.log. Requires clang with libFuzzer (Debian: clang).
FUZZ_BUILD ?= build-fuzz
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 300
FUZZ_JOBS ?= 1
FUZZ_HARNESSES ?= qbytes ops quantize dispatch
FUZZ_ENV ?=
FUZZ_FLAGS ?= -timeout=20 -rss_limit_mb=4096 -print_final_stats=1

.PHONY: fuzz fuzz-build fuzz-opencl fuzz-one fuzz-run-one

fuzz-build:
	@command -v $(FUZZ_CC) >/dev/null || { echo "ember: make fuzz needs clang (apt-get install clang)" >&2; exit 1; }
	CC=$(FUZZ_CC) cmake -S . -B $(FUZZ_BUILD) -DEMBER_SANITIZE=address,undefined \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g" \
	  -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link -DEMBER_FUZZ_ENGINE=libfuzzer \
	  -DEMBER_BUILD_BENCH=OFF -DEMBER_BUILD_EXAMPLES=OFF
	cmake --build $(FUZZ_BUILD) -j2 --target $(addprefix fuzz_,$(FUZZ_HARNESSES))

# One harness: $(FUZZ_HARNESS) for $(FUZZ_SECONDS), its stats at the end of the log.
fuzz-one: fuzz-build
	@$(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) fuzz-run-one \
	  FUZZ_HARNESS=$(FUZZ_HARNESS) FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) \
	  FUZZ_ENV="$(FUZZ_ENV)" FUZZ_FLAGS="$(FUZZ_FLAGS)"

fuzz-run-one:
	@cd $(FUZZ_BUILD)/fuzz && mkdir -p found-$(FUZZ_HARNESS) && \
	echo "ember: fuzz_$(FUZZ_HARNESS) for $(FUZZ_SECONDS) s (log: $(FUZZ_BUILD)/fuzz/$(FUZZ_HARNESS).log)" && \
	$(FUZZ_ENV) LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	  ./fuzz_$(FUZZ_HARNESS) -max_total_time=$(FUZZ_SECONDS) $(FUZZ_FLAGS) \
	  found-$(FUZZ_HARNESS) $(CURDIR)/fuzz/corpus/$(FUZZ_HARNESS) > $(FUZZ_HARNESS).log 2>&1; \
	rc=$$?; grep -E 'stat::number_of_executed_units|SUMMARY|fuzz check failed' $(FUZZ_HARNESS).log; \
	exit $$rc

fuzz: fuzz-build
	@printf '%s\n' $(FUZZ_HARNESSES) | xargs -P $(FUZZ_JOBS) -I{} \
	  $(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) fuzz-run-one FUZZ_HARNESS={} \
	  FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_ENV="$(FUZZ_ENV)" \
	  FUZZ_FLAGS="$(FUZZ_FLAGS)"

fuzz-opencl:
	$(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) fuzz \
	  FUZZ_ENV="EMBER_FUZZ_OPENCL=1 ASAN_OPTIONS=detect_leaks=0" FUZZ_FLAGS="$(FUZZ_FLAGS) -detect_leaks=0"
