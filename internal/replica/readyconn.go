package replica

import (
	"io"
	"net"
	"syscall"

	"google.golang.org/grpc/mem"
)

// readyConn is a tracked TCP connection that gRPC reads without a buffer
// of its own. gRPC's HTTP/2 reader keeps a read buffer (32 KiB) for the
// life of each connection, unless the connection has a ReadOnReady
// method: then it waits for the socket to be readable, in the runtime's
// poller, and only then takes a buffer from its pool, which it returns
// once the bytes are handled. grpc-go finds that method on a
// *net.TCPConn by itself, but the tracker wraps the connection; readyConn
// gives the wrapper the method. An idle Envoy's connection then holds no
// read buffer at all: some 32 KiB less per connected Envoy.
type readyConn struct {
	*trackedConn
	raw syscall.RawConn
	rs  readState // the read in progress: a field, so ReadOnReady allocates nothing
	do  func(fd uintptr) bool
}

// readState is one ReadOnReady's request and result.
type readState struct {
	size int
	pool mem.BufferPool
	buf  *[]byte
	n    int
	err  error
}

// newReadyConn returns c as a readyConn, or nil when c is not a TCP
// connection (which gRPC then reads through a buffer of its own).
func newReadyConn(c *trackedConn) *readyConn {
	tcp, ok := c.Conn.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return nil
	}
	rc := &readyConn{trackedConn: c, raw: raw}
	rc.do = func(fd uintptr) bool {
		s := &rc.rs
		s.buf = s.pool.Get(s.size)
		s.n, s.err = syscall.Read(int(fd), *s.buf)
		if s.err != nil {
			s.pool.Put(s.buf)
			s.buf = nil
		}
		// EAGAIN: not readable after all; RawConn.Read waits and calls again.
		return s.err != syscall.EAGAIN
	}
	return rc
}

// ReadOnReady waits until the connection is readable, then reads up to
// size bytes into a buffer taken from pool, and returns the buffer (the
// caller puts it back) and the bytes read. It is the method gRPC's
// HTTP/2 reader looks for (see readyConn); one goroutine, that reader,
// calls it.
func (c *readyConn) ReadOnReady(size int, pool mem.BufferPool) (*[]byte, int, error) {
	c.rs = readState{size: size, pool: pool}
	err := c.raw.Read(c.do)
	s := c.rs
	c.rs = readState{}
	switch {
	case err != nil: // the connection closed, or its read deadline passed
		if s.buf != nil {
			pool.Put(s.buf)
		}
		return nil, 0, err
	case s.err != nil:
		return nil, 0, s.err
	case s.n == 0: // the peer closed its side
		pool.Put(s.buf)
		return nil, 0, io.EOF
	}
	return s.buf, s.n, nil
}
