package tlsfiles_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"math/big"
	"net/url"
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/security/tlsfiles"
)

func TestIdentity(t *testing.T) {
	for _, tc := range []struct {
		name string
		cn   string
		dns  []string
		uris []string
		// handBuilt: an x509.Certificate made field by field, for URIs
		// x509.ParseCertificate itself refuses.
		handBuilt bool
		want      string
		wantErr   string // substring; "" means no error
	}{
		{name: "spiffe first", cn: "cn", dns: []string{"a.example"}, uris: []string{"spiffe://example.org/ns/a/sa/b"}, want: "spiffe://example.org/ns/a/sa/b"},
		{name: "other URI schemes ignored", cn: "cn", dns: []string{"a.example"}, uris: []string{"https://example.org/x"}, want: "dns:a.example"},
		{name: "first DNS", cn: "cn", dns: []string{"a.example", "b.example"}, want: "dns:a.example"},
		{name: "DNS in lower case", dns: []string{"Envoy-7.Mesh.Example.ORG"}, want: "dns:envoy-7.mesh.example.org"},
		{name: "CN last", cn: "node-1", want: "cn:node-1"},
		{name: "CN kept as it is", cn: "Envoy Proxy", want: "cn:Envoy Proxy"},
		// A name that reads as a SPIFFE ID outside a URI SAN is not one.
		{name: "CN reading as SPIFFE", cn: "spiffe://example.org/replica", want: "cn:spiffe://example.org/replica"},
		{name: "DNS SAN reading as SPIFFE", cn: "spiffe://example.org/replica", dns: []string{"spiffe://example.org/replica"}, want: "dns:spiffe://example.org/replica"},
		{name: "CN reading as a typed DNS identity", cn: "dns:a.example", want: "cn:dns:a.example"},
		{name: "DNS SAN reading as a CN identity", dns: []string{"cn:admin"}, want: "dns:cn:admin"},
		{name: "URI SAN of scheme dns ignored", cn: "x", uris: []string{"dns:a.example"}, want: "cn:x"},
		{name: "none", wantErr: "no SPIFFE URI SAN, DNS SAN or CommonName"},
		{name: "malformed spiffe refused, no fallback", dns: []string{"a.example"}, uris: []string{"spiffe://Example.org/a"}, wantErr: "lower case"},
		{name: "upper-case scheme refused", dns: []string{"a.example"}, uris: []string{"SPIFFE://example.org/a"}, wantErr: "scheme"},
		{name: "two spiffe", uris: []string{"spiffe://example.org/a", "spiffe://example.org/b"}, wantErr: "2 SPIFFE URI SANs"},
		{name: "root path", cn: "cn", uris: []string{"spiffe://example.org"}, wantErr: "needs a path"},
		{name: "port", uris: []string{"spiffe://example.org:8443/a"}, handBuilt: true, wantErr: "port"},
		{name: "hand-built", cn: "cn", uris: []string{"spiffe://example.org/a"}, handBuilt: true, want: "spiffe://example.org/a"},
		{name: "query", uris: []string{"spiffe://example.org/a?x=1"}, wantErr: "query"},
		{name: "percent", uris: []string{"spiffe://example.org/a%41"}, wantErr: "percent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert := &x509.Certificate{Subject: pkix.Name{CommonName: tc.cn}, DNSNames: tc.dns}
			if tc.handBuilt {
				for _, s := range tc.uris {
					u, err := url.Parse(s)
					if err != nil {
						t.Fatal(err)
					}
					cert.URIs = append(cert.URIs, u)
				}
			} else {
				cert = certWithSANs(t, tc.cn, tc.dns, tc.uris)
			}
			got, err := tlsfiles.Identity(cert)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Identity = %q, %v; want an error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Identity = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := tlsfiles.Identity(&x509.Certificate{}); !errors.Is(err, tlsfiles.ErrNoIdentity) {
		t.Errorf("Identity(no names) = %v, want ErrNoIdentity", err)
	}
}

// TestIsSPIFFE: only an identity from a URI SAN is of the SPIFFE kind.
func TestIsSPIFFE(t *testing.T) {
	for _, tc := range []struct {
		cn, dns, uri string
		want         bool
	}{
		{uri: "spiffe://example.org/replica", want: true},
		{cn: "spiffe://example.org/replica"},
		{dns: "spiffe://example.org/replica"},
		{dns: "a.example"},
	} {
		var dns, uris []string
		if tc.dns != "" {
			dns = []string{tc.dns}
		}
		if tc.uri != "" {
			uris = []string{tc.uri}
		}
		id, err := tlsfiles.Identity(certWithSANs(t, tc.cn, dns, uris))
		if err != nil {
			t.Fatal(err)
		}
		if got := tlsfiles.IsSPIFFE(id); got != tc.want {
			t.Errorf("IsSPIFFE(%q) = %v, want %v (cn %q, dns %q, uri %q)", id, got, tc.want, tc.cn, tc.dns, tc.uri)
		}
	}
}

func TestValidateSPIFFE(t *testing.T) {
	for _, tc := range []struct {
		id      string
		wantErr string // substring; "" means valid
	}{
		{id: "spiffe://example.org/ns/default/sa/xds"},
		{id: "spiffe://example.org"},
		{id: "spiffe://my_td-1.example/A.b-c_d/0"},
		{id: "spiffe://example.org/..a/b..", wantErr: ""},
		{id: "", wantErr: "empty"},
		{id: "https://example.org/a", wantErr: "does not begin with"},
		{id: "spiffe:example.org/a", wantErr: "does not begin with"},
		{id: "Spiffe://example.org/a", wantErr: "lower case"},
		{id: "spiffe://", wantErr: "trust domain is empty"},
		{id: "spiffe:///a", wantErr: "trust domain is empty"},
		{id: "spiffe://Example.org/a", wantErr: "lower case"},
		{id: "spiffe://example.org:443/a", wantErr: "port"},
		{id: "spiffe://user@example.org/a", wantErr: "userinfo"},
		{id: "spiffe://example.org?q", wantErr: "query"},
		{id: "spiffe://example.org#f", wantErr: "fragment"},
		{id: "spiffe://exa mple.org", wantErr: "not allowed in the trust domain"},
		{id: "spiffe://example.org/", wantErr: "empty segment"},
		{id: "spiffe://example.org/a//b", wantErr: "empty segment"},
		{id: "spiffe://example.org/a/", wantErr: "empty segment"},
		{id: "spiffe://example.org/./a", wantErr: `"." segment`},
		{id: "spiffe://example.org/a/..", wantErr: `".." segment`},
		{id: "spiffe://example.org/a?x=1", wantErr: "query"},
		{id: "spiffe://example.org/a#f", wantErr: "fragment"},
		{id: "spiffe://example.org/a%2Fb", wantErr: "percent"},
		{id: "spiffe://example.org/a b", wantErr: "not allowed in the path"},
		{id: "spiffe://example.org/é", wantErr: "not allowed in the path"},
		{id: "spiffe://" + strings.Repeat("a", 256), wantErr: "the most is 255"},
		{id: "spiffe://example.org/" + strings.Repeat("a", 2048), wantErr: "the most is 2048"},
	} {
		t.Run(tc.id, func(t *testing.T) {
			err := tlsfiles.ValidateSPIFFE(tc.id)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateSPIFFE(%q) = %v, want nil", tc.id, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ValidateSPIFFE(%q) = %v, want an error containing %q", tc.id, err, tc.wantErr)
			}
		})
	}
}

func TestPeerIdentityNeedsVerifiedChain(t *testing.T) {
	leaf := &x509.Certificate{DNSNames: []string{"a.example"}}
	if id, ok := tlsfiles.PeerIdentity(tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}); ok {
		t.Errorf("PeerIdentity(unverified) = %q, true; want false", id)
	}
	cs := tls.ConnectionState{
		PeerCertificates: []*x509.Certificate{leaf},
		VerifiedChains:   [][]*x509.Certificate{{leaf, {Subject: pkix.Name{CommonName: "ca"}}}},
	}
	if id, ok := tlsfiles.PeerIdentity(cs); !ok || id != "dns:a.example" {
		t.Errorf("PeerIdentity(verified) = %q, %v; want dns:a.example, true", id, ok)
	}
	bad, _ := url.Parse("spiffe://EXAMPLE/a")
	cs.VerifiedChains[0][0] = &x509.Certificate{URIs: []*url.URL{bad}}
	if id, ok := tlsfiles.PeerIdentity(cs); ok {
		t.Errorf("PeerIdentity(malformed SPIFFE) = %q, true; want false", id)
	}
}

// certWithSANs is a self-signed certificate, parsed from DER, whose SAN
// extension holds dns and uris exactly as given: x509.CreateCertificate
// would write url.URL.String(), which lowers a scheme's case.
func certWithSANs(t *testing.T, cn string, dns, uris []string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}}
	var names []asn1.RawValue
	for _, d := range dns {
		names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 2, Bytes: []byte(d)})
	}
	for _, u := range uris {
		names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 6, Bytes: []byte(u)})
	}
	if len(names) > 0 {
		san, err := asn1.Marshal(names)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.ExtraExtensions = []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Value: san}}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
