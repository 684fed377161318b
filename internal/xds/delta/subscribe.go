package delta

import (
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// subscribe applies the subscription changes of request r, the type's
// first if first.
func (st *stream) subscribe(ts *typeState, r *discoveryv3.DeltaDiscoveryRequest, first bool) error {
	t := ts.t
	names := &ts.names
	defer func() {
		names.Settle(&st.s.names)
		st.ChargeNames(t, "resource_names_unsubscribe", names.Cost()) //nolint:errcheck // what was subscribed fit; unsubscribing only lowers it
	}()
	for _, n := range r.GetResourceNamesSubscribe() {
		if n == "*" {
			ts.wildcard, ts.needAll = true, true
			continue
		}
		if !names.Has(n) {
			// Subscriptions accumulate over requests: the bounds are on
			// the total, checked before it grows.
			if err := st.CheckCount(t, xdsstream.LimitNames, "resource_names_subscribe", names.Len()+1); err != nil {
				return err
			}
			if err := st.ChargeNames(t, "resource_names_subscribe", names.Cost()+xdsstream.NameCost(n)); err != nil {
				return err
			}
			names.Add(n)
		}
		ts.dirty = xdsstream.MarkName(ts.dirty, n)
		// Always sent, since the client may have forgotten it, unless the
		// type's first request presents it in initial_resource_versions:
		// those say exactly what the client holds (promise 4), and Envoy
		// resubscribes every name it holds when it reconnects.
		if _, presented := r.GetInitialResourceVersions()[n]; !first || !presented {
			ts.force = xdsstream.MarkName(ts.force, n)
		}
		delete(ts.toldAbsent, n)
	}
	var ambiguous []string // unsubscribed while the wildcard held
	for _, n := range r.GetResourceNamesUnsubscribe() {
		if n == "*" {
			ts.wildcard = false
			var drop []string
			ts.have.Each(func(h string, _ held) {
				if !names.Has(h) {
					drop = append(drop, h)
				}
			})
			for _, h := range drop {
				ts.have.Drop(h)
			}
			continue
		}
		if !names.Remove(n) {
			continue // a phantom unsubscribe
		}
		delete(ts.force, n)
		delete(ts.toldAbsent, n)
		if ts.wildcard {
			ambiguous = append(ambiguous, n)
		} else {
			ts.have.Drop(n) // the client drops it
		}
	}
	if ts.wildcard {
		ts.answerAmbiguous(ambiguous)
	}
	return nil
}

// answerAmbiguous takes names unsubscribed while the wildcard holds
// (and still does after the request). xds_protocol.rst ("Unsubscribing
// from Resources"): the client "does not know whether or not to
// continue to cache the resource", so "the server must send a response
// that includes the specific resource in either the removed_resources
// field (if it is not included in the wildcard) or in the resources
// field (if it *is* included in the wildcard)". Each name counts as held
// at no known version, and forced: the flush sends it if the wildcard
// covers it (visible to the node), and removes it if not.
func (ts *typeState) answerAmbiguous(names []string) {
	for _, n := range names {
		if !ts.have.Has(n) {
			ts.have.Set(n, held{rev: -1}) // a version that names none
		}
		ts.dirty = xdsstream.MarkName(ts.dirty, n)
		ts.force = xdsstream.MarkName(ts.force, n)
	}
}

// checkBounds checks a request against the stream's bounds before any of
// it is kept: the length of every name, and the size of
// initial_resource_versions (accumulated subscriptions are checked as they
// grow, in Handle).
func (st *stream) checkBounds(t *resource.Type, r *discoveryv3.DeltaDiscoveryRequest) error {
	if err := st.CheckCount(t, xdsstream.LimitInitialVersion, "initial_resource_versions", len(r.GetInitialResourceVersions())); err != nil {
		return err
	}
	if err := st.CheckNames(t, "resource_names_subscribe", r.GetResourceNamesSubscribe()); err != nil {
		return err
	}
	if err := st.CheckNames(t, "resource_names_unsubscribe", r.GetResourceNamesUnsubscribe()); err != nil {
		return err
	}
	for n := range r.GetInitialResourceVersions() {
		if err := st.CheckName(t, "initial_resource_versions", n); err != nil {
			return err
		}
	}
	return nil
}
