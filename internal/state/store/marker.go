package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
)

// ApplyMarkerKey is the etcd key of scope's apply marker under prefix
// (keyspace.Applies). Every transaction the store writes to a scope's
// resources also puts the scope's marker, so that a deletion, which a
// compare over a directory cannot see, still moves a key the next apply
// compares. It is outside the resources, so replicas' views never see it.
func ApplyMarkerKey(prefix, scope string) string { return keyspace.Applies.Key(prefix, scope) }

// ApplyMarker is the value of a scope's apply marker.
type ApplyMarker struct {
	// By names the writer (the store's Writer).
	By string `json:"by,omitempty"`
	// At is when the apply was sent.
	At time.Time `json:"at"`
	// Traceparent is the W3C trace context of the apply that wrote the
	// marker ("" when it was not traced, and in markers written before
	// traces were stored).
	Traceparent string `json:"traceparent,omitempty"`
}

// ParseApplyMarker decodes a marker's value. Fields it does not know are
// ignored, and those it knows may be missing (a marker written before
// they were): they are then zero.
func ParseApplyMarker(b []byte) (ApplyMarker, error) {
	var m ApplyMarker
	if err := json.Unmarshal(b, &m); err != nil {
		return ApplyMarker{}, fmt.Errorf("%w: apply marker: %v", ErrMalformed, err)
	}
	return m, nil
}

// ApplyMarkersAt returns the apply markers written by the transaction of
// revision rev, by scope: those the store's applies put with the
// resources they wrote at rev. It reads etcd at rev (an error once rev is
// compacted away).
func ApplyMarkersAt(ctx context.Context, kv clientv3.KV, prefix string, rev int64) (map[string]ApplyMarker, error) {
	dir := keyspace.Applies.Prefix(prefix)
	resp, err := kv.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		return nil, fmt.Errorf("store: read apply markers at revision %d: %w", rev, err)
	}
	out := map[string]ApplyMarker{}
	for _, k := range resp.Kvs {
		if k.ModRevision != rev {
			continue
		}
		m, err := ParseApplyMarker(k.Value)
		if err != nil {
			return nil, fmt.Errorf("store: %s: %w", k.Key, err)
		}
		out[strings.TrimPrefix(string(k.Key), dir)] = m
	}
	return out, nil
}

// guards returns what every transaction of plan compares: the etcd
