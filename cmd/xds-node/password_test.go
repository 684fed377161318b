package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEtcdPassword: xds-node takes etcd's password from
// LEGATION_ETCD_PASSWORD or --etcd-password-file, never from the command
// line (the process list shows it), and never over plain text.
func TestEtcdPassword(t *testing.T) {
	const pw = "hunter2"
	file := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(file, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tlsArgs := []string{"--etcd-endpoints", "https://a:2379", "--etcd-cacert", "ca.pem", "--etcd-username", "replica"}
	for _, tc := range []struct {
		name    string
		env     string
		args    []string
		wantErr string
	}{
		{name: "file", args: append(tlsArgs, "--etcd-password-file", file)},
		{name: "environment", env: pw, args: tlsArgs},
		{name: "command line", args: append(tlsArgs, "--etcd-password", pw),
			wantErr: "--etcd-password: refused: a password on the command line shows in the process list and shell history; set LEGATION_ETCD_PASSWORD or --etcd-password-file"},
		{name: "command line, env set too", env: pw, args: append(tlsArgs, "--etcd-password="+pw), wantErr: "--etcd-password: refused"},
		{name: "file and environment", env: pw, args: append(tlsArgs, "--etcd-password-file", file),
			wantErr: "--etcd-password-file and LEGATION_ETCD_PASSWORD are both set"},
		{name: "plain text", env: pw, args: []string{"--etcd-endpoints", "http://a:2379", "--etcd-username", "replica"},
			wantErr: "a password (--etcd-username) over plain text"},
		{name: "plain text host:port", args: []string{"--etcd-endpoints", "a:2379", "--etcd-username", "replica", "--etcd-password-file", file},
			wantErr: "would cross the network in clear"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("LEGATION_ETCD_PASSWORD", tc.env)
			cfg, err := parseFlags(tc.args)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), pw) {
					t.Fatalf("parseFlags(%q): %v; want an error with %q, without the password", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil || cfg.EtcdSecurity.Password != pw {
				t.Fatalf("parseFlags(%q): %v, password %q; want %q", tc.args, err, cfg.EtcdSecurity.Password, pw)
			}
		})
	}
}
