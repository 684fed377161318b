package shard_test

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/cluster/shard"
)

func TestSetReplicaAddrs(t *testing.T) {
	tests := []struct {
		name string
		in   shard.ReplicaAddrs
		want shard.Config // BindAddr, AdvertiseAddr, XDSAddr, HTTPAddr, Join
	}{
		{
			name: "hosts given",
			in: shard.ReplicaAddrs{Gossip: "10.0.0.1:7000", XDS: "10.0.0.1:18000", XDSBound: "10.0.0.1:18000",
				HTTPBound: "10.0.0.1:18001", Join: []string{"10.0.0.2", "xds-3:7946"}},
			want: shard.Config{BindAddr: "10.0.0.1:7000", XDSAddr: "10.0.0.1:18000", HTTPAddr: "10.0.0.1:18001",
				Join: []string{"10.0.0.2:7000", "xds-3:7946"}},
		},
		{
			name: "advertise a bare host",
			in:   shard.ReplicaAddrs{Gossip: ":7946", Advertise: "10.0.0.5", XDS: ":18000", XDSBound: "[::]:18000", HTTPBound: "[::]:18001"},
			want: shard.Config{BindAddr: ":7946", AdvertiseAddr: "10.0.0.5:0", XDSAddr: "10.0.0.5:18000", HTTPAddr: "10.0.0.5:18001"},
		},
		{
			name: "advertise host and port",
			in:   shard.ReplicaAddrs{Gossip: "0.0.0.0:7946", Advertise: "10.0.0.5:9000", XDS: ":0", XDSBound: "[::]:40001", HTTPBound: "[::]:40002"},
			want: shard.Config{BindAddr: "0.0.0.0:7946", AdvertiseAddr: "10.0.0.5:9000", XDSAddr: "10.0.0.5:40001", HTTPAddr: "10.0.0.5:40002"},
		},
		{
			name: "xds host, gossip wildcard on port 0",
			in: shard.ReplicaAddrs{Gossip: ":0", XDS: "127.0.0.1:0", XDSBound: "127.0.0.1:40001",
				HTTPBound: "127.0.0.1:40002", Join: []string{"10.0.0.2"}},
			want: shard.Config{BindAddr: ":0", AdvertiseAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:40001",
				HTTPAddr: "127.0.0.1:40002", Join: []string{"10.0.0.2:7946"}},
		},
		{
			name: "gossip host",
			in:   shard.ReplicaAddrs{Gossip: "10.0.0.1:7946", XDS: ":18000", XDSBound: "[::]:18000", HTTPBound: "[::]:18001"},
			want: shard.Config{BindAddr: "10.0.0.1:7946", XDSAddr: "10.0.0.1:18000", HTTPAddr: "10.0.0.1:18001"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := shard.DefaultConfig()
			got.SetReplicaAddrs(tt.in)
			if got.BindAddr != tt.want.BindAddr || got.AdvertiseAddr != tt.want.AdvertiseAddr ||
				got.XDSAddr != tt.want.XDSAddr || got.HTTPAddr != tt.want.HTTPAddr || !slices.Equal(got.Join, tt.want.Join) {
				t.Errorf("got bind %q advertise %q xds %q http %q join %q;\nwant bind %q advertise %q xds %q http %q join %q",
					got.BindAddr, got.AdvertiseAddr, got.XDSAddr, got.HTTPAddr, got.Join,
					tt.want.BindAddr, tt.want.AdvertiseAddr, tt.want.XDSAddr, tt.want.HTTPAddr, tt.want.Join)
			}
		})
	}
}

// TestSetReplicaAddrsWildcards: with no host anywhere, the machine's
// address is advertised, and the result is a valid membership config.
func TestSetReplicaAddrsWildcards(t *testing.T) {
	c := shard.DefaultConfig()
	c.Name, c.Client = "xds-0", &clientv3.Client{} // never dialled
	c.SetReplicaAddrs(shard.ReplicaAddrs{Gossip: ":7946", XDS: ":18000", XDSBound: "[::]:18000", HTTPBound: "[::]:18001"})
	host, port, err := net.SplitHostPort(c.XDSAddr)
	if err != nil || port != "18000" {
		t.Fatalf("XDSAddr = %q, want the machine's address on port 18000", c.XDSAddr)
	}
	if ip, err := netip.ParseAddr(host); err != nil || ip.IsUnspecified() {
		t.Errorf("XDSAddr host %q: want an IP address other replicas can reach", host)
	}
	if want := net.JoinHostPort(host, "0"); c.AdvertiseAddr != want {
		t.Errorf("AdvertiseAddr = %q, want %q", c.AdvertiseAddr, want)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v", err)
	}
}
