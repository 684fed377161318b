// Package lease tracks when the etcd leases of TTL'd resources expire, so
// that xDS streams can put the time left on the wire (promise 8 of
// docs/concepts/design.md) and heartbeat a resource when its lease is extended. It
// owns the replica's watch of the lease refresh markers and its lease
// TimeToLive queries; it does not serve xDS and never writes to etcd.
//
// The expiry it gives is a lower bound of etcd's: each source of it
// (written_at plus the TTL, a refresh marker's refreshed_at plus the TTL,
// the start of a TimeToLive query plus the whole seconds it answers) was
// taken before the lease's own clock started. A client told this TTL
// therefore drops the resource no later than etcd deletes it.
package lease

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
)

// Config configures a Tracker.
type Config struct {
	// Client is the etcd client. Required.
	Client *clientv3.Client
	// Prefix is the etcd key prefix (keyspace.DefaultPrefix when empty).
	Prefix string
	// QueryTimeout bounds one TimeToLive query (default 2s).
	QueryTimeout time.Duration
	// Logger receives the tracker's logs (nil: discard).
	Logger *slog.Logger
	// Registerer registers the tracker's metrics (nil: none).
	Registerer prometheus.Registerer
}

// DefaultConfig returns a Config with the defaults; Client must be set.
func DefaultConfig() Config {
	return Config{
		Prefix:       keyspace.DefaultPrefix,
		QueryTimeout: 2 * time.Second,
	}
}

// Tracker knows the expiry of the leases streams asked about. Its methods
// may be called concurrently; Expiry may block for one etcd query.
type Tracker struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	mu     sync.Mutex // guards leases, head
	leases map[int64]*leaseState
	head   *Notice

	recheck chan int64 // leases whose check timer fired; buffered
	watches uint64     // owned by Run: watches started so far
}

// leaseState is what the tracker knows of one lease. Its fields are
// guarded by Tracker.mu, except that fetched is closed once.
type leaseState struct {
	id  int64
	ttl time.Duration // granted TTL, 0 until known
	// lower is the latest lower bound of the expiry; zero until known.
	lower time.Time
	// upper bounds the expiry from etcd's last answer (zero: unknown). It
	// keeps a writer's clock that runs ahead from stretching lower.
	upper time.Time
	// gone: etcd said the lease no longer exists.
	gone bool
	// fetched is closed when the first TimeToLive query ended.
	fetched chan struct{}
	// nextCheck is when the check before expiry runs; checks counts
	// the checks since the last extension.
	nextCheck time.Time
	checks    int
	timer     *time.Timer
}

// Notice is one announcement that leases were extended. Done is closed
// when the notice is filled; then Leases and Next may be read. Holders of
// TTL'd resources wait on the current notice and follow Next.
type Notice struct {
	done   chan struct{}
	leases []int64
	next   *Notice
}

// Done is closed once the notice is filled.
func (n *Notice) Done() <-chan struct{} { return n.done }

// Leases lists the extended leases; valid once Done is closed.
func (n *Notice) Leases() []int64 { return n.leases }

// Next is the notice after this one; valid once Done is closed.
func (n *Notice) Next() *Notice { return n.next }

// Extended returns the leases announced by n and the filled notices after
// it, and the first notice not yet filled, to wait on next. It does not
// block.
func Extended(n *Notice) (map[int64]bool, *Notice) {
	ext := map[int64]bool{}
	for {
		select {
		case <-n.done:
			for _, id := range n.leases {
				ext[id] = true
			}
			n = n.next
		default:
			return ext, n
		}
	}
}

// TTLStatus is one resource a client holds with a TTL, for
// /debug/streams.
type TTLStatus struct {
	Type    string    `json:"type"`
	Name    string    `json:"name"`
	Lease   string    `json:"lease"`
	Expires time.Time `json:"client_expires"`
	// NextHeartbeat is when the lease is next checked: a heartbeat goes
	// out then if it was extended (and at once after a refresh).
	NextHeartbeat time.Time `json:"next_heartbeat,omitzero"`
	Pending       bool      `json:"heartbeat_pending,omitempty"`
}

// StatusList flattens a stream's TTL'd resources per type, in type-name
// order, filling in NextHeartbeat from next (nil: left zero).
func StatusList(byType map[string][]TTLStatus, next func(id int64) time.Time) []TTLStatus {
	types := make([]string, 0, len(byType))
	for t := range byType {
		types = append(types, t)
	}
	sort.Strings(types)
	var out []TTLStatus
	for _, t := range types {
		for _, x := range byType[t] {
			if id, err := strconv.ParseUint(x.Lease, 16, 64); err == nil && next != nil {
				x.NextHeartbeat = next(int64(id)).UTC()
			}
			out = append(out, x)
		}
	}
	return out
}

// New returns a Tracker; Run must run for refresh markers and checks
// before expiry to be seen.
func New(cfg Config) (*Tracker, error) {
	if cfg.Client == nil {
		return nil, errors.New("lease: Config.Client is required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = keyspace.DefaultPrefix
	}
	if cfg.QueryTimeout <= 0 {
		cfg.QueryTimeout = 2 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Tracker{
		cfg: cfg, log: log, metrics: newMetrics(cfg.Registerer),
		leases:  map[int64]*leaseState{},
		head:    &Notice{done: make(chan struct{})},
		recheck: make(chan int64, 1024),
	}, nil
}

// Notice returns the current, unfilled notice.
func (t *Tracker) Notice() *Notice {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.head
}

// notify announces that leases were extended. Call without t.mu held.
func (t *Tracker) notify(ids ...int64) {
	if len(ids) == 0 {
		return
	}
	t.mu.Lock()
	cur := t.head
	cur.leases = ids
	cur.next = &Notice{done: make(chan struct{})}
	t.head = cur.next
	t.mu.Unlock()
	close(cur.done)
	t.metrics.extensions.Add(float64(len(ids)))
}

// Expiry returns the expiry of e's lease, as a lower bound of etcd's; the
// zero time if e has no lease. The first call for a lease queries etcd
// (callers for one lease share the query); if that fails, the write's own
// estimate is used. It blocks at most for the query.
func (t *Tracker) Expiry(ctx context.Context, e *view.Entry) time.Time {
	if e.Lease == 0 {
		return time.Time{}
	}
	t.mu.Lock()
	ls := t.leases[e.Lease]
	first := ls == nil
	if first {
		ls = &leaseState{id: e.Lease, fetched: make(chan struct{})}
		t.leases[e.Lease] = ls
		t.metrics.tracked.Set(float64(len(t.leases)))
	}
	if !e.WrittenAt.IsZero() && e.TTL > 0 {
		granted := time.Duration(store.LeaseSeconds(e.TTL)) * time.Second
		if ls.ttl == 0 {
			ls.ttl = granted
		}
		// The write's own estimate holds only for the lease it granted:
		// a later refresh can only move the expiry later.
		if w := e.WrittenAt.Add(granted); w.After(ls.lower) && !ls.gone {
			ls.raise(w)
		}
	}
	t.mu.Unlock()
	if first {
		t.query(ctx, ls)
		close(ls.fetched)
	} else {
		select {
		case <-ls.fetched:
		case <-ctx.Done():
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return ls.lower
}

// raise moves the lower bound to l, within the upper bound. Called with
// Tracker.mu held.
func (ls *leaseState) raise(l time.Time) {
	if !ls.upper.IsZero() && l.After(ls.upper) {
		return
	}
	ls.lower = l
}

// NextCheck returns when the tracker next asks etcd whether lease id was
// extended (the time of its next heartbeat, if it was); zero if unknown.
func (t *Tracker) NextCheck(id int64) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ls := t.leases[id]; ls != nil {
		return ls.nextCheck
	}
	return time.Time{}
}

// query asks etcd for the lease's time to live and folds the answer in. It
// reports whether the expiry moved later by more than the noise of etcd's
// whole seconds.
func (t *Tracker) query(ctx context.Context, ls *leaseState) bool {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.QueryTimeout)
	defer cancel()
	start := time.Now()
	resp, err := t.cfg.Client.TimeToLive(ctx, clientv3.LeaseID(ls.id))
	t.metrics.queries.Inc()
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.metrics.queryErrors.Inc()
		t.log.Warn("lease: time to live query failed", "lease", ls.id, "err", err)
		if ls.lower.IsZero() {
			// Nothing better: the client is told a short TTL, and the
			// lease is checked again soon.
			ls.lower = start.Add(time.Second)
		}
		t.schedule(ls, start.Add(time.Second))
		return false
	}
	if resp.TTL < 0 {
		// Expired or revoked: etcd deletes (or deleted) its keys. (0 is a
		// live lease with under a second left: etcd rounds down.)
		ls.gone = true
		ls.lower = start
		t.stop(ls)
		return false
	}
	ls.ttl = time.Duration(resp.GrantedTTL) * time.Second
	// etcd answers whole seconds, rounded down: the expiry is between
	// start+TTL and now+TTL+1s.
	l := start.Add(time.Duration(resp.TTL) * time.Second)
	ls.upper = time.Now().Add(time.Duration(resp.TTL+1) * time.Second)
	if ls.lower.After(ls.upper) {
		ls.lower = l // an estimate from a clock running ahead
	}
	extended := false
	if l.After(ls.lower) {
		// An answer that moves the bound by less than one second may be
		// rounding.
		extended = !ls.lower.IsZero() && l.Sub(ls.lower) >= time.Second
		ls.lower = l
	}
	if extended {
		ls.checks = 0
	}
	t.scheduleBeforeExpiry(ls)
	return extended
}

// margin is how long before a lease's expiry the tracker checks whether
// it was extended: a quarter of the TTL, between 300ms and 5s. It leaves
// a heartbeat time to reach clients before their TTL runs out.
func margin(ttl time.Duration) time.Duration {
	return min(max(ttl/4, 300*time.Millisecond), 5*time.Second)
}

// scheduleBeforeExpiry sets the lease's next check: a margin before its
// expiry, then once more at half the margin; after that the lease is left
// to expire. Called with t.mu held.
func (t *Tracker) scheduleBeforeExpiry(ls *leaseState) {
	m := margin(ls.ttl)
	switch ls.checks {
	case 0:
		t.schedule(ls, ls.lower.Add(-m))
	case 1:
		t.schedule(ls, ls.lower.Add(-m/2))
	default:
		t.stop(ls)
	}
}

// schedule arms the lease's check timer for at. Called with t.mu held.
func (t *Tracker) schedule(ls *leaseState, at time.Time) {
	t.stop(ls)
	ls.nextCheck = at
	id := ls.id
	ls.timer = time.AfterFunc(time.Until(at), func() {
		select {
		case t.recheck <- id:
		default:
			// Full: Run is far behind; the lease is checked at its next
			// refresh marker, or expires as etcd says.
			t.metrics.checksDropped.Inc()
		}
	})
}

func (t *Tracker) stop(ls *leaseState) {
	if ls.timer != nil {
		ls.timer.Stop()
		ls.timer = nil
	}
	ls.nextCheck = time.Time{}
}

// Run watches the refresh markers and runs the checks before expiry until
// ctx ends. It returns nil when ctx ends.
func (t *Tracker) Run(ctx context.Context) error {
	defer t.stopAll()
	prefix := store.LeasesPrefix(t.cfg.Prefix)
	for ctx.Err() == nil {
		rev, err := t.load(ctx, prefix)
		if err != nil {
			t.log.Warn("lease: reading refresh markers", "err", err)
			if !sleep(ctx, time.Second) {
				return nil
			}
			continue
		}
		t.watch(ctx, prefix, rev)
	}
	return nil
}

// load reads the current markers and returns the revision they were read
// at.
func (t *Tracker) load(ctx context.Context, prefix string) (int64, error) {
	resp, err := t.cfg.Client.Get(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, err
	}
	for _, kv := range resp.Kvs {
		t.marker(kv)
	}
	return resp.Header.Revision, nil
}

// watch follows the markers from rev+1 and serves the check timers until
// the watch ends or ctx does.
func (t *Tracker) watch(ctx context.Context, prefix string, rev int64) {
	// A gRPC stream of its own for each watch (the etcd client shares one
	// among watches of the same metadata): a watch restarted after its
	// stream wedged (etcd lost its quorum) does not land on it again.
	t.watches++
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(
		metadata.AppendToOutgoingContext(ctx, "legation-lease-watch", strconv.FormatUint(t.watches, 10))))
	defer cancel()
	wch := t.cfg.Client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-t.recheck:
			t.check(ctx, id)
		case resp, ok := <-wch:
			if !ok || resp.Err() != nil {
				if ok {
					t.log.Info("lease: marker watch ended; reloading", "err", resp.Err())
				}
				return
			}
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.PUT {
					t.marker(ev.Kv)
				}
			}
		}
	}
}

// marker folds in a refresh marker and announces the extension.
func (t *Tracker) marker(kv *mvccpb.KeyValue) {
	id, m, err := store.ParseLeaseMarker(t.cfg.Prefix, string(kv.Key), kv.Value)
	if err != nil {
		t.metrics.badMarkers.Inc()
		t.log.Warn("lease: skipping a malformed refresh marker", "key", string(kv.Key), "err", err)
		return
	}
	t.mu.Lock()
	ls := t.leases[id]
	if ls == nil {
		// No stream asked about this lease yet: the first Expiry will
		// query etcd, which knows the refresh.
		t.mu.Unlock()
		return
	}
	ls.ttl = time.Duration(m.TTL) * time.Second
	extended := false
	if l := m.RefreshedAt.Add(ls.ttl); l.After(ls.lower) && !ls.gone {
		ls.upper = time.Time{} // the refresh moved it: unknown until asked
		ls.raise(l)
		extended = true
		ls.checks = 0
		t.scheduleBeforeExpiry(ls)
	}
	t.mu.Unlock()
	if extended {
		t.notify(id)
	}
}

// check asks etcd whether lease id was extended, before it expires.
func (t *Tracker) check(ctx context.Context, id int64) {
	t.mu.Lock()
	ls := t.leases[id]
	if ls == nil || ls.gone {
		t.mu.Unlock()
		return
	}
	ls.checks++
	t.mu.Unlock()
	t.metrics.checks.Inc()
	if t.query(ctx, ls) {
		t.notify(id)
	}
	t.forgetExpired()
}

// forgetExpired drops leases that expired a while ago: their resources
// are gone from etcd and from every stream.
func (t *Tracker) forgetExpired() {
	t.mu.Lock()
	defer t.mu.Unlock()
	cutoff := time.Now().Add(-time.Minute)
	for id, ls := range t.leases {
		if ls.timer == nil && ls.lower.Before(cutoff) {
			select {
			case <-ls.fetched:
				delete(t.leases, id)
			default: // a query is under way
			}
		}
	}
	t.metrics.tracked.Set(float64(len(t.leases)))
}

func (t *Tracker) stopAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ls := range t.leases {
		t.stop(ls)
	}
}

// Tracked lists the leases the tracker knows, for debugging.
func (t *Tracker) Tracked() []Info {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Info, 0, len(t.leases))
	for _, ls := range t.leases {
		out = append(out, Info{ID: ls.id, TTL: ls.ttl, Expires: ls.lower, NextCheck: ls.nextCheck, Gone: ls.gone})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Info describes one tracked lease.
type Info struct {
	ID        int64         `json:"id"`
	TTL       time.Duration `json:"ttl"`
	Expires   time.Time     `json:"expires"`
	NextCheck time.Time     `json:"next_check,omitzero"`
	Gone      bool          `json:"gone,omitempty"`
}

func sleep(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}
