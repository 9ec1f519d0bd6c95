#!/usr/bin/env bash
# Installs what the build needs, from the registries this machine reaches: the compilers' helpers
# and test libraries from Debian when missing, and, when nvcc is present, the CUTLASS/CuTe headers
# from the PyPI wheel nvidia-cutlass (--no-deps) into the ignored folder .deps/cutlass.
set -euo pipefail
cd "$(dirname "$0")/.."

CUTLASS_VERSION=">=4.2"
CUTLASS_HEADER=.deps/cutlass/cutlass_library/source/include/cute/tensor.hpp

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v g++ >/dev/null || missing+=(g++)
command -v python3 >/dev/null || missing+=(python3)
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
[ -f /usr/include/benchmark/benchmark.h ] || missing+=(libbenchmark-dev)
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]} (Debian)"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

if command -v nvcc >/dev/null && [ ! -f "$CUTLASS_HEADER" ]; then
  echo "setup: installing CUTLASS/CuTe headers (PyPI nvidia-cutlass${CUTLASS_VERSION}) into .deps/cutlass"
  python3 -m pip install --quiet --no-deps --target .deps/cutlass "nvidia-cutlass${CUTLASS_VERSION}"
fi
