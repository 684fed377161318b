package shard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// AgentConfig configures an Agent: the cluster policy of one replica.
type AgentConfig struct {
	// Membership is what Run joins the cluster with. Its Name is this
	// replica's name, which Home and Next answer while it is not in the
	// cluster; its Logger gets the agent's logs too. Unless Alone, it must
	// pass Validate.
	Membership Config
	// Alone keeps the replica out of any cluster (xds-node's dev mode and
	// --standalone): Run joins nothing and only waits for its ctx, Home and
	// Next always answer this replica, Leave does nothing. Membership is
	// then not validated; only its Name is used, and must not be empty.
	Alone bool

	// Ready reports whether this replica can serve (its view is current).
	// Run calls it from its own goroutine every Tick (or, with
	// ReadyChanged, when told); it must not block.
	Ready func() bool
	// ReadyChanged, if set, is how Run learns that Ready's answer may have
	// changed: it reads Ready when a value arrives on it (and when
	// RingGrace has passed since it turned not ready), instead of every
	// Tick, so an idle agent does not wake. Whoever sends must send each
	// time Ready's answer may have changed, without blocking (a channel
	// of capacity 1 and a send that gives up when it is full).
	ReadyChanged <-chan struct{}
	// Rebalance is called once the ring has stayed unchanged for
	// SettleDelay after a change, each time in a goroutine of its own
	// (a ring that changes again during a call brings another call, which
	// may overlap the first). Its ctx is Run's; Run waits for every call
	// to return. Nil: nothing is called.
	Rebalance func(ctx context.Context)

	// RetryInterval is the wait between two attempts to join (Start). Zero:
	// 1s.
	RetryInterval time.Duration
	// Tick is how often Ready is read, without ReadyChanged. Zero: 250ms.
	Tick time.Duration
	// RingGrace is how long this replica stays not ready before the ring
	// hears of it (SetReady(false)), so that replicas noticing an etcd
	// outage seconds apart do not move their nodes to each other in turn.
	// Being ready again is told at once. Zero: 10s.
	RingGrace time.Duration
	// SettleDelay is how long the ring must stay unchanged before
	// Rebalance is called: replicas that lose etcd together flip to not
	// ready one tick apart, and a ring that changes and changes back within
	// it moves nobody. Zero: 1s.
	SettleDelay time.Duration
	// MaxRebalancePause bounds how long Rebalance waits while this
	// replica is overloaded (Membership.Overloaded): a replica starved of
	// CPU does not add a wave of reconnects to its trouble, but moves its
	// streams at last if the overload lasts. Zero: 30s.
	MaxRebalancePause time.Duration
}

// DefaultAgentConfig returns the defaults, with Membership's from
// DefaultConfig; Membership.Name, XDSAddr and Client, Ready and Rebalance
// are left for the caller.
func DefaultAgentConfig() AgentConfig {
	return AgentConfig{
		Membership:    DefaultConfig(),
		RetryInterval: time.Second,            // between two join attempts
		Tick:          250 * time.Millisecond, // readiness is read this often
		RingGrace:     10 * time.Second,       // not ready this long before the ring hears of it
		SettleDelay:   time.Second,            // the ring unchanged this long before a rebalance
		// An overload of a few seconds passes; one that lasts this long
		// is the new normal, and homes must be right.
		MaxRebalancePause: 30 * time.Second,
	}
}

// fill replaces the zero durations with their defaults.
func (c *AgentConfig) fill() {
	d := DefaultAgentConfig()
	if c.RetryInterval == 0 {
		c.RetryInterval = d.RetryInterval
	}
	if c.Tick == 0 {
		c.Tick = d.Tick
	}
	if c.RingGrace == 0 {
		c.RingGrace = d.RingGrace
	}
	if c.SettleDelay == 0 {
		c.SettleDelay = d.SettleDelay
	}
	if c.MaxRebalancePause == 0 {
		c.MaxRebalancePause = d.MaxRebalancePause
	}
}

// Validate checks c, with zero durations taken as their defaults.
func (c AgentConfig) Validate() error {
	c.fill()
	if c.RetryInterval < 0 || c.Tick < 0 || c.RingGrace < 0 || c.SettleDelay < 0 || c.MaxRebalancePause < 0 {
		return fmt.Errorf("shard: agent: negative durations (RetryInterval %s, Tick %s, RingGrace %s, SettleDelay %s, MaxRebalancePause %s)",
			c.RetryInterval, c.Tick, c.RingGrace, c.SettleDelay, c.MaxRebalancePause)
	}
	if c.Alone {
		// Only Home and Next use the name: not the registry or gossip,
		// whose rules validName checks.
		if c.Membership.Name == "" {
			return errors.New("shard: agent: Membership.Name is required")
		}
		return nil
	}
	if c.Ready == nil {
		return errors.New("shard: agent: Ready is required")
	}
	return c.Membership.Validate()
}

// Agent is one replica's cluster policy: it joins the cluster once etcd
// answers, keeps the replica's readiness in its gossip record (after
// RingGrace when it turns not ready), and calls Rebalance once the ring
// settled after a change. Its methods may be called concurrently, before,
// during and after Run.
type Agent struct {
	cfg  AgentConfig
	log  *slog.Logger
	name string
	// member is nil until Run has joined the cluster (never set when
	// Alone); once set it stays.
	member atomic.Pointer[Membership]
}

// NewAgent checks cfg and returns an Agent; it does no I/O.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Membership.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Agent{cfg: cfg, log: log, name: cfg.Membership.Name}, nil
}

// Clustered reports whether the replica is meant to be in a cluster (not
// Alone), joined yet or not.
func (a *Agent) Clustered() bool { return !a.cfg.Alone }

// Membership returns the membership once Run has joined the cluster; nil
// before, and always when Alone.
func (a *Agent) Membership() *Membership { return a.member.Load() }

// Home returns the home of nodeID on the current ring: its name and xDS
// address, or self true (and no address) when it is this replica, the
// ring is empty, or this replica is not in the cluster. It is
// relay.Config.Home.
func (a *Agent) Home(nodeID string) (name, addr string, self bool) {
	m := a.member.Load()
	if m == nil {
		return a.name, "", true
	}
	h, ok := m.Home(nodeID)
	if !ok || h.Name == a.name {
		return a.name, "", true
	}
	return h.Name, h.XDSAddr, false
}

// Next is Home on the current ring without the replicas named in
// unreachable. It is relay.Config.Next.
func (a *Agent) Next(nodeID string, unreachable []string) (name, addr string, self bool) {
	m := a.member.Load()
	if m == nil {
		return a.name, "", true
	}
	h, ok := m.Ring().HomeExcluding(nodeID, func(name string) bool { return slices.Contains(unreachable, name) })
	if !ok || h.Name == a.name {
		return a.name, "", true
	}
	return h.Name, h.XDSAddr, false
}

// IsReplicaAddr reports whether ip is the address of a replica registered
// in etcd under a live lease (Membership.IsReplicaAddr); false before Run
// has joined, and always when Alone. It does not block.
func (a *Agent) IsReplicaAddr(ip netip.Addr) bool {
	m := a.member.Load()
	return m != nil && m.IsReplicaAddr(ip)
}

// AdvertisedIP returns the IP address this replica advertises to the
// others (the host of its xDS address, as the registry holds it): the
// address to relay from (relay.Config.SourceIP). Invalid when Alone, or
// when the host is a name.
func (a *Agent) AdvertisedIP() netip.Addr {
	if a.cfg.Alone {
		return netip.Addr{}
	}
	host, _, err := net.SplitHostPort(a.cfg.Membership.XDSAddr)
	if err != nil {
		return netip.Addr{}
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return ip.Unmap()
}

// Leave leaves the cluster gracefully (Membership.Leave, bounded by
// timeout), so peers re-home this replica's nodes at once. Before Run has
// joined, and when Alone, it does nothing. Run keeps its loop until its
// ctx ends.
func (a *Agent) Leave(timeout time.Duration) error {
	if m := a.member.Load(); m != nil {
		return m.Leave(timeout)
	}
	return nil
}

// Run joins the cluster, retrying every RetryInterval until Start
// succeeds (Start itself waits while etcd does not answer), then keeps
// this replica's readiness in its record and calls Rebalance after the
// ring changed, until ctx ends. It returns nil once everything it started
// has stopped; the membership is then closed, unless Leave left it
// before. When Alone it only waits for ctx. Call it once.
func (a *Agent) Run(ctx context.Context) error {
	if a.cfg.Alone {
		<-ctx.Done()
		return nil
	}
	m := a.join(ctx)
	if m == nil {
		return nil
	}
	a.member.Store(m)
	a.log.Info("joined the cluster", "self", m.Self().Name, "gossip", m.Self().GossipAddr, "xds", m.Self().XDSAddr, "members", m.Ring().Len())
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		// After Leave, Close is a no-op; otherwise it stops the
		// membership.
		m.Close() // always nil
	}()
	a.keep(ctx, m, &wg)
	return nil
}

// join starts the membership, retrying every RetryInterval until Start
// succeeds; nil once ctx ends first.
func (a *Agent) join(ctx context.Context) *Membership {
	for {
		m, err := Start(ctx, a.cfg.Membership)
		if err == nil {
			return m
		}
		if ctx.Err() != nil {
			return nil
		}
		a.log.Warn("joining the cluster failed; retrying", "err", err)
		if !sleep(ctx, a.cfg.RetryInterval) {
			return nil
		}
	}
}

// keep publishes this replica's readiness in m, and starts a Rebalance
// (in wg) once the ring has not changed for SettleDelay after a change,
// until ctx ends.
func (a *Agent) keep(ctx context.Context, m *Membership, wg *sync.WaitGroup) {
	changed := m.Changed()
	var tickC <-chan time.Time // nil with ReadyChanged: no polling
	if a.cfg.ReadyChanged == nil {
		tick := time.NewTicker(a.cfg.Tick)
		defer tick.Stop()
		tickC = tick.C
	}
	// grace fires when RingGrace has passed since the replica turned not
	// ready (with ReadyChanged; the ticks see it otherwise).
	grace := stoppedTimer()
	defer grace.Stop()
	settle := stoppedTimer()
	defer settle.Stop()
	var notReadySince, pausedSince time.Time
	for {
		a.publishReady(m, &notReadySince, grace)
		select {
		case <-ctx.Done():
			return
		case <-tickC:
		case <-a.cfg.ReadyChanged:
		case <-grace.C:
		case <-changed:
			changed = m.Changed()
			settle.Reset(a.cfg.SettleDelay)
		case <-settle.C:
			if a.pauseRebalance(m, &pausedSince) {
				settle.Reset(a.cfg.SettleDelay)
				continue
			}
			if a.cfg.Rebalance != nil {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a.cfg.Rebalance(ctx)
				}()
			}
		}
	}
}

// pauseRebalance reports whether the rebalance that is due waits, because
// this replica is overloaded and has been for less than
// MaxRebalancePause (since *pausedSince, zero when not paused).
func (a *Agent) pauseRebalance(m *Membership, pausedSince *time.Time) bool {
	if !m.Overloaded() {
		*pausedSince = time.Time{}
		return false
	}
	if pausedSince.IsZero() {
		*pausedSince = time.Now()
		m.metrics.rebalancePauses.Inc()
		a.log.Info("overloaded: the rebalance after the ring change waits", "max_pause", a.cfg.MaxRebalancePause)
	}
	if time.Since(*pausedSince) < a.cfg.MaxRebalancePause {
		return true
	}
	a.log.Warn("overloaded for longer than the rebalance may wait: rebalancing", "paused", time.Since(*pausedSince).Round(time.Second))
	*pausedSince = time.Time{}
	return false
}

// publishReady sets m's readiness from Ready: ready at once, not ready
// only once RingGrace has passed since *notReadySince, the time it
// turned not ready (zero while ready). With ReadyChanged, grace is set to
// fire when RingGrace will have passed.
func (a *Agent) publishReady(m *Membership, notReadySince *time.Time, grace *time.Timer) {
	if a.cfg.Ready() {
		*notReadySince = time.Time{}
		grace.Stop()
		m.SetReady(true)
		return
	}
	if notReadySince.IsZero() {
		*notReadySince = time.Now()
	}
	if left := a.cfg.RingGrace - time.Since(*notReadySince); left <= 0 {
		m.SetReady(false)
	} else if a.cfg.ReadyChanged != nil {
		grace.Reset(left)
	}
}

// sleep waits d, or less if ctx ends first; it reports whether d passed.
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
