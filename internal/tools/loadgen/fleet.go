package loadgen

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/legation-io/legation/internal/testkit/fixture"
)

// goal is what the clients are waited for: an EDS version, and for the
// initial sync every cluster held.
type goal struct {
	idx      int64 // 0: the initial sync; k: update k
	version  int64
	needHeld int32 // EDS resources
	// needRoutes is the route configurations (with listeners).
	needRoutes int32
	reached    atomic.Int64 // clients that reached it
}

// fleet is the clients of one run and what they count together.
type fleet struct {
	cfg   Config
	names []string       // the fixture's cluster names, by index
	index map[string]int // names' inverse; read only
	// routes and routeIndex are the same for route configurations.
	routes     []string
	routeIndex map[string]int

	clients []*client
	goal    atomic.Pointer[goal]

	streamErrors, reconnects, nacks, responses atomic.Int64

	errMu  sync.Mutex
	errors map[string]int // guarded by errMu: stream end errors by text, at most maxErrorKinds
}

const maxErrorKinds = 10

func (f *fleet) noteError(err error) {
	if err == nil {
		return
	}
	f.errMu.Lock()
	defer f.errMu.Unlock()
	if _, ok := f.errors[err.Error()]; ok || len(f.errors) < maxErrorKinds {
		f.errors[err.Error()]++
	}
}

// reach counts c as having reached the current goal, once.
func (f *fleet) reach(c *client) {
	g := f.goal.Load()
	if g == nil || c.edsVersion.Load() < g.version || c.heldN.Load() < g.needHeld || c.rdsHeldN.Load() < g.needRoutes {
		return
	}
	for {
		old := c.counted.Load()
		if old > g.idx {
			return
		}
		if c.counted.CompareAndSwap(old, g.idx+1) {
			// Counted on the goal loaded: a client late for the last
			// goal does not count towards the next.
			g.reached.Add(1)
			return
		}
	}
}

// setGoal starts waiting for g; clients already there count at once.
func (f *fleet) setGoal(g *goal) {
	f.goal.Store(g)
	for _, c := range f.clients {
		f.reach(c)
	}
}

// reached is the number of clients that reached the current goal.
func (f *fleet) reached() int64 {
	if g := f.goal.Load(); g != nil {
		return g.reached.Load()
	}
	return 0
}

// wait polls until every client reached the goal, or timeout.
func (f *fleet) wait(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for f.reached() < int64(len(f.clients)) {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
			return fmt.Errorf("%d of %d clients after %s", f.reached(), len(f.clients), timeout)
		case <-tick.C:
		}
	}
	return nil
}

func (f *fleet) sums() (bytes, resources int64) {
	for _, c := range f.clients {
		bytes += c.bytes.Load()
		resources += c.resources.Load()
	}
	return bytes, resources
}

// newFleet is a fleet, still without clients, for the fixture fx.
func newFleet(cfg Config, fx fixture.Set) *fleet {
	f := &fleet{cfg: cfg, index: make(map[string]int, cfg.Clusters), routeIndex: make(map[string]int, cfg.Listeners), errors: map[string]int{}}
	for i := range cfg.Listeners {
		f.routes = append(f.routes, fixture.RouteName(i))
		f.routeIndex[f.routes[i]] = i
	}
	for i, name := range fx.Clusters {
		f.names = append(f.names, name)
		f.index[name] = i
	}
	return f
}

func (f *fleet) errorKinds() map[string]int {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	if len(f.errors) == 0 {
		return nil
	}
	out := make(map[string]int, len(f.errors))
	for k, v := range f.errors {
		out[k] = v
	}
	return out
}
