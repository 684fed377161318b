package delta

import (
	"fmt"
	"testing"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

func heldItems(rev int64, names ...string) []item {
	out := make([]item, len(names))
	for i, n := range names {
		e := &view.Entry{Key: store.Key{Type: resource.Cluster, Scope: store.DefaultScope, Name: n}, ModRevision: rev}
		out[i] = item{Item: xdsstream.Item{Entry: e}, source: store.DefaultScope}
	}
	return out
}

// Streams sent the same first response share what they hold; a push of
// one resource goes to the stream's own changes and leaves the shared set
// as it was.
func TestHoldingShared(t *testing.T) {
	var sets heldSets
	names := make([]string, 20)
	for i := range names {
		names[i] = fmt.Sprintf("c%d", i)
	}
	a, b := newHolding(), newHolding()
	a.sent(&sets, 5, "k1", heldItems(5, names...), nil)
	b.sent(&sets, 5, "k1", heldItems(5, names...), nil)
	if a.base != b.base || a.own != nil || a.len() != 20 {
		t.Fatalf("the two holdings share no set (%p, %p) or hold %d, want 20", a.base, b.base, a.len())
	}
	base := a.base
	a.sent(&sets, 6, "k2", heldItems(6, "c1"), []string{"c2"})
	if a.base != base || len(a.own) != 2 || a.len() != 19 {
		t.Fatalf("after a push: base changed %v, own %v, len %d; want the same base, 2 own changes, 19 held", a.base != base, a.own, a.len())
	}
	if h, ok := a.get("c1"); !ok || h.rev != 6 {
		t.Errorf("c1 = %+v %v, want held at 6", h, ok)
	}
	if a.has("c2") || !b.has("c2") {
		t.Error("the removal of c2 is not the stream's own")
	}
	if h, _ := b.get("c1"); h.rev != 5 {
		t.Errorf("the other stream's c1 is at %d, want 5", h.rev)
	}
	got := map[string]int64{}
	a.each(func(n string, h held) { got[n] = h.rev })
	if len(got) != 19 || got["c1"] != 6 || got["c3"] != 5 {
		t.Errorf("each yields %v", got)
	}
	a.drop("c1")
	a.drop("c1") // twice: nothing more
	a.set("new", held{rev: 7})
	if a.len() != 19 || a.has("c1") || !a.has("new") {
		t.Errorf("after drop and set: len %d, c1 %v, new %v", a.len(), a.has("c1"), a.has("new"))
	}
	// An older revision than the table's is built for the stream alone.
	c := newHolding()
	c.sent(&sets, 4, "k1", heldItems(4, names...), nil)
	if c.base == base || c.len() != 20 {
		t.Error("a response at an older revision took the shared set")
	}
}

func TestParseRev(t *testing.T) {
	for v, want := range map[string]int64{"12": 12, "012": -1, "": -1, "x": -1, "-3": -1, "0": -1} {
		if got := parseRev(v); got != want {
			t.Errorf("parseRev(%q) = %d, want %d", v, got, want)
		}
	}
}
