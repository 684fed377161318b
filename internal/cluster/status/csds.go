package status

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
)

// CSDSConfig configures a CSDS server.
type CSDSConfig struct {
	// Client reads and watches the records. Required.
	Client *clientv3.Client
	// Prefix is the etcd key prefix; it starts and ends with '/'.
	Prefix string
	// Timeout bounds a request's wait for the records' first load. Zero:
	// 5s.
	Timeout time.Duration
	// MaxMatchers bounds the node_matchers of one request
	// (--max-csds-matchers); a request with more is refused with
	// INVALID_ARGUMENT. Zero: no bound.
	MaxMatchers int
	// Authorize, when set, is asked at the start of every
	// StreamClientStatus and again each time the channel it returned
	// closes (the rules changed): its error ends the stream, so that a
	// revoked admin stops reading. It may block up to its own bound.
	Authorize func(ctx context.Context) (recheck <-chan struct{}, err error)
	// Logger gets the server's logs. Nil: discard.
	Logger *slog.Logger
	// Registerer gets the server's metrics (legation_csds_*). Nil: none.
	Registerer prometheus.Registerer
}

// CSDS serves envoy.service.status.v3.ClientStatusDiscoveryService from
// the status records in etcd, so that any replica answers for every node
// of the cluster. It answers from a cache of the records that one watch
// keeps current (Run), never with a read per call. Its methods may be
// called concurrently.
type CSDS struct {
	statusv3.UnimplementedClientStatusDiscoveryServiceServer
	cfg   CSDSConfig
	log   *slog.Logger
	m     *csdsMetrics
	cache *cache
}

var _ statusv3.ClientStatusDiscoveryServiceServer = (*CSDS)(nil)

// Records returns every node's status record from the cache CSDS answers
// from, sorted by node id: loaded on the first use (waiting up to
// Timeout) and kept current by one watch, so that a reader polling them
// (the rollout controller) costs etcd nothing per call.
func (c *CSDS) Records(ctx context.Context) ([]NodeStatus, error) {
	if err := c.cache.wait(ctx, c.cfg.Timeout); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	return c.cache.filter(func(string) bool { return true }), nil
}

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
	if cfg.MaxMatchers < 0 {
		return nil, fmt.Errorf("status: CSDS: MaxMatchers %d must not be negative", cfg.MaxMatchers)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "csds")
	m, err := newCSDSMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &CSDS{cfg: cfg, log: log, m: m, cache: newCache(cfg.Client, cfg.Prefix, log, m)}, nil
}

// Run keeps the cache of the records current until ctx ends, then
// returns nil: from the first request on, it reads the status directory
// once and follows it with one watch, reading it again only when the
// watch fails. Until Run runs, requests wait up to Timeout and fail with
// UNAVAILABLE. Call it once.
func (c *CSDS) Run(ctx context.Context) error { return c.cache.run(ctx) }

var _ statusv3.ClientStatusDiscoveryServiceServer = (*CSDS)(nil)

// FetchClientStatus answers one request.
func (c *CSDS) FetchClientStatus(ctx context.Context, req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	return c.answer(ctx, req)
}

// StreamClientStatus answers each request of the stream, in order, until
// the client ends it, or Authorize, asked again whenever the rules
// change, refuses the client.
func (c *CSDS) StreamClientStatus(stream grpc.BidiStreamingServer[statusv3.ClientStatusRequest, statusv3.ClientStatusResponse]) error {
	ctx := stream.Context()
	recheck, err := c.authorize(ctx)
	if err != nil {
		return err
	}
	reqs := c.receive(stream)
	for {
		select {
		case <-recheck:
			if recheck, err = c.authorize(ctx); err != nil {
				return err
			}
		case r := <-reqs:
			if errors.Is(r.err, io.EOF) {
				return nil
			}
			if r.err != nil {
				return r.err
			}
			resp, err := c.answer(ctx, r.req)
			if err != nil {
				return err
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// received is one request of a stream, or the error that ended it.
type received struct {
	req *statusv3.ClientStatusRequest
	err error
}

// receive starts the stream's receiving goroutine, which delivers every
// request, then the error that ended the stream, on the returned channel.
// It is not waited for: it ends once the stream does (gRPC ends a
// stream's receives when its handler returns), its last send abandoned
// then.
func (c *CSDS) receive(stream grpc.BidiStreamingServer[statusv3.ClientStatusRequest, statusv3.ClientStatusResponse]) <-chan received {
	out := make(chan received)
	ctx := stream.Context()
	go func() {
		for {
			req, err := stream.Recv()
			select {
			case out <- received{req, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return out
}

// authorize asks Authorize, if set, whether the client of ctx may read.
func (c *CSDS) authorize(ctx context.Context) (<-chan struct{}, error) {
	if c.cfg.Authorize == nil {
		return nil, nil
	}
	return c.cfg.Authorize(ctx)
}

// answer builds the response to req: one ClientConfig per node whose id
// one of the node_matchers matches (all nodes when there are none), sorted
// by node id. req.node, the requester, is not used.
//
// node_metadatas are ignored: the records keep no node metadata (they are
// kept small), so a matcher selects by node_id alone.
func (c *CSDS) answer(ctx context.Context, req *statusv3.ClientStatusRequest) (*statusv3.ClientStatusResponse, error) {
	if n, limit := len(req.GetNodeMatchers()), c.cfg.MaxMatchers; limit > 0 && n > limit {
		c.m.matchersRefused.Inc()
		return nil, grpcstatus.Errorf(codes.InvalidArgument, "%d node_matchers: at most %d per request (--max-csds-matchers); match by prefix or regex, or split the request", n, limit)
	}
	ms, exact, err := compileMatchers(req.GetNodeMatchers())
	if err != nil {
		return nil, grpcstatus.Error(codes.InvalidArgument, err.Error())
	}
	if err := c.cache.wait(ctx, c.cfg.Timeout); err != nil {
		return nil, c.readError(ctx, err)
	}
	var recs []NodeStatus
	if exact != nil {
		recs = c.cache.get(exact) // only exact ids: look just those up
	} else {
		recs = c.cache.filter(func(id string) bool { return matchAny(ms, id) })
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
	return grpcstatus.Errorf(codes.Unavailable, "status records: %v", err)
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
