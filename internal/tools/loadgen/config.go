package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Config configures Run. DefaultConfig fills every field but Target and
// XDSAddr.
type Config struct {
	// Target receives the scenario's writes. Required.
	Target Target
	// TargetName names the target in the result ("legation", "gcp").
	TargetName string
	// XDSAddr is the server's ADS address, host:port, or several
	// separated by commas: connection i dials the (i mod n)th, so that
	// clients spread over the replicas of a cluster. Required.
	XDSAddr string
	// MetricsURL is the server's Prometheus /metrics, or several
	// separated by commas (the replicas of a cluster), whose figures
	// are added up. Empty: no server CPU and RSS in the result.
	MetricsURL string
	// EtcdMetricsURL is the Prometheus /metrics of an etcd member running
	// as a process of its own, or several separated by commas (added up),
	// so that the result gives etcd's CPU beside the server's. Empty: not read (a dev-mode replica's embedded etcd is
	// part of the server's figures).
	EtcdMetricsURL string

	// Delta makes the clients use delta ADS; false: state of the world.
	Delta bool
	// Streams is the number of simulated Envoys, one ADS stream each.
	Streams int
	// Conns is the number of gRPC connections the streams share round
	// robin. Zero: one connection per stream.
	Conns int
	// Processes spreads the streams and connections over that many
	// worker processes, each started by StartWorker, so that a fleet of
	// more connections than one process may open can be simulated. 1:
	// every client in this process.
	Processes int
	// StartWorker starts a worker process of the load tool serving
	// ServeWorker on its stdin and stdout, and returns them as one conn,
	// whose Close ends the worker and waits for it. Required with
	// Processes above 1.
	StartWorker func(ctx context.Context) (io.ReadWriteCloser, error)
	// KeepaliveTime is how long a connection waits without activity
	// before it sends an HTTP/2 ping, and KeepaliveTimeout how long it
	// then waits for the answer before it closes: by default those of
	// the bootstraps in deploy/envoy (Envoy's connection_keepalive), so
	// that the replica answers the pings a real fleet sends. Zero
	// KeepaliveTime: no pings.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// TCPKeepalive is how long a connection is idle before the client's
	// kernel sends the first TCP keepalive probe, then one every
	// tcpKeepaliveInterval, tcpKeepaliveProbes in all, as the bootstraps
	// in deploy/envoy set (tcp_keepalive). Zero, the default: the
	// kernel's defaults (the first probe after two hours), as grpc-go's
	// dialer. The probes cost the replica's process nothing (its kernel
	// answers them), but on loopback, where the load tool runs, the
	// probes of connections that went idle together (after a push) come
	// in one burst, which beyond net.core.netdev_max_backlog (1000
	// packets by default) are dropped: at 10,000 connections, enough to
	// time some out.
	TCPKeepalive time.Duration
	// OpenRate is the streams opened per second at the start. Zero: all
	// at once.
	OpenRate float64
	// NackRatio is the fraction of responses a synced client NACKs, in
	// [0, 1).
	NackRatio float64

	// Clusters and Endpoints are the fixture: that many EDS clusters of
	// that many endpoints each.
	Clusters, Endpoints int
	// Listeners is the listeners of the fixture, each with its route
	// configuration; with some, clients also subscribe to LDS (wildcard)
	// and RDS. Zero: CDS and EDS only.
	Listeners int
	// Updates is the number of updates, each changing the endpoints of one
	// cluster, Interval apart at least (the next one waits for every
	// client to have the last one, or for UpdateTimeout).
	Updates  int
	Interval time.Duration
	// Idle is how long the server's CPU is measured with every client
	// synced and nothing changing. Zero: not measured.
	Idle time.Duration

	// SyncTimeout bounds the wait for every client to hold the fixture;
	// UpdateTimeout the wait for every client to receive one update.
	SyncTimeout, UpdateTimeout time.Duration
	// BackoffBase and BackoffMax bound the reconnect backoff.
	BackoffBase, BackoffMax time.Duration

	// NodePrefix is the clients' node cluster, and the prefix of their
	// node ids (NodePrefix-00042).
	NodePrefix string
	// Seed seeds the clients' random NACKs.
	Seed uint64
	// Resume makes a reconnecting client present what it holds, as Envoy
	// does: SotW the versions it ACKed (version_info) in a first request
	// of each type it holds, delta its resources' versions
	// (initial_resource_versions); it asks at once for every type and
	// name it holds. False: a new stream starts afresh.
	Resume bool
	// Recorder, when not nil, gets each client stream's start and end and
	// every response received (xds-loadgen --record). Nil: nothing is
	// recorded, at no cost.
	Recorder Recorder
	// During, when not nil, runs once every client holds the fixture
	// (after the idle measure, before the updates) while the clients go
	// on: a chaos run injects its faults and writes its own changes
	// meanwhile. Run fails with its error.
	During func(ctx context.Context) error
	// Progress gets a progress line every ProgressEvery. Nil: none.
	Progress      io.Writer
	ProgressEvery time.Duration
}

// minKeepaliveTime is the shortest ping interval grpc-go's client
// keeps; it raises a shorter one to this.
const minKeepaliveTime = 10 * time.Second

// DefaultConfig returns the defaults of xds-loadgen's flags.
func DefaultConfig() Config {
	return Config{
		TargetName: "legation",
		Streams:    100,
		Conns:      0, // one per stream
		Processes:  1,
		// deploy/envoy's connection_keepalive {interval: 300s, timeout: 20s}
		KeepaliveTime:    5 * time.Minute,
		KeepaliveTimeout: 20 * time.Second,
		OpenRate:         1000, // the replica's default --stream-rate
		Clusters:         200,  // the fixture of the figures in docs/operations/performance.md
		Endpoints:        20,
		Listeners:        4, // LDS and RDS too, as an Envoy with a listener config
		Updates:          10,
		Interval:         time.Second,
		Idle:             10 * time.Second,
		SyncTimeout:      5 * time.Minute,
		UpdateTimeout:    time.Minute,
		BackoffBase:      500 * time.Millisecond, // Envoy's default base interval
		BackoffMax:       10 * time.Second,
		NodePrefix:       "xds-loadgen",
		Seed:             1,
		ProgressEvery:    2 * time.Second,
	}
}

// Validate checks the fields against each other; errors name the flag.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	c.validateClients(add)
	c.validateFixture(add)
	c.validateTiming(add)
	if c.NodePrefix == "" {
		add("--node-prefix: must not be empty")
	}
	if c.Progress != nil && c.ProgressEvery <= 0 {
		add("progress every %s: must be positive", c.ProgressEvery)
	}
	return errors.Join(errs...)
}

// validateClients checks the target, the addresses and the streams.
func (c *Config) validateClients(add func(format string, a ...any)) {
	if c.Target == nil {
		add("loadgen: no target")
	}
	if c.XDSAddr == "" {
		add("--xds-addr: required")
	}
	for _, a := range c.addrs() {
		if _, _, err := net.SplitHostPort(a); err != nil {
			add("--xds-addr %q: %v", a, err)
		}
	}
	if c.Streams < 1 || c.Streams > 1_000_000 {
		add("--streams %d: must be in [1, 1000000]", c.Streams)
	}
	if c.Conns < 0 || c.Conns > c.Streams {
		add("--conns %d: must be in [0, --streams] (0: one per stream)", c.Conns)
	}
	c.validateProcesses(add)
	if c.KeepaliveTime != 0 && c.KeepaliveTime < minKeepaliveTime {
		add("--keepalive-time %s: must be 0 (no pings) or at least %s (grpc-go's least)", c.KeepaliveTime, minKeepaliveTime)
	}
	if c.TCPKeepalive < 0 || c.TCPKeepalive%time.Second != 0 {
		add("--tcp-keepalive %s: must be whole seconds, 0 for the kernel's default", c.TCPKeepalive)
	}
	if c.KeepaliveTime > 0 && c.KeepaliveTimeout <= 0 {
		add("--keepalive-timeout %s: must be above 0 with --keepalive-time", c.KeepaliveTimeout)
	}
	if !(c.OpenRate >= 0) {
		add("--open-rate %v: must be 0 (all at once) or positive", c.OpenRate)
	}
	if !(c.NackRatio >= 0 && c.NackRatio < 1) {
		add("--nack-ratio %v: must be in [0, 1)", c.NackRatio)
	}
}

// validateProcesses checks the worker processes: no more than the
// streams, and nothing that must stay in one process.
func (c *Config) validateProcesses(add func(format string, a ...any)) {
	switch {
	case c.Processes < 1 || c.Processes > c.Streams:
		add("--processes %d: must be in [1, --streams]", c.Processes)
	case c.Processes == 1:
	case c.StartWorker == nil:
		add("loadgen: --processes %d and no way to start a worker", c.Processes)
	case c.Recorder != nil:
		add("--record: only with --processes 1 (the recording is one process's file)")
	}
}

// validateFixture checks the fixture's size and the number of updates.
func (c *Config) validateFixture(add func(format string, a ...any)) {
	if c.Clusters < 1 || c.Clusters > 99999 {
		add("--clusters %d: must be in [1, 99999]", c.Clusters)
	}
	if c.Endpoints < 1 || c.Endpoints > 10000 {
		add("--endpoints %d: must be in [1, 10000]", c.Endpoints)
	}
	if c.Listeners < 0 || c.Listeners > 10000 {
		add("--listeners %d: must be in [0, 10000]", c.Listeners)
	}
	if c.Updates < 0 || c.Updates > 50000 {
		add("--updates %d: must be in [0, 50000]", c.Updates)
	}
}

// validateTiming checks the durations: the interval, the idle measure,
// the timeouts and the reconnect backoff.
func (c *Config) validateTiming(add func(format string, a ...any)) {
	if c.Interval < 0 {
		add("--interval %s: must not be negative", c.Interval)
	}
	if c.Idle < 0 {
		add("--idle %s: must not be negative", c.Idle)
	}
	if c.SyncTimeout <= 0 {
		add("--sync-timeout %s: must be positive", c.SyncTimeout)
	}
	if c.UpdateTimeout <= 0 {
		add("--update-timeout %s: must be positive", c.UpdateTimeout)
	}
	switch {
	case c.BackoffBase <= 0:
		add("--backoff-base %s: must be positive", c.BackoffBase)
	case c.BackoffMax < c.BackoffBase:
		add("--backoff-max %s: must be at least --backoff-base %s", c.BackoffMax, c.BackoffBase)
	}
}

// addrs is XDSAddr split at its commas.
func (c *Config) addrs() []string {
	if c.XDSAddr == "" {
		return nil
	}
	as := strings.Split(c.XDSAddr, ",")
	for i := range as {
		as[i] = strings.TrimSpace(as[i])
	}
	return as
}
