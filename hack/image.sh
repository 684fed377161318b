#!/usr/bin/env bash
# Builds Legation's container image (deploy/image/Containerfile) with
# podman: static binaries of xds-node and xdsadmin (CGO_ENABLED=0,
# -trimpath, -s -w) and the build host's CA bundle, staged in CONTEXT,
# then `podman build`.
#
# Environment:
#   GO       the go command (go)
#   PODMAN   the podman command, with global flags if any (podman)
#   IMAGE    the image name (localhost/legation:VERSION); it is also tagged
#            localhost/legation:latest when IMAGE is not set
#   CONTEXT  the build context directory, emptied first (bin/image)
#   VERSION  the version label (git describe --tags --always --dirty)
#   REVISION the revision label (the commit, git rev-parse HEAD)
#   SOURCE   the source label (https://github.com/legation-io/legation)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

GO=${GO:-go}
read -r -a podman <<<"${PODMAN:-podman}"
CONTEXT=${CONTEXT:-bin/image}
VERSION=${VERSION:-$(git describe --tags --always --dirty)}
REVISION=${REVISION:-$(git rev-parse HEAD)}
SOURCE=${SOURCE:-https://github.com/legation-io/legation}
tags=()
if [[ -n ${IMAGE:-} ]]; then
  tags=(--tag "$IMAGE")
else
  IMAGE=localhost/legation:$VERSION
  tags=(--tag "$IMAGE" --tag localhost/legation:latest)
fi

cacerts=/etc/ssl/certs/ca-certificates.crt
if [[ ! -s $cacerts ]]; then
  echo "image: $cacerts is missing: install Debian's ca-certificates (make image-setup)" >&2
  exit 1
fi
if ! command -v "${podman[0]}" >/dev/null 2>&1; then
  echo "image: ${podman[0]} not found: install Debian's podman (make image-setup)" >&2
  exit 1
fi

rm -rf "$CONTEXT"
mkdir -p "$CONTEXT"
CGO_ENABLED=0 "$GO" build -trimpath -ldflags='-s -w' \
  -o "$CONTEXT/" ./cmd/xds-node ./cmd/xdsadmin
cp "$cacerts" "$CONTEXT/ca-certificates.crt"
chmod 0644 "$CONTEXT/ca-certificates.crt"
chmod 0755 "$CONTEXT/xds-node" "$CONTEXT/xdsadmin"

# --no-cache: podman's layer cache ignores build arguments and would keep
# an earlier build's labels; --layers=false: no intermediate images.
"${podman[@]}" build --quiet --no-cache --layers=false --file deploy/image/Containerfile \
  --build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" \
  --build-arg SOURCE="$SOURCE" "${tags[@]}" "$CONTEXT" >/dev/null
echo "image: built $IMAGE (version $VERSION, revision $REVISION)"
