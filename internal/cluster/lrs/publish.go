package lrs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Run publishes each window once it closes, until ctx ends; then it
// publishes what it holds, current window included, and stops keeping its
// lease alive: this replica's windows stay readable until the lease
// expires (the span of the windows kept, at least 10s), so a rolling
// restart loses no history. Without a Client it only closes windows. It
// returns nil once ctx ends. Call it once.
//
// Each publish is one etcd transaction: a put per closed window (one,
// unless etcd was away) under this replica's lease, and deletes of its
// windows older than the last Config.Windows. So a replica commits at
// most one transaction per Interval (at least 1s), whatever the number of
// nodes or reports. A failed publish is retried at the next window with
// the windows it did not write (the last Config.Windows at most). A
// transaction holds at most maxWindowsPerTxn windows and maxTxnBytes of
// values (each window coarsened to fit MaxWindowBytes, EncodeBounded):
// a backlog left by an etcd outage goes over the next intervals.
func (s *Server) Run(ctx context.Context) error {
	p := publisher{s: s}
	defer p.stop()
	for {
		now := s.now()
		next := now.Truncate(s.cfg.Interval).Add(s.cfg.Interval)
		t := time.NewTimer(next.Sub(now) + 10*time.Millisecond) // just past the boundary
		select {
		case <-ctx.Done():
			t.Stop()
			ws := s.closed(s.now().Add(s.cfg.Interval)) // the current one too
			if len(ws) > 0 && s.cfg.Client != nil {
				pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				p.publish(pctx, ws) //nolint:errcheck // shutting down: logged; what is left is dropped
				cancel()
			}
			return nil
		case <-t.C:
		}
		ws := s.closed(s.now())
		if len(ws) == 0 || s.cfg.Client == nil {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, s.cfg.Interval)
		rest, err := p.publish(pctx, ws)
		cancel()
		if err != nil {
			rest = ws
		}
		if len(rest) > 0 {
			s.requeue(rest)
		}
	}
}

// publisher owns Run's lease and what it wrote.
type publisher struct {
	s       *Server
	lease   clientv3.LeaseID // 0: none, or lost
	kaStop  context.CancelFunc
	ka      <-chan *clientv3.LeaseKeepAliveResponse
	written []string // keys written, oldest first
	failing bool
}

// leaseTTL is how long a replica's windows outlive it: all its kept
// windows' span, at least 10s.
func (p *publisher) leaseTTL() int64 {
	ttl := time.Duration(p.s.cfg.Windows) * p.s.cfg.Interval
	return int64(max(10*time.Second, ttl) / time.Second)
}

// ensureLease makes sure p holds a live lease.
func (p *publisher) ensureLease(ctx context.Context) error {
	// The keepalive responses are not waited for: the client drops them
	// when the channel is full. Its closing says the lease is lost.
drain:
	for p.lease != 0 {
		select {
		case _, ok := <-p.ka:
			if !ok {
				p.kaStop()
				p.lease = 0
			}
		default:
			break drain
		}
	}
	if p.lease != 0 {
		return nil
	}
	c := p.s.cfg.Client
	g, err := c.Grant(ctx, p.leaseTTL())
	if err != nil {
		return fmt.Errorf("lrs: lease: %w", err)
	}
	kctx, stop := context.WithCancel(context.Background())
	ka, err := c.KeepAlive(kctx, g.ID)
	if err != nil {
		stop()
		return fmt.Errorf("lrs: lease keepalive: %w", err)
	}
	p.lease, p.ka, p.kaStop = g.ID, ka, stop
	// Windows written under a lost lease are gone, or will be.
	p.written = nil
	return nil
}

// The bounds of one publish's transaction: far below etcd's default
// --max-txn-ops (128, with the deletes) and --max-request-bytes (1.5 MiB).
const (
	maxWindowsPerTxn = 32
	maxTxnBytes      = 1 << 20
)

// publish writes the oldest of ws (oldest first) that fit one
// transaction and deletes what is beyond the last Windows; it returns the
// windows it left for the next publish.
func (p *publisher) publish(ctx context.Context, ws []Window) ([]Window, error) {
	n, err := p.write(ctx, ws)
	m := p.s.metrics
	if err != nil {
		m.publishErrors.Inc()
		if !p.failing {
			p.s.log.Warn("publishing load windows to etcd failed; retrying at the next window", "err", err)
		}
		p.failing = true
		return ws, err
	}
	if p.failing {
		p.s.log.Info("publishing load windows to etcd works again")
	}
	p.failing = false
	m.published.Add(float64(n))
	return ws[n:], nil
}

// write writes the first windows of ws that fit one transaction and
// returns how many.
func (p *publisher) write(ctx context.Context, ws []Window) (int, error) {
	if err := p.ensureLease(ctx); err != nil {
		return 0, err
	}
	var (
		ops   []clientv3.Op
		keys  []string
		bytes int
	)
	for _, w := range ws {
		b, err := EncodeBounded(w)
		if err != nil {
			return 0, fmt.Errorf("lrs: encode window: %w", err)
		}
		if len(keys) > 0 && (len(keys) >= maxWindowsPerTxn || bytes+len(b) > maxTxnBytes) {
			break
		}
		bytes += len(b)
		k := Key(p.s.cfg.Prefix, p.s.cfg.Replica, w.Start)
		ops = append(ops, clientv3.OpPut(k, string(b), clientv3.WithLease(p.lease)))
		keys = append(keys, k)
	}
	all := append(append([]string(nil), p.written...), keys...)
	var drop []string
	if over := len(all) - p.s.cfg.Windows; over > 0 {
		drop, all = all[:over], all[over:]
	}
	for _, k := range drop {
		if !slices.Contains(keys, k) { // etcd refuses a put and a delete of one key in a txn
			ops = append(ops, clientv3.OpDelete(k))
		}
	}
	if _, err := p.s.cfg.Client.Txn(ctx).Then(ops...).Commit(); err != nil {
		if p.lease != 0 && errors.Is(err, rpctypes.ErrLeaseNotFound) {
			p.kaStop()
			p.lease = 0
		}
		return 0, fmt.Errorf("lrs: write %d windows: %w", len(keys), err)
	}
	p.written = all
	return len(keys), nil
}

// stop stops keeping the lease alive: the windows expire with it.
func (p *publisher) stop() {
	if p.lease != 0 {
		p.kaStop()
		p.lease = 0
	}
}
