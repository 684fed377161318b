package replica

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/cluster/canary"
	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/state/devetcd"
	"github.com/legation-io/legation/internal/state/lease"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/state/xdstp"
	"github.com/legation-io/legation/internal/tracing"
)

// buildState makes the parts that read and write etcd: the client, the
// view, the lease tracker, the status writer and CSDS.
func (n *Node) buildState() error {
	cfg := n.cfg
	if err := n.newEtcdClient(); err != nil {
		return err
	}
	var err error
	if n.authorities, err = xdstp.NewAuthorities(cfg.Authorities); err != nil {
		return fmt.Errorf("node: --authority: %w", err)
	}
	if n.view, err = view.New(view.Config{
		Client:     n.client,
		Prefix:     cfg.EtcdPrefix,
		Serves:     n.authorities.Serves,
		Clock:      n.clock,
		Logger:     n.log,
		Registerer: n.reg,
	}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.leases, err = lease.New(lease.Config{
		Client:     n.client,
		Prefix:     cfg.EtcdPrefix,
		Logger:     n.log,
		Registerer: n.reg,
	}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	scfg := status.Config{
		Client:           n.client,
		Prefix:           cfg.EtcdPrefix,
		Replica:          cfg.Name,
		Source:           statusSource{n},
		Generation:       n.statusGeneration,
		MaxTxnsPerSecond: cfg.StatusWriteBudget,
		Logger:           n.log,
		Registerer:       n.reg,
	}
	if cfg.Tracing.On() {
		scfg.OnNack = n.traceNack
	}
	if n.status, err = status.NewWriter(scfg); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.csds, err = status.NewCSDS(status.CSDSConfig{
		Client:      n.client,
		Prefix:      cfg.EtcdPrefix,
		MaxMatchers: cfg.MaxCSDSMatchers,
		// A CSDS stream re-checks its client is an admin whenever the
		// rules change, as xDS streams re-check their node.
		Authorize:  func(ctx context.Context) (<-chan struct{}, error) { return n.guard.AdminRecheck(ctx) },
		Logger:     n.log,
		Registerer: n.reg,
	}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return n.buildRollouts()
}

// buildRollouts makes the watcher of the running canary rollouts, whose
// sets are published once the view holds them, and the rollout
// controller, which writes as the replica through a store of its own and
// reads the nodes' status records from the CSDS cache.
func (n *Node) buildRollouts() error {
	cfg := n.cfg
	n.rollouts = rollout.NewWatcher(n.client, cfg.EtcdPrefix, func(ctx context.Context, rev int64) error {
		_, err := n.view.WaitRevision(ctx, rev)
		return err
	}, n.log)
	st, err := store.New(store.Config{Client: n.client, Prefix: cfg.EtcdPrefix, Writer: "xds-node/" + cfg.Name + " (rollout controller)"})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.canary = canary.NewController(canary.ControllerConfig{Client: n.client, Prefix: cfg.EtcdPrefix, Store: st,
		Replica: cfg.Name, Running: n.rollouts.Current, Records: n.csds.Records, Log: n.log})
	return nil
}

// newEtcdClient makes the etcd client, pointed at the embedded etcd in
// dev mode. It reads the certificate files: a bad one stops the start
// here.
func (n *Node) newEtcdClient() error {
	cfg := n.cfg
	opts := cfg.etcdOptions()
	opts.Logger = n.log
	if cfg.DevMode() {
		addr, err := devetcd.ResolvePort(cfg.DevEtcdAddr)
		if err != nil {
			return fmt.Errorf("node: --dev-etcd-addr: %w", err)
		}
		n.devEtcdAddr = addr
		opts.Endpoints = []string{addr}
	}
	ccfg, err := opts.ClientConfig()
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	ccfg.DialTimeout = cfg.DialTimeout
	// Keepalive pings find a member that stopped answering (frozen, or
	// cut off): the client then uses the others.
	ccfg.DialKeepAliveTime = 2 * time.Second
	ccfg.DialKeepAliveTimeout = 2 * time.Second
	ccfg.Logger = zap.NewNop()
	// clientv3.New does not connect (but with a username, see New): the
	// first request does, once Run started what answers it, and the view
	// retries until etcd answers.
	if n.client, err = clientv3.New(ccfg); err != nil {
		return fmt.Errorf("node: etcd client for %v: %w", opts.Endpoints, err)
	}
	return nil
}

// knownCluster says whether a node of group sees cluster in the view
// (its group's scope or the default one): LRS skips the reports of
// clusters it does not. Before the view is loaded every cluster is.
func (n *Node) knownCluster(group, cluster string) bool {
	snap := n.view.Snapshot()
	if snap == nil {
		return true
	}
	return scope.Visible(snap, resource.Cluster, scope.Of(group), cluster) != nil
}

// statusSource is the status writer's view of the node's SotW and delta
// streams.
type statusSource struct{ n *Node }

func (s statusSource) Stamps(fn func(node string, stream, changes uint64)) {
	s.n.sotw.Stamps(fn)
	// The two servers number their streams each from 1: the top bit
	// keeps a node's SotW and delta streams apart.
	s.n.delta.Stamps(func(node string, stream, changes uint64) { fn(node, stream|1<<63, changes) })
}

func (s statusSource) Records(want func(node string) bool) []status.NodeStatus {
	return status.FromStreams(s.n.cfg.Name, s.n.sotw.SummariesOf(want), s.n.delta.SummariesOf(want))
}

// statusGeneration changes whenever statusSource's answers may have: the sum
// of the servers' generations, each only growing.
func (n *Node) statusGeneration() uint64 {
	return n.sotw.StatusGeneration() + n.delta.StatusGeneration()
}

// traceNack puts a NACK the status writer recorded in the trace of the
// apply it traces to, when traces are on (status.Config.OnNack: called
// from the writer's goroutine, after buildXDS set n.pushes).
func (n *Node) traceNack(ev status.NackEvent) {
	if n.pushes == nil {
		return
	}
	nk := tracing.Nack{Node: ev.NodeID, Group: ev.Group, Type: ev.Type,
		Version: ev.Status.NackVersion, Acked: ev.Status.VersionAcked, Message: ev.Status.LastNack}
	for _, ap := range ev.Applies {
		nk.Applies = append(nk.Applies, tracing.NackApply{ID: ap.ID, Traceparent: ap.Traceparent})
	}
	n.pushes.Nacked(nk)
}
