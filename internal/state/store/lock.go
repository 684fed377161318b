package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/resource"
)

// LockSessionTTL is the TTL in seconds of the etcd session (lease) an
// apply lock is held under: the lock of a writer that dies without
// releasing it is free again within that time.
const LockSessionTTL = 10

// ErrLockTimeout is wrapped by LockScope's error when the wait ends
// before the lock is taken.
var ErrLockTimeout = errors.New("store: timed out waiting for the scope's apply lock")

// LockHolder is the value of a lock holder's key (keyspace.LockHolder): who
// holds, or waits for, an apply lock.
type LockHolder struct {
	By    string    `json:"by,omitempty"`
	Scope string    `json:"scope"`
	Since time.Time `json:"since"`
}

// LockTimeoutError is LockScope's error when the wait ends first. It
// wraps ErrLockTimeout.
type LockTimeoutError struct {
	Scope string
	Wait  time.Duration
	// Holder describes who holds the lock ("X since T (lease L)", or
	// "lease L"), empty if unknown.
	Holder string
}

func (e *LockTimeoutError) Error() string {
	msg := fmt.Sprintf("%v: waited %s for scope %q", ErrLockTimeout, e.Wait, e.Scope)
	if e.Holder != "" {
		msg += ", held by " + e.Holder
	}
	return msg
}

func (e *LockTimeoutError) Unwrap() error { return ErrLockTimeout }

// ScopeLock is a held apply lock. Release it with Unlock.
type ScopeLock struct {
	sess *concurrency.Session
	mu   *concurrency.Mutex
}

// LockScope takes scope's apply lock, waiting up to wait (and no longer
// than ctx) for its holder to release it. Writers that take it serialize
// their plans and commits in the scope; Apply's compares do not depend on
// it. The lock lives in an etcd session of LockSessionTTL seconds, kept
// alive until Unlock. When the wait ends first, the error wraps
// ErrLockTimeout and names the holder, if it can tell.
func (s *Store) LockScope(ctx context.Context, scope string, wait time.Duration) (*ScopeLock, error) {
	if err := resource.ValidateScope(scope); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	sess, err := concurrency.NewSession(s.cfg.Client, concurrency.WithTTL(LockSessionTTL), concurrency.WithContext(ctx))
	if err != nil {
		return nil, s.wrapErr("lock scope "+scope+": start a session", err)
	}
	// Name the holder first, under the session's lease, so that a writer
	// waiting behind it can say who it is.
	since := time.Now().UTC()
	who, err := json.Marshal(LockHolder{By: s.cfg.Writer, Scope: scope, Since: since})
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("store: encode lock holder: %w", err)
	}
	if _, err := s.cfg.Client.Put(ctx, keyspace.LockHolder(s.cfg.Prefix, int64(sess.Lease())), string(who), clientv3.WithLease(sess.Lease())); err != nil {
		sess.Close()
		return nil, s.wrapErr("lock scope "+scope+": name the holder", err)
	}
	mu := concurrency.NewMutex(sess, keyspace.ApplyLock(s.cfg.Prefix, scope))
	lctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := mu.Lock(lctx); err != nil {
		defer sess.Close()
		if ctx.Err() == nil && errors.Is(lctx.Err(), context.DeadlineExceeded) {
			return nil, &LockTimeoutError{Scope: scope, Wait: wait, Holder: s.holderOf(context.WithoutCancel(ctx), scope)}
		}
		return nil, s.wrapErr("lock scope "+scope, err)
	}
	return &ScopeLock{sess: sess, mu: mu}, nil
}

// holderOf describes the holder of scope's lock: "X since T (lease L)",
// "lease L", or "" if it cannot tell.
func (s *Store) holderOf(ctx context.Context, scope string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := s.cfg.Client.Get(ctx, keyspace.ApplyLock(s.cfg.Prefix, scope)+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		return ""
	}
	lease := resp.Kvs[0].Lease
	out := fmt.Sprintf("lease %016x", lease)
	h, err := s.cfg.Client.Get(ctx, keyspace.LockHolder(s.cfg.Prefix, lease))
	if err != nil || len(h.Kvs) == 0 {
		return out
	}
	var who LockHolder
	if json.Unmarshal(h.Kvs[0].Value, &who) != nil {
		return out
	}
	by := who.By
	if strings.TrimSpace(by) == "" {
		by = "an unnamed writer"
	}
	return fmt.Sprintf("%s since %s (lease %016x)", by, who.Since.Format(time.RFC3339), lease)
}

// Unlock releases the lock and ends its session. The lock is released
// anyway when the session's lease expires.
func (l *ScopeLock) Unlock(ctx context.Context) error {
	err := l.mu.Unlock(ctx)
	// Closing revokes the lease: the holder's key goes with it.
	if cerr := l.sess.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("store: release the apply lock: %w", err)
	}
	return nil
}
