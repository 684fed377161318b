package xdstp_test

import (
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/state/xdstp"
)

// FuzzParse feeds Parse arbitrary strings. It must never panic; a name it
// accepts must have a normalized form that is printable ASCII, parses back
// to an Equal Name, is its own normalized form and is what Normalize
// returns; a glob must be its own collection and a member must lie in its
// collection; and an error must quote the input.
func FuzzParse(f *testing.F) {
	for _, tc := range validCases {
		f.Add(tc.in)
		f.Add(tc.norm)
	}
	for _, tc := range badCases {
		f.Add(tc.in)
	}
	for _, s := range []string{
		"xdstp://a/b.c/%2A",
		"xdstp://a/b.c/x?a=%26&b=%3D&c=%2B&d=%3B",
		"xdstp://[::1]:8080/b.c/d/*?k=v",
		"xdstp://a/b.c/d?\u00e9=\u00e8",
		"xdstp://a%2F%3F%23/b.c/d",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := xdstp.Parse(s)
		if err != nil {
			checkRejected(t, s, err)
			return
		}
		checkAccepted(t, s, n)
	})
}

func checkRejected(t *testing.T, s string, err error) {
	t.Helper()
	if !strings.HasPrefix(err.Error(), "xdstp: name ") {
		t.Fatalf("Parse(%q) error %q does not start with \"xdstp: name \"", s, err)
	}
	norm, nerr := xdstp.Normalize(s)
	switch {
	case xdstp.IsXDSTP(s) && nerr == nil:
		t.Fatalf("Normalize(%q) = %q, nil; Parse failed with %v", s, norm, err)
	case !xdstp.IsXDSTP(s) && (nerr != nil || norm != s):
		t.Fatalf("Normalize(%q) = %q, %v; want an old-style name unchanged", s, norm, nerr)
	}
}

func checkAccepted(t *testing.T, s string, n xdstp.Name) {
	t.Helper()
	if !xdstp.IsXDSTP(s) {
		t.Fatalf("Parse accepted %q, which IsXDSTP rejects", s)
	}
	norm := n.String()
	for i := range len(norm) {
		if c := norm[i]; c <= ' ' || c >= 0x7f {
			t.Fatalf("String() = %q holds byte %#x at %d", norm, c, i)
		}
	}
	again, err := xdstp.Parse(norm)
	if err != nil {
		t.Fatalf("Parse(%q) of the normalized form of %q: %v", norm, s, err)
	}
	if !again.Equal(n) {
		t.Fatalf("Parse(%q) = %#v, want %#v (from %q)", norm, again, n, s)
	}
	if got := again.String(); got != norm {
		t.Fatalf("String() of the reparsed %q = %q", norm, got)
	}
	if got, err := xdstp.Normalize(s); err != nil || got != norm {
		t.Fatalf("Normalize(%q) = %q, %v; want %q", s, got, err, norm)
	}
	if typ, ok := xdstp.TypeOf(s); !ok || typ != n.Type {
		t.Fatalf("TypeOf(%q) = %q, %v; want %q", s, typ, ok, n.Type)
	}
	c := n.Collection()
	switch {
	case n.Glob && !c.Equal(n):
		t.Fatalf("glob %q has collection %q", norm, c)
	case !n.Glob && !c.Contains(n):
		t.Fatalf("%q is not in its collection %q", norm, c)
	case n.Contains(n):
		t.Fatalf("%q contains itself", norm)
	}
	if xdstp.IsGlob(norm) != n.Glob {
		t.Fatalf("IsGlob(%q) = %v, want %v", norm, !n.Glob, n.Glob)
	}
	got, ok := xdstp.CollectionOf(norm)
	switch {
	case n.Glob && ok:
		t.Fatalf("CollectionOf(%q) of a glob = %q, true", norm, got)
	case !n.Glob && (!ok || got != c.String()):
		t.Fatalf("CollectionOf(%q) = %q, %v; want %q", norm, got, ok, c.String())
	}
}
