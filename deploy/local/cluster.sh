#!/usr/bin/env bash
# cluster.sh: a local Legation cluster on loopback addresses. A real etcd
# cluster (one process per member), xds-node replicas on it, and HAProxy in
# front of them, as in production but on one machine. Used by people and by
# the tests (internal/clustertest). See deploy/local/README.md.
#
# Usage: cluster.sh VERB [ARG]     (cluster.sh help prints this)
#
#   up                start what is not running (building missing binaries
#                     first) and wait until each part is healthy
#   down              stop everything (SIGTERM, then SIGKILL after GRACE);
#                     DIR stays for inspection
#   status            each process, its pid and whether it runs and answers;
#                     exit 3 if one does not run
#   kill-replica I    kill -9 replica-I
#   stop-replica I    SIGTERM replica-I and wait until it has exited
#   start-replica I   start replica-I and wait until its /readyz is 200
#   add-replica       start replica-(REPLICAS+1), add it to HAProxy (reload)
#   kill-etcd I       kill -9 etcd-I
#   stop-etcd I       SIGTERM etcd-I and wait until it has exited
#   start-etcd I      start etcd-I on its data dir and wait until healthy
#   freeze-etcd I     SIGSTOP etcd-I (it hangs: no answer, no exit)
#   thaw-etcd I       SIGCONT etcd-I
#
# Members and replicas are numbered from 1.
#
# Settings (environment variables):
#
#   DIR           state directory: etcd data dirs, logs, pid files, the
#                 generated haproxy.cfg, HAProxy's admin socket, and the file
#                 env that lists every address (sourceable shell).
#                 Default: ${TMPDIR:-/tmp}/legation-cluster
#   BIN           where the etcd and xds-node binaries are; a missing one is
#                 built with `go build` (etcd at the version go.mod pins),
#                 an existing one is used as it is.
#                 Default: bin/ at the repository root
#   ETCD_MEMBERS  number of etcd members, 1 to 10. Default: 3
#   REPLICAS      number of xds-node replicas, 1 to 200. Default: 3
#   NET           the 127.0.N. prefix of every address. Default: 127.0.10.
#                 etcd member I:   ${NET}$((10+I)), client 2379, peer 2380
#                 replica I:       ${NET}$((20+I)), xDS 18000, HTTP 18001,
#                                  gossip 7946
#                 HAProxy:         ${NET}1, xDS 18000, HTTP 18001 (TCP mode)
#   TIMEOUT       seconds to wait for a process to come up or go. Default: 30
#   GRACE         seconds between SIGTERM and SIGKILL. Default: 15
#   HAPROXY       the haproxy binary. Default: haproxy on PATH, else
#                 /usr/sbin/haproxy
#   ETCD_FLAGS      extra etcd flags, split on spaces. Default: none
#   XDS_NODE_FLAGS  extra xds-node flags, split on spaces. Default: none
#
# `up` saves NET, ETCD_MEMBERS and REPLICAS in DIR/env, and later verbs read
# them from there (add-replica adds one to REPLICAS): giving another value
# for one of them with an existing DIR is an error (the etcd data in DIR is
# bound to its addresses), except for down and status, which go by DIR/env.
# BIN may change between calls. LEGATION_* variables in the environment
# reach the replicas for the flags this script does not set; no ETCD_*
# variable reaches etcd (it would take them for flags).
set -euo pipefail

PROG=cluster.sh
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

die() {
	printf '%s: %s\n' "$PROG" "$*" >&2
	exit 1
}

note() {
	printf '%s: %s\n' "$PROG" "$*" >&2
}

# die_log WHAT LOG: fail saying what went wrong, with the end of LOG.
die_log() {
	local what=$1 log=$2
	{
		printf '%s: %s\n' "$PROG" "$what"
		if [ -f "$log" ]; then
			printf '%s: read %s; its last lines:\n' "$PROG" "$log"
			tail -n 30 "$log" | sed 's/^/    /'
		fi
	} >&2
	exit 1
}

# ---------------------------------------------------------------- settings

# What the caller set explicitly, to check against what DIR/env saved.
given_net=${NET-}
given_members=${ETCD_MEMBERS-}
given_replicas=${REPLICAS-}

DIR=${DIR:-${TMPDIR:-/tmp}/legation-cluster}
TIMEOUT=${TIMEOUT:-30}
GRACE=${GRACE:-15}
ETCD_FLAGS=${ETCD_FLAGS-}
XDS_NODE_FLAGS=${XDS_NODE_FLAGS-}
HAPROXY=${HAPROXY:-$(command -v haproxy || echo /usr/sbin/haproxy)}

# Ports, fixed: each process has an address of its own.
ETCD_CLIENT_PORT=2379
ETCD_PEER_PORT=2380
XDS_PORT=18000
HTTP_PORT=18001
GOSSIP_PORT=7946

# saved KEY: the value of KEY in DIR/env (written by write_env), or nothing.
saved() {
	[ -f "$DIR/env" ] || return 0
	sed -n "s/^$1='\\(.*\\)'\$/\\1/p" "$DIR/env" | sed "s/'\\\\''/'/g" | tail -n 1
}

# setting NAME GIVEN DEFAULT: the value of a setting bound to DIR's data.
setting() {
	local name=$1 given=$2 def=$3 old
	old=$(saved "$name")
	if [ -n "$old" ]; then
		if [ -n "$given" ] && [ "$given" != "$old" ]; then
			case $VERB in
			# Stopping or looking never refuses: it goes by what DIR holds.
			down | status) note "$DIR holds a cluster with $name=$old: ignoring $name=$given" ;;
			*) die "$DIR holds a cluster with $name=$old, not $given: use another DIR, or run down and remove $DIR" ;;
			esac
		fi
		printf '%s' "$old"
	else
		printf '%s' "${given:-$def}"
	fi
}

load_settings() {
	# One spelling of DIR: its paths identify HAProxy's processes.
	if [ -d "$DIR" ]; then DIR=$(cd "$DIR" && pwd -P); fi
	case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac
	[[ ! $DIR =~ [[:space:]] ]] || die "DIR=$DIR: a path without spaces, please (HAProxy's config holds it)"
	NET=$(setting NET "$given_net" 127.0.10.)
	ETCD_MEMBERS=$(setting ETCD_MEMBERS "$given_members" 3)
	REPLICAS=$(setting REPLICAS "$given_replicas" 3)
	BIN=${BIN:-$(saved BIN)}
	BIN=${BIN:-$REPO/bin}
	case $BIN in /*) ;; *) BIN=$PWD/$BIN ;; esac

	[[ $NET =~ ^127\.([0-9]{1,3})\.([0-9]{1,3})\.$ ]] ||
		die "NET=$NET: want a prefix like 127.0.10. (with the trailing dot)"
	((BASH_REMATCH[1] <= 255 && BASH_REMATCH[2] <= 255)) || die "NET=$NET: not an IPv4 prefix"
	check_int ETCD_MEMBERS "$ETCD_MEMBERS" 1 10
	check_int REPLICAS "$REPLICAS" 1 200
	check_int TIMEOUT "$TIMEOUT" 1 86400
	check_int GRACE "$GRACE" 0 86400

	LB_IP=${NET}1
	LB_XDS_ADDR=$LB_IP:$XDS_PORT
	LB_HTTP_ADDR=$LB_IP:$HTTP_PORT
	LB_CONFIG=$DIR/haproxy.cfg
	LB_SOCKET=$DIR/haproxy.sock
	LB_PID_FILE=$DIR/haproxy.pid
	LB_LOG=$DIR/haproxy.log
	local i endpoints=() peers=()
	for ((i = 1; i <= ETCD_MEMBERS; i++)); do
		endpoints+=("$(etcd_ip "$i"):$ETCD_CLIENT_PORT")
		peers+=("etcd-$i=http://$(etcd_ip "$i"):$ETCD_PEER_PORT")
	done
	ETCD_ENDPOINTS=$(
		IFS=,
		echo "${endpoints[*]}"
	)
	INITIAL_CLUSTER=$(
		IFS=,
		echo "${peers[*]}"
	)
}

# check_int NAME VALUE MIN MAX: VALUE is a whole number from MIN to MAX.
check_int() {
	[[ $2 =~ ^(0|[1-9][0-9]{0,5})$ ]] || die "$1=$2: want a number from $3 to $4"
	(($2 >= $3 && $2 <= $4)) || die "$1=$2: want a number from $3 to $4"
}

etcd_ip() { echo "${NET}$((10 + $1))"; }
replica_ip() { echo "${NET}$((20 + $1))"; }

# quote VALUE: VALUE in single quotes, for a sourceable file.
quote() {
	local s=${1//\'/\'\\\'\'}
	printf "'%s'" "$s"
}

# write_env writes DIR/env: the settings and every address, one KEY='VALUE'
# a line. `set -a; . DIR/env; set +a` exports them, LEGATION_ETCD_ENDPOINTS
# included, so xdsadmin then talks to this cluster.
write_env() {
	local i tmp=$DIR/env.tmp
	{
		echo "# Written by deploy/local/cluster.sh; KEY='VALUE' lines, sourceable."
		echo "DIR=$(quote "$DIR")"
		echo "BIN=$(quote "$BIN")"
		echo "NET=$(quote "$NET")"
		echo "ETCD_MEMBERS='$ETCD_MEMBERS'"
		echo "REPLICAS='$REPLICAS'"
		echo "ETCD_ENDPOINTS='$ETCD_ENDPOINTS'"
		echo "LEGATION_ETCD_ENDPOINTS='$ETCD_ENDPOINTS'"
		echo "LB_XDS_ADDR='$LB_XDS_ADDR'"
		echo "LB_HTTP_ADDR='$LB_HTTP_ADDR'"
		echo "LB_STATS_SOCKET=$(quote "$LB_SOCKET")"
		echo "LB_CONFIG=$(quote "$LB_CONFIG")"
		echo "LB_PID_FILE=$(quote "$LB_PID_FILE")"
		echo "LB_LOG=$(quote "$LB_LOG")"
		for ((i = 1; i <= ETCD_MEMBERS; i++)); do
			echo "ETCD_${i}_NAME='etcd-$i'"
			echo "ETCD_${i}_CLIENT_ADDR='$(etcd_ip "$i"):$ETCD_CLIENT_PORT'"
			echo "ETCD_${i}_PEER_ADDR='$(etcd_ip "$i"):$ETCD_PEER_PORT'"
			echo "ETCD_${i}_DATA_DIR=$(quote "$DIR/etcd-$i.data")"
			echo "ETCD_${i}_LOG=$(quote "$DIR/etcd-$i.log")"
			echo "ETCD_${i}_PID_FILE=$(quote "$DIR/etcd-$i.pid")"
		done
		for ((i = 1; i <= REPLICAS; i++)); do
			echo "REPLICA_${i}_NAME='replica-$i'"
			echo "REPLICA_${i}_XDS_ADDR='$(replica_ip "$i"):$XDS_PORT'"
			echo "REPLICA_${i}_HTTP_ADDR='$(replica_ip "$i"):$HTTP_PORT'"
			echo "REPLICA_${i}_GOSSIP_ADDR='$(replica_ip "$i"):$GOSSIP_PORT'"
			echo "REPLICA_${i}_LOG=$(quote "$DIR/replica-$i.log")"
			echo "REPLICA_${i}_PID_FILE=$(quote "$DIR/replica-$i.pid")"
		done
	} >"$tmp"
	mv "$tmp" "$DIR/env"
}

need_cluster() {
	[ -f "$DIR/env" ] || die "no cluster in $DIR (no $DIR/env): run up first"
}

# ---------------------------------------------------------------- processes

# pid_of NAME: the pid in DIR/NAME.pid, or nothing.
pid_of() {
	local f=$DIR/$1.pid pid
	[ -f "$f" ] || return 0
	read -r pid <"$f" || true
	[[ ${pid:-} =~ ^[0-9]+$ ]] && echo "$pid"
	return 0
}

# proc_state PID MARK: "running", "frozen" or "gone". A process counts only
# if its command line holds MARK (one of its unique listen addresses), so a
# pid reused by another process after ours died is not taken for ours, and
# a zombie is gone.
proc_state() {
	local pid=$1 mark=$2 state
	if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
		echo gone
		return
	fi
	if [ -r "/proc/$pid/cmdline" ]; then
		{ printf ' ' && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline"; } | grep -qF -- "$mark" || {
			echo gone
			return
		}
		# /proc/PID/stat: "pid (comm) S ...", comm may hold spaces.
		state=$(sed 's/^.*) \([A-Za-z]\).*$/\1/' "/proc/$pid/stat" 2>/dev/null || echo Z)
		case $state in
		Z | X) echo gone ;;
		T | t) echo frozen ;;
		*) echo running ;;
		esac
		return
	fi
	echo running
}

# mark_of NAME: a word of NAME's command line that no other process has: a
# listen address or a path in DIR (spaces around it: a whole word).
mark_of() {
	case $1 in
	etcd-*) echo " http://$(etcd_ip "${1#etcd-}"):$ETCD_CLIENT_PORT " ;;
	replica-*) echo " $(replica_ip "${1#replica-}"):$HTTP_PORT " ;;
	haproxy) echo " $LB_CONFIG " ;;
	esac
}

state_of() { proc_state "$(pid_of "$1")" "$(mark_of "$1")"; }

# spawn NAME CMD...: start CMD in its own session, detached from this
# script (it outlives it), output appended to DIR/NAME.log, pid in
# DIR/NAME.pid.
spawn() {
	local name=$1 log=$DIR/$1.log
	shift
	printf '=== %s %s: %s\n' "$(date '+%F %T')" "$name" "$*" >>"$log"
	if command -v setsid >/dev/null 2>&1; then
		# This background child is not a process group leader, so setsid
		# execs in place and $! is the process itself.
		setsid "$@" </dev/null >>"$log" 2>&1 &
	else
		nohup "$@" </dev/null >>"$log" 2>&1 &
	fi
	local pid=$! deadline=$((SECONDS + TIMEOUT))
	echo "$pid" >"$DIR/$name.pid"
	# Until the child has exec'd, its command line is this script's, and
	# state_of would take it for gone.
	until exec_done "$pid" "$(mark_of "$name")"; do
		((SECONDS < deadline)) || die_log "$name (pid $pid) did not start within ${TIMEOUT}s" "$log"
		sleep 0.01
	done
}

# exec_done PID MARK: whether PID has ended, or its command line holds MARK.
exec_done() {
	local pid=$1 mark=$2
	[ -r "/proc/$pid/cmdline" ] || return 0 # ended, or no /proc to tell
	case $(sed 's/^.*) \([A-Za-z]\).*$/\1/' "/proc/$pid/stat" 2>/dev/null || echo Z) in
	Z | X) return 0 ;;
	esac
	{ printf ' ' && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline"; } | grep -qF -- "$mark"
}

# http_code ADDR PATH: the HTTP status of GET http://ADDR/PATH, 000 when
# there is no answer within 2s.
http_code() {
	local addr=$1 path=$2 line
	if command -v curl >/dev/null 2>&1; then
		curl -s -o /dev/null -m 2 -w '%{http_code}' "http://$addr$path" || true
		return
	fi
	# Without curl: HTTP/1.0 by hand over bash's /dev/tcp.
	# shellcheck disable=SC2016 # expanded by the inner bash
	line=$(timeout 2 bash -c '
		exec 3<>"/dev/tcp/${1%:*}/${1##*:}" || exit 1
		printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$2" "$1" >&3
		IFS= read -r line <&3 && printf "%s" "$line"' _ "$addr" "$path" 2>/dev/null || true)
	line=${line#HTTP/* }
	printf '%s' "${line:0:3}"
	[ -n "$line" ] || printf '000'
}

# wait_http NAME ADDR PATH: wait until GET ADDR/PATH is 200, failing if
# NAME's process exits first or TIMEOUT passes.
wait_http() {
	local name=$1 addr=$2 path=$3 code=000 deadline=$((SECONDS + TIMEOUT)) st
	while :; do
		code=$(http_code "$addr" "$path")
		[ "$code" = 200 ] && return 0
		st=$(state_of "$name")
		if [ "$st" = gone ]; then
			die_log "$name exited before http://$addr$path answered 200" "$DIR/$name.log"
		fi
		if ((SECONDS >= deadline)); then
			die_log "$name (pid $(pid_of "$name"), $st): http://$addr$path not 200 after ${TIMEOUT}s (last: $code)" "$DIR/$name.log"
		fi
		sleep 0.1
	done
}

# wait_gone NAME: wait up to SECS for NAME's process to end; status 1 if it
# has not.
wait_gone() {
	local name=$1 secs=$2 deadline
	deadline=$((SECONDS + secs))
	while [ "$(state_of "$name")" != gone ]; do
		((SECONDS < deadline)) || return 1
		sleep 0.1
	done
}

# stop_procs NAME...: SIGTERM each running one (SIGCONT too, in case it is
# frozen), wait GRACE for all, then SIGKILL those left.
stop_procs() {
	local name pid left=()
	for name in "$@"; do
		[ "$(state_of "$name")" != gone ] || continue
		pid=$(pid_of "$name")
		kill -TERM "$pid" 2>/dev/null || true
		kill -CONT "$pid" 2>/dev/null || true
		left+=("$name")
	done
	for name in "${left[@]}"; do
		if ! wait_gone "$name" "$GRACE"; then
			note "$name (pid $(pid_of "$name")) still runs ${GRACE}s after SIGTERM: SIGKILL"
			kill -KILL "$(pid_of "$name")" 2>/dev/null || true
			wait_gone "$name" "$TIMEOUT" || die "$name (pid $(pid_of "$name")) survives SIGKILL"
		fi
	done
}

kill_proc() {
	local name=$1 pid
	if [ "$(state_of "$name")" = gone ]; then
		note "$name is not running"
		return 0
	fi
	pid=$(pid_of "$name")
	kill -KILL "$pid" 2>/dev/null || true
	wait_gone "$name" "$TIMEOUT" || die "$name (pid $pid) survives SIGKILL"
}

signal_proc() {
	local name=$1 sig=$2
	[ "$(state_of "$name")" != gone ] || die "$name is not running"
	kill "-$sig" "$(pid_of "$name")"
}

# ---------------------------------------------------------------- binaries

ensure_bins() {
	mkdir -p "$BIN"
	local gobin
	if [ ! -x "$BIN/etcd" ] || [ ! -x "$BIN/xds-node" ]; then
		gobin=$(command -v go) || die "$BIN lacks etcd or xds-node and there is no go command to build them"
	fi
	if [ ! -x "$BIN/etcd" ]; then
		note "building $BIN/etcd (go.etcd.io/etcd/server/v3 at the version go.mod pins)"
		(cd "$REPO" && "$gobin" build -o "$BIN/etcd" go.etcd.io/etcd/server/v3) || die "go build etcd failed"
	fi
	if [ ! -x "$BIN/xds-node" ]; then
		note "building $BIN/xds-node"
		(cd "$REPO" && "$gobin" build -o "$BIN/xds-node" ./cmd/xds-node) || die "go build ./cmd/xds-node failed"
	fi
}

# ---------------------------------------------------------------- etcd

start_etcd() {
	local i=$1 ip name=etcd-$1 v unset=()
	((i >= 1 && i <= ETCD_MEMBERS)) || die "no etcd member $i: there are $ETCD_MEMBERS"
	[ "$(state_of "$name")" = gone ] || return 0
	ip=$(etcd_ip "$i")
	# etcd takes ETCD_<FLAG> variables as flags: ETCD_MEMBERS and
	# ETCD_FLAGS are not for it, nor is anything the caller left.
	for v in $(compgen -e); do
		case $v in ETCD_*) unset+=(-u "$v") ;; esac
	done
	# Once its data dir exists etcd ignores the --initial-* flags and
	# rejoins with what the data dir holds.
	# shellcheck disable=SC2086 # ETCD_FLAGS is a list of words
	spawn "$name" env "${unset[@]}" "$BIN/etcd" \
		--name "$name" \
		--data-dir "$DIR/$name.data" \
		--listen-client-urls "http://$ip:$ETCD_CLIENT_PORT" \
		--advertise-client-urls "http://$ip:$ETCD_CLIENT_PORT" \
		--listen-peer-urls "http://$ip:$ETCD_PEER_PORT" \
		--initial-advertise-peer-urls "http://$ip:$ETCD_PEER_PORT" \
		--initial-cluster "$INITIAL_CLUSTER" \
		--initial-cluster-state new \
		--initial-cluster-token "legation-$NET" \
		$ETCD_FLAGS
}

wait_etcd() {
	wait_http "etcd-$1" "$(etcd_ip "$1"):$ETCD_CLIENT_PORT" /health
}

# ---------------------------------------------------------------- replicas

# gossip_flags: --gossip-addr and --advertise-addr for replica I. Peers
# are found through the etcd registry (no --join).
gossip_flags() {
	local ip
	ip=$(replica_ip "$1")
	printf '%s\n' --gossip-addr "$ip:$GOSSIP_PORT" --advertise-addr "$ip"
}

start_replica() {
	local i=$1 ip name=replica-$1 extra=()
	((i >= 1 && i <= REPLICAS)) || die "no replica $i: there are $REPLICAS"
	[ "$(state_of "$name")" = gone ] || return 0
	ip=$(replica_ip "$i")
	mapfile -t extra < <(gossip_flags "$i")
	# shellcheck disable=SC2086 # XDS_NODE_FLAGS is a list of words
	spawn "$name" "$BIN/xds-node" \
		--etcd-endpoints "$ETCD_ENDPOINTS" \
		--xds-addr "$ip:$XDS_PORT" \
		--http-addr "$ip:$HTTP_PORT" \
		--name "$name" \
		"${extra[@]}" \
		$XDS_NODE_FLAGS
}

wait_replica() {
	wait_http "replica-$1" "$(replica_ip "$1"):$HTTP_PORT" /readyz
}

# ---------------------------------------------------------------- HAProxy

# write_haproxy_cfg writes and checks LB_CONFIG; CFG_CHANGED says whether
# it differs from what was there.
write_haproxy_cfg() {
	local i ip tmp=$LB_CONFIG.tmp
	{
		cat <<EOF
# Generated by deploy/local/cluster.sh; regenerated by up and add-replica.
global
    stats socket $LB_SOCKET mode 600 level admin
    # No chroot and no user switch: it runs unprivileged on high ports.

defaults
    mode tcp
    # A connection refused by a dead replica is retried on another one,
    # before HAProxy's checks have marked it down.
    retries 3
    option redispatch 1
    timeout connect 1s
    # xDS streams are long-lived gRPC streams.
    timeout client 1h
    timeout server 1h
    timeout tunnel 1h
    timeout check 1s
    default-server inter 500ms fall 2 rise 1

frontend xds
    bind $LB_XDS_ADDR
    default_backend xds

frontend http
    bind $LB_HTTP_ADDR
    default_backend http

backend xds
    balance roundrobin
    option httpchk GET /readyz
EOF
		for ((i = 1; i <= REPLICAS; i++)); do
			ip=$(replica_ip "$i")
			echo "    server replica-$i $ip:$XDS_PORT check port $HTTP_PORT"
		done
		cat <<EOF

backend http
    balance roundrobin
    option httpchk GET /readyz
EOF
		for ((i = 1; i <= REPLICAS; i++)); do
			ip=$(replica_ip "$i")
			echo "    server replica-$i $ip:$HTTP_PORT check"
		done
	} >"$tmp"
	"$HAPROXY" -c -q -f "$tmp" >"$tmp.check" 2>&1 || {
		cat "$tmp.check" >&2
		die "HAProxy rejects the generated $tmp (see above)"
	}
	rm -f "$tmp.check"
	CFG_CHANGED=1
	if cmp -s "$tmp" "$LB_CONFIG"; then CFG_CHANGED=0; fi
	mv "$tmp" "$LB_CONFIG"
}

check_haproxy() {
	[ -x "$HAPROXY" ] || die "no haproxy at $HAPROXY: run make setup (apt-get install haproxy), or set HAPROXY"
}

# start_haproxy starts HAProxy as a daemon, or, when it runs and its config
# changed, reloads it: the new process takes the listeners and the old one
# (haproxy -sf) serves its open streams until they end. Old pids are kept
# in DIR/haproxy.old.pids so down stops them too.
start_haproxy() {
	local old
	check_haproxy
	write_haproxy_cfg
	if [ "$(state_of haproxy)" = gone ]; then
		printf '=== %s haproxy start\n' "$(date '+%F %T')" >>"$LB_LOG"
		"$HAPROXY" -D -p "$LB_PID_FILE" -f "$LB_CONFIG" >>"$LB_LOG" 2>&1 ||
			die_log "haproxy did not start" "$LB_LOG"
	elif ((CFG_CHANGED)); then
		printf '=== %s haproxy reload\n' "$(date '+%F %T')" >>"$LB_LOG"
		old=$(pid_of haproxy)
		echo "$old" >>"$DIR/haproxy.old.pids"
		"$HAPROXY" -D -p "$LB_PID_FILE" -f "$LB_CONFIG" -sf "$old" >>"$LB_LOG" 2>&1 ||
			die_log "haproxy did not reload" "$LB_LOG"
		[ "$(pid_of haproxy)" != "$old" ] || die_log "haproxy reload kept pid $old" "$LB_LOG"
	fi
	[ "$(state_of haproxy)" != gone ] || die_log "haproxy exited at once" "$LB_LOG"
	# Through HAProxy to a ready replica.
	wait_http haproxy "$LB_HTTP_ADDR" /readyz
}

# stop_old_haproxy stops the HAProxy processes that reloads left serving
# old streams.
stop_old_haproxy() {
	local f=$DIR/haproxy.old.pids pid mark deadline
	[ -f "$f" ] || return 0
	mark=$(mark_of haproxy)
	while read -r pid; do
		[ "$(proc_state "$pid" "$mark")" != gone ] || continue
		kill -TERM "$pid" 2>/dev/null || true
		deadline=$((SECONDS + GRACE))
		while [ "$(proc_state "$pid" "$mark")" != gone ] && ((SECONDS < deadline)); do sleep 0.1; done
		[ "$(proc_state "$pid" "$mark")" = gone ] || kill -KILL "$pid" 2>/dev/null || true
	done <"$f"
	rm -f "$f"
}

# ---------------------------------------------------------------- verbs

cmd_up() {
	local i
	check_haproxy
	ensure_bins
	write_env
	for ((i = 1; i <= ETCD_MEMBERS; i++)); do start_etcd "$i"; done
	for ((i = 1; i <= ETCD_MEMBERS; i++)); do wait_etcd "$i"; done
	for ((i = 1; i <= REPLICAS; i++)); do start_replica "$i"; done
	for ((i = 1; i <= REPLICAS; i++)); do wait_replica "$i"; done
	start_haproxy
	echo "up: xDS on $LB_XDS_ADDR, HTTP on $LB_HTTP_ADDR, etcd on $ETCD_ENDPOINTS"
	echo "addresses: $DIR/env (set -a; . $DIR/env; set +a; then xdsadmin talks to this etcd)"
}

cmd_down() {
	local i names=()
	if [ ! -f "$DIR/env" ]; then
		note "no cluster in $DIR: nothing to stop"
		return 0
	fi
	# Front to back: no client is left to drain on a replica, and no
	# replica is left waiting on etcd.
	stop_old_haproxy
	stop_procs haproxy
	for ((i = 1; i <= REPLICAS; i++)); do names+=("replica-$i"); done
	stop_procs "${names[@]}"
	# One member at a time: a leader stopped while its peers are going too
	# spends etcd's request timeout (7s) on a leadership transfer that
	# cannot succeed; with steady peers it takes a moment, or is skipped.
	for ((i = 1; i <= ETCD_MEMBERS; i++)); do stop_procs "etcd-$i"; done
	echo "down: everything stopped; logs and data stay in $DIR"
}

cmd_status() {
	local i name st pid addr code all=0
	need_cluster
	line() {
		# name, state, pid, address, health
		printf '%-12s %-8s %-8s %-22s %s\n' "$@"
	}
	line NAME STATE PID ADDRESS HEALTH
	for ((i = 1; i <= ETCD_MEMBERS; i++)); do
		name=etcd-$i addr=$(etcd_ip "$i"):$ETCD_CLIENT_PORT code=-
		st=$(state_of "$name") pid=$(pid_of "$name")
		[ "$st" != running ] || code="/health $(http_code "$addr" /health)"
		[ "$st" != gone ] || all=3
		line "$name" "$st" "${pid:--}" "$addr" "$code"
	done
	for ((i = 1; i <= REPLICAS; i++)); do
		name=replica-$i addr=$(replica_ip "$i"):$XDS_PORT code=-
		st=$(state_of "$name") pid=$(pid_of "$name")
		[ "$st" != running ] || code="/readyz $(http_code "$(replica_ip "$i"):$HTTP_PORT" /readyz)"
		[ "$st" != gone ] || all=3
		line "$name" "$st" "${pid:--}" "$addr" "$code"
	done
	st=$(state_of haproxy) pid=$(pid_of haproxy) code=-
	[ "$st" != running ] || code="/readyz via LB $(http_code "$LB_HTTP_ADDR" /readyz)"
	[ "$st" != gone ] || all=3
	line haproxy "$st" "${pid:--}" "$LB_XDS_ADDR" "$code"
	if [ "$st" = running ] && command -v socat >/dev/null 2>&1; then
		echo
		echo "HAProxy's view of the replicas (show stat):"
		echo "show stat" | socat - "UNIX-CONNECT:$LB_SOCKET" |
			awk -F, '$2 != "FRONTEND" && $2 != "BACKEND" && NR > 1 { printf "  %-6s %-12s %s\n", $1, $2, $18 }'
	fi
	return "$all"
}

# index VERB I: I, checked to be a number.
index() {
	[[ ${2:-} =~ ^[1-9][0-9]*$ ]] || die "$1: want a member or replica number (from 1), got '${2:-}'"
	echo "$2"
}

main() {
	local verb=${1:-} i
	VERB=$verb
	[ -n "$verb" ] || die "usage: $PROG up|down|status|kill-replica I|stop-replica I|start-replica I|add-replica|kill-etcd I|stop-etcd I|start-etcd I|freeze-etcd I|thaw-etcd I"
	case $verb in
	help | -h | --help)
		sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
		return 0
		;;
	esac
	# up makes DIR first, so that DIR has its one spelling (load_settings).
	if [ "$verb" = up ]; then mkdir -p "${DIR:-${TMPDIR:-/tmp}/legation-cluster}"; fi
	load_settings
	case $verb in
	up) cmd_up ;;
	down) cmd_down ;;
	status) cmd_status ;;
	kill-replica | stop-replica | start-replica | kill-etcd | stop-etcd | start-etcd | freeze-etcd | thaw-etcd)
		need_cluster
		i=$(index "$verb" "${2:-}")
		case $verb in
		*-replica) ((i <= REPLICAS)) || die "$verb $i: there are $REPLICAS replicas" ;;
		*-etcd) ((i <= ETCD_MEMBERS)) || die "$verb $i: there are $ETCD_MEMBERS etcd members" ;;
		esac
		case $verb in
		kill-replica) kill_proc "replica-$i" ;;
		stop-replica) stop_procs "replica-$i" ;;
		start-replica)
			ensure_bins
			start_replica "$i"
			wait_replica "$i"
			;;
		kill-etcd) kill_proc "etcd-$i" ;;
		stop-etcd) stop_procs "etcd-$i" ;;
		start-etcd)
			ensure_bins
			start_etcd "$i"
			wait_etcd "$i"
			;;
		freeze-etcd) signal_proc "etcd-$i" STOP ;;
		thaw-etcd) signal_proc "etcd-$i" CONT ;;
		esac
		;;
	add-replica)
		need_cluster
		((REPLICAS < 200)) || die "add-replica: 200 replicas is the most"
		ensure_bins
		REPLICAS=$((REPLICAS + 1))
		# Saved first, so that down stops it even if it fails to come up.
		write_env
		start_replica "$REPLICAS"
		wait_replica "$REPLICAS"
		start_haproxy
		echo "added replica-$REPLICAS on $(replica_ip "$REPLICAS")"
		;;
	*) die "unknown verb '$verb' (want up, down, status, kill-replica, stop-replica, start-replica, add-replica, kill-etcd, stop-etcd, start-etcd, freeze-etcd or thaw-etcd)" ;;
	esac
}

main "$@"
