package sotw_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/limits"
	"github.com/legation-io/legation/internal/xds/sotw"
)

// logBuffer is a logger's io.Writer the test reads.
type logBuffer = xdstest.LogBuffer

// limitHits reads legation_sotw_limit_hits_total{limit}.
func limitHits(tb testing.TB, reg prometheus.Gatherer, limit string) float64 {
	tb.Helper()
	return xdstest.CounterSum(tb, reg, "legation_sotw_limit_hits_total", "limit", limit)
}

// Each bound ends the stream with its status, naming the bound's flag.
func TestStreamBounds(t *testing.T) {
	e := newEnv(t, func(c *sotw.Config) {
		c.MaxNames, c.MaxNameLength, c.FirstRequestTimeout = limits.Max(3), limits.Max(16), limits.Max(200*time.Millisecond)
	})
	tests := []struct {
		name  string
		req   *discoveryv3.DiscoveryRequest // nil: send nothing
		code  codes.Code
		flag  string
		limit string
	}{
		{"too many names", &discoveryv3.DiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNames: []string{"a", "b", "c", "d"}},
			codes.ResourceExhausted, "--max-names", "names"},
		{"name too long", &discoveryv3.DiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNames: []string{strings.Repeat("x", 17)}},
			codes.InvalidArgument, "--max-name-length", "name_length"},
		{"no first request", nil, codes.DeadlineExceeded, "--first-request-timeout", "first_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := e.adsStream(t)
			if tt.req != nil {
				tt.req.Node = xdstest.Node("n1", "c1")
				s.Send(tt.req)
			}
			err := s.ExpectErr()
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.flag) {
				t.Fatalf("got %v, want %s naming %s", err, tt.code, tt.flag)
			}
			if got := limitHits(t, e.reg, tt.limit); got != 1 {
				t.Errorf("limit_hits_total{limit=%q} = %v, want 1", tt.limit, got)
			}
		})
	}
	t.Run("at the bound", func(t *testing.T) {
		s := e.adsStream(t)
		s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("n1", "c1"), TypeUrl: resource.Endpoint.URL, ResourceNames: []string{"a", "b", strings.Repeat("c", 16)}})
		s.Expect()
	})
}

// Many streams NACKing one response with huge messages: the messages are
// kept and logged cut, and logged once with a count, not once per stream.
func TestNackLogsBounded(t *testing.T) {
	const streams, msgSize = nackStreams, nackMsgSize // nack_size_*_test.go
	var logs logBuffer
	e := newEnv(t, func(c *sotw.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		c.NackLogWindow = 2 * time.Second
	})
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Cluster, "default", xdstest.Cluster("a", 1))})
	msg := strings.Repeat("bad cluster ", msgSize/12)
	var wg sync.WaitGroup
	for i := 0; i < streams; i++ {
		s := e.adsStream(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node(fmt.Sprint("n", i), "c1"), TypeUrl: resource.Cluster.URL})
			resp := s.Expect()
			s.Nack(resp, "", msg)
		}()
	}
	wg.Wait()
	// The first NACK of a window is logged, the others summed up at its
	// end: together, every stream's.
	logged := func(out string) (lines, summed int) {
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "client rejected a response (NACK)") {
				lines++
			}
			if i := strings.Index(l, " count="); i >= 0 {
				var n int
				fmt.Sscan(l[i+len(" count="):], &n) //nolint:errcheck // 0 fails the test
				summed += n
			}
		}
		return lines, summed
	}
	xdstest.WaitFor(t, "every NACK counted and summed up", func() (bool, string) {
		cut := limitHits(t, e.reg, "nack_message")
		lines, summed := logged(logs.String())
		return cut == streams && lines+summed == streams, fmt.Sprintf("%v messages cut, %d logged, %d summed", cut, lines, summed)
	})
	out := logs.String()
	t.Logf("%d streams NACKing with %d-byte messages: %d bytes of logs", streams, len(msg), len(out))
	if len(out) > 64<<10 { // the promise is under 1 MiB
		t.Errorf("%d bytes of logs, want under 64 KiB", len(out))
	}
	if lines, _ := logged(out); lines > 5 {
		t.Errorf("%d NACK lines, want one per window", lines)
	}
	if !strings.Contains(out, "cut by --max-nack-message") {
		t.Error("the logged message does not mark its cut")
	}
}

// A client that subscribes and then never reads is cut off after the send
// timeout, freeing what it held; a normal client alongside gets every
// update.
func TestSendTimeoutStuckClient(t *testing.T) {
	const updates, ports = 200, 400 // ~10 KB a response: the windows fill
	const sendTimeout = 500 * time.Millisecond
	e := newEnv(t, func(c *sotw.Config) { c.SendTimeout = limits.Max(sendTimeout) })
	portsAt := func(i int) []uint32 {
		p := make([]uint32, ports)
		for j := range p {
			p[j] = uint32(10000 + i + j)
		}
		return p
	}
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("e", portsAt(0)...))})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuck, err := discoveryv3.NewAggregatedDiscoveryServiceClient(e.conn(t)).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stuck.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("stuck", "c1"), TypeUrl: resource.Endpoint.URL, ResourceNames: []string{"e"}}); err != nil {
		t.Fatal(err)
	}
	normal := e.adsStream(t)
	normal.Send(&discoveryv3.DiscoveryRequest{Node: xdstest.Node("normal", "c1"), TypeUrl: resource.Endpoint.URL, ResourceNames: []string{"e"}})
	normal.Ack(normal.Expect(), "e")

	before := xdstest.SettledMemStats()
	for i := 1; i <= updates; i++ {
		rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("e", portsAt(i)...))})
		for {
			resp := normal.Expect()
			normal.Ack(resp, "e")
			if resp.GetVersionInfo() == xdstest.Version(rev) {
				break
			}
		}
	}
	end := time.Now()
	xdstest.WaitFor(t, "the stuck stream cut off", func() (bool, string) {
		got := limitHits(t, e.reg, "send_timeout")
		return got == 1, fmt.Sprintf("send_timeout hits %v", got)
	})
	if d := time.Since(end); d > sendTimeout+2*time.Second {
		t.Errorf("cut off %s after the last update, want within the send timeout %s (+2s)", d, sendTimeout)
	}
	after := xdstest.SettledMemStats()
	t.Logf("%d updates of %d endpoints; heap %d KiB before, %d KiB after the stuck stream ended (growth %d KiB)",
		updates, ports, before.HeapAlloc>>10, after.HeapAlloc>>10, (int64(after.HeapAlloc)-int64(before.HeapAlloc))>>10)
	if growth := int64(after.HeapAlloc) - int64(before.HeapAlloc); growth > 20<<20 {
		t.Errorf("heap grew %d MiB, want under 20", growth>>20)
	}
	// The stuck client reads at last: what was buffered, then the status.
	for {
		_, err := stuck.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "--send-timeout") {
			t.Fatalf("stuck stream ended with %v, want UNAVAILABLE naming --send-timeout", err)
		}
		break
	}
}
