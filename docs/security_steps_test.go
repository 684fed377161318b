package docs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/testkit/docgen"
	"github.com/legation-io/legation/internal/testkit/testbase"
)

// securityPage is the page whose commands the tests of this file run.
const securityPage = "operations/security.md"

// shBlock is one ```sh block of a page: its first line's number and its
// body.
type shBlock struct {
	line int
	body string
}

// shBlocks returns the ```sh blocks of page in order. Every fenced block
// of the page must be ```sh (commands, which the tests run) or ```text
// (output, which they do not), so that no command escapes the tests.
func shBlocks(t *testing.T, page string) []shBlock {
	t.Helper()
	p, err := readFences(page)
	if err != nil {
		t.Fatal(err)
	}
	var out []shBlock
	for _, f := range p.fences {
		switch f.info {
		case "sh":
			out = append(out, shBlock{line: f.line + 1, body: f.body})
		case "text":
			// Output, which nobody runs.
		default:
			t.Fatalf("%s:%d: a ``` block of kind %q: use sh for commands (run by the tests) or text for output", page, f.line, f.info)
		}
	}
	return out
}

// TestSecurityHardeningSteps runs every command of security.md, block by
// block in the page's order and in one directory, as an operator would:
// the certificate recipes, the gossip key, etcd's roles, a replica
// serving mTLS, the first authorization rules. Only the addresses are the
// test's: the binaries on the PATH are wrappers that put the test's etcd
// in place of the page's --etcd-endpoints and LEGATION_ETCD_ENDPOINTS,
// and give xds-node listen addresses on 127.0.0.1. etcd is a real one
// serving TLS with the page's etcd certificates and --client-cert-auth.
// A block starting with xds-node is a server: it runs in the background
// and the next block waits for its /readyz. At the end an operator's
// certificate may read CSDS and an Envoy's may not, as the page says.
func TestSecurityHardeningSteps(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatalf("the page's commands need openssl: %v", err)
	}
	blocks := shBlocks(t, securityPage)
	dir := t.TempDir()
	env := newStepsEnv(t, dir)
	var replica *stepServer
	for _, b := range blocks {
		if env.etcd == "" && usesCluster(b.body) {
			env.startEtcd(t)
		}
		if strings.HasPrefix(strings.TrimSpace(b.body), "xds-node") {
			replica = env.startServer(t, b)
			continue
		}
		out := env.run(t, b)
		t.Logf("%s:%d:\n%s", securityPage, b.line, out)
	}
	if replica == nil {
		t.Fatalf("%s: no block starts a replica (xds-node)", securityPage)
	}
	want := map[string]codes.Code{"admin": codes.OK, "envoy-edge": codes.PermissionDenied}
	for name, code := range want {
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := csdsCode(t, dir, name, env.xdsAddr)
			if got == code {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("CSDS as %s.pem: %v, want %v", name, got, code)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// usesCluster reports whether a block talks to etcd or runs a replica.
func usesCluster(body string) bool {
	return strings.Contains(body, "xdsadmin") || strings.Contains(body, "xds-node")
}

// stepsEnv is the directory, binaries and addresses the page's commands
// run with.
type stepsEnv struct {
	dir, bin string
	// etcd is the test etcd's endpoint, once started.
	etcd string
	// xdsAddr and httpAddr are the replica's.
	xdsAddr, httpAddr, gossipAddr string
}

// wrapper is the script standing for a binary of the page: it runs the
// real one with the test's etcd in place of the page's, and the extra
// arguments of $DOCS_EXTRA_ARGS.
const wrapper = `#!/bin/sh
for a do
  shift
  case $prev in --etcd-endpoints) a=$DOCS_ETCD ;; esac
  case $a in --etcd-endpoints=*) a=--etcd-endpoints=$DOCS_ETCD ;; esac
  prev=$a
  set -- "$@" "$a"
done
if [ -n "${LEGATION_ETCD_ENDPOINTS:-}" ]; then
  LEGATION_ETCD_ENDPOINTS=$DOCS_ETCD
  export LEGATION_ETCD_ENDPOINTS
fi
# shellcheck disable=SC2086 # the extra arguments are words
exec "$DOCS_REAL_BIN/$(basename "$0")" "$@" $DOCS_EXTRA_ARGS
`

// newStepsEnv builds xds-node and xdsadmin and writes their wrappers.
func newStepsEnv(t *testing.T, dir string) *stepsEnv {
	t.Helper()
	e := &stepsEnv{dir: dir, bin: t.TempDir()}
	real := filepath.Join(e.bin, "real")
	build := exec.Command("go", "build", "-o", real+"/", "./cmd/xds-node", "./cmd/xdsadmin")
	build.Dir = docgen.Root(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, name := range []string{"xds-node", "xdsadmin"} {
		if err := os.WriteFile(filepath.Join(e.bin, name), []byte(wrapper), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.xdsAddr, e.httpAddr, e.gossipAddr = testbase.FreeAddr(t), testbase.FreeAddr(t), testbase.FreeAddr(t)
	return e
}

// command is sh running a block in the directory with the wrappers first
// on the PATH.
func (e *stepsEnv) command(ctx context.Context, body string, extra ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", body)
	cmd.Dir = e.dir
	cmd.Env = append(os.Environ(),
		"PATH="+e.bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"DOCS_REAL_BIN="+filepath.Join(e.bin, "real"),
		"DOCS_ETCD="+e.etcd,
		"DOCS_EXTRA_ARGS="+strings.Join(extra, " "))
	return cmd
}

// run runs a block to its end and returns its output.
func (e *stepsEnv) run(t *testing.T, b shBlock) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := e.command(ctx, b.body).CombinedOutput()
	if err != nil {
		t.Fatalf("%s:%d: %v\n%s", securityPage, b.line, err, out)
	}
	return string(out)
}

// startEtcd runs a real etcd, serving TLS with the page's etcd
// certificates and requiring client certificates, until the test ends.
func (e *stepsEnv) startEtcd(t *testing.T) {
	t.Helper()
	client, peer := testbase.FreeAddr(t), testbase.FreeAddr(t)
	ec := embed.NewConfig()
	ec.Name = "etcd-0"
	ec.Dir = t.TempDir()
	ec.LogLevel = "error"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cu := url.URL{Scheme: "https", Host: client}
	pu := url.URL{Scheme: "http", Host: peer}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	ec.InitialCluster = ec.Name + "=" + pu.String()
	ec.ClientTLSInfo.CertFile = filepath.Join(e.dir, "etcd-server.pem")
	ec.ClientTLSInfo.KeyFile = filepath.Join(e.dir, "etcd-server-key.pem")
	ec.ClientTLSInfo.TrustedCAFile = filepath.Join(e.dir, "etcd-ca.pem")
	ec.ClientTLSInfo.ClientCertAuth = true
	srv, err := embed.StartEtcd(ec)
	if err != nil {
		t.Fatalf("etcd with the page's certificates: %v", err)
	}
	t.Cleanup(srv.Close)
	select {
	case <-srv.Server.ReadyNotify():
	case err := <-srv.Err():
		t.Fatalf("etcd: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("etcd: not ready after a minute")
	}
	e.etcd = cu.String()
}

// stepServer is a block running in the background.
type stepServer struct {
	cmd  *exec.Cmd
	out  *strings.Builder
	done chan error
}

// startServer starts a replica's block, stops it (SIGTERM to its process
// group) when the test ends, and returns once its /readyz says 200.
func (e *stepsEnv) startServer(t *testing.T, b shBlock) *stepServer {
	t.Helper()
	cmd := e.command(context.Background(), b.body, "--name", "replica-1", "--xds-addr", e.xdsAddr,
		"--http-addr", e.httpAddr, "--gossip-addr", e.gossipAddr,
		"--drain-period", "0s", "--shutdown-timeout", "2s")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	s := &stepServer{cmd: cmd, out: &strings.Builder{}, done: make(chan error, 1)}
	// One writer for both: exec copies them in one goroutine, and the
	// builder is read only once the process has ended.
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		var err error
		select {
		case err = <-s.done:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			err = <-s.done
		}
		if err != nil {
			t.Logf("the replica ended: %v", err)
		}
		t.Logf("%s:%d (the replica):\n%s", securityPage, b.line, s.out)
	})
	if err := e.waitReady(s); err != nil {
		t.Fatalf("%s:%d: the replica: %v", securityPage, b.line, err)
	}
	return s
}

// waitReady polls the replica's /readyz over TLS, trusting the mesh CA,
// until it says 200, the process ends or a minute passes.
func (e *stepsEnv) waitReady(s *stepServer) error {
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(filepath.Join(e.dir, "ca.pem"))
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("ca.pem: %v", err)
	}
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	deadline := time.Now().Add(time.Minute)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("exited: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		resp, err := hc.Get("https://" + e.httpAddr + "/readyz")
		if err != nil {
			last = err.Error()
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		last = resp.Status
	}
	return errors.New("/readyz not 200 within a minute: " + last)
}

// csdsCode calls CSDS on the replica with the page's certificate name
// and returns the call's status code.
func csdsCode(t *testing.T, dir, name, addr string) codes.Code {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil || !pool.AppendCertsFromPEM(ca) {
		t.Fatalf("ca.pem: %v", err)
	}
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = statusv3.NewClientStatusDiscoveryServiceClient(conn).FetchClientStatus(ctx, &statusv3.ClientStatusRequest{})
	return status.Code(err)
}
