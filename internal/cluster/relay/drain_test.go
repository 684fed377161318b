package relay_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// ended is when a stream ended and with what.
type ended struct {
	at  time.Time
	err error
}

// watchEnds follows each stream from a goroutine of its own and returns
// the func that waits for them all to end and returns their ends.
func watchEnds[Req, Resp any](streams []*xdstest.Stream[Req, Resp]) func() []ended {
	out := make([]ended, len(streams))
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Go(func() {
			for r := range s.Recv() {
				if r.Err != nil {
					out[i] = ended{time.Now(), r.Err}
					return
				}
			}
		})
	}
	return func() []ended { wg.Wait(); return out }
}

// Drain closes every stream, local and relayed, with UNAVAILABLE
// "draining", spread over the period and not all at once; from its start
// new streams are refused with the same status and Rebalance does
// nothing.
func TestDrain(t *testing.T) {
	c := newCluster(t)
	a := c.addReplica(t, "a")
	b := c.addReplica(t, "b")
	c.apply(t, clusters(1)...)
	homes := map[string]string{}
	var streams []*xdstest.Stream[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]
	const local, relayed = 20, 10
	for i := range local + relayed {
		id := fmt.Sprintf("n%02d", i)
		if i >= local {
			homes[id] = "b"
		}
		a.setHomes(homes)
		s := adsStream(t, a.addr)
		s.Send(cdsRequest(id))
		s.Expect()
		streams = append(streams, s.Stream)
	}
	// A delta stream, local, is drained as well.
	d := deltaADSStream(t, a.addr)
	d.Send(deltaCDSRequest("d"))
	d.Expect()
	waitFor(t, "B to serve the relayed streams", func() bool { return len(b.relay.Streams()) == relayed })
	wait := watchEnds(streams)
	waitDelta := watchEnds([]*xdstest.Stream[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]{d.Stream})

	const period = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	began := time.Now()
	done := make(chan int)
	go func() { done <- a.relay.Drain(ctx, period) }()

	// A stream arriving during the drain is refused.
	waitFor(t, "the drain to begin", func() bool { return metric(t, a.reg, "legation_relay_drain_closes_total") > 0 })
	late := adsStream(t, a.addr)
	// The replica may refuse the stream before the request is sent: Send
	// then says io.EOF, and the status is Recv's.
	if err := late.Client().Send(cdsRequest("late")); err != nil && !errors.Is(err, io.EOF) {
		t.Errorf("sending on a stream opened during the drain: %v", err)
	}
	expectDraining(t, "a stream opened during the drain", late.ExpectErr())
	if got := a.relay.Rebalance(ctx, ring("a", map[string]string{"n00": "b"})); got != 0 {
		t.Errorf("Rebalance during the drain closed %d streams, want 0", got)
	}

	if got := <-done; got != local+relayed+1 {
		t.Errorf("Drain closed %d streams, want %d", got, local+relayed+1)
	}
	if got := metric(t, a.reg, "legation_relay_drain_closes_total"); got != local+relayed+1 {
		t.Errorf("legation_relay_drain_closes_total = %v, want %d", got, local+relayed+1)
	}
	expectDraining(t, "the delta stream", waitDelta()[0].err)
	var offsets []time.Duration
	for i, e := range wait() {
		expectDraining(t, fmt.Sprintf("stream %d", i), e.err)
		offsets = append(offsets, e.at.Sub(began))
	}
	slices.Sort(offsets)
	first, last := offsets[0], offsets[len(offsets)-1]
	t.Logf("%d streams closed between %s and %s after the drain began (period %s)", len(offsets), first, last, period)
	if inFirstTenth := countBefore(offsets, period/10); inFirstTenth > len(offsets)/4 {
		t.Errorf("%d of %d streams closed within the first tenth of the period", inFirstTenth, len(offsets))
	}
	if last < period/2 {
		t.Errorf("the last stream closed %s after the drain began, want it spread over about %s", last, period)
	}
	if slack := period / 2; last > period+slack {
		t.Errorf("the last stream closed %s after the drain began, want within %s", last, period+slack)
	}
	waitFor(t, "B to end the relayed legs", func() bool { return len(b.relay.Streams()) == 0 })
}

// countBefore is how many of sorted offsets are below d.
func countBefore(sorted []time.Duration, d time.Duration) int {
	n, _ := slices.BinarySearch(sorted, d)
	return n
}

// expectDraining checks that err is UNAVAILABLE saying the replica is
// draining.
func expectDraining(t *testing.T, what string, err error) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "draining") {
		t.Errorf("%s ended with %v, want UNAVAILABLE draining", what, err)
	}
}

// TestDrainConnections: Drain reports each stream it closes to
// Config.Drained, for the caller to close its connection, but for those
// another replica relayed here, whose connection carries others; their
// clients get the status through the relaying replica.
func TestDrainConnections(t *testing.T) {
	var mu sync.Mutex
	drained := map[string]int{}
	onDrained := func(name string) replicaOption {
		return func(c *relay.Config) {
			c.Drained = func(context.Context) {
				mu.Lock()
				drained[name]++
				mu.Unlock()
			}
		}
	}
	c := newCluster(t)
	a := c.addReplica(t, "a", onDrained("a"))
	b := c.addReplica(t, "b", onDrained("b"))
	c.apply(t, clusters(1)...)
	a.setHomes(map[string]string{"r1": "b", "r2": "b", "r3": "b"})
	var relayed []*xdstest.SotWStream
	for _, id := range []string{"r1", "r2", "r3"} {
		s := adsStream(t, a.addr)
		s.Send(cdsRequest(id))
		s.Expect()
		relayed = append(relayed, s)
	}
	local := adsStream(t, b.addr)
	local.Send(cdsRequest("l1"))
	local.Expect()

	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	if got := b.relay.Drain(ctx, 0); got != 4 {
		t.Errorf("B's Drain closed %d streams, want 4", got)
	}
	expectDraining(t, "B's local stream", local.ExpectErr())
	for i, s := range relayed {
		expectDraining(t, fmt.Sprintf("relayed stream %d", i), s.ExpectErr())
	}
	mu.Lock()
	defer mu.Unlock()
	if drained["b"] != 1 || drained["a"] != 0 {
		t.Errorf("Drained called %d times on B and %d on A, want 1 (its local stream) and 0", drained["b"], drained["a"])
	}
}
