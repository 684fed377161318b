package status

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Config configures a Writer.
type Config struct {
	// Client is the etcd client the records are written with. Required.
	Client *clientv3.Client
	// Prefix is the etcd key prefix; it starts and ends with '/'. The
	// records are at "<Prefix>status/<node id>".
	Prefix string
	// Replica is this replica's name: every record written has it as its
	// home. Required.
	Replica string
	// Source is where the records come from: the nodes this replica
	// serves now. It is read from Run's goroutine only, once per Interval
	// and per Sync, so it must be safe to call concurrently with the
	// streams it reads and must not block (the servers copy each stream's
	// status under a short per-stream lock and never wait for a stream's
	// loop). Required.
	Source Source
	// Generation, if set, changes whenever what Source reports may have
	// (the xDS servers' StatusGeneration): a round that finds it where
	// the last one left it, with nothing held back by the budget, reads
	// and writes nothing, so idle streams cost nothing each Interval.
	Generation func() uint64
	// Interval is how often Source is read and what changed is written:
	// changes within one interval (a push and its ACK) coalesce into one
	// write. Zero: 1s.
	Interval time.Duration
	// ResyncInterval is how often the writer checks, with one keys-only
	// read of the status directory, that the records it wrote are still
	// there under its lease, and writes again those that are not (another
	// replica served the node for a while, then deleted its record). A
	// check first asks etcd, with two small reads, whether any key there
	// was written or deleted since its last full read, and reads the
	// directory only then, so idle replicas do not read 10,000 keys every
	// ResyncInterval. Zero: 30s. At least Interval.
	ResyncInterval time.Duration
	// MaxTxnsPerSecond is the write budget: how many etcd transactions
	// (record writes and deletes, each of up to MaxOps records) the writer
	// commits per second at most, averaged over Interval, whatever the
	// number of nodes. The records that changed beyond it stay dirty, keyed
	// by node: the next rounds write them in node-id order from where the
	// last round stopped, each with its latest value (a change superseded
	// before it was written is never written). Spare budget accumulates up
	// to max(1, MaxTxnsPerSecond×max(Interval, 1s)) transactions: over any
	// T seconds the writer commits at most that plus MaxTxnsPerSecond×T.
	// Zero: 20.
	MaxTxnsPerSecond float64
	// MaxOps bounds the operations of one etcd transaction. It must not be
	// over the etcd servers' --max-txn-ops. Deletes go at most MaxOps-1 to
	// a transaction: each is conditional (a nested transaction), and etcd
	// counts those against what the outer one leaves. Zero: 64.
	MaxOps int
	// LeaseTTL is the TTL of the lease the records are written under: how
	// long the records of a replica that crashed remain. It also bounds
	// each etcd request. etcd rounds it up to whole seconds and to its
	// minimum TTL. Zero: 10s.
	LeaseTTL time.Duration
	// Logger gets the writer's logs. Nil: discard.
	Logger *slog.Logger
	// Registerer gets the writer's metrics (legation_status_*). Nil: none.
	Registerer prometheus.Registerer
}

// Source gives a Writer the nodes a replica serves and their records.
// Rounds are incremental: Stamps is cheap and is read every round; Records
// builds only the records of the nodes whose stamps moved, and of those
// only as many as the write budget lets the round write. So a replica
// whose 10,000 streams all change every second builds about as many
// records a second as it writes, not 10,000.
type Source interface {
	// Stamps calls fn for every stream of every node: the node id, the
	// stream's id, and a count of the stream's changes. A node's record
	// is built again only when one of its streams appeared, left or
	// changed. Streams without a node id are not reported.
	Stamps(fn func(node string, stream, changes uint64))
	// Records returns the records of the nodes want selects (a node with
	// several streams, one record: FromStreams), with any node id.
	Records(want func(node string) bool) []NodeStatus
}

// ListSource is a Source over a function that returns every record: each record
// stands for one stream, stamped with the hash of its encoding. It suits
// tests and small fixed sets; a replica's Source reads its servers'
// streams (no record is built to be stamped).
type ListSource func() []NodeStatus

// Stamps implements Source.
func (l ListSource) Stamps(fn func(node string, stream, changes uint64)) {
	for _, r := range l() {
		if r.NodeID != "" {
			fn(r.NodeID, 0, xxhash.Sum64(encode(r)))
		}
	}
}

// Records implements Source: of two records with the same node id, the
// first.
func (l ListSource) Records(want func(node string) bool) []NodeStatus {
	var out []NodeStatus
	seen := map[string]bool{}
	for _, r := range l() {
		if r.NodeID != "" && !seen[r.NodeID] && want(r.NodeID) {
			seen[r.NodeID] = true
			out = append(out, r)
		}
	}
	return out
}

// DefaultConfig returns a Config with the default values; the required
// fields (Client, Prefix, Replica, Source) are left to fill.
func DefaultConfig() Config {
	return Config{
		Interval:       time.Second,      // a push and its ACK, usually in one write
		ResyncInterval: 30 * time.Second, // one keys-only read of the directory
		MaxOps:         64,               // half of etcd's default --max-txn-ops (128)
		// 20 txns of 64 records: 1,280 record writes a second per
		// replica, 20 etcd revisions.
		MaxTxnsPerSecond: 20,
		LeaseTTL:         10 * time.Second, // as shard's registry lease
	}
}

// fill sets the zero fields to their defaults.
func (c *Config) fill() {
	d := DefaultConfig()
	if c.Interval == 0 {
		c.Interval = d.Interval
	}
	if c.ResyncInterval == 0 {
		c.ResyncInterval = max(d.ResyncInterval, c.Interval)
	}
	if c.MaxOps == 0 {
		c.MaxOps = d.MaxOps
	}
	if c.MaxTxnsPerSecond == 0 {
		c.MaxTxnsPerSecond = d.MaxTxnsPerSecond
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = d.LeaseTTL
	}
}

// Validate checks the config, zero fields standing for their defaults.
func (c Config) Validate() error {
	c.fill()
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("status: "+format, args...)) }
	if c.Client == nil {
		add("Client is required")
	}
	if !strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/") {
		add("Prefix %q must start and end with '/'", c.Prefix)
	}
	if c.Replica == "" {
		add("Replica is required")
	}
	if c.Source == nil {
		add("Source is required")
	}
	if c.Interval < 0 {
		add("Interval %s must be positive", c.Interval)
	}
	if c.ResyncInterval < c.Interval {
		add("ResyncInterval %s must be at least Interval %s", c.ResyncInterval, c.Interval)
	}
	if c.MaxOps < 1 {
		add("MaxOps %d must be positive", c.MaxOps)
	}
	if c.MaxTxnsPerSecond < 0 || math.IsNaN(c.MaxTxnsPerSecond) || math.IsInf(c.MaxTxnsPerSecond, 0) {
		add("MaxTxnsPerSecond %v must be positive", c.MaxTxnsPerSecond)
	}
	if c.LeaseTTL < time.Second {
		add("LeaseTTL %s must be at least 1s", c.LeaseTTL)
	}
	return errors.Join(errs...)
}

// maxTxnBytes bounds the keys and values of one transaction, below etcd's
// default --max-request-bytes (1.5 MiB). A record is at most a few KiB.
const maxTxnBytes = 1 << 20

// keysPage is how many keys a resync reads at a time.
const keysPage = 10000

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
	// The write budget: a token bucket of transactions, refilled at
	// MaxTxnsPerSecond up to burst.
	tokens float64
	burst  float64
	filled time.Time // when tokens was last refilled
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
	// Spare budget accumulates up to a second's worth (or an Interval's, if
	// longer): a round slower than Interval still spends the budget of the
	// time it took.
	burst := max(1, math.Floor(cfg.MaxTxnsPerSecond*max(cfg.Interval, time.Second).Seconds()))
	return &Writer{
		cfg:      cfg,
		log:      log.With("component", "status", "replica", cfg.Replica),
		metrics:  m,
		syncs:    make(chan chan error),
		done:     make(chan struct{}),
		written:  map[string]held{},
		burst:    burst,
		tokens:   burst,
		deferred: map[string]uint64{},
		stamps:   map[string]uint64{},
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
	var gen uint64
	if w.cfg.Generation != nil {
		gen = w.cfg.Generation()
		if w.quiet && gen == w.quietGen && len(w.deferred) == 0 {
			return nil // nothing changed since a round that wrote it all
		}
		w.quiet = false
	}
	clear(w.stamps)
	w.cfg.Source.Stamps(func(node string, stream, changes uint64) {
		w.stamps[node] += mix(stream, changes)
	})
	dirty := w.dirty[:0]
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
	var gone []string
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

	// Deletes first: a node that left never changes again, so they are
	// done with; puts then have the rest of the budget.
	avail := w.refill()
	budget := avail
	gone, err := w.delete(ctx, gone, &budget)
	if err == nil {
		dirty, err = w.write(ctx, dirty, &budget)
	}
	w.tokens -= float64(avail - budget)
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

// refill adds the tokens earned since the last refill, up to the burst,
// and returns how many whole transactions they allow.
func (w *Writer) refill() int {
	now := time.Now()
	if !w.filled.IsZero() {
		w.tokens = min(w.burst, w.tokens+now.Sub(w.filled).Seconds()*w.cfg.MaxTxnsPerSecond)
	}
	w.filled = now
	return int(w.tokens)
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

// write builds the records of the dirty nodes, in order, as many at a time
// as *budget (transactions) lets it write, and writes those whose value
// changed. A node whose value is what etcd has already only takes its new
// stamp. It returns the nodes not written, in order.
func (w *Writer) write(ctx context.Context, dirty []string, budget *int) ([]string, error) {
	for len(dirty) > 0 && *budget > 0 {
		chunk := dirty[:min(len(dirty), *budget*w.cfg.MaxOps)]
		want := make(map[string]bool, len(chunk))
		for _, id := range chunk {
			want[id] = true
		}
		recs := map[string]NodeStatus{}
		for _, r := range w.cfg.Source.Records(func(id string) bool { return want[id] }) {
			if _, dup := recs[r.NodeID]; !dup && want[r.NodeID] {
				recs[r.NodeID] = r
			}
		}
		puts := make([]pending, 0, len(chunk))
		for _, id := range chunk {
			r, ok := recs[id]
			if !ok {
				continue // gone since Stamps: the next round deletes it
			}
			r.Home = w.cfg.Replica
			v := encode(r)
			h := xxhash.Sum64(v)
			stamp := w.stamps[id]
			if old, ok := w.written[id]; ok && old.hash == h {
				old.stamp = stamp
				w.written[id] = old
				continue
			}
			puts = append(puts, pending{id: id, key: Key(w.cfg.Prefix, id), value: v, hash: h, stamp: stamp})
		}
		left, err := w.put(ctx, puts, budget)
		rest := dirty[len(chunk):]
		if len(left) > 0 {
			ids := make([]string, 0, len(left)+len(rest))
			for _, p := range left {
				ids = append(ids, p.id)
			}
			rest = append(ids, rest...)
		}
		dirty = rest
		if err != nil {
			return dirty, err
		}
	}
	return dirty, nil
}

// put writes the records in transactions of at most MaxOps puts and
// maxTxnBytes, while *budget (transactions) lasts. It returns the records
// not written.
func (w *Writer) put(ctx context.Context, puts []pending, budget *int) ([]pending, error) {
	for len(puts) > 0 && *budget > 0 {
		n, size := 0, 0
		for n < len(puts) && n < w.cfg.MaxOps {
			s := len(puts[n].key) + len(puts[n].value)
			if n > 0 && size+s > maxTxnBytes {
				break
			}
			size += s
			n++
		}
		batch := puts[:n]
		ops := make([]clientv3.Op, len(batch))
		for i, p := range batch {
			ops[i] = clientv3.OpPut(p.key, string(p.value), clientv3.WithLease(w.lease))
		}
		tctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseTTL)
		resp, err := w.cfg.Client.Txn(tctx).Then(ops...).Commit()
		cancel()
		*budget-- // a failed transaction may have committed
		if err != nil {
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				w.lost("etcd no longer knows it")
			}
			return puts, fmt.Errorf("status: write %d records: %w", len(batch), err)
		}
		puts = puts[n:]
		w.metrics.txns.Inc()
		w.metrics.written.Add(float64(len(batch)))
		w.metrics.bytes.Add(float64(size))
		for _, p := range batch {
			w.written[p.id] = held{hash: p.hash, rev: resp.Header.Revision, stamp: p.stamp}
		}
		w.cursor = batch[len(batch)-1].id
	}
	return puts, nil
}

// delete deletes the records of the nodes that left, each only if it is
// still under this writer's lease (if another replica wrote it since, the
// node is connected there and the record is the other's), while *budget
// (transactions) lasts. It returns the ids not deleted.
func (w *Writer) delete(ctx context.Context, gone []string, budget *int) ([]string, error) {
	per := max(w.cfg.MaxOps-1, 1)
	for len(gone) > 0 && *budget > 0 {
		batch := gone[:min(per, len(gone))]
		ops := make([]clientv3.Op, len(batch))
		for i, id := range batch {
			key := Key(w.cfg.Prefix, id)
			ops[i] = clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(key), "=", int64(w.lease))},
				[]clientv3.Op{clientv3.OpDelete(key)}, nil)
		}
		tctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseTTL)
		resp, err := w.cfg.Client.Txn(tctx).Then(ops...).Commit()
		cancel()
		*budget--
		if err != nil {
			return gone, fmt.Errorf("status: delete %d records: %w", len(batch), err)
		}
		gone = gone[len(batch):]
		w.metrics.txns.Inc()
		for i, id := range batch {
			// Ours or not, the key is no longer this writer's to track.
			delete(w.written, id)
			if i < len(resp.Responses) && resp.Responses[i].GetResponseTxn().GetSucceeded() {
				w.metrics.deleted.Inc()
			} else {
				w.metrics.takenOver.Inc()
			}
		}
	}
	return gone, nil
}

// check runs resync, and a round at once if it forgot records.
func (w *Writer) check(ctx context.Context) error {
	n, err := w.resync(ctx)
	if err != nil || n == 0 {
		return err
	}
	return w.round(ctx)
}

// resync forgets the records that are no longer in etcd as this writer
// wrote them (deleted, or written since by another replica), so that the
// next round writes them again if their node is still here. It compares
// mod revisions: etcd serves keys-only ranges from its index, without the
// keys' leases. It returns how many it forgot.
func (w *Writer) resync(ctx context.Context) (int, error) {
	if w.lease == 0 || len(w.written) == 0 {
		return 0, nil
	}
	dir := Dir(w.cfg.Prefix)
	end := clientv3.GetPrefixRangeEnd(dir)
	if w.read.rev != 0 && w.dirUnchanged(ctx, dir, end) {
		return 0, nil // every record is as the last full read found it
	}
	w.read.rev = 0
	w.fullReads.Add(1)
	revs := make(map[string]int64, len(w.written))
	var first int64
	for from := dir; ; {
		tctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseTTL)
		resp, err := w.cfg.Client.Get(tctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(keysPage))
		cancel()
		if err != nil {
			return 0, w.fail(ctx, fmt.Errorf("status: check records: %w", err))
		}
		if first == 0 {
			first = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			revs[strings.TrimPrefix(string(kv.Key), dir)] = kv.ModRevision
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	w.read.rev, w.read.keys = first, int64(len(revs))
	lost := 0
	for id, h := range w.written {
		if revs[id] != h.rev {
			delete(w.written, id)
			lost++
		}
	}
	if lost > 0 {
		w.log.Info("status: records were overwritten or deleted by others; writing those of nodes still here again", "records", lost)
		w.metrics.held.Set(float64(len(w.written)))
		w.metrics.takenOver.Add(float64(lost))
	}
	return lost, nil
}

// dirUnchanged reports whether the status directory [dir, end) holds
// exactly the keys, at the same mod revisions, that the last full read
// found: no key there was written after that read's first revision, and
// there are as many keys as it read. A key written since (by this replica
// or another) or deleted and written again has a later mod revision, and
// one deleted leaves one fewer unless another was written, so the two
// answers (two small reads at one revision, not the keys) suffice. An
// error answers false: the full read then reports it.
func (w *Writer) dirUnchanged(ctx context.Context, dir, end string) bool {
	tctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseTTL)
	defer cancel()
	n, err := w.cfg.Client.Get(tctx, dir, clientv3.WithRange(end), clientv3.WithCountOnly())
	if err != nil || n.Count != w.read.keys {
		return false
	}
	// etcd filters by mod revision before it applies the limit, and
	// answers with at most one key.
	newer, err := w.cfg.Client.Get(tctx, dir, clientv3.WithRange(end), clientv3.WithKeysOnly(),
		clientv3.WithRev(n.Header.Revision), clientv3.WithMinModRev(w.read.rev+1), clientv3.WithLimit(1))
	return err == nil && len(newer.Kvs) == 0
}

// grant grants a new lease and starts keeping it alive until Run ends or
// the lease is lost.
func (w *Writer) grant(ctx context.Context) error {
	ttl := int64((w.cfg.LeaseTTL + time.Second - 1) / time.Second)
	tctx, cancel := context.WithTimeout(ctx, w.cfg.LeaseTTL)
	g, err := w.cfg.Client.Grant(tctx, ttl)
	cancel()
	if err != nil {
		return fmt.Errorf("status: grant lease: %w", err)
	}
	kctx, stop := context.WithCancel(ctx)
	ka, err := w.cfg.Client.KeepAlive(kctx, g.ID)
	if err != nil {
		stop()
		w.revoke(g.ID) //nolint:errcheck // unused; it expires anyway
		return fmt.Errorf("status: keep lease alive: %w", err)
	}
	w.lease, w.ka, w.kaStop = g.ID, ka, stop
	clear(w.written) // nothing is under the new lease yet
	w.log.Debug("status: lease granted", "lease", fmt.Sprintf("%016x", int64(g.ID)), "ttl_seconds", g.TTL)
	return nil
}

// lost drops a lease that etcd lost (it expired while out of reach), so
// that the next round grants another and writes every record again. The
// records under the old lease are gone or expire with it.
func (w *Writer) lost(why string) {
	if w.lease == 0 {
		return
	}
	w.log.Warn("status: lease lost; writing every record again under a new one", "why", why,
		"lease", fmt.Sprintf("%016x", int64(w.lease)))
	w.kaStop()
	w.lease, w.ka, w.kaStop = 0, nil, nil
	clear(w.written)
	w.quiet = false // every record is to be written again
	w.metrics.leaseLost.Inc()
	w.metrics.held.Set(0)
}

// stop revokes the lease, deleting every record written under it.
func (w *Writer) stop() error {
	if w.lease == 0 {
		return nil
	}
	w.kaStop()
	id := w.lease
	w.lease, w.ka, w.kaStop = 0, nil, nil
	clear(w.written)
	w.metrics.held.Set(0)
	if err := w.revoke(id); err != nil {
		return err
	}
	w.log.Debug("status: lease revoked; records deleted")
	return nil
}

func (w *Writer) revoke(id clientv3.LeaseID) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(w.cfg.LeaseTTL, 5*time.Second))
	defer cancel()
	if _, err := w.cfg.Client.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("status: revoke lease %016x: %w", int64(id), err)
	}
	return nil
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
