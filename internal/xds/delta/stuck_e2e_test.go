//go:build e2e

package delta_test

import (
	"testing"
	"time"

	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/delta"
	"github.com/legation-io/legation/internal/xds/limits"
)

// The stuck-client acceptance run (a client that never reads among many,
// with and without it, compared) is timing-sensitive: it runs in
// `make e2e` (-tags e2e), at the full size of xdstest's stuck_full.go.

// The stuck-client check over delta ADS (xdstest.CheckStuck):
// normal clients and one that never reads through endpoint updates, at
// xdstest.StuckScale (-tags e2e: 999 clients, 2,000 updates).
func TestSendTimeoutStuckClientAmongMany(t *testing.T) {
	const sendTimeout = time.Second
	e := newEnvWith(t, xdstest.Options{}, func(c *delta.Config) { c.SendTimeout = limits.Max(sendTimeout) })
	xdstest.CheckStuck(t, xdstest.StuckServer{
		Addr:        e.addr,
		Delta:       true,
		Apply:       func(tb testing.TB, puts []store.Put) int64 { return e.Apply(tb, puts) },
		Cuts:        func() float64 { return limitHits(t, e.reg, "send_timeout") },
		SendTimeout: sendTimeout,
		Etcd:        e.Client,
	}, xdstest.StuckScale)
}
