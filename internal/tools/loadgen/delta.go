package loadgen

import (
	"context"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/tools/chaos/record"
)

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
	pre, err := c.takeDelta(resp, nack)
	if err != nil {
		return err
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

// takeDelta updates what the client holds and subscribes to from a delta
// response; it returns the subscription to send before the ACK, if the
// clusters or listeners received name new resources. A NACKed CDS or
// LDS response is not taken.
func (c *client) takeDelta(resp *deltaResponse, nack bool) (*discoveryv3.DeltaDiscoveryRequest, error) {
	switch resp.typeURL {
	case cdsURL:
		if !nack {
			idx, err := c.serviceNames(c.deltaBodies(resp.resources))
			if err != nil {
				return nil, err
			}
			if sub := addSubscribed(c.subscribed, idx, c.f.names); len(sub) > 0 {
				return &discoveryv3.DeltaDiscoveryRequest{TypeUrl: edsURL, ResourceNamesSubscribe: sub}, nil
			}
		}
	case ldsURL:
		if !nack {
			idx, err := c.routeNames(c.deltaBodies(resp.resources))
			if err != nil {
				return nil, err
			}
			if sub := addSubscribed(c.rdsSubscribed, idx, c.f.routes); len(sub) > 0 {
				return &discoveryv3.DeltaDiscoveryRequest{TypeUrl: rdsURL, ResourceNamesSubscribe: sub}, nil
			}
		}
	case rdsURL:
		c.deltaRoutes(resp)
	case edsURL:
		c.deltaEndpoints(resp)
	}
	return nil, nil
}

// deltaRoutes takes the route configurations of an RDS response.
func (c *client) deltaRoutes(resp *deltaResponse) {
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
}

// deltaEndpoints takes the endpoints of an EDS response, at the highest
// of its system version and its resources' versions.
func (c *client) deltaEndpoints(resp *deltaResponse) {
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
