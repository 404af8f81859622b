# Top-level driver for the CMake build: `make` builds, `make test` builds and runs every
# test, `make run` generates with the model shipped in the repository.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: all build configure test run setup clean gpu-test

all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# CUDA op test against the CPU backend (needs a GPU; not part of `make test`).
gpu-test: configure
	cmake --build $(BUILD) -j $(JOBS) --target dit_gpu_op_test
	$(BUILD)/tests/dit_gpu_op_test

setup:
	sh scripts/setup.sh

# Only the CLI is needed to generate: skip the tests and benchmarks.
run: configure
	cmake --build $(BUILD) -j $(JOBS) --target ditrun
	sh scripts/run.sh $(BUILD)

clean:
	rm -rf $(BUILD)
