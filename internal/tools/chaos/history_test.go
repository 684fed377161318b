package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/state/devetcd"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestHistoryRecorderThroughCompaction records a real etcd whose history
// is compacted before the recorder's watch starts: the recorder writes a
// gap and the state after it, goes on recording, and the history read
// back has the gap, the deletion inside it and the changes after it.
func TestHistoryRecorderThroughCompaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := devetcd.Start(ctx, devetcd.Config{Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", HistoryRevisions: -1, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	const p = "/legation/resources/"
	put := func(path, typ, name string) int64 {
		t.Helper()
		// The value is written at the next revision: its body says so.
		cur, err := cli.Get(ctx, "/", clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cli.Put(ctx, p+path, string(envelope(t, typ, name, cur.Header.Revision+1)))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	put("cluster/default/a", "cluster", "a")
	put("cluster/default/b", "cluster", "b")
	if _, err := cli.Put(ctx, "/legation/applies/default", "not a resource"); err != nil {
		t.Fatal(err)
	}

	var buf testbase.LockedBuffer
	h, err := NewHistoryRecorder(cli, "/legation/", &buf)
	if err != nil {
		t.Fatal(err)
	}
	first := true
	var compacted int64
	h.beforeWatch = func(rev int64) {
		if !first {
			return
		}
		first = false
		// Changes the watch from rev+1 will not see: compacted away.
		put("cluster/default/a", "cluster", "a")
		if _, err := cli.Delete(ctx, p+"cluster/default/b"); err != nil {
			t.Error(err)
		}
		compacted = put("cluster/default/c", "cluster", "c")
		if _, err := cli.Compact(ctx, compacted); err != nil {
			t.Error(err)
		}
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(rctx) }()
	xdstest.WaitFor(t, "a gap", func() (bool, string) { return h.Gaps() == 1, "" })
	last := put("cluster/default/d", "cluster", "d")
	xdstest.WaitFor(t, "the history at etcd's revision", func() (bool, string) { return h.Last() >= last, "" })
	rcancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}

	hist, err := ReadHistory(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatalf("ReadHistory: %v\n%s", err, buf.String())
	}
	if len(hist.Gaps) != 1 || hist.Gaps[0].Rev < compacted || hist.Known(compacted-1) {
		t.Fatalf("gaps %+v, known before the compaction %v; want one gap up to at least %d", hist.Gaps, hist.Known(compacted-1), compacted)
	}
	got := hist.Set(cds, "", hist.Last)
	want := map[string]int64{"a": compacted - 2, "c": compacted, "d": last}
	if len(got) != len(want) || got["a"] != want["a"] || got["c"] != want["c"] || got["d"] != want["d"] {
		t.Errorf("final clusters %v, want %v", got, want)
	}
	if _, d := hist.Visible(cds, "", "b", hist.Last); d != hist.Gaps[0].Rev {
		t.Errorf("b deleted at %d, want at the gap's end %d", d, hist.Gaps[0].Rev)
	}
}
