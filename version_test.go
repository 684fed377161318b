package legation

import (
	"strings"
	"testing"
)

// TestVersion checks that the embedded CHANGELOG.md has a released entry
// and that Version is its version.
func TestVersion(t *testing.T) {
	want, err := ParseChangelog(changelog)
	if err != nil {
		t.Fatal(err)
	}
	if got := Version(); got != want || got == "" || got == "unknown" {
		t.Errorf("Version() = %q; want CHANGELOG.md's latest entry, %q", got, want)
	}
	if !strings.Contains(changelog, "\n## "+want+" (") {
		t.Errorf("CHANGELOG.md has no heading for %s", want)
	}
}

func TestParseChangelog(t *testing.T) {
	for _, tc := range []struct {
		name, text, want, err string
	}{
		{"one release", "# Changelog\n\nintro\n\n## 0.1.0 (2026-11-28)\n\n- x\n", "0.1.0", ""},
		{"newest first", "## 1.2.3 (2027-01-02)\n\n## 1.2.2 (2026-12-01)\n", "1.2.3", ""},
		{"unreleased skipped", "## Unreleased\n\n- y\n\n## 0.2.0-rc.1 (2026-12-24)\n", "0.2.0-rc.1", ""},
		{"level-3 headings ignored", "### Features\n## 0.1.0 (2026-11-28)\n", "0.1.0", ""},
		{"no release", "# Changelog\n\n## Unreleased\n", "", "no released entry"},
		{"leading v", "## v0.1.0 (2026-11-28)\n", "", `"## v0.1.0 (2026-11-28)"`},
		{"no date", "## 0.1.0\n", "", "want"},
		{"other heading first", "## Upgrading\n\n## 0.1.0 (2026-11-28)\n", "", "CHANGELOG.md:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseChangelog(tc.text)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("ParseChangelog: %q, %v; want an error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("ParseChangelog: %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestBuildString(t *testing.T) {
	for _, tc := range []struct {
		b    Build
		want string
	}{
		{Build{Version: "0.1.0"}, "0.1.0"},
		{Build{Version: "0.1.0", GoVersion: "go1.26.0"}, "0.1.0 (go1.26.0)"},
		{Build{Version: "0.1.0", Revision: "abc-dirty", GoVersion: "go1.26.0"}, "0.1.0 (revision abc-dirty, go1.26.0)"},
	} {
		if got := tc.b.String(); got != tc.want {
			t.Errorf("%+v.String() = %q; want %q", tc.b, got, tc.want)
		}
	}
}
