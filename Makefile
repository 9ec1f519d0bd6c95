# The two commands of the README: `make run` and `make test`. Both set up, configure and build
# first. CUDA builds instantiate a narrow kernel set by default (FLASHATTN_HEAD_DIMS and
# FLASHATTN_DTYPES below) so that a cold build fits CI; `make FULL=1 ...` builds every kernel.
BUILD ?= build
JOBS ?= $(shell nproc)
HEAD_DIMS ?= 128
DTYPES ?= bf16
ifeq ($(FULL),1)
KERNEL_FLAGS :=
else
KERNEL_FLAGS := -DFLASHATTN_HEAD_DIMS="$(HEAD_DIMS)" -DFLASHATTN_DTYPES="$(DTYPES)"
endif
CMAKE_FLAGS ?=

.PHONY: all setup configure build run test bench clean

all: build

setup:
	@scripts/setup.sh

configure: setup
	cmake -S . -B $(BUILD) -G Ninja $(KERNEL_FLAGS) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/tools/flashattn/flashattn run --check --bwd

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)
	@skipped=$$(grep -c "^no CUDA device visible" $(BUILD)/Testing/Temporary/LastTest.log || true); \
	  if [ "$$skipped" != 0 ]; then echo "$$skipped GPU tests skipped: no CUDA device visible (or a build without CUDA)"; fi

bench: build
	$(BUILD)/tools/flashattn/flashattn bench

clean:
	rm -rf $(BUILD)
