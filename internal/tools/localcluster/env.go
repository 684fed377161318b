package localcluster

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// writeEnv writes Dir/env: the settings and every address, one KEY='VALUE'
// a line. `set -a; . DIR/env; set +a` exports them, LEGATION_ETCD_ENDPOINTS
// included, so that xdsadmin then talks to this cluster. Up reads it back
// to check that Dir's etcd data fits the config.
func (c *Cluster) writeEnv() error {
	st := c.Status()
	var b bytes.Buffer
	kv := func(k, v string) { fmt.Fprintf(&b, "%s=%s\n", k, quote(v)) }
	b.WriteString("# Written by internal/tools/localcluster (go run ./deploy/local up); KEY='VALUE' lines, sourceable.\n")
	kv("DIR", st.Dir)
	kv("NET", st.Net)
	kv("ETCD_MEMBERS", strconv.Itoa(len(st.Etcd)))
	kv("REPLICAS", strconv.Itoa(len(st.Replicas)))
	kv("ETCD_ENDPOINTS", strings.Join(st.EtcdEndpoints, ","))
	kv("LEGATION_ETCD_ENDPOINTS", strings.Join(st.EtcdEndpoints, ","))
	kv("SECURE", strconv.FormatBool(c.cfg.Secure))
	if sec := c.Security(); sec != nil {
		// xdsadmin as legation-admin in etcd, and as the admin identity
		// asking replicas' /readyz (members).
		kv("LEGATION_ETCD_CACERT", sec.CAFile)
		kv("LEGATION_ETCD_CERT", sec.EtcdAdmin.CertFile)
		kv("LEGATION_ETCD_KEY", sec.EtcdAdmin.KeyFile)
		kv("LEGATION_TLS_CA_FILE", sec.CAFile)
		kv("LEGATION_TLS_CERT_FILE", sec.Admin.CertFile)
		kv("LEGATION_TLS_KEY_FILE", sec.Admin.KeyFile)
		kv("CLIENT_CERT_FILE", sec.Client.CertFile)
		kv("CLIENT_KEY_FILE", sec.Client.KeyFile)
		kv("GOSSIP_KEY_FILE", sec.GossipKeyFile)
	}
	if lb := st.HAProxy; lb != nil {
		kv("LB_XDS_ADDR", lb.XDSAddr)
		kv("LB_HTTP_ADDR", lb.HTTPAddr)
		kv("LB_STATS_SOCKET", lb.StatsSocket)
		kv("LB_CONFIG", lb.Config)
		kv("LB_LOG", lb.Log)
	}
	kv("CONTROL_SOCKET", ControlSocket(st.Dir))
	for i, m := range st.Etcd {
		k := fmt.Sprintf("ETCD_%d_", i+1)
		kv(k+"NAME", m.Name)
		kv(k+"CLIENT_ADDR", m.ClientAddr)
		kv(k+"PEER_ADDR", m.PeerAddr)
		kv(k+"DATA_DIR", m.DataDir)
		kv(k+"LOG", m.Log)
	}
	for i, r := range st.Replicas {
		k := fmt.Sprintf("REPLICA_%d_", i+1)
		kv(k+"NAME", r.Name)
		kv(k+"XDS_ADDR", r.XDSAddr)
		kv(k+"HTTP_ADDR", r.HTTPAddr)
		kv(k+"GOSSIP_ADDR", r.GossipAddr)
		kv(k+"LOG", r.Log)
	}
	path := filepath.Join(c.cfg.Dir, "env")
	if err := os.WriteFile(path+".tmp", b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	return nil
}

// quote puts v in single quotes for a shell, a single quote inside it
// written as quote, backslash, quote, quote.
func quote(v string) string { return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'" }

// ReadEnv parses an env file as writeEnv writes it: KEY='VALUE' lines and
// comments.
func ReadEnv(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for n, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || len(v) < 2 || v[0] != '\'' || v[len(v)-1] != '\'' {
			return nil, fmt.Errorf("%s:%d: want KEY='VALUE', got %q", path, n+1, line)
		}
		env[k] = strings.ReplaceAll(v[1:len(v)-1], `'\''`, `'`)
	}
	return env, nil
}
