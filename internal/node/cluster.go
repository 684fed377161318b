package node

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/relay"
	"github.com/legation-io/legation/internal/shard"
	"github.com/legation-io/legation/internal/status"
	"github.com/legation-io/legation/internal/xdsstream"
)

// A replica in etcd mode is a member of the cluster of replicas sharing
// its etcd prefix (DESIGN.md, "The cluster"): it registers in etcd,
// gossips with its peers, and serves the Envoy nodes whose home it is on
// the ring, relaying the others' streams to their home. In dev mode it is
// alone and home to every node.

// home is relay.Config.Home: the home of nodeID on the current ring.
func (n *Node) home(nodeID string) (name, addr string, self bool) {
	m := n.member.Load()
	if m == nil {
		return n.cfg.Name, "", true
	}
	h, ok := m.Home(nodeID)
	if !ok || h.Name == n.cfg.Name {
		return n.cfg.Name, "", true
	}
	return h.Name, h.XDSAddr, false
}

// next is relay.Config.Next: the home of nodeID on the current ring
// without the replicas that could not be reached.
func (n *Node) next(nodeID string, unreachable []string) (name, addr string, self bool) {
	m := n.member.Load()
	if m == nil {
		return n.cfg.Name, "", true
	}
	h, ok := m.Ring().HomeExcluding(nodeID, func(name string) bool { return slices.Contains(unreachable, name) })
	if !ok || h.Name == n.cfg.Name {
		return n.cfg.Name, "", true
	}
	return h.Name, h.XDSAddr, false
}

// rebalanceHome is the home function of relay.Rebalance.
func (n *Node) rebalanceHome(nodeID string) (string, bool) {
	name, _, self := n.home(nodeID)
	return name, self
}

// clustered reports whether the replica joins a cluster.
func (n *Node) clustered() bool { return !n.cfg.DevMode() && !n.cfg.Standalone }

// shardConfig is the membership config of the replica.
func (n *Node) shardConfig(client *clientv3.Client) shard.Config {
	c := shard.DefaultConfig()
	c.Name = n.cfg.Name
	c.BindAddr = n.cfg.GossipAddr
	c.Client = client
	c.Prefix = n.cfg.EtcdPrefix
	c.Logger = n.log
	c.Registerer = n.reg
	adv := advertiseHost(n.cfg.AdvertiseAddr, n.cfg.XDSAddr, n.cfg.GossipAddr)
	if n.cfg.AdvertiseAddr != "" {
		// host:port as given; a bare host gossips on the bound port.
		c.AdvertiseAddr = withPort(n.cfg.AdvertiseAddr, "0")
	} else if h, _, _ := net.SplitHostPort(n.cfg.GossipAddr); isWildcard(h) {
		c.AdvertiseAddr = net.JoinHostPort(adv, "0")
	}
	c.XDSAddr = net.JoinHostPort(adv, portOf(n.XDSAddr()))
	c.HTTPAddr = net.JoinHostPort(adv, portOf(n.HTTPAddr()))
	_, gport, _ := net.SplitHostPort(n.cfg.GossipAddr)
	if gport == "0" {
		gport = "7946"
	}
	for _, j := range n.cfg.Join {
		c.Join = append(c.Join, withPort(j, gport))
	}
	return c
}

// runCluster joins the cluster once etcd answers, keeps this replica's
// readiness in its gossip record, and rebalances streams when the ring
// changes, until ctx ends. It returns once all it started has stopped;
// a graceful leave is up to leave.
func (n *Node) runCluster(ctx context.Context, client *clientv3.Client) {
	var m *shard.Membership
	for {
		var err error
		if m, err = shard.Start(ctx, n.shardConfig(client)); err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		n.log.Warn("joining the cluster failed; retrying", "err", err)
		if !sleep(ctx, time.Second) {
			return
		}
	}
	n.member.Store(m)
	n.log.Info("joined the cluster", "self", m.Self().Name, "gossip", m.Self().GossipAddr, "xds", m.Self().XDSAddr, "members", m.Ring().Len())
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		// Leave (graceful) was called by leave if the node stops; Close
		// is then a no-op, and it stops the membership otherwise.
		m.Close() //nolint:errcheck // always nil
	}()
	changed := m.Changed()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	// Rebalancing waits for the ring to settle: replicas that lose etcd
	// together flip to not ready one tick apart, and a ring that changes
	// and changes back within settleDelay moves nobody.
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	defer settle.Stop()
	var notReadySince time.Time
	for {
		// The ring hears of a replica not ready only once it has been so
		// for ringGrace: replicas that lose etcd together (it lost its
		// quorum) notice seconds apart, and would otherwise move their
		// nodes to each other in turn.
		if n.ready() {
			notReadySince = time.Time{}
			m.SetReady(true)
		} else {
			if notReadySince.IsZero() {
				notReadySince = time.Now()
			}
			if time.Since(notReadySince) >= ringGrace {
				m.SetReady(false)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-changed:
			changed = m.Changed()
			settle.Reset(settleDelay)
		case <-settle.C:
			// A later rebalance supersedes this one.
			wg.Add(1)
			go func() {
				defer wg.Done()
				if moved := n.relay.Rebalance(ctx, n.rebalanceHome); moved > 0 {
					n.log.Info("rebalanced streams after a membership change", "closed", moved, "members", m.Ring().Len())
				}
			}()
		}
	}
}

// settleDelay is how long the ring must stay unchanged before streams
// whose home moved are closed.
const settleDelay = time.Second

// ringGrace is how long a replica stays not ready before the ring stops
// giving it homes (unless most replicas are not ready: see
// shard.ReadyRing).
const ringGrace = 10 * time.Second

// watchReadiness keeps the gRPC health status in step with readiness
// (the view current, etcd heard from lately) until ctx ends.
func (n *Node) watchReadiness(ctx context.Context) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := false
	for {
		if ok, why := n.readiness(); ok != last {
			last = ok
			st := healthpb.HealthCheckResponse_NOT_SERVING
			if ok {
				st = healthpb.HealthCheckResponse_SERVING
				n.log.Info("ready", "revision", n.view.Load().Snapshot().Revision)
			} else {
				n.log.Warn("not ready", "why", why)
			}
			// After a shutdown began this is ignored (health.Shutdown).
			n.health.SetServingStatus("", st)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// leave leaves the cluster gracefully, so peers re-home this replica's
// nodes at once.
func (n *Node) leave() {
	if m := n.member.Load(); m != nil {
		if err := m.Leave(2 * time.Second); err != nil {
			n.log.Warn("leaving the cluster", "err", err)
		}
	}
}

// clusterStatus is what /debug/cluster shows.
type clusterStatus struct {
	Self      string             `json:"self"`
	Clustered bool               `json:"clustered"`
	Ready     bool               `json:"ready"`
	Members   []shard.Member     `json:"members"`
	Ring      []string           `json:"ring"`
	Shares    map[string]float64 `json:"ring_shares"`
	Relayed   int                `json:"streams_relayed"`
	Local     int                `json:"streams_local"`
}

func (n *Node) serveDebugCluster(w http.ResponseWriter, _ *http.Request) {
	cs := clusterStatus{Self: n.cfg.Name, Clustered: n.clustered(), Ready: n.ready()}
	if m := n.member.Load(); m != nil {
		cs.Members = m.Members()
		r := m.Ring()
		for _, mem := range r.Members() {
			cs.Ring = append(cs.Ring, mem.Name)
		}
		cs.Shares = r.Shares()
	}
	for _, s := range n.relay.Streams() {
		if s.ServedBy == relay.Local {
			cs.Local++
		} else {
			cs.Relayed++
		}
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(cs) //nolint:errcheck // the client went away
}

// relayStreams is what /debug/streams shows of the relay.
func (n *Node) relayStreams() []relay.StreamInfo { return n.relay.Streams() }

// advertiseHost is the host other replicas reach this one on: the host of
// --advertise-addr, else of --xds-addr or --gossip-addr if not a
// wildcard, else this machine's first private (or else non-loopback)
// address.
func advertiseHost(advertise, xds, gossip string) string {
	if advertise != "" {
		if h, _, err := net.SplitHostPort(advertise); err == nil {
			return h
		}
		return advertise
	}
	for _, a := range []string{xds, gossip} {
		if h, _, err := net.SplitHostPort(a); err == nil && !isWildcard(h) {
			return h
		}
	}
	return machineIP()
}

func isWildcard(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }

// machineIP returns the first private IPv4 address of the machine, else
// the first non-loopback one, else 127.0.0.1.
func machineIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "127.0.0.1"
	}
	var other string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.To4() == nil {
			continue
		}
		if ipn.IP.IsPrivate() {
			return ipn.IP.String()
		}
		if other == "" {
			other = ipn.IP.String()
		}
	}
	if other != "" {
		return other
	}
	return "127.0.0.1"
}

// withPort returns addr with port added if it has none.
func withPort(addr, port string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	return net.JoinHostPort(addr, port)
}

func portOf(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "0"
	}
	if _, err := strconv.Atoi(p); err != nil {
		return "0"
	}
	return p
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// csdsService is the CSDS service of a node: its status.CSDS once Run has
// connected to etcd, UNAVAILABLE before.
type csdsService struct {
	statusv3.UnimplementedClientStatusDiscoveryServiceServer
	n *Node
}

var errNoCSDS = grpcstatus.Error(codes.Unavailable, "not ready: not connected to etcd yet")

func (c csdsService) FetchClientStatus(ctx context.Context, req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	s := c.n.csds.Load()
	if s == nil {
		return nil, errNoCSDS
	}
	return s.FetchClientStatus(ctx, req)
}

func (c csdsService) StreamClientStatus(stream grpc.BidiStreamingServer[statusv3.ClientStatusRequest, statusv3.ClientStatusResponse]) error {
	s := c.n.csds.Load()
	if s == nil {
		return errNoCSDS
	}
	return s.StreamClientStatus(stream)
}

// nodeStatus is the status writer's source: the nodes this replica serves.
func (n *Node) nodeStatus() []status.NodeStatus {
	return status.FromStreams(n.cfg.Name, xdsstream.Summaries(n.sotw.Streams()), xdsstream.Summaries(n.delta.Streams()))
}
