package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/chaos"
)

// The type URLs a client subscribes to.
const (
	cdsURL = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	edsURL = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	ldsURL = "type.googleapis.com/envoy.config.listener.v3.Listener"
	rdsURL = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	hcmURL = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)

// stamp is when a client's EDS version first reached version.
type stamp struct {
	version int64
	at      time.Time
}

// client is one simulated Envoy: one ADS stream at a time on a shared
// connection. Its run goroutine owns everything but the atomics and seen.
type client struct {
	f    *fleet
	id   int
	conn *grpc.ClientConn
	rng  *rand.Rand
	node *corev3.Node

	// subscribed and held are indexed by cluster: the EDS names asked for
	// and those received. Kept across reconnects, as Envoy keeps its
	// configuration.
	subscribed []bool
	held       []bool
	// rdsSubscribed and rdsHeld are the same for route configurations,
	// indexed by listener.
	rdsSubscribed []bool
	rdsHeld       []bool

	heldN      atomic.Int32 // true entries of held
	rdsHeldN   atomic.Int32 // true entries of rdsHeld
	edsVersion atomic.Int64 // the highest EDS version received
	counted    atomic.Int64 // 1 + the index of the last goal reached
	bytes      atomic.Int64 // bytes of responses received
	resources  atomic.Int64 // resources in responses received

	mu   sync.Mutex
	seen []stamp // guarded by mu: each raise of edsVersion, in order

	streams int64 // streams opened, when Config.Recorder is set

	// With Config.Resume, what the client holds, presented when it
	// reconnects: sotwVersions the version ACKed per type URL,
	// deltaVersions the version of each resource per type URL.
	sotwVersions  map[string]string
	deltaVersions map[string]map[string]string
}

func newClient(f *fleet, id int, conn *grpc.ClientConn) *client {
	c := &client{
		f:          f,
		id:         id,
		conn:       conn,
		rng:        rand.New(rand.NewPCG(f.cfg.Seed, uint64(id))),
		node:       &corev3.Node{Id: fmt.Sprintf("%s-%05d", f.cfg.NodePrefix, id), Cluster: f.cfg.NodePrefix},
		subscribed: make([]bool, len(f.names)),
		held:       make([]bool, len(f.names)),

		rdsSubscribed: make([]bool, len(f.routes)),
		rdsHeld:       make([]bool, len(f.routes)),
	}
	if f.cfg.Resume {
		c.sotwVersions = map[string]string{}
		c.deltaVersions = map[string]map[string]string{}
	}
	return c
}

// run opens the client's stream until ctx ends, again after each end with
// a capped exponential backoff (reset by a stream that received
// something), counting the ends as stream errors.
func (c *client) run(ctx context.Context) {
	backoff := c.f.cfg.BackoffBase
	for {
		var got bool
		var err error
		if c.f.cfg.Delta {
			got, err = c.delta(ctx)
		} else {
			got, err = c.sotw(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		c.f.streamErrors.Add(1)
		c.f.noteError(err)
		if got {
			backoff = c.f.cfg.BackoffBase
		}
		// Full jitter, as Envoy's backoff strategy.
		wait := time.Duration(c.rng.Int64N(int64(backoff)) + 1)
		backoff = min(2*backoff, c.f.cfg.BackoffMax)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		c.f.reconnects.Add(1)
	}
}

// nack reports whether to NACK the response just received: a fraction of
// them once the client is synced (before, a NACK would only delay the
// initial subscription, which Envoy's NACKs are not about).
func (c *client) nack() bool {
	r := c.f.cfg.NackRatio
	if r <= 0 || c.counted.Load() == 0 {
		return false
	}
	return c.rng.Float64() < r
}

func nackDetail() *status.Status {
	return &status.Status{Code: int32(codes.InvalidArgument), Message: "xds-loadgen: NACK by --nack-ratio"}
}

// received records an EDS response: its size and version, and the names
// it carries (held) or removes.
func (c *client) received(version int64, names []int, removed []int) {
	now := time.Now()
	for _, i := range names {
		if !c.held[i] {
			c.held[i] = true
			c.heldN.Add(1)
		}
	}
	for _, i := range removed {
		if c.held[i] {
			c.held[i] = false
			c.heldN.Add(-1)
		}
	}
	if version > c.edsVersion.Load() {
		c.mu.Lock()
		c.seen = append(c.seen, stamp{version: version, at: now})
		c.mu.Unlock()
		c.edsVersion.Store(version)
	}
	c.f.reach(c)
}

// receivedRoutes records an RDS response's route configurations.
func (c *client) receivedRoutes(names []int, removed []int) {
	for _, i := range names {
		if !c.rdsHeld[i] {
			c.rdsHeld[i] = true
			c.rdsHeldN.Add(1)
		}
	}
	for _, i := range removed {
		if c.rdsHeld[i] {
			c.rdsHeld[i] = false
			c.rdsHeldN.Add(-1)
		}
	}
	c.f.reach(c)
}

// routeNames returns the indexes of the route configurations the
// listeners of a response take over RDS (those of the fixture).
func (c *client) routeNames(bodies [][]byte) ([]int, error) {
	var out []int
	for _, b := range bodies {
		var l listenerv3.Listener
		if err := proto.Unmarshal(b, &l); err != nil {
			return nil, fmt.Errorf("listener: %w", err)
		}
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				a := f.GetTypedConfig()
				if a.GetTypeUrl() != hcmURL {
					continue
				}
				var hcm hcmv3.HttpConnectionManager
				if err := proto.Unmarshal(a.GetValue(), &hcm); err != nil {
					return nil, fmt.Errorf("listener %s: %w", l.GetName(), err)
				}
				if i, ok := c.f.routeIndex[hcm.GetRds().GetRouteConfigName()]; ok {
					out = append(out, i)
				}
			}
		}
	}
	return out, nil
}

// firstAt returns when the client's EDS version first reached version.
func (c *client) firstAt(version int64) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.seen {
		if s.version >= version {
			return s.at, true
		}
	}
	return time.Time{}, false
}

func (c *client) count(m proto.Message, resources int) {
	c.bytes.Add(int64(proto.Size(m)))
	c.resources.Add(int64(resources))
	c.f.responses.Add(1)
}

// serviceNames returns the indexes of the EDS service names of the
// clusters of a response (those of the fixture; others are left alone).
func (c *client) serviceNames(bodies [][]byte) ([]int, error) {
	out := make([]int, 0, len(bodies))
	for _, b := range bodies {
		var cl clusterv3.Cluster
		if err := proto.Unmarshal(b, &cl); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		name := cl.GetEdsClusterConfig().GetServiceName()
		if name == "" {
			name = cl.GetName()
		}
		if i, ok := c.f.index[name]; ok {
			out = append(out, i)
		}
	}
	return out, nil
}

// sotw runs one state-of-the-world ADS stream until it ends.
func (c *client) sotw(ctx context.Context) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	rec := c.recordStart(chaos.ModeSotW, c.presentedSotW())
	defer func() { c.recordEnd(rec, chaos.ModeSotW, err) }()
	var cdsVersion, edsVersion, ldsVersion, rdsVersion string
	var edsNames, rdsNames []string
	askLDS := len(c.f.routes) > 0
	if c.sotwVersions != nil {
		cdsVersion, edsVersion = c.sotwVersions[cdsURL], c.sotwVersions[edsURL]
		ldsVersion, rdsVersion = c.sotwVersions[ldsURL], c.sotwVersions[rdsURL]
	}
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: cdsURL, VersionInfo: cdsVersion}); err != nil {
		return false, err
	}
	// Resuming, the client asks at once for everything it holds, at the
	// versions it holds, as Envoy does on a new stream: an unchanged CDS
	// or LDS gets no response, so nothing else would make it ask.
	if c.sotwVersions != nil && cdsVersion != "" {
		if names := namesOf(c.subscribed, c.f.names); len(names) > 0 {
			edsNames = names
			if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: edsURL, ResourceNames: edsNames, VersionInfo: edsVersion}); err != nil {
				return false, err
			}
		}
		if askLDS {
			askLDS = false
			if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: ldsURL, VersionInfo: ldsVersion}); err != nil {
				return false, err
			}
		}
		if names := namesOf(c.rdsSubscribed, c.f.routes); len(names) > 0 && ldsVersion != "" {
			rdsNames = names
			if err := st.Send(&discoveryv3.DiscoveryRequest{TypeUrl: rdsURL, ResourceNames: rdsNames, VersionInfo: rdsVersion}); err != nil {
				return false, err
			}
		}
	}
	s := &sotwState{rec: rec, askLDS: askLDS, cdsVersion: cdsVersion, edsVersion: edsVersion, ldsVersion: ldsVersion, rdsVersion: rdsVersion,
		edsNames: edsNames, rdsNames: rdsNames}
	for {
		resp := new(discoveryv3.DiscoveryResponse)
		if err := st.RecvMsg(resp); err != nil {
			return got, err
		}
		got = true
		if err := c.onSotW(s, resp, st.Send); err != nil {
			return got, err
		}
	}
}

// sotwState is what a SotW stream keeps from one response to the next.
type sotwState struct {
	rec                                                                int64 // the stream's number in the recording
	askLDS                                                             bool
	cdsVersion, edsVersion, edsNonce, ldsVersion, rdsVersion, rdsNonce string
	edsNames, rdsNames                                                 []string
}

// onSotW handles a SotW response: records and counts it, updates what
// the client holds and sends the requests Envoy would.
func (c *client) onSotW(s *sotwState, resp *discoveryv3.DiscoveryResponse, send func(*discoveryv3.DiscoveryRequest) error) error {
	c.recordSotW(s.rec, resp)
	c.count(resp, len(resp.GetResources()))
	nack := c.nack()
	req := &discoveryv3.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
	switch resp.GetTypeUrl() {
	case cdsURL:
		if !nack {
			idx, err := c.serviceNames(anyBodies(resp.GetResources()))
			if err != nil {
				return err
			}
			// CDS is state of the world: the EDS names are exactly
			// those of the clusters received.
			names, changed := setSubscribed(c.subscribed, idx, c.f.names)
			if changed || s.edsNames == nil {
				s.edsNames = names
				// Envoy asks for the new EDS names before it ACKs CDS.
				if err := send(&discoveryv3.DiscoveryRequest{TypeUrl: edsURL, ResourceNames: s.edsNames,
					VersionInfo: s.edsVersion, ResponseNonce: s.edsNonce}); err != nil {
					return err
				}
			}
			s.cdsVersion = resp.GetVersionInfo()
		}
		req.VersionInfo = s.cdsVersion
	case ldsURL:
		if !nack {
			idx, err := c.routeNames(anyBodies(resp.GetResources()))
			if err != nil {
				return err
			}
			names, changed := setSubscribed(c.rdsSubscribed, idx, c.f.routes)
			if changed || s.rdsNames == nil {
				s.rdsNames = names
				if err := send(&discoveryv3.DiscoveryRequest{TypeUrl: rdsURL, ResourceNames: s.rdsNames,
					VersionInfo: s.rdsVersion, ResponseNonce: s.rdsNonce}); err != nil {
					return err
				}
			}
			s.ldsVersion = resp.GetVersionInfo()
		}
		req.VersionInfo = s.ldsVersion
	case rdsURL:
		s.rdsNonce = resp.GetNonce()
		idx := make([]int, 0, len(resp.GetResources()))
		for _, a := range resp.GetResources() {
			if i, ok := c.f.routeIndex[claName(a.GetValue())]; ok {
				idx = append(idx, i)
			}
		}
		c.receivedRoutes(idx, nil)
		if !nack {
			s.rdsVersion = resp.GetVersionInfo()
		}
		req.VersionInfo = s.rdsVersion
		req.ResourceNames = s.rdsNames
	case edsURL:
		s.edsNonce = resp.GetNonce()
		idx := make([]int, 0, len(resp.GetResources()))
		for _, a := range resp.GetResources() {
			if i, ok := c.f.index[claName(a.GetValue())]; ok {
				idx = append(idx, i)
			}
		}
		c.received(parseVersion(resp.GetVersionInfo()), idx, nil)
		if !nack {
			s.edsVersion = resp.GetVersionInfo()
		}
		req.VersionInfo = s.edsVersion
		req.ResourceNames = s.edsNames
	default:
		req.VersionInfo = resp.GetVersionInfo()
	}
	if nack {
		req.ErrorDetail = nackDetail()
		c.f.nacks.Add(1)
	} else if c.sotwVersions != nil {
		c.sotwVersions[resp.GetTypeUrl()] = req.GetVersionInfo()
	}
	if err := send(req); err != nil {
		return err
	}
	// Envoy asks for listeners once its clusters are in.
	if s.askLDS && resp.GetTypeUrl() == cdsURL {
		s.askLDS = false
		if err := send(&discoveryv3.DiscoveryRequest{TypeUrl: ldsURL}); err != nil {
			return err
		}
	}
	return nil
}

// delta runs one delta ADS stream until it ends.
func (c *client) delta(ctx context.Context) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	presented := c.presentedDelta()
	rec := c.recordStart(chaos.ModeDelta, presented)
	defer func() { c.recordEnd(rec, chaos.ModeDelta, err) }()
	if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: c.node, TypeUrl: cdsURL, InitialResourceVersions: presented[cdsURL]}); err != nil {
		return false, err
	}
	// A new stream subscribes again to what the client wants. Resuming,
	// it does so at once for what it subscribed before, presenting the
	// versions it holds, as Envoy does: an unchanged cluster or listener
	// is not sent again, so nothing else would make it ask.
	var wantEDS, wantRDS []int
	if c.deltaVersions != nil && len(presented[cdsURL]) > 0 {
		wantEDS, wantRDS = marked(c.subscribed), marked(c.rdsSubscribed)
	}
	clear(c.subscribed)
	clear(c.rdsSubscribed)
	askLDS := len(c.f.routes) > 0
	if len(wantEDS) > 0 {
		sub := addSubscribed(c.subscribed, wantEDS, c.f.names)
		if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: edsURL, ResourceNamesSubscribe: sub, InitialResourceVersions: presented[edsURL]}); err != nil {
			return false, err
		}
	}
	if askLDS && len(presented[cdsURL]) > 0 {
		askLDS = false
		if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ldsURL, InitialResourceVersions: presented[ldsURL]}); err != nil {
			return false, err
		}
	}
	if len(wantRDS) > 0 && len(presented[ldsURL]) > 0 {
		sub := addSubscribed(c.rdsSubscribed, wantRDS, c.f.routes)
		if err := st.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: rdsURL, ResourceNamesSubscribe: sub, InitialResourceVersions: presented[rdsURL]}); err != nil {
			return false, err
		}
	}
	s := &deltaState{rec: rec, askLDS: askLDS}
	for {
		resp := new(discoveryv3.DeltaDiscoveryResponse)
		if err := st.RecvMsg(resp); err != nil {
			return got, err
		}
		got = true
		if err := c.onDelta(s, resp, st.Send); err != nil {
			return got, err
		}
	}
}

// deltaState is what a delta stream keeps from one response to the next.
type deltaState struct {
	rec    int64 // the stream's number in the recording
	askLDS bool
}

// onDelta handles a delta response: records and counts it, updates what
// the client holds and sends the requests Envoy would.
func (c *client) onDelta(s *deltaState, resp *discoveryv3.DeltaDiscoveryResponse, send func(*discoveryv3.DeltaDiscoveryRequest) error) error {
	c.recordDelta(s.rec, resp)
	c.count(resp, len(resp.GetResources()))
	nack := c.nack()
	req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
	switch resp.GetTypeUrl() {
	case cdsURL:
		if !nack {
			idx, err := c.serviceNames(deltaBodies(resp.GetResources()))
			if err != nil {
				return err
			}
			if sub := addSubscribed(c.subscribed, idx, c.f.names); len(sub) > 0 {
				if err := send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: edsURL, ResourceNamesSubscribe: sub}); err != nil {
					return err
				}
			}
		}
	case ldsURL:
		if !nack {
			idx, err := c.routeNames(deltaBodies(resp.GetResources()))
			if err != nil {
				return err
			}
			if sub := addSubscribed(c.rdsSubscribed, idx, c.f.routes); len(sub) > 0 {
				if err := send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: rdsURL, ResourceNamesSubscribe: sub}); err != nil {
					return err
				}
			}
		}
	case rdsURL:
		var idx, removed []int
		for _, r := range resp.GetResources() {
			if i, ok := c.f.routeIndex[r.GetName()]; ok {
				idx = append(idx, i)
			}
		}
		for _, n := range resp.GetRemovedResources() {
			if i, ok := c.f.routeIndex[n]; ok {
				removed = append(removed, i)
			}
		}
		c.receivedRoutes(idx, removed)
	case edsURL:
		idx := make([]int, 0, len(resp.GetResources()))
		version := parseVersion(resp.GetSystemVersionInfo())
		for _, r := range resp.GetResources() {
			if i, ok := c.f.index[r.GetName()]; ok {
				idx = append(idx, i)
			}
			version = max(version, parseVersion(r.GetVersion()))
		}
		var removed []int
		for _, n := range resp.GetRemovedResources() {
			if i, ok := c.f.index[n]; ok {
				removed = append(removed, i)
			}
		}
		c.received(version, idx, removed)
	}
	if nack {
		req.ErrorDetail = nackDetail()
		c.f.nacks.Add(1)
	} else if c.deltaVersions != nil {
		c.holdDelta(resp)
	}
	if err := send(req); err != nil {
		return err
	}
	if s.askLDS && resp.GetTypeUrl() == cdsURL {
		s.askLDS = false
		if err := send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ldsURL}); err != nil {
			return err
		}
	}
	return nil
}

// parseVersion is a version as a number; 0 when it is not one (a hash).
func parseVersion(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// claName reads field 1 of a message without decoding the rest: the
// cluster_name of a ClusterLoadAssignment, the name of a
// RouteConfiguration.
func claName(b []byte) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return ""
			}
			return string(v)
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return ""
		}
		b = b[n:]
	}
	return ""
}

// anyBodies returns the encoded messages of a SotW response's resources.
func anyBodies(rs []*anypb.Any) [][]byte {
	out := make([][]byte, len(rs))
	for i, a := range rs {
		out[i] = a.GetValue()
	}
	return out
}

// deltaBodies returns the encoded messages of a delta response's
// resources.
func deltaBodies(rs []*discoveryv3.Resource) [][]byte {
	out := make([][]byte, len(rs))
	for i, r := range rs {
		out[i] = r.GetResource().GetValue()
	}
	return out
}

// setSubscribed makes subscribed (indexed like names) exactly idx, as a
// SotW client does from a full-state response; it returns the names
// subscribed, in index order, and whether the set changed.
func setSubscribed(subscribed []bool, idx []int, names []string) ([]string, bool) {
	want := make([]bool, len(subscribed))
	for _, i := range idx {
		want[i] = true
	}
	out := make([]string, 0, len(idx))
	changed := false
	for i, w := range want {
		if w {
			out = append(out, names[i])
		}
		if w != subscribed[i] {
			changed = true
		}
	}
	copy(subscribed, want)
	return out, changed
}

// addSubscribed marks idx subscribed, as a delta client does, and
// returns the names that were not yet.
func addSubscribed(subscribed []bool, idx []int, names []string) []string {
	var out []string
	for _, i := range idx {
		if !subscribed[i] {
			subscribed[i] = true
			out = append(out, names[i])
		}
	}
	return out
}
