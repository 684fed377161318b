package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/legation-io/legation"
)

// TestVersionSources: every place that carries Legation's version says
// CHANGELOG.md's latest release: the binaries (package legation),
// hack/version.sh (what the image and the release scripts read), the
// image `make image` builds, and the chart's version and appVersion (so a
// default install pulls that image).
func TestVersionSources(t *testing.T) {
	root := repoRoot(t)
	want := legation.Version()
	cmd := exec.Command("./hack/version.sh")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != want {
		t.Errorf("hack/version.sh: %q, %v; want %s", out, err, want)
	}
	if got := makeImage(t); got != "ghcr.io/legation-io/legation:"+want {
		t.Errorf("make image builds %s; want ghcr.io/legation-io/legation:%s", got, want)
	}
	raw, err := os.ReadFile(filepath.Join(root, chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(raw, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != want || chart.AppVersion != want {
		t.Errorf("Chart.yaml: version %q, appVersion %q; want both %s (CHANGELOG.md's latest release)", chart.Version, chart.AppVersion, want)
	}
}

// TestReleaseChecks runs `hack/release.sh --check` in a repository of its
// own holding the version sources: it passes on a clean tree whose tags
// agree, and refuses each disagreement, saying which.
func TestReleaseChecks(t *testing.T) {
	root := repoRoot(t)
	v := legation.Version()
	for _, tc := range []struct {
		name  string
		setup func(r *gitRepo)
		want  string // empty: passes
	}{
		{"clean, untagged", nil, ""},
		{"tagged at HEAD", func(r *gitRepo) { r.git("tag", "v"+v) }, ""},
		{"an older tag", func(r *gitRepo) { r.tagEarlier("v0.0.1") }, ""},
		{"its pre-release tagged earlier", func(r *gitRepo) { r.tagEarlier("v" + v + "-rc.1") }, ""},
		{"an empty Unreleased heading", func(r *gitRepo) { r.commitChangelog("## Unreleased\n\n## " + v + " (2026-11-28)") }, ""},
		{"unreleased changes", func(r *gitRepo) { r.commitChangelog("## Unreleased\n\n- a fix\n\n## " + v + " (2026-11-28)") }, "## Unreleased"},
		{"chart version", func(r *gitRepo) { r.commitChart("version: "+v, "version: 9.9.9") }, "Chart.yaml: version is '9.9.9'"},
		{"chart appVersion", func(r *gitRepo) { r.commitChart(`appVersion: "`+v+`"`, `appVersion: "9.9.9"`) }, "appVersion is '9.9.9'"},
		{"a dirty tree", func(r *gitRepo) { r.write("new-file", "x") }, "the work tree has changes"},
		{"the version released earlier", func(r *gitRepo) { r.tagEarlier("v" + v) }, "tag v" + v + " is on commit"},
		{"HEAD tagged another version", func(r *gitRepo) { r.git("tag", "v0.0.9") }, "HEAD is tagged v0.0.9"},
		{"a newer tag", func(r *gitRepo) { r.tagEarlier("v99.0.0") }, "tag v99.0.0 is newer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newGitRepo(t, root)
			if tc.setup != nil {
				tc.setup(r)
			}
			cmd := exec.Command("./hack/release.sh", "--check")
			cmd.Dir = r.dir
			out, err := cmd.CombinedOutput()
			switch {
			case tc.want == "" && (err != nil || strings.TrimSpace(string(out)) != v):
				t.Errorf("release --check: %v\n%s\nwant it to pass and print %s", err, out, v)
			case tc.want != "" && (err == nil || !strings.Contains(string(out), tc.want)):
				t.Errorf("release --check: %v\n%s\nwant a refusal containing %q", err, out, tc.want)
			}
		})
	}
}

// gitRepo is a repository holding copies of the files release.sh reads.
type gitRepo struct {
	t   *testing.T
	dir string
}

// newGitRepo makes the repository with two commits: the files, then
// HEAD (so that tags can point before it).
func newGitRepo(t *testing.T, root string) *gitRepo {
	t.Helper()
	r := &gitRepo{t: t, dir: t.TempDir()}
	for _, f := range []string{"CHANGELOG.md", "hack/version.sh", "hack/release.sh", chartDir + "/Chart.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "CHANGELOG.md" {
			b = []byte(asReleased(string(b)))
		}
		r.write(f, string(b))
	}
	for _, f := range []string{"hack/version.sh", "hack/release.sh"} {
		if err := os.Chmod(filepath.Join(r.dir, f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r.git("init", "-q")
	r.git("add", "-A")
	r.git("commit", "-q", "-m", "files")
	r.git("commit", "-q", "--allow-empty", "-m", "head")
	return r
}

// asReleased is changelog as it stands at its latest release: without
// the changes under "## Unreleased" that the work tree may hold.
func asReleased(changelog string) string {
	i := strings.Index(changelog, "\n## Unreleased\n")
	if i < 0 {
		return changelog
	}
	j := strings.Index(changelog[i+1:], "\n## ")
	if j < 0 {
		return changelog[:i+1]
	}
	return changelog[:i+1] + changelog[i+1+j+1:]
}

func (r *gitRepo) write(name, content string) {
	r.t.Helper()
	p := filepath.Join(r.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// git runs git in the repository, as a committer of its own and with no
// configuration of the user's.
func (r *gitRepo) git(args ...string) {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.org", "-c", "commit.gpgsign=false",
		"-c", "tag.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		r.t.Fatalf("git %q: %v\n%s", args, err, out)
	}
}

// tagEarlier tags the commit before HEAD.
func (r *gitRepo) tagEarlier(tag string) { r.git("tag", tag, "HEAD~1") }

// commitChangelog replaces the latest release's heading of CHANGELOG.md
// with text, and commits.
func (r *gitRepo) commitChangelog(text string) {
	r.t.Helper()
	v := legation.Version()
	b, err := os.ReadFile(filepath.Join(r.dir, "CHANGELOG.md"))
	if err != nil {
		r.t.Fatal(err)
	}
	i := strings.Index(string(b), "\n## "+v+" (")
	j := strings.Index(string(b)[i+1:], "\n")
	r.write("CHANGELOG.md", string(b)[:i+1]+text+string(b)[i+1+j:])
	r.git("commit", "-q", "-am", "changelog")
}

// commitChart replaces a line of Chart.yaml, and commits.
func (r *gitRepo) commitChart(old, repl string) {
	r.t.Helper()
	p := filepath.Join(chartDir, "Chart.yaml")
	b, err := os.ReadFile(filepath.Join(r.dir, p))
	if err != nil {
		r.t.Fatal(err)
	}
	if !strings.Contains(string(b), old+"\n") {
		r.t.Fatalf("Chart.yaml has no line %q", old)
	}
	r.write(p, strings.Replace(string(b), old+"\n", repl+"\n", 1))
	r.git("commit", "-q", "-am", "chart")
}
