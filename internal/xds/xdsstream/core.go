package xdsstream

import (
	"context"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/xds/wire"
)

// Protocol names an xDS protocol for the core.
type Protocol struct {
	// Name is "sotw" or "delta": the metrics' subsystem
	// (legation_<Name>_...) and the prefix of a stream's protocol in its
	// status ("sotw-ads", "delta-cluster", ...).
	Name string
	// Title names the protocol in help texts and errors ("SotW").
	Title string
	// Incremental is true for delta xDS, the only protocol that serves
	// the DeltaOnly types.
	Incremental bool
	// ReadsTTL reports whether a client reads TTLs on the wire in this
	// protocol, from its Node's client features (promise 8).
	ReadsTTL func(*corev3.Node) bool
}

// Serves returns nil if the protocol serves type t, else the
// INVALID_ARGUMENT a request for it is answered: a DeltaOnly type over
// SotW (its bare messages would not say which resource is which).
func (p Protocol) Serves(t *resource.Type) error {
	if t.DeltaOnly && !p.Incremental {
		return status.Errorf(codes.InvalidArgument, "type_url %q is served over delta xDS only: an %s has no name of its own, so only delta's named resources can carry it", t.URL, t.MessageName())
	}
	return nil
}

// Core is what one protocol's server shares among its streams: its
// config, metrics, body cache and registry of open streams. T is the
// protocol's per-type stream status. Its methods may be called
// concurrently.
type Core[T Reporter] struct {
	Config  Config
	Metrics *Metrics
	// ControlPlane is what every response carries as control_plane (it
	// names the replica: Config.Identifier); nil when none. Shared, never
	// modified: set once in a body, which is encoded once and shared.
	ControlPlane *corev3.ControlPlane
	// Shared are the histogram families all protocols share.
	Shared *Shared
	// Cache shares encoded response bodies among the streams.
	Cache wire.Cache

	// Statuses is the registry of open streams and what they report.
	Statuses[T]

	proto  Protocol
	types  []*typeMetrics // by resource.Type.Order
	nextID atomic.Uint64
	nacks  nackLog
	// refusedLog and timeoutLog pace the lines of refused streams and of
	// send timeouts.
	refusedLog, timeoutLog burstLog
}

// NewCore checks cfg, fills its defaults and registers the common metrics
// of protocol p. It does no I/O.
func NewCore[T Reporter](p Protocol, cfg Config) (*Core[T], error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sh, err := SharedMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	c := &Core[T]{Config: cfg, Metrics: newMetrics(p, cfg.Registerer), Shared: sh, proto: p}
	c.types = newTypeMetrics(p.Name, c.Metrics, sh)
	if cfg.Identifier != "" {
		c.ControlPlane = &corev3.ControlPlane{Identifier: cfg.Identifier}
	}
	c.streams.Open = c.Metrics.Streams
	c.nacks = nackLog{window: cfg.NackLogWindow, log: cfg.Logger.With("protocol", p.Name)}
	c.Cache.Encoded = c.Metrics.Encodes.Inc
	return c, nil
}

// ErrNotReady is the status of a stream or poll that arrives before the
// view has loaded etcd's state.
var ErrNotReady = status.Error(codes.Unavailable, "not ready: the view has not loaded etcd's state yet")

// Snapshot returns the view's latest snapshot, or ErrNotReady.
func (c *Core[T]) Snapshot() (*view.Snapshot, error) {
	snap := c.Config.Source.Snapshot()
	if snap == nil {
		return nil, ErrNotReady
	}
	return snap, nil
}

// CatchUp returns the latest snapshot, waiting up to CatchupTimeout for it
// to reach rev, a version the client presents (promise 3). If the view
// does not get there in time it returns UNAVAILABLE, so the client retries
// elsewhere.
func (c *Core[T]) CatchUp(ctx context.Context, rev int64) (*view.Snapshot, error) {
	snap, err := c.Snapshot()
	if err != nil || rev <= snap.Revision {
		return snap, err
	}
	c.Metrics.Catchups.Inc()
	wctx, cancel := context.WithTimeout(ctx, c.Config.CatchupTimeout)
	defer cancel()
	snap, err = c.Config.Source.WaitRevision(wctx, rev)
	if err != nil {
		c.Metrics.CatchupFailures.Inc()
		return nil, status.Errorf(codes.Unavailable, "%s: this replica is behind version %d the client presented; retry elsewhere", c.proto.Name, rev)
	}
	return snap, nil
}

// Statuses is the registry of a server's open streams and the status
// they report (/debug/streams, the status writer). A Core holds one; a
// protocol's server embeds a pointer to it (Core.Statuses), so that its
// methods are the server's. Its methods may be called concurrently.
type Statuses[T Reporter] struct {
	streams Registry[*Stream[T]]
	// statusGen counts the changes of what Streams returns: a stream
	// opened or closed, a status set.
	statusGen atomic.Uint64
}

// StatusGeneration changes whenever what Streams returns may have: a
// reader that saw the same generation before has nothing new to read.
func (c *Statuses[T]) StatusGeneration() uint64 { return c.statusGen.Load() }

// Streams returns the status of every open stream, by id.
func (c *Statuses[T]) Streams() []Status[T] {
	return Each(&c.streams, (*Stream[T]).Status)
}

// Stamps calls fn for every open stream that has had its first request:
// its node id, its id, and a count of its status changes. A status writer
// compares them with what it last saw to find the nodes whose records may
// have changed, without copying any status. fn is called without the
// registry's lock held.
func (c *Statuses[T]) Stamps(fn func(node string, stream, changes uint64)) {
	c.streams.Range(func(s *Stream[T]) {
		if node, n := s.status.stamp(); node != "" {
			fn(node, s.ID, n)
		}
	})
}

// SummariesOf returns the summaries of the open streams whose node id want
// selects, in no particular order.
func (c *Statuses[T]) SummariesOf(want func(node string) bool) []Summary {
	var out []Summary
	c.streams.Range(func(s *Stream[T]) {
		if sum, ok := s.status.summary(want); ok {
			out = append(out, sum)
		}
	})
	return out
}

// Protocol is the protocol the core serves.
func (c *Core[T]) Protocol() Protocol { return c.proto }
