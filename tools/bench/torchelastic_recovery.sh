#!/usr/bin/env bash
# The failure of tools/bench/elastic_kills.py under TorchElastic (issue 15): torchrun runs
# tools/bench/torch_elastic_mlp.py (the job of samples/configs/elastic.ini in PyTorch, a checkpoint
# every --checkpoint-every steps) on 2 workers, and this script SIGKILLs one of them at a random
# step; torchrun then stops the other, starts both anew, and they go on from the newest checkpoint.
#
#   tools/bench/torchelastic_recovery.sh [--runs 2] [--kills 3] [--epochs 4] [--checkpoint-every 100]
#                                        [--monitor-interval S] [--seed 1] [--json FILE]
#
# Per kill: the time from the signal to the first step completed after the restart (wall_time of
# rank 0's first step line after its start line; also to the new rank 0's launch, which is the
# agent's part, and to its start line, once it has imported torch, read the data, met the other
# worker and loaded the checkpoint), and the steps lost (the last step the old workers completed
# minus the step the new ones resumed from). Per run: exit code, test accuracy, seconds. Then the
# medians and maxima. --kills is at most 3 (torchrun --max_restarts=3).
# --monitor-interval passes torchrun's --monitor_interval (how often the agent polls its workers;
# 5 s by default in torch 1.13).
#
# Uses Debian's PyTorch (python3-torch 1.13, installed when /usr/bin/python3 cannot import torch)
# and its torchrun. torch 1.13 spells the options with underscores (--nproc_per_node), not the
# hyphens of torch 2.
set -euo pipefail
cd "$(dirname "$0")/../.."

runs=2 kills=3 epochs=4 every=100 monitor='' seed=1 json=''
while (($#)); do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --kills) kills=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --checkpoint-every) every=$2; shift 2 ;;
    --monitor-interval) monitor=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "torchelastic_recovery.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
((kills >= 1 && kills <= 3)) || { echo "torchelastic_recovery.sh: --kills 1 to 3" >&2; exit 2; }

python=/usr/bin/python3
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "torchelastic_recovery.sh: installing python3-torch" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch >&2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
records=$work/records.jsonl
RANDOM=$seed
steps_per_epoch=$((60000 / (64 * 2)))
total=$((steps_per_epoch * epochs))

# torch 1.13's torchrun under Python 3.11 fails before it starts a worker with the defaults
# --redirects 0 --tee 0: Std.from_str looks "0" up by iterating the IntFlag Std, and Python 3.11
# no longer yields the zero member (nor the composite ALL = 3) when iterating a flag, so it gets
# None and to_map(None, ...) raises AttributeError. A mapping that names only a local rank that
# does not exist (9) parses, and to_map gives every real rank Std.NONE: no redirection, as the
# defaults mean.
no_redirects=(--redirects 9:0 --tee 9:0)

# "starts steps last": start lines in the log, step lines after the last one, the last of them.
progress() {
  awk '/"event": "start"/ {starts++; n = 0; last = 0; next}
       /"step"/ {n++; sub(/.*"step": /, ""); sub(/,.*/, ""); last = $0}
       END {print starts + 0, n + 0, last + 0}' "$1"
}

for ((run = 1; run <= runs; run++)); do
  log=$work/run$run.jsonl out=$work/run$run.out
  : >"$log"
  # Kill steps spread over the run, as elastic_kills.py does: not the first half epoch, not the last
  # epoch.
  kill_steps=()
  for ((k = 0; k < kills; k++)); do
    kill_steps+=($((steps_per_epoch / 2 + (RANDOM * 32768 + RANDOM) % (total - steps_per_epoch * 3 / 2))))
  done
  mapfile -t kill_steps < <(printf '%s\n' "${kill_steps[@]}" | sort -n)
  started=$(date +%s.%N)
  # shellcheck disable=SC2086
  /usr/bin/torchrun --nnodes=1 --nproc_per_node=2 --max_restarts=3 ${monitor:+--monitor_interval $monitor} \
    "${no_redirects[@]}" tools/bench/torch_elastic_mlp.py --epochs "$epochs" \
    --checkpoint-every "$every" --checkpoint-dir "$work/checkpoints$run" --log "$log" >"$out" 2>&1 &
  agent=$!
  done_kills=0
  for kill_step in "${kill_steps[@]}"; do
    # Wait for the step, done by the workers of the previous restart.
    while kill -0 "$agent" 2>/dev/null; do
      read -r n_starts n_steps at_step < <(progress "$log")
      ((n_starts < done_kills + 1 || at_step < kill_step)) || break
      sleep 0.02
    done
    kill -0 "$agent" 2>/dev/null || break
    mapfile -t workers < <(pgrep -P "$agent")
    ((${#workers[@]} == 2)) || { echo "run $run: ${#workers[@]} workers under torchrun" >&2; break; }
    victim=${workers[RANDOM % 2]}
    victim_rank=$(tr '\0' '\n' <"/proc/$victim/environ" | sed -n 's/^RANK=//p' || true)
    read -r n_starts n_steps at_step < <(progress "$log")
    step_at_kill=$at_step
    killed_at=$(date +%s.%N)
    kill -KILL "$victim"
    done_kills=$((done_kills + 1))
    # The restart: a new start line, then a step after it.
    while kill -0 "$agent" 2>/dev/null; do
      read -r n_starts n_steps at_step < <(progress "$log")
      ((n_starts < done_kills + 1 || n_steps < 1)) || break
      sleep 0.02
    done
    "$python" - "$log" "$run" "$done_kills" "$killed_at" "$step_at_kill" "$victim_rank" <<'EOF' | tee -a "$records"
import json, sys
log, run, kill, killed_at, at_step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
victim = int(sys.argv[6]) if sys.argv[6] else None
lines = [json.loads(l) for l in open(log)]
starts = [i for i, r in enumerate(lines) if r.get("event") == "start"]
if len(starts) < kill + 1:
    print(json.dumps({"run": run, "kill": kill, "victim_rank": victim, "step_at_kill": at_step,
                      "recovered": False}))
    sys.exit()
old = [r["step"] for r in lines[starts[kill - 1]:starts[kill]] if "step" in r]
new = next(r for r in lines[starts[kill]:] if "step" in r)
resumed = lines[starts[kill]]["resumed_from"]
print(json.dumps({"run": run, "kill": kill, "victim_rank": victim, "step_at_kill": at_step,
                  "old_last_step": max(old), "resumed_from": resumed,
                  "steps_lost": max(old) - resumed,
                  "kill_to_step_s": round(new["wall_time"] - killed_at, 3),
                  "kill_to_launch_s": round(lines[starts[kill]]["launched"] - killed_at, 3),
                  "kill_to_start_s": round(lines[starts[kill]]["wall_time"] - killed_at, 3),
                  "recovered": True}))
EOF
  done
  rc=0
  wait "$agent" || rc=$?
  seconds=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN {printf "%.0f", b - a}')
  accuracy=$(grep -o '"test_accuracy": [0-9.]*' "$log" | tail -n 1 | cut -d' ' -f2)
  echo "{\"run\": $run, \"exit\": $rc, \"seconds\": $seconds, \"accuracy\": ${accuracy:-null}," \
    "\"kills\": $done_kills}" | tee -a "$records"
  ((rc == 0)) || echo "  torchrun's output: $(tail -n 5 "$out")" >&2
done

[[ -z $json ]] || cat "$records" >>"$json"
"$python" - "$records" "$every" "${monitor:-5 (default)}" <<'EOF'
import json, statistics, sys
records = [json.loads(l) for l in open(sys.argv[1])]
kills = [r for r in records if r.get("recovered")]
runs = [r for r in records if "exit" in r]
if kills:
    t = [k["kill_to_step_s"] for k in kills]
    launch = [k["kill_to_launch_s"] for k in kills]
    s = [k["kill_to_start_s"] for k in kills]
    lost = [k["steps_lost"] for k in kills]
    print(f"torchrun, checkpoint every {sys.argv[2]} steps, monitor interval {sys.argv[3]} s: "
          f"{len(kills)} kills in {len(runs)} runs; kill to first step after the restart: median "
          f"{statistics.median(t):.3f} s, max {max(t):.3f} s (medians: to the new rank 0's launch "
          f"{statistics.median(launch):.3f} s, to its start of training "
          f"{statistics.median(s):.3f} s); steps lost: median {statistics.median(lost)}, "
          f"max {max(lost)}")
accuracies = [r["accuracy"] for r in runs if r["accuracy"] is not None]
print(f"accuracy: {', '.join(f'{a:.2f} %' for a in accuracies) or 'none'}; runs failed: "
      f"{sum(r['exit'] != 0 for r in runs)}; kills not recovered: "
      f"{sum(1 for r in records if r.get('recovered') is False)}")
sys.exit(1 if any(r["exit"] != 0 for r in runs) else 0)
EOF
