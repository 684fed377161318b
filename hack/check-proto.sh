#!/usr/bin/env bash
# Fails when the generated Go code committed under proto/ is not what
# ./proto/gen.sh produces from the .proto files now. The "// 	protoc vX"
# version stamp is ignored, so a different Debian protoc does not fail it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$root/proto/gen.sh" "$tmp"

strip() { sed $'/^\\/\\/ \tprotoc /d' "$1"; }

stale=0
# Every freshly generated file must be committed, identical but for the stamp.
while IFS= read -r f; do
  rel=${f#"$tmp"/}
  if [[ ! -f "$root/$rel" ]]; then
    echo "missing: $rel" >&2
    stale=1
  elif ! diff -u --label "$rel (committed)" --label "$rel (generated)" \
      <(strip "$root/$rel") <(strip "$f") >&2; then
    stale=1
  fi
done < <(find "$tmp" -type f -name '*.go' | sort)
# Every committed generated file must still have a source.
while IFS= read -r f; do
  rel=${f#"$root"/}
  if [[ ! -f "$tmp/$rel" ]]; then
    echo "no longer generated: $rel" >&2
    stale=1
  fi
done < <(find "$root/proto" -type f -name '*.pb.go' | sort)

if [[ $stale -ne 0 ]]; then
  echo "generated code under proto/ is stale: run make proto" >&2
  exit 1
fi
echo "generated code under proto/ is up to date"
