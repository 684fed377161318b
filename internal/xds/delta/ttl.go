package delta

import (
	"strconv"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// Promise 8 in delta: for a client that advertised
// xds.config.supports-resource-ttl, a TTL'd resource carries Resource.ttl,
// the time its lease has left. When the lease is extended (a refresh, or
// found extended just before it expires) the client gets a heartbeat: the
// resource's name and unchanged version with the new ttl and no body.
// Other clients get the resource without a TTL and never a heartbeat.

// wireResource is it as a delta Resource: with its TTL when ttl is
// positive, with its body unless a heartbeat.
func wireResource(it xdsstream.Item, ttl time.Duration, body bool) *discoveryv3.Resource {
	res := &discoveryv3.Resource{Name: it.Entry.Name, Version: strconv.FormatInt(it.Entry.ModRevision, 10)}
	if body {
		res.Resource = it.Entry.Body
	}
	if ttl > 0 {
		res.Ttl = durationpb.New(ttl)
	}
	if it.Alias != "" {
		res.Aliases = []string{it.Alias}
	}
	return res
}

// Holds reports whether the client still holds the TTL'd resource h, by
// the name key, at the version it was sent with.
func (st *stream) Holds(t *resource.Type, key string, h xdsstream.TTLHeld) bool {
	ts := st.types[t]
	if ts == nil {
		return false
	}
	have, ok := ts.have.Get(key)
	return ok && strconv.FormatInt(have.rev, 10) == h.Version
}

// heartbeats sends the heartbeats due, per type, when no response of the
// type is outstanding (one outstanding response per type) and nothing
// else is to be sent for it.
func (st *stream) heartbeats() error {
	return st.Heartbeats(func(t *resource.Type) bool {
		ts := st.types[t]
		return ts != nil && !ts.outstanding && !ts.needAll && !ts.respond && len(ts.dirty) == 0
	}, st.sendHeartbeat)
}

// sendHeartbeat sends one type's heartbeat: each resource's name, version
// and new TTL, without its body.
func (st *stream) sendHeartbeat(t *resource.Type, due []xdsstream.TTLHeld) error {
	ts := st.types[t]
	ttls := st.WireTTLs(len(due), func(i int) *view.Entry { return due[i].Entry })
	sysVersion := ts.rec.Version
	build := func() proto.Message {
		r := &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: sysVersion, TypeUrl: t.URL, Resources: make([]*discoveryv3.Resource, len(due)),
			ControlPlane: st.s.core.ControlPlane}
		for i, h := range due {
			r.Resources[i] = wireResource(h.Item, ttls[i], false)
		}
		return r
	}
	nonce, err := st.Send(t, nil, sysVersion, xdsstream.HeartbeatKey("DH", t, sysVersion, due, ttls), build, 0)
	if err != nil {
		return err
	}
	// Outstanding like any response; what the client holds is unchanged.
	ts.rec.Nonce = nonce
	ts.outstanding, ts.settled = true, false
	ts.inFlight = ts.inFlight[:0]
	st.RecordTTLs(t, len(due), func(i int) xdsstream.Item { return due[i].Item }, ttls)
	st.updateStatus(ts)
	return nil
}
