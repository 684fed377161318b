package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/xds/limits"
	"github.com/legation-io/legation/internal/xds/wire"
	"github.com/legation-io/legation/internal/xds/xdsstream"
)

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
	// On the awake clock: a landing replica starved of CPU does not
	// take its own pause for the home's silence.
	opening := r.cfg.Clock.AfterFunc(r.cfg.ConnectTimeout, ocancel)
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
