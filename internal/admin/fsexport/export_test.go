package fsexport_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/admin/fsexport"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/sotw"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cds.yaml")
	if err := fsexport.WriteFile(path, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := fsexport.WriteFile(path, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "two" {
		t.Errorf("content %q, want two", b)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}

	// The rename fails (a non-empty directory has the name): the error
	// names the file and no temporary file is left.
	blocked := filepath.Join(dir, "lds.yaml")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	err = fsexport.WriteFile(blocked, []byte("three"))
	if err == nil || !strings.Contains(err.Error(), blocked) {
		t.Errorf("got %v, want an error naming %s", err, blocked)
	}
	des, _ := os.ReadDir(dir)
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	if strings.Join(names, " ") != "cds.yaml lds.yaml" {
		t.Errorf("directory holds %v, want [cds.yaml lds.yaml]", names)
	}

	// A directory that does not exist.
	if err := fsexport.WriteFile(filepath.Join(dir, "none", "eds.yaml"), []byte("x")); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}

func TestResourceFileName(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"backend", "backend.yaml"},
		{"ns/svc:8080", "ns%2Fsvc:8080.yaml"},
		{"a b", "a%20b.yaml"},
		{"..", "...yaml"},
	} {
		if got := fsexport.ResourceFileName(tc.name, fsexport.YAML); got != tc.want {
			t.Errorf("ResourceFileName(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := fsexport.ResourceDir(resource.Endpoint); got != "eds" {
		t.Errorf("ResourceDir(endpoint) = %q, want eds", got)
	}
}

func TestParseFormat(t *testing.T) {
	for _, s := range []string{"yaml", "json", "pb"} {
		if _, err := fsexport.ParseFormat(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, s := range []string{"", "yml", "YAML", "pb_text"} {
		if _, err := fsexport.ParseFormat(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	x := fsexport.Config{Dir: "d", Format: "xml"}
	if err := x.Validate(); err == nil {
		t.Error("Config with format xml accepted")
	}
	x = fsexport.Config{Dir: "d", Group: "a/b"}
	if err := x.Validate(); err == nil || !strings.Contains(err.Error(), "group") {
		t.Errorf("Config with group a/b: %v", err)
	}
}

// TestFollow: Follow writes at the first snapshot, rewrites a type (and
// the one resource) that changes, and returns nil when its context ends.
func TestFollow(t *testing.T) {
	e := xdstest.NewEnv(t, xdstest.Options{})
	e.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, store.DefaultScope, xdstest.Cluster("a", 1000)),
		xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 1)),
		xdstest.Put(t, resource.Endpoint, "g", xdstest.Endpoints("b", 2)),
	})
	dir := t.TempDir()
	x, err := fsexport.New(fsexport.Config{Dir: dir, Format: fsexport.Proto, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	writes := make(chan []fsexport.Written, 10)
	done := make(chan error, 1)
	go func() {
		done <- x.Follow(ctx, e.View, func(_ int64, w []fsexport.Written) { writes <- w })
	}()
	first := <-writes
	// A file per type SotW serves (not LbEndpoint), plus eds/a.pb and
	// eds/b.pb.
	if len(first) != len(resource.SotW())+2 {
		t.Errorf("first export wrote %d files, want %d: %v", len(first), len(resource.SotW())+2, first)
	}
	rev := e.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, "g", xdstest.Endpoints("b", 3))})
	var got []string
	select {
	case w := <-writes:
		for _, f := range w {
			rel, _ := filepath.Rel(dir, f.Path)
			got = append(got, rel)
			if f.Version != xdstest.Version(rev) {
				t.Errorf("%s at version %s, want %d", rel, f.Version, rev)
			}
		}
	case <-time.After(xdstest.Timeout):
		t.Fatal("no rewrite after a change")
	}
	// The resource's file first, then the type's: a reader of eds.pb at
	// the new version finds eds/b.pb at it too.
	if strings.Join(got, " ") != "eds/b.pb eds.pb" {
		t.Errorf("rewrote %v, want [eds/b.pb eds.pb]", got)
	}
	b, err := os.ReadFile(filepath.Join(dir, "eds.pb"))
	if err != nil {
		t.Fatal(err)
	}
	file, err := fsexport.Decode(b, fsexport.Proto)
	if err != nil {
		t.Fatal(err)
	}
	if want := sotw.Response(e.View.Snapshot(), resource.Endpoint, "g", nil, true); !proto.Equal(file, want) {
		t.Errorf("eds.pb:\n got %v\nwant %v", file, want)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Follow: %v", err)
		}
	case <-time.After(xdstest.Timeout):
		t.Fatal("Follow did not return after its context ended")
	}
}
