package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
)

// RegistryKey returns the registry key of the member called name:
// "<prefix>members/<name>" (keyspace.Members).
func RegistryKey(prefix, name string) string { return keyspace.Members.Key(prefix, name) }

// BadRecord is a registry value that could not be read.
type BadRecord struct {
	Key string
	Err error
}

// ReadRegistry returns the members registered under prefix, sorted by
// name, and the keys whose values could not be read (not JSON, or a name
// that is not the key's), which are skipped. It reads at one revision.
func ReadRegistry(ctx context.Context, c *clientv3.Client, prefix string) ([]Member, []BadRecord, error) {
	dir := keyspace.Members.Prefix(prefix)
	resp, err := c.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, fmt.Errorf("shard: read registry %s: %w", dir, err)
	}
	var (
		members []Member
		bad     []BadRecord
	)
	for _, kv := range resp.Kvs {
		m, err := decodeRecord(string(kv.Key), strings.TrimPrefix(string(kv.Key), dir), kv.Value)
		if err != nil {
			bad = append(bad, BadRecord{Key: string(kv.Key), Err: err})
			continue
		}
		members = append(members, m)
	}
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return members, bad, nil
}

// ListRegistry returns the members registered under prefix, sorted by
// name (for `xdsadmin members`). A value that cannot be read is skipped
// with a warning on slog's default logger; use ReadRegistry to handle
// them yourself.
func ListRegistry(ctx context.Context, c *clientv3.Client, prefix string) ([]Member, error) {
	members, bad, err := ReadRegistry(ctx, c, prefix)
	for _, b := range bad {
		slog.Default().Warn("shard: skipping a malformed registry record", "key", b.Key, "err", b.Err)
	}
	return members, err
}

func decodeRecord(key, name string, value []byte) (Member, error) {
	var m Member
	if err := json.Unmarshal(value, &m); err != nil {
		return Member{}, fmt.Errorf("shard: registry record %s: %w", key, err)
	}
	if m.Name == "" {
		m.Name = name
	}
	if m.Name != name {
		return Member{}, fmt.Errorf("shard: registry record %s names %q", key, m.Name)
	}
	return m, nil
}

func encodeRecord(m Member) []byte {
	b, err := json.Marshal(m)
	if err != nil {
		// Member holds strings, a time and a bool: Marshal cannot fail
		// for a time within years 0-9999, and ours is now.
		panic(fmt.Sprintf("shard: encode record: %v", err))
	}
	return b
}
