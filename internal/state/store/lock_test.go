package store_test

import (
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// TestLockScope: a scope's apply lock excludes a second taker, who times
// out naming the holder; other scopes are free; released, it is taken at
// once; and a holder that dies without releasing it (its client gone, so
// its session's lease no longer kept alive) frees it within the session's
// TTL.
func TestLockScope(t *testing.T) {
	e := storetest.Start(t, storetest.Options{})
	ctx := testbase.Context(t)
	holder := newTestStore(t, e.Client(t), "/lock/", func(c *store.Config) { c.Writer = "holder-1" })
	waiter := newTestStore(t, e.Client(t), "/lock/", nil)

	held, err := holder.LockScope(ctx, "default", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = waiter.LockScope(ctx, "default", 300*time.Millisecond)
	var lte *store.LockTimeoutError
	if !errors.As(err, &lte) || !errors.Is(err, store.ErrLockTimeout) || lte.Scope != "default" {
		t.Fatalf("second LockScope: %v, want a LockTimeoutError for scope default", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 3*time.Second {
		t.Errorf("the wait took %s, want about 300ms", took)
	}
	if want := regexp.MustCompile(`^holder-1 since \S+ \(lease [0-9a-f]{16}\)$`); !want.MatchString(lte.Holder) {
		t.Errorf("holder %q, want it to match %s", lte.Holder, want)
	}
	other, err := waiter.LockScope(ctx, "other", 300*time.Millisecond)
	if err != nil {
		t.Fatalf("another scope's lock: %v", err)
	}
	if err := other.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := waiter.LockScope(ctx, "default", 300*time.Millisecond)
	if err != nil {
		t.Fatalf("LockScope after Unlock: %v", err)
	}
	if err := again.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// A holder that dies: its client closes without releasing the lock.
	dying := e.Client(t)
	if _, err := newTestStore(t, dying, "/lock/", nil).LockScope(ctx, "default", time.Second); err != nil {
		t.Fatal(err)
	}
	dying.Close()
	start = time.Now()
	freed, err := waiter.LockScope(ctx, "default", (store.LockSessionTTL+5)*time.Second)
	if err != nil {
		t.Fatalf("LockScope after the holder died: %v", err)
	}
	t.Logf("a dead holder's lock was free after %s", time.Since(start).Round(100*time.Millisecond))
	if err := freed.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
