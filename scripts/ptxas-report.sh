#!/usr/bin/env bash
# What ptxas -v said of a build's kernels (the build log of gpu-check.sh or gpu-ab.sh): how many
# sm_90a instantiations of the kernels whose names contain KERNEL spill, and how many of ptxas's
# notes say it serialised wgmma (a wait it inserted where it could not match the code's waits to
# the products; C7514 / C7515 / C7517 / C7518 among them; measured 0.57-0.89x when it happened).
# Usage: scripts/ptxas-report.sh BUILD_LOG KERNEL
log=$1 kernel=$2
spills=$(awk -v k="$kernel" '/Compiling entry function/ { f = (index($0, k) > 0 && $0 ~ /sm_90a/) }
              f && /spill stores/ { n++; if ($5 != 0 || $9 != 0) bad++ } END { print bad + 0 " of " n + 0 }' "$log")
serialized=$(grep -c "wgmma.mma_async instructions are serialized\|warpgroup.wait is injected" "$log")
echo "$kernel* instantiations with spills (sm_90a): $spills; ptxas notes of serialised wgmma: $serialized"
