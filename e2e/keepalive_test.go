package e2e

import (
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestKeepaliveQuiet: a grpc-go client pinging every 10s (gRPC keepalive,
// as Envoy's connection_keepalive does), with or without streams, stays
// on one ADS stream through keepaliveQuiet of quiet at the default
// --keepalive-min-time (5s): no GOAWAY ends it, and legation_sotw_streams
// stays 1. grpc-go's xDS client cannot be told to ping (its bootstrap has
// no keepalive setting), so this is a raw SotW client on a grpc-go
// channel. With the full size (make e2e) it also shows the test can fail:
// a replica whose policy is stricter than the pings (--keepalive-min-time
// 15s) ends the stream.
func TestKeepaliveQuiet(t *testing.T) {
	run := func(t *testing.T, minTime time.Duration) (ended error) {
		e := newEnvWith(t, envOptions{configure: func(c *replica.Config) { c.KeepaliveMinTime = minTime }})
		cc := xdstest.Dial(t, e.node.XDSAddr(), grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true,
		}))
		s := xdstest.OpenSotW(t, cc)
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("quiet", "c1"), TypeUrl: resource.Cluster.URL})
		s.Ack(s.Expect())
		quiet := time.After(keepaliveQuiet)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case res := <-s.Recv():
				if res.Err == nil {
					t.Fatalf("a response during the quiet: %s", xdstest.Summary(res.Resp))
				}
				return res.Err
			case <-tick.C:
				if got := e.metric(t, "legation_sotw_streams", ""); got != 1 {
					t.Fatalf("legation_sotw_streams = %v during the quiet, want 1", got)
				}
			case <-quiet:
				return nil
			}
		}
	}
	if err := run(t, 5*time.Second); err != nil {
		t.Fatalf("the stream ended during %s of quiet with pings every 10s: %v", keepaliveQuiet, err)
	}
	if !keepaliveStrict {
		return
	}
	// Not a subtest: the replica's name is the test's, which may not
	// hold a '/'.
	if err := run(t, 15*time.Second); err == nil {
		t.Fatalf("the stream lasted %s of pings every 10s with --keepalive-min-time 15s, want it ended (too_many_pings)", keepaliveQuiet)
	} else {
		t.Logf("with --keepalive-min-time 15s the stream ended: %v", err)
	}
}
