package delta

import (
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/scope"
	"github.com/legation-io/legation/internal/store"
)

// VHDS (on-demand virtual hosts): a client subscribes to
// "<route configuration>/<host>"; the answer is the virtual host of that
// route configuration whose domains match the host, named
// "<route configuration>/<virtual host>" and carrying the subscribed name
// as an alias. Virtual hosts are stored under their own names, which start
// with "<route configuration>/".

// resolveAlias returns the virtual host an alias names, nil if none
// matches. Domains match as Envoy matches them: an exact domain first,
// then the longest "*.suffix", then the longest "prefix.*", then "*".
func resolveAlias(snap *store.Snapshot, group, alias string) *store.Entry {
	rc, host, ok := strings.Cut(alias, "/")
	if !ok || rc == "" || host == "" {
		return nil
	}
	host = strings.ToLower(host)
	var best *store.Entry
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
	for n := range ts.names {
		if strings.HasPrefix(n, rc+"/") {
			ts.dirty[n] = true
		}
	}
	for n := range ts.have {
		if strings.HasPrefix(n, rc+"/") {
			ts.dirty[n] = true
		}
	}
}
