package replica

import (
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/state/etcdconn"
)

// TestEtcdInsecurity: what the start log and /readyz warn of, by the etcd
// flags: nothing in dev mode or with TLS and a credential.
func TestEtcdInsecurity(t *testing.T) {
	tlsCert := etcdconn.Security{CACert: "ca.pem", Cert: "c.pem", Key: "k.pem"}
	for _, tc := range []struct {
		name      string
		endpoints []string
		sec       etcdconn.Security
		want      []string // substrings; none: no warning
	}{
		{"dev mode", nil, etcdconn.Security{}, nil},
		{"plain text, no credential", []string{"etcd:2379"}, etcdconn.Security{}, []string{"no TLS", "no authentication"}},
		{"http://", []string{"http://etcd:2379"}, etcdconn.Security{}, []string{"no TLS", "no authentication"}},
		{"https:// without credential", []string{"https://etcd:2379"}, etcdconn.Security{}, []string{"no authentication"}},
		{"CA only", []string{"etcd:2379"}, etcdconn.Security{CACert: "ca.pem"}, []string{"no authentication"}},
		{"client certificate", []string{"etcd:2379"}, tlsCert, nil},
		{"user over TLS", []string{"https://etcd:2379"}, etcdconn.Security{Username: "u", Password: "p"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.EtcdEndpoints, cfg.EtcdSecurity = tc.endpoints, tc.sec
			got := cfg.etcdInsecurity()
			if (got == "") != (len(tc.want) == 0) {
				t.Fatalf("etcdInsecurity() = %q; want %q", got, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("etcdInsecurity() = %q; want %q in it", got, w)
				}
			}
			if strings.Contains(got, "no TLS") != (tc.want != nil && tc.want[0] == "no TLS") {
				t.Errorf("etcdInsecurity() = %q: TLS wrongly reported", got)
			}
		})
	}
}
