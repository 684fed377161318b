package clustertest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "env")
	// As cluster.sh's write_env writes it.
	content := "# comment\nDIR='/tmp/a b'\nNET='127.0.10.'\nODD='it'\\''s'\nEMPTY=''\n"
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readEnv(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"DIR": "/tmp/a b", "NET": "127.0.10.", "ODD": "it's", "EMPTY": ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("readEnv (-want +got):\n%s", diff)
	}

	if err := os.WriteFile(path, []byte("NET=127.0.10.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readEnv(path); err == nil {
		t.Error("readEnv of an unquoted value: no error")
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
