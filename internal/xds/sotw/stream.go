package sotw

import (
	"strconv"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// stream is one SotW stream: the core's stream state, and the SotW
// state of each type. It is owned by the stream's goroutine.
type stream struct {
	*xdsstream.Stream[TypeStatus]
	s     *Server
	types map[*resource.Type]*typeState
}

// typeState is a stream's protocol state for one resource type.
type typeState struct {
	t        *resource.Type
	wildcard bool
	// named: a request of the type on the stream set resource_names
	// ("*" or any name). Until then an empty list of a LDS/CDS-like type
	// is the legacy wildcard; after, it subscribes to nothing
	// (xds_protocol.rst, "How the client specifies what resources to
	// return").
	named bool
	names *xdsstream.NameSet // shared with the streams subscribed to the same names
	// asked is the list of names of the last request taken: the codec
	// gives the requests that name the same list one shared slice
	// (wire.Codec), so an ACK that repeats it is told by identity, with
	// no lookup of its names. Held, it cannot be collected and its memory
	// reused for another list.
	asked []string
	// sent is what the client holds, as far as the server knows: the
	// entries of the responses it sent (or that it presented on connect),
	// shared with the streams sent the same responses.
	sent xdsstream.Holding[*view.Entry]
	// rec: the version_info and nonce of the last response (Version is
	// the one presented, when nothing was sent), the last ACK and NACK.
	rec xdsstream.Record

	needAll   bool            // send everything subscribed
	forceSend bool            // answer even if nothing changed (a first request)
	dirty     map[string]bool // names that may have changed; nil after a flush of many (see reuse)
	// holdRemovals: CDS sent a make-before-break interim set keeping
	// removed clusters; the final set waits for LDS and RDS ACKs.
	holdRemovals bool
	resources    int
	told         xdsstream.Told // names told in resource_errors (reserr.go)
}

// Handle takes one request into the stream's state. Responses go out in
// Flush.
func (st *stream) Handle(t *resource.Type, r *discoveryv3.DiscoveryRequest) error {
	// Bounds first: nothing of an oversized request is kept.
	if err := st.CheckList(t, xdsstream.LimitNames, "resource_names", r.GetResourceNames()); err != nil {
		return err
	}
	r.ResourceNames = xdsstream.NormalNames(r.ResourceNames)
	ts := st.types[t]
	if ts == nil {
		return st.subscribe(t, r)
	}
	if r.GetResponseNonce() == "" && ts.rec.Nonce == "" {
		// The type's first request was answered with nothing (promise
		// 4), so the client has no nonce to give: this is its latest
		// request. Names it adds are ones it does not hold; starting
		// over would trust its version for them too.
		if err := st.takeNames(ts, r.GetResourceNames(), true); err != nil {
			return err
		}
		st.updateStatus(ts)
		return nil
	}
	if r.GetResponseNonce() != ts.rec.Nonce {
		// A response the client has not seen yet supersedes this request
		// (the protocol's stale nonce rule): ignore it. So is a request
		// with no nonce once a response was sent: the client has not
		// seen its first response yet (it changed its names meanwhile).
		// Its answer to that response carries its names then; taking
		// them now would resend at the same version what the responses
		// on their way carry.
		st.StaleNonce(t, r.GetResponseNonce())
		return nil
	}
	if d := r.GetErrorDetail(); d != nil {
		if v := r.GetVersionInfo(); v != "" {
			// A NACK's version_info is the last version the client
			// applied: its ACK of it may have been stale (a response
			// was on its way) and ignored, so this is where the
			// version a rejection is traced from is sure.
			ts.rec.Acked = v
		}
		st.Nack(t, &ts.rec, d.GetMessage())
		st.updateStatus(ts)
		// Promise 7: nothing more for this type until what the stream
		// would receive changes. Name changes in a NACK are taken; they
		// are answered with the next change.
		// A NACKed listener or route does not release a held cluster
		// removal: the client still routes by its old config, which may
		// use the cluster. An ACK of a later version does.
		return st.takeNames(ts, r.GetResourceNames(), false)
	}
	st.Ack(t, &ts.rec, r.GetVersionInfo())
	if err := st.takeNames(ts, r.GetResourceNames(), true); err != nil {
		return err
	}
	st.releaseHold()
	st.updateStatus(ts)
	return nil
}

// subscribe handles a type's first request on the stream.
func (st *stream) subscribe(t *resource.Type, r *discoveryv3.DiscoveryRequest) error {
	ts := &typeState{t: t}
	st.types[t] = ts
	names := r.GetResourceNames()
	if err := st.ChargeNames(t, "resource_names", xdsstream.NamesCost(names)); err != nil {
		return err
	}
	ts.named = len(names) > 0
	ts.wildcard = (t.Wildcard && !ts.named) || contains(names, "*")
	ts.names, ts.asked = st.s.names.Get(names), names
	presented := parseVersion(r.GetVersionInfo())
	if err := st.CatchUp(presented); err != nil {
		return err
	}
	snap := st.Snap
	// Promise 4: a new stream presenting version V gets nothing when what
	// it would receive is unchanged since V. Named requests only when the
	// clients are trusted to keep resources across streams.
	if presented >= 0 && (ts.wildcard || st.s.trustVersion) && !st.RolloutsChangedSince(presented) &&
		scope.UnchangedSince(snap, t, st.Chain, names, ts.wildcard, presented) {
		for _, e := range st.SendableEntries(scope.Entries(snap, t, st.Chain, names, ts.wildcard)) {
			ts.sent.Set(e.Name, e)
		}
		ts.rec.Version, ts.rec.Acked = r.GetVersionInfo(), r.GetVersionInfo()
		ts.resources = ts.sent.Len()
		st.s.m.noResend.Inc()
		st.updateStatus(ts)
		return nil
	}
	ts.needAll, ts.forceSend = true, true
	st.updateStatus(ts)
	return nil
}

// takeNames is setNames, once the names are found to cost no more than
// the stream may hold (MaxSubscribedBytes): else it returns the error
// that ends the stream and changes nothing.
func (st *stream) takeNames(ts *typeState, names []string, answer bool) error {
	if !sameList(names, ts.asked) {
		if err := st.ChargeNames(ts.t, "resource_names", xdsstream.NamesCost(names)); err != nil {
			return err
		}
	}
	st.setNames(ts, names, answer)
	return nil
}

// setNames applies a change of subscriptions; added names are marked to be
// sent (a change of names at the same version is answered with the newly
// asked resources).
func (st *stream) setNames(ts *typeState, names []string, answer bool) {
	if sameList(names, ts.asked) {
		return // taking the same names again changes nothing
	}
	ts.asked = names
	// The legacy wildcard holds only while every request of the type
	// left resource_names empty; once one named "*" or a resource, an
	// empty list is an unsubscription from everything.
	ts.named = ts.named || len(names) > 0
	wildcard := contains(names, "*") || (!ts.named && ts.t.Wildcard)
	if wildcard == ts.wildcard && ts.names.Same(names) {
		return
	}
	next := st.s.names.Get(names)
	ts.told.Keep(next.Has) // unsubscribed: asked again when subscribed again
	for _, n := range next.Sorted() {
		if !ts.names.Has(n) {
			ts.dirty = xdsstream.MarkName(ts.dirty, n)
		}
	}
	if !wildcard {
		var drop []string
		ts.sent.Each(func(n string, _ *view.Entry) {
			if !next.Has(n) {
				drop = append(drop, n)
			}
		})
		for _, n := range drop {
			ts.sent.Drop(n) // unsubscribed: the client drops it
		}
	}
	if wildcard && !ts.wildcard {
		ts.needAll = true
	}
	ts.wildcard, ts.names = wildcard, next
	if answer && ts.t.Wildcard {
		// Full-state types answer a subscription change with the whole
		// set: the client learns at once what does not exist, and a
		// set that shrank (leaving "*", or unsubscribing everything
		// with an empty list) replaces what it holds.
		ts.needAll, ts.forceSend = true, true
	}
}

// Changed marks the subscribed names a change may concern.
func (st *stream) Changed(c view.EntryChange) {
	ts := st.types[c.Type]
	if ts != nil && (ts.wildcard || ts.names.Has(c.Name)) {
		ts.dirty = xdsstream.MarkName(ts.dirty, c.Name)
		st.Touch(&ts.rec)
	}
}

// Flush sends what changed, type by type in make-before-break order: CDS,
// EDS, LDS, RDS, SRDS, VHDS, then the rest (promise 6); then the
// heartbeats due.
func (st *stream) Flush() error {
	for _, t := range resource.All() {
		ts := st.types[t]
		if ts == nil || (!ts.needAll && len(ts.dirty) == 0) {
			continue
		}
		var err error
		if t.Wildcard {
			err = st.flushFullState(ts)
		} else {
			err = st.flushNamed(ts)
		}
		if err != nil {
			return err
		}
	}
	return st.heartbeats()
}

// flushFullState sends the whole subscribed set of a LDS/CDS-like type when
// any of it changed.
func (st *stream) flushFullState(ts *typeState) error {
	names := ts.names.Sorted()
	visible := scope.Entries(st.Snap, ts.t, st.Chain, names, ts.wildcard)
	errs := st.absentFull(ts, visible)
	entries := st.SendableEntries(visible)
	force := ts.forceSend
	ts.needAll, ts.forceSend = false, false
	ts.dirty = xdsstream.ReuseNames(ts.dirty)
	if !force && len(errs) == 0 && sameEntries(entries, &ts.sent) {
		ts.rec.Unchanged()
		return nil
	}
	version := version(st.Snap.Revision)
	if ts.t == resource.Cluster && st.Fixed == nil {
		var removed []*view.Entry
		now := make(map[string]bool, len(entries))
		for _, e := range entries {
			now[e.Name] = true
		}
		ts.sent.Each(func(_ string, e *view.Entry) {
			if !now[e.Name] {
				removed = append(removed, e)
			}
		})
		if len(removed) > 0 && st.referrersPending() {
			// Make before break: keep the removed clusters until the
			// listeners and routes that dropped them are ACKed. The
			// interim set carries the previous version: a client that
			// reconnects holding it is sent the final set.
			entries = append(entries, removed...)
			scope.SortEntries(entries)
			version = ts.rec.Version
			ts.holdRemovals = true
			st.s.m.mbbHolds.Inc()
			return st.send(ts, entries, nil, version, false) // errors go with the final set
		}
		ts.holdRemovals = false
	}
	return st.send(ts, entries, errs, version, ts.wildcard)
}

// referrersPending reports whether LDS or RDS have updates to send or
// responses not yet ACKed (a NACKed one counts as not ACKed: promise 6
// removes clusters only after the referrers were ACKed).
func (st *stream) referrersPending() bool {
	for _, t := range []*resource.Type{resource.Listener, resource.Route} {
		ts := st.types[t]
		if ts == nil {
			continue
		}
		if ts.needAll || len(ts.dirty) > 0 {
			return true
		}
		if ts.rec.Nonce != "" && ts.rec.Acked != ts.rec.Version {
			return true
		}
	}
	return false
}

// releaseHold sends the final CDS set once its referrers are settled.
func (st *stream) releaseHold() {
	cds := st.types[resource.Cluster]
	if cds != nil && cds.holdRemovals && !st.referrersPending() {
		cds.needAll = true
	}
}

// flushNamed sends the subscribed resources of an EDS/RDS-like type that
// changed. SotW clients keep the last value of a requested resource a
// response omits, so only the changed ones go out.
func (st *stream) flushNamed(ts *typeState) error {
	var candidates []string
	isDirty := !ts.needAll // candidates are dirty's keys: no repeats
	if ts.needAll {
		if ts.wildcard {
			for _, e := range scope.Entries(st.Snap, ts.t, st.Chain, nil, true) {
				candidates = append(candidates, e.Name)
			}
		}
		candidates = append(candidates, ts.names.Sorted()...)
	} else {
		candidates = xdsstream.SortedNames(ts.dirty)
	}
	force := ts.forceSend
	ts.needAll, ts.forceSend = false, false
	ts.dirty = xdsstream.ReuseNames(ts.dirty)
	var out []*view.Entry
	var errs []xdsstream.ResourceErr
	var seen map[string]bool // a wildcard's names may repeat the subscribed ones
	if !isDirty {
		seen = make(map[string]bool, len(candidates))
	}
	for _, n := range candidates {
		if seen != nil {
			if seen[n] {
				continue
			}
			seen[n] = true
		}
		v := scope.Visible(st.Snap, ts.t, st.Chain, n)
		e := st.Sendable(v)
		if e == nil {
			ts.sent.Drop(n)
			errs = ts.absentNamed(errs, n, v)
			continue
		}
		ts.told.Forget(n)
		if old, _ := ts.sent.Get(n); !force && old != nil && old.Scope == e.Scope && old.ModRevision == e.ModRevision {
			continue
		}
		out = append(out, e)
	}
	if len(out) == 0 && len(errs) == 0 && !force {
		ts.rec.Unchanged()
		return nil
	}
	scope.SortEntries(out)
	return st.send(ts, out, errs, version(st.Snap.Revision), false)
}

// send encodes (or takes from the shared cache) and sends one response,
// carrying errs in resource_errors (reserr.go).
// For a client that reads TTLs, TTL'd resources go wrapped in a
// discovery.v3.Resource with the time their lease has left (promise 8).
func (st *stream) send(ts *typeState, entries []*view.Entry, errs []xdsstream.ResourceErr, ver string, shareable bool) error {
	ttls := st.WireTTLs(len(entries), func(i int) *view.Entry { return entries[i] })
	build := func() proto.Message {
		r := &discoveryv3.DiscoveryResponse{VersionInfo: ver, TypeUrl: ts.t.URL, Resources: make([]*anypb.Any, 0, len(entries)),
			ControlPlane: st.s.core.ControlPlane, ResourceErrors: xdsstream.ResourceErrors(ts.t, errs, st.s.core.Config.Authorities)}
		for i, e := range entries {
			if ttls != nil && ttls[i] > 0 {
				r.Resources = append(r.Resources, wrapTTL(e, ver, ttls[i], true))
				continue
			}
			r.Resources = append(r.Resources, e.Body)
		}
		return r
	}
	key := "" // a body of an older version is this stream's own
	if ver == version(st.Snap.Revision) {
		var buf [256]byte // on the stack while the key fits
		b := buf[:0]
		if shareable && len(errs) == 0 {
			b = append(b, "W\x00"...)
			b = append(b, ts.t.Name...)
			b = append(b, 0)
			b = append(b, st.Chain...)
			b = append(b, 0)
			b = append(b, ver...)
			if st.KeysWithheld() {
				b = append(b, "\x00k"...) // without the resources carrying keys
			}
		} else {
			b = append(b, "N\x00"...)
			b = append(b, ts.t.Name...)
			b = append(b, 0)
			b = append(b, ver...)
			for _, e := range entries {
				b = xdsstream.AppendEntryKey(b, e)
			}
			b = xdsstream.AppendErrorsKey(b, errs)
		}
		key = xdsstream.TTLKey(string(b), ttls)
	}
	if _, err := st.Send(ts.t, &ts.rec, ver, key, build, len(entries)); err != nil {
		return err
	}
	ts.told.Sent(errs)
	st.CountErrors(ts.t, errs)
	if ts.t.Wildcard {
		// A full-state response replaces what the client holds.
		ts.sent.Replace(&st.s.sent, st.Snap.Revision, key, len(entries), sentOf(entries))
	} else {
		ts.sent.Sent(&st.s.sent, st.Snap.Revision, key, len(entries), sentOf(entries), nil)
	}
	st.RecordTTLs(ts.t, len(entries), func(i int) xdsstream.Item { return xdsstream.Item{Entry: entries[i]} }, ttls)
	ts.resources = ts.sent.Len()
	st.updateStatus(ts)
	return nil
}

func (st *stream) updateStatus(ts *typeState) {
	st.SetStatus(ts.t, TypeStatus{
		VersionSent:  ts.rec.Version,
		VersionAcked: ts.rec.Acked,
		Nonce:        ts.rec.Nonce,
		NackVersion:  ts.rec.Nacked,
		LastNack:     ts.rec.NackMsg,
		Wildcard:     ts.wildcard,
		Subscribed:   ts.names.Len(),
		Resources:    ts.resources,
	})
}

// sameList reports whether a and b are the same list: the same slice,
// not only the same names.
func sameList(a, b []string) bool {
	return len(a) > 0 && len(a) == len(b) && &a[0] == &b[0]
}

// sentOf is what the client holds once sent entries: each by its name.
func sentOf(entries []*view.Entry) func(i int) (string, *view.Entry) {
	return func(i int) (string, *view.Entry) { return entries[i].Name, entries[i] }
}

func sameEntries(entries []*view.Entry, sent *xdsstream.Holding[*view.Entry]) bool {
	if len(entries) != sent.Len() {
		return false
	}
	for _, e := range entries {
		old, _ := sent.Get(e.Name)
		if old == nil || old.Scope != e.Scope || old.ModRevision != e.ModRevision {
			return false
		}
	}
	return true
}

func version(rev int64) string { return strconv.FormatInt(rev, 10) }

// parseVersion returns the revision a version_info names, -1 for an empty
// or foreign one.
func parseVersion(v string) int64 {
	if v == "" {
		return -1
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return -1
	}
	return n
}
