package loadgen

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// The type URLs a client subscribes to.
const (
	cdsURL = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	edsURL = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	ldsURL = "type.googleapis.com/envoy.config.listener.v3.Listener"
	rdsURL = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	hcmURL = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)

// stamp is when a client's EDS version first reached version.
type stamp struct {
	version int64
	at      time.Time
}

// client is one simulated Envoy: one ADS stream at a time on a shared
// connection. Its run goroutine owns everything but the atomics and seen.
type client struct {
	f    *fleet
	id   int
	conn *grpc.ClientConn
	rng  *rand.Rand
	node *corev3.Node

	// subscribed and held are indexed by cluster: the EDS names asked for
	// and those received. Kept across reconnects, as Envoy keeps its
	// configuration.
	subscribed []bool
	held       []bool
	// rdsSubscribed and rdsHeld are the same for route configurations,
	// indexed by listener.
	rdsSubscribed []bool
	rdsHeld       []bool

	heldN      atomic.Int32 // true entries of held
	rdsHeldN   atomic.Int32 // true entries of rdsHeld
	edsVersion atomic.Int64 // the highest EDS version received
	counted    atomic.Int64 // 1 + the index of the last goal reached
	bytes      atomic.Int64 // bytes of responses received
	resources  atomic.Int64 // resources in responses received

	mu   sync.Mutex
	seen []stamp // guarded by mu: each raise of edsVersion, in order

	streams int64 // streams opened, when Config.Recorder is set

	// With Config.Resume, what the client holds, presented when it
	// reconnects: sotwVersions the version ACKed per type URL,
	// deltaVersions the version of each resource per type URL.
	sotwVersions  map[string]string
	deltaVersions map[string]map[string]string

	// Scratch space of the run goroutine, reused from one response to
	// the next: indexes of names, bodies, setSubscribed's want.
	idx    []int
	bodies [][]byte
	want   []bool
}

func newClient(f *fleet, id int, conn *grpc.ClientConn) *client {
	c := &client{
		f:          f,
		id:         id,
		conn:       conn,
		rng:        rand.New(rand.NewPCG(f.cfg.Seed, uint64(id))),
		node:       &corev3.Node{Id: fmt.Sprintf("%s-%05d", f.cfg.NodePrefix, id), Cluster: f.cfg.NodePrefix},
		subscribed: make([]bool, len(f.names)),
		held:       make([]bool, len(f.names)),

		rdsSubscribed: make([]bool, len(f.routes)),
		rdsHeld:       make([]bool, len(f.routes)),
		want:          make([]bool, max(len(f.names), len(f.routes))),
	}
	if f.cfg.Resume {
		c.sotwVersions = map[string]string{}
		c.deltaVersions = map[string]map[string]string{}
	}
	return c
}

// run opens the client's stream until ctx ends, again after each end with
// a capped exponential backoff (reset by a stream that received
// something), counting the ends as stream errors.
func (c *client) run(ctx context.Context) {
	backoff := c.f.cfg.BackoffBase
	for {
		var got bool
		var err error
		if c.f.cfg.Delta {
			got, err = c.delta(ctx)
		} else {
			got, err = c.sotw(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		c.f.streamErrors.Add(1)
		c.f.noteError(err)
		if got {
			backoff = c.f.cfg.BackoffBase
		}
		// Full jitter, as Envoy's backoff strategy.
		wait := time.Duration(c.rng.Int64N(int64(backoff)) + 1)
		backoff = min(2*backoff, c.f.cfg.BackoffMax)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		c.f.reconnects.Add(1)
	}
}

// nack reports whether to NACK the response just received: a fraction of
// them once the client is synced (before, a NACK would only delay the
// initial subscription, which Envoy's NACKs are not about).
func (c *client) nack() bool {
	r := c.f.cfg.NackRatio
	if r <= 0 || c.counted.Load() == 0 {
		return false
	}
	return c.rng.Float64() < r
}

func nackDetail() *status.Status {
	return &status.Status{Code: int32(codes.InvalidArgument), Message: "xds-loadgen: NACK by --nack-ratio"}
}

// received records an EDS response: its size and version, and the names
// it carries (held) or removes.
func (c *client) received(version int64, names []int, removed []int) {
	now := time.Now()
	for _, i := range names {
		if !c.held[i] {
			c.held[i] = true
			c.heldN.Add(1)
		}
	}
	for _, i := range removed {
		if c.held[i] {
			c.held[i] = false
			c.heldN.Add(-1)
		}
	}
	if version > c.edsVersion.Load() {
		c.mu.Lock()
		c.seen = append(c.seen, stamp{version: version, at: now})
		c.mu.Unlock()
		c.edsVersion.Store(version)
	}
	c.f.reach(c)
}

// receivedRoutes records an RDS response's route configurations.
func (c *client) receivedRoutes(names []int, removed []int) {
	for _, i := range names {
		if !c.rdsHeld[i] {
			c.rdsHeld[i] = true
			c.rdsHeldN.Add(1)
		}
	}
	for _, i := range removed {
		if c.rdsHeld[i] {
			c.rdsHeld[i] = false
			c.rdsHeldN.Add(-1)
		}
	}
	c.f.reach(c)
}

// routeNames returns the indexes of the route configurations the
// listeners of a response take over RDS (those of the fixture).
func (c *client) routeNames(bodies [][]byte) ([]int, error) {
	out := c.idx[:0]
	for _, b := range bodies {
		if err := listenerRoutes(b, func(route []byte) {
			if i, ok := c.f.routeIndex[string(route)]; ok {
				out = append(out, i)
			}
		}); err != nil {
			return nil, err
		}
	}
	c.idx = out
	return out, nil
}

// firstAt returns when the client's EDS version first reached version.
func (c *client) firstAt(version int64) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.seen {
		if s.version >= version {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// count counts a response of size bytes on the wire.
func (c *client) count(size, resources int) {
	c.bytes.Add(int64(size))
	c.resources.Add(int64(resources))
	c.f.responses.Add(1)
}

// serviceNames returns the indexes of the EDS service names of the
// clusters of a response (those of the fixture; others are left alone).
func (c *client) serviceNames(bodies [][]byte) ([]int, error) {
	out := c.idx[:0]
	for _, b := range bodies {
		name, err := clusterEDSName(b)
		if err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		if i, ok := c.f.index[string(name)]; ok {
			out = append(out, i)
		}
	}
	c.idx = out
	return out, nil
}

// parseVersion is a version as a number; 0 when it is not one (a hash).
func parseVersion(v string) int64 {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// parseVersionBytes is parseVersion(string(v)), without allocating for
// a version of up to 18 digits.
func parseVersionBytes(v []byte) int64 {
	if len(v) == 0 || len(v) > 18 {
		return parseVersion(string(v))
	}
	var n int64
	for _, d := range v {
		if d < '0' || d > '9' {
			return parseVersion(string(v))
		}
		n = 10*n + int64(d-'0')
	}
	return n
}

// setSubscribed makes subscribed (indexed like names) exactly idx, as a
// SotW client does from a full-state response; it returns the names
// subscribed, in index order, and whether the set changed. When it did
// not and prev (the names returned before) is not nil, it returns prev.
// want is scratch space, at least as long as subscribed.
func setSubscribed(subscribed []bool, idx []int, names, prev []string, want []bool) ([]string, bool) {
	want = want[:len(subscribed)]
	clear(want)
	for _, i := range idx {
		want[i] = true
	}
	changed := false
	for i, w := range want {
		if w != subscribed[i] {
			changed = true
			break
		}
	}
	copy(subscribed, want)
	if !changed && prev != nil {
		return prev, false
	}
	out := make([]string, 0, len(idx))
	for i, w := range want {
		if w {
			out = append(out, names[i])
		}
	}
	return out, changed
}

// addSubscribed marks idx subscribed, as a delta client does, and
// returns the names that were not yet.
func addSubscribed(subscribed []bool, idx []int, names []string) []string {
	var out []string
	for _, i := range idx {
		if !subscribed[i] {
			subscribed[i] = true
			out = append(out, names[i])
		}
	}
	return out
}
