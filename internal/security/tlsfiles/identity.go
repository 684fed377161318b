package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"strings"
)

// ErrNoIdentity is returned by Identity for a certificate with no SPIFFE
// URI SAN, no DNS SAN and no Subject CommonName.
var ErrNoIdentity = errors.New("tlsfiles: certificate has no SPIFFE URI SAN, DNS SAN or CommonName")

// The kinds of identity, as the prefix of the identity string. A SPIFFE
// ID is its URI as it is; the other kinds carry a prefix that no URI SAN
// can produce, so that a DNS name or a CommonName never equals a SPIFFE
// ID, whatever its text reads.
const (
	// SPIFFEPrefix begins the identity of a certificate with a SPIFFE URI
	// SAN: the SAN itself, "spiffe://TRUST_DOMAIN/PATH".
	SPIFFEPrefix = "spiffe://"
	// DNSPrefix begins the identity of a certificate named by a DNS SAN:
	// "dns:" and the name in lower case.
	DNSPrefix = "dns:"
	// CNPrefix begins the identity of a certificate named by its Subject
	// CommonName: "cn:" and the CommonName as it is.
	CNPrefix = "cn:"
)

// IsSPIFFE reports whether identity, as Identity returns it, is of the
// SPIFFE kind: it came from a certificate's SPIFFE URI SAN (or, for a
// string not from Identity, reads as a SPIFFE ID).
func IsSPIFFE(identity string) bool { return strings.HasPrefix(identity, SPIFFEPrefix) }

// Identity is the identity of cert, as authorization rules name it, with
// its kind: its SPIFFE URI SAN if it has one ("spiffe://TD/PATH"), else
// "dns:" and its first DNS SAN in lower case (DNS names are not case
// sensitive), else "cn:" and its Subject CommonName. URI SANs of other
// schemes are ignored. Only a URI SAN yields a SPIFFE ID: a DNS SAN or a
// CommonName that reads "spiffe://..." is "dns:spiffe://..." or
// "cn:spiffe://...", which no SPIFFE ID equals; a CA that signs any
// CommonName a service asks for cannot so make it a replica or an admin.
//
// A certificate whose SPIFFE URI SAN is malformed (see ValidateSPIFFE),
// has a root path ("spiffe://example.org", which X509-SVID section 3.1
// forbids in a leaf) or which has more than one is refused with an error
// rather than falling back to a DNS name: it means to carry a SPIFFE ID, so
// naming it by anything else would be a guess. Identity does not verify
// cert; callers use it on verified certificates only (see PeerIdentity).
func Identity(cert *x509.Certificate) (string, error) {
	if cert == nil {
		return "", errors.New("tlsfiles: no certificate")
	}
	var spiffe []string
	for _, u := range uriSANs(cert) {
		// Any case of "spiffe" counts as meant to be a SPIFFE ID, so that
		// "SPIFFE://..." is refused, not skipped.
		if len(u) >= len("spiffe:") && strings.EqualFold(u[:len("spiffe:")], "spiffe:") {
			spiffe = append(spiffe, u)
		}
	}
	switch {
	case len(spiffe) > 1:
		return "", fmt.Errorf("tlsfiles: certificate has %d SPIFFE URI SANs (%s), at most one is allowed",
			len(spiffe), strings.Join(spiffe, ", "))
	case len(spiffe) == 1:
		id := spiffe[0]
		if err := ValidateSPIFFE(id); err != nil {
			return "", err
		}
		if strings.Count(id, "/") == 2 {
			return "", fmt.Errorf("tlsfiles: SPIFFE ID %q: a certificate's SPIFFE ID needs a path (spiffe://TRUST_DOMAIN/PATH)", id)
		}
		return id, nil
	case len(cert.DNSNames) > 0:
		return DNSPrefix + strings.ToLower(cert.DNSNames[0]), nil
	case cert.Subject.CommonName != "":
		return CNPrefix + cert.Subject.CommonName, nil
	}
	return "", ErrNoIdentity
}

// PeerIdentity is the Identity of the peer of a connection: the leaf of
// cs's first verified chain. It reports false when there is no verified
// chain (the peer sent no certificate, or it was not verified) or the
// leaf has no valid identity. Only chains crypto/tls verified count, so
// on the client side of a ClientConfig with a CA file, which verifies by
// hand, it always reports false: such a client checks the server's
// identity in ClientConfig's verifyPeer instead.
func PeerIdentity(cs tls.ConnectionState) (string, bool) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "", false
	}
	id, err := Identity(cs.VerifiedChains[0][0])
	if err != nil {
		return "", false
	}
	return id, true
}

// Limits of the SPIFFE ID specification, section 2.4: a URI SAN is at
// most 2048 bytes and a trust domain at most 255 characters.
const (
	maxSPIFFELen      = 2048
	maxTrustDomainLen = 255
)

// ValidateSPIFFE checks that id is a SPIFFE ID as the SPIFFE ID
// specification (sections 2.1 to 2.4) defines it:
// spiffe://TRUST_DOMAIN followed by an optional path. The scheme is
// "spiffe" in lower case; the trust domain is not empty and holds only
// lowercase letters, digits, '.', '-' and '_' (so no port, userinfo or
// percent-encoding); there is no query or fragment; the path is made of
// segments, each after a '/', none empty, "." or "..", each of the
// characters [a-zA-Z0-9.-_]. A trust domain alone, "spiffe://example.org",
// is a valid SPIFFE ID, though not a certificate's (see Identity).
func ValidateSPIFFE(id string) error {
	const scheme = "spiffe://"
	switch {
	case id == "":
		return errors.New("tlsfiles: SPIFFE ID is empty")
	case len(id) > maxSPIFFELen:
		return fmt.Errorf("tlsfiles: SPIFFE ID is %d bytes long, the most is %d", len(id), maxSPIFFELen)
	case !strings.HasPrefix(id, scheme):
		if len(id) >= len(scheme) && strings.EqualFold(id[:len(scheme)], scheme) {
			return fmt.Errorf("tlsfiles: SPIFFE ID %q: the scheme must be \"spiffe\" in lower case", id)
		}
		return fmt.Errorf("tlsfiles: SPIFFE ID %q does not begin with %q", id, scheme)
	}
	rest := id[len(scheme):]
	td, path, _ := strings.Cut(rest, "/")
	if len(rest) > len(td) {
		path = "/" + path
	}
	if err := validateTrustDomain(td); err != nil {
		return fmt.Errorf("tlsfiles: SPIFFE ID %q: %w", id, err)
	}
	if err := validatePath(path); err != nil {
		return fmt.Errorf("tlsfiles: SPIFFE ID %q: %w", id, err)
	}
	return nil
}

func validateTrustDomain(td string) error {
	switch {
	case td == "":
		return errors.New("the trust domain is empty")
	case len(td) > maxTrustDomainLen:
		return fmt.Errorf("the trust domain is %d characters long, the most is %d", len(td), maxTrustDomainLen)
	case strings.ContainsRune(td, '@'):
		return errors.New("userinfo ('@') is not allowed")
	case strings.ContainsRune(td, ':'):
		return errors.New("a port (':') is not allowed in the trust domain")
	}
	for i := 0; i < len(td); i++ {
		c := td[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '.', c == '-', c == '_':
		case 'A' <= c && c <= 'Z':
			return errors.New("the trust domain must be lower case")
		case c == '?':
			return errors.New("a query ('?') is not allowed")
		case c == '#':
			return errors.New("a fragment ('#') is not allowed")
		default:
			return fmt.Errorf("character %q is not allowed in the trust domain (only a-z, 0-9, '.', '-', '_')", c)
		}
	}
	return nil
}

// validatePath checks path, empty or beginning with '/'.
func validatePath(path string) error {
	if path == "" {
		return nil
	}
	for seg := range strings.SplitSeq(path[1:], "/") {
		switch seg {
		case "":
			return errors.New("the path has an empty segment (\"//\" or a trailing '/')")
		case ".", "..":
			return fmt.Errorf("the path has a %q segment", seg)
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			switch {
			case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '-', c == '_':
			case c == '?':
				return errors.New("a query ('?') is not allowed")
			case c == '#':
				return errors.New("a fragment ('#') is not allowed")
			case c == '%':
				return errors.New("percent-encoding is not allowed in the path")
			default:
				return fmt.Errorf("character %q is not allowed in the path (only a-z, A-Z, 0-9, '.', '-', '_')", c)
			}
		}
	}
	return nil
}

var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// uriSANs returns cert's URI SANs as written in the certificate.
// cert.URIs will not do: url.Parse lowers the scheme's case, and the
// SPIFFE ID specification wants the SAN itself checked. A certificate
// built by hand, with no raw extension, falls back on cert.URIs.
func uriSANs(cert *x509.Certificate) []string {
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		// GeneralNames ::= SEQUENCE OF GeneralName; a URI is
		// [6] IMPLICIT IA5String (RFC 5280, section 4.2.1.6).
		// x509.ParseCertificate has already checked the encoding.
		var seq asn1.RawValue
		if rest, err := asn1.Unmarshal(ext.Value, &seq); err != nil || len(rest) > 0 || !seq.IsCompound {
			break
		}
		var uris []string
		for b := seq.Bytes; len(b) > 0; {
			var name asn1.RawValue
			var err error
			if b, err = asn1.Unmarshal(b, &name); err != nil {
				break
			}
			if name.Class == asn1.ClassContextSpecific && name.Tag == 6 {
				uris = append(uris, string(name.Bytes))
			}
		}
		return uris
	}
	uris := make([]string, 0, len(cert.URIs))
	for _, u := range cert.URIs {
		uris = append(uris, u.String())
	}
	return uris
}
