package resource_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/state/resource"
)

// FuzzDecode feeds operators' files to Decode: it must never panic, every
// resource it returns must be storable as is, and every error must be a
// *DocError that says where.
func FuzzDecode(f *testing.F) {
	for _, pattern := range []string{"../../../examples/*.yaml", "../../../examples/bad/*.yaml"} {
		files, err := filepath.Glob(pattern)
		if err != nil || len(files) == 0 {
			f.Fatalf("glob %s: %v, %v", pattern, files, err)
		}
		for _, file := range files {
			f.Add(readFile(f, file))
		}
	}
	for _, s := range []string{
		discoveryResponse,
		clusterA + "---\n---\n# c\n--- {\"@type\": \"" + clusterURL + "\", name: b}\n...\n" + clusterB,
		"\ufeff" + `{"@type": "` + clusterURL + `", "name": "a"}`,
		"\"@type\": " + resource.DiscoveryResponseURL + "\nresources: [{\"@type\": type.googleapis.com/envoy.service.discovery.v3.Resource, name: w}]\n",
		"a: &x [*x]\n",
		clusterA + "name: b\n",
		"# header\n--- !!map\n" + clusterA + "eds_cluster_config: {service_name: a}\n",
		"",
		listenerYAML("", routerFilter+faultFilter),
		listenerYAML("s", `      - name: x
        typed_config: {"@type": type.googleapis.com/example.Nope}
`),
		listenerYAML("s", `      - name: x
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault
          abort: {http_status: 99, percentage: {numerator: 1}}
`+routerFilter),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := resource.Decode("fuzz.yaml", data)
		if err != nil {
			var de *resource.DocError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is a %T, want a *resource.DocError", err, err)
			}
			if de.Source != "fuzz.yaml" || de.Index < 1 || de.Item < 0 {
				t.Fatalf("DocError at %q document %d resource %d", de.Source, de.Index, de.Item)
			}
			if !strings.HasPrefix(err.Error(), "fuzz.yaml: document ") {
				t.Fatalf("error %q does not say where", err)
			}
			if len(docs) != 0 {
				t.Fatalf("Decode returned %d resources with an error", len(docs))
			}
			return
		}
		for _, d := range docs {
			if d.Source != "fuzz.yaml" || d.Index < 1 {
				t.Fatalf("resource at %q document %d", d.Source, d.Index)
			}
			checkDoc(t, d)
		}
	})
}

// FuzzCheck feeds binary resources, as the store receives them from any
// writer, to Check and to the inline key search the view runs on each
// (CarriesInlineKey, InlineKeys): whatever the Any inside them hold, at
// whatever depth, they must return, not panic, and the view's search must
// find every key InlineKeys finds.
func FuzzCheck(f *testing.F) {
	for _, file := range []string{"../../../examples/listeners.yaml", "../../../examples/routes.yaml", "../../../examples/clusters.yaml"} {
		docs, err := resource.Decode(file, readFile(f, file))
		if err != nil {
			f.Fatal(err)
		}
		for _, d := range docs {
			f.Add(uint8(d.Type.Order), d.Body.GetValue())
		}
	}
	for _, s := range []string{tlsListenerYAML("{inline_string: k}"), tlsClusterYAML("{pkcs12: {inline_bytes: AAEC}}")} {
		docs, err := resource.Decode("keys.yaml", []byte(s))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(docs[0].Type.Order), docs[0].Body.GetValue())
	}
	f.Fuzz(func(t *testing.T, typ uint8, b []byte) {
		all := resource.All()
		tp := all[int(typ)%len(all)]
		msg, err := resource.Unmarshal(tp, b)
		if err != nil {
			return
		}
		_ = resource.Check(msg)
		// The view's search may flag what decoding would not (a field
		// given twice, merged), never miss what it would.
		keys := len(resource.InlineKeys(msg)) > 0 && tp != resource.Secret
		if carries := resource.CarriesInlineKey(tp, b); keys && !carries {
			t.Fatalf("CarriesInlineKey = false, InlineKeys found %q", resource.InlineKeys(msg))
		}
	})
}
