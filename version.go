// Package legation holds what the whole product shares from the root of
// the repository: its version, read from CHANGELOG.md. The changelog is
// the one source of the version: the binaries, the build info metric, the
// container image's tag and the Helm chart all carry the version of its
// latest released entry, and tests fail when one of them disagrees.
package legation

import (
	_ "embed"
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"
)

//go:embed CHANGELOG.md
var changelog string

// version is the version of CHANGELOG.md's latest released entry, read
// once at start; a changelog without one fails every test that reads it
// (TestVersion), so a binary never carries an empty version.
var version = mustParse(changelog)

// Version returns the version of Legation this binary was built from:
// that of CHANGELOG.md's latest released entry, such as "0.1.0". It has
// no leading "v" (the image tag has none either); the release's git tag
// is "v" + Version().
func Version() string { return version }

// releaseHeading matches a released entry's heading: "## 0.1.0 (2026-11-28)".
// The version is semantic (MAJOR.MINOR.PATCH, with an optional
// pre-release such as -rc.1); the date is the release's.
var releaseHeading = regexp.MustCompile(`^## (\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?) \((\d{4}-\d{2}-\d{2})\)\s*$`)

// ParseChangelog returns the version of the first released entry of a
// changelog, skipping "## Unreleased". Any other level-2 heading before
// the first release is an error: a release's heading must be found, not
// guessed past.
func ParseChangelog(text string) (string, error) {
	for i, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "## ") {
			continue
		}
		if strings.TrimSpace(line) == "## Unreleased" {
			continue
		}
		m := releaseHeading.FindStringSubmatch(line)
		if m == nil {
			return "", fmt.Errorf("CHANGELOG.md:%d: heading %q: want \"## Unreleased\" or \"## X.Y.Z (YYYY-MM-DD)\"", i+1, line)
		}
		return m[1], nil
	}
	return "", fmt.Errorf("CHANGELOG.md: no released entry (a heading \"## X.Y.Z (YYYY-MM-DD)\")")
}

// mustParse is ParseChangelog for the embedded changelog: a malformed one
// gives "unknown" (TestVersion fails on it), not a crash at start.
func mustParse(text string) string {
	v, err := ParseChangelog(text)
	if err != nil {
		return "unknown"
	}
	return v
}

// Build says which build of Legation runs.
type Build struct {
	// Version is Version().
	Version string
	// Revision is the VCS revision the binary was built from, with
	// "-dirty" when the work tree had changes; empty when the build was
	// not stamped (go test, go run, -buildvcs=false).
	Revision string
	// GoVersion is the Go release that built it.
	GoVersion string
}

// BuildInfo returns this binary's Build, from Version and the build
// information Go stamps into binaries.
func BuildInfo() Build {
	b := Build{Version: Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.GoVersion = bi.GoVersion
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && b.Revision != "" {
		b.Revision += "-dirty"
	}
	return b
}

// String is what `xds-node --version` and `xdsadmin version` print after
// the program's name: "0.1.0 (revision 9ecede2..., go1.26.0)", the parts
// the build does not know left out.
func (b Build) String() string {
	var extra []string
	if b.Revision != "" {
		extra = append(extra, "revision "+b.Revision)
	}
	if b.GoVersion != "" {
		extra = append(extra, b.GoVersion)
	}
	if len(extra) == 0 {
		return b.Version
	}
	return b.Version + " (" + strings.Join(extra, ", ") + ")"
}
