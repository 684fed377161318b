package xdsstream

import (
	"maps"

	"github.com/legation-io/legation/internal/state/xdstp"
)

// NormalNames returns names with each xdstp:// name (xRFC TP1) in its
// normalized form, the one resources are stored and sent under: "Two
// xdstp:// URNs are considered equivalent if they match component-wise
// modulo context parameter ordering", so a client's spelling of a name
// matches the resource. It returns names itself, without allocating,
// when none changes. A name that starts with "xdstp:" and does not parse
// is kept as it is: it names no resource, and a client that asks for it
// by name is told NOT_FOUND.
func NormalNames(names []string) []string {
	var out []string
	for i, n := range names {
		norm := normalName(n)
		if norm == n {
			if out != nil {
				out[i] = n
			}
			continue
		}
		if out == nil {
			out = make([]string, len(names))
			copy(out, names[:i])
		}
		out[i] = norm
	}
	if out == nil {
		return names
	}
	return out
}

// NormalVersions is NormalNames over the keys of a delta request's
// initial_resource_versions: versions itself when no key changes.
func NormalVersions(versions map[string]string) map[string]string {
	var out map[string]string
	for n, v := range versions {
		if norm := normalName(n); norm != n {
			if out == nil {
				out = maps.Clone(versions)
			}
			delete(out, n)
			out[norm] = v
		}
	}
	if out == nil {
		return versions
	}
	return out
}

func normalName(n string) string {
	if !xdstp.IsXDSTP(n) {
		return n
	}
	norm, err := xdstp.Normalize(n)
	if err != nil {
		return n
	}
	return norm
}
