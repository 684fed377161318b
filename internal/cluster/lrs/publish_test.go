package lrs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	loadv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/cluster/lrs"
	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/grpcapi"
)

// run runs s until the test ends.
func run(t *testing.T, s *lrs.Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// Two replicas publish their windows to a real etcd, each keeping its
// last Windows; Read and Summarize answer for both.
func TestPublishAndRead(t *testing.T) {
	env := xdstest.NewEnv(t, xdstest.Options{})
	prefix := keyspace.DefaultPrefix
	servers := map[string]*lrs.Server{}
	for _, name := range []string{"a", "b"} {
		s, err := lrs.New(lrs.Config{Client: env.Client, Prefix: prefix, Replica: name, Interval: time.Second, Windows: 2, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		servers[name] = s
		run(t, s)
	}
	// Reports keep arriving, on both replicas, for several windows.
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	var (
		issued = map[string]uint64{}
		ws     []lrs.Window
	)
	for ctx.Err() == nil {
		for name, s := range servers {
			s.Accept(lrs.Reporter{Node: "node-" + name}, report("c1", time.Second, localityStats("z1", 3, 2, 1, 0)))
			issued[name] += 3
		}
		var bad []lrs.BadWindow
		var err error
		ws, bad, err = lrs.Read(ctx, env.Client, prefix)
		if err != nil || len(bad) > 0 {
			t.Fatalf("Read: %v, bad %v", err, bad)
		}
		per := map[string]int{}
		for _, w := range ws {
			per[w.Replica]++
		}
		if per["a"] == 2 && per["b"] == 2 {
			break
		}
		time.Sleep(50 * time.Millisecond) // the pace of the reports
	}
	if ctx.Err() != nil {
		t.Fatalf("never two windows of each replica in etcd: %+v", ws)
	}
	// No more than the last two of each, even after more windows.
	time.Sleep(1100 * time.Millisecond) // one more window closes: what must not happen is a third key
	for name := range servers {
		resp, err := env.Client.Get(ctx, lrs.ReplicaPrefix(prefix, name), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) > 2 {
			t.Errorf("replica %s has %d windows in etcd, want at most 2", name, len(resp.Kvs))
		}
		for _, kv := range resp.Kvs {
			if kv.Lease == 0 {
				t.Errorf("window %s has no lease", kv.Key)
			}
		}
	}
	sums := lrs.Summarize(ws, "c1", lrs.ByCluster, 0, time.Now())
	if len(sums) != 1 {
		t.Fatalf("Summarize: %+v, want one summary of c1", sums)
	}
	got := sums[0]
	if strings.Join(got.Replicas, ",") != "a,b" || got.Issued == 0 || got.Issued%3 != 0 || got.Errored*3 != got.Issued {
		t.Errorf("summary %+v: want replicas a and b, issued a multiple of 3 and a third errored", got)
	}
	if got.Issued > issued["a"]+issued["b"] {
		t.Errorf("summary counts %d issued, more than the %d reported", got.Issued, issued["a"]+issued["b"])
	}
}

// A malformed value under the load prefix (another tool's) is skipped and
// named; the others are read.
func TestReadSkipsMalformed(t *testing.T) {
	env := xdstest.NewEnv(t, xdstest.Options{})
	prefix := keyspace.DefaultPrefix
	ctx := context.Background()
	good, err := lrs.Encode(lrs.Window{Replica: "a", Start: t0, End: t0.Add(time.Second), Rows: []lrs.Row{{Cluster: "c", Node: "n", Issued: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		lrs.Key(prefix, "a", t0):                  string(good),
		lrs.Key(prefix, "b", t0):                  string(good), // names replica a
		lrs.Key(prefix, "c", t0):                  "{not json",
		lrs.KeyPrefix(prefix) + "noreplica":       `{"replica":"noreplica"}`,
		lrs.Key(prefix, "d", t0.Add(time.Hour)):   `{"replica":"d","start":"2026-01-02T03:04:10Z","end":"2026-01-02T03:04:09Z"}`,
		lrs.Key(prefix, "e", t0.Add(2*time.Hour)): `{"replica":"e","start":"2026-01-02T03:04:10Z","end":"2026-01-02T03:04:11Z","rows":[{"cluster":""}]}`,
	} {
		if _, err := env.Client.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	ws, bad, err := lrs.Read(ctx, env.Client, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].Replica != "a" {
		t.Errorf("Read: %+v, want a's window only", ws)
	}
	if len(bad) != 5 {
		t.Errorf("Read: %d bad windows, want 5: %v", len(bad), bad)
	}
	for _, b := range bad {
		if !errors.Is(b.Err, lrs.ErrMalformed) || !strings.Contains(b.Err.Error(), b.Key) {
			t.Errorf("bad window %s: error %v should wrap ErrMalformed and name the key", b.Key, b.Err)
		}
	}
}

// Over gRPC: the first response says what to report and how often; a
// stream without a node ends INVALID_ARGUMENT; bad reports do not end
// the stream.
func TestStream(t *testing.T) {
	for _, tc := range []struct {
		name     string
		clusters []string
	}{
		{"all clusters", nil},
		{"configured clusters", []string{"c1", "c2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			s, err := lrs.New(lrs.Config{Replica: "r", Interval: 3 * time.Second, Clusters: tc.clusters, Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			g := grpc.NewServer(grpcapi.ServerOptions()...)
			grpcapi.Register(g, grpcapi.Services{LRS: s})
			cc := xdstest.Dial(t, xdstest.Serve(t, g))
			ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
			defer cancel()
			st, err := loadv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(&loadv3.LoadStatsRequest{Node: &corev3.Node{Id: "n1"}}); err != nil {
				t.Fatal(err)
			}
			resp, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetLoadReportingInterval().AsDuration() != 3*time.Second ||
				resp.GetSendAllClusters() != (tc.clusters == nil) || fmt.Sprint(resp.GetClusters()) != fmt.Sprint(tc.clusters) {
				t.Errorf("first response %v: want interval 3s, clusters %v (all if none)", resp, tc.clusters)
			}
			for _, r := range []*loadv3.LoadStatsRequest{report("c1", -time.Second), report("c1", time.Second, localityStats("z", 2, 2, 0, 0))} {
				if err := st.Send(r); err != nil {
					t.Fatal(err)
				}
			}
			xdstest.WaitFor(t, "both reports counted", func() (bool, string) {
				n := xdstest.CounterSum(t, reg, "legation_lrs_reports_total")
				return n == 2, fmt.Sprintf("legation_lrs_reports_total = %v", n)
			})
			if err := st.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); err != io.EOF {
				t.Errorf("after CloseSend: %v, want the stream to end OK", err)
			}

			st, err = loadv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(&loadv3.LoadStatsRequest{}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "node") {
				t.Errorf("stream without a node: %v, want INVALID_ARGUMENT naming the node", err)
			}

			st, err = loadv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(&loadv3.LoadStatsRequest{Node: &corev3.Node{Id: strings.Repeat("n", 1025)}}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--max-node-id-length") {
				t.Errorf("stream with a 1025-byte node id: %v, want INVALID_ARGUMENT naming --max-node-id-length", err)
			}
			if got := xdstest.CounterSum(t, reg, "legation_lrs_rejected_total", "reason", "node_id_length"); got != 1 {
				t.Errorf(`legation_lrs_rejected_total{reason="node_id_length"} = %v, want 1`, got)
			}

			st, err = loadv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(&loadv3.LoadStatsRequest{Node: &corev3.Node{Id: "edge\x1b[2Jwiped"}}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "U+001B at byte 4") {
				t.Errorf("stream with a terminal escape in its node id: %v, want INVALID_ARGUMENT naming it", err)
			}
			if got := xdstest.CounterSum(t, reg, "legation_lrs_rejected_total", "reason", "node_id_text"); got != 1 {
				t.Errorf(`legation_lrs_rejected_total{reason="node_id_text"} = %v, want 1`, got)
			}
		})
	}
}

// authorizer allows a node until deny is set; each decision's recheck
// channel is closed by revoke.
type authorizer struct {
	mu      sync.Mutex
	deny    bool
	recheck chan struct{}
}

func (a *authorizer) Authorize(context.Context, *corev3.Node, string) (<-chan struct{}, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.deny {
		return nil, status.Error(codes.PermissionDenied, "lrs test: node denied")
	}
	a.recheck = make(chan struct{})
	return a.recheck, nil
}

func (a *authorizer) revoke() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.deny = true
	close(a.recheck)
}

// A stream whose node the Authorizer stops allowing ends with its error;
// one it never allowed gets nothing.
func TestStreamReauthorized(t *testing.T) {
	reg := prometheus.NewRegistry()
	auth := &authorizer{}
	s, err := lrs.New(lrs.Config{Replica: "r", Authorizer: auth, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpcapi.ServerOptions()...)
	grpcapi.Register(g, grpcapi.Services{LRS: s})
	cc := xdstest.Dial(t, xdstest.Serve(t, g))
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	st, err := loadv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&loadv3.LoadStatsRequest{Node: &corev3.Node{Id: "n1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(report("c1", time.Second, localityStats("z", 1, 1, 0, 0))); err != nil {
		t.Fatal(err)
	}
	xdstest.WaitFor(t, "the report counted", func() (bool, string) {
		n := xdstest.CounterSum(t, reg, "legation_lrs_reports_total")
		return n == 1, fmt.Sprint(n)
	})
	auth.revoke()
	if _, err := st.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("after the rule went: %v, want PERMISSION_DENIED", err)
	}
	if got := xdstest.CounterSum(t, reg, "legation_lrs_rejected_total", "reason", "unauthorized"); got != 1 {
		t.Errorf("legation_lrs_rejected_total{unauthorized} = %v, want 1", got)
	}
	st, err = loadv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&loadv3.LoadStatsRequest{Node: &corev3.Node{Id: "n1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a new stream of a denied node: %v, want PERMISSION_DENIED", err)
	}
}
