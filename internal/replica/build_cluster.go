package replica

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/cluster/shard"
)

// agentConfig is the config of the replica's cluster agent: alone in dev
// mode and with --standalone, else a member of the cluster of the
// replicas sharing its etcd prefix (docs/concepts/design.md, "The cluster"), at
// the addresses derived from the flags and the bound listeners.
func (n *Node) agentConfig() shard.AgentConfig {
	c := shard.DefaultAgentConfig()
	c.Alone = n.cfg.DevMode() || n.cfg.Standalone
	c.Membership.Name = n.cfg.Name
	c.Membership.Client = n.client
	c.Membership.Prefix = n.cfg.EtcdPrefix
	c.Membership.Logger = n.log
	c.Membership.Registerer = n.reg
	c.Membership.GossipKeyFile = n.cfg.GossipKeyFile
	c.Membership.Authorities = n.cfg.Authorities
	c.Membership.RingDamping = n.cfg.RingDamping
	c.Membership.Clock = n.clock
	if !c.Alone {
		c.Membership.SetReplicaAddrs(shard.ReplicaAddrs{
			Gossip:    n.cfg.GossipAddr,
			Advertise: n.cfg.AdvertiseAddr,
			XDS:       n.cfg.XDSAddr,
			XDSBound:  n.XDSAddr(),
			HTTPBound: n.HTTPAddr(),
			Join:      n.cfg.Join,
		})
	}
	c.Ready = n.ready
	c.ReadyChanged = n.readyChanged // watchReadiness tells it of each change
	c.Rebalance = n.rebalance
	return c
}

// buildRelay makes the relay, which takes a stream whose node's home is
// another replica there.
func (n *Node) buildRelay() error {
	cfg := n.cfg
	rcfg := relay.DefaultConfig()
	rcfg.Self = cfg.Name
	rcfg.Home = n.cluster.Home
	rcfg.Next = n.cluster.Next
	rcfg.Clock = n.clock
	rcfg.Rate = cfg.RebalanceRate
	rcfg.Burst = max(1, int(cfg.RebalanceRate/5))
	rcfg.TrustMarker = n.guard.TrustRelay
	// From the address the registry holds: a plaintext home trusts the
	// relay marker from there only.
	rcfg.SourceIP = n.cluster.AdvertisedIP()
	rcfg.Forward = n.guard.Forward
	cfg.relayBounds(&rcfg)
	if n.tls != nil {
		// Replicas relay to each other over mTLS, each checking that the
		// other presents a replica's identity.
		rcfg.DialOptions = append(rcfg.DialOptions, grpc.WithTransportCredentials(credentials.NewTLS(n.tls.ClientConfig(n.verifyReplica))))
	}
	rcfg.DialOptions = append(rcfg.DialOptions, cfg.Tracing.DialOptions()...)
	rcfg.Drained = n.xdsConns.closeSoon
	rcfg.Logger = n.log
	rcfg.Registerer = n.reg
	var err error
	if n.relay, err = relay.New(rcfg); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return nil
}

// rebalance closes the streams whose node's home moved away from this
// replica (shard.AgentConfig.Rebalance: called once the cluster agent has
// joined).
func (n *Node) rebalance(ctx context.Context) {
	n.rebalancing.Store(true)
	n.ringChanged.Store(time.Now().UnixNano())
	defer func() {
		n.ringChanged.Store(time.Now().UnixNano())
		n.rebalancing.Store(false)
	}()
	home := func(nodeID string) (string, bool) {
		name, _, self := n.cluster.Home(nodeID)
		return name, self
	}
	if moved := n.relay.Rebalance(ctx, home); moved > 0 {
		n.log.Info("rebalanced streams after a membership change", "closed", moved, "members", n.cluster.Membership().Ring().Len())
	}
}

// shareFloor is the streams --max-streams-share always admits: below it
// the estimate of the fair share is too noisy to refuse anyone on.
const shareFloor = 100

// shareFloor is the floor of the share cap: the constant, unless a test
// set one.
func (n *Node) shareFloor() int {
	if n.cfg.shareFloor > 0 {
		return n.cfg.shareFloor
	}
	return shareFloor
}

// fairShare estimates this replica's fair share of the cluster's streams
// (limits.Config.FairShare) from what it knows locally: the streams it
// serves are those of the nodes it is home to, about its share of the
// ring of all the cluster's streams, so the cluster has about served /
// share streams, and a fair share is that divided by the members. Unknown
// (false) alone, before the agent joined, and while this replica is not
// on the ring.
func (n *Node) fairShare() (float64, bool) {
	if n.cfg.fairShare != nil {
		return n.cfg.fairShare()
	}
	m := n.cluster.Membership()
	if m == nil {
		return 0, false
	}
	ring := m.Ring()
	members := ring.Len()
	if members < 2 {
		return 0, false
	}
	share := ring.Shares()[n.cfg.Name]
	if share <= 0 {
		return 0, false
	}
	return float64(n.served.Load()) / share / float64(members), true
}
