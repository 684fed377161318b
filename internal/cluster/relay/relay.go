package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/xds/limits"
	"github.com/legation-io/legation/internal/xds/wire"
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

// Config configures a Relay.
type Config struct {
	// Self is this replica's name, sent in the marker of the streams it
	// relays. Required.
	Self string
	// Home returns the home replica of nodeID: its name, the address of
	// its gRPC server, and whether it is this replica. Nil: every stream
	// is served locally. It is called once per new stream, from that
	// stream's goroutine, so concurrently; it must not block (read an
	// atomically swapped ring).
	Home func(nodeID string) (name, addr string, self bool)
	// Next, if set, returns the home of nodeID once the replicas named in
	// unreachable are gone from the ring (the next one clockwise). A
	// stream whose home cannot be reached goes there, where it will be
	// once the home is declared dead, rather than being served here and
	// moved again then. Same rules as Home. Nil: served here.
	Next func(nodeID string, unreachable []string) (name, addr string, self bool)
	// TrustMarker, if set, reports whether the MarkerKey on the stream of
	// ctx may be trusted (its peer is a replica); a stream whose marker is
	// not trusted is treated as any client's. Nil: every marker is.
	TrustMarker func(ctx context.Context) bool
	// Forward, if set, returns metadata sent to the home with each stream
	// relayed: what the home needs to know of the client (its identity).
	// Its keys replace the client's own of the same names.
	Forward func(ctx context.Context) metadata.MD
	// SourceIP, if valid, is the address relay connections are made from:
	// this replica's advertised IP, the one the registry holds, which a
	// home in plaintext trusts the relay marker from. Where it cannot be
	// bound, the system picks. Zero: the system picks.
	SourceIP netip.Addr
	// DialOptions are appended to the options of the connections to home
	// replicas, after the defaults (insecure transport credentials, and
	// reconnection backoff capped at 5s so that a home that comes back is
	// used again soon): put TLS credentials here.
	DialOptions []grpc.DialOption
	// ConnectTimeout bounds how long opening a relay stream may wait for
	// the home to accept it; after it the stream is served locally. Zero:
	// 3s.
	ConnectTimeout time.Duration
	// ConnIdleTimeout is how long a connection to a home replica that
	// relays no stream is kept for the next one before it is closed. Zero:
	// 1m.
	ConnIdleTimeout time.Duration
	// SendTimeout bounds one message's send to the client of a relayed
	// stream (--send-timeout): a client that takes nothing for that long
	// (its flow-control window stays full) gets UNAVAILABLE, and the
	// home's leg is cancelled. Unset: 30s.
	SendTimeout limits.Bound[time.Duration]
	// Rate is how many streams per second Rebalance closes at most, and
	// Burst how many it may close at once. Set both, or neither for 50
	// and 10.
	Rate  float64
	Burst int
	// Drained, if set, is called with a stream's context when Drain or
	// Shed has closed the stream, or when the interceptor refused it
	// because of a drain, unless another replica relayed it here (its connection
	// carries other relayed streams, which must not all end at once):
	// the caller closes the stream's connection (its peer address is in
	// ctx), so that the client reconnects through the load balancer
	// instead of retrying on a connection to a replica that goes away. It
	// is called from Drain's goroutine or the stream's, concurrently, and
	// must not block.
	Drained func(ctx context.Context)
	// Logger gets relay failures (at Warn, at most one every few seconds)
	// and per-stream events (at Debug); nil discards.
	Logger *slog.Logger
	// Registerer gets the metrics (legation_relay_*); nil registers none.
	Registerer prometheus.Registerer
}

// DefaultConfig returns the defaults, without Self or Home.
func DefaultConfig() Config {
	return Config{
		ConnectTimeout:  3 * time.Second,              // a dial and one round trip, with room for a busy home
		ConnIdleTimeout: time.Minute,                  // spares a dial per stream when a home has few
		SendTimeout:     limits.Max(30 * time.Second), // as xdsstream's: a healthy client reads within a few RTTs
		Rate:            50,                           // 10,000 streams move in ~3 minutes
		Burst:           10,
	}
}

// Validate checks the config, with zero values standing for defaults.
func (c *Config) Validate() error {
	switch {
	case c.Self == "":
		return errors.New("relay: Self is required")
	case c.ConnectTimeout < 0:
		return fmt.Errorf("relay: ConnectTimeout %s is negative", c.ConnectTimeout)
	case c.ConnIdleTimeout < 0:
		return fmt.Errorf("relay: ConnIdleTimeout %s is negative", c.ConnIdleTimeout)
	case c.Rate < 0 || math.IsInf(c.Rate, 0) || math.IsNaN(c.Rate):
		return fmt.Errorf("relay: Rate %v is not a finite non-negative number", c.Rate)
	case c.Burst < 0:
		return fmt.Errorf("relay: Burst %d is negative", c.Burst)
	case c.Rate == 0 && c.Burst != 0, c.Rate != 0 && c.Burst == 0:
		return fmt.Errorf("relay: Rate %v and Burst %d: set both or neither", c.Rate, c.Burst)
	}
	return nil
}

func (c *Config) fill() {
	d := DefaultConfig()
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = d.ConnectTimeout
	}
	if c.ConnIdleTimeout == 0 {
		c.ConnIdleTimeout = d.ConnIdleTimeout
	}
	c.SendTimeout = c.SendTimeout.Or(d.SendTimeout)
	if c.Rate == 0 && c.Burst == 0 {
		c.Rate, c.Burst = d.Rate, d.Burst
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

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
	pacer    pacer // used by the running Rebalance only
	// draining is set by Drain: new streams are refused, Rebalance does
	// nothing.
	draining atomic.Bool

	lastWarn atomic.Int64 // unix nanoseconds of the last relay warning
}

// pooledConn is a connection to one home address and the streams using it.
type pooledConn struct {
	cc   *grpc.ClientConn
	refs int         // relay streams using cc
	gen  uint64      // bumped when taken: an idle timer of an older gen does nothing
	idle *time.Timer // closes cc once unused for ConnIdleTimeout
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
		pacer:   pacer{rate: cfg.Rate, burst: float64(cfg.Burst)},
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

// StreamInterceptor returns the interceptor that relays xDS streams: ADS
// and the per-type SotW and delta services, and LRS streams (whose first
// LoadStatsRequest names the node). Other methods (CSDS, health, the
// unary Fetch methods) pass through untouched. The gRPC
// server must use wire.Codec (ads.ServerOptions), which receives a
// message undecoded into a wire.Frame.
//
// For an xDS stream it reads the first request and decodes it: one that
// does not decode ends the stream with INVALID_ARGUMENT. The stream is
// served locally, by handler, with that request replayed as the first
// one the handler receives, when it carries MarkerKey (it was relayed
// here already), names no node, Home is nil, or Home says this replica
// (or gives no address). Otherwise it is relayed to the home: a client
// stream on the same method carrying MarkerKey and the client's metadata
// (but for gRPC's own and pseudo headers) sends the first request; then
// each direction is piped as it comes, one message in flight each way,
// so gRPC's flow control holds back whichever side is faster. The
// client's half-close is passed on; the home's end of the stream (its
// status, or OK) ends the client's; the client's cancellation cancels
// the home's leg.
//
// The stream falls back to being served locally (counted in
// legation_relay_fallbacks_total) when, and only when, the client is
// still there and the home did not accept the stream: the connection or
// the stream cannot be opened, the first request cannot be sent, or the
// stream ends, UNAVAILABLE, before the home's response headers arrive, or
// no headers arrive within ConnectTimeout. The home's interceptor sends
// its headers (ServedByKey) as soon as it gets a relayed stream, so a
// home that is up answers within one round trip, before its first
// response; nothing has reached the client by then, and the only request
// consumed is the first, which the local handler gets replayed. Once the
// home accepted the stream there is no fallback: its errors, UNAVAILABLE
// included, go to the client, which retries.
//
// When the interceptor returns, the goroutine piping client to home may
// still be blocked in the server stream's RecvMsg; gRPC ends it as the
// stream closes.
func (r *Relay) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		k, ok := r.methods[info.FullMethod]
		if !ok {
			return handler(srv, ss)
		}
		return r.intercept(srv, ss, info.FullMethod, k, handler)
	}
}

func (r *Relay) intercept(srv any, ss grpc.ServerStream, method string, k kind, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	relayedBy, marked := r.trustedMarker(ctx)
	if r.draining.Load() {
		if !marked {
			r.drained(ctx)
		}
		return errDraining
	}
	if marked {
		// Tell the relaying replica at once that its stream got here: the
		// first response may be long in coming (promise 4: maybe never).
		if err := ss.SendHeader(metadata.Pairs(ServedByKey, r.cfg.Self)); err != nil {
			return err
		}
	}
	first := new(wire.Frame)
	if err := ss.RecvMsg(first); err != nil {
		if errors.Is(err, io.EOF) {
			// Closed before any request: the handler sees it so.
			return handler(srv, ss)
		}
		return err
	}
	nodeID, err := nodeOf(first.Bytes, k)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "relay: the stream's first request does not decode: %v", err)
	}

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e := &entry{
		id: r.nextID.Add(1), ctx: sctx, cancel: cancel,
		nodeID: nodeID, method: method, relayedBy: relayedBy, started: time.Now(),
	}
	e.servedBy.Store(Local)
	var name, addr string
	doRelay := false
	if !marked && nodeID != "" && r.cfg.Home != nil {
		var self bool
		name, addr, self = r.cfg.Home(nodeID)
		doRelay = !self && name != r.cfg.Self && addr != ""
	}
	if doRelay {
		e.servedBy.Store(name)
	}
	defer r.streams.Add(e.id, e)()
	if r.draining.Load() {
		// Drain began after the check above and may have listed the
		// open streams before this one was added.
		if !marked {
			r.drained(ctx)
		}
		return errDraining
	}
	// Per-stream events at Debug; the attributes cost, so only if on.
	debug := r.log.Enabled(ctx, slog.LevelDebug)
	log := r.log
	if debug {
		log = log.With("stream", e.id, "node", nodeID, "method", method)
	}

	var tried []string
	for doRelay {
		done, err := r.relay(sctx, ss, method, first, addr)
		if done {
			if debug {
				log.Debug("relayed stream ended", "home", name, "addr", addr, "err", err)
			}
			return endErr(sctx, err)
		}
		if errors.Is(err, errClosed) {
			e.servedBy.Store(Local)
			break
		}
		r.metrics.fallbacks.Inc()
		r.warn("home replica unreachable; trying the next one on the ring", "home", name, "addr", addr, "err", err)
		if debug {
			log.Debug("relay failed", "home", name, "addr", addr, "err", err)
		}
		e.servedBy.Store(Local)
		tried = append(tried, name)
		doRelay = false
		if r.cfg.Next != nil && len(tried) < maxRelayTries {
			var self bool
			name, addr, self = r.cfg.Next(nodeID, tried)
			if doRelay = !self && name != r.cfg.Self && addr != "" && !slices.Contains(tried, name); doRelay {
				e.servedBy.Store(name)
			}
		}
	}
	if debug {
		log.Debug("serving locally", "relayed_by", relayedBy)
	}
	err = handler(srv, &replayStream{ServerStream: ss, ctx: sctx, first: first.Bytes})
	return endErr(sctx, err)
}

// maxRelayTries bounds the replicas a stream is relayed to before it is
// served here: its home, then the next ones on the ring.
const maxRelayTries = 2

// endErr is what a stream ends with: the status Rebalance, Drain or Shed
// closed it with, else err.
func endErr(ctx context.Context, err error) error {
	switch cause := context.Cause(ctx).(type) {
	case movedError:
		return cause.GRPCStatus().Err()
	case drainingError:
		return cause.GRPCStatus().Err()
	case shedError:
		return cause.GRPCStatus().Err()
	}
	return err
}

// marker returns the value of MarkerKey in ctx's incoming metadata, and
// whether it is there at all.
func marker(ctx context.Context) (string, bool) {
	v := metadata.ValueFromIncomingContext(ctx, MarkerKey)
	if len(v) == 0 {
		return "", false
	}
	return v[0], true
}

// trustedMarker returns the relay marker of the stream of ctx, and
// whether it carries one Config.TrustMarker trusts. Anyone may send the
// marker; only a replica's counts: another's is ignored (the stream is
// any client's) and counted in legation_relay_untrusted_markers_total.
func (r *Relay) trustedMarker(ctx context.Context) (string, bool) {
	relayedBy, marked := marker(ctx)
	if marked && r.cfg.TrustMarker != nil && !r.cfg.TrustMarker(ctx) {
		r.metrics.untrusted.Inc()
		return "", false
	}
	return relayedBy, marked
}

// outgoing is the metadata of a relay stream: the client's, but for
// what gRPC sets itself and this package's keys, then what Forward says
// of the client, and the marker.
func (r *Relay) outgoing(ctx context.Context) metadata.MD {
	in, _ := metadata.FromIncomingContext(ctx)
	var fwd metadata.MD
	if r.cfg.Forward != nil {
		fwd = r.cfg.Forward(ctx)
	}
	out := make(metadata.MD, len(in)+len(fwd)+1)
	for k, v := range in {
		switch {
		case strings.HasPrefix(k, ":"), strings.HasPrefix(k, "grpc-"),
			k == "content-type", k == "user-agent", k == "te",
			k == MarkerKey, k == ServedByKey, strings.HasPrefix(k, forwardedPrefix):
			continue
		}
		out[k] = v
	}
	for k, v := range fwd {
		out[k] = v
	}
	out[MarkerKey] = []string{r.cfg.Self}
	return out
}

var relayStreamDesc = grpc.StreamDesc{ClientStreams: true, ServerStreams: true}

// relay relays ss to the home at addr, first being the request already
// received. done false means the home did not accept the stream and
// nothing but first was consumed: the caller serves it locally; err then
// says why. With done true, err is what the stream ends with.
func (r *Relay) relay(ctx context.Context, ss grpc.ServerStream, method string, first *wire.Frame, addr string) (done bool, err error) {
	cc, release, err := r.conn(addr)
	if err != nil {
		return false, err
	}
	defer release()
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	opening := time.AfterFunc(r.cfg.ConnectTimeout, ocancel)
	// answered: the stream ended before the home's headers, and err is
	// its status (io.EOF for OK).
	answered := false
	cs, err := cc.NewStream(metadata.NewOutgoingContext(octx, r.outgoing(ctx)), &relayStreamDesc, method,
		grpc.ForceCodecV2(wire.Codec{}),
		// The home decided what to send; the client's limit is the
		// client's business.
		grpc.MaxCallRecvMsgSize(math.MaxInt32))
	var hdr metadata.MD
	if err == nil {
		// On io.EOF the stream has failed; Header returns nil and RecvMsg
		// the reason. Another error is local (the home got nothing).
		if err = cs.SendMsg(first); err == nil || errors.Is(err, io.EOF) {
			if hdr, _ = cs.Header(); hdr == nil {
				err, answered = cs.RecvMsg(new(wire.Frame)), true
			}
		}
	}
	timedOut := !opening.Stop()
	switch {
	case ctx.Err() != nil:
		return true, ctx.Err() // the client went away, or Rebalance closed it
	case timedOut:
		return false, fmt.Errorf("relay: %s accepted no stream in %s", addr, r.cfg.ConnectTimeout)
	case hdr != nil:
		// Accepted: from now on the home's errors are the client's.
		return true, r.pipe(ctx, ss, cs, ocancel)
	case !answered, status.Code(err) == codes.Unavailable:
		return false, err
	case errors.Is(err, io.EOF):
		return true, nil // the home ended the stream at once, OK
	default:
		return true, err // the home's answer, such as UNIMPLEMENTED
	}
}

// pipe copies messages both ways until either side ends the stream and
// returns the status the client gets. The client-to-home direction runs
// in its own goroutine, which ends when ss does (gRPC ends ss's RecvMsg
// once the handler returns) or the home's leg is cancelled.
func (r *Relay) pipe(ctx context.Context, ss grpc.ServerStream, cs grpc.ClientStream, ocancel context.CancelFunc) error {
	r.metrics.relayed.Inc()
	defer r.metrics.relayed.Dec()
	upErr := make(chan error, 1) // why the client's side failed; one send at most: never blocks
	go func() {
		defer func() {
			// No interceptor sees this goroutine: hand a panic to the
			// handler, whose recovery interceptor answers it (INTERNAL).
			if v := recover(); v != nil {
				upErr <- limits.Recovered(v)
				ocancel()
			}
		}()
		for {
			f := new(wire.Frame)
			if err := ss.RecvMsg(f); err != nil {
				if errors.Is(err, io.EOF) {
					cs.CloseSend() //nolint:errcheck // always nil
					return
				}
				upErr <- err
				ocancel()
				return
			}
			if err := cs.SendMsg(f); err != nil {
				return // io.EOF: the home's leg ended; RecvMsg below says how
			}
		}
	}()
	sender := xdsstream.NewSender(r.cfg.SendTimeout)
	for {
		f := new(wire.Frame)
		if err := cs.RecvMsg(f); err != nil {
			select {
			case err := <-upErr:
				return err
			default:
			}
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err // the home's status, as it is
		}
		if err := r.send(sender, ss, f); err != nil {
			return err
		}
	}
}

// send sends f to the client with sender, bounded by SendTimeout (see
// xdsstream.Sender): a client that takes nothing in time ends the
// stream with UNAVAILABLE; the handler returning it cancels the home's
// leg and resets the client's stream, which ends the blocked send.
func (r *Relay) send(sender *xdsstream.Sender, ss grpc.ServerStream, f *wire.Frame) error {
	timedOut, err := sender.Send(ss.SendMsg, f)
	if timedOut {
		r.metrics.sendTimeouts.Inc()
		d, _ := r.cfg.SendTimeout.Limit()
		r.cfg.Logger.Debug("relayed stream's client took no message in time: stream closed", "send_timeout", d)
		return xdsstream.SendTimeoutError(d)
	}
	return err
}

// conn returns the pooled connection to addr, making one if needed, and
// the func that gives it back.
func (r *Relay) conn(addr string) (*grpc.ClientConn, func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, nil, errClosed
	}
	pc := r.conns[addr]
	if pc == nil {
		// NewClient does no I/O: it connects on first use.
		bo := backoff.DefaultConfig
		bo.MaxDelay = 5 * time.Second
		opts := []grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: r.cfg.ConnectTimeout}),
		}
		if r.cfg.SourceIP.IsValid() {
			opts = append(opts, grpc.WithContextDialer(sourceDialer(r.cfg.SourceIP)))
		}
		opts = append(opts, r.cfg.DialOptions...)
		cc, err := grpc.NewClient(addr, opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("relay: client for %s: %w", addr, err)
		}
		pc = &pooledConn{cc: cc}
		r.conns[addr] = pc
	}
	if pc.idle != nil {
		pc.idle.Stop()
		pc.idle = nil
	}
	pc.refs++
	pc.gen++
	return pc.cc, func() { r.release(addr, pc) }, nil
}

// release gives back a connection conn handed out; the last one out
// starts its idle timer, or closes it if it was dropped from the pool.
func (r *Relay) release(addr string, pc *pooledConn) {
	r.mu.Lock()
	pc.refs--
	if pc.refs > 0 {
		r.mu.Unlock()
		return
	}
	if r.conns[addr] != pc {
		closed := r.closed
		r.mu.Unlock()
		if !closed {
			// Dropped from the pool (resetBackoff): its last stream ended.
			pc.cc.Close() // only ErrClientConnClosing, impossible here
		}
		return
	}
	defer r.mu.Unlock()
	gen := pc.gen
	pc.idle = time.AfterFunc(r.cfg.ConnIdleTimeout, func() {
		r.mu.Lock()
		if r.conns[addr] != pc || pc.gen != gen {
			r.mu.Unlock()
			return // taken again, or closed by Close
		}
		delete(r.conns, addr)
		r.mu.Unlock()
		pc.cc.Close() // only ErrClientConnClosing, impossible here
	})
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

// replayStream is a server stream whose first RecvMsg returns the request
// the interceptor read, and whose context Rebalance can cancel.
type replayStream struct {
	grpc.ServerStream
	ctx   context.Context
	first []byte // nil once replayed
}

func (s *replayStream) Context() context.Context { return s.ctx }

// RecvMsg implements grpc.ServerStream. Like the stream it wraps, it must
// not be called from two goroutines at once.
func (s *replayStream) RecvMsg(m any) error {
	if s.first == nil {
		return s.ServerStream.RecvMsg(m)
	}
	b := s.first
	s.first = nil
	switch m := m.(type) {
	case *wire.Frame:
		m.Bytes = b
		return nil
	case proto.Message:
		if err := proto.Unmarshal(b, m); err != nil {
			return status.Errorf(codes.InvalidArgument, "relay: replaying the first request: %v", err)
		}
		return nil
	}
	return status.Errorf(codes.Internal, "relay: cannot replay the first request into a %T", m)
}
