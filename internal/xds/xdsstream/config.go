package xdsstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/legation-io/legation/internal/state/lease"
	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/state/xdstp"
	"github.com/legation-io/legation/internal/xds/limits"
)

// Source is what a server reads resources from; *view.View is one. Both
// methods may be called from many goroutines at once.
type Source interface {
	// Snapshot returns the latest snapshot, nil before the first load.
	Snapshot() *view.Snapshot
	// WaitRevision blocks until a snapshot at rev or later exists, or ctx
	// ends.
	WaitRevision(ctx context.Context, rev int64) (*view.Snapshot, error)
	// Interest registers what a stream of group, on the transport
	// connection conn (limits.Conn; nil: unknown), can see, to be woken
	// only by changes it concerns (view.View.Interest); nil: the
	// stream advances on every snapshot.
	Interest(group string, conn any) *view.Interest
}

var _ Source = (*view.View)(nil)

// Leases is what a server needs of the lease tracker (*lease.Tracker is
// one). Its methods may be called from many goroutines at once; Expiry may
// block for one etcd query.
type Leases interface {
	// Expiry returns when e's lease expires (a lower bound of etcd's).
	Expiry(ctx context.Context, e *view.Entry) time.Time
	// Notice returns the current notice of lease extensions.
	Notice() *lease.Notice
	// NextCheck returns when the lease is next checked for an extension.
	NextCheck(id int64) time.Time
}

var _ Leases = (*lease.Tracker)(nil)

// Authorizer decides what the client of a stream or poll may claim and
// see (docs/concepts/design.md, "Security"). Its methods may be called from many
// goroutines at once; ctx is the stream's or the request's, which carries
// the client's identity.
type Authorizer interface {
	// Authorize returns nil if the client of ctx may claim node n, whose
	// group is group, else the error the stream or poll ends with
	// (PermissionDenied, or Unavailable while the rules are not loaded).
	// recheck, when not nil, is closed once the decision may have
	// changed (the rules changed): the stream then asks again.
	Authorize(ctx context.Context, n *corev3.Node, group string) (recheck <-chan struct{}, err error)
	// Secrets returns nil if the client of ctx may be sent the SDS
	// secrets of group's scope and the default scope, else the error
	// (PermissionDenied) the stream or poll ends with.
	Secrets(ctx context.Context, group string) error
}

// Busy is told when a stream starts handling something (a request, a
// newer snapshot, leases extended, the Authorizer's rules changed) and
// when it is done, so that a caller can find the quiet moments between
// pushes (the replica's collector between pushes does). A stream does no
// work but in such a turn: with no request and no change, it enters none. Its methods are called from every stream's loop at once: they
// must be safe for concurrent use and must not block.
type Busy interface {
	// Enter records that a stream started handling something. Leave is
	// called once it is done, if Enter returned true.
	Enter() bool
	// Leave records that a stream that entered is done.
	Leave()
}

// Rollouts gives the running rollouts; *rollout.Watcher is one.
type Rollouts interface {
	// Current is the latest set; its Changed wakes the streams.
	Current() *rollout.Set
	// At is the set at a revision, if known; Resolve asks for it,
	// returning a channel closed once known, or ok false if it never
	// will be (a newer snapshot comes instead).
	At(rev int64) (*rollout.Set, bool)
	Resolve(rev int64) (done <-chan struct{}, ok bool)
}

// Config is what a SotW or delta server is built from. A bound
// (limits.Bound) left unset takes its default (DefaultConfig);
// limits.NoBound lifts it.
type Config struct {
	// Source is the view to serve. Required.
	Source Source
	// GroupBy derives a node's group; nil: by Node.cluster.
	GroupBy scope.GroupFunc
	// Authorities are the xdstp authorities the server serves: a client
	// asking by name for a resource of another is told so (its
	// resource error says which it serves). The view skips such
	// resources (view.Config.Serves).
	Authorities xdstp.Authorities
	// Rollouts gives the running canary rollouts, which decide the
	// overlays a node sees (Stream.Chain); nil: none.
	Rollouts Rollouts
	// CatchupTimeout bounds the wait for the view to reach a version a
	// client presents; after it the stream (or poll) ends with
	// UNAVAILABLE so the client retries elsewhere (promise 3). Zero: 5s.
	CatchupTimeout time.Duration
	// Leases gives the expiry of TTL'd resources' leases and announces
	// their extensions (promise 8); nil: no TTL is put on the wire and no
	// heartbeat is sent, whatever the clients advertise.
	Leases Leases
	// Authorizer, if set, checks every node a client claims and every
	// request for secrets; nil allows every claim and every secret (the
	// caller decided the clients are trusted).
	Authorizer Authorizer
	// FirstRequestTimeout bounds the wait for a stream's first request
	// (--first-request-timeout): a stream that sends nothing for that
	// long ends with DEADLINE_EXCEEDED. Unset: 10s.
	FirstRequestTimeout limits.Bound[time.Duration]
	// MaxNames bounds the names a stream subscribes to per type
	// (--max-names): SotW resource_names, delta resource_names_subscribe
	// as they accumulate (VHDS aliases included), and the entries of
	// delta initial_resource_versions. Beyond it the stream ends with
	// RESOURCE_EXHAUSTED. Unset: 10,000.
	MaxNames limits.Bound[int]
	// MaxSubscribedBytes bounds what the names a stream subscribes to
	// cost, over all its types together (--max-subscribed-bytes-per-stream):
	// each name its length plus NameOverhead. Beyond it the stream ends
	// with RESOURCE_EXHAUSTED. Unset: 4 MiB.
	MaxSubscribedBytes limits.Bound[int]
	// MaxSubscribedBytesPerConn bounds the same over all the streams of
	// one client connection (--max-subscribed-bytes-per-conn): a
	// connection carries up to --max-streams-per-conn streams. Streams
	// relayed from another replica are not counted against the relay's
	// connection (limits.ChargeConn). Unset: 16 MiB.
	MaxSubscribedBytesPerConn limits.Bound[int]
	// MaxNameLength bounds the length in bytes of a resource name in a
	// request (--max-name-length); a longer one ends the stream with
	// INVALID_ARGUMENT. Unset: 1024.
	MaxNameLength limits.Bound[int]
	// MaxNodeIDLength bounds the length in bytes of a request's node id
	// (--max-node-id-length); a longer one ends the stream, or fails the
	// poll, with INVALID_ARGUMENT. Unset: 1024.
	MaxNodeIDLength limits.Bound[int]
	// MaxNackMessage bounds the bytes of a NACK's error message that are
	// stored (status, /debug/streams) and logged (--max-nack-message);
	// the rest is cut and the cut marked. Unset: 4096.
	MaxNackMessage limits.Bound[int]
	// NackLogWindow is how long repeats of a NACK (same type, version and
	// message) are counted instead of logged: the first is logged, the
	// repeats in one line at the window's end. Zero: 1 minute.
	NackLogWindow time.Duration
	// SendTimeout bounds one response's send (--send-timeout): a stream
	// whose client has not taken it (its flow-control window stays full)
	// for that long ends with UNAVAILABLE, and with it the snapshots it
	// holds. Unset: 30s.
	SendTimeout limits.Bound[time.Duration]
	// Identifier names the replica in every response, as
	// control_plane.identifier (the replica's --name); empty: responses
	// carry no control_plane.
	Identifier string
	// Logger gets NACKs and stream errors; nil discards.
	Logger *slog.Logger
	// Registerer gets the server's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Busy, if set, is told when a stream starts and ends each turn of
	// its loop (see Busy); nil: no one is.
	Busy Busy
	// PushTracer, if set, is told of every response sent and answered
	// (traces); nil: none is.
	PushTracer PushTracer
}

// DefaultConfig returns the defaults, without a Source.
func DefaultConfig() Config {
	return Config{
		CatchupTimeout:      5 * time.Second,
		FirstRequestTimeout: limits.Max(10 * time.Second), // Envoy sends its first request at once
		MaxNames:            limits.Max(10000),            // far above one Envoy's EDS clusters per stream
		MaxSubscribedBytes:  limits.Max(4 << 20),          // some 29,000 names of 80 bytes over all types: a large mesh's Envoy, not 10 types of 10,000 names of 1 KiB (100 MiB)
		// Envoy and grpc-go hold one ADS stream a connection; per-type
		// streams a few: four streams' worth.
		MaxSubscribedBytesPerConn: limits.Max(16 << 20),
		MaxNameLength:             limits.Max(1024), // a VHDS alias is "<route config>/<host>"; a DNS name is at most 253
		MaxNodeIDLength:           limits.Max(1024), // Envoy's ids ("sidecar~IP~pod.ns~ns.svc.cluster.local") are a few hundred bytes at most
		MaxNackMessage:            limits.Max(4096), // Envoy's rejection messages are a few lines
		NackLogWindow:             time.Minute,
		SendTimeout:               limits.Max(30 * time.Second), // a healthy client reads within a few RTTs
	}
}

// Validate checks the config.
func (c *Config) Validate() error {
	if c.Source == nil {
		return errors.New("xdsstream: Source is required")
	}
	if c.CatchupTimeout < 0 {
		return fmt.Errorf("xdsstream: CatchupTimeout %s is negative", c.CatchupTimeout)
	}
	return nil
}

// withDefaults fills the zero fields that have a default.
func (c Config) withDefaults() Config {
	if c.GroupBy == nil {
		c.GroupBy, _ = scope.ParseGroupBy("cluster") // cannot fail
	}
	d := DefaultConfig()
	if c.CatchupTimeout == 0 {
		c.CatchupTimeout = d.CatchupTimeout
	}
	c.FirstRequestTimeout = c.FirstRequestTimeout.Or(d.FirstRequestTimeout)
	c.MaxNames = c.MaxNames.Or(d.MaxNames)
	c.MaxSubscribedBytes = c.MaxSubscribedBytes.Or(d.MaxSubscribedBytes)
	c.MaxSubscribedBytesPerConn = c.MaxSubscribedBytesPerConn.Or(d.MaxSubscribedBytesPerConn)
	c.MaxNameLength = c.MaxNameLength.Or(d.MaxNameLength)
	c.MaxNodeIDLength = c.MaxNodeIDLength.Or(d.MaxNodeIDLength)
	c.MaxNackMessage = c.MaxNackMessage.Or(d.MaxNackMessage)
	if c.NackLogWindow <= 0 {
		c.NackLogWindow = d.NackLogWindow
	}
	c.SendTimeout = c.SendTimeout.Or(d.SendTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
