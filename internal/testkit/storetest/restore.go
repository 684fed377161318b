package storetest

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/state/devetcd"
)

// Restartable is an embedded etcd a test stops, restores from a copy of
// its data taken earlier, and starts again on the same client address, as
// an operator restores etcd from a snapshot.
type Restartable struct {
	*Etcd
	dir string
}

// StartRestartable runs an embedded etcd whose data a test can save and
// restore; it is stopped when the test ends.
func StartRestartable(t testing.TB) *Restartable {
	t.Helper()
	addr, err := devetcd.ResolvePort("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Restartable{Etcd: &Etcd{Endpoint: addr}, dir: t.TempDir()}
	r.start(t)
	t.Cleanup(func() {
		if r.Server != nil {
			r.Server.Close()
		}
	})
	return r
}

func (r *Restartable) start(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := devetcd.Start(ctx, devetcd.Config{Dir: filepath.Join(r.dir, "data"), ClientAddr: r.Endpoint})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	r.Server = srv
}

// Save stops etcd, copies its data as a snapshot named name, and starts it
// again.
func (r *Restartable) Save(t testing.TB, name string) {
	t.Helper()
	r.Server.Close()
	r.Server = nil
	if err := copyDir(filepath.Join(r.dir, "data"), filepath.Join(r.dir, "snap-"+name)); err != nil {
		t.Fatalf("save etcd data: %v", err)
	}
	r.start(t)
}

// Restore stops etcd, replaces its data by the snapshot name, and starts
// it again. With bump > 0 it first does to the snapshot what `etcdutl
// snapshot restore --bump-revision bump --mark-compacted` does: it raises
// the latest revision by bump and marks everything up to it compacted, so
// that watches from before fail with "compacted".
func (r *Restartable) Restore(t testing.TB, name string, bump int64) {
	t.Helper()
	r.Server.Close()
	r.Server = nil
	data := filepath.Join(r.dir, "data")
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	if err := copyDir(filepath.Join(r.dir, "snap-"+name), data); err != nil {
		t.Fatalf("restore etcd data: %v", err)
	}
	if bump > 0 {
		if err := bumpRevision(filepath.Join(data, "member", "snap", "db"), bump); err != nil {
			t.Fatalf("bump revision: %v", err)
		}
	}
	r.start(t)
}

// bumpRevision raises the latest revision of the etcd backend at path by
// amount and marks it compacted, as etcdutl's snapshot restore does with
// --bump-revision and --mark-compacted.
func bumpRevision(path string, amount int64) error {
	be := backend.NewDefaultBackend(zap.NewNop(), path)
	tx := be.BatchTx()
	tx.LockOutsideApply()
	var latest mvcc.Revision
	err := tx.UnsafeForEach(schema.Key, func(k, _ []byte) error {
		if rev := mvcc.BytesToRev(k); rev.GreaterThan(latest) {
			latest = rev
		}
		return nil
	})
	if err == nil {
		latest = mvcc.Revision{Main: latest.Main + amount}
		tx.UnsafePut(schema.Key, mvcc.RevToBytes(latest, mvcc.NewRevBytes()), []byte{})
		mvcc.UnsafeSetScheduledCompact(tx, latest.Main)
		mvcc.UnsafeSetFinishedCompact(tx, latest.Main)
	}
	tx.Unlock()
	be.ForceCommit()
	if cerr := be.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// copyDir copies the regular files and directories under from to to.
func copyDir(from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o600)
	})
}
