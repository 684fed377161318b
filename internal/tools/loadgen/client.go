package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/legation-io/legation/internal/tools/chaos/record"
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

	// Scratch space of the run goroutine, reused from one response to
	// the next: indexes of names, bodies, setSubscribed's want.
	idx    []int
	bodies [][]byte
	want   []bool
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
		want:          make([]bool, max(len(f.names), len(f.routes))),
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
	out := c.idx[:0]
	for _, b := range bodies {
		if err := listenerRoutes(b, func(route []byte) {
			if i, ok := c.f.routeIndex[string(route)]; ok {
				out = append(out, i)
			}
		}); err != nil {
			return nil, err
		}
	}
	c.idx = out
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

// count counts a response of size bytes on the wire.
func (c *client) count(size, resources int) {
	c.bytes.Add(int64(size))
	c.resources.Add(int64(resources))
	c.f.responses.Add(1)
}

// serviceNames returns the indexes of the EDS service names of the
// clusters of a response (those of the fixture; others are left alone).
func (c *client) serviceNames(bodies [][]byte) ([]int, error) {
	out := c.idx[:0]
	for _, b := range bodies {
		name, err := clusterEDSName(b)
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		if i, ok := c.f.index[string(name)]; ok {
			out = append(out, i)
		}
	}
	c.idx = out
	return out, nil
}

// sotw runs one state-of-the-world ADS stream until it ends.
func (c *client) sotw(ctx context.Context) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx, grpc.ForceCodecV2(leanCodec{}))
	if err != nil {
		return false, err
	}
	rec := c.recordStart(record.ModeSotW, c.presentedSotW())
	defer func() { c.recordEnd(rec, record.ModeSotW, err) }()
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
	// resp is read by leanCodec, into the same buffers each time.
	resp := &sotwResponse{}
	defer resp.release()
	s := &sotwState{rec: rec, askLDS: askLDS, cdsVersion: cdsVersion, edsVersion: edsVersion, ldsVersion: ldsVersion, rdsVersion: rdsVersion,
		edsNames: edsNames, rdsNames: rdsNames}
	for {
		if err := st.RecvMsg(resp); err != nil {
			return got, err
		}
		got = true
		err := c.onSotW(s, resp, st.Send)
		resp.release()
		if err != nil {
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
func (c *client) onSotW(s *sotwState, resp *sotwResponse, send func(*discoveryv3.DiscoveryRequest) error) error {
	c.recordSotW(s.rec, resp)
	c.count(resp.size, len(resp.bodies))
	nack := c.nack()
	req := &discoveryv3.DiscoveryRequest{TypeUrl: resp.typeURL, ResponseNonce: resp.nonce}
	// pre is a change of subscriptions the response makes, sent before
	// the ACK. Both are sent once the response is taken (the versions
	// held recorded), as Envoy applies a response and then answers: a
	// stream that ends on a send must not leave the client presenting an
	// older version than the configuration it applied.
	var pre *discoveryv3.DiscoveryRequest
	switch resp.typeURL {
	case cdsURL:
		if !nack {
			idx, err := c.serviceNames(resp.bodies)
			if err != nil {
				return err
			}
			// CDS is state of the world: the EDS names are exactly
			// those of the clusters received.
			names, changed := setSubscribed(c.subscribed, idx, c.f.names, s.edsNames, c.want)
			if changed || s.edsNames == nil {
				s.edsNames = names
				// Envoy asks for the new EDS names before it ACKs CDS.
				pre = &discoveryv3.DiscoveryRequest{TypeUrl: edsURL, ResourceNames: s.edsNames,
					VersionInfo: s.edsVersion, ResponseNonce: s.edsNonce}
			}
			s.cdsVersion = resp.versionInfo
		}
		req.VersionInfo = s.cdsVersion
	case ldsURL:
		if !nack {
			idx, err := c.routeNames(resp.bodies)
			if err != nil {
				return err
			}
			names, changed := setSubscribed(c.rdsSubscribed, idx, c.f.routes, s.rdsNames, c.want)
			if changed || s.rdsNames == nil {
				s.rdsNames = names
				pre = &discoveryv3.DiscoveryRequest{TypeUrl: rdsURL, ResourceNames: s.rdsNames,
					VersionInfo: s.rdsVersion, ResponseNonce: s.rdsNonce}
			}
			s.ldsVersion = resp.versionInfo
		}
		req.VersionInfo = s.ldsVersion
	case rdsURL:
		s.rdsNonce = resp.nonce
		idx := c.idx[:0]
		for _, b := range resp.bodies {
			if i, ok := c.f.routeIndex[string(leanName(b))]; ok {
				idx = append(idx, i)
			}
		}
		c.idx = idx
		c.receivedRoutes(idx, nil)
		if !nack {
			s.rdsVersion = resp.versionInfo
		}
		req.VersionInfo = s.rdsVersion
		req.ResourceNames = s.rdsNames
	case edsURL:
		s.edsNonce = resp.nonce
		idx := c.idx[:0]
		for _, b := range resp.bodies {
			if i, ok := c.f.index[string(leanName(b))]; ok {
				idx = append(idx, i)
			}
		}
		c.idx = idx
		c.received(parseVersion(resp.versionInfo), idx, nil)
		if !nack {
			s.edsVersion = resp.versionInfo
		}
		req.VersionInfo = s.edsVersion
		req.ResourceNames = s.edsNames
	default:
		req.VersionInfo = resp.versionInfo
	}
	if nack {
		req.ErrorDetail = nackDetail()
		c.f.nacks.Add(1)
	} else if c.sotwVersions != nil {
		c.sotwVersions[resp.typeURL] = req.GetVersionInfo()
	}
	if pre != nil {
		if err := send(pre); err != nil {
			return err
		}
	}
	if err := send(req); err != nil {
		return err
	}
	// Envoy asks for listeners once its clusters are in.
	if s.askLDS && resp.typeURL == cdsURL {
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
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).DeltaAggregatedResources(ctx, grpc.ForceCodecV2(leanCodec{}))
	if err != nil {
		return false, err
	}
	presented := c.presentedDelta()
	rec := c.recordStart(record.ModeDelta, presented)
	defer func() { c.recordEnd(rec, record.ModeDelta, err) }()
	first, askLDS := c.deltaFirstRequests(presented)
	for _, r := range first {
		if err := st.Send(r); err != nil {
			return false, err
		}
	}
	resp := &deltaResponse{}
	defer resp.release()
	s := &deltaState{rec: rec, askLDS: askLDS}
	for {
		if err := st.RecvMsg(resp); err != nil {
			return got, err
		}
		got = true
		err := c.onDelta(s, resp, st.Send)
		resp.release()
		if err != nil {
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
func (c *client) onDelta(s *deltaState, resp *deltaResponse, send func(*discoveryv3.DeltaDiscoveryRequest) error) error {
	c.recordDelta(s.rec, resp)
	c.count(resp.size, len(resp.resources))
	nack := c.nack()
	req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.typeURL, ResponseNonce: resp.nonce}
	// pre: as in onSotW, sent once the response is taken.
	var pre *discoveryv3.DeltaDiscoveryRequest
	switch resp.typeURL {
	case cdsURL:
		if !nack {
			idx, err := c.serviceNames(c.deltaBodies(resp.resources))
			if err != nil {
				return err
			}
			if sub := addSubscribed(c.subscribed, idx, c.f.names); len(sub) > 0 {
				pre = &discoveryv3.DeltaDiscoveryRequest{TypeUrl: edsURL, ResourceNamesSubscribe: sub}
			}
		}
	case ldsURL:
		if !nack {
			idx, err := c.routeNames(c.deltaBodies(resp.resources))
			if err != nil {
				return err
			}
			if sub := addSubscribed(c.rdsSubscribed, idx, c.f.routes); len(sub) > 0 {
				pre = &discoveryv3.DeltaDiscoveryRequest{TypeUrl: rdsURL, ResourceNamesSubscribe: sub}
			}
		}
	case rdsURL:
		var removed []int
		idx := c.idx[:0]
		for _, r := range resp.resources {
			if i, ok := c.f.routeIndex[string(r.name)]; ok {
				idx = append(idx, i)
			}
		}
		for _, n := range resp.removed {
			if i, ok := c.f.routeIndex[n]; ok {
				removed = append(removed, i)
			}
		}
		c.idx = idx
		c.receivedRoutes(idx, removed)
	case edsURL:
		idx := c.idx[:0]
		version := parseVersion(resp.systemVersionInfo)
		for _, r := range resp.resources {
			if i, ok := c.f.index[string(r.name)]; ok {
				idx = append(idx, i)
			}
			version = max(version, parseVersionBytes(r.version))
		}
		var removed []int
		for _, n := range resp.removed {
			if i, ok := c.f.index[n]; ok {
				removed = append(removed, i)
			}
		}
		c.idx = idx
		c.received(version, idx, removed)
	}
	if nack {
		req.ErrorDetail = nackDetail()
		c.f.nacks.Add(1)
	} else if c.deltaVersions != nil {
		c.holdDelta(resp)
	}
	if pre != nil {
		if err := send(pre); err != nil {
			return err
		}
	}
	if err := send(req); err != nil {
		return err
	}
	if s.askLDS && resp.typeURL == cdsURL {
		s.askLDS = false
		if err := send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: ldsURL}); err != nil {
			return err
		}
	}
	return nil
}

// deltaFirstRequests are a new delta stream's first requests, and whether
// LDS is still to be asked for (once CDS is in). Resuming, the client
// subscribes again at once to what it subscribed before, presenting the
// versions it holds, as Envoy does: an unchanged cluster or listener is
// not sent again, so nothing else would make it ask. The subscriptions
// are set here, before any request can fail: a stream that ends on a
// send keeps them for the next (a client that lost them would never ask
// again for what it holds).
func (c *client) deltaFirstRequests(presented map[string]map[string]string) ([]*discoveryv3.DeltaDiscoveryRequest, bool) {
	reqs := []*discoveryv3.DeltaDiscoveryRequest{{Node: c.node, TypeUrl: cdsURL, InitialResourceVersions: presented[cdsURL]}}
	var wantEDS, wantRDS []int
	if c.deltaVersions != nil && len(presented[cdsURL]) > 0 {
		wantEDS, wantRDS = marked(c.subscribed), marked(c.rdsSubscribed)
	}
	if len(presented[ldsURL]) == 0 {
		wantRDS = nil // asked again once the listeners come
	}
	clear(c.subscribed)
	clear(c.rdsSubscribed)
	if sub := addSubscribed(c.subscribed, wantEDS, c.f.names); len(sub) > 0 {
		reqs = append(reqs, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: edsURL, ResourceNamesSubscribe: sub, InitialResourceVersions: presented[edsURL]})
	}
	askLDS := len(c.f.routes) > 0
	if askLDS && len(presented[cdsURL]) > 0 {
		askLDS = false
		reqs = append(reqs, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: ldsURL, InitialResourceVersions: presented[ldsURL]})
	}
	if sub := addSubscribed(c.rdsSubscribed, wantRDS, c.f.routes); len(sub) > 0 {
		reqs = append(reqs, &discoveryv3.DeltaDiscoveryRequest{TypeUrl: rdsURL, ResourceNamesSubscribe: sub, InitialResourceVersions: presented[rdsURL]})
	}
	return reqs, askLDS
}

// parseVersion is a version as a number; 0 when it is not one (a hash).
func parseVersion(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// parseVersionBytes is parseVersion(string(v)), without allocating for
// a version of up to 18 digits.
func parseVersionBytes(v []byte) int64 {
	if len(v) == 0 || len(v) > 18 {
		return parseVersion(string(v))
	}
	var n int64
	for _, d := range v {
		if d < '0' || d > '9' {
			return parseVersion(string(v))
		}
		n = 10*n + int64(d-'0')
	}
	return n
}

// deltaBodies returns the encoded messages of a delta response's
// resources, in a slice the client reuses.
func (c *client) deltaBodies(rs []deltaResource) [][]byte {
	out := c.bodies[:0]
	for _, r := range rs {
		out = append(out, r.body)
	}
	c.bodies = out
	return out
}

// setSubscribed makes subscribed (indexed like names) exactly idx, as a
// SotW client does from a full-state response; it returns the names
// subscribed, in index order, and whether the set changed. When it did
// not and prev (the names returned before) is not nil, it returns prev.
// want is scratch space, at least as long as subscribed.
func setSubscribed(subscribed []bool, idx []int, names, prev []string, want []bool) ([]string, bool) {
	want = want[:len(subscribed)]
	clear(want)
	for _, i := range idx {
		want[i] = true
	}
	changed := false
	for i, w := range want {
		if w != subscribed[i] {
			changed = true
			break
		}
	}
	copy(subscribed, want)
	if !changed && prev != nil {
		return prev, false
	}
	out := make([]string, 0, len(idx))
	for i, w := range want {
		if w {
			out = append(out, names[i])
		}
	}
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
