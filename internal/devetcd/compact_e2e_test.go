//go:build e2e

package devetcd_test

import (
	"testing"

	"github.com/legation-io/legation/internal/devetcd"
)

// TestCompaction100k is TestCompactionBoundsDB at full size, with dev
// mode's defaults: 100,000 applies (ten times the 10,000 revisions of
// history kept), after which the database must stay under 16 MiB (the
// history is about 4 MiB of 300-byte values; without compaction the same
// applies make about 47 MiB) and "get --revision" must still read the
// history kept. Run it with make e2e.
func TestCompaction100k(t *testing.T) {
	runCompaction(t, devetcd.Config{}, 100000, 8, 16<<20)
}
