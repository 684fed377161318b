#!/usr/bin/env bash
# Runs shellcheck over every shell script git tracks: the *.sh files and the
# files whose #! line runs sh, bash, dash or ksh. The files given as
# arguments are left out.
set -euo pipefail
cd "$(dirname "$0")/.."

skip=" $* "
scripts=()
tracked=$(git ls-files -z | tr '\0' '\n')
while IFS= read -r f; do
  [[ -f $f && $skip != *" $f "* ]] || continue
  first=
  IFS= read -r -n 200 first <"$f" 2>/dev/null || true
  if [[ $f == *.sh || $first =~ ^#!.*[/[:space:]](ba|da|k)?sh([[:space:]]|$) ]]; then
    scripts+=("$f")
  fi
done <<<"$tracked"

if [[ ${#scripts[@]} -eq 0 ]]; then
  echo "shellcheck: no shell scripts found" >&2
  exit 1
fi
echo "shellcheck ${scripts[*]}"
shellcheck "${scripts[@]}"
