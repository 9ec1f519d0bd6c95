#!/usr/bin/env bash
# One device call: the sm90a forward's waits counted by the SM clock (scripts/fwd_waits.py) in the
# working tree (A) and in the tree with each given patch applied (B, C, ...), built side by side in
# /tmp/gpu-waits (sm_90a, bf16, the given head dim only), each run once by `flashattn bench` (a few
# single launches at an unthrottled clock: where the cycles go, not what the power cap allows; time
# a change with scripts/gpu-ab.sh). Prints each variant's report; the raw output goes to
# $OUT/waits-<variant>.txt.gz. Carry what scripts/gpu-carry.sh prints. Usage:
#   scripts/gpu-waits.sh [--dim 128] [--seqlens "1024,2048,4096,8192"] [PATCH...]
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD dim=128 seqlens="1024,2048,4096,8192"
while [ $# -gt 0 ]; do
  case "$1" in
    --dim) dim="$2"; shift 2 ;;
    --seqlens) seqlens="$2"; shift 2 ;;
    --*) echo "gpu-waits: unknown argument $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
out=${OUT:-/tmp/gpu-waits-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv,noheader
letters=(A B C D E F G H)
[ $# -lt ${#letters[@]} ] || { echo "gpu-waits: at most $(( ${#letters[@]} - 1 )) patches" >&2; exit 2; }
patches=("")
for patch in "$@"; do
  [ -f "$patch" ] || { echo "gpu-waits: no patch $patch" >&2; exit 2; }
  patches+=("$(realpath "$patch")")
done
work=/tmp/gpu-waits
rm -rf "$work"
jobs=$(( $(nproc) / ${#patches[@]} )); [ "$jobs" -ge 1 ] || jobs=1
pids=()
for i in "${!patches[@]}"; do
  v=${letters[$i]} tree=$work/${letters[$i]}
  scripts/variant-tree.sh "$tree" "${patches[$i]}" || exit 1
  python3 scripts/fwd_waits.py instrument "$tree" || exit 1
  (cmake -S "$tree" -B "$tree/build" -G Ninja -DFLASHATTN_ENABLE_CUDA=ON -DFLASHATTN_BUILD_BENCHMARKS=OFF \
     -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_TESTS=OFF -DFLASHATTN_CUDA_BACKWARD=OFF \
     -DCUTLASS_DIR="$root/.deps/cutlass/cutlass_library/source" -DFLASHATTN_HEAD_DIMS="$dim" -DFLASHATTN_DTYPES=bf16 \
     > "$work/$v.configure.log" 2>&1 && cmake --build "$tree/build" -j "$jobs" > "$work/$v.build.log" 2>&1) &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "gpu-waits: ${letters[$i]} failed to build"
    grep -E "error" "$work/${letters[$i]}.build.log" | head
    exit 1
  fi
done
for i in "${!patches[@]}"; do
  v=${letters[$i]}
  echo "== $v ${patches[$i]}"
  "$work/$v/build/tools/flashattn/flashattn" bench --backend cuda --seqlens "$seqlens" --dims "$dim" --fwd-only \
    --warmup 3 --repeat 5 --csv > "$out/waits-$v.txt" 2>&1
  python3 scripts/fwd_waits.py report "$out/waits-$v.txt"
  gzip -f "$out/waits-$v.txt"
done
