#!/usr/bin/env bash
# Runs the README's two commands (tools/dev/main-job.sh, tools/dev/test-all.sh) as root on a
# fresh minimal Debian 12: a `debootstrap --variant=minbase` root plus git and ca-certificates,
# the committed HEAD of a checkout cloned into it, each command run in a chroot. Proves that
# install-deps.sh installs every program the commands need. Needs root and Debian's archive.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: tools/dev/fresh-debian-check.sh [options] [CHECKOUT]
  CHECKOUT          git checkout whose committed HEAD is tested (default: this script's)
  --only COMMAND    run only main-job or test-all (default: both, main-job first)
  --work DIR        keep the Debian root in DIR/root and the logs in DIR/logs
                    (default: a new folder under /var/tmp, removed at the end)
  --keep            keep the work folder at the end (always kept when --work is given)
  --reuse           DIR/root already holds a root from an earlier run: skip debootstrap. What
                    that run installed stays, so install-deps.sh is then not tested from scratch
  --mirror URL      Debian mirror for debootstrap (default: the first Debian URI in
                    /etc/apt/sources.list*, else http://deb.debian.org/debian)
  -h, --help        this help
Prints PASS or FAIL for each command with the tail of its log; exits 0 when all passed.
EOF
}

die() {
  echo "fresh-debian-check.sh: $*" >&2
  exit 2
}

checkout=""
only=""
work=""
keep=0
reuse=0
mirror=""
while (($#)); do
  case "$1" in
  --only)
    [[ $# -ge 2 ]] || die "--only needs main-job or test-all"
    only=$2
    shift
    ;;
  --work)
    [[ $# -ge 2 ]] || die "--work needs a folder"
    work=$2
    shift
    ;;
  --mirror)
    [[ $# -ge 2 ]] || die "--mirror needs a URL"
    mirror=$2
    shift
    ;;
  --keep) keep=1 ;;
  --reuse) reuse=1 ;;
  -h | --help)
    usage
    exit 0
    ;;
  -*) die "unknown option $1 (see --help)" ;;
  *)
    [[ -z $checkout ]] || die "one CHECKOUT only (got '$checkout' and '$1')"
    checkout=$1
    ;;
  esac
  shift
done

case "$only" in
"") commands=(main-job test-all) ;;
main-job | test-all) commands=("$only") ;;
*) die "--only $only: expected main-job or test-all" ;;
esac
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot and mount)"
[[ -n $checkout ]] || checkout=$(cd "$(dirname "$0")/../.." && pwd)
sha=$(git -C "$checkout" rev-parse --verify HEAD 2>/dev/null) ||
  die "$checkout is not a git checkout with a commit"
if [[ -n $(git -C "$checkout" status --porcelain --untracked-files=no) ]]; then
  echo "fresh-debian-check.sh: note: $checkout has uncommitted changes; testing its HEAD $sha without them"
fi

if [[ -z $mirror ]]; then
  # The first non-security Debian URI, in either sources format (deb822 or one-line).
  mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
    2>/dev/null | sed -n -E 's#^(URIs:|deb)[[:space:]]+(\[[^]]*\][[:space:]]+)?(https?://[^[:space:]]*/debian)/?([[:space:]].*)?$#\3#p' |
    head -n1 || true)
  [[ -n $mirror ]] || mirror=http://deb.debian.org/debian
fi

if [[ -n $work ]]; then
  keep=1
  mkdir -p "$work"
  work=$(cd "$work" && pwd)
else
  [[ $reuse -eq 0 ]] || die "--reuse needs --work DIR (the folder of the earlier run)"
  work=$(mktemp -d /var/tmp/tessera-fresh-debian.XXXXXX)
fi
root="$work/root"
logs="$work/logs"
mkdir -p "$logs"

mounted=()
unmount_all() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" 2>/dev/null || true
  done
  mounted=()
  # What the commands mounted inside the root themselves (`ip netns` binds /run/netns onto
  # itself), deepest first.
  local leftover
  while read -r leftover; do
    umount "$leftover" 2>/dev/null || umount -l "$leftover" 2>/dev/null || true
  done < <(awk -v r="$root/" 'index($5, r) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
}
cleanup() {
  unmount_all
  if [[ $keep -eq 0 ]]; then
    # Never delete through a mount that is still in place (it would reach the host's /dev).
    if grep -qF " $root/" /proc/self/mountinfo; then
      echo "fresh-debian-check.sh: something is still mounted under $root; left in place" >&2
    else
      rm -rf --one-file-system "$work"
    fi
  else
    echo "fresh-debian-check.sh: kept $work (root: $root, logs: $logs)"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mount_into_root() { # mount_into_root TARGET MOUNT-ARGS...
  local target="$root$1"
  shift
  mkdir -p "$target"
  mount "$@" "$target"
  mounted+=("$target")
}

if [[ $reuse -eq 1 ]]; then
  [[ -x $root/usr/bin/git ]] || die "--reuse: $root holds no Debian root with git (run once with --work $work)"
  echo "== reusing the Debian root in $root (packages installed by earlier runs stay)"
else
  [[ ! -e $root ]] || die "$root exists: pass --reuse to use it, or remove it"
  if ! command -v debootstrap >/dev/null; then
    echo "== installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >"$logs/apt.log" 2>&1 ||
      { apt-get update -qq >>"$logs/apt.log" 2>&1 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >>"$logs/apt.log" 2>&1; } ||
      { tail -n 20 "$logs/apt.log"; die "could not install debootstrap"; }
  fi
  echo "== debootstrap --variant=minbase bookworm from $mirror into $root"
  debootstrap --variant=minbase --include=git,ca-certificates bookworm "$root" "$mirror" \
    >"$logs/debootstrap.log" 2>&1 || { tail -n 20 "$logs/debootstrap.log"; die "debootstrap failed (log: $logs/debootstrap.log)"; }
fi

echo "== cloning $checkout at $sha"
rm -rf "$root/root/tessera"
git clone -q --no-checkout "$checkout" "$root/root/tessera"
git -C "$root/root/tessera" fetch -q "$checkout" "$sha" 2>/dev/null ||
  git -C "$root/root/tessera" fetch -q "$checkout" HEAD
git -C "$root/root/tessera" checkout -q --detach "$sha"

cp -L /etc/resolv.conf "$root/etc/resolv.conf"
mount_into_root /proc -t proc proc
mount_into_root /sys -t sysfs sysfs
mount_into_root /dev --bind /dev
mount --make-rslave "$root/dev"
mount_into_root /dev/pts --bind /dev/pts
# A /dev/shm of its own: the shm transport's segments stay apart from the host's.
mount_into_root /dev/shm -t tmpfs -o mode=1777,size=4g tmpfs

failed=0
for command in "${commands[@]}"; do
  log="$logs/$command.log"
  echo "== bash tools/dev/$command.sh (as root in the chroot; log: $log)"
  start=$(date +%s)
  status=0
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c "cd /root/tessera && bash tools/dev/$command.sh" >"$log" 2>&1 || status=$?
  seconds=$(($(date +%s) - start))
  tail -n 15 "$log" | sed 's/^/   | /'
  if [[ $status -eq 0 ]]; then
    echo "PASS: bash tools/dev/$command.sh (${seconds} s)"
  else
    echo "FAIL: bash tools/dev/$command.sh exited $status after ${seconds} s (log: $log)"
    failed=1
  fi
done
if [[ $failed -ne 0 ]]; then keep=1; fi
exit "$failed"
