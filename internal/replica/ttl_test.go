package replica_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/state/lease"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// applyTTL writes puts under one lease of ttl and returns the revision
// and the lease.
func (e *xdsEnv) applyTTL(t *testing.T, ttl time.Duration, puts ...store.Put) (int64, int64) {
	t.Helper()
	res := e.ApplyRequest(t, store.PlanRequest{Puts: puts, TTL: ttl})
	return res.Revision, res.Lease
}

// atOrAfter reports whether version v is revision rev or later: the
// view's revision also moves when replicas write their status records.
func atOrAfter(v string, rev int64) bool {
	n, err := strconv.ParseInt(v, 10, 64)
	return err == nil && n >= rev
}

// ttlNode is a node that advertises what promise 8 needs.
func ttlNode(id, cluster string) *corev3.Node {
	return &corev3.Node{Id: id, Cluster: cluster, ClientFeatures: []string{lease.FeatureTTL, lease.FeatureResourceInSotW}}
}

// wrapped is one resource of a SotW response: plain, or wrapped in a
// discovery.v3.Resource.
type wrapped struct {
	name    string
	body    *anypb.Any // nil for a heartbeat
	ttl     time.Duration
	isWrap  bool
	version string
}

// unwrap decodes the resources of a SotW response.
func unwrap(t *testing.T, resp *discoveryv3.DiscoveryResponse, typ *resource.Type) map[string]wrapped {
	t.Helper()
	out := map[string]wrapped{}
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() == typ.URL {
			m, err := a.UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			out[typ.NameOf(m)] = wrapped{name: typ.NameOf(m), body: a}
			continue
		}
		var r discoveryv3.Resource
		if err := a.UnmarshalTo(&r); err != nil {
			t.Fatalf("a resource of type %s: %v", a.GetTypeUrl(), err)
		}
		out[r.GetName()] = wrapped{name: r.GetName(), body: r.GetResource(), ttl: r.GetTtl().AsDuration(), isWrap: true, version: r.GetVersion()}
	}
	return out
}

// checkTTL fails unless w is wrapped with a TTL in (0, max].
func checkTTL(t *testing.T, what string, w wrapped, max time.Duration) {
	t.Helper()
	if !w.isWrap || w.ttl <= 0 || w.ttl > max {
		t.Errorf("%s: wrapped %v with ttl %s, want wrapped with a ttl in (0, %s]", what, w.isWrap, w.ttl, max)
	}
}

func byName(rs []*discoveryv3.Resource) map[string]*discoveryv3.Resource {
	m := map[string]*discoveryv3.Resource{}
	for _, r := range rs {
		m[r.GetName()] = r
	}
	return m
}

// TestTTLResources: resources applied with a TTL reach SotW and delta
// clients that advertise TTL support wrapped with (or carrying) the time
// their lease has left; a refresh sends them a heartbeat at the same
// version (without the body, but for SotW full-state types); when the
// lease expires the resources are removed. Clients without the features
// get plain resources and never a heartbeat.
func TestTTLResources(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	perm := xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("perm", 100))
	rev1 := e.Apply(t, []store.Put{perm})
	temp := xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("temp", 100))
	flag := xdstest.Put(t, resource.Runtime, store.DefaultScope, xdstest.Runtime("override", "feature.x", "on"))
	const ttl = 3 * time.Second
	rev2, leaseID := e.applyTTL(t, ttl, temp, flag)
	if rev2 <= rev1 || leaseID == 0 {
		t.Fatalf("apply with a TTL: revision %d, lease %d", rev2, leaseID)
	}
	r := startXDS(t, e.config(t), rev2)
	cc := dial(t, r)

	// A SotW client with both features.
	s := xdstest.OpenSotW(t, cc)
	s.Send(&discoveryv3.DiscoveryRequest{Node: ttlNode("ttl", "c1"), TypeUrl: resource.Cluster.URL})
	cds := s.Expect()
	got := unwrap(t, cds, resource.Cluster)
	if !atOrAfter(cds.GetVersionInfo(), rev2) || len(got) != 2 || got["perm"].isWrap {
		t.Fatalf("CDS: version %s, %v; want version %d, perm plain and temp wrapped", cds.GetVersionInfo(), got, rev2)
	}
	checkTTL(t, "CDS temp", got["temp"], ttl)
	if !proto.Equal(got["temp"].body, temp.Body) {
		t.Errorf("CDS temp: body %v, want %v", got["temp"].body, temp.Body)
	}
	s.Ack(cds)
	s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.Runtime.URL, ResourceNames: []string{"override"}})
	rtds := s.Expect()
	rtdsAt := time.Now()
	rt := unwrap(t, rtds, resource.Runtime)["override"]
	checkTTL(t, "RTDS override", rt, ttl)
	s.Ack(rtds, "override")

	// A SotW client without the features.
	plain := xdstest.OpenSotW(t, cc)
	plain.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "plain", Cluster: "c1", ClientFeatures: []string{lease.FeatureResourceInSotW}}, TypeUrl: resource.Cluster.URL})
	pcds := plain.Expect()
	checkResponse(t, "CDS without TTL support", pcds, xdstest.Version(rev2), resource.Cluster, perm, temp)
	plain.Ack(pcds)

	// Delta clients, with and without the feature.
	d := xdstest.OpenDelta(t, cc)
	d.Send(&discoveryv3.DeltaDiscoveryRequest{Node: ttlNode("delta-ttl", "c1"), TypeUrl: resource.Cluster.URL})
	dr := byName(d.ExpectAck().GetResources())
	if dr["perm"].GetTtl() != nil || dr["temp"].GetTtl() == nil || dr["temp"].GetTtl().AsDuration() > ttl || dr["temp"].GetResource() == nil {
		t.Fatalf("delta CDS: %v; want perm without a ttl and temp with one in (0, %s]", dr, ttl)
	}
	tempVersion := dr["temp"].GetVersion()
	dp := xdstest.OpenDelta(t, cc)
	dp.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "delta-plain", Cluster: "c1"}, TypeUrl: resource.Cluster.URL})
	if dpr := byName(dp.ExpectAck().GetResources()); dpr["temp"].GetTtl() != nil || len(dpr) != 2 {
		t.Fatalf("delta CDS without TTL support: %v; want both, without a ttl", dpr)
	}

	// /debug/streams shows the TTL'd resources of each stream.
	xdstest.WaitFor(t, "the TTL'd resources in /debug/streams", func() (bool, string) {
		_, body := get(t, r, "/debug/streams")
		return strings.Count(body, `"ttl_resources"`) == 2 && strings.Contains(body, `"next_heartbeat"`), body
	})

	// A refresh, a second into the lease: heartbeats at the same version
	// with the new TTL.
	for time.Since(rtdsAt) < time.Second {
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	if _, err := e.Store.RefreshLease(ctx, leaseID); err != nil {
		t.Fatal(err)
	}
	refreshed := time.Now()
	for range 2 {
		hb := s.Expect()
		switch hb.GetTypeUrl() {
		case resource.Runtime.URL:
			w := unwrap(t, hb, resource.Runtime)["override"]
			if hb.GetVersionInfo() != rtds.GetVersionInfo() || w.body != nil {
				t.Errorf("RTDS heartbeat: version %s, body %v; want version %s and no body", hb.GetVersionInfo(), w.body, rtds.GetVersionInfo())
			}
			checkTTL(t, "RTDS heartbeat", w, ttl)
			// The client's expiry moves by about the second waited.
			if was, now := rtdsAt.Add(rt.ttl), time.Now().Add(w.ttl); now.Sub(was) < 500*time.Millisecond {
				t.Errorf("RTDS heartbeat: the client's expiry moved by %s, want about 1s", now.Sub(was))
			}
			s.Ack(hb, "override")
		case resource.Cluster.URL:
			// Full state: the whole set again at the same version, the
			// TTL'd cluster with its body and the new TTL.
			g := unwrap(t, hb, resource.Cluster)
			if hb.GetVersionInfo() != cds.GetVersionInfo() || len(g) != 2 || g["temp"].body == nil || g["perm"].isWrap {
				t.Errorf("CDS heartbeat: version %s, %v; want version %s with both clusters", hb.GetVersionInfo(), g, cds.GetVersionInfo())
			}
			checkTTL(t, "CDS heartbeat", g["temp"], ttl)
			s.Ack(hb)
		default:
			t.Fatalf("heartbeat of unexpected type %s", hb.GetTypeUrl())
		}
	}
	dh := d.ExpectAck()
	if len(dh.GetResources()) != 1 || len(dh.GetRemovedResources()) != 0 {
		t.Fatalf("delta heartbeat: %v; want temp alone", dh)
	}
	if h := dh.GetResources()[0]; h.GetName() != "temp" || h.GetVersion() != tempVersion || h.GetResource() != nil || h.GetTtl() == nil || h.GetTtl().AsDuration() > ttl {
		t.Errorf("delta heartbeat: %v; want temp at version %s, no body, a ttl in (0, %s]", h, tempVersion, ttl)
	}
	plain.ExpectNone()
	dp.ExpectNone()

	// The lease expires: removed from every client.
	rem := unwrap(t, s.Expect(), resource.Cluster)
	if _, ok := rem["temp"]; ok || len(rem) != 1 {
		t.Errorf("CDS after expiry: %v; want perm alone", rem)
	}
	if time.Since(refreshed) < ttl-time.Second {
		t.Errorf("temp was removed %s after a refresh to %s", time.Since(refreshed), ttl)
	}
	if rem := unwrap(t, plain.Expect(), resource.Cluster); len(rem) != 1 {
		t.Errorf("CDS without TTL support after expiry: %v; want perm alone", rem)
	}
	for _, c := range []*xdstest.DeltaStream{d, dp} {
		if got := c.ExpectAck().GetRemovedResources(); len(got) != 1 || got[0] != "temp" {
			t.Errorf("delta after expiry: removed %v, want [temp]", got)
		}
	}
}

// TestTTLScopeOverride: a TTL'd resource in a group's scope overrides the
// default one of the same name until it expires; then the group's clients
// get the default one, without a TTL.
func TestTTLScopeOverride(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	def := xdstest.Put(t, resource.Runtime, store.DefaultScope, xdstest.Runtime("flags", "feature.x", "off"))
	e.Apply(t, []store.Put{def})
	over := xdstest.Put(t, resource.Runtime, "c1", xdstest.Runtime("flags", "feature.x", "on"))
	rev, _ := e.applyTTL(t, 2*time.Second, over)
	r := startXDS(t, e.config(t), rev)
	cc := dial(t, r)

	s := xdstest.OpenSotW(t, cc)
	s.Send(&discoveryv3.DiscoveryRequest{Node: ttlNode("n1", "c1"), TypeUrl: resource.Runtime.URL, ResourceNames: []string{"flags"}})
	first := s.Expect()
	w := unwrap(t, first, resource.Runtime)["flags"]
	checkTTL(t, "the override", w, 2*time.Second)
	if !proto.Equal(w.body, over.Body) {
		t.Fatalf("the override: body %v, want %v", w.body, over.Body)
	}
	s.Ack(first, "flags")
	d := xdstest.OpenDelta(t, cc)
	d.Send(&discoveryv3.DeltaDiscoveryRequest{Node: ttlNode("n2", "c1"), TypeUrl: resource.Runtime.URL, ResourceNamesSubscribe: []string{"flags"}})
	if got := d.ExpectAck().GetResources(); len(got) != 1 || got[0].GetTtl() == nil {
		t.Fatalf("delta: %v; want the override with a ttl", got)
	}

	after := s.Expect()
	if w := unwrap(t, after, resource.Runtime)["flags"]; w.isWrap || !proto.Equal(w.body, def.Body) {
		t.Errorf("after expiry: %v; want the default resource, plain", w)
	}
	got := d.ExpectAck()
	if len(got.GetResources()) != 1 || got.GetResources()[0].GetTtl() != nil || !proto.Equal(got.GetResources()[0].GetResource(), def.Body) {
		t.Errorf("delta after expiry: %v; want the default resource without a ttl", got)
	}
}

// TestTTLAfterRestart: a replica started while a TTL'd resource is live
// sends the time its lease has left, not the TTL it was written with.
func TestTTLAfterRestart(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	const ttl = 8 * time.Second
	applying := time.Now()
	rev, _ := e.applyTTL(t, ttl, xdstest.Put(t, resource.Runtime, store.DefaultScope, xdstest.Runtime("temp", "k", "v")))
	applied := time.Now() // the lease was granted between the two
	first := startXDS(t, e.config(t), rev)
	first.stop(t)
	// Let a known part of the lease go by before the new replica starts.
	for time.Since(applied) < 2*time.Second {
		time.Sleep(50 * time.Millisecond)
	}
	r := startXDS(t, e.config(t), rev)
	s := xdstest.OpenSotW(t, dial(t, r))
	asked := time.Now()
	s.Send(&discoveryv3.DiscoveryRequest{Node: ttlNode("n1", "c1"), TypeUrl: resource.Runtime.URL, ResourceNames: []string{"temp"}})
	w := unwrap(t, s.Expect(), resource.Runtime)["temp"]
	most, least := ttl-asked.Sub(applied), ttl-asked.Sub(applying)
	// A lower bound of the time left: at most what is left, and etcd's
	// whole seconds make it at most one second less.
	if !w.isWrap || w.ttl > most || w.ttl < least-time.Second-lease.Quantum {
		t.Errorf("after a restart: ttl %s; want the time the lease has left, between %s and %s (less 1s)", w.ttl, least, most)
	}
}
