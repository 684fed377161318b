package replica

import (
	"context"
	"fmt"
	"net/http"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// readiness says whether the node is ready and, if not, why.
func (n *Node) readiness() (bool, string) {
	if n.stopping.Load() {
		return false, "shutting down"
	}
	select {
	case <-n.view.Ready():
	default:
		if n.cfg.DevMode() && !n.devEtcdUp.Load() {
			return false, "starting the embedded etcd"
		}
		return false, "loading the view from etcd"
	}
	select {
	case <-n.view.HistoryRead():
	default:
		// A client reconnecting now would be resent what it holds.
		return false, "reading etcd's recent history, to know what changed since the versions clients present"
	}
	if n.rules != nil {
		select {
		case <-n.rules.Ready():
		default:
			return false, "loading the authorization rules from etcd"
		}
		if err := n.rules.Fresh(); err != nil {
			return false, fmt.Sprintf("refusing streams: the authorization rules are stale (%v; --authz-stale-after)", err)
		}
	}
	if r := n.view.RevisionReset(); r != nil {
		return false, fmt.Sprintf("%s; serving the view at revision %d until etcd's revision passes it", r, r.View)
	}
	// On the awake clock: a replica starved of CPU for a moment has not
	// lost etcd.
	if quiet := n.clock.Since(n.view.LastHeard()); quiet > n.cfg.EtcdStaleAfter {
		return false, fmt.Sprintf("etcd unreachable: nothing heard from it for %s; serving the view at revision %d meanwhile",
			quiet.Round(time.Second), n.view.Snapshot().Revision)
	}
	return true, ""
}

func (n *Node) ready() bool {
	ok, _ := n.readiness()
	return ok
}

// Readiness is read every notReadyPoll while the replica is not ready
// (starting, or etcd lost) and every readyPoll while it is ready, and also
// when etcd turns stale (EtcdStaleAfter after the view last heard from it),
// the only timed way a ready replica turns not ready: a revision reset is
// the other, a shutdown tells the health service itself (health.Shutdown).
const (
	notReadyPoll = 250 * time.Millisecond
	readyPoll    = time.Second
)

// watchReadiness keeps the gRPC health status in step with readiness
// (the view current, etcd heard from lately) until ctx ends, and tells the
// cluster agent of each change (readyChanged).
func (n *Node) watchReadiness(ctx context.Context) {
	check := time.NewTimer(notReadyPoll)
	defer check.Stop()
	last := false
	history := n.view.HistoryRead() // nil once seen closed: wakes at once, not at the next tick
	for {
		n.readinessChecks.Add(1)
		if ok, why := n.readiness(); ok != last {
			last = ok
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if ok {
				st = healthpb.HealthCheckResponse_SERVING
				n.log.Info("ready", "revision", n.view.Snapshot().Revision)
			} else {
				n.log.Warn("not ready", "why", why)
			}
			// After a shutdown began this is ignored (health.Shutdown).
			n.health.SetServingStatus("", st)
			select {
			case n.readyChanged <- struct{}{}:
			default: // one is pending: the agent reads readiness afresh
			}
		}
		wait := notReadyPoll
		if last {
			stale := time.Until(n.view.LastHeard().Add(n.cfg.EtcdStaleAfter))
			wait = max(time.Millisecond, min(readyPoll, stale+time.Millisecond))
		}
		check.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-check.C:
		case <-history:
			history = nil
		}
	}
}

// serveHealthz answers 200 while the process runs: liveness only.
func (n *Node) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}

// serveReadyz answers 200 once the view is loaded and until shutdown
// begins, else 503 with the reason.
func (n *Node) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if ok, why := n.readiness(); !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: %s\n", why)
		n.writeEtcdWarning(w)
		return
	}
	fmt.Fprintln(w, "ok")
	n.writeEtcdWarning(w)
}
