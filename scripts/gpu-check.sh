#!/usr/bin/env bash
# One call on the device machine: configure and build (all cores), run the GPU tests (and count
# the backward's tail launches in the test built for them), the compute-sanitizer subset, the
# decoding benchmark and the benchmark against PyTorch (its table), then the sm90a forward's SASS
# check (HGMMA count, spills, serialised wgmma); the last lines are a summary. Writes logs.tar.gz
# and kernels-sm90a.sass.gz to $OUT.
# Carry what scripts/gpu-carry.sh prints. Usage:
#   scripts/gpu-check.sh [--dims "64;128;256"] [--dtypes "bf16;f16"] [--tests FILTER] [--no-tests]
#                        [--no-sanitizer] [--no-bench] [--bench-bwd] [--bench-sm80] [--no-peers]
#                        [--profile D,SEQLEN[,fwd|bwd|both|fwd-sm80[,causal]]]... [--fwd-only] [--rounds N]
#                        [--interleaved] [--sustained fwd|bwd] [--bench-args ARGS] [--sustained-args ARGS]
#                        [--archs "80;90a"]
# --archs: the CUDA archs built (default both: the sm_80 code is compiled, and its ptxas report
# logged, though a Hopper GPU runs the sm80 kernels from their sm_90a code; "90a" about halves the
# build, for a call that must fit its time limit).
# --bench-sm80: also the sm80 forward on a Hopper GPU (the cuda backend's forward is the sm90a one).
# --no-peers: the benchmark without PyTorch's backends (their columns print nan).
# --fwd-only: no backward tests or sanitizer runs (for a change that leaves the backward alone).
# --rounds N: the benchmark's grids (ours, the sm80 forward, PyTorch's) N times in alternation, and
# the table of each point's median over the rounds, so that a drift of the GPU's clock over the
# minutes of one grid weighs on every column alike (default 1).
# --interleaved: instead, scripts/bench_interleaved.py: our library (through its C API), FA2 and
# cuDNN on the same tensors, alternating at every point (with --bench-bwd the backward too; the
# decoding table, --bench-sm80 and --no-peers do not apply: --bench-args "--sm80" adds the sm80
# forward's columns).
# --sustained: also scripts/bench_sustained.py in that direction (ours against cuDNN's forward or
# FA2's backward in half-second batches, at the clock the power cap allows; d 64 / 128 / 256, 8k and
# 16k keys, both masks).
# --bench-args / --sustained-args: more arguments for scripts/bench_interleaved.py /
# bench_sustained.py (e.g. --bench-args "--seqlens 4096,8192,16384 --rounds 15" for a longer look at
# a few points; the scripts' own --help lists them).
# --profile: Nsight Compute (full set, per-instruction stall samples) at one bf16 point of the
# standard grid (non-causal unless `causal`): our forward (the cuda backend's: sm90a on a Hopper
# GPU) and PyTorch's FlashAttention-2 and cuDNN forward kernels, our backward and
# FlashAttention-2's (fwd / bwd: one direction only; fwd-sm80: our sm80 forward and FlashAttention-2's
# forward alone). May be given several times.
# The logs are packed into $OUT/logs.tar.gz (a device call returns at most 8 files); each step has
# a time limit so that one hang still leaves the logs and the summary of the others.
set -uo pipefail
cd "$(dirname "$0")/.."
dims="32;64;96;128;160;192;224;256"
dtypes="bf16;f16"
tests="*"
run_tests=1 run_sanitizer=1 run_bench=1 bench_bwd=0 bench_sm80=0 peers=1 profile="" suites="fwd bwd" rounds=1 interleaved=0
sustained="" bench_args="" sustained_args="" archs="80;90a"
while [ $# -gt 0 ]; do
  case "$1" in
    --dims) dims="$2"; shift 2 ;;
    --dtypes) dtypes="$2"; shift 2 ;;
    --tests) tests="$2"; shift 2 ;;
    --no-tests) run_tests=0; shift ;;
    --no-sanitizer) run_sanitizer=0; shift ;;
    --no-bench) run_bench=0; shift ;;
    --bench-bwd) bench_bwd=1; shift ;;
    --bench-sm80) bench_sm80=1; shift ;;
    --no-peers) peers=0; shift ;;
    --fwd-only) suites="fwd"; shift ;;
    --profile) profile="$profile $2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --interleaved) interleaved=1; shift ;;
    --sustained) sustained="$2"; shift 2 ;;
    --bench-args) bench_args="$2"; shift 2 ;;
    --sustained-args) sustained_args="$2"; shift 2 ;;
    --archs) archs="$2"; shift 2 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=/tmp/gpu-check-logs
rm -rf "$out"; mkdir -p "$out"
summary=()
t0=$(date +%s)
# A summary line, printed at once too (with the seconds since the start), so that a call stopped
# by its time limit still shows how far it got.
note() { summary+=("$1"); echo "[$(( $(date +%s) - t0 )) s] $1"; }
pack_logs() { [ -n "${OUT:-}" ] && tar czf "$OUT/logs.tar.gz" -C "$out" . ; }
trap pack_logs EXIT
# The GPU's identity and power state with every result: one kernel's grid point moved by 4-7% between
# two machines of the same kind (docs/performance.md, the grid after sm90a v45).
nvidia-smi --query-gpu=name,memory.total,driver_version,uuid,power.limit,clocks.max.sm,temperature.gpu \
  --format=csv,noheader | tee "$out/device.txt"

gtest_flags=()
[ -f /usr/include/gtest/gtest.h ] || gtest_flags=(-DGTEST_ROOT="$PWD/.deps/gtest")
start=$(date +%s)
# Always from scratch: a warm machine keeps build-gpu, but the tree it receives carries this
# machine's file times, older than the objects there, so ninja would keep stale kernels.
rm -rf build-gpu
cmake -S . -B build-gpu -G Ninja -DFLASHATTN_ENABLE_CUDA=ON -DFLASHATTN_BUILD_BENCHMARKS=OFF \
  -DCUTLASS_DIR="$PWD/.deps/cutlass/cutlass_library/source" -DFLASHATTN_HEAD_DIMS="$dims" \
  -DFLASHATTN_DTYPES="$dtypes" -DFLASHATTN_CUDA_ARCHS="$archs" -DCMAKE_CUDA_FLAGS="-Xptxas=-v" "${gtest_flags[@]}" \
  > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j "$(nproc)" > "$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -40; exit 1; }
note "build (dims $dims, dtypes $dtypes, archs $archs): $(( $(date +%s) - start )) s"

# A hang guard: a few forward cases (one with several work items per CTA, one at d 256 where some
# clusters of two CTAs take a second pair of items) under a short limit, so that a kernel that
# never returns costs one minute, not every step's limit.
if [ $run_tests = 1 ] || [ $run_sanitizer = 1 ] || [ $run_bench = 1 ]; then
  timeout 60 build-gpu/tests/test_gpu_fwd \
    --gtest_filter="*b2_sq113_sk203_h4x4_d64_bf16*:*b4_sq384_sk384*:*b1_sq129_sk4100_h68x4_d256_f16" \
    > "$out/smoke.log" 2>&1
  rc=$?
  note "smoke forward cases: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+ test' "$out/smoke.log" | tr '\n' ' ') (rc $rc)"
  if [ $rc = 124 ]; then
    note "the smoke cases hung: the other steps are skipped"
    run_tests=0 run_sanitizer=0 run_bench=0
  fi
fi

if [ $run_tests = 1 ]; then
  for suite in $suites; do
    timeout 300 build-gpu/tests/test_gpu_$suite --gtest_filter="$tests" > "$out/gpu-tests-$suite.log" 2>&1
    rc=$?
    grep -E "^\[  FAILED|Failure|error|expected|FAIL" "$out/gpu-tests-$suite.log" | head -40
    note "gpu $suite tests: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+ test' "$out/gpu-tests-$suite.log" | tr '\n' ' ') (rc $rc)"
  done
fi

# The backward's tail launch (backward v20) is chosen by a wave model on the device's SM count, and
# nothing in the results shows whether it ran: list the kernels of the test built to take it
# (Nsight Compute, which serialises them) and count the tail kernel's launches.
if [ $run_tests = 1 ] && [[ " $suites " == *" bwd "* ]]; then
  timeout 120 ncu --metrics gpu__time_duration.sum build-gpu/tests/test_gpu_bwd --gtest_filter='GpuBackwardTail.*' \
    > "$out/tail-launch.log" 2>&1
  note "backward tail kernel launches in GpuBackwardTail (ncu, rc $?): $(grep -cE 'BwdDkvSm80<[0-9]+, [a-z0-9_]+, 3,' "$out/tail-launch.log")"
fi

if [ $run_sanitizer = 1 ]; then
  # (The 256 x 4100 case without its _sm80 variant: the sm90a clusters are the path under test.)
  small_fwd="*b2_sq113_sk203_h4x4_d64_bf16*:*b2_sq113_sk203_h4x4_d256_bf16*:*b2_sq256_sk4100_h3x1_d256_bf16"
  small_fwd+=":*b2_sq512_sk2100_h6x2_d256_f16_causal:*b3_sq7_sk700_h8x2_d128_bf16_paged16*:*varlen_paged16*:*drop17*"
  small_fwd+=":*new5_rot64*:*dv40*:*split3*:*b3_sq1_sk3000_h32x8_d128_bf16_paged16*:*b3_sq1_sk700_h12x2*:*GpuMerge*"
  small_bwd="*b2_sq113_sk203_h4x4_d64_bf16*:*b2_sq113_sk203_h4x4_d200_bf16:*d16_dv256*:*b3_sq70_sk2900_h8x4_d64_bf16:*GpuBackwardTail*:*b2_sq5_sk2_h4x4_d256_bf16*:*varlen*:*drop17*:*dv40*:*sq0_*:*sk0_*"
  for tool in memcheck racecheck; do
    for suite in $suites; do
      filter="$small_fwd"; [ $suite = bwd ] && filter="$small_bwd"
      timeout 120 compute-sanitizer --tool $tool --error-exitcode 3 build-gpu/tests/test_gpu_$suite --gtest_filter="$filter" \
        > "$out/sanitizer-$tool-$suite.log" 2>&1
      note "sanitizer $tool $suite: rc $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer-$tool-$suite.log" | tail -1))"
    done
  done
fi

if [ $run_bench = 1 ] && [ $interleaved = 1 ]; then
  bwd_flag=(); [ $bench_bwd = 1 ] && bwd_flag=(--bwd)
  # $bench_args unquoted: its arguments split at spaces.
  timeout 500 python3 scripts/bench_interleaved.py --lib build-gpu/src/libflashattn.so "${bwd_flag[@]}" $bench_args \
    > "$out/bench-table.txt" 2> "$out/bench-interleaved.err" || tail -5 "$out/bench-interleaved.err"
  cat "$out/bench-table.txt"
elif [ $run_bench = 1 ]; then
  ours_flags=(--fwd-only) torch_flags=()
  [ $bench_bwd = 1 ] && ours_flags=() torch_flags=(--bwd)
  for r in $(seq "$rounds"); do
    timeout 300 build-gpu/tools/flashattn/flashattn bench --backend cuda --csv "${ours_flags[@]}" \
      > "$out/bench-flashattn-$r.csv" 2> "$out/bench-flashattn-$r.err" || tail -5 "$out/bench-flashattn-$r.err"
    : > "$out/bench-sm80-$r.csv"
    if [ $bench_sm80 = 1 ]; then
      timeout 200 build-gpu/tools/flashattn/flashattn bench --backend cuda-sm80 --csv --fwd-only \
        > "$out/bench-sm80-$r.csv" 2> "$out/bench-sm80-$r.err" || tail -5 "$out/bench-sm80-$r.err"
    fi
    : > "$out/bench-torch-$r.csv"
    if [ $peers = 1 ]; then
      timeout 300 python3 scripts/bench_torch.py "${torch_flags[@]}" > "$out/bench-torch-$r.csv" \
        2> "$out/bench-torch-$r.err" || tail -5 "$out/bench-torch-$r.err"
    fi
    note "benchmark round $r of $rounds done"
  done
  timeout 120 build-gpu/tools/flashattn/flashattn bench-decode --backend cuda > "$out/bench-decode.txt" 2>&1
  cat "$out/bench-decode.txt"
  python3 scripts/bench_table.py --ours "$out"/bench-flashattn-*.csv --torch "$out"/bench-torch-*.csv \
    --sm80 "$out"/bench-sm80-*.csv | tee "$out/bench-table.txt"
fi

if [ -n "$sustained" ]; then
  # $sustained_args unquoted, as $bench_args.
  timeout 400 python3 scripts/bench_sustained.py --lib build-gpu/src/libflashattn.so --dir "$sustained" $sustained_args \
    > "$out/sustained.txt" 2> "$out/sustained.err" || tail -5 "$out/sustained.err"
  cat "$out/sustained.txt"
  note "sustained $sustained: $(tail -n +3 "$out/sustained.txt" | wc -l) points"
fi

# name, kernel regex, command: the first matching launch, details, per-instruction SASS and every raw
# metric (where nothing matched, the names of the command's kernels instead).
profile_kernel() {
  timeout 240 ncu --clock-control none --set full --import-source no --kernel-name "regex:$2" \
    --launch-skip "${launch_skip:-0}" --launch-count 1 -f -o "$out/prof-$1" "${@:3}" > "$out/prof-$1.log" 2>&1
  if [ ! -f "$out/prof-$1.ncu-rep" ]; then
    timeout 120 ncu --metrics gpu__time_duration.sum "${@:3}" 2>&1 | grep -E '^  [^ ]' | sort -u > "$out/prof-$1-kernels.txt"
    note "profile $1: no kernel matched $2 (the command's kernels: prof-$1-kernels.txt)"
    return
  fi
  ncu -i "$out/prof-$1.ncu-rep" --page details > "$out/prof-$1-details.txt" 2>&1
  ncu -i "$out/prof-$1.ncu-rep" --page source --print-source sass --csv 2>&1 | gzip > "$out/prof-$1-sass.csv.gz"
  ncu -i "$out/prof-$1.ncu-rep" --page raw --csv 2>&1 | gzip > "$out/prof-$1-raw.csv.gz"
  rm -f "$out/prof-$1.ncu-rep"
  note "profile $1: $(grep -E '^ +Duration' "$out/prof-$1-details.txt" | head -1 | tr -s ' ')"
}
# PyTorch's step at the profiled point (batch, heads, seqlen, d, is_causal) with a backend: the
# forward and backward (grad True) or the inference forward.
torch_step() {
  echo "import torch, torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q, k, v = (torch.randn($batch, $heads, $seqlen, $d, device='cuda', dtype=torch.bfloat16, requires_grad=$2) for _ in range(3))
with sdpa_kernel(SDPBackend.$1):
    o = F.scaled_dot_product_attention(q, k, v, is_causal=$is_causal)
    if $2: o.backward(torch.randn_like(o))"
}
for spec in $profile; do
  IFS=, read -r d seqlen dir mask <<< "$spec"
  heads=$(( 2048 / d )) batch=$(( 16384 / seqlen )) at="$d-$seqlen${mask:+-$mask}"
  # Our bench times the non-causal point first (one forward, then the backward after a forward of
  # its own), then the causal one: the launches of ours to skip for the causal point.
  fwd_skip=0 bwd_skip=0 is_causal=False
  [ "$mask" = causal ] && fwd_skip=2 bwd_skip=1 is_causal=True
  # Ours on tensors stored as the peers' (torch.randn(batch, heads, seqlen, d)).
  ours=(build-gpu/tools/flashattn/flashattn bench --backend cuda --seqlens "$seqlen" --dims "$d" --layout bhsd --warmup 0 --repeat 1)
  case "${dir:-both}" in
    fwd-sm80)
      # With --fwd-only each point makes one forward launch, so the causal point skips one.
      launch_skip=$(( fwd_skip / 2 )) profile_kernel "ours-fwd-sm80-$at" "fwd_kernel_sm80" "${ours[@]/#cuda/cuda-sm80}" --fwd-only
      profile_kernel "fa2-fwd-inf-$at" "flash_fwd_kernel" python3 -c "$(torch_step FLASH_ATTENTION False)" ;;
    fwd|bwd|both)
      if [ "${dir:-both}" != bwd ]; then
        launch_skip=$fwd_skip profile_kernel "ours-fwd-$at" "fwd_kernel_sm" "${ours[@]}"  # sm90a on a Hopper GPU, else sm80
        profile_kernel "fa2-fwd-$at" "flash_fwd_kernel" python3 -c "$(torch_step FLASH_ATTENTION True)"
        profile_kernel "cudnn-fwd-$at" "sdpa|fmha|fprop" python3 -c "$(torch_step CUDNN_ATTENTION False)"
      fi
      if [ "${dir:-both}" != fwd ]; then
        launch_skip=$bwd_skip profile_kernel "ours-bwd-$at" "bwd_dkdv_kernel_sm80" "${ours[@]}"
        profile_kernel "fa2-bwd-$at" "flash_bwd_dq_dk_dv" python3 -c "$(torch_step FLASH_ATTENTION True)"
      fi ;;
    *) note "profile $spec: unknown direction $dir (fwd, bwd, both or fwd-sm80)" ;;
  esac
done

# The sm_90a SASS of the kernels, for reading offline, and the sm90a forward's check: wgmma in
# its SASS (HGMMA), no spills and no serialised wgmma in the compiler's report (ptxas -v in the
# build log, scripts/ptxas-report.sh).
sass="${OUT:-$out}/kernels-sm90a.sass.gz"
cuobjdump -sass -arch sm_90a build-gpu/src/libflashattn.so 2>/dev/null | gzip > "$sass"
hgmma=$(zcat "$sass" | awk '/Function :/ { f = ($3 ~ /fwd_kernel_sm90/) } f && /HGMMA/ { n++ } END { print n + 0 }')
note "sm90a forward: $hgmma HGMMA in its SASS; $(scripts/ptxas-report.sh "$out/build.log" fwd_kernel_sm90)"

echo "=== summary ($(cat "$out/device.txt"))"
printf '%s\n' "${summary[@]}"
