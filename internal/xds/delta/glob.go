package delta

import (
	"slices"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/xdstp"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// Glob collections (xRFC TP1 "Glob"): a subscription to
// xdstp://AUTHORITY/TYPE/DIR/*?PARAMS is one to every resource named
// directly under DIR with the same context parameters, now and as they
// come and go: "glob collections provide delta updates directly on
// directory resources". The glob is kept among the subscribed names;
// its members are evaluated in its place (expandGlobs), and a change is
// the stream's when its name's collection is subscribed (inGlob). An
// added member is sent alone and a removed one goes in
// removed_resources, so a change to a collection of 10,000 sends only
// what changed. LEDS is the use: a ClusterLoadAssignment's
// leds_cluster_locality_config names a glob of LbEndpoints.

// inGlob reports whether resource name n is a member of a glob
// collection ts subscribes to. Free while ts subscribes no glob.
func (ts *typeState) inGlob(n string) bool {
	if ts.globs == 0 {
		return false
	}
	g, ok := xdstp.CollectionOf(n)
	return ok && ts.names.Has(g)
}

// globsChanged takes the glob collections request r subscribed and
// unsubscribed, after subscribe has applied r to the names: it counts
// the globs held, marks the ones just subscribed to be answered (their
// members, or the glob in removed_resources when it has none), and
// forgets the held members of the ones unsubscribed, which the client
// drops. On a type's first request that presents
// initial_resource_versions the members are not forced: those versions
// say what the client holds.
func (ts *typeState) globsChanged(r *discoveryv3.DeltaDiscoveryRequest, first bool) {
	changed := false
	for _, n := range r.GetResourceNamesSubscribe() {
		if xdstp.IsGlob(n) {
			changed = true
			if ts.globAsked == nil {
				ts.globAsked = map[string]bool{}
			}
			ts.globAsked[n] = !first || len(r.GetInitialResourceVersions()) == 0
		}
	}
	for _, n := range r.GetResourceNamesUnsubscribe() {
		if !xdstp.IsGlob(n) || ts.names.Has(n) {
			continue
		}
		changed = true
		delete(ts.globAsked, n)
		var drop []string
		ts.have.Each(func(h string, _ held) {
			if g, ok := xdstp.CollectionOf(h); ok && g == n && !ts.wildcard && !ts.names.Has(h) {
				drop = append(drop, h)
			}
		})
		for _, h := range drop {
			ts.have.Drop(h)
		}
	}
	if changed {
		ts.globs = 0
		for n := range ts.names.All() {
			if xdstp.IsGlob(n) {
				ts.globs++
			}
		}
	}
}

// expandGlobs returns candidates with each subscribed glob replaced by
// its members the client may be sent, sorted, and the globs to list in
// removed_resources: those just subscribed that have no member (TP1: "If
// no resources are present in the glob collection, the server should
// reply with a DeltaDiscoveryResponse in which the glob collection URL
// is specified in removed_resources"). The members of a glob just
// subscribed are sent even if held.
func (st *stream) expandGlobs(ts *typeState, candidates []string) (out, empty []string) {
	if ts.globs == 0 {
		return candidates, nil
	}
	var members []string
	for _, n := range candidates {
		if !xdstp.IsGlob(n) || !ts.names.Has(n) {
			out = append(out, n)
			continue
		}
		force, asked := ts.globAsked[n]
		delete(ts.globAsked, n)
		delete(ts.force, n)
		es := scope.Members(st.Snap, ts.t, st.Chain, n)
		if len(es) == 0 && asked {
			empty = append(empty, n)
		}
		for _, e := range es {
			members = append(members, e.Name)
			if force {
				ts.force = xdsstream.MarkName(ts.force, e.Name)
			}
		}
	}
	if members == nil {
		return out, empty
	}
	out = append(out, members...)
	slices.Sort(out)
	return slices.Compact(out), empty
}
