package limits

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// Config configures Limits. Zero in a bound means no bound.
type Config struct {
	// MaxStreamsPerConn bounds the streams one transport connection holds
	// open at once (--max-streams-per-conn); the stream beyond it gets
	// RESOURCE_EXHAUSTED. Trusted streams are not counted. Zero: no bound.
	MaxStreamsPerConn int
	// StreamRate is the new streams admitted per second (--stream-rate),
	// with a burst of StreamBurst; a stream over it waits its turn up to
	// MaxWait, then gets RESOURCE_EXHAUSTED. The turns go to the clients
	// (ClientKey) one after the other, so that one client opening streams
	// by the thousand takes its share of the rate and no more while
	// others want some. Zero: no rate.
	StreamRate float64
	// StreamBurst is the rate's bucket size; at least 1 when StreamRate
	// is set.
	StreamBurst int
	// MaxStreams bounds the streams admitted and open at once
	// (--max-streams). Zero: no bound.
	MaxStreams int
	// ShareFactor (--max-streams-share) caps the streams admitted and
	// open at ShareFactor times FairShare, but never below ShareFloor: a
	// replica takes no more than its share when clients pile on it (a
	// peer died, a load balancer is uneven). Zero: no cap.
	ShareFactor float64
	// ShareFloor is the streams the share cap always admits, so that a
	// young cluster, whose estimate is small and noisy, is not refused.
	ShareFloor int
	// FairShare, if set, returns this replica's fair share of the
	// cluster's streams (the cluster's streams divided by its members);
	// ok false when unknown or alone: no share cap then. It is called
	// once per new stream and must not block.
	FairShare func() (fair float64, ok bool)
	// MaxWait is how long a stream over StreamRate may wait for its turn.
	MaxWait time.Duration
	// ClientKey, if set, returns the client a stream or call of ctx
	// comes from, for fair turns under StreamRate and RelayStreamRate: a
	// comparable value, such as its identity in mTLS or its source
	// address in plaintext. Nil: every stream is one client's. It must
	// not block.
	ClientKey func(ctx context.Context) any
	// Full, if set, is called with the stream's context when MaxStreams
	// or the share cap refused a stream and its connection carries no
	// other stream: the caller closes that connection (as a drain does),
	// so that the client's retry goes through the load balancer to
	// another replica instead of coming back on this connection to be
	// refused again. It must not block.
	Full func(ctx context.Context)
	// Trusted, if set, reports whether the stream of ctx was relayed here
	// by another replica: such streams were admitted at the replica the
	// client reached (the edge), so they count against the relay budget
	// (RelayStreamRate, MaxRelayedStreams) instead of StreamRate,
	// MaxStreams and the share cap, and a relay connection between
	// replicas multiplexes many streams, so MaxStreamsPerConn does not
	// apply to it. It must not block.
	Trusted func(ctx context.Context) bool
	// RelayStreamRate is the relayed (Trusted) streams admitted per second
	// (--relay-stream-rate), with a burst of RelayStreamBurst; one over it
	// waits up to MaxWait, then gets RESOURCE_EXHAUSTED. Zero: no rate.
	RelayStreamRate float64
	// RelayStreamBurst is the relay rate's bucket size; at least 1 when
	// RelayStreamRate is set.
	RelayStreamBurst int
	// MaxRelayedStreams bounds the relayed streams open at once
	// (--max-relayed-streams). Zero: no bound.
	MaxRelayedStreams int
	// Exempt, if set, reports the stream methods admission (StreamRate,
	// MaxStreams) leaves alone, such as health watches. They still count
	// against MaxStreamsPerConn.
	Exempt func(method string) bool
	// Logger gets the stacks of recovered panics (Error); nil discards.
	Logger *slog.Logger
	// Registerer gets the metrics (Hits, Panics,
	// legation_admission_waits_total, legation_admission_admitted_total,
	// legation_admission_streams, legation_admission_relayed_admitted_total,
	// legation_admission_relayed_streams).
	Registerer prometheus.Registerer
}

// Limits is the gRPC server's guard: a stats handler tagging connections
// and interceptors. Its methods may be called concurrently.
type Limits struct {
	cfg     Config
	log     *slog.Logger
	limiter *fairBucket  // nil: no rate
	open    atomic.Int64 // admitted streams open
	// relay is the relay budget's: its limiter (nil: no rate) and the
	// relayed streams open.
	relayLimiter *fairBucket
	relayOpen    atomic.Int64

	hits   *prometheus.CounterVec
	panics prometheus.Counter
	waits  prometheus.Counter
	// admitted counts the streams admission let through: its rate is
	// what --stream-rate bounds.
	admitted prometheus.Counter
	// relayAdmitted counts the relayed streams the relay budget let
	// through.
	relayAdmitted prometheus.Counter
	// refunded counts the tokens given back for streams refused after
	// admission (Release).
	refunded prometheus.Counter
}

// New checks cfg and registers the metrics.
func New(cfg Config) (*Limits, error) {
	if cfg.MaxStreamsPerConn < 0 || cfg.MaxStreams < 0 || cfg.StreamRate < 0 || cfg.MaxWait < 0 || cfg.ShareFactor < 0 ||
		cfg.RelayStreamRate < 0 || cfg.MaxRelayedStreams < 0 {
		return nil, errors.New("limits: negative bound")
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	l := &Limits{cfg: cfg, log: cfg.Logger}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if cfg.StreamRate > 0 {
		l.limiter = newFairBucket(cfg.StreamRate, cfg.StreamBurst, cfg.MaxWait)
	}
	if cfg.RelayStreamRate > 0 {
		l.relayLimiter = newFairBucket(cfg.RelayStreamRate, cfg.RelayStreamBurst, cfg.MaxWait)
	}
	var err error
	if l.hits, err = Hits(cfg.Registerer); err != nil {
		return nil, err
	}
	if l.panics, err = Panics(cfg.Registerer); err != nil {
		return nil, err
	}
	l.waits = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "legation_admission_waits_total",
		Help: "New streams that waited for their turn under --stream-rate (admitted or not).",
	})
	l.admitted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "legation_admission_admitted_total",
		Help: "New streams admitted (by --max-streams, --max-streams-share and --stream-rate); its rate is at most --stream-rate plus --stream-burst.",
	})
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "legation_admission_streams",
		Help: "Streams admitted and open (what --max-streams bounds).",
	}, func() float64 { return float64(l.open.Load()) })
	l.relayAdmitted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "legation_admission_relayed_admitted_total",
		Help: "Streams relayed here by another replica and admitted by the relay budget (--relay-stream-rate, --max-relayed-streams).",
	})
	relayGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "legation_admission_relayed_streams",
		Help: "Streams relayed here by another replica and open (what --max-relayed-streams bounds).",
	}, func() float64 { return float64(l.relayOpen.Load()) })
	l.refunded = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "legation_admission_refunded_total",
		Help: "Admission tokens given back for streams and calls refused after admission (authorization), at most --stream-rate a second: a client refused does not spend the others' --stream-rate.",
	})
	for _, c := range []prometheus.Collector{l.waits, l.admitted, gauge, l.relayAdmitted, relayGauge, l.refunded} {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("limits: register metrics: %w", err)
		}
	}
	return l, nil
}

// Open returns the admitted streams open now.
func (l *Limits) Open() int { return int(l.open.Load()) }

// connKey keys a connection's *connStreams in its context.
type connKey struct{}

// connStreams counts a transport connection's open streams, and what the
// subscriptions of its streams cost (ChargeConn).
type connStreams struct {
	n          atomic.Int64
	subscribed atomic.Int64
	// trusted: a replica's relay connection, carrying the streams of
	// many clients (Config.Trusted): not bounded as one client's.
	trusted atomic.Bool
}

// ChargeConn adds delta to what the subscriptions of the streams of ctx's
// transport connection cost, unless that would take it over max (when
// max is positive and delta is not negative): it reports false then and
// adds nothing. A connection not tagged (StatsHandler), or a replica's
// relay connection, which carries many clients' streams (their homes'
// per-stream bounds hold), is not bounded: true.
func ChargeConn(ctx context.Context, delta, max int64) bool {
	c, _ := ctx.Value(connKey{}).(*connStreams)
	if c == nil || c.trusted.Load() {
		return true
	}
	n := c.subscribed.Add(delta)
	if delta > 0 && max > 0 && n > max {
		c.subscribed.Add(-delta)
		return false
	}
	return true
}

// StatsHandler returns the handler that tags each transport connection
// with its stream count (grpc.StatsHandler). The count is the
// connection's own: streams of one HTTP/2 connection, whatever address it
// comes from.
func (l *Limits) StatsHandler() stats.Handler { return connTagger{} }

type connTagger struct{}

func (connTagger) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return context.WithValue(ctx, connKey{}, &connStreams{})
}
func (connTagger) HandleConn(context.Context, stats.ConnStats)                     {}
func (connTagger) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (connTagger) HandleRPC(context.Context, stats.RPCStats)                       {}

// Conn returns the key of the transport connection ctx (a stream's
// context) came on, as StatsHandler tagged it: equal for the streams of
// one connection, nil when the connection was not tagged.
func Conn(ctx context.Context) any {
	if c, _ := ctx.Value(connKey{}).(*connStreams); c != nil {
		return c
	}
	return nil
}

// Release ends an admitted stream or call: it gives back its place
// under the bounds, and, when refused is true (it ended refused by what
// came after admission: authorization's PERMISSION_DENIED, see Refused),
// the rate token it took, so that a client refused does not spend the
// rate honest clients need.
type Release func(refused bool)

// Refused reports whether a stream or call that ended with err was
// refused after admission (authorization's PERMISSION_DENIED, here or
// at the home it was relayed to), for Release.
func Refused(err error) bool { return status.Code(err) == codes.PermissionDenied }

// AdmitStream bounds streams per connection, then admits the stream
// (MaxStreams, then StreamRate), or returns the RESOURCE_EXHAUSTED to end
// it with; on success, release must be called when the stream ends.
// Trusted (relayed) streams count against the relay budget instead
// (admitRelayed). Call it in the stream interceptor after the recovery and
// before the relay, so that admission happens at the edge, where the
// client landed.
func (l *Limits) AdmitStream(ctx context.Context, method string) (release Release, err error) {
	if l.cfg.Trusted != nil && l.cfg.Trusted(ctx) {
		// Relayed by a replica: admitted at the edge already, and its
		// connection multiplexes the streams of many clients.
		if conn, _ := ctx.Value(connKey{}).(*connStreams); conn != nil {
			conn.trusted.Store(true)
		}
		return l.admitRelayed(ctx)
	}
	conn, _ := ctx.Value(connKey{}).(*connStreams)
	if conn != nil {
		n := conn.n.Add(1)
		if max := l.cfg.MaxStreamsPerConn; max > 0 && n > int64(max) {
			conn.n.Add(-1)
			l.hits.WithLabelValues(LimitStreamsPerConn).Inc()
			return nil, status.Errorf(codes.ResourceExhausted, "too many streams on one connection: at most %d (--max-streams-per-conn)", max)
		}
	}
	leave := func() {
		if conn != nil {
			conn.n.Add(-1)
		}
	}
	if l.cfg.Exempt != nil && l.cfg.Exempt(method) {
		return func(bool) { leave() }, nil
	}
	if err := l.admit(ctx); err != nil {
		if errors.Is(err, errFull) && l.cfg.Full != nil && (conn == nil || conn.n.Load() == 1) {
			l.cfg.Full(ctx)
		}
		leave()
		return nil, err
	}
	l.admitted.Inc()
	return func(refused bool) {
		l.open.Add(-1)
		leave()
		l.refund(l.limiter, refused)
	}, nil
}

// refund gives b a token back for a stream refused after admission.
func (l *Limits) refund(b *fairBucket, refused bool) {
	if refused && b != nil && b.refund() {
		l.refunded.Inc()
	}
}

// clientKey is the client of ctx for fair turns (Config.ClientKey).
func (l *Limits) clientKey(ctx context.Context) any {
	if l.cfg.ClientKey == nil {
		return nil
	}
	return l.cfg.ClientKey(ctx)
}

// errFull matches (errors.Is) the errors of streams refused because the
// replica is full: by MaxStreams or the share cap.
var errFull = errors.New("limits: replica full")

// fullError is the RESOURCE_EXHAUSTED status of a stream refused because
// the replica is full.
type fullError struct{ s *status.Status }

func (e fullError) Error() string              { return e.s.Err().Error() }
func (e fullError) GRPCStatus() *status.Status { return e.s }
func (e fullError) Is(target error) bool       { return target == errFull }

// admit takes a place under MaxStreams and a token under StreamRate,
// waiting up to MaxWait for the token. On success the caller holds a
// place in l.open and must give it back.
func (l *Limits) admit(ctx context.Context) error {
	n := l.open.Add(1)
	if max := l.cfg.MaxStreams; max > 0 && n > int64(max) {
		l.open.Add(-1)
		l.hits.WithLabelValues(LimitMaxStreams).Inc()
		return fullError{status.Newf(codes.ResourceExhausted, "replica full: at most %d streams (--max-streams); try another replica", max)}
	}
	if f := l.cfg.ShareFactor; f > 0 && l.cfg.FairShare != nil {
		if fair, ok := l.cfg.FairShare(); ok {
			if limit := max(float64(l.cfg.ShareFloor), f*fair); float64(n) > limit {
				l.open.Add(-1)
				l.hits.WithLabelValues(LimitMaxStreamsShare).Inc()
				return fullError{status.Newf(codes.ResourceExhausted, "replica above its share: at most %.0f streams, %g times its fair share of the cluster's (--max-streams-share); try another replica", limit, f)}
			}
		}
	}
	if l.limiter == nil {
		return nil
	}
	waited, err := l.limiter.take(ctx, l.clientKey(ctx), l.cfg.MaxWait)
	if waited {
		l.waits.Inc()
	}
	if err == nil {
		return nil
	}
	l.open.Add(-1)
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	l.hits.WithLabelValues(LimitStreamRate).Inc()
	return status.Errorf(codes.ResourceExhausted, "too many new streams: at most %g a second (--stream-rate); back off and retry", l.cfg.StreamRate)
}

// admitRelayed admits a stream another replica relayed here under the
// relay budget: MaxRelayedStreams, then RelayStreamRate (waiting up to
// MaxWait), or returns the RESOURCE_EXHAUSTED to end it with. A replica
// (or a host that can pass for one) thus cannot open streams here without
// bound.
func (l *Limits) admitRelayed(ctx context.Context) (release Release, err error) {
	n := l.relayOpen.Add(1)
	if max := l.cfg.MaxRelayedStreams; max > 0 && n > int64(max) {
		l.relayOpen.Add(-1)
		l.hits.WithLabelValues(LimitMaxRelayedStreams).Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "too many relayed streams: at most %d (--max-relayed-streams)", max)
	}
	if l.relayLimiter != nil {
		if _, err := l.relayLimiter.take(ctx, l.clientKey(ctx), l.cfg.MaxWait); err != nil {
			l.relayOpen.Add(-1)
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			l.hits.WithLabelValues(LimitRelayStreamRate).Inc()
			return nil, status.Errorf(codes.ResourceExhausted, "too many new relayed streams: at most %g a second (--relay-stream-rate); back off and retry", l.cfg.RelayStreamRate)
		}
	}
	l.relayAdmitted.Inc()
	return func(refused bool) {
		l.relayOpen.Add(-1)
		l.refund(l.relayLimiter, refused)
	}, nil
}

// PanicError is a panic recovered in a goroutine of a stream other than
// its handler's (such as its receive goroutine), handed to the handler as
// an error; the recovery interceptor treats it as a panic of the handler.
type PanicError struct {
	Value any
	Stack []byte
}

// Recovered returns the PanicError of v, recover()'s value, with the
// current stack: call it in the deferred function that recovered.
func Recovered(v any) *PanicError { return &PanicError{Value: v, Stack: debug.Stack()} }

func (p *PanicError) Error() string { return fmt.Sprintf("panic: %v", p.Value) }

// internal is what a caller whose handler panicked gets: no detail of
// the server's.
var internal = status.Error(codes.Internal, "internal error (the replica recovered from a panic; see its log)")

// recovered logs and counts the panic of p, and returns INTERNAL.
func (l *Limits) recovered(method string, p *PanicError) error {
	l.panics.Inc()
	l.log.Error("recovered from a panic in a gRPC handler", "method", method, "panic", fmt.Sprint(p.Value), "stack", string(p.Stack))
	return internal
}

// Recover turns a panic of a stream handler's goroutine, or a PanicError
// it returned, into INTERNAL for that caller alone: logged with its stack
// at Error and counted in legation_panics_total. A stream interceptor
// defers it first, around the rest and the handler: defer
// l.Recover(method, &err), err being its named result.
func (l *Limits) Recover(method string, err *error) {
	if v := recover(); v != nil {
		*err = l.recovered(method, Recovered(v))
		return
	}
	if p, ok := errors.AsType[*PanicError](*err); ok {
		*err = l.recovered(method, p)
	}
}

// RecoverUnary is Recover's interceptor for unary calls.
func (l *Limits) RecoverUnary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if v := recover(); v != nil {
				resp, err = nil, l.recovered(info.FullMethod, Recovered(v))
			}
		}()
		return handler(ctx, req)
	}
}
