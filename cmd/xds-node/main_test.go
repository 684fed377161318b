package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/legation-io/legation"
	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/state/etcdconn"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		check   func(t *testing.T, cfg replica.Config)
		wantErr string // substring; empty: no error
	}{
		{
			name: "defaults are dev mode",
			check: func(t *testing.T, cfg replica.Config) {
				if len(cfg.EtcdEndpoints) != 0 || cfg.GroupBy != "cluster" || cfg.ShutdownTimeout != 10*time.Second {
					t.Errorf("got endpoints %q, group-by %q, shutdown %s; want none, cluster, 10s", cfg.EtcdEndpoints, cfg.GroupBy, cfg.ShutdownTimeout)
				}
				if cfg.CatchupTimeout != 5*time.Second || cfg.SotwTrustVersion || cfg.MaxRecvMsgSize != 4<<20 || cfg.InsecureLoopbackDebug {
					t.Errorf("got catchup %s, trust version %v, max recv %d, loopback debug %v; want 5s, false, 4194304, false",
						cfg.CatchupTimeout, cfg.SotwTrustVersion, cfg.MaxRecvMsgSize, cfg.InsecureLoopbackDebug)
				}
				if cfg.InsecureLoopbackSecrets || cfg.Pprof {
					t.Errorf("got loopback secrets %v, pprof %v; want both off by default, dev mode too", cfg.InsecureLoopbackSecrets, cfg.Pprof)
				}
			},
		},
		{
			name: "dev mode listens on loopback only",
			check: func(t *testing.T, cfg replica.Config) {
				if cfg.XDSAddr != "127.0.0.1:18000" || cfg.HTTPAddr != "127.0.0.1:18001" || cfg.GossipAddr != "127.0.0.1:7946" {
					t.Errorf("got xds %q, http %q, gossip %q; want them on 127.0.0.1", cfg.XDSAddr, cfg.HTTPAddr, cfg.GossipAddr)
				}
			},
		},
		{
			name: "dev mode address picked by the operator",
			args: []string{"--xds-addr", ":18000"},
			env:  map[string]string{"LEGATION_HTTP_ADDR": "0.0.0.0:18001"},
			check: func(t *testing.T, cfg replica.Config) {
				if cfg.XDSAddr != ":18000" || cfg.HTTPAddr != "0.0.0.0:18001" {
					t.Errorf("got xds %q, http %q; want :18000, 0.0.0.0:18001", cfg.XDSAddr, cfg.HTTPAddr)
				}
			},
		},
		{
			name: "etcd mode listens on every interface",
			args: []string{"--etcd-endpoints", "a:2379"},
			check: func(t *testing.T, cfg replica.Config) {
				if cfg.XDSAddr != ":18000" || cfg.HTTPAddr != ":18001" {
					t.Errorf("got xds %q, http %q; want :18000, :18001", cfg.XDSAddr, cfg.HTTPAddr)
				}
			},
		},
		{
			name: "TLS flags",
			args: []string{"--etcd-endpoints", "a:2379", "--tls-cert-file", "c.pem", "--tls-key-file", "k.pem", "--client-ca-file", "ca.pem",
				"--replica-identity", "spiffe://x/replica-*, spiffe://x/r", "--authz-default-trust-domain", "x.example"},
			check: func(t *testing.T, cfg replica.Config) {
				if cfg.TLSCertFile != "c.pem" || cfg.TLSKeyFile != "k.pem" || cfg.ClientCAFile != "ca.pem" || !cfg.MTLS() ||
					!slices.Equal(cfg.ReplicaIdentities, []string{"spiffe://x/replica-*", "spiffe://x/r"}) || cfg.AuthzDefaultTrustDomain != "x.example" {
					t.Errorf("got %+v", cfg)
				}
			},
		},
		{
			name: "env sets flags",
			env:  map[string]string{"LEGATION_ETCD_ENDPOINTS": "a:2379, b:2379", "LEGATION_GROUP_BY": "id", "LEGATION_SHUTDOWN_TIMEOUT": "3s"},
			check: func(t *testing.T, cfg replica.Config) {
				if !slices.Equal(cfg.EtcdEndpoints, []string{"a:2379", "b:2379"}) || cfg.GroupBy != "id" || cfg.ShutdownTimeout != 3*time.Second {
					t.Errorf("got endpoints %q, group-by %q, shutdown %s; want [a:2379 b:2379], id, 3s", cfg.EtcdEndpoints, cfg.GroupBy, cfg.ShutdownTimeout)
				}
			},
		},
		{
			name: "drain period",
			args: []string{"--drain-period", "30s", "--shutdown-timeout", "5s"},
			check: func(t *testing.T, cfg replica.Config) {
				if cfg.DrainPeriod != 30*time.Second || cfg.ShutdownTimeout != 5*time.Second {
					t.Errorf("got drain period %s, shutdown %s; want 30s, 5s", cfg.DrainPeriod, cfg.ShutdownTimeout)
				}
			},
		},
		{
			name: "a flag wins over env",
			env:  map[string]string{"LEGATION_GROUP_BY": "id", "LEGATION_NAME": "from-env"},
			args: []string{"--group-by=metadata:team", "--name", "from-flag"},
			check: func(t *testing.T, cfg replica.Config) {
				if cfg.Name != "from-flag" || cfg.GroupBy != "metadata:team" {
					t.Errorf("got name %q, group-by %q; want from-flag, metadata:team", cfg.Name, cfg.GroupBy)
				}
			},
		},
		{
			name: "an empty variable is ignored",
			env:  map[string]string{"LEGATION_NAME": ""},
			check: func(t *testing.T, cfg replica.Config) {
				if cfg.Name == "" {
					t.Error("name empty")
				}
			},
		},
		{
			name: "xds flags",
			args: []string{"--catchup-timeout", "2s", "--sotw-trust-version", "--max-recv-msg-size", "1048576", "--insecure-loopback-debug",
				"--insecure-loopback-secrets", "--pprof"},
			check: func(t *testing.T, cfg replica.Config) {
				if cfg.CatchupTimeout != 2*time.Second || !cfg.SotwTrustVersion || cfg.MaxRecvMsgSize != 1<<20 || !cfg.InsecureLoopbackDebug {
					t.Errorf("got catchup %s, trust version %v, max recv %d, loopback debug %v; want 2s, true, 1048576, true",
						cfg.CatchupTimeout, cfg.SotwTrustVersion, cfg.MaxRecvMsgSize, cfg.InsecureLoopbackDebug)
				}
				if !cfg.InsecureLoopbackSecrets || !cfg.Pprof {
					t.Errorf("got loopback secrets %v, pprof %v; want both on", cfg.InsecureLoopbackSecrets, cfg.Pprof)
				}
			},
		},
		{
			name: "xds env",
			env: map[string]string{"LEGATION_CATCHUP_TIMEOUT": "7s", "LEGATION_SOTW_TRUST_VERSION": "true",
				"LEGATION_MAX_RECV_MSG_SIZE": "2048", "LEGATION_INSECURE_LOOPBACK_DEBUG": "1", "LEGATION_INSECURE_LOOPBACK_SECRETS": "true",
				"LEGATION_PPROF": "true"},
			check: func(t *testing.T, cfg replica.Config) {
				if cfg.CatchupTimeout != 7*time.Second || !cfg.SotwTrustVersion || cfg.MaxRecvMsgSize != 2048 || !cfg.InsecureLoopbackDebug {
					t.Errorf("got catchup %s, trust version %v, max recv %d, loopback debug %v; want 7s, true, 2048, true",
						cfg.CatchupTimeout, cfg.SotwTrustVersion, cfg.MaxRecvMsgSize, cfg.InsecureLoopbackDebug)
				}
				if !cfg.InsecureLoopbackSecrets || !cfg.Pprof {
					t.Errorf("got loopback secrets %v, pprof %v; want both on", cfg.InsecureLoopbackSecrets, cfg.Pprof)
				}
			},
		},
		{
			name: "a false bool flag wins over env",
			env:  map[string]string{"LEGATION_SOTW_TRUST_VERSION": "true", "LEGATION_INSECURE_LOOPBACK_DEBUG": "true"},
			args: []string{"--sotw-trust-version=false", "--insecure-loopback-debug=false"},
			check: func(t *testing.T, cfg replica.Config) {
				if cfg.SotwTrustVersion || cfg.InsecureLoopbackDebug {
					t.Errorf("got trust version %v, loopback debug %v; want false, false", cfg.SotwTrustVersion, cfg.InsecureLoopbackDebug)
				}
			},
		},
		{
			name: "etcd TLS and auth flags, password from env",
			env:  map[string]string{"LEGATION_ETCD_PASSWORD": "hunter2"},
			args: []string{"--etcd-endpoints", "https://a:2379,https://b:2379", "--etcd-cacert", "ca.pem",
				"--etcd-cert", "c.pem", "--etcd-key", "k.pem", "--etcd-username", "replica"},
			check: func(t *testing.T, cfg replica.Config) {
				want := etcdconn.Security{CACert: "ca.pem", Cert: "c.pem", Key: "k.pem", Username: "replica", Password: "hunter2"}
				if cfg.EtcdSecurity != want || len(cfg.EtcdEndpoints) != 2 {
					t.Errorf("got %v %v, want %v with two endpoints", cfg.EtcdEndpoints, cfg.EtcdSecurity, want)
				}
			},
		},
		{
			name:    "etcd flags in dev mode",
			args:    []string{"--etcd-cert", "c.pem", "--etcd-key", "k.pem"},
			wantErr: "--etcd-cert, --etcd-key: only with --etcd-endpoints",
		},
		{
			name:    "TLS flags with an http endpoint",
			args:    []string{"--etcd-endpoints", "http://a:2379", "--etcd-cacert", "ca.pem"},
			wantErr: `--etcd-cacert (TLS) with --etcd-endpoints "http://a:2379", which is http://`,
		},
		{
			name:    "username without password",
			args:    []string{"--etcd-endpoints", "a:2379", "--etcd-username", "replica"},
			wantErr: "--etcd-username without a password (LEGATION_ETCD_PASSWORD or --etcd-password-file)",
		},
		{
			name: "gossip key file",
			env:  map[string]string{"LEGATION_ETCD_ENDPOINTS": "a:2379", "LEGATION_GOSSIP_KEY_FILE": "/run/secrets/gossip.keys"},
			check: func(t *testing.T, cfg replica.Config) {
				if cfg.GossipKeyFile != "/run/secrets/gossip.keys" {
					t.Errorf("got gossip key file %q, want /run/secrets/gossip.keys", cfg.GossipKeyFile)
				}
			},
		},
		{name: "gossip key file in dev mode", args: []string{"--gossip-key-file", "k"}, wantErr: "--gossip-key-file: set in dev mode"},
		{name: "gossip key file standalone", args: []string{"--etcd-endpoints", "a:2379", "--standalone", "--gossip-key-file", "k"},
			wantErr: "--gossip-key-file: set with --standalone"},
		{name: "bad flag value", args: []string{"--shutdown-timeout", "soon"}, wantErr: `"--shutdown-timeout"`},
		{name: "bad env value", env: map[string]string{"LEGATION_SHUTDOWN_TIMEOUT": "soon"}, wantErr: "LEGATION_SHUTDOWN_TIMEOUT"},
		{name: "invalid env config", env: map[string]string{"LEGATION_GROUP_BY": "labels"}, wantErr: "--group-by"},
		{name: "bad group-by", args: []string{"--group-by", "labels"}, wantErr: "--group-by"},
		{name: "bad log level", args: []string{"--log-level", "loud"}, wantErr: "--log-level"},
		{name: "bad log format", args: []string{"--log-format", "xml"}, wantErr: "--log-format"},
		{name: "zero catchup timeout", args: []string{"--catchup-timeout", "0s"}, wantErr: "--catchup-timeout 0s: must be positive"},
		{name: "bad catchup timeout env", env: map[string]string{"LEGATION_CATCHUP_TIMEOUT": "5"}, wantErr: "LEGATION_CATCHUP_TIMEOUT"},
		{name: "negative catchup timeout env", env: map[string]string{"LEGATION_CATCHUP_TIMEOUT": "-1s"}, wantErr: "--catchup-timeout -1s"},
		{name: "zero max recv msg size", args: []string{"--max-recv-msg-size=0"}, wantErr: "--max-recv-msg-size 0: must be positive"},
		{name: "bad max recv msg size", args: []string{"--max-recv-msg-size", "4MiB"}, wantErr: "--max-recv-msg-size"},
		{name: "bad trust version env", env: map[string]string{"LEGATION_SOTW_TRUST_VERSION": "sometimes"}, wantErr: "LEGATION_SOTW_TRUST_VERSION"},
		{name: "bad loopback debug env", env: map[string]string{"LEGATION_INSECURE_LOOPBACK_DEBUG": "maybe"}, wantErr: "LEGATION_INSECURE_LOOPBACK_DEBUG"},
		{name: "removed --debug-open", args: []string{"--debug-open"}, wantErr: "--debug-open was removed: "},
		{name: "removed --debug-open by env", env: map[string]string{"LEGATION_DEBUG_OPEN": "true"}, wantErr: "use --insecure-loopback-debug"},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "--nope"},
		{name: "argument", args: []string{"serve"}, wantErr: `"serve"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cfg, err := parseFlags(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseFlags(%q) = %v, want an error with %s", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseFlags(%q) = %v", tt.args, err)
			}
			if cfg.Logger == nil {
				t.Error("no Logger")
			}
			tt.check(t, cfg)
		})
	}
}

func TestParseFlagsHelp(t *testing.T) {
	// The usage goes to os.Stderr: catch it, to check that a password in
	// the environment does not show as a default.
	t.Setenv(etcdconn.PasswordEnv, "hunter2")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	_, err = parseFlags([]string{"--help"})
	os.Stderr = stderr
	w.Close()
	usage, _ := io.ReadAll(r)
	if !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("parseFlags(--help) = %v, want pflag.ErrHelp", err)
	}
	if !strings.Contains(string(usage), "--etcd-password") || strings.Contains(string(usage), "hunter2") {
		t.Errorf("usage without --etcd-password, or with the password:\n%s", usage)
	}
	if !strings.Contains(string(usage), "\nExamples:\n  ") {
		t.Errorf("usage without examples:\n%s", usage)
	}
}

// TestParseFlagsVersion: --version is an action that wins over every
// other flag's check, and no LEGATION_VERSION variable triggers it.
func TestParseFlagsVersion(t *testing.T) {
	if _, err := parseFlags([]string{"--version", "--group-by", "labels"}); !errors.Is(err, errVersion) {
		t.Errorf("parseFlags(--version, a bad --group-by) = %v; want errVersion", err)
	}
	t.Setenv("LEGATION_VERSION", "true")
	if _, err := parseFlags(nil); err != nil {
		t.Errorf("parseFlags() with LEGATION_VERSION=true: %v; want a dev mode Config", err)
	}
}

// TestVersionCommand builds xds-node and runs `xds-node --version`: it
// prints CHANGELOG.md's latest version and, in a git clone (built with
// -buildvcs=true, whatever GOFLAGS says), the build's revision, and exits
// 0. Go stamps the revision only where the repository's root holds a .git
// directory: not in a git worktree, whose .git is a file.
func TestVersionCommand(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "xds-node")
	dotGit, err := os.Stat(filepath.Join("..", "..", ".git"))
	vcs := err == nil && dotGit.IsDir()
	if out, err := exec.Command("go", "build", "-buildvcs="+strconv.FormatBool(vcs), "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("xds-node --version: %v", err)
	}
	got, want := string(out), "xds-node "+legation.Version()+" ("
	if !strings.HasPrefix(got, want) || strings.Count(got, "\n") != 1 || (vcs && !strings.Contains(got, "(revision ")) {
		t.Errorf("xds-node --version printed %q; want one line %q (with the revision in a git checkout: %v)", got, want+"...)", vcs)
	}
}
