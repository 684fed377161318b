package xdsstream

import (
	"fmt"
	"testing"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
)

// Holdings of entries, as SotW keeps them.

func sentEntries(rev int64, names ...string) []*view.Entry {
	out := make([]*view.Entry, len(names))
	for i, n := range names {
		out[i] = &view.Entry{Key: store.Key{Type: resource.Endpoint, Scope: store.DefaultScope, Name: n}, ModRevision: rev}
	}
	return out
}

func byName(entries []*view.Entry) func(i int) (string, *view.Entry) {
	return func(i int) (string, *view.Entry) { return entries[i].Name, entries[i] }
}

func getEntry(h *Holding[*view.Entry], n string) *view.Entry {
	e, _ := h.Get(n)
	return e
}

// TestHoldingSharedEntries: streams sent the same responses share what
// they hold; a push of one resource goes to the stream's own changes; a
// full-state response replaces what is held, shared by its key unless
// the key is "".
func TestHoldingSharedEntries(t *testing.T) {
	var sets HeldSets[*view.Entry]
	names := make([]string, 8)
	for i := range names {
		names[i] = fmt.Sprintf("e%d", i)
	}
	all := sentEntries(5, names...)
	var a, b Holding[*view.Entry]
	a.Sent(&sets, 5, "k1", len(all), byName(all), nil)
	b.Sent(&sets, 5, "k1", len(all), byName(all), nil)
	if a.base != b.base || a.own != nil || a.Len() != 8 {
		t.Fatalf("the two holdings share no set or hold %d, want 8", a.Len())
	}
	base := a.base
	changed := sentEntries(6, "e1")
	a.Sent(&sets, 6, "k2", len(changed), byName(changed), nil)
	if a.base != base || len(a.own) != 1 || a.Len() != 8 || getEntry(&a, "e1") != changed[0] || getEntry(&b, "e1") != all[1] {
		t.Fatal("a push did not go to the stream's own changes")
	}
	a.Drop("e2")
	if a.Len() != 7 || getEntry(&a, "e2") != nil || getEntry(&b, "e2") == nil {
		t.Error("a drop is not the stream's own")
	}
	n := 0
	a.Each(func(string, *view.Entry) { n++ })
	if n != 7 {
		t.Errorf("each yields %d entries, want 7", n)
	}
	// A full-state response replaces what is held, shared by its key.
	xy := sentEntries(6, "x", "y")
	a.Replace(&sets, 6, "w", len(xy), byName(xy))
	b.Replace(&sets, 6, "w", len(xy), byName(xy))
	if a.base != b.base || a.Len() != 2 || getEntry(&a, "e1") != nil {
		t.Error("a full-state response did not replace the set, shared")
	}
	// A body of the stream's own ("" key) is not shared.
	x := sentEntries(6, "x")
	a.Replace(&sets, 6, "", len(x), byName(x))
	if a.base == b.base || a.Len() != 1 {
		t.Error("an unshared response took a shared set")
	}
}

// Holdings of versions, as delta keeps them.

type version struct {
	rev   int64
	scope string
}

func versions(rev int64, names ...string) func(i int) (string, version) {
	return func(i int) (string, version) { return names[i], version{rev: rev, scope: store.DefaultScope} }
}

// TestHoldingSharedVersions: streams sent the same first response share
// what they hold; a push of one resource goes to the stream's own changes
// and leaves the shared set as it was; a response at a revision older
// than the table's is built for the stream alone.
func TestHoldingSharedVersions(t *testing.T) {
	var sets HeldSets[version]
	names := make([]string, 20)
	for i := range names {
		names[i] = fmt.Sprintf("c%d", i)
	}
	var a, b Holding[version]
	a.Sent(&sets, 5, "k1", len(names), versions(5, names...), nil)
	b.Sent(&sets, 5, "k1", len(names), versions(5, names...), nil)
	if a.base != b.base || a.own != nil || a.Len() != 20 {
		t.Fatalf("the two holdings share no set (%p, %p) or hold %d, want 20", a.base, b.base, a.Len())
	}
	base := a.base
	a.Sent(&sets, 6, "k2", 1, versions(6, "c1"), []string{"c2"})
	if a.base != base || len(a.own) != 2 || a.Len() != 19 {
		t.Fatalf("after a push: base changed %v, own %v, len %d; want the same base, 2 own changes, 19 held", a.base != base, a.own, a.Len())
	}
	if h, ok := a.Get("c1"); !ok || h.rev != 6 {
		t.Errorf("c1 = %+v %v, want held at 6", h, ok)
	}
	if a.Has("c2") || !b.Has("c2") {
		t.Error("the removal of c2 is not the stream's own")
	}
	if h, _ := b.Get("c1"); h.rev != 5 {
		t.Errorf("the other stream's c1 is at %d, want 5", h.rev)
	}
	got := map[string]int64{}
	a.Each(func(n string, h version) { got[n] = h.rev })
	if len(got) != 19 || got["c1"] != 6 || got["c3"] != 5 {
		t.Errorf("each yields %v", got)
	}
	a.Drop("c1")
	a.Drop("c1") // twice: nothing more
	a.Set("new", version{rev: 7})
	if a.Len() != 19 || a.Has("c1") || !a.Has("new") {
		t.Errorf("after drop and set: len %d, c1 %v, new %v", a.Len(), a.Has("c1"), a.Has("new"))
	}
	// An older revision than the table's is built for the stream alone.
	var c Holding[version]
	c.Sent(&sets, 4, "k1", len(names), versions(4, names...), nil)
	if c.base == base || c.Len() != 20 {
		t.Error("a response at an older revision took the shared set")
	}
}

// TestHoldingDropAll: a client that unsubscribes from everything it was
// sent in a shared response (a SotW ACK naming nothing, a delta
// unsubscribe of each name) holds nothing, and its holding keeps neither
// the shared set nor a mark per name dropped; it takes a shared set again
// with its next response.
func TestHoldingDropAll(t *testing.T) {
	var sets HeldSets[*view.Entry]
	names := make([]string, 200)
	for i := range names {
		names[i] = fmt.Sprintf("e%03d", i)
	}
	all := sentEntries(5, names...)
	var a, b Holding[*view.Entry]
	a.Sent(&sets, 5, "k1", len(all), byName(all), nil)
	b.Sent(&sets, 5, "k1", len(all), byName(all), nil)
	a.Set("e000", sentEntries(6, "e000")[0]) // a change of its own too
	for _, n := range names {
		a.Drop(n)
	}
	if a.Len() != 0 || a.base != nil || a.own != nil {
		t.Fatalf("after dropping every name: len %d, base %v, %d own marks; want nothing held or kept", a.Len(), a.base != nil, len(a.own))
	}
	if b.Len() != 200 || getEntry(&b, "e001") != all[1] {
		t.Fatal("the other stream's holding changed")
	}
	a.Sent(&sets, 5, "k1", len(all), byName(all), nil)
	if a.base != b.base || a.Len() != 200 {
		t.Error("a response after dropping everything did not take the shared set")
	}
}
