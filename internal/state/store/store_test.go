package store_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
	legationv1 "github.com/legation-io/legation/proto/legation/v1"
)

// TestMain checks that no test of the package leaves a goroutine behind:
// every test stops its etcd, clients, watches and views.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	// storeTestTimeout bounds what must happen; storeTestShortTimeout is
	// how long to wait for what must not.
	storeTestTimeout      = 20 * time.Second
	storeTestShortTimeout = 300 * time.Millisecond
)

// sameType compares resource types by identity: they are singletons.
var sameType = cmp.Comparer(func(a, b *resource.Type) bool { return a == b })

// newTestStore returns a store on c under prefix, with tweak applied to its
// config.
func newTestStore(t *testing.T, c *clientv3.Client, prefix string, tweak func(*store.Config)) *store.Store {
	t.Helper()
	cfg := store.Config{Client: c, Prefix: prefix, Writer: "store-test"}
	if tweak != nil {
		tweak(&cfg)
	}
	s, err := store.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func key(typ *resource.Type, scope, name string) store.Key {
	return store.Key{Type: typ, Scope: scope, Name: name}
}

// body builds a valid resource of typ named name; v varies its content
// and pad adds that many bytes to it.
func body(t testing.TB, typ *resource.Type, name string, v, pad int) *anypb.Any {
	t.Helper()
	var m proto.Message
	switch typ {
	case resource.Cluster:
		m = &clusterv3.Cluster{
			Name:                 name,
			ConnectTimeout:       durationpb.New(time.Duration(v+1) * time.Millisecond),
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
			AltStatName:          strings.Repeat("x", pad),
		}
	case resource.Endpoint:
		m = &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{
				LbEndpoints: []*endpointv3.LbEndpoint{{
					HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
						Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
							Address:       "127.0.0.1",
							PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(1000 + v)},
						}}},
						Hostname: strings.Repeat("x", pad),
					}},
				}},
			}},
		}
	case resource.Listener:
		m = &listenerv3.Listener{Name: name, StatPrefix: fmt.Sprintf("v%d%s", v, strings.Repeat("x", pad))}
	case resource.Route:
		m = &routev3.RouteConfiguration{Name: name, VirtualHosts: []*routev3.VirtualHost{{
			Name: fmt.Sprintf("v%d%s", v, strings.Repeat("x", pad)), Domains: []string{"*"},
		}}}
	default:
		t.Fatalf("no test body for %s", typ)
	}
	if err := resource.Validate(m); err != nil {
		t.Fatalf("test body %s %q: %v", typ, name, err)
	}
	b, err := resource.Marshal(typ, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func put(t testing.TB, typ *resource.Type, scope, name string, v int) store.Put {
	return store.Put{Key: key(typ, scope, name), Body: body(t, typ, name, v, 0)}
}

// clusters returns n cluster puts named prefix-000 and on.
func clusters(t testing.TB, scope, prefix string, n, v int) []store.Put {
	out := make([]store.Put, 0, n)
	for i := range n {
		out = append(out, put(t, resource.Cluster, scope, fmt.Sprintf("%s-%03d", prefix, i), v))
	}
	return out
}

func mustPlan(t *testing.T, s *store.Store, req store.PlanRequest) *store.Plan {
	t.Helper()
	plan, err := s.MakePlan(testbase.Context(t), req)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	return plan
}

func mustApply(t *testing.T, s *store.Store, req store.PlanRequest) *store.ApplyResult {
	t.Helper()
	res, err := s.Apply(testbase.Context(t), mustPlan(t, s, req), store.ApplyOptions{})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res
}

// etcdRev returns etcd's current revision.
func etcdRev(t *testing.T, c *clientv3.Client) int64 {
	t.Helper()
	resp, err := c.Get(testbase.Context(t), "/no-such-key")
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// countKeys returns how many keys etcd holds under prefix.
func countKeys(t *testing.T, c *clientv3.Client, prefix string) int64 {
	t.Helper()
	resp, err := c.Get(testbase.Context(t), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// rawWatch starts an etcd watch on prefix and returns once etcd has
// created it, so that it sees every later write. It ends with the test.
func rawWatch(t *testing.T, c *clientv3.Client, prefix string) clientv3.WatchChan {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	wch := c.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	select {
	case wr := <-wch:
		if !wr.Created {
			t.Fatalf("first watch response %+v is not the creation", wr)
		}
	case <-time.After(storeTestTimeout):
		t.Fatal("watch not created")
	}
	return wch
}

// collect reads watch responses until n events arrived, then checks that
// no more arrive for a short while.
func collect(t *testing.T, wch clientv3.WatchChan, n int) []clientv3.WatchResponse {
	t.Helper()
	var out []clientv3.WatchResponse
	got := 0
	deadline := time.After(storeTestTimeout)
	for got < n {
		select {
		case wr := <-wch:
			if err := wr.Err(); err != nil {
				t.Fatalf("watch: %v", err)
			}
			out = append(out, wr)
			got += len(wr.Events)
		case <-deadline:
			t.Fatalf("watch: %d events, want %d", got, n)
		}
	}
	select {
	case wr := <-wch:
		t.Fatalf("watch: unexpected events after the %d wanted: %v", n, wr.Events)
	case <-time.After(storeTestShortTimeout):
	}
	if got != n {
		t.Fatalf("watch: %d events, want %d", got, n)
	}
	return out
}

// TestApplyIsOneRevision: an apply of many resources is one etcd
// transaction, so one revision, and a watcher sees all of it at once
// (promise 5, docs/concepts/design.md).
func TestApplyIsOneRevision(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	s := newTestStore(t, c, "/one/", nil)
	var puts []store.Put
	for _, typ := range []*resource.Type{resource.Cluster, resource.Endpoint, resource.Listener, resource.Route} {
		for i := range 25 {
			puts = append(puts, put(t, typ, "default", fmt.Sprintf("r%02d", i), 1))
		}
	}
	wch := rawWatch(t, c, "/one/resources/")
	plan := mustPlan(t, s, store.PlanRequest{Puts: puts})
	for _, ch := range plan.Changes {
		if ch.Action != store.Create {
			t.Fatalf("%s: action %s, want %s", ch.Key, ch.Action, store.Create)
		}
	}
	res, err := s.Apply(testbase.Context(t), plan, store.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Revision != plan.Revision+1 {
		t.Errorf("apply revision %d, want %d (the plan's plus one)", res.Revision, plan.Revision+1)
	}
	if diff := cmp.Diff([]int64{res.Revision}, res.Revisions); diff != "" {
		t.Errorf("Revisions differ (-want +got):\n%s", diff)
	}
	if res.Lease != 0 {
		t.Errorf("Lease = %d, want 0 without a TTL", res.Lease)
	}

	kvs, err := c.Get(testbase.Context(t), "/one/resources/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(kvs.Kvs) != len(puts) {
		t.Fatalf("etcd holds %d keys, want %d", len(kvs.Kvs), len(puts))
	}
	for _, kv := range kvs.Kvs {
		if kv.ModRevision != res.Revision || kv.CreateRevision != res.Revision {
			t.Errorf("%s: mod_revision %d, create_revision %d; want both %d", kv.Key, kv.ModRevision, kv.CreateRevision, res.Revision)
		}
	}

	resps := collect(t, wch, len(puts))
	if len(resps) != 1 {
		t.Errorf("the apply came in %d watch responses, want 1", len(resps))
	}
	for _, wr := range resps {
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision != res.Revision || !ev.IsCreate() {
				t.Errorf("event %s %s at revision %d, want a create at %d", ev.Type, ev.Kv.Key, ev.Kv.ModRevision, res.Revision)
			}
		}
	}

	list, err := s.List(testbase.Context(t), store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Resources) != len(puts) || len(list.Malformed) != 0 {
		t.Errorf("List: %d resources, %d malformed; want %d and 0", len(list.Resources), len(list.Malformed), len(puts))
	}
}

// TestRevisions: what an apply does to revisions and mod_revisions.
func TestRevisions(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	s := newTestStore(t, c, "/rev/", nil)
	ctx := testbase.Context(t)
	a, b, cc := put(t, resource.Cluster, "default", "a", 1), put(t, resource.Cluster, "default", "b", 1), put(t, resource.Cluster, "default", "c", 1)
	r1 := mustApply(t, s, store.PlanRequest{Puts: []store.Put{a, b, cc}}).Revision

	t.Run("identical bodies are unchanged", func(t *testing.T) {
		plan := mustPlan(t, s, store.PlanRequest{Puts: []store.Put{a, b, cc}})
		for _, ch := range plan.Changes {
			if ch.Action != store.Unchanged {
				t.Errorf("%s: %s, want %s", ch.Key, ch.Action, store.Unchanged)
			}
		}
		res, err := s.Apply(ctx, plan, store.ApplyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Revision != r1 || len(res.Revisions) != 0 {
			t.Errorf("apply of nothing: revision %d, revisions %v; want %d and none", res.Revision, res.Revisions, r1)
		}
		if got := etcdRev(t, c); got != r1 {
			t.Errorf("etcd revision %d after an apply of nothing, want %d", got, r1)
		}
	})

	b2 := put(t, resource.Cluster, "default", "b", 2)
	d := put(t, resource.Cluster, "default", "d", 1)
	plan := mustPlan(t, s, store.PlanRequest{Puts: []store.Put{a, b2, d}})
	got := map[string]store.Action{}
	for _, ch := range plan.Changes {
		got[ch.Name] = ch.Action
	}
	if diff := cmp.Diff(map[string]store.Action{"a": store.Unchanged, "b": store.Update, "d": store.Create}, got); diff != "" {
		t.Errorf("plan actions differ (-want +got):\n%s", diff)
	}
	res, err := s.Apply(ctx, plan, store.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r2 := res.Revision
	if r2 != r1+1 {
		t.Errorf("revision %d, want %d", r2, r1+1)
	}
	for _, tc := range []struct {
		name          string
		create, mod   int64
		wantBody      *anypb.Any
		wantWrittenBy string
	}{
		{"a", r1, r1, a.Body, "store-test"},
		{"b", r1, r2, b2.Body, "store-test"},
		{"c", r1, r1, cc.Body, "store-test"},
		{"d", r2, r2, d.Body, "store-test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, rev, err := s.Get(ctx, key(resource.Cluster, "default", tc.name), 0)
			if err != nil {
				t.Fatal(err)
			}
			if rev < r2 {
				t.Errorf("Get read at %d, want at least %d", rev, r2)
			}
			if r.CreateRevision != tc.create || r.ModRevision != tc.mod {
				t.Errorf("create_revision %d, mod_revision %d; want %d and %d", r.CreateRevision, r.ModRevision, tc.create, tc.mod)
			}
			if diff := cmp.Diff(tc.wantBody, r.Envelope.GetBody(), protocmp.Transform()); diff != "" {
				t.Errorf("body differs (-want +got):\n%s", diff)
			}
			if r.Envelope.GetWrittenBy() != tc.wantWrittenBy || r.Envelope.GetWrittenAt() == nil {
				t.Errorf("written by %q at %v, want %q at some time", r.Envelope.GetWrittenBy(), r.Envelope.GetWrittenAt(), tc.wantWrittenBy)
			}
			if r.Lease != 0 || r.Envelope.GetTtl() != nil {
				t.Errorf("lease %d, ttl %v; want none", r.Lease, r.Envelope.GetTtl())
			}
		})
	}
}

// TestReadAtRevision: Get, List and Diff at past revisions, and what a
// compacted revision gives.
func TestReadAtRevision(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	// A tiny page size: a list at a past revision reads several pages, all
	// at that revision.
	s := newTestStore(t, c, "/past/", func(cfg *store.Config) { cfg.PageSize = 2 })
	ctx := testbase.Context(t)
	old := clusters(t, "default", "c", 5, 1) // c-000 ... c-004
	r1 := mustApply(t, s, store.PlanRequest{Puts: old}).Revision
	changed := put(t, resource.Cluster, "default", "c-001", 2)
	created := put(t, resource.Cluster, "default", "c-005", 1)
	r2 := mustApply(t, s, store.PlanRequest{
		Puts:    []store.Put{changed, created},
		Deletes: []store.Key{key(resource.Cluster, "default", "c-002")},
	}).Revision
	// Writes after r2 that the reads at r2 must not see.
	r3 := mustApply(t, s, store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "c-000", 3)}}).Revision

	names := func(l *store.ListResult) []string {
		var out []string
		for _, r := range l.Resources {
			out = append(out, fmt.Sprintf("%s@%d", r.Name, r.ModRevision))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		rev  int64
		want []string
	}{
		{"r1", r1, []string{
			fmt.Sprint("c-000@", r1), fmt.Sprint("c-001@", r1), fmt.Sprint("c-002@", r1), fmt.Sprint("c-003@", r1), fmt.Sprint("c-004@", r1),
		}},
		{"r2", r2, []string{
			fmt.Sprint("c-000@", r1), fmt.Sprint("c-001@", r2), fmt.Sprint("c-003@", r1), fmt.Sprint("c-004@", r1), fmt.Sprint("c-005@", r2),
		}},
		{"now", 0, []string{
			fmt.Sprint("c-000@", r3), fmt.Sprint("c-001@", r2), fmt.Sprint("c-003@", r1), fmt.Sprint("c-004@", r1), fmt.Sprint("c-005@", r2),
		}},
	} {
		t.Run("list at "+tc.name, func(t *testing.T) {
			l, err := s.List(ctx, store.ListOptions{Type: resource.Cluster, Revision: tc.rev})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, names(l)); diff != "" {
				t.Errorf("List differs (-want +got):\n%s", diff)
			}
			wantRev := tc.rev
			if wantRev == 0 {
				wantRev = r3
			}
			if l.Revision != wantRev {
				t.Errorf("ListResult.Revision = %d, want %d", l.Revision, wantRev)
			}
		})
	}

	t.Run("get", func(t *testing.T) {
		r, _, err := s.Get(ctx, changed.Key, r1)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(old[1].Body, r.Envelope.GetBody(), protocmp.Transform()); diff != "" {
			t.Errorf("Get at r1 differs from the first body (-want +got):\n%s", diff)
		}
		if _, _, err := s.Get(ctx, key(resource.Cluster, "default", "c-002"), r1); err != nil {
			t.Errorf("Get of c-002 at r1 (before its deletion): %v", err)
		}
		for _, rev := range []int64{0, r2} {
			if _, _, err := s.Get(ctx, key(resource.Cluster, "default", "c-002"), rev); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("Get of deleted c-002 at %d: %v, want ErrNotFound", rev, err)
			}
		}
		if _, _, err := s.Get(ctx, created.Key, r1); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get of c-005 before its creation: %v, want ErrNotFound", err)
		}
	})

	type line struct {
		Name   string
		Action store.Action
		Old    int64 // Old.ModRevision, 0 for none
		New    int64 // NewResource.ModRevision, 0 for none
	}
	lines := func(cs []store.Change) []line {
		var out []line
		for _, c := range cs {
			l := line{Name: c.Name, Action: c.Action}
			if c.Old != nil {
				l.Old = c.Old.ModRevision
			}
			if c.NewResource != nil {
				l.New = c.NewResource.ModRevision
				if !proto.Equal(c.New, c.NewResource.Envelope.GetBody()) {
					t.Errorf("%s: New is not NewResource's body", c.Key)
				}
			}
			out = append(out, l)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		r1, r2  int64
		want    []line
		wantRev int64
	}{
		{"r1 to r2", r1, r2, []line{
			{"c-001", store.Update, r1, r2},
			{"c-002", store.Delete, r1, 0},
			{"c-005", store.Create, 0, r2},
		}, r2},
		{"r1 to now", r1, 0, []line{
			{"c-000", store.Update, r1, r3},
			{"c-001", store.Update, r1, r2},
			{"c-002", store.Delete, r1, 0},
			{"c-005", store.Create, 0, r2},
		}, r3},
		{"r2 to r3", r2, r3, []line{{"c-000", store.Update, r1, r3}}, r3},
		{"nothing", r2, r2, nil, r2},
	} {
		t.Run("diff "+tc.name, func(t *testing.T) {
			got, rev, err := s.Diff(ctx, tc.r1, tc.r2)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, lines(got)); diff != "" {
				t.Errorf("Diff differs (-want +got):\n%s", diff)
			}
			if rev != tc.wantRev {
				t.Errorf("Diff revision %d, want %d", rev, tc.wantRev)
			}
		})
	}
	for _, tc := range []struct{ r1, r2 int64 }{{0, r2}, {r2, r1}, {-1, 0}} {
		if _, _, err := s.Diff(ctx, tc.r1, tc.r2); err == nil {
			t.Errorf("Diff(%d, %d) succeeded, want an error", tc.r1, tc.r2)
		}
	}

	t.Run("compacted", func(t *testing.T) {
		if _, err := c.Compact(ctx, r3); err != nil {
			t.Fatal(err)
		}
		_, listErr := s.List(ctx, store.ListOptions{Revision: r1})
		_, _, getErr := s.Get(ctx, changed.Key, r1)
		_, _, diffErr := s.Diff(ctx, r2, 0)
		for what, err := range map[string]error{"List": listErr, "Get": getErr, "Diff": diffErr} {
			if err == nil || !strings.Contains(err.Error(), "compacted") {
				t.Errorf("%s at a compacted revision: %v, want an error saying so", what, err)
			}
		}
		// The compaction revision itself can still be read.
		if _, err := s.List(ctx, store.ListOptions{Revision: r3}); err != nil {
			t.Errorf("List at the compaction revision: %v", err)
		}
	})
}

// TestApplyLimits: an apply beyond etcd's limits fails before anything is
// written and names the limit, unless chunked (promise 5,
// docs/concepts/design.md).
func TestApplyLimits(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)

	for _, tc := range []struct {
		name     string
		prefix   string
		tweak    func(*store.Config)
		puts     func(t *testing.T) []store.Put
		wantText []string
	}{
		{"max-txn-ops", "/ops/", nil,
			func(t *testing.T) []store.Put { return clusters(t, "default", "c", 200, 1) },
			[]string{"203 operations in one transaction (200 writes, its scope's apply marker, 2 for its history)", "--max-txn-ops (128)", "--chunked"}},
		{"max-request-bytes", "/bytes/", func(cfg *store.Config) { cfg.MaxRequestBytes = 4096 },
			func(t *testing.T) []store.Put {
				var puts []store.Put
				for i := range 10 {
					name := fmt.Sprintf("big-%d", i)
					puts = append(puts, store.Put{Key: key(resource.Cluster, "default", name), Body: body(t, resource.Cluster, name, 1, 1000)})
				}
				return puts
			},
			[]string{"--max-request-bytes (4096)", "--chunked"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t, c, tc.prefix, tc.tweak)
			plan := mustPlan(t, s, store.PlanRequest{Puts: tc.puts(t)})
			before := etcdRev(t, c)
			res, err := s.Apply(testbase.Context(t), plan, store.ApplyOptions{})
			if !errors.Is(err, store.ErrLimit) {
				t.Fatalf("Apply = %+v, %v; want an error wrapping ErrLimit", res, err)
			}
			for _, want := range tc.wantText {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if got := etcdRev(t, c); got != before {
				t.Errorf("etcd revision went from %d to %d: something was written", before, got)
			}
			if n := countKeys(t, c, tc.prefix); n != 0 {
				t.Errorf("%d keys written", n)
			}
		})
	}

	t.Run("chunked in make-before-break order", func(t *testing.T) {
		const maxOps = 8
		s := newTestStore(t, c, "/chunks/", func(cfg *store.Config) { cfg.MaxTxnOps = maxOps })
		// What the chunked apply deletes, written first.
		var doomed []store.Put
		for _, typ := range []*resource.Type{resource.Cluster, resource.Route, resource.Listener, resource.Endpoint} {
			for i := range 3 {
				doomed = append(doomed, put(t, typ, "default", fmt.Sprintf("old-%d", i), 1))
			}
		}
		mustApply(t, newTestStore(t, c, "/chunks/", nil), store.PlanRequest{Puts: doomed})
		// Puts listed in the reverse of the order they must be written in.
		var puts []store.Put
		for _, typ := range []*resource.Type{resource.Route, resource.Listener, resource.Endpoint, resource.Cluster} {
			for i := range 10 {
				puts = append(puts, put(t, typ, "default", fmt.Sprintf("new-%d", i), 1))
			}
		}
		var deletes []store.Key
		for _, p := range doomed {
			deletes = append(deletes, p.Key)
		}
		plan := mustPlan(t, s, store.PlanRequest{Puts: puts, Deletes: deletes})
		total := len(puts) + len(deletes)

		// Not chunked, it is refused.
		if _, err := s.Apply(testbase.Context(t), plan, store.ApplyOptions{}); !errors.Is(err, store.ErrLimit) {
			t.Fatalf("unchunked Apply: %v, want ErrLimit", err)
		}
		wch := rawWatch(t, c, "/chunks/resources/")
		res, err := s.Apply(testbase.Context(t), plan, store.ApplyOptions{Chunked: true})
		if err != nil {
			t.Fatalf("chunked Apply: %v", err)
		}
		// Each transaction also puts the scope's apply marker and its
		// history record, and prunes the history.
		room := maxOps - 3
		wantChunks := (total + room - 1) / room
		if len(res.Revisions) != wantChunks {
			t.Errorf("%d transactions (%v), want %d", len(res.Revisions), res.Revisions, wantChunks)
		}
		for i := 1; i < len(res.Revisions); i++ {
			if res.Revisions[i] <= res.Revisions[i-1] {
				t.Errorf("revisions %v not increasing", res.Revisions)
			}
		}
		if res.Revision != res.Revisions[len(res.Revisions)-1] {
			t.Errorf("Revision %d is not the last of %v", res.Revision, res.Revisions)
		}

		// The events, in revision order, go clusters, endpoints, listeners,
		// routes, then the deletions: listeners, routes, clusters,
		// endpoints (referring types first).
		rank := func(ev *clientv3.Event) int {
			typ, _, _ := strings.Cut(strings.TrimPrefix(string(ev.Kv.Key), "/chunks/resources/"), "/")
			order := map[string]int{"cluster": 0, "endpoint": 1, "listener": 2, "route": 3}
			if ev.Type == clientv3.EventTypeDelete {
				order = map[string]int{"listener": 10, "route": 11, "cluster": 12, "endpoint": 13}
			}
			r, ok := order[typ]
			if !ok {
				t.Fatalf("event on unexpected key %s", ev.Kv.Key)
			}
			return r
		}
		perRev := map[int64]int{}
		last, lastRev := -1, int64(0)
		for _, wr := range collect(t, wch, total) {
			for _, ev := range wr.Events {
				if ev.Kv.ModRevision < lastRev {
					t.Errorf("event at %d after one at %d", ev.Kv.ModRevision, lastRev)
				}
				lastRev = ev.Kv.ModRevision
				perRev[lastRev]++
				if r := rank(ev); r < last {
					t.Errorf("%s %s (revision %d) comes after a later kind of change", ev.Type, ev.Kv.Key, lastRev)
				} else {
					last = r
				}
			}
		}
		for rev, n := range perRev {
			if n > maxOps {
				t.Errorf("revision %d holds %d changes, more than %d", rev, n, maxOps)
			}
		}
		var gotRevs []int64
		for rev := range perRev {
			gotRevs = append(gotRevs, rev)
		}
		sort.Slice(gotRevs, func(i, j int) bool { return gotRevs[i] < gotRevs[j] })
		if diff := cmp.Diff(res.Revisions, gotRevs); diff != "" {
			t.Errorf("watched revisions differ from ApplyResult.Revisions (-result +watched):\n%s", diff)
		}

		// And by the keys' own revisions: every cluster was written before
		// any endpoint, and so on.
		l, err := s.List(testbase.Context(t), store.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Resources) != len(puts) {
			t.Fatalf("%d resources after the apply, want %d", len(l.Resources), len(puts))
		}
		minRev, maxRev := map[*resource.Type]int64{}, map[*resource.Type]int64{}
		for _, r := range l.Resources {
			if minRev[r.Type] == 0 || r.ModRevision < minRev[r.Type] {
				minRev[r.Type] = r.ModRevision
			}
			maxRev[r.Type] = max(maxRev[r.Type], r.ModRevision)
		}
		order := []*resource.Type{resource.Cluster, resource.Endpoint, resource.Listener, resource.Route}
		for i := 1; i < len(order); i++ {
			if maxRev[order[i-1]] > minRev[order[i]] {
				t.Errorf("a %s was written at %d, after a %s at %d", order[i-1], maxRev[order[i-1]], order[i], minRev[order[i]])
			}
		}
	})

	t.Run("chunked by bytes", func(t *testing.T) {
		s := newTestStore(t, c, "/chunkbytes/", func(cfg *store.Config) { cfg.MaxRequestBytes = 4096 })
		var puts []store.Put
		for i := range 10 {
			name := fmt.Sprintf("big-%d", i)
			puts = append(puts, store.Put{Key: key(resource.Cluster, "default", name), Body: body(t, resource.Cluster, name, 1, 1000)})
		}
		res, err := s.Apply(testbase.Context(t), mustPlan(t, s, store.PlanRequest{Puts: puts}), store.ApplyOptions{Chunked: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Revisions) < 3 {
			t.Errorf("%d transactions, want at least 3 (10 KB in 4 KB requests)", len(res.Revisions))
		}
		if n := countKeys(t, c, "/chunkbytes/resources/"); n != 10 {
			t.Errorf("%d keys written, want 10", n)
		}
	})

	t.Run("chunked but one resource too big", func(t *testing.T) {
		s := newTestStore(t, c, "/toobig/", func(cfg *store.Config) { cfg.MaxRequestBytes = 4096 })
		p := store.Put{Key: key(resource.Cluster, "default", "huge"), Body: body(t, resource.Cluster, "huge", 1, 5000)}
		_, err := s.Apply(testbase.Context(t), mustPlan(t, s, store.PlanRequest{Puts: []store.Put{p}}), store.ApplyOptions{Chunked: true})
		if !errors.Is(err, store.ErrLimit) || !strings.Contains(err.Error(), "--max-request-bytes (4096)") {
			t.Errorf("Apply: %v, want ErrLimit naming --max-request-bytes", err)
		}
		if n := countKeys(t, c, "/toobig/"); n != 0 {
			t.Errorf("%d keys written", n)
		}
	})

	t.Run("chunked within the limits is one transaction", func(t *testing.T) {
		s := newTestStore(t, c, "/onechunk/", nil)
		res, err := s.Apply(testbase.Context(t), mustPlan(t, s, store.PlanRequest{Puts: clusters(t, "default", "c", 100, 1)}), store.ApplyOptions{Chunked: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Revisions) != 1 {
			t.Errorf("%d transactions, want 1", len(res.Revisions))
		}
	})
}

// TestEtcdRefusesLimit: when etcd's limits are lower than the store
// thinks, etcd's refusal is reported as a limit, naming it, and nothing is
// written.
func TestEtcdRefusesLimit(t *testing.T) {
	e := storetest.Start(t, storetest.Options{MaxTxnOps: 8, MaxRequestBytes: 16 << 10})
	c := e.Client(t)
	bigPuts := func(t *testing.T, n, size int) []store.Put {
		var puts []store.Put
		for i := range n {
			name := fmt.Sprintf("big-%d", i)
			puts = append(puts, store.Put{Key: key(resource.Cluster, "default", name), Body: body(t, resource.Cluster, name, 1, size)})
		}
		return puts
	}
	for _, tc := range []struct {
		name     string
		puts     func(t *testing.T) []store.Put
		wantText []string
	}{
		{"max-txn-ops", func(t *testing.T) []store.Put { return clusters(t, "default", "c", 20, 1) },
			[]string{"--max-txn-ops", "assumed 128"}},
		{"max-request-bytes", func(t *testing.T) []store.Put { return bigPuts(t, 4, 10<<10) },
			[]string{"--max-request-bytes", "assumed 1572864"}},
		// Beyond --max-request-bytes plus gRPC's allowance, gRPC refuses
		// the message before etcd looks at it.
		{"max-request-bytes far beyond", func(t *testing.T) []store.Put { return bigPuts(t, 4, 200<<10) },
			[]string{"--max-request-bytes", "assumed 1572864"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := "/" + tc.name + "/"
			s := newTestStore(t, c, prefix, nil)
			plan := mustPlan(t, s, store.PlanRequest{Puts: tc.puts(t)})
			before := etcdRev(t, c)
			_, err := s.Apply(testbase.Context(t), plan, store.ApplyOptions{})
			if !errors.Is(err, store.ErrLimit) {
				t.Fatalf("Apply: %v, want an error wrapping ErrLimit", err)
			}
			for _, want := range tc.wantText {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if got := etcdRev(t, c); got != before {
				t.Errorf("etcd revision went from %d to %d", before, got)
			}
			if n := countKeys(t, c, prefix); n != 0 {
				t.Errorf("%d keys written", n)
			}
		})
	}
}

// TestLimitEstimate: a store told etcd's real limits never sends what
// etcd refuses: its estimate of a transaction's size is not below etcd's
// count, however the resources are sized.
func TestLimitEstimate(t *testing.T) {
	const maxBytes = 16 << 10
	e := storetest.Start(t, storetest.Options{MaxTxnOps: 8, MaxRequestBytes: maxBytes})
	c := e.Client(t)
	s := newTestStore(t, c, "/estimate/", func(cfg *store.Config) {
		cfg.MaxTxnOps = 8
		cfg.MaxRequestBytes = maxBytes
		cfg.Writer = strings.Repeat("w", 100)
	})
	var puts []store.Put
	for i := range 60 {
		name := fmt.Sprintf("%s-%d", strings.Repeat("n", i*3), i)
		puts = append(puts, store.Put{Key: key(resource.Cluster, "default", name), Body: body(t, resource.Cluster, name, i, (i*977)%4000)})
	}
	res, err := s.Apply(testbase.Context(t), mustPlan(t, s, store.PlanRequest{Puts: puts, TTL: time.Minute}), store.ApplyOptions{Chunked: true})
	if err != nil {
		t.Fatalf("chunked Apply within etcd's limits: %v", err)
	}
	if len(res.Revisions) < 60/8 {
		t.Errorf("%d transactions, want at least %d", len(res.Revisions), 60/8)
	}
	// Unchunked, the largest apply the store accepts is accepted by etcd.
	for n := 1; n <= 8; n++ {
		prefix := fmt.Sprintf("/estimate-%d/", n)
		s := newTestStore(t, c, prefix, func(cfg *store.Config) {
			cfg.MaxTxnOps = 8
			cfg.MaxRequestBytes = maxBytes
		})
		var puts []store.Put
		for i := range n {
			name := fmt.Sprintf("c-%d", i)
			puts = append(puts, store.Put{Key: key(resource.Cluster, "default", name), Body: body(t, resource.Cluster, name, i, 0)})
		}
		// Grow the last body until the store refuses the apply.
		pad, step := 0, 4096
		for step > 0 {
			last := &puts[n-1]
			last.Body = body(t, resource.Cluster, last.Name, 0, pad+step)
			plan := mustPlan(t, s, store.PlanRequest{Puts: puts})
			if _, err := s.Apply(testbase.Context(t), plan, store.ApplyOptions{}); err == nil {
				// Accepted and written: remove it again to try larger.
				var keys []store.Key
				for _, p := range puts {
					keys = append(keys, p.Key)
				}
				mustApply(t, s, store.PlanRequest{Deletes: keys})
				pad += step
				continue
			} else if !errors.Is(err, store.ErrLimit) {
				t.Fatal(err)
			} else if strings.Contains(err.Error(), "etcd refused") {
				t.Fatalf("%d puts, last padded by %d: the store sent what etcd refuses: %v", n, pad+step, err)
			}
			step /= 2
		}
	}
}

// TestApplyConflict: an apply whose keys changed since the plan writes
// nothing and says so.
func TestApplyConflict(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	for _, tc := range []struct {
		name string
		// plan is made after a and b exist; then behind changes etcd.
		plan   store.PlanRequest
		behind store.PlanRequest
	}{
		{"updated key changed",
			store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "a", 2), put(t, resource.Cluster, "default", "c", 1)}},
			store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "a", 3)}}},
		{"created key created",
			store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "a", 2), put(t, resource.Cluster, "default", "c", 1)}},
			store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "c", 3)}}},
		{"deleted key changed",
			store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "c", 1)}, Deletes: []store.Key{key(resource.Cluster, "default", "b")}},
			store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "b", 3)}}},
		{"updated key deleted",
			store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "a", 2), put(t, resource.Cluster, "default", "c", 1)}},
			store.PlanRequest{Deletes: []store.Key{key(resource.Cluster, "default", "a")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := "/" + strings.ReplaceAll(tc.name, " ", "-") + "/"
			s := newTestStore(t, c, prefix, nil)
			mustApply(t, s, store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "a", 1), put(t, resource.Cluster, "default", "b", 1)}})
			plan := mustPlan(t, s, tc.plan)
			mustApply(t, s, tc.behind)
			before, err := s.List(testbase.Context(t), store.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			res, err := s.Apply(testbase.Context(t), plan, store.ApplyOptions{})
			if !errors.Is(err, store.ErrConflict) {
				t.Fatalf("Apply = %+v, %v; want ErrConflict", res, err)
			}
			after, err := s.List(testbase.Context(t), store.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if after.Revision != before.Revision {
				t.Errorf("revision went from %d to %d", before.Revision, after.Revision)
			}
			if diff := cmp.Diff(before.Resources, after.Resources, protocmp.Transform(), sameType); diff != "" {
				t.Errorf("resources changed (-before +after):\n%s", diff)
			}
		})
	}
}

// TestApplyTTL: a TTL puts every written resource under one lease.
func TestApplyTTL(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	s := newTestStore(t, c, "/ttl/", nil)
	ctx := testbase.Context(t)
	puts := []store.Put{
		put(t, resource.Cluster, "default", "a", 1),
		put(t, resource.Endpoint, "default", "a", 1),
		put(t, resource.Listener, "default", "l", 1),
	}
	// One of them exists unchanged already: a TTL rewrites it too.
	mustApply(t, s, store.PlanRequest{Puts: puts[:1]})
	plan := mustPlan(t, s, store.PlanRequest{Puts: puts, TTL: 5 * time.Second})
	for _, ch := range plan.Changes {
		if ch.Action == store.Unchanged {
			t.Errorf("%s unchanged in a plan with a TTL", ch.Key)
		}
	}
	res, err := s.Apply(ctx, plan, store.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Lease == 0 {
		t.Fatal("no lease")
	}
	l, err := s.List(ctx, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Resources) != len(puts) {
		t.Fatalf("%d resources, want %d", len(l.Resources), len(puts))
	}
	for _, r := range l.Resources {
		if r.Lease != res.Lease {
			t.Errorf("%s: lease %x, want %x", r.Key, r.Lease, res.Lease)
		}
		if got := r.Envelope.GetTtl().AsDuration(); got != 5*time.Second {
			t.Errorf("%s: envelope ttl %s, want 5s", r.Key, got)
		}
	}
	ttl, err := c.TimeToLive(ctx, clientv3.LeaseID(res.Lease), clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatal(err)
	}
	if ttl.GrantedTTL != 5 || ttl.TTL <= 0 || len(ttl.Keys) != len(puts) {
		t.Errorf("lease: granted %ds, %ds left, %d keys; want 5s, some left, %d keys", ttl.GrantedTTL, ttl.TTL, len(ttl.Keys), len(puts))
	}

	// Without a TTL, the same resources are rewritten without a lease.
	plan = mustPlan(t, s, store.PlanRequest{Puts: puts})
	for _, ch := range plan.Changes {
		if ch.Action != store.Update {
			t.Errorf("%s: %s, want %s (to drop the lease)", ch.Key, ch.Action, store.Update)
		}
	}
	// Under a TTL again, then the lease ends: they all go in one revision.
	res = mustApply(t, s, store.PlanRequest{Puts: puts, TTL: 5 * time.Second})
	wch := rawWatch(t, c, "/ttl/")
	if _, err := c.Revoke(ctx, clientv3.LeaseID(res.Lease)); err != nil {
		t.Fatal(err)
	}
	resps := collect(t, wch, len(puts))
	if len(resps) != 1 {
		t.Errorf("the expiry came in %d watch responses, want 1", len(resps))
	}
	if n := countKeys(t, c, "/ttl/resources/"); n != 0 {
		t.Errorf("%d keys left after the lease ended", n)
	}

	for _, bad := range []time.Duration{-time.Second, 500 * time.Millisecond} {
		if _, err := s.MakePlan(ctx, store.PlanRequest{Puts: puts, TTL: bad}); err == nil {
			t.Errorf("MakePlan with TTL %s succeeded, want an error", bad)
		}
	}
}

// TestPruneAndDelete: prune deletes exactly the scope's resources not
// named; deletes name existing resources.
func TestPruneAndDelete(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	s := newTestStore(t, c, "/prune/", nil)
	ctx := testbase.Context(t)
	mustApply(t, s, store.PlanRequest{Puts: []store.Put{
		put(t, resource.Cluster, "default", "a", 1),
		put(t, resource.Cluster, "default", "b", 1),
		put(t, resource.Listener, "default", "l", 1),
		put(t, resource.Cluster, "edge", "a", 1),
		put(t, resource.Cluster, "edge", "x", 1),
		// A scope whose name starts like the pruned one.
		put(t, resource.Cluster, "default2", "z", 1),
	}})
	plan := mustPlan(t, s, store.PlanRequest{
		Puts:       []store.Put{put(t, resource.Cluster, "default", "a", 1), put(t, resource.Route, "default", "r", 1)},
		Prune:      true,
		PruneScope: "default",
	})
	var got []string
	for _, ch := range plan.Changes {
		got = append(got, ch.Action.String()+" "+ch.Key.String())
	}
	want := []string{
		"unchanged cluster/default/a",
		"deleted cluster/default/b",
		"deleted listener/default/l",
		"created route/default/r",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("plan differs (-want +got):\n%s", diff)
	}
	if _, err := s.Apply(ctx, plan, store.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := s.List(ctx, store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, r := range l.Resources {
		got = append(got, r.Key.String())
	}
	want = []string{"cluster/default/a", "cluster/default2/z", "cluster/edge/a", "cluster/edge/x", "route/default/r"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("resources after the prune differ (-want +got):\n%s", diff)
	}

	t.Run("delete", func(t *testing.T) {
		_, err := s.MakePlan(ctx, store.PlanRequest{Deletes: []store.Key{key(resource.Cluster, "edge", "nope")}})
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("delete of a missing key: %v, want ErrNotFound", err)
		}
		// A name in another scope or type is another resource.
		_, err = s.MakePlan(ctx, store.PlanRequest{Deletes: []store.Key{key(resource.Listener, "edge", "x")}})
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("delete of listener edge/x: %v, want ErrNotFound", err)
		}
		mustApply(t, s, store.PlanRequest{Deletes: []store.Key{key(resource.Cluster, "edge", "x")}})
		if _, _, err := s.Get(ctx, key(resource.Cluster, "edge", "x"), 0); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get after delete: %v, want ErrNotFound", err)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		a := put(t, resource.Cluster, "edge", "a", 1)
		wrongType := a
		wrongType.Body = body(t, resource.Listener, "a", 1, 0)
		wrongName := a
		wrongName.Name = "b"
		noName := put(t, resource.Cluster, "edge", "a", 1)
		noName.Name = ""
		// A listener whose typed_config breaks the rules of its own type:
		// only the deep walk into the Any finds it.
		hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
			RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: "r", ConfigSource: &corev3.ConfigSource{
				ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		badListener, err := resource.Marshal(resource.Listener, &listenerv3.Listener{Name: "l", ApiListener: &listenerv3.ApiListener{ApiListener: hcm}})
		if err != nil {
			t.Fatal(err)
		}
		badHCM := store.Put{Key: key(resource.Listener, "edge", "l"), Body: badListener}
		for _, tc := range []struct {
			name string
			req  store.PlanRequest
			want string
		}{
			{"named twice", store.PlanRequest{Puts: []store.Put{a, a}}, "store: cluster/edge/a named twice"},
			{"written and deleted", store.PlanRequest{Puts: []store.Put{a}, Deletes: []store.Key{a.Key}}, "store: cluster/edge/a is both written and deleted"},
			{"bad scope", store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "a/b", "a", 1)}}, `store: scope "a/b" holds '/': scopes may not hold '/', spaces or control characters`},
			{"body of another type", store.PlanRequest{Puts: []store.Put{wrongType}}, `store: cluster/edge/a: body is "type.googleapis.com/envoy.config.listener.v3.Listener", want "type.googleapis.com/envoy.config.cluster.v3.Cluster"`},
			{"body naming another resource", store.PlanRequest{Puts: []store.Put{wrongName}}, `store: cluster/edge/b: body names "a"`},
			{"no name", store.PlanRequest{Puts: []store.Put{noName}}, `store: cluster/edge/: empty name: every resource needs a non-empty name`},
			{"xdstp name not normalized", store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "edge", "xdstp://a/envoy.config.cluster.v3.Cluster/c?b=1&a=2", 1)}},
				`store: cluster/edge/xdstp://a/envoy.config.cluster.v3.Cluster/c?b=1&a=2: an xdstp name is stored in its normalized form, "xdstp://a/envoy.config.cluster.v3.Cluster/c?a=2&b=1"`},
			{"xdstp name of another type", store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "edge", "xdstp://a/envoy.config.route.v3.RouteConfiguration/c", 1)}},
				`store: cluster/edge/xdstp://a/envoy.config.route.v3.RouteConfiguration/c: name "xdstp://a/envoy.config.route.v3.RouteConfiguration/c": its type segment "envoy.config.route.v3.RouteConfiguration" is not "envoy.config.cluster.v3.Cluster", the message of a cluster`},
			{"invalid typed_config", store.PlanRequest{Puts: []store.Put{a, badHCM}}, `store: listener/edge/l: api_listener.api_listener(envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager).stat_prefix: value length must be at least 1 runes; api_listener.api_listener(envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager).http_filters: no router filter (type.googleapis.com/envoy.extensions.filters.http.router.v3.Router): the last HTTP filter must be the router`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := s.MakePlan(ctx, tc.req)
				if err == nil || err.Error() != tc.want {
					t.Errorf("MakePlan: %v, want %s", err, tc.want)
				}
			})
		}
	})
}

// envelope encodes an envelope holding m, as another tool might write it.
func envelope(t testing.TB, m proto.Message) []byte {
	t.Helper()
	env := &legationv1.Envelope{}
	if m != nil {
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		env.Body = a
	}
	b, err := proto.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMalformedValues: values in etcd that do not decode are reported
// apart and never hide the others (promise 10, docs/concepts/design.md).
func TestMalformedValues(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	s := newTestStore(t, c, "/bad/", nil)
	ctx := testbase.Context(t)
	mustApply(t, s, store.PlanRequest{Puts: []store.Put{
		put(t, resource.Cluster, "default", "a", 1),
		put(t, resource.Cluster, "default", "z", 1),
		put(t, resource.Listener, "default", "l", 1),
	}})
	bad := map[string][]byte{
		"cluster/default/garbage":   []byte("\xff\xfe\x00garbage"),
		"cluster/default/wrongtype": envelope(t, &listenerv3.Listener{Name: "wrongtype"}),
		"cluster/default/wrongname": envelope(t, &clusterv3.Cluster{Name: "other"}),
		"cluster/default/nobody":    envelope(t, nil),
		"cluster/bad scope/x":       envelope(t, &clusterv3.Cluster{Name: "x"}),
		"nosuchtype/default/x":      envelope(t, &clusterv3.Cluster{Name: "x"}),
		"clusters/default/x":        envelope(t, &clusterv3.Cluster{Name: "x"}), // an alias is not a key's type
	}
	for k, v := range bad {
		if _, err := c.Put(ctx, "/bad/resources/"+k, string(v)); err != nil {
			t.Fatal(err)
		}
	}
	check := func(t *testing.T, o store.ListOptions, wantKeys, wantBad []string) {
		t.Helper()
		l, err := s.List(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		var got, gotBad []string
		for _, r := range l.Resources {
			got = append(got, r.Key.String())
		}
		for _, m := range l.Malformed {
			gotBad = append(gotBad, strings.TrimPrefix(m.EtcdKey, "/bad/resources/"))
			if !errors.Is(m.Err, store.ErrMalformed) {
				t.Errorf("%s: error %v does not wrap ErrMalformed", m.EtcdKey, m.Err)
			}
			if m.ModRevision == 0 {
				t.Errorf("%s: no mod revision", m.EtcdKey)
			}
		}
		if diff := cmp.Diff(wantKeys, got); diff != "" {
			t.Errorf("resources differ (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantBad, gotBad); diff != "" {
			t.Errorf("malformed keys differ (-want +got):\n%s", diff)
		}
	}
	t.Run("list all", func(t *testing.T) {
		check(t, store.ListOptions{},
			[]string{"cluster/default/a", "cluster/default/z", "listener/default/l"},
			[]string{"cluster/bad scope/x", "cluster/default/garbage", "cluster/default/nobody", "cluster/default/wrongname", "cluster/default/wrongtype", "clusters/default/x", "nosuchtype/default/x"})
	})
	t.Run("list clusters of default", func(t *testing.T) {
		check(t, store.ListOptions{Type: resource.Cluster, Scope: "default"},
			[]string{"cluster/default/a", "cluster/default/z"},
			[]string{"cluster/default/garbage", "cluster/default/nobody", "cluster/default/wrongname", "cluster/default/wrongtype"})
	})
	t.Run("get", func(t *testing.T) {
		for _, name := range []string{"garbage", "wrongtype", "wrongname", "nobody"} {
			if _, _, err := s.Get(ctx, key(resource.Cluster, "default", name), 0); !errors.Is(err, store.ErrMalformed) {
				t.Errorf("Get %s: %v, want ErrMalformed", name, err)
			}
		}
	})
	t.Run("overwritten and pruned like any other", func(t *testing.T) {
		plan := mustPlan(t, s, store.PlanRequest{
			Puts:       []store.Put{put(t, resource.Cluster, "default", "a", 1), put(t, resource.Cluster, "default", "wrongname", 1)},
			Prune:      true,
			PruneScope: "default",
		})
		if _, err := s.Apply(ctx, plan, store.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
		check(t, store.ListOptions{},
			[]string{"cluster/default/a", "cluster/default/wrongname"},
			[]string{"cluster/bad scope/x", "clusters/default/x", "nosuchtype/default/x"})
	})
}

// recvEvent waits for the next watch event.
func recvEvent(t *testing.T, events <-chan store.WatchEvent, errc <-chan error) store.WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatalf("watch ended: %v", <-errc)
		}
		return ev
	case <-time.After(storeTestTimeout):
		t.Fatal("no watch event")
	}
	return store.WatchEvent{}
}

// TestWatch: one WatchEvent per etcd revision, with all its changes.
func TestWatch(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	s := newTestStore(t, c, "/watch/", nil)
	r1 := mustApply(t, s, store.PlanRequest{Puts: []store.Put{
		put(t, resource.Cluster, "default", "a", 1),
		put(t, resource.Cluster, "default", "b", 1),
	}}).Revision

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, errc := s.Watch(ctx, r1)

	a2 := put(t, resource.Cluster, "default", "a", 2)
	r2 := mustApply(t, s, store.PlanRequest{
		Puts:    append([]store.Put{a2}, clusters(t, "default", "n", 50, 1)...),
		Deletes: []store.Key{key(resource.Cluster, "default", "b")},
	}).Revision
	r3 := mustApply(t, s, store.PlanRequest{Deletes: []store.Key{key(resource.Cluster, "default", "n-000")}}).Revision
	garbage, err := c.Put(testbase.Context(t), "/watch/resources/cluster/default/junk", "junk")
	if err != nil {
		t.Fatal(err)
	}
	r4 := garbage.Header.Revision
	// Outside the resources directory: not a resource change.
	if _, err := c.Put(testbase.Context(t), "/watch/other", "x"); err != nil {
		t.Fatal(err)
	}

	ev := recvEvent(t, events, errc)
	if ev.Revision != r2 || len(ev.Changes) != 52 || len(ev.Malformed) != 0 {
		t.Fatalf("first event: revision %d, %d changes, %d malformed; want %d, 52, 0", ev.Revision, len(ev.Changes), len(ev.Malformed), r2)
	}
	byName := map[string]store.Change{}
	for _, ch := range ev.Changes {
		byName[ch.Name] = ch
	}
	if ch := byName["a"]; ch.Action != store.Update || ch.Old == nil || ch.Old.ModRevision != r1 ||
		ch.NewResource == nil || ch.NewResource.ModRevision != r2 || !proto.Equal(ch.New, a2.Body) {
		t.Errorf("change of a: %+v", ch)
	}
	if ch := byName["b"]; ch.Action != store.Delete || ch.Old == nil || ch.Old.ModRevision != r1 || ch.New != nil {
		t.Errorf("change of b: %+v", ch)
	}
	if ch := byName["n-049"]; ch.Action != store.Create || ch.Old != nil || ch.NewResource.CreateRevision != r2 {
		t.Errorf("change of n-049: %+v", ch)
	}

	ev = recvEvent(t, events, errc)
	if ev.Revision != r3 || len(ev.Changes) != 1 || ev.Changes[0].Action != store.Delete || ev.Changes[0].Name != "n-000" {
		t.Errorf("second event: %+v, want the delete of n-000 at %d", ev, r3)
	}
	ev = recvEvent(t, events, errc)
	if ev.Revision != r4 || len(ev.Changes) != 0 || len(ev.Malformed) != 1 || ev.Malformed[0].EtcdKey != "/watch/resources/cluster/default/junk" {
		t.Errorf("third event: %+v, want the malformed junk at %d", ev, r4)
	}
	select {
	case ev := <-events:
		t.Errorf("unexpected event %+v", ev)
	case <-time.After(storeTestShortTimeout):
	}

	// Cancelling ends the watch without an error.
	cancel()
	for range events {
	}
	if err, ok := <-errc; ok {
		t.Errorf("watch error after cancel: %v", err)
	}

	t.Run("from now", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		events, errc := s.Watch(ctx, 0)
		// A watch from now may start after a write made right after it is
		// asked for; wait until it sees a write, then check the next.
		deadline := time.Now().Add(storeTestTimeout)
		var ev store.WatchEvent
		for i := 0; ; i++ {
			r := mustApply(t, s, store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "now", i)}}).Revision
			select {
			case ev = <-events:
			case <-time.After(storeTestShortTimeout):
				if time.Now().After(deadline) {
					t.Fatal("no event")
				}
				continue
			}
			if ev.Revision > r {
				t.Fatalf("event at %d after a write at %d", ev.Revision, r)
			}
			break
		}
		r := mustApply(t, s, store.PlanRequest{Deletes: []store.Key{key(resource.Cluster, "default", "now")}}).Revision
		for ev.Revision < r {
			ev = recvEvent(t, events, errc)
		}
		if ev.Revision != r || len(ev.Changes) != 1 || ev.Changes[0].Action != store.Delete {
			t.Errorf("event %+v, want the delete at %d", ev, r)
		}
	})

	t.Run("compacted", func(t *testing.T) {
		if _, err := c.Compact(testbase.Context(t), r4); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		events, errc := s.Watch(ctx, r1)
		select {
		case err := <-errc:
			if err == nil || !strings.Contains(err.Error(), "compacted") {
				t.Errorf("watch from a compacted revision: %v, want an error saying so", err)
			}
		case <-time.After(storeTestTimeout):
			t.Fatal("no error from a watch from a compacted revision")
		}
		if _, ok := <-events; ok {
			t.Error("events still open after the error")
		}
	})
}

func TestConfig(t *testing.T) {
	c := &clientv3.Client{} // never dialed: New does no I/O
	for _, tc := range []struct {
		name string
		cfg  store.Config
		want string
	}{
		{"defaults", store.Config{Client: c}, ""},
		{"no client", store.Config{}, "store: Client is required"},
		{"prefix without leading slash", store.Config{Client: c, Prefix: "x/"}, `store: prefix "x/" must start and end with '/'`},
		{"prefix without trailing slash", store.Config{Client: c, Prefix: "/x"}, `store: prefix "/x" must start and end with '/'`},
		{"negative ops", store.Config{Client: c, MaxTxnOps: -1}, "store: MaxTxnOps -1 must be positive"},
		{"tiny requests", store.Config{Client: c, MaxRequestBytes: 100}, "store: MaxRequestBytes 100 is below 1 KiB"},
		{"negative page", store.Config{Client: c, PageSize: -1}, "store: PageSize -1 must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := store.New(tc.cfg)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("New: %q, want %q", got, tc.want)
			}
			if err == nil && s.Prefix() != keyspace.DefaultPrefix {
				t.Errorf("Prefix() = %q, want %q", s.Prefix(), keyspace.DefaultPrefix)
			}
		})
	}
	s, err := store.New(store.Config{Client: c, Prefix: "/p/"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.EtcdKey(key(resource.Route, "edge", "a/b")), "/p/resources/route/edge/a/b"; got != want {
		t.Errorf("EtcdKey = %q, want %q", got, want)
	}
}
