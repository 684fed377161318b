#!/usr/bin/env bash
# Prints Legation's version: that of CHANGELOG.md's latest release, the
# first heading "## X.Y.Z (YYYY-MM-DD)" ("## Unreleased" skipped), as the
# root package legation reads it (version.go; a test checks that both
# agree). Fails when the first other level-2 heading is not a release's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

release='^## ([0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?) \([0-9]{4}-[0-9]{2}-[0-9]{2}\)[[:space:]]*$'
n=0
while IFS= read -r line; do
  n=$((n + 1))
  [[ $line == "## "* ]] || continue
  [[ $line =~ ^"## Unreleased"[[:space:]]*$ ]] && continue
  if [[ $line =~ $release ]]; then
    echo "${BASH_REMATCH[1]}"
    exit 0
  fi
  echo "version: CHANGELOG.md:$n: heading '$line': want '## Unreleased' or '## X.Y.Z (YYYY-MM-DD)'" >&2
  exit 1
done <"$root/CHANGELOG.md"
echo "version: CHANGELOG.md: no released entry (a heading '## X.Y.Z (YYYY-MM-DD)')" >&2
exit 1
