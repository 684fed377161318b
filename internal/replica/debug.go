package replica

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/legation-io/legation/internal/cluster/lrs"
	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/cluster/status"
	"github.com/legation-io/legation/internal/state/lease"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/xds/delta"
	"github.com/legation-io/legation/internal/xds/sotw"
)

// handleDebug registers the /debug/ endpoints on mux, each answering
// admins only with mTLS on, else loopback clients only and only with
// InsecureLoopbackDebug; /debug/pprof/ answers only with Pprof besides.
// Their JSON is for people and scripts: keep its shape
// (docs/reference/http-api.md).
func (n *Node) handleDebug(mux *http.ServeMux) {
	mux.Handle("GET /debug/view", n.debugOnly(http.HandlerFunc(n.serveDebugView)))
	mux.Handle("GET /debug/streams", n.debugOnly(http.HandlerFunc(n.serveDebugStreams)))
	mux.Handle("GET /debug/cluster", n.debugOnly(http.HandlerFunc(n.serveDebugCluster)))
	mux.Handle("GET /debug/load", n.debugOnly(http.HandlerFunc(n.serveDebugLoad)))
	mux.Handle("GET /debug/nacks", n.debugOnly(http.HandlerFunc(n.serveDebugNacks)))
	// Go's profiles (go tool pprof http://ADDR/debug/pprof/profile?seconds=20):
	// a profile must fit in the HTTP write timeout (30s). They show the
	// process's memory and command line, so they are off unless asked for.
	mux.Handle("GET /debug/pprof/", n.pprofOnly(http.HandlerFunc(pprof.Index)))
	mux.Handle("GET /debug/pprof/cmdline", n.pprofOnly(http.HandlerFunc(pprof.Cmdline)))
	mux.Handle("GET /debug/pprof/profile", n.pprofOnly(http.HandlerFunc(pprof.Profile)))
	mux.Handle("GET /debug/pprof/symbol", n.pprofOnly(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("GET /debug/pprof/trace", n.pprofOnly(http.HandlerFunc(pprof.Trace)))
}

// debugOnly lets only admins reach h with mTLS on (docs/concepts/design.md,
// "Security"). Without mTLS a client cannot be told apart, and being on
// loopback proves nothing (a proxy on the host makes everyone loopback):
// h answers no one, unless InsecureLoopbackDebug lets loopback clients
// in.
func (n *Node) debugOnly(h http.Handler) http.Handler {
	if n.guard.MTLS() {
		return n.guard.AdminHTTP(h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !n.cfg.InsecureLoopbackDebug {
			http.Error(w, "debug endpoints are off without mTLS: serve mTLS (admins only), or start xds-node with "+
				"--insecure-loopback-debug to let loopback clients in", http.StatusForbidden)
			return
		}
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		ip := net.ParseIP(host)
		if err != nil || ip == nil || !ip.IsLoopback() {
			http.Error(w, "debug endpoints answer loopback clients only (--insecure-loopback-debug)", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// pprofOnly is debugOnly for Go's profiles, which answer only with Pprof.
func (n *Node) pprofOnly(h http.Handler) http.Handler {
	if !n.cfg.Pprof {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "pprof is off: start xds-node with --pprof", http.StatusNotFound)
		})
	}
	return n.debugOnly(h)
}

// serveDebugLoad answers with the load of the whole cluster, as xdsadmin
// load does: every replica's windows read from etcd, summed. Query
// parameters: cluster (empty: all), by (cluster, locality or node) and
// windows (default 3). A bad parameter is a 400 naming it; etcd failing,
// a 503.
func (n *Node) serveDebugLoad(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	by, err := lrs.ParseBy(q.Get("by"))
	if err != nil {
		http.Error(w, "by: "+err.Error(), http.StatusBadRequest)
		return
	}
	last := 3
	if v := q.Get("windows"); v != "" {
		if last, err = strconv.Atoi(v); err != nil || last < 1 || last > 100000 {
			http.Error(w, fmt.Sprintf("windows %q: want a whole number from 1 to 100000", v), http.StatusBadRequest)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	ws, bad, err := lrs.Read(ctx, n.client, n.cfg.EtcdPrefix)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	sums := lrs.Summarize(ws, q.Get("cluster"), by, last, time.Now())
	if sums == nil {
		sums = []lrs.Summary{}
	}
	writeJSON(w, http.StatusOK, loadStatus{Summaries: sums, Malformed: len(bad)})
}

// serveDebugNacks answers with the fleet's standing rejections grouped by
// the apply they trace to, as xdsadmin nacks shows them: every node's
// status record and the apply history, read from etcd. Query parameter:
// since (a duration: only rejections of applies written within it).
func (n *Node) serveDebugNacks(w http.ResponseWriter, r *http.Request) {
	var since time.Duration
	if v := r.URL.Query().Get("since"); v != "" {
		var err error
		if since, err = time.ParseDuration(v); err != nil || since < 0 {
			http.Error(w, fmt.Sprintf("since %q: want a duration such as 10m, not negative", v), http.StatusBadRequest)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	groups, bad, err := status.ReadRejections(ctx, n.client, n.cfg.EtcdPrefix)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	if since > 0 {
		groups = status.RecentRejections(groups, time.Now().Add(-since))
	}
	writeJSON(w, http.StatusOK, nacksStatus{Rejections: groups, Malformed: bad})
}

// nacksStatus is the body of /debug/nacks.
type nacksStatus struct {
	Rejections []status.Rejection `json:"rejections"`
	// Malformed counts the status records that did not decode.
	Malformed int `json:"malformed"`
}

// loadStatus is the body of /debug/load.
type loadStatus struct {
	Summaries []lrs.Summary `json:"summaries"`
	// Malformed counts the windows in etcd skipped because their values
	// do not decode.
	Malformed int `json:"malformed"`
}

// writeJSON writes v as indented JSON with code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v) //nolint:errcheck // the client went away
}

// viewStatus is the body of /debug/view.
type viewStatus struct {
	// Loaded is false until the view's first load; the other fields are
	// then zero and Reason says why.
	Loaded bool   `json:"loaded"`
	Reason string `json:"reason,omitempty"`
	// Revision is the etcd revision of the latest snapshot.
	Revision int64 `json:"revision"`
	// Resources counts the resources held, and Types per type name.
	Resources int            `json:"resources"`
	Types     map[string]int `json:"types,omitempty"`
	// Malformed counts the etcd keys skipped because their values do
	// not decode.
	Malformed int `json:"malformed"`
	// HistoryFrom is the oldest revision from which the view knows every
	// change.
	HistoryFrom int64 `json:"history_from"`
}

// serveDebugView reports the view's latest snapshot as JSON; 503 before
// the first load.
func (n *Node) serveDebugView(w http.ResponseWriter, _ *http.Request) {
	var st viewStatus
	s := n.view.Snapshot()
	code := http.StatusOK
	if s == nil {
		_, st.Reason = n.readiness()
		code = http.StatusServiceUnavailable
	} else {
		st = viewStatus{Loaded: true, Revision: s.Revision, Resources: s.Len(),
			Malformed: s.Malformed, HistoryFrom: s.HistoryFrom, Types: map[string]int{}}
		for _, t := range resource.All() {
			c := 0
			s.Walk(t, "", func(*view.Entry) bool { c++; return true })
			if c > 0 {
				st.Types[t.Name] = c
			}
		}
	}
	writeJSON(w, code, st)
}

// serveDebugStreams lists every open xDS stream, SotW and delta, the
// tracked leases and the streams the relay saw, as JSON.
func (n *Node) serveDebugStreams(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Streams      []sotw.StreamStatus  `json:"streams"`
		DeltaStreams []delta.StreamStatus `json:"delta_streams"`
		Leases       []lease.Info         `json:"leases,omitempty"`
		Relay        []relay.StreamInfo   `json:"relay"`
	}{n.sotw.Streams(), n.delta.Streams(), n.leases.Tracked(), n.relay.Streams()})
}

// clusterStatus is the body of /debug/cluster. Members, Ring and Shares
// are null until the replica has joined the cluster, and always in dev
// mode and with --standalone.
type clusterStatus struct {
	Self      string             `json:"self"`
	Clustered bool               `json:"clustered"`
	Ready     bool               `json:"ready"`
	Members   []shard.Member     `json:"members"`
	Ring      []string           `json:"ring"`
	Shares    map[string]float64 `json:"ring_shares"`
	Relayed   int                `json:"streams_relayed"`
	Local     int                `json:"streams_local"`
}

// serveDebugCluster reports the members, the ring and how many streams are
// served here or relayed, as JSON.
func (n *Node) serveDebugCluster(w http.ResponseWriter, _ *http.Request) {
	cs := clusterStatus{Self: n.cfg.Name, Clustered: n.cluster.Clustered(), Ready: n.ready()}
	if m := n.cluster.Membership(); m != nil {
		cs.Members = m.Members()
		r := m.Ring()
		for _, mem := range r.Members() {
			cs.Ring = append(cs.Ring, mem.Name)
		}
		cs.Shares = r.Shares()
	}
	for _, s := range n.relay.Streams() {
		if s.ServedBy == relay.Local {
			cs.Local++
		} else {
			cs.Relayed++
		}
	}
	writeJSON(w, http.StatusOK, cs)
}
