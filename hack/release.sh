#!/usr/bin/env bash
# Builds a release of Legation at HEAD (`make release`): the container image
# IMAGE_REPOSITORY:VERSION (hack/image.sh) and the Helm chart's package,
# DIST/legation-VERSION.tgz (helm package), VERSION being CHANGELOG.md's
# latest release (hack/version.sh). It refuses, before building anything,
# when the version sources disagree:
#   - CHANGELOG.md has changes under "## Unreleased" (release them first);
#   - deploy/helm/legation/Chart.yaml's version or appVersion is not VERSION;
#   - the work tree has changes (a release is of a commit);
#   - the tag vVERSION exists on another commit (that version is out: add
#     a new entry to CHANGELOG.md), or HEAD carries another v* tag;
#   - a v* tag is newer than VERSION.
# It tags nothing and pushes nothing: it prints the commands that do.
#
# Usage: hack/release.sh          check, then build
#        hack/release.sh --check  check only, and print VERSION
#
# Environment: GO, HELM (the helm command, with its arguments: the pinned
# `go tool -modfile=hack/tools/go.mod helm`), DIST (dist), and what
# hack/image.sh reads (IMAGE_REPOSITORY, PODMAN).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

GO=${GO:-go}
read -r -a helm <<<"${HELM:-$GO tool -modfile=hack/tools/go.mod helm}"
DIST=${DIST:-dist}
chart=deploy/helm/legation

problems=()
problem() { problems+=("$*"); }

# chartField prints a top-level field of Chart.yaml, unquoted.
chartField() {
  sed -nE "s/^$1:[[:space:]]*\"?([^\"[:space:]]*)\"?[[:space:]]*\$/\\1/p" "$chart/Chart.yaml"
}

# checkChangelog: no unreleased changes (a "## Unreleased" heading may
# stay, empty).
checkChangelog() {
  local unreleased
  unreleased=$(awk '/^## Unreleased[[:space:]]*$/ {on=1; next} /^## / {on=0} on && NF' CHANGELOG.md)
  if [[ -n $unreleased ]]; then
    problem "CHANGELOG.md has changes under '## Unreleased': rename the heading to '## X.Y.Z ($(date -u +%F))' (a new version) first"
  fi
}

# checkChart: the chart's version and appVersion are the release's.
checkChart() {
  local field got
  for field in version appVersion; do
    got=$(chartField "$field")
    if [[ $got != "$version" ]]; then
      problem "$chart/Chart.yaml: $field is '$got', CHANGELOG.md's latest release is $version: set it to $version"
    fi
  done
}

# checkGit: a clean tree, and tags that agree with the version.
checkGit() {
  local head at newest t
  if [[ -n $(git status --porcelain) ]]; then
    problem "the work tree has changes (git status): commit them first; a release is of a commit"
  fi
  head=$(git rev-parse HEAD)
  if at=$(git rev-parse -q --verify "refs/tags/v$version^{commit}"); then
    if [[ $at != "$head" ]]; then
      problem "tag v$version is on commit $at, not HEAD ($head): version $version is out; add a new version to CHANGELOG.md"
    fi
  fi
  while read -r t; do
    [[ -z $t || $t == "v$version" ]] || problem "HEAD is tagged $t, but CHANGELOG.md's latest release is $version"
  done < <(git tag --points-at HEAD --list 'v[0-9]*')
  # Semantic versions' order: a pre-release (0.2.0-rc.1) before its
  # release, as sort -V orders 0.2.0~rc.1 before 0.2.0.
  newest=$( (git tag --list 'v[0-9]*' | sed 's/^v//'; echo "$version") | sed 's/-/~/' | sort -V | tail -n 1 | sed 's/~/-/')
  if [[ $newest != "$version" ]]; then
    problem "tag v$newest is newer than CHANGELOG.md's latest release, $version"
  fi
}

version=$(./hack/version.sh)
checkChangelog
checkChart
checkGit
if [[ ${#problems[@]} -gt 0 ]]; then
  printf 'release: %s\n' "${problems[@]}" >&2
  exit 1
fi
if [[ ${1:-} == --check ]]; then
  echo "$version"
  exit 0
elif [[ $# -gt 0 ]]; then
  echo "release: unknown argument '$1' (usage: hack/release.sh [--check])" >&2
  exit 2
fi

image=$(./hack/image.sh --print)
GO=$GO ./hack/image.sh
mkdir -p "$DIST"
"${helm[@]}" package "$chart" --destination "$DIST" >/dev/null
echo "release: $version: image $image, chart $DIST/legation-$version.tgz"
echo "release: to publish it:"
echo "  git tag v$version && git push origin v$version"
echo "  podman push $image"
echo "  ${helm[*]} push $DIST/legation-$version.tgz oci://$(dirname "$image")/charts   # or your chart repository"
