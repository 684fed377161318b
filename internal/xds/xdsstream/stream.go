package xdsstream

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/lease"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/rollout"
	"github.com/legation-io/legation/internal/state/scope"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/state/view"
	"github.com/legation-io/legation/internal/xds/limits"
	"github.com/legation-io/legation/internal/xds/wire"
)

// Request is what the core reads of a request, SotW or delta.
type Request interface {
	GetNode() *corev3.Node
	GetTypeUrl() string
}

// Rules are one protocol's rules for one stream: what a request means and
// what a flush sends. The core calls every method from the stream's one
// goroutine, never concurrently, and none may block but on sending.
type Rules[R Request] interface {
	// Handle takes request r, of type t, into the stream's state; the
	// stream is at the latest snapshot and its node is known. Responses
	// go out in Flush. An error ends the stream with it.
	Handle(t *resource.Type, r R) error
	// Changed is told of each change of a newer snapshot that the
	// stream's node can see (its scope is the default one or the node's
	// group), in revision order, before Stream.Snap moves on.
	Changed(c view.EntryChange)
	// Flush sends what is due, after every request handled and every move
	// to a newer snapshot. An error ends the stream.
	Flush() error
	// Holds reports whether the client still holds the TTL'd resource h
	// that it was sent under key (the TTL bookkeeping drops it if not).
	Holds(t *resource.Type, key string, h TTLHeld) bool
}

// Stream is one xDS stream's state that does not depend on its protocol.
// It is owned by the goroutine running Serve: the protocol's Rules may
// read and use it; only Status may be called from other goroutines.
type Stream[T Reporter] struct {
	core *Core[T]
	gs   grpc.ServerStream

	// ID numbers the streams of a server.
	ID uint64
	// Ctx ends with the stream.
	Ctx context.Context
	// Log carries the stream's id and protocol, then its node and group.
	Log *slog.Logger
	// Fixed is the type of a per-type service; nil on ADS.
	Fixed *resource.Type
	// Node is the Node of the stream's first request (empty if it had
	// none), Group the node's group, and Chain the scopes it sees: its
	// group's and the default, with the canary overlays of the rollouts
	// that select it (Config.Rollouts).
	Node  *corev3.Node
	Group string
	Chain scope.Chain
	// rollouts is the set of running rollouts Chain was made from; nil
	// without Config.Rollouts or before the first request. rolloutsAt is
	// the snapshot OverlaysAt it is the set at; held, while not nil, is
	// closed when the set at Snap's OverlaysAt may be known: till then
	// the stream does not flush. latest is Config.Rollouts' Current when
	// the stream last looked, whose Changed wakes it.
	rollouts   *rollout.Set
	rolloutsAt int64
	held       <-chan struct{}
	latest     *rollout.Set
	// Snap is the snapshot the stream's state is at.
	Snap *view.Snapshot
	// TTLOn: the client reads TTLs on the wire and leases are tracked
	// (promise 8). Otherwise TTL'd resources go out plain and are never
	// heartbeated.
	TTLOn bool

	// changed and holds are the Rules' Changed and Holds.
	changed func(view.EntryChange)
	holds   func(t *resource.Type, key string, h TTLHeld) bool
	nonces  uint64
	// recheck is closed when the Authorizer's decision on the stream's
	// node may have changed; nil: nothing to wait for.
	recheck <-chan struct{}
	// interest wakes the stream when a change it can see is published
	// (its group's scope or the default one, a type it asked for); made
	// with the first request, which names the node. Nil before, and with
	// a Source that keeps none: then every snapshot wakes the stream.
	interest *view.Interest
	// sender sends the stream's responses, each bounded by SendTimeout;
	// made by the first send.
	sender *Sender
	// secretsOK: the Authorizer allowed the stream secrets.
	secretsOK bool
	// subscribed is what the stream's subscriptions cost, per type and
	// in all (ChargeNames), against MaxSubscribedBytes.
	subscribed subscriptionCost
	// keys: the Authorizer's decision on resources carrying an inline
	// private key (KeysAllowed), asked once.
	keys keyDecision
	// notice is the lease-extension notice the stream waits on, from its
	// first TTL'd resource on; nil before.
	notice   *lease.Notice
	ttl      map[*resource.Type]*ttlSet
	ttlCount int // the stream's share of Metrics.TTLResources
	// adv is the snapshot Advance is telling the rules of (its revision
	// and stamps, unix nanoseconds), for Touch; zero outside Advance.
	adv stamp

	status statusBox[T]
}

// Serve serves one stream until it ends: of type fixed for a per-type
// service, or of any type (fixed nil) for ADS. T is the request message
// type; rules makes the protocol's rules for the stream. It blocks; a
// gRPC service method calls it. It returns nil when the client ends the
// stream, else the status the stream ends with.
func Serve[Q any, R interface {
	*Q
	Request
}, T Reporter](c *Core[T], gs grpc.ServerStream, fixed *resource.Type, rules func(*Stream[T]) Rules[R]) error {
	snap, err := c.Snapshot()
	if err != nil {
		return err
	}
	s := newStream(c, gs, fixed, snap)
	r := rules(s)
	s.changed, s.holds = r.Changed, r.Holds
	remove := c.streams.Add(s.ID, s)
	c.statusGen.Add(1) // opened; closed in close
	defer s.close(remove)
	// One receive goroutine feeds the loop, the only sender.
	return serve(s, r, Receive[Q](s.Ctx, gs.RecvMsg))
}

// newStream is the state of a stream of type fixed (nil on ADS) opened on
// gs, at snap.
func newStream[T Reporter](c *Core[T], gs grpc.ServerStream, fixed *resource.Type, snap *view.Snapshot) *Stream[T] {
	name := c.proto.Name + "-ads"
	if fixed != nil {
		name = c.proto.Name + "-" + fixed.Name
	}
	s := &Stream[T]{core: c, gs: gs, ID: c.nextID.Add(1), Ctx: gs.Context(), Fixed: fixed, Snap: snap}
	s.Log = c.Config.Logger.With("stream", s.ID, "protocol", name)
	s.status.stat = Status[T]{ID: s.ID, Protocol: name, ConnectedAt: time.Now().UTC()}
	s.status.gen = &c.statusGen
	return s
}

// close undoes what Serve set up for the stream once it ends: its TTL'd
// resources leave the metric, what its subscriptions cost leaves its
// connection's account, its interest is closed, the status
// generation counts it closed, and remove takes it out of the registry.
func (s *Stream[T]) close(remove func()) {
	s.core.Metrics.TTLResources.Sub(float64(s.ttlCount))
	s.releaseNames()
	if s.interest != nil {
		s.interest.Close()
	}
	s.core.statusGen.Add(1)
	remove()
}

// serve runs the stream's loop on the requests of reqc until the stream
// ends, turn after turn.
func serve[Q any, R interface {
	*Q
	Request
}, T Reporter](s *Stream[T], r Rules[R], reqc <-chan Received[Q]) error {
	// A client that opens a stream and sends nothing holds it for
	// nothing: it gets FirstRequestTimeout.
	var firstc <-chan time.Time
	if d, ok := s.core.Config.FirstRequestTimeout.Limit(); ok {
		t := time.NewTimer(d)
		defer t.Stop()
		firstc = t.C
	}
	for {
		end, err := turn(s, r, reqc, &firstc)
		if end || err != nil {
			return err
		}
	}
}

// turn waits for what the stream has to do and does it, then flushes:
// the requests received (the latest answered), a newer snapshot to
// advance to, leases extended, the Authorizer's rules changed. end is
// true when the stream ends, with err nil when the client ended it. Each
// of those counts the turn in Config.Busy until its flush is done: a
// stream does no work outside a turn counted there. The first request
// stops firstc, the FirstRequestTimeout's channel.
func turn[Q any, R interface {
	*Q
	Request
}, T Reporter](s *Stream[T], r Rules[R], reqc <-chan Received[Q], firstc *<-chan time.Time) (end bool, err error) {
	c := s.core
	var extended <-chan struct{}
	if s.notice != nil {
		extended = s.notice.Done()
	}
	busy := false // counted in Config.Busy
	defer func() {
		if busy {
			c.Config.Busy.Leave()
		}
	}()
	select {
	case q := <-reqc:
		busy = enterBusy(c.Config.Busy)
		*firstc = nil
		if end, err := handleQueued(s, r, q, reqc); end {
			return true, err
		}
	case <-s.wake():
		busy = enterBusy(c.Config.Busy)
		s.Advance()
	case <-extended:
		busy = enterBusy(c.Config.Busy)
		s.leasesExtended()
	case <-s.rolloutsChanged():
		busy = enterBusy(c.Config.Busy)
		s.latest = c.Config.Rollouts.Current()
		s.Advance()
	case <-s.held:
		busy = enterBusy(c.Config.Busy)
		s.Advance()
	case <-s.recheck:
		busy = enterBusy(c.Config.Busy)
		// The rules changed: a stream whose client may no longer
		// claim its node ends (docs/concepts/design.md, "Security").
		if err := s.authorize(s.Node, s.Group); err != nil {
			return true, err
		}
	case <-*firstc:
		c.Metrics.LimitHits.WithLabelValues(LimitFirstRequest).Inc()
		return true, status.Errorf(codes.DeadlineExceeded, "no request within %s of the stream's start (--first-request-timeout)", c.Config.FirstRequestTimeout)
	case <-s.Ctx.Done():
		return true, nil
	}
	if !s.syncRollouts() {
		return false, nil // held until the set at the snapshot is known
	}
	return false, r.Flush()
}

// handleQueued handles received request q, then those queued behind it,
// so that the flush answers the latest. end is true when the stream ends:
// on a receive error (err nil when the client ended the stream: see
// EndErr), or with the error of a request.
func handleQueued[Q any, R interface {
	*Q
	Request
}, T Reporter](s *Stream[T], r Rules[R], q Received[Q], reqc <-chan Received[Q]) (end bool, err error) {
	for {
		if q.Err != nil {
			return true, EndErr(q.Err)
		}
		if err := handle(s, r, R(q.Msg)); err != nil {
			return true, err
		}
		select {
		case q = <-reqc:
		default:
			return false, nil
		}
	}
}

// enterBusy is b.Enter, false for a nil b.
func enterBusy(b Busy) bool { return b != nil && b.Enter() }

// handle takes one request: its type, the node on the first one (which
// the client must be allowed to claim), then the protocol's rules at the
// latest snapshot.
func handle[R Request, T Reporter](s *Stream[T], rules Rules[R], r R) error {
	t, err := s.typeOf(r.GetTypeUrl())
	if err != nil {
		s.core.Metrics.BadRequests.Inc()
		return err
	}
	if err := s.core.CheckNode(r.GetNode()); err != nil {
		return err
	}
	if s.Node == nil {
		s.setNode(r.GetNode())
		s.interest = s.core.Config.Source.Interest(s.Group, limits.Conn(s.Ctx))
		if err := s.authorize(s.Node, s.Group); err != nil {
			return err
		}
	} else if n := r.GetNode(); n != nil && (n.GetId() != s.Node.GetId() || s.core.Config.GroupBy(n) != s.Group) {
		// The stream keeps its first node; a client naming another one
		// later must be allowed that one too, or the stream ends.
		if err := s.authorize(n, s.core.Config.GroupBy(n)); err != nil {
			return err
		}
	}
	if t == resource.Secret && !s.secretsOK {
		if err := s.secrets(); err != nil {
			return err
		}
	}
	if s.interest != nil {
		s.interest.Add(t) // before Advance: a change after it wakes the stream
	}
	s.Advance()
	return rules.Handle(t, r)
}

// setNode takes the stream's node from its first request: a client sends
// it only there (the protocol's rule), and it does not change.
func (s *Stream[T]) setNode(n *corev3.Node) {
	if n == nil {
		n = &corev3.Node{}
	}
	s.Node = n
	s.Group = s.core.Config.GroupBy(n)
	s.Chain = scope.Of(s.Group)
	if s.core.Config.Rollouts != nil {
		// The latest set until the first flush finds the one at the
		// stream's snapshot (syncRollouts).
		s.latest = s.core.Config.Rollouts.Current()
		s.rollouts, s.rolloutsAt = s.latest, -1
		s.Chain = s.rollouts.Chain(n.GetId(), s.Group)
	}
	s.TTLOn = s.core.Config.Leases != nil && s.core.proto.ReadsTTL(n)
	s.Log = s.Log.With("node", n.GetId(), "group", s.Group)
	s.status.setNode(n.GetId(), s.Group)
}

// typeOf is the resource type a request is for.
func (s *Stream[T]) typeOf(u string) (*resource.Type, error) {
	if s.Fixed != nil {
		if u != "" && u != s.Fixed.URL {
			return nil, status.Errorf(codes.InvalidArgument, "type_url %q on the %s %s service, which serves %s", u, s.core.proto.Title, s.Fixed.Name, s.Fixed.URL)
		}
		return s.Fixed, nil
	}
	if u == "" {
		return nil, status.Errorf(codes.InvalidArgument, "a %s request on ADS needs a type_url", s.core.proto.Title)
	}
	t, ok := resource.ByURL(u)
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "unknown type_url %q", u)
	}
	if err := s.core.proto.Serves(t); err != nil {
		return nil, err
	}
	return t, nil
}

// wake returns the channel that says the stream has something to
// advance to: its interest's, else (no interest yet, or none kept by the
// Source) the next snapshot's.
func (s *Stream[T]) wake() <-chan struct{} {
	if s.interest != nil {
		return s.interest.Wake()
	}
	return s.Snap.Done()
}

// Advance moves the stream to the latest snapshot, telling the rules of
// every change on the way that the node can see, one snapshot after the
// other so that none is missed.
func (s *Stream[T]) Advance() {
	for x := s.Snap.Next(); x != nil; x = x.Next() {
		if len(x.Changes) > 0 && !x.Seen.IsZero() {
			committed := x.Committed
			if committed.IsZero() {
				committed = x.Seen
			}
			s.adv = stamp{rev: x.Revision, seen: x.Seen.UnixNano(), committed: committed.UnixNano()}
		}
		for _, c := range x.Changes {
			if c.Scope == store.DefaultScope || c.Scope == s.Group || (s.Chain.Layered() && s.Chain.Has(c.Scope)) {
				s.changed(c)
			}
		}
		s.Snap = x
	}
	s.adv = stamp{}
	if s.interest != nil {
		s.interest.Advanced(s.Snap.Revision)
	}
}

// Send sends one response of type t carrying n resources: the body named
// key in the server's shared cache at the stream's snapshot, built by
// build the first time any stream asks for it (key "" encodes a body of
// this stream's own), with the stream's next nonce. It returns the nonce.
// With rec (the type's record; nil for a heartbeat, which carries no
// change), the response is recorded sent at version, and the changes
// touched since the last send (Touch) are counted pushed: the push-time
// histogram, and the convergence one when the client ACKs (Ack).
func (s *Stream[T]) Send(t *resource.Type, rec *Record, version, key string, build func() proto.Message, n int) (string, error) {
	c := s.core
	var body []byte
	var err error
	if key != "" {
		body, err = c.Cache.Get(s.Snap.Revision, key, build)
	} else {
		body, err = c.Cache.Encode(build())
	}
	if err != nil {
		return "", status.Errorf(codes.Internal, "encode %s response: %v", c.proto.Title, err)
	}
	s.nonces++
	nonce := strconv.FormatUint(s.nonces, 10)
	w := wire.NewResponse(body, nonce)
	if err := s.sendMsg(w); err != nil {
		return "", err
	}
	s.traceSent()
	tm := c.types[t.Order]
	tm.responses.Inc()
	tm.resources.Add(float64(n))
	size := float64(w.Size())
	c.Metrics.BytesSent.Add(size)
	tm.size.Observe(size)
	if rec != nil {
		rec.Sent(version, nonce)
		if p := rec.pending; p.rev != 0 {
			tm.pushes.sent(p.rev, p.seen, time.Now().UnixNano(), tm.push)
			if rec.carried == 0 {
				rec.carried = p.committed
			}
			rec.pending = stamp{}
		}
	}
	return nonce, nil
}

// Touch records that a change of the snapshot being advanced to concerns
// what the client holds or asks of rec's type: the next response of the
// type carries it (or, if the protocol finds nothing to send, Unchanged
// forgets it). The protocol's Changed calls it; a no-op elsewhere.
func (s *Stream[T]) Touch(rec *Record) {
	if rec.pending.rev == 0 && s.adv.rev != 0 {
		rec.pending = s.adv
	}
}

// Ack records that the client ACKed version of type t: it is the version
// ACKed; the time from the commit of the oldest change it was sent since
// its last ACK to now goes to the convergence histogram; and once the
// last response sent is ACKed, a NACK of an earlier one is forgotten and
// the PushTracer, if any, is told.
func (s *Stream[T]) Ack(t *resource.Type, rec *Record, version string) {
	rec.Acked = version
	if rec.carried != 0 {
		s.core.types[t.Order].convergence.Observe(seconds(time.Now().UnixNano() - rec.carried))
		rec.carried = 0
	}
	if version == rec.Version {
		rec.ClearNack()
		s.traceAnswer(t, rec, false)
	}
}

// sendMsg sends m, bounded by SendTimeout (see Sender): a stream
// whose client takes nothing in time ends. Until then it holds only the
// snapshot it is sending (and, linked from it, those published since):
// the timeout bounds that memory.
func (s *Stream[T]) sendMsg(m any) error {
	if s.sender == nil {
		s.sender = NewSender(s.core.Config.SendTimeout)
	}
	timedOut, err := s.sender.Send(s.gs.SendMsg, m)
	if timedOut {
		d, _ := s.core.Config.SendTimeout.Limit()
		s.core.Metrics.LimitHits.WithLabelValues(LimitSendTimeout).Inc()
		if ok, held := s.core.timeoutLog.allow(time.Now()); ok {
			s.Log.Info("client took no response in time: stream closed", "send_timeout", d, "not_logged_since_last", held)
		}
		return SendTimeoutError(d)
	}
	return err
}

// SendTimeoutError is the status of a stream whose client took no
// response for d (--send-timeout).
func SendTimeoutError(d time.Duration) error {
	return status.Errorf(codes.Unavailable, "the client took no response for %s (--send-timeout): stream closed, reconnect", d)
}

// CatchUp waits, bounded, for the view to reach rev, a version the client
// presents, then moves the stream to the latest snapshot (promise 3).
func (s *Stream[T]) CatchUp(rev int64) error {
	if rev <= s.Snap.Revision {
		return nil
	}
	if _, err := s.core.CatchUp(s.Ctx, rev); err != nil {
		return err
	}
	s.Advance()
	return nil
}

// Metrics are the server's common metrics.
func (s *Stream[T]) Metrics() *Metrics { return s.core.Metrics }

// SetStatus records the status of type t that Status reports.
func (s *Stream[T]) SetStatus(t *resource.Type, v T) {
	ttl, tracked := s.ttlStatus(t)
	s.status.set(t, v, ttl, tracked)
}

// Status returns a copy of the stream's status. It may be called from any
// goroutine.
func (s *Stream[T]) Status() Status[T] {
	var next func(int64) time.Time
	if l := s.core.Config.Leases; l != nil {
		next = l.NextCheck
	}
	return s.status.get(next)
}

// Record is what a stream sent of one type and what the client answered
// of it.
type Record struct {
	// Version and Nonce are those of the last response sent (SotW
	// version_info, delta system_version_info).
	Version string
	Nonce   string
	// Acked is the version of the last response ACKed.
	Acked string
	// Nacked is the version of the response the client rejected while no
	// later one is ACKed, "" when none; NackMsg is the client's message.
	Nacked  string
	NackMsg string
	// nackNonce is the nonce of the last response NACKed.
	nackNonce string
	// pending stamps the oldest change touched (Touch) and not sent yet;
	// carried is the commit stamp (unix nanoseconds) of the oldest change
	// sent and not ACKed. Zero: none.
	pending stamp
	carried int64
	// answered is the nonce of the last response whose ACK or NACK the
	// PushTracer was told of.
	answered string
}

// stamp is a snapshot's revision, and when the view received it and its
// oldest change was committed (view.Snapshot's Seen and Committed), in
// unix nanoseconds.
type stamp struct {
	rev, seen, committed int64
}

// Unchanged forgets the changes touched since the last send: the
// protocol found nothing of them to send (the client holds it already).
func (r *Record) Unchanged() { r.pending = stamp{} }

// Sent records a response sent.
func (r *Record) Sent(version, nonce string) { r.Version, r.Nonce = version, nonce }

// ClearNack forgets a NACK, once a later response is ACKed.
func (r *Record) ClearNack() { r.Nacked, r.NackMsg = "", "" }

// Nack records that the client rejected the last response of type t with
// msg. Each rejected response is counted and logged once, however often
// the client repeats its NACK.
// The message is kept and logged cut to MaxNackMessage; a NACK is logged
// once per (type, version, message) per server and NackLogWindow, its
// repeats by other streams counted in one line at the window's end.
func (s *Stream[T]) Nack(t *resource.Type, rec *Record, msg string) {
	c := s.core
	msg, cut := truncate(msg, c.Config.MaxNackMessage)
	if rec.nackNonce != rec.Nonce {
		c.Metrics.Nacks.WithLabelValues(t.Name).Inc()
		if cut {
			c.Metrics.LimitHits.WithLabelValues(LimitNackMessage).Inc()
		}
		if c.nacks.first(t.Name, rec.Version, msg) {
			s.Log.Warn("client rejected a response (NACK)", "type", t.Name, "version", rec.Version, "error", msg)
		}
	}
	rec.Nacked, rec.NackMsg, rec.nackNonce = rec.Version, msg, rec.Nonce
	rec.carried = 0 // a rejected change does not converge
	s.traceAnswer(t, rec, true)
}

// StaleNonce counts a request of type t answering nonce, which is not the
// response it should answer: it is ignored as an ACK or NACK.
func (s *Stream[T]) StaleNonce(t *resource.Type, nonce string) {
	s.core.Metrics.StaleNonces.Inc()
	s.Log.Debug("ignoring a request with a stale nonce", "type", t.Name, "nonce", nonce)
}
