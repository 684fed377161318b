package delta_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/delta"
	"github.com/legation-io/legation/internal/xds/limits"
)

// limitHits reads legation_delta_limit_hits_total{limit}.
func limitHits(tb testing.TB, reg prometheus.Gatherer, limit string) float64 {
	tb.Helper()
	return xdstest.CounterSum(tb, reg, "legation_delta_limit_hits_total", "limit", limit)
}

// A delta stream subscribing 1,000,000 names, in chunks as a client
// would, gets RESOURCE_EXHAUSTED at the default bound, and the server's
// heap barely grows.
func TestMillionNames(t *testing.T) {
	const names, chunk = 1000000, 50000
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(e.dial(t)).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := xdstest.SettledMemStats()
	for i := 0; i < names; i += chunk {
		r := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: make([]string, 0, chunk)}
		if i == 0 {
			r.Node = xdstest.Node("n1", "c1")
		}
		for j := i; j < i+chunk; j++ {
			r.ResourceNamesSubscribe = append(r.ResourceNamesSubscribe, fmt.Sprintf("cluster-%07d", j))
		}
		if err := st.Send(r); errors.Is(err, io.EOF) {
			break // the server ended the stream: Recv says how
		} else if err != nil {
			t.Fatal(err)
		}
	}
	_, err = st.Recv()
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-names") {
		t.Fatalf("got %v, want RESOURCE_EXHAUSTED naming --max-names", err)
	}
	after := xdstest.SettledMemStats()
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("subscribing %d names: heap %d KiB before, %d KiB after (growth %d KiB)", names, before.HeapAlloc>>10, after.HeapAlloc>>10, growth>>10)
	if growth > 50<<20 {
		t.Errorf("heap grew %d MiB, want under 50", growth>>20)
	}
	if got := limitHits(t, e.reg, "names"); got != 1 {
		t.Errorf("limit_hits_total{limit=names} = %v, want 1", got)
	}
}

// Each bound on a delta stream ends it with its status, naming the
// bound's flag: a name too long where a request names resources (a
// subscription, an unsubscription), no first request in time; a name at
// the bound is served.
func TestStreamBounds(t *testing.T) {
	e := newEnvWith(t, xdstest.Options{}, func(c *delta.Config) {
		c.MaxNameLength, c.FirstRequestTimeout = limits.Max(8), limits.Max(200*time.Millisecond)
	})
	long := strings.Repeat("x", 9)
	tests := []struct {
		name  string
		req   *discoveryv3.DeltaDiscoveryRequest // nil: send nothing
		code  codes.Code
		flag  string
		limit string
	}{
		{"subscribed name too long", &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"a", long}},
			codes.InvalidArgument, "--max-name-length", "name_length"},
		{"unsubscribed name too long", &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resource.Endpoint.URL, ResourceNamesUnsubscribe: []string{long}},
			codes.InvalidArgument, "--max-name-length", "name_length"},
		{"no first request", nil, codes.DeadlineExceeded, "--first-request-timeout", "first_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := limitHits(t, e.reg, tt.limit)
			s := e.deltaADS(t)
			if tt.req != nil {
				tt.req.Node = xdstest.Node("n1", "c1")
				s.Send(tt.req)
			}
			err := s.ExpectErr()
			if status.Code(err) != tt.code || !strings.Contains(err.Error(), tt.flag) {
				t.Fatalf("got %v, want %s naming %s", err, tt.code, tt.flag)
			}
			if got := limitHits(t, e.reg, tt.limit); got != before+1 {
				t.Errorf("limit_hits_total{limit=%q} = %v, want %v", tt.limit, got, before+1)
			}
		})
	}
	t.Run("at the bound", func(t *testing.T) {
		s := e.deltaADS(t)
		s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node("n1", "c1"), TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{strings.Repeat("c", 8)}})
		s.Expect()
	})
}

// initial_resource_versions beyond --max-names, and a name too long in it.
func TestInitialVersionsBounds(t *testing.T) {
	e := newEnvWith(t, xdstest.Options{}, func(c *delta.Config) { c.MaxNames, c.MaxNameLength = limits.Max(2), limits.Max(8) })
	tests := []struct {
		name    string
		initial map[string]string
		code    codes.Code
		limit   string
	}{
		{"too many", map[string]string{"a": "1", "b": "1", "c": "1"}, codes.ResourceExhausted, "initial_resource_versions"},
		{"too long", map[string]string{"aaaaaaaaa": "1"}, codes.InvalidArgument, "name_length"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := e.deltaADS(t)
			s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node("n1", "c1"), TypeUrl: resource.Endpoint.URL, InitialResourceVersions: tt.initial})
			if err := s.ExpectErr(); status.Code(err) != tt.code {
				t.Fatalf("got %v, want %s", err, tt.code)
			}
			if got := limitHits(t, e.reg, tt.limit); got != 1 {
				t.Errorf("limit_hits_total{limit=%q} = %v, want 1", tt.limit, got)
			}
		})
	}
}

// A delta client that subscribes and never reads is cut off after the
// send timeout; a normal client alongside gets every update. Delta sends
// one response per type until it is ACKed, so a client that does not read
// blocks a send only when responses of several types are larger than the
// HTTP/2 windows (gRPC's SendMsg blocks on the one after the windows
// fill): the stuck client asks for a big one, then for another type.
func TestSendTimeoutStuckClient(t *testing.T) {
	const updates, ports = 200, 400
	const sendTimeout = 500 * time.Millisecond
	e := newEnvWith(t, xdstest.Options{}, func(c *delta.Config) { c.SendTimeout = limits.Max(sendTimeout) })
	portsAt := func(i int) []uint32 {
		p := make([]uint32, ports)
		for j := range p {
			p[j] = uint32(10000 + i + j)
		}
		return p
	}
	bigPorts := make([]uint32, 20000) // ~500 KB
	for i := range bigPorts {
		bigPorts[i] = uint32(i + 1)
	}
	e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("e", portsAt(0)...)),
		xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("big", bigPorts...))})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stuck, err := discoveryv3.NewAggregatedDiscoveryServiceClient(e.dial(t)).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*discoveryv3.DeltaDiscoveryRequest{
		{Node: xdstest.Node("stuck", "c1"), TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"big", "e"}},
		{TypeUrl: resource.Listener.URL},
	} {
		if err := stuck.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	normal := e.deltaADS(t)
	normal.Send(&discoveryv3.DeltaDiscoveryRequest{Node: xdstest.Node("normal", "c1"), TypeUrl: resource.Endpoint.URL, ResourceNamesSubscribe: []string{"e"}})
	normal.Ack(normal.Expect())

	before := xdstest.SettledMemStats()
	for i := 1; i <= updates; i++ {
		rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, "default", xdstest.Endpoints("e", portsAt(i)...))})
		for {
			resp := normal.Expect()
			normal.Ack(resp)
			if resp.GetSystemVersionInfo() == xdstest.Version(rev) {
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
	growth := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d updates of %d endpoints; heap %d KiB before, %d KiB after the stuck stream ended (growth %d KiB)",
		updates, ports, before.HeapAlloc>>10, after.HeapAlloc>>10, growth>>10)
	if growth > 20<<20 {
		t.Errorf("heap grew %d MiB, want under 20", growth>>20)
	}
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
