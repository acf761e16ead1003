#!/usr/bin/env bash
# One case of the install suite (see CMakeLists.txt): install_test.sh CASE. Reads
# INSTALL_TEST_BUILD_DIR, INSTALL_TEST_SOURCE_DIR, INSTALL_WORK, CMAKE_COMMAND, CMAKE_GENERATOR and CXX.
# Every command that could block runs under `timeout`.
set -euo pipefail

case_name=$1
prefix="$INSTALL_WORK/prefix"
samples="$INSTALL_TEST_SOURCE_DIR/samples"
tessera="$prefix/bin/tessera"
scratch="$INSTALL_WORK/$case_name"
rm -rf "$scratch" && mkdir -p "$scratch"
unset LD_LIBRARY_PATH TESSERA_PLUGIN_PATH

fail() { echo "FAIL: $*" >&2; exit 1; }
run() { timeout 120 "$@"; }

# Builds an out-of-tree CMake project against a prefix: build_against SRC BUILD PREFIX [ARGS...]
build_against() {
  local src=$1 build=$2 against=$3
  shift 3
  run "$CMAKE_COMMAND" -S "$src" -B "$build" -G "$CMAKE_GENERATOR" \
    -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_PREFIX_PATH="$against" "$@" >"$build.configure.log" 2>&1 ||
    { cat "$build.configure.log"; fail "configuring $src against $against"; }
  run "$CMAKE_COMMAND" --build "$build" >"$build.build.log" 2>&1 ||
    { cat "$build.build.log"; fail "building $src"; }
}

# A plugin's only dynamic symbol is its descriptor.
exports_only_the_descriptor() {
  local symbols
  symbols=$(nm -D --defined-only "$1" | awk '{print $3}')
  [[ "$symbols" == "tessera_plugin_descriptor_v3" ]] ||
    fail "$1 exports more than its descriptor: $(tr '\n' ' ' <<<"$symbols")"
}

# The value of a numeric field of a --summary JSON file.
json_number() { sed -n "s/.*\"$2\": \([-0-9.eE+]*\).*/\1/p" "$1" | head -n1; }
# awk exits 0 when the condition on a and b holds.
holds() { awk -v a="$1" -v b="$2" "BEGIN { exit !($3) }"; }

local_sgd_plugins="$INSTALL_WORK/local_sgd_built/build/plugins"

case "$case_name" in
installs_a_complete_prefix)
  rm -rf "$prefix"
  # What an earlier run in the source tree leaves beside a sample config (samples/configs/ddp.ini
  # names checkpoint_dir = checkpoints): it must not travel into the package. The folder is
  # git-ignored; it is removed again whatever happens.
  stray="$samples/configs/checkpoints/step-000000000001"
  made_stray=0
  if [[ ! -e "$samples/configs/checkpoints" ]]; then
    mkdir -p "$stray" && echo '{}' >"$stray/manifest" && made_stray=1
    trap 'rm -rf "$samples/configs/checkpoints"' EXIT
  fi
  run "$CMAKE_COMMAND" --install "$INSTALL_TEST_BUILD_DIR" --prefix "$prefix" >"$scratch/install.log"
  [[ $made_stray -eq 0 ]] || [[ ! -e "$prefix/share/doc/tessera/samples/configs/checkpoints" ]] ||
    fail "the checkpoints of a run beside the sample configs were installed"
  # Each sample is one folder of sources: no folder below it, no file of another kind.
  extra=$(cd "$prefix/share/doc/tessera/samples" && find . -mindepth 2 \( -type d -o ! \( \
    -name '*.ini' -o -name '*.cpp' -o -name '*.hpp' -o -name CMakeLists.txt -o -name README.md \
    \) \) -print)
  [[ -z $extra ]] || fail "the installed samples hold more than their sources: $extra"
  for f in bin/tessera lib/libtessera.so include/tessera/base/version.hpp include/tessera/registry/registry.hpp \
    include/tessera/strategy_kit/gradient_sync.hpp include/tessera/sdk/plugin.hpp \
    lib/cmake/tessera/tesseraConfig.cmake lib/cmake/tessera/tesseraConfigVersion.cmake \
    lib/cmake/tessera/tesseraTargets.cmake lib/cmake/tessera/TesseraPlugin.cmake \
    lib/pkgconfig/tessera.pc lib/pkgconfig/tessera-plugin.pc share/tessera/template/CMakeLists.txt \
    share/tessera/strategy_template/CMakeLists.txt share/tessera/model_template/CMakeLists.txt \
    include/tessera/layers/linear.hpp lib/libtessera_layer_kit.a \
    lib/cmake/tessera/tesseraLayersTargets.cmake include/tessera/config/config.hpp \
    lib/tessera/plugins/libtessera_strategy_ddp.so lib/tessera/plugins/libtessera_transport_shm.so \
    share/doc/tessera/README.md share/doc/tessera/docs/plugin-guide.md share/doc/tessera/docs/config.md \
    share/doc/tessera/samples/configs/ddp.ini share/doc/tessera/samples/configs/zero2.ini \
    share/doc/tessera/samples/custom_strategy/CMakeLists.txt; do
    [[ -e "$prefix/$f" ]] || fail "$f is missing from the installed prefix"
  done
  # Every relative link of the installed documentation, and of the template's README, reaches an
  # installed file: a reader of the prefix has no source tree to fall back on.
  for md in "$prefix"/share/doc/tessera/*.md "$prefix"/share/doc/tessera/docs/*.md \
    "$prefix"/share/doc/tessera/samples/*/README.md "$prefix"/share/tessera/*template/README.md; do
    links=$(grep -oE '\]\([^)]+\)' "$md" | sed -E 's/^\]\(//; s/\)$//; s/#.*//' || true)
    while read -r link; do
      [[ -z $link || $link == http://* || $link == https://* || $link == mailto:* ]] && continue
      [[ -e "$(dirname "$md")/$link" ]] || fail "$md links to $link, which is not installed"
    done <<<"$links"
  done
  grep -q "SameMajorVersion\|PACKAGE_VERSION_COMPATIBLE" "$prefix/lib/cmake/tessera/tesseraConfigVersion.cmake" ||
    fail "tesseraConfigVersion.cmake has no compatibility rule"
  grep -q "tessera::core" "$prefix/lib/cmake/tessera/tesseraTargets.cmake" || fail "tessera::core not exported"
  grep -q "tessera::sdk" "$prefix/lib/cmake/tessera/tesseraTargets.cmake" || fail "tessera::sdk not exported"
  # Nothing installed may point back into the build tree.
  # (Output captured first: with pipefail, `producer | grep -q` fails whenever grep -q exits
  # before the producer has written everything and the producer dies of SIGPIPE.)
  run_paths=$(readelf -d "$prefix/bin/tessera" "$prefix"/lib/libtessera.so "$prefix"/lib/tessera/plugins/*.so |
    grep -E 'R(UN)?PATH' || true)
  if grep -q "$INSTALL_TEST_BUILD_DIR" <<<"$run_paths"; then
    fail "an installed binary has the build tree in its run path"
  fi
  ;;

moved_prefix_finds_its_library_and_plugins)
  # A copy at another path: the CLI must find libtessera through $ORIGIN, and libtessera its
  # plugins beside itself (PluginRegistry::default_search_path), without any variable.
  cp -a "$prefix" "$scratch/moved"
  out=$(run env -u TESSERA_PLUGIN_PATH "$scratch/moved/bin/tessera" plugins --json)
  grep -q "\"file\": \"$scratch/moved/bin/../lib/tessera/plugins/libtessera_strategy_ddp.so\"" <<<"$out" ||
    grep -q "\"file\": \"$scratch/moved/lib/tessera/plugins/libtessera_strategy_ddp.so\"" <<<"$out" ||
    fail "the moved prefix's CLI did not list its own ddp plugin: $out"
  if grep -q "\"file\": \"$prefix/" <<<"$out"; then fail "the moved CLI loaded plugins of the original prefix"; fi
  libraries=$(ldd "$scratch/moved/bin/tessera")
  grep -q "libtessera.so.0 => $scratch/moved/bin/../lib/" <<<"$libraries" ||
    fail "the moved CLI does not load its own libtessera: $(grep tessera <<<"$libraries")"
  ;;

plugins_export_only_their_descriptor)
  for so in "$prefix"/lib/tessera/plugins/*.so; do exports_only_the_descriptor "$so"; done
  ;;

pkg_config_builds_a_plugin_that_exports_only_its_descriptor)
  # The route without CMake: the installed sources of the template and of the local_sgd sample,
  # and `pkg-config tessera-plugin` alone. (local_sgd uses std::to_chars, whose static data has
  # default visibility: -fvisibility=hidden alone leaves it exported, the version script not.)
  export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
  read -r -a flags <<<"$(pkg-config --cflags --libs tessera-plugin)"
  mkdir -p "$scratch/plugins"
  template="$prefix/share/tessera/template"
  sample="$prefix/share/doc/tessera/samples/custom_strategy"
  run "$CXX" -O2 "$template/plugin.cpp" "$template/sign_sgd.cpp" \
    -o "$scratch/plugins/libsign_sgd.so" "${flags[@]}" >"$scratch/build.log" 2>&1 ||
    { cat "$scratch/build.log"; fail "building the template with pkg-config tessera-plugin"; }
  run "$CXX" -O2 "$sample/plugin.cpp" "$sample/local_sgd_strategy.cpp" \
    -o "$scratch/plugins/libacme_local_sgd.so" "${flags[@]}" >"$scratch/build.log" 2>&1 ||
    { cat "$scratch/build.log"; fail "building local_sgd with pkg-config tessera-plugin"; }
  for so in "$scratch"/plugins/*.so; do exports_only_the_descriptor "$so"; done
  listed=$(run "$tessera" plugins --path "$scratch/plugins")
  grep -q "^optimizer.sign_sgd 1.0.0" <<<"$listed" || fail "the pkg-config sign_sgd is not listed: $listed"
  grep -q "^strategy.local_sgd 1.0.0" <<<"$listed" || fail "the pkg-config local_sgd is not listed: $listed"
  ;;

pkg_config_builds_a_host)
  cat >"$scratch/host.cpp" <<'CPP'
#include <cstdio>
#include <cstring>
#include "tessera/registry/registry.hpp"
#include "tessera/base/version.hpp"
int main() {
  tessera::PluginRegistry registry;
  registry.scan(tessera::PluginRegistry::default_search_path());
  std::printf("%s %zu\n", tessera::version(), registry.plugins().size());
  return std::strcmp(tessera::version(), TESSERA_VERSION_STRING) == 0 ? 0 : 1;
}
CPP
  export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
  version=$(pkg-config --modversion tessera)
  read -r -a flags <<<"$(pkg-config --cflags --libs tessera)"
  run "$CXX" -std=c++20 "$scratch/host.cpp" -o "$scratch/host" "${flags[@]}" \
    -Wl,-rpath,"$(pkg-config --variable=libdir tessera)"
  out=$(run "$scratch/host")
  [[ "$out" == "$version "* ]] || fail "pkg-config says $version, the host printed '$out'"
  [[ "${out#* }" -gt 5 ]] || fail "the host found too few plugins beside libtessera: $out"
  ;;

template_builds_out_of_tree_and_trains)
  cp -r "$prefix/share/tessera/template" "$scratch/src"
  build_against "$scratch/src" "$scratch/build" "$prefix"
  # No build type given: an optimised build, and the configure step says so.
  grep -q "no CMAKE_BUILD_TYPE given, building Release" "$scratch/build.configure.log" ||
    fail "configuring the template without a build type says nothing: $(cat "$scratch/build.configure.log")"
  grep -qx "CMAKE_BUILD_TYPE:STRING=Release" "$scratch/build/CMakeCache.txt" ||
    fail "the template's build type is $(grep CMAKE_BUILD_TYPE: "$scratch/build/CMakeCache.txt"), not Release"
  # (build.ninja for Ninja, CMakeFiles/*/flags.make for Makefiles)
  grep -rqs -- "-O3" "$scratch/build/build.ninja" "$scratch/build/CMakeFiles" ||
    fail "the template compiles without -O3"
  exports_only_the_descriptor "$scratch/build/plugins/libsign_sgd.so"
  listed=$(run "$tessera" plugins --kind optimizer --path "$scratch/build/plugins")
  grep -q "^optimizer.sign_sgd 1.0.0 (aliases: signsgd)" <<<"$listed" || fail "sign_sgd not listed: $listed"
  # signSGD on a small synthetic problem: well above the 25 % of chance after 60 steps.
  run "$tessera" train --plugins.path="$scratch/build/plugins" --train.optimizer=signsgd \
    --train.lr=0.01 --train.dataset=synthetic --dataset.synthetic.features=32 \
    --dataset.synthetic.classes=4 --model.mlp.layers=32,32,4 --train.max_steps=60 \
    --train.progress=off --summary "$scratch/summary.json" >"$scratch/train.log" 2>&1 ||
    { cat "$scratch/train.log"; fail "training with sign_sgd"; }
  accuracy=$(json_number "$scratch/summary.json" test_accuracy)
  holds "$accuracy" 0 "a > 0.6" || fail "sign_sgd reached only $accuracy"
  ;;

model_template_builds_out_of_tree_and_trains)
  cp -r "$prefix/share/tessera/model_template" "$scratch/src"
  build_against "$scratch/src" "$scratch/build" "$prefix"
  plugins="$scratch/build/plugins"
  exports_only_the_descriptor "$plugins/libattention_lm.so"
  listed=$(run "$tessera" plugins --kind model --path "$plugins")
  grep -q "^model.attention_lm 1.0.0" <<<"$listed" || fail "attention_lm not listed: $listed"
  # Byte-level text: the installed plugin guide as a small corpus, windows of 33 tokens.
  run "$tessera" data prepare "$prefix/share/doc/tessera/docs/plugin-guide.md" \
    --output "$scratch/guide.tokens" >"$scratch/prepare.log" 2>&1 ||
    { cat "$scratch/prepare.log"; fail "preparing the corpus"; }
  # Two blocks, each one Layer: zero3 gathers a block as one unit, so zero3 and ddp over 2 ranks
  # must give the same model (the same losses bit for bit, as on the built-in models).
  common=(--plugins.path="$plugins" --runtime.transport=local --runtime.world_size=2
    --train.model=attention_lm --train.dataset=text --dataset.text.path="$scratch/guide.tokens"
    --dataset.text.context=32 --model.attention_lm.context=32 --train.optimizer=adam
    --train.lr=0.003 --train.batch_size=8 --train.max_steps=40 --train.epochs=1
    --train.eval_samples=64 --train.progress=off)
  for strategy in ddp zero3; do
    run "$tessera" train "${common[@]}" --train.strategy=$strategy \
      --summary "$scratch/$strategy.json" >"$scratch/$strategy.log" 2>&1 ||
      { cat "$scratch/$strategy.log"; fail "training attention_lm with $strategy"; }
  done
  ddp=$(json_number "$scratch/ddp.json" test_loss)
  zero3=$(json_number "$scratch/zero3.json" test_loss)
  [[ -n $ddp && $ddp == "$zero3" ]] || fail "attention_lm: zero3 gives test loss $zero3, ddp $ddp"
  # It learns: below the 5.545 nats per byte of a uniform guess over 256 bytes.
  holds "$ddp" 0 "a < 4.5" || fail "attention_lm reached only a test loss of $ddp nats per byte"
  ;;

strategy_template_builds_out_of_tree_and_trains)
  cp -r "$prefix/share/tessera/strategy_template" "$scratch/src"
  build_against "$scratch/src" "$scratch/build" "$prefix"
  plugins="$scratch/build/plugins"
  exports_only_the_descriptor "$plugins/libgradient_average.so"
  listed=$(run "$tessera" plugins --kind strategy --path "$plugins")
  grep -q "^strategy.gradient_average 1.0.0" <<<"$listed" || fail "gradient_average not listed: $listed"
  # Averaging the whole gradient once per step is what ddp does in buckets: the same model up to
  # rounding, over 2 ranks with an uneven last batch, 2 micro-batches and clipping; and it learns.
  common=(--plugins.path="$plugins" --runtime.transport=local --runtime.world_size=2
    --train.dataset=synthetic --dataset.synthetic.samples=1000 --dataset.synthetic.features=32
    --dataset.synthetic.classes=4 --model.mlp.layers=32,32,4 --train.optimizer=adam
    --train.lr=0.01 --train.batch_size=48 --train.micro_batches=2 --train.max_grad_norm=0.5
    --train.epochs=2 --train.progress=off)
  for strategy in ddp gradient_average; do
    run "$tessera" train "${common[@]}" --train.strategy=$strategy \
      --summary "$scratch/$strategy.json" >"$scratch/$strategy.log" 2>&1 ||
      { cat "$scratch/$strategy.log"; fail "training with $strategy"; }
  done
  ddp=$(json_number "$scratch/ddp.json" test_loss)
  ours=$(json_number "$scratch/gradient_average.json" test_loss)
  holds "$ddp" "$ours" "(a - b) ^ 2 < 1e-10" || fail "gradient_average gives test loss $ours, ddp $ddp"
  accuracy=$(json_number "$scratch/gradient_average.json" test_accuracy)
  holds "$accuracy" 0 "a > 0.6" || fail "gradient_average reached only $accuracy"
  # A model with a tied parameter (the gpt head uses wte): one parameter, its two gradient
  # contributions summed, as ddp does; random token windows of the synthetic data set.
  gpt=(--plugins.path="$plugins" --runtime.transport=local --runtime.world_size=2
    --train.model=gpt --model.gpt.layers=1 --model.gpt.heads=2 --model.gpt.width=16
    --model.gpt.context=8 --model.gpt.vocab=37 --train.dataset=synthetic
    --dataset.synthetic.context=8 --dataset.synthetic.classes=37 --dataset.synthetic.samples=200
    --dataset.synthetic.test_samples=40 --train.optimizer=adam --train.lr=0.01
    --train.batch_size=16 --train.epochs=1 --train.progress=off)
  for strategy in ddp gradient_average; do
    run "$tessera" train "${gpt[@]}" --train.strategy=$strategy \
      --summary "$scratch/gpt-$strategy.json" >"$scratch/gpt-$strategy.log" 2>&1 ||
      { cat "$scratch/gpt-$strategy.log"; fail "training the tied gpt with $strategy"; }
  done
  ddp=$(json_number "$scratch/gpt-ddp.json" test_loss)
  ours=$(json_number "$scratch/gpt-gradient_average.json" test_loss)
  holds "$ddp" "$ours" "(a - b) ^ 2 < 1e-10" ||
    fail "gradient_average gives the tied gpt test loss $ours, ddp $ddp"
  ;;

local_sgd_builds_out_of_tree)
  rm -rf "$INSTALL_WORK/local_sgd_built" && mkdir -p "$INSTALL_WORK/local_sgd_built"
  build_against "$samples/custom_strategy" "$INSTALL_WORK/local_sgd_built/build" "$prefix"
  [[ -f "$local_sgd_plugins/libacme_local_sgd.so" ]] || fail "no plugin in $local_sgd_plugins"
  ;;

local_sgd_is_listed_once_on_the_plugin_path)
  without=$(run "$tessera" plugins --kind strategy)
  if grep -q local_sgd <<<"$without"; then fail "local_sgd listed before its folder is on the path"; fi
  for listing in "$(TESSERA_PLUGIN_PATH="$local_sgd_plugins" run "$tessera" plugins --kind strategy)" \
    "$(run "$tessera" plugins --kind strategy --path "$local_sgd_plugins")"; do
    [[ $(grep -c "^strategy.local_sgd 1.0.0" <<<"$listing") -eq 1 ]] ||
      fail "strategy.local_sgd not listed exactly once: $listing"
    grep -q "sync_every  int, default '8'" <<<"$listing" || fail "sync_every not listed: $listing"
  done
  for config in "$samples/custom_strategy/local_sgd.ini" "$samples/configs/local_sgd.ini"; do
    run "$tessera" config check "$config" --plugins.path="$local_sgd_plugins" >/dev/null ||
      fail "$config does not load"
  done
  ;;

local_sgd_trains_fashion_mnist_from_its_config)
  # The sample's own config (2 processes over shm), a few steps.
  (cd "$scratch" && run "$tessera" train --config "$samples/custom_strategy/local_sgd.ini" \
    --plugins.path="$local_sgd_plugins" --train.max_steps=40 --train.warmup_steps=10 \
    --train.progress=off \
    --summary "$scratch/summary.json") >"$scratch/train.log" 2>&1 ||
    { cat "$scratch/train.log"; fail "tessera train with local_sgd.ini"; }
  accuracy=$(json_number "$scratch/summary.json" test_accuracy)
  holds "$accuracy" 0 "a > 0.5" || fail "local_sgd reached only $accuracy after 40 steps"
  ;;

local_sgd_averaging_every_step_matches_ddp)
  # With plain SGD, averaging parameters after every step is averaging gradients: the same
  # model as ddp up to rounding. Never averaging gives replicas that drift apart.
  common=(--plugins.path="$local_sgd_plugins" --runtime.transport=local --runtime.world_size=2
    --train.dataset=synthetic --dataset.synthetic.features=32 --dataset.synthetic.classes=4
    --model.mlp.layers=32,32,4 --train.optimizer=sgd --train.lr=0.05 --train.max_steps=40
    --train.progress=off)
  for run_name in ddp:--train.strategy=ddp every:--strategy.local_sgd.sync_every=1 \
    never:--strategy.local_sgd.sync_every=100000; do
    strategy=(--train.strategy=local_sgd)
    [[ ${run_name%%:*} == ddp ]] && strategy=()
    run "$tessera" train "${common[@]}" "${strategy[@]}" "${run_name#*:}" \
      --summary "$scratch/${run_name%%:*}.json" >"$scratch/${run_name%%:*}.log" 2>&1 ||
      { cat "$scratch/${run_name%%:*}.log"; fail "training $run_name"; }
  done
  ddp=$(json_number "$scratch/ddp.json" test_loss)
  every=$(json_number "$scratch/every.json" test_loss)
  never=$(json_number "$scratch/never.json" test_loss)
  holds "$ddp" "$every" "(a - b) ^ 2 < 1e-12" || fail "sync_every=1 gives test loss $every, ddp $ddp"
  holds "$ddp" "$never" "(a - b) ^ 2 > 1e-8" || fail "without averaging the loss $never equals ddp's $ddp"
  ;;

embed_host_on_two_processes_matches_one)
  build_against "$samples/embed_host" "$scratch/build" "$prefix"
  host="$scratch/build/embed_host"
  run "$host" --max-steps 40 --batch-size 64 >"$scratch/one.log" 2>&1 ||
    { cat "$scratch/one.log"; fail "embed_host alone"; }
  run "$tessera" launch -n 2 -- "$host" --max-steps 40 --batch-size 32 >"$scratch/two.log" 2>&1 ||
    { cat "$scratch/two.log"; fail "embed_host under tessera launch -n 2"; }
  one=$(grep -o "ranks 1 .*test accuracy [0-9.]*" "$scratch/one.log") || fail "no result alone: $(cat "$scratch/one.log")"
  two=$(grep -o "ranks 2 .*test accuracy [0-9.]*" "$scratch/two.log") || fail "no result launched: $(cat "$scratch/two.log")"
  acc_one=${one##* }
  acc_two=${two##* }
  holds "$acc_one" 0 "a > 0.5" || fail "embed_host reached only $acc_one"
  holds "$acc_one" "$acc_two" "(a - b) ^ 2 < 4e-6" || fail "2 processes reached $acc_two, one $acc_one"
  ;;

plugin_of_another_abi_major_is_refused_by_name)
  # What a user gets from a plugin built for the previous plugin ABI: the template built against
  # a copy of the prefix whose plugin_abi.h says the major before this one, so that it exports
  # that major's symbol as the previous SDK did.
  header="$prefix/include/tessera/plugin/plugin_abi.h"
  major=$(sed -n 's/^#define TESSERA_PLUGIN_ABI_MAJOR \([0-9]*\)$/\1/p' "$header")
  [[ -n $major && $major -gt 1 ]] || fail "no ABI major in $header"
  old=$((major - 1))
  cp -a "$prefix" "$scratch/old_abi"
  sed -i "s/^#define TESSERA_PLUGIN_ABI_MAJOR $major\$/#define TESSERA_PLUGIN_ABI_MAJOR $old/" \
    "$scratch/old_abi/include/tessera/plugin/plugin_abi.h"
  grep -q "^#define TESSERA_PLUGIN_ABI_MAJOR $old$" "$scratch/old_abi/include/tessera/plugin/plugin_abi.h" ||
    fail "could not patch the ABI major"
  build_against "$prefix/share/tessera/template" "$scratch/build" "$scratch/old_abi"
  plugin="$scratch/build/plugins/libsign_sgd.so"
  [[ $(nm -D --defined-only "$plugin" | awk '{print $3}') == "tessera_plugin_descriptor_v$old" ]] ||
    fail "the ABI $old build does not export tessera_plugin_descriptor_v$old"
  run "$tessera" plugins --kind optimizer --path "$scratch/build/plugins" >"$scratch/out" 2>"$scratch/err" ||
    fail "tessera plugins failed on a refused plugin"
  grep -qF "tessera: warning: $plugin: exports tessera_plugin_descriptor_v$old: it was built for plugin ABI $old, this libtessera speaks ABI $major; rebuild the plugin against this tessera's SDK (docs/plugin-guide.md, \"Porting a plugin from ABI $old\")" "$scratch/err" ||
    fail "no refusal naming the file, its ABI and what to do: $(cat "$scratch/err")"
  if grep -q sign_sgd "$scratch/out"; then fail "the refused plugin was listed"; fi
  if run "$tessera" train --plugins.path="$scratch/build/plugins" --train.optimizer=sign_sgd \
    --train.dataset=synthetic --train.max_steps=1 --train.progress=off >"$scratch/train.log" 2>&1; then
    fail "training with the refused plugin succeeded"
  fi
  grep -q "no optimizer plugin named 'sign_sgd'" "$scratch/train.log" || fail "$(cat "$scratch/train.log")"
  ;;

same_plugin_twice_on_the_path_is_a_note)
  # The build tree's plugins and the installed ones hold the same names: the copy in the folder
  # TESSERA_PLUGIN_PATH names wins over the one installed beside libtessera (explicit wins), the
  # other is a note, and nothing fails.
  build_plugins="$INSTALL_TEST_BUILD_DIR/lib/tessera/plugins"
  installed_plugins="$prefix/bin/../lib/tessera/plugins"
  TESSERA_PLUGIN_PATH="$build_plugins" run "$tessera" plugins --kind strategy >"$scratch/out" 2>"$scratch/err" ||
    fail "tessera plugins failed with duplicates on the path: $(cat "$scratch/err")"
  [[ $(grep -c "^strategy.ddp " "$scratch/out") -eq 1 ]] || fail "ddp not listed once: $(cat "$scratch/out")"
  grep -q "file: $build_plugins/libtessera_strategy_ddp.so" "$scratch/out" ||
    fail "the ddp of TESSERA_PLUGIN_PATH did not win: $(cat "$scratch/out")"
  grep -qF "tessera: note: $installed_plugins/libtessera_strategy_ddp.so: strategy name 'ddp' is already taken by $build_plugins/" \
    "$scratch/err" || fail "no note about the installed ddp: $(cat "$scratch/err")"
  if grep -q "warning" "$scratch/err"; then fail "duplicates reported as warnings: $(cat "$scratch/err")"; fi
  TESSERA_PLUGIN_PATH="$build_plugins" run "$tessera" train --train.dataset=synthetic \
    --train.max_steps=2 --train.progress=off >"$scratch/train.log" 2>&1 ||
    fail "training with duplicates on the path: $(cat "$scratch/train.log")"
  ;;

named_plugin_folder_wins_and_must_exist)
  # A folder the user names (--path, plugins.path) wins over the installed copy, and one that
  # does not exist is an error (exit 2) naming where it was named.
  build_plugins="$INSTALL_TEST_BUILD_DIR/lib/tessera/plugins"
  run "$tessera" plugins --kind strategy --path "$build_plugins" >"$scratch/out" 2>"$scratch/err" ||
    fail "tessera plugins --path: $(cat "$scratch/err")"
  grep -q "file: $build_plugins/libtessera_strategy_ddp.so" "$scratch/out" ||
    fail "the ddp of --path did not win: $(cat "$scratch/out")"
  grep -qF "is replaced by $build_plugins/libtessera_strategy_ddp.so from a folder named at flag --path" \
    "$scratch/err" || fail "no note about the replaced installed ddp: $(cat "$scratch/err")"
  cat >"$scratch/job.ini" <<'INI'
[plugins]
path = no_such_folder
INI
  status=0
  run "$tessera" config check "$scratch/job.ini" >"$scratch/check.out" 2>&1 || status=$?
  [[ $status -eq 2 ]] || fail "a missing plugins.path folder exits $status, not 2: $(cat "$scratch/check.out")"
  grep -qF "$scratch/job.ini:2 (plugins.path): plugin folder '$scratch/no_such_folder' does not exist" \
    "$scratch/check.out" || fail "the error does not name the folder and job.ini:2: $(cat "$scratch/check.out")"
  status=0
  TESSERA_PLUGIN_PATH="$scratch/no_such_folder" run "$tessera" plugins >"$scratch/env.out" 2>&1 || status=$?
  [[ $status -eq 2 ]] || fail "a missing TESSERA_PLUGIN_PATH folder exits $status, not 2"
  grep -qF "environment TESSERA_PLUGIN_PATH: plugin folder '$scratch/no_such_folder' does not exist" \
    "$scratch/env.out" || fail "the error does not name TESSERA_PLUGIN_PATH: $(cat "$scratch/env.out")"
  ;;

*)
  fail "unknown case $case_name"
  ;;
esac
echo "ok - $case_name"
