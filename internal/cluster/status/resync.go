package status

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// keysPage is how many keys a resync reads at a time.
const keysPage = 10000

// check runs resync, and a round at once if it forgot records.
func (w *Writer) check(ctx context.Context) error {
	n, err := w.resync(ctx)
	if err != nil || n == 0 {
		return err
	}
	return w.round(ctx)
}

// resync forgets the records that are no longer in etcd as this writer
// wrote them (deleted, or written since by another replica), so that the
// next round writes them again if their node is still here. It compares
// mod revisions: etcd serves keys-only ranges from its index, without the
// keys' leases. It returns how many it forgot.
func (w *Writer) resync(ctx context.Context) (int, error) {
	if w.lease == 0 || len(w.written) == 0 {
		return 0, nil
	}
	dir := Dir(w.cfg.Prefix)
	end := clientv3.GetPrefixRangeEnd(dir)
	if w.read.rev != 0 && w.dirUnchanged(ctx, dir, end) {
		return 0, nil // every record is as the last full read found it
	}
	w.read.rev = 0
	w.fullReads.Add(1)
	revs := make(map[string]int64, len(w.written))
	var first int64
	for from := dir; ; {
		tctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseTTL)
		resp, err := w.cfg.Client.Get(tctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(keysPage))
		cancel()
		if err != nil {
			return 0, w.fail(ctx, fmt.Errorf("status: check records: %w", err))
		}
		if first == 0 {
			first = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			revs[strings.TrimPrefix(string(kv.Key), dir)] = kv.ModRevision
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	w.read.rev, w.read.keys = first, int64(len(revs))
	lost := 0
	for id, h := range w.written {
		if revs[id] != h.rev {
			delete(w.written, id)
			lost++
		}
	}
	if lost > 0 {
		w.log.Info("status: records were overwritten or deleted by others; writing those of nodes still here again", "records", lost)
		w.metrics.held.Set(float64(len(w.written)))
		w.metrics.takenOver.Add(float64(lost))
	}
	return lost, nil
}

// dirUnchanged reports whether the status directory [dir, end) holds
// exactly the keys, at the same mod revisions, that the last full read
// found: no key there was written after that read's first revision, and
// there are as many keys as it read. A key written since (by this replica
// or another) or deleted and written again has a later mod revision, and
// one deleted leaves one fewer unless another was written, so the two
// answers (two small reads at one revision, not the keys) suffice. An
// error answers false: the full read then reports it.
func (w *Writer) dirUnchanged(ctx context.Context, dir, end string) bool {
	tctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseTTL)
	defer cancel()
	n, err := w.cfg.Client.Get(tctx, dir, clientv3.WithRange(end), clientv3.WithCountOnly())
	if err != nil || n.Count != w.read.keys {
		return false
	}
	// etcd filters by mod revision before it applies the limit, and
	// answers with at most one key.
	newer, err := w.cfg.Client.Get(tctx, dir, clientv3.WithRange(end), clientv3.WithKeysOnly(),
		clientv3.WithRev(n.Header.Revision), clientv3.WithMinModRev(w.read.rev+1), clientv3.WithLimit(1))
	return err == nil && len(newer.Kvs) == 0
}
