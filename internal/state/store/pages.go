package store

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ReadPages reads every key under prefix at one revision, page keys at a
// time, and calls each for every key in key order. The first page is read
// at etcd's current revision and every later one at that same revision
// (a response's header gives the current revision, not the one read at,
// so it is taken from the first page only). It returns the revision read
// at. Any package reading a directory it does not watch (node status
// records, load windows) reads it this way.
func ReadPages(ctx context.Context, kv clientv3.KV, prefix string, page int64, each func(*mvccpb.KeyValue)) (int64, error) {
	end := clientv3.GetPrefixRangeEnd(prefix)
	key := prefix
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(page)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := kv.Get(ctx, key, opts...)
		if err != nil {
			return 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			each(kv)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}
