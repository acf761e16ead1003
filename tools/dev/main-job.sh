#!/usr/bin/env bash
# Installs what tessera needs (Debian packages), builds the `release` preset and runs the main
# job: the local-transport self-check and the plugin listing.
set -euo pipefail
cd "$(dirname "$0")/../.."

bash tools/dev/install-deps.sh
cmake --preset release
cmake --build --preset release
build/release/bin/tessera plugins
build/release/bin/tessera selfcheck --transport local -n 4
