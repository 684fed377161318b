package delta

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
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/lease"
	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/wire"
)

// Promise 8 in delta: for a client that advertised
// xds.config.supports-resource-ttl, a TTL'd resource carries Resource.ttl,
// the time its lease has left. When the lease is extended (a refresh, or
// found extended just before it expires) the client gets a heartbeat: the
// resource's name and unchanged version with the new ttl and no body.
// Other clients get the resource without a TTL and never a heartbeat.

// ttlHeld is one resource a client holds with a TTL.
type ttlHeld struct {
	e       *store.Entry
	alias   string
	version string    // the version the client holds
	expires time.Time // when the client drops it, unless heartbeated
}

// wireTTLs returns the TTL to send with each item, nil when none is TTL'd.
func (st *stream) wireTTLs(out []item) []time.Duration {
	var ttls []time.Duration
	var now time.Time
	for i, it := range out {
		if it.e.Lease == 0 {
			continue
		}
		if ttls == nil {
			ttls = make([]time.Duration, len(out))
			now = time.Now()
			if st.notice == nil {
				// Taken before the expiry, so an extension after it
				// is not missed.
				st.notice = st.s.cfg.Leases.Notice()
			}
		}
		ttls[i] = lease.WireTTL(st.s.cfg.Leases.Expiry(st.ctx, it.e), now)
	}
	return ttls
}

// sentTTLs records which of the items just sent the client holds with a
// TTL, and until when.
func (st *stream) sentTTLs(ts *typeState, out []item, ttls []time.Duration) {
	if ts.ttl == nil {
		ts.ttl, ts.beat = map[string]ttlHeld{}, map[string]bool{}
	}
	now := time.Now()
	for i, it := range out {
		k := it.key()
		delete(ts.beat, k) // this response carried a fresh TTL
		if ttls != nil && ttls[i] > 0 {
			ts.ttl[k] = ttlHeld{e: it.e, alias: it.alias, version: strconv.FormatInt(it.e.ModRevision, 10), expires: now.Add(ttls[i])}
		} else {
			delete(ts.ttl, k)
		}
	}
	st.pruneTTL(ts)
}

// pruneTTL drops from ts.ttl what the client no longer holds at the
// version it was sent with.
func (st *stream) pruneTTL(ts *typeState) {
	for n, h := range ts.ttl {
		if have, ok := ts.have[n]; !ok || have.version != h.version {
			delete(ts.ttl, n)
			delete(ts.beat, n)
		}
	}
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

// heartbeat sends the heartbeats due, per type, when no response of the
// type is outstanding (one outstanding response per type) and nothing else
// is to be sent for it.
func (st *stream) heartbeat() error {
	for _, t := range resource.All() {
		ts := st.types[t]
		if ts == nil || len(ts.beat) == 0 || ts.outstanding != "" || ts.needAll || ts.respond || len(ts.dirty) > 0 {
			continue
		}
		st.pruneTTL(ts)
		if len(ts.beat) == 0 {
			continue
		}
		if err := st.sendHeartbeat(ts); err != nil {
			return err
		}
	}
	return nil
}

// sendHeartbeat sends one type's heartbeat: each resource's name, version
// and new TTL, without its body.
func (st *stream) sendHeartbeat(ts *typeState) error {
	names := make([]string, 0, len(ts.beat))
	for n := range ts.beat {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]item, len(names))
	for i, n := range names {
		h := ts.ttl[n]
		out[i] = item{e: h.e, alias: h.alias}
	}
	ttls := st.wireTTLs(out)
	sysVersion := ts.sentVersion
	var key strings.Builder
	key.WriteString("DH\x00" + ts.t.Name + "\x00" + sysVersion)
	for i, it := range out {
		key.WriteString("\x00" + it.e.Scope + "/" + it.e.Name + "@" + strconv.FormatInt(it.e.ModRevision, 10) + "~" + it.alias + "~" + strconv.FormatInt(int64(ttls[i]), 10))
	}
	build := func() proto.Message {
		r := &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: sysVersion, TypeUrl: ts.t.URL, Resources: make([]*discoveryv3.Resource, len(out))}
		for i, it := range out {
			res := &discoveryv3.Resource{Name: it.e.Name, Version: strconv.FormatInt(it.e.ModRevision, 10), Ttl: durationpb.New(ttls[i])}
			if it.alias != "" {
				res.Aliases = []string{it.alias}
			}
			r.Resources[i] = res
		}
		return r
	}
	body, err := st.s.cache.Get(st.snap.Revision, key.String(), build)
	if err != nil {
		return status.Errorf(codes.Internal, "encode delta heartbeat: %v", err)
	}
	st.nonces++
	nonce := strconv.FormatUint(st.nonces, 10)
	w := wire.NewResponse(body, nonce)
	if err := st.gs.SendMsg(w); err != nil {
		return err
	}
	// Outstanding like any response; what the client holds is unchanged.
	ts.outstanding, ts.settled = nonce, false
	ts.inFlight = ts.inFlight[:0]
	now := time.Now()
	for i, n := range names {
		h := ts.ttl[n]
		h.expires = now.Add(ttls[i])
		ts.ttl[n] = h
	}
	clear(ts.beat)
	m := st.s.metrics
	m.heartbeats.WithLabelValues(ts.t.Name).Inc()
	m.responses.WithLabelValues(ts.t.Name).Inc()
	m.bytesSent.Add(float64(w.Size()))
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
