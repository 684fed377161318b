package replica

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/legation-io/legation/internal/state/devetcd"
)

// Run serves until ctx ends, then shuts down gracefully and returns nil. It
// returns an error if the embedded etcd cannot start or fails, or a server
// stops on its own; everything it started is stopped first. In dev mode it
// starts the embedded etcd; otherwise the etcd client connects to
// EtcdEndpoints, and until etcd answers the node runs, not ready. Call it
// once.
//
// On shutdown it stops being ready (/readyz 503, gRPC health
// NOT_SERVING), leaves the cluster, closes its xDS streams spread over
// DrainPeriod (refusing new ones), stops the gRPC and HTTP servers
// gracefully within ShutdownTimeout and cuts what is left, then stops the view, the
// lease tracker, the status writer and the cluster agent, closes the etcd
// client and the embedded etcd, waiting for every goroutine it started.
func (n *Node) Run(ctx context.Context) error {
	if !n.started.CompareAndSwap(false, true) {
		return errors.New("node: Run called twice, or after Close")
	}
	n.logStart()

	// Closes the connections of streams drained, shed, or refused
	// because the replica is full, until the gRPC server has stopped.
	closerCtx, stopCloser := context.WithCancel(context.Background())
	closerDone := make(chan struct{})
	go func() {
		defer close(closerDone)
		n.xdsConns.run(closerCtx)
	}()
	var servers sync.WaitGroup
	serveErr := n.serve(&servers)

	// The parts run until partsCtx ends, after the drain: the view keeps
	// serving draining streams, and the status writer keeps their records.
	partsCtx, stopParts := context.WithCancel(context.WithoutCancel(ctx))
	var parts sync.WaitGroup
	etcd, err := n.startEtcd(ctx)
	if err == nil {
		n.runParts(partsCtx, &parts)
		err = n.wait(ctx, serveErr, etcd)
	} else if ctx.Err() != nil {
		err = nil // stopped while starting
	}
	// An error is returned, not logged: the caller reports it.
	n.log.Info("xds-node shutting down", "after_error", err != nil,
		"drain_period", n.cfg.DrainPeriod.String(), "shutdown_timeout", n.cfg.ShutdownTimeout.String())

	n.shutdown()
	stopCloser() // the gRPC server closed every connection
	<-closerDone
	servers.Wait()
	stopParts()
	parts.Wait()
	if err := n.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
		n.log.Warn("closing the etcd client", "err", err)
	}
	if etcd != nil {
		etcd.Close() // always nil
	}
	n.relay.Close() // always nil
	n.log.Info("xds-node stopped")
	return err
}

// logStart logs the replica's start, and warns of the risks its flags
// take: once per process, as the risk is the configuration's, not an
// event.
func (n *Node) logStart() {
	mode := "etcd"
	if n.cfg.DevMode() {
		mode = "dev"
	}
	n.log.Info("xds-node starting", "name", n.cfg.Name, "mode", mode,
		"xds_addr", n.XDSAddr(), "http_addr", n.HTTPAddr(), "etcd_prefix", n.cfg.EtcdPrefix,
		"tls", n.tls != nil, "mtls", n.cfg.MTLS())
	n.warnInsecure()
	n.warnEtcdInsecure()
	if n.cfg.StreamRate > 0 && n.cfg.RebalanceRate > n.cfg.StreamRate {
		n.log.Warn("--rebalance-rate is above --stream-rate: after a membership change the replicas close streams faster than they admit the reconnects, which are refused and back off",
			"rebalance_rate", n.cfg.RebalanceRate, "stream_rate", n.cfg.StreamRate)
	}
	if n.cfg.GCBetweenPushes {
		n.log.Info("--gc-between-pushes (experimental): collecting garbage between pushes, and while idle holding off " +
			"the runtime's forced collection by changing the process's GOGC and memory limit")
	}
	if n.cluster.Clustered() && n.cfg.GossipKeyFile == "" {
		n.log.Warn("gossip is unencrypted and unauthenticated (no --gossip-key-file): any host that reaches the gossip port can join the ring, "+
			"be made the home of Envoy nodes and be relayed their streams, and reads every replica's record; see docs/operations/security.md",
			"gossip_addr", n.cfg.GossipAddr)
	}
}

// serve starts the probe, gRPC and HTTP servers, each counted in wg until
// it stops; the error of one that stops on its own goes to the channel
// returned. They come first so that /healthz answers, and /readyz says
// why not ready, while etcd starts.
func (n *Node) serve(wg *sync.WaitGroup) <-chan error {
	serveErr := make(chan error, 3) // one per server: never blocks
	wg.Go(func() {
		n.serveProbe(serveErr) // returns at once without --probe-addr
	})
	wg.Go(func() {
		if err := n.grpcSrv.Serve(n.xdsLis); err != nil {
			serveErr <- fmt.Errorf("node: gRPC server on %s: %w", n.XDSAddr(), err)
		}
	})
	wg.Go(func() {
		serve := n.httpSrv.Serve
		if n.tls != nil {
			serve = func(l net.Listener) error { return n.httpSrv.ServeTLS(l, "", "") }
		}
		// Within --http-max-conns and --http-max-conns-per-ip, idle
		// connections closed to make room.
		if err := serve(n.httpConns); !errors.Is(err, http.ErrServerClosed) {
			serveErr <- fmt.Errorf("node: HTTP server on %s: %w", n.HTTPAddr(), err)
		}
	})
	return serveErr
}

// wait blocks until ctx ends (nil), a server stops on its own or the
// embedded etcd, if any, fails (their error).
func (n *Node) wait(ctx context.Context, serveErr <-chan error, etcd *devetcd.Server) error {
	var fatal <-chan error // nil blocks
	if etcd != nil {
		fatal = etcd.Err()
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-serveErr:
		return err
	case err := <-fatal:
		return fmt.Errorf("node: embedded etcd: %w", err)
	}
}

// startEtcd starts the embedded etcd in dev mode, where the client points;
// it returns nil otherwise.
func (n *Node) startEtcd(ctx context.Context) (*devetcd.Server, error) {
	if !n.cfg.DevMode() {
		return nil, nil
	}
	n.log.Info("dev mode: starting an embedded etcd", "client_addr", n.cfg.DevEtcdAddr, "data_dir", n.cfg.DataDir)
	srv, err := devetcd.Start(ctx, devetcd.Config{
		Dir:        n.cfg.DataDir,
		ClientAddr: n.devEtcdAddr,
		Logger:     n.log,
	})
	if err != nil {
		return nil, fmt.Errorf("node: dev mode (move the embedded etcd with --dev-etcd-addr, or use a real one with --etcd-endpoints): %w", err)
	}
	n.devEtcdUp.Store(true)
	return srv, nil
}

// runParts starts the view, the lease tracker, the status writer, the
// LRS window publisher, the cluster agent and the readiness watcher, each
// until ctx ends, counted in wg.
func (n *Node) runParts(ctx context.Context, wg *sync.WaitGroup) {
	// Each returns nil once ctx ends.
	runs := []func(context.Context) error{
		n.view.Run,
		n.leases.Run,
		n.status.Run, // records of the nodes served here; revoked when ctx ends
		n.csds.Run,   // the cluster's records, from the first CSDS call on
		n.lrs.Run,    // load windows of the nodes served here
		n.cluster.Run,
	}
	if n.cfg.RolloutController {
		runs = append(runs, n.canary.Run) // the rollout controller, on the elected replica
	}
	if n.tls != nil {
		runs = append(runs, n.tls.Run) // reloads the files when they change
	}
	if n.rules != nil {
		runs = append(runs, n.rules.Run)
	}
	for _, run := range runs {
		wg.Go(func() { run(ctx) }) //nolint:errcheck // nil once ctx ends
	}
	if n.cfg.MaxStreamsShare > 0 && n.cluster.Clustered() {
		wg.Go(func() { n.shedLoop(ctx) })
	}
	if n.quietGC != nil {
		wg.Go(func() { n.quietGC.Run(ctx, n.view) })
	}
	if n.pushes != nil {
		wg.Go(func() { n.pushes.Run(ctx, n.view) })
	}
	wg.Go(func() { n.rollouts.Run(ctx) })
	wg.Go(func() { n.clock.Run(ctx) })
	wg.Go(func() {
		start := time.Now()
		select {
		case <-n.view.Ready():
		case <-ctx.Done():
			return
		}
		s := n.view.Snapshot()
		n.log.Info("xds-node loaded the view", "revision", s.Revision, "resources", s.Len(),
			"etcd", n.client.Endpoints(), "load_time", time.Since(start).Round(time.Millisecond).String())
		n.watchReadiness(ctx)
	})
}
