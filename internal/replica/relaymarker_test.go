package replica_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// dialFrom returns a connection to the replica's xDS port from the local
// address ip (any 127.0.0.0/8 address works on loopback), closed when the
// test ends.
func dialFrom(t *testing.T, r *running, ip string) *grpc.ClientConn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return dial(t, r, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}))
}

// openBurst opens n ADS streams at once over conns connections from ip,
// each marked as relayed if marked, and returns how many got a response
// (admitted) and how many RESOURCE_EXHAUSTED naming --stream-rate; any
// other end fails the test. The streams stay open until the test ends.
func openBurst(t *testing.T, r *running, ip string, n, conns int, marked bool) (admitted, refused int) {
	t.Helper()
	ccs := make([]*grpc.ClientConn, conns)
	for i := range ccs {
		ccs[i] = dialFrom(t, r, ip)
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			ctx := t.Context()
			if marked {
				ctx = metadata.AppendToOutgoingContext(ctx, relay.MarkerKey, "peer")
			}
			st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(ccs[i%conns]).StreamAggregatedResources(ctx)
			if err == nil {
				if err = st.Send(cdsRequest(fmt.Sprint("burst-", i))); err == nil {
					_, err = st.Recv()
				}
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				admitted++
			case grpcstatus.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "--stream-rate"):
				refused++
			default:
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("a stream of the burst: %v, want a response or RESOURCE_EXHAUSTED naming --stream-rate", err)
	}
	return admitted, refused
}

// TestRelayMarkerFromNonReplica: in plaintext, 500 streams carrying the
// relay marker from an address no replica is registered at (127.0.0.2;
// the replica is registered at 127.0.0.1) are admitted at --stream-rate
// exactly like unmarked ones: the marker is ignored and counted. From
// the registered replica's address the marker is trusted and the streams
// count against the relay budget instead.
func TestRelayMarkerFromNonReplica(t *testing.T) {
	const (
		n     = 500
		rate  = 50
		burst = 50
	)
	for _, marked := range []bool{false, true} {
		t.Run(fmt.Sprint("marked=", marked), func(t *testing.T) {
			_, r, reg := limitsEnv(t, func(c *replica.Config) { c.StreamRate, c.StreamBurst = rate, burst })
			xdstest.WaitFor(t, "the replica has not read the registry", func() (bool, string) {
				got := metricValue(t, reg, "legation_shard_members_registered")
				return got == 1, fmt.Sprintf("legation_shard_members_registered = %v", got)
			})
			start := time.Now()
			admitted, refused := openBurst(t, r, "127.0.0.2", n, 10, marked)
			took := time.Since(start)
			t.Logf("%d streams (marked %v) in %s: %d admitted, %d refused by --stream-rate", n, marked, took, admitted, refused)
			// The burst, then the rate for as long as the streams came plus
			// the second a stream may wait.
			if limit := burst + int(rate*(took.Seconds()+1)) + 1; admitted < burst || admitted > limit {
				t.Errorf("admitted %d of %d, want between %d (--stream-burst) and %d (--stream-rate over %s)", admitted, n, burst, limit, took)
			}
			if got := metricValue(t, reg, "legation_limits_hits_total", "limit", "stream_rate"); got != float64(refused) {
				t.Errorf(`legation_limits_hits_total{limit="stream_rate"} = %v, want %d`, got, refused)
			}
			if got := metricValue(t, reg, "legation_admission_relayed_admitted_total"); got != 0 {
				t.Errorf("legation_admission_relayed_admitted_total = %v, want 0: a stream from a non-replica used the relay budget", got)
			}
			// The relay judges the marker of each stream admission let
			// through.
			want := 0.0
			if marked {
				want = float64(admitted)
			}
			if got := metricValue(t, reg, "legation_relay_untrusted_markers_total"); got != want {
				t.Errorf("legation_relay_untrusted_markers_total = %v, want %v", got, want)
			}

			// From the replica's own registered address a marker is a
			// replica's: the relay budget admits it, past the spent rate.
			if marked {
				s := xdstest.NewSotW(t, mustStream(t, dialFrom(t, r, "127.0.0.1")), func() {})
				s.Send(cdsRequest("relayed-by-a-replica"))
				s.Expect()
				if got := metricValue(t, reg, "legation_admission_relayed_admitted_total"); got != 1 {
					t.Errorf("legation_admission_relayed_admitted_total = %v, want 1", got)
				}
			}
		})
	}
}

// mustStream opens an ADS stream on cc carrying the relay marker.
func mustStream(t *testing.T, cc *grpc.ClientConn) discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(t.Context(), relay.MarkerKey, "peer")
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRelayBudgetWired: streams relayed by a registered replica (here
// from this replica's own address) beyond --max-relayed-streams get
// RESOURCE_EXHAUSTED naming the flag, counted under its limit.
func TestRelayBudgetWired(t *testing.T) {
	_, r, reg := limitsEnv(t, func(c *replica.Config) { c.MaxRelayedStreams = 1 })
	xdstest.WaitFor(t, "the replica has not read the registry", func() (bool, string) {
		got := metricValue(t, reg, "legation_shard_members_registered")
		return got == 1, fmt.Sprintf("legation_shard_members_registered = %v", got)
	})
	cc := dialFrom(t, r, "127.0.0.1")
	first := xdstest.NewSotW(t, mustStream(t, cc), func() {})
	first.Send(cdsRequest("relayed-1"))
	first.Expect()
	second := xdstest.NewSotW(t, mustStream(t, cc), func() {})
	second.Send(cdsRequest("relayed-2"))
	if err := second.ExpectErr(); grpcstatus.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-relayed-streams") {
		t.Fatalf("the 2nd relayed stream: %v, want RESOURCE_EXHAUSTED naming --max-relayed-streams", err)
	}
	if got := metricValue(t, reg, "legation_limits_hits_total", "limit", "max_relayed_streams"); got != 1 {
		t.Errorf(`legation_limits_hits_total{limit="max_relayed_streams"} = %v, want 1`, got)
	}
	if got := metricValue(t, reg, "legation_admission_relayed_streams"); got != 1 {
		t.Errorf("legation_admission_relayed_streams = %v, want 1", got)
	}
}
