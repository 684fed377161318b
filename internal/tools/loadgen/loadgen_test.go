package loadgen_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/fixture"
	"github.com/legation-io/legation/internal/testkit/replicatest"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/tools/chaos/record"
	"github.com/legation-io/legation/internal/tools/loadgen"
)

// testReplica is an in-process dev-mode replica (with its embedded etcd) and
// a store on that etcd.
type testReplica struct {
	n          *replica.Node
	store      *store.Store
	metricsURL string
}

// startReplica runs a dev-mode replica until the test ends. Its /metrics
// has the process collector, as xds-node's.
// edit, when not nil, changes the config first.
func startReplica(t *testing.T, edit func(*replica.Config)) *testReplica {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := replicatest.DevConfig(t)
	cfg.Registerer = reg
	if edit != nil {
		edit(&cfg)
	}
	n := replicatest.Run(t, cfg)
	etcdAddr := cfg.DevEtcdAddr
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdAddr}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	st, err := store.New(store.Config{Client: cli, Prefix: cfg.EtcdPrefix, Writer: "loadgen-test"})
	if err != nil {
		t.Fatal(err)
	}
	return &testReplica{n: n, store: st, metricsURL: "http://" + n.HTTPAddr() + "/metrics"}
}

// pipeWorker starts workers in this process, each serving ServeWorker on
// its end of a pipe until the other end closes, which waits for it.
func pipeWorker(t *testing.T) func(context.Context) (io.ReadWriteCloser, error) {
	return func(context.Context) (io.ReadWriteCloser, error) {
		a, b := net.Pipe()
		done := make(chan error, 1)
		go func() { done <- loadgen.ServeWorker(context.Background(), b) }()
		return &pipeConn{Conn: a, done: done, t: t}, nil
	}
}

type pipeConn struct {
	net.Conn
	done chan error
	t    *testing.T
}

func (p *pipeConn) Close() error {
	p.Conn.Close()
	if err := <-p.done; err != nil {
		p.t.Errorf("ServeWorker: %v", err)
	}
	return nil
}

// TestRunAgainstReplica runs the load generator's scenario, small, against
// a real replica: SotW and delta, streams sharing connections or one each,
// with NACKs. Every client must receive the fixture and every update, the
// latencies must be positive and bounded, the server figures read, and
// the JSON result must parse back to the same figures.
func TestRunAgainstReplica(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	r := startReplica(t, nil)

	for _, tc := range []struct {
		name      string
		delta     bool
		conns     int
		nack      float64
		scope     string
		listeners int
		processes int
	}{
		{"sotw", false, 4, 0, "", 0, 1},
		{"delta", true, 4, 0, "", 0, 1},
		{"sotw one conn each with NACKs", false, 0, 0.5, "", 0, 1},
		{"delta one conn each with NACKs", true, 0, 0.5, "", 0, 1},
		// Its clients' group (node cluster) is their scope; the other
		// cases' clients are in another group, so do not see it.
		{"delta in the clients' group scope", true, 4, 0, "lg-group", 0, 1},
		{"sotw with listeners and routes", false, 4, 0.2, "", 5, 1},
		{"delta with listeners and routes", true, 4, 0.2, "", 5, 1},
		// make bench-load's shape: one connection per simulated Envoy,
		// the bootstraps' keepalive, listeners and routes.
		{"sotw in a real fleet's shape", false, 0, 0, "", loadgen.DefaultConfig().Listeners, 1},
		{"delta in a real fleet's shape", true, 0, 0, "", loadgen.DefaultConfig().Listeners, 1},
		// The clients spread over workers (in-process here, over pipes:
		// cmd/xds-loadgen's test starts real ones).
		{"sotw over 3 workers", false, 0, 0, "", 2, 3},
		{"delta over 2 workers with NACKs", true, 6, 0.5, "", 2, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const streams, clusters, updates = 20, 20, 3
			cfg := loadgen.DefaultConfig()
			cfg.Target = &loadgen.StoreTarget{Store: r.store, Scope: tc.scope}
			if tc.scope != "" {
				cfg.NodePrefix = tc.scope
			}
			cfg.XDSAddr = r.n.XDSAddr()
			cfg.MetricsURL = r.metricsURL
			// The embedded etcd shares the replica's process: its /metrics
			// stands in for an etcd process's, to check they are read.
			cfg.EtcdMetricsURL = r.metricsURL
			cfg.Delta = tc.delta
			cfg.Streams = streams
			cfg.Conns = tc.conns
			cfg.NackRatio = tc.nack
			cfg.Clusters = clusters
			cfg.Endpoints = 5
			cfg.Listeners = tc.listeners
			cfg.Processes = tc.processes
			cfg.StartWorker = pipeWorker(t)
			cfg.Updates = updates
			cfg.Interval = 50 * time.Millisecond
			cfg.Idle = 300 * time.Millisecond
			cfg.SyncTimeout = xdstest.Timeout
			cfg.UpdateTimeout = xdstest.Timeout
			var progress bytes.Buffer
			cfg.Progress = &progress
			cfg.ProgressEvery = 100 * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), 2*xdstest.Timeout)
			defer cancel()
			res, err := loadgen.Run(ctx, cfg)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}

			if want := map[bool]string{false: "sotw", true: "delta"}[tc.delta]; res.Mode != want || res.Streams != streams {
				t.Errorf("mode, streams = %s, %d; want %s, %d", res.Mode, res.Streams, want, streams)
			}
			if want := float64(2*clusters + 2*tc.listeners); res.Sync.ResourcesPerClient < want {
				t.Errorf("sync: %v resources per client, want at least %v (the clusters and their endpoints, the listeners and their routes)", res.Sync.ResourcesPerClient, want)
			}
			if len(res.Updates) != updates {
				t.Fatalf("%d updates in the result, want %d", len(res.Updates), updates)
			}
			if p := res.PerEnvoy; p == nil || p.BytesPerUpdate <= 0 || p.BytesPerUpdate != res.Overall.BytesPerClient {
				t.Errorf("per Envoy %+v: want the bytes per update (%v) and the server's figures per Envoy", p, res.Overall.BytesPerClient)
			}
			last := res.Sync.Version
			for _, u := range res.Updates {
				if u.Received != streams || u.Missing != 0 || u.Error != "" {
					t.Errorf("update %d: received by %d, missing at %d (%q); want every one of %d", u.Index, u.Received, u.Missing, u.Error, streams)
				}
				if u.Version <= last {
					t.Errorf("update %d: version %d, want above the previous %d", u.Index, u.Version, last)
				}
				last = u.Version
				if l := u.Latency; !(l.P50 > 0 && l.P50 <= l.P99 && l.P99 <= l.Max && l.Max < xdstest.Timeout.Seconds()) {
					t.Errorf("update %d: latency %+v, want 0 < p50 <= p99 <= max < %s", u.Index, l, xdstest.Timeout)
				}
				// One changed ClusterLoadAssignment per client (SotW EDS
				// sends only what changed), and NACKs do not bring resends.
				if u.ResourcesPerClient < 1 || u.BytesPerClient < 100 {
					t.Errorf("update %d: %v resources, %v bytes per client; want the changed endpoints", u.Index, u.ResourcesPerClient, u.BytesPerClient)
				}
			}
			if res.StreamErrors != 0 {
				t.Errorf("%d stream errors (%v), want none", res.StreamErrors, res.ErrorKinds)
			}
			if tc.nack > 0 && res.Nacks == 0 {
				t.Errorf("no NACK sent at --nack-ratio %v", tc.nack)
			}
			if tc.nack == 0 && res.Nacks != 0 {
				t.Errorf("%d NACKs sent at --nack-ratio 0", res.Nacks)
			}
			if s := res.Server; s == nil || s.RSSBytesAfterSync <= 0 || s.UpdatesCPUSeconds < 0 || s.CPUSecondsPerUpdatePerClient < 0 {
				t.Errorf("server figures %+v, want the RSS and the CPU read", s)
			}
			if res.Idle == nil || res.Idle.Seconds < 0.3 || res.Idle.CPUMillisPerSecond < 0 {
				t.Errorf("idle %+v, want at least 0.3s measured", res.Idle)
			}
			if e := res.Etcd; e == nil || e.UpdatesCPUSeconds <= 0 || e.IdleCPUMillisPerSecond < 0 {
				t.Errorf("etcd figures %+v, want its CPU read", e)
			}
			if want := fmt.Sprintf("%d/%d clients there", streams, streams); !strings.Contains(progress.String(), want) {
				t.Errorf("no progress line with %q: %q", want, progress.String())
			}

			b, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			var back map[string]any
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatalf("the JSON result does not parse: %v", err)
			}
			overall, _ := back["overall"].(map[string]any)
			latency, _ := overall["latency"].(map[string]any)
			if p99, ok := latency["p99"].(float64); !ok || p99 != res.Overall.Latency.P99 {
				t.Errorf("JSON overall.latency.p99 = %v, want %v", latency["p99"], res.Overall.Latency.P99)
			}
			var text bytes.Buffer
			res.WriteText(&text)
			if !strings.Contains(text.String(), "overall: p50") {
				t.Errorf("text summary without its overall line:\n%s", text.String())
			}
		})
	}
}

// TestSeedKeepsOtherResources: a seed replaces the fixture of an earlier
// run, deleting its clusters beyond the new one's, and leaves every other
// resource alone.
func TestSeedKeepsOtherResources(t *testing.T) {
	r := startReplica(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	tg := &loadgen.StoreTarget{Store: r.store}
	seed := func(n, listeners int) {
		t.Helper()
		if _, err := tg.Seed(ctx, fixture.NewSet(n, 2, listeners, 10000)); err != nil {
			t.Fatalf("Seed(%d, %d): %v", n, listeners, err)
		}
	}
	seed(5, 3)
	keep := xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("keep-me", 1000))
	plan, err := r.store.MakePlan(ctx, store.PlanRequest{Puts: []store.Put{keep}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Apply(ctx, plan, store.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	seed(3, 1)
	for _, typ := range []*resource.Type{resource.Cluster, resource.Endpoint, resource.Listener, resource.Route} {
		l, err := r.store.List(ctx, store.ListOptions{Type: typ})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, res := range l.Resources {
			got = append(got, res.Name)
		}
		want := map[*resource.Type]string{
			resource.Cluster:  "keep-me lg-cluster-00000 lg-cluster-00001 lg-cluster-00002",
			resource.Endpoint: "lg-cluster-00000 lg-cluster-00001 lg-cluster-00002",
			resource.Listener: "lg-listener-00000",
			resource.Route:    "lg-route-00000",
		}[typ]
		if strings.Join(got, " ") != want {
			t.Errorf("%s after two seeds: %q, want %q", typ.Name, got, want)
		}
	}
}

// TestReconnects: a replica that ages connections out every second cuts
// the streams; the clients count the ends, open new streams after their
// backoff, and still receive the fixture and every update.
func TestReconnects(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
	r := startReplica(t, func(c *replica.Config) {
		c.MaxConnectionAge = time.Second
		c.MaxConnectionAgeGrace = 100 * time.Millisecond
	})
	for _, delta := range []bool{false, true} {
		cfg := loadgen.DefaultConfig()
		cfg.Target = &loadgen.StoreTarget{Store: r.store}
		cfg.XDSAddr = r.n.XDSAddr()
		cfg.Delta = delta
		cfg.Streams = 10
		cfg.Conns = 2
		cfg.Clusters = 10
		cfg.Endpoints = 2
		cfg.Updates = 4
		cfg.Interval = 700 * time.Millisecond
		cfg.Idle = 0
		cfg.BackoffBase = 20 * time.Millisecond
		cfg.BackoffMax = 100 * time.Millisecond
		cfg.SyncTimeout = xdstest.Timeout
		cfg.UpdateTimeout = xdstest.Timeout
		ctx, cancel := context.WithTimeout(context.Background(), 2*xdstest.Timeout)
		res, err := loadgen.Run(ctx, cfg)
		cancel()
		if err != nil {
			t.Fatalf("delta %v: Run: %v", delta, err)
		}
		if res.StreamErrors == 0 || res.Reconnects == 0 {
			t.Errorf("delta %v: %d stream errors, %d reconnects; want some, the replica cuts connections every second", delta, res.StreamErrors, res.Reconnects)
		}
		if res.Overall.Missing != 0 {
			t.Errorf("delta %v: %d receipts missing, want every client to receive every update across reconnects", delta, res.Overall.Missing)
		}
		if res.Server != nil || res.Idle != nil {
			t.Errorf("delta %v: server figures without a metrics URL: %+v %+v", delta, res.Server, res.Idle)
		}
	}
}

// discard is a Recorder that keeps nothing.
type discard struct{}

func (discard) Record(*record.Event) {}

// TestConfigValidate: bad settings are refused, each error naming its
// flag.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*loadgen.Config)
		want string
	}{
		{"no streams", func(c *loadgen.Config) { c.Streams = 0 }, "--streams 0"},
		{"more conns than streams", func(c *loadgen.Config) { c.Conns = c.Streams + 1 }, "--conns"},
		{"no processes", func(c *loadgen.Config) { c.Processes = 0 }, "--processes 0: must be in [1, --streams]"},
		{"more processes than streams", func(c *loadgen.Config) { c.Processes = c.Streams + 1 }, "--processes 101"},
		{"processes without a way to start them", func(c *loadgen.Config) { c.Processes, c.StartWorker = 2, nil }, "--processes 2 and no way to start a worker"},
		{"processes and a recording", func(c *loadgen.Config) { c.Processes, c.Recorder = 2, discard{} }, "--record: only with --processes 1"},
		{"pings too often", func(c *loadgen.Config) { c.KeepaliveTime = time.Second }, "--keepalive-time 1s"},
		{"pings without a timeout", func(c *loadgen.Config) { c.KeepaliveTimeout = 0 }, "--keepalive-timeout 0s"},
		{"TCP keepalive in fractions", func(c *loadgen.Config) { c.TCPKeepalive = 1500 * time.Millisecond }, "--tcp-keepalive 1.5s"},
		{"TCP keepalive negative", func(c *loadgen.Config) { c.TCPKeepalive = -time.Second }, "--tcp-keepalive -1s"},
		{"NACK everything", func(c *loadgen.Config) { c.NackRatio = 1 }, "--nack-ratio 1"},
		{"no clusters", func(c *loadgen.Config) { c.Clusters = 0 }, "--clusters 0"},
		{"no address", func(c *loadgen.Config) { c.XDSAddr = "" }, "--xds-addr"},
		{"negative interval", func(c *loadgen.Config) { c.Interval = -time.Second }, "--interval -1s"},
		{"no backoff", func(c *loadgen.Config) { c.BackoffBase = 0 }, "--backoff-base 0s"},
		{"backoff max below its base", func(c *loadgen.Config) { c.BackoffMax = time.Millisecond }, "--backoff-max 1ms: must be at least --backoff-base"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := loadgen.DefaultConfig()
			cfg.Target = &loadgen.HTTPTarget{}
			cfg.XDSAddr = "127.0.0.1:1"
			cfg.StartWorker = pipeWorker(t)
			tc.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
	cfg := loadgen.DefaultConfig()
	cfg.Target = &loadgen.HTTPTarget{}
	cfg.XDSAddr = "127.0.0.1:1"
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate() of the defaults = %v, want nil", err)
	}
}

// TestScrape: the process figures are read, the status writes a replica
// owes when it exports them (-1 otherwise), and a page without the process
// collector is an error naming what is missing.
func TestScrape(t *testing.T) {
	pages := map[string]string{
		"/legation": "# HELP x\nprocess_cpu_seconds_total 12.5\nprocess_resident_memory_bytes 1048576 1700000000000\nlegation_status_records_dirty 3\n",
		"/gcp":      "process_cpu_seconds_total 1\nprocess_resident_memory_bytes 2\n",
		"/bare":     "go_goroutines 7\n",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, pages[r.URL.Path])
	}))
	defer srv.Close()
	s, err := loadgen.Scrape(t.Context(), srv.Client(), srv.URL+"/legation")
	if err != nil || s.CPUSeconds != 12.5 || s.RSSBytes != 1048576 || s.StatusDirty != 3 {
		t.Errorf("legation page: %+v, %v; want CPU 12.5, RSS 1048576, dirty 3", s, err)
	}
	if s, err := loadgen.Scrape(t.Context(), srv.Client(), srv.URL+"/gcp"); err != nil || s.StatusDirty != -1 {
		t.Errorf("page without the status gauge: %+v, %v; want dirty -1", s, err)
	}
	if _, err := loadgen.Scrape(t.Context(), srv.Client(), srv.URL+"/bare"); err == nil || !strings.Contains(err.Error(), "process_cpu_seconds_total") {
		t.Errorf("page without process figures: err %v, want one naming process_cpu_seconds_total", err)
	}
}
