package view_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/testkit/storetest"
	legationv1 "github.com/legation-io/legation/proto/legation/v1"
)

// snapshotAt returns the snapshot of v at exactly rev, following the
// chain from s.
func snapshotAt(t *testing.T, s *view.Snapshot, rev int64) *view.Snapshot {
	t.Helper()
	for ; s != nil; s = s.Next() {
		if s.Revision == rev {
			return s
		}
	}
	t.Fatalf("no snapshot at revision %d", rev)
	return nil
}

// TestSnapshotStamps: a snapshot applying an apply's puts is stamped
// Committed with the written_at of its envelopes (taken before the
// transaction, so before the view saw it), and Seen when the view
// received it; one that only deletes, or whose value has no written_at
// (another tool's put), is stamped Committed at Seen; the first load
// changes nothing and carries no commit stamp.
func TestSnapshotStamps(t *testing.T) {
	env := newViewEnv(t, storetest.Options{})
	v := env.startView(t, env.client, nil)
	first := v.Snapshot()
	if !first.Committed.IsZero() || first.Seen.IsZero() {
		t.Errorf("first load: Committed %v Seen %v, want zero and set", first.Committed, first.Seen)
	}

	before := time.Now()
	r1 := vApply(t, env.store, []store.Put{vCluster(t, "default", "a", 1)}, nil)
	s1 := snapshotAt(t, first, waitRev(t, v, r1).Revision)
	a, _ := s1.Get(resource.Cluster, "default", "a")
	if a.WrittenAt.IsZero() {
		t.Fatal("the store wrote no written_at")
	}
	if !s1.Committed.Equal(a.WrittenAt) {
		t.Errorf("put: Committed %v, want the envelope's written_at %v", s1.Committed, a.WrittenAt)
	}
	if s1.Committed.Before(before) || s1.Seen.Before(s1.Committed) || time.Since(s1.Seen) > viewTestTimeout {
		t.Errorf("put: apply sent at %v, Committed %v, Seen %v: want sent <= Committed <= Seen <= now", before, s1.Committed, s1.Seen)
	}

	r2 := vApply(t, env.store, nil, []store.Key{{Type: resource.Cluster, Scope: "default", Name: "a"}})
	s2 := snapshotAt(t, s1, waitRev(t, v, r2).Revision)
	if len(s2.Changes) != 1 || !s2.Committed.Equal(s2.Seen) {
		t.Errorf("delete: %d changes, Committed %v Seen %v, want 1 change and Committed = Seen", len(s2.Changes), s2.Committed, s2.Seen)
	}

	// A value written by another tool: no written_at.
	p := vCluster(t, "default", "raw", 1)
	raw, err := proto.Marshal(&legationv1.Envelope{Body: p.Body})
	if err != nil {
		t.Fatal(err)
	}
	put, err := env.client.Put(context.Background(), env.store.EtcdKey(p.Key), string(raw))
	if err != nil {
		t.Fatal(err)
	}
	s3 := snapshotAt(t, s2, waitRev(t, v, put.Header.Revision).Revision)
	if len(s3.Changes) != 1 || !s3.Committed.Equal(s3.Seen) {
		t.Errorf("put without written_at: %d changes, Committed %v Seen %v, want 1 change and Committed = Seen", len(s3.Changes), s3.Committed, s3.Seen)
	}
}

// TestSnapshotLookupsDoNotAllocate: Get, DeletedAt and LastChange build
// their keys on the stack (a push looks up every resource it may send),
// and find what they should, also with a name longer than that buffer.
func TestSnapshotLookupsDoNotAllocate(t *testing.T) {
	env := newViewEnv(t, storetest.Options{})
	v := env.startView(t, env.client, nil)
	long := strings.Repeat("n", 300)
	// Keys as long as the load tool's (endpoint/default/lg-cluster-00042):
	// past the 32 bytes Go concatenates a string on the stack in.
	const a, gone = "lg-cluster-000042", "lg-cluster-000043"
	r1 := vApply(t, env.store, []store.Put{vCluster(t, "default", a, 1), vCluster(t, "default", long, 1), vCluster(t, "default", gone, 1)}, nil)
	r2 := vApply(t, env.store, nil, []store.Key{{Type: resource.Cluster, Scope: "default", Name: gone}})
	s := waitRev(t, v, r2)
	if e, ok := s.Get(resource.Cluster, "default", a); !ok || e.Name != a {
		t.Errorf("Get a: %v, %v", e, ok)
	}
	if e, ok := s.Get(resource.Cluster, "default", long); !ok || e.Name != long {
		t.Errorf("Get of a %d-byte name: %v", len(long), ok)
	}
	if _, ok := s.Get(resource.Cluster, "default", gone); ok {
		t.Error("Get gone: found")
	}
	if rev, ok := s.DeletedAt(resource.Cluster, "default", gone); !ok || rev != r2 {
		t.Errorf("DeletedAt gone: %d, %v; want %d", rev, ok, r2)
	}
	if got := s.LastChange(resource.Cluster, "default"); got != r2 {
		t.Errorf("LastChange: %d, want %d (the put at %d, then the delete)", got, r2, r1)
	}
	if n := testing.AllocsPerRun(100, func() {
		s.Get(resource.Cluster, "default", a)
		s.DeletedAt(resource.Cluster, "default", gone)
		s.LastChange(resource.Cluster, "default")
	}); n != 0 {
		t.Errorf("%v allocations per lookup round, want 0", n)
	}
}
