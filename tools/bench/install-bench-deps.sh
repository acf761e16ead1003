#!/usr/bin/env bash
# Installs, from Debian 12 packages only, what tools/bench/gpt_speed.py compares tessera with:
# PyTorch (python3-torch), the OpenMP build of OpenBLAS that both sides load through
# LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp (Debian's torch otherwise runs on the
# pthread or reference BLAS), and the C tool chain with OpenMP that llm.c's train_gpt2.c needs.
# Idempotent: packages already present are skipped, so a second run costs seconds. Runs as root
# (or through sudo). Not part of CI: only the speed comparisons need these.
set -euo pipefail

packages=(
  python3 python3-numpy python3-torch
  libopenblas0-openmp
  build-essential libgomp1
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "install-bench-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-bench-deps: everything is installed"
fi

# libopenblas0-openmp installs its libraries beside the pthread build without taking over the
# alternatives; the comparisons select it per process through this folder.
openmp_blas=/usr/lib/x86_64-linux-gnu/openblas-openmp
if [[ ! -e "$openmp_blas/libopenblas.so.0" ]]; then
  echo "install-bench-deps: $openmp_blas/libopenblas.so.0 is missing after the install;" \
    "check 'dpkg -L libopenblas0-openmp'" >&2
  exit 1
fi
