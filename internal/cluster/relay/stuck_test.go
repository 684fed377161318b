//go:build e2e

package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/limits"
)

// The stuck-client check behind a relay (xdstest.CheckStuck):
// every client connects to replica a and is homed on b, so each stream is
// relayed; the stuck one is cut by a's pipe within a's send timeout, its
// leg to b ends with it (no stream left on b; TestMain checks for leaked
// goroutines), and the other relayed clients keep their commit-to-ACK
// latency.
func TestSendTimeoutStuckClientRelayed(t *testing.T) {
	const sendTimeout = time.Second
	c := newCluster(t)
	a := c.addReplica(t, "a", func(cfg *relay.Config) { cfg.SendTimeout = limits.Max(sendTimeout) })
	b := c.addReplica(t, "b")
	homes := map[string]string{"stuck": "b"}
	for i := 0; i < xdstest.StuckScale.Normal; i++ {
		homes[fmt.Sprintf("normal-%d", i)] = "b"
	}
	a.setHomes(homes)
	apply := func(tb testing.TB, puts []store.Put) int64 {
		rev := c.Apply(tb, puts)
		ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
		defer cancel()
		for _, r := range []*replica{a, b} {
			if _, err := r.view.WaitRevision(ctx, rev); err != nil {
				tb.Fatal(err)
			}
		}
		return rev
	}
	xdstest.CheckStuck(t, xdstest.StuckServer{
		Addr:        a.addr,
		Apply:       apply,
		Cuts:        func() float64 { return metric(t, a.reg, "legation_relay_send_timeouts_total") },
		SendTimeout: sendTimeout,
		Etcd:        c.Client,
	}, xdstest.StuckScale)
	waitFor(t, "the stuck stream's leg to its home ended", func() bool {
		for _, id := range sotwNodes(b) {
			if id == "stuck" {
				return false
			}
		}
		return len(streamsOf(a, "stuck")) == 0
	})
	if got := len(sotwNodes(a)); got != 0 {
		t.Errorf("a serves %d SotW streams itself, want 0 (every stream relayed to b)", got)
	}
}
