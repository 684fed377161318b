package resource_test

import (
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"

	"github.com/legation-io/legation/internal/state/resource"
)

// TestCheckName: old-style names pass as they are; an xdstp:// name is
// checked against the resource's type and returned in its normalized
// form (xRFC TP1: "Two xdstp:// URNs are considered equivalent if they
// match component-wise modulo context parameter ordering"); a glob, a
// wrong type segment or a malformed name is refused, saying why.
func TestCheckName(t *testing.T) {
	const cds = "xdstp://fed-a/envoy.config.cluster.v3.Cluster/"
	for _, c := range []struct {
		typ       *resource.Type
		name      string
		want, err string
	}{
		{resource.Cluster, "backend", "backend", ""},
		{resource.Cluster, "XDSTP://a/b", "XDSTP://a/b", ""}, // not the xdstp: prefix: an opaque name
		{resource.Cluster, cds + "svc", cds + "svc", ""},
		{resource.Cluster, cds + "svc?b=2&a=1", cds + "svc?a=1&b=2", ""},
		{resource.Cluster, cds + "s%76c", cds + "svc", ""},
		{resource.Endpoint, "xdstp://fed-a/envoy.config.endpoint.v3.ClusterLoadAssignment/svc", "xdstp://fed-a/envoy.config.endpoint.v3.ClusterLoadAssignment/svc", ""},
		{resource.Listener, cds + "svc", "", `type segment "envoy.config.cluster.v3.Cluster" is not "envoy.config.listener.v3.Listener"`},
		{resource.Cluster, cds + "dir/*", "", "glob collection"},
		{resource.Cluster, cds + "svc?a", "", "xdstp"},
		{resource.Cluster, cds, "", "xdstp"},
		{resource.Cluster, "xdstp://fed-a/envoy.config.cluster.v3.Cluster/svc%zz", "", "xdstp"},
		{resource.Cluster, "", "", "empty name"},
	} {
		got, err := c.typ.CheckName(c.name)
		switch {
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%s CheckName(%q) = %q, %v; want %q", c.typ, c.name, got, err, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s CheckName(%q) = %q, %v; want an error saying %q", c.typ, c.name, got, err, c.err)
		}
	}
}

// TestSetName: SetName writes the field NameOf reads, for every type but
// an Unnamed one, whose message it leaves alone.
func TestSetName(t *testing.T) {
	for _, typ := range resource.All() {
		m := typ.New()
		name := "xdstp://a/" + typ.MessageName() + "/n"
		typ.SetName(m, name)
		if typ.Unnamed {
			name = ""
		}
		if got := typ.NameOf(m); got != name {
			t.Errorf("%s: NameOf after SetName = %q", typ, got)
		}
	}
}

// TestDecodeNormalizesXDSTP: a resource written with an xdstp name in
// another spelling is decoded under the normalized name, in its key and
// in its body alike; two spellings of one name in one input are one
// resource named twice.
func TestDecodeNormalizesXDSTP(t *testing.T) {
	docs, err := resource.Decode("in.yaml", []byte(`"@type": `+clusterURL+`
name: "xdstp://fed-a/envoy.config.cluster.v3.Cluster/svc?zone=b&env=prod"
connect_timeout: 1s
`))
	if err != nil {
		t.Fatal(err)
	}
	const want = "xdstp://fed-a/envoy.config.cluster.v3.Cluster/svc?env=prod&zone=b"
	if len(docs) != 1 || docs[0].Name != want {
		t.Fatalf("decoded %+v, want one cluster %q", ids(docs), want)
	}
	m, err := resource.Unmarshal(resource.Cluster, docs[0].Body.GetValue())
	if err != nil {
		t.Fatal(err)
	}
	if got := m.(*clusterv3.Cluster).GetName(); got != want {
		t.Errorf("the body's name is %q, want %q", got, want)
	}
	docs, err = resource.Decode("in.yaml", []byte(`"@type": `+clusterURL+`
name: "xdstp://fed-a/envoy.config.cluster.v3.Cluster/svc?a=1&b=2"
---
"@type": `+clusterURL+`
name: "xdstp://fed-a/envoy.config.cluster.v3.Cluster/svc?b=2&a=1"
`))
	if err == nil {
		err = resource.CheckUnique(docs)
	}
	if err == nil || !strings.Contains(err.Error(), "xdstp://fed-a/envoy.config.cluster.v3.Cluster/svc?a=1&b=2") {
		t.Errorf("two spellings of one name: %v, want it named twice", err)
	}
	_, err = resource.Decode("in.yaml", []byte(`"@type": `+clusterURL+`
name: "xdstp://fed-a/envoy.config.listener.v3.Listener/svc"
`))
	if err == nil || !strings.Contains(err.Error(), "in.yaml") || !strings.Contains(err.Error(), "type segment") {
		t.Errorf("a cluster named as a listener: %v, want an error naming the input and the type segment", err)
	}
}
