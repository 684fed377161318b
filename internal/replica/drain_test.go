package replica_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// streamEnd is when a client's stream ended and with what.
type streamEnd struct {
	i   int
	at  time.Time
	err error
}

// openCDS opens a SotW ADS stream to addr on a connection of its own as
// node id, asks for every cluster and waits for the answer.
func openCDS(t *testing.T, addr, id string) *xdstest.SotWStream {
	t.Helper()
	return openCDSOn(t, xdstest.Dial(t, addr), id)
}

// openCDSOn is openCDS on cc.
func openCDSOn(t *testing.T, cc *grpc.ClientConn, id string) *xdstest.SotWStream {
	t.Helper()
	s := xdstest.OpenSotW(t, cc)
	s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node(id, "c1"), TypeUrl: resource.Cluster.URL})
	s.Expect()
	return s
}

// followEnds follows each stream from a goroutine of its own and sends
// its end on the returned channel (buffered for all of them); wait waits
// for the goroutines.
func followEnds(streams []*xdstest.SotWStream) (ends <-chan streamEnd, wait func()) {
	ch := make(chan streamEnd, len(streams))
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Go(func() {
			for r := range s.Recv() {
				if r.Err != nil {
					ch <- streamEnd{i, time.Now(), r.Err}
					return
				}
			}
		})
	}
	return ch, wg.Wait
}

// isDraining reports whether err is UNAVAILABLE saying the replica drains.
func isDraining(err error) bool {
	st := grpcstatus.Convert(err)
	return st.Code() == codes.Unavailable && strings.Contains(st.Message(), "draining")
}

// TestDrain: on shutdown (Run's ctx ends, as on SIGTERM) a replica with
// 50 streams is not ready (/readyz 503, gRPC health NOT_SERVING) and
// refuses new streams while it closes the 50, each with UNAVAILABLE
// "draining", spread over --drain-period rather than all at once, and
// their connections; then Run returns.
func TestDrain(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	cfg := e.config(t)
	cfg.Standalone = true
	cfg.DrainPeriod = 2 * time.Second
	cfg.ShutdownTimeout = 5 * time.Second
	r := startXDS(t, cfg, rev)

	const n = 50
	streams := make([]*xdstest.SotWStream, n)
	ccs := make([]*grpc.ClientConn, n)
	for i := range streams {
		ccs[i] = xdstest.Dial(t, r.XDSAddr())
		streams[i] = openCDSOn(t, ccs[i], fmt.Sprintf("n%02d", i))
	}
	hc, closeHC := grpcHealth(t, r)
	defer closeHC()
	ends, wait := followEnds(streams)

	began := time.Now()
	r.cancel()
	first := <-ends
	// The first stream closes once the replica is no longer ready; the
	// drain goes on for about 2s.
	if code, body := get(t, r, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Errorf("/readyz during the drain = %d %q, want 503 shutting down", code, body)
	}
	if st := checkHealth(t, hc); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health during the drain = %v, want NOT_SERVING", st)
	}
	late := xdstest.OpenSotW(t, xdstest.Dial(t, r.XDSAddr()))
	// The replica may refuse the stream before the request is sent: Send
	// then says io.EOF, and the status is Recv's.
	if err := late.Client().Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("late", "c1"), TypeUrl: resource.Cluster.URL}); err != nil && !errors.Is(err, io.EOF) {
		t.Errorf("sending on a stream opened during the drain: %v", err)
	}
	if err := late.ExpectErr(); !isDraining(err) {
		t.Errorf("a stream opened during the drain ended with %v, want UNAVAILABLE draining", err)
	}
	// The first stream's connection is closed shortly after it, mid-drain.
	connCtx, connCancel := context.WithTimeout(context.Background(), time.Second)
	for cc := ccs[first.i]; cc.GetState() == connectivity.Ready && cc.WaitForStateChange(connCtx, connectivity.Ready); {
	}
	connCancel()
	if st := ccs[first.i].GetState(); st == connectivity.Ready {
		t.Errorf("the first drained stream's connection is still %v a second later", st)
	}
	duringDrain := time.Since(began)

	offsets := []time.Duration{first.at.Sub(began)}
	if !isDraining(first.err) {
		t.Errorf("stream %d ended with %v, want UNAVAILABLE draining", first.i, first.err)
	}
	for range n - 1 {
		select {
		case end := <-ends:
			if !isDraining(end.err) {
				t.Errorf("stream %d ended with %v, want UNAVAILABLE draining", end.i, end.err)
			}
			offsets = append(offsets, end.at.Sub(began))
		case <-time.After(xdstest.Timeout):
			t.Fatalf("%d of %d streams still open", n-len(offsets), n)
		}
	}
	wait()
	// Each client's connection was closed too: a retry on it would come
	// back to this replica, a new one goes through the load balancer.
	for i, cc := range ccs {
		ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
		for cc.GetState() == connectivity.Ready && cc.WaitForStateChange(ctx, connectivity.Ready) {
		}
		cancel()
		if st := cc.GetState(); st == connectivity.Ready {
			t.Errorf("client %d's connection still %v after its stream was drained", i, st)
		}
	}
	r.stop(t)
	slices.Sort(offsets)
	last := offsets[n-1]
	early := countBelow(offsets, cfg.DrainPeriod/10)
	t.Logf("%d streams closed from %s to %s after shutdown began (period %s), %d in the first tenth; checks during the drain done by %s",
		n, offsets[0], last, cfg.DrainPeriod, early, duringDrain)
	if early > n/4 {
		t.Errorf("%d of %d streams closed within the first tenth of the drain period", early, n)
	}
	if last < cfg.DrainPeriod/2 {
		t.Errorf("the last stream closed %s after shutdown began: not spread over the %s period", last, cfg.DrainPeriod)
	}
	if slack := time.Second; last > cfg.DrainPeriod+slack {
		t.Errorf("the last stream closed %s after shutdown began, want within %s", last, cfg.DrainPeriod+slack)
	}
	if duringDrain > last {
		t.Errorf("the checks during the drain took until %s, after the last stream closed at %s: they may not have run during it", duringDrain, last)
	}
}

// countBelow is how many of sorted are below d.
func countBelow(sorted []time.Duration, d time.Duration) int {
	i, _ := slices.BinarySearch(sorted, d)
	return i
}

// debugCluster is the part of /debug/cluster the drain test reads.
type debugCluster struct {
	Ring    []string `json:"ring"`
	Relayed int      `json:"streams_relayed"`
	Local   int      `json:"streams_local"`
}

func getDebugCluster(t testing.TB, r *running) debugCluster {
	t.Helper()
	code, body := get(t, r, "/debug/cluster")
	var c debugCluster
	if code != http.StatusOK {
		t.Fatalf("/debug/cluster = %d %s", code, body)
	}
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatalf("/debug/cluster: %v\n%s", err, body)
	}
	return c
}

// maxPerSecond is the most offsets (sorted) in any window of a second.
func maxPerSecond(sorted []time.Duration) int {
	most := 0
	for i, from := range sorted {
		most = max(most, countBelow(sorted[i:], from+time.Second))
	}
	return most
}

// clients follow streams that may be closed on them: each ended stream
// is sent, once, on ends.
type clients struct {
	ends chan streamEnd
	stop chan struct{} // ends the following: close it before the streams' cleanups
	wg   sync.WaitGroup
}

func newClients(n int) *clients {
	return &clients{ends: make(chan streamEnd, 10*n), stop: make(chan struct{})}
}

// follow follows stream s of client i.
func (c *clients) follow(i int, s *xdstest.SotWStream) {
	c.wg.Go(func() {
		for {
			select {
			case r := <-s.Recv():
				if r.Err != nil {
					c.ends <- streamEnd{i, time.Now(), r.Err}
					return
				}
			case <-c.stop:
				return
			}
		}
	})
}

// close stops following and waits for the goroutines.
func (c *clients) close() {
	close(c.stop)
	c.wg.Wait()
}

// next waits for a stream to end.
func (c *clients) next(t *testing.T, open int) streamEnd {
	t.Helper()
	select {
	case end := <-c.ends:
		return end
	case <-time.After(xdstest.Timeout):
		t.Fatalf("no stream ended, %d open", open)
		return streamEnd{}
	}
}

// tryOpen opens a CDS stream to addr as node id on a connection of its
// own and waits for the first response; a stream that ends first (the
// replica refused it) returns its error.
func tryOpen(t *testing.T, addr, id string) (*xdstest.SotWStream, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(xdstest.Dial(t, addr)).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		return nil, err // gone: a replica that stopped
	}
	s := xdstest.NewSotW(t, st, cancel)
	if err := s.Client().Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node(id, "c1"), TypeUrl: resource.Cluster.URL}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	select {
	case r := <-s.Recv():
		if r.Err != nil {
			return nil, r.Err
		}
		return s, nil
	case <-time.After(xdstest.Timeout):
		t.Fatalf("no response from %s to %s", addr, id)
		return nil, nil
	}
}

// TestDrainRolling: a rolling restart of a cluster of two replicas, with
// 50 clients, each reconnecting at once when its stream ends, to a ready
// replica (as a load balancer checking /readyz would send it). A and B
// serve them, some locally and some relayed; A is stopped (SIGTERM): its
// drain spreads the reconnects to B over --drain-period, B's rate of new
// streams staying near 50/2s, never all 50 in one second. Then C joins
// (B rebalances some streams to it) and B is stopped: the clients end
// up on C, again at a bounded rate.
func TestDrainRolling(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	logs := map[string]*testbase.LockedBuffer{}
	replica := func(name string) *running {
		cfg := e.config(t)
		cfg.Name = name
		cfg.DrainPeriod = 2 * time.Second
		if name == "a" {
			// 50 streams over 2s is 25 a second: more than one peer
			// admitting 10 a second takes, which A warns of.
			cfg.StreamRate, cfg.StreamBurst = 10, 100
		}
		logs[name] = &testbase.LockedBuffer{}
		cfg.Logger = slog.New(slog.NewTextHandler(logs[name], nil))
		return startXDS(t, cfg, rev)
	}
	waitRing := func(rs ...*running) {
		for _, r := range rs {
			xdstest.WaitFor(t, "a ring of two replicas", func() (bool, string) {
				c := getDebugCluster(t, r)
				return len(c.Ring) == 2, fmt.Sprint(c.Ring)
			})
		}
	}
	a, b := replica("a"), replica("b")
	waitRing(a, b)

	const n = 50
	cl := newClients(n)
	defer cl.close()
	id := func(i int) string { return fmt.Sprintf("n%02d", i) }
	for i := range n {
		cl.follow(i, openCDS(t, a.XDSAddr(), id(i)))
	}
	onA := getDebugCluster(t, a)
	if onA.Local == 0 || onA.Relayed == 0 {
		t.Errorf("A serves %d streams and relays %d: want some of each", onA.Local, onA.Relayed)
	}

	// reconnect reconnects every client whose stream ends to to (or, if
	// refused or gone there, to the next of to), until want of them are on the
	// last, and returns when each got its first response there, from
	// began.
	reconnect := func(want int, began time.Time, to ...*running) []time.Duration {
		var at []time.Duration
		for len(at) < want {
			end := cl.next(t, n-len(at))
			st := grpcstatus.Convert(end.err)
			if st.Code() != codes.Unavailable {
				t.Errorf("stream of %s ended with %v, want UNAVAILABLE", id(end.i), end.err)
			}
			for k, r := range to {
				s, err := tryOpen(t, r.XDSAddr(), id(end.i))
				if err != nil {
					// Refused (draining), or gone (stopped).
					if k == len(to)-1 {
						t.Fatalf("reconnecting %s: %v", id(end.i), err)
					}
					continue
				}
				cl.follow(end.i, s)
				if k == len(to)-1 {
					at = append(at, time.Since(began))
				}
				break
			}
		}
		slices.Sort(at)
		return at
	}
	check := func(what string, at []time.Duration) {
		most := maxPerSecond(at)
		t.Logf("%s: %d reconnects from %s to %s after SIGTERM, at most %d in one second (drain period 2s)", what, len(at), at[0], at[len(at)-1], most)
		// 25 a second on average; the jitter may bunch a few.
		if limit := n * 3 / 4; most > limit {
			t.Errorf("%s: %d new streams in one second, want at most %d", what, most, limit)
		}
	}

	began := time.Now()
	a.cancel()
	check("A to B", reconnect(n, began, b))
	a.stop(t)
	const tooFast = "the drain closes streams faster than the other replicas admit them"
	if l := logs["a"].String(); !strings.Contains(l, tooFast) || !strings.Contains(l, "drain_period_needed=5s") {
		t.Errorf("A (--stream-rate 10, 50 streams, one peer, --drain-period 2s) did not warn %q with drain_period_needed=5s:\n%s", tooFast, l)
	}
	if c := getDebugCluster(t, b); c.Local != n || c.Relayed != 0 {
		t.Errorf("B serves %d streams and relays %d, want %d and 0", c.Local, c.Relayed, n)
	}

	c := replica("c")
	waitRing(b, c)
	// B may be rebalancing streams to C meanwhile: those clients come
	// back to B (relayed to C), or, once B drains, to C.
	began = time.Now()
	b.cancel()
	check("B to C", reconnect(n, began, b, c))
	b.stop(t)
	if l := logs["b"].String(); strings.Contains(l, tooFast) {
		t.Errorf("B (--stream-rate 1000) warned that its drain is too fast:\n%s", l)
	}
	if got := getDebugCluster(t, c); got.Local != n {
		t.Errorf("C serves %d streams, want %d", got.Local, n)
	}
}
