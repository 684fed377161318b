package chaos

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/legation-io/legation/internal/tools/chaos/record"
)

// content checks a response at a known revision against the state at
// that revision.
func (c *checker) content(r *response) {
	if r.fullSotW {
		c.fullSet(r)
		return
	}
	c.resources(r)
}

// bad adds a violation of r's content, with the revisions involved after
// r's own.
func (c *checker) bad(r *response, kind string, revs []int64, format string, a ...any) {
	c.add(r.e, kind, []int{r.e.Line}, []string{r.e.Version}, append([]int64{r.v}, revs...), format, a...)
}

// fullSet checks a SotW full-state response: its set is the state's at
// its version (an interim CDS response may carry clusters that exist
// later), no resource in it was deleted before, and each carries the
// bytes of that version.
func (c *checker) fullSet(r *response) {
	e, group, v := r.e, r.cs.chain, r.v
	want := c.h.set(e.Type, group, v)
	got := map[string]bool{}
	var extra, resurrected []string
	var deletedAt []int64
	var other []string
	for _, res := range e.Resources {
		got[res.Name] = true
		if _, ok := want[res.Name]; ok {
			if hv, _ := c.h.visible(e.Type, group, res.Name, v); res.Hash != "" && !r.interim && res.Hash != hv.hash {
				other = append(other, res.Name)
			}
			continue
		}
		if r.interim && c.h.existedAfter(e.Type, group, res.Name, v, c.h.Last) {
			continue
		}
		if _, d := c.h.visible(e.Type, group, res.Name, v); d != 0 {
			resurrected = append(resurrected, res.Name)
			deletedAt = append(deletedAt, d)
		} else {
			extra = append(extra, res.Name)
		}
	}
	var missing []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if !got[name] {
			missing = append(missing, name)
		}
	}
	if len(resurrected) > 0 {
		c.bad(r, Resurrected, deletedAt, "carries %s, deleted before revision %d", strings.Join(resurrected, ", "), v)
	}
	if len(other) > 0 {
		c.bad(r, HalfApply, nil, "carries %s with other bytes than at revision %d", strings.Join(other, ", "), v)
	}
	if len(extra) > 0 || len(missing) > 0 {
		c.bad(r, HalfApply, nil, "the set differs from the state at revision %d: extra [%s], missing [%s]",
			v, strings.Join(extra, " "), strings.Join(missing, " "))
	}
}

// resources checks each resource a response carries or removes against
// the state at its version: it exists there (or, removed, does not),
// with the same bytes and, on delta, at its mod revision.
func (c *checker) resources(r *response) {
	e, group, v := r.e, r.cs.chain, r.v
	for _, res := range e.Resources {
		hv, d := c.h.visible(e.Type, group, res.Name, v)
		mod := hv.mod
		switch {
		case res.Hash != "" && hv.hash != "" && res.Hash != hv.hash:
			c.bad(r, HalfApply, []int64{mod}, "carries %s with other bytes than at revision %d (mod revision %d)", res.Name, v, mod)
		case mod == 0 && d != 0:
			c.bad(r, Resurrected, []int64{d}, "carries %s, deleted at revision %d and not created again by %d", res.Name, d, v)
		case mod == 0:
			c.bad(r, HalfApply, nil, "carries %s, which does not exist at revision %d", res.Name, v)
		case e.Mode == record.ModeDelta && res.Version != strconv.FormatInt(mod, 10):
			c.bad(r, HalfApply, []int64{mod}, "carries %s at version %s; at revision %d it is at %d", res.Name, res.Version, v, mod)
		}
	}
	for _, name := range e.Removed {
		if hv, _ := c.h.visible(e.Type, group, name, v); hv.mod != 0 {
			mod := hv.mod
			c.bad(r, HalfApply, []int64{mod}, "removes %s, which exists at revision %d (mod revision %d)", name, v, mod)
		}
	}
}
