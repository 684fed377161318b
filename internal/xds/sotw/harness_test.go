package sotw_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/grpcapi"
	"github.com/legation-io/legation/internal/xds/sotw"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// env is the test kit's env (a real embedded etcd, store and view) with an
// ads.Server on a real gRPC server on 127.0.0.1.
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
