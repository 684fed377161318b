package xdstest

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

// The two test timeouts (grpc-go's defaultTestTimeout and
// defaultTestShortTimeout): a long one for what must happen, a short one
// for what must not.
const (
	// Timeout bounds the wait for what must happen. It is generous: two
	// cores shared by the race detector, etcd and replicas.
	Timeout = 30 * time.Second
	// ShortTimeout is how long a test watches for what must not happen
	// (a response that must not be sent).
	ShortTimeout = 300 * time.Millisecond
)

// Options tune an Env. The zero value is etcd's defaults and the store's
// default prefix.
type Options struct {
	// Prefix is the etcd key prefix of the store and the view; "" is
	// keyspace.DefaultPrefix.
	Prefix string
	// MaxTxnOps and MaxRequestBytes are etcd's --max-txn-ops and
	// --max-request-bytes, which the store is told too; the client may
	// then send requests of MaxRequestBytes. Zero: etcd's defaults.
	MaxTxnOps       int
	MaxRequestBytes int
	// Registerer gets the view's metrics; nil registers none.
	Registerer prometheus.Registerer
	// Serves is the view's Config.Serves; nil: every name.
	Serves func(name string) bool
}

// Env is a real embedded etcd, a store writing to it and a view of it
// that runs until the test ends. Its fields may be used from any
// goroutine.
type Env struct {
	Etcd   *storetest.Etcd
	Client *clientv3.Client
	Store  *store.Store
	// View is running and loaded (Ready) when NewEnv returns.
	View *view.View
}

// NewEnv starts an Env, stopped when tb ends: the view's goroutine is
// waited for, then the client and etcd are closed.
func NewEnv(tb testing.TB, opts Options) *Env {
	tb.Helper()
	e := &Env{Etcd: storetest.Start(tb, storetest.Options{MaxTxnOps: uint(opts.MaxTxnOps), MaxRequestBytes: uint(opts.MaxRequestBytes)})}
	// Not storetest's client: that one keeps clientv3's 2 MiB limit on
	// what it sends, and a large transaction is bigger.
	var err error
	e.Client, err = clientv3.New(clientv3.Config{
		Endpoints:          []string{e.Etcd.Endpoint},
		DialTimeout:        5 * time.Second,
		Logger:             zap.NewNop(),
		MaxCallSendMsgSize: opts.MaxRequestBytes,
	})
	if err != nil {
		tb.Fatalf("etcd client: %v", err)
	}
	tb.Cleanup(func() { e.Client.Close() })
	if e.Store, err = store.New(store.Config{Client: e.Client, Prefix: opts.Prefix, MaxTxnOps: opts.MaxTxnOps, MaxRequestBytes: opts.MaxRequestBytes}); err != nil {
		tb.Fatal(err)
	}
	e.View = StartView(tb, view.Config{Client: e.Client, Prefix: opts.Prefix, Registerer: opts.Registerer, Serves: opts.Serves})
	return e
}

// StartView runs a view with cfg until tb ends and returns it once it is
// loaded; it fails the test if that takes longer than Timeout.
func StartView(tb testing.TB, cfg view.Config) *view.View {
	tb.Helper()
	v, err := view.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); v.Run(ctx) }() //nolint:errcheck // nil on cancel
	tb.Cleanup(func() { cancel(); <-done })
	select {
	case <-v.Ready():
	case <-time.After(Timeout):
		tb.Fatal("view not ready")
	}
	return v
}

// Apply writes puts and deletes (each in its own scope) in one
// transaction, waits until the view has it and returns its revision.
func (e *Env) Apply(tb testing.TB, puts []store.Put, deletes ...store.Key) int64 {
	tb.Helper()
	return e.ApplyRequest(tb, store.PlanRequest{Puts: puts, Deletes: deletes}).Revision
}

// ApplyRequest plans and applies req (a TTL, a prune), then waits until
// the view has the result's revision.
func (e *Env) ApplyRequest(tb testing.TB, req store.PlanRequest) *store.ApplyResult {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	plan, err := e.Store.MakePlan(ctx, req)
	if err != nil {
		tb.Fatalf("plan: %v", err)
	}
	res, err := e.Store.Apply(ctx, plan, store.ApplyOptions{})
	if err != nil {
		tb.Fatalf("apply: %v", err)
	}
	if _, err := e.View.WaitRevision(ctx, res.Revision); err != nil {
		tb.Fatal(err)
	}
	return res
}

// WaitFor polls cond until it holds, failing tb after Timeout with what
// and cond's last word on why not (why may be "").
func WaitFor(tb testing.TB, what string, cond func() (ok bool, why string)) {
	tb.Helper()
	deadline := time.Now().Add(Timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if why != "" {
				why = "; last: " + why
			}
			tb.Fatalf("timed out waiting for %s%s", what, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Serve serves g on a new listener on 127.0.0.1:0 until tb ends, and
// returns its address. At the end g is stopped (its streams cut) and
// Serve's goroutine waited for.
func Serve(tb testing.TB, g *grpc.Server) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); g.Serve(lis) }() //nolint:errcheck // ends with Stop
	tb.Cleanup(func() { g.Stop(); <-served })
	return lis.Addr().String()
}

// DialTLS returns a client connection to addr over TLS with cfg, closed
// when tb ends.
func DialTLS(tb testing.TB, addr string, cfg *tls.Config, opts ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	cc, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return cc
}

// Dial returns a client connection to addr without TLS, closed when tb
// ends. opts come first: a later option of the same kind wins.
func Dial(tb testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	cc, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return cc
}
