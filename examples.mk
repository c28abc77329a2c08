# examples.mk: `make examples` builds and runs both examples from a fresh clone. Included by the
# top Makefile (`include examples.mk`); also usable alone: `make -f examples.mk examples`.
#   make examples          fetch the digits, build, run mlp_digits then decode_step
#   make examples-data     only fetch data/digits.csv (apt-get download python3-sklearn, no install)
#   make examples-quick    the reduced schedules (what CTest runs for the digits), with the checks
# BUILD (default build, as in the Makefile) is the CMake build directory; EXAMPLES_CMAKE_FLAGS go to its configure.
BUILD ?= build
EXAMPLES_CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: examples examples-data examples-build examples-quick

examples-data:
	sh examples/fetch_digits.sh data

examples-build:
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(EXAMPLES_CMAKE_FLAGS)
	cmake --build $(BUILD) --target mlp_digits decode_step -j

examples: examples-data examples-build
	cd $(BUILD)/examples && ./mlp_digits --data $(CURDIR)/data/digits.csv
	cd $(BUILD)/examples && ./decode_step

examples-quick: examples-data examples-build
	cd $(BUILD)/examples && ./mlp_digits --data $(CURDIR)/data/digits.csv --quick --check
	cd $(BUILD)/examples && ./decode_step --quick
