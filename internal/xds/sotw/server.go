package sotw

import (
	"context"
	"errors"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/state/lease"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/state/xdstp"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// Config configures a Server.
type Config struct {
	// Config is what every xDS server takes: the view, groups, catch-up
	// bound, leases, logger and metrics registry.
	xdsstream.Config
	// TrustVersion: on a new SotW stream, named requests (EDS, RDS, ...)
	// presenting version V get only what changed since V, as wildcard ones
	// do. Safe only when every SotW client is Envoy, which keeps resources
	// across streams (grpc-go issue #7013). Default false.
	TrustVersion bool
}

// Server serves SotW xDS. Its methods may be called concurrently.
type Server struct {
	// Statuses gives the status of the open streams: Streams for
	// /debug/streams, Stamps and SummariesOf for the status writer,
	// StatusGeneration.
	*xdsstream.Statuses[TypeStatus]
	core         *xdsstream.Core[TypeStatus]
	m            *metrics
	trustVersion bool
	rest         restCache                       // REST-JSON bodies of the latest revision
	sent         xdsstream.HeldSets[*view.Entry] // what streams hold, shared among them
	names        xdsstream.NameSets
}

// New returns a Server. It does no I/O.
func New(cfg Config) (*Server, error) {
	core, err := xdsstream.NewCore[TypeStatus](xdsstream.Protocol{Name: "sotw", Title: "SotW", ReadsTTL: readsTTL}, cfg.Config)
	if err != nil {
		return nil, err
	}
	s := &Server{Statuses: &core.Statuses, core: core, m: newMetrics(cfg.Registerer), trustVersion: cfg.TrustVersion}
	s.rest.encoded = s.m.restEncodes.Inc
	s.rest.size = s.m.restCacheBytes.Set
	return s, nil
}

// Stream is a SotW xDS stream, as gRPC hands it to a service.
type Stream = grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]

// Serve serves one SotW stream until it ends: of type t for a per-type
// service, or of any type (t nil) for ADS. It blocks; gRPC calls it from
// the service method (package grpcapi registers it).
func (s *Server) Serve(gs Stream, t *resource.Type) error {
	return xdsstream.Serve[discoveryv3.DiscoveryRequest](s.core, gs, t, func(x *xdsstream.Stream[TypeStatus]) xdsstream.Rules[*discoveryv3.DiscoveryRequest] {
		return &stream{Stream: x, s: s, types: map[*resource.Type]*typeState{}}
	})
}

// ErrBadRequest is wrapped by Fetch errors caused by the request.
var ErrBadRequest = errors.New("ads: bad request")

// Fetch answers one polling request (REST-JSON or a unary Fetch RPC) for
// type t (nil: from the request's type_url). notModified is true when the
// request's version_info is current: the client holds what it would get.
// A version newer than the view is waited for, up to CatchupTimeout.
func (s *Server) Fetch(ctx context.Context, r *discoveryv3.DiscoveryRequest, t *resource.Type) (resp *discoveryv3.DiscoveryResponse, notModified bool, err error) {
	p, err := s.poll(ctx, r, t)
	if err != nil || p == nil {
		return nil, p == nil && err == nil, err
	}
	return p.response(s.core.ControlPlane, s.core.Metrics), false, nil
}

// polled is what a poll asks for at the snapshot that answers it.
type polled struct {
	t *resource.Type
	// chain is the node's scopes: its group's, the default one, and the
	// overlays of the rollouts that select it; it keys cached answers.
	chain    scope.Chain
	names    []string
	wildcard bool
	snap     *view.Snapshot
	// keysOK: the client may be sent resources carrying an inline
	// private key (those it may be sent secrets of the scope).
	keysOK bool
	// auth is the server's authorities, which the errors' messages name.
	auth xdstp.Authorities
}

// poll checks a poll (type, authorization, version) and returns what it
// asks for; nil and no error when the request's version_info is current.
// Every poll is authorized here, before any answer, cached or not.
func (s *Server) poll(ctx context.Context, r *discoveryv3.DiscoveryRequest, t *resource.Type) (*polled, error) {
	if t == nil {
		var ok bool
		if t, ok = resource.ByURL(r.GetTypeUrl()); !ok {
			return nil, status.Errorf(codes.InvalidArgument, "%v: unknown type_url %q", ErrBadRequest, r.GetTypeUrl())
		}
	} else if r.GetTypeUrl() != "" && r.GetTypeUrl() != t.URL {
		return nil, status.Errorf(codes.InvalidArgument, "%v: type_url %q on the %s endpoint", ErrBadRequest, r.GetTypeUrl(), t.Name)
	}
	if err := s.core.Protocol().Serves(t); err != nil {
		return nil, err
	}
	if err := s.checkBounds(r, t); err != nil {
		return nil, err
	}
	group := s.core.Config.GroupBy(r.GetNode())
	if a := s.core.Config.Authorizer; a != nil {
		// A poll is checked as a stream's first request is: its node, and
		// secrets (docs/concepts/design.md, "Security").
		_, err := a.Authorize(ctx, r.GetNode(), group)
		if err == nil && t == resource.Secret {
			err = a.Secrets(ctx, group)
		}
		if err != nil {
			s.core.Metrics.Denied.Inc()
			return nil, err
		}
	}
	presented := parseVersion(r.GetVersionInfo())
	snap, err := s.core.CatchUp(ctx, presented)
	if err != nil {
		return nil, err
	}
	names := xdsstream.NormalNames(r.GetResourceNames())
	wildcard := len(names) == 0 || contains(names, "*")
	chain := scope.Of(group)
	rolloutsChanged := false
	set, err := s.core.RolloutsAt(ctx, snap)
	if err != nil {
		return nil, err
	}
	if set != nil {
		chain = set.Chain(r.GetNode().GetId(), group)
		rolloutsChanged = set.LastChange > presented // the node may have held another side of one
	}
	if presented >= 0 && !rolloutsChanged && scope.UnchangedSince(snap, t, chain, names, wildcard, presented) {
		return nil, nil
	}
	keysOK := t == resource.Secret || snap.InlineKeys == 0 || xdsstream.KeysAllowed(ctx, s.core.Config.Authorizer, group)
	return &polled{t: t, chain: chain, names: names, wildcard: wildcard, snap: snap, keysOK: keysOK, auth: s.core.Config.Authorities}, nil
}

// checkBounds applies a stream's bounds to a poll of type t: its node
// id's length (--max-node-id-length), and its names' count (--max-names)
// and lengths (--max-name-length), with the stream's status codes and
// messages.
func (s *Server) checkBounds(r *discoveryv3.DiscoveryRequest, t *resource.Type) error {
	if err := s.core.CheckNode(r.GetNode()); err != nil {
		return err
	}
	return s.core.CheckList(t, xdsstream.LimitNames, "resource_names", r.GetResourceNames())
}

// response builds the poll's answer, carrying cp (the replica's name),
// without the resources carrying an inline private key unless keysOK,
// and the errors of the names asked that it leaves out (reserr.go).
func (p *polled) response(cp *corev3.ControlPlane, m *xdsstream.Metrics) *discoveryv3.DiscoveryResponse {
	visible := scope.Entries(p.snap, p.t, p.chain, p.names, p.wildcard)
	errs := p.errors(visible)
	resp := responseOf(p.snap, p.t, xdsstream.WithoutKeys(visible, p.keysOK, m))
	resp.ControlPlane = cp
	resp.ResourceErrors = xdsstream.ResourceErrors(p.t, errs, p.auth)
	return resp
}

// Response is the full state of type t that a SotW client of group
// subscribed to names (or to everything, wildcard) is answered at snap:
// version_info is snap's revision, the resources are sorted by name and
// carried as stored, never wrapped with a TTL. It is a poll's answer, and
// what xdsadmin export writes; a stream sends the same resources at the
// same version, those of EDS/RDS-like types only as they change. The
// response shares the stored bodies: never modify them.
func Response(snap *view.Snapshot, t *resource.Type, group string, names []string, wildcard bool) *discoveryv3.DiscoveryResponse {
	return responseOf(snap, t, scope.Entries(snap, t, scope.Of(group), names, wildcard))
}

// responseOf is the response carrying entries, of type t, at snap.
func responseOf(snap *view.Snapshot, t *resource.Type, entries []*view.Entry) *discoveryv3.DiscoveryResponse {
	resp := &discoveryv3.DiscoveryResponse{VersionInfo: version(snap.Revision), TypeUrl: t.URL, Resources: make([]*anypb.Any, 0, len(entries))}
	for _, e := range entries {
		resp.Resources = append(resp.Resources, e.Body)
	}
	return resp
}

// StreamStatus describes one SotW stream for /debug/streams.
type StreamStatus = xdsstream.Status[TypeStatus]

// TypeStatus is a SotW stream's state for one type.
type TypeStatus struct {
	VersionSent  string `json:"version_sent"`
	VersionAcked string `json:"version_acked"`
	Nonce        string `json:"nonce"`
	NackVersion  string `json:"nack_version,omitempty"`
	LastNack     string `json:"last_nack,omitempty"`
	Wildcard     bool   `json:"wildcard"`
	Subscribed   int    `json:"subscribed_names"`
	Resources    int    `json:"resources"`
}

// Summary implements xdsstream.Reporter.
func (t TypeStatus) Summary() xdsstream.TypeSummary {
	return xdsstream.TypeSummary{VersionSent: t.VersionSent, VersionAcked: t.VersionAcked,
		NackVersion: t.NackVersion, LastNack: t.LastNack, Resources: t.Resources}
}

func contains(names []string, n string) bool {
	for _, x := range names {
		if x == n {
			return true
		}
	}
	return false
}

// readsTTL reports whether a SotW client reads TTLs (promise 8): when it
// advertises both TTL support and discovery.v3.Resource in SotW.
func readsTTL(n *corev3.Node) bool {
	_, wrap := lease.Features(n)
	return wrap
}
