package relay

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// MarkerKey is the metadata key that marks a relayed stream; its value is
// the name of the replica that relayed it. A stream carrying it is served
// where it lands, never relayed again.
const MarkerKey = "x-legation-relayed"

// ServedByKey is the response header a replica sends, as soon as its
// interceptor gets a relayed stream, with its own name: it tells the
// relaying replica that the home accepted the stream.
const ServedByKey = "x-legation-served-by"

// forwardedPrefix starts the metadata keys a replica forwards about a
// relayed stream's client (Config.Forward): a client's own are dropped.
const forwardedPrefix = "x-legation-client-"

// Local is StreamInfo.ServedBy of a stream served by this replica.
const Local = "local"

// errClosed is why a Relay that was closed serves streams locally.
var errClosed = errors.New("relay: closed")

// Relay relays xDS streams to their home replicas and keeps the registry
// of the streams it has seen. Its methods may be called concurrently.
type Relay struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	methods map[string]kind // read-only after New

	nextID  atomic.Uint64
	streams xdsstream.Registry[*entry]

	mu     sync.Mutex // guards conns, closed
	conns  map[string]*pooledConn
	closed bool

	// rbMu guards rbCancel, rbDone and rbClosed; it is held while a
	// Rebalance hands over to the next (the one ending never takes it).
	rbMu     sync.Mutex
	rbCancel context.CancelFunc
	rbDone   chan struct{}
	rbClosed bool
	pacer    *pacer // used by the running Rebalance or Shed only
	// draining is set by Drain: new streams are refused, Rebalance does
	// nothing.
	draining atomic.Bool

	lastWarn atomic.Int64 // unix nanoseconds of the last relay warning
}

// New returns a Relay. It does no I/O: connections to home replicas are
// made when a stream needs one.
func New(cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.fill()
	methods, err := xdsMethods()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Relay{
		cfg:     cfg,
		log:     cfg.Logger.With("replica", cfg.Self),
		metrics: m,
		methods: methods,
		conns:   map[string]*pooledConn{},
		pacer:   newPacer(cfg.Rate, cfg.Burst, cfg.Burst),
	}, nil
}

// Close stops a running Rebalance and closes the connections to home
// replicas, which ends the streams still relayed on them: call it after
// the gRPC server has stopped. Streams that arrive later are served
// locally. It is idempotent.
func (r *Relay) Close() error {
	r.rbMu.Lock()
	r.rbClosed = true
	if r.rbCancel != nil {
		r.rbCancel()
		<-r.rbDone // the ending Rebalance does not take rbMu
	}
	r.rbMu.Unlock()

	r.mu.Lock()
	r.closed = true
	conns := r.conns
	r.conns = map[string]*pooledConn{}
	for _, pc := range conns {
		if pc.idle != nil {
			pc.idle.Stop()
		}
	}
	r.mu.Unlock()
	var errs []error
	for _, pc := range conns {
		errs = append(errs, pc.cc.Close())
	}
	return errors.Join(errs...)
}

// warn logs a relay failure at Warn at most every 10s, else at Debug.
func (r *Relay) warn(msg string, args ...any) {
	now := time.Now().UnixNano()
	last := r.lastWarn.Load()
	if now-last < int64(10*time.Second) || !r.lastWarn.CompareAndSwap(last, now) {
		return // the caller logs it at Debug
	}
	r.log.Warn(msg, args...)
}
