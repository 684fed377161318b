package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/resource"
)

// CSDSConfig configures a CSDS server.
type CSDSConfig struct {
	// Client reads the records. Required.
	Client *clientv3.Client
	// Prefix is the etcd key prefix; it starts and ends with '/'.
	Prefix string
	// Timeout bounds the etcd reads of one request. Zero: 5s.
	Timeout time.Duration
	// Logger gets the server's logs. Nil: discard.
	Logger *slog.Logger
}

// CSDS serves envoy.service.status.v3.ClientStatusDiscoveryService from
// the status records in etcd, so that any replica answers for every node
// of the cluster. Its methods may be called concurrently.
type CSDS struct {
	statusv3.UnimplementedClientStatusDiscoveryServiceServer
	cfg CSDSConfig
	log *slog.Logger
}

var _ statusv3.ClientStatusDiscoveryServiceServer = (*CSDS)(nil)

// NewCSDS returns a CSDS server. It does no I/O.
func NewCSDS(cfg CSDSConfig) (*CSDS, error) {
	if cfg.Client == nil {
		return nil, errors.New("status: CSDS: Client is required")
	}
	if !strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("status: CSDS: Prefix %q must start and end with '/'", cfg.Prefix)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("status: CSDS: Timeout %s must not be negative", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &CSDS{cfg: cfg, log: log.With("component", "csds")}, nil
}

var _ statusv3.ClientStatusDiscoveryServiceServer = (*CSDS)(nil)

// FetchClientStatus answers one request.
func (c *CSDS) FetchClientStatus(ctx context.Context, req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	return c.answer(ctx, req)
}

// StreamClientStatus answers each request of the stream, in order, until
// the client ends it.
func (c *CSDS) StreamClientStatus(stream grpc.BidiStreamingServer[statusv3.ClientStatusRequest, statusv3.ClientStatusResponse]) error {
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := c.answer(ctx, req)
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// answer builds the response to req: one ClientConfig per node whose id
// one of the node_matchers matches (all nodes when there are none), sorted
// by node id. req.node, the requester, is not used.
//
// node_metadatas are ignored: the records keep no node metadata (they are
// kept small), so a matcher selects by node_id alone.
func (c *CSDS) answer(ctx context.Context, req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	ms, exact, err := compileMatchers(req.GetNodeMatchers())
	if err != nil {
		return nil, grpcstatus.Error(codes.InvalidArgument, err.Error())
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var recs []NodeStatus
	if exact != nil {
		// Only exact ids: read just those.
		for _, id := range exact {
			ns, err := Get(ctx, c.cfg.Client, c.cfg.Prefix, id)
			switch {
			case errors.Is(err, ErrNotFound):
			case errors.Is(err, ErrMalformed):
				c.log.Debug("csds: skipping a malformed status record", "node", id, "err", err)
			case err != nil:
				return nil, c.readError(ctx, err)
			default:
				recs = append(recs, ns)
			}
		}
		slices.SortFunc(recs, func(a, b NodeStatus) int { return strings.Compare(a.NodeID, b.NodeID) })
		recs = slices.CompactFunc(recs, func(a, b NodeStatus) bool { return a.NodeID == b.NodeID })
	} else {
		all, bad, err := Read(ctx, c.cfg.Client, c.cfg.Prefix)
		if err != nil {
			return nil, c.readError(ctx, err)
		}
		for _, b := range bad {
			c.log.Debug("csds: skipping a malformed status record", "key", b.Key, "err", b.Err)
		}
		for _, ns := range all {
			if matchAny(ms, ns.NodeID) {
				recs = append(recs, ns)
			}
		}
	}
	resp := &statusv3.ClientStatusResponse{Config: make([]*statusv3.ClientConfig, 0, len(recs))}
	for _, ns := range recs {
		resp.Config = append(resp.Config, ClientConfig(ns))
	}
	return resp, nil
}

func (c *CSDS) readError(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return grpcstatus.Error(codes.Canceled, err.Error())
	}
	return grpcstatus.Errorf(codes.Unavailable, "read status records: %v", err)
}

// ClientConfig is the CSDS view of a record: the node (its id, and its
// group as cluster) and one GenericXdsConfig per type, in push order. A
// type this binary does not know is left out.
//
//   - version_info is the version the client ACKed.
//   - config_status: ERROR when the client NACKed, NOT_SENT when nothing
//     was sent yet, SYNCED when what was sent is ACKed, else STALE.
//   - client_status: NACKED, ACKED (the client holds an ACKed version, if
//     maybe not the latest sent), or REQUESTED.
//   - error_state, when NACKed: the client's message and the version it
//     rejected.
func ClientConfig(ns NodeStatus) *statusv3.ClientConfig {
	cc := &statusv3.ClientConfig{Node: &corev3.Node{Id: ns.NodeID, Cluster: ns.Group}}
	for _, t := range resource.All() {
		ts, ok := ns.Types[t.Name]
		if !ok {
			continue
		}
		g := &statusv3.ClientConfig_GenericXdsConfig{TypeUrl: t.URL, VersionInfo: ts.VersionAcked}
		switch {
		case ts.Nacked():
			g.ConfigStatus = statusv3.ConfigStatus_ERROR
			g.ClientStatus = adminv3.ClientResourceStatus_NACKED
			g.ErrorState = &adminv3.UpdateFailureState{Details: ts.LastNack, VersionInfo: ts.NackVersion}
		case ts.VersionSent == "":
			g.ConfigStatus = statusv3.ConfigStatus_NOT_SENT
			g.ClientStatus = adminv3.ClientResourceStatus_REQUESTED
		case ts.VersionSent == ts.VersionAcked:
			g.ConfigStatus = statusv3.ConfigStatus_SYNCED
			g.ClientStatus = adminv3.ClientResourceStatus_ACKED
		default:
			g.ConfigStatus = statusv3.ConfigStatus_STALE
			g.ClientStatus = adminv3.ClientResourceStatus_REQUESTED
			if ts.VersionAcked != "" {
				g.ClientStatus = adminv3.ClientResourceStatus_ACKED
			}
		}
		cc.GenericXdsConfigs = append(cc.GenericXdsConfigs, g)
	}
	return cc
}

// idMatcher matches a node id; nil matches every id.
type idMatcher func(string) bool

// compileMatchers turns node matchers into id matchers. When every matcher
// is an exact, case-sensitive id, it also returns those ids (non-nil), so
// that only their records need reading.
func compileMatchers(nms []*matcherv3.NodeMatcher) ([]idMatcher, []string, error) {
	var (
		out   []idMatcher
		exact = []string{}
	)
	for i, nm := range nms {
		sm := nm.GetNodeId()
		if sm == nil {
			out = append(out, nil)
			exact = nil
			continue
		}
		m, err := compileString(sm)
		if err != nil {
			return nil, nil, fmt.Errorf("node_matchers[%d].node_id: %w", i, err)
		}
		out = append(out, m)
		if e, ok := sm.GetMatchPattern().(*matcherv3.StringMatcher_Exact); ok && !sm.GetIgnoreCase() && exact != nil {
			exact = append(exact, e.Exact)
		} else {
			exact = nil
		}
	}
	if len(nms) == 0 {
		exact = nil
	}
	return out, exact, nil
}

// compileString follows envoy.type.matcher.v3.StringMatcher: ignore_case
// applies to exact, prefix, suffix and contains; safe_regex must match the
// whole id.
func compileString(sm *matcherv3.StringMatcher) (idMatcher, error) {
	fold := sm.GetIgnoreCase()
	norm := func(s string) string {
		if fold {
			return strings.ToLower(s)
		}
		return s
	}
	switch p := sm.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		want := p.Exact
		if fold {
			return func(id string) bool { return strings.EqualFold(id, want) }, nil
		}
		return func(id string) bool { return id == want }, nil
	case *matcherv3.StringMatcher_Prefix:
		want := norm(p.Prefix)
		return func(id string) bool { return strings.HasPrefix(norm(id), want) }, nil
	case *matcherv3.StringMatcher_Suffix:
		want := norm(p.Suffix)
		return func(id string) bool { return strings.HasSuffix(norm(id), want) }, nil
	case *matcherv3.StringMatcher_Contains:
		want := norm(p.Contains)
		return func(id string) bool { return strings.Contains(norm(id), want) }, nil
	case *matcherv3.StringMatcher_SafeRegex:
		// Compiled alone first, so that the anchors wrap a balanced
		// expression ("a)|(b" must not become "^(?:a)|(b)$").
		if _, err := regexp.Compile(p.SafeRegex.GetRegex()); err != nil {
			return nil, fmt.Errorf("safe_regex: %w", err)
		}
		re, err := regexp.Compile(`^(?:` + p.SafeRegex.GetRegex() + `)$`)
		if err != nil {
			return nil, fmt.Errorf("safe_regex: %w", err)
		}
		return re.MatchString, nil
	case nil:
		return nil, errors.New("no match pattern")
	default:
		return nil, fmt.Errorf("unsupported match pattern %T", p)
	}
}

// matchAny reports whether any matcher matches id; with none, every id
// matches.
func matchAny(ms []idMatcher, id string) bool {
	if len(ms) == 0 {
		return true
	}
	for _, m := range ms {
		if m == nil || m(id) {
			return true
		}
	}
	return false
}
