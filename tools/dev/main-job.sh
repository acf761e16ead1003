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
python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(f"test accuracy: {100*s[\"test_accuracy\"]:.2f} %  ({s[\"samples_per_s\"]:.0f} samples/s)")' "$out/summary.json"
