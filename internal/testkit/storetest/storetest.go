// Package storetest starts a real embedded etcd for tests and hands out
// clients to it. It is for tests only.
package storetest

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/state/devetcd"
)

// Options tune the embedded etcd.
type Options struct {
	MaxTxnOps       uint
	MaxRequestBytes uint
}

// Etcd is an embedded etcd running for one test.
type Etcd struct {
	Server   *devetcd.Server
	Endpoint string
}

// Start runs an embedded etcd on a free port of 127.0.0.1 in a temporary
// directory; it is stopped when the test ends.
func Start(t testing.TB, opts Options) *Etcd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := devetcd.Start(ctx, devetcd.Config{
		Dir:             t.TempDir(),
		ClientAddr:      "127.0.0.1:0",
		MaxTxnOps:       opts.MaxTxnOps,
		MaxRequestBytes: opts.MaxRequestBytes,
	})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	return &Etcd{Server: srv, Endpoint: srv.Endpoint()}
}

// Client returns a new client of e, closed when the test ends.
func (e *Etcd) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{e.Endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
