package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// TestRefreshLease: a refresh starts a live lease's TTL over, returns the
// granted TTL and writes a refresh marker under the lease that
// ParseLeaseMarker reads back; the marker goes with the lease. A lease
// that is gone fails with ErrLeaseExpired and writes nothing.
func TestRefreshLease(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	const prefix = "/refresh/"
	s := newTestStore(t, c, prefix, nil)
	ctx := testbase.Context(t)

	res := mustApply(t, s, store.PlanRequest{Puts: []store.Put{put(t, resource.Cluster, "default", "a", 1)}, TTL: 10 * time.Second})
	if res.Lease == 0 {
		t.Fatal("apply with a TTL: no lease")
	}
	// Let the lease lose a second, so that its TTL being back at 10s shows
	// the refresh (waiting for time to pass is what is tested).
	for {
		ttl, err := c.TimeToLive(ctx, clientv3.LeaseID(res.Lease))
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL <= 8 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	before := time.Now()
	got, err := s.RefreshLease(ctx, res.Lease)
	after := time.Now()
	if err != nil {
		t.Fatalf("RefreshLease: %v", err)
	}
	if got != 10*time.Second {
		t.Errorf("RefreshLease = %s, want the granted TTL, 10s", got)
	}
	ttl, err := c.TimeToLive(ctx, clientv3.LeaseID(res.Lease), clientv3.WithAttachedKeys())
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL < 9 {
		t.Errorf("after the refresh the lease has %ds left, want 9s or more", ttl.TTL)
	}

	mk := store.LeaseMarkerKey(prefix, res.Lease)
	if want := fmt.Sprintf("%sleases/%016x", prefix, res.Lease); mk != want || !strings.HasPrefix(mk, store.LeasesPrefix(prefix)) {
		t.Fatalf("LeaseMarkerKey = %q, want %q under LeasesPrefix %q", mk, want, store.LeasesPrefix(prefix))
	}
	mr, err := c.Get(ctx, mk)
	if err != nil {
		t.Fatal(err)
	}
	if len(mr.Kvs) != 1 {
		t.Fatalf("no refresh marker at %s", mk)
	}
	kv := mr.Kvs[0]
	if kv.Lease != res.Lease {
		t.Errorf("marker under lease %x, want %x (it must go with the lease)", kv.Lease, res.Lease)
	}
	id, m, err := store.ParseLeaseMarker(prefix, string(kv.Key), kv.Value)
	if err != nil {
		t.Fatalf("ParseLeaseMarker of what RefreshLease wrote: %v\n%s", err, kv.Value)
	}
	if id != res.Lease || m.TTL != 10 || m.By != "store-test" {
		t.Errorf("marker: lease %x ttl %d by %q; want lease %x ttl 10 by store-test", id, m.TTL, m.By, res.Lease)
	}
	// refreshed_at was taken before the keepalive: no later than the new
	// expiry's start.
	if m.RefreshedAt.Before(before.Add(-time.Second)) || m.RefreshedAt.After(after) {
		t.Errorf("marker refreshed_at %s, want between %s and %s", m.RefreshedAt, before, after)
	}
	// The lease holds the resource and its marker.
	if len(ttl.Keys) != 2 {
		t.Errorf("lease keys %q, want the resource and the marker", ttl.Keys)
	}

	// A second refresh rewrites the same marker.
	if _, err := s.RefreshLease(ctx, res.Lease); err != nil {
		t.Fatal(err)
	}
	if n := countKeys(t, c, store.LeasesPrefix(prefix)); n != 1 {
		t.Errorf("%d markers after two refreshes of one lease, want 1", n)
	}

	// The lease ends: the marker goes with it, and a refresh fails.
	if _, err := c.Revoke(ctx, clientv3.LeaseID(res.Lease)); err != nil {
		t.Fatal(err)
	}
	// The scope's apply marker is not under the lease: it stays.
	if n := countKeys(t, c, prefix+"resources/") + countKeys(t, c, prefix+"leases/"); n != 0 {
		t.Errorf("%d resources and lease markers under %s after the lease ended, want 0", n, prefix)
	}
	rev := etcdRev(t, c)
	_, err = s.RefreshLease(ctx, res.Lease)
	if !errors.Is(err, store.ErrLeaseExpired) {
		t.Errorf("RefreshLease of a revoked lease: %v, want ErrLeaseExpired", err)
	}
	if want := fmt.Sprintf("%016x", res.Lease); err != nil && !strings.Contains(err.Error(), want) {
		t.Errorf("RefreshLease error %q does not name lease %s", err, want)
	}
	// A lease that never existed, too.
	if _, err := s.RefreshLease(ctx, 0x1234); !errors.Is(err, store.ErrLeaseExpired) {
		t.Errorf("RefreshLease of an unknown lease: %v, want ErrLeaseExpired", err)
	}
	if now := etcdRev(t, c); now != rev {
		t.Errorf("failed refreshes moved etcd's revision from %d to %d", rev, now)
	}
	if n := countKeys(t, c, store.LeasesPrefix(prefix)); n != 0 {
		t.Errorf("%d markers after failed refreshes, want 0", n)
	}
}

// TestRefreshLeaseExpires: a lease that runs out on its own (not revoked)
// is refused the same way.
func TestRefreshLeaseExpires(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	s := newTestStore(t, c, "/expire/", nil)
	ctx := testbase.Context(t)
	g, err := c.Grant(ctx, 2) // etcd's least TTL here
	if err != nil {
		t.Fatal(err)
	}
	// Wait for etcd to delete it: waiting on the TTL is the test.
	deadline := time.Now().Add(storeTestTimeout)
	for {
		ttl, err := c.TimeToLive(ctx, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		if ttl.TTL == -1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease of 2s still there after %s: %ds left", storeTestTimeout, ttl.TTL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := s.RefreshLease(ctx, int64(g.ID)); !errors.Is(err, store.ErrLeaseExpired) {
		t.Errorf("RefreshLease of an expired lease: %v, want ErrLeaseExpired", err)
	}
}

func TestLeaseSeconds(t *testing.T) {
	for _, tc := range []struct {
		ttl  time.Duration
		want int64
	}{
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{1500 * time.Millisecond, 2},
		{30 * time.Second, 30},
		{time.Hour, 3600},
	} {
		if got := store.LeaseSeconds(tc.ttl); got != tc.want {
			t.Errorf("LeaseSeconds(%s) = %d, want %d", tc.ttl, got, tc.want)
		}
	}
}

func TestParseLeaseMarker(t *testing.T) {
	const prefix = "/p/"
	good := `{"ttl_seconds":30,"refreshed_at":"2025-01-02T03:04:05Z","by":"me"}`
	for _, tc := range []struct {
		name  string
		key   string
		value string
		// wantID is the lease when it parses; wantErr a part of the error
		// otherwise.
		wantID  int64
		wantTTL int64
		wantErr string
	}{
		{name: "good", key: "/p/leases/00000000000000ab", value: good, wantID: 0xab, wantTTL: 30},
		{name: "good, upper case hex", key: "/p/leases/00000000000000AB", value: good, wantID: 0xab, wantTTL: 30},
		{name: "only the ttl", key: "/p/leases/694d7a1b2c3d4e5f", value: `{"ttl_seconds":1}`, wantID: 0x694d7a1b2c3d4e5f, wantTTL: 1},
		{name: "unknown fields are ignored", key: "/p/leases/0000000000000001", value: `{"ttl_seconds":5,"new":true}`, wantID: 1, wantTTL: 5},
		{name: "another prefix", key: "/q/leases/00000000000000ab", value: good, wantErr: `is not under "/p/leases/"`},
		{name: "a resource key", key: "/p/resources/cluster/default/a", value: good, wantErr: "is not under"},
		{name: "the directory itself", key: "/p/leases/", value: good, wantErr: "not 16 hex digits"},
		{name: "short id", key: "/p/leases/ab", value: good, wantErr: "not 16 hex digits"},
		{name: "long id", key: "/p/leases/000000000000000ab", value: good, wantErr: "not 16 hex digits"},
		{name: "not hex", key: "/p/leases/00000000000000xy", value: good, wantErr: "not 16 hex digits"},
		{name: "0x prefix", key: "/p/leases/0x000000000000ab", value: good, wantErr: "not 16 hex digits"},
		{name: "sign", key: "/p/leases/+00000000000000a", value: good, wantErr: "not 16 hex digits"},
		{name: "deeper key", key: "/p/leases/00000000000000ab/x", value: good, wantErr: "not 16 hex digits"},
		{name: "empty value", key: "/p/leases/00000000000000ab", value: "", wantErr: "unexpected end of JSON input"},
		{name: "bad JSON", key: "/p/leases/00000000000000ab", value: "{", wantErr: "unexpected end of JSON input"},
		{name: "not an object", key: "/p/leases/00000000000000ab", value: "30", wantErr: "cannot unmarshal"},
		{name: "ttl a string", key: "/p/leases/00000000000000ab", value: `{"ttl_seconds":"30"}`, wantErr: "cannot unmarshal"},
		{name: "bad time", key: "/p/leases/00000000000000ab", value: `{"ttl_seconds":30,"refreshed_at":"yesterday"}`, wantErr: "cannot parse"},
		{name: "no ttl", key: "/p/leases/00000000000000ab", value: `{}`, wantErr: "ttl_seconds 0 is not positive"},
		{name: "ttl 0", key: "/p/leases/00000000000000ab", value: `{"ttl_seconds":0}`, wantErr: "ttl_seconds 0 is not positive"},
		{name: "negative ttl", key: "/p/leases/00000000000000ab", value: `{"ttl_seconds":-5}`, wantErr: "ttl_seconds -5 is not positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, m, err := store.ParseLeaseMarker(prefix, tc.key, []byte(tc.value))
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, store.ErrMalformed) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseLeaseMarker(%q, %q) = %x, %+v, %v; want an ErrMalformed holding %q", tc.key, tc.value, id, m, err, tc.wantErr)
				}
				if id != 0 || m != (store.LeaseMarker{}) {
					t.Errorf("an error with lease %x, marker %+v", id, m)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseLeaseMarker(%q, %q): %v", tc.key, tc.value, err)
			}
			if id != tc.wantID || m.TTL != tc.wantTTL {
				t.Errorf("ParseLeaseMarker(%q, %q) = %x, ttl %d; want %x, ttl %d", tc.key, tc.value, id, m.TTL, tc.wantID, tc.wantTTL)
			}
		})
	}
}

// FuzzParseLeaseMarker: markers come from etcd, so anyone with write
// access to the prefix. ParseLeaseMarker never panics, fails only with
// ErrMalformed, and what it accepts has a positive TTL and a key that
// LeaseMarkerKey would write.
func FuzzParseLeaseMarker(f *testing.F) {
	for _, seed := range []struct{ key, value string }{
		{"/legation/leases/00000000000000ab", `{"ttl_seconds":30,"refreshed_at":"2025-01-02T03:04:05Z","by":"me"}`},
		{"/legation/leases/00000000000000ab", `{"ttl_seconds":0}`},
		{"/legation/leases/ffffffffffffffff", `{"ttl_seconds":9223372036854775807}`},
		{"/legation/leases/00000000000000ab", `{"ttl_seconds":1e3}`},
		{"/legation/leases/xyz", `{}`},
		{"/legation/leases/", ""},
		{"", "null"},
	} {
		f.Add(seed.key, []byte(seed.value))
	}
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		id, m, err := store.ParseLeaseMarker(keyspace.DefaultPrefix, key, value)
		if err != nil {
			if !errors.Is(err, store.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if m.TTL <= 0 {
			t.Errorf("accepted ttl_seconds %d", m.TTL)
		}
		// A key of 16 hex digits above 7fffffffffffffff parses to a
		// negative lease, which etcd never grants and no tracker asks
		// about.
		if got := store.LeaseMarkerKey(keyspace.DefaultPrefix, id); id >= 0 && !strings.EqualFold(got, key) {
			t.Errorf("accepted key %q for lease %x, whose marker key is %q", key, id, got)
		}
	})
}
