package resource_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/state/resource"
)

const (
	downstreamTLS = "envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
	upstreamTLS   = "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
)

// tlsListenerYAML is a listener terminating TLS with one certificate
// whose private key is the YAML key (a DataSource mapping).
func tlsListenerYAML(key string) string {
	return `"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: l
address: {socket_address: {address: 0.0.0.0, port_value: 10443}}
filter_chains:
- filters:
  - name: envoy.filters.network.tcp_proxy
    typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: t, cluster: c}
  transport_socket:
    name: envoy.transport_sockets.tls
    typed_config:
      "@type": type.googleapis.com/` + downstreamTLS + `
      common_tls_context:
        tls_certificates:
        - certificate_chain: {filename: /etc/certs/tls.crt}
          private_key: ` + key + `
`
}

// tlsClusterYAML is a cluster whose upstream TLS context holds the YAML
// certificate (a TlsCertificate mapping).
func tlsClusterYAML(cert string) string {
	return `"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: c
connect_timeout: 1s
transport_socket:
  name: envoy.transport_sockets.tls
  typed_config:
    "@type": type.googleapis.com/` + upstreamTLS + `
    common_tls_context:
      tls_certificates:
      - ` + cert + `
`
}

const pemKey = `"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n"`

func TestInlineKeys(t *testing.T) {
	listenerKey := "filter_chains[0].transport_socket.typed_config(" + downstreamTLS + ").common_tls_context.tls_certificates[0].private_key"
	clusterCert := "transport_socket.typed_config(" + upstreamTLS + ").common_tls_context.tls_certificates[0]"
	for _, tc := range []struct {
		name string
		in   string
		want []string
	}{
		{"listener, inline_string", tlsListenerYAML("{inline_string: " + pemKey + "}"), []string{listenerKey}},
		{"listener, inline_bytes", tlsListenerYAML("{inline_bytes: LS0tLS0=}"), []string{listenerKey}},
		{"listener, filename", tlsListenerYAML("{filename: /etc/certs/tls.key}"), nil},
		{"listener, environment variable", tlsListenerYAML("{environment_variable: TLS_KEY}"), nil},
		{"cluster, pkcs12 and password", tlsClusterYAML("{pkcs12: {inline_bytes: AAEC}, password: {inline_string: hunter2}}"),
			[]string{clusterCert + ".pkcs12", clusterCert + ".password"}},
		{"cluster, password of a key file", tlsClusterYAML("{certificate_chain: {filename: /c}, private_key: {filename: /k}, password: {inline_string: hunter2}}"),
			[]string{clusterCert + ".password"}},
		{"cluster, key provider", tlsClusterYAML(`{certificate_chain: {filename: /c}, private_key_provider: {provider_name: p, typed_config: {"@type": type.googleapis.com/envoy.config.core.v3.DataSource, inline_string: key}}}`),
			[]string{clusterCert + ".private_key_provider.typed_config(envoy.config.core.v3.DataSource)"}},
		{"cluster, certificate chain only inline", tlsClusterYAML("{certificate_chain: {inline_string: cert}, private_key: {filename: /k}}"), nil},
		{"TypedStruct", `"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: c
connect_timeout: 1s
transport_socket:
  name: envoy.transport_sockets.tls
  typed_config:
    "@type": type.googleapis.com/xds.type.v3.TypedStruct
    type_url: type.googleapis.com/` + upstreamTLS + `
    value: {common_tls_context: {tls_certificates: [{private_key: {inline_string: k}}]}}
`, []string{"transport_socket.typed_config(" + upstreamTLS + ").common_tls_context.tls_certificates[0].private_key"}},
		{"gRPC SslCredentials", `"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: c
connect_timeout: 1s
type: EDS
eds_cluster_config:
  eds_config:
    api_config_source:
      api_type: GRPC
      grpc_services:
      - google_grpc: {target_uri: "xds:443", stat_prefix: x, channel_credentials: {ssl_credentials: {private_key: {inline_bytes: AAEC}}}}
`, []string{"eds_cluster_config.eds_config.api_config_source.grpc_services[0].google_grpc.channel_credentials.ssl_credentials.private_key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := resource.Decode("in.yaml", []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			got := resource.InlineKeys(docs[0].Message)
			if !slices.Equal(got, tc.want) {
				t.Errorf("InlineKeys = %q\nwant %q", got, tc.want)
			}
			if carries := resource.CarriesInlineKey(docs[0].Type, docs[0].Body.GetValue()); carries != (len(tc.want) > 0) {
				t.Errorf("CarriesInlineKey = %v, want %v", carries, len(tc.want) > 0)
			}
		})
	}
}

// TestInlineKeysSecret: a secret's key is found (InlineKeys looks at any
// message), but a secret does not count as carrying one: keys belong there.
func TestInlineKeysSecret(t *testing.T) {
	docs, err := resource.Decode("in.yaml", []byte(`"@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
name: s
tls_certificate: {certificate_chain: {inline_string: cert}, private_key: {inline_string: `+pemKey+`}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := resource.InlineKeys(docs[0].Message); len(got) != 1 || !strings.HasSuffix(got[0], "tls_certificate.private_key") {
		t.Errorf("InlineKeys = %q, want tls_certificate.private_key", got)
	}
	if resource.CarriesInlineKey(resource.Secret, docs[0].Body.GetValue()) {
		t.Error("CarriesInlineKey(secret) = true, want false")
	}
}

// BenchmarkCarriesInlineKey measures the search the view runs once per
// resource revision it reads, on the example listeners, clusters, routes
// and endpoints (none carries a key: the whole resource is walked).
func BenchmarkCarriesInlineKey(b *testing.B) {
	var docs []resource.Doc
	for _, file := range []string{"../../../examples/listeners.yaml", "../../../examples/clusters.yaml", "../../../examples/routes.yaml", "../../../examples/endpoints.yaml"} {
		got, err := resource.Decode(file, readFile(b, file))
		if err != nil {
			b.Fatal(err)
		}
		docs = append(docs, got...)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, d := range docs {
			if resource.CarriesInlineKey(d.Type, d.Body.GetValue()) {
				b.Fatalf("%s %s carries a key", d.Type.Name, d.Name)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(docs)), "ns/resource")
}
