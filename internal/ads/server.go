package ads

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
	"google.golang.org/protobuf/types/known/anypb"

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
	// Snapshot returns the latest snapshot; never nil once the server
	// serves (callers wait for readiness first).
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
	// client presents; after it the stream ends with UNAVAILABLE so the
	// client retries elsewhere (promise 3). Zero: 5s.
	CatchupTimeout time.Duration
	// TrustVersion: on a new SotW stream, named requests (EDS, RDS, ...)
	// presenting version V get only what changed since V, as wildcard ones
	// do. Safe only when every SotW client is Envoy, which keeps resources
	// across streams (grpc-go issue #7013). Default false.
	TrustVersion bool
	// Leases gives the expiry of TTL'd resources' leases and announces
	// their extensions (promise 8); nil: no TTL is put on the wire and no
	// heartbeat is sent, whatever the clients advertise.
	Leases Leases
	// Logger gets NACKs and stream errors; nil discards.
	Logger *slog.Logger
	// Registerer gets the server's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// DefaultConfig returns the defaults, without a Source.
func DefaultConfig() Config {
	return Config{CatchupTimeout: 5 * time.Second}
}

// Validate checks the config.
func (c *Config) Validate() error {
	if c.Source == nil {
		return errors.New("ads: Source is required")
	}
	if c.CatchupTimeout < 0 {
		return fmt.Errorf("ads: CatchupTimeout %s is negative", c.CatchupTimeout)
	}
	return nil
}

// Server serves SotW xDS. Its methods may be called concurrently.
type Server struct {
	cfg     Config
	metrics *metrics
	cache   wire.Cache

	nextID atomic.Uint64

	streams xdsstream.Registry[*stream]
}

// New returns a Server. It does no I/O.
func New(cfg Config) (*Server, error) {
	if cfg.GroupBy == nil {
		cfg.GroupBy, _ = scope.ParseGroupBy("cluster")
	}
	if cfg.CatchupTimeout == 0 {
		cfg.CatchupTimeout = DefaultConfig().CatchupTimeout
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

// Serve serves one SotW stream until it ends: of type t for a per-type
// service, or of any type (t nil) for ADS. It blocks; gRPC calls it from
// the service method (package grpcapi registers it).
func (s *Server) Serve(gs Stream, t *resource.Type) error {
	return s.serve(gs, t)
}

// Stream is a SotW xDS stream, as gRPC hands it to a service.
type Stream = grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]

// ErrBadRequest is wrapped by Fetch errors caused by the request.
var ErrBadRequest = errors.New("ads: bad request")

// Fetch answers one polling request (REST-JSON or a unary Fetch RPC) for
// type t (nil: from the request's type_url). notModified is true when the
// request's version_info is current: the client holds what it would get.
// A version newer than the view is waited for, up to CatchupTimeout.
func (s *Server) Fetch(ctx context.Context, r *discoveryv3.DiscoveryRequest, t *resource.Type) (resp *discoveryv3.DiscoveryResponse, notModified bool, err error) {
	if t == nil {
		var ok bool
		if t, ok = resource.ByURL(r.GetTypeUrl()); !ok {
			return nil, false, status.Errorf(codes.InvalidArgument, "%v: unknown type_url %q", ErrBadRequest, r.GetTypeUrl())
		}
	} else if r.GetTypeUrl() != "" && r.GetTypeUrl() != t.URL {
		return nil, false, status.Errorf(codes.InvalidArgument, "%v: type_url %q on the %s endpoint", ErrBadRequest, r.GetTypeUrl(), t.Name)
	}
	snap, presented, err := s.catchUp(ctx, r.GetVersionInfo())
	if err != nil {
		return nil, false, err
	}
	group := s.cfg.GroupBy(r.GetNode())
	names := r.GetResourceNames()
	wildcard := len(names) == 0 || contains(names, "*")
	if presented >= 0 && scope.UnchangedSince(snap, t, group, names, wildcard, presented) {
		return nil, true, nil
	}
	entries := scope.Entries(snap, t, group, names, wildcard)
	resp = &discoveryv3.DiscoveryResponse{VersionInfo: version(snap.Revision), TypeUrl: t.URL, Resources: make([]*anypb.Any, 0, len(entries))}
	for _, e := range entries {
		resp.Resources = append(resp.Resources, e.Body)
	}
	return resp, false, nil
}

// catchUp returns the latest snapshot, waiting up to CatchupTimeout for it
// to reach a version the client presents. presented is the parsed version,
// -1 when none or not one of ours.
func (s *Server) catchUp(ctx context.Context, v string) (*store.Snapshot, int64, error) {
	presented := parseVersion(v)
	snap := s.cfg.Source.Snapshot()
	if snap == nil {
		return nil, -1, status.Error(codes.Unavailable, "ads: not ready: the view has not loaded yet")
	}
	if presented > snap.Revision {
		s.metrics.catchups.Inc()
		wctx, cancel := context.WithTimeout(ctx, s.cfg.CatchupTimeout)
		defer cancel()
		var err error
		snap, err = s.cfg.Source.WaitRevision(wctx, presented)
		if err != nil {
			s.metrics.catchupFailures.Inc()
			return nil, -1, status.Errorf(codes.Unavailable, "ads: this replica is behind version %d the client presented; retry elsewhere", presented)
		}
	}
	return snap, presented, nil
}

// Streams returns the status of every open stream, by id.
func (s *Server) Streams() []StreamStatus {
	return xdsstream.Each(&s.streams, (*stream).status)
}

func contains(names []string, n string) bool {
	for _, x := range names {
		if x == n {
			return true
		}
	}
	return false
}
