package localcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/tools/faultnet"
)

// The hooks of fault injection (Config.EtcdProxies, Config.GossipProxies):
// each replica reaches etcd through proxies of its own, and gossips
// through a proxy on its advertised gossip address, so that a chaos run
// can delay, drop or blackhole one replica's etcd connections and
// partition gossip between two replicas, without iptables or netem.

// gossipBindPort is where a replica binds memberlist behind its gossip
// proxy (Config.GossipProxies); the proxy has gossipPort.
const gossipBindPort = gossipPort + 1

// startProxies makes p's proxies the first time p starts, as Config asks.
// Their addresses stay for the Cluster's life: a restarted replica gets
// the same ones. The caller holds opMu.
func (c *Cluster) startProxies(p *proc) error {
	c.mu.Lock()
	have := p.etcdProxies != nil || p.gossip != nil
	c.mu.Unlock()
	if p.kind != kindReplica || have {
		return nil
	}
	var g faultnet.Group
	if c.cfg.EtcdProxies {
		for i := 1; i <= c.cfg.EtcdMembers; i++ {
			// On the member's own IP, so that a TLS certificate naming
			// it still matches.
			ip := etcdIP(c.cfg.Net, i)
			px, err := faultnet.Listen(hostPort(ip, 0), hostPort(ip, etcdClientPort))
			if err != nil {
				g.Close()
				return fmt.Errorf("localcluster: %s: etcd proxy: %w", p.name, err)
			}
			g = append(g, px)
		}
	}
	var gp *faultnet.GossipProxy
	if c.cfg.GossipProxies {
		ip := replicaIP(c.cfg.Net, p.index)
		var err error
		gp, err = faultnet.ListenGossip(faultnet.GossipConfig{
			Addr: hostPort(ip, gossipPort), Target: hostPort(ip, gossipBindPort), PeerOf: c.gossipPeer,
		})
		if err != nil {
			g.Close()
			return fmt.Errorf("localcluster: %s: %w", p.name, err)
		}
	}
	c.mu.Lock()
	p.etcdProxies, p.gossip = g, gp
	c.mu.Unlock()
	return nil
}

// closeProxies closes p's proxies.
func (c *Cluster) closeProxies(p *proc) {
	c.mu.Lock()
	g, gp := p.etcdProxies, p.gossip
	p.etcdProxies, p.gossip = nil, nil
	c.mu.Unlock()
	g.Close()
	if gp != nil {
		gp.Close()
	}
}

// gossipPeer names the replica (its IP) that opened a TCP connection from
// remote to a gossip proxy: memberlist dials without binding, so on
// loopback every connection comes from 127.0.0.1, and the socket's owner
// tells the replica (socketOwner). "" if none is found.
func (c *Cluster) gossipPeer(remote net.Addr) string {
	ta, ok := remote.(*net.TCPAddr)
	if !ok {
		return ""
	}
	c.mu.Lock()
	pids := map[int]string{}
	for _, p := range c.replicas {
		if p.cur.alive() {
			pids[p.cur.pid] = replicaIP(c.cfg.Net, p.index)
		}
	}
	c.mu.Unlock()
	if pid := socketOwner(ta, slices.Collect(maps.Keys(pids))); pid != 0 {
		return pids[pid]
	}
	return ""
}

// EtcdProxies returns the proxies between the replica called name and
// each etcd member (Config.EtcdProxies), set together to delay, drop or
// blackhole its etcd connections. They exist from the replica's first
// start.
func (c *Cluster) EtcdProxies(name string) (faultnet.Group, error) {
	p, err := c.find(name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.kind != kindReplica || p.etcdProxies == nil {
		return nil, fmt.Errorf("localcluster: %s has no etcd proxies (Config.EtcdProxies, a replica once started)", name)
	}
	return slices.Clone(p.etcdProxies), nil
}

// GossipProxy returns the proxy on the gossip address of the replica
// called name (Config.GossipProxies).
func (c *Cluster) GossipProxy(name string) (*faultnet.GossipProxy, error) {
	p, err := c.find(name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.kind != kindReplica || p.gossip == nil {
		return nil, fmt.Errorf("localcluster: %s has no gossip proxy (Config.GossipProxies, a replica once started)", name)
	}
	return p.gossip, nil
}

// Partition drops gossip between replicas a and b, both ways, until
// Unpartition (Config.GossipProxies).
func (c *Cluster) Partition(a, b string) error { return c.partition(a, b, true) }

// Unpartition lets gossip between replicas a and b through again.
func (c *Cluster) Unpartition(a, b string) error { return c.partition(a, b, false) }

func (c *Cluster) partition(a, b string, block bool) error {
	if a == b {
		return fmt.Errorf("localcluster: partition %s from itself", a)
	}
	pa, err := c.find(a)
	if err != nil {
		return err
	}
	pb, err := c.find(b)
	if err != nil {
		return err
	}
	ga, err := c.GossipProxy(a)
	if err != nil {
		return err
	}
	gb, err := c.GossipProxy(b)
	if err != nil {
		return err
	}
	ipa, ipb := replicaIP(c.cfg.Net, pa.index), replicaIP(c.cfg.Net, pb.index)
	if block {
		ga.Block(ipb)
		gb.Block(ipa)
	} else {
		ga.Unblock(ipb)
		gb.Unblock(ipa)
	}
	return nil
}

// RemoveReplica stops the replica called name (Stop: it leaves the ring
// gracefully), takes it out of HAProxy with a graceful reload and out of
// the cluster: Status no longer lists it, and its proxies are closed. Its
// log stays. A later AddReplica gets a new name.
func (c *Cluster) RemoveReplica(ctx context.Context, name string) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	p, err := c.find(name)
	if err != nil {
		return err
	}
	if p.kind != kindReplica {
		return fmt.Errorf("localcluster: %s is not a replica", name)
	}
	c.mu.Lock()
	ts := targetsLocked([]*proc{p})
	c.mu.Unlock()
	if err := c.stopRuns(ctx, ts...); err != nil {
		return err
	}
	c.mu.Lock()
	if i := slices.Index(c.replicas, p); i >= 0 {
		c.replicas = slices.Delete(c.replicas, i, i+1)
	}
	c.mu.Unlock()
	c.closeProxies(p)
	if err := c.writeEnv(); err != nil {
		return err
	}
	c.log.Info("removed", "name", name)
	if c.lb != nil && !p.apart {
		return c.upLB(ctx)
	}
	return nil
}

// CompactEtcd compacts etcd's history up to its current revision
// (physically: it returns once the members have dropped it) and returns
// that revision. A watcher behind it then gets ErrCompacted. It needs a
// plain cluster or a secure one (Config.Secure): with Config.EtcdTLS the
// cluster has no client certificate of its own.
func (c *Cluster) CompactEtcd(ctx context.Context) (int64, error) {
	if c.cfg.EtcdTLS != nil {
		return 0, errors.New("localcluster: CompactEtcd: not with Config.EtcdTLS (no client certificate)")
	}
	eps := c.etcdEndpoints()
	var cli *clientv3.Client
	var err error
	if sec := c.Security(); sec != nil {
		cli, err = sec.etcdClient(eps, sec.etcdRoot)
	} else if c.cfg.Secure {
		return 0, errors.New("localcluster: CompactEtcd: the cluster has not started")
	} else {
		cli, err = clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	}
	if err != nil {
		return 0, fmt.Errorf("localcluster: etcd client: %w", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	resp, err := cli.Get(ctx, "legation-compact-probe", clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("localcluster: compact: revision: %w", err)
	}
	rev := resp.Header.Revision
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); errors.Is(err, rpctypes.ErrCompacted) {
		// An earlier compaction got there first (one whose answer was
		// lost to a fault, say): the history is compacted at rev or past.
		c.log.Info("etcd already compacted", "revision", rev)
		return rev, nil
	} else if err != nil {
		return 0, fmt.Errorf("localcluster: compact at %d: %w", rev, err)
	}
	c.log.Info("compacted etcd", "revision", rev)
	return rev, nil
}

// replicaEtcdEndpoints are the etcd endpoints replica p is given: its
// proxies' with Config.EtcdProxies, else the members'.
func (c *Cluster) replicaEtcdEndpoints(p *proc) []string {
	c.mu.Lock()
	g := p.etcdProxies
	c.mu.Unlock()
	if g == nil {
		return c.etcdEndpoints()
	}
	eps := g.Addrs()
	if etcdTLS(&c.cfg) != nil {
		for i := range eps {
			eps[i] = "https://" + eps[i]
		}
	}
	return eps
}
