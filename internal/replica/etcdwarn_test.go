package replica_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
)

// TestEtcdInsecureWarning runs a replica against a plain-text etcd with no
// credentials: it serves, ready, but says so loudly, at error level at
// start and in /readyz's answer after its status line.
func TestEtcdInsecureWarning(t *testing.T) {
	checkLeaks(t)
	e := storetest.Start(t, storetest.Options{})
	logs := &testbase.LockedBuffer{}
	cfg := testConfig(t)
	cfg.EtcdEndpoints = []string{e.Endpoint}
	cfg.Standalone = true
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	r := start(t, cfg)
	waitReady(t, r)

	code, body := get(t, r, "/readyz")
	status, warning, _ := strings.Cut(body, "\n")
	if code != http.StatusOK || status != "ok" ||
		!strings.Contains(warning, "INSECURE etcd: no TLS") || !strings.Contains(warning, "no authentication") {
		t.Errorf("/readyz = %d %q; want 200, \"ok\", then a line warning of no TLS and no authentication to etcd", code, body)
	}
	xdstest.WaitFor(t, "an error-level log line on etcd's security", func() (bool, string) {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "level=ERROR") && strings.Contains(l, "INSECURE etcd: no TLS") {
				return true, ""
			}
		}
		return false, logs.String()
	})
}
