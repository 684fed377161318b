#!/usr/bin/env bash
# Fuzzes one target: hack/fuzz.sh DIR FuzzName FUZZTIME.
#
# Go's fuzzing coordinator (internal/fuzz.CoordinateFuzzing, Go 1.26) can
# fail a run that found nothing: when -fuzztime's deadline fires, it compares
# the deadline's error with its workers' context error, and on a busy
# machine the second may not be set yet, so the run ends in a bare
# "context deadline exceeded" with no failing input written. Such a run is
# run once more. A run that finds something writes the input under
# DIR/testdata/fuzz/FuzzName and fails at once, as does any other failure.
set -euo pipefail

dir=$1 target=$2 fuzztime=$3
go=${GO:-go}
corpus="$dir/testdata/fuzz/$target"

count_inputs() {
  if [[ -d $corpus ]]; then find "$corpus" -type f | wc -l; else echo 0; fi
}

for attempt in 1 2; do
  before=$(count_inputs)
  out=$(mktemp)
  status=0
  "$go" test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" \
    -fuzzminimizetime 1x "./$dir" 2>&1 | tee "$out" || status=$?
  after=$(count_inputs)
  if [[ $status -eq 0 ]]; then
    rm -f "$out"
    exit 0
  fi
  # Only the coordinator's race, nothing else: one FAIL line for the
  # target, then the bare deadline error, and no new input.
  if [[ $after -eq $before && $attempt -eq 1 ]] &&
    grep -qE "^--- FAIL: $target \(" "$out" &&
    [[ $(grep -A1 -E "^--- FAIL: $target \(" "$out" | tail -n 1 | tr -d '[:space:]') == contextdeadlineexceeded ]] &&
    [[ $(grep -c -- '--- FAIL' "$out") -eq 1 ]]; then
    echo "fuzz: $target: the fuzzing coordinator's deadline race (no input written); running once more"
    rm -f "$out"
    continue
  fi
  rm -f "$out"
  exit "$status"
done
