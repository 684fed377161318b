package sotw_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/grpcapi"
	"github.com/legation-io/legation/internal/xds/sotw"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// env is the test kit's env (a real embedded etcd, store and view) with an
// sotw.Server on a real gRPC server on 127.0.0.1.
type env struct {
	*xdstest.Env
	srv  *sotw.Server
	reg  *prometheus.Registry // the view's and the server's metrics
	addr string
}

type envOption func(*sotw.Config)

// newEnv starts an env, stopped when tb ends, with etcd's limits raised
// for large transactions.
func newEnv(tb testing.TB, opts ...envOption) *env {
	tb.Helper()
	return newEnvWith(tb, xdstest.Options{MaxTxnOps: 10000, MaxRequestBytes: 16 << 20}, opts...)
}

// newEnvWith is newEnv on an env with kit's options. It is the one place
// that builds the server of this package's tests.
func newEnvWith(tb testing.TB, kit xdstest.Options, opts ...envOption) *env {
	tb.Helper()
	reg := prometheus.NewRegistry()
	kit.Registerer = reg
	e := &env{Env: xdstest.NewEnv(tb, kit), reg: reg}
	cfg := sotw.Config{Config: xdsstream.Config{Source: e.View, Registerer: e.reg, CatchupTimeout: time.Second}}
	for _, o := range opts {
		o(&cfg)
	}
	var err error
	if e.srv, err = sotw.New(cfg); err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(append(grpcapi.ServerOptions(), grpc.MaxRecvMsgSize(harnessMaxRecv))...)
	grpcapi.Register(g, grpcapi.Services{SotW: e.srv})
	e.addr = xdstest.Serve(tb, g)
	return e
}

// conn returns a new connection to the server, closed when tb ends.
func (e *env) conn(tb testing.TB) *grpc.ClientConn { return xdstest.Dial(tb, e.addr) }

// adsStream opens an ADS stream on a new connection.
func (e *env) adsStream(tb testing.TB) *xdstest.SotWStream { return xdstest.OpenSotW(tb, e.conn(tb)) }

// A script is one conformance case: steps run in order, on raw SotW
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
	revs    []int64               // revs[n]: the revision of the script's n-th apply, from 1
	streams []*xdstest.SotWStream // in the order opened
	s       *xdstest.SotWStream   // the stream the steps act on
	last    *discoveryv3.DiscoveryResponse
	saved   map[string]*discoveryv3.DiscoveryResponse
}

// runScripts runs each script as a parallel subtest of t.
func runScripts(t *testing.T, scripts []script) {
	t.Helper()
	for _, sc := range scripts {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			r := &scriptRun{t: t, e: newEnv(t), revs: []int64{0}, saved: map[string]*discoveryv3.DiscoveryResponse{}}
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

// ver says which version_info a response must have: the revision of an
// apply (at), the version of a response saved before (sameAs), or any
// (anyVersion).
type ver func(*scriptRun) (string, bool)

// at is the revision of the script's n-th apply.
func at(n int) ver {
	return func(r *scriptRun) (string, bool) { return xdstest.Version(r.rev(n)), true }
}

// sameAs is the version of the response saved as label.
func sameAs(label string) ver {
	return func(r *scriptRun) (string, bool) { return r.saved[label].GetVersionInfo(), true }
}

// anyVersion accepts the version the response has.
func anyVersion(*scriptRun) (string, bool) { return "", false }

// res is a resource a script writes, or whose body it checks.
type res struct {
	typ   *resource.Type
	scope string
	m     func(testing.TB) proto.Message
}

// cds is cluster name in the default scope (ms: its connect timeout);
// cdsIn in scope.
func cds(name string, ms int64) res { return cdsIn("default", name, ms) }

func cdsIn(scope, name string, ms int64) res {
	return res{resource.Cluster, scope, func(testing.TB) proto.Message { return xdstest.Cluster(name, ms) }}
}

// eds is the endpoints of cluster name on port in the default scope; edsIn
// in scope.
func eds(name string, port uint32) res { return edsIn("default", name, port) }

func edsIn(scope, name string, port uint32) res {
	return res{resource.Endpoint, scope, func(testing.TB) proto.Message { return xdstest.Endpoints(name, port) }}
}

// lds is API listener name taking route configuration route; ldsStat with
// stat as its stat prefix, which makes versions of it differ.
func lds(name, route string) res { return ldsStat(name, route, "") }

func ldsStat(name, route, stat string) res {
	return res{resource.Listener, "default", func(tb testing.TB) proto.Message {
		l := xdstest.APIListener(tb, name, route, true)
		if stat != "" {
			l.StatPrefix = stat
		}
		return l
	}}
}

// rds is route configuration name routing domain to cluster.
func rds(name, domain, cluster string) res {
	return res{resource.Route, "default", func(testing.TB) proto.Message { return xdstest.Route(name, domain, cluster) }}
}

// apply writes puts in one transaction; applyDel also deletes keys.
func apply(puts ...res) step { return applyDel(puts) }

func applyDel(puts []res, keys ...store.Key) step {
	return func(r *scriptRun) {
		ps := make([]store.Put, 0, len(puts))
		for _, p := range puts {
			ps = append(ps, xdstest.Put(r.t, p.typ, p.scope, p.m(r.t)))
		}
		r.revs = append(r.revs, r.e.Apply(r.t, ps, keys...))
	}
}

// open opens a stream with o and makes it the one the steps act on.
func open(o func(*env, testing.TB) *xdstest.SotWStream) step {
	return func(r *scriptRun) {
		r.s = o(r.e, r.t)
		r.streams = append(r.streams, r.s)
	}
}

// on makes the n-th stream opened (from 1) the one the steps act on.
func on(n int) step { return func(r *scriptRun) { r.s = r.streams[n-1] } }

// send sends req; a version_info "@N" stands for the revision of apply N.
func send(req *discoveryv3.DiscoveryRequest) step {
	return func(r *scriptRun) {
		req := proto.Clone(req).(*discoveryv3.DiscoveryRequest)
		if n, ok := strings.CutPrefix(req.GetVersionInfo(), "@"); ok {
			i, err := strconv.Atoi(n)
			if err != nil {
				r.t.Fatalf("version_info %q", req.GetVersionInfo())
			}
			req.VersionInfo = xdstest.Version(r.rev(i))
		}
		r.s.Send(req)
	}
}

// sendf sends the request fn builds from the run (a saved response's
// nonce).
func sendf(fn func(r *scriptRun) *discoveryv3.DiscoveryRequest) step {
	return func(r *scriptRun) { r.s.Send(fn(r)) }
}

// subscribe subscribes the stream to types in order (names[type], none:
// wildcard), ACKing each first response (subscribeAll).
func subscribe(types []*resource.Type, names map[*resource.Type][]string) step {
	return func(r *scriptRun) { subscribeAll(r.t, r.s, types, names) }
}

// expect receives the next response, which must be of typ at version v
// and hold exactly the resources named want, in order (checkResp).
func expect(typ *resource.Type, v ver, want ...string) step {
	return func(r *scriptRun) {
		r.last = r.s.Expect()
		version, ok := v(r)
		if !ok {
			version = r.last.GetVersionInfo()
		}
		checkResp(r.t, r.last, typ, version, want...)
	}
}

// expectAny receives the next response, whatever it is.
func expectAny() step { return func(r *scriptRun) { r.last = r.s.Expect() } }

// bodies checks that the last response's resources are want, in order
// (checkBodies).
func bodies(want ...res) step {
	return func(r *scriptRun) {
		ms := make([]proto.Message, len(want))
		for i, w := range want {
			ms[i] = w.m(r.t)
		}
		checkBodies(r.t, r.last, ms...)
	}
}

// save names the last response, for ackOf, nackOf and sameAs.
func save(label string) step { return func(r *scriptRun) { r.saved[label] = r.last } }

// ack ACKs the last response, asking for names; ackOf the one saved as
// label.
func ack(names ...string) step { return func(r *scriptRun) { r.s.Ack(r.last, names...) } }

func ackOf(label string, names ...string) step {
	return func(r *scriptRun) { r.s.Ack(r.saved[label], names...) }
}

// nack NACKs the last response with msg, asking for names; lastGood is
// the apply whose revision is the version the client keeps (0: none).
// nackOf NACKs the one saved as label.
func nack(lastGood int, msg string, names ...string) step {
	return func(r *scriptRun) { r.s.Nack(r.last, r.good(lastGood), msg, names...) }
}

func nackOf(label string, lastGood int, msg string, names ...string) step {
	return func(r *scriptRun) { r.s.Nack(r.saved[label], r.good(lastGood), msg, names...) }
}

func (r *scriptRun) good(n int) string {
	if n == 0 {
		return ""
	}
	return xdstest.Version(r.rev(n))
}

// none checks that nothing comes within the short timeout; noneOn checks
// it on the streams opened n-th (from 1), waiting once for all.
func none() step { return func(r *scriptRun) { r.s.ExpectNone() } }

func noneOn(ns ...int) step {
	return func(r *scriptRun) {
		ss := make([]*xdstest.SotWStream, len(ns))
		for i, n := range ns {
			ss[i] = r.streams[n-1]
		}
		expectNoneOn(r.t, ss...)
	}
}

// check runs an assertion the steps above do not make.
func check(fn func(r *scriptRun)) step { return fn }
