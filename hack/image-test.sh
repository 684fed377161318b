#!/usr/bin/env bash
# Builds the image (hack/image.sh) in a private, throw-away podman storage
# and checks it without running a container: its configuration (non-root
# user, entrypoint, exposed ports, OCI labels) with `podman image inspect`,
# then its root file system, mounted with `podman image mount` and copied
# out: nothing but the two binaries and the CA bundle (no shell), and both
# binaries run chrooted into that copy as 65532:65532, which proves them
# static, and say CHANGELOG.md's version. Needs root (as `make test`
# runs); podman from `make image-setup`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [[ $(id -u) -ne 0 ]]; then
  echo "image-test: needs root (podman image mount and chroot)" >&2
  exit 1
fi
tmp=$(mktemp -d)
podman=(podman --root "$tmp/storage" --runroot "$tmp/run" --storage-driver vfs)
cleanup() {
  "${podman[@]}" image unmount --all >/dev/null 2>&1 || true
  "${podman[@]}" system reset --force >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

image=localhost/legation:image-test
version=v0.0.0-image-test
revision=$(git rev-parse HEAD)
# Built twice, the first time with other labels: the second build must
# not reuse the first's (podman's layer cache ignores build arguments).
PODMAN="${podman[*]}" IMAGE=$image VERSION=v0.0.0-stale REVISION=stale \
  CONTEXT="$tmp/context" ./hack/image.sh
PODMAN="${podman[*]}" IMAGE=$image VERSION=$version REVISION=$revision \
  CONTEXT="$tmp/context" ./hack/image.sh

failed=0
fail() {
  echo "image-test: FAIL: $*" >&2
  failed=1
}
want() { # want WHAT GOT WANT
  [[ $2 == "$3" ]] || fail "$1: got '$2', want '$3'"
}
inspect() {
  "${podman[@]}" image inspect --format "$1" "$image"
}

# The configuration.
want user "$(inspect '{{.Config.User}}')" 65532:65532
want entrypoint "$(inspect '{{json .Config.Entrypoint}}')" '["/usr/local/bin/xds-node"]'
want cmd "$(inspect '{{json .Config.Cmd}}')" null
# shellcheck disable=SC2016 # a Go template, not shell
want "exposed ports" "$(inspect '{{range $p, $_ := .Config.ExposedPorts}}{{$p}} {{end}}')" \
  '18000/tcp 18001/tcp 7946/tcp 7946/udp '
label() {
  inspect "{{index .Config.Labels \"org.opencontainers.image.$1\"}}"
}
want "label version" "$(label version)" "$version"
want "label revision" "$(label revision)" "$revision"
want "label source" "$(label source)" https://github.com/legation-io/legation
want "label title" "$(label title)" legation

# The root file system: a copy, so that the binaries run from it.
mnt=$("${podman[@]}" image mount "$image")
rootfs=$tmp/rootfs
cp -a "$mnt" "$rootfs"
"${podman[@]}" image unmount "$image" >/dev/null
got=$(cd "$rootfs" && find . -mindepth 1 ! -type d -printf '%p %y %m %U:%G\n' | sort)
want "files (path type mode owner)" "$got" "./etc/ssl/certs/ca-certificates.crt f 644 0:0
./usr/local/bin/xds-node f 755 0:0
./usr/local/bin/xdsadmin f 755 0:0"
[[ ! -e $rootfs/bin/sh ]] || fail "the image has /bin/sh"
cmp -s "$rootfs/etc/ssl/certs/ca-certificates.crt" /etc/ssl/certs/ca-certificates.crt ||
  fail "the image's CA bundle differs from /etc/ssl/certs/ca-certificates.crt"

# The binaries, run in the image's file system (no libc, no loader) as its
# user: a dynamically linked binary fails here.
run() { # run WANT-IN-OUTPUT BINARY ARGS...
  local out
  if ! out=$(chroot --userspec=65532:65532 "$rootfs" "${@:2}" 2>&1); then
    fail "$* exited non-zero: $out"
  elif [[ $out != *"$1"* ]]; then
    fail "$*: output lacks '$1': $out"
  fi
}
run --xds-addr /usr/local/bin/xds-node --help
run export /usr/local/bin/xdsadmin --help
run etcd-endpoints /usr/local/bin/xdsadmin export --help
# Both say the version of CHANGELOG.md's latest release.
release=$(./hack/version.sh)
run "xds-node $release" /usr/local/bin/xds-node --version
run "xdsadmin $release" /usr/local/bin/xdsadmin version

# The binaries' build information: static, trimmed.
for b in xds-node xdsadmin; do
  info=$(go version -m "$rootfs/usr/local/bin/$b")
  [[ $info == *"CGO_ENABLED=0"* ]] || fail "$b was not built with CGO_ENABLED=0"
  [[ $info == *"-trimpath=true"* ]] || fail "$b was not built with -trimpath"
done

if [[ $failed -ne 0 ]]; then
  exit 1
fi
echo "image-test: ok ($(du -sh "$rootfs" | cut -f1) root file system: xds-node, xdsadmin, CA bundle; user 65532:65532)"
