package delta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/lease"
	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/scope"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/wire"
	"github.com/legation-io/legation/internal/xdsstream"
)

// Source is what the server reads resources from; *store.View is one.
// Both methods may be called from many goroutines at once.
type Source interface {
	// Snapshot returns the latest snapshot, nil before the first load.
	Snapshot() *store.Snapshot
	// WaitRevision blocks until a snapshot at rev or later exists, or ctx
	// ends.
	WaitRevision(ctx context.Context, rev int64) (*store.Snapshot, error)
}

var _ Source = (*store.View)(nil)

// Leases is what the server needs of the lease tracker (*lease.Tracker is
// one). Its methods may be called from many goroutines at once; Expiry may
// block for one etcd query.
type Leases interface {
	// Expiry returns when e's lease expires (a lower bound of etcd's).
	Expiry(ctx context.Context, e *store.Entry) time.Time
	// Notice returns the current notice of lease extensions.
	Notice() *lease.Notice
	// NextCheck returns when the lease is next checked for an extension.
	NextCheck(id int64) time.Time
}

var _ Leases = (*lease.Tracker)(nil)

// Config configures a Server.
type Config struct {
	// Source is the view to serve. Required.
	Source Source
	// GroupBy derives a node's group; nil: by Node.cluster.
	GroupBy scope.GroupFunc
	// CatchupTimeout bounds the wait for the view to reach a version a
	// client presents in initial_resource_versions; after it the stream
	// ends with UNAVAILABLE (promise 3). Zero: 5s.
	CatchupTimeout time.Duration
	// Leases gives the expiry of TTL'd resources' leases and announces
	// their extensions (promise 8); nil: no TTL is put on the wire and no
	// heartbeat is sent, whatever the clients advertise.
	Leases Leases
	// Logger gets NACKs; nil discards.
	Logger *slog.Logger
	// Registerer gets the server's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Validate checks the config.
func (c *Config) Validate() error {
	if c.Source == nil {
		return errors.New("delta: Source is required")
	}
	if c.CatchupTimeout < 0 {
		return fmt.Errorf("delta: CatchupTimeout %s is negative", c.CatchupTimeout)
	}
	return nil
}

// Server serves delta xDS. Its methods may be called concurrently.
type Server struct {
	cfg     Config
	metrics *metrics
	cache   wire.Cache
	nextID  atomic.Uint64

	streams xdsstream.Registry[*stream]
}

// New returns a Server. It does no I/O.
func New(cfg Config) (*Server, error) {
	if cfg.GroupBy == nil {
		cfg.GroupBy, _ = scope.ParseGroupBy("cluster")
	}
	if cfg.CatchupTimeout == 0 {
		cfg.CatchupTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, metrics: newMetrics(cfg.Registerer)}
	s.streams.Open = s.metrics.streams
	s.cache.Encoded = s.metrics.encodes.Inc
	return s, nil
}

// Stream is a delta xDS stream, as gRPC hands it to a service.
type Stream = grpc.BidiStreamingServer[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]

// Serve serves one delta stream until it ends: of type t for a per-type
// service, or of any type (t nil) for ADS. It blocks; gRPC calls it from
// the service method.
func (s *Server) Serve(gs Stream, t *resource.Type) error {
	return s.serve(gs, t)
}

// catchUp returns the latest snapshot, waiting up to CatchupTimeout for it
// to reach rev.
func (s *Server) catchUp(ctx context.Context, rev int64) (*store.Snapshot, error) {
	snap := s.cfg.Source.Snapshot()
	if snap == nil {
		return nil, status.Error(codes.Unavailable, "not ready: the view has not loaded etcd's state yet")
	}
	if rev <= snap.Revision {
		return snap, nil
	}
	s.metrics.catchups.Inc()
	wctx, cancel := context.WithTimeout(ctx, s.cfg.CatchupTimeout)
	defer cancel()
	snap, err := s.cfg.Source.WaitRevision(wctx, rev)
	if err != nil {
		s.metrics.catchupFailures.Inc()
		return nil, status.Errorf(codes.Unavailable, "delta: this replica is behind version %d the client holds; retry elsewhere", rev)
	}
	return snap, nil
}

// Streams returns the status of every open delta stream, by id.
func (s *Server) Streams() []StreamStatus {
	return xdsstream.Each(&s.streams, (*stream).status)
}
