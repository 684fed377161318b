package relay_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestShed: Shed(n) closes n of the streams whose clients connected to the
// replica, with UNAVAILABLE naming the share, reporting each to
// Config.Drained (to close its connection), and never a stream another
// replica relayed here; the others carry on.
func TestShed(t *testing.T) {
	var drained atomic.Int64
	c := newCluster(t)
	a := c.addReplica(t, "a")
	b := c.addReplica(t, "b", func(c *relay.Config) {
		c.Drained = func(context.Context) { drained.Add(1) }
	})
	c.apply(t, clusters(1)...)

	// Three streams relayed from A to B, and five B's own clients.
	a.setHomes(map[string]string{"r1": "b", "r2": "b", "r3": "b"})
	var relayed, local []*xdstest.SotWStream
	for _, id := range []string{"r1", "r2", "r3"} {
		s := adsStream(t, a.addr)
		s.Send(cdsRequest(id))
		s.Expect()
		relayed = append(relayed, s)
	}
	for i := range 5 {
		s := adsStream(t, b.addr)
		s.Send(cdsRequest(fmt.Sprintf("l%d", i)))
		s.Expect()
		local = append(local, s)
	}
	waitFor(t, "B to serve all 8 streams", func() bool { return len(b.relay.Streams()) == 8 })

	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	if got := b.relay.Shed(ctx, 3); got != 3 {
		t.Fatalf("Shed(3) closed %d streams", got)
	}
	if got := metric(t, b.reg, "legation_relay_shed_closes_total"); got != 3 {
		t.Errorf("legation_relay_shed_closes_total = %v, want 3", got)
	}
	if got := drained.Load(); got != 3 {
		t.Errorf("Drained called %d times, want 3", got)
	}
	waitFor(t, "B to hold 5 streams", func() bool { return len(b.relay.Streams()) == 5 })
	left := map[string]bool{}
	for _, s := range b.relay.Streams() {
		left[s.NodeID] = true
	}
	for _, id := range []string{"r1", "r2", "r3"} {
		if !left[id] {
			t.Errorf("stream of %s, relayed by A, was shed: Shed closes only B's own clients' streams", id)
		}
	}
	for i, s := range local {
		if left[fmt.Sprintf("l%d", i)] {
			continue
		}
		if st := status.Convert(s.ExpectErr()); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), "more than its share") {
			t.Errorf("shed stream l%d ended with %v, want UNAVAILABLE naming the share", i, st)
		}
	}
	// What is left carries on: the relayed streams see nothing end.
	for _, s := range relayed {
		s.ExpectNone()
	}
}
