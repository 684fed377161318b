package tracing

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

// PushConfig configures a replica's Pushes.
type PushConfig struct {
	// Provider makes the spans. Required, and on: a replica with traces
	// off has no Pushes at all (its servers' PushTracer is nil).
	Provider *Provider
	// Client reads the apply markers of each revision. Required.
	Client clientv3.KV
	// Prefix is the etcd key prefix.
	Prefix string
	// Replica names the replica in every span (legation.replica).
	Replica string
	// MaxEvents bounds the ACK and NACK events of one push span, and
	// the NACK spans of one apply (Nacked); the rest are only counted.
	// Zero: 32.
	MaxEvents int
	// Quiet ends a push span once no response at its revision was sent
	// and none answered for that long. Zero: 2s.
	Quiet time.Duration
	// MaxAge ends a push span that long after the view's event whatever
	// happens. Zero: 30s.
	MaxAge time.Duration
	// MaxPending bounds the revisions followed at once (a burst of
	// writes); beyond it the oldest are ended early. Zero: 64.
	MaxPending int
	// Logger gets the failures to read a revision's markers, at Debug;
	// nil: discard.
	Logger *slog.Logger
}

func (c *PushConfig) fill() {
	if c.MaxEvents == 0 {
		c.MaxEvents = 32
	}
	if c.Quiet == 0 {
		c.Quiet = 2 * time.Second
	}
	if c.MaxAge == 0 {
		c.MaxAge = 30 * time.Second
	}
	if c.MaxPending == 0 {
		c.MaxPending = 64
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Pushes makes a replica's view and push spans. For each revision of its
// view whose apply stored a trace context (store.ApplyMarker), it makes,
// in that trace:
//
//   - legation.view: from the apply's commit (the marker's time) to the
//     view's event for the revision on this replica;
//   - legation.push, its child: from the view's event to the last
//     response sent at that revision, by every stream of the replica,
//     with the clients' ACKs and NACKs as events ("ack", "nack"), at most
//     MaxEvents of them, and counts of all as attributes.
//
// The spans are made once the push is over (Quiet after its last send or
// answer, or MaxAge), with the times recorded on the way. Sent and
// Answered may be called concurrently and do not block but on a mutex.
type Pushes struct {
	cfg    PushConfig
	tracer trace.Tracer

	mu sync.Mutex // guards what follows
	// pending are the revisions followed, by revision.
	pending map[int64]*push
	// handled is the newest revision the view's event was taken for:
	// a send at an older revision that is not pending is not followed.
	handled int64

	nackMu sync.Mutex // guards what follows (nack.go); never held with mu
	// nackSpans counts the NACK spans made per apply id, for the
	// applies of nackOrder, oldest first.
	nackSpans map[string]int
	nackOrder []string
}

var _ xdsstream.PushTracer = (*Pushes)(nil)

// push is what one revision's push did on this replica.
type push struct {
	rev       int64
	viewAt    time.Time // the view's event; zero until taken
	resolved  bool      // the markers were read
	parent    trace.SpanContext
	committed time.Time // the marker's time
	scopes    []string
	changes   int

	sends, acks, nacks int
	firstSend          time.Time
	lastSend           time.Time
	last               time.Time // last send or answer
	events             []answer
	dropped            int
}

// answer is one ACK or NACK.
type answer struct {
	at   time.Time
	nack bool
	typ  string
	node string
}

// NewPushes returns the Pushes of a replica; Run follows its view.
func NewPushes(cfg PushConfig) (*Pushes, error) {
	if cfg.Provider == nil || !cfg.Provider.On() {
		return nil, errors.New("tracing: Pushes need a Provider that is on")
	}
	if cfg.Client == nil {
		return nil, errors.New("tracing: Pushes need an etcd Client")
	}
	cfg.fill()
	return &Pushes{cfg: cfg, tracer: cfg.Provider.Tracer(), pending: map[int64]*push{}}, nil
}

// Snapshots is what Run follows: *view.View is one.
type Snapshots interface {
	Ready() <-chan struct{}
	Snapshot() *view.Snapshot
}

// Run follows the view's snapshots: each one with changes is a view
// event, whose revision's markers it reads from etcd. It ends the pushes
// that are over, and returns when ctx ends, ending those still pending.
func (p *Pushes) Run(ctx context.Context, src Snapshots) {
	tick := time.NewTicker(p.cfg.Quiet / 4)
	defer tick.Stop()
	defer p.flush(time.Time{})
	select {
	case <-src.Ready():
	case <-ctx.Done():
		return
	}
	snap := src.Snapshot()
	p.mu.Lock()
	p.handled = snap.Revision
	for rev := range p.pending {
		if rev <= snap.Revision {
			delete(p.pending, rev) // sent before the view was followed: no event to take
		}
	}
	p.mu.Unlock()
	for {
		select {
		case <-snap.Done():
			for x := snap.Next(); x != nil; x = x.Next() {
				snap = x
				if len(x.Changes) > 0 && !x.Reloaded {
					p.viewEvent(ctx, x)
					continue
				}
				// No change, or a reload: no apply's push to follow.
				p.mu.Lock()
				delete(p.pending, x.Revision)
				p.mu.Unlock()
			}
			p.mu.Lock()
			p.handled = snap.Revision
			p.mu.Unlock()
		case now := <-tick.C:
			p.flush(now)
		case <-ctx.Done():
			return
		}
	}
}

// viewEvent takes the view's event for snapshot x, then reads the apply
// markers of its revision.
func (p *Pushes) viewEvent(ctx context.Context, x *view.Snapshot) {
	now := time.Now()
	p.mu.Lock()
	e := p.get(x.Revision)
	e.viewAt = now
	if !e.firstSend.IsZero() && e.firstSend.Before(now) {
		// A stream woke before this goroutine: the snapshot was
		// published no later than its send.
		e.viewAt = e.firstSend
	}
	e.changes = len(x.Changes)
	p.mu.Unlock()

	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	markers, err := store.ApplyMarkersAt(rctx, p.cfg.Client, p.cfg.Prefix, x.Revision)
	cancel()
	if err != nil {
		p.cfg.Logger.Debug("tracing: reading the apply markers of a revision", "revision", x.Revision, "err", err)
	}
	var parent trace.SpanContext
	var committed time.Time
	var scopes []string
	for sc, m := range markers {
		if pc := Parent(m.Traceparent); pc.IsValid() {
			parent, committed = pc, m.At
			scopes = append(scopes, sc)
		}
	}
	sort.Strings(scopes)
	p.mu.Lock()
	defer p.mu.Unlock()
	if e = p.pending[x.Revision]; e == nil {
		return
	}
	e.resolved, e.parent, e.committed, e.scopes = true, parent, committed, scopes
	if !parent.IsValid() {
		delete(p.pending, x.Revision)
	}
}

// get returns the pending push of rev, made if need be, ending the
// oldest beyond MaxPending. p.mu is held.
func (p *Pushes) get(rev int64) *push {
	e := p.pending[rev]
	if e != nil {
		return e
	}
	for len(p.pending) >= p.cfg.MaxPending {
		oldest := int64(-1)
		for r := range p.pending {
			if oldest < 0 || r < oldest {
				oldest = r
			}
		}
		p.end(p.pending[oldest])
		delete(p.pending, oldest)
	}
	e = &push{rev: rev}
	p.pending[rev] = e
	return e
}

// Sent implements xdsstream.PushTracer.
func (p *Pushes) Sent(rev int64) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.pending[rev]
	if e == nil {
		if rev <= p.handled {
			return // its view event is taken, and it has no trace
		}
		// A stream woken before this goroutine: the view's event is
		// taken when it gets there.
		e = p.get(rev)
	}
	e.sends++
	if e.firstSend.IsZero() {
		e.firstSend = now
	}
	e.lastSend, e.last = now, now
}

// Answered implements xdsstream.PushTracer.
func (p *Pushes) Answered(t *resource.Type, version, node string, nack bool) {
	rev, err := strconv.ParseInt(version, 10, 64)
	if err != nil {
		return
	}
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.pending[rev]
	if e == nil || e.sends == 0 {
		return
	}
	if nack {
		e.nacks++
	} else {
		e.acks++
	}
	e.last = now
	if len(e.events) < p.cfg.MaxEvents {
		e.events = append(e.events, answer{at: now, nack: nack, typ: t.Name, node: node})
	} else {
		e.dropped++
	}
}

// flush ends the pushes that are over at now; zero now: all of them.
func (p *Pushes) flush(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for rev, e := range p.pending {
		start := e.viewAt
		if start.IsZero() {
			start = e.firstSend
		}
		last := e.last
		if last.IsZero() {
			last = start
		}
		if now.IsZero() || (e.resolved && now.Sub(last) >= p.cfg.Quiet) || now.Sub(start) >= p.cfg.MaxAge {
			p.end(e)
			delete(p.pending, rev)
		}
	}
}

// end makes the spans of e if its revision carries a trace. p.mu is
// held; making spans with past times does not block (the batch span
// processor queues them).
func (p *Pushes) end(e *push) {
	if !e.resolved || !e.parent.IsValid() || e.viewAt.IsZero() {
		return
	}
	replica := attribute.String("legation.replica", p.cfg.Replica)
	revision := attribute.Int64("legation.revision", e.rev)
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), e.parent)
	viewStart := e.committed
	if viewStart.IsZero() || viewStart.After(e.viewAt) {
		viewStart = e.viewAt // another host's clock ahead of ours
	}
	ctx, viewSpan := p.tracer.Start(ctx, "legation.view", trace.WithTimestamp(viewStart),
		trace.WithAttributes(replica, revision, attribute.Int("legation.changes", e.changes),
			attribute.StringSlice("legation.scopes", e.scopes)))
	viewSpan.End(trace.WithTimestamp(e.viewAt))

	end := e.viewAt
	if e.lastSend.After(end) {
		end = e.lastSend
	}
	fanout := end.Sub(e.viewAt)
	if e.last.After(end) {
		end = e.last // the answers lie in the span
	}
	_, span := p.tracer.Start(ctx, "legation.push", trace.WithTimestamp(e.viewAt),
		trace.WithAttributes(replica, revision,
			attribute.Int("legation.push.sends", e.sends),
			attribute.Int("legation.push.acks", e.acks),
			attribute.Int("legation.push.nacks", e.nacks),
			attribute.Int("legation.push.events_dropped", e.dropped),
			attribute.Float64("legation.push.fanout_seconds", fanout.Seconds())))
	for _, a := range e.events {
		name := "ack"
		if a.nack {
			name = "nack"
		}
		span.AddEvent(name, trace.WithTimestamp(a.at),
			trace.WithAttributes(attribute.String("legation.node", a.node), attribute.String("legation.type", a.typ)))
	}
	span.End(trace.WithTimestamp(end))
}
