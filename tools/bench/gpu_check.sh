#!/usr/bin/env bash
# The checks that need a GPU, run on a GPU machine from a bundle (tools/dev/device-bundle.sh):
# the nccl transport's tests and the conformance suite over nccl, the CUDA compute tests, and
# `tessera bench collectives --transport nccl` beside PyTorch's NCCL on the same GPU
# (torch_nccl_collectives.py). Logs go to OUT_DIR.
#
# usage: tools/bench/gpu_check.sh BUNDLE_DIR OUT_DIR
set -uo pipefail
bundle=${1:?usage: gpu_check.sh BUNDLE_DIR OUT_DIR}
out=${2:?usage: gpu_check.sh BUNDLE_DIR OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
sizes=4KiB,64KiB,1MiB,16MiB,64MiB,256MiB

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  bash "$bundle/run.sh" tessera --version
  bash "$bundle/run.sh" tessera plugins 2>&1 | grep -A1 "transport.nccl"
} 2>&1 | tee "$out/machine.txt"

status=0
bash "$bundle/run.sh" tessera_conformance --gtest_filter='*nccl*:*Nccl*' 2>&1 |
  tee "$out/conformance_nccl.txt" | grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" || status=1
grep -q "FAILED" "$out/conformance_nccl.txt" && status=1
if [ -x "$bundle/tests/tessera_unit_cuda_compute" ]; then
  bash "$bundle/run.sh" tessera_unit_cuda_compute 2>&1 | tee "$out/cuda_compute.txt" |
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" || status=1
  grep -q "FAILED" "$out/cuda_compute.txt" && status=1
fi
for round in 1 2; do
  bash "$bundle/run.sh" tessera bench collectives --transport nccl --sizes "$sizes" --json \
    > "$out/bench_tessera_$round.jsonl" 2>&1 || status=1
  PYTHONUNBUFFERED=1 python3 "$here/torch_nccl_collectives.py" --sizes "$sizes" \
    > "$out/bench_torch_$round.jsonl" 2>&1 || status=1
done
tail -n 30 "$out"/bench_*.jsonl
exit $status
