package resource_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/legation-io/legation/internal/state/resource"
)

const (
	clusterURL  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	endpointURL = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
)

// docID is what a test expects of one decoded resource.
type docID struct {
	Index int
	Item  int
	Type  string
	Name  string
}

func ids(docs []resource.Doc) []docID {
	var out []docID
	for _, d := range docs {
		out = append(out, docID{Index: d.Index, Item: d.Item, Type: d.Type.Name, Name: d.Name})
	}
	return out
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeExamples(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []docID
	}{
		{"clusters.yaml", []docID{
			{1, 0, "cluster", "backend-a"},
			{2, 0, "cluster", "backend-b"},
			{3, 0, "cluster", "echo-cluster"},
		}},
		{"endpoints.yaml", []docID{
			{1, 0, "endpoint", "backend-a"},
			{2, 0, "endpoint", "backend-b"},
			{3, 0, "endpoint", "echo-cluster"},
		}},
		{"listeners.yaml", []docID{
			{1, 0, "listener", "ingress-http"},
			{2, 0, "listener", "echo"},
		}},
		{"routes.yaml", []docID{
			{1, 0, "route", "ingress-routes"},
			{2, 0, "route", "echo-route"},
		}},
		{"ttl/incident-override.yaml", []docID{
			{1, 0, "runtime", "incident-override"},
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			docs, err := resource.Decode(tc.file, readFile(t, filepath.Join("../../../examples", tc.file)))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tc.want, ids(docs)); diff != "" {
				t.Errorf("decoded resources differ (-want +got):\n%s", diff)
			}
			if err := resource.CheckUnique(docs); err != nil {
				t.Errorf("CheckUnique: %v", err)
			}
			for _, d := range docs {
				checkDoc(t, d)
				if d.Source != tc.file {
					t.Errorf("%s: Source = %q, want %q", d.Where(), d.Source, tc.file)
				}
			}
		})
	}
	// Every example file is covered above.
	files, err := filepath.Glob("../../../examples/*.yaml")
	if err != nil || len(files) != 4 {
		t.Errorf("examples/*.yaml = %v, %v; want the 4 files tested", files, err)
	}
	if files, err = filepath.Glob("../../../examples/ttl/*.yaml"); err != nil || len(files) != 1 {
		t.Errorf("examples/ttl/*.yaml = %v, %v; want the file tested", files, err)
	}
}

// checkDoc checks what every decoded resource must satisfy: a name, a known
// type, a body that is the deterministic encoding of the message, and a
// message that validates.
func checkDoc(t *testing.T, d resource.Doc) {
	t.Helper()
	if err := resource.ValidateName(d.Name); err != nil {
		t.Errorf("%s: %v", d.Where(), err)
	}
	if d.Type == nil {
		t.Fatalf("%s: no type", d.Where())
	}
	if got, ok := resource.ByURL(d.Type.URL); !ok || got != d.Type {
		t.Errorf("%s: type %v is not registered", d.Where(), d.Type)
	}
	if d.Body.GetTypeUrl() != d.Type.URL {
		t.Errorf("%s: body type %q, want %q", d.Where(), d.Body.GetTypeUrl(), d.Type.URL)
	}
	msg, err := resource.Unmarshal(d.Type, d.Body.GetValue())
	if err != nil {
		t.Fatalf("%s: body does not unmarshal: %v", d.Where(), err)
	}
	if diff := cmp.Diff(d.Message, msg, protocmp.Transform()); diff != "" {
		t.Errorf("%s: body differs from Message (-Message +body):\n%s", d.Where(), diff)
	}
	if got := d.Type.NameOf(msg); got != d.Name {
		t.Errorf("%s: body names %q, want %q", d.Where(), got, d.Name)
	}
	if err := resource.Check(msg); err != nil {
		t.Errorf("%s: body does not validate: %v", d.Where(), err)
	}
	// The stored bytes are stable: marshaling the decoded body again gives
	// the same bytes (promise 2 of docs/concepts/design.md needs identical bytes
	// for identical input).
	again, err := resource.Marshal(d.Type, msg)
	if err != nil {
		t.Fatalf("%s: Marshal: %v", d.Where(), err)
	}
	if string(again.GetValue()) != string(d.Body.GetValue()) {
		t.Errorf("%s: marshaling the body again gives different bytes", d.Where())
	}
}

func TestDecodeBadExamples(t *testing.T) {
	urls := make([]string, 0, len(resource.All()))
	for _, typ := range resource.All() {
		urls = append(urls, typ.URL)
	}
	for _, tc := range []struct {
		file      string
		wantIndex int
		want      string
	}{
		{"bad-yaml.yaml", 1,
			`bad-yaml.yaml: document 1: bad YAML/JSON: yaml: line 3: did not find expected ',' or ']'`},
		{"unknown-type.yaml", 1,
			`unknown-type.yaml: document 1 (typo-type): unknown @type "type.googleapis.com/envoy.config.cluster.v3.Clusterr"; want one of: ` +
				strings.Join(urls, ", ") + ", type.googleapis.com/envoy.service.discovery.v3.Resource or " + resource.DiscoveryResponseURL},
		{"unknown-field.yaml", 1,
			`unknown-field.yaml: document 1 (cluster "typo-field"): proto: unknown field "connect_timeoutt"`},
		{"negative-timeout.yaml", 1,
			`negative-timeout.yaml: document 1 (cluster "negative-timeout"): invalid Cluster.ConnectTimeout: value must be greater than 0s`},
		{"empty-name.yaml", 1,
			`empty-name.yaml: document 1 (cluster ""): empty name: every resource needs a non-empty name`},
		{"duplicate-names.yaml", 2,
			`duplicate-names.yaml: document 2 (cluster "twin"): duplicate name: already defined at duplicate-names.yaml: document 1`},
	} {
		t.Run(tc.file, func(t *testing.T) {
			docs, err := resource.Decode(tc.file, readFile(t, filepath.Join("../../../examples/bad", tc.file)))
			if err == nil {
				err = resource.CheckUnique(docs)
			}
			var de *resource.DocError
			if !errors.As(err, &de) {
				t.Fatalf("got error %v (%T), want a *resource.DocError", err, err)
			}
			if de.Source != tc.file || de.Index != tc.wantIndex {
				t.Errorf("DocError at %s document %d, want %s document %d", de.Source, de.Index, tc.file, tc.wantIndex)
			}
			if got := errString(err); got != tc.want {
				t.Errorf("error:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
	files, err := filepath.Glob("../../../examples/bad/*.yaml")
	if err != nil || len(files) != 6 {
		t.Errorf("examples/bad/*.yaml = %v, %v; want the 6 files tested", files, err)
	}
}

const (
	clusterA = "\"@type\": " + clusterURL + "\nname: a\n"
	clusterB = "\"@type\": " + clusterURL + "\nname: b\n"
)

func TestDecodeSplitsDocuments(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []docID
	}{
		{"one", clusterA, []docID{{1, 0, "cluster", "a"}}},
		{"two", clusterA + "---\n" + clusterB, []docID{{1, 0, "cluster", "a"}, {2, 0, "cluster", "b"}}},
		{"separator with comment", clusterA + "--- # the second one\n" + clusterB,
			[]docID{{1, 0, "cluster", "a"}, {2, 0, "cluster", "b"}}},
		{"separator with trailing space", clusterA + "---  \t\n" + clusterB,
			[]docID{{1, 0, "cluster", "a"}, {2, 0, "cluster", "b"}}},
		{"header comment then separator", "# header\n\n# more\n---\n" + clusterA + "---\n" + clusterB,
			[]docID{{1, 0, "cluster", "a"}, {2, 0, "cluster", "b"}}},
		{"leading separator", "---\n" + clusterA, []docID{{1, 0, "cluster", "a"}}},
		{"empty documents count", clusterA + "---\n---\n# only a comment\n---\n\n---\n" + clusterB,
			[]docID{{1, 0, "cluster", "a"}, {5, 0, "cluster", "b"}}},
		{"trailing separator", clusterA + "---\n", []docID{{1, 0, "cluster", "a"}}},
		{"trailing comment", clusterA + "---\n# the end\n", []docID{{1, 0, "cluster", "a"}}},
		{"content on the separator line", clusterA + `--- {"@type": "` + clusterURL + `", "name": "b"}` + "\n",
			[]docID{{1, 0, "cluster", "a"}, {2, 0, "cluster", "b"}}},
		{"tag on the separator line", clusterA + "--- !!map\n" + clusterB,
			[]docID{{1, 0, "cluster", "a"}, {2, 0, "cluster", "b"}}},
		{"document end marker", clusterA + "...\n" + clusterB,
			[]docID{{1, 0, "cluster", "a"}, {2, 0, "cluster", "b"}}},
		{"document end then separator", clusterA + "...\n# between\n---\n" + clusterB,
			[]docID{{1, 0, "cluster", "a"}, {2, 0, "cluster", "b"}}},
		{"not a separator", "\"@type\": " + clusterURL + "\nname: ---a\n", []docID{{1, 0, "cluster", "---a"}}},
		{"CRLF", strings.ReplaceAll(clusterA+"---\n"+clusterB, "\n", "\r\n"),
			[]docID{{1, 0, "cluster", "a"}, {2, 0, "cluster", "b"}}},
		{"byte order mark", "\ufeff---\n" + clusterA, []docID{{1, 0, "cluster", "a"}}},
		{"JSON", `{"@type": "` + clusterURL + `", "name": "a", "connectTimeout": "1s"}`, []docID{{1, 0, "cluster", "a"}}},
		{"JSON over lines", "{\n  \"@type\": \"" + clusterURL + "\",\n  \"name\": \"a\"\n}\n", []docID{{1, 0, "cluster", "a"}}},
		{"empty", "", nil},
		{"only comments", "# nothing\n\n# here\n", nil},
		{"only separators", "---\n---\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := resource.Decode("in.yaml", []byte(tc.in))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tc.want, ids(docs)); diff != "" {
				t.Errorf("decoded resources differ (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{
		{"numbered after empty documents", clusterA + "---\n---\n\"@type\": " + clusterURL + "\nname: b\nconnect_timeout: -1s\n",
			`in.yaml: document 3 (cluster "b"): invalid Cluster.ConnectTimeout: value must be greater than 0s`},
		{"numbered after a header", "# header\n---\n" + clusterA + "connect_timeoutt: 1s\n",
			`in.yaml: document 1 (cluster "a"): proto: unknown field "connect_timeoutt"`},
		{"repeated key", clusterA + "name: b\n",
			"in.yaml: document 1: bad YAML/JSON: yaml: unmarshal errors:\n  line 3: key \"name\" already set in map"},
		{"repeated key in JSON", `{"@type": "` + clusterURL + `", "name": "a", "name": "b"}`,
			"in.yaml: document 1: bad YAML/JSON: yaml: unmarshal errors:\n  line 1: key \"name\" already set in map"},
		{"repeated field in two spellings", clusterA + "connectTimeout: 1s\nconnect_timeout: 2s\n",
			`in.yaml: document 1 (cluster "a"): proto: duplicate field "connect_timeout"`},
		{"not a mapping", "- a\n- b\n",
			`in.yaml: document 1: a document must be a mapping with an "@type" key`},
		{"missing @type", "name: x\n",
			`in.yaml: document 1 (x): missing "@type" (e.g. "@type": ` + clusterURL + `)`},
		{"@type not a string", "\"@type\": 7\n",
			`in.yaml: document 1: missing "@type" (e.g. "@type": ` + clusterURL + `)`},
		{"bad enum", clusterA + "lb_policy: NOPE\n",
			`in.yaml: document 1 (cluster "a"): proto: invalid value for enum field lbPolicy: "NOPE"`},
		{"unresolvable typed_config", "\"@type\": type.googleapis.com/envoy.config.listener.v3.Listener\nname: l\nfilter_chains:\n- filters:\n  - name: x\n    typed_config:\n      \"@type\": type.googleapis.com/foo.Bar\n",
			`in.yaml: document 1 (listener "l"): filter_chains[0].filters[0].typed_config: unknown type "type.googleapis.com/foo.Bar": not an Envoy extension type this xdsadmin knows`},
		{"control character in name", "\"@type\": " + clusterURL + "\nname: \"a\\tb\"\n",
			`in.yaml: document 1 (cluster "a\tb"): name "a\tb" holds a control character`},
		{"several rule violations", "\"@type\": " + endpointURL + "\ncluster_name: e\nendpoints:\n- priority: 1\n  load_balancing_weight: 0\n",
			`in.yaml: document 1 (endpoint "e"): invalid ClusterLoadAssignment.Endpoints[0]: embedded message failed validation | caused by: invalid LocalityLbEndpoints.LoadBalancingWeight: value must be greater than or equal to 1`},
		{"LbEndpoint without a wrapper", "\"@type\": " + resource.LbEndpoint.URL + "\nload_balancing_weight: 1\n",
			`in.yaml: document 1 (lb-endpoint): an envoy.config.endpoint.v3.LbEndpoint has no name field: give it in a wrapper, {"@type": "type.googleapis.com/envoy.service.discovery.v3.Resource", "name": NAME, "resource": {...}}`},
		{"LbEndpoint under another type", ledsMember("xdstp://a/envoy.config.endpoint.v3.ClusterLoadAssignment/c1/e1"),
			`in.yaml: document 1 (lb-endpoint "xdstp://a/envoy.config.endpoint.v3.ClusterLoadAssignment/c1/e1"): name "xdstp://a/envoy.config.endpoint.v3.ClusterLoadAssignment/c1/e1": its type segment "envoy.config.endpoint.v3.ClusterLoadAssignment" is not "envoy.config.endpoint.v3.LbEndpoint", the message of a lb-endpoint`},
		{"LEDS collection not a glob", ledsAssignment("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1"),
			`in.yaml: document 1 (endpoint "c1"): endpoints[0].leds_cluster_locality_config.leds_collection_name: "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1" is not a glob collection: it must end in /*`},
		{"LEDS collection of another type", ledsAssignment("xdstp://a/envoy.config.cluster.v3.Cluster/c1/*"),
			`in.yaml: document 1 (endpoint "c1"): endpoints[0].leds_cluster_locality_config.leds_collection_name: "xdstp://a/envoy.config.cluster.v3.Cluster/c1/*": its type segment "envoy.config.cluster.v3.Cluster" is not "envoy.config.endpoint.v3.LbEndpoint"`},
		{"LEDS collection old-style", ledsAssignment("c1-endpoints"),
			`in.yaml: document 1 (endpoint "c1"): endpoints[0].leds_cluster_locality_config.leds_collection_name: xdstp: name "c1-endpoints": not an xdstp name: want the scheme "xdstp://"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := resource.Decode("in.yaml", []byte(tc.in))
			var de *resource.DocError
			if !errors.As(err, &de) {
				t.Fatalf("Decode = %v, %v (%T); want a *resource.DocError", ids(docs), err, err)
			}
			if got := errString(err); got != tc.want {
				t.Errorf("error:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// ledsMember is a document of one LbEndpoint named name, in the
// discovery.v3.Resource wrapper that names it.
func ledsMember(name string) string {
	return "\"@type\": type.googleapis.com/envoy.service.discovery.v3.Resource\nname: " + name +
		"\nresource:\n  \"@type\": " + resource.LbEndpoint.URL + "\n  endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 80}}}\n"
}

// ledsAssignment is the ClusterLoadAssignment of cluster c1 whose one
// locality's endpoints are the LEDS collection collection.
func ledsAssignment(collection string) string {
	return "\"@type\": " + resource.Endpoint.URL + "\ncluster_name: c1\nendpoints:\n- leds_cluster_locality_config:\n    leds_config: {ads: {}, resource_api_version: V3}\n    leds_collection_name: \"" + collection + "\"\n"
}

// TestDecodeLEDS: an LbEndpoint, which holds no name, is named by its
// wrapper, in the normalized form; a ClusterLoadAssignment naming a
// well-formed LEDS collection decodes.
func TestDecodeLEDS(t *testing.T) {
	const norm = "xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/e1?x=1&y=2"
	docs, err := resource.Decode("in.yaml", []byte(ledsMember("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/e1?y=2&x=1")+"---\n"+
		ledsAssignment("xdstp://a/envoy.config.endpoint.v3.LbEndpoint/c1/*")))
	if err != nil {
		t.Fatal(err)
	}
	want := []docID{{Index: 1, Type: "lb-endpoint", Name: norm}, {Index: 2, Type: "endpoint", Name: "c1"}}
	if diff := cmp.Diff(want, ids(docs)); diff != "" {
		t.Fatalf("Decode (-want +got):\n%s", diff)
	}
}

const discoveryResponse = `# What Envoy's filesystem subscription reads.
"@type": type.googleapis.com/envoy.service.discovery.v3.DiscoveryResponse
version_info: "7"
type_url: type.googleapis.com/envoy.config.cluster.v3.Cluster
resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: a
  connect_timeout: 1s
- "@type": type.googleapis.com/envoy.service.discovery.v3.Resource
  name: b
  version: "3"
  resource:
    "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
    name: b
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: c
`

func TestDecodeDiscoveryResponse(t *testing.T) {
	docs, err := resource.Decode("cds.yaml", []byte(clusterA+"---\n"+discoveryResponse))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := []docID{
		{1, 0, "cluster", "a"},
		{2, 1, "cluster", "a"},
		{2, 2, "cluster", "b"},
		{2, 3, "cluster", "c"},
	}
	if diff := cmp.Diff(want, ids(docs)); diff != "" {
		t.Errorf("decoded resources differ (-want +got):\n%s", diff)
	}
	for _, d := range docs {
		checkDoc(t, d)
	}
	if got, want := docs[2].Where(), "cds.yaml: document 2, resource 2"; got != want {
		t.Errorf("Where() = %q, want %q", got, want)
	}
	err = resource.CheckUnique(docs)
	if got, want := errString(err), `cds.yaml: document 2, resource 1 (cluster "a"): duplicate name: already defined at cds.yaml: document 1`; got != want {
		t.Errorf("CheckUnique:\n got %s\nwant %s", got, want)
	}
}

// TestDecodeEnvoyFileFormat: a DiscoveryResponse without "@type", as
// Envoy's filesystem subscriptions read it and xdsadmin export writes it,
// is decoded as one; its errors are a DiscoveryResponse's.
func TestDecodeEnvoyFileFormat(t *testing.T) {
	const in = "version_info: \"7\"\ntype_url: " + clusterURL + "\nresources:\n- \"@type\": " + clusterURL + "\n  name: a\n  connect_timeout: 1s\n"
	docs, err := resource.Decode("cds.yaml", []byte(in))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if diff := cmp.Diff([]docID{{1, 1, "cluster", "a"}}, ids(docs)); diff != "" {
		t.Errorf("decoded resources differ (-want +got):\n%s", diff)
	}
	_, err = resource.Decode("cds.yaml", []byte("version_infoo: \"7\"\nresources: []\n"))
	if got, want := errString(err), `cds.yaml: document 1 (DiscoveryResponse): proto: unknown field "version_infoo"`; got != want {
		t.Errorf("error:\n got %s\nwant %s", got, want)
	}
}

func TestDecodeDiscoveryResponseErrors(t *testing.T) {
	const head = "\"@type\": type.googleapis.com/envoy.service.discovery.v3.DiscoveryResponse\n"
	const ok = "- \"@type\": " + clusterURL + "\n  name: ok\n"
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{
		{"type_url differs",
			head + "type_url: " + clusterURL + "\nresources:\n" + ok + "- \"@type\": " + endpointURL + "\n  cluster_name: e\n",
			`dr.yaml: document 1, resource 2 (endpoint "e"): resource type ` + endpointURL + ` differs from the response's type_url ` + clusterURL},
		{"invalid resource",
			head + "resources:\n" + ok + "- \"@type\": " + clusterURL + "\n  name: neg\n  connect_timeout: -1s\n",
			`dr.yaml: document 1, resource 2 (cluster "neg"): invalid Cluster.ConnectTimeout: value must be greater than 0s`},
		{"unknown field in a resource",
			head + "resources:\n" + ok + "- \"@type\": " + clusterURL + "\n  name: typo\n  connect_timeoutt: 1s\n",
			`dr.yaml: document 1, resource 2 (cluster "typo"): proto: unknown field "connect_timeoutt"`},
		{"unknown field in the response",
			head + "version_infoo: \"1\"\nresources:\n" + ok,
			`dr.yaml: document 1 (DiscoveryResponse): proto: unknown field "version_infoo"`},
		{"resources not a list",
			head + "resources: 7\n",
			`dr.yaml: document 1 (DiscoveryResponse): resources: want a list of resources, each with an "@type"`},
		{"not a resource type",
			head + "resources:\n- \"@type\": type.googleapis.com/envoy.config.bootstrap.v3.Bootstrap\n",
			`dr.yaml: document 1, resource 1: unknown @type "type.googleapis.com/envoy.config.bootstrap.v3.Bootstrap"; want one of: ` + strings.Join(allURLs(), ", ")},
		{"unknown @type in a resource",
			head + "resources:\n- \"@type\": " + clusterURL + "r\n  name: x\n",
			`dr.yaml: document 1, resource 1 (x): proto: unable to resolve "` + clusterURL + `r": "not found"`},
		{"wrapper without a body",
			head + "resources:\n- \"@type\": type.googleapis.com/envoy.service.discovery.v3.Resource\n  name: w\n",
			`dr.yaml: document 1, resource 1 (w): a discovery.v3.Resource without a body cannot be stored`},
		{"empty name",
			head + "resources:\n" + ok + "- \"@type\": " + clusterURL + "\n  connect_timeout: 1s\n",
			`dr.yaml: document 1, resource 2 (cluster ""): empty name: every resource needs a non-empty name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := resource.Decode("dr.yaml", []byte(tc.in))
			var de *resource.DocError
			if !errors.As(err, &de) {
				t.Fatalf("Decode = %v, %v (%T); want a *resource.DocError", ids(docs), err, err)
			}
			if got := errString(err); got != tc.want {
				t.Errorf("error:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestDecodeEmptyDiscoveryResponse(t *testing.T) {
	docs, err := resource.Decode("dr.yaml", []byte("\"@type\": "+resource.DiscoveryResponseURL+"\nversion_info: \"1\"\n"))
	if err != nil || len(docs) != 0 {
		t.Errorf("Decode = %v, %v; want no resources and no error", ids(docs), err)
	}
}

func TestCheckUnique(t *testing.T) {
	docs, err := resource.Decode("in.yaml", []byte(clusterA+"---\n\"@type\": "+endpointURL+"\ncluster_name: a\n---\n"+clusterB))
	if err != nil {
		t.Fatal(err)
	}
	// The same name in two types is fine.
	if err := resource.CheckUnique(docs); err != nil {
		t.Errorf("CheckUnique: %v", err)
	}
	if err := resource.CheckUnique(nil); err != nil {
		t.Errorf("CheckUnique(nil): %v", err)
	}
	more, err := resource.Decode("more.yaml", []byte(clusterB))
	if err != nil {
		t.Fatal(err)
	}
	err = resource.CheckUnique(append(docs, more...))
	var de *resource.DocError
	if !errors.As(err, &de) {
		t.Fatalf("CheckUnique = %v, want a *DocError", err)
	}
	if got, want := err.Error(), `more.yaml: document 1 (cluster "b"): duplicate name: already defined at in.yaml: document 3`; got != want {
		t.Errorf("error:\n got %s\nwant %s", got, want)
	}
}

func allURLs() []string {
	var out []string
	for _, typ := range resource.All() {
		out = append(out, typ.URL)
	}
	return out
}
