package xdstp_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/legation-io/legation/internal/state/xdstp"
)

const (
	listenerType = "envoy.config.listener.v3.Listener"
	routeType    = "envoy.config.route.v3.RouteConfiguration"
	clusterType  = "envoy.config.cluster.v3.Cluster"
)

// validCase is a name Parse accepts: what it parses to and its normalized
// form. The test names quote the text each case checks.
type validCase struct {
	name string
	in   string
	want xdstp.Name
	norm string
}

var validCases = []validCase{
	{
		name: "TP1: xdstp://some.control.plane/envoy.config.route.v3.RouteConfiguration/foo/bar?shard_id=1234&direction=inbound",
		in:   "xdstp://some.control.plane/" + routeType + "/foo/bar?shard_id=1234&direction=inbound",
		want: xdstp.Name{Authority: "some.control.plane", Type: routeType, ID: "foo/bar",
			Params: []xdstp.Param{{"direction", "inbound"}, {"shard_id", "1234"}}},
		norm: "xdstp://some.control.plane/" + routeType + "/foo/bar?direction=inbound&shard_id=1234",
	},
	{
		name: "A47: New-style resource names without any authority will use the empty string",
		in:   "xdstp:///" + listenerType + "/foo",
		want: xdstp.Name{Type: listenerType, ID: "foo"},
		norm: "xdstp:///" + listenerType + "/foo",
	},
	{
		name: "A47: xdstp://xds.authority.com/envoy.config.listener.v3.Listener/grpc/server/0.0.0.0:8080?project_id=1234",
		in:   "xdstp://xds.authority.com/" + listenerType + "/grpc/server/0.0.0.0:8080?project_id=1234",
		want: xdstp.Name{Authority: "xds.authority.com", Type: listenerType, ID: "grpc/server/0.0.0.0:8080",
			Params: []xdstp.Param{{"project_id", "1234"}}},
		norm: "xdstp://xds.authority.com/" + listenerType + "/grpc/server/0.0.0.0:8080?project_id=1234",
	},
	{
		name: "TP1: Client requests xdstp://some-authority/envoy.config.listener.v3.Listener/foo/*",
		in:   "xdstp://some-authority/" + listenerType + "/foo/*",
		want: xdstp.Name{Authority: "some-authority", Type: listenerType, ID: "foo", Glob: true},
		norm: "xdstp://some-authority/" + listenerType + "/foo/*",
	},
	{
		name: "TP1: Globs can exist in arbitrary path locations",
		in:   "xdstp://some-authority/" + listenerType + "/some/longer/path/*",
		want: xdstp.Name{Authority: "some-authority", Type: listenerType, ID: "some/longer/path", Glob: true},
		norm: "xdstp://some-authority/" + listenerType + "/some/longer/path/*",
	},
	{
		name: "TP1: A request for .../foo/*?some=thing",
		in:   "xdstp://some-authority/" + listenerType + "/foo/*?some=thing",
		want: xdstp.Name{Authority: "some-authority", Type: listenerType, ID: "foo", Glob: true,
			Params: []xdstp.Param{{"some", "thing"}}},
		norm: "xdstp://some-authority/" + listenerType + "/foo/*?some=thing",
	},
	{
		name: "glob over the whole type",
		in:   "xdstp://a/" + listenerType + "/*",
		want: xdstp.Name{Authority: "a", Type: listenerType, Glob: true},
		norm: "xdstp://a/" + listenerType + "/*",
	},
	{
		name: "TP1: context parameters ... for example xds.resource.vip=96.54.3.1",
		in:   "xdstp://some-authority/some.type/foo?xds.resource.vip=96.54.3.1&bar=baz",
		want: xdstp.Name{Authority: "some-authority", Type: "some.type", ID: "foo",
			Params: []xdstp.Param{{"bar", "baz"}, {"xds.resource.vip", "96.54.3.1"}}},
		norm: "xdstp://some-authority/some.type/foo?bar=baz&xds.resource.vip=96.54.3.1",
	},
	{
		name: "RFC 3986 6.2.2.2: unreserved characters are decoded",
		in:   "xdstp://%61uth/" + clusterType + "/%41%7e%2D?%6B=%76",
		want: xdstp.Name{Authority: "auth", Type: clusterType, ID: "A~-", Params: []xdstp.Param{{"k", "v"}}},
		norm: "xdstp://auth/" + clusterType + "/A~-?k=v",
	},
	{
		name: "ResourceName.id: Any '/' will not be escaped, so %2F is a '/'",
		in:   "xdstp://a/" + clusterType + "/x%2fy%2Fz",
		want: xdstp.Name{Authority: "a", Type: clusterType, ID: "x/y/z"},
		norm: "xdstp://a/" + clusterType + "/x/y/z",
	},
	{
		name: "RFC 3986 6.2.2.1: percent-encodings use upper-case hex",
		in:   "xdstp://a/" + clusterType + "/a%3fb%25c%c3%a9%20?k%26=v%3d",
		want: xdstp.Name{Authority: "a", Type: clusterType, ID: "a?b%cé ", Params: []xdstp.Param{{"k&", "v="}}},
		norm: "xdstp://a/" + clusterType + "/a%3Fb%25c%C3%A9%20?k%26=v%3D",
	},
	{
		name: "raw non-ASCII is accepted as in an IRI and encoded",
		in:   "xdstp://a/" + clusterType + "/é?ключ=значение",
		want: xdstp.Name{Authority: "a", Type: clusterType, ID: "é", Params: []xdstp.Param{{"ключ", "значение"}}},
		norm: "xdstp://a/" + clusterType + "/%C3%A9?%D0%BA%D0%BB%D1%8E%D1%87=%D0%B7%D0%BD%D0%B0%D1%87%D0%B5%D0%BD%D0%B8%D0%B5",
	},
	{
		name: "RFC 3986 pchar: sub-delims, ':' and '@' stay literal in the id",
		in:   "xdstp://a/" + clusterType + "/!$&'()*+,;=:@/x",
		want: xdstp.Name{Authority: "a", Type: clusterType, ID: "!$&'()*+,;=:@/x"},
		norm: "xdstp://a/" + clusterType + "/!$&'()*+,;=:@/x",
	},
	{
		name: "a '*' that is not the whole last segment is no glob",
		in:   "xdstp://a/" + clusterType + "/*/x*",
		want: xdstp.Name{Authority: "a", Type: clusterType, ID: "*/x*"},
		norm: "xdstp://a/" + clusterType + "/*/x*",
	},
	{
		name: "%2A as the last segment is a '*', so a glob",
		in:   "xdstp://a/" + clusterType + "/foo/%2a",
		want: xdstp.Name{Authority: "a", Type: clusterType, ID: "foo", Glob: true},
		norm: "xdstp://a/" + clusterType + "/foo/*",
	},
	{
		name: "authority: host:port, userinfo and an IP literal stay literal, '/' is encoded",
		in:   "xdstp://u@[::1]:443%2fx/" + clusterType + "/c",
		want: xdstp.Name{Authority: "u@[::1]:443/x", Type: clusterType, ID: "c"},
		norm: "xdstp://u@[::1]:443%2Fx/" + clusterType + "/c",
	},
	{
		name: "a literal '+' is a plus sign, encoded for form decoders",
		in:   "xdstp://a/" + clusterType + "/c?k=b+c&j=x;y",
		want: xdstp.Name{Authority: "a", Type: clusterType, ID: "c", Params: []xdstp.Param{{"j", "x;y"}, {"k", "b+c"}}},
		norm: "xdstp://a/" + clusterType + "/c?j=x%3By&k=b%2Bc",
	},
	{
		name: "ContextParams: an empty value, '=' in a value, '/' and '?' in the query",
		in:   "xdstp://a/" + clusterType + "/c?z=&y=a=b&x=/p?q",
		want: xdstp.Name{Authority: "a", Type: clusterType, ID: "c",
			Params: []xdstp.Param{{"x", "/p?q"}, {"y", "a=b"}, {"z", ""}}},
		norm: "xdstp://a/" + clusterType + "/c?x=/p?q&y=a%3Db&z=",
	},
	{
		name: "a bare '?' has no context parameters",
		in:   "xdstp://a/" + clusterType + "/c?",
		want: xdstp.Name{Authority: "a", Type: clusterType, ID: "c"},
		norm: "xdstp://a/" + clusterType + "/c",
	},
	{
		name: "the type is decoded like the rest",
		in:   "xdstp://a/envoy%2Econfig.cluster.v3.Cluster/c",
		want: xdstp.Name{Authority: "a", Type: clusterType, ID: "c"},
		norm: "xdstp://a/" + clusterType + "/c",
	},
}

func TestParse(t *testing.T) {
	for _, tc := range validCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := xdstp.Parse(tc.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.in, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Parse(%q) (-want +got):\n%s", tc.in, diff)
			}
			if s := got.String(); s != tc.norm {
				t.Errorf("String() = %q, want %q", s, tc.norm)
			}
			norm, err := xdstp.Normalize(tc.in)
			if err != nil || norm != tc.norm {
				t.Errorf("Normalize(%q) = %q, %v; want %q", tc.in, norm, err, tc.norm)
			}
		})
	}
}

// TestRoundTrip checks that the normalized form parses back to the same
// Name and is its own normalized form.
func TestRoundTrip(t *testing.T) {
	for _, tc := range validCases {
		t.Run(tc.name, func(t *testing.T) {
			n, err := xdstp.Parse(tc.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.in, err)
			}
			again, err := xdstp.Parse(n.String())
			if err != nil {
				t.Fatalf("Parse(%q) of the normalized form: %v", n.String(), err)
			}
			if !again.Equal(n) {
				t.Errorf("Parse(String()) = %#v, want %#v", again, n)
			}
			twice, err := xdstp.Normalize(n.String())
			if err != nil || twice != n.String() {
				t.Errorf("Normalize(%q) = %q, %v; want it unchanged", n.String(), twice, err)
			}
		})
	}
}

func TestEquivalent(t *testing.T) {
	const base = "xdstp://auth/" + clusterType + "/"
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{"TP1: match component-wise modulo context parameter ordering",
			base + "c?b=2&a=1", base + "c?a=1&b=2", true},
		{"three parameters in any order", base + "c?c=3&a=1&b=2", base + "c?b=2&c=3&a=1", true},
		{"%41 and A", base + "%41", base + "A", true},
		{"%2f, %2F and /", base + "x%2fy", base + "x%2Fy", true},
		{"%2F and / in the id", base + "x%2Fy", base + "x/y", true},
		{"lower- and upper-case hex", base + "%c3%a9", base + "%C3%A9", true},
		{"raw and encoded UTF-8", base + "é", base + "%C3%A9", true},
		{"%2A and * as a glob", base + "x/%2A", base + "x/*", true},
		{"encoded and literal parameter", base + "c?%6B=%76", base + "c?k=v", true},
		{"%3a and : in the id", base + "a%3ab", base + "a:b", true},
		{"%3F%2F and ?/ in a value", base + "c?k=%3F%2F", base + "c?k=?/", true},
		{"%3F and ? differ in the id", base + "a%3Fb", base + "a?b=", false},
		{"the authority is not case-folded", "xdstp://Auth/" + clusterType + "/c", base + "c", false},
		{"the id is case-sensitive", base + "C", base + "c", false},
		{"different values", base + "c?a=1", base + "c?a=2", false},
		{"TP1: ...foo/bar?some=thing but not ...foo/bar", base + "c?some=thing", base + "c", false},
		{"'+' is not a space", base + "c?a=b+c", base + "c?a=b%20c", false},
		{"a glob is not its directory", base + "x/*", base + "x", false},
		{"%2A inside a segment is no glob", base + "x/a%2A", base + "x/*", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			na, err := xdstp.Normalize(tc.a)
			if err != nil {
				t.Fatal(err)
			}
			nb, err := xdstp.Normalize(tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if (na == nb) != tc.same {
				t.Errorf("Normalize(%q) = %q, Normalize(%q) = %q; same = %v, want %v", tc.a, na, tc.b, nb, na == nb, tc.same)
			}
		})
	}
}

// badCases are names Parse rejects and what its error must say.
var badCases = []struct {
	name, in, want string
}{
	{"an old-style name", "foo", "not an xdstp name"},
	{"the empty string", "", "not an xdstp name"},
	{"TP1, A47: detected by the prefix xdstp:, case matters", "XDSTP://a/" + clusterType + "/c", "not an xdstp name"},
	{"xdstp: without //", "xdstp:a/" + clusterType + "/c", `must be followed by "//"`},
	{"no path", "xdstp://auth", "missing the resource type"},
	{"no type", "xdstp://auth/", "missing the resource type"},
	{"empty type", "xdstp://auth//c", "missing the resource type"},
	{"query before the path", "xdstp://auth?a=1/" + clusterType + "/c", "missing the resource type"},
	{"a type without a package", "xdstp://auth/Cluster/c", "not a protobuf message name"},
	{"a type with an empty part", "xdstp://auth/envoy..Cluster/c", "not a protobuf message name"},
	{"a type part starting with a digit", "xdstp://auth/envoy.3config.Cluster/c", "not a protobuf message name"},
	{"a type URL, not a type", "xdstp://auth/type.googleapis.com%2F" + clusterType + "/c", "not a protobuf message name"},
	{"a type with a dash", "xdstp://auth/envoy.con-fig.Cluster/c", "not a protobuf message name"},
	{"no id", "xdstp://auth/" + clusterType, "missing the id"},
	{"empty id", "xdstp://auth/" + clusterType + "/", "missing the id"},
	{"empty id before a query", "xdstp://auth/" + clusterType + "/?a=1", "missing the id"},
	{"doubled /", "xdstp://auth/" + clusterType + "/a//b", "empty segment"},
	{"leading /", "xdstp://auth/" + clusterType + "//a", "empty segment"},
	{"trailing /", "xdstp://auth/" + clusterType + "/a/", "empty segment"},
	{"a glob over an empty segment", "xdstp://auth/" + clusterType + "//*", "empty segment"},
	{"trailing %2F", "xdstp://auth/" + clusterType + "/a%2F", "empty segment"},
	{"% and non-hex", "xdstp://auth/" + clusterType + "/a%zz", `bad percent-encoding "%zz" in the id`},
	{"% and one digit", "xdstp://auth/" + clusterType + "/a%2", `bad percent-encoding "%2" in the id`},
	{"% at the end", "xdstp://auth/" + clusterType + "/a%", `bad percent-encoding "%" in the id`},
	{"bad % in the authority", "xdstp://au%g0th/" + clusterType + "/c", "bad percent-encoding \"%g0\" in the authority at byte 10"},
	{"bad % in the type", "xdstp://a/envoy%.x/c", "in the resource type"},
	{"bad % in a key", "xdstp://a/" + clusterType + "/c?k%=v", "in the context parameter key"},
	{"bad % in a value", "xdstp://a/" + clusterType + "/c?k=v%", "in the context parameter value"},
	{"a parameter without =", "xdstp://a/" + clusterType + "/c?k", `context parameter "k" at byte`},
	{"a parameter with an empty key", "xdstp://a/" + clusterType + "/c?=v", "empty key"},
	{"an empty parameter", "xdstp://a/" + clusterType + "/c?k=1&&j=2", "empty context parameter"},
	{"a trailing &", "xdstp://a/" + clusterType + "/c?k=1&", "empty context parameter"},
	{"A47: duplicate values for the same context param", "xdstp://a/" + clusterType + "/c?k=1&k=2", `"k" is given more than once`},
	{"a key duplicated through encoding", "xdstp://a/" + clusterType + "/c?k=1&%6B=1", `"k" is given more than once`},
	{"TP1: URNs do not include processing directives", "xdstp://a/" + clusterType + "/c#entry=foo", `fragment "#entry=foo"`},
	{"a fragment in the query", "xdstp://a/" + clusterType + "/c?k=v#alt=x", "fragment"},
	{"a raw space", "xdstp://a/" + clusterType + "/a b", "space in the id"},
	{"a raw control character", "xdstp://a/" + clusterType + "/a\x00", "control character"},
	{"a raw DEL in a value", "xdstp://a/" + clusterType + "/a?k=\x7f", "control character"},
	{"a raw {", "xdstp://a/" + clusterType + "/a{b}", `character '{' in the id at byte`},
	{"a raw \" in the authority", "xdstp://\"a\"/" + clusterType + "/c", "in the authority"},
	{"proto3 strings: not UTF-8 once decoded", "xdstp://a/" + clusterType + "/a%FF", "not valid UTF-8"},
	{"raw bytes that are not UTF-8", "xdstp://a/" + clusterType + "/a\xff", "not valid UTF-8"},
}

func TestParseErrors(t *testing.T) {
	for _, tc := range badCases {
		t.Run(tc.name, func(t *testing.T) {
			n, err := xdstp.Parse(tc.in)
			if err == nil {
				t.Fatalf("Parse(%q) = %#v, want an error saying %q", tc.in, n, tc.want)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("Parse(%q) error %q does not say %q", tc.in, msg, tc.want)
			}
			if quoted := strconv.Quote(tc.in); !strings.Contains(msg, quoted) {
				t.Errorf("Parse(%q) error %q does not quote the name as %s", tc.in, msg, quoted)
			}
			if _, ok := xdstp.TypeOf(tc.in); ok {
				t.Errorf("TypeOf(%q) succeeded for a bad name", tc.in)
			}
			if !xdstp.IsXDSTP(tc.in) {
				return
			}
			if norm, nerr := xdstp.Normalize(tc.in); nerr == nil || norm != "" {
				t.Errorf("Normalize(%q) = %q, %v; want an error", tc.in, norm, nerr)
			}
		})
	}
}

func TestNormalizeOldStyle(t *testing.T) {
	for _, in := range []string{"", "foo", "*", "foo/bar", "a b", "XDSTP://a/b.c/d", "xds:foo", "http://a/b.c/d", "%zz"} {
		got, err := xdstp.Normalize(in)
		if err != nil || got != in {
			t.Errorf("Normalize(%q) = %q, %v; want it unchanged", in, got, err)
		}
		if xdstp.IsXDSTP(in) {
			t.Errorf("IsXDSTP(%q) = true", in)
		}
	}
}

func TestIsXDSTP(t *testing.T) {
	for in, want := range map[string]bool{
		"xdstp://a/" + clusterType + "/c": true,
		"xdstp:///x.y/z":                  true,
		"xdstp:":                          true, // claims the scheme, so Normalize reports it
		"xdstp":                           false,
		"Xdstp://a/b.c/d":                 false,
		" xdstp://a/b.c/d":                false,
		"cluster-a":                       false,
	} {
		if got := xdstp.IsXDSTP(in); got != want {
			t.Errorf("IsXDSTP(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestTypeOf(t *testing.T) {
	tests := []struct {
		in     string
		want   string
		wantOK bool
	}{
		{"xdstp://a/" + clusterType + "/c", clusterType, true},
		{"xdstp:///" + listenerType + "/l/*?k=v", listenerType, true},
		{"cluster-a", "", false},
		{"xdstp://a/" + clusterType, "", false},
	}
	for _, tc := range tests {
		got, ok := xdstp.TypeOf(tc.in)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("TypeOf(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.wantOK)
		}
	}
	n, err := xdstp.Parse("xdstp://a/" + clusterType + "/c")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := n.TypeURL(), "type.googleapis.com/"+clusterType; got != want {
		t.Errorf("TypeURL() = %q, want %q", got, want)
	}
}

// TestStringBuiltName checks String on a Name built by hand: parameters in
// any order come out sorted, and the components are encoded.
func TestStringBuiltName(t *testing.T) {
	n := xdstp.Name{
		Authority: "a b",
		Type:      clusterType,
		ID:        "x/y z",
		Params:    []xdstp.Param{{"b", "2"}, {"a", "1&"}},
	}
	const want = "xdstp://a%20b/" + clusterType + "/x/y%20z?a=1%26&b=2"
	if got := n.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if n.Params[0].Key != "b" {
		t.Errorf("String() reordered the Name's own Params: %v", n.Params)
	}
	back, err := xdstp.Parse(want)
	if err != nil {
		t.Fatal(err)
	}
	if back.Params[0] != (xdstp.Param{Key: "a", Value: "1&"}) || back.ID != n.ID || back.Authority != n.Authority {
		t.Errorf("Parse(%q) = %#v", want, back)
	}
}
