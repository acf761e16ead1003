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
python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); print("test accuracy: %.2f %%  (%.0f samples/s)" % (100 * s["test_accuracy"], s["samples_per_s"]))' "$out/summary.json"
