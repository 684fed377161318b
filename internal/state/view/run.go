package view

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Run loads the state and follows etcd until ctx ends; then it returns nil.
// Failures of etcd are retried forever, the view keeping its last snapshot
// meanwhile. Call it once.
func (v *View) Run(ctx context.Context) error {
	if !v.firstLoad(ctx) {
		return nil
	}
	close(v.ready)
	start := v.cur.Load().Revision
	from := start + 1
	if v.cfg.HistoryWindow > 0 {
		v.historyTo = start
		from = max(1, start-v.cfg.HistoryWindow+1)
	} else {
		v.endHistoryRead()
	}
	for ctx.Err() == nil {
		err := v.follow(ctx, from)
		if ctx.Err() != nil {
			return nil
		}
		v.metrics.watchLosts.Inc()
		var ok bool
		if from, ok = v.resume(ctx, err, from); !ok {
			return nil
		}
	}
	return nil
}

// firstLoad loads the state, retrying until it succeeds; it returns false
// if ctx ended first.
func (v *View) firstLoad(ctx context.Context) bool {
	for {
		err := v.load(ctx, false)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		v.cfg.Logger.Warn("view: load failed; retrying", "err", err)
		if !sleep(ctx, v.cfg.RetryInterval) {
			return false
		}
	}
}

// resume handles the end of a watch that followed from revision from, by
// err: it reloads or holds as err calls for and returns the revision to
// follow from next, or false if ctx ended first.
func (v *View) resume(ctx context.Context, err error, from int64) (int64, bool) {
	var compacted *compactedError
	var reset *resetError
	switch {
	case errors.As(err, &reset):
		if v.hold(ctx) {
			v.historyTo = 0
			if !v.reload(ctx, true) {
				return 0, false
			}
		}
	case errors.As(err, &compacted):
		if v.historyTo != 0 && compacted.rev <= v.cur.Load().Revision+1 {
			// Only history was lost: read what is left of it.
			return compacted.rev, true
		}
		// Events the view needs are gone: reload. What history was
		// read stays; the rest is not needed any more. After a restore
		// with --bump-revision --mark-compacted this is the way back.
		v.historyTo = 0
		v.endHistoryRead()
		v.cfg.Logger.Warn("view: watch compacted; reloading", "revision", v.cur.Load().Revision, "compacted", compacted.rev)
		if !v.reload(ctx, false) {
			return 0, false
		}
	default:
		v.cfg.Logger.Warn("view: watch ended; resuming", "revision", v.cur.Load().Revision, "err", err)
		if !sleep(ctx, v.cfg.RetryInterval) {
			return 0, false
		}
		// etcd sends a watch from a revision it has not reached
		// nothing, not even progress: after a restore that took its
		// revision back, the watch stalls. Ask where etcd is.
		if v.hold(ctx) {
			v.historyTo = 0
			if !v.reload(ctx, true) {
				return 0, false
			}
		}
	}
	if v.historyTo == 0 {
		from = v.cur.Load().Revision + 1
	}
	return from, true
}

// reload loads the whole state again, retrying until it succeeds; if etcd
// turns out to be behind the view it holds first (see hold). afterReset
// says etcd went back since the view last loaded: every key is then taken
// as changed, since a revision at or below the view's may now name other
// data. It returns false if ctx ended first.
func (v *View) reload(ctx context.Context, afterReset bool) bool {
	for {
		err := v.load(ctx, afterReset)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		var reset *resetError
		if errors.As(err, &reset) {
			if v.hold(ctx) {
				afterReset = true
			}
			continue
		}
		v.cfg.Logger.Warn("view: reload failed; retrying", "err", err)
		if !sleep(ctx, v.cfg.RetryInterval) {
			return false
		}
	}
}

// hold is called when etcd answered at a revision behind the view's. It
// asks etcd for its revision with a linearizable read: if etcd is not
// behind after all (a member lagging the others answered), it returns
// false at once. Otherwise etcd went back to older data (restored from a
// snapshot without --bump-revision): hold reports it (RevisionReset, a
// log, the metrics) and keeps the view's last snapshot, so that no client
// is sent a version lower than one it was sent, until etcd's revision
// passes the view's; then it returns true and the view must reload. It
// also returns, true, if ctx ends.
func (v *View) hold(ctx context.Context) bool {
	view := v.cur.Load().Revision
	var r *RevisionReset
	for {
		etcd, err := v.etcdRevision(ctx)
		switch {
		case ctx.Err() != nil:
			return true
		case err != nil:
			v.cfg.Logger.Debug("view: read etcd's revision", "err", err)
		case r == nil && etcd >= view:
			return false
		case etcd > view:
			v.cfg.Logger.Info("view: etcd's revision passed the view's again; reloading every resource",
				"etcd_revision", etcd, "view_revision", view, "held_for", time.Since(r.Since).Round(time.Millisecond))
			v.reset.Store(nil)
			v.metrics.resetHeld.Set(0)
			return true
		default:
			v.heard.Store(time.Now().UnixNano()) // etcd answers: not stale
			if r == nil {
				r = &RevisionReset{Etcd: etcd, View: view, Since: time.Now()}
				v.metrics.resets.Inc()
				v.metrics.resetHeld.Set(1)
				v.cfg.Logger.Warn("view: etcd's revision is behind the view's: etcd was restored from an older snapshot; "+
					"serving the view's last snapshot until etcd's revision passes it (restore with --bump-revision to avoid this)",
					"etcd_revision", etcd, "view_revision", view)
			} else {
				r = &RevisionReset{Etcd: etcd, View: view, Since: r.Since}
			}
			v.reset.Store(r)
		}
		if !sleep(ctx, v.cfg.RetryInterval) {
			return true
		}
	}
}

// etcdRevision returns etcd's current revision, read linearizably.
func (v *View) etcdRevision(ctx context.Context) (int64, error) {
	rctx, cancel := context.WithTimeout(ctx, max(v.cfg.StallTimeout, time.Second))
	defer cancel()
	resp, err := v.cfg.Client.Get(rctx, v.root, clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

// resetError is etcd answering at a revision behind the view's.
type resetError struct{ etcd, view int64 }

func (e *resetError) Error() string {
	return fmt.Sprintf("etcd answered at revision %d, behind the view's %d", e.etcd, e.view)
}

type compactedError struct{ rev int64 }

func (e *compactedError) Error() string { return fmt.Sprintf("compacted at revision %d", e.rev) }

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
