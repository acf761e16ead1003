#!/usr/bin/env bash
# Installs what tessera needs (Debian packages), builds the `release` preset and runs the main
# job: the MLP trained on the real Fashion-MNIST data set by 2 ddp workers over shared memory,
# printing the test accuracy.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash tools/dev/install-deps.sh
cmake --preset release
cmake --build --preset release

out=build/release/main-job
rm -rf "$out"
mkdir -p "$out"
build/release/bin/tessera train --config samples/configs/ddp.ini \
  --train.checkpoint_dir="$out/checkpoints" --train.metrics_file="$out/metrics.jsonl" \
  --summary "$out/summary.json"
# The summary's figures, read with sed and awk (both in every Debian): nothing beyond
# install-deps.sh may be needed to run this script.
field() { sed -n "s/.*\"$1\": \([-0-9.eE+]*\).*/\1/p" "$out/summary.json" | head -n1; }
accuracy=$(field test_accuracy)
samples_per_s=$(field samples_per_s)
[[ -n $accuracy && -n $samples_per_s ]] || { echo "main-job.sh: $out/summary.json has no test_accuracy or samples_per_s" >&2; exit 1; }
awk -v a="$accuracy" -v s="$samples_per_s" 'BEGIN { printf "test accuracy: %.2f %%  (%.0f samples/s)\n", 100 * a, s }'
