package ads_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/legation-io/legation/internal/ads"
	"github.com/legation-io/legation/internal/grpcapi"
	"github.com/legation-io/legation/internal/store"
	"github.com/legation-io/legation/internal/store/storetest"
	"github.com/legation-io/legation/internal/xdsstream"
)

// tbEnv is newEnv for benchmarks and fuzz targets, which have a testing.B
// or testing.F rather than a *testing.T: the same real embedded etcd, view,
// ads.Server and gRPC server on 127.0.0.1, stopped when tb ends.
func tbEnv(tb testing.TB, opts ...envOption) *env {
	tb.Helper()
	e := &env{etcd: storetest.Start(tb, storetest.Options{MaxTxnOps: 10000, MaxRequestBytes: 16 << 20}), reg: prometheus.NewRegistry()}
	e.client = e.etcd.Client(tb)
	var err error
	if e.store, err = store.New(store.Config{Client: e.client, MaxTxnOps: 10000, MaxRequestBytes: 16 << 20}); err != nil {
		tb.Fatal(err)
	}
	if e.view, err = store.NewView(store.ViewConfig{Client: e.client, Registerer: e.reg}); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); e.view.Run(ctx) }() //nolint:errcheck // nil on cancel
	tb.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-e.view.Ready():
	case <-time.After(defaultTestTimeout):
		tb.Fatal("view not ready")
	}
	cfg := ads.Config{Config: xdsstream.Config{Source: e.view, Registerer: e.reg, CatchupTimeout: time.Second}}
	for _, o := range opts {
		o(&cfg)
	}
	if e.srv, err = ads.New(cfg); err != nil {
		tb.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(append(grpcapi.ServerOptions(), grpc.MaxRecvMsgSize(1<<20))...)
	grpcapi.Register(g, grpcapi.Services{SotW: e.srv})
	served := make(chan struct{})
	go func() { defer close(served); g.Serve(lis) }() //nolint:errcheck // ends with Stop
	tb.Cleanup(func() { g.Stop(); <-served })
	e.addr = lis.Addr().String()
	return e
}

// tbApply is env.apply for a testing.TB: puts and deletes in one
// transaction, returning once the view has the revision.
func tbApply(tb testing.TB, e *env, puts []store.Put, deletes ...store.Key) int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	plan, err := e.store.MakePlan(ctx, store.PlanRequest{Puts: puts, Deletes: deletes})
	if err != nil {
		tb.Fatalf("plan: %v", err)
	}
	res, err := e.store.Apply(ctx, plan, store.ApplyOptions{})
	if err != nil {
		tb.Fatalf("apply: %v", err)
	}
	if _, err := e.view.WaitRevision(ctx, res.Revision); err != nil {
		tb.Fatal(err)
	}
	return res.Revision
}
