package shard

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation"
)

// Membership is this replica's place in the cluster: its memberlist
// instance, its registry record under a lease, and the current Ring. Its
// methods may be called concurrently.
type Membership struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	ml      *memberlist.Memberlist
	ring    atomic.Pointer[Ring]
	lease   atomic.Int64 // clientv3.LeaseID of the registry record; 0: none

	// Lock order: buildMu, then nodesMu or mu, never both. memberlist
	// holds its node lock while it calls events, which take nodesMu, and
	// NodeMeta takes mu: so no memberlist method is ever called with
	// nodesMu or mu held.

	buildMu   sync.Mutex  // serializes rebuild (the builder goroutine and Start); guards dampTimer
	dampTimer *time.Timer // wakes the builder when the first damping runs out

	mu      sync.Mutex // guards self, changed, and swaps of ring
	self    Member
	changed chan struct{} // closed when ring next changes

	nodesMu sync.Mutex            // guards nodes, dead, badMeta, registered and unregistered
	nodes   map[string]gossipNode // alive (or suspect, or dead but damped) members by name, this one included
	// dead holds the members of nodes that memberlist declared dead,
	// with when (damping.go): they stay on the ring for RingDamping.
	dead map[string]time.Time
	// toProbe holds the xDS addresses of the members just declared dead,
	// by name, for probeLoop to confirm (damping.go).
	toProbe map[string]string
	badMeta map[string]string // name -> unreadable meta already warned about
	// registered is the registry as last read (registered.go): the
	// members registered in etcd under a live lease, by name. Only those
	// of the alive members are on the ring.
	registered map[string]Member
	// unregistered holds the alive members left off the ring for not
	// being registered, by name.
	unregistered map[string]outsider
	// replicaIPs is the set of the registered members' IP addresses
	// (IsReplicaAddr).
	replicaIPs atomic.Pointer[map[netip.Addr]struct{}]

	// encrypted: gossip has a keyring (GossipKeyFile). warnedNoKey: the
	// error about a cluster gossiping in clear was logged, and not since
	// the cluster was back to one member. Guarded by buildMu.
	encrypted   bool
	warnedNoKey bool

	buildKick  chan struct{} // cap 1: gossip membership changed
	metaKick   chan struct{} // cap 1: self's meta changed, broadcast it
	recordKick chan struct{} // cap 1: self's record changed, write it
	resyncKick chan struct{} // cap 1: read the registry again and restart its watch
	probeKick  chan struct{} // cap 1: a death to confirm (toProbe)
	joined     chan struct{} // closed after the first join attempt

	cancel context.CancelFunc
	wg     sync.WaitGroup

	stopOnce sync.Once
}

// gossipNode is what memberlist told us about an alive node, copied out of
// its callbacks.
type gossipNode struct {
	addr string
	meta []byte
}

// Start joins this replica to the cluster: it binds memberlist, registers
// this replica in etcd under a lease kept alive, joins the seeds in
// cfg.Join or else the registered peers, and returns once the first join
// attempt is done (an unreachable or absent peer is not an error: a
// replica alone is a cluster of one). The member starts not Ready; call
// SetReady when its view is current.
//
// ctx bounds start-up only: if it ends first, Start undoes what it did and
// returns ctx's error. The Membership lives until Leave or Close.
func Start(ctx context.Context, cfg Config) (*Membership, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := newMembership(cfg)
	mlc, err := m.memberlistConfig()
	if err != nil {
		return nil, err
	}
	keySum, err := m.loadKeyring(mlc)
	if err != nil {
		return nil, err
	}
	m.ml, err = memberlist.Create(mlc)
	if err != nil {
		return nil, fmt.Errorf("shard: start memberlist on %s: %w", cfg.BindAddr, err)
	}
	m.mu.Lock()
	m.self.GossipAddr = m.ml.LocalNode().Address()
	m.mu.Unlock()

	root, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.cancel = cancel
	ka, rev, err := m.enterRegistry(ctx, root)
	if err != nil {
		return nil, err
	}
	m.rebuild()
	m.startLoops(root, ka, rev, mlc.Keyring, keySum)

	select {
	case <-m.joined:
	case <-ctx.Done():
		// Undo: leave what was joined and delete the record now.
		m.Leave(m.cfg.TCPTimeout) //nolint:errcheck // ctx's error is the one to report
		return nil, fmt.Errorf("shard: start: %w", ctx.Err())
	}
	m.rebuild()
	if err := m.metrics.register(cfg.Registerer); err != nil {
		m.Leave(m.cfg.TCPTimeout) //nolint:errcheck // the registration error is the one to report
		return nil, err
	}
	m.log.Info("shard: joined the cluster", "gossip_addr", m.Self().GossipAddr, "members", m.Ring().Len(),
		"gossip_encrypted", mlc.Keyring != nil)
	return m, nil
}

// newMembership is the Membership of cfg (filled and valid), alone on
// its ring, before anything is started.
func newMembership(cfg Config) *Membership {
	m := &Membership{
		cfg:          cfg,
		log:          cfg.Logger.With("member", cfg.Name),
		metrics:      newMetrics(),
		changed:      make(chan struct{}),
		nodes:        make(map[string]gossipNode),
		dead:         make(map[string]time.Time),
		toProbe:      make(map[string]string),
		probeKick:    make(chan struct{}, 1),
		badMeta:      make(map[string]string),
		registered:   make(map[string]Member),
		unregistered: make(map[string]outsider),
		buildKick:    make(chan struct{}, 1),
		metaKick:     make(chan struct{}, 1),
		recordKick:   make(chan struct{}, 1),
		resyncKick:   make(chan struct{}, 1),
		joined:       make(chan struct{}),
		self: Member{
			Name:     cfg.Name,
			XDSAddr:  cfg.XDSAddr,
			HTTPAddr: cfg.HTTPAddr,
			// Milliseconds: what the gossip meta carries, so that Self and
			// the ring's copy of this member are equal.
			Started:     time.Now().UTC().Truncate(time.Millisecond),
			Version:     legation.Version(),
			Authorities: slices.Clone(cfg.Authorities),
		},
	}
	m.ring.Store(NewRing(nil, cfg.VNodes))
	return m
}

// startLoops starts the goroutines that keep the membership until root
// ends: the ring builder, the meta announcer, the registry record and
// its watch, peer discovery, and with a keyring kr the key file's
// follower (from the content of checksum keySum).
func (m *Membership) startLoops(root context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse, rev int64, kr *memberlist.Keyring, keySum [sha256.Size]byte) {
	m.wg.Add(6)
	go m.buildLoop(root)
	go m.probeLoop(root)
	go m.announceLoop(root)
	go m.registryLoop(root, ka)
	go m.registeredLoop(root, rev)
	go m.discoveryLoop(root)
	if kr != nil {
		m.wg.Add(1)
		go m.keyLoop(root, kr, keySum)
	}
}

func (m *Membership) memberlistConfig() (*memberlist.Config, error) {
	c := memberlist.DefaultLANConfig()
	c.Name = m.cfg.Name
	host, port, err := splitBind(m.cfg.BindAddr)
	if err != nil {
		return nil, err
	}
	c.BindAddr, c.BindPort = host, port
	c.AdvertisePort = port
	if m.cfg.AdvertiseAddr != "" {
		host, port, err := splitAdvertise(m.cfg.AdvertiseAddr)
		if err != nil {
			return nil, err
		}
		c.AdvertiseAddr = host
		if port != 0 {
			c.AdvertisePort = port
		}
	}
	// With a keyring (Start sets it from GossipKeyFile), what is sent is
	// encrypted and what is received must be: a packet or stream in clear
	// or under another key is dropped (memberlist's defaults, said here
	// because they are what keeps a replica without the key off the ring).
	c.GossipVerifyIncoming = true
	c.GossipVerifyOutgoing = true
	c.ProbeInterval = m.cfg.ProbeInterval
	c.ProbeTimeout = m.cfg.ProbeTimeout
	c.SuspicionMult = m.cfg.SuspicionMult
	c.GossipInterval = m.cfg.GossipInterval
	c.TCPTimeout = m.cfg.TCPTimeout
	// A replica restarted under its old name at a new address (a
	// Kubernetes pod) takes the name back once the old one is dead,
	// instead of being refused until the dead entry is reaped (30s).
	c.DeadNodeReclaimTime = m.cfg.ProbeInterval
	c.Delegate = (*delegate)(m)
	c.Events = (*events)(m)
	c.Logger = log.New(&logWriter{log: m.log}, "", 0)
	return c, nil
}

// Self returns this replica's record as it is now.
func (m *Membership) Self() Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.self
}

// Ring returns the current ring. It is cheap (an atomic load), and the
// ring is immutable.
func (m *Membership) Ring() *Ring { return m.ring.Load() }

// Home returns the home of nodeID on the current ring; false when the
// ring is empty.
func (m *Membership) Home(nodeID string) (Member, bool) { return m.Ring().Home(nodeID) }

// Members returns the members gossip knows as alive (suspected ones
// included), ready or not, this one included, sorted by name. Members
// whose meta cannot be read are left out, as they are from the ring.
func (m *Membership) Members() []Member {
	m.nodesMu.Lock()
	out := make([]Member, 0, len(m.nodes))
	for name, n := range m.nodes {
		if mem, err := decodeMeta(name, n.addr, n.meta); err == nil {
			out = append(out, mem)
		}
	}
	m.nodesMu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Changed returns a channel closed when the ring changes after this call.
// Take a new one after each change. To follow the ring without missing a
// change, call Changed before Ring:
//
//	for {
//		ch := m.Changed()
//		use(m.Ring())
//		<-ch
//	}
//
// After Leave or Close the ring no longer changes.
func (m *Membership) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// SetReady sets whether this replica's view is current. It does not block:
// the new record is put in this replica's gossip meta and broadcast
// (memberlist UpdateNode), and written to the etcd registry, in the
// background; Self reflects it at once, the rings of this replica and its
// peers as soon as the update has gone round (a gossip round or two). After
// Leave or Close only Self changes.
func (m *Membership) SetReady(ready bool) {
	m.mu.Lock()
	same := m.self.Ready == ready
	m.self.Ready = ready
	m.mu.Unlock()
	if same {
		return
	}
	kick(m.metaKick)
	kick(m.recordKick)
}

// Leave leaves the cluster gracefully: it stops the background work,
// broadcasts a leave so peers drop this replica from their rings at once
// (waiting up to timeout for the broadcast to go out), shuts memberlist
// down and revokes the registry lease (again bounded by timeout), so the
// record disappears at once. timeout <= 0 means 5s. It is idempotent, and
// after Close it does nothing.
func (m *Membership) Leave(timeout time.Duration) error {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	var err error
	m.stopOnce.Do(func() {
		m.stop()
		if e := m.ml.Leave(timeout); e != nil {
			err = fmt.Errorf("shard: leave: %w", e)
		}
		m.ml.Shutdown() //nolint:errcheck // shutting down the transport; nothing to do about a failure
		if e := m.revoke(timeout); e != nil {
			err = errors.Join(err, e)
		}
		m.log.Info("shard: left the cluster")
	})
	return err
}

// Close stops everything, as a crash would but with every goroutine
// waited for: no leave is broadcast, so peers notice this replica is gone
// only when it stops answering probes, and the registry lease is not
// revoked, only no longer kept alive, so the record expires after LeaseTTL.
// Call Leave first for a graceful exit. Close is idempotent and returns
// nil.
func (m *Membership) Close() error {
	m.stopOnce.Do(func() {
		m.stop()
		m.ml.Shutdown() //nolint:errcheck // shutting down the transport; nothing to do about a failure
		m.log.Info("shard: closed")
	})
	return nil
}

// stop ends the goroutines and waits for them. The registry keep-alive
// stops with them.
func (m *Membership) stop() {
	m.cancel()
	m.wg.Wait()
	m.buildMu.Lock()
	m.armDamping(0)
	m.buildMu.Unlock()
	m.metrics.unregister()
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// --- the ring ---

// buildLoop rebuilds the ring when memberlist reports a change.
func (m *Membership) buildLoop(ctx context.Context) {
	defer m.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.buildKick:
			m.rebuild()
		}
	}
}

// rebuild builds the ring from the alive members that are registered
// (admitted) and, if it differs from the current one, swaps it in and
// closes the Changed channel.
func (m *Membership) rebuild() {
	m.buildMu.Lock()
	defer m.buildMu.Unlock()

	alive, onRing, registered, damped, next := m.candidates()
	m.armDamping(next)
	r := ReadyRing(onRing, m.cfg.VNodes)
	m.metrics.alive.Set(float64(len(alive) - damped))
	m.metrics.damped.Set(float64(damped))
	m.metrics.registered.Set(float64(registered))
	m.metrics.unregistered.Set(float64(len(alive) - len(onRing)))
	m.metrics.ringMembers.Set(float64(r.Len()))
	m.metrics.share.Set(r.shares[m.cfg.Name])
	m.warnClear(max(len(alive), registered))

	m.mu.Lock()
	if r.equal(m.ring.Load()) {
		m.mu.Unlock()
		return
	}
	// Stored under mu with the channel swap, so that a Changed taken
	// before a Ring is always closed if that ring is replaced.
	m.ring.Store(r)
	ch := m.changed
	m.changed = make(chan struct{})
	m.mu.Unlock()
	close(ch)

	m.metrics.ringChanges.Inc()
	names := make([]string, 0, r.Len())
	for _, mem := range r.members {
		names = append(names, mem.Name)
	}
	m.log.Info("shard: ring changed", "alive", len(alive), "ring", strings.Join(names, ","))
}

// outsider is an alive member left off the ring for not being
// registered: since when, at which gossip address, and whether it was
// warned about.
type outsider struct {
	gossipAddr string
	since      time.Time
	warned     bool
}

// outsidersPending reports whether an alive member not registered has not
// been warned about yet: the ring is rebuilt once in a while to do so.
func (m *Membership) outsidersPending() bool {
	m.nodesMu.Lock()
	defer m.nodesMu.Unlock()
	for _, o := range m.unregistered {
		if !o.warned {
			return true
		}
	}
	return false
}

// candidates returns the alive members whose meta decodes (the dead
// ones still damped included), those of them admitted to the ring
// (registered in etcd with the addresses they gossip), the number
// registered, the number damped and the awake time until the first
// damping runs out. It warns, once each, of members whose meta is
// unreadable and of members not registered.
func (m *Membership) candidates() (alive, onRing []Member, registered, damped int, next time.Duration) {
	type bad struct{ name, meta string }
	var (
		newBad    []bad
		outsiders []Member
	)
	m.nodesMu.Lock()
	damped, next = m.expireDead()
	for name, n := range m.nodes {
		mem, err := decodeMeta(name, n.addr, n.meta)
		if err != nil {
			if m.badMeta[name] != string(n.meta) {
				m.badMeta[name] = string(n.meta)
				newBad = append(newBad, bad{name, string(n.meta)})
			}
			continue
		}
		delete(m.badMeta, name)
		alive = append(alive, mem)
		if m.admitted(mem) {
			delete(m.unregistered, name)
			onRing = append(onRing, mem)
			continue
		}
		o, ok := m.unregistered[name]
		if !ok || o.gossipAddr != mem.GossipAddr {
			o = outsider{gossipAddr: mem.GossipAddr, since: time.Now()}
		}
		// A replica registers before it gossips, but its peers' watches
		// may hear of it after their gossip does: only one still not
		// registered after a lease's TTL is worth a warning.
		if !o.warned && time.Since(o.since) >= m.cfg.LeaseTTL {
			o.warned = true
			outsiders = append(outsiders, mem)
		}
		m.unregistered[name] = o
	}
	for name := range m.unregistered {
		if _, ok := m.nodes[name]; !ok {
			delete(m.unregistered, name)
		}
	}
	registered = len(m.registered)
	m.nodesMu.Unlock()
	for _, b := range newBad {
		m.metrics.badMeta.Inc()
		m.log.Warn("shard: gossip member with unreadable meta left off the ring", "peer", b.name, "meta", b.meta)
	}
	for _, o := range outsiders {
		if o.Name == m.cfg.Name {
			m.log.Warn("shard: this replica is not registered in etcd under a live lease: off the ring until it is")
			continue
		}
		m.log.Warn("shard: gossip member not registered in etcd under a live lease (or at other addresses) left off the ring",
			"peer", o.Name, "gossip_addr", o.GossipAddr, "xds_addr", o.XDSAddr)
	}
	return alive, onRing, registered, damped, next
}

// warnClear logs, at Error, that gossip is in clear in a cluster of more
// than one replica (members): once when the cluster grows past one, again
// only after it was back to one.
func (m *Membership) warnClear(members int) {
	switch {
	case m.encrypted || members <= 1:
		m.warnedNoKey = false
	case !m.warnedNoKey:
		m.warnedNoKey = true
		m.log.Error("shard: a cluster of more than one replica gossips in clear: any host that reaches the gossip port "+
			"can join the gossip and read the members' records; set --gossip-key-file on every replica (docs/operations/security.md)",
			"members", members)
	}
}

// delegate is memberlist's Delegate for a Membership. memberlist calls its
// methods from its own goroutines; they must be thread-safe and must not
// block.
type delegate Membership

// NodeMeta returns this replica's record in meta form. Config.Validate
// checked that it fits limit.
func (d *delegate) NodeMeta(limit int) []byte {
	m := (*Membership)(d)
	b := encodeMeta(m.Self())
	if len(b) > limit {
		// Unreachable after Validate; memberlist would panic on it.
		return nil
	}
	return b
}

func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

var _ memberlist.Delegate = (*delegate)(nil)

// announceLoop broadcasts this replica's meta after SetReady changed it.
func (m *Membership) announceLoop(ctx context.Context) {
	defer m.wg.Done()
	// UpdateNode waits for the broadcast to go out to a peer; a few gossip
	// rounds is plenty, and bounds how long Close waits for this loop.
	timeout := max(time.Second, 5*m.cfg.GossipInterval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.metaKick:
			if err := m.ml.UpdateNode(timeout); err != nil {
				m.log.Debug("shard: meta update not yet broadcast", "err", err)
			}
		}
	}
}
