#!/usr/bin/env bash
# Side-by-side: the same collectives, sizes and timing method through OpenMPI and through
# tessera, in one run, with tessera/OpenMPI ratios per row.
#
#   tools/bench/compare_mpi.sh [--transport shm] [-n 2] [--sizes 4K,64K,1M,16M,64M] [--reps 15]
#                              [--mca "btl self,vader"] [--build build/release]
#   over TCP: UCX_TLS=tcp compare_mpi.sh --transport ucx --mca "pml ob1 btl self,tcp"
#
# Installs Debian's openmpi-bin and libopenmpi-dev when mpirun is missing. Needs a built tessera
# (cmake --preset release && cmake --build --preset release).
set -euo pipefail
cd "$(dirname "$0")/../.."

transport=shm n=2 sizes=4K,64K,1M,16M,64M reps=15 build=build/release mca=""
while (($#)); do
  case "$1" in
    --transport) transport=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
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

mpirun --allow-run-as-root --oversubscribe -n "$n" "${mca_args[@]}" "$work/mpi_collectives" \
  --sizes "$bytes_list" --reps "$reps" >"$work/mpi.jsonl"
"$build/bin/tessera" bench collectives --transport "$transport" -n "$n" --sizes "$bytes_list" \
  --reps "$reps" --json >"$work/tessera.jsonl"

python3 - "$work/mpi.jsonl" "$work/tessera.jsonl" <<'PY'
import json, sys
def rows(path):
    out = {}
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            out[(r["op"], r["bytes"])] = r
    return out
mpi, tes = rows(sys.argv[1]), rows(sys.argv[2])
print(f"| op | bytes | OpenMPI algbw GB/s | tessera algbw GB/s | ratio | OpenMPI median µs | tessera median µs | check |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for key in sorted(tes, key=lambda k: (["all_reduce","reduce_scatter","all_gather","broadcast"].index(k[0]), k[1])):
    t = tes[key]; m = mpi.get(key)
    if m is None:
        continue
    ratio = t["algbw_gbps"] / m["algbw_gbps"] if m["algbw_gbps"] else float("nan")
    ok = "ok" if t["ok"] and m["ok"] else "WRONG"
    print(f"| {key[0]} | {key[1]} | {m['algbw_gbps']:.3f} | {t['algbw_gbps']:.3f} | {ratio:.2f}x | "
          f"{m['time_us_median']:.2f} | {t['time_us_median']:.2f} | {ok} |")
PY
