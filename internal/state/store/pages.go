package store

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ReadPages reads every key under prefix at one revision, page keys at a
// time, and calls each for every key in key order. The first page is read
// at etcd's current revision and every later one at that same revision.
// It returns the revision read at. Any package reading a directory it
// does not watch (node status records, load windows) reads it this way.
func ReadPages(ctx context.Context, kv clientv3.KV, prefix string, page int64, each func(*mvccpb.KeyValue)) (int64, error) {
	var rev int64
	if err := ReadPagesAt(ctx, kv, prefix, 0, page, func(r int64) { rev = r }, each); err != nil {
		return 0, err
	}
	return rev, nil
}

// ReadPagesAt reads every key under prefix at revision rev, or at etcd's
// current revision when rev is zero, page keys at a time, and calls each
// for every key in key order. atRev is called once with the revision read
// at, before the first key, for readers that need it to take the keys.
// A response's header gives etcd's current revision, not the one read at,
// so a read at "now" takes it from the first page only and reads every
// later page at it.
func ReadPagesAt(ctx context.Context, kv clientv3.KV, prefix string, rev, page int64, atRev func(int64), each func(*mvccpb.KeyValue)) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	key := prefix
	first := true
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(page)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := kv.Get(ctx, key, opts...)
		if err != nil {
			return err
		}
		if first {
			if rev == 0 {
				rev = resp.Header.Revision
			}
			atRev(rev)
			first = false
		}
		for _, kv := range resp.Kvs {
			each(kv)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
