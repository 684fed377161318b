package view_test

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestViewInlineKeys: the view marks the entries carrying an inline
// private key when it reads them (a secret's key does not count) and
// keeps their count in each snapshot, through writes that add a key,
// take it out, and deletes.
func TestViewInlineKeys(t *testing.T) {
	e := xdstest.NewEnv(t, xdstest.Options{})
	steps := []struct {
		name    string
		puts    []store.Put
		deletes []store.Key
		want    int
		keyed   map[string]bool // cluster name -> InlineKey
	}{
		{"a keyed and a plain cluster", []store.Put{
			xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.KeyedCluster(t, "k")),
			xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("p", 1000)),
		}, nil, 1, map[string]bool{"k": true, "p": false}},
		{"a secret, where keys belong", []store.Put{xdstest.Put(t, resource.Secret, store.DefaultScope, &tlsv3.Secret{Name: "s",
			Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
				PrivateKey: &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: "key"}}}}})}, nil, 1, nil},
		{"a second keyed one", []store.Put{xdstest.Put(t, resource.Cluster, "g", xdstest.KeyedCluster(t, "k2"))}, nil, 2, nil},
		{"the key taken out", []store.Put{xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("k", 2000))}, nil, 1,
			map[string]bool{"k": false}},
		{"the keyed one deleted", nil, []store.Key{xdstest.ScopedKey(resource.Cluster, "g", "k2")}, 0, nil},
	}
	for _, st := range steps {
		snap, err := e.View.WaitRevision(t.Context(), e.Apply(t, st.puts, st.deletes...))
		if err != nil {
			t.Fatal(err)
		}
		if snap.InlineKeys != st.want {
			t.Errorf("%s: InlineKeys = %d, want %d", st.name, snap.InlineKeys, st.want)
		}
		for name, want := range st.keyed {
			if e, ok := snap.Get(resource.Cluster, store.DefaultScope, name); !ok || e.InlineKey != want {
				t.Errorf("%s: cluster %s InlineKey = %v (found %v), want %v", st.name, name, e != nil && e.InlineKey, ok, want)
			}
		}
	}
}
