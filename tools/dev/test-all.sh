#!/usr/bin/env bash
# Installs what tessera needs (Debian packages), builds the `ci` preset and runs every test.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash tools/dev/install-deps.sh
cmake --preset ci
cmake --build --preset ci
ctest --preset ci -j "$(nproc)"
