package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/store"
)

// ErrNotFound is returned by Get when a node has no record: no replica
// serves it (or the one that did crashed and its lease expired).
var ErrNotFound = errors.New("status: node not found")

// BadRecord is a record value that could not be read.
type BadRecord struct {
	Key string
	Err error
}

// readPage is how many records Read asks etcd for at a time.
const readPage = 1000

// Read returns the records under prefix, sorted by node id, and the keys
// whose values could not be read, which are skipped. It reads at one
// revision, in pages.
func Read(ctx context.Context, c *clientv3.Client, prefix string) ([]NodeStatus, []BadRecord, error) {
	dir := Dir(prefix)
	var (
		out []NodeStatus
		bad []BadRecord
	)
	_, err := store.ReadPages(ctx, c, dir, readPage, func(kv *mvccpb.KeyValue) {
		ns, err := Decode(strings.TrimPrefix(string(kv.Key), dir), kv.Value)
		if err != nil {
			bad = append(bad, BadRecord{Key: string(kv.Key), Err: err})
			return
		}
		out = append(out, ns)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("status: read %s: %w", dir, err)
	}
	// etcd returns keys in byte order, which is node id order.
	return out, bad, nil
}

// List returns the records under prefix, sorted by node id. A value that
// cannot be read is skipped with a warning on slog's default logger; use
// Read to handle them yourself.
func List(ctx context.Context, c *clientv3.Client, prefix string) ([]NodeStatus, error) {
	out, bad, err := Read(ctx, c, prefix)
	for _, b := range bad {
		slog.Default().Warn("status: skipping a malformed status record", "key", b.Key, "err", b.Err)
	}
	return out, err
}

// Get returns the record of nodeID under prefix: ErrNotFound if there is
// none, an error wrapping ErrMalformed if it cannot be read.
func Get(ctx context.Context, c *clientv3.Client, prefix, nodeID string) (NodeStatus, error) {
	key := Key(prefix, nodeID)
	resp, err := c.Get(ctx, key)
	if err != nil {
		return NodeStatus{}, fmt.Errorf("status: read %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return NodeStatus{}, fmt.Errorf("%w: %q", ErrNotFound, nodeID)
	}
	return Decode(nodeID, resp.Kvs[0].Value)
}
