package xdstest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/fixture"
)

// IdleWorld is the small real state the idle-cost tests' clients
// subscribe to, and the changes made to it while they do: clusters a and
// b with their endpoints, listener l1 routing through r1 to a cluster,
// and VHDS virtual hosts rc1/exact (a.example.com) and rc1/wild
// (*.example.com). Its methods are called from the test's goroutine.
type IdleWorld struct {
	e *Env
	// Changes is the number of changes made so far.
	Changes int
	// What is there now: cluster b and its endpoints, virtual host
	// rc1/exact; the cluster r1 routes to.
	b, exact bool
	routeTo  string
}

// IdleNames are the names an idle-cost client subscribes to, per type:
// those of the IdleWorld, one that never exists, and the wildcard "*".
// VHDS names are "<route configuration>/<host>" aliases.
var IdleNames = map[*resource.Type][]string{
	resource.Cluster:     {"a", "b", "never", "*"},
	resource.Endpoint:    {"a", "b", "never", "*"},
	resource.Listener:    {"l1", "never", "*"},
	resource.Route:       {"r1", "never", "*"},
	resource.VirtualHost: {"rc1/a.example.com", "rc1/b.example.com", "rc1/never.test", "never/x", "*"},
}

// RandomNames returns up to three names of t's IdleNames, a name
// possibly twice; nil at times.
func RandomNames(r *rand.Rand, t *resource.Type) []string {
	all := IdleNames[t]
	var out []string
	for range r.IntN(4) {
		out = append(out, all[r.IntN(len(all))])
	}
	return out
}

// NewIdleWorld writes the IdleWorld's first state to e.
func NewIdleWorld(tb testing.TB, e *Env) *IdleWorld {
	tb.Helper()
	w := &IdleWorld{e: e, b: true, exact: true, routeTo: "a"}
	d := store.DefaultScope
	e.Apply(tb, []store.Put{
		Put(tb, resource.Cluster, d, Cluster("a", 1)),
		Put(tb, resource.Endpoint, d, Endpoints("a", 8080)),
		Put(tb, resource.Cluster, d, Cluster("b", 1)),
		Put(tb, resource.Endpoint, d, Endpoints("b", 9090)),
		Put(tb, resource.Listener, d, APIListener(tb, "l1", "r1", true)),
		Put(tb, resource.Route, d, Route("r1", "l1", "a")),
		Put(tb, resource.VirtualHost, d, idleVHost("rc1/exact", "a.example.com")),
		Put(tb, resource.VirtualHost, d, idleVHost("rc1/wild", "*.example.com")),
	})
	return w
}

// Change makes one random change and waits until the view has it: new
// endpoints or a new version of cluster a, cluster b and its endpoints
// gone or back, l1 (on a new port) or r1 changed, virtual host rc1/exact gone or back.
func (w *IdleWorld) Change(tb testing.TB, r *rand.Rand) {
	tb.Helper()
	w.Changes++
	d := store.DefaultScope
	var puts []store.Put
	var dels []store.Key
	switch r.IntN(6) {
	case 0:
		puts = append(puts, Put(tb, resource.Endpoint, d, Endpoints("a", uint32(10000+w.Changes))))
	case 1:
		puts = append(puts, Put(tb, resource.Cluster, d, Cluster("a", int64(1+w.Changes))))
	case 2:
		if w.b {
			dels = append(dels, Key(resource.Cluster, "b"), Key(resource.Endpoint, "b"))
		} else {
			puts = append(puts, Put(tb, resource.Cluster, d, Cluster("b", 1)), Put(tb, resource.Endpoint, d, Endpoints("b", 9090)))
		}
		w.b = !w.b
	case 3:
		l, err := fixture.Listener("l1", "r1", uint32(10000+w.Changes))
		if err != nil {
			tb.Fatal(err)
		}
		puts = append(puts, Put(tb, resource.Listener, d, l))
	case 4:
		w.routeTo = map[string]string{"a": "b", "b": "a"}[w.routeTo]
		puts = append(puts, Put(tb, resource.Route, d, Route("r1", "l1", w.routeTo)))
	default:
		if w.exact {
			dels = append(dels, Key(resource.VirtualHost, "rc1/exact"))
		} else {
			puts = append(puts, Put(tb, resource.VirtualHost, d, idleVHost("rc1/exact", "a.example.com")))
		}
		w.exact = !w.exact
	}
	w.e.Apply(tb, puts, dels...)
}

// idleVHost is a VHDS virtual host named name (rc/host) matching domain.
func idleVHost(name, domain string) *routev3.VirtualHost {
	return &routev3.VirtualHost{Name: name, Domains: []string{domain}, Routes: []*routev3.Route{{
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "a"}}},
	}}}
}

// RandomIdleClient is an IdleClient that also takes random steps.
type RandomIdleClient interface {
	IdleClient
	// Step does one random thing a client may do.
	Step()
}

// RunIdleRounds runs the idle-cost property in rounds, one per seed, on
// the world w: each round opens 12 clients (newClient, given the round's
// test, its own random source and an id), has each take 40 random
// steps with a change of the world every 10, and checks the property
// (CheckIdle) with turns, the server's stream loops' counter. A failure
// names its round's seed.
func RunIdleRounds(t *testing.T, w *IdleWorld, turns *Turns, newClient func(t *testing.T, r *rand.Rand, id string) RandomIdleClient) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0))
			clients := make([]IdleClient, 0, 12)
			steppers := make([]RandomIdleClient, 0, 12)
			changes := w.Changes
			for i := range 12 {
				c := newClient(t, rand.New(rand.NewPCG(seed, uint64(i+1))), fmt.Sprintf("idle-%d-%d", seed, i))
				clients, steppers = append(clients, c), append(steppers, c)
			}
			for step := range 40 {
				for _, c := range steppers {
					c.Step()
				}
				if step%10 == 9 {
					w.Change(t, r)
				}
			}
			CheckIdle(t, clients, w.Changes-changes, turns)
		})
	}
}
