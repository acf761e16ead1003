#!/usr/bin/env bash
# Side-by-side: the same collectives, sizes and timing method through OpenMPI and through
# tessera, in one run, with tessera/OpenMPI ratios per row.
#
#   tools/bench/compare_mpi.sh [--transport shm] [-n 2] [--sizes 4K,64K,1M,16M,64M] [--reps 15]
#                              [--rounds 3] [--mca "btl self,vader"] [--build build/release]
#   over TCP: UCX_TLS=tcp compare_mpi.sh --transport ucx --mca "pml ob1 btl self,tcp"
#
# The two run in turn --rounds times (OpenMPI, tessera, OpenMPI, ...) and each row reports the
# median over rounds of each side's median, and the median of the per-round ratios (each round's
# two runs are seconds apart): on a shared VM the cost of a cross-core cache miss can change by
# 2-3x from one minute to the next, so one run of each side can compare two different machines.
#
# Installs Debian's openmpi-bin and libopenmpi-dev when mpirun is missing. Needs a built tessera
# (cmake --preset release && cmake --build --preset release).
set -euo pipefail
cd "$(dirname "$0")/../.."

transport=shm n=2 sizes=4K,64K,1M,16M,64M reps=15 rounds=3 build=build/release mca=""
while (($#)); do
  case "$1" in
    --transport) transport=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --mca) mca=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    *) echo "compare_mpi.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
  echo "compare_mpi.sh: installing openmpi-bin and libopenmpi-dev" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev >&2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -o "$work/mpi_collectives" tools/bench/mpi_collectives.c

# MPI wants byte counts; expand K/M/G here.
bytes_list=$(python3 -c '
import sys
units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
out = []
for s in sys.argv[1].split(","):
    s = s.strip().upper().removesuffix("IB").removesuffix("B")
    out.append(str(int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)))
print(",".join(out))' "$sizes")

mca_args=()
if [ -n "$mca" ]; then
  # Pairs "NAME VALUE [NAME VALUE ...]": OpenMPI's TCP path needs both "pml ob1 btl self,tcp",
  # or it picks pml ucx, which goes over shared memory whatever the btl.
  read -r -a parts <<<"$mca"
  for ((i = 0; i + 1 < ${#parts[@]}; i += 2)); do
    mca_args+=(--mca "${parts[i]}" "${parts[i + 1]}")
  done
fi

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem:/{print $2}') GiB"
echo "# OpenMPI $(mpirun --version 2>/dev/null | head -1 | awk '{print $NF}') vs tessera $transport, $n ranks, f32 sum, $reps repetitions"

for ((round = 1; round <= rounds; ++round)); do
  mpirun --allow-run-as-root --oversubscribe -n "$n" "${mca_args[@]}" "$work/mpi_collectives" \
    --sizes "$bytes_list" --reps "$reps" >"$work/mpi.$round.jsonl"
  "$build/bin/tessera" bench collectives --transport "$transport" -n "$n" --sizes "$bytes_list" \
    --reps "$reps" --json >"$work/tessera.$round.jsonl"
done
echo "# $rounds rounds, each row the median of the rounds' medians; load average $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$work" "$rounds" <<'PY'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def rows(prefix):
    out = {}
    for r in range(1, rounds + 1):
        for line in open(f"{work}/{prefix}.{r}.jsonl"):
            line = line.strip()
            if line.startswith("{"):
                row = json.loads(line)
                out.setdefault((row["op"], row["bytes"]), []).append(row)
    return out
def median_of(runs, field):
    return statistics.median(r[field] for r in runs)
mpi, tes = rows("mpi"), rows("tessera")
print("| op | bytes | OpenMPI algbw GB/s | tessera algbw GB/s | ratio | per-round ratio | OpenMPI median µs | tessera median µs | check |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
order = ["all_reduce", "reduce_scatter", "all_gather", "broadcast"]
for key in sorted(tes, key=lambda k: (order.index(k[0]), k[1])):
    t, m = tes[key], mpi.get(key)
    if m is None:
        continue
    m_bw, t_bw = median_of(m, "algbw_gbps"), median_of(t, "algbw_gbps")
    ratio = t_bw / m_bw if m_bw else float("nan")
    paired = [a["algbw_gbps"] / b["algbw_gbps"] for a, b in zip(t, m) if b["algbw_gbps"]]
    per_round = statistics.median(paired) if paired else float("nan")
    ok = "ok" if all(r["ok"] for r in t + m) else "WRONG"
    print(f"| {key[0]} | {key[1]} | {m_bw:.3f} | {t_bw:.3f} | {ratio:.2f}x | {per_round:.2f}x | "
          f"{median_of(m, 'time_us_median'):.2f} | {median_of(t, 'time_us_median'):.2f} | {ok} |")
PY
