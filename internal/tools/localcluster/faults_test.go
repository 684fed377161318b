package localcluster

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/tools/faultnet"
)

// TestPartitionGossip: two replicas gossiping through their proxies lose
// each other from their rings when partitioned, and find each other again
// when let through; their etcd proxies carry their etcd connections.
func TestPartitionGossip(t *testing.T) {
	tc := StartForTest(t, Config{EtcdMembers: 1, Replicas: 2, EtcdProxies: true, GossipProxies: true,
		Timeout: 60 * time.Second, Grace: 15 * time.Second})
	c := tc.Cluster()
	ctx := context.Background()
	if err := c.WaitRing(ctx); err != nil {
		t.Fatal(err)
	}
	ring := func(r Replica) []string {
		var v struct {
			Ring []string `json:"ring"`
		}
		if err := c.getJSON(ctx, r.HTTPAddr, "/debug/cluster", &v); err != nil {
			t.Fatal(err)
		}
		slices.Sort(v.Ring)
		return v.Ring
	}
	reps := c.Replicas()
	if err := c.Partition(reps[0].Name, reps[1].Name); err != nil {
		t.Fatal(err)
	}
	gp, _ := c.GossipProxy(reps[0].Name)
	if got := gp.Blocked(); len(got) != 1 || !strings.HasSuffix(got[0], ".22") {
		t.Errorf("%s's proxy blocks %v, want replica-2's IP", reps[0].Name, got)
	}
	deadline := time.Now().Add(45 * time.Second)
	for {
		a, b := ring(reps[0]), ring(reps[1])
		if slices.Equal(a, []string{reps[0].Name}) && slices.Equal(b, []string{reps[1].Name}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitioned 45s, rings still %v and %v", a, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := c.Unpartition(reps[0].Name, reps[1].Name); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitRing(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := c.EtcdProxies(reps[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	if g[0].Conns() == 0 {
		t.Errorf("no connection through %s's etcd proxy", reps[0].Name)
	}
	g.Set(faultnet.Fault{Mode: faultnet.Drop})
	if n := g[0].Conns(); n != 0 {
		t.Errorf("%d connections through a dropping proxy", n)
	}
	g.Set(faultnet.Fault{Mode: faultnet.Pass})
	if err := c.Partition(reps[0].Name, reps[0].Name); err == nil {
		t.Error("a replica partitioned from itself")
	}
	if _, err := c.EtcdProxies("etcd-1"); err == nil {
		t.Error("etcd-1 has etcd proxies")
	}
}
