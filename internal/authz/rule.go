package authz

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxIdentityBytes bounds an identity's length.
const MaxIdentityBytes = 1024

// Rule is what one client identity may do. It is the JSON value stored in
// etcd at Key(prefix, Identity).
type Rule struct {
	// Identity is the client identity, compared as an exact string: a
	// SPIFFE id (spiffe://TRUST_DOMAIN/PATH), a DNS name or a certificate
	// CN, as package tlsfiles derives it from a verified certificate.
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

// Validate checks the rule: a valid identity (a valid SPIFFE id if it
// starts with "spiffe://"), valid patterns, and that it grants something
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

// ValidateIdentity checks an identity as rules hold it: not empty, at most
// MaxIdentityBytes, valid UTF-8 without control characters, and a valid
// SPIFFE id if it looks like one (its scheme is "spiffe" in any case).
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
