package replica_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

const insecureGossip = "gossip is unencrypted and unauthenticated"

// TestGossipKeyFile: in etcd mode a replica without --gossip-key-file
// warns once that its gossip is open; with one it joins encrypted and does
// not warn. A bad key file stops New, naming the flag, the file and the
// problem.
func TestGossipKeyFile(t *testing.T) {
	checkLeaks(t)
	e := storetest.Start(t, storetest.Options{})
	keyFile := filepath.Join(t.TempDir(), "gossip.keys")
	if err := os.WriteFile(keyFile, []byte("# gossip\nbm90IGEgcmVhbCBrZXkgYnV0IDMyIGJ5dGVzIGxvbmc=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, keyFile, want string
		warns               bool
	}{
		{"no key file", "", "gossip_encrypted=false", true},
		{"key file", keyFile, "gossip_encrypted=true", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			logs := &testbase.LockedBuffer{}
			cfg := testConfig(t)
			cfg.EtcdEndpoints = []string{e.Endpoint}
			cfg.EtcdPrefix = "/" + strings.ReplaceAll(tt.name, " ", "-") + "/"
			cfg.GossipKeyFile = tt.keyFile
			cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
			r := start(t, cfg)
			xdstest.WaitFor(t, "the replica joined its cluster", func() (bool, string) {
				s := logs.String()
				return strings.Contains(s, "shard: joined the cluster"), s
			})
			r.stop(t)
			s := logs.String()
			if !strings.Contains(s, tt.want) {
				t.Errorf("logs lack %q:\n%s", tt.want, s)
			}
			if n := strings.Count(s, insecureGossip); tt.warns && n != 1 || !tt.warns && n != 0 {
				t.Errorf("the insecure gossip warning appears %d times, want %d:\n%s", n, map[bool]int{true: 1}[tt.warns], s)
			}
			if tt.warns && !strings.Contains(s, "level=WARN msg=\""+insecureGossip) {
				t.Errorf("the insecure gossip warning is not at Warn:\n%s", s)
			}
		})
	}

	t.Run("bad key file", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.keys")
		if err := os.WriteFile(bad, []byte("c2hvcnQ=\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct{ file, want string }{
			{bad, "line 1: key of 5 bytes"},
			{filepath.Join(t.TempDir(), "missing.keys"), "does not exist"},
		} {
			cfg := testConfig(t)
			cfg.EtcdEndpoints = []string{e.Endpoint}
			cfg.GossipKeyFile = tt.file
			n, err := replica.New(cfg)
			if err == nil {
				n.Close()
				t.Fatalf("New with --gossip-key-file %s: no error", tt.file)
			}
			if want := "--gossip-key-file: shard: gossip key file " + tt.file + ": " + tt.want; !strings.Contains(err.Error(), want) {
				t.Errorf("New: %v\nwant an error with %q", err, want)
			}
		}
	})
}
