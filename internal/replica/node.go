package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/legation-io/legation/internal/cluster/canary"
	"github.com/legation-io/legation/internal/cluster/lrs"
	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/replica/quietgc"
	"github.com/legation-io/legation/internal/security/access"
	"github.com/legation-io/legation/internal/security/authz"
	"github.com/legation-io/legation/internal/security/tlsfiles"
	"github.com/legation-io/legation/internal/state/awake"
	"github.com/legation-io/legation/internal/state/lease"
	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/state/xdstp"
	"github.com/legation-io/legation/internal/tracing"
	"github.com/legation-io/legation/internal/xds/delta"
	"github.com/legation-io/legation/internal/xds/limits"
	"github.com/legation-io/legation/internal/xds/sotw"
)

// Node is one xds-node replica: every part built by New, run by Run.
// XDSAddr, HTTPAddr and the HTTP handlers may be used from any goroutine.
//
// Its parts are grouped by what they are for, each group built by one
// phase of New (listen, buildState, buildAccess, buildCluster, buildXDS,
// buildServers). The groups are embedded: a part is n.view, not
// n.stateParts.view.
type Node struct {
	cfg Config
	log *slog.Logger
	reg prometheus.Registerer
	// clock is the process's awake clock (built first, run with the
	// parts): the liveness detectors measure their silences on it.
	clock *awake.Clock

	listeners
	stateParts
	accessParts
	clusterParts
	xdsParts
	servers
	lifecycle
}

// listeners are the replica's bound listeners (listen.go).
type listeners struct {
	xdsLis net.Listener
	// xdsConns is xdsLis, tracking its connections for the drain.
	xdsConns *connTracker
	httpLis  net.Listener
	// httpConns bounds httpLis's connections (httpconns.go).
	httpConns *httpConns
	// probeLis serves /healthz and /readyz alone (--probe-addr,
	// probe.go); nil without it.
	probeLis net.Listener
}

// stateParts read and write etcd (build_state.go).
type stateParts struct {
	// devEtcdAddr is the client address of the embedded etcd (port 0
	// resolved), which client points at; empty unless dev mode.
	devEtcdAddr string
	client      *clientv3.Client
	view        *view.View
	rollouts    *rollout.Watcher
	authorities xdstp.Authorities // --authority
	canary      *canary.Controller
	leases      *lease.Tracker
	status      *status.Writer
	csds        *status.CSDS
}

// accessParts decide who may do what (access.go).
type accessParts struct {
	// tls is the replica's certificate and client CA, nil without TLS;
	// rules the authorization rules, nil without mTLS.
	tls        *tlsfiles.Files
	rules      *authz.Watcher
	guard      *access.Guard
	replicaIDs []authz.Pattern
}

// clusterParts place this replica among the others (build_cluster.go).
type clusterParts struct {
	cluster *shard.Agent
	relay   *relay.Relay
	// rebalancing is set while a rebalance after a membership change
	// runs, and ringChanged is when one last began or ended (Unix
	// nanoseconds): shedLoop waits for the ring to settle.
	rebalancing atomic.Bool
	ringChanged atomic.Int64
	// served counts the xDS streams served here (not relayed away): the
	// streams this replica is home to, for the fair share's estimate.
	served atomic.Int64
}

// xdsParts serve the xDS protocols and bound their streams
// (build_xds.go, limits.go).
type xdsParts struct {
	sotw   *sotw.Server
	delta  *delta.Server
	lrs    *lrs.Server
	limits *limits.Limits
	// pushes makes the push spans; nil with traces off.
	pushes *tracing.Pushes
	// quietGC collects between pushes; nil unless --gc-between-pushes.
	quietGC *quietgc.Collector
}

// servers are the gRPC and HTTP servers on the listeners (grpc.go,
// http.go, probe.go).
type servers struct {
	grpcSrv *grpc.Server
	health  *health.Server
	httpSrv *http.Server
	// probeSrv serves probeLis; nil without --probe-addr.
	probeSrv *http.Server
}

// lifecycle is where the replica is between New and the end of Run
// (run.go, readiness.go).
type lifecycle struct {
	started  atomic.Bool // set by the first Run or Close
	stopping atomic.Bool // set when Run's ctx ends: no longer ready
	// readyChanged tells the cluster agent that readiness changed
	// (watchReadiness sends, without blocking), so that it does not poll.
	readyChanged chan struct{}
	// readinessChecks counts watchReadiness's reads of readiness (tests).
	readinessChecks atomic.Uint64
	// devEtcdUp is set once the embedded etcd serves (dev mode), for
	// readiness's reason.
	devEtcdUp atomic.Bool
}

// New checks cfg, binds the xDS and HTTP listeners and builds every part
// of the replica: the etcd client (which connects on first use), the view,
// the lease tracker, the status writer and CSDS, the cluster agent, the
// relay, the SotW, delta and LRS servers, the gRPC server with its
// services and the HTTP mux. It does no other I/O but reading the etcd certificate
// files and --gossip-key-file to check them, and authenticating to etcd
// when EtcdSecurity has a username; in dev mode it picks the embedded
// etcd's port when --dev-etcd-addr's is 0. Call Run, or Close if Run will
// not be called.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.GossipKeyFile != "" {
		// Checked now, so that a bad file stops the replica at start
		// instead of leaving its agent retrying to join.
		if _, err := shard.ReadKeyFile(cfg.GossipKeyFile); err != nil {
			return nil, fmt.Errorf("node: --gossip-key-file: %w", err)
		}
	}
	n, gatherer := newNode(cfg)
	if err := n.listen(); err != nil {
		return nil, err
	}
	if err := n.build(gatherer); err != nil {
		n.release() //nolint:errcheck // the build error is the one to report
		return nil, err
	}
	return n, nil
}

// newNode returns a Node of cfg with its logger and registry, and the
// gatherer /metrics serves.
func newNode(cfg Config) (*Node, prometheus.Gatherer) {
	n := &Node{cfg: cfg, log: cfg.Logger, reg: cfg.Registerer}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	gatherer := cfg.Gatherer
	if n.reg == nil {
		r := prometheus.NewRegistry()
		n.reg = r
		if gatherer == nil {
			gatherer = r
		}
	}
	if gatherer == nil {
		gatherer = n.reg.(prometheus.Gatherer) // checked by Validate
	}
	return n, gatherer
}

// build builds the parts of n once its listeners are bound, phase by
// phase. What it built that holds resources (the etcd client) is in n,
// for release, even on error.
func (n *Node) build(gatherer prometheus.Gatherer) error {
	if err := newMetrics(n.reg, n.ready); err != nil {
		return err
	}
	if err := n.xdsConns.register(n.reg); err != nil {
		return err
	}
	var err error
	// The liveness detectors measure their bounds on it (docs/concepts/design.md,
	// "Robustness").
	if n.clock, err = awake.New(awake.Config{Registerer: n.reg}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if err := n.buildState(); err != nil {
		return err
	}
	if err := n.buildAccess(); err != nil {
		return err
	}
	n.readyChanged = make(chan struct{}, 1)
	if n.cluster, err = shard.NewAgent(n.agentConfig()); err != nil {
		return fmt.Errorf("node: cluster membership (--gossip-addr, --advertise-addr, --join, --name): %w", err)
	}
	if err := n.buildXDS(); err != nil {
		return err
	}
	if err := n.buildRelay(); err != nil {
		return err
	}
	if err := n.buildLimits(); err != nil {
		return err
	}
	if err := n.buildGRPC(); err != nil {
		return err
	}
	if err := n.buildHTTP(gatherer); err != nil {
		return err
	}
	n.buildProbe()
	return nil
}

// XDSAddr is the bound address of the gRPC listener.
func (n *Node) XDSAddr() string { return n.xdsLis.Addr().String() }

// HTTPAddr is the bound address of the HTTP listener.
func (n *Node) HTTPAddr() string { return n.httpLis.Addr().String() }

// Close releases the listeners and the etcd client of a Node whose Run was
// not called. After Run has started it does nothing: Run releases
// everything when its ctx ends. It is safe to call more than once.
func (n *Node) Close() error {
	if !n.started.CompareAndSwap(false, true) {
		return nil
	}
	return n.release()
}

// release closes the listeners and the etcd client.
func (n *Node) release() error {
	err := errors.Join(n.xdsLis.Close(), n.httpLis.Close())
	if n.probeLis != nil {
		err = errors.Join(err, n.probeLis.Close())
	}
	if n.client != nil {
		if cerr := n.client.Close(); cerr != nil && !errors.Is(cerr, context.Canceled) {
			err = errors.Join(err, cerr)
		}
	}
	return err
}
