package delta

import "strconv"

// held is what the client holds of one resource: the value of a
// xdsstream.Holding of delta. Its zero value holds nothing (rev is never
// 0 for a resource held).
type held struct {
	// rev is the version, the resource's mod_revision; -1 for a version
	// presented in initial_resource_versions that names none.
	rev   int64
	scope string // "" when only the version is known (initial_resource_versions)
}

// heldOf is what the client holds once sent out[i]: its name (the alias
// for a VHDS alias), version and source.
func heldOf(out []item) func(i int) (string, held) {
	return func(i int) (string, held) {
		return out[i].Key(), held{rev: out[i].Entry.ModRevision, scope: out[i].source}
	}
}

// parseRev is the revision a presented version names, -1 if none (a
// version this server would not write: not its decimal form).
func parseRev(v string) int64 {
	rev, err := strconv.ParseInt(v, 10, 64)
	if err != nil || rev <= 0 || strconv.FormatInt(rev, 10) != v {
		return -1
	}
	return rev
}
