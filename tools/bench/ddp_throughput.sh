#!/usr/bin/env bash
# Data-parallel training throughput, tessera against PyTorch, side by side in one run:
# MLP 784-1024-1024-10, batch 256 per rank, SGD with momentum, float32, synthetic data.
#
#   tools/bench/ddp_throughput.sh [--steps 100] [--warmup 10] [--repeats 3] [--build build/release]
#                                 [--nice N] [--set section.key=value ...]
#
# --set passes an override to every tessera run (e.g. --set transport.shm.chunk_size=1MiB).
# --nice N runs every row at niceness N (negative needs root): on a machine shared with other
# jobs the rows then compete less with them, and all four rows alike.
#
# Rows, each run --repeats times in turn (so every row sees the same machine load):
#   torch ddp     PyTorch DistributedDataParallel over gloo, 2 processes, 1 thread each
#                 (torch.set_num_threads(1) and OPENBLAS_NUM_THREADS=1: set_num_threads does
#                 not reach the OpenBLAS that Debian's PyTorch calls for its GEMMs)
#   same, ...     the same with OpenBLAS's default pool (2 threads per rank on 2 cores)
#   torch 1p      one PyTorch process, 2 threads (OpenMP and OpenBLAS)
#   tessera ddp   tessera train, ddp over shm, 2 processes, [model.mlp] threads = 1
#   tessera 1p    tessera train, one rank (transport local), threads = 2
# samples/s counts --steps steps after --warmup untimed ones (global samples: ranks x 256 per
# step); the table shows the median and every repeat, then the two ratios issue 4 asks for
# (against the better of the two PyTorch DDP rows).
# Installs Debian's python3-torch (PyTorch 1.13) when /usr/bin/python3 cannot import torch.
# Needs a built tessera (cmake --preset release && cmake --build --preset release).
set -euo pipefail
cd "$(dirname "$0")/../.."

steps=100 warmup=10 repeats=3 build=build/release nice=0
extra=()
while (($#)); do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --nice) nice=$2; shift 2 ;;
    --set) extra+=("--$2"); shift 2 ;;
    *) echo "ddp_throughput.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

python=/usr/bin/python3
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "ddp_throughput.sh: installing python3-torch" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch >&2
fi
tessera=$build/bin/tessera
[[ -x $tessera ]] || { echo "ddp_throughput.sh: no $tessera (build the release preset)" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results.txt

# samples/s of tessera steps warmup+1 .. warmup+steps, from rank 0's per-step metrics lines.
tessera_rate() {
  "$python" - "$1" "$warmup" "$steps" <<'EOF'
import json, sys
path, warmup, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(line) for line in open(path) if '"loss"' in line]
if len(rows) < warmup + steps:
    sys.exit(f"{path}: {len(rows)} steps, expected {warmup + steps}")
timed = rows[warmup:warmup + steps]
start = rows[warmup - 1]["time_s"] if warmup > 0 else 0.0
print(sum(r["samples"] for r in timed) / (timed[-1]["time_s"] - start))
EOF
}

run_tessera() {  # label, ranks, transport, threads
  local metrics=$work/$1-$rep.jsonl
  nice -n "$nice" "$tessera" train --config tools/bench/ddp_throughput.ini -n "$2" --runtime.transport="$3" \
    --model.mlp.threads="$4" --train.max_steps=$((warmup + steps)) \
    --train.eval_every=1000000 --train.metrics_file="$metrics" "${extra[@]}" >/dev/null
  echo "$1 $(tessera_rate "$metrics")" >>"$results"
}

run_torch() {  # label, world, threads, OpenBLAS threads per process (empty: OpenBLAS's default)
  local json
  json=$(OPENBLAS_NUM_THREADS=$4 nice -n "$nice" "$python" tools/bench/torch_ddp_mlp.py --world "$2" --threads "$3" --steps "$steps" \
    --warmup "$warmup")
  echo "$1 $("$python" -c 'import json,sys; print(json.loads(sys.argv[1])["samples_per_s"])' "$json")" \
    >>"$results"
}

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}; niceness $nice"
for ((rep = 1; rep <= repeats; ++rep)); do
  run_torch torch_ddp 2 1 1
  run_torch torch_ddp_blas2 2 1 ""
  run_torch torch_1p 1 2 2
  run_tessera tessera_ddp 2 shm 1
  run_tessera tessera_1p 1 local 2
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg); $steps timed steps after $warmup, $repeats repeats"

"$python" - "$results" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, rate = line.split()
    rows.setdefault(label, []).append(float(rate))
names = {
    "torch_ddp": "PyTorch DDP gloo, 2 ranks x 1 thread",
    "torch_ddp_blas2": "  same, OpenBLAS's own 2-thread pool",
    "torch_1p": "PyTorch 1 process, 2 threads",
    "tessera_ddp": "tessera ddp shm, 2 ranks x 1 thread",
    "tessera_1p": "tessera 1 rank, 2 threads",
}
median = {k: statistics.median(v) for k, v in rows.items()}
print(f"\n| {'run':<38} | {'samples/s (median)':>18} | each repeat")
print(f"|{'-' * 40}|{'-' * 20}|-------------")
for key, name in names.items():
    each = " ".join(f"{r:.0f}" for r in rows[key])
    print(f"| {name:<38} | {median[key]:>18.0f} | {each}")
print()
# The rows of one repeat ran back to back: their ratio sees the least drift in machine load.
# PyTorch's DDP figure is the better of its two rows (per repeat).
rows["torch_best"] = [max(x, y) for x, y in zip(rows["torch_ddp"], rows["torch_ddp_blas2"])]
median["torch_best"] = statistics.median(rows["torch_best"])
for a, b, what, target in (("tessera_ddp", "torch_best", "tessera ddp / PyTorch DDP", 1.3),
                           ("tessera_ddp", "tessera_1p", "tessera ddp / tessera 1 rank", 0.9)):
    each = [x / y for x, y in zip(rows[a], rows[b])]
    print(f"{what:<29} = {median[a] / median[b]:.2f} of medians, "
          f"{statistics.median(each):.2f} median per repeat "
          f"({' '.join(f'{r:.2f}' for r in each)}); target >= {target}")
EOF
