# Top-level driver for the CMake build: `make` builds, `make test` builds and runs every
# test, `make run` generates with the model shipped in the repository.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all build configure test run setup clean gpu-test sanitize-test fuzz fuzz-ci cross-test-arm64

all: build

# Configure when the build folder has no generated Makefile (fresh clone, failed configure,
# deleted build/Makefile); scripts/configure.sh says what went wrong and what to run.
$(BUILD)/Makefile:
	@sh scripts/configure.sh $(BUILD) $(CMAKE_FLAGS)

configure: $(BUILD)/Makefile

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# CUDA op test against the CPU backend (needs a GPU; not part of `make test`).
gpu-test: configure
	cmake --build $(BUILD) -j $(JOBS) --target dit_gpu_op_test
	$(BUILD)/tests/dit_gpu_op_test

# Hardening (CI): the whole test suite under ASan+UBSan+LeakSanitizer, and each libFuzzer
# target for FUZZ_SECONDS (clang; `sh scripts/setup-ci.sh` installs it). See docs/SECURITY.md.
SAN_BUILD ?= build-sanitize
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_CC ?= $(shell command -v clang-14 || command -v clang)
sanitize-test:
	cmake -S . -B $(SAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDIT_SANITIZE=ON -DDIT_CUDA=OFF
	cmake --build $(SAN_BUILD) -j $(JOBS)
	cd $(SAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS)

fuzz:
	cmake -S fuzz -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=$(FUZZ_CC) -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(FUZZ_BUILD) -j $(JOBS)

# then replays (a sample of) the grown corpora through the release CLI: no signal exits
fuzz-ci: fuzz build
	sh fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)
	DIT_FUZZ_CORPUS=$(abspath $(FUZZ_BUILD))/corpus DIT_FUZZ_CORPUS_MAX=40 $(BUILD)/tests/test_fuzz_corpus \
	  --tmp $(abspath $(BUILD))/testtmp/fuzz_corpus_replay --src $(CURDIR) --bin $(abspath $(BUILD))

setup:
	sh scripts/setup.sh

# 64-bit Arm Linux: cross-built with Debian's aarch64 gcc, the CPU tests that exercise the
# NEON kernels (op table against the portable path, the fixtures, each also forced portable)
# run under qemu-user. `sh scripts/setup-cross.sh` installs what it needs.
ARM64_BUILD ?= build-arm64
# (Tests that start the CLI as a child process are left out: the child would need qemu too.)
ARM64_TESTS ?= test_dtype test_ops_cpu test_backend_ops test_quant test_zimage_fixture test_flux2_fixture \
  test_vae_fixture
cross-test-arm64:
	cmake -S . -B $(ARM64_BUILD) -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DDIT_CUDA=OFF \
	  -DCMAKE_BUILD_TYPE=Release
	cmake --build $(ARM64_BUILD) -j $(JOBS) --target ditrun $(ARM64_TESTS)
	qemu-aarch64 $(ARM64_BUILD)/ditrun info --system | tee $(ARM64_BUILD)/info.txt
	grep -q "GEMM kernel path: neon" $(ARM64_BUILD)/info.txt
	cd $(ARM64_BUILD) && ctest --output-on-failure -j $(JOBS) \
	  -R "^($(subst $(eval) ,|,$(strip $(ARM64_TESTS))))(_portable)?$$"

# Only the CLI is needed to generate: skip the tests and benchmarks.
run: configure
	cmake --build $(BUILD) -j $(JOBS) --target ditrun
	sh scripts/run.sh $(BUILD)

clean:
	rm -rf $(BUILD)
