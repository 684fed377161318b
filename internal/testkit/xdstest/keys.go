package xdstest

import (
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// inlineKey is a private key as an operator would paste it inline.
const inlineKey = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n"

// KeyedCluster is Cluster(name, 1000) with an upstream TLS context whose
// client certificate's private key is inline: a resource carrying an
// inline private key (resource.InlineKeys), which replicas send only to
// clients allowed secrets.
func KeyedCluster(tb testing.TB, name string) *clusterv3.Cluster {
	tb.Helper()
	tlsCtx, err := anypb.New(&tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificates: []*tlsv3.TlsCertificate{{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: "/etc/certs/tls.crt"}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: inlineKey}},
		}},
	}})
	if err != nil {
		tb.Fatal(err)
	}
	c := Cluster(name, 1000)
	c.TransportSocket = &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsCtx}}
	return c
}

// KeyedListener is APIListener(name, route, true) whose one filter chain
// terminates TLS with a certificate whose private key is inline: a
// resource carrying an inline private key, as xdsadmin apply
// --allow-inline-keys writes one.
func KeyedListener(tb testing.TB, name, route string) *listenerv3.Listener {
	tb.Helper()
	tlsCtx, err := anypb.New(&tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificates: []*tlsv3.TlsCertificate{{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: "/etc/certs/tls.crt"}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: inlineKey}},
		}},
	}})
	if err != nil {
		tb.Fatal(err)
	}
	l := APIListener(tb, name, route, true)
	l.FilterChains = []*listenerv3.FilterChain{{
		TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: tlsCtx}},
	}}
	return l
}
