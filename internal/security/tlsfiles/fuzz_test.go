package tlsfiles_test

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/security/tlsfiles"
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

// FuzzIdentityKinds checks that a certificate without a URI SAN never has
// a SPIFFE identity, whatever its DNS SAN or CommonName reads: its
// identity is "dns:" and the DNS name in lower case, or "cn:" and the
// CommonName.
func FuzzIdentityKinds(f *testing.F) {
	f.Add("spiffe://example.org/replica", "")
	f.Add("", "spiffe://example.org/replica")
	f.Add("cn:x", "dns:y")
	f.Add("SPIFFE://EXAMPLE.ORG/A", "")
	f.Fuzz(func(t *testing.T, cn, dns string) {
		cert := &x509.Certificate{Subject: pkix.Name{CommonName: cn}}
		if dns != "" {
			cert.DNSNames = []string{dns}
		}
		id, err := tlsfiles.Identity(cert)
		switch {
		case err != nil:
			if cn != "" || dns != "" {
				t.Fatalf("Identity(cn %q, dns %q): %v", cn, dns, err)
			}
		case tlsfiles.IsSPIFFE(id):
			t.Fatalf("Identity(cn %q, dns %q) = %q, a SPIFFE ID without a URI SAN", cn, dns, id)
		case dns != "" && id != "dns:"+strings.ToLower(dns):
			t.Fatalf("Identity(dns %q) = %q", dns, id)
		case dns == "" && id != "cn:"+cn:
			t.Fatalf("Identity(cn %q) = %q", cn, id)
		}
	})
}
