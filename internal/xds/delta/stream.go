package delta

import (
	"slices"
	"strconv"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// stream is one delta stream: the core's stream state, and the delta
// state of each type. It is owned by the stream's goroutine.
type stream struct {
	*xdsstream.Stream[TypeStatus]
	s     *Server
	types map[*resource.Type]*typeState
	// scratch is the names of a push's flush, kept for the next one (at
	// most 8: a large flush's are let go).
	scratch []string
}

// typeState is a stream's delta state for one resource type.
type typeState struct {
	t        *resource.Type
	wildcard bool
	// names: explicit subscriptions, their bulk shared with the streams
	// subscribed to the same names.
	names xdsstream.Subscribed
	have  xdsstream.Holding[held] // what the client holds, as far as the server knows
	// nacked: held names last sent in a response the client NACKed (not
	// ACKed, for the status); nil when none.
	nacked map[string]bool
	// toldAbsent: explicitly subscribed names already listed in
	// removed_resources because they do not exist.
	toldAbsent map[string]bool
	// force: (re)subscribed names, sent even if held at the version.
	force map[string]bool
	// dirty: names that may have changed. toldAbsent and force are nil
	// while empty, dirty is after a flush of many (see reuse): an idle
	// stream keeps no large map for them.
	dirty   map[string]bool
	needAll bool // evaluate every subscribed or held name
	// globs: how many of names are glob collections (glob.go);
	// globAsked: the globs subscribed since the last flush, true when
	// their members are to be sent even if held.
	globs     int
	globAsked map[string]bool
	respond   bool // send a response even if empty (a first request)

	// rec: the system_version_info and nonce of the last response, the
	// last ACK and NACK.
	rec         xdsstream.Record
	outstanding bool     // the last response awaits its ACK or NACK
	inFlight    []string // names of resources in the outstanding response
	settled     bool     // the last response was ACKed (or none was sent)
	holdRemoval bool     // CDS/EDS removals wait for LDS/RDS ACKs (make before break)
}

// Handle takes one request into the stream's state. Responses go out in
// Flush.
func (st *stream) Handle(t *resource.Type, r *discoveryv3.DeltaDiscoveryRequest) error {
	if err := st.checkBounds(t, r); err != nil {
		return err
	}
	r.ResourceNamesSubscribe = xdsstream.NormalNames(r.ResourceNamesSubscribe)
	r.ResourceNamesUnsubscribe = xdsstream.NormalNames(r.ResourceNamesUnsubscribe)
	r.InitialResourceVersions = xdsstream.NormalVersions(r.InitialResourceVersions)
	ts := st.types[t]
	first := ts == nil
	if first {
		ts = &typeState{t: t, settled: true, needAll: true}
		st.types[t] = ts
		// Legacy wildcard: a first request of a LDS/CDS-like type that
		// names nothing. xds_protocol.rst ("How the client specifies
		// what resources to return") makes it any request before a
		// non-empty resource_names_subscribe, but its reconnect rule
		// asks "no resources in both resource_names_subscribe and
		// resource_names_unsubscribe": a first request that only
		// unsubscribes is taken as no wildcard, by the stricter rule.
		// It is decided here only: later requests, empty or not, never
		// start the legacy wildcard.
		ts.wildcard = t.Wildcard && len(r.GetResourceNamesSubscribe()) == 0 && len(r.GetResourceNamesUnsubscribe()) == 0
		var newest int64
		for n, v := range r.GetInitialResourceVersions() {
			ts.have.Set(n, held{rev: parseRev(v)})
			if rev, err := strconv.ParseInt(v, 10, 64); err == nil && rev > newest {
				newest = rev
			}
		}
		if ts.have.Len() == 0 {
			ts.respond = true // the client waits for a first answer
		}
		// Promise 3: never answer with older than what the client holds.
		if err := st.CatchUp(newest); err != nil {
			return err
		}
	}
	if nonce := r.GetResponseNonce(); nonce != "" {
		if !ts.outstanding || nonce != ts.rec.Nonce {
			st.StaleNonce(t, nonce)
		} else if d := r.GetErrorDetail(); d != nil {
			st.Nack(t, &ts.rec, d.GetMessage())
			for _, n := range ts.inFlight {
				if ts.have.Has(n) {
					ts.nacked = xdsstream.MarkName(ts.nacked, n)
				}
			}
			ts.outstanding, ts.inFlight = false, nil
			// Nothing is resent: what the client was sent counts as held,
			// so only a later change of a resource sends it again.
		} else {
			st.Ack(t, &ts.rec, ts.rec.Version)
			for _, n := range ts.inFlight {
				delete(ts.nacked, n)
			}
			if len(ts.nacked) == 0 {
				ts.nacked = nil
			}
			ts.outstanding, ts.inFlight, ts.settled = false, nil, true
			st.releaseHold()
		}
	}
	if len(r.GetResourceNamesSubscribe()) > 0 || len(r.GetResourceNamesUnsubscribe()) > 0 {
		if err := st.subscribe(ts, r, first); err != nil {
			return err
		}
		ts.globsChanged(r, first)
	}
	st.updateStatus(ts)
	return nil
}

// Changed marks the subscribed or held names a change may concern.
func (st *stream) Changed(c view.EntryChange) {
	ts := st.types[c.Type]
	if ts == nil {
		return
	}
	if ts.wildcard || ts.names.Has(c.Name) || ts.have.Has(c.Name) || ts.inGlob(c.Name) {
		ts.dirty = xdsstream.MarkName(ts.dirty, c.Name)
		st.Touch(&ts.rec)
	}
	if c.Type == resource.VirtualHost {
		markAliases(ts, c.Name)
		if len(ts.dirty) > 0 {
			st.Touch(&ts.rec)
		}
	}
}

// Flush sends what changed, type by type in make-before-break order, at
// most one outstanding response per type; then the heartbeats due.
func (st *stream) Flush() error {
	for _, t := range resource.All() {
		ts := st.types[t]
		if ts == nil || ts.outstanding || (!ts.needAll && !ts.respond && len(ts.dirty) == 0) {
			continue
		}
		if err := st.flushType(ts); err != nil {
			return err
		}
	}
	// Referrers may settle without an ACK, when their change sends this
	// client nothing (a default listener its group overrides): held
	// cluster removals go then, or they would wait for an unrelated ACK.
	st.releaseHold()
	for _, t := range []*resource.Type{resource.Cluster, resource.Endpoint} {
		if ts := st.types[t]; ts != nil && ts.needAll && !ts.outstanding {
			if err := st.flushType(ts); err != nil {
				return err
			}
		}
	}
	return st.heartbeats()
}

// flushType sends what changed of one type: every candidate name (see
// candidates) is evaluated, the resources the client lacks or holds at
// another version go out, and the names it may no longer have are
// removed. A response goes out if there is anything to send, or if the
// client waits for a first answer.
func (st *stream) flushType(ts *typeState) error {
	shareKey := st.freshKey(ts)
	candidates, emptyGlobs := st.expandGlobs(ts, st.candidates(ts))
	respond := ts.respond
	ts.needAll, ts.respond = false, false
	ts.dirty = xdsstream.ReuseNames(ts.dirty)

	holdRemovals := breaks(ts.t) && st.Fixed == nil && st.referrersPending()
	var out []item
	removed := emptyGlobs
	var aliases *aliasIndex // built or fetched on the first alias
	for _, n := range candidates {
		if !ts.wildcard && !ts.names.Has(n) && !ts.inGlob(n) {
			ts.have.Drop(n) // held but not subscribed: the client drops it
			continue
		}
		e, alias, source, err := st.lookup(ts, n, &aliases)
		if err != nil {
			return err
		}
		if e == nil {
			if ts.absent(n, holdRemovals) {
				removed = append(removed, n)
			}
			continue
		}
		if st.current(ts, n, e, alias, source) {
			continue
		}
		delete(ts.force, n)
		delete(ts.toldAbsent, n)
		out = append(out, item{Item: xdsstream.Item{Entry: e, Alias: alias}, source: source})
	}
	ts.settle(holdRemovals)
	if shareKey != "" && st.KeysWithheld() {
		shareKey += "\x00k" // without the resources carrying keys
	}
	if len(out) == 0 && len(removed) == 0 && !respond {
		ts.rec.Unchanged()
		st.updateStatus(ts)
		return nil
	}
	return st.send(ts, out, removed, shareKey)
}

// freshKey is the key of a flush's response in the shared body cache
// when a fresh wildcard subscription gets every visible resource: the
// same response for every stream of the group at this revision, shared
// under a short key. "" for any other flush, whose key send builds from
// the content.
func (st *stream) freshKey(ts *typeState) string {
	if ts.needAll && ts.wildcard && ts.names.Len() == 0 && ts.have.Len() == 0 && len(ts.dirty) == 0 {
		return "DA\x00" + ts.t.Name + "\x00" + string(st.Chain) + "\x00" + strconv.FormatInt(st.Snap.Revision, 10)
	}
	return ""
}

// candidates returns, sorted, the names a flush of ts evaluates: when it
// needs all, every name subscribed, held, visible to a wildcard or dirty;
// for a push, the dirty names, in a slice the stream keeps (no map,
// nothing allocated for a push of a few resources).
func (st *stream) candidates(ts *typeState) []string {
	if ts.needAll {
		return st.allNames(ts)
	}
	candidates := st.scratch[:0]
	for n := range ts.dirty {
		candidates = append(candidates, n)
	}
	slices.Sort(candidates)
	st.scratch = nil
	if cap(candidates) <= 8 {
		st.scratch = candidates[:0]
	}
	return candidates
}

// allNames returns, sorted, every name of ts subscribed, held, visible
// to its wildcard subscription or dirty.
func (st *stream) allNames(ts *typeState) []string {
	all := map[string]bool{}
	for n := range ts.names.All() {
		all[n] = true
	}
	ts.have.Each(func(n string, _ held) { all[n] = true })
	if ts.wildcard {
		for _, e := range scope.Entries(st.Snap, ts.t, st.Chain, nil, true) {
			all[e.Name] = true
		}
	}
	for n := range ts.dirty {
		all[n] = true
	}
	return xdsstream.SortedNames(all)
}

// lookup returns the entry the client may be sent by name n of ts, nil
// if none; for a VHDS alias "<route configuration>/<host>", the virtual
// host it resolves to and alias n. source is what held.scope records of
// it: the entry's scope, or scope/name for an alias. aliases is the
// group's alias index, fetched on the flush's first alias.
func (st *stream) lookup(ts *typeState, n string, aliases **aliasIndex) (e *view.Entry, alias, source string, err error) {
	if e = st.Sendable(scope.Visible(st.Snap, ts.t, st.Chain, n)); e != nil {
		return e, "", e.Scope, nil
	}
	if ts.t != resource.VirtualHost {
		return nil, "", "", nil
	}
	if *aliases == nil {
		if *aliases, err = st.s.aliases.get(st.Snap, st.Chain); err != nil {
			return nil, "", "", err
		}
	}
	if e = st.Sendable((*aliases).resolve(n)); e != nil {
		return e, n, e.Scope + "/" + e.Name, nil
	}
	return nil, "", "", nil
}

// absent takes name n of ts, which the client may not be sent (deleted,
// or never there), and reports whether the response removes it: a held
// name, unless holdRemovals makes its removal wait for the referrers
// (make before break), and a name asked for that the client was not told
// is absent yet.
func (ts *typeState) absent(n string, holdRemovals bool) (remove bool) {
	isHeld := ts.have.Has(n)
	switch {
	case isHeld && holdRemovals:
		ts.holdRemoval = true // make before break: later
	case isHeld:
		remove = true
		ts.have.Drop(n)
	case ts.names.Has(n) && !ts.toldAbsent[n]:
		remove = true // asked for, does not exist
		ts.toldAbsent = xdsstream.MarkName(ts.toldAbsent, n)
	}
	delete(ts.force, n)
	return remove
}

// current reports whether the client holds entry e, by name n of ts, at
// its version, asked by alias with source (see lookup): then it is not
// sent again, unless forced.
func (st *stream) current(ts *typeState, n string, e *view.Entry, alias, source string) bool {
	h, isHeld := ts.have.Get(n)
	// A version presented in initial_resource_versions names a
	// mod_revision, not a key: it is trusted unless another resource
	// the client may have held shares it (an alias that may have
	// resolved elsewhere, or a group override deleted since).
	unconfirmed := h.scope == ""
	ambiguous := unconfirmed && (alias != "" ||
		scope.ShadowChangedSince(st.Snap, ts.t, st.Chain, e.Scope, e.ModRevision))
	if !isHeld || h.rev != e.ModRevision || (!unconfirmed && h.scope != source) || ambiguous || ts.force[n] {
		return false
	}
	if unconfirmed {
		st.s.m.notResent.Inc()
		h.scope = source
		ts.have.Set(n, h)
	}
	return true
}

// settle ends a flush of ts: the force and toldAbsent sets let go when
// empty, and removals no longer held once holdRemovals is false.
func (ts *typeState) settle(holdRemovals bool) {
	if len(ts.force) == 0 {
		ts.force = nil
	}
	if len(ts.toldAbsent) == 0 {
		ts.toldAbsent = nil
	}
	if !holdRemovals && breaks(ts.t) {
		ts.holdRemoval = false
	}
}

// referrersPending reports whether LDS or RDS have updates to send or a
// response not yet ACKed (promise 6: clusters go after their referrers
// are ACKed).
func (st *stream) referrersPending() bool {
	for _, t := range []*resource.Type{resource.Listener, resource.Route} {
		ts := st.types[t]
		if ts == nil {
			continue
		}
		if ts.needAll || ts.respond || len(ts.dirty) > 0 || !ts.settled {
			return true
		}
	}
	return false
}

// breaks reports whether removals of type t wait for the listeners and
// routes that dropped them (promise 6: clusters and their endpoints).
func breaks(t *resource.Type) bool { return t == resource.Cluster || t == resource.Endpoint }

// releaseHold marks held cluster and endpoint removals for sending once
// listeners and routes are settled.
func (st *stream) releaseHold() {
	if st.referrersPending() {
		return
	}
	for _, t := range []*resource.Type{resource.Cluster, resource.Endpoint} {
		if ts := st.types[t]; ts != nil && ts.holdRemoval {
			ts.needAll = true
		}
	}
}

// item is one resource to send: an entry, the VHDS alias it was asked
// by, if any, and what held.scope records of it.
type item struct {
	xdsstream.Item
	source string // the scope, or scope/name for an alias
}

// send sends one response. shareKey, if set, names its content for the
// shared body cache; otherwise the key is built from the content.
func (st *stream) send(ts *typeState, out []item, removed []string, shareKey string) error {
	sysVersion := strconv.FormatInt(st.Snap.Revision, 10)
	ttls := st.WireTTLs(len(out), func(i int) *view.Entry { return out[i].Entry })
	errs := st.resourceErrors(ts, removed) // reserr.go
	if shareKey == "" || len(errs) > 0 {
		var buf [256]byte // on the stack while the key fits
		key := append(buf[:0], "D\x00"...)
		key = append(key, ts.t.Name...)
		key = append(key, 0)
		key = append(key, sysVersion...)
		for _, it := range out {
			key = xdsstream.AppendEntryKey(key, it.Entry)
			key = append(key, '~')
			key = append(key, it.Alias...)
		}
		key = append(key, "\x00-"...)
		for _, n := range removed {
			key = append(key, 0)
			key = append(key, n...)
		}
		key = xdsstream.AppendErrorsKey(key, errs)
		shareKey = string(key)
	}
	shareKey = xdsstream.TTLKey(shareKey, ttls)
	build := func() proto.Message {
		r := &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: sysVersion, TypeUrl: ts.t.URL, RemovedResources: removed, ControlPlane: st.s.core.ControlPlane,
			Resources: make([]*discoveryv3.Resource, 0, len(out)), ResourceErrors: xdsstream.ResourceErrors(ts.t, errs, st.s.core.Config.Authorities)}
		for i, it := range out {
			var ttl time.Duration
			if ttls != nil {
				ttl = ttls[i]
			}
			r.Resources = append(r.Resources, wireResource(it.Item, ttl, true))
		}
		return r
	}
	if _, err := st.Send(ts.t, &ts.rec, sysVersion, shareKey, build, len(out)); err != nil {
		return err
	}
	ts.outstanding, ts.settled = true, false
	ts.inFlight = ts.inFlight[:0]
	for _, it := range out {
		ts.inFlight = append(ts.inFlight, it.Key())
	}
	ts.have.Sent(&st.s.held, st.Snap.Revision, shareKey, len(out), heldOf(out), removed)
	st.RecordTTLs(ts.t, len(out), func(i int) xdsstream.Item { return out[i].Item }, ttls)
	st.s.m.removalsSent.WithLabelValues(ts.t.Name).Add(float64(len(removed)))
	st.CountErrors(ts.t, errs)
	st.updateStatus(ts)
	return nil
}

// maxStatusResources bounds the per-resource lines of a type's status.
const maxStatusResources = 100

func (st *stream) updateStatus(ts *typeState) {
	s := TypeStatus{
		SystemVersionSent:  ts.rec.Version,
		SystemVersionAcked: ts.rec.Acked,
		NackVersion:        ts.rec.Nacked,
		LastNack:           ts.rec.NackMsg,
		Wildcard:           ts.wildcard,
		Subscribed:         ts.names.Len(),
		Held:               ts.have.Len(),
	}
	if ts.outstanding {
		s.Outstanding = ts.rec.Nonce
	}
	if ts.have.Len() <= maxStatusResources {
		var inFlight map[string]bool
		if ts.outstanding {
			inFlight = make(map[string]bool, len(ts.inFlight))
			for _, n := range ts.inFlight {
				inFlight[n] = true
			}
		}
		s.Resources = make(map[string]ResourceStatus, ts.have.Len())
		ts.have.Each(func(n string, h held) {
			var rs ResourceStatus
			if h.rev > 0 {
				rs.VersionSent = strconv.FormatInt(h.rev, 10)
			}
			if !inFlight[n] && !ts.nacked[n] {
				rs.VersionAcked = rs.VersionSent
			}
			s.Resources[n] = rs
		})
	}
	st.SetStatus(ts.t, s)
}
