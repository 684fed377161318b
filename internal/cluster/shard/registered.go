package shard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
)

// The registry is the authority on who is a replica: a member gossip says
// is alive is on the ring only if it is also registered in etcd under a
// live lease, with the same xDS and gossip addresses as it gossips. Gossip
// is open to whoever reaches the gossip port (with no key, or with a key
// that leaked); etcd is not, so a host that gossips but never registered
// (it has no etcd credentials) is never home to any node. Every replica
// reads the same registry through a watch, so they compute the same ring
// from the same inputs: alive in gossip and registered in etcd.
//
// A replica cut off from etcd loses its lease, and its peers, which see
// the registry's delete, drop it; it does not drop itself, since it cannot
// tell that from etcd being down for everyone, when every replica must
// keep its ring (each would otherwise drop itself alone, and the rings
// disagree everywhere). It is not ready meanwhile, which hands its nodes
// over anyway (ReadyRing), and it hears of its own delete once it is back.

// readRegistry reads the whole registry into m.registered and returns the
// revision it was read at.
func (m *Membership) readRegistry(ctx context.Context) (int64, error) {
	dir := keyspace.Members.Prefix(m.cfg.Prefix)
	resp, err := m.cfg.Client.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("shard: read registry %s: %w", dir, err)
	}
	reg := make(map[string]Member, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		mem, err := decodeRecord(key, strings.TrimPrefix(key, dir), kv.Value)
		if err != nil {
			continue // joinRegistered warns about malformed records
		}
		reg[mem.Name] = mem
	}
	m.nodesMu.Lock()
	m.registered = reg
	m.nodesMu.Unlock()
	m.setReplicaIPs(reg)
	return resp.Header.Revision, nil
}

// registeredLoop follows the registry with a watch from rev on, keeping
// m.registered current and rebuilding the ring on each change. A watch
// that fails (compaction, no leader, etcd unreachable) is replaced by a
// new read and watch after a backoff; meanwhile the last registry read
// stays in force, so that replicas that all lose etcd keep their ring.
func (m *Membership) registeredLoop(ctx context.Context, rev int64) {
	defer m.wg.Done()
	const minBackoff, maxBackoff = 200 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for {
		if rev == 0 {
			rctx, cancel := context.WithTimeout(ctx, m.cfg.LeaseTTL)
			r, err := m.readRegistry(rctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				m.log.Warn("shard: read the registry; the ring keeps the last one read", "err", err, "retry_in", backoff)
				if !sleep(ctx, backoff) {
					return
				}
				backoff = min(2*backoff, maxBackoff)
				continue
			}
			rev = r
			kick(m.buildKick)
		}
		got, resync := m.watchRegistry(ctx, rev)
		if got {
			backoff = minBackoff // the watch worked for a while
		}
		rev = 0
		if !resync && !sleep(ctx, backoff) {
			return
		}
	}
}

// watchRegistry applies the registry's changes after rev until the watch
// fails, a resync is asked for (resync true), or ctx ends; got reports
// whether any change arrived.
func (m *Membership) watchRegistry(ctx context.Context, rev int64) (got, resync bool) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := m.cfg.Client.Watch(wctx, keyspace.Members.Prefix(m.cfg.Prefix), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		select {
		case <-m.resyncKick:
			return got, true
		case resp, ok := <-wch:
			if !ok {
				return got, false
			}
			if err := resp.Err(); err != nil {
				if ctx.Err() == nil {
					m.log.Debug("shard: registry watch ended; reading the registry again", "err", err)
				}
				return got, false
			}
			if len(resp.Events) > 0 {
				got = true
				m.applyEvents(resp.Events)
			}
		}
	}
}

// applyEvents applies registry changes to m.registered and rebuilds the
// ring.
func (m *Membership) applyEvents(events []*clientv3.Event) {
	dir := keyspace.Members.Prefix(m.cfg.Prefix)
	selfDeleted := false
	m.nodesMu.Lock()
	reg := make(map[string]Member, len(m.registered)+1)
	for k, v := range m.registered {
		reg[k] = v
	}
	for _, ev := range events {
		key := string(ev.Kv.Key)
		name := strings.TrimPrefix(key, dir)
		if ev.Type == clientv3.EventTypeDelete {
			delete(reg, name)
			selfDeleted = selfDeleted || name == m.cfg.Name
			continue
		}
		if mem, err := decodeRecord(key, name, ev.Kv.Value); err == nil {
			reg[name] = mem
		} else {
			delete(reg, name) // an unreadable record registers no one
		}
	}
	m.registered = reg
	m.nodesMu.Unlock()
	m.setReplicaIPs(reg)
	kick(m.buildKick)
	if selfDeleted && m.lease.Load() != 0 {
		// This replica's record went while it holds a lease (deleted by
		// hand, or a lease lost and granted again meanwhile): write it
		// again, or register again if the lease is gone too.
		kick(m.recordKick)
	}
}

// checkRegistry compares a registry read (discovery's, every
// RefreshInterval) with m.registered, and has the registry read again and
// the watch restarted if they differ by more than a change in flight
// could explain: a safety net for a watch that missed changes (an etcd
// restored from a snapshot, whose revisions went back below the
// watch's). A change in flight costs one read more.
func (m *Membership) checkRegistry(read []Member) {
	m.nodesMu.Lock()
	same := len(read) == len(m.registered)
	for _, r := range read {
		if !same {
			break
		}
		have, ok := m.registered[r.Name]
		same = ok && have.XDSAddr == r.XDSAddr && have.GossipAddr == r.GossipAddr
	}
	m.nodesMu.Unlock()
	if !same {
		kick(m.resyncKick)
	}
}

// admitted reports whether the alive member mem may be on the ring: it is
// registered with the addresses it gossips. The caller holds nodesMu.
func (m *Membership) admitted(mem Member) bool {
	reg, ok := m.registered[mem.Name]
	return ok && reg.XDSAddr == mem.XDSAddr && reg.GossipAddr == mem.GossipAddr
}

// setReplicaIPs records the IP addresses of the registered members (the
// hosts of their xDS and gossip addresses that are IPs) for IsReplicaAddr.
func (m *Membership) setReplicaIPs(reg map[string]Member) {
	ips := make(map[netip.Addr]struct{}, len(reg))
	for _, mem := range reg {
		for _, a := range []string{mem.XDSAddr, mem.GossipAddr} {
			host, _, err := net.SplitHostPort(a)
			if err != nil {
				continue
			}
			if ip, err := netip.ParseAddr(host); err == nil {
				ips[ip.Unmap()] = struct{}{}
			}
		}
	}
	m.replicaIPs.Store(&ips)
}

// IsReplicaAddr reports whether ip is the address of a replica registered
// in etcd under a live lease (the host of its xDS or gossip address), as
// this replica's registry watch last saw it. It is cheap (an atomic load
// and a map lookup) and may be called concurrently.
func (m *Membership) IsReplicaAddr(ip netip.Addr) bool {
	p := m.replicaIPs.Load()
	if p == nil {
		return false
	}
	_, ok := (*p)[ip.Unmap()]
	return ok
}
