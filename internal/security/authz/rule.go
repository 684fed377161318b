package authz

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/legation-io/legation/internal/security/tlsfiles"
)

// MaxIdentityBytes bounds an identity's length.
const MaxIdentityBytes = 1024

// Rule is what one client identity may do. It is the JSON value stored in
// etcd at Key(prefix, Identity).
type Rule struct {
	// Identity is the client identity, compared as an exact string, with
	// its kind, as package tlsfiles derives it from a verified
	// certificate: a SPIFFE id from a URI SAN (spiffe://TRUST_DOMAIN/PATH),
	// "dns:NAME" for a DNS SAN, or "cn:NAME" for a CommonName (see
	// ValidateIdentity).
	Identity string `json:"identity"`
	// Nodes are patterns of the node ids the identity may claim. Empty:
	// none (an admin-only rule).
	Nodes []string `json:"nodes,omitempty"`
	// Groups are patterns of the non-empty groups its nodes may be in.
	// Empty: only the empty group, i.e. the default scope only.
	Groups []string `json:"groups,omitempty"`
	// Admin lets the identity use the administrative APIs.
	Admin bool `json:"admin,omitempty"`
}

// Validate checks the rule: a valid identity of a named kind
// (ValidateIdentity), valid patterns, and that it grants something
// (a node pattern, or admin). The error names what is wrong.
func (r Rule) Validate() error {
	if err := ValidateIdentity(r.Identity); err != nil {
		return err
	}
	for _, n := range r.Nodes {
		if _, err := ParsePattern(n); err != nil {
			return fmt.Errorf("identity %q: node %w", r.Identity, err)
		}
	}
	for _, g := range r.Groups {
		if _, err := ParsePattern(g); err != nil {
			return fmt.Errorf("identity %q: group %w", r.Identity, err)
		}
	}
	if len(r.Nodes) == 0 && !r.Admin {
		return fmt.Errorf("identity %q: the rule grants nothing: give at least one node pattern, or admin", r.Identity)
	}
	return nil
}

// ErrUntyped is matched by the error about an identity that does not say
// its kind: one stored before identities were typed (a bare DNS name or
// CommonName, such as "envoy-7.mesh.example.org"). Such a rule matches
// no client; xdsadmin authz migrate rewrites it.
var ErrUntyped = errors.New("identity does not say its kind")

// ValidateIdentity checks an identity as rules hold it: not empty, at most
// MaxIdentityBytes, valid UTF-8 without control characters, and of one of
// the kinds package tlsfiles gives a certificate's identity:
//
//	spiffe://TRUST_DOMAIN/PATH  a SPIFFE ID (from a URI SAN), valid as one
//	dns:NAME                    a DNS SAN: a DNS name, in lower case
//	cn:NAME                     a Subject CommonName: not empty
//
// An identity of none of these kinds (a bare name) is refused with an
// error matching ErrUntyped that says how to write it.
func ValidateIdentity(id string) error {
	switch {
	case id == "":
		return errors.New("identity: empty")
	case len(id) > MaxIdentityBytes:
		return fmt.Errorf("identity %.64q...: longer than %d bytes (%d)", id, MaxIdentityBytes, len(id))
	case !utf8.ValidString(id):
		return fmt.Errorf("identity %q: not valid UTF-8", id)
	}
	for i, r := range id {
		if unicode.IsControl(r) {
			return fmt.Errorf("identity %q: control character %U at byte %d", id, r, i)
		}
	}
	if len(id) >= len(spiffeScheme) && strings.EqualFold(id[:len(spiffeScheme)], spiffeScheme) {
		if err := ValidateSPIFFE(id); err != nil {
			return fmt.Errorf("identity %q: %w", id, err)
		}
		return nil
	}
	if name, ok := strings.CutPrefix(id, tlsfiles.DNSPrefix); ok {
		if err := validateDNSName(name); err != nil {
			return fmt.Errorf("identity %q: %w", id, err)
		}
		return nil
	}
	if name, ok := strings.CutPrefix(id, tlsfiles.CNPrefix); ok {
		if name == "" {
			return fmt.Errorf("identity %q: the CommonName is empty", id)
		}
		return nil
	}
	return fmt.Errorf("identity %q: %w: write spiffe://TRUST_DOMAIN/PATH for a SPIFFE ID (URI SAN), "+
		"dns:NAME for a DNS SAN or cn:NAME for a certificate's CommonName (a rule stored without its kind is "+
		"rewritten by xdsadmin authz migrate --as dns|cn)", id, ErrUntyped)
}

// maxDNSNameBytes and maxDNSLabelBytes are RFC 1035's bounds.
const (
	maxDNSNameBytes  = 253
	maxDNSLabelBytes = 63
)

// validateDNSName checks the name of a "dns:" identity as Identity writes
// it: labels of lowercase letters, digits, '-' and '_' (used by service
// names), separated by single dots, each 1 to 63 bytes and not beginning
// or ending with '-'; at most 253 bytes; no trailing dot. A first label
// "*" is allowed, to name a wildcard certificate's SAN exactly.
func validateDNSName(name string) error {
	switch {
	case name == "":
		return errors.New("the DNS name is empty")
	case len(name) > maxDNSNameBytes:
		return fmt.Errorf("the DNS name is longer than %d bytes", maxDNSNameBytes)
	}
	for i, label := range strings.Split(name, ".") {
		switch {
		case label == "":
			return fmt.Errorf("DNS name %q: empty label (a leading, trailing or doubled '.')", name)
		case len(label) > maxDNSLabelBytes:
			return fmt.Errorf("DNS name %q: label longer than %d bytes", name, maxDNSLabelBytes)
		case label == "*" && i == 0:
			continue
		case label[0] == '-' || label[len(label)-1] == '-':
			return fmt.Errorf("DNS name %q: label %q begins or ends with '-'", name, label)
		}
		for _, c := range label {
			switch {
			case (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_':
			case c >= 'A' && c <= 'Z':
				return fmt.Errorf("DNS name %q: must be lower case (certificates' DNS names are compared in lower case)", name)
			default:
				return fmt.Errorf("DNS name %q: character %q not allowed (lowercase letters, digits, '-', '_', '.')", name, c)
			}
		}
	}
	return nil
}

const spiffeScheme = "spiffe://"

// maxTrustDomainBytes is the SPIFFE standard's bound on a trust domain
// name.
const maxTrustDomainBytes = 255

// ValidateSPIFFE checks that id is a SPIFFE id as the SPIFFE-ID standard
// (section 2) defines it: "spiffe://", a trust domain of lowercase letters,
// digits, '.', '-' and '_', then a path of '/'-separated segments that are
// not empty, not "." or "..", and made of letters, digits, '.', '-' and
// '_'. The path may be absent (the trust domain's own id); no query,
// fragment, port or user info. The error says what is wrong.
func ValidateSPIFFE(id string) error {
	rest, ok := strings.CutPrefix(id, spiffeScheme)
	if !ok {
		return errors.New(`not a SPIFFE id: the scheme must be "spiffe://" in lowercase`)
	}
	td, path, _ := strings.Cut(rest, "/")
	if err := ValidateTrustDomain(td); err != nil {
		return fmt.Errorf("bad SPIFFE id: %w", err)
	}
	if len(rest) == len(td) {
		return nil
	}
	if path == "" {
		return errors.New("bad SPIFFE id: the path must not end with '/'")
	}
	for seg := range strings.SplitSeq(path, "/") {
		switch seg {
		case "":
			return errors.New("bad SPIFFE id: empty path segment (\"//\" or a trailing '/')")
		case ".", "..":
			return fmt.Errorf("bad SPIFFE id: path segment %q is not allowed", seg)
		}
		for _, c := range seg {
			if !isSPIFFEPathChar(c) {
				return fmt.Errorf("bad SPIFFE id: character %q in path segment %q (allowed: ASCII letters, digits, '.', '-', '_')", c, seg)
			}
		}
	}
	return nil
}

// ValidateTrustDomain checks a SPIFFE trust domain name: 1 to 255 bytes of
// lowercase letters, digits, '.', '-' and '_'.
func ValidateTrustDomain(td string) error {
	switch {
	case td == "":
		return errors.New("empty trust domain")
	case len(td) > maxTrustDomainBytes:
		return fmt.Errorf("trust domain longer than %d bytes", maxTrustDomainBytes)
	}
	for _, c := range td {
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' {
			continue
		}
		if c >= 'A' && c <= 'Z' {
			return fmt.Errorf("trust domain %q: must be lowercase", td)
		}
		return fmt.Errorf("trust domain %q: character %q not allowed (lowercase letters, digits, '.', '-', '_')", td, c)
	}
	return nil
}

func isSPIFFEPathChar(c rune) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_'
}

// trustDomainOf returns the trust domain of a valid SPIFFE id with a path,
// and whether id is one.
func trustDomainOf(id string) (string, bool) {
	rest, ok := strings.CutPrefix(id, spiffeScheme)
	if !ok {
		return "", false
	}
	td, path, ok := strings.Cut(rest, "/")
	if !ok || path == "" || ValidateSPIFFE(id) != nil {
		return "", false
	}
	return td, true
}
