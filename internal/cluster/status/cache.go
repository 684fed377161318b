package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/store"
)

// cache holds the status records of the whole cluster, decoded, kept
// current by one etcd watch of the status directory, so that CSDS answers
// a call from memory: a call costs etcd nothing, however many nodes it
// matches or however often it comes. It loads on first use (want), so a
// replica whose CSDS is never asked holds no records. Its methods may be
// called concurrently; run is called once.
type cache struct {
	client *clientv3.Client
	prefix string
	log    *slog.Logger
	m      *csdsMetrics
	// retry is the pause between failed loads; quiet and stall are
	// watchQuiet and watchStall (tests shorten them).
	retry, quiet, stall time.Duration

	wantOnce sync.Once
	want     chan struct{} // closed by the first use
	ready    chan struct{} // closed once loaded

	mu   sync.RWMutex
	recs map[string]NodeStatus // by node id; guarded by mu, replaced whole by a load
}

func newCache(client *clientv3.Client, prefix string, log *slog.Logger, m *csdsMetrics) *cache {
	return &cache{
		client: client, prefix: prefix, log: log, m: m,
		retry: time.Second, quiet: watchQuiet, stall: watchStall,
		want: make(chan struct{}), ready: make(chan struct{}),
		recs: map[string]NodeStatus{},
	}
}

// wait asks for the records and waits, up to timeout, until they are
// loaded.
func (c *cache) wait(ctx context.Context, timeout time.Duration) error {
	c.wantOnce.Do(func() { close(c.want) })
	select {
	case <-c.ready:
		return nil
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.ready:
		return nil
	case <-t.C:
		return errors.New("the status records are not loaded from etcd yet")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// get returns the records of ids that exist, sorted by node id, once
// each.
func (c *cache) get(ids []string) []NodeStatus {
	out := make([]NodeStatus, 0, min(len(ids), 64))
	c.mu.RLock()
	for _, id := range ids {
		if ns, ok := c.recs[id]; ok {
			out = append(out, ns)
		}
	}
	c.mu.RUnlock()
	sortRecords(&out)
	return out
}

// filter returns the records whose node id match accepts, sorted by node
// id.
func (c *cache) filter(match func(id string) bool) []NodeStatus {
	var out []NodeStatus
	c.mu.RLock()
	for id, ns := range c.recs {
		if match(id) {
			out = append(out, ns)
		}
	}
	c.mu.RUnlock()
	sortRecords(&out)
	return out
}

func sortRecords(recs *[]NodeStatus) {
	slices.SortFunc(*recs, func(a, b NodeStatus) int { return strings.Compare(a.NodeID, b.NodeID) })
	*recs = slices.CompactFunc(*recs, func(a, b NodeStatus) bool { return a.NodeID == b.NodeID })
}

// run waits for the first use, then loads the records and follows the
// watch until ctx ends; it reads everything again when the watch fails
// or was compacted, retrying failures of etcd forever. It returns nil
// once ctx ends.
func (c *cache) run(ctx context.Context) error {
	select {
	case <-c.want:
	case <-ctx.Done():
		return nil
	}
	loaded := false
	for ctx.Err() == nil {
		rev, err := c.load(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			c.log.Warn("csds: reading the status records failed; retrying", "err", err)
			if !sleepCtx(ctx, c.retry) {
				return nil
			}
			continue
		}
		if !loaded {
			close(c.ready)
			loaded = true
		}
		err = c.follow(ctx, rev)
		if ctx.Err() != nil {
			return nil
		}
		c.log.Warn("csds: watch of the status records ended; reloading", "revision", rev, "err", err)
	}
	return nil
}

// load reads every record at one revision and replaces the cache's.
func (c *cache) load(ctx context.Context) (int64, error) {
	c.m.reloads.Inc()
	dir := Dir(c.prefix)
	recs := map[string]NodeStatus{}
	rev, err := store.ReadPages(clientv3.WithRequireLeader(ctx), c.client, dir, readPage, func(kv *mvccpb.KeyValue) {
		id := strings.TrimPrefix(string(kv.Key), dir)
		if ns, err := Decode(id, kv.Value); err == nil {
			recs[id] = ns
		} else {
			c.log.Debug("csds: skipping a malformed status record", "key", string(kv.Key), "err", err)
		}
	})
	if err != nil {
		return 0, fmt.Errorf("status: read %s: %w", dir, err)
	}
	c.mu.Lock()
	c.recs = recs
	c.mu.Unlock()
	c.m.records.Set(float64(len(recs)))
	return rev, nil
}

// The watch's liveness: after watchQuiet without word from etcd the
// cache asks for a progress notification, and after watchStall it gives
// the watch up and reads everything again (an etcd member that froze
// keeps a watch open and silent, and the copy would age unseen).
const (
	watchQuiet = 5 * time.Second
	watchStall = 15 * time.Second
)

// follow applies the watch's events from rev+1 until it fails, stalls or
// ctx ends.
func (c *cache) follow(ctx context.Context, rev int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	dir := Dir(c.prefix)
	// Watch blocks until its stream is set up, which a frozen member
	// never answers: past the stall bound the attempt is given up.
	giveUp := time.AfterFunc(c.stall, cancel)
	wch := c.client.Watch(wctx, dir, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	if !giveUp.Stop() {
		return errors.New("watch not set up: etcd did not answer")
	}
	check := time.NewTicker(c.quiet)
	defer check.Stop()
	heard := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-check.C:
			switch quiet := time.Since(heard); {
			case quiet > c.stall:
				return fmt.Errorf("watch stalled: nothing from etcd for %s", quiet.Round(time.Second))
			case quiet >= c.quiet:
				// Bounded: the watch's stream may be stuck sending to a
				// frozen member. An error only delays the answer; the
				// stall check decides.
				pctx, cancelProgress := context.WithTimeout(wctx, c.quiet)
				_ = c.client.RequestProgress(pctx)
				cancelProgress()
			}
		case wr, ok := <-wch:
			switch {
			case !ok:
				return errors.New("watch channel closed")
			case wr.CompactRevision != 0:
				return fmt.Errorf("watch compacted at revision %d", wr.CompactRevision)
			case wr.Err() != nil:
				return wr.Err()
			}
			heard = time.Now()
			c.apply(dir, wr.Events)
		}
	}
}

// apply folds the events of one watch response into the records.
func (c *cache) apply(dir string, evs []*clientv3.Event) {
	if len(evs) == 0 {
		return // a progress notification
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ev := range evs {
		id := strings.TrimPrefix(string(ev.Kv.Key), dir)
		if ev.Type == mvccpb.DELETE {
			delete(c.recs, id)
			continue
		}
		ns, err := Decode(id, ev.Kv.Value)
		if err != nil {
			delete(c.recs, id)
			c.log.Debug("csds: skipping a malformed status record", "key", string(ev.Kv.Key), "err", err)
			continue
		}
		c.recs[id] = ns
	}
	c.m.records.Set(float64(len(c.recs)))
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
