package faultnet

import (
	"net"
	"testing"
	"time"
)

// udpEcho echoes every datagram back to its sender until the test ends.
func udpEcho(t *testing.T, addr string) {
	t.Helper()
	c, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			c.WriteTo(buf[:n], from) //nolint:errcheck // a test socket
		}
	}()
}

// udpFrom sends msg from a socket bound on ip to addr and reports whether
// the echo came back.
func udpFrom(t *testing.T, ip, addr, msg string) bool {
	t.Helper()
	ra, _ := net.ResolveUDPAddr("udp", addr)
	c, err := net.DialUDP("udp", &net.UDPAddr{IP: net.ParseIP(ip)}, ra)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(msg))                                      //nolint:errcheck // a test socket
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond)) //nolint:errcheck // a test socket
	buf := make([]byte, 100)
	n, err := c.Read(buf)
	return err == nil && string(buf[:n]) == msg
}

func TestGossipBlock(t *testing.T) {
	const member, proxy = "127.0.66.21:17946", "127.0.66.21:17947"
	udpEcho(t, member)
	echoServerAt(t, member)
	// TCP: PeerOf names every connection's peer "127.0.66.22".
	g, err := ListenGossip(GossipConfig{Addr: proxy, Target: member,
		PeerOf: func(net.Addr) string { return "127.0.66.22" }})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if !udpFrom(t, "127.0.66.22", proxy, "a") || !udpFrom(t, "127.0.66.23", proxy, "b") {
		t.Fatal("UDP through the proxy does not pass")
	}
	if _, err := dial(t, proxy).roundTrip("tcp", 2*time.Second); err != nil {
		t.Fatalf("TCP through the proxy: %v", err)
	}
	g.Block("127.0.66.22")
	if udpFrom(t, "127.0.66.22", proxy, "c") {
		t.Error("UDP from a blocked peer passes")
	}
	if !udpFrom(t, "127.0.66.23", proxy, "d") {
		t.Error("UDP from another peer is blocked")
	}
	if c, err := net.Dial("tcp", proxy); err == nil {
		c.SetReadDeadline(time.Now().Add(time.Second)) //nolint:errcheck // a test socket
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Error("TCP from a blocked peer stays open")
		}
		c.Close()
	}
	if got := g.Blocked(); len(got) != 1 || got[0] != "127.0.66.22" {
		t.Errorf("Blocked = %v", got)
	}
	g.Heal()
	if !udpFrom(t, "127.0.66.22", proxy, "e") {
		t.Error("UDP from a healed peer is blocked")
	}
	if _, err := ListenGossip(GossipConfig{Addr: "127.0.0.1:0", Target: member}); err == nil {
		t.Error("ListenGossip takes port 0")
	}
}
