package status

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/resource"
)

// Writer writes the status records of the nodes one replica serves. Create
// it with NewWriter, then call Run once.
type Writer struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	syncs   chan chan error // Sync's requests, served by Run
	started atomic.Bool
	done    chan struct{} // closed when Run returns

	// Owned by Run's goroutine.
	lease   clientv3.LeaseID // 0: none yet, or lost
	ka      <-chan *clientv3.LeaseKeepAliveResponse
	kaStop  context.CancelFunc
	written map[string]held // node id -> what it has in etcd under lease
	failing bool            // the last round failed: log again only on recovery
	budget  budget          // transactions a round may commit
	// deferred holds the nodes the budget left for a later round: node id
	// -> its stamp then. A node that changes again before it is written
	// counts one coalesced update.
	deferred map[string]uint64
	// stamps (node id -> the sum of its streams' mixed stamps) and dirty
	// are rebuilt by each round; kept to reuse their memory.
	stamps map[string]uint64
	dirty  []string
	// quiet: the last round read Source at generation quietGen and left
	// nothing behind (Config.Generation).
	quiet    bool
	quietGen uint64
	cursor   string // the last node id written: the next round starts after it
	// read is what the last full read of the status directory found: the
	// revision of its first page and how many keys it read (rev 0: none
	// yet, or forgotten). A check first asks whether the directory is
	// still that, and reads it again only if not.
	read struct {
		rev  int64
		keys int64
	}
	fullReads atomic.Uint64 // full reads of the directory (tests)
	// rejected is what the nodes held reject now, counted for the
	// metrics (rejected.go).
	rejected rejected
}

// NewWriter returns a writer for cfg, its zero fields set to the defaults.
// It does no I/O; it registers the metrics on cfg.Registerer.
func NewWriter(cfg Config) (*Writer, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := newMetrics()
	if err := m.register(cfg.Registerer); err != nil {
		return nil, err
	}
	m.budget.Set(cfg.MaxTxnsPerSecond)
	for _, t := range resource.All() {
		m.rejectedNodes.WithLabelValues(t.Name).Set(0)
	}
	return &Writer{
		cfg:      cfg,
		log:      log.With("component", "status", "replica", cfg.Replica),
		metrics:  m,
		syncs:    make(chan chan error),
		done:     make(chan struct{}),
		written:  map[string]held{},
		budget:   newBudget(cfg),
		deferred: map[string]uint64{},
		stamps:   map[string]uint64{},
		rejected: rejected{nodes: map[string]nodeRejections{}},
	}, nil
}

// Run writes the records until ctx ends. It grants a lease and keeps it
// alive; every Interval it reads Source and writes the records that
// changed since it last wrote them, in transactions of at most MaxOps
// operations, all under the lease; and it deletes the records of the
// nodes that left, each only if it is still under this writer's lease (a
// node that moved to another replica keeps the record the other wrote).
// If the lease is lost (etcd out of reach for longer than LeaseTTL), it
// grants another and writes every record again. Failed writes are logged,
// counted and retried on the next round; they do not end Run.
//
// When ctx ends, Run revokes the lease, which deletes every record it
// wrote, and returns the error of the revocation, if any (the records then
// expire with the lease). A process that dies without Run returning leaves
// the records until the lease expires. Run may be called once.
func (w *Writer) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("status: Run called twice")
	}
	defer close(w.done)
	tick := time.NewTicker(w.cfg.Interval)
	defer tick.Stop()
	resync := time.NewTicker(w.cfg.ResyncInterval)
	defer resync.Stop()

	w.round(ctx) //nolint:errcheck // logged and counted; retried on the next tick
	for {
		select {
		case <-ctx.Done():
			return w.stop()
		case _, ok := <-w.ka:
			if !ok && ctx.Err() == nil {
				w.lost("its keep-alive ended")
			}
		case <-tick.C:
			w.round(ctx) //nolint:errcheck // as above
		case <-resync.C:
			w.check(ctx) //nolint:errcheck // as above
		case reply := <-w.syncs:
			err := w.round(ctx)
			if err == nil {
				err = w.check(ctx)
			}
			reply <- err
		}
	}
}

// Sync writes now what changed, then checks that the records the writer
// holds are still there and writes again those that are not, as Run does
// every Interval and ResyncInterval.
// It returns the first error of that work, or ctx's if ctx ends first, or
// an error if Run has returned. It blocks until Run serves it.
func (w *Writer) Sync(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case w.syncs <- reply:
	case <-w.done:
		return errors.New("status: writer stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// held is a record the writer has in etcd.
type held struct {
	hash  uint64 // xxhash of the value
	rev   int64  // mod revision of the key
	stamp uint64 // the node's stamp when the value was built
}

// pending is a record to write.
type pending struct {
	id, key string
	value   []byte
	hash    uint64
	stamp   uint64
}

// mix spreads a stream's id and change count over 64 bits, so that the sum
// over a node's streams moves whenever one of them appears, leaves or
// changes.
func mix(stream, changes uint64) uint64 {
	x := stream*0x9e3779b97f4a7c15 ^ changes
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// round writes what changed since the last round.
func (w *Writer) round(ctx context.Context) error {
	if w.lease == 0 {
		if err := w.grant(ctx); err != nil {
			return w.fail(ctx, err)
		}
	}
	defer w.publishRejected(ctx)
	var gen uint64
	if w.cfg.Generation != nil {
		gen = w.cfg.Generation()
		if w.quiet && gen == w.quietGen && len(w.deferred) == 0 {
			return nil // nothing changed since a round that wrote it all
		}
		w.quiet = false
	}
	dirty, gone := w.changes()
	w.forgetRejected()

	// Deletes first: a node that left never changes again, so they are
	// done with; puts then have the rest of the budget.
	now := time.Now()
	avail := w.budget.available(now)
	budget := avail
	gone, err := w.delete(ctx, gone, &budget)
	if err == nil {
		dirty, err = w.write(ctx, dirty, &budget)
	}
	w.budget.spend(now, avail-budget)
	if err == nil {
		w.postpone(dirty, len(gone))
	}
	w.metrics.held.Set(float64(len(w.written)))
	if err != nil {
		return w.fail(ctx, err)
	}
	if w.failing {
		w.failing = false
		w.log.Info("status: writing node status records again")
	}
	if w.cfg.Generation != nil && len(w.deferred) == 0 {
		w.quiet, w.quietGen = true, gen
	}
	return nil
}

// changes reads Source's stamps and returns the nodes whose records are
// to be written, starting after the last node written, and those whose
// records are to be deleted, in node-id order. It counts the deferred
// updates superseded before they were written.
func (w *Writer) changes() (dirty, gone []string) {
	clear(w.stamps)
	w.cfg.Source.Stamps(func(node string, stream, changes uint64) {
		w.stamps[node] += mix(stream, changes)
	})
	dirty = w.dirty[:0]
	for id, stamp := range w.stamps {
		if len(id) > maxNodeIDLen || !utf8.ValidString(id) {
			// Node ids are proto strings, so UTF-8; a key that long
			// would fail its whole batch.
			w.log.Debug("status: no record for a node id too long or not UTF-8", "len", len(id), "limit", maxNodeIDLen)
			delete(w.stamps, id)
			continue
		}
		if h, ok := w.written[id]; !ok || h.stamp != stamp {
			dirty = append(dirty, id)
		}
	}
	for id, stamp := range w.deferred {
		if now, ok := w.stamps[id]; !ok || now != stamp {
			// Changed again, or left, before its record was written: the
			// value the budget held back is never written.
			w.metrics.coalesced.Inc()
		}
	}
	for id := range w.written {
		if _, ok := w.stamps[id]; !ok {
			gone = append(gone, id)
		}
	}
	slices.Sort(dirty)
	slices.Sort(gone)
	// Start after the last node written, so that a budget smaller than
	// what changes still reaches every node in turn.
	at, _ := slices.BinarySearch(dirty, w.cursor)
	if at < len(dirty) && dirty[at] == w.cursor {
		at++
	}
	dirty = append(dirty[at:], dirty[:at]...)
	w.dirty = dirty
	return dirty, gone
}

// postpone records what the budget left for later: the nodes whose records
// were not written and the count of deletes not done.
func (w *Writer) postpone(dirty []string, gone int) {
	clear(w.deferred)
	for _, id := range dirty {
		w.deferred[id] = w.stamps[id]
	}
	w.metrics.dirty.Set(float64(len(dirty) + gone))
	if len(dirty)+gone > 0 {
		w.metrics.deferred.Add(float64(len(dirty) + gone))
		w.log.Debug("status: write budget spent; the rest waits for the next rounds",
			"records", len(dirty), "deletes", gone, "txns_per_second", w.cfg.MaxTxnsPerSecond)
	}
}

// fail counts err and logs it: at Warn for the first of a run of failures,
// then at Debug until a round succeeds. It returns err.
func (w *Writer) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err // stopping: not a failure of etcd
	}
	w.metrics.errors.Inc()
	if w.failing {
		w.log.Debug("status: writing records", "err", err)
	} else {
		w.failing = true
		w.log.Warn("status: writing records failed; retrying every interval", "err", err, "interval", w.cfg.Interval)
	}
	return err
}
