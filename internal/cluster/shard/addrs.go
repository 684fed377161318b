package shard

import (
	"net"
	"strconv"
)

// ReplicaAddrs are a replica's addresses as its operator gave them and as
// its listeners bound them: what SetReplicaAddrs derives the addresses of
// a membership from.
type ReplicaAddrs struct {
	// Gossip is the host:port memberlist binds (xds-node's --gossip-addr);
	// an empty or wildcard host means every interface.
	Gossip string
	// Advertise is the address other replicas reach this one on
	// (--advertise-addr), as ip or ip:port (the gossip port). Empty:
	// derived.
	Advertise string
	// XDS is the xDS listen address as given (--xds-addr).
	XDS string
	// XDSBound and HTTPBound are the addresses the xDS and HTTP listeners
	// bound; their ports are the ones put in the record.
	XDSBound, HTTPBound string
	// Join lists seed replicas as host or host:port (--join).
	Join []string
}

// SetReplicaAddrs sets c's BindAddr, AdvertiseAddr, XDSAddr, HTTPAddr and
// Join from a replica's addresses:
//
//   - the advertised host is the host of Advertise, else of XDS or Gossip
//     if not a wildcard, else this machine's first private (or else
//     non-loopback) IPv4 address;
//   - AdvertiseAddr is Advertise (a bare host gossips on the bound port),
//     or the advertised host on the bound port when Gossip's host is a
//     wildcard, else empty (memberlist advertises what it bound);
//   - XDSAddr and HTTPAddr are the advertised host on the bound ports;
//   - a seed without a port gets Gossip's port, or 7946 when that is 0.
//
// It reads the machine's interfaces only when no host is given; it does
// no other I/O.
func (c *Config) SetReplicaAddrs(a ReplicaAddrs) {
	c.BindAddr = a.Gossip
	adv := advertiseHost(a.Advertise, a.XDS, a.Gossip)
	c.AdvertiseAddr = ""
	if a.Advertise != "" {
		c.AdvertiseAddr = withPort(a.Advertise, "0")
	} else if h, _, _ := net.SplitHostPort(a.Gossip); isWildcard(h) {
		c.AdvertiseAddr = net.JoinHostPort(adv, "0")
	}
	c.XDSAddr = net.JoinHostPort(adv, portOf(a.XDSBound))
	c.HTTPAddr = net.JoinHostPort(adv, portOf(a.HTTPBound))
	_, gport, _ := net.SplitHostPort(a.Gossip)
	if gport == "0" {
		gport = "7946"
	}
	c.Join = nil
	for _, j := range a.Join {
		c.Join = append(c.Join, withPort(j, gport))
	}
}

// advertiseHost is the host other replicas reach this one on: the host of
// advertise, else of xds or gossip if not a wildcard, else this machine's
// first private (or else non-loopback) address.
func advertiseHost(advertise, xds, gossip string) string {
	if advertise != "" {
		if h, _, err := net.SplitHostPort(advertise); err == nil {
			return h
		}
		return advertise
	}
	for _, a := range []string{xds, gossip} {
		if h, _, err := net.SplitHostPort(a); err == nil && !isWildcard(h) {
			return h
		}
	}
	return machineIP()
}

func isWildcard(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }

// machineIP returns the first private IPv4 address of the machine, else
// the first non-loopback one, else 127.0.0.1.
func machineIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "127.0.0.1"
	}
	var other string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.To4() == nil {
			continue
		}
		if ipn.IP.IsPrivate() {
			return ipn.IP.String()
		}
		if other == "" {
			other = ipn.IP.String()
		}
	}
	if other != "" {
		return other
	}
	return "127.0.0.1"
}

// withPort returns addr with port added if it has none.
func withPort(addr, port string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	return net.JoinHostPort(addr, port)
}

// portOf returns addr's numeric port, or "0".
func portOf(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "0"
	}
	if _, err := strconv.Atoi(p); err != nil {
		return "0"
	}
	return p
}
