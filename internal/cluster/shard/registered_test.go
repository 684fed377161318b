package shard_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// TestUnregisteredGossiperNeverOwnsANode: a process that gossips with the
// cluster's key (or, where none is set, in clear) but is not registered
// in the cluster's etcd (it registers in an etcd of its own) is admitted
// by gossip, and still never on the ring: no node id has it as home.
func TestUnregisteredGossiperNeverOwnsANode(t *testing.T) {
	key := keyLines(newKey(t, 32))
	for _, tt := range []struct{ name, content string }{
		{"right key", key},
		{"no key set", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			a := c.startKeyed("a", tt.content)
			b := c.startKeyed("b", tt.content)
			in := []*shard.Membership{a.m, b.m}
			waitFor(t, shardTestTimeout, "a and b do not form a ring", ringIs(in, "a", "b"))

			// x: the same key and gossip, another etcd; it joins a.
			other := newCluster(t)
			cfg := other.fastConfig("x")
			cfg.XDSAddr = "127.0.0.1:18100"
			cfg.Join = []string{a.m.Self().GossipAddr}
			if tt.content != "" {
				cfg.GossipKeyFile = a.keyFile
			}
			x := other.start(cfg)
			waitFor(t, shardTestTimeout, "x is not in a's and b's gossip: the test shows nothing", func() bool {
				return slices.Equal(memberNames(a.m), []string{"a", "b", "x"}) &&
					slices.Equal(memberNames(b.m), []string{"a", "b", "x"})
			})
			holds(t, 2*time.Second, "x, not registered, got on a's or b's ring", ringIs(in, "a", "b"))
			for _, id := range nodeIDs(2000) {
				for _, m := range in {
					if h, _ := m.Home(id); h.Name == "x" || h.XDSAddr == x.Self().XDSAddr {
						t.Fatalf("%s: Home(%q) = %+v: x owns a node", m.Self().Name, id, h)
					}
				}
			}
			waitFor(t, shardTestTimeout, "legation_shard_members_unregistered is not 1", func() bool {
				return metricValue(t, a.reg, "legation_shard_members_unregistered") == 1
			})
			if got := metricValue(t, a.reg, "legation_shard_members_registered"); got != 2 {
				t.Errorf("legation_shard_members_registered = %v, want 2", got)
			}
		})
	}
}

// TestRegisteredElsewhereIsNotEnough: a gossip member whose name is
// registered, but with other addresses than it gossips, stays off the
// ring: a process cannot borrow a registered replica's name.
func TestRegisteredElsewhereIsNotEnough(t *testing.T) {
	c := newCluster(t)
	a := c.startKeyed("a", "")
	// "x" is registered by hand at the addresses of nobody.
	client := c.etcd.Client(t)
	ctx := testbase.Context(t)
	rec := `{"name":"x","xds_addr":"127.0.0.1:1","gossip_addr":"127.0.0.1:2","started":"2026-01-01T00:00:00Z","ready":true}`
	if _, err := client.Put(ctx, shard.RegistryKey(testPrefix, "x"), rec); err != nil {
		t.Fatal(err)
	}
	other := newCluster(t)
	cfg := other.fastConfig("x")
	cfg.Join = []string{a.m.Self().GossipAddr}
	other.start(cfg)
	waitFor(t, shardTestTimeout, "x is not in a's gossip", func() bool {
		return slices.Equal(memberNames(a.m), []string{"a", "x"})
	})
	holds(t, time.Second, "x, registered at other addresses, got on a's ring", ringIs([]*shard.Membership{a.m}, "a"))
	if !a.m.IsReplicaAddr(netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("IsReplicaAddr(127.0.0.1) = false, want true (a is registered there)")
	}
	if a.m.IsReplicaAddr(netip.MustParseAddr("127.0.0.2")) {
		t.Errorf("IsReplicaAddr(127.0.0.2) = true: no replica is registered there")
	}
}

// TestLostRegistrationLeavesRing: a replica cut off from etcd loses its
// lease and leaves its peers' rings (the registry's delete), though
// gossip still says it is alive. It keeps its own ring, as every replica
// does when etcd is down for all (it cannot tell the two apart). Back in
// etcd, it registers again and is on every ring again.
func TestLostRegistrationLeavesRing(t *testing.T) {
	c := newCluster(t)
	proxy := storetest.NewProxy(t, c.etcd.Endpoint)
	viaProxy, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{proxy.Addr},
		DialTimeout: time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { viaProxy.Close() })
	acfg := c.fastConfig("a")
	acfg.Client = viaProxy
	a := c.start(acfg)
	b := c.start(c.fastConfig("b"))
	both := []*shard.Membership{a, b}
	waitFor(t, shardTestTimeout, "a and b do not form a ring", ringIs(both, "a", "b"))

	proxy.Cut()
	waitFor(t, shardTestTimeout, "a, its lease lost, is still on b's ring", ringIs([]*shard.Membership{b}, "b"))
	if got := ringNames(a); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("a's own ring, cut off from etcd = %v, want it kept as [a b]", got)
	}
	if !slices.Equal(memberNames(b), []string{"a", "b"}) {
		t.Errorf("b's gossip = %v, want a still alive there", memberNames(b))
	}
	proxy.Restore()
	waitFor(t, shardTestTimeout, "a, registered again, is not back on the rings", ringIs(both, "a", "b"))
}

// TestDeletedRecordIsWrittenAgain: a replica's record deleted from the
// registry (its lease held) takes it off every ring, and the replica
// writes it again.
func TestDeletedRecordIsWrittenAgain(t *testing.T) {
	c := newCluster(t)
	ms := c.startAll("a", "b")
	waitFor(t, shardTestTimeout, "a and b do not form a ring", ringIs(ms, "a", "b"))
	client := c.etcd.Client(t)
	changes := ms[1].Changed()
	if _, err := client.Delete(testbase.Context(t), shard.RegistryKey(testPrefix, "a")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
	case <-time.After(shardTestTimeout):
		t.Fatalf("b's ring did not change when a's record was deleted")
	}
	waitFor(t, shardTestTimeout, "a's record is not written again", func() bool {
		return slices.Contains(registered(t, client), "a")
	})
	waitFor(t, shardTestTimeout, "a is not back on the rings", ringIs(ms, "a", "b"))
}

// errorLog records the messages logged at Error.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *errorLog) Enabled(_ context.Context, level slog.Level) bool { return level >= slog.LevelError }
func (l *errorLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *errorLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *errorLog) WithGroup(string) slog.Handler      { return l }

// count is how many messages logged so far contain s.
func (l *errorLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}

// TestClearGossipClusterLogsError: two replicas gossiping in clear each
// log, at Error, once, that the cluster has no gossip key; with a key
// neither does.
func TestClearGossipClusterLogsError(t *testing.T) {
	const msg = "gossips in clear"
	key := keyLines(newKey(t, 32))
	for _, tt := range []struct {
		name, content string
		want          int
	}{
		{"no key", "", 1},
		{"key", key, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			var ms []*shard.Membership
			var logs []*errorLog
			for _, name := range []string{"a", "b"} {
				l := &errorLog{}
				cfg := c.fastConfig(name)
				cfg.Logger = slog.New(l)
				if tt.content != "" {
					cfg.GossipKeyFile = filepath.Join(t.TempDir(), "keys")
					writeFile(t, cfg.GossipKeyFile, tt.content)
				}
				ms = append(ms, c.start(cfg))
				logs = append(logs, l)
			}
			waitFor(t, shardTestTimeout, "a and b do not form a ring", ringIs(ms, "a", "b"))
			if tt.want > 0 {
				waitFor(t, shardTestTimeout, "a replica did not log the error", func() bool {
					return logs[0].count(msg) >= 1 && logs[1].count(msg) >= 1
				})
			}
			holds(t, shardTestShortTimeout, "the error is not logged as often as it should", func() bool {
				return logs[0].count(msg) == tt.want && logs[1].count(msg) == tt.want
			})
		})
	}
}

// TestRegistryResyncAfterRestore: etcd restored from a snapshot taken
// before the replicas registered goes back in revisions, below those a's
// registry watch has seen; b registers after the restore and is on a's
// ring all the same (a's watch ends with the restart and the registry is
// read again; were it to go on, discovery's read, disagreeing with a's
// registry, would have it read again).
func TestRegistryResyncAfterRestore(t *testing.T) {
	e := storetest.StartRestartable(t)
	c := &cluster{t: t, etcd: e.Etcd, log: testbase.Logger(t)}
	e.Save(t, "empty")
	a := c.start(c.fastConfig("a"))
	// Move the revision well past what the snapshot will have.
	client := e.Client(t)
	for i := range 50 {
		if _, err := client.Put(testbase.Context(t), "/elsewhere", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	e.Restore(t, "empty", 0)
	waitFor(t, shardTestTimeout, "a did not register again in the restored etcd", func() bool {
		reg, err := shard.ListRegistry(testbase.Context(t), client, testPrefix)
		return err == nil && len(reg) == 1
	})
	b := c.start(c.fastConfig("b"))
	waitFor(t, shardTestTimeout, "a's ring does not have b, registered after the restore", ringIs([]*shard.Membership{a, b}, "a", "b"))
}
