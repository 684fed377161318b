#!/usr/bin/env bash
# Regenerates the Go code of proto/ into the directory given (default: the
# repository), with Debian's protoc and the protoc-gen-go pinned in go.mod.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root}
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
(cd "$root" && go build -o "$bin/protoc-gen-go" google.golang.org/protobuf/cmd/protoc-gen-go)
cd "$root/proto"
mapfile -t protos < <(find . -name '*.proto' | sort)
PATH="$bin:$PATH" protoc -I . -I /usr/include \
  --go_out="$out" --go_opt=module=github.com/legation-io/legation \
  "${protos[@]}"
