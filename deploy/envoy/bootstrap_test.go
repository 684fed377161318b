// Package envoy holds the Envoy and gRPC bootstrap files of deploy/envoy
// and their test: each Envoy bootstrap decodes strictly as a
// envoy.config.bootstrap.v3.Bootstrap, passes the generated validators,
// names a node, and reaches a replica's default ports with keepalive.
package envoy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoregistry"
	"sigs.k8s.io/yaml"

	"github.com/legation-io/legation/internal/admin/fsexport"
	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/resource" // registers every Envoy type, for the Any fields
	"github.com/legation-io/legation/internal/testkit/docgen"
)

// The Envoy bootstraps and what each must be. A file added to the
// directory without a row here fails the test.
var bootstraps = map[string]struct {
	api  corev3.ApiConfigSource_ApiType // of every config source; -1: files
	mtls bool
}{
	"ads-sotw.yaml":            {corev3.ApiConfigSource_GRPC, false},
	"ads-delta.yaml":           {corev3.ApiConfigSource_DELTA_GRPC, false},
	"ads-sotw-mtls.yaml":       {corev3.ApiConfigSource_GRPC, true},
	"ads-delta-mtls.yaml":      {corev3.ApiConfigSource_DELTA_GRPC, true},
	"rest-json.yaml":           {corev3.ApiConfigSource_REST, false},
	"filesystem.yaml":          {-1, false},
	"grpc-bootstrap.json":      {}, // gRPC's, checked by TestGRPCBootstraps
	"grpc-bootstrap-mtls.json": {},
}

const httpOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// defaultPort is the port of a replica's default listen address.
func defaultPort(t *testing.T, addr string) uint32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(n)
}

func TestFilesListed(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".yaml", ".json":
			found = append(found, e.Name())
			if _, ok := bootstraps[e.Name()]; !ok {
				t.Errorf("%s: not in this test's table of bootstraps", e.Name())
			}
		}
	}
	for name := range bootstraps {
		if !slices.Contains(found, name) {
			t.Errorf("%s: missing from deploy/envoy", name)
		}
	}
}

// decodeBootstrap decodes an Envoy bootstrap YAML file strictly: an
// unknown field or an Any of an unknown type is an error.
func decodeBootstrap(file string) (*bootstrapv3.Bootstrap, error) {
	y, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var b bootstrapv3.Bootstrap
	opts := protojson.UnmarshalOptions{DiscardUnknown: false, Resolver: protoregistry.GlobalTypes}
	if err := opts.Unmarshal(j, &b); err != nil {
		return nil, fmt.Errorf("%s: as envoy.config.bootstrap.v3.Bootstrap: %w", file, err)
	}
	if err := b.ValidateAll(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &b, nil
}

func TestEnvoyBootstraps(t *testing.T) {
	def := replica.DefaultConfig()
	xdsPort, httpPort := defaultPort(t, def.XDSAddr), defaultPort(t, def.HTTPAddr)
	for name, want := range bootstraps {
		if filepath.Ext(name) != ".yaml" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			b, err := decodeBootstrap(name)
			if err != nil {
				t.Fatal(err)
			}
			if b.GetNode().GetId() == "" || b.GetNode().GetCluster() == "" {
				t.Errorf("node id %q, cluster %q: want both set", b.GetNode().GetId(), b.GetNode().GetCluster())
			}
			dyn := b.GetDynamicResources()
			sources := map[string]*corev3.ConfigSource{"cds_config": dyn.GetCdsConfig(), "lds_config": dyn.GetLdsConfig()}
			if want.api == -1 {
				checkFiles(t, sources)
				if n := len(b.GetStaticResources().GetClusters()); n != 0 {
					t.Errorf("%d static clusters: a filesystem bootstrap needs no control plane", n)
				}
				return
			}
			// The clusters the config sources name, and their port.
			port := xdsPort
			var clusters []string
			if want.api == corev3.ApiConfigSource_REST {
				port = httpPort
				if dyn.GetAdsConfig() != nil {
					t.Error("ads_config set: REST has no ADS")
				}
				for key, cs := range sources {
					api := cs.GetApiConfigSource()
					if api.GetApiType() != want.api || api.GetTransportApiVersion() != corev3.ApiVersion_V3 ||
						len(api.GetClusterNames()) != 1 || api.GetRefreshDelay() == nil {
						t.Errorf("%s: %v: want one REST V3 source with a refresh delay", key, cs)
						continue
					}
					clusters = append(clusters, api.GetClusterNames()[0])
				}
			} else {
				ads := dyn.GetAdsConfig()
				if ads.GetApiType() != want.api || ads.GetTransportApiVersion() != corev3.ApiVersion_V3 ||
					len(ads.GetGrpcServices()) != 1 || ads.GetGrpcServices()[0].GetEnvoyGrpc() == nil {
					t.Fatalf("ads_config %v: want %v, V3, one envoy_grpc service", ads, want.api)
				}
				clusters = append(clusters, ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName())
				for key, cs := range sources {
					if cs.GetAds() == nil || cs.GetResourceApiVersion() != corev3.ApiVersion_V3 {
						t.Errorf("%s: %v: want ads: {} and resource_api_version V3", key, cs)
					}
				}
			}
			for _, c := range slices.Compact(slices.Sorted(slices.Values(clusters))) {
				checkCluster(t, b, c, port, want.api, want.mtls)
			}
		})
	}
}

// checkFiles checks that the path config sources name the files
// `xdsadmin export` writes for their type, in one directory.
func checkFiles(t *testing.T, sources map[string]*corev3.ConfigSource) {
	t.Helper()
	wantFile := map[string]string{
		"cds_config": fsexport.FileName(resource.Cluster, fsexport.YAML),
		"lds_config": fsexport.FileName(resource.Listener, fsexport.YAML),
	}
	dirs := map[string]bool{}
	for key, cs := range sources {
		p := cs.GetPathConfigSource().GetPath()
		if p == "" || cs.GetResourceApiVersion() != corev3.ApiVersion_V3 {
			t.Errorf("%s: %v: want path_config_source and resource_api_version V3", key, cs)
			continue
		}
		if path.Base(p) != wantFile[key] {
			t.Errorf("%s: path %s: export writes this type to %s", key, p, wantFile[key])
		}
		dirs[path.Dir(p)] = true
	}
	if len(dirs) != 1 {
		t.Errorf("config sources in directories %v: want the one export --dir", dirs)
	}
}

// checkCluster checks the static cluster name: one endpoint on port,
// HTTP/2 for gRPC and HTTP/1.1 for REST, the recommended keepalive
// (checkKeepalive), and with mtls a TLS transport socket
// presenting a certificate, checking the replica's, and offering h2.
func checkCluster(t *testing.T, b *bootstrapv3.Bootstrap, name string, port uint32, api corev3.ApiConfigSource_ApiType, mtls bool) {
	t.Helper()
	var c *clusterv3.Cluster
	for _, sc := range b.GetStaticResources().GetClusters() {
		if sc.GetName() == name {
			c = sc
		}
	}
	if c == nil {
		t.Errorf("cluster %q: not among the static clusters", name)
		return
	}
	var ports []uint32
	for _, le := range c.GetLoadAssignment().GetEndpoints() {
		for _, lb := range le.GetLbEndpoints() {
			ports = append(ports, lb.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue())
		}
	}
	if !slices.Equal(ports, []uint32{port}) {
		t.Errorf("cluster %s: endpoint ports %v, want [%d] (the replica's default)", name, ports, port)
	}

	anyOpts, ok := c.GetTypedExtensionProtocolOptions()[httpOptionsKey]
	if !ok {
		t.Fatalf("cluster %s: no typed_extension_protocol_options %s", name, httpOptionsKey)
	}
	var opts httpv3.HttpProtocolOptions
	if err := anyOpts.UnmarshalTo(&opts); err != nil {
		t.Fatalf("cluster %s: %s: %v", name, httpOptionsKey, err)
	}
	if api == corev3.ApiConfigSource_REST {
		if opts.GetExplicitHttpConfig().GetHttpProtocolOptions() == nil {
			t.Errorf("cluster %s: want explicit HTTP/1.1 (the HTTP port has no cleartext HTTP/2)", name)
		}
	} else if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Fatalf("cluster %s: want explicit HTTP/2 (gRPC)", name)
	}
	checkKeepalive(t, c, &opts, api == corev3.ApiConfigSource_REST)

	ts := c.GetTransportSocket()
	if !mtls {
		if ts != nil {
			t.Errorf("cluster %s: transport socket %s in a plaintext bootstrap", name, ts.GetName())
		}
		return
	}
	var tlsCtx tlsv3.UpstreamTlsContext
	if ts.GetTypedConfig() == nil {
		t.Fatalf("cluster %s: no transport socket: want an UpstreamTlsContext", name)
	}
	if err := ts.GetTypedConfig().UnmarshalTo(&tlsCtx); err != nil {
		t.Fatalf("cluster %s: transport socket: %v", name, err)
	}
	common := tlsCtx.GetCommonTlsContext()
	if certs := common.GetTlsCertificates(); len(certs) != 1 ||
		certs[0].GetCertificateChain().GetFilename() == "" || certs[0].GetPrivateKey().GetFilename() == "" {
		t.Errorf("cluster %s: tls_certificates %v: want one certificate and key from files", name, certs)
	}
	if common.GetValidationContext().GetTrustedCa().GetFilename() == "" {
		t.Errorf("cluster %s: no validation_context.trusted_ca file: the replica's certificate would go unchecked", name)
	}
	if !slices.Contains(common.GetAlpnProtocols(), "h2") {
		t.Errorf("cluster %s: alpn_protocols %v: gRPC servers refuse a TLS client without h2", name, common.GetAlpnProtocols())
	}
}

// grpcBootstrap is the part of gRPC's xDS bootstrap format these files
// use; decoding refuses any other field.
type grpcBootstrap struct {
	XDSServers []struct {
		ServerURI    string `json:"server_uri"`
		ChannelCreds []struct {
			Type   string          `json:"type"`
			Config json.RawMessage `json:"config"`
		} `json:"channel_creds"`
		ServerFeatures []string `json:"server_features"`
	} `json:"xds_servers"`
	CertificateProviders map[string]struct {
		PluginName string          `json:"plugin_name"`
		Config     json.RawMessage `json:"config"`
	} `json:"certificate_providers"`
	Node struct {
		ID       string            `json:"id"`
		Cluster  string            `json:"cluster"`
		Locality map[string]string `json:"locality"`
	} `json:"node"`
}

// fileConfig is the config of gRPC's "tls" channel credentials and of its
// file_watcher certificate provider.
type fileConfig struct {
	CACertificateFile string `json:"ca_certificate_file"`
	CertificateFile   string `json:"certificate_file"`
	PrivateKeyFile    string `json:"private_key_file"`
	RefreshInterval   string `json:"refresh_interval"`
}

func decodeStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

func checkFileConfig(t *testing.T, what string, raw json.RawMessage) {
	t.Helper()
	var fc fileConfig
	if err := decodeStrict(raw, &fc); err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	if fc.CACertificateFile == "" || fc.CertificateFile == "" || fc.PrivateKeyFile == "" {
		t.Errorf("%s: %+v: want the CA, certificate and key files", what, fc)
	}
	if _, err := time.ParseDuration(fc.RefreshInterval); err != nil {
		t.Errorf("%s: refresh_interval: %v", what, err)
	}
}

func TestGRPCBootstraps(t *testing.T) {
	xdsPort := defaultPort(t, replica.DefaultConfig().XDSAddr)
	for _, tc := range []struct {
		file string
		mtls bool
	}{{"grpc-bootstrap.json", false}, {"grpc-bootstrap-mtls.json", true}} {
		t.Run(tc.file, func(t *testing.T) {
			raw, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			var b grpcBootstrap
			if err := decodeStrict(raw, &b); err != nil {
				t.Fatalf("%s: %v", tc.file, err)
			}
			if len(b.XDSServers) != 1 {
				t.Fatalf("%d xds_servers, want 1", len(b.XDSServers))
			}
			s := b.XDSServers[0]
			_, port, err := net.SplitHostPort(s.ServerURI)
			if err != nil || port != strconv.Itoa(int(xdsPort)) {
				t.Errorf("server_uri %q: want port %d (the replica's default)", s.ServerURI, xdsPort)
			}
			if !slices.Contains(s.ServerFeatures, "xds_v3") {
				t.Errorf("server_features %v: want xds_v3", s.ServerFeatures)
			}
			if len(s.ChannelCreds) != 1 {
				t.Fatalf("%d channel_creds, want 1", len(s.ChannelCreds))
			}
			if b.Node.ID == "" || b.Node.Cluster == "" {
				t.Errorf("node id %q, cluster %q: want both set", b.Node.ID, b.Node.Cluster)
			}
			cred := s.ChannelCreds[0]
			if !tc.mtls {
				if cred.Type != "insecure" || len(b.CertificateProviders) != 0 {
					t.Errorf("channel_creds %s, %d certificate providers: want insecure and none", cred.Type, len(b.CertificateProviders))
				}
				return
			}
			if cred.Type != "tls" {
				t.Fatalf("channel_creds type %q, want tls", cred.Type)
			}
			checkFileConfig(t, "channel_creds tls config", cred.Config)
			p, ok := b.CertificateProviders["default"]
			if !ok || p.PluginName != "file_watcher" {
				t.Fatalf("certificate_providers: default %v, plugin %q: want default, a file_watcher", ok, p.PluginName)
			}
			checkFileConfig(t, "certificate_providers default config", p.Config)
		})
	}
}

// fakeConn is the resolver.ClientConn of TestGRPCParsesBootstraps; the
// resolver's reports are dropped.
type fakeConn struct {
	resolver.ClientConn
}

func (*fakeConn) ReportError(error)                {}
func (*fakeConn) UpdateState(resolver.State) error { return nil }
func (*fakeConn) ParseServiceConfig(string) *serviceconfig.ParseResult {
	return &serviceconfig.ParseResult{}
}

// TestGRPCParsesBootstraps has grpc-go's xDS resolver parse each gRPC
// bootstrap (its own parser, which checks the credential types and the
// certificate provider configs): the resolver is built for xds:///echo
// and closed. server_uri is pointed at a listener of the test's, so that
// the client's connection stays inside the test.
func TestGRPCParsesBootstraps(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	target, err := url.Parse("xds:///echo")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"grpc-bootstrap.json", "grpc-bootstrap-mtls.json"} {
		t.Run(file, func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			uri := []byte(`"server_uri": "127.0.0.1:18000"`)
			if !bytes.Contains(raw, uri) {
				t.Fatalf("%s: no %s", file, uri)
			}
			raw = bytes.Replace(raw, uri, []byte(`"server_uri": "`+ln.Addr().String()+`"`), 1)
			b, err := xds.NewXDSResolverWithConfigForTesting(raw)
			if err != nil {
				t.Fatal(err)
			}
			r, err := b.Build(resolver.Target{URL: *target}, &fakeConn{}, resolver.BuildOptions{})
			if err != nil {
				t.Fatalf("%s: grpc-go refuses it: %v", file, err)
			}
			r.Close()
		})
	}
}

// TestDocsBootstraps: docs/reference/bootstraps.md includes every file of
// deploy/envoy as it is, each in a region named after the file; `make
// docs` rewrites them.
func TestDocsBootstraps(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(bootstraps)) {
		body, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		lang := strings.TrimPrefix(filepath.Ext(name), ".")
		docgen.Region(t, "docs/reference/bootstraps.md", name, "```"+lang+"\n"+string(body)+"```")
	}
}
