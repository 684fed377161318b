package status

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
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
	// RejectedApplies is how many applies, the most recent of those whose
	// writes the nodes held reject, get a count of those nodes
	// (legation_xds_rejected_nodes_by_apply), so the metric's labels stay
	// bounded. Zero: DefaultRejectedApplies.
	RejectedApplies int
	// OnNack, if set, is called with each rejection the records built
	// newly hold (a node's latest answer for a type became a NACK, or a
	// NACK of another version or message), traced to its applies. It is
	// called from Run's goroutine, at most once per Interval for a node
	// and type, and must not block.
	OnNack func(NackEvent)
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
		RejectedApplies:  DefaultRejectedApplies,
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
	if c.RejectedApplies == 0 {
		c.RejectedApplies = d.RejectedApplies
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
	if c.RejectedApplies < 1 || c.RejectedApplies > 1000 {
		add("RejectedApplies %d must be from 1 to 1000", c.RejectedApplies)
	}
	if c.LeaseTTL < time.Second {
		add("LeaseTTL %s must be at least 1s", c.LeaseTTL)
	}
	return errors.Join(errs...)
}
