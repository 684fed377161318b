package localcluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "env")
	content := "# comment\nDIR=" + quote("/tmp/a b") + "\nNET='127.0.10.'\nODD=" + quote("it's") + "\nEMPTY=''\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadEnv(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"DIR": "/tmp/a b", "NET": "127.0.10.", "ODD": "it's", "EMPTY": ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ReadEnv (-want +got):\n%s", diff)
	}

	if err := os.WriteFile(path, []byte("NET=127.0.10.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadEnv(path); err == nil {
		t.Error("ReadEnv of an unquoted value: no error")
	}
}

// TestWriteEnv: the env file lists every address, and Up's check reads
// back what it needs.
func TestWriteEnv(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Dir = t.TempDir()
	cfg.EtcdBin, cfg.XDSNodeBin = "etcd", "xds-node"
	cfg.EtcdMembers, cfg.Replicas = 2, 1
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.writeEnv(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadEnv(filepath.Join(cfg.Dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"NET":                     "127.0.10.",
		"ETCD_MEMBERS":            "2",
		"REPLICAS":                "1",
		"LEGATION_ETCD_ENDPOINTS": "127.0.10.11:2379,127.0.10.12:2379",
		"LB_XDS_ADDR":             "127.0.10.1:18000",
		"LB_HTTP_ADDR":            "127.0.10.1:18001",
		"ETCD_2_PEER_ADDR":        "127.0.10.12:2380",
		"REPLICA_1_XDS_ADDR":      "127.0.10.21:18000",
		"REPLICA_1_HTTP_ADDR":     "127.0.10.21:18001",
		"REPLICA_1_GOSSIP_ADDR":   "127.0.10.21:7946",
		"REPLICA_1_LOG":           filepath.Join(cfg.Dir, "replica-1.log"),
	} {
		if got[k] != want {
			t.Errorf("env %s=%q, want %q", k, got[k], want)
		}
	}
	if err := c.checkSaved(); err != nil {
		t.Errorf("checkSaved of its own env: %v", err)
	}
	other := cfg
	other.Net = "127.0.11."
	o, err := New(other)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.checkSaved(); err == nil {
		t.Error("checkSaved with another Net: no error")
	}
}

func TestParseStat(t *testing.T) {
	// The head of HAProxy 2.6's "show stat" (columns cut after status).
	const stat = `# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,
xds,FRONTEND,,,0,1,262119,1,0,0,0,0,0,,,,,OPEN,
xds,replica-1,0,0,0,1,,1,0,0,,0,,0,0,0,0,UP,
xds,replica-2,0,0,0,0,,0,0,0,,0,,0,0,0,0,DOWN,
xds,BACKEND,0,0,0,1,26212,1,0,0,0,0,,0,0,0,0,UP,
http,replica-1,0,0,0,0,,0,0,0,,0,,0,0,0,0,UP 1/2,

`
	got, err := parseStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"xds/replica-1": "UP", "xds/replica-2": "DOWN", "http/replica-1": "UP 1/2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseStat (-want +got):\n%s", diff)
	}
}
