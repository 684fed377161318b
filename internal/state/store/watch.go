package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Diff lists what changed between revisions r1 and r2 (r2 zero: now), in
// key order. Unchanged resources are not listed.
func (s *Store) Diff(ctx context.Context, r1, r2 int64) ([]Change, int64, error) {
	if r1 <= 0 {
		return nil, 0, fmt.Errorf("store: diff: revision %d must be positive", r1)
	}
	if r2 != 0 && r2 < r1 {
		return nil, 0, fmt.Errorf("store: diff: revision %d is before %d", r2, r1)
	}
	after, err := s.List(ctx, ListOptions{Revision: r2})
	if err != nil {
		return nil, 0, err
	}
	before, err := s.List(ctx, ListOptions{Revision: r1})
	if err != nil {
		return nil, 0, err
	}
	old := make(map[string]*Resource, len(before.Resources))
	for _, r := range before.Resources {
		old[r.path()] = r
	}
	var out []Change
	for _, r := range after.Resources {
		o := old[r.path()]
		delete(old, r.path())
		switch {
		case o == nil:
			out = append(out, Change{Key: r.Key, Action: Create, New: r.Envelope.GetBody(), NewResource: r})
		case o.ModRevision != r.ModRevision:
			out = append(out, Change{Key: r.Key, Action: Update, Old: o, New: r.Envelope.GetBody(), NewResource: r})
		}
	}
	for _, o := range old {
		out = append(out, Change{Key: o.Key, Action: Delete, Old: o})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path() < out[j].path() })
	return out, after.Revision, nil
}

// WatchEvent is one etcd revision's changes to resources.
type WatchEvent struct {
	Revision int64
	Changes  []Change
	// Malformed are values written in this revision that did not decode.
	Malformed []Malformed
}

// Watch streams resource changes after revision from (zero: from now), one
// WatchEvent per etcd revision, until ctx ends or an error, which is sent
// to errc before both channels close. Cancel ctx to stop it.
func (s *Store) Watch(ctx context.Context, from int64) (<-chan WatchEvent, <-chan error) {
	out := make(chan WatchEvent, 16)
	errc := make(chan error, 1)
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithPrevKV()}
	if from > 0 {
		opts = append(opts, clientv3.WithRev(from+1))
	}
	wch := s.cfg.Client.Watch(clientv3.WithRequireLeader(ctx), s.root, opts...)
	go func() {
		defer close(out)
		defer close(errc)
		for wr := range wch {
			if err := wr.Err(); err != nil {
				errc <- s.wrapErr("watch", err)
				return
			}
			for _, ev := range groupByRevision(wr.Events) {
				we := WatchEvent{Revision: ev.rev}
				for _, e := range ev.events {
					c, err := s.changeOf(e)
					if err != nil {
						we.Malformed = append(we.Malformed, Malformed{EtcdKey: string(e.Kv.Key), ModRevision: e.Kv.ModRevision, Err: err})
						continue
					}
					we.Changes = append(we.Changes, c)
				}
				select {
				case out <- we:
				case <-ctx.Done():
					return
				}
			}
		}
		if ctx.Err() == nil {
			errc <- errors.New("store: watch: closed by etcd")
		}
	}()
	return out, errc
}

func (s *Store) changeOf(e *clientv3.Event) (Change, error) {
	var old *Resource
	if e.PrevKv != nil {
		old, _ = s.decode(e.PrevKv)
	}
	if e.Type == clientv3.EventTypeDelete {
		k, err := ParsePath(strings.TrimPrefix(string(e.Kv.Key), s.root))
		if err != nil {
			return Change{}, err
		}
		return Change{Key: k, Action: Delete, Old: old}, nil
	}
	r, err := s.decode(e.Kv)
	if err != nil {
		return Change{}, err
	}
	a := Update
	if e.IsCreate() {
		a = Create
	}
	return Change{Key: r.Key, Action: a, Old: old, New: r.Envelope.GetBody(), NewResource: r}, nil
}

type revEvents struct {
	rev    int64
	events []*clientv3.Event
}

// groupByRevision splits a watch response's events into whole revisions.
// etcd sends all events of one revision in one response (without
// WithFragment), possibly several revisions per response.
func groupByRevision(evs []*clientv3.Event) []revEvents {
	var out []revEvents
	for _, e := range evs {
		rev := e.Kv.ModRevision
		if n := len(out); n > 0 && out[n-1].rev == rev {
			out[n-1].events = append(out[n-1].events, e)
			continue
		}
		out = append(out, revEvents{rev: rev, events: []*clientv3.Event{e}})
	}
	return out
}
