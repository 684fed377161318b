package replica_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// The equivalence of the two protocols, on a replica (which serves both):
// after any sequence of applies, a delta client that ACKs everything,
// reconstructing its state from resources and removed_resources, holds
// exactly what a SotW client on the same replica holds, and exactly etcd's
// state at the final revision as resolved for its group (the default scope
// overridden by the group's).
//
// One difference is the protocol's, not the server's: SotW cannot say an
// endpoint set is gone (EDS responses carry what changed and a client
// keeps the last value of a named resource a response omits), so the SotW
// client may keep endpoint sets deleted in etcd. Its endpoints are
// compared on the names etcd has.

const (
	eqGroup  = "g1"
	eqOther  = "g2" // another group: never seen by the clients
	eqNodeID = "eq"
)

var (
	eqScopes = []string{store.DefaultScope, eqGroup, eqOther}
	eqNames  = []string{"c0", "c1", "c2", "c3"}
	// eqEDSNames are the clients' EDS subscriptions: c4 never exists.
	eqEDSNames = []string{"c0", "c1", "c2", "c3", "c4"}
	eqTypes    = []*resource.Type{resource.Cluster, resource.Endpoint}
)

// eqState is a client's (or etcd's) resources: type, then name to the
// resource's bytes.
type eqState map[*resource.Type]map[string][]byte

func newEqState() eqState {
	return eqState{resource.Cluster: {}, resource.Endpoint: {}}
}

func (s eqState) clone() eqState {
	out := newEqState()
	for t, m := range s {
		for n, b := range m {
			out[t][n] = b
		}
	}
	return out
}

// diff describes how got differs from want, "" when equal.
func (want eqState) diff(got eqState) string {
	var b strings.Builder
	for _, t := range eqTypes {
		names := map[string]bool{}
		for n := range want[t] {
			names[n] = true
		}
		for n := range got[t] {
			names[n] = true
		}
		for _, n := range sortedNames(names) {
			w, wok := want[t][n]
			g, gok := got[t][n]
			switch {
			case wok && !gok:
				fmt.Fprintf(&b, "  %s %s: missing\n", t, n)
			case !wok && gok:
				fmt.Fprintf(&b, "  %s %s: extra\n", t, n)
			case !bytes.Equal(w, g):
				fmt.Fprintf(&b, "  %s %s: different bytes\n", t, n)
			}
		}
	}
	return b.String()
}

func sortedNames(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// deltaFollower is a delta ADS client: legacy wildcard CDS and named EDS,
// ACKing every response from its own goroutine. reconnect opens a new
// stream presenting what it holds in initial_resource_versions.
type deltaFollower struct {
	t    *testing.T
	addr string // the replica's --xds-addr

	mu       sync.Mutex // guards the fields below
	state    eqState
	versions map[*resource.Type]map[string]string
	err      error

	cancel context.CancelFunc
	done   chan struct{}
}

func newDeltaFollower(t *testing.T, addr string) *deltaFollower {
	f := &deltaFollower{t: t, addr: addr, state: newEqState(),
		versions: map[*resource.Type]map[string]string{resource.Cluster: {}, resource.Endpoint: {}}}
	f.connect()
	t.Cleanup(f.stop)
	return f
}

func (f *deltaFollower) connect() {
	f.t.Helper()
	d := xdstest.OpenDelta(f.t, xdstest.Dial(f.t, f.addr))
	f.mu.Lock()
	cdsHeld, edsHeld := clone(f.versions[resource.Cluster]), clone(f.versions[resource.Endpoint])
	f.mu.Unlock()
	d.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node(eqNodeID, eqGroup), TypeUrl: resource.Cluster.URL,
		InitialResourceVersions: cdsHeld})
	d.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: eqEDSNames,
		InitialResourceVersions: edsHeld})
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = func() { cancel(); d.Cancel() }, make(chan struct{})
	go f.follow(ctx, d)
}

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (f *deltaFollower) follow(ctx context.Context, d *xdstest.DeltaStream) {
	defer close(f.done)
	for {
		var r xdstest.Result[discoveryv3.DeltaDiscoveryResponse]
		select {
		case r = <-d.Recv():
		case <-ctx.Done():
			return
		}
		if r.Err != nil {
			if ctx.Err() == nil {
				f.fail(fmt.Errorf("delta stream ended: %w", r.Err))
			}
			return
		}
		if err := f.apply(r.Resp); err != nil {
			f.fail(err)
			return
		}
		if err := d.Client().Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: r.Resp.GetTypeUrl(), ResponseNonce: r.Resp.GetNonce()}); err != nil {
			if ctx.Err() == nil {
				f.fail(fmt.Errorf("delta ACK: %w", err))
			}
			return
		}
	}
}

func (f *deltaFollower) apply(resp *discoveryv3.DeltaDiscoveryResponse) error {
	t, ok := resource.ByURL(resp.GetTypeUrl())
	if !ok || (t != resource.Cluster && t != resource.Endpoint) {
		return fmt.Errorf("delta: unexpected type %q", resp.GetTypeUrl())
	}
	if resp.GetNonce() == "" {
		return fmt.Errorf("delta: response without a nonce")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range resp.GetResources() {
		if err := checkBody(t, r.GetName(), r.GetResource().GetTypeUrl(), r.GetResource().GetValue()); err != nil {
			return fmt.Errorf("delta: %w", err)
		}
		f.state[t][r.GetName()] = r.GetResource().GetValue()
		f.versions[t][r.GetName()] = r.GetVersion()
	}
	for _, n := range resp.GetRemovedResources() {
		delete(f.state[t], n)
		delete(f.versions[t], n)
	}
	return nil
}

// checkBody checks that a resource sent as name is a t named name.
func checkBody(t *resource.Type, name, url string, body []byte) error {
	if url != t.URL {
		return fmt.Errorf("%s %s: body of type %q", t, name, url)
	}
	m, err := resource.Unmarshal(t, body)
	if err != nil {
		return err
	}
	if got := t.NameOf(m); got != name {
		return fmt.Errorf("%s %s: body names %q", t, name, got)
	}
	return nil
}

func (f *deltaFollower) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

// reconnect ends the stream and opens another, as a client moving to
// another replica does.
func (f *deltaFollower) reconnect() {
	f.stop()
	f.connect()
}

func (f *deltaFollower) stop() {
	f.cancel()
	<-f.done
}

func (f *deltaFollower) snapshot() (eqState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state.clone(), f.err
}

// sotwFollower is a SotW ADS client with the same subscriptions, ACKing
// everything.
type sotwFollower struct {
	mu    sync.Mutex // guards state, err
	state eqState
	err   error
}

func newSotwFollower(t *testing.T, addr string) *sotwFollower {
	t.Helper()
	f := &sotwFollower{state: newEqState()}
	x := xdstest.OpenSotW(t, xdstest.Dial(t, addr))
	x.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node(eqNodeID+"-sotw", eqGroup), TypeUrl: resource.Cluster.URL})
	x.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNames: eqEDSNames})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for {
			var r xdstest.Result[discoveryv3.DiscoveryResponse]
			select {
			case r = <-x.Recv():
			case <-ctx.Done():
				return
			}
			if r.Err != nil {
				if ctx.Err() == nil {
					f.fail(fmt.Errorf("sotw stream ended: %w", r.Err))
				}
				return
			}
			if err := f.apply(r.Resp); err != nil {
				f.fail(err)
				return
			}
			ack := &discoveryv3.DiscoveryRequest{TypeUrl: r.Resp.GetTypeUrl(), VersionInfo: r.Resp.GetVersionInfo(), ResponseNonce: r.Resp.GetNonce()}
			if r.Resp.GetTypeUrl() == resource.Endpoint.URL {
				ack.ResourceNames = eqEDSNames
			}
			if err := x.Client().Send(ack); err != nil {
				if ctx.Err() == nil {
					f.fail(fmt.Errorf("sotw ACK: %w", err))
				}
				return
			}
		}
	}()
	return f
}

func (f *sotwFollower) apply(resp *discoveryv3.DiscoveryResponse) error {
	t, ok := resource.ByURL(resp.GetTypeUrl())
	if !ok || (t != resource.Cluster && t != resource.Endpoint) {
		return fmt.Errorf("sotw: unexpected type %q", resp.GetTypeUrl())
	}
	got := map[string][]byte{}
	for _, a := range resp.GetResources() {
		m, err := resource.Unmarshal(t, a.GetValue())
		if err != nil {
			return fmt.Errorf("sotw: %w", err)
		}
		got[t.NameOf(m)] = a.GetValue()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.Wildcard {
		f.state[t] = got // the full set replaces
		return nil
	}
	for n, b := range got {
		f.state[t][n] = b // the others keep their last value
	}
	return nil
}

func (f *sotwFollower) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *sotwFollower) snapshot() (eqState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state.clone(), f.err
}

// etcdState reads etcd at rev and resolves it for eqGroup: the default
// scope overridden by the group, endpoints limited to the subscribed names.
func etcdState(t *testing.T, e *xdsEnv, rev int64) eqState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	res, err := e.Store.List(ctx, store.ListOptions{Revision: rev})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Malformed) > 0 {
		t.Fatalf("malformed values: %v", res.Malformed)
	}
	byScope := map[string]eqState{store.DefaultScope: newEqState(), eqGroup: newEqState()}
	for _, r := range res.Resources {
		if s, ok := byScope[r.Scope]; ok && s[r.Type] != nil {
			s[r.Type][r.Name] = r.Envelope.GetBody().GetValue()
		}
	}
	out := byScope[store.DefaultScope]
	for typ, m := range byScope[eqGroup] {
		for n, b := range m {
			out[typ][n] = b
		}
	}
	subscribed := map[string]bool{}
	for _, n := range eqEDSNames {
		subscribed[n] = true
	}
	for n := range out[resource.Endpoint] {
		if !subscribed[n] {
			delete(out[resource.Endpoint], n)
		}
	}
	return out
}

// eqChooser makes the run's choices: an int in [0, n), false when out of
// input.
type eqChooser func(n int) (int, bool)

// eqRun drives up to steps random applies (puts with random content and
// deletes, in the default scope, the clients' group and another group;
// sometimes a delta reconnect), stopping early when the chooser runs out,
// then checks the property on the clients of the replica at addr.
func eqRun(t *testing.T, e *xdsEnv, addr string, choose eqChooser, steps int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	// What exists, to delete only what does (a delete of nothing is an
	// error of the store's).
	exists := map[store.Key]bool{}
	res, err := e.Store.List(ctx, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Resources {
		exists[r.Key] = true
	}
	df := newDeltaFollower(t, addr)
	sf := newSotwFollower(t, addr)
	rev := res.Revision
	var log []string
	for step := 0; step < steps; step++ {
		n, ok := choose(4)
		if !ok {
			break
		}
		if n == 3 {
			if r, ok := choose(4); ok && r == 0 {
				log = append(log, "reconnect")
				df.reconnect()
				continue
			}
		}
		var puts []store.Put
		var dels []store.Key
		named := map[store.Key]bool{}
		for i := 0; i <= n%3; i++ {
			ti, ok1 := choose(len(eqTypes))
			si, ok2 := choose(len(eqScopes))
			ni, ok3 := choose(len(eqNames))
			val, ok4 := choose(4)
			if !ok1 || !ok2 || !ok3 || !ok4 {
				break
			}
			k := store.Key{Type: eqTypes[ti], Scope: eqScopes[si], Name: eqNames[ni]}
			if named[k] {
				continue
			}
			named[k] = true
			if exists[k] && val == 0 {
				dels = append(dels, k)
				log = append(log, "delete "+k.String())
				continue
			}
			if k.Type == resource.Cluster {
				puts = append(puts, xdstest.Put(t, k.Type, k.Scope, xdstest.Cluster(k.Name, int64(val+1))))
			} else {
				puts = append(puts, xdstest.Put(t, k.Type, k.Scope, xdstest.Endpoints(k.Name, uint32(8000+val))))
			}
			log = append(log, fmt.Sprintf("put %s=%d", k, val))
		}
		if len(puts)+len(dels) == 0 {
			continue
		}
		rev = e.Apply(t, puts, dels...)
		for _, p := range puts {
			exists[p.Key] = true
		}
		for _, k := range dels {
			delete(exists, k)
		}
		log = append(log, fmt.Sprintf("= revision %d", rev))
	}
	want := etcdState(t, e, rev)
	deadline := time.Now().Add(xdstest.Timeout)
	for {
		dState, dErr := df.snapshot()
		sState, sErr := sf.snapshot()
		if dErr != nil || sErr != nil {
			t.Fatalf("clients: delta %v, sotw %v\nsteps:\n%s", dErr, sErr, strings.Join(log, "\n"))
		}
		// The SotW client may keep endpoint sets etcd no longer has.
		sCmp := sState.clone()
		for n := range sCmp[resource.Endpoint] {
			if _, ok := want[resource.Endpoint][n]; !ok {
				delete(sCmp[resource.Endpoint], n)
			}
		}
		dDiff, sDiff, dsDiff := want.diff(dState), want.diff(sCmp), sCmp.diff(dState)
		if dDiff == "" && sDiff == "" && dsDiff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("at revision %d:\ndelta vs etcd (-want +got):\n%s\nsotw vs etcd:\n%s\ndelta vs sotw:\n%s\nsteps:\n%s",
				rev, dDiff, sDiff, dsDiff, strings.Join(log, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startEq starts an env and a standalone replica serving it, with
// catchup as its CatchupTimeout.
func startEq(tb testing.TB, catchup time.Duration) (*xdsEnv, *running) {
	tb.Helper()
	e := newXDSEnv(tb)
	cfg := e.config(tb)
	cfg.Standalone = true
	cfg.CatchupTimeout = catchup
	r := start(tb, cfg)
	waitReady(tb, r)
	return e, r
}

func TestDeltaEquivalence(t *testing.T) {
	checkLeaks(t)
	e, r := startEq(t, time.Second)
	rng := rand.New(rand.NewPCG(20240601, 7))
	eqRun(t, e, r.XDSAddr(), func(n int) (int, bool) { return rng.IntN(n), true }, 30)
}

// FuzzDeltaEquivalence drives eqRun from the fuzz input: each byte is one
// choice, so an input is a short sequence of applies and reconnects. One
// env and replica serve every input of a fuzz process; each input starts
// from an empty etcd state with new clients.
func FuzzDeltaEquivalence(f *testing.F) {
	e, r := startEq(f, 50*time.Millisecond)
	f.Add([]byte{0, 0, 0, 0, 1, 2, 1, 1, 1, 0, 1, 1, 1, 0, 3, 0, 1, 0, 0, 0})
	f.Add([]byte{2, 1, 1, 2, 3, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 3, 0, 0, 1, 1, 2, 0})
	f.Add([]byte{1, 0, 1, 0, 2, 1, 0, 1, 0, 3, 3, 0, 1, 1, 0, 0, 1, 0, 1, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) > 64 {
			in = in[:64] // keep each input fast
		}
		clearScopes(t, e)
		eqRun(t, e, r.XDSAddr(), func(n int) (int, bool) {
			if len(in) == 0 {
				return 0, false
			}
			b := in[0]
			in = in[1:]
			return int(b) % n, true
		}, 12)
	})
}

// clearScopes deletes every resource of the scopes eqRun writes.
func clearScopes(t *testing.T, e *xdsEnv) {
	t.Helper()
	for _, s := range eqScopes {
		e.ApplyRequest(t, store.PlanRequest{Prune: true, PruneScope: s})
	}
}
