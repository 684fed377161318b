package shard_test

import (
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

func TestConfigValidate(t *testing.T) {
	// A client that is never dialled: Validate does no I/O.
	client := &clientv3.Client{}
	good := func() shard.Config {
		return shard.Config{Name: "xds-0", BindAddr: "127.0.0.1:0", XDSAddr: "10.0.0.1:18000", Client: client}
	}
	tests := []struct {
		name    string
		tweak   func(*shard.Config)
		wantErr string // "" : valid
	}{
		{"minimal", func(*shard.Config) {}, ""},
		{"defaults filled", func(c *shard.Config) {
			d := shard.DefaultConfig()
			d.Name, d.XDSAddr, d.Client = c.Name, c.XDSAddr, c.Client
			*c = d
		}, ""},
		{"everything", func(c *shard.Config) {
			c.BindAddr = "[::1]:7946"
			c.AdvertiseAddr = "10.0.0.1:0"
			c.HTTPAddr = ":18001"
			c.Join = []string{"xds-1.xds:7946", "10.0.0.2:7946"}
			c.Prefix = "/other/"
			c.LeaseTTL = 1500 * time.Millisecond
		}, ""},
		{"empty bind host", func(c *shard.Config) { c.BindAddr = ":7946" }, ""},
		{"a key file that is not read", func(c *shard.Config) { c.GossipKeyFile = "/nonexistent/gossip.keys" }, ""},
		{"key file interval too short", func(c *shard.Config) { c.GossipKeyInterval = time.Millisecond }, "GossipKeyInterval 1ms is below 10ms"},
		{"no name", func(c *shard.Config) { c.Name = "" }, "Name is required"},
		{"slash in name", func(c *shard.Config) { c.Name = "a/b" }, "holds a '/'"},
		{"control char in name", func(c *shard.Config) { c.Name = "a\nb" }, "control character"},
		{"long name", func(c *shard.Config) { c.Name = strings.Repeat("n", 129) }, "longer than 128 bytes"},
		{"bind without port", func(c *shard.Config) { c.BindAddr = "127.0.0.1" }, "BindAddr"},
		{"bind to a hostname", func(c *shard.Config) { c.BindAddr = "localhost:7946" }, "BindAddr \"localhost:7946\": host must be an IP address"},
		{"bind port out of range", func(c *shard.Config) { c.BindAddr = "127.0.0.1:70000" }, "bad port"},
		{"advertise hostname", func(c *shard.Config) { c.AdvertiseAddr = "xds-0:7946" }, "AdvertiseAddr"},
		{"advertise no host", func(c *shard.Config) { c.AdvertiseAddr = ":7946" }, "has no IP address"},
		{"advertise wildcard", func(c *shard.Config) { c.AdvertiseAddr = "0.0.0.0:7946" }, "unspecified"},
		{"no xds addr", func(c *shard.Config) { c.XDSAddr = "" }, "XDSAddr is required"},
		{"xds addr wildcard", func(c *shard.Config) { c.XDSAddr = "0.0.0.0:18000" }, "not a wildcard"},
		{"xds addr no host", func(c *shard.Config) { c.XDSAddr = ":18000" }, "not a wildcard"},
		{"xds addr port 0", func(c *shard.Config) { c.XDSAddr = "10.0.0.1:0" }, "bad port"},
		{"bad http addr", func(c *shard.Config) { c.HTTPAddr = "nope" }, "HTTPAddr"},
		{"empty seed", func(c *shard.Config) { c.Join = []string{"10.0.0.2:7946", " "} }, "Join[1] is empty"},
		{"no client", func(c *shard.Config) { c.Client = nil }, "Client is required"},
		{"prefix without slashes", func(c *shard.Config) { c.Prefix = "legation" }, "must start and end with '/'"},
		{"short lease", func(c *shard.Config) { c.LeaseTTL = 500 * time.Millisecond }, "LeaseTTL"},
		{"negative vnodes", func(c *shard.Config) { c.VNodes = -1 }, "VNodes"},
		{"probe timeout over interval", func(c *shard.Config) {
			c.ProbeInterval, c.ProbeTimeout = time.Second, 2*time.Second
		}, "below ProbeInterval"},
		{"negative suspicion", func(c *shard.Config) { c.SuspicionMult = -1 }, "SuspicionMult"},
		{"negative gossip interval", func(c *shard.Config) { c.GossipInterval = -time.Second }, "GossipInterval"},
		{"meta too large", func(c *shard.Config) {
			c.XDSAddr = strings.Repeat("x", 300) + ":1"
			c.HTTPAddr = strings.Repeat("h", 300) + ":1"
		}, "over the 512-byte limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.tweak(&c)
			err := c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("Validate() = nil, want an error with %q", tc.wantErr)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("Validate() = %v, want an error with %q", err, tc.wantErr)
			case err != nil && !strings.HasPrefix(err.Error(), "shard: "):
				t.Errorf("Validate() = %v, want the package's prefix", err)
			}
		})
	}
}

func TestStartRejectsBadConfig(t *testing.T) {
	_, err := shard.Start(testbase.Context(t), shard.Config{Name: "a"})
	if err == nil || !strings.Contains(err.Error(), "XDSAddr is required") {
		t.Fatalf("Start with no XDSAddr = %v, want the Validate error", err)
	}
}
