#!/usr/bin/env bash
# Checks the capacity model of docs/operations/performance.md on one
# machine: a local cluster (go run ./deploy/local up: 3 etcd members,
# $REPLICAS xds-node replicas, each as in production) and $STREAMS
# simulated Envoys, one connection each, the bootstraps' keepalive,
# spread over the replicas in turn as a round-robin TCP load balancer
# spreads them (each lands on one replica; those whose node's home is
# another are relayed there), run by xds-loadgen in $PROCESSES worker
# processes so that none opens more connections than its open files
# allow. xds-loadgen writes the fixture and $UPDATES endpoint changes and
# reports the receipts and the replicas' CPU and RSS, added up; this
# script adds each replica's streams, relayed streams, goroutines and RSS
# once every client is synced. The cluster's logs and the results stay in
# $OUT.
#
# The clients dial the replicas, not HAProxy: HAProxy holds two
# descriptors a connection, so 30,000 Envoys would need 60,000 open files
# in one process.
#
# Then, unless SINGLE_STREAMS is 0, the same shape on one replica with
# $SINGLE_STREAMS Envoys (none relayed), and the two side by side: the
# memory and CPU per update of an Envoy in the cluster over one served
# by one replica (the cluster's cost of relaying).
#
# Every setting is an environment variable (make bench-capacity passes
# its own of the same names).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
STREAMS=${STREAMS:-30000}
PROCESSES=${PROCESSES:-3} # the load tool's worker processes
REPLICAS=${REPLICAS:-3}
SINGLE_STREAMS=${SINGLE_STREAMS:-10000}
SINGLE_OPEN_RATE=${SINGLE_OPEN_RATE:-1000} # one replica admits 1,000 a second
MODE=${MODE:-sotw}
UPDATES=${UPDATES:-10}
IDLE=${IDLE:-60s}
OPEN_RATE=${OPEN_RATE:-3000} # streams opened a second: the replicas admit 1,000 a second each
NET=${NET:-127.0.31.}         # the cluster's addresses, 127.0.N.x
OUT=${OUT:-bench-capacity-out}
LOADGEN_FLAGS=${LOADGEN_FLAGS:-}
NODE_FLAGS=${NODE_FLAGS:-}
read -r -a loadgen_flags <<<"$LOADGEN_FLAGS"

for tool in curl jq; do
  if ! command -v "$tool" >/dev/null; then
    echo "bench-capacity: needs $tool (apt-get install $tool)" >&2
    exit 1
  fi
done

mkdir -p bin "$OUT"
echo "bench-capacity: building xds-loadgen; deploy/local builds etcd and xds-node" >&2
"$GO" build -o bin/ ./cmd/xds-loadgen

# replicas prints each replica's share once every client is synced.
replicas() {
  local i h m
  for ((i = 1; i <= REPLICAS; i++)); do
    h="REPLICA_${i}_HTTP_ADDR"
    m=$(curl -fsS "http://${!h}/metrics")
    awk -v name="replica-$i" '
      /^legation_(sotw|delta)_streams / { streams += $2 }
      /^legation_relay_streams_relayed / { relayed = $2 }
      /^go_goroutines / { goroutines = $2 }
      /^process_resident_memory_bytes / { rss = $2 }
      END { printf "%s: %d streams served, %d relayed to their home, %d goroutines, RSS %.0f MiB\n", name, streams, relayed, goroutines, rss / 1048576 }' <<<"$m"
  done
}

# etcd_counts prints member 1's puts, transactions, proposals committed,
# keys and database size in use.
etcd_counts() {
  curl -fsS "http://$ETCD_1_CLIENT_ADDR/metrics" | awk '
    /^etcd_mvcc_put_total / { puts = $2 }
    /^etcd_mvcc_txn_total / { txns = $2 }
    /^etcd_server_proposals_committed_total / { proposals = $2 }
    /^etcd_debugging_mvcc_keys_total / { keys = $2 }
    /^etcd_mvcc_db_total_size_in_use_in_bytes / { db = $2 }
    END { printf "%d %d %d %d %d\n", puts, txns, proposals, keys, db }'
}
# all_metrics prints every replica's /metrics page, one after the other.
all_metrics() {
  local i h
  for ((i = 1; i <= REPLICAS; i++)); do
    h="REPLICA_${i}_HTTP_ADDR"
    curl -fsS "http://${!h}/metrics"
  done
}
# calm_counts prints, summed over the replicas, the counters of the
# cluster's calm under load: ring changes, streams moved by a rebalance,
# deaths gossip declared (and of them revived within --ring-damping),
# watches restarted or stalled, and the replicas' own starvations.
calm_counts() {
  all_metrics | awk '
    /^legation_shard_ring_changes_total / { ring += $2 }
    /^legation_relay_rebalance_closes_total / { moved += $2 }
    /^legation_shard_member_deaths_total / { deaths += $2 }
    /^legation_shard_member_revivals_total / { revived += $2 }
    /^legation_view_watch_(restarts|stalls)_total / { watches += $2 }
    /^legation_awake_starvations_total / { starved += $2 }
    END { printf "%d %d %d %d %d %d\n", ring, moved, deaths, revived, watches, starved }'
}
# cuts prints, summed over the replicas, the streams refused or cut by a
# bound (legation_limits_hits_total, by bound) and served away from their
# home because it did not answer (legation_relay_fallbacks_total), one
# "name count" a line.
cuts() {
  all_metrics | awk '
    /^legation_limits_hits_total\{/ { match($1, /limit="[^"]*"/); n[substr($1, RSTART + 7, RLENGTH - 8)] += $2 }
    /^legation_relay_fallbacks_total / { n["relay-fallback"] += $2 }
    /^legation_relay_send_timeouts_total / { n["relay-send-timeout"] += $2 }
    END { for (k in n) printf "%s %d\n", k, n[k] }' | sort
}
up_pid=
down() {
  if [[ -n $up_pid ]]; then
    "$GO" run ./deploy/local down -dir "$dir" >/dev/null 2>&1 || kill "$up_pid" 2>/dev/null || true
    wait "$up_pid" 2>/dev/null || true
    up_pid=
  fi
}
trap down EXIT

# run runs the check on a cluster of $REPLICAS replicas and $STREAMS
# Envoys, writing to $OUT (the caller sets the three), and takes the
# cluster down.
run() {
  dir=$(realpath "$OUT")/cluster
  rm -rf "$dir"
  "$GO" run ./deploy/local up -dir "$dir" -no-haproxy -net "$NET" -replicas "$REPLICAS" \
    -xds-node-flags "--log-level warn $NODE_FLAGS" >"$OUT/up.log" 2>&1 &
  up_pid=$!
  for ((i = 0; i < 300; i++)); do
    if grep -q '^up:' "$OUT/up.log"; then
      break
    fi
    if ! kill -0 "$up_pid" 2>/dev/null; then
      echo "bench-capacity: the cluster did not start; see $OUT/up.log" >&2
      exit 1
    fi
    sleep 1
  done
  # shellcheck disable=SC1091 # written by deploy/local up
  . "$dir/env"

  xds='' metrics='' etcd_metrics=''
  for ((i = 1; i <= REPLICAS; i++)); do
    x="REPLICA_${i}_XDS_ADDR" h="REPLICA_${i}_HTTP_ADDR"
    xds+=${xds:+,}${!x}
    metrics+=${metrics:+,}http://${!h}/metrics
  done
  for ((i = 1; i <= ETCD_MEMBERS; i++)); do
    e="ETCD_${i}_CLIENT_ADDR"
    etcd_metrics+=${etcd_metrics:+,}http://${!e}/metrics
  done

  read -r puts0 txns0 props0 _ _ < <(etcd_counts)
  cuts0=$(cuts)
  read -r ring0 moved0 deaths0 revived0 watches0 starved0 < <(calm_counts)
  start=$(date +%s)

  echo "bench-capacity: $STREAMS $MODE Envoys over $PROCESSES processes on $REPLICAS replicas" >&2
  ./bin/xds-loadgen --processes "$PROCESSES" --streams "$STREAMS" --mode "$MODE" \
    --xds-addr "$xds" --metrics-url "$metrics" --etcd-metrics-url "$etcd_metrics" \
    --etcd-endpoints "$ETCD_ENDPOINTS" --open-rate "$OPEN_RATE" --updates "$UPDATES" --idle "$IDLE" \
    --sync-timeout 10m "${loadgen_flags[@]}" -o json >"$OUT/result.json" 2>"$OUT/loadgen.log" &
  lg=$!
  shown=
  while kill -0 "$lg" 2>/dev/null; do
    if [[ -z $shown ]] && grep -q ' idle ' "$OUT/loadgen.log"; then
      replicas | tee "$OUT/replicas.txt"
      shown=1
    fi
    sleep 1
  done
  if ! wait "$lg"; then
    echo "bench-capacity: xds-loadgen failed; see $OUT/loadgen.log" >&2
    exit 1
  fi
  jq -r '"\(.streams) Envoys (\(.mode)): synced in \(.sync.seconds | . * 10 | round / 10) s; update p50 \(.overall.latency.p50 * 1000 | round) ms, p99 \(.overall.latency.p99 * 1000 | round) ms, missing \(.overall.missing), stream errors \(.stream_errors), reconnects \(.reconnects)",
    "replicas together: RSS \(.server.rss_bytes_after_sync / 1048576 | round) MiB after sync (\(.per_envoy.rss_bytes / 1024 | round) KiB per Envoy), idle \(.idle.cpu_ms_per_s | round) ms/s, \(.per_envoy.cpu_us_per_update | round) µs of CPU per update per Envoy",
    "etcd members together: idle \(.etcd.idle_cpu_ms_per_s | round) ms/s, \(.etcd.updates_cpu_seconds * 100 | round / 100) s of CPU over the updates; the load tool: \(.loadgen.updates_cpu_seconds * 100 | round / 100) s"' "$OUT/result.json"
  read -r ring moved deaths revived watches starved < <(calm_counts)
  echo "the cluster under load: $((ring - ring0)) ring changes, $((moved - moved0)) streams moved by a rebalance, $((deaths - deaths0)) deaths declared by gossip ($((revived - revived0)) revived within --ring-damping), $((watches - watches0)) etcd watches restarted, $((starved - starved0)) starvations of the replicas' own"
  # The cuts over the run, by cause: those that are not 0.
  cut_list=$(join -a 2 -e 0 -o 0,1.2,2.2 <(printf '%s\n' "$cuts0") <(cuts) | awk '$3 - $2 > 0 { printf "%s%s %d", sep, $1, $3 - $2; sep = ", " }')
  echo "streams refused or cut over the run, by cause: ${cut_list:-none}"
  read -r puts txns props keys db < <(etcd_counts)
  secs=$(($(date +%s) - start))
  echo "etcd over the run ($secs s, the fixture, the sync, the idle measure and the updates): $((puts - puts0)) puts in $((txns - txns0)) transactions, $((props - props0)) proposals committed ($(((props - props0) / secs)) a second); $keys keys, $((db / 1048576)) MiB in use"
  down
}

run
if ((SINGLE_STREAMS == 0)); then
  exit 0
fi
cluster_out=$OUT cluster_replicas=$REPLICAS
OUT=$cluster_out/one-replica REPLICAS=1 STREAMS=$SINGLE_STREAMS OPEN_RATE=$SINGLE_OPEN_RATE
mkdir -p "$OUT"
echo
echo "the same shape on one replica, $STREAMS Envoys:"
run
# The cluster beside one replica: per Envoy, memory (the replicas' RSS
# after the sync over the Envoys) and CPU per update, and their ratios.
jq -rn --slurpfile c "$cluster_out/result.json" --slurpfile o "$OUT/result.json" --arg n "$cluster_replicas" '
  ($c[0].per_envoy.rss_bytes / 1024) as $cm | ($o[0].per_envoy.rss_bytes / 1024) as $om |
  $c[0].per_envoy.cpu_us_per_update as $cc | $o[0].per_envoy.cpu_us_per_update as $oc |
  "\n\($n) replicas (\($c[0].streams) Envoys) beside one (\($o[0].streams)): memory per Envoy \($cm | round) KiB vs \($om | round) KiB (\($cm / $om * 100 | round / 100)x), CPU per update per Envoy \($cc | round) µs vs \($oc | round) µs (\($cc / $oc * 100 | round / 100)x); the target is at most 1.3x each"'
