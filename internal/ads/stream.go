package ads

import (
	"context"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/lease"
	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/scope"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/wire"
	"github.com/legation-io/legation/internal/xdsstream"
)

// stream is one SotW stream. Its state is owned by the goroutine running
// serve; only the status copy is shared (under statusMu).
type stream struct {
	s     *Server
	id    uint64
	gs    Stream
	fixed *resource.Type // the type of a per-type service; nil on ADS
	ctx   context.Context
	log   *slog.Logger

	node   *corev3.Node
	group  string
	snap   *store.Snapshot
	types  map[*resource.Type]*typeState
	nonces uint64
	// ttlOn: the client advertised TTL support and reading TTLs in SotW
	// (promise 8), and the server tracks leases. Otherwise TTL'd resources
	// go out plain and are never heartbeated.
	ttlOn bool
	// notice is the lease-extension notice the stream waits on, from its
	// first TTL'd resource on; nil before.
	notice   *lease.Notice
	ttlCount int // the stream's share of metrics.ttlResources

	statusMu sync.Mutex // guards stat
	stat     StreamStatus
}

// typeState is a stream's protocol state for one resource type.
type typeState struct {
	t        *resource.Type
	wildcard bool
	names    map[string]bool
	// sent is what the client holds, as far as the server knows: the
	// entries of the responses it sent (or that it presented on connect).
	sent    map[string]*store.Entry
	version string // version_info of the last response, or presented
	nonce   string // nonce of the last response
	acked   string // version_info of the last ACK
	nacked  string // version the client NACKed, "" when none pending
	nackMsg string

	needAll   bool            // send everything subscribed
	forceSend bool            // answer even if nothing changed (a first request)
	dirty     map[string]bool // names that may have changed
	// holdRemovals: CDS sent a make-before-break interim set keeping
	// removed clusters; the final set waits for LDS and RDS ACKs.
	holdRemovals bool
	resources    int
	// ttl: the resources the client holds with a TTL (only when ttlOn),
	// pruned lazily (an entry no longer in sent is dropped when seen).
	ttl map[string]ttlHeld
	// beat: TTL'd resources whose lease was extended, to heartbeat once
	// the client has ACKed the type's latest response.
	beat map[string]bool
}

func (s *Server) serve(gs Stream, fixed *resource.Type) error {
	if s.cfg.Source.Snapshot() == nil {
		return status.Error(codes.Unavailable, "not ready: the view has not loaded etcd's state yet")
	}
	ctx := gs.Context()
	st := &stream{
		s: s, id: s.nextID.Add(1), gs: gs, fixed: fixed, ctx: ctx,
		types: map[*resource.Type]*typeState{},
	}
	proto := "ads"
	if fixed != nil {
		proto = fixed.Name
	}
	st.log = s.cfg.Logger.With("stream", st.id, "protocol", "sotw-"+proto)
	st.stat = StreamStatus{ID: st.id, Protocol: "sotw-" + proto, ConnectedAt: time.Now().UTC()}
	defer s.streams.Add(st.id, st)()
	defer func() { s.metrics.ttlResources.Sub(float64(st.ttlCount)) }()

	// One receive goroutine feeds this loop, the only sender.
	reqc, errc := xdsstream.Receive[discoveryv3.DiscoveryRequest](ctx, gs.RecvMsg)

	for {
		var wake, extended <-chan struct{}
		if st.snap != nil {
			wake = st.snap.Done()
		}
		if st.notice != nil {
			extended = st.notice.Done()
		}
		select {
		case r := <-reqc:
			if err := st.handle(r); err != nil {
				return err
			}
		drain: // answer the latest request: take all that are queued first
			for {
				select {
				case r := <-reqc:
					if err := st.handle(r); err != nil {
						return err
					}
				default:
					break drain
				}
			}
		case <-wake:
			st.advance()
		case <-extended:
			st.leasesExtended()
		case err := <-errc:
			return xdsstream.EndErr(err)
		case <-ctx.Done():
			return nil
		}
		if err := st.flush(); err != nil {
			return err
		}
	}
}

// handle takes one request into the stream's state. Responses go out in
// flush.
func (st *stream) handle(r *discoveryv3.DiscoveryRequest) error {
	t, err := st.typeOf(r)
	if err != nil {
		st.s.metrics.badRequests.Inc()
		return err
	}
	if st.node == nil {
		st.node = r.GetNode()
		if st.node == nil {
			st.node = &corev3.Node{}
		}
		st.group = st.s.cfg.GroupBy(st.node)
		_, wrap := lease.Features(st.node)
		st.ttlOn = wrap && st.s.cfg.Leases != nil
		st.log = st.log.With("node", st.node.GetId(), "group", st.group)
		st.statusMu.Lock()
		st.stat.NodeID, st.stat.Group = st.node.GetId(), st.group
		st.statusMu.Unlock()
	}
	st.advance()
	ts := st.types[t]
	if ts == nil || (r.GetResponseNonce() == "" && ts.nonce != "") {
		return st.subscribe(t, r)
	}
	if r.GetResponseNonce() == "" {
		// The type's first request was answered with nothing (promise
		// 4), so the client has no nonce to give: this is its latest
		// request. Names it adds are ones it does not hold; starting
		// over would trust its version for them too.
		st.setNames(ts, r.GetResourceNames(), true)
		st.updateStatus(ts)
		return nil
	}
	if r.GetResponseNonce() != ts.nonce {
		// A response the client has not seen yet supersedes this request
		// (the protocol's stale nonce rule): ignore it.
		st.s.metrics.staleNonces.Inc()
		st.log.Debug("ignoring a request with a stale nonce", "type", t.Name, "nonce", r.GetResponseNonce(), "want", ts.nonce)
		return nil
	}
	if d := r.GetErrorDetail(); d != nil {
		if ts.nacked != ts.version {
			st.s.metrics.nacks.WithLabelValues(t.Name).Inc()
			st.log.Warn("client rejected a response (NACK)", "type", t.Name, "version", ts.version, "error", d.GetMessage())
		}
		ts.nacked, ts.nackMsg = ts.version, d.GetMessage()
		st.updateStatus(ts)
		// Promise 7: nothing more for this type until what the stream
		// would receive changes. Name changes in a NACK are taken; they
		// are answered with the next change.
		// A NACKed listener or route does not release a held cluster
		// removal: the client still routes by its old config, which may
		// use the cluster. An ACK of a later version does.
		st.setNames(ts, r.GetResourceNames(), false)
		return nil
	}
	ts.acked = r.GetVersionInfo()
	if ts.acked == ts.version {
		ts.nacked, ts.nackMsg = "", ""
	}
	st.setNames(ts, r.GetResourceNames(), true)
	st.releaseHold()
	st.updateStatus(ts)
	return nil
}

func (st *stream) typeOf(r *discoveryv3.DiscoveryRequest) (*resource.Type, error) {
	u := r.GetTypeUrl()
	if st.fixed != nil {
		if u != "" && u != st.fixed.URL {
			return nil, status.Errorf(codes.InvalidArgument, "type_url %q on the %s service, which serves %s", u, st.fixed.Name, st.fixed.URL)
		}
		return st.fixed, nil
	}
	if u == "" {
		return nil, status.Error(codes.InvalidArgument, "a request on ADS needs a type_url")
	}
	t, ok := resource.ByURL(u)
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "unknown type_url %q", u)
	}
	return t, nil
}

// subscribe handles a type's first request on the stream (or a request
// without a nonce, which starts the type over).
func (st *stream) subscribe(t *resource.Type, r *discoveryv3.DiscoveryRequest) error {
	ts := &typeState{t: t, sent: map[string]*store.Entry{}, dirty: map[string]bool{}}
	st.types[t] = ts
	names := r.GetResourceNames()
	ts.wildcard = (t.Wildcard && len(names) == 0) || contains(names, "*")
	ts.names = nameSet(names)
	snap, presented, err := st.s.catchUp(st.ctx, r.GetVersionInfo())
	if err != nil {
		return err
	}
	if snap.Revision > st.snap.Revision {
		// catchUp waited: take the changes made meanwhile, following
		// every snapshot so that none of other types' changes is lost.
		st.advance()
	}
	snap = st.snap
	// Promise 4: a new stream presenting version V gets nothing when what
	// it would receive is unchanged since V. Named requests only when the
	// clients are trusted to keep resources across streams.
	if presented >= 0 && (ts.wildcard || st.s.cfg.TrustVersion) &&
		scope.UnchangedSince(snap, t, st.group, names, ts.wildcard, presented) {
		for _, e := range scope.Entries(snap, t, st.group, names, ts.wildcard) {
			ts.sent[e.Name] = e
		}
		ts.version, ts.acked = r.GetVersionInfo(), r.GetVersionInfo()
		ts.resources = len(ts.sent)
		st.s.metrics.noResend.Inc()
		st.updateStatus(ts)
		return nil
	}
	ts.needAll, ts.forceSend = true, true
	st.updateStatus(ts)
	return nil
}

// setNames applies a change of subscriptions; added names are marked to be
// sent (a change of names at the same version is answered with the newly
// asked resources).
func (st *stream) setNames(ts *typeState, names []string, answer bool) {
	wildcard := contains(names, "*") || (ts.wildcard && len(names) == 0 && ts.t.Wildcard)
	next := nameSet(names)
	if wildcard == ts.wildcard && sameSet(next, ts.names) {
		return
	}
	added := false
	for n := range next {
		if !ts.names[n] {
			ts.dirty[n] = true
			added = true
		}
	}
	if !wildcard {
		for n := range ts.sent {
			if !next[n] {
				delete(ts.sent, n) // unsubscribed: the client drops it
			}
		}
	}
	if wildcard && !ts.wildcard {
		ts.needAll, added = true, true
	}
	ts.wildcard, ts.names = wildcard, next
	if answer && added && ts.t.Wildcard {
		// Full-state types answer a subscription change with the whole
		// set, so the client learns at once what does not exist.
		ts.needAll, ts.forceSend = true, true
	}
}

// advance moves the stream to the latest snapshot, marking the names that
// changed on the way.
func (st *stream) advance() {
	if st.snap == nil {
		st.snap = st.s.cfg.Source.Snapshot()
		return
	}
	for x := st.snap.Next(); x != nil; x = x.Next() {
		for _, c := range x.Changes {
			ts := st.types[c.Type]
			if ts == nil || (c.Scope != store.DefaultScope && c.Scope != st.group) {
				continue
			}
			if ts.wildcard || ts.names[c.Name] {
				ts.dirty[c.Name] = true
			}
		}
		st.snap = x
	}
}

// flush sends what changed, type by type in make-before-break order: CDS,
// EDS, LDS, RDS, SRDS, VHDS, then the rest (promise 6).
func (st *stream) flush() error {
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
	return st.heartbeat()
}

// flushFullState sends the whole subscribed set of a LDS/CDS-like type when
// any of it changed.
func (st *stream) flushFullState(ts *typeState) error {
	names := keys(ts.names)
	entries := scope.Entries(st.snap, ts.t, st.group, names, ts.wildcard)
	force := ts.forceSend
	ts.needAll, ts.forceSend = false, false
	clear(ts.dirty) // reused: a push allocates no new map
	if !force && sameEntries(entries, ts.sent) {
		return nil
	}
	version := version(st.snap.Revision)
	if ts.t == resource.Cluster && st.fixed == nil {
		var removed []*store.Entry
		now := make(map[string]bool, len(entries))
		for _, e := range entries {
			now[e.Name] = true
		}
		for n, e := range ts.sent {
			if !now[n] {
				removed = append(removed, e)
			}
		}
		if len(removed) > 0 && st.referrersPending() {
			// Make before break: keep the removed clusters until the
			// listeners and routes that dropped them are ACKed. The
			// interim set carries the previous version: a client that
			// reconnects holding it is sent the final set.
			entries = append(entries, removed...)
			scope.SortEntries(entries)
			version = ts.version
			ts.holdRemovals = true
			st.s.metrics.mbbHolds.Inc()
			return st.send(ts, entries, version, false)
		}
		ts.holdRemovals = false
	}
	return st.send(ts, entries, version, ts.wildcard)
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
		if ts.nonce != "" && ts.acked != ts.version {
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
	if ts.needAll {
		if ts.wildcard {
			for _, e := range scope.Entries(st.snap, ts.t, st.group, nil, true) {
				candidates = append(candidates, e.Name)
			}
		}
		for n := range ts.names {
			candidates = append(candidates, n)
		}
	} else {
		candidates = keys(ts.dirty)
	}
	force := ts.forceSend
	ts.needAll, ts.forceSend = false, false
	clear(ts.dirty) // reused: a push allocates no new map
	var out []*store.Entry
	seen := map[string]bool{}
	for _, n := range candidates {
		if seen[n] {
			continue
		}
		seen[n] = true
		e := scope.Visible(st.snap, ts.t, st.group, n)
		if e == nil {
			delete(ts.sent, n)
			continue
		}
		if old := ts.sent[n]; !force && old != nil && old.Scope == e.Scope && old.ModRevision == e.ModRevision {
			continue
		}
		out = append(out, e)
	}
	if len(out) == 0 && !force {
		return nil
	}
	scope.SortEntries(out)
	return st.send(ts, out, version(st.snap.Revision), false)
}

// send encodes (or takes from the shared cache) and sends one response.
// For a client that reads TTLs, TTL'd resources go wrapped in a
// discovery.v3.Resource with the time their lease has left (promise 8).
func (st *stream) send(ts *typeState, entries []*store.Entry, ver string, shareable bool) error {
	var ttls []time.Duration // per entry when any is TTL'd; 0: none
	if st.ttlOn {
		ttls = st.wireTTLs(entries)
	}
	build := func() proto.Message {
		r := &discoveryv3.DiscoveryResponse{VersionInfo: ver, TypeUrl: ts.t.URL, Resources: make([]*anypb.Any, 0, len(entries))}
		for i, e := range entries {
			if ttls != nil && ttls[i] > 0 {
				r.Resources = append(r.Resources, wrapTTL(e, ver, ttls[i], true))
				continue
			}
			r.Resources = append(r.Resources, e.Body)
		}
		return r
	}
	var key strings.Builder
	if shareable {
		key.WriteString("W\x00" + ts.t.Name + "\x00" + st.group + "\x00" + ver)
	} else {
		key.WriteString("N\x00" + ts.t.Name + "\x00" + ver)
		for _, e := range entries {
			key.WriteString("\x00" + e.Scope + "/" + e.Name + "@" + strconv.FormatInt(e.ModRevision, 10))
		}
	}
	if ttls != nil {
		// The same content with the same TTLs: streams sending within
		// one lease.Quantum share the encoding.
		key.WriteString("\x00T")
		for _, d := range ttls {
			key.WriteString("\x00" + strconv.FormatInt(int64(d), 10))
		}
	}
	var body []byte
	var err error
	if ver == version(st.snap.Revision) {
		body, err = st.s.cache.Get(st.snap.Revision, key.String(), build)
	} else {
		body, err = st.s.cache.Encode(build())
	}
	if err != nil {
		return status.Errorf(codes.Internal, "encode response: %v", err)
	}
	st.nonces++
	nonce := strconv.FormatUint(st.nonces, 10)
	if err := st.gs.SendMsg(wire.NewResponse(body, nonce)); err != nil {
		return err
	}
	ts.version, ts.nonce = ver, nonce
	for _, e := range entries {
		ts.sent[e.Name] = e
	}
	if ts.t.Wildcard {
		// A full-state response replaces what the client holds.
		now := make(map[string]*store.Entry, len(entries))
		for _, e := range entries {
			now[e.Name] = e
		}
		ts.sent = now
	}
	if ttls != nil || len(ts.ttl) > 0 {
		st.sentTTLs(ts, entries, ttls)
	}
	ts.resources = len(ts.sent)
	st.s.metrics.responses.WithLabelValues(ts.t.Name).Inc()
	st.s.metrics.resourcesSent.WithLabelValues(ts.t.Name).Add(float64(len(entries)))
	st.s.metrics.bytesSent.Add(float64(len(body) + len(nonce) + 2))
	st.updateStatus(ts)
	return nil
}

func (st *stream) updateStatus(ts *typeState) {
	st.statusMu.Lock()
	defer st.statusMu.Unlock()
	if st.stat.Types == nil {
		st.stat.Types = map[string]*TypeStatus{}
	}
	s := st.stat.Types[ts.t.Name]
	if s == nil {
		s = &TypeStatus{}
		st.stat.Types[ts.t.Name] = s
	}
	// Updated in place (status copies under the lock): a push allocates
	// no status.
	*s = TypeStatus{
		VersionSent:  ts.version,
		VersionAcked: ts.acked,
		Nonce:        ts.nonce,
		NackVersion:  ts.nacked,
		LastNack:     ts.nackMsg,
		Wildcard:     ts.wildcard,
		Subscribed:   len(ts.names),
		Resources:    ts.resources,
	}
	if ts.ttl != nil {
		if st.stat.TTL == nil {
			st.stat.TTL = map[string][]TTLStatus{}
		}
		st.stat.TTL[ts.t.Name] = ttlStatus(ts)
	}
}

func (st *stream) status() StreamStatus {
	st.statusMu.Lock()
	defer st.statusMu.Unlock()
	out := st.stat
	out.Types = make(map[string]*TypeStatus, len(st.stat.Types))
	for k, v := range st.stat.Types {
		c := *v
		out.Types[k] = &c
	}
	out.TTL = nil
	var next func(int64) time.Time
	if st.s.cfg.Leases != nil {
		next = st.s.cfg.Leases.NextCheck
	}
	out.TTLResources = lease.StatusList(st.stat.TTL, next)
	return out
}

// StreamStatus describes one stream for /debug/streams.
type StreamStatus struct {
	ID          uint64                 `json:"id"`
	NodeID      string                 `json:"node_id"`
	Group       string                 `json:"group"`
	Protocol    string                 `json:"protocol"`
	ConnectedAt time.Time              `json:"connected_at"`
	Types       map[string]*TypeStatus `json:"types"`
	// TTLResources lists the resources the client holds with a TTL.
	TTLResources []TTLStatus `json:"ttl_resources,omitempty"`
	// TTL: per type, what TTLResources is built from.
	TTL map[string][]TTLStatus `json:"-"`
}

// TypeStatus is a stream's state for one type.
type TypeStatus struct {
	VersionSent  string `json:"version_sent"`
	VersionAcked string `json:"version_acked"`
	Nonce        string `json:"nonce"`
	NackVersion  string `json:"nack_version,omitempty"`
	LastNack     string `json:"last_nack,omitempty"`
	Wildcard     bool   `json:"wildcard"`
	Subscribed   int    `json:"subscribed_names"`
	Resources    int    `json:"resources"`
}

func sameEntries(entries []*store.Entry, sent map[string]*store.Entry) bool {
	if len(entries) != len(sent) {
		return false
	}
	for _, e := range entries {
		old := sent[e.Name]
		if old == nil || old.Scope != e.Scope || old.ModRevision != e.ModRevision {
			return false
		}
	}
	return true
}

func nameSet(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		if n != "*" {
			m[n] = true
		}
	}
	return m
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
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
