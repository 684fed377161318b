package sotw

import (
	"slices"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// Per-resource errors in SotW (xdsstream/reserr.go has the rules). A
// name a stream subscribes to explicitly and is not sent is told once in
// resource_errors, in the response that would otherwise leave the
// client waiting for its does-not-exist timeout: the first answer to the
// name, or the one after the resource is deleted. It is told again only
// with another code, or after the client unsubscribed and subscribed it
// again. A resource that appears later is sent as any change is, which
// clears the error for the client.

// absentNamed appends to errs the error of name n of ts, an EDS/RDS-like
// type, not sent at this flush; visible is what the node's scopes hold
// under n (nil: nothing).
func (ts *typeState) absentNamed(errs []xdsstream.ResourceErr, n string, visible *view.Entry) []xdsstream.ResourceErr {
	if ts.wildcard || !ts.names.Has(n) {
		return errs
	}
	return ts.told.Add(errs, n, xdsstream.AbsentCode(visible))
}

// absentFull returns the errors a full-state (LDS/CDS-like) response of
// ts is to carry: the names subscribed explicitly that visible, the
// entries the node's scopes hold under the subscribed names (sorted by
// name, before Sendable), lacks or the stream withholds, and that the
// client was not told of yet. Names that are sent are forgotten.
func (st *stream) absentFull(ts *typeState, visible []*view.Entry) []xdsstream.ResourceErr {
	if ts.wildcard {
		return nil
	}
	var errs []xdsstream.ResourceErr
	i := 0
	for _, n := range ts.names.Sorted() {
		for i < len(visible) && visible[i].Name < n {
			i++
		}
		switch {
		case i == len(visible) || visible[i].Name != n:
			errs = ts.told.Add(errs, n, codes.NotFound)
		case visible[i].InlineKey && !st.KeysAllowed():
			errs = ts.told.Add(errs, n, codes.PermissionDenied)
		default:
			ts.told.Forget(n)
		}
	}
	return errs
}

// errors returns the resource errors of a poll's answer, visible being
// the entries the node's scopes hold under the names asked (sorted by
// name, before keys are withheld): a poll has no memory, so its answer
// tells every name asked explicitly that it leaves out, as a stream's
// first answer does. The errors depend only on what the poll's cache key
// names (type, scope chain, names, wildcard, keysOK) and the revision.
func (p *polled) errors(visible []*view.Entry) []xdsstream.ResourceErr {
	if p.wildcard {
		return nil
	}
	byName := make(map[string]*view.Entry, len(visible))
	for _, e := range visible {
		byName[e.Name] = e
	}
	var errs []xdsstream.ResourceErr
	seen := make(map[string]bool, len(p.names))
	for _, n := range p.names {
		if seen[n] {
			continue
		}
		seen[n] = true
		switch e := byName[n]; {
		case e == nil:
			errs = append(errs, xdsstream.ResourceErr{Name: n, Code: codes.NotFound})
		case e.InlineKey && !p.keysOK:
			errs = append(errs, xdsstream.ResourceErr{Name: n, Code: codes.PermissionDenied})
		}
	}
	slices.SortFunc(errs, func(a, b xdsstream.ResourceErr) int { return strings.Compare(a.Name, b.Name) })
	return errs
}
