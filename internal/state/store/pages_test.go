package store_test

import (
	"context"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

// writingKV writes one more key under the prefix after each Get: what a
// reader of a busy directory races with between pages.
type writingKV struct {
	clientv3.KV
	t      *testing.T
	prefix string
	n      int
}

func (w *writingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	resp, err := w.KV.Get(ctx, key, opts...)
	w.n++
	if _, perr := w.KV.Put(ctx, fmt.Sprintf("%slate-%d", w.prefix, w.n), "x"); perr != nil {
		w.t.Fatal(perr)
	}
	return resp, err
}

// TestReadPages: every key in order, over several pages, all at the
// revision of the first page even while keys are written between pages
// (each response's header carries the current revision, not the one read
// at: a reader that took it from every page would read later pages at a
// later revision).
func TestReadPages(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	c := e.Client(t)
	ctx := t.Context()
	const prefix = "/pages/"
	for i := range 25 {
		if _, err := c.Put(ctx, fmt.Sprintf("%sk%02d", prefix, i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Put(ctx, "/pagesz", "outside"); err != nil {
		t.Fatal(err)
	}
	kv := &writingKV{KV: c, t: t, prefix: prefix}
	var got []string
	rev, err := store.ReadPages(ctx, kv, prefix, 10, func(kv *mvccpb.KeyValue) { got = append(got, string(kv.Key)) })
	if err != nil {
		t.Fatal(err)
	}
	if kv.n != 3 {
		t.Errorf("%d pages read, want 3 of at most 10 keys", kv.n)
	}
	if len(got) != 25 {
		t.Fatalf("read %d keys, want the 25 there at the first page's revision: %v", len(got), got)
	}
	for i, k := range got {
		if want := fmt.Sprintf("%sk%02d", prefix, i); k != want {
			t.Fatalf("key %d is %s, want %s", i, k, want)
		}
	}
	first, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithCountOnly())
	if err != nil || first.Count != 25 {
		t.Errorf("at the revision returned, %d keys (%v), want 25", first.Count, err)
	}
}
