package delta

import (
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// Per-resource errors in delta (xdsstream/reserr.go has the rules). Each
// name a response lists in removed_resources that the stream subscribes
// to explicitly also gets a resource error saying why it is not sent:
// NOT_FOUND, which TP3 has clients treat exactly as removed_resources,
// or PERMISSION_DENIED for a resource withheld for its inline private
// key. removed_resources stays, for the clients that do not read the
// errors. So an error goes when removed_resources already goes: once per
// subscription for a name that does not exist, and once when a held
// resource is deleted; names held only through a wildcard subscription
// get none. A VHDS alias that resolves to nothing is NOT_FOUND.

// resourceErrors returns, in the order of removed, the errors of a
// response of ts listing removed in removed_resources.
func (st *stream) resourceErrors(ts *typeState, removed []string) []xdsstream.ResourceErr {
	var errs []xdsstream.ResourceErr
	for _, n := range removed {
		if !ts.names.Has(n) {
			continue
		}
		errs = append(errs, xdsstream.ResourceErr{Name: n, Code: xdsstream.AbsentCode(scope.Visible(st.Snap, ts.t, st.Chain, n))})
	}
	return errs
}
