package faultnet

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Mode is what a Proxy does to the traffic it forwards.
type Mode int

const (
	// Pass forwards everything at once.
	Pass Mode = iota
	// Delay forwards each chunk read (in either direction) after
	// Fault.Delay plus a random part of Fault.Jitter; a new connection
	// is dialled after as long.
	Delay
	// Drop closes every connection and closes new ones at once, as a
	// peer that resets them.
	Drop
	// Blackhole accepts connections and forwards nothing, in either
	// direction, until the mode changes: both ends stall, as behind a
	// router that drops every packet. What a side sent meanwhile is
	// forwarded once the mode changes to Pass or Delay (TCP would have
	// retransmitted it); a change to Drop closes the connections.
	Blackhole
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Delay:
		return "delay"
	case Drop:
		return "drop"
	case Blackhole:
		return "blackhole"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Fault is a Proxy's mode and, for Delay, its delays.
type Fault struct {
	Mode Mode
	// Delay is the fixed part of each chunk's delay (Delay only).
	Delay time.Duration
	// Jitter is the most added to Delay at random, per chunk (Delay
	// only). Zero: none.
	Jitter time.Duration
}

func (f Fault) String() string {
	if f.Mode == Delay {
		return fmt.Sprintf("delay %s±%s", f.Delay, f.Jitter)
	}
	return f.Mode.String()
}

// ErrClosed is returned by a closed proxy's methods.
var ErrClosed = errors.New("faultnet: proxy closed")

// Proxy forwards the TCP connections it accepts to a target, doing to them
// what its Fault says. Its methods may be called concurrently; Set takes
// effect on live connections at once.
type Proxy struct {
	ln     net.Listener
	target string
	// allow, if set, decides at accept whether a connection is forwarded
	// (GossipProxy's TCP side); a refused one is closed.
	allow func(net.Conn) bool

	mu      sync.Mutex // guards the fields below
	fault   Fault
	changed chan struct{} // closed and replaced at each Set
	conns   map[net.Conn]struct{}
	closed  bool

	done chan struct{} // closed by Close
	wg   sync.WaitGroup
}

// Listen returns a proxy listening on addr (host:port; port 0 picks one)
// that forwards to target in mode Pass.
func Listen(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("faultnet: listen %s: %w", addr, err)
	}
	return serve(ln, target, nil), nil
}

func serve(ln net.Listener, target string, allow func(net.Conn) bool) *Proxy {
	p := &Proxy{ln: ln, target: target, allow: allow, changed: make(chan struct{}),
		conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p
}

// Addr is the address the proxy listens on, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Set switches the proxy to f, on live connections too: Drop closes them
// all.
func (p *Proxy) Set(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.fault = f
	close(p.changed)
	p.changed = make(chan struct{})
	if f.Mode == Drop {
		p.closeConnsLocked()
	}
}

// Fault returns the proxy's fault now.
func (p *Proxy) Fault() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

// Conns is how many connections the proxy holds now, each side counted
// once (a forwarded connection is two).
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines to end. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.done)
		p.ln.Close()
		p.closeConnsLocked()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

func (p *Proxy) closeConnsLocked() {
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// state returns the fault now and the channel closed at its next change.
func (p *Proxy) state() (Fault, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault, p.changed
}

// track adds c to the connections Drop and Close close; false (and c
// closed) if the proxy is closed or dropping.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.fault.Mode == Drop {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.allow != nil && !p.allow(c) {
			c.Close()
			continue
		}
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

// handle dials the target for c once the mode lets it, then forwards both
// ways.
func (p *Proxy) handle(c net.Conn) {
	defer p.wg.Done()
	if !p.wait() {
		p.untrack(c)
		return
	}
	u, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		p.untrack(c)
		return
	}
	if !p.track(u) {
		p.untrack(c)
		return
	}
	var pipes sync.WaitGroup
	pipes.Add(2)
	go func() { defer pipes.Done(); p.pipe(u, c) }()
	go func() { defer pipes.Done(); p.pipe(c, u) }()
	pipes.Wait()
	p.untrack(c, u)
}

// wait blocks while the mode is Blackhole, and for the delay in Delay; it
// returns false if the proxy closed or the mode is Drop.
func (p *Proxy) wait() bool {
	for {
		f, changed := p.state()
		switch f.Mode {
		case Pass:
			return true
		case Drop:
			return false
		case Delay:
			d := f.Delay
			if f.Jitter > 0 {
				d += rand.N(f.Jitter)
			}
			t := time.NewTimer(d)
			select {
			case <-t.C:
				return true
			case <-p.done:
				t.Stop()
				return false
			}
		case Blackhole:
			select {
			case <-changed:
			case <-p.done:
				return false
			}
		}
	}
}

// pipe copies src to dst chunk by chunk, each chunk once wait lets it.
// At src's end it passes the end on (a half close) and lets the other way
// finish; on any other error it closes both, ending the other way too.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				break
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if errors.Is(err, io.EOF) {
			if tc, ok := dst.(*net.TCPConn); ok && tc.CloseWrite() == nil {
				return
			}
			break
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
}

// Group is the proxies of one client to every endpoint of a service (a
// replica's to each etcd member), switched together.
type Group []*Proxy

// Set sets f on every proxy of g.
func (g Group) Set(f Fault) {
	for _, p := range g {
		p.Set(f)
	}
}

// Addrs are the proxies' addresses, in g's order.
func (g Group) Addrs() []string {
	addrs := make([]string, len(g))
	for i, p := range g {
		addrs[i] = p.Addr()
	}
	return addrs
}

// Close closes every proxy of g.
func (g Group) Close() error {
	for _, p := range g {
		p.Close()
	}
	return nil
}
