#!/usr/bin/env bash
# Throughput of zero3 against ddp in one run: MLP 784-1024-1024-10, batch 256 per rank,
# SGD with momentum, float32, synthetic data, 2 worker processes over shm. zero3 runs with
# prefetch on (1) and off (0). Rounds alternate the strategies so that load on the machine
# hits them alike; the table shows each round and the best.
#   tools/bench/zero3_throughput.sh [TESSERA_BINARY] [STEPS] [ROUNDS]
set -euo pipefail
tessera=${1:-build/release/bin/tessera}
steps=${2:-120}
rounds=${3:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat > "$work/bench.ini" <<INI
[runtime]
transport = shm
world_size = 2

[train]
model = mlp
optimizer = sgd
dataset = synthetic
epochs = 100
max_steps = $steps
batch_size = 256
lr = 0.01
seed = 1
progress = off

[model.mlp]
layers = 784,1024,1024,10
activation = relu
threads = 1

[optimizer.sgd]
momentum = 0.9

[dataset.synthetic]
samples = 65536
test_samples = 256
features = 784
classes = 10
INI

run() {  # name, flags...
  local name=$1
  shift
  "$tessera" train --config "$work/bench.ini" --summary "$work/$name.json" "$@" > /dev/null
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["samples_per_s"])' \
    "$work/$name.json"
}

declare -A best
names=(ddp zero3 zero3_no_prefetch)
printf '%-6s %14s %14s %20s\n' round ddp zero3 zero3_no_prefetch
for round in $(seq 1 "$rounds"); do
  ddp=$(run ddp --train.strategy=ddp)
  z3=$(run zero3 --train.strategy=zero3 --strategy.zero3.prefetch=1)
  z3n=$(run zero3_no_prefetch --train.strategy=zero3 --strategy.zero3.prefetch=0)
  printf '%-6s %14.0f %14.0f %20.0f\n' "$round" "$ddp" "$z3" "$z3n"
  for pair in "ddp $ddp" "zero3 $z3" "zero3_no_prefetch $z3n"; do
    set -- $pair
    if [[ -z ${best[$1]:-} ]] || python3 -c "import sys; sys.exit(not float('$2') > float('${best[$1]}'))"; then
      best[$1]=$2
    fi
  done
done
printf '%-6s %14.0f %14.0f %20.0f\n' best "${best[ddp]}" "${best[zero3]}" "${best[zero3_no_prefetch]}"
python3 -c "print('zero3 / ddp = %.3f, zero3 without prefetch / ddp = %.3f' % (float('${best[zero3]}') / float('${best[ddp]}'), float('${best[zero3_no_prefetch]}') / float('${best[ddp]}')))"
