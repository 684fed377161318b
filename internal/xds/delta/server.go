package delta

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/state/lease"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/xds/limits"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// Config configures a Server.
type Config struct {
	// Config is what every xDS server takes: the view, groups, catch-up
	// bound (for versions in initial_resource_versions), leases, logger
	// and metrics registry.
	xdsstream.Config
	// MaxVHDSGroups bounds the VHDS alias indexes kept per revision
	// (--max-vhds-groups), one per node group with virtual hosts of its
	// own (groups with none share the default scope's): a stream needing
	// one more ends with RESOURCE_EXHAUSTED. Unset: DefaultMaxVHDSGroups.
	MaxVHDSGroups limits.Bound[int]
}

// DefaultMaxVHDSGroups is MaxVHDSGroups' default: far above the groups
// with virtual hosts of their own a fleet has, far below what memory
// allows (each index holds the domains of the group's virtual hosts).
const DefaultMaxVHDSGroups = 1000

// LimitVHDSGroups is the label of MaxVHDSGroups' hits in
// legation_delta_limit_hits_total.
const LimitVHDSGroups = "vhds_groups"

// Server serves delta xDS. Its methods may be called concurrently.
type Server struct {
	// Statuses gives the status of the open streams: Streams for
	// /debug/streams, Stamps and SummariesOf for the status writer,
	// StatusGeneration.
	*xdsstream.Statuses[TypeStatus]
	core    *xdsstream.Core[TypeStatus]
	m       *metrics
	aliases aliasIndexes             // VHDS alias indexes, shared by the streams
	held    xdsstream.HeldSets[held] // what streams hold, shared among them
	names   xdsstream.NameSets
}

// New returns a Server. It does no I/O.
func New(cfg Config) (*Server, error) {
	core, err := xdsstream.NewCore[TypeStatus](xdsstream.Protocol{Name: "delta", Title: "delta", Incremental: true, ReadsTTL: readsTTL}, cfg.Config)
	if err != nil {
		return nil, err
	}
	s := &Server{Statuses: &core.Statuses, core: core, m: newMetrics(cfg.Registerer)}
	s.aliases.max = cfg.MaxVHDSGroups.Or(limits.Max(DefaultMaxVHDSGroups))
	s.aliases.full = core.Metrics.LimitHits.WithLabelValues(LimitVHDSGroups).Inc
	return s, nil
}

// Stream is a delta xDS stream, as gRPC hands it to a service.
type Stream = grpc.BidiStreamingServer[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]

// Serve serves one delta stream until it ends: of type t for a per-type
// service, or of any type (t nil) for ADS. It blocks; gRPC calls it from
// the service method (package grpcapi registers it).
func (s *Server) Serve(gs Stream, t *resource.Type) error {
	return xdsstream.Serve[discoveryv3.DeltaDiscoveryRequest](s.core, gs, t, func(x *xdsstream.Stream[TypeStatus]) xdsstream.Rules[*discoveryv3.DeltaDiscoveryRequest] {
		return &stream{Stream: x, s: s, types: map[*resource.Type]*typeState{}}
	})
}

// StreamStatus describes one delta stream for /debug/streams.
type StreamStatus = xdsstream.Status[TypeStatus]

// TypeStatus is a delta stream's state for one type.
type TypeStatus struct {
	SystemVersionSent  string `json:"system_version_sent"`
	SystemVersionAcked string `json:"system_version_acked"`
	Outstanding        string `json:"outstanding_nonce,omitempty"`
	NackVersion        string `json:"nack_version,omitempty"`
	LastNack           string `json:"last_nack,omitempty"`
	Wildcard           bool   `json:"wildcard"`
	Subscribed         int    `json:"subscribed_names"`
	Held               int    `json:"resources"`
	// Resources lists per resource the version sent and ACKed, when the
	// client holds at most 100.
	Resources map[string]ResourceStatus `json:"resource_versions,omitempty"`
}

// Summary implements xdsstream.Reporter.
func (t TypeStatus) Summary() xdsstream.TypeSummary {
	return xdsstream.TypeSummary{VersionSent: t.SystemVersionSent, VersionAcked: t.SystemVersionAcked,
		NackVersion: t.NackVersion, LastNack: t.LastNack, Resources: t.Held}
}

// ResourceStatus is the version of one resource sent to and ACKed by a
// client.
type ResourceStatus struct {
	VersionSent  string `json:"sent"`
	VersionAcked string `json:"acked,omitempty"`
}

// readsTTL reports whether a delta client reads TTLs (promise 8): when
// it advertises TTL support.
func readsTTL(n *corev3.Node) bool {
	ttl, _ := lease.Features(n)
	return ttl
}
