package authz

import (
	"errors"
	"strings"
	"testing"
)

// FuzzValidateIdentity checks that ValidateIdentity never panics, that
// what it accepts names one of the three kinds, with a valid SPIFFE id,
// a lowercase DNS name or a non-empty CommonName after its prefix, and
// that what it refuses for naming no kind is an identity with none.
func FuzzValidateIdentity(f *testing.F) {
	for _, s := range []string{
		"spiffe://example.org/ns/a/sa/b", "dns:envoy-7.mesh.example.org", "cn:Legacy Envoy", "dns:*.example.org",
		"envoy-7.mesh.example.org", "cn:", "dns:", "dns:A.example", "cn:spiffe://example.org/x", "dns:spiffe://x/y",
		"DNS:a", "Spiffe://example.org/x", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := ValidateIdentity(id)
		if errors.Is(err, ErrUntyped) {
			for _, k := range []string{"spiffe://", "dns:", "cn:"} {
				if strings.HasPrefix(id, k) {
					t.Fatalf("ValidateIdentity(%q) says it names no kind: %v", id, err)
				}
			}
		}
		if err != nil {
			return
		}
		switch {
		case strings.HasPrefix(id, "spiffe://"):
			if ValidateSPIFFE(id) != nil {
				t.Fatalf("ValidateIdentity accepted %q, not a valid SPIFFE id", id)
			}
		case strings.HasPrefix(id, "dns:"):
			if name := id[len("dns:"):]; name == "" || strings.ToLower(name) != name || strings.ContainsAny(name, ":/ ") {
				t.Fatalf("ValidateIdentity accepted %q, not a lowercase DNS name", id)
			}
		case strings.HasPrefix(id, "cn:"):
			if id == "cn:" {
				t.Fatal("ValidateIdentity accepted an empty CommonName")
			}
		default:
			t.Fatalf("ValidateIdentity accepted %q, which names no kind", id)
		}
	})
}
