package shard_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation"
	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

func TestRegistryKey(t *testing.T) {
	if got, want := shard.RegistryKey("/legation/", "xds-0"), "/legation/members/xds-0"; got != want {
		t.Errorf("RegistryKey = %q, want %q", got, want)
	}
}

func TestListRegistry(t *testing.T) {
	etcd := storetest.Start(t, storetest.Options{})
	client := etcd.Client(t)
	ctx := testbase.Context(t)
	started := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	put := func(key, value string) {
		t.Helper()
		if _, err := client.Put(ctx, key, value); err != nil {
			t.Fatalf("Put %s: %v", key, err)
		}
	}
	// Gossip addresses nothing listens on: a membership started below
	// tries them and carries on alone.
	g0, g1 := unreachable(t), unreachable(t)
	put("/legation/members/xds-1", `{"name":"xds-1","xds_addr":"10.0.0.2:18000","http_addr":"10.0.0.2:18001","gossip_addr":"`+g1+`","started":"2026-05-06T07:08:09Z","ready":true}`)
	put("/legation/members/xds-0", `{"name":"xds-0","xds_addr":"10.0.0.1:18000","gossip_addr":"`+g0+`","started":"2026-05-06T07:08:09Z"}`)
	put("/legation/members/garbage", `not json`)
	put("/legation/members/liar", `{"name":"xds-9","xds_addr":"10.0.0.9:18000"}`)
	put("/legation/membersx/not-a-member", `{"name":"not-a-member"}`)
	put("/other/members/xds-7", `{"name":"xds-7"}`)

	want := []shard.Member{
		{Name: "xds-0", XDSAddr: "10.0.0.1:18000", GossipAddr: g0, Started: started},
		{Name: "xds-1", XDSAddr: "10.0.0.2:18000", HTTPAddr: "10.0.0.2:18001", GossipAddr: g1, Started: started, Ready: true},
	}
	got, err := shard.ListRegistry(ctx, client, "/legation/")
	if err != nil {
		t.Fatalf("ListRegistry: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListRegistry (-want +got):\n%s", diff)
	}

	_, bad, err := shard.ReadRegistry(ctx, client, "/legation/")
	if err != nil {
		t.Fatalf("ReadRegistry: %v", err)
	}
	var badKeys []string
	for _, b := range bad {
		badKeys = append(badKeys, b.Key)
	}
	if diff := cmp.Diff([]string{"/legation/members/garbage", "/legation/members/liar"}, badKeys); diff != "" {
		t.Errorf("ReadRegistry's bad records (-want +got):\n%s", diff)
	}

	// A membership starts and discovers peers despite the garbage.
	c := &cluster{t: t, etcd: etcd, log: testbase.Logger(t)}
	m := c.start(c.config("xds-2"))
	if got := m.Ring().Len(); got != 1 {
		t.Errorf("ring with unreachable registered peers: %v, want xds-2 alone", names(m.Ring().Members()))
	}
	// Its record says which version it runs.
	got, err = shard.ListRegistry(ctx, client, "/legation/")
	if err != nil {
		t.Fatalf("ListRegistry: %v", err)
	}
	if i := slices.IndexFunc(got, func(m shard.Member) bool { return m.Name == "xds-2" }); i < 0 || got[i].Version != legation.Version() {
		t.Errorf("registry %+v: want xds-2 with version %q", got, legation.Version())
	}
}
