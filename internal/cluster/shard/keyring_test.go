package shard_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// newKey returns a random key of n bytes.
func newKey(t *testing.T, n int) []byte {
	t.Helper()
	k := make([]byte, n)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// keyLines is the key file holding keys, first key first.
func keyLines(keys ...[]byte) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	}
	return b.String()
}

// writeFile replaces path's content atomically (a rename), as docs/operations/security.md
// asks operators to.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestReadKeyFile(t *testing.T) {
	k16, k24, k32 := newKey(t, 16), newKey(t, 24), newKey(t, 32)
	b64 := base64.StdEncoding.EncodeToString
	tests := []struct {
		name    string
		content string // "": no file at all
		want    [][]byte
		wantErr string // substring after the path; empty: no error
	}{
		{"one key", b64(k32) + "\n", [][]byte{k32}, ""},
		{"no final newline", b64(k32), [][]byte{k32}, ""},
		{"comments blank lines CRLF and spaces",
			"# gossip keys, newest first\r\n\r\n  " + b64(k24) + "  \r\n# the old one\n" + b64(k16) + "\n\n" + b64(k32) + "\n",
			[][]byte{k24, k16, k32}, ""},
		{"missing", "", nil, "does not exist"},
		{"empty", "\n", nil, "no key"},
		{"only comments", "# nothing yet\n\n", nil, "no key"},
		{"bad base64", "# keys\n" + b64(k32) + "\nnot base64!\n", nil, "line 3: not a base64 key"},
		{"unpadded base64", base64.RawStdEncoding.EncodeToString(k16) + "\n", nil, "line 1: not a base64 key"},
		{"trailing comment", b64(k32) + " # primary\n", nil, "line 1: not a base64 key"},
		{"short key", b64(k32) + "\n" + b64(newKey(t, 8)) + "\n", nil, "line 2: key of 8 bytes; want 16, 24 or 32"},
		{"long key", "\n\n" + b64(newKey(t, 64)) + "\n", nil, "line 3: key of 64 bytes; want 16, 24 or 32"},
		{"same key twice", b64(k32) + "\n" + b64(k16) + "\n" + b64(k32) + "\n", nil, "line 3: the same key as line 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gossip.keys")
			if tt.content != "" {
				if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := shard.ReadKeyFile(path)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ReadKeyFile: %v", err)
				}
				if !slices.EqualFunc(got, tt.want, bytes.Equal) {
					t.Fatalf("ReadKeyFile = %d keys, want %d, in order", len(got), len(tt.want))
				}
				return
			}
			if err == nil {
				t.Fatalf("ReadKeyFile: no error, want one with %q", tt.wantErr)
			}
			want := "shard: gossip key file " + path + ": " + tt.wantErr
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("ReadKeyFile: %v\nwant an error with %q", err, want)
			}
			for _, k := range [][]byte{k16, k24, k32} {
				if strings.Contains(err.Error(), b64(k)) {
					t.Fatalf("the error %q shows a key", err)
				}
			}
		})
	}

	t.Run("a directory", func(t *testing.T) {
		dir := t.TempDir()
		_, err := shard.ReadKeyFile(dir)
		if err == nil || !strings.Contains(err.Error(), "shard: gossip key file "+dir+": cannot read") {
			t.Fatalf("ReadKeyFile(a directory) = %v, want a read error naming it", err)
		}
	})
}

// TestStartBadKeyFile: Start refuses a bad key file with ReadKeyFile's
// error, and leaves nothing running (TestMain checks goroutines).
func TestStartBadKeyFile(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.keys")
	writeFile(t, bad, "# none yet\n")
	for _, tt := range []struct{ file, want string }{
		{filepath.Join(dir, "missing.keys"), "does not exist"},
		{bad, "no key"},
	} {
		cfg := c.config("a")
		cfg.GossipKeyFile = tt.file
		m, err := shard.Start(testbase.Context(t), cfg)
		if err == nil {
			m.Close()
			t.Fatalf("Start with key file %s: no error", tt.file)
		}
		if want := "shard: gossip key file " + tt.file + ": " + tt.want; !strings.Contains(err.Error(), want) {
			t.Errorf("Start: %v\nwant an error with %q", err, want)
		}
	}
	if got := registered(t, c.etcd.Client(t)); len(got) != 0 {
		t.Errorf("registry after failed Starts = %v, want empty", got)
	}
}

// keyed is one test member and what the test needs of it.
type keyed struct {
	m       *shard.Membership
	reg     *prometheus.Registry
	keyFile string
}

// reloads is how many key file changes m applied so far.
func (k keyed) reloads(t *testing.T) float64 {
	return metricValue(t, k.reg, "legation_shard_gossip_key_file_reloads_total")
}

// fastConfig is c.config with failure detection fast enough that a peer
// whose packets cannot be read is off the ring within a second or two,
// and the registry re-read often, so join attempts are many.
func (c *cluster) fastConfig(name string) shard.Config {
	cfg := c.config(name)
	cfg.ProbeInterval = 200 * time.Millisecond
	cfg.ProbeTimeout = 100 * time.Millisecond
	cfg.SuspicionMult = 2
	cfg.GossipInterval = 50 * time.Millisecond
	cfg.RefreshInterval = 100 * time.Millisecond
	cfg.GossipKeyInterval = 20 * time.Millisecond
	return cfg
}

// startKeyed starts a member whose key file holds content ("": no key
// file, gossip in clear).
func (c *cluster) startKeyed(name, content string) keyed {
	c.t.Helper()
	k := keyed{reg: prometheus.NewRegistry()}
	cfg := c.fastConfig(name)
	cfg.Registerer = k.reg
	if content != "" {
		k.keyFile = filepath.Join(c.t.TempDir(), name+".keys")
		writeFile(c.t, k.keyFile, content)
		cfg.GossipKeyFile = k.keyFile
	}
	k.m = c.start(cfg)
	return k
}

// memberNames is the names of the members m's gossip knows alive.
func memberNames(m *shard.Membership) []string { return names(m.Members()) }

// TestGossipKeyKeepsOutsidersOut: a member with no key, or another key,
// registered in the same etcd (so each side's discovery tries to join the
// other every RefreshInterval), never appears in the keyed members' gossip
// or rings, and sees nothing of them.
func TestGossipKeyKeepsOutsidersOut(t *testing.T) {
	k1 := newKey(t, 32)
	for _, tt := range []struct{ name, content string }{
		{"no key", ""},
		{"another key", keyLines(newKey(t, 32))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			a := c.startKeyed("a", keyLines(k1))
			b := c.startKeyed("b", keyLines(k1))
			in := []*shard.Membership{a.m, b.m}
			waitFor(t, shardTestTimeout, "a and b, sharing a key, do not form a ring", ringIs(in, "a", "b"))

			x := c.startKeyed("x", tt.content)
			if got := registered(t, c.etcd.Client(t)); !slices.Equal(got, []string{"a", "b", "x"}) {
				t.Fatalf("registry = %v, want a, b and x: x must be where the others look for peers", got)
			}
			// Twenty registry refreshes, ten probe rounds.
			holds(t, 2*time.Second, "x got into a's or b's gossip, or they into x's", func() bool {
				return ringIs(in, "a", "b")() && ringIs([]*shard.Membership{x.m}, "x")() &&
					slices.Equal(memberNames(a.m), []string{"a", "b"}) &&
					slices.Equal(memberNames(b.m), []string{"a", "b"}) &&
					slices.Equal(memberNames(x.m), []string{"x"})
			})
		})
	}
}

// TestGossipKeyRotation: the rotation of docs/operations/security.md, one replica at a time,
// through key file rewrites picked up while running: each member reads
// what the other sends at every step, and the ring stays whole
// throughout. Then a member with the retired key is kept out, and a
// rewrite that skips the steps splits the ring within the watch after
// the rotation: a step that broke it would have been seen.
func TestGossipKeyRotation(t *testing.T) {
	k1, k2, k3 := newKey(t, 32), newKey(t, 32), newKey(t, 16)
	c := newCluster(t)
	a := c.startKeyed("a", keyLines(k1))
	b := c.startKeyed("b", keyLines(k1))
	both := []*shard.Membership{a.m, b.m}
	waitFor(t, shardTestTimeout, "a and b, sharing a key, do not form a ring", ringIs(both, "a", "b"))

	// rewrite puts content in k's key file and waits until k applied it.
	rewrite := func(k keyed, content string) {
		t.Helper()
		before := k.reloads(t)
		writeFile(t, k.keyFile, content)
		waitFor(t, shardTestTimeout, k.m.Self().Name+" did not apply its new key file", func() bool { return k.reloads(t) > before })
	}
	// talks checks that each of a and b reads what the other sends now:
	// a readiness flip of one reaches the other by gossip.
	ready := false
	talks := func(step string) {
		t.Helper()
		ready = !ready
		for _, pair := range [][2]keyed{{a, b}, {b, a}} {
			from, to := pair[0].m, pair[1].m
			from.SetReady(ready)
			waitFor(t, shardTestTimeout, step+": "+to.Self().Name+" does not hear "+from.Self().Name, func() bool {
				for _, mem := range to.Members() {
					if mem.Name == from.Self().Name {
						return mem.Ready == ready
					}
				}
				return false
			})
		}
	}
	// The ring is watched throughout the rotation; talks checks each step.
	stop, broken := watchRing(both, "a", "b")
	t.Cleanup(stop)

	talks("start, both [k1]")
	// 1. Add the new key second everywhere: k1 still encrypts.
	rewrite(a, "# step 1\n"+keyLines(k1, k2))
	talks("1: a [k1 k2], b [k1]")
	rewrite(b, keyLines(k1, k2))
	talks("1: both [k1 k2]")
	// 2. Move it first everywhere: a encrypts with k2, which b reads.
	rewrite(a, keyLines(k2, k1))
	talks("2: a [k2 k1], b [k1 k2]")
	rewrite(b, keyLines(k2, k1))
	talks("2: both [k2 k1]")
	// 3. Remove the old key everywhere.
	rewrite(a, keyLines(k2))
	talks("3: a [k2], b [k2 k1]")
	rewrite(b, keyLines(k2))
	talks("3: both [k2]")
	// Several probe rounds and suspicion timeouts after the last step.
	holds(t, 2500*time.Millisecond, "the ring split after the rotation", ringIs(both, "a", "b"))
	stop()
	if msg := broken(); msg != "" {
		t.Fatalf("during the rotation: %s", msg)
	}
	for _, k := range []keyed{a, b} {
		if got := metricValue(t, k.reg, "legation_shard_gossip_keys"); got != 1 {
			t.Errorf("%s: legation_shard_gossip_keys = %v, want 1", k.m.Self().Name, got)
		}
	}

	// The retired key no longer opens anything.
	old := c.startKeyed("old", keyLines(k1))
	holds(t, time.Second, "a member with the retired key got in", func() bool {
		return ringIs(both, "a", "b")() && slices.Equal(memberNames(old.m), []string{"old"})
	})
	old.m.Close()

	// Skipping the steps breaks the ring within the time whole watches.
	rewrite(a, keyLines(k3))
	d := waitFor(t, shardTestTimeout, "a and b still see each other under different keys", func() bool {
		return slices.Equal(ringNames(a.m), []string{"a"}) && slices.Equal(ringNames(b.m), []string{"b"})
	})
	t.Logf("a key swapped in one step split the ring in %v", d)
	if d >= 2500*time.Millisecond {
		t.Errorf("the split took %v: the 2.5s watch after the rotation could miss a split", d)
	}
}

// watchRing checks, every few milliseconds until stop is called, that
// every membership's ring has exactly want; broken returns the first
// time it had not ("" if never).
func watchRing(ms []*shard.Membership, want ...string) (stop func(), broken func() string) {
	ok := ringIs(ms, want...)
	done := make(chan struct{})
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		msg string
	)
	wg.Go(func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if !ok() {
				var rings []string
				for _, m := range ms {
					rings = append(rings, m.Self().Name+": "+strings.Join(ringNames(m), ","))
				}
				mu.Lock()
				if msg == "" {
					msg = "rings " + strings.Join(rings, "; ")
				}
				mu.Unlock()
			}
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	broken = func() string {
		mu.Lock()
		defer mu.Unlock()
		return msg
	}
	return stop, broken
}

// TestGossipKeyBadRewrite: a key file rewritten with bad content, or
// removed, leaves the keyring in use; fixed, it applies.
func TestGossipKeyBadRewrite(t *testing.T) {
	k1, k2 := newKey(t, 32), newKey(t, 32)
	c := newCluster(t)
	a := c.startKeyed("a", keyLines(k1))
	b := c.startKeyed("b", keyLines(k1))
	both := []*shard.Membership{a.m, b.m}
	waitFor(t, shardTestTimeout, "a and b do not form a ring", ringIs(both, "a", "b"))

	errs := func() float64 { return metricValue(t, a.reg, "legation_shard_gossip_key_file_errors_total") }
	for i, bad := range []string{
		"", // removed
		"# rotating\n",
		keyLines(k2) + "garbage\n", // would cut a off if half applied
		keyLines(newKey(t, 20)),
	} {
		before := errs()
		if bad == "" {
			if err := os.Remove(a.keyFile); err != nil {
				t.Fatal(err)
			}
		} else {
			writeFile(t, a.keyFile, bad)
		}
		waitFor(t, shardTestTimeout, "a did not report its bad key file", func() bool { return errs() > before })
		holds(t, 500*time.Millisecond, "the ring split after a bad rewrite", ringIs(both, "a", "b"))
		if i == 0 {
			// The same problem is reported once, not at every poll.
			holds(t, 200*time.Millisecond, "a missing file reported again", func() bool { return errs() == before+1 })
		}
	}
	if got := a.reloads(t); got != 0 {
		t.Errorf("reloads after bad rewrites only = %v, want 0", got)
	}
	writeFile(t, a.keyFile, keyLines(k1, k2))
	waitFor(t, shardTestTimeout, "a did not apply its fixed key file", func() bool { return a.reloads(t) == 1 })
	if got := metricValue(t, a.reg, "legation_shard_gossip_keys"); got != 2 {
		t.Errorf("legation_shard_gossip_keys = %v, want 2", got)
	}
	holds(t, 500*time.Millisecond, "the ring split after the fix", ringIs(both, "a", "b"))
}
