package keyspace

import (
	"strings"
	"testing"
)

func TestKeys(t *testing.T) {
	for _, tc := range []struct{ name, got, want string }{
		{"prefix", Status.Prefix("/p/"), "/p/status/"},
		{"key", Members.Key("/p/", "xds-0"), "/p/members/xds-0"},
		{"apply lock", ApplyLock("/p/", "edge"), "/p/locks/apply/edge"},
		{"lock holder", LockHolder("/p/", 0x2a), "/p/locks/holders/000000000000002a"},
		{"lease marker", LeaseMarker("/p/", 0x694d7c1b2a3e4f10), "/p/leases/694d7c1b2a3e4f10"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %q; want %q", tc.name, tc.got, tc.want)
		}
	}
	if rest, ok := Resources.Cut("/p/", "/p/resources/cluster/default/a/b"); !ok || rest != "cluster/default/a/b" {
		t.Errorf("Cut = %q, %v; want the resource path", rest, ok)
	}
	if _, ok := Resources.Cut("/p/", "/p/status/n"); ok {
		t.Error("Cut took a key of another directory")
	}
}

// TestLayout: every directory is one path segment, is listed in one run
// of rows, and has one writer.
func TestLayout(t *testing.T) {
	seen := map[Dir]bool{}
	for _, d := range Dirs() {
		name := string(d)
		if !strings.HasSuffix(name, "/") || strings.Count(name, "/") != 1 || name == "/" {
			t.Errorf("directory %q: want one path segment ending in '/'", name)
		}
		if seen[d] {
			t.Errorf("directory %q listed in two runs of rows", name)
		}
		seen[d] = true
	}
	for _, e := range Layout() {
		if e.Writer != e.Dir.Writer() {
			t.Errorf("%s%s: writer %s, but the directory's is %s", e.Dir, e.Key, e.Writer, e.Dir.Writer())
		}
		if e.Key == "" || e.Value == "" || e.WrittenBy == "" || e.ReadBy == "" {
			t.Errorf("%s%s: every field is needed: %+v", e.Dir, e.Key, e)
		}
	}
	if got := Dir("nope/").Writer(); got != 0 {
		t.Errorf("the writer of a directory not in the layout is %s", got)
	}
	var got []string
	for _, d := range WrittenBy(Replica) {
		got = append(got, string(d))
	}
	if want := "status/ members/ elections/ load/"; strings.Join(got, " ") != want {
		t.Errorf("WrittenBy(Replica) = %v; want %s", got, want)
	}
	got = got[:0]
	for _, d := range ControllerDirs() {
		got = append(got, string(d))
	}
	if want := "resources/ applies/ history/ rollouts/"; strings.Join(got, " ") != want {
		t.Errorf("ControllerDirs() = %v; want %s", got, want)
	}
}
