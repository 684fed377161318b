package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/xds" // the xds:/// resolver, its balancers and NewXDSResolverWithConfigForTesting

	"github.com/legation-io/legation/internal/admin/adminctl"
	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// Two timeouts: a long one for what must happen, a short one for what must
// not (grpc-go's defaultTestTimeout / defaultTestShortTimeout).
const (
	testTimeout      = 20 * time.Second
	testShortTimeout = 2 * time.Second
	// pollInterval paces the polls of a condition; it is not a wait for
	// anything.
	pollInterval = 20 * time.Millisecond
)

// env is one real deployment for one test: an embedded etcd, an xds-node
// replica on it in etcd mode, and two gRPC backends, A and B.
type env struct {
	etcd *storetest.Etcd
	node *replica.Node
	a, b *backend
	// http reaches the node's HTTP server at base (http:// or https://).
	http *http.Client
	base string
}

// envOptions change what newEnvWith starts.
type envOptions struct {
	// configure, if set, changes the node's config before it starts.
	configure func(*replica.Config)
	// httpsClient, if set, is the TLS config the test's HTTP client uses
	// to reach a node serving HTTPS (an admin's certificate, for /debug/).
	httpsClient *tls.Config
	// leakOK are goroutines left running that are not the test's to stop
	// (goleak options).
	leakOK []goleak.Option
	// beforeReady, if set, runs once the node runs, before the wait for
	// /readyz (authorization rules to write, say).
	beforeReady func(e *env)
}

// newEnv starts an env that is torn down when the test ends. Clients made
// after it (newClient) are closed before the node stops, as cleanups run
// last-in first-out. Once all is torn down, no goroutine started during the
// test may be left (the clients' xDS clients and channels included).
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, envOptions{})
}

// newEnvWith is newEnv with opts.
func newEnvWith(t *testing.T, opts envOptions) *env {
	t.Helper()
	checkLeaks(t, opts.leakOK...)
	e := &env{etcd: storetest.Start(t, storetest.Options{}), http: httpClient, base: "http://"}
	if opts.httpsClient != nil {
		e.http = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: opts.httpsClient}, Timeout: 10 * time.Second}
		e.base = "https://"
	}

	cfg := replica.DefaultConfig()
	cfg.EtcdEndpoints = []string{e.etcd.Endpoint}
	cfg.XDSAddr = "127.0.0.1:0"
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.Name = "e2e-" + t.Name()
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Registerer = prometheus.NewRegistry() // counters of this test only
	// The tests read /debug/ over plaintext from 127.0.0.1 (no effect
	// with mTLS, where /debug/ answers admins).
	cfg.InsecureLoopbackDebug = true
	if opts.configure != nil {
		opts.configure(&cfg)
	}
	n, err := replica.New(cfg)
	if err != nil {
		t.Fatalf("replica.New: %v", err)
	}
	e.node = n
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("node Run: %v", err)
			}
		case <-time.After(testTimeout):
			t.Errorf("node Run did not return %s after its ctx ended", testTimeout)
		}
	})
	if opts.beforeReady != nil {
		opts.beforeReady(e)
	}
	waitFor(t, "node /readyz 200", func() (bool, string) {
		code, body, err := e.httpGet("/readyz")
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, strings.TrimSpace(body))
	})

	e.a = startBackend(t)
	e.b = startBackend(t)
	return e
}

// checkLeaks fails the test if goroutines started during it are still
// running once every later cleanup has run (call it first). Closed gRPC
// channels and xDS clients end their goroutines asynchronously, so on a
// loaded machine it polls, up to testTimeout, rather than give goleak's
// own ~1s of retries the last word.
func checkLeaks(t *testing.T, ignore ...goleak.Option) {
	t.Helper()
	ignore = append(ignore, goleak.IgnoreCurrent())
	t.Cleanup(func() {
		deadline := time.Now().Add(testTimeout)
		for {
			err := goleak.Find(ignore...)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("goroutines left running %s after the test: %v", testTimeout, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// backend is a gRPC server on 127.0.0.1 serving the standard health
// service, so any RPC routed to it can be told apart by its port, which
// it also sends in its response headers (x-backend-port) for clients
// that cannot see their peer's address (gRPC C-core's Python API).
type backend struct {
	port int
}

func startBackend(t *testing.T) *backend {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("backend listen: %v", err)
	}
	port := strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)
	srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		grpc.SetHeader(ctx, metadata.Pairs("x-backend-port", port)) //nolint:errcheck // a header the test client reads, when it can
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(srv, health.NewServer()) // "" is SERVING
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(lis) //nolint:errcheck // returns once Stop is called
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return &backend{port: lis.Addr().(*net.TCPAddr).Port}
}

// apply runs `xdsadmin --etcd-endpoints EP -o json apply -f -` in-process
// with doc on standard input, fails the test unless it succeeds, and
// returns the etcd revision the apply made.
func (e *env) apply(t *testing.T, doc string) int64 {
	t.Helper()
	out, errOut, code := e.xdsadmin(doc, "-o", "json", "apply", "-f", "-")
	if code != 0 {
		t.Fatalf("xdsadmin apply: exit %d\nstdout:\n%s\nstderr:\n%s\ninput:\n%s", code, out, errOut, doc)
	}
	var res struct {
		Revision int64 `json:"revision"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Revision <= 0 {
		t.Fatalf("xdsadmin apply -o json: no revision (%v) in:\n%s", err, out)
	}
	return res.Revision
}

// applyAndWait is apply, then waits until the node's view has reached the
// apply's revision (/debug/view), so that a client connecting afterwards
// is sent the applied state in its first responses.
func (e *env) applyAndWait(t *testing.T, doc string) int64 {
	t.Helper()
	rev := e.apply(t, doc)
	waitFor(t, fmt.Sprintf("node view at revision %d", rev), func() (bool, string) {
		code, body, err := e.httpGet("/debug/view")
		if err != nil || code != http.StatusOK {
			return false, fmt.Sprintf("%d %v %s", code, err, body)
		}
		var v struct {
			Revision int64 `json:"revision"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			return false, err.Error()
		}
		return v.Revision >= rev, fmt.Sprintf("revision %d", v.Revision)
	})
	return rev
}

// xdsadmin runs xdsadmin against the env's etcd with stdin as standard
// input.
func (e *env) xdsadmin(stdin string, args ...string) (stdout, stderr string, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var out, errOut bytes.Buffer
	args = append([]string{"--etcd-endpoints", e.etcd.Endpoint}, args...)
	code = adminctl.Run(ctx, args, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), code
}

// The resources a proxyless gRPC client follows for xds:///svc: listener
// svc -> route config svc-route -> cluster svc-cluster (EDS over ADS) ->
// endpoints svc-cluster.
const (
	target      = "xds:///svc"
	clusterName = "svc-cluster"
)

// listenerYAML is the API listener svc. Not grpcOK, its
// HttpConnectionManager runs the CORS filter before the router: valid for
// xdsadmin and for Envoy, but NACKed by grpc-go, which has no CORS filter
// ("no filter implementation found for ...Cors").
func listenerYAML(grpcOK bool) string {
	doc := `"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: svc
api_listener:
  api_listener:
    "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
    stat_prefix: svc
    rds:
      route_config_name: svc-route
      config_source:
        ads: {}
        resource_api_version: V3
    http_filters:
`
	if !grpcOK {
		doc += `    - name: envoy.filters.http.cors
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors
`
	}
	return doc + `    # The router filter must be last.
    - name: envoy.filters.http.router
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
`
}

const routeYAML = `"@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
name: svc-route
virtual_hosts:
- name: svc
  # grpc-go matches the virtual host on the target's authority: "svc".
  domains: ["svc"]
  routes:
  - match:
      prefix: /
    route:
      cluster: svc-cluster
`

const clusterYAML = `"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: svc-cluster
type: EDS
eds_cluster_config:
  eds_config:
    ads: {}
    resource_api_version: V3
  service_name: svc-cluster
connect_timeout: 1s
lb_policy: ROUND_ROBIN
`

// endpointsYAML is the ClusterLoadAssignment svc-cluster with one endpoint
// on 127.0.0.1:port. The locality's weight is set: grpc-go ignores a
// locality without one.
func endpointsYAML(port int) string {
	return fmt.Sprintf(`"@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
cluster_name: svc-cluster
endpoints:
- locality:
    region: local
    zone: z1
  load_balancing_weight: 1
  lb_endpoints:
  - endpoint:
      address:
        socket_address:
          address: 127.0.0.1
          port_value: %d
    load_balancing_weight: 1
`, port)
}

// allYAML is the whole chain for xds:///svc with its endpoint on port.
func allYAML(port int) string {
	return strings.Join([]string{listenerYAML(true), routeYAML, clusterYAML, endpointsYAML(port)}, "---\n")
}

// bootstrap is grpc-go's xDS bootstrap for a client with node id id
// talking to xdsAddr.
func bootstrap(xdsAddr, id string) []byte {
	return bootstrapWith(xdsAddr, id, map[string]any{"type": "insecure"})
}

// bootstrapWith is bootstrap with channel creds creds (an entry of the
// bootstrap's channel_creds).
func bootstrapWith(xdsAddr, id string, creds map[string]any) []byte {
	b, err := json.Marshal(map[string]any{
		"xds_servers": []any{map[string]any{
			"server_uri":      xdsAddr,
			"channel_creds":   []any{creds},
			"server_features": []string{"ignore_resource_deletion"},
		}},
		"node": map[string]any{
			"id":       id,
			"cluster":  "c1",
			"locality": map[string]any{"zone": "z1"},
		},
	})
	if err != nil {
		panic(err) // a literal map of strings always marshals
	}
	return b
}

// dial makes a grpc-go xDS client of its own (own xDS client, ADS stream
// and node id) for xds:///svc, served by the env's node. The caller
// closes it.
func (e *env) dial(id string) (*grpc.ClientConn, error) {
	r, err := xds.NewXDSResolverWithConfigForTesting(bootstrap(e.node.XDSAddr(), id))
	if err != nil {
		return nil, fmt.Errorf("xds resolver for %s: %w", id, err)
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(r))
	if err != nil {
		return nil, fmt.Errorf("grpc.NewClient for %s: %w", id, err)
	}
	return cc, nil
}

// newClient is dial that fails the test on error and closes the client
// when the test ends.
func (e *env) newClient(t *testing.T, id string) *grpc.ClientConn {
	t.Helper()
	cc, err := e.dial(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// call makes one health Check RPC on cc and returns the port of the
// backend that answered.
func call(ctx context.Context, cc *grpc.ClientConn) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var p peer.Peer
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil {
		return 0, err
	}
	addr, ok := p.Addr.(*net.TCPAddr)
	if !ok {
		return 0, fmt.Errorf("peer address %v is not TCP", p.Addr)
	}
	return addr.Port, nil
}

// reaches polls RPCs on cc until one is answered by the backend on port,
// or ctx ends.
func reaches(ctx context.Context, cc *grpc.ClientConn, port int) error {
	var last string
	for {
		got, err := call(ctx, cc)
		switch {
		case err == nil && got == port:
			return nil
		case err == nil:
			last = fmt.Sprintf("answered by port %d", got)
		default:
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no RPC reached port %d; last: %s", port, last)
		case <-time.After(pollInterval):
		}
	}
}

// waitReaches is reaches bounded by testTimeout, failing the test.
func waitReaches(t *testing.T, cc *grpc.ClientConn, port int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := reaches(ctx, cc, port); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond until it holds, failing the test after testTimeout
// with cond's last word on why not.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s; last: %s", what, testTimeout, why)
		}
		time.Sleep(pollInterval)
	}
}

// httpClient keeps no idle connections, so none outlive a test.
var httpClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

func (e *env) httpGet(path string) (int, string, error) {
	return get(e.http, e.base+e.node.HTTPAddr()+path)
}

// httpGet GETs path from the HTTP server on addr (host:port).
func httpGet(addr, path string) (int, string, error) {
	return get(httpClient, "http://"+addr+path)
}

// get GETs url with c.
func get(c *http.Client, url string) (int, string, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// metric scrapes the node's /metrics and returns the value of the sample
// name{labels} (labels as in the exposition format, e.g. `type="listener"`),
// 0 when there is none: a counter vector shows a label only once it was
// incremented.
func (e *env) metric(t *testing.T, name, labels string) float64 {
	t.Helper()
	code, body, err := e.httpGet("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	return metricIn(body, name, labels)
}

// metricAt is metric for the replica whose HTTP server is on addr.
func metricAt(t *testing.T, addr, name, labels string) float64 {
	t.Helper()
	code, body, err := httpGet(addr, "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	return metricIn(body, name, labels)
}

// metricIn returns the value of the sample name{labels} in body, a
// /metrics page, 0 when there is none; a sample that does not parse is
// NaN.
func metricIn(body, name, labels string) float64 {
	want := name
	if labels != "" {
		want += "{" + labels + "}"
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok || series != want {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return math.NaN()
		}
		return v
	}
	return 0
}

// streams returns the node's /debug/streams.
func (e *env) streams(t *testing.T) []xdstest.SotWStatus {
	t.Helper()
	code, body, err := e.httpGet("/debug/streams")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /debug/streams: %d %v %s", code, err, body)
	}
	var got xdstest.DebugStreams
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("/debug/streams: %v\n%s", err, body)
	}
	return got.Streams
}

// stream returns the /debug/streams entry of the node's stream for node id,
// or nil if it has none (yet).
func (e *env) stream(t *testing.T, id string) *xdstest.SotWStatus {
	t.Helper()
	all := e.streams(t)
	for i := range all {
		if all[i].NodeID == id {
			return &all[i]
		}
	}
	return nil
}
