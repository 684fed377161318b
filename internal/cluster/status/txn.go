package status

import (
	"context"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxTxnBytes bounds the keys and values of one transaction, below etcd's
// default --max-request-bytes (1.5 MiB). A record is at most a few KiB.
const maxTxnBytes = 1 << 20

// write builds the records of the dirty nodes, in order, as many at a time
// as *budget (transactions) lets it write, and writes those whose value
// changed. A node whose value is what etcd has already only takes its new
// stamp. It returns the nodes not written, in order.
func (w *Writer) write(ctx context.Context, dirty []string, budget *int) ([]string, error) {
	for len(dirty) > 0 && *budget > 0 {
		chunk := dirty[:min(len(dirty), *budget*w.cfg.MaxOps)]
		want := make(map[string]bool, len(chunk))
		for _, id := range chunk {
			want[id] = true
		}
		recs := map[string]NodeStatus{}
		for _, r := range w.cfg.Source.Records(func(id string) bool { return want[id] }) {
			if _, dup := recs[r.NodeID]; !dup && want[r.NodeID] {
				recs[r.NodeID] = r
			}
		}
		puts := make([]pending, 0, len(chunk))
		for _, id := range chunk {
			r, ok := recs[id]
			if !ok {
				continue // gone since Stamps: the next round deletes it
			}
			w.setRejected(r)
			r.Home = w.cfg.Replica
			v := encode(r)
			h := xxhash.Sum64(v)
			stamp := w.stamps[id]
			if old, ok := w.written[id]; ok && old.hash == h {
				old.stamp = stamp
				w.written[id] = old
				continue
			}
			puts = append(puts, pending{id: id, key: Key(w.cfg.Prefix, id), value: v, hash: h, stamp: stamp})
		}
		left, err := w.put(ctx, puts, budget)
		rest := dirty[len(chunk):]
		if len(left) > 0 {
			ids := make([]string, 0, len(left)+len(rest))
			for _, p := range left {
				ids = append(ids, p.id)
			}
			rest = append(ids, rest...)
		}
		dirty = rest
		if err != nil {
			return dirty, err
		}
	}
	return dirty, nil
}

// put writes the records in transactions of at most MaxOps puts and
// maxTxnBytes, while *budget (transactions) lasts. It returns the records
// not written.
func (w *Writer) put(ctx context.Context, puts []pending, budget *int) ([]pending, error) {
	for len(puts) > 0 && *budget > 0 {
		n, size := 0, 0
		for n < len(puts) && n < w.cfg.MaxOps {
			s := len(puts[n].key) + len(puts[n].value)
			if n > 0 && size+s > maxTxnBytes {
				break
			}
			size += s
			n++
		}
		batch := puts[:n]
		ops := make([]clientv3.Op, len(batch))
		for i, p := range batch {
			ops[i] = clientv3.OpPut(p.key, string(p.value), clientv3.WithLease(w.lease))
		}
		tctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseTTL)
		resp, err := w.cfg.Client.Txn(tctx).Then(ops...).Commit()
		cancel()
		*budget-- // a failed transaction may have committed
		if err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				w.lost("etcd no longer knows it")
			}
			return puts, fmt.Errorf("status: write %d records: %w", len(batch), err)
		}
		puts = puts[n:]
		w.metrics.txns.Inc()
		w.metrics.written.Add(float64(len(batch)))
		w.metrics.bytes.Add(float64(size))
		for _, p := range batch {
			w.written[p.id] = held{hash: p.hash, rev: resp.Header.Revision, stamp: p.stamp}
		}
		w.cursor = batch[len(batch)-1].id
	}
	return puts, nil
}

// delete deletes the records of the nodes that left, each only if it is
// still under this writer's lease (if another replica wrote it since, the
// node is connected there and the record is the other's), while *budget
// (transactions) lasts. It returns the ids not deleted.
func (w *Writer) delete(ctx context.Context, gone []string, budget *int) ([]string, error) {
	per := max(w.cfg.MaxOps-1, 1)
	for len(gone) > 0 && *budget > 0 {
		batch := gone[:min(per, len(gone))]
		ops := make([]clientv3.Op, len(batch))
		for i, id := range batch {
			key := Key(w.cfg.Prefix, id)
			ops[i] = clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(key), "=", int64(w.lease))},
				[]clientv3.Op{clientv3.OpDelete(key)}, nil)
		}
		tctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseTTL)
		resp, err := w.cfg.Client.Txn(tctx).Then(ops...).Commit()
		cancel()
		*budget--
		if err != nil {
			return gone, fmt.Errorf("status: delete %d records: %w", len(batch), err)
		}
		gone = gone[len(batch):]
		w.metrics.txns.Inc()
		for i, id := range batch {
			// Ours or not, the key is no longer this writer's to track.
			delete(w.written, id)
			if i < len(resp.Responses) && resp.Responses[i].GetResponseTxn().GetSucceeded() {
				w.metrics.deleted.Inc()
			} else {
				w.metrics.takenOver.Inc()
			}
		}
	}
	return gone, nil
}
