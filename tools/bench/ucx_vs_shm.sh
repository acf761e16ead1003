#!/usr/bin/env bash
# tessera's ucx transport over UCX shared memory against its shm transport, side by side:
# each round runs `tessera bench collectives` for shm, then ucx with UCX_TLS=sm,self, then ucx
# with UCX_TLS=posix,sysv,cma,self, so every round sees the same machine state. Prints each
# round's algbw and the ucx/shm ratios, then the median ratio per configuration and size.
#
#   tools/bench/ucx_vs_shm.sh [--rounds 3] [-n 2] [--ops all_reduce] [--sizes 4K,1M,64M]
#                             [--reps 15] [--build build/release] [--set section.key=value ...]
#
# --set passes an override to the ucx runs (e.g. --set transport.ucx.map_peers=false).
# Needs a built tessera (cmake --preset release && cmake --build --preset release).
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=3 n=2 ops=all_reduce sizes=4K,1M,64M reps=15 build=build/release
extra=()
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --set) extra+=("--$2"); shift 2 ;;
    *) echo "ucx_vs_shm.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

tessera="$build/bin/tessera"
[ -x "$tessera" ] || { echo "ucx_vs_shm.sh: $tessera not found; build first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bench() {  # bench OUTFILE TRANSPORT [ARGS...]
  local out=$1 transport=$2
  shift 2
  # UCX prints its own warnings on stdout; keep only the JSON rows.
  "$tessera" bench collectives --transport "$transport" -n "$n" --ops "$ops" --sizes "$sizes" \
    --reps "$reps" --json "$@" | grep '^{' >"$out"
}

echo "# $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); $n ranks, f32 sum, $reps repetitions, $rounds rounds"
for ((round = 1; round <= rounds; ++round)); do
  bench "$work/shm.$round" shm
  UCX_TLS=sm,self bench "$work/sm.$round" ucx "${extra[@]}"
  UCX_TLS=posix,sysv,cma,self bench "$work/posix.$round" ucx "${extra[@]}"
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def load(name, r):
    return {(j["op"], j["bytes"]): j for j in map(json.loads, open(f"{work}/{name}.{r}"))}
runs = {name: [load(name, r) for r in range(1, rounds + 1)] for name in ("shm", "sm", "posix")}
print("| round | op | bytes | shm GB/s | ucx sm,self GB/s | ratio | ucx posix,sysv,cma,self GB/s | ratio |")
print("|---:|---|---:|---:|---:|---:|---:|---:|")
ratios = {}
for r in range(rounds):
    for key, s in runs["shm"][r].items():
        row = [f"{r + 1}", key[0], str(key[1]), f"{s['algbw_gbps']:.3f}"]
        for name in ("sm", "posix"):
            u = runs[name][r].get(key)
            ratio = u["algbw_gbps"] / s["algbw_gbps"] if u and s["algbw_gbps"] else float("nan")
            ratios.setdefault((name,) + key, []).append(ratio)
            ok = "" if u and u["ok"] and s["ok"] else " WRONG"
            row += [f"{u['algbw_gbps']:.3f}{ok}" if u else "-", f"{ratio:.2f}x"]
        print("| " + " | ".join(row) + " |")
print()
for (name, op, size), values in sorted(ratios.items()):
    print(f"median ucx {name}/shm, {op} {size} bytes: {statistics.median(values):.2f}x")
PY
