#!/usr/bin/env bash
# Runs xds-loadgen's scenarios (docs/operations/performance.md): an xds-node and
# bench/gcp's go-control-plane server, each started afresh for each
# scenario, then
#   1. Legation, SotW, $STREAMS streams
#   2. Legation, delta, $DELTA_STREAMS streams
#   3. Legation and go-control-plane, $GCP_STREAMS streams each, SotW and
#      delta ($GCP_MODES)
#   4. the same at $SMALL_STREAMS streams
# and prints each run's summary and, for 3 and 4, the ratios Legation /
# go-control-plane of the server CPU per update per client and of the bytes
# per client per update. The JSON results are left in $OUT.
#
# ETCD=external (the default) runs Legation as in production, beside an
# etcd process of its own (built from the pinned module), so that the
# replica's CPU and etcd's are told apart; ETCD=dev runs a dev-mode replica
# with its embedded etcd, whose CPU is then part of the server's.
#
# Every setting is an environment variable (make bench-load passes its own
# of the same names): a scenario whose streams are 0 is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
STREAMS=${STREAMS:-10000}
DELTA_STREAMS=${DELTA_STREAMS:-10000}
GCP_STREAMS=${GCP_STREAMS:-2000}    # one size or several: "2000 10000"
GCP_MODES=${GCP_MODES:-sotw delta} # the side by side runs' modes
SMALL_STREAMS=${SMALL_STREAMS:-500}
STREAMS_PER_CONN=${STREAMS_PER_CONN:-1} # 1: one connection per simulated Envoy, as a real fleet
KEEPALIVE=${KEEPALIVE:-300s}           # the clients' HTTP/2 pings, as deploy/envoy's bootstraps; 0: none
CLUSTERS=${CLUSTERS:-200}
ENDPOINTS=${ENDPOINTS:-20}
LISTENERS=${LISTENERS:-4}                # each with its route: clients take LDS and RDS too, as an Envoy
UPDATES=${UPDATES:-10}
INTERVAL=${INTERVAL:-1s}
IDLE=${IDLE:-10s}
# TARGETS_IDLE is the idle window of scenarios 1 and 2, whose idle CPU is
# held to its target: long enough for every client to ping once at the
# bootstraps' interval (0 or empty: IDLE).
TARGETS_IDLE=${TARGETS_IDLE:-320s}
NACK_RATIO=${NACK_RATIO:-0}
PORT_BASE=${PORT_BASE:-28000}
OUT=${OUT:-bench-load-out}
ETCD=${ETCD:-external}
LOADGEN_FLAGS=${LOADGEN_FLAGS:-} # more xds-loadgen flags, e.g. --cpu-profile-updates FILE
NODE_FLAGS=${NODE_FLAGS:-}       # more xds-node flags, e.g. --gc-between-pushes
read -r -a node_flags <<<"$NODE_FLAGS"

xds_addr=127.0.0.1:$PORT_BASE
http_addr=127.0.0.1:$((PORT_BASE + 1))
etcd_addr=127.0.0.1:$((PORT_BASE + 2))
etcd_peer_addr=127.0.0.1:$((PORT_BASE + 3))
gossip_addr=127.0.0.1:$((PORT_BASE + 4))
gcp_xds_addr=127.0.0.1:$((PORT_BASE + 100))
gcp_http_addr=127.0.0.1:$((PORT_BASE + 101))

for tool in curl jq; do
  if ! command -v "$tool" >/dev/null; then
    echo "bench-load: needs $tool (apt-get install $tool)" >&2
    exit 1
  fi
done

case $ETCD in
  external | dev) ;;
  *)
    echo "bench-load: ETCD=$ETCD: must be external or dev" >&2
    exit 2
    ;;
esac

mkdir -p bin "$OUT"
echo "bench-load: building xds-node, xds-loadgen, etcd and bench/gcp's gcp-server" >&2
"$GO" build -o bin/ ./cmd/xds-node ./cmd/xds-loadgen
"$GO" build -o bin/etcd go.etcd.io/etcd/server/v3
(cd bench/gcp && "$GO" build -o ../../bin/gcp-server .)

server_pid=
etcd_pid=
data_dir=
stop_server() {
  local pid
  for pid in "$server_pid" "$etcd_pid"; do
    if [[ -n $pid ]]; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  server_pid=
  etcd_pid=
  if [[ -n $data_dir ]]; then
    rm -rf "$data_dir"
    data_dir=
  fi
}
trap stop_server EXIT

# wait_http URL: polls URL until it answers 200, for up to 60s.
wait_http() {
  local i
  for ((i = 0; i < 600; i++)); do
    if curl -fsS -o /dev/null "$1" 2>/dev/null; then
      return 0
    fi
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "bench-load: the server exited; see $OUT/server.log" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "bench-load: $1 did not answer within 60s" >&2
  return 1
}

# check_free URL: fails when something already answers at URL (a server
# left from another run would be measured instead of ours).
check_free() {
  if curl -fsS -o /dev/null "$1" 2>/dev/null; then
    echo "bench-load: something already answers at $1; stop it or set PORT_BASE" >&2
    return 1
  fi
}

start_legation() {
  check_free "http://$http_addr/readyz"
  check_free "http://$etcd_addr/health"
  data_dir=$(mktemp -d)
  if [[ $ETCD == dev ]]; then
    ./bin/xds-node --data-dir "$data_dir" --dev-etcd-addr "$etcd_addr" \
      --xds-addr "$xds_addr" --http-addr "$http_addr" --log-level warn "${node_flags[@]}" \
      >"$OUT/server.log" 2>&1 &
    server_pid=$!
  else
    ./bin/etcd --name bench --data-dir "$data_dir" \
      --listen-client-urls "http://$etcd_addr" --advertise-client-urls "http://$etcd_addr" \
      --listen-peer-urls "http://$etcd_peer_addr" --initial-advertise-peer-urls "http://$etcd_peer_addr" \
      --initial-cluster "bench=http://$etcd_peer_addr" --log-level warn \
      >"$OUT/etcd.log" 2>&1 &
    etcd_pid=$!
    server_pid=$etcd_pid # wait_http's liveness check, until the replica starts
    wait_http "http://$etcd_addr/health"
    ./bin/xds-node --etcd-endpoints "$etcd_addr" --gossip-addr "$gossip_addr" \
      --xds-addr "$xds_addr" --http-addr "$http_addr" --log-level warn "${node_flags[@]}" \
      >"$OUT/server.log" 2>&1 &
    server_pid=$!
  fi
  wait_http "http://$http_addr/readyz"
}

start_gcp() {
  check_free "http://$gcp_http_addr/metrics"
  ./bin/gcp-server --xds-addr "$gcp_xds_addr" --http-addr "$gcp_http_addr" \
    >"$OUT/server.log" 2>&1 &
  server_pid=$!
  wait_http "http://$gcp_http_addr/metrics"
}

# loadgen NAME TARGET MODE STREAMS [IDLE]: one run against the server
# started, idle for IDLE (default $IDLE), its JSON in $OUT/NAME.json and
# its summary on stdout.
loadgen() {
  local name=$1 target=$2 mode=$3 streams=$4 idle=${5:-$IDLE} conns
  conns=$(((streams + STREAMS_PER_CONN - 1) / STREAMS_PER_CONN))
  local args=(--target "$target" --mode "$mode" --streams "$streams" --conns "$conns" --keepalive-time "$KEEPALIVE"
    --clusters "$CLUSTERS" --endpoints "$ENDPOINTS" --listeners "$LISTENERS" --updates "$UPDATES"
    --interval "$INTERVAL" --idle "$idle" --nack-ratio "$NACK_RATIO" -o json)
  if [[ -n $LOADGEN_FLAGS ]]; then
    read -r -a extra <<<"$LOADGEN_FLAGS"
    args+=("${extra[@]}")
  fi
  if [[ $target == legation ]]; then
    args+=(--xds-addr "$xds_addr" --metrics-url "http://$http_addr/metrics" --etcd-endpoints "$etcd_addr")
    if [[ $ETCD == external ]]; then
      args+=(--etcd-metrics-url "http://$etcd_addr/metrics")
    fi
  else
    args+=(--xds-addr "$gcp_xds_addr" --metrics-url "http://$gcp_http_addr/metrics" --control-url "http://$gcp_http_addr")
  fi
  echo "bench-load: $name: ${args[*]}" >&2
  ./bin/xds-loadgen "${args[@]}" >"$OUT/$name.json"
  summary "$OUT/$name.json"
  if [[ $target == legation ]]; then
    targets "$OUT/$name.json"
  fi
}

# summary FILE: the figures of docs/operations/performance.md's table.
summary() {
  jq -r '"\(.target) \(.mode) \(.streams) streams: write to receipt p50 \(.overall.latency.p50 * 1000 | round) ms, p99 \(.overall.latency.p99 * 1000 | round) ms, max \(.overall.latency.max * 1000 | round) ms; all received (median) \(.overall.all_received_median * 1000 | round) ms; missing \(.overall.missing); idle CPU \(.idle.cpu_ms_per_s // 0 | . * 10 | round / 10) ms/s\(if .etcd then " (etcd beside it \(.etcd.idle_cpu_ms_per_s | . * 10 | round / 10) ms/s)" else "" end); RSS after sync \(.server.rss_bytes_after_sync / 1048576 | round) MiB (\(.per_envoy.rss_bytes / 1024 | round) KiB per Envoy); CPU per update per Envoy \(.per_envoy.cpu_us_per_update | . * 10 | round / 10) us; \(.per_envoy.bytes_per_update | round) bytes per Envoy per update; stream errors \(.stream_errors); load tool collections \(.loadgen.collections_between_updates // 0) between updates, \(.loadgen.collections_in_updates // 0) in them"' "$1"
}

# targets FILE: a 10,000-Envoy run's figures beside the per-Envoy targets
# of docs/operations/performance.md, when its shape is a real fleet's (one
# connection per simulated Envoy).
targets() {
  if ((STREAMS_PER_CONN != 1)); then
    return
  fi
  jq -r 'select(.streams == 10000) |
    def verdict(ok): if ok then "holds" else "missed" end;
    (.server.rss_bytes_per_stream / 1024) as $mem | (.idle.cpu_ms_per_s // 0) as $idle | .overall.latency.p99 as $p99 |
    "targets, \(.mode), 10,000 Envoys, one connection each: memory per Envoy \($mem | round) KiB (at most 40: \(verdict($mem <= 40))); idle CPU \($idle * 10 | round / 10) ms/s (at most 10: \(verdict($idle <= 10))); write to receipt p99 \($p99 * 1000 | round) ms (at most 300: \(verdict($p99 <= 0.3)))"' "$1"
}

# floor N: what grpc-go itself takes at N Envoys, one connection each, with
# no state of Legation's (BenchmarkPushFloor, docs/operations/performance.md):
# the floor under the targets' figures, on this machine, in this run.
floor() {
  local out
  if ! out=$(LEGATION_FLOOR_STREAMS=$1 "$GO" test ./internal/replica -run '^$' -bench PushFloor -benchtime 10x 2>&1); then
    echo "$out" >&2
    return 1
  fi
  awk -v n="$1" '/^BenchmarkPushFloor/ {
    for (i = 3; i < NF; i += 2) m[$(i + 1)] = $i
    printf "floor, grpc-go with no state, %d Envoys, one connection each: push start to the last ACK %s ms, server CPU per Envoy per push %s us (its clients %s us), RSS %s KiB per Envoy\n", n, m["ms-to-all-acked"], m["server-cpu-us/stream/push"], m["client-cpu-us/stream/push"], m["rss-KiB/stream"]
  }' <<<"$out"
}

# ratio A B: Legation (A) over go-control-plane (B).
ratio() {
  jq -rn --slurpfile a "$1" --slurpfile b "$2" '
    def r(x; y): if y == 0 then "n/a" else (x / y * 1000 | round / 1000 | tostring) + "x" end;
    "Legation / go-control-plane at \($a[0].streams) \($a[0].mode) streams: CPU per update per Envoy " +
    r($a[0].server.cpu_seconds_per_update_per_client; $b[0].server.cpu_seconds_per_update_per_client) +
    ", bytes per Envoy per update " + r($a[0].overall.bytes_per_client_per_update; $b[0].overall.bytes_per_client_per_update) +
    ", p99 " + r($a[0].overall.latency.p99; $b[0].overall.latency.p99) +
    ", RSS after sync " + r($a[0].server.rss_bytes_after_sync; $b[0].server.rss_bytes_after_sync)'
}

# main is the whole run: bash reads a function whole before running it,
# and the line that calls it whole too, whose exit ends the script before
# bash reads on: an edit of this file during a run does not derail it.
main() {
  if ((STREAMS > 0)); then
    start_legation
    loadgen legation-sotw-"$STREAMS" legation sotw "$STREAMS" "${TARGETS_IDLE:-$IDLE}"
    stop_server
  fi
  if ((DELTA_STREAMS > 0)); then
    start_legation
    loadgen legation-delta-"$DELTA_STREAMS" legation delta "$DELTA_STREAMS" "${TARGETS_IDLE:-$IDLE}"
    stop_server
  fi
  if ((STREAMS_PER_CONN == 1)) && ((STREAMS == 10000 || DELTA_STREAMS == 10000)); then
    floor 10000
  fi
  local n mode
  # shellcheck disable=SC2086 # GCP_STREAMS and GCP_MODES are lists
  for n in $GCP_STREAMS $SMALL_STREAMS; do
    for mode in $GCP_MODES; do
      if ((n > 0)); then
        side_by_side "$mode" "$n"
      fi
    done
  done
}

# side_by_side MODE N: Legation, then go-control-plane, at N streams, and
# the ratios.
side_by_side() {
  local mode=$1 n=$2
  start_legation
  loadgen legation-"$mode"-"$n" legation "$mode" "$n"
  stop_server
  start_gcp
  loadgen gcp-"$mode"-"$n" gcp "$mode" "$n"
  stop_server
  ratio "$OUT/legation-$mode-$n.json" "$OUT/gcp-$mode-$n.json"
}

main "$@"; exit
