package adminctl

import (
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/testkit/storetest"
)

// testKey is a private key as an operator would paste it inline.
const testKey = `"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n"`

// tlsListenerYAML is a listener terminating TLS whose certificate's
// private key is the DataSource key (a YAML mapping).
func tlsListenerYAML(name, key string) string {
	return `"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: ` + name + `
address: {socket_address: {address: 0.0.0.0, port_value: 10443}}
filter_chains:
- filters:
  - name: envoy.filters.network.tcp_proxy
    typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: t, cluster: c}
  transport_socket:
    name: envoy.transport_sockets.tls
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext
      common_tls_context:
        tls_certificates:
        - certificate_chain: {filename: /etc/certs/tls.crt}
          private_key: ` + key + `
`
}

// TestApplyInlineKeys: apply refuses a private key inline in a listener,
// naming the document and the field, and writes nothing; it accepts the
// same key in a secret, a key named by file, and, with
// --allow-inline-keys, the listener.
func TestApplyInlineKeys(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)

	inline := tlsListenerYAML("tls", "{inline_string: "+testKey+"}")
	in := docs(clusterYAML("c", "1s"), inline)
	r := h.runStdin(in, "apply", "-f", "-")
	want := `-: document 2 (listener "tls"): filter_chains[0].transport_socket.typed_config(envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext).common_tls_context.tls_certificates[0].private_key: an inline private key outside a secret resource`
	if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "--allow-inline-keys") {
		t.Fatalf("apply of an inline key: %s\nwant exit 1 and an error holding %q and --allow-inline-keys", r, want)
	}
	if got := h.list(); len(got) != 0 {
		t.Fatalf("refused apply wrote %d resources", len(got))
	}

	secret := `"@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
name: tls
tls_certificate: {certificate_chain: {inline_string: cert}, private_key: {inline_string: ` + testKey + `}}
`
	h.mustRun("apply", "-f", writeFile(t, "secret.yaml", secret))
	h.mustRun("apply", "-f", writeFile(t, "file.yaml", tlsListenerYAML("by-file", "{filename: /etc/certs/tls.key}")))
	h.mustRun("apply", "-f", writeFile(t, "inline.yaml", in), "--allow-inline-keys")

	got := map[string]bool{}
	for _, res := range h.list() {
		got[res.Type.Name+"/"+res.Name] = true
	}
	for _, k := range []string{"secret/tls", "listener/by-file", "listener/tls", "cluster/c"} {
		if !got[k] {
			t.Errorf("%s not written; have %v", k, got)
		}
	}
}
