//go:build e2e

package devetcd_test

import (
	"context"
	"errors"
	"testing"

	"github.com/legation-io/legation/internal/state/devetcd"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

// TestCompaction100k is TestCompactionBoundsDB at full size, with dev
// mode's defaults: 100,000 applies (ten times the 10,000 revisions of
// history kept), after which the database must stay under 32 MiB (the
// history is 10,000 revisions of a 300-byte value and the apply's history
// record, about 1.6 KB each: some 16 MiB) and "get --revision" must still
// read the history kept. Run it with make e2e.
func TestCompaction100k(t *testing.T) {
	runCompaction(t, devetcd.Config{}, 100000, 8, 32<<20)
}

// TestNoCompaction shows TestCompactionBoundsDB's bound is the
// compactor's work: with compaction off, the same applies grow the
// database past it, and all their history stays readable.
func TestNoCompaction(t *testing.T) {
	e := startCompactEnv(t, devetcd.Config{HistoryRevisions: -1})
	e.drive(t, testApplies, 8)
	size, inUse := e.dbSize(t)
	t.Logf("%d applies without compaction: db %d bytes, %d in use", testApplies, size, inUse)
	if size <= testBound {
		t.Errorf("etcd database is %d bytes after %d applies without compaction, want more than %d: the bound of TestCompactionBoundsDB proves nothing", size, testApplies, testBound)
	}
	k := store.Key{Type: resource.Cluster, Scope: store.DefaultScope, Name: "load-0-1"}
	if _, _, err := e.store.Get(context.Background(), k, 2); err != nil && !errors.Is(err, store.ErrNotFound) {
		t.Errorf("get --revision 2 without compaction: %v", err)
	}
}
