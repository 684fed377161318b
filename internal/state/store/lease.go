package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
)

// LeaseSeconds is the TTL in whole seconds of the lease an apply with ttl
// grants: etcd leases count in seconds, so ttl is rounded up.
func LeaseSeconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}

// LeaseMarker is the value of a lease's refresh marker.
type LeaseMarker struct {
	// TTL is the lease's granted TTL in seconds.
	TTL int64 `json:"ttl_seconds"`
	// RefreshedAt was taken before the refresh was sent: RefreshedAt plus
	// TTL is no later than the lease's new expiry (clocks agreeing).
	RefreshedAt time.Time `json:"refreshed_at"`
	// By names the writer (the store's Writer).
	By string `json:"by,omitempty"`
}

// LeasesPrefix is the etcd prefix of the lease refresh markers under
// prefix (keyspace.Leases): one per refreshed lease, a LeaseMarker as
// JSON written under the lease itself so that it goes when the lease
// does. Replicas watch it to heartbeat the lease's resources as soon as
// it is refreshed.
func LeasesPrefix(prefix string) string { return keyspace.Leases.Prefix(prefix) }

// LeaseMarkerKey is the etcd key of lease id's refresh marker.
func LeaseMarkerKey(prefix string, id int64) string { return keyspace.LeaseMarker(prefix, id) }

// ParseLeaseMarker decodes a refresh marker found at etcd key k under
// prefix.
func ParseLeaseMarker(prefix, k string, value []byte) (int64, LeaseMarker, error) {
	hex, ok := keyspace.Leases.Cut(prefix, k)
	if !ok {
		return 0, LeaseMarker{}, fmt.Errorf("%w: lease marker key %q is not under %q", ErrMalformed, k, LeasesPrefix(prefix))
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	if err != nil || len(hex) != 16 {
		return 0, LeaseMarker{}, fmt.Errorf("%w: lease marker key %q: not 16 hex digits", ErrMalformed, k)
	}
	if id > math.MaxInt64 {
		return 0, LeaseMarker{}, fmt.Errorf("%w: lease marker key %q: lease id out of range", ErrMalformed, k)
	}
	var m LeaseMarker
	if err := json.Unmarshal(value, &m); err != nil {
		return 0, LeaseMarker{}, fmt.Errorf("%w: lease marker %q: %v", ErrMalformed, k, err)
	}
	if m.TTL <= 0 {
		return 0, LeaseMarker{}, fmt.Errorf("%w: lease marker %q: ttl_seconds %d is not positive", ErrMalformed, k, m.TTL)
	}
	return int64(id), m, nil
}

// ErrLeaseExpired is returned when refreshing a lease that no longer
// exists: its resources are gone.
var ErrLeaseExpired = errors.New("store: lease expired")

// RefreshLease keeps lease id alive for one more period (its granted TTL)
// and writes its refresh marker, so that replicas heartbeat its resources
// at once. It returns the lease's TTL.
func (s *Store) RefreshLease(ctx context.Context, id int64) (time.Duration, error) {
	at := time.Now().UTC()
	resp, err := s.cfg.Client.KeepAliveOnce(ctx, clientv3.LeaseID(id))
	if err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return 0, fmt.Errorf("%w: lease %016x", ErrLeaseExpired, id)
		}
		return 0, s.wrapErr(fmt.Sprintf("refresh lease %016x", id), err)
	}
	m, err := json.Marshal(LeaseMarker{TTL: resp.TTL, RefreshedAt: at, By: s.cfg.Writer})
	if err != nil {
		return 0, fmt.Errorf("store: encode lease marker: %w", err)
	}
	if _, err := s.cfg.Client.Put(ctx, LeaseMarkerKey(s.cfg.Prefix, id), string(m), clientv3.WithLease(clientv3.LeaseID(id))); err != nil {
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return 0, fmt.Errorf("%w: lease %016x", ErrLeaseExpired, id)
		}
		return 0, s.wrapErr(fmt.Sprintf("write lease %016x marker", id), err)
	}
	return time.Duration(resp.TTL) * time.Second, nil
}
