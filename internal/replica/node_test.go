package replica_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/devetcd"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// checkLeaks fails the test if goroutines started during it are still
// running once every other cleanup (embedded etcds, clients) is done: call
// it first.
func checkLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		// memberlist's Shutdown does not wait for a probe in flight,
		// which ends within its probe interval: goroutines get up to 5 s
		// to end (goleak's own retries last about 1 s) before they count
		// as leaked.
		for end := time.Now().Add(5 * time.Second); goleak.Find(opt) != nil && time.Now().Before(end); {
			time.Sleep(100 * time.Millisecond)
		}
		goleak.VerifyNone(t, opt)
	})
}

// running is a Node whose Run is in a goroutine.
type running struct {
	*replica.Node
	cancel context.CancelFunc
	done   chan error // Run's result
}

// testConfig is a config on 127.0.0.1 with free ports.
func testConfig(t testing.TB) replica.Config {
	cfg := replica.DefaultConfig()
	cfg.XDSAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.DevEtcdAddr = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.ShutdownTimeout = 5 * time.Second
	// Tests that stop a replica with streams open need not wait a whole
	// default drain; TestDrain sets its own.
	cfg.DrainPeriod = 200 * time.Millisecond
	cfg.Registerer = prometheus.NewRegistry()
	// The tests read /debug/ over plaintext from 127.0.0.1 (no effect on
	// a replica with mTLS, whose /debug/ answers admins).
	cfg.InsecureLoopbackDebug = true
	return cfg
}

// start runs a Node until stop is called or the test ends.
func start(t testing.TB, cfg replica.Config) *running {
	t.Helper()
	n, err := replica.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Node: n, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("node Run: %v", err)
		}
	})
	return r
}

// stop cancels Run's ctx and checks that it returns nil promptly.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("Run() = %v, want nil", err)
		}
	case <-time.After(xdstest.Timeout):
		t.Fatal("Run did not return after its ctx ended")
	}
}

// httpClient keeps no idle connections, so none outlive a test.
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

func get(t testing.TB, r *running, path string) (int, string) {
	t.Helper()
	resp, err := httpClient.Get("http://" + r.HTTPAddr() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

func waitReady(t testing.TB, r *running) {
	t.Helper()
	xdstest.WaitFor(t, "/readyz 200", func() (bool, string) {
		code, body := get(t, r, "/readyz")
		return code == http.StatusOK, body
	})
}

type debugView struct {
	Loaded      bool           `json:"loaded"`
	Reason      string         `json:"reason"`
	Revision    int64          `json:"revision"`
	Resources   int            `json:"resources"`
	Types       map[string]int `json:"types"`
	Malformed   int            `json:"malformed"`
	HistoryFrom int64          `json:"history_from"`
}

func getDebugView(t testing.TB, r *running) (int, debugView) {
	t.Helper()
	code, body := get(t, r, "/debug/view")
	var v debugView
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("/debug/view: %v in %q", err, body)
	}
	return code, v
}

// waitClusters waits until /debug/view shows revision rev or later with
// want clusters.
func waitClusters(t *testing.T, r *running, rev int64, want int) debugView {
	t.Helper()
	var v debugView
	xdstest.WaitFor(t, "the cluster in /debug/view", func() (bool, string) {
		var code int
		code, v = getDebugView(t, r)
		return code == http.StatusOK && v.Revision >= rev && v.Types["cluster"] == want, jsonString(v)
	})
	return v
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// putCluster writes a cluster to etcd the way xdsadmin does and returns
// the revision.
func putCluster(t *testing.T, c *clientv3.Client, prefix, name string) int64 {
	t.Helper()
	s, err := store.New(store.Config{Client: c, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	plan, err := s.MakePlan(ctx, store.PlanRequest{Puts: []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster(name, 1000))}})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	res, err := s.Apply(ctx, plan, store.ApplyOptions{})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return res.Revision
}

func etcdClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func grpcHealth(t *testing.T, r *running) (healthpb.HealthClient, func()) {
	t.Helper()
	cc, err := grpc.NewClient(r.XDSAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	return healthpb.NewHealthClient(cc), func() { cc.Close() }
}

func checkHealth(t *testing.T, hc healthpb.HealthClient) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("gRPC health check: %v", err)
	}
	return resp.GetStatus()
}

// checkClosed checks that nothing listens on addr any more.
func checkClosed(t *testing.T, what, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, xdstest.ShortTimeout)
	if err == nil {
		c.Close()
		t.Errorf("%s %s still accepts connections after Run returned", what, addr)
	}
}

// TestEtcdMode runs a replica against an etcd it does not own: ready once
// the view is loaded, the endpoints, a write showing in the view, and a
// clean shutdown that leaves no goroutine behind.
func TestEtcdMode(t *testing.T) {
	checkLeaks(t)
	e := storetest.Start(t, storetest.Options{})
	writer := e.Client(t)
	const prefix = "/node-test/"
	rev := putCluster(t, writer, prefix, "before")

	cfg := testConfig(t)
	cfg.EtcdEndpoints = []string{e.Endpoint}
	cfg.EtcdPrefix = prefix
	reg := cfg.Registerer.(*prometheus.Registry)
	r := start(t, cfg)
	waitReady(t, r)

	if code, body := get(t, r, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz = %d %q, want 200 \"ok\\n\"", code, body)
	}
	v := waitClusters(t, r, rev, 1)
	if v.Resources != 1 || v.Malformed != 0 || v.HistoryFrom == 0 {
		t.Errorf("/debug/view = %s, want one resource, none malformed, a history start", jsonString(v))
	}
	rev = putCluster(t, writer, prefix, "after")
	v = waitClusters(t, r, rev, 2)
	if v.Revision < rev {
		t.Errorf("/debug/view revision = %d, want >= %d", v.Revision, rev)
	}

	code, metrics := get(t, r, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{"legation_view_revision ", "legation_node_ready 1"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if mfs, err := reg.Gather(); err != nil || len(mfs) == 0 {
		t.Errorf("the injected registry gathers %d families, %v; want the node's metrics", len(mfs), err)
	}

	hc, closeHC := grpcHealth(t, r)
	if got := checkHealth(t, hc); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health = %v, want SERVING", got)
	}
	closeHC()

	xds, httpAddr := r.XDSAddr(), r.HTTPAddr()
	r.stop(t)
	checkClosed(t, "--xds-addr", xds)
	checkClosed(t, "--http-addr", httpAddr)
}

// TestNotReadyUntilEtcdAnswers starts a replica before its etcd: it runs,
// live but not ready, and becomes ready once etcd is up.
func TestNotReadyUntilEtcdAnswers(t *testing.T) {
	checkLeaks(t)
	etcdAddr := testbase.FreeAddr(t)
	cfg := testConfig(t)
	cfg.EtcdEndpoints = []string{etcdAddr}
	r := start(t, cfg)

	code, body := get(t, r, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "not ready: ") {
		t.Errorf("/readyz without etcd = %d %q, want 503 with a reason", code, body)
	}
	if code, _ := get(t, r, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz without etcd = %d, want 200", code)
	}
	if code, v := getDebugView(t, r); code != http.StatusServiceUnavailable || v.Loaded || v.Reason == "" {
		t.Errorf("/debug/view without etcd = %d %s, want 503, not loaded, a reason", code, jsonString(v))
	}
	if _, metrics := get(t, r, "/metrics"); !strings.Contains(metrics, "legation_node_ready 0") {
		t.Errorf("/metrics lacks legation_node_ready 0")
	}
	hc, closeHC := grpcHealth(t, r)
	defer closeHC()
	if got := checkHealth(t, hc); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health without etcd = %v, want NOT_SERVING", got)
	}
	// Still not ready a while later.
	time.Sleep(xdstest.ShortTimeout)
	if code, _ := get(t, r, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz without etcd = %d, want 503", code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	srv, err := devetcd.Start(ctx, devetcd.Config{Dir: t.TempDir(), ClientAddr: etcdAddr})
	if err != nil {
		t.Fatalf("start etcd on %s: %v", etcdAddr, err)
	}
	defer srv.Close()
	waitReady(t, r)
	xdstest.WaitFor(t, "gRPC health SERVING", func() (bool, string) {
		got := checkHealth(t, hc)
		return got == healthpb.HealthCheckResponse_SERVING, got.String()
	})
	r.stop(t)
}

// TestDevMode runs a replica with its embedded etcd three times on one
// data directory: on a free port (port 0), on a port chosen in advance
// where a client writes a resource, and again on port 0, where the
// resource is still there.
func TestDevMode(t *testing.T) {
	checkLeaks(t)
	dataDir := t.TempDir()
	cfg := testConfig(t)
	cfg.DataDir = dataDir

	r := start(t, cfg)
	waitReady(t, r)
	if code, v := getDebugView(t, r); code != http.StatusOK || !v.Loaded || v.Resources != 0 {
		t.Errorf("/debug/view of a new dev etcd = %d %s, want 200, loaded, empty", code, jsonString(v))
	}
	r.stop(t)

	cfg = testConfig(t)
	cfg.DataDir = dataDir
	cfg.DevEtcdAddr = testbase.FreeAddr(t)
	r = start(t, cfg)
	waitReady(t, r)
	c := etcdClient(t, cfg.DevEtcdAddr)
	rev := putCluster(t, c, cfg.EtcdPrefix, "dev")
	c.Close()
	waitClusters(t, r, rev, 1)
	r.stop(t)

	cfg = testConfig(t)
	cfg.DataDir = dataDir
	r = start(t, cfg)
	waitReady(t, r)
	if code, v := getDebugView(t, r); code != http.StatusOK || v.Types["cluster"] != 1 || v.Revision < rev {
		t.Errorf("/debug/view after a restart = %d %s, want the cluster written before at revision >= %d", code, jsonString(v), rev)
	}
	r.stop(t)
}

// TestShutdownDrainBound holds a gRPC health Watch stream open across
// shutdown: it sees NOT_SERVING, and Run returns once ShutdownTimeout cut
// the stream.
func TestShutdownDrainBound(t *testing.T) {
	checkLeaks(t)
	e := storetest.Start(t, storetest.Options{})
	cfg := testConfig(t)
	cfg.EtcdEndpoints = []string{e.Endpoint}
	cfg.ShutdownTimeout = 500 * time.Millisecond
	r := start(t, cfg)
	waitReady(t, r)

	hc, closeHC := grpcHealth(t, r)
	defer closeHC()
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := w.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch first = %v, %v; want SERVING", m, err)
	}

	began := time.Now()
	r.cancel()
	if m, err := w.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Watch after shutdown began = %v, %v; want NOT_SERVING", m, err)
	}
	if _, err := w.Recv(); err == nil {
		t.Fatal("Watch stream still open after the drain")
	}
	r.stop(t)
	if d := time.Since(began); d < cfg.ShutdownTimeout {
		t.Errorf("Run returned %s after cancel, before the %s drain budget, with a stream open", d, cfg.ShutdownTimeout)
	}
}

// TestDevModeEtcdPortTaken: the embedded etcd's port is in use, so Run
// fails with an error that says how to move it, and stops what it started.
func TestDevModeEtcdPortTaken(t *testing.T) {
	checkLeaks(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := testConfig(t)
	cfg.DevEtcdAddr = l.Addr().String()
	n, err := replica.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), xdstest.Timeout)
	defer cancel()
	err = n.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "--dev-etcd-addr") {
		t.Fatalf("Run() = %v, want an error naming --dev-etcd-addr", err)
	}
	checkClosed(t, "--http-addr", n.HTTPAddr())
}

func TestNewAndRunErrors(t *testing.T) {
	checkLeaks(t)
	cfg := testConfig(t)
	cfg.GroupBy = "nope"
	if _, err := replica.New(cfg); err == nil || !strings.Contains(err.Error(), "--group-by") {
		t.Errorf("New with a bad --group-by = %v, want an error naming it", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg = testConfig(t)
	cfg.HTTPAddr = l.Addr().String()
	if _, err := replica.New(cfg); err == nil || !strings.Contains(err.Error(), "--http-addr") {
		t.Errorf("New on a taken --http-addr = %v, want an error naming it", err)
	}

	n, err := replica.New(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
	checkClosed(t, "--xds-addr", n.XDSAddr())
	if err := n.Run(context.Background()); err == nil {
		t.Error("Run after Close = nil, want an error")
	}
	if err := n.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// TestReadinessIdleWakesRarely: a ready replica whose etcd answers reads
// its readiness about once a second (and when etcd could turn stale), not
// every 250ms; TestEtcdLoss holds it to --etcd-stale-after.
func TestReadinessIdleWakesRarely(t *testing.T) {
	checkLeaks(t)
	e := storetest.Start(t, storetest.Options{})
	cfg := testConfig(t)
	cfg.EtcdEndpoints = []string{e.Endpoint}
	cfg.EtcdPrefix = "/node-idle/"
	r := start(t, cfg)
	waitReady(t, r)
	time.Sleep(300 * time.Millisecond)
	const quiet = 3 * time.Second
	before := r.ReadinessChecksForTest()
	time.Sleep(quiet)
	// A 250ms ticker reads it 12 times.
	if n := r.ReadinessChecksForTest() - before; n > 6 || n < 2 {
		t.Errorf("a ready, idle replica read its readiness %d times in %s; want about once a second", n, quiet)
	}
	r.stop(t)
}
