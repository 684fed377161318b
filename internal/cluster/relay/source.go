package relay

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
)

// sourceDialer returns the dialer of relay connections made from src
// (Config.SourceIP): in plaintext the home trusts a relay marker only from
// a registered replica's address, so a replica connects from the address
// it advertises rather than one the system picks (on a machine with
// several addresses, or on loopback, the system's choice may be another).
// Where src cannot be bound (the advertised address is translated and not
// this machine's), or is of the other IP family than the home's, the
// connection is made from the address the system picks.
func sourceDialer(src netip.Addr) func(ctx context.Context, addr string) (net.Conn, error) {
	bound := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
	var free net.Dialer
	return func(ctx context.Context, addr string) (net.Conn, error) {
		if ap, err := netip.ParseAddrPort(addr); err == nil && ap.Addr().Unmap().Is4() != src.Unmap().Is4() {
			return free.DialContext(ctx, "tcp", addr)
		}
		c, err := bound.DialContext(ctx, "tcp", addr)
		if err != nil && (errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT)) {
			return free.DialContext(ctx, "tcp", addr)
		}
		return c, err
	}
}
