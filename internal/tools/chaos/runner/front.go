package runner

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// front is what a chaos run's clients dial: a TCP forwarder that, per
// connection, dials the first of its targets that answers. Its targets
// are asked for at each connection (the replicas of the moment, its own
// first), so clients follow the cluster as a plain load balancer would
// make them: a killed or removed replica's clients come back through
// another one.
type front struct {
	l       net.Listener
	targets func() []string
	wg      sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]bool // guarded by mu: both ends of every pair
	closed bool              // guarded by mu
}

// dialTimeout bounds each dial of a target: a frozen replica's kernel
// still accepts, a dead one refuses at once.
const dialTimeout = time.Second

// newFront listens on addr (host:0 for any port).
func newFront(addr string, targets func() []string) (*front, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	f := &front{l: l, targets: targets, conns: map[net.Conn]bool{}}
	f.wg.Add(1)
	go f.accept()
	return f, nil
}

func (f *front) Addr() string { return f.l.Addr().String() }

func (f *front) accept() {
	defer f.wg.Done()
	for {
		in, err := f.l.Accept()
		if err != nil {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.serve(in)
		}()
	}
}

func (f *front) serve(in net.Conn) {
	var out net.Conn
	for _, t := range f.targets() {
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", t)
		cancel()
		if err == nil {
			out = c
			break
		}
	}
	if out == nil {
		in.Close()
		return
	}
	if !f.track(in, out) {
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done // either way ending ends both, as a proxy in TCP mode does
	in.Close()
	out.Close()
	<-done
	f.mu.Lock()
	delete(f.conns, in)
	delete(f.conns, out)
	f.mu.Unlock()
}

// track registers a pair, or closes it when the front is closed.
func (f *front) track(in, out net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		in.Close()
		out.Close()
		return false
	}
	f.conns[in], f.conns[out] = true, true
	return true
}

// Close stops accepting, closes every connection and waits for the
// forwarding to end.
func (f *front) Close() {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.l.Close()
	f.wg.Wait()
}
