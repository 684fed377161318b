package view

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// follow runs one watch from revision from until it fails or ctx ends.
func (v *View) follow(ctx context.Context, from int64) error {
	v.streams++
	id := strconv.FormatUint(v.streams, 10)
	v.stream.Store(&id)
	wctx, cancel := context.WithCancel(streamCtx(ctx, id))
	defer cancel()
	wch := v.cfg.Client.Watch(wctx, v.root, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	if v.historyTo != 0 {
		v.historyStart = from
	}
	// While history is read, ask etcd where it is until it says: that
	// marks the end of the history even if no resource changes after
	// start-up. etcd drops a progress request while the watch is still
	// catching up, hence the repeats. Otherwise the timer fires only when
	// the watch has been quiet for ProgressInterval, then every
	// progressRetry until etcd answers or StallTimeout passes; each
	// response sets it a ProgressInterval ahead again. An idle view wakes
	// twice per ProgressInterval (the timer, the answer), not ten times a
	// second.
	check := time.NewTimer(progressRetry)
	defer check.Stop()
	started := time.Now()
	for {
		select {
		case <-check.C:
			if err := v.checkQuiet(ctx, check, started); err != nil {
				return err
			}
		case wr, ok := <-wch:
			if !ok {
				return errors.New("watch channel closed")
			}
			if err := v.receive(wr, check); err != nil {
				return err
			}
		}
	}
}

// checkQuiet is follow's timer firing, on a watch started at started: it
// ends a watch quiet for longer than StallTimeout, asks etcd for progress
// while history is read or the watch has been quiet for ProgressInterval,
// and sets the timer again.
func (v *View) checkQuiet(ctx context.Context, check *time.Timer, started time.Time) error {
	v.checks.Add(1)
	last := v.LastHeard()
	if last.Before(started) {
		last = started
	}
	quiet := v.cfg.Clock.Since(last)
	switch {
	case quiet > v.cfg.StallTimeout:
		v.metrics.stalls.Inc()
		return fmt.Errorf("watch stalled: nothing from etcd for %s", quiet.Round(time.Millisecond))
	case v.historyTo != 0 || quiet > v.cfg.ProgressInterval:
		v.requestProgress(ctx)
		check.Reset(progressRetry)
	default:
		// Just past ProgressInterval since etcd was last heard;
		// a response meanwhile moves that, and this wake then
		// only waits again.
		check.Reset(v.cfg.ProgressInterval - quiet + time.Millisecond)
	}
	return nil
}

// receive takes one watch response: it ends the watch on a compaction, an
// error, or a revision behind the view's, and otherwise applies it and
// sets follow's timer a ProgressInterval ahead.
func (v *View) receive(wr clientv3.WatchResponse, check *time.Timer) error {
	if wr.CompactRevision != 0 {
		return &compactedError{rev: wr.CompactRevision}
	}
	if err := wr.Err(); err != nil {
		return err
	}
	if cur := v.cur.Load().Revision; wr.Header.Revision != 0 && wr.Header.Revision < cur {
		return &resetError{etcd: wr.Header.Revision, view: cur}
	}
	v.cfg.Logger.Debug("view: watch response", "header", wr.Header.Revision, "events", len(wr.Events), "progress", wr.IsProgressNotify())
	v.heard.Store(time.Now().UnixNano())
	v.handle(wr)
	if v.historyTo == 0 {
		// Heard: the next request for progress is due a
		// ProgressInterval from now, and the wake the timer
		// would make to see this answer is saved.
		check.Reset(v.cfg.ProgressInterval + time.Millisecond)
	}
	return nil
}

// handle applies one watch response: whole revisions, published as one
// snapshot at the last of them.
func (v *View) handle(wr clientv3.WatchResponse) {
	prev := v.cur.Load()
	b := newBuilder(prev)
	for _, e := range wr.Events {
		rev := e.Kv.ModRevision
		if rev <= prev.Revision {
			b.history(v, e)
			continue
		}
		v.endHistory(b)
		b.apply(v, e)
		b.rev = rev
	}
	if wr.IsProgressNotify() && wr.Header.Revision >= prev.Revision {
		v.endHistory(b)
		if wr.Header.Revision > b.rev {
			b.rev = wr.Header.Revision
		}
	}
	if b.rev == prev.Revision && !b.touched {
		return
	}
	v.metrics.events.Add(float64(len(wr.Events)))
	v.publish(b.build(v))
	if v.historyTo == 0 {
		v.endHistoryRead()
	}
}

// endHistory marks the history read: from now on LastChange is exact from
// the revision the history was read from.
func (v *View) endHistory(b *builder) {
	if v.historyTo == 0 {
		return
	}
	v.historyTo = 0
	b.historyFrom = v.historyStart
	b.touched = true
}

func (v *View) publish(s *Snapshot) {
	prev := v.cur.Load()
	v.cur.Store(s)
	if prev != nil {
		prev.next = s
		close(prev.done)
	}
	v.interests.notify(s, time.Now())
	v.metrics.snapshots.Inc()
	v.metrics.revision.Set(float64(s.Revision))
	v.metrics.resources.Set(float64(s.Len()))
	v.metrics.skipped.Set(float64(len(v.malformed)))
	v.metrics.unserved.Set(float64(len(v.unserved)))
}
