package replica_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/etcdconn"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		tweak func(*replica.Config)
		want  string // substring of the error; empty: valid
	}{
		{"defaults", func(*replica.Config) {}, ""},
		{"etcd mode ignores dev fields", func(c *replica.Config) {
			c.EtcdEndpoints = []string{"10.0.0.1:2379", "http://etcd-1:2379"}
			c.DataDir, c.DevEtcdAddr = "", ""
		}, ""},
		{"group by id", func(c *replica.Config) { c.GroupBy = "id" }, ""},
		{"group by metadata", func(c *replica.Config) { c.GroupBy = "metadata:team" }, ""},
		{"authorities", func(c *replica.Config) { c.Authorities = []string{"fed-a", "xds.example.com:443"} }, ""},
		{"ports zero", func(c *replica.Config) {
			c.XDSAddr, c.HTTPAddr, c.GossipAddr, c.DevEtcdAddr = "127.0.0.1:0", "127.0.0.1:0", ":0", "127.0.0.1:0"
		}, ""},
		{"advertise and join", func(c *replica.Config) {
			c.AdvertiseAddr = "10.0.0.5"
			c.Join = []string{"node-1:7946", "10.0.0.7", "::1", "[::1]:7946"}
		}, ""},
		{"prefix root", func(c *replica.Config) { c.EtcdPrefix = "/" }, ""},
		{"sotw trust version and loopback debug", func(c *replica.Config) { c.SotwTrustVersion, c.InsecureLoopbackDebug = true, true }, ""},
		{"loopback secrets and pprof", func(c *replica.Config) { c.InsecureLoopbackSecrets, c.Pprof = true, true }, ""},
		{"tiny catchup timeout", func(c *replica.Config) { c.CatchupTimeout = time.Millisecond }, ""},
		{"tiny max recv msg size", func(c *replica.Config) { c.MaxRecvMsgSize = 1 }, ""},
		{"gossip key file in etcd mode", func(c *replica.Config) {
			c.EtcdEndpoints, c.GossipKeyFile = []string{"10.0.0.1:2379"}, "/etc/legation/gossip.keys"
		}, ""},

		// Limits and overload.
		{"no limits", func(c *replica.Config) {
			c.MaxConnectionAge, c.MaxStreamsPerConn, c.StreamRate, c.StreamBurst, c.MaxStreams, c.HTTPMaxConns = 0, 0, 0, 0, 0, 0
		}, ""},
		{"status write budget zero", func(c *replica.Config) { c.StatusWriteBudget = 0 }, "--status-write-budget"},
		{"status write budget NaN", func(c *replica.Config) { c.StatusWriteBudget = math.NaN() }, "--status-write-budget"},
		{"lrs interval zero", func(c *replica.Config) { c.LRSInterval = 0 }, "--lrs-interval"},
		{"lrs interval negative", func(c *replica.Config) { c.LRSInterval = -time.Second }, "--lrs-interval"},
		{"lrs interval absurd", func(c *replica.Config) { c.LRSInterval = 48 * time.Hour }, "--lrs-interval"},
		{"lrs windows zero", func(c *replica.Config) { c.LRSWindows = 0 }, "--lrs-windows"},
		{"lrs empty cluster", func(c *replica.Config) { c.LRSClusters = []string{"a", " "} }, "--lrs-clusters"},
		{"lrs max rate zero", func(c *replica.Config) { c.LRSMaxRate = 0 }, "--lrs-max-rate"},
		{"lrs max rate infinite", func(c *replica.Config) { c.LRSMaxRate = math.Inf(1) }, "--lrs-max-rate"},
		{"lrs rows per node zero", func(c *replica.Config) { c.LRSMaxRowsPerNode = 0 }, "--lrs-max-rows-per-node"},
		{"lrs rows per node beyond a window", func(c *replica.Config) { c.LRSMaxRowsPerNode = 5000 }, "--lrs-max-rows-per-node"},
		{"keepalive min time zero", func(c *replica.Config) { c.KeepaliveMinTime = 0 }, "--keepalive-min-time"},
		{"keepalive time zero", func(c *replica.Config) { c.KeepaliveTime = 0 }, "--keepalive-time"},
		{"keepalive timeout negative", func(c *replica.Config) { c.KeepaliveTimeout = -time.Second }, "--keepalive-timeout"},
		{"keepalive time below a second", func(c *replica.Config) { c.KeepaliveTime = 500 * time.Millisecond }, "--keepalive-time"},
		{"keepalive timeout below a second", func(c *replica.Config) { c.KeepaliveTimeout = 999 * time.Millisecond }, "--keepalive-timeout"},
		{"ping time zero", func(c *replica.Config) { c.PingTime = 0 }, "--ping-time"},
		{"max connection age negative", func(c *replica.Config) { c.MaxConnectionAge = -time.Second }, "--max-connection-age"},
		{"max connection age grace negative", func(c *replica.Config) { c.MaxConnectionAgeGrace = -time.Second }, "--max-connection-age-grace"},
		{"max streams per conn negative", func(c *replica.Config) { c.MaxStreamsPerConn = -1 }, "--max-streams-per-conn"},
		{"max streams negative", func(c *replica.Config) { c.MaxStreams = -1 }, "--max-streams"},
		{"stream rate negative", func(c *replica.Config) { c.StreamRate = -1 }, "--stream-rate"},
		{"stream burst zero with a rate", func(c *replica.Config) { c.StreamBurst = 0 }, "--stream-burst"},
		{"max streams share", func(c *replica.Config) { c.MaxStreamsShare = 1.1 }, ""},
		{"max streams share below 1", func(c *replica.Config) { c.MaxStreamsShare = 0.5 }, "--max-streams-share"},
		{"http read timeout zero", func(c *replica.Config) { c.HTTPReadTimeout = 0 }, "--http-read-timeout"},
		{"http max conns negative", func(c *replica.Config) { c.HTTPMaxConns = -1 }, "--http-max-conns"},
		{"http max conns per ip negative", func(c *replica.Config) { c.HTTPMaxConnsPerIP = -1 }, "--http-max-conns-per-ip"},
		{"max csds matchers negative", func(c *replica.Config) { c.MaxCSDSMatchers = -1 }, "--max-csds-matchers"},
		{"authz stale after below a healthy watch's quiet", func(c *replica.Config) { c.AuthzStaleAfter = time.Second }, "--authz-stale-after"},

		{"group by empty", func(c *replica.Config) { c.GroupBy = "" }, "--group-by"},
		{"group by unknown", func(c *replica.Config) { c.GroupBy = "labels" }, "--group-by \"labels\""},
		{"group by metadata without key", func(c *replica.Config) { c.GroupBy = "metadata:" }, "--group-by"},
		{"empty authority", func(c *replica.Config) { c.Authorities = []string{""} }, `--authority: authority "": empty`},
		{"authority twice", func(c *replica.Config) { c.Authorities = []string{"a", "a"} }, `--authority: authority "a" is given twice`},
		{"authority with a slash", func(c *replica.Config) { c.Authorities = []string{"a/b"} }, `--authority: authority "a/b" holds '/'`},
		{"group by metadata padded key", func(c *replica.Config) { c.GroupBy = "metadata: team" }, "--group-by"},
		{"xds addr without port", func(c *replica.Config) { c.XDSAddr = "18000" }, "--xds-addr"},
		{"http addr bad port", func(c *replica.Config) { c.HTTPAddr = ":99999" }, "--http-addr"},
		{"http addr named port", func(c *replica.Config) { c.HTTPAddr = ":http" }, "--http-addr"},
		{"gossip addr empty", func(c *replica.Config) { c.GossipAddr = "" }, "--gossip-addr"},
		{"dev etcd addr bad", func(c *replica.Config) { c.DevEtcdAddr = "localhost" }, "--dev-etcd-addr"},
		{"dev mode without data dir", func(c *replica.Config) { c.DataDir = "" }, "--data-dir"},
		{"same port", func(c *replica.Config) { c.HTTPAddr = "127.0.0.1:18000" }, "same port"},
		{"same port as dev etcd", func(c *replica.Config) { c.XDSAddr = ":2379" }, "--dev-etcd-addr"},
		{"prefix without leading slash", func(c *replica.Config) { c.EtcdPrefix = "legation/" }, "--etcd-prefix"},
		{"prefix without trailing slash", func(c *replica.Config) { c.EtcdPrefix = "/legation" }, "--etcd-prefix"},
		{"prefix empty", func(c *replica.Config) { c.EtcdPrefix = "" }, "--etcd-prefix"},
		{"endpoint without port", func(c *replica.Config) { c.EtcdEndpoints = []string{"etcd-1"} }, "--etcd-endpoints \"etcd-1\""},
		{"endpoint https", func(c *replica.Config) { c.EtcdEndpoints = []string{"https://etcd-1:2379"} }, ""},
		{"etcd TLS and auth", func(c *replica.Config) {
			c.EtcdEndpoints = []string{"etcd-1:2379"}
			c.EtcdSecurity = etcdconn.Security{CACert: "ca.pem", Cert: "c.pem", Key: "k.pem", Username: "u", Password: "p"}
		}, ""},
		{"endpoints http and https", func(c *replica.Config) { c.EtcdEndpoints = []string{"http://etcd-1:2379", "https://etcd-2:2379"} }, "all must be one or the other"},
		{"TLS flag with an http endpoint", func(c *replica.Config) {
			c.EtcdEndpoints = []string{"http://etcd-1:2379"}
			c.EtcdSecurity.CACert = "ca.pem"
		}, "--etcd-cacert (TLS) with --etcd-endpoints \"http://etcd-1:2379\""},
		{"etcd cert without key", func(c *replica.Config) {
			c.EtcdEndpoints = []string{"etcd-1:2379"}
			c.EtcdSecurity.Cert = "c.pem"
		}, "--etcd-cert without --etcd-key"},
		{"etcd password in dev mode", func(c *replica.Config) {
			c.EtcdSecurity = etcdconn.Security{Username: "u", Password: "p"}
		}, "--etcd-username, LEGATION_ETCD_PASSWORD: only with --etcd-endpoints"},
		{"endpoint scheme", func(c *replica.Config) { c.EtcdEndpoints = []string{"ftp://etcd-1:2379"} }, "--etcd-endpoints"},
		{"endpoint port zero", func(c *replica.Config) { c.EtcdEndpoints = []string{"etcd-1:0"} }, "--etcd-endpoints"},
		{"advertise bad", func(c *replica.Config) { c.AdvertiseAddr = "host:port" }, "--advertise-addr"},
		{"join empty host", func(c *replica.Config) { c.Join = []string{":7946"} }, "--join"},
		{"name empty", func(c *replica.Config) { c.Name = " " }, "--name"},
		{"negative shutdown timeout", func(c *replica.Config) { c.ShutdownTimeout = -time.Second }, "--shutdown-timeout"},
		{"negative drain period", func(c *replica.Config) { c.DrainPeriod = -time.Second }, "--drain-period -1s"},
		{"drain period too long", func(c *replica.Config) { c.DrainPeriod = time.Hour }, "--drain-period 1h0m0s"},
		{"zero drain period", func(c *replica.Config) { c.DrainPeriod = 0 }, ""},
		{"zero catchup timeout", func(c *replica.Config) { c.CatchupTimeout = 0 }, "--catchup-timeout 0s: must be positive"},
		{"negative catchup timeout", func(c *replica.Config) { c.CatchupTimeout = -time.Second }, "--catchup-timeout -1s"},
		{"zero max recv msg size", func(c *replica.Config) { c.MaxRecvMsgSize = 0 }, "--max-recv-msg-size 0: must be positive"},
		{"negative max recv msg size", func(c *replica.Config) { c.MaxRecvMsgSize = -1 }, "--max-recv-msg-size -1"},
		{"gossip key file in dev mode", func(c *replica.Config) { c.GossipKeyFile = "gossip.keys" }, "--gossip-key-file: set in dev mode"},
		{"gossip key file standalone", func(c *replica.Config) {
			c.EtcdEndpoints, c.Standalone, c.GossipKeyFile = []string{"10.0.0.1:2379"}, true, "gossip.keys"
		}, "--gossip-key-file: set with --standalone"},
		{"registerer not a gatherer", func(c *replica.Config) {
			c.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"replica": "a"}, prometheus.NewRegistry())
		}, "Gatherer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := replica.DefaultConfig()
			tt.tweak(&cfg)
			err := cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && err == nil:
				t.Fatalf("Validate() = nil, want an error with %q", tt.want)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Fatalf("Validate() = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestDefaultConfigXDS(t *testing.T) {
	cfg := replica.DefaultConfig()
	if cfg.CatchupTimeout != 5*time.Second || cfg.MaxRecvMsgSize != 4<<20 || cfg.SotwTrustVersion || cfg.InsecureLoopbackDebug {
		t.Errorf("DefaultConfig: catchup %s, max recv %d, trust version %v, loopback debug %v; want 5s, 4 MiB, false, false",
			cfg.CatchupTimeout, cfg.MaxRecvMsgSize, cfg.SotwTrustVersion, cfg.InsecureLoopbackDebug)
	}
	if cfg.InsecureLoopbackSecrets || cfg.Pprof {
		t.Errorf("DefaultConfig: loopback secrets %v, pprof %v; want both off", cfg.InsecureLoopbackSecrets, cfg.Pprof)
	}
}

func TestValidateReportsEveryError(t *testing.T) {
	cfg := replica.DefaultConfig()
	cfg.GroupBy = "x"
	cfg.XDSAddr = "x"
	cfg.EtcdPrefix = "x"
	cfg.CatchupTimeout = 0
	cfg.MaxRecvMsgSize = 0
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate() = nil")
	}
	for _, want := range []string{"--group-by", "--xds-addr", "--etcd-prefix", "--catchup-timeout", "--max-recv-msg-size"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to name %s", err, want)
		}
	}
}
