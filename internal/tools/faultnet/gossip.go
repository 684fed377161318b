package faultnet

import (
	"fmt"
	"net"
	"slices"
	"sync"
)

// GossipProxy forwards a memberlist member's gossip, UDP and TCP on one
// address, to where the member binds; the member advertises the proxy's
// address, so every peer's gossip to it passes through. Block drops what
// comes from chosen peers: blocking B at A's proxy and A at B's
// partitions gossip between A and B, while both still gossip with
// everyone else (memberlist's indirect probes through a third member may
// then keep each one alive in the other's view, as in a real partial
// partition).
//
// A peer is known by its address: for UDP the packet's source IP, which
// is the IP the peer binds; for TCP what Config.PeerOf says of the
// connection's remote address (memberlist dials without binding, so on
// loopback the source IP is 127.0.0.1 whoever dials). A TCP stream open
// when Block is called runs to its end (memberlist's streams are short:
// a push-pull, a fallback probe).
type GossipProxy struct {
	tcp    *Proxy
	udp    *net.UDPConn
	target *net.UDPAddr
	peerOf func(net.Addr) string

	mu      sync.Mutex // guards the fields below
	blocked map[string]bool
	// nat has, per source address, the socket forwarding its packets:
	// kept until Close (a cluster's gossip comes from a few addresses).
	nat    map[string]*net.UDPConn
	closed bool

	wg sync.WaitGroup
}

// GossipConfig shapes a GossipProxy.
type GossipConfig struct {
	// Addr is where the proxy listens, UDP and TCP, host:port (the
	// address the member advertises). Port 0 is not allowed: UDP and TCP
	// need the same port.
	Addr string
	// Target is where the member binds, host:port.
	Target string
	// PeerOf names the peer (its IP) behind a TCP connection's remote
	// address. Nil: the remote IP.
	PeerOf func(remote net.Addr) string
}

// ListenGossip starts a gossip proxy.
func ListenGossip(cfg GossipConfig) (*GossipProxy, error) {
	target, err := net.ResolveUDPAddr("udp", cfg.Target)
	if err != nil {
		return nil, fmt.Errorf("faultnet: gossip Target %q: %w", cfg.Target, err)
	}
	la, err := net.ResolveUDPAddr("udp", cfg.Addr)
	if err != nil || la.Port == 0 {
		return nil, fmt.Errorf("faultnet: gossip Addr %q: want host:port with a port", cfg.Addr)
	}
	udp, err := net.ListenUDP("udp", la)
	if err != nil {
		return nil, fmt.Errorf("faultnet: gossip listen: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		udp.Close()
		return nil, fmt.Errorf("faultnet: gossip listen: %w", err)
	}
	g := &GossipProxy{udp: udp, target: target, peerOf: cfg.PeerOf, blocked: map[string]bool{}, nat: map[string]*net.UDPConn{}}
	if g.peerOf == nil {
		g.peerOf = remoteIP
	}
	g.tcp = serve(ln, cfg.Target, func(c net.Conn) bool {
		// PeerOf may be dear (localcluster reads /proc): only when needed.
		return !g.anyBlocked() || !g.isBlocked(g.peerOf(c.RemoteAddr()))
	})
	g.wg.Add(1)
	go g.readUDP()
	return g, nil
}

func remoteIP(a net.Addr) string {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// Addr is the proxy's address, UDP and TCP.
func (g *GossipProxy) Addr() string { return g.udp.LocalAddr().String() }

// Block drops, from now on, the gossip that comes from each peer (an IP).
func (g *GossipProxy) Block(peers ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range peers {
		g.blocked[p] = true
	}
}

// Unblock forwards the gossip of each peer again.
func (g *GossipProxy) Unblock(peers ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range peers {
		delete(g.blocked, p)
	}
}

// Heal unblocks every peer.
func (g *GossipProxy) Heal() {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.blocked)
}

// Blocked lists the blocked peers, sorted.
func (g *GossipProxy) Blocked() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for p := range g.blocked {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

func (g *GossipProxy) anyBlocked() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.blocked) > 0
}

func (g *GossipProxy) isBlocked(peer string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.blocked[peer]
}

// Close stops the proxy and waits for its goroutines. It is idempotent.
func (g *GossipProxy) Close() error {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		g.udp.Close()
		for _, c := range g.nat {
			c.Close()
		}
	}
	g.mu.Unlock()
	g.tcp.Close()
	g.wg.Wait()
	return nil
}

// readUDP forwards each packet not from a blocked peer to the target from
// a socket of the sender's own, whose replies go back to the sender from
// the proxy's address.
func (g *GossipProxy) readUDP() {
	defer g.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, from, err := g.udp.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if g.isBlocked(from.IP.String()) {
			continue
		}
		out := g.natFor(from)
		if out == nil {
			continue // closed: the next read ends the loop
		}
		out.Write(buf[:n]) //nolint:errcheck // UDP: a lost packet is gossip's to handle
	}
}

// natFor returns the socket forwarding from's packets, made at the first.
func (g *GossipProxy) natFor(from *net.UDPAddr) *net.UDPConn {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	key := from.String()
	if c := g.nat[key]; c != nil {
		return c
	}
	c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, g.target)
	if err != nil {
		return nil
	}
	g.nat[key] = c
	g.wg.Add(1)
	go g.replies(c, from)
	return c
}

// replies sends what the target answers on c back to from, unless from is
// blocked.
func (g *GossipProxy) replies(c *net.UDPConn, from *net.UDPAddr) {
	defer g.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		if g.isBlocked(from.IP.String()) {
			continue
		}
		g.udp.WriteToUDP(buf[:n], from) //nolint:errcheck // UDP, as above
	}
}
