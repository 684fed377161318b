package sotw

import (
	"fmt"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// Promise 8 in SotW: TTL'd resources go to clients that read TTLs wrapped
// in a discovery.v3.Resource whose ttl is the time their lease has left.
// When a lease is extended (a refresh, or found extended just before it
// expires), the client is sent a heartbeat at the version it ACKed:
//   - EDS, RDS and the other named types: the TTL'd resources alone,
//     without their body, as the protocol text describes;
//   - LDS, CDS and other full-state types: the whole set again, the TTL'd
//     resources with their body. Envoy takes a body-less resource out of
//     a full-state update, so that its CDS and LDS would remove it: the
//     full-state heartbeat keeps the version and content and only moves
//     the TTL.
// Clients that did not advertise both features never see either.

// resourceURL is the type URL of discovery.v3.Resource.
var resourceURL = "type.googleapis.com/" + string((&discoveryv3.Resource{}).ProtoReflect().Descriptor().FullName())

// wrapTTL wraps e in a discovery.v3.Resource with ttl; without its body
// for a heartbeat.
func wrapTTL(e *view.Entry, ver string, ttl time.Duration, body bool) *anypb.Any {
	r := &discoveryv3.Resource{Name: e.Name, Version: ver, Ttl: durationpb.New(ttl)}
	if body {
		r.Resource = e.Body
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	if err != nil {
		// Only an invalid Duration could fail, and ttl is positive.
		panic(fmt.Sprintf("ads: encode a TTL'd resource: %v", err))
	}
	return &anypb.Any{TypeUrl: resourceURL, Value: b}
}

// Holds reports whether the client still holds the TTL'd resource h it
// was sent (the same entry: a later version or a removal replaced it).
func (st *stream) Holds(t *resource.Type, name string, h xdsstream.TTLHeld) bool {
	ts := st.types[t]
	if ts == nil {
		return false
	}
	e, _ := ts.sent.Get(name)
	return e == h.Entry
}

// heartbeats sends the heartbeats due, per type, once the client has
// ACKed the type's latest response (a heartbeat is at the version the
// client holds) and nothing else is to be sent for it.
func (st *stream) heartbeats() error {
	return st.Heartbeats(func(t *resource.Type) bool {
		ts := st.types[t]
		return ts != nil && ts.rec.Nonce != "" && ts.rec.Acked == ts.rec.Version && ts.rec.Nacked == "" && !ts.needAll && len(ts.dirty) == 0
	}, func(t *resource.Type, due []xdsstream.TTLHeld) error {
		ts := st.types[t]
		if !t.Wildcard {
			return st.sendHeartbeat(ts, due)
		}
		// The whole set again, with fresh TTLs: a body-less resource
		// would take it out of the client's full state.
		entries := make([]*view.Entry, 0, ts.sent.Len())
		ts.sent.Each(func(_ string, e *view.Entry) { entries = append(entries, e) })
		scope.SortEntries(entries)
		return st.send(ts, entries, nil, ts.rec.Version, false)
	})
}

// sendHeartbeat sends the body-less heartbeat of a named type.
func (st *stream) sendHeartbeat(ts *typeState, due []xdsstream.TTLHeld) error {
	ttls := st.WireTTLs(len(due), func(i int) *view.Entry { return due[i].Entry })
	ver := ts.rec.Version
	build := func() proto.Message {
		r := &discoveryv3.DiscoveryResponse{VersionInfo: ver, TypeUrl: ts.t.URL, Resources: make([]*anypb.Any, len(due)),
			ControlPlane: st.s.core.ControlPlane}
		for i, h := range due {
			r.Resources[i] = wrapTTL(h.Entry, ver, ttls[i], false)
		}
		return r
	}
	key := "" // a heartbeat at an older version is this stream's own
	if ver == version(st.Snap.Revision) {
		key = xdsstream.HeartbeatKey("H", ts.t, ver, due, ttls)
	}
	nonce, err := st.Send(ts.t, nil, ver, key, build, 0)
	if err != nil {
		return err
	}
	ts.rec.Nonce = nonce
	st.RecordTTLs(ts.t, len(due), func(i int) xdsstream.Item { return due[i].Item }, ttls)
	st.updateStatus(ts)
	return nil
}
