package node_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/resource"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/xdstest"
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
	s := xdstest.OpenSotW(t, xdstest.Dial(t, addr))
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
// "draining", spread over --drain-period rather than all at once; then
// Run returns.
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
	for i := range streams {
		streams[i] = openCDS(t, r.XDSAddr(), fmt.Sprintf("n%02d", i))
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

// TestDrainToSurvivor: two replicas in one cluster; 50 clients on A, some
// served there and some relayed to B. A is stopped (SIGTERM): each client
// whose stream A closes reconnects at once to B (as through a load
// balancer, A being not ready), where it is served. The drain spreads the
// reconnects over --drain-period: B's rate of new streams stays near
// 50/2s, never all 50 in one second.
func TestDrainToSurvivor(t *testing.T) {
	checkLeaks(t)
	e := newXDSEnv(t)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	cfgA, cfgB := e.config(t), e.config(t)
	cfgA.Name, cfgB.Name = "a", "b"
	cfgA.DrainPeriod = 2 * time.Second
	a := startXDS(t, cfgA, rev)
	b := startXDS(t, cfgB, rev)
	for _, r := range []*running{a, b} {
		xdstest.WaitFor(t, "a ring of both replicas", func() (bool, string) {
			c := getDebugCluster(t, r)
			return len(c.Ring) == 2, fmt.Sprint(c.Ring)
		})
	}

	const n = 50
	streams := make([]*xdstest.SotWStream, n)
	for i := range streams {
		streams[i] = openCDS(t, a.XDSAddr(), fmt.Sprintf("n%02d", i))
	}
	before := getDebugCluster(t, a)
	ends, wait := followEnds(streams)

	began := time.Now()
	a.cancel()
	var reconnects []time.Duration
	for range n {
		select {
		case end := <-ends:
			if !isDraining(end.err) {
				t.Errorf("stream %d ended with %v, want UNAVAILABLE draining", end.i, end.err)
			}
			openCDS(t, b.XDSAddr(), fmt.Sprintf("n%02d", end.i))
			reconnects = append(reconnects, time.Since(began))
		case <-time.After(xdstest.Timeout):
			t.Fatalf("%d of %d streams still open on A", n-len(reconnects), n)
		}
	}
	wait()
	a.stop(t)
	slices.Sort(reconnects)
	most := maxPerSecond(reconnects)
	t.Logf("A served %d streams and relayed %d to B; after SIGTERM B got them back from %s to %s, at most %d in one second (period %s)",
		before.Local, before.Relayed, reconnects[0], reconnects[n-1], most, cfgA.DrainPeriod)
	if before.Local == 0 || before.Relayed == 0 {
		t.Errorf("A served %d streams and relayed %d: want some of each", before.Local, before.Relayed)
	}
	// 25 a second on average; the jitter may bunch a few.
	if limit := n * 3 / 4; most > limit {
		t.Errorf("B got %d new streams in one second, want at most %d", most, limit)
	}
	if c := getDebugCluster(t, b); c.Local != n || c.Relayed != 0 {
		t.Errorf("B serves %d streams and relays %d, want %d and 0", c.Local, c.Relayed, n)
	}
}
