package shard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// This replica's own registration in the etcd registry (its record under
// a lease kept alive), and discovery of its peers through the registry.

// register grants a lease, writes this replica's record under it and
// starts keeping it alive until root ends. ctx bounds the grant and write.
func (m *Membership) register(ctx, root context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, error) {
	ttl := int64((m.cfg.LeaseTTL + time.Second - 1) / time.Second)
	g, err := m.cfg.Client.Grant(ctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("shard: grant registry lease: %w", err)
	}
	key := RegistryKey(m.cfg.Prefix, m.cfg.Name)
	self := m.Self()
	prev, err := m.cfg.Client.Put(ctx, key, string(encodeRecord(self)), clientv3.WithLease(g.ID), clientv3.WithPrevKV())
	if err != nil {
		m.revokeLease(g.ID, m.cfg.TCPTimeout) //nolint:errcheck // the put's error is the one to report; the lease expires anyway
		return nil, fmt.Errorf("shard: register %s: %w", key, err)
	}
	if prev.PrevKv != nil && prev.PrevKv.Lease != int64(m.lease.Load()) {
		if old, err := decodeRecord(key, m.cfg.Name, prev.PrevKv.Value); err == nil && old.GossipAddr != self.GossipAddr {
			// Usually this replica's previous life, not yet expired; if it
			// is alive, two replicas share a name, which memberlist reports
			// as a conflict.
			m.log.Info("shard: replaced the registry record of an earlier replica of this name",
				"key", key, "old_gossip_addr", old.GossipAddr, "old_started", old.Started)
		}
	}
	ka, err := m.cfg.Client.KeepAlive(root, g.ID)
	if err != nil {
		m.revokeLease(g.ID, m.cfg.TCPTimeout) //nolint:errcheck // the keep-alive's error is the one to report; the lease expires anyway
		return nil, fmt.Errorf("shard: keep registry lease alive: %w", err)
	}
	m.lease.Store(int64(g.ID))
	return ka, nil
}

// enterRegistry registers this replica under a lease kept alive in root,
// and reads the registry, which decides who may be on the ring, before
// the first ring is built. It returns the lease's keep-alive responses
// and the revision read. On error it undoes what Start did: root is
// cancelled, memberlist shut down and the lease revoked.
func (m *Membership) enterRegistry(ctx, root context.Context) (<-chan *clientv3.LeaseKeepAliveResponse, int64, error) {
	ka, err := m.register(ctx, root)
	if err != nil {
		m.cancel()
		m.ml.Shutdown() //nolint:errcheck // the registration error is the one to report
		return nil, 0, err
	}
	rev, err := m.readRegistry(ctx)
	if err != nil {
		m.cancel()
		m.ml.Shutdown()            //nolint:errcheck // the read error is the one to report
		m.revoke(m.cfg.TCPTimeout) //nolint:errcheck // the read error is the one to report; the lease expires anyway
		return nil, 0, err
	}
	return ka, rev, nil
}

// registryLoop keeps the record current: it drains the keep-alive
// responses, writes the record again after SetReady, and registers again
// with a new lease when the lease is lost (etcd unreachable for longer than
// the TTL).
func (m *Membership) registryLoop(ctx context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer m.wg.Done()
	k := &registryKeeper{m: m, ka: ka, backoff: minRegisterBackoff, register: stoppedTimer(), rewrite: stoppedTimer()}
	defer k.register.Stop()
	defer k.rewrite.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-k.ka:
			if !ok && ctx.Err() == nil {
				m.log.Warn("shard: registry lease lost; registering again")
				k.lost()
			}
		case <-m.recordKick:
			k.write(ctx)
		case <-k.rewrite.C:
			k.write(ctx)
		case <-k.register.C:
			if !k.registerAgain(ctx) {
				return
			}
		}
	}
}

// The bounds of the backoff between attempts to register again.
const minRegisterBackoff, maxRegisterBackoff = 200 * time.Millisecond, 5 * time.Second

// registryKeeper is registryLoop's state. Only registryLoop uses it.
type registryKeeper struct {
	m       *Membership
	ka      <-chan *clientv3.LeaseKeepAliveResponse // nil while the lease is lost
	backoff time.Duration                           // before the next attempt to register again
	// register fires to register again, after the lease was lost;
	// rewrite to write the record again, after a failed write.
	register, rewrite *time.Timer
	last              time.Time // when the record was last written; zero: never
}

// lost forgets the lost lease and registers again soon.
func (k *registryKeeper) lost() {
	k.ka = nil
	k.m.lease.Store(0)
	k.m.metrics.leaseLost.Inc()
	k.backoff = minRegisterBackoff
	k.register.Reset(k.backoff)
}

// write writes the record again, retrying after a failure. The record
// changes with readiness only; a flapping replica still writes it at
// most once per minRecordInterval, the last state winning.
func (k *registryKeeper) write(ctx context.Context) {
	k.rewrite.Stop()
	if wait := minRecordInterval - time.Since(k.last); !k.last.IsZero() && wait > 0 {
		k.rewrite.Reset(wait)
		return
	}
	k.last = time.Now()
	id := clientv3.LeaseID(k.m.lease.Load())
	if id == 0 {
		return // registering again writes the current record
	}
	err := k.m.putRecord(ctx, id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		k.m.log.Warn("shard: registry lease expired; registering again")
		k.lost()
	case err != nil && ctx.Err() == nil:
		// The gossip meta, which the rings use, is already updated:
		// only `xdsadmin members` is behind until the retry.
		k.m.log.Warn("shard: update registry record; retrying", "err", err, "retry_in", time.Second)
		k.rewrite.Reset(time.Second)
	}
}

// registerAgain registers with a new lease, or schedules the next attempt
// after a longer backoff; false once ctx has ended.
func (k *registryKeeper) registerAgain(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, k.m.cfg.LeaseTTL)
	newKA, err := k.m.register(rctx, ctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		k.backoff = min(2*k.backoff, maxRegisterBackoff)
		k.m.log.Warn("shard: register again", "err", err, "retry_in", k.backoff)
		k.register.Reset(k.backoff)
		return true
	}
	k.ka = newKA
	k.m.log.Info("shard: registered again")
	return true
}

// minRecordInterval spaces a replica's writes of its registry record: its
// membership writes are at most one a second, whatever the cluster's size.
const minRecordInterval = time.Second

// stoppedTimer returns a timer that has not started.
func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

func (m *Membership) putRecord(ctx context.Context, id clientv3.LeaseID) error {
	pctx, cancel := context.WithTimeout(ctx, m.cfg.LeaseTTL)
	defer cancel()
	key := RegistryKey(m.cfg.Prefix, m.cfg.Name)
	if _, err := m.cfg.Client.Put(pctx, key, string(encodeRecord(m.Self())), clientv3.WithLease(id)); err != nil {
		return fmt.Errorf("shard: write %s: %w", key, err)
	}
	return nil
}

// revoke revokes the registry lease, deleting the record.
func (m *Membership) revoke(timeout time.Duration) error {
	id := clientv3.LeaseID(m.lease.Swap(0))
	if id == 0 {
		return nil
	}
	return m.revokeLease(id, timeout)
}

func (m *Membership) revokeLease(id clientv3.LeaseID, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := m.cfg.Client.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("shard: revoke registry lease: %w", err)
	}
	return nil
}

// --- discovery ---

// discoveryLoop joins the seeds or the registered peers at once, then
// every RefreshInterval joins registered members that gossip does not
// know as alive: replicas that registered at the same moment as this one,
// or that were partitioned away and came back.
func (m *Membership) discoveryLoop(ctx context.Context) {
	defer m.wg.Done()
	if len(m.cfg.Join) > 0 {
		m.join(m.cfg.Join, true)
	} else {
		m.joinRegistered(ctx, true)
	}
	close(m.joined)
	t := time.NewTicker(m.cfg.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.joinRegistered(ctx, false)
			if m.outsidersPending() {
				kick(m.buildKick)
			}
		}
	}
}

func (m *Membership) joinRegistered(ctx context.Context, first bool) {
	rctx, cancel := context.WithTimeout(ctx, m.cfg.LeaseTTL)
	members, bad, err := ReadRegistry(rctx, m.cfg.Client, m.cfg.Prefix)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("shard: read the registry to find peers", "err", err)
		}
		return
	}
	if first {
		for _, b := range bad {
			m.log.Warn("shard: skipping a malformed registry record", "key", b.Key, "err", b.Err)
		}
	}
	m.checkRegistry(members)
	m.nodesMu.Lock()
	var addrs []string
	for _, mem := range members {
		// A damped member is dead to gossip: joining it again is how
		// one that came back is heard of before its damping runs out.
		_, known := m.nodes[mem.Name]
		_, damped := m.dead[mem.Name]
		if known && !damped || mem.Name == m.cfg.Name || mem.GossipAddr == "" {
			continue
		}
		addrs = append(addrs, mem.GossipAddr)
	}
	m.nodesMu.Unlock()
	if len(addrs) > 0 && ctx.Err() == nil {
		m.join(addrs, first)
	}
}

// join joins the gossip cluster through addrs. Failing to reach them is
// normal (a peer that crashed is registered until its lease expires): it
// is logged, at Warn only for the first attempt.
func (m *Membership) join(addrs []string, first bool) {
	n, err := m.ml.Join(addrs)
	switch {
	case err != nil && first:
		m.log.Warn("shard: no peer reachable; alone until one is", "peers", addrs, "err", err)
	case err != nil:
		m.log.Debug("shard: join registered peers", "peers", addrs, "err", err)
	default:
		m.log.Debug("shard: joined peers", "peers", addrs, "reached", n)
	}
}
