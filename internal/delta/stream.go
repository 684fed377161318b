package delta

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
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/lease"
	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/scope"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/wire"
	"github.com/legation-io/legation/internal/xdsstream"
)

// stream is one delta stream. Its state is owned by the goroutine running
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
	// ttlOn: the client advertised TTL support (promise 8) and the server
	// tracks leases. Otherwise TTL'd resources go out without a TTL and
	// are never heartbeated.
	ttlOn bool
	// notice is the lease-extension notice the stream waits on, from its
	// first TTL'd resource on; nil before.
	notice   *lease.Notice
	ttlCount int // the stream's share of metrics.ttlResources

	statusMu sync.Mutex // guards stat
	stat     StreamStatus
}

// held is what the client holds of one resource.
type held struct {
	version string
	scope   string // "" when only the version is known (initial_resource_versions)
	acked   bool   // the response that carried it was ACKed
}

// typeState is a stream's delta state for one resource type.
type typeState struct {
	t        *resource.Type
	wildcard bool
	names    map[string]bool // explicit subscriptions
	have     map[string]held // what the client holds, as far as the server knows
	// toldAbsent: explicitly subscribed names already listed in
	// removed_resources because they do not exist.
	toldAbsent map[string]bool
	force      map[string]bool // (re)subscribed: send even if held at the version
	dirty      map[string]bool // names that may have changed
	needAll    bool            // evaluate every subscribed or held name
	respond    bool            // send a response even if empty (a first request)

	outstanding string   // nonce of the response awaiting ACK/NACK
	inFlight    []string // names of resources in the outstanding response
	sentVersion string   // system_version_info of the last response
	settled     bool     // the last response was ACKed (or none was sent)
	acked       string   // system_version_info of the last ACKed response
	nacked      string   // system_version_info of the last NACKed one
	nackMsg     string
	holdRemoval bool // CDS/EDS removals wait for LDS/RDS ACKs (make before break)
	// ttl: the resources the client holds with a TTL, by the name it
	// subscribed with (only when ttlOn), pruned lazily against have.
	ttl map[string]ttlHeld
	// beat: TTL'd resources whose lease was extended, to heartbeat when
	// no response of the type is outstanding.
	beat map[string]bool
}

func (s *Server) serve(gs Stream, fixed *resource.Type) error {
	if s.cfg.Source.Snapshot() == nil {
		return status.Error(codes.Unavailable, "not ready: the view has not loaded etcd's state yet")
	}
	ctx := gs.Context()
	st := &stream{s: s, id: s.nextID.Add(1), gs: gs, fixed: fixed, ctx: ctx, types: map[*resource.Type]*typeState{}}
	proto := "delta-ads"
	if fixed != nil {
		proto = "delta-" + fixed.Name
	}
	st.log = s.cfg.Logger.With("stream", st.id, "protocol", proto)
	st.stat = StreamStatus{ID: st.id, Protocol: proto, ConnectedAt: time.Now().UTC()}
	defer s.streams.Add(st.id, st)()
	defer func() { s.metrics.ttlResources.Sub(float64(st.ttlCount)) }()

	// One receive goroutine feeds this loop, the only sender.
	reqc, errc := xdsstream.Receive[discoveryv3.DeltaDiscoveryRequest](ctx, gs.RecvMsg)
	st.snap = s.cfg.Source.Snapshot()
	for {
		var extended <-chan struct{}
		if st.notice != nil {
			extended = st.notice.Done()
		}
		select {
		case r := <-reqc:
			if err := st.handle(r); err != nil {
				return err
			}
		case <-st.snap.Done():
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

func (st *stream) typeOf(r *discoveryv3.DeltaDiscoveryRequest) (*resource.Type, error) {
	u := r.GetTypeUrl()
	if st.fixed != nil {
		if u != "" && u != st.fixed.URL {
			return nil, status.Errorf(codes.InvalidArgument, "type_url %q on the delta %s service, which serves %s", u, st.fixed.Name, st.fixed.URL)
		}
		return st.fixed, nil
	}
	if u == "" {
		return nil, status.Error(codes.InvalidArgument, "a delta request on ADS needs a type_url")
	}
	t, ok := resource.ByURL(u)
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "unknown type_url %q", u)
	}
	return t, nil
}

func (st *stream) handle(r *discoveryv3.DeltaDiscoveryRequest) error {
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
		ttl, _ := lease.Features(st.node)
		st.ttlOn = ttl && st.s.cfg.Leases != nil
		st.log = st.log.With("node", st.node.GetId(), "group", st.group)
		st.statusMu.Lock()
		st.stat.NodeID, st.stat.Group = st.node.GetId(), st.group
		st.statusMu.Unlock()
	}
	st.advance()
	ts := st.types[t]
	first := ts == nil
	if first {
		ts = &typeState{t: t, names: map[string]bool{}, have: map[string]held{}, toldAbsent: map[string]bool{},
			force: map[string]bool{}, dirty: map[string]bool{}, settled: true, needAll: true}
		st.types[t] = ts
		// Legacy wildcard: a first request of a LDS/CDS-like type that
		// names nothing.
		ts.wildcard = t.Wildcard && len(r.GetResourceNamesSubscribe()) == 0
		var newest int64
		for n, v := range r.GetInitialResourceVersions() {
			ts.have[n] = held{version: v, acked: true}
			if rev, err := strconv.ParseInt(v, 10, 64); err == nil && rev > newest {
				newest = rev
			}
		}
		if len(ts.have) == 0 {
			ts.respond = true // the client waits for a first answer
		}
		// Promise 3: never answer with older than what the client holds.
		if newest > st.snap.Revision {
			if _, err := st.s.catchUp(st.ctx, newest); err != nil {
				return err
			}
			st.advance()
		}
	}
	if nonce := r.GetResponseNonce(); nonce != "" {
		if nonce != ts.outstanding {
			st.s.metrics.staleNonces.Inc()
		} else if d := r.GetErrorDetail(); d != nil {
			st.s.metrics.nacks.WithLabelValues(t.Name).Inc()
			st.log.Warn("client rejected a delta response (NACK)", "type", t.Name, "version", ts.sentVersion, "error", d.GetMessage())
			ts.nacked, ts.nackMsg = ts.sentVersion, d.GetMessage()
			ts.outstanding, ts.inFlight = "", nil
			// Nothing is resent: what the client was sent counts as held,
			// so only a later change of a resource sends it again.
		} else {
			ts.acked, ts.nacked, ts.nackMsg = ts.sentVersion, "", ""
			for _, n := range ts.inFlight {
				if h, ok := ts.have[n]; ok {
					h.acked = true
					ts.have[n] = h
				}
			}
			ts.outstanding, ts.inFlight, ts.settled = "", nil, true
			st.releaseHold()
		}
	}
	for _, n := range r.GetResourceNamesSubscribe() {
		if n == "*" {
			ts.wildcard, ts.needAll = true, true
			continue
		}
		ts.names[n] = true
		ts.dirty[n] = true
		// Always sent, since the client may have forgotten it, unless the
		// type's first request presents it in initial_resource_versions:
		// those say exactly what the client holds (promise 4), and Envoy
		// resubscribes every name it holds when it reconnects.
		if _, presented := r.GetInitialResourceVersions()[n]; !first || !presented {
			ts.force[n] = true
		}
		delete(ts.toldAbsent, n)
	}
	for _, n := range r.GetResourceNamesUnsubscribe() {
		if n == "*" {
			ts.wildcard = false
			for h := range ts.have {
				if !ts.names[h] {
					delete(ts.have, h)
				}
			}
			continue
		}
		if !ts.names[n] {
			continue // a phantom unsubscribe
		}
		delete(ts.names, n)
		delete(ts.force, n)
		delete(ts.toldAbsent, n)
		if !ts.wildcard {
			delete(ts.have, n) // the client drops it
		}
	}
	st.updateStatus(ts)
	return nil
}

// advance moves the stream to the latest snapshot, marking what changed.
func (st *stream) advance() {
	for x := st.snap.Next(); x != nil; x = x.Next() {
		for _, c := range x.Changes {
			ts := st.types[c.Type]
			if ts == nil || (c.Scope != store.DefaultScope && c.Scope != st.group) {
				continue
			}
			if _, held := ts.have[c.Name]; ts.wildcard || ts.names[c.Name] || held {
				ts.dirty[c.Name] = true
			}
			if c.Type == resource.VirtualHost {
				markAliases(ts, c.Name)
			}
		}
		st.snap = x
	}
}

// flush sends what changed, type by type in make-before-break order, at
// most one outstanding response per type.
func (st *stream) flush() error {
	for _, t := range resource.All() {
		ts := st.types[t]
		if ts == nil || ts.outstanding != "" || (!ts.needAll && !ts.respond && len(ts.dirty) == 0) {
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
		if ts := st.types[t]; ts != nil && ts.needAll && ts.outstanding == "" {
			if err := st.flushType(ts); err != nil {
				return err
			}
		}
	}
	return st.heartbeat()
}

func (st *stream) flushType(ts *typeState) error {
	// A fresh wildcard subscription gets every visible resource: the same
	// response for every stream of the group at this revision, shared
	// under a short key.
	shareKey := ""
	if ts.needAll && ts.wildcard && len(ts.names) == 0 && len(ts.have) == 0 && len(ts.dirty) == 0 {
		shareKey = "DA\x00" + ts.t.Name + "\x00" + st.group + "\x00" + strconv.FormatInt(st.snap.Revision, 10)
	}
	candidates := map[string]bool{}
	if ts.needAll {
		for n := range ts.names {
			candidates[n] = true
		}
		for n := range ts.have {
			candidates[n] = true
		}
		if ts.wildcard {
			for _, e := range scope.Entries(st.snap, ts.t, st.group, nil, true) {
				candidates[e.Name] = true
			}
		}
	}
	for n := range ts.dirty {
		candidates[n] = true
	}
	respond := ts.respond
	ts.needAll, ts.respond = false, false
	clear(ts.dirty) // reused: a push allocates no new map

	holdRemovals := breaks(ts.t) && st.fixed == nil && st.referrersPending()
	var out []item
	var removed []string
	for _, n := range sortedKeys(candidates) {
		_, isHeld := ts.have[n]
		if !ts.wildcard && !ts.names[n] {
			delete(ts.have, n) // held but not subscribed: the client drops it
			continue
		}
		e := scope.Visible(st.snap, ts.t, st.group, n)
		source := ""
		alias := ""
		if e != nil {
			source = e.Scope
		} else if ts.t == resource.VirtualHost {
			// VHDS: n may be an alias "<route configuration>/<host>".
			if e = resolveAlias(st.snap, st.group, n); e != nil {
				alias, source = n, e.Scope+"/"+e.Name
			}
		}
		if e == nil {
			switch {
			case isHeld && holdRemovals:
				ts.holdRemoval = true // make before break: later
			case isHeld:
				removed = append(removed, n)
				delete(ts.have, n)
			case ts.names[n] && !ts.toldAbsent[n]:
				removed = append(removed, n) // asked for, does not exist
				ts.toldAbsent[n] = true
			}
			delete(ts.force, n)
			continue
		}
		v := strconv.FormatInt(e.ModRevision, 10)
		h := ts.have[n]
		// A version presented in initial_resource_versions names a
		// mod_revision, not a key: it is trusted unless another resource
		// the client may have held shares it (an alias that may have
		// resolved elsewhere, or a group override deleted since).
		unconfirmed := h.scope == ""
		ambiguous := unconfirmed && (alias != "" ||
			(st.group != "" && e.Scope == store.DefaultScope && st.snap.LastChange(ts.t, st.group) > e.ModRevision))
		if isHeld && h.version == v && (unconfirmed || h.scope == source) && !ambiguous && !ts.force[n] {
			if h.scope == "" {
				st.s.metrics.notResent.Inc()
				h.scope = source
				ts.have[n] = h
			}
			continue
		}
		delete(ts.force, n)
		delete(ts.toldAbsent, n)
		out = append(out, item{e: e, alias: alias, source: source})
	}
	if !holdRemovals && breaks(ts.t) {
		ts.holdRemoval = false
	}
	if len(out) == 0 && len(removed) == 0 && !respond {
		st.updateStatus(ts)
		return nil
	}
	return st.send(ts, out, removed, shareKey)
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

// item is one resource to send: an entry, and the VHDS alias it was
// asked by, if any.
type item struct {
	e      *store.Entry
	alias  string
	source string // what held.scope records: the scope, or scope/name for an alias
}

// key is the name the client subscribed by: the alias, else the name.
func (it item) key() string {
	if it.alias != "" {
		return it.alias
	}
	return it.e.Name
}

// send sends one response. shareKey, if set, names its content for the
// shared body cache; otherwise the key is built from the content.
func (st *stream) send(ts *typeState, out []item, removed []string, shareKey string) error {
	sysVersion := strconv.FormatInt(st.snap.Revision, 10)
	var ttls []time.Duration // per item when any is TTL'd; 0: none
	if st.ttlOn {
		ttls = st.wireTTLs(out)
	}
	if shareKey == "" {
		var key strings.Builder
		key.WriteString("D\x00" + ts.t.Name + "\x00" + sysVersion)
		for _, it := range out {
			key.WriteString("\x00" + it.e.Scope + "/" + it.e.Name + "@" + strconv.FormatInt(it.e.ModRevision, 10) + "~" + it.alias)
		}
		key.WriteString("\x00-")
		for _, n := range removed {
			key.WriteString("\x00" + n)
		}
		shareKey = key.String()
	}
	if ttls != nil {
		// The same content with the same TTLs: streams sending within
		// one lease.Quantum share the encoding.
		var key strings.Builder
		key.WriteString(shareKey + "\x00T")
		for _, d := range ttls {
			key.WriteString("\x00" + strconv.FormatInt(int64(d), 10))
		}
		shareKey = key.String()
	}
	build := func() proto.Message {
		r := &discoveryv3.DeltaDiscoveryResponse{SystemVersionInfo: sysVersion, TypeUrl: ts.t.URL, RemovedResources: removed,
			Resources: make([]*discoveryv3.Resource, 0, len(out))}
		for i, it := range out {
			res := &discoveryv3.Resource{Name: it.e.Name, Version: strconv.FormatInt(it.e.ModRevision, 10), Resource: it.e.Body}
			if ttls != nil && ttls[i] > 0 {
				res.Ttl = durationpb.New(ttls[i])
			}
			if it.alias != "" {
				res.Aliases = []string{it.alias}
			}
			r.Resources = append(r.Resources, res)
		}
		return r
	}
	body, err := st.s.cache.Get(st.snap.Revision, shareKey, build)
	if err != nil {
		return status.Errorf(codes.Internal, "encode delta response: %v", err)
	}
	st.nonces++
	nonce := strconv.FormatUint(st.nonces, 10)
	w := wire.NewResponse(body, nonce)
	if err := st.gs.SendMsg(w); err != nil {
		return err
	}
	ts.outstanding, ts.sentVersion, ts.settled = nonce, sysVersion, false
	ts.inFlight = ts.inFlight[:0]
	for _, it := range out {
		ts.have[it.key()] = held{version: strconv.FormatInt(it.e.ModRevision, 10), scope: it.source}
		ts.inFlight = append(ts.inFlight, it.key())
	}
	if ttls != nil || len(ts.ttl) > 0 {
		st.sentTTLs(ts, out, ttls)
	}
	m := st.s.metrics
	m.responses.WithLabelValues(ts.t.Name).Inc()
	m.resourcesSent.WithLabelValues(ts.t.Name).Add(float64(len(out)))
	m.removalsSent.WithLabelValues(ts.t.Name).Add(float64(len(removed)))
	m.bytesSent.Add(float64(w.Size()))
	st.updateStatus(ts)
	return nil
}

// maxStatusResources bounds the per-resource lines of a type's status.
const maxStatusResources = 100

func (st *stream) updateStatus(ts *typeState) {
	s := &TypeStatus{
		SystemVersionSent:  ts.sentVersion,
		SystemVersionAcked: ts.acked,
		Outstanding:        ts.outstanding,
		NackVersion:        ts.nacked,
		LastNack:           ts.nackMsg,
		Wildcard:           ts.wildcard,
		Subscribed:         len(ts.names),
		Held:               len(ts.have),
	}
	if len(ts.have) <= maxStatusResources {
		s.Resources = make(map[string]ResourceStatus, len(ts.have))
		for n, h := range ts.have {
			rs := ResourceStatus{VersionSent: h.version}
			if h.acked {
				rs.VersionAcked = h.version
			}
			s.Resources[n] = rs
		}
	}
	var ttl []TTLStatus
	if ts.ttl != nil {
		ttl = ttlStatus(ts)
	}
	st.statusMu.Lock()
	defer st.statusMu.Unlock()
	if st.stat.Types == nil {
		st.stat.Types = map[string]*TypeStatus{}
	}
	st.stat.Types[ts.t.Name] = s
	if ts.ttl != nil {
		if st.stat.TTL == nil {
			st.stat.TTL = map[string][]TTLStatus{}
		}
		st.stat.TTL[ts.t.Name] = ttl
	}
}

func (st *stream) status() StreamStatus {
	st.statusMu.Lock()
	defer st.statusMu.Unlock()
	out := st.stat
	out.Types = make(map[string]*TypeStatus, len(st.stat.Types))
	for k, v := range st.stat.Types {
		out.Types[k] = v // immutable once stored
	}
	out.TTL = nil
	var next func(int64) time.Time
	if st.s.cfg.Leases != nil {
		next = st.s.cfg.Leases.NextCheck
	}
	out.TTLResources = lease.StatusList(st.stat.TTL, next)
	return out
}

// StreamStatus describes one delta stream for /debug/streams.
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

// TypeStatus is a delta stream's state for one type.
type TypeStatus struct {
	SystemVersionSent  string `json:"system_version_sent"`
	SystemVersionAcked string `json:"system_version_acked"`
	Outstanding        string `json:"outstanding_nonce,omitempty"`
	NackVersion        string `json:"nack_version,omitempty"`
	LastNack           string `json:"last_nack,omitempty"`
	Wildcard           bool   `json:"wildcard"`
	Subscribed         int    `json:"subscribed_names"`
	Held               int    `json:"resources"`
	// Resources lists per resource the version sent and ACKed, when the
	// client holds at most 100.
	Resources map[string]ResourceStatus `json:"resource_versions,omitempty"`
}

// ResourceStatus is the version of one resource sent to and ACKed by a
// client.
type ResourceStatus struct {
	VersionSent  string `json:"sent"`
	VersionAcked string `json:"acked,omitempty"`
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
