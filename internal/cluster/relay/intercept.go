package relay

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/xds/wire"
)

// StreamInterceptor returns the interceptor that relays xDS streams: ADS
// and the per-type SotW and delta services, and LRS streams (whose first
// LoadStatsRequest names the node). Other methods (CSDS, health, the
// unary Fetch methods) pass through untouched. The gRPC
// server must use wire.Codec (grpcapi.ServerOptions), which receives a
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
		return r.refuse(ctx, marked)
	}
	first, err := r.receiveFirst(ss, marked)
	if err != nil {
		return err
	}
	if first == nil {
		// Closed before any request: the handler sees it so.
		return handler(srv, ss)
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
		return r.refuse(ctx, marked)
	}
	// Per-stream events at Debug; the attributes cost, so only if on.
	var debug *slog.Logger // nil unless Debug is on
	if r.log.Enabled(ctx, slog.LevelDebug) {
		debug = r.log.With("stream", e.id, "node", nodeID, "method", method)
	}
	if doRelay {
		if done, err := r.relayAway(sctx, ss, e, first, name, addr, debug); done {
			return endErr(sctx, err)
		}
	}
	if debug != nil {
		debug.Debug("serving locally", "relayed_by", relayedBy)
	}
	err = handler(srv, &replayStream{ServerStream: ss, ctx: sctx, first: first.Bytes})
	return endErr(sctx, err)
}

// receiveFirst reads the stream's first request; nil and no error when
// the client closed the stream before any. A stream relayed here
// (marked) is first told that it got here.
func (r *Relay) receiveFirst(ss grpc.ServerStream, marked bool) (*wire.Frame, error) {
	if marked {
		// Tell the relaying replica at once that its stream got here: the
		// first response may be long in coming (promise 4: maybe never).
		if err := ss.SendHeader(metadata.Pairs(ServedByKey, r.cfg.Self)); err != nil {
			return nil, err
		}
	}
	first := new(wire.Frame)
	if err := ss.RecvMsg(first); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	return first, nil
}

// refuse refuses a stream that arrives during a drain, after calling
// Config.Drained for it unless another replica relayed it here.
func (r *Relay) refuse(ctx context.Context, marked bool) error {
	if !marked {
		r.drained(ctx)
	}
	return errDraining
}

// relayAway relays e's stream to its home, name at addr, then, while a
// home does not accept it, to the next replica on the ring (Config.Next),
// trying maxRelayTries replicas at most. done false means none accepted
// it and it is to be served here; with done true, err is what it ends
// with. debug, if not nil, gets the stream's events at Debug.
func (r *Relay) relayAway(ctx context.Context, ss grpc.ServerStream, e *entry, first *wire.Frame, name, addr string, debug *slog.Logger) (done bool, err error) {
	var tried []string
	for {
		done, err := r.relay(ctx, ss, e.method, first, addr)
		if done {
			if debug != nil {
				debug.Debug("relayed stream ended", "home", name, "addr", addr, "err", err)
			}
			return true, err
		}
		e.servedBy.Store(Local)
		if errors.Is(err, errClosed) {
			return false, nil
		}
		r.metrics.fallbacks.Inc()
		r.warn("home replica unreachable; trying the next one on the ring", "home", name, "addr", addr, "err", err)
		if debug != nil {
			debug.Debug("relay failed", "home", name, "addr", addr, "err", err)
		}
		tried = append(tried, name)
		if r.cfg.Next == nil || len(tried) >= maxRelayTries {
			return false, nil
		}
		var self bool
		name, addr, self = r.cfg.Next(e.nodeID, tried)
		if self || name == r.cfg.Self || addr == "" || slices.Contains(tried, name) {
			return false, nil
		}
		e.servedBy.Store(name)
	}
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
