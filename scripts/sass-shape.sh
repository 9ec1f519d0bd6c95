#!/usr/bin/env bash
# Reads a kernel's SASS on this machine, without a GPU: ours from a build folder's object files,
# or FlashAttention-2's from PyTorch's wheel (its kernels are in libtorch_cuda.so); prints the
# kernel's instruction mix and its shape (runs of HMMA, HGMMA, LDSM, LDS, STS, LDG, LDGSTS, REDG,
# MUFU, BAR, DEPBAR and BRA, the rest as "alu"), to compare the order of two kernels' steps
# (docs/performance.md, "FlashAttention-2's backward step beside ours"). The whole function is
# printed: a loop's path is read from the shape by hand. Tools come from PyPI (cuobjdump and
# nvdisasm; torch for FA2, 540 MB, its sm_90 cubins kept) into .deps/sass, once. Usage:
#   scripts/sass-shape.sh ours BUILD_DIR TU KERNEL_SUBSTRING   (TU: e.g. bwd_sm80_hdim64_bf16)
#   scripts/sass-shape.sh fa2 MANGLED_SUBSTRING
# The first kernel whose (mangled) name contains the substring is taken: give enough of it to name
# one (performance.md lists the ones compared). Writes the SASS to .deps/sass/last.sass.
set -euo pipefail
cd "$(dirname "$0")/.."
deps=$PWD/.deps/sass
mkdir -p "$deps"
if [ ! -x "$deps/nvidia/cu13/bin/nvdisasm" ]; then  # cuobjdump calls nvdisasm for the SASS
  python3 -m pip download -q --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm -d "$deps/wheels"
  for wheel in "$deps"/wheels/nvidia_cuda_cuobjdump-*.whl "$deps"/wheels/nvidia_cuda_nvdisasm-*.whl; do
    python3 -m zipfile -e "$wheel" "$deps"
  done
  chmod +x "$deps"/nvidia/cu13/bin/*
fi
export PATH=$deps/nvidia/cu13/bin:$PATH
sass=$deps/last.sass
# One function's SASS, one instruction per line, without addresses' encodings.
clean() { grep -v -E '^\s*/\* [0-9a-f]+ \*/\s*$' | sed -E 's@ +/\* 0x[0-9a-f]+ \*/@@' | awk '{$1=$1};1' | grep -v '^$'; }
case "${1:-}" in
  ours)
    [ $# -eq 4 ] || { echo "usage: $0 ours BUILD_DIR TU KERNEL_SUBSTRING" >&2; exit 2; }
    object=$2/src/CMakeFiles/flashattn_objects.dir/__/generated/$3.cu.o
    [ -f "$object" ] || { echo "sass-shape: no $object (build the TU first)" >&2; exit 1; }
    cuobjdump -sass -arch sm_90a "$object" | clean |
      awk -v k="$4" '/^Function :/ { on = index($0, k) > 0 && !done; if (on) done = 1 } on' > "$sass"
    ;;
  fa2)
    [ $# -eq 2 ] || { echo "usage: $0 fa2 MANGLED_SUBSTRING" >&2; exit 2; }
    lib=$deps/torch/lib/libtorch_cuda.so
    if [ ! -f "$lib" ]; then
      python3 -m pip download -q --no-deps torch -d "$deps/wheels"
      python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('torch/lib/libtorch_cuda.so', sys.argv[2])" \
        "$(ls "$deps"/wheels/torch-*.whl | head -1)" "$deps"
    fi
    cubins=$deps/cubins
    if [ ! -d "$cubins" ]; then  # every arch's cubins (5 GB), then only the sm_90 ones kept
      mkdir -p "$cubins" && (cd "$cubins" && cuobjdump -xelf all "$lib" > /dev/null)
      find "$cubins" -name '*.cubin' ! -name '*.sm_90.cubin' -delete
    fi
    name="" cubin=""
    for c in $(grep -l -a -F "$2" "$cubins"/*.cubin); do
      name=$(cuobjdump -symbols "$c" 2>/dev/null | grep -o '_Z[^ ]*flash_[^ ]*' | grep -F -m1 "$2" || true)
      [ -n "$name" ] && { cubin=$c; break; }
    done
    [ -n "$name" ] || { echo "sass-shape: no sm_90 FlashAttention kernel whose name contains $2" >&2; exit 1; }
    { echo "Function : $name"; cuobjdump -sass -fun "$name" "$cubin" | clean | grep -v '^Function'; } > "$sass"
    ;;
  *) echo "usage: $0 ours BUILD_DIR TU KERNEL_SUBSTRING | fa2 MANGLED_SUBSTRING" >&2; exit 2 ;;
esac
[ -s "$sass" ] || { echo "sass-shape: kernel not found" >&2; exit 1; }
head -1 "$sass" | sed 's/^Function : //' | c++filt | cut -c1-300
op() { awk '/^\/\*/ { o = $2; if (o ~ /^@/) o = $3; split(o, a, "."); print a[1] }'; }
echo "instructions: $(op < "$sass" | wc -l)"
echo "mix: $(op < "$sass" | sort | uniq -c | sort -rn | awk '{ printf "%s %s, ", $2, $1 }')"
echo "shape:"
op < "$sass" | awk '{ print ($1 ~ /^(HMMA|HGMMA|LDSM|MUFU|STS|LDS|LDGSTS|REDG|BAR|LDG|BRA|DEPBAR)$/) ? $1 : "alu" }' |
  uniq -c | awk '{ printf "%s%s ", $2, ($1 > 1 ? "x" $1 : "") } END { print "" }' | fold -s -w 100
