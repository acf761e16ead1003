#!/usr/bin/env bash
# The checks that need a GPU, run on a GPU machine from a bundle (tools/dev/device-bundle.sh):
# the nccl transport's tests and the conformance suite over nccl, the CUDA compute tests, and
# `tessera bench collectives --transport nccl` beside PyTorch's NCCL on the same GPU
# (torch_nccl_collectives.py). Logs go to OUT_DIR.
#
# With FASHION_MNIST_DIR set (the folder of the four .gz files), also trains the main job's
# model (samples/configs/ddp.ini, one rank, global batch 128) on the host and on the GPU
# ([runtime] device = cuda over nccl), and the same job in PyTorch on that GPU
# (torch_fashion_mnist.py), and keeps the results. TRAIN_DEVICES ("cpu cuda") says which runs
# of tessera, in order, and TRAIN_STRATEGIES ("ddp") with which strategies, each strategy on every
# device in turn; each ddp run on cuda is followed by one of PyTorch. BENCH_ROUNDS (2) sets how
# many rounds of the two collective benchmarks run, 0 for none.
#
# With LAYERS_ONLY=1, checks the reference layers' CUDA kernels alone, in a few minutes (what a
# GPU session of 15 minutes runs; docs/benchmarks.md, "The layers' CUDA kernels: the prepared
# check"): the CUDA compute tests first (tessera_unit_cuda_compute), the transformer kernels'
# tests again under compute-sanitizer's memcheck, racecheck and initcheck where the GPU machine
# has compute-sanitizer, then tessera_bench_cuda_layers: each kernel on the host and on the GPU
# at 4 x 256 tokens, and on the GPU alone at 8 x 1024. Without it the bench runs after the tests.
#
# usage: tools/bench/gpu_check.sh BUNDLE_DIR OUT_DIR
set -uo pipefail
bundle=${1:?usage: gpu_check.sh BUNDLE_DIR OUT_DIR}
out=${2:?usage: gpu_check.sh BUNDLE_DIR OUT_DIR}
repo=$(cd "$(dirname "$0")/../.." && pwd)
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
sizes=4KiB,64KiB,1MiB,16MiB,64MiB,256MiB

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  bash "$bundle/run.sh" tessera --version
  bash "$bundle/run.sh" tessera plugins 2>&1 | grep -A1 "transport.nccl"
} 2>&1 | tee "$out/machine.txt"

status=0
# Runs a test program of the bundle, keeps its log, prints its verdicts; a failure marks status.
run_tests() {
  local name=$1
  shift
  bash "$bundle/run.sh" "$@" 2>&1 | tee "$out/$name.txt" |
    grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran|ERROR SUMMARY" || status=1
  grep -q "FAILED" "$out/$name.txt" && status=1
  return 0
}
# The layers' kernel timings, host against GPU at a shape the host does in seconds, then the GPU
# alone at GPT-2's training shape.
layer_bench() {
  [ -x "$bundle/bin/tessera_bench_cuda_layers" ] || return 0
  bash "$bundle/run.sh" tessera_bench_cuda_layers --batch 4 --time 256 --threads "$(nproc)" \
    2>&1 | tee "$out/bench_layers_4x256.txt" || status=1
  bash "$bundle/run.sh" tessera_bench_cuda_layers --batch 8 --time 1024 --gpu-only \
    2>&1 | tee "$out/bench_layers_8x1024.txt" || status=1
}
if [ "${LAYERS_ONLY:-0}" = 1 ]; then
  run_tests tessera_unit_cuda_compute tessera_unit_cuda_compute
  # On the GPU machine a skip means the GPU was not seen, and nothing was checked.
  if grep -q "SKIPPED \] CudaTransformerLayers\." "$out/tessera_unit_cuda_compute.txt"; then
    echo "the CUDA tests skipped: this process sees no GPU, so nothing was checked"
    status=1
  fi
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null |
    head -n 1)
  if [ -n "$sanitizer" ]; then
    # The small shapes only: the sanitizer runs kernels 10-100 times slower.
    filter='CudaTransformerLayers.*:-*HoldsNoTimeByTimeMatrix'
    for tool in memcheck racecheck initcheck; do
      run_tests "sanitizer_$tool" "$sanitizer" --tool "$tool" --error-exitcode 1 \
        "$bundle/tests/tessera_unit_cuda_compute" --gtest_filter="$filter"
      grep -q "ERROR SUMMARY: 0 errors" "$out/sanitizer_$tool.txt" || status=1
    done
  else
    echo "compute-sanitizer: not on this machine, not run" | tee "$out/sanitizer.txt"
  fi
  layer_bench
  exit $status
fi
bash "$bundle/run.sh" tessera_conformance --gtest_filter='*nccl*:*Nccl*' 2>&1 |
  tee "$out/conformance_nccl.txt" | grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" || status=1
grep -q "FAILED" "$out/conformance_nccl.txt" && status=1
for test in tessera_unit_cuda_compute tessera_unit_cuda_strategies; do
  [ -x "$bundle/tests/$test" ] || continue
  run_tests "$test" "$test"
done
layer_bench
if [ -n "${FASHION_MNIST_DIR:-}" ]; then
  run=0
  for strategy in ${TRAIN_STRATEGIES:-ddp}; do
  for device in ${TRAIN_DEVICES:-cpu cuda}; do
    run=$((run + 1))
    transport=local
    [ "$device" = cuda ] && transport=nccl
    name="train_${run}_${strategy}_$device"
    (cd "$repo" && bash "$bundle/run.sh" tessera train --config samples/configs/ddp.ini \
      --train.strategy=$strategy \
      --runtime.transport=$transport --runtime.world_size=1 --runtime.device=$device \
      --train.batch_size=128 --dataset.fashion-mnist.path="$FASHION_MNIST_DIR" \
      --train.checkpoint_dir= --train.checkpoint_every=0 --train.metrics_file= \
      --train.progress=off --summary "$out/$name.json") > "$out/$name.txt" 2>&1 || status=1
    echo "$name:"
    tail -n 3 "$out/$name.txt"
    # The same job in PyTorch after each GPU run of ddp, on the same GPU.
    if [ "$device" = cuda ] && [ "$strategy" = ddp ]; then
      PYTHONUNBUFFERED=1 python3 "$here/torch_fashion_mnist.py" --data "$FASHION_MNIST_DIR" \
        >> "$out/train_torch.jsonl" 2>&1 || status=1
      tail -n 1 "$out/train_torch.jsonl"
    fi
  done
  done
fi
rounds=${BENCH_ROUNDS:-2}
for ((round = 1; round <= rounds; ++round)); do
  bash "$bundle/run.sh" tessera bench collectives --transport nccl --sizes "$sizes" --json \
    > "$out/bench_tessera_$round.jsonl" 2>&1 || status=1
  PYTHONUNBUFFERED=1 python3 "$here/torch_nccl_collectives.py" --sizes "$sizes" \
    > "$out/bench_torch_$round.jsonl" 2>&1 || status=1
done
[ "$rounds" -gt 0 ] && tail -n 30 "$out"/bench_*.jsonl
exit $status
