package localcluster

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	valid := func() Config {
		cfg := DefaultConfig()
		cfg.Dir = "/tmp/lc"
		cfg.EtcdBin, cfg.XDSNodeBin = "/bin/etcd", "/bin/xds-node"
		return cfg
	}
	tests := []struct {
		name   string
		change func(*Config)
		want   []string // substrings of the error; none: valid
	}{
		{"default with binaries", func(*Config) {}, nil},
		{"replicas only on an etcd of its own", func(c *Config) {
			c.EtcdMembers, c.EtcdEndpoints, c.EtcdBin, c.HAProxy = 0, []string{"127.0.0.1:2379"}, "", false
		}, nil},
		{"etcd members only, over TLS", func(c *Config) {
			c.Replicas, c.HAProxy = 0, false
			c.EtcdTLS = &EtcdTLS{CertFile: "s.pem", KeyFile: "s-key.pem", TrustedCAFile: "ca.pem", ClientCertAuth: true}
		}, nil},
		{"etcd TLS without a key", func(c *Config) { c.EtcdTLS = &EtcdTLS{CertFile: "s.pem"} }, []string{"EtcdTLS"}},
		{"no dir", func(c *Config) { c.Dir = "" }, []string{"Dir: empty"}},
		{"etcd proxies without members", func(c *Config) {
			c.EtcdMembers, c.EtcdEndpoints, c.EtcdBin, c.HAProxy, c.EtcdProxies = 0, []string{"127.0.0.1:2379"}, "", false, true
		}, []string{"EtcdProxies: needs etcd members"}},
		{"fault proxies", func(c *Config) { c.EtcdProxies, c.GossipProxies = true, true }, nil},
		{"long dir", func(c *Config) { c.Dir = "/tmp/" + strings.Repeat("d", 100) }, []string{"socket haproxy.sock", "socket control.sock"}},
		{"dir with a space and HAProxy", func(c *Config) { c.Dir = "/tmp/a b" }, []string{"no spaces"}},
		{"dir with a space, no HAProxy", func(c *Config) { c.Dir, c.HAProxy = "/tmp/a b", false }, nil},
		{"net without its dot", func(c *Config) { c.Net = "127.0.10" }, []string{"trailing dot"}},
		{"net not loopback", func(c *Config) { c.Net = "10.0.0." }, []string{"Net"}},
		{"net out of range", func(c *Config) { c.Net = "127.0.300." }, []string{"not an IPv4 prefix"}},
		{"too many members", func(c *Config) { c.EtcdMembers = 11 }, []string{"EtcdMembers 11"}},
		{"no etcd at all", func(c *Config) { c.EtcdMembers = 0 }, []string{"need an etcd"}},
		{"members and endpoints", func(c *Config) { c.EtcdEndpoints = []string{"127.0.0.1:2379"} }, []string{"one or the other"}},
		{"bad endpoint", func(c *Config) { c.EtcdMembers, c.EtcdEndpoints = 0, []string{"a:1,b:2"} }, []string{"not host:port"}},
		{"no replica", func(c *Config) { c.Replicas = 0 }, []string{"Replicas 0"}},
		{"too many replicas", func(c *Config) { c.Replicas = 201 }, []string{"Replicas 201"}},
		{"bad prefix", func(c *Config) { c.NamePrefix = "a/b" }, []string{"NamePrefix"}},
		{"no etcd binary", func(c *Config) { c.EtcdBin = "" }, []string{"EtcdBin"}},
		{"no xds-node binary", func(c *Config) { c.XDSNodeBin = "" }, []string{"XDSNodeBin"}},
		{"no timeout", func(c *Config) { c.Timeout = 0 }, []string{"Timeout"}},
		{"negative grace", func(c *Config) { c.Grace = -1 }, []string{"Grace"}},
		{"every problem at once", func(c *Config) { c.Replicas, c.Timeout = 0, 0 }, []string{"Replicas 0", "Timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid()
			tt.change(&cfg)
			err := cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: nil, want an error with %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v\nwant it to say %q", err, w)
				}
			}
		})
	}
}
