#!/usr/bin/env bash
# A variant's source tree for the device scripts (gpu-ab.sh, gpu-waits.sh): the working tree this
# script belongs to, without its builds, .git and .deps, copied into TREE, then PATCH applied to it
# when one is given. Fails, naming the patch, when it does not apply. Usage:
#   scripts/variant-tree.sh TREE [PATCH]
set -uo pipefail
tree=$(realpath -m "$1") patch=${2:+$(realpath "$2")}
cd "$(dirname "$0")/.."
mkdir -p "$tree"
tar cf - --exclude='./build*' --exclude=./.git --exclude=./.deps . | tar xf - -C "$tree"
if [ -n "$patch" ]; then
  (cd "$tree" && patch -p1 -s < "$patch") || { echo "variant-tree: $patch does not apply" >&2; exit 1; }
fi
