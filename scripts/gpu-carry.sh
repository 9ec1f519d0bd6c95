#!/usr/bin/env bash
# Prepares, on this machine, what a device run carries: the CUTLASS/CuTe include folder (from
# scripts/setup.sh) and GoogleTest's headers and static libraries (the device image has no
# GoogleTest). Prints the paths to name in the call's `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
mkdir -p .deps/gtest/include .deps/gtest/lib
cp -r /usr/include/gtest /usr/include/gmock .deps/gtest/include/
cp /usr/lib/x86_64-linux-gnu/libgtest*.a /usr/lib/x86_64-linux-gnu/libgmock*.a .deps/gtest/lib/
echo ".deps/cutlass/cutlass_library/source/include .deps/gtest"
