package replica_test

import (
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestShedAboveShare: with --max-streams-share 1.1, a replica holding
// more streams than 1.1 times its fair share (it took them while the
// share was larger: a peer was down) sheds the excess among its own
// clients, with UNAVAILABLE naming the share, and closes their
// connections; they reconnect to the other replica and every client is
// served. A new client then reaching it alone on its connection is
// refused and its connection closed, so that its retry goes elsewhere.
func TestShedAboveShare(t *testing.T) {
	const (
		clients = 40
		fair    = 10 // after the drop: a cap of 11
	)
	e := newXDSEnv(t)
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 100))})
	var share atomic.Int64
	share.Store(100)
	cfgA := e.config(t)
	cfgA.Name = "a"
	cfgA.MaxStreamsShare = 1.1
	replica.SetShareForTest(&cfgA, 1, 500*time.Millisecond, func() (float64, bool) { return float64(share.Load()), true })
	a := startXDS(t, cfgA, rev)
	cfgB := e.config(t)
	cfgB.Name = "b"
	b := startXDS(t, cfgB, rev)

	streams := make([]*xdstest.SotWStream, clients)
	for i := range streams {
		s := xdstest.OpenSotW(t, dial(t, a))
		s.Send(cdsRequest(fmt.Sprintf("node-%02d", i)))
		s.Expect()
		streams[i] = s
	}
	// A stream closed by shedding, or by the rebalance when the ring of
	// two settles, reconnects to B. The share drops now.
	reconnect := func(i int, to *running) {
		streams[i] = xdstest.OpenSotW(t, dial(t, to))
		streams[i].Send(cdsRequest(fmt.Sprintf("node-%02d", i)))
		streams[i].Expect()
	}
	share.Store(fair)
	capAt := int(math.Floor(1.1 * fair))

	shed := 0
	deadline := time.Now().Add(xdstest.Timeout)
	for {
		for i, s := range streams {
			select {
			case res := <-s.Recv():
				if res.Err == nil {
					continue
				}
				st := grpcstatus.Convert(res.Err)
				switch {
				case st.Code() == codes.Unavailable && strings.Contains(st.Message(), "more than its share"):
					shed++
					reconnect(i, b)
				case st.Code() == codes.Unavailable && strings.HasPrefix(st.Message(), "rebalance: home moved"):
					reconnect(i, b)
				default:
					t.Fatalf("node-%02d: stream ended with %v, want UNAVAILABLE naming the share", i, res.Err)
				}
			default:
			}
		}
		// Done once A is at its cap and every stream it shed has
		// reconnected to B.
		_, _, open := a.ShareForTest()
		closes := metricValue(t, cfgA.Registerer, "legation_relay_shed_closes_total")
		_, _, onB := b.ShareForTest()
		if shed > 0 && open <= capAt && closes == float64(shed) && open+onB == clients {
			t.Logf("A shed %d of %d streams: it holds %d, cap %d; B %d", shed, clients, open, capAt, onB)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A holds %d streams after shedding %d (legation_relay_shed_closes_total %v), B %d; want A <= %d and %d in all",
				open, shed, closes, onB, capAt, clients)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Full: refused, and the connection closed.
	cc := dial(t, a)
	late := xdstest.OpenSotW(t, cc)
	late.Send(cdsRequest("late"))
	if err := late.ExpectErr(); grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams-share") {
		t.Fatalf("a stream reaching A at its cap: %v, want RESOURCE_EXHAUSTED naming --max-streams-share", err)
	}
	xdstest.WaitFor(t, "A to close the refused client's connection", func() (bool, string) {
		st := cc.GetState()
		return st != connectivity.Ready, st.String()
	})
}

// TestRebalanceRateWarning: a replica whose --rebalance-rate is above its
// --stream-rate says so at start; one within it does not.
func TestRebalanceRateWarning(t *testing.T) {
	const warning = "--rebalance-rate is above --stream-rate"
	e := newXDSEnv(t)
	for _, tt := range []struct {
		rebalance float64
		warns     bool
	}{{50, true}, {10, false}} {
		logs := &testbase.LockedBuffer{}
		cfg := e.config(t)
		cfg.StreamRate, cfg.StreamBurst, cfg.RebalanceRate = 10, 10, tt.rebalance
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		r := start(t, cfg)
		waitReady(t, r)
		r.stop(t)
		if got := strings.Contains(logs.String(), warning); got != tt.warns {
			t.Errorf("--rebalance-rate %v with --stream-rate 10: warned %v, want %v:\n%s", tt.rebalance, got, tt.warns, logs.String())
		}
	}
}
