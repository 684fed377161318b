package replica

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/legation-io/legation/internal/cluster/lrs"
	"github.com/legation-io/legation/internal/replica/quietgc"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/tracing"
	"github.com/legation-io/legation/internal/xds/delta"
	"github.com/legation-io/legation/internal/xds/grpcapi"
	"github.com/legation-io/legation/internal/xds/sotw"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// buildXDS makes the SotW, delta and LRS servers, and what their streams
// report to: the push tracer (traces on) and the collector between pushes
// (--gc-between-pushes).
func (n *Node) buildXDS() error {
	cfg := n.cfg
	groupBy, err := scope.ParseGroupBy(cfg.GroupBy)
	if err != nil {
		return err
	}
	if cfg.Tracing.On() {
		if n.pushes, err = tracing.NewPushes(tracing.PushConfig{
			Provider: cfg.Tracing,
			Client:   n.client,
			Prefix:   cfg.EtcdPrefix,
			Replica:  cfg.Name,
			Logger:   n.log,
		}); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	xcfg := xdsstream.Config{
		Source:         n.view,
		GroupBy:        groupBy,
		Rollouts:       n.rollouts,
		Authorities:    n.authorities,
		CatchupTimeout: cfg.CatchupTimeout,
		Leases:         n.leases,
		Authorizer:     n.guard,
		Identifier:     cfg.Name,
		Logger:         n.log,
		Registerer:     n.reg,
	}
	cfg.streamBounds(&xcfg)
	if cfg.GCBetweenPushes {
		if err := n.buildQuietGC(&xcfg); err != nil {
			return err
		}
	}
	if n.pushes != nil {
		xcfg.PushTracer = n.pushes // a nil *Pushes must not become a non-nil interface
	}
	if n.delta, err = delta.New(delta.Config{Config: xcfg, MaxVHDSGroups: cfg.maxVHDSGroups()}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if n.sotw, err = sotw.New(sotw.Config{Config: xcfg, TrustVersion: cfg.SotwTrustVersion}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return n.buildLRS(groupBy)
}

var _ xdsstream.Busy = (*quietgc.Busy)(nil)

// buildQuietGC makes the collector between pushes, and has the streams of
// xcfg report to it when they are busy.
func (n *Node) buildQuietGC(xcfg *xdsstream.Config) error {
	busy := &quietgc.Busy{}
	collections := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "legation_quiet_gc_collections_total",
		Help: "Garbage collections the replica started in the quiet after a push (--gc-between-pushes).",
	})
	parked := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "legation_quiet_gc_parked",
		Help: "1 while the replica, quiet, holds off the Go runtime's forced collection every 2 minutes (GOGC off under a memory limit at the heap's goal), 0 otherwise (--gc-between-pushes).",
	})
	for _, c := range []prometheus.Collector{collections, parked} {
		if err := n.reg.Register(c); err != nil {
			return fmt.Errorf("node: register metrics: %w", err)
		}
	}
	n.quietGC = quietgc.New(quietgc.Config{Busy: busy, Collections: collections, Park: true, Parked: parked})
	xcfg.Busy = busy
	return nil
}

// buildLRS makes the LRS server, which takes the load reports of nodes
// grouped by groupBy.
func (n *Node) buildLRS(groupBy scope.GroupFunc) error {
	cfg := n.cfg
	var err error
	if n.lrs, err = lrs.New(lrs.Config{
		Client:          n.client,
		Prefix:          cfg.EtcdPrefix,
		Replica:         cfg.Name,
		Interval:        cfg.LRSInterval,
		Windows:         cfg.LRSWindows,
		Clusters:        cfg.LRSClusters,
		MaxRate:         cfg.LRSMaxRate,
		MaxRowsPerNode:  cfg.LRSMaxRowsPerNode,
		MaxNodeIDLength: cfg.lrsMaxNodeIDLength(),
		Known:           n.knownCluster,
		Group:           groupBy,
		Authorizer:      n.guard,
		Identity:        func(ctx context.Context) string { return n.guard.Of(ctx).Name },
		Logger:          n.log,
		Registerer:      n.reg,
	}); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return nil
}

// servedSotW and servedDelta count the streams their server serves in
// served: the handler runs only for streams served here, after the relay.
type servedSotW struct {
	*sotw.Server
	served *atomic.Int64
}

func (s servedSotW) Serve(st grpcapi.SotWStream, t *resource.Type) error {
	s.served.Add(1)
	defer s.served.Add(-1)
	return s.Server.Serve(st, t)
}

type servedDelta struct {
	*delta.Server
	served *atomic.Int64
}

func (s servedDelta) Serve(st grpcapi.DeltaStream, t *resource.Type) error {
	s.served.Add(1)
	defer s.served.Add(-1)
	return s.Server.Serve(st, t)
}
