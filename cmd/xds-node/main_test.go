package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		check   func(t *testing.T, cfgName, groupBy string, endpoints []string, shutdown time.Duration)
		wantErr string // substring; empty: no error
	}{
		{
			name: "defaults are dev mode",
			check: func(t *testing.T, _, groupBy string, endpoints []string, shutdown time.Duration) {
				if len(endpoints) != 0 || groupBy != "cluster" || shutdown != 10*time.Second {
					t.Errorf("got endpoints %q, group-by %q, shutdown %s; want none, cluster, 10s", endpoints, groupBy, shutdown)
				}
			},
		},
		{
			name: "env sets flags",
			env:  map[string]string{"LEGATION_ETCD_ENDPOINTS": "a:2379, b:2379", "LEGATION_GROUP_BY": "id", "LEGATION_SHUTDOWN_TIMEOUT": "3s"},
			check: func(t *testing.T, _, groupBy string, endpoints []string, shutdown time.Duration) {
				if !slices.Equal(endpoints, []string{"a:2379", "b:2379"}) || groupBy != "id" || shutdown != 3*time.Second {
					t.Errorf("got endpoints %q, group-by %q, shutdown %s; want [a:2379 b:2379], id, 3s", endpoints, groupBy, shutdown)
				}
			},
		},
		{
			name: "a flag wins over env",
			env:  map[string]string{"LEGATION_GROUP_BY": "id", "LEGATION_NAME": "from-env"},
			args: []string{"--group-by=metadata:team", "--name", "from-flag"},
			check: func(t *testing.T, name, groupBy string, _ []string, _ time.Duration) {
				if name != "from-flag" || groupBy != "metadata:team" {
					t.Errorf("got name %q, group-by %q; want from-flag, metadata:team", name, groupBy)
				}
			},
		},
		{
			name: "an empty variable is ignored",
			env:  map[string]string{"LEGATION_NAME": ""},
			check: func(t *testing.T, name, _ string, _ []string, _ time.Duration) {
				if name == "" {
					t.Error("name empty")
				}
			},
		},
		{name: "bad flag value", args: []string{"--shutdown-timeout", "soon"}, wantErr: `"--shutdown-timeout"`},
		{name: "bad env value", env: map[string]string{"LEGATION_SHUTDOWN_TIMEOUT": "soon"}, wantErr: "LEGATION_SHUTDOWN_TIMEOUT"},
		{name: "invalid env config", env: map[string]string{"LEGATION_GROUP_BY": "labels"}, wantErr: "--group-by"},
		{name: "bad group-by", args: []string{"--group-by", "labels"}, wantErr: "--group-by"},
		{name: "bad log level", args: []string{"--log-level", "loud"}, wantErr: "--log-level"},
		{name: "bad log format", args: []string{"--log-format", "xml"}, wantErr: "--log-format"},
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
			tt.check(t, cfg.Name, cfg.GroupBy, cfg.EtcdEndpoints, cfg.ShutdownTimeout)
		})
	}
}

func TestParseFlagsHelp(t *testing.T) {
	if _, err := parseFlags([]string{"--help"}); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("parseFlags(--help) = %v, want pflag.ErrHelp", err)
	}
}
