#!/usr/bin/env bash
# One device call comparing kernels: the working tree as it is (A) against the tree with each
# given patch applied (B, C, ...), built side by side (without the backward unless --bwd), then
# `flashattn bench` of every variant in alternating rounds, and a table of each point's runs and
# the ratios of the means to A. Carry what scripts/gpu-carry.sh prints; the patches are files of
# the working tree (`git diff > ab/x.patch`: untracked, so the call takes them). Usage:
#   scripts/gpu-ab.sh [--dims "64,128,256"] [--seqlens "512,2048,16384"] [--rounds 2] [--bwd]
#                     [--tests FILTER] [--archs "90a"] [--backend cuda] [--deadline S]
#                     [--bench-args "..."] [--stalls D,SEQLEN[,causal]] [--source D,SEQLEN[,causal]]
#                     [--interleaved N] [--interleaved-rounds R] [--masks "0,1"] [--dtypes "bf16"]
#                     [--sustained "ARGS"] PATCH...
# --bwd: the backward instead of the forward (built, benchmarked, tested).
# --backend: the backend benchmarked (cuda-sm80: the sm80 forward on a Hopper GPU).
# --bench-args: more arguments for every `flashattn bench` run (e.g. "--deterministic").
# --tests: also run the forward (or backward) GPU tests with that gtest filter on every variant, A
# included (the builds then include the tests), so that a variant's figures come with its
# correctness, and a test meant to fail on a patched variant is seen to pass on A.
# --dtypes: the dtypes built (default bf16: the benchmark times bf16; "bf16;f16" for a change whose
# f16 tests matter).
# --archs: the CUDA archs built (default 90a: the device is a Hopper GPU, where the sm80 kernels run
# from the sm_90a code too, and one arch halves each variant's build).
# --deadline: start a benchmark round only if, at the pace of the previous one, it ends within S
# seconds of the script's start (the table then covers the rounds that ran; give S somewhat under
# the call's time limit).
# --stalls: after the rounds, each variant's forward kernel at one bf16 point of the standard grid
# (non-causal unless `causal`) once under Nsight Compute: its time, SM clock, instructions, issue
# and tensor-pipe activity and the warp stall reasons per issue, side by side (a difference in
# time with the same instructions: which stall moved). Forward only. It runs after the rounds and
# outside --deadline's count: leave it about a minute per variant of the call's time limit.
# --source: after that, each variant's forward kernel at one such point under Nsight Compute's full
# set with per-instruction stall samples: a table of the samples by stall reason (% of each
# variant's samples) and each variant's most sampled instructions; the SASS pages, one per
# variant, go to $OUT/source-<variant>.csv.gz. Outside --deadline too: about a minute per variant.
# --interleaved: after the rounds (--rounds 0: instead of them), N processes of
# scripts/bench_interleaved.py with A as --lib and the other variants as --variant: every variant,
# FA2 and cuDNN alternate within each point on the same tensors after the same warm-up, as the grid
# times them (at the power cap, where a change that saves energy gains clock: the cluster pairs ran
# 1.00x in bursts and 1.04x there, docs/performance.md sm90a v45). A table of each point's A x cuDNN
# and each variant / A per process, and the mean of the latter; the processes' output goes to
# $OUT/interleaved-<n>.txt. Outside --deadline's count: about 3 s per point and variant per process.
# With no patch, A alone (--rounds 0 --interleaved N: the working tree's grid beside FA2 and cuDNN in
# N processes, each point's A x cuDNN per process and their mean, built for --dims only; or
# --sustained: A beside the peer with clocks and power).
# --masks: the causal flags the interleaved processes time ("1": the causal points alone, for a change
# that leaves unmasked calls alone).
# --interleaved-rounds: bench_interleaved.py's rounds per point (default 5, each library's time the
# median of them; a null patch spread 2-3% per process with 5, sm90a v46 / v47).
# --sustained: after those, scripts/bench_sustained.py with A as --lib and the other variants as
# --variant (v1, v2, ... in its table are B, C, ...), with --dims as built and ARGS (its
# --seqlens, --causal, --seconds, --trials; its table prints at the end, within 500 s): every
# variant and the peer in batches of about --seconds each, with the median SM clock and power of
# each, so that a change's ratio comes with its clock (whether its cycles turn into time where the
# power cap holds the clock: docs/performance.md, sm90a v78). Its output goes to
# $OUT/sustained.txt. Outside --deadline's count.
# Writes each run's CSV (bench-<variant>-<round>.csv) into $OUT/bench-csv.tar.gz (a device call
# brings back at most 8 files).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dims="64,128,256" seqlens="" rounds=2 tests="" dir=fwd archs="90a" backend=cuda deadline=0 bench_args="" stalls=""
source="" interleaved=0 interleaved_rounds=5 dtypes="bf16" masks="0,1" sustained=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dims) dims="$2"; shift 2 ;;
    --seqlens) seqlens="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --tests) tests="$2"; shift 2 ;;
    --bwd) dir=bwd; shift ;;
    --archs) archs="$2"; shift 2 ;;
    --backend) backend="$2"; shift 2 ;;
    --deadline) deadline="$2"; shift 2 ;;
    --bench-args) bench_args="$2"; shift 2 ;;
    --stalls) stalls="$2"; shift 2 ;;
    --source) source="$2"; shift 2 ;;
    --interleaved) interleaved="$2"; shift 2 ;;
    --interleaved-rounds) interleaved_rounds="$2"; shift 2 ;;
    --sustained) sustained="$2"; shift 2 ;;
    --masks) masks="$2"; shift 2 ;;
    --dtypes) dtypes="$2"; shift 2 ;;
    --*) echo "gpu-ab: unknown argument $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || [ "$interleaved" -gt 0 ] || [ -n "$sustained" ] ||
  { echo "gpu-ab: give at least one patch (or --interleaved / --sustained)" >&2; exit 2; }
out=${OUT:-/tmp/gpu-ab-out}
mkdir -p "$out"
csvs=/tmp/gpu-ab-csv
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
# The device (its UUID too), printed first and again last: a long call's returned tail may have
# lost the first line.
device=$(nvidia-smi --query-gpu=name,memory.total,driver_version,uuid,power.limit,clocks.max.sm,temperature.gpu \
  --format=csv,noheader)
echo "$device"

# Variant trees under /tmp/gpu-ab: A is the working tree, the others A plus one patch each.
letters=(B C D E F G H)
[ $# -le ${#letters[@]} ] || { echo "gpu-ab: at most ${#letters[@]} patches" >&2; exit 2; }
names=(A) patches=("")
for patch in "$@"; do
  [ -f "$patch" ] || { echo "gpu-ab: no patch $patch" >&2; exit 2; }
  names+=("${letters[${#patches[@]} - 1]}") patches+=("$(realpath "$patch")")
done
work=/tmp/gpu-ab
rm -rf "$work"
gtest_flags=()
[ -f /usr/include/gtest/gtest.h ] || gtest_flags=(-DGTEST_ROOT="$root/.deps/gtest")
cmake_dims=${dims//,/;}
for i in "${!names[@]}"; do
  v=${names[$i]} tree=$work/${names[$i]}
  scripts/variant-tree.sh "$tree" "${patches[$i]}" || exit 1
  with_tests=OFF; [ -n "$tests" ] && with_tests=ON
  cmake -S "$tree" -B "$tree/build" -G Ninja -DFLASHATTN_ENABLE_CUDA=ON -DFLASHATTN_BUILD_BENCHMARKS=OFF \
    -DFLASHATTN_CUDA_ARCHS="$archs" -DFLASHATTN_BUILD_TESTS=$with_tests -DFLASHATTN_CUDA_BACKWARD=$([ $dir = bwd ] && echo ON || echo OFF) \
    -DCUTLASS_DIR="$root/.deps/cutlass/cutlass_library/source" -DFLASHATTN_HEAD_DIMS="$cmake_dims" \
    -DFLASHATTN_DTYPES="$dtypes" -DCMAKE_CUDA_FLAGS="-Xptxas=-v" "${gtest_flags[@]}" > "$work/$v.configure.log" 2>&1 ||
    { tail -20 "$work/$v.configure.log"; exit 1; }
done
# The variants build side by side: one variant has only a few large translation units (one per
# head dim and direction), which leave most cores idle if the builds run one after another. The
# cores are shared out, so that the compilers' memory stays that of one full build.
jobs=$(( $(nproc) / ${#names[@]} )); [ "$jobs" -ge 1 ] || jobs=1
pids=()
for v in "${names[@]}"; do
  cmake --build "$work/$v/build" -j "$jobs" > "$work/$v.build.log" 2>&1 &
  pids+=($!)
done
for i in "${!names[@]}"; do
  if ! wait "${pids[$i]}"; then
    grep -E "error" "$work/${names[$i]}.build.log" | head -20
    kill "${pids[@]}" 2>/dev/null
    exit 1
  fi
done
for i in "${!names[@]}"; do
  v=${names[$i]} tree=$work/${names[$i]}
  # The compiler's report on the kernels under test: the sm90a forward, or the backward's (sm_90a code).
  kernels=fwd_kernel_sm90; [ $dir = bwd ] && kernels=bwd_
  log "built $v${patches[$i]:+ (${patches[$i]##*/})}; $("$root/scripts/ptxas-report.sh" "$work/$v.build.log" $kernels)"
  if [ -f "$tree/build/tests/test_gpu_$dir" ]; then
    timeout 300 "$tree/build/tests/test_gpu_$dir" --gtest_filter="$tests" > "$work/$v.tests.log" 2>&1
    rc=$?
    grep -E "^\[  FAILED" "$work/$v.tests.log" | head -20
    log "$v $dir tests: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+ test' "$work/$v.tests.log" | tr '\n' ' ') (rc $rc)"
  fi
done

bench_flags=(--backend "$backend" --csv --dims "$dims")
[ $dir = fwd ] && bench_flags+=(--fwd-only)
read -ra extra_bench_flags <<< "$bench_args"
bench_flags+=("${extra_bench_flags[@]}")
# Interleaved by seqlen, the variants' order rotated each round: the GPU's clock drifts over a
# whole grid's run (d 64 without a mask moved 4% between two runs of the same kernel), and a
# variant timed after another would carry the drift as a difference.
rm -rf "$csvs" "$out/bench-csv.tar.gz"; mkdir -p "$csvs"
[ -n "$seqlens" ] || seqlens="512,1024,2048,4096,8192,16384"
round_s=0
for r in $(seq 1 "$rounds"); do
  if [ "$deadline" -gt 0 ] && [ $(( $(date +%s) - t0 + round_s )) -gt "$deadline" ]; then
    log "rounds $r-$rounds skipped: round $r would end past the deadline of $deadline s"
    break
  fi
  round_t0=$(date +%s)
  order=("${names[@]:$(( (r - 1) % ${#names[@]} ))}" "${names[@]:0:$(( (r - 1) % ${#names[@]} ))}")
  for s in ${seqlens//,/ }; do
    for v in "${order[@]}"; do
      csv="$csvs/bench-$v-$r.csv"
      timeout 200 "$work/$v/build/tools/flashattn/flashattn" bench "${bench_flags[@]}" --seqlens "$s" > "$work/point.csv" \
        2> "$work/$v-$r.err" || tail -3 "$work/$v-$r.err"
      if [ -f "$csv" ]; then tail -n +2 "$work/point.csv" >> "$csv"; else cp "$work/point.csv" "$csv"; fi
    done
  done
  round_s=$(( $(date +%s) - round_t0 ))
  log "bench round $r (order ${order[*]})"
  # Replaced whole, so that a call stopped during tar keeps the previous rounds' tarball.
  tar czf "$out/bench-csv.tar.gz.tmp" -C "$csvs" . && mv "$out/bench-csv.tar.gz.tmp" "$out/bench-csv.tar.gz"
done

[ "$rounds" -gt 0 ] && python3 - "$csvs" "$rounds" "$dir" "${names[@]}" <<'PY'
import collections, csv, os, sys
csvs, rounds, direction, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for v in names:
    for r in range(1, rounds + 1):
        path = f'{csvs}/bench-{v}-{r}.csv'
        if not os.path.exists(path):  # a round skipped by --deadline
            continue
        for row in csv.DictReader(open(path)):
            runs[(int(row['d']), int(row['causal']), int(row['seqlen']))][v].append(float(row[direction + '_tflops']))
print('| d | seqlen | causal | ' + ' | '.join(f'{v} (runs)' for v in names) + ' | ' +
      ' | '.join(f'{v} / A' for v in names[1:]) + ' |')
print('|---' * (3 + 2 * len(names) - 1) + '|')
for (d, causal, seqlen), x in sorted(runs.items()):
    mean = {v: sum(x[v]) / len(x[v]) for v in names if x[v]}
    cells = [' / '.join(f'{t:.1f}' for t in x[v]) for v in names]
    ratios = [f'{mean[v] / mean["A"]:.3f}' if v in mean and 'A' in mean else 'nan' for v in names[1:]]
    print(f'| {d} | {seqlen} | {causal} | ' + ' | '.join(cells) + ' | ' + ' | '.join(ratios) + ' |')
PY

# The patched variants' libraries, for the interleaved and the sustained timings (A is --lib).
variant_flags=()
for v in "${names[@]:1}"; do variant_flags+=(--variant "$work/$v/build/src/libflashattn.so"); done

if [ "$interleaved" -gt 0 ]; then
  bwd_flag=()
  [ $dir = bwd ] && bwd_flag=(--bwd)
  for n in $(seq 1 "$interleaved"); do
    timeout 300 python3 scripts/bench_interleaved.py --lib "$work/A/build/src/libflashattn.so" "${variant_flags[@]}" \
      "${bwd_flag[@]}" --dims "$dims" --seqlens "$seqlens" --masks "$masks" --rounds "$interleaved_rounds" \
      > "$out/interleaved-$n.txt" 2> "$work/interleaved-$n.err" ||
      tail -3 "$work/interleaved-$n.err"
  done
  log "interleaved with the peers, $interleaved processes (bench_interleaved.py; interleaved-*.txt):"
  python3 - "$out" "$interleaved" "$dir" "${names[@]}" <<'PY'
import collections, sys
out, processes, direction, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
# A row: dir d seqlen causal ours fa2 cudnn x-fa2 x-cudnn %gemm, then TFLOP/s and ratio to A per variant.
points = collections.defaultdict(list)
for n in range(1, processes + 1):
    for line in open(f'{out}/interleaved-{n}.txt'):
        f = line.split()
        if len(f) == 10 + 2 * (len(names) - 1) and f[0] == direction:
            points[(int(f[1]), int(f[3]), int(f[2]))].append((float(f[8]), [float(x) for x in f[11::2]]))
columns = ['d', 'seqlen', 'causal', 'A x cuDNN (processes)', 'A x cuDNN']
columns += [c for v in names[1:] for c in (f'{v} / A (processes)', f'{v} / A')]
print('| ' + ' | '.join(columns) + ' |')
print('|---' * (5 + 2 * (len(names) - 1)) + '|')
for (d, causal, seqlen), runs in sorted(points.items()):
    cells = [' / '.join(f'{x:.3f}' for x, _ in runs), f'{sum(x for x, _ in runs) / len(runs):.3f}']
    for i in range(len(names) - 1):
        ratios = [r[i] for _, r in runs]
        cells += [' / '.join(f'{x:.3f}' for x in ratios), f'{sum(ratios) / len(ratios):.3f}']
    print(f'| {d} | {seqlen} | {causal} | ' + ' | '.join(cells) + ' |')
PY
  grep -h "GEMM" "$out"/interleaved-*.txt
fi

if [ -n "$sustained" ]; then
  read -ra sustained_args <<< "$sustained"
  timeout 500 python3 scripts/bench_sustained.py --lib "$work/A/build/src/libflashattn.so" "${variant_flags[@]}" \
    --dir "$dir" --dims "$dims" "${sustained_args[@]}" > "$out/sustained.txt" 2> "$work/sustained.err" ||
    tail -3 "$work/sustained.err"
  log "sustained beside the peer (bench_sustained.py; v1, v2, ... are ${names[*]:1}):"
  cat "$out/sustained.txt"
fi

# Variant $1's forward kernel at the point $2 (D,SEQLEN[,causal]) once under ncu, given at most $3
# seconds, with ncu's further arguments $4...
ncu_point() {
  local v=$1 d seqlen mask skip=0
  IFS=, read -r d seqlen mask <<< "$2"
  # One forward launch per point with --fwd-only: the non-causal point's, then the causal one's.
  [ "$mask" = causal ] && skip=1
  timeout "$3" ncu --clock-control none --kernel-name regex:fwd_kernel_sm --launch-skip "$skip" --launch-count 1 \
    "${@:4}" "$work/$v/build/tools/flashattn/flashattn" bench --backend "$backend" --fwd-only --dims "$d" \
    --seqlens "$seqlen" --warmup 0 --repeat 1 "${extra_bench_flags[@]}"
}

[ -n "$stalls" ] && [ $dir = bwd ] && log "--stalls: forward only, not run with --bwd"
if [ -n "$stalls" ] && [ $dir = fwd ]; then
  metrics="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,smsp__inst_executed.sum"
  metrics+=",smsp__issue_active.avg.pct_of_peak_sustained_active"
  # ncu expands each pattern to every roll-up of the metrics it matches; the table below keeps the
  # ones that are read.
  metrics+=",regex:^sm__pipe_tensor_op.*cycles_active"
  metrics+=",regex:^smsp__average_warps_issue_stalled_.*_per_issue_active"
  for v in "${names[@]}"; do
    ncu_point "$v" "$stalls" 240 --csv --metrics "$metrics" > "$work/$v.stalls.csv" 2> "$work/$v.stalls.err" ||
      tail -5 "$work/$v.stalls.err"
  done
  log "stalls at (d, keys[, mask]) $stalls (ncu, one launch each):"
  python3 - "$work" "${names[@]}" <<'PY'
import csv, io, sys
work, names = sys.argv[1], sys.argv[2:]
values = {}
for v in names:
    text = open(f'{work}/{v}.stalls.csv').read()
    start = text.find('"ID"')  # ncu's own lines come before the CSV
    for row in csv.DictReader(io.StringIO(text[start:] if start >= 0 else '')):
        values.setdefault(row['Metric Name'], {})[v] = row['Metric Value']
# ncu reports every roll-up of a regex's metrics: keep the stall ratios, the tensor pipes' share of
# the active cycles, and the named metrics; leave out the rows that are zero in every variant.
kept = lambda m: ('__' in m and '.' in m and not m.startswith(('sm__pipe', 'smsp__average')) or
                  m.endswith('_per_issue_active.ratio') or
                  m.startswith('sm__pipe') and m.endswith('.avg.pct_of_peak_sustained_active'))
def number(text):
    try:
        return float(text.replace(',', ''))
    except ValueError:
        return 0.0
nonzero = lambda m: any(number(values[m].get(v, '0')) != 0.0 for v in names)
short = lambda m: m.replace('smsp__average_warps_issue_stalled_', 'stalled ').replace('_per_issue_active.ratio', '')
print('| metric | ' + ' | '.join(names) + ' |')
print('|---' * (len(names) + 1) + '|')
for m in sorted(m for m in values if kept(m) and nonzero(m)):
    print(f'| {short(m)} | ' + ' | '.join(values[m].get(v, '') for v in names) + ' |')
PY
fi

[ -n "$source" ] && [ $dir = bwd ] && log "--source: forward only, not run with --bwd"
if [ -n "$source" ] && [ $dir = fwd ]; then
  for v in "${names[@]}"; do
    rm -f "$work/$v.source.ncu-rep" "$out/source-$v.csv.gz"
    ncu_point "$v" "$source" 300 --set full --import-source no -f -o "$work/$v.source" > "$work/$v.source.log" 2>&1 ||
      tail -5 "$work/$v.source.log"
    if [ -f "$work/$v.source.ncu-rep" ]; then
      ncu -i "$work/$v.source.ncu-rep" --page source --print-source sass --csv 2> /dev/null |
        gzip > "$out/source-$v.csv.gz"
    fi
  done
  log "per-instruction stall samples at (d, keys[, mask]) $source (ncu --set full; source-*.csv.gz):"
  python3 - "$out" "${names[@]}" <<'PY'
import csv, gzip, io, os, sys
out, names = sys.argv[1], sys.argv[2:]
count = lambda text: int(text) if text.isdigit() else 0
totals, tops = {}, {}
for v in names:
    path = f'{out}/source-{v}.csv.gz'
    if not os.path.exists(path):
        continue
    rows = list(csv.reader(io.TextIOWrapper(gzip.open(path), errors='replace')))
    at = next((i for i, r in enumerate(rows) if r and r[0] == 'Address'), None)
    if at is None:
        continue
    header, data = rows[at], [r for r in rows[at + 1:] if len(r) == len(rows[at])]
    column = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith('stall_') and not h.endswith('(Not Issued)')]
    all_samples = column['Warp Stall Sampling (All Samples)']
    totals[v] = {r: sum(count(d[column[r]]) for d in data) for r in reasons}
    totals[v]['all'] = sum(count(d[all_samples]) for d in data)
    first = int(data[0][0], 16) if data else 0
    tops[v] = [(int(d[0], 16) - first, count(d[all_samples]), d[1].strip())
               for d in sorted(data, key=lambda d: -count(d[all_samples]))[:8]]
if totals:
    shown = [v for v in names if v in totals]
    print('| stall reason | ' + ' | '.join(f'{v} (%)' for v in shown) + ' |')
    print('|---' * (len(shown) + 1) + '|')
    for r in sorted({r for v in shown for r in totals[v] if r != 'all'}):
        if any(totals[v].get(r, 0) for v in shown):
            share = lambda v: 100 * totals[v].get(r, 0) / max(totals[v]['all'], 1)
            print(f'| {r[6:]} | ' + ' | '.join(f'{share(v):.1f}' for v in shown) + ' |')
    print('| samples | ' + ' | '.join(str(totals[v]['all']) for v in shown) + ' |')
    for v in shown:
        print(f'{v}: most sampled instructions (offset in the kernel, samples, SASS)')
        for offset, samples, text in tops[v]:
            print(f'  {offset:06x} {samples:6d}  {text[:90]}')
PY
fi

log "device: $device"
