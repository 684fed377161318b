package delta_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	clusterv3svc "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointv3svc "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/delta"
	"github.com/legation-io/legation/internal/xds/grpcapi"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// env is the test kit's env (a real embedded etcd, store and view) with
// the delta server behind the ADS and per-type services on a real gRPC
// server on 127.0.0.1.
type env struct {
	*xdstest.Env
	srv  *delta.Server
	reg  *prometheus.Registry // the server's metrics
	addr string
}

// newEnv starts an env, stopped when tb ends.
func newEnv(tb testing.TB) *env {
	tb.Helper()
	return newEnvWith(tb, xdstest.Options{})
}

// newEnvWith is newEnv on an env with kit's options, the server's config
// changed by opts. It is the one place that builds the server of this
// package's tests.
func newEnvWith(tb testing.TB, kit xdstest.Options, opts ...func(*delta.Config)) *env {
	tb.Helper()
	e := &env{Env: xdstest.NewEnv(tb, kit), reg: prometheus.NewRegistry()}
	cfg := delta.Config{Config: xdsstream.Config{Source: e.View, Registerer: e.reg, CatchupTimeout: time.Second}}
	for _, o := range opts {
		o(&cfg)
	}
	var err error
	if e.srv, err = delta.New(cfg); err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(grpcapi.ServerOptions()...)
	grpcapi.Register(g, grpcapi.Services{Delta: e.srv})
	e.addr = xdstest.Serve(tb, g)
	return e
}

// dial returns a client connection to e's gRPC server, closed when tb
// ends.
func (e *env) dial(tb testing.TB) *grpc.ClientConn { return xdstest.Dial(tb, e.addr) }

// deltaADS opens a delta ADS stream on a new connection.
func (e *env) deltaADS(tb testing.TB) *xdstest.DeltaStream { return xdstest.OpenDelta(tb, e.dial(tb)) }

type deltaClient = grpc.BidiStreamingClient[discoveryv3.DeltaDiscoveryRequest, discoveryv3.DeltaDiscoveryResponse]

// deltaCDS opens a raw stream of the per-type DeltaClusters service.
func (e *env) deltaCDS(tb testing.TB) *xdstest.DeltaStream {
	tb.Helper()
	return &xdstest.DeltaStream{Stream: xdstest.Open(tb, e.dial(tb), func(ctx context.Context, cc *grpc.ClientConn) (deltaClient, error) {
		return clusterv3svc.NewClusterDiscoveryServiceClient(cc).DeltaClusters(ctx)
	})}
}

// deltaEDS opens a raw stream of the per-type DeltaEndpoints service.
func (e *env) deltaEDS(tb testing.TB) *xdstest.DeltaStream {
	tb.Helper()
	return &xdstest.DeltaStream{Stream: xdstest.Open(tb, e.dial(tb), func(ctx context.Context, cc *grpc.ClientConn) (deltaClient, error) {
		return endpointv3svc.NewEndpointDiscoveryServiceClient(cc).DeltaEndpoints(ctx)
	})}
}

// A script is one conformance case: steps run in order, on raw delta
// streams of a fresh env, each asserting what it must. The tables of
// conformance_test.go are lists of scripts.
type script struct {
	name  string // what the script checks
	steps []step
}

// step is one action or assertion of a script.
type step func(*scriptRun)

// scriptRun is the state of a running script.
type scriptRun struct {
	t       *testing.T
	e       *env
	revs    []int64                // revs[n]: the revision of the script's n-th apply, from 1
	streams []*xdstest.DeltaStream // in the order opened
	s       *xdstest.DeltaStream   // the stream the steps act on
	last    *discoveryv3.DeltaDiscoveryResponse
	saved   map[string]*discoveryv3.DeltaDiscoveryResponse
}

// runScripts runs each script as a parallel subtest of t.
func runScripts(t *testing.T, scripts []script) {
	t.Helper()
	for _, sc := range scripts {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			r := &scriptRun{t: t, e: newEnv(t), revs: []int64{0}, saved: map[string]*discoveryv3.DeltaDiscoveryResponse{}}
			at := 0
			defer func() {
				if t.Failed() {
					t.Logf("failed at step %d of %d", at, len(sc.steps))
				}
			}()
			for i, st := range sc.steps {
				at = i + 1
				st(r)
			}
		})
	}
}

// rev is the revision of the script's n-th apply.
func (r *scriptRun) rev(n int) int64 {
	r.t.Helper()
	if n < 1 || n >= len(r.revs) {
		r.t.Fatalf("apply %d: the script made %d applies so far", n, len(r.revs)-1)
	}
	return r.revs[n]
}

// vers maps resource names to the apply (from 1) whose revision is their
// version.
type vers map[string]int

// versions is want with the applies' revisions.
func (r *scriptRun) versions(want vers) map[string]string {
	if want == nil {
		return nil
	}
	out := make(map[string]string, len(want))
	for name, n := range want {
		out[name] = v(r.rev(n))
	}
	return out
}

// res is a resource a script writes.
type res struct {
	typ   *resource.Type
	scope string
	m     proto.Message
}

// cds is cluster name in the default scope (ms: its connect timeout);
// cdsIn in scope.
func cds(name string, ms int64) res { return cdsIn(store.DefaultScope, name, ms) }

func cdsIn(scope, name string, ms int64) res {
	return res{resource.Cluster, scope, xdstest.Cluster(name, ms)}
}

// eds is the endpoints of cluster name in the default scope, on port.
func eds(name string, port uint32) res {
	return res{resource.Endpoint, store.DefaultScope, xdstest.Endpoints(name, port)}
}

// lds is listener name in scope, its stat prefix stat.
func lds(scope, name, stat string) res { return res{resource.Listener, scope, listener(name, stat)} }

// rds is route configuration name routing domain to cluster.
func rds(name, domain, cluster string) res {
	return res{resource.Route, store.DefaultScope, xdstest.Route(name, domain, cluster)}
}

// apply writes puts in one transaction; applyDel also deletes keys.
func apply(puts ...res) step { return applyDel(puts) }

func applyDel(puts []res, keys ...store.Key) step {
	return func(r *scriptRun) {
		ps := make([]store.Put, 0, len(puts))
		for _, p := range puts {
			ps = append(ps, xdstest.Put(r.t, p.typ, p.scope, p.m))
		}
		r.revs = append(r.revs, r.e.Apply(r.t, ps, keys...))
	}
}

// open opens a stream with o and makes it the one the steps act on.
func open(o func(*env, testing.TB) *xdstest.DeltaStream) step {
	return func(r *scriptRun) {
		r.s = o(r.e, r.t)
		r.streams = append(r.streams, r.s)
	}
}

// on makes the n-th stream opened (from 1) the one the steps act on.
func on(n int) step { return func(r *scriptRun) { r.s = r.streams[n-1] } }

// send sends req. A value "@N" of its initial_resource_versions stands
// for the revision of apply N.
func send(req *discoveryv3.DeltaDiscoveryRequest) step {
	return func(r *scriptRun) {
		req := proto.Clone(req).(*discoveryv3.DeltaDiscoveryRequest)
		for name, ver := range req.GetInitialResourceVersions() {
			if n, ok := strings.CutPrefix(ver, "@"); ok {
				i, err := strconv.Atoi(n)
				if err != nil {
					r.t.Fatalf("initial version %q of %s", ver, name)
				}
				req.InitialResourceVersions[name] = v(r.rev(i))
			}
		}
		r.s.Send(req)
	}
}

// expect receives the next response, which must be of typ and carry
// exactly want and removed (checkResp, what naming it).
func expect(typ *resource.Type, what string, want vers, removed ...string) step {
	return func(r *scriptRun) {
		r.t.Helper()
		r.last = r.s.ExpectType(typ)
		checkResp(r.t, what, r.last, r.versions(want), removed...)
	}
}

// expectAny receives the next response, which must be of typ.
func expectAny(typ *resource.Type) step {
	return func(r *scriptRun) { r.last = r.s.ExpectType(typ) }
}

// save names the last response, for ackOf.
func save(label string) step { return func(r *scriptRun) { r.saved[label] = r.last } }

// ack ACKs the last response; ackOf the one saved as label.
func ack() step { return func(r *scriptRun) { r.s.Ack(r.last) } }

func ackOf(label string) step { return func(r *scriptRun) { r.s.Ack(r.saved[label]) } }

// nack NACKs the last response with msg.
func nack(msg string) step { return func(r *scriptRun) { r.s.Nack(r.last, msg) } }

// none checks that nothing comes within the short timeout.
func none() step { return func(r *scriptRun) { r.s.ExpectNone() } }

// check runs an assertion the steps above do not make.
func check(fn func(r *scriptRun)) step { return fn }
