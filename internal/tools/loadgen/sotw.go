package loadgen

import (
	"context"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/tools/chaos/record"
)

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
	var err error
	switch resp.typeURL {
	case cdsURL:
		pre, err = c.sotwClusters(s, resp, nack, req)
	case ldsURL:
		pre, err = c.sotwListeners(s, resp, nack, req)
	case rdsURL:
		c.sotwRoutes(s, resp, nack, req)
	case edsURL:
		c.sotwEndpoints(s, resp, nack, req)
	default:
		req.VersionInfo = resp.versionInfo
	}
	if err != nil {
		return err
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

// sotwClusters takes a CDS response into s and req; it returns the EDS
// request to send before the ACK when the clusters changed.
func (c *client) sotwClusters(s *sotwState, resp *sotwResponse, nack bool, req *discoveryv3.DiscoveryRequest) (*discoveryv3.DiscoveryRequest, error) {
	var pre *discoveryv3.DiscoveryRequest
	if !nack {
		idx, err := c.serviceNames(resp.bodies)
		if err != nil {
			return nil, err
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
	return pre, nil
}

// sotwListeners takes an LDS response into s and req; it returns the RDS
// request to send before the ACK when the route names changed.
func (c *client) sotwListeners(s *sotwState, resp *sotwResponse, nack bool, req *discoveryv3.DiscoveryRequest) (*discoveryv3.DiscoveryRequest, error) {
	var pre *discoveryv3.DiscoveryRequest
	if !nack {
		idx, err := c.routeNames(resp.bodies)
		if err != nil {
			return nil, err
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
	return pre, nil
}

// sotwRoutes takes an RDS response: the route configurations held, and
// the version and names of the ACK or NACK.
func (c *client) sotwRoutes(s *sotwState, resp *sotwResponse, nack bool, req *discoveryv3.DiscoveryRequest) {
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
}

// sotwEndpoints takes an EDS response: the endpoints held and their
// version, and the version and names of the ACK or NACK.
func (c *client) sotwEndpoints(s *sotwState, resp *sotwResponse, nack bool, req *discoveryv3.DiscoveryRequest) {
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
}
