package main

import (
	"strings"
	"testing"
)

// TestParseFlags: the defaults make a valid config; each bad flag is
// refused with an error naming it.
func TestParseFlags(t *testing.T) {
	cfg, opts, err := parseFlags([]string{"--quiet"})
	if err != nil {
		t.Fatalf("parseFlags(defaults) = %v", err)
	}
	if opts.target != "legation" || cfg.TargetName != "legation" || cfg.Delta || opts.output != "text" || cfg.Progress != nil {
		t.Errorf("defaults: target %q/%q, delta %v, output %q, progress %v; want legation, SotW, text, none (--quiet)",
			opts.target, cfg.TargetName, cfg.Delta, opts.output, cfg.Progress)
	}
	cfg, opts, err = parseFlags([]string{"--target", "gcp", "--mode", "delta", "-o", "json", "--streams", "7", "--conns", "2"})
	if err != nil {
		t.Fatalf("parseFlags(gcp delta) = %v", err)
	}
	if cfg.TargetName != "gcp" || !cfg.Delta || opts.output != "json" || cfg.Streams != 7 || cfg.Conns != 2 {
		t.Errorf("gcp delta: got %q delta %v output %q streams %d conns %d", cfg.TargetName, cfg.Delta, opts.output, cfg.Streams, cfg.Conns)
	}

	cfg, opts, err = parseFlags([]string{"--resume", "--record", "run.jsonl"})
	if err != nil {
		t.Fatalf("parseFlags(--resume --record) = %v", err)
	}
	if !cfg.Resume || opts.record != "run.jsonl" || cfg.Recorder != nil {
		t.Errorf("--resume --record: resume %v, record %q, recorder %v; want true, run.jsonl, none until run opens the file", cfg.Resume, opts.record, cfg.Recorder)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--target", "envoy"}, `--target "envoy"`},
		{[]string{"--mode", "incremental"}, `--mode "incremental"`},
		{[]string{"-o", "yaml"}, `-o "yaml"`},
		{[]string{"--streams", "0"}, "--streams 0"},
		{[]string{"--nack-ratio", "1.5"}, "--nack-ratio 1.5"},
		{[]string{"--target", "gcp", "--control-url", ""}, "--control-url"},
		{[]string{"--etcd-endpoints", "ftp://x:1"}, "ftp://x:1"},
		// The process list would show it.
		{[]string{"--etcd-username", "u", "--etcd-password", "hunter2"}, "--etcd-password: refused"},
		{[]string{"--etcd-username", "u", "--etcd-password-file", "/no/such/file"}, "--etcd-password-file /no/such/file: no such file"},
		{[]string{"extra"}, `unexpected argument "extra"`},
		{[]string{"--scope", "a/b"}, "--scope"},
		{[]string{"--cpu-profile", "a", "--cpu-profile-updates", "b"}, "--cpu-profile-updates"},
	} {
		_, _, err := parseFlags(append(tc.args, "--quiet"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
