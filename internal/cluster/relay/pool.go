package relay

import (
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
)

// The HTTP/2 flow-control windows of a connection to a home: 64 KiB per
// relayed stream (HTTP/2's default), 16 MiB for all of them together.
const (
	relayStreamWindow = 64 << 10
	relayConnWindow   = 16 << 20
)

// pooledConn is a connection to one home address and the streams using it.
type pooledConn struct {
	cc   *grpc.ClientConn
	refs int         // relay streams using cc
	gen  uint64      // bumped when taken: an idle timer of an older gen does nothing
	idle *time.Timer // closes cc once unused for ConnIdleTimeout
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
			// Static windows: what the home sends a relayed stream
			// waits here, unread, only while its client is slow, and
			// then at most a stream window of it (grpc-go's default,
			// sized by probing the bandwidth, grows each window to
			// 16 MiB). The connection carries every stream relayed to
			// that home, hence its window of many stream windows.
			grpc.WithInitialWindowSize(relayStreamWindow),
			grpc.WithInitialConnWindowSize(relayConnWindow),
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

// resetBackoff drops from the pool every connection that waits out a
// reconnection backoff (TRANSIENT_FAILURE), so that the next stream to
// that home dials afresh, at once. (grpc-go's
// ClientConn.ResetConnectBackoff would reset it in place, but in v1.85 it
// ranges over the connection's subchannels without the lock its balancer
// writes them under: a data race.) A dropped connection still carrying
// streams is closed by release when the last one ends.
func (r *Relay) resetBackoff() {
	r.mu.Lock()
	var closeNow []*grpc.ClientConn
	for addr, pc := range r.conns {
		if pc.cc.GetState() != connectivity.TransientFailure {
			continue
		}
		delete(r.conns, addr)
		if pc.idle != nil {
			pc.idle.Stop()
			pc.idle = nil
		}
		if pc.refs == 0 {
			closeNow = append(closeNow, pc.cc)
		}
	}
	r.mu.Unlock()
	for _, cc := range closeNow {
		cc.Close() // only ErrClientConnClosing, impossible here
	}
}
