#!/usr/bin/env bash
# Installs everything tessera needs to build and test, from Debian 12 packages only.
# Idempotent: packages already present are skipped, so a second run costs seconds.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libboost-dev libboost-program-options-dev libboost-filesystem-dev
  libtbb-dev libopenblas-dev zlib1g-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist
  linux-doc-6.1
  libucx-dev ucx-utils iproute2
  etcd-server
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "tessera: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  # The etcd store's tests start their own etcd on free ports; the package's own service
  # (started by its init script or systemd unit where nothing forbids it, and enabled for the
  # next boot) would only hold port 2379 and a data folder. Stop and disable what this run
  # installed; an etcd that was there before is the machine owner's and stays as it is.
  if [[ " ${missing[*]} " == *" etcd-server "* ]]; then
    if [[ -d /run/systemd/system ]]; then
      $SUDO systemctl stop etcd.service >/dev/null 2>&1 || true
    else
      $SUDO /etc/init.d/etcd stop >/dev/null 2>&1 || true
    fi
    if command -v systemctl >/dev/null 2>&1; then
      $SUDO systemctl disable etcd.service >/dev/null 2>&1 || true
    fi
    $SUDO update-rc.d etcd disable >/dev/null 2>&1 || true
  fi
fi

# Every program the README commands (main-job.sh, test-all.sh) and the test suite run. Each comes
# from a package above or from Debian's required set (what debootstrap --variant=minbase
# installs); tools/dev/fresh-debian-check.sh holds this list true on such a system. A script or
# test that starts calling another program adds it here and its package above.
# Libraries found by header or CMake package rather than by a program: each must be there too.
headers=(/usr/include/nlohmann/json.hpp /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake)
for header in "${headers[@]}"; do
  if [[ ! -f $header ]]; then
    echo "tessera: install-deps.sh: $header is missing after installing (package nlohmann-json3-dev)" >&2
    exit 1
  fi
done

programs=(
  bash sh env timeout sed awk grep tr head cat cp rm mkdir mktemp nproc id dpkg-query apt-get
  cmake ctest ninja c++ g++ pkg-config git readelf nm ldd ip etcd
)
absent=()
for program in "${programs[@]}"; do
  command -v "$program" >/dev/null 2>&1 || absent+=("$program")
done
if ((${#absent[@]})); then
  echo "tessera: install-deps.sh: still missing after installing: ${absent[*]}" \
    "(add the package that provides it to tools/dev/install-deps.sh)" >&2
  exit 1
fi
