#!/usr/bin/env bash
# Builds Legation's container image (deploy/image/Containerfile) with
# podman: static binaries of xds-node and xdsadmin (CGO_ENABLED=0,
# -trimpath, -s -w) and the build host's CA bundle, staged in CONTEXT,
# then `podman build`, tagged IMAGE_REPOSITORY:VERSION: the image a
# default install of the Helm chart pulls (a test checks that they agree).
#
# Usage: hack/image.sh          build the image
#        hack/image.sh --print  print the image name it would build, and exit
#
# Environment:
#   GO               the go command (go)
#   PODMAN           the podman command, with global flags if any (podman)
#   IMAGE_REPOSITORY the repository (ghcr.io/legation-io/legation, the
#                    chart's default image.repository)
#   VERSION          the tag and the version label (CHANGELOG.md's latest
#                    release, hack/version.sh)
#   IMAGE            the whole image name (IMAGE_REPOSITORY:VERSION)
#   CONTEXT          the build context directory, emptied first (bin/image)
#   REVISION         the revision label (the commit, git rev-parse HEAD, with
#                    -dirty when the work tree has changes)
#   SOURCE           the source label (https://github.com/legation-io/legation)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

GO=${GO:-go}
read -r -a podman <<<"${PODMAN:-podman}"
CONTEXT=${CONTEXT:-bin/image}
IMAGE_REPOSITORY=${IMAGE_REPOSITORY:-ghcr.io/legation-io/legation}
VERSION=${VERSION:-$(./hack/version.sh)}
IMAGE=${IMAGE:-$IMAGE_REPOSITORY:$VERSION}
if [[ ${1:-} == --print ]]; then
  echo "$IMAGE"
  exit 0
elif [[ $# -gt 0 ]]; then
  echo "image: unknown argument '$1' (usage: hack/image.sh [--print])" >&2
  exit 2
fi
if [[ -z ${REVISION:-} ]]; then
  REVISION=$(git rev-parse HEAD)
  [[ -z $(git status --porcelain) ]] || REVISION+=-dirty
fi
SOURCE=${SOURCE:-https://github.com/legation-io/legation}

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
# -buildvcs=auto: the binaries say their revision (--version) where git
# can tell it, whatever GOFLAGS says.
CGO_ENABLED=0 "$GO" build -trimpath -buildvcs=auto -ldflags='-s -w' \
  -o "$CONTEXT/" ./cmd/xds-node ./cmd/xdsadmin
cp "$cacerts" "$CONTEXT/ca-certificates.crt"
chmod 0644 "$CONTEXT/ca-certificates.crt"
chmod 0755 "$CONTEXT/xds-node" "$CONTEXT/xdsadmin"

# --no-cache: podman's layer cache ignores build arguments and would keep
# an earlier build's labels; --layers=false: no intermediate images.
"${podman[@]}" build --quiet --no-cache --layers=false --file deploy/image/Containerfile \
  --build-arg VERSION="$VERSION" --build-arg REVISION="$REVISION" \
  --build-arg SOURCE="$SOURCE" --tag "$IMAGE" "$CONTEXT" >/dev/null
echo "image: built $IMAGE (version $VERSION, revision $REVISION)"
