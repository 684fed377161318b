package ads

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/lease"
	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/scope"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/wire"
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

// ttlHeld is one resource a client holds with a TTL.
type ttlHeld struct {
	e       *store.Entry
	expires time.Time // when the client drops it, unless heartbeated
}

// wireTTLs returns the TTL to send with each entry, nil when none is
// TTL'd.
func (st *stream) wireTTLs(entries []*store.Entry) []time.Duration {
	var ttls []time.Duration
	var now time.Time
	for i, e := range entries {
		if e.Lease == 0 {
			continue
		}
		if ttls == nil {
			ttls = make([]time.Duration, len(entries))
			now = time.Now()
			if st.notice == nil {
				// Taken before the expiry, so an extension after it
				// is not missed.
				st.notice = st.s.cfg.Leases.Notice()
			}
		}
		ttls[i] = lease.WireTTL(st.s.cfg.Leases.Expiry(st.ctx, e), now)
	}
	return ttls
}

// wrapTTL wraps e in a discovery.v3.Resource with ttl; without its body
// for a heartbeat.
func wrapTTL(e *store.Entry, ver string, ttl time.Duration, body bool) *anypb.Any {
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

// sentTTLs records which of the entries just sent the client holds with a
// TTL, and until when.
func (st *stream) sentTTLs(ts *typeState, entries []*store.Entry, ttls []time.Duration) {
	if ts.ttl == nil {
		ts.ttl, ts.beat = map[string]ttlHeld{}, map[string]bool{}
	}
	now := time.Now()
	for i, e := range entries {
		delete(ts.beat, e.Name) // this response carried a fresh TTL
		if ttls != nil && ttls[i] > 0 {
			ts.ttl[e.Name] = ttlHeld{e: e, expires: now.Add(ttls[i])}
		} else {
			delete(ts.ttl, e.Name)
		}
	}
	st.pruneTTL(ts)
}

// pruneTTL drops what the client no longer holds from ts.ttl.
func (st *stream) pruneTTL(ts *typeState) {
	for n, h := range ts.ttl {
		if ts.sent[n] != h.e {
			delete(ts.ttl, n)
			delete(ts.beat, n)
		}
	}
	st.countTTL()
}

// countTTL updates the stream's share of the TTL'd resources gauge.
func (st *stream) countTTL() {
	n := 0
	for _, ts := range st.types {
		n += len(ts.ttl)
	}
	st.s.metrics.ttlResources.Add(float64(n - st.ttlCount))
	st.ttlCount = n
}

// leasesExtended takes the lease extensions announced since the stream
// last looked and marks the TTL'd resources they cover for a heartbeat.
func (st *stream) leasesExtended() {
	var ext map[int64]bool
	ext, st.notice = lease.Extended(st.notice)
	for _, ts := range st.types {
		if len(ts.ttl) == 0 {
			continue
		}
		st.pruneTTL(ts)
		for n, h := range ts.ttl {
			if ext[h.e.Lease] {
				ts.beat[n] = true
			}
		}
	}
}

// heartbeat sends the heartbeats due, per type, once the client has ACKed
// the type's latest response (a heartbeat is at the version the client
// holds) and nothing else is to be sent for it.
func (st *stream) heartbeat() error {
	for _, t := range resource.All() {
		ts := st.types[t]
		if ts == nil || len(ts.beat) == 0 || ts.nonce == "" || ts.acked != ts.version || ts.nacked != "" || ts.needAll || len(ts.dirty) > 0 {
			continue
		}
		st.pruneTTL(ts)
		if len(ts.beat) == 0 {
			continue
		}
		st.s.metrics.heartbeats.WithLabelValues(ts.t.Name).Inc()
		if ts.t.Wildcard {
			entries := make([]*store.Entry, 0, len(ts.sent))
			for _, e := range ts.sent {
				entries = append(entries, e)
			}
			scope.SortEntries(entries)
			if err := st.send(ts, entries, ts.version, false); err != nil {
				return err
			}
			continue
		}
		if err := st.sendHeartbeat(ts); err != nil {
			return err
		}
	}
	return nil
}

// sendHeartbeat sends the body-less heartbeat of a named type.
func (st *stream) sendHeartbeat(ts *typeState) error {
	names := make([]string, 0, len(ts.beat))
	for n := range ts.beat {
		names = append(names, n)
	}
	sort.Strings(names)
	entries := make([]*store.Entry, len(names))
	for i, n := range names {
		entries[i] = ts.ttl[n].e
	}
	ttls := st.wireTTLs(entries)
	var key strings.Builder
	key.WriteString("H\x00" + ts.t.Name + "\x00" + ts.version)
	for i, e := range entries {
		key.WriteString("\x00" + e.Scope + "/" + e.Name + "@" + strconv.FormatInt(e.ModRevision, 10) + "~" + strconv.FormatInt(int64(ttls[i]), 10))
	}
	build := func() proto.Message {
		r := &discoveryv3.DiscoveryResponse{VersionInfo: ts.version, TypeUrl: ts.t.URL, Resources: make([]*anypb.Any, len(entries))}
		for i, e := range entries {
			r.Resources[i] = wrapTTL(e, ts.version, ttls[i], false)
		}
		return r
	}
	var body []byte
	var err error
	if ts.version == version(st.snap.Revision) {
		body, err = st.s.cache.Get(st.snap.Revision, key.String(), build)
	} else {
		body, err = st.s.cache.Encode(build())
	}
	if err != nil {
		return status.Errorf(codes.Internal, "encode heartbeat: %v", err)
	}
	st.nonces++
	nonce := strconv.FormatUint(st.nonces, 10)
	if err := st.gs.SendMsg(wire.NewResponse(body, nonce)); err != nil {
		return err
	}
	ts.nonce = nonce
	now := time.Now()
	for i, e := range entries {
		ts.ttl[e.Name] = ttlHeld{e: e, expires: now.Add(ttls[i])}
	}
	clear(ts.beat)
	st.s.metrics.responses.WithLabelValues(ts.t.Name).Inc()
	st.s.metrics.bytesSent.Add(float64(len(body) + len(nonce) + 2))
	st.updateStatus(ts)
	return nil
}

// TTLStatus is one resource a client holds with a TTL.
type TTLStatus = lease.TTLStatus

// ttlStatus lists ts's TTL'd resources; NextHeartbeat is filled when read.
func ttlStatus(ts *typeState) []TTLStatus {
	if len(ts.ttl) == 0 {
		return nil
	}
	out := make([]TTLStatus, 0, len(ts.ttl))
	for n, h := range ts.ttl {
		out = append(out, TTLStatus{Type: ts.t.Name, Name: n, Lease: fmt.Sprintf("%016x", h.e.Lease), Expires: h.expires.UTC(), Pending: ts.beat[n]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
