package tlsfiles_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/tlsfiles"
)

// FuzzValidateSPIFFE checks that ValidateSPIFFE never panics and that
// what it accepts is a URL of scheme spiffe that url.Parse reads back as
// it is: a host that is the trust domain, no userinfo, port, query or
// fragment, and the path unchanged.
func FuzzValidateSPIFFE(f *testing.F) {
	for _, s := range []string{
		"spiffe://example.org/ns/a/sa/b", "spiffe://example.org", "spiffe://td/a/../b",
		"spiffe://td:1/a", "spiffe://u@td/a", "spiffe://td/a?b#c", "spiffe://td/a%2F", "SPIFFE://td/a",
		"spiffe://td//a", "spiffe://td/./a", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if tlsfiles.ValidateSPIFFE(id) != nil {
			return
		}
		u, err := url.Parse(id)
		if err != nil {
			t.Fatalf("ValidateSPIFFE accepted %q, url.Parse: %v", id, err)
		}
		td, path, _ := strings.Cut(strings.TrimPrefix(id, "spiffe://"), "/")
		if path != "" || strings.HasSuffix(id, td+"/") {
			path = "/" + path
		}
		if u.Scheme != "spiffe" || u.User != nil || u.Port() != "" || u.Host != td ||
			u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || u.Path != path || u.String() != id {
			t.Fatalf("ValidateSPIFFE accepted %q, which url.Parse reads as %#v", id, u)
		}
	})
}
