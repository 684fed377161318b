package delta

import (
	"strings"
	"sync"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/xds/limits"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// VHDS (on-demand virtual hosts): a client subscribes to
// "<route configuration>/<host>"; the answer is the virtual host of that
// route configuration whose domains match the host, named
// "<route configuration>/<virtual host>" and carrying the subscribed name
// as an alias. Virtual hosts are stored under their own names, which start
// with "<route configuration>/".
//
// Domains match as Envoy matches them: an exact domain first, then the
// longest "*.suffix", then the longest "prefix.*", then "*"; among equals
// the first virtual host in name order. An alias is resolved from an
// aliasIndex built once per (revision, group) and shared by every stream
// at that revision, so a flush of n aliases costs n lookups of
// O(len(host)) each rather than n decodes of every virtual host.

// aliasIndex answers resolveAlias for one snapshot and group. It is
// immutable once built.
type aliasIndex struct {
	rcs map[string]*rcIndex // route configuration -> its domains
}

// rcIndex holds the lower-cased domains of one route configuration's
// virtual hosts; each map keeps the first virtual host (in name order) of
// a domain, the one matchDomain's strict comparison keeps.
type rcIndex struct {
	exact  map[string]*view.Entry // domain
	suffix map[string]*view.Entry // "*.example.com" under ".example.com"
	prefix map[string]*view.Entry // "www.example.*" under "www.example."
	any    *view.Entry            // the first "*"
}

// buildAliasIndex decodes every virtual host visible to chain c in snap
// once.
func buildAliasIndex(snap *view.Snapshot, c scope.Chain) *aliasIndex {
	x := &aliasIndex{rcs: map[string]*rcIndex{}}
	for _, e := range scope.Entries(snap, resource.VirtualHost, c, nil, true) {
		rc, _, ok := strings.Cut(e.Name, "/")
		if !ok {
			continue // not a VHDS name: no alias reaches it
		}
		m, err := resource.Unmarshal(resource.VirtualHost, e.Body.GetValue())
		if err != nil {
			continue // the view only holds values that decode
		}
		r := x.rcs[rc]
		if r == nil {
			r = &rcIndex{exact: map[string]*view.Entry{}, suffix: map[string]*view.Entry{}, prefix: map[string]*view.Entry{}}
			x.rcs[rc] = r
		}
		for _, d := range m.(*routev3.VirtualHost).GetDomains() {
			d = strings.ToLower(d)
			first(r.exact, d, e)
			if d == "*" {
				if r.any == nil {
					r.any = e
				}
				continue
			}
			// A domain both starting and ending with "*" may match either
			// way; matchDomain tries the suffix first, and a suffix match
			// outranks every prefix match, so listing it in both is exact.
			if s, ok := strings.CutPrefix(d, "*"); ok {
				first(r.suffix, s, e)
			}
			if p, ok := strings.CutSuffix(d, "*"); ok {
				first(r.prefix, p, e)
			}
		}
	}
	return x
}

func first(m map[string]*view.Entry, k string, e *view.Entry) {
	if _, ok := m[k]; !ok {
		m[k] = e
	}
}

// resolve returns the virtual host an alias names, nil if none matches:
// what matchDomain ranks best over every domain of the alias's route
// configuration.
func (x *aliasIndex) resolve(alias string) *view.Entry {
	rc, host, ok := strings.Cut(alias, "/")
	if !ok || rc == "" || host == "" {
		return nil
	}
	r := x.rcs[rc]
	if r == nil {
		return nil
	}
	host = strings.ToLower(host)
	if e := r.exact[host]; e != nil {
		return e
	}
	// The longest proper suffix of host, then the longest proper prefix:
	// a wildcard matches at least one character.
	for i := 1; i < len(host); i++ {
		if e := r.suffix[host[i:]]; e != nil {
			return e
		}
	}
	for i := len(host) - 1; i > 0; i-- {
		if e := r.prefix[host[:i]]; e != nil {
			return e
		}
	}
	return r.any
}

// aliasIndexes shares alias indexes among streams: those of the latest
// revision a stream asked for, one per group with virtual hosts of its
// own (a group with none sees the default scope's, and shares its index),
// each built once however many streams ask at once. A newer revision
// drops the older ones, so it holds at most one revision's indexes, and
// beside the default scope's at most max of them (--max-vhds-groups): a
// stream needing one more ends with RESOURCE_EXHAUSTED. Its methods may
// be called concurrently.
type aliasIndexes struct {
	max limits.Bound[int] // indexes per revision, beside the default scope's

	mu  sync.Mutex // guards rev, m, own
	rev int64
	m   map[string]*lazyIndex // group ("" for the default scope's) -> index at rev
	own int                   // entries of m for groups, not the default scope's

	built func() // if set, called once per index built (a metric or a test)
	full  func() // if set, called once per index refused by max (a metric)
}

type lazyIndex struct {
	once sync.Once
	x    *aliasIndex
}

// get returns the alias index of snap for chain ch (a group, or a canary
// node's chain), building it the first time. A snapshot older than the
// latest asked for gets an index of its own, not kept: the caller should
// keep it for the rest of its flush.
func (c *aliasIndexes) get(snap *view.Snapshot, ch scope.Chain) (*aliasIndex, error) {
	if ch != "" && !hasOwnChain(snap, ch) {
		ch = "" // it sees the default scope's virtual hosts alone
	}
	group := string(ch)
	c.mu.Lock()
	if snap.Revision > c.rev || c.m == nil {
		c.rev, c.m, c.own = snap.Revision, map[string]*lazyIndex{}, 0
	}
	var l *lazyIndex
	if snap.Revision == c.rev {
		l = c.m[group]
		if l == nil && group != "" && !c.max.Allows(c.own+1) {
			c.mu.Unlock()
			if c.full != nil {
				c.full()
			}
			return nil, status.Errorf(codes.ResourceExhausted,
				"VHDS: alias indexes of %v node groups with virtual hosts of their own are kept, the bound (--max-vhds-groups); group %q would be one more", c.max, group)
		}
		if l == nil {
			l = &lazyIndex{}
			c.m[group] = l
			if group != "" {
				c.own++
			}
		}
	} else {
		l = &lazyIndex{}
	}
	c.mu.Unlock()
	l.once.Do(func() {
		l.x = buildAliasIndex(snap, ch)
		if c.built != nil {
			c.built()
		}
	})
	return l.x, nil
}

// hasOwnChain reports whether a scope of chain c besides the default one
// holds a virtual host.
func hasOwnChain(snap *view.Snapshot, c scope.Chain) bool {
	found := false
	c.Each(func(s string) bool {
		found = s != store.DefaultScope && hasOwn(snap, resource.VirtualHost, s)
		return !found
	})
	return found
}

// hasOwn reports whether scope holds a resource of type t.
func hasOwn(snap *view.Snapshot, t *resource.Type, scope string) bool {
	found := false
	snap.Walk(t, scope, func(*view.Entry) bool {
		found = true
		return false
	})
	return found
}

// resolveAlias returns the virtual host an alias names, nil if none
// matches, decoding every virtual host of the group: the reference
// aliasIndex.resolve must agree with (tests only use it now).
func resolveAlias(snap *view.Snapshot, group scope.Chain, alias string) *view.Entry {
	rc, host, ok := strings.Cut(alias, "/")
	if !ok || rc == "" || host == "" {
		return nil
	}
	host = strings.ToLower(host)
	var best *view.Entry
	bestRank, bestLen := 0, -1
	for _, e := range scope.Entries(snap, resource.VirtualHost, group, nil, true) {
		if !strings.HasPrefix(e.Name, rc+"/") {
			continue
		}
		m, err := resource.Unmarshal(resource.VirtualHost, e.Body.GetValue())
		if err != nil {
			continue // the view only holds values that decode
		}
		for _, d := range m.(*routev3.VirtualHost).GetDomains() {
			rank, n := matchDomain(strings.ToLower(d), host)
			if rank > bestRank || (rank == bestRank && rank > 0 && n > bestLen) {
				best, bestRank, bestLen = e, rank, n
			}
		}
	}
	return best
}

// matchDomain ranks how domain matches host: 4 exact, 3 suffix wildcard,
// 2 prefix wildcard, 1 "*", 0 no match; n is the matched length.
func matchDomain(domain, host string) (rank, n int) {
	switch {
	case domain == host:
		return 4, len(domain)
	case domain == "*":
		return 1, 0
	case strings.HasPrefix(domain, "*") && strings.HasSuffix(host, domain[1:]) && len(host) > len(domain)-1:
		return 3, len(domain)
	case strings.HasSuffix(domain, "*") && strings.HasPrefix(host, domain[:len(domain)-1]) && len(host) > len(domain)-1:
		return 2, len(domain)
	}
	return 0, 0
}

// markAliases marks dirty the subscribed aliases of the route configuration
// of a changed virtual host ("<route configuration>/<virtual host>").
func markAliases(ts *typeState, changed string) {
	rc, _, ok := strings.Cut(changed, "/")
	if !ok {
		return
	}
	for n := range ts.names.All() {
		if strings.HasPrefix(n, rc+"/") {
			ts.dirty = xdsstream.MarkName(ts.dirty, n)
		}
	}
	ts.have.Each(func(n string, _ held) {
		if strings.HasPrefix(n, rc+"/") {
			ts.dirty = xdsstream.MarkName(ts.dirty, n)
		}
	})
}
