package relay_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"

	"google.golang.org/grpc/peer"

	"github.com/legation-io/legation/internal/cluster/relay"
)

// peerIPs records the peer address of each relay marker a home judged.
type peerIPs struct {
	mu  sync.Mutex
	ips []netip.Addr
}

// trust is a home's Config.TrustMarker: it trusts the marker from want
// only, as a plaintext home trusts a registered replica's address.
func (p *peerIPs) trust(want netip.Addr) func(ctx context.Context) bool {
	return func(ctx context.Context) bool {
		pr, _ := peer.FromContext(ctx)
		ap, err := netip.ParseAddrPort(pr.Addr.String())
		p.mu.Lock()
		defer p.mu.Unlock()
		p.ips = append(p.ips, ap.Addr())
		return err == nil && ap.Addr() == want
	}
}

// TestSourceIP: a replica relays from its SourceIP (any 127.0.0.0/8
// address is this machine's), so a home that trusts the marker from that
// address only serves the stream as relayed; a SourceIP the machine does
// not have is not bound, and the stream is relayed all the same.
func TestSourceIP(t *testing.T) {
	for _, tt := range []struct {
		name         string
		source, from netip.Addr // SourceIP; the address the home sees
	}{
		{"bound", netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.2")},
		{"not this machine's", netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("127.0.0.1")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			c.apply(t, clusters(1)...)
			var seen peerIPs
			home := c.addReplica(t, "home", func(cfg *relay.Config) { cfg.TrustMarker = seen.trust(tt.from) })
			edge := c.addReplica(t, "edge", func(cfg *relay.Config) { cfg.SourceIP = tt.source })
			edge.setHomes(map[string]string{"n1": "home"})

			s := adsStream(t, edge.addr)
			s.Send(cdsRequest("n1"))
			s.Expect()
			got := streamsOf(home, "n1")
			if len(got) != 1 || got[0].RelayedBy != "edge" {
				t.Errorf("home's streams of n1: %+v, want one relayed by edge", got)
			}
			seen.mu.Lock()
			ips := seen.ips
			seen.mu.Unlock()
			if len(ips) != 1 || ips[0] != tt.from {
				t.Errorf("the home saw the relay from %v, want %v", ips, tt.from)
			}
			if n := metric(t, edge.reg, "legation_relay_fallbacks_total"); n != 0 {
				t.Errorf("legation_relay_fallbacks_total = %v, want 0", n)
			}
		})
	}
}
