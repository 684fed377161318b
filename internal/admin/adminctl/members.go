package adminctl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/cluster/shard"
	"github.com/legation-io/legation/internal/cluster/status"
)

type membersFlags struct {
	healthTimeout time.Duration
}

func (a *app) membersCommand() *cobra.Command {
	var f membersFlags
	cmd := &cobra.Command{
		Use:   "members",
		Short: "Show the replicas, their health and their share of the ring and of the nodes",
		Long: `members shows the xds-node replicas registered in etcd (each keeps its
record alive under a lease: one that stopped is gone at once, one that
crashed within the lease's TTL).

For each replica: its name, the xDS and HTTP addresses it advertises, when
it started, its health as its HTTP /readyz answers now ("ready", "not
ready: <its reason>", "unreachable" within --health-timeout, or "unknown:
<why>" when TLS is in the way), its share of the consistent-hash ring that
picks each node's home, and the nodes it is home to now, as counted from
the status records (see status), and the Legation version it runs.

Replicas whose HTTP port serves TLS are asked over HTTPS with the global
--tls-ca-file (the CAs of their certificates; only the chain is checked,
as replicas are dialled by IP and their certificates may name them only by
SPIFFE id), and, if they require one, a client certificate
(--tls-cert-file, --tls-key-file).

The ring is computed as the replicas compute it: over the registered
replicas that are ready, or over all of them when none is, with the
default virtual nodes. A replica's RING_SHARE is about the fraction of node
ids it should be home to; NODE_SHARE is the fraction it serves now. The
two differ while nodes move after a change of members, and by chance with
few nodes.

Output:
  table  NAME, XDS_ADDR, HTTP_ADDR, STARTED (how long ago), HEALTH,
         RING_SHARE and NODE_SHARE (percent), NODES, VERSION.
  yaml   the same as a list of objects (shares in percent).
  json   the same as JSON.

Nodes whose home replica is not registered (it crashed, and its records
have not expired yet) are counted in a warning on standard error.`,
		Example: `  xdsadmin members
  xdsadmin members -o json | jq '.[] | select(.health != "ready") | .name'`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runMembers(cmd.Context(), f)
		},
	}
	cmd.Flags().DurationVar(&f.healthTimeout, "health-timeout", time.Second, "how long to wait for each replica's /readyz")
	return cmd
}

// memberInfo is one line of members' output.
type memberInfo struct {
	Name     string    `json:"name"`
	XDSAddr  string    `json:"xds_addr"`
	HTTPAddr string    `json:"http_addr"`
	Started  time.Time `json:"started"`
	// Ready is the readiness the replica last registered.
	Ready bool `json:"ready"`
	// Health is what its /readyz answered now.
	Health string `json:"health"`
	// RingShare and NodeShare are percents, with two decimals.
	RingShare float64 `json:"ring_share"`
	Nodes     int     `json:"nodes"`
	NodeShare float64 `json:"node_share"`
	// Version is the Legation version the replica registered.
	Version string `json:"version"`
}

func (a *app) runMembers(ctx context.Context, f membersFlags) error {
	if f.healthTimeout <= 0 {
		return fmt.Errorf("--health-timeout %s: must be positive", f.healthTimeout)
	}
	// The --tls-* files are checked before etcd is asked.
	p, err := newProber(a.opts.Replica, f.healthTimeout)
	if err != nil {
		return err
	}
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()

	members, recs, err := a.readMembers(ctx, c)
	if err != nil {
		return err
	}
	return a.printMembers(a.memberInfos(ctx, p, members, recs))
}

// readMembers reads the registered replicas and the nodes' status
// records, warning about the records that do not decode.
func (a *app) readMembers(ctx context.Context, c *conn) ([]shard.Member, []status.NodeStatus, error) {
	members, badMembers, err := shard.ReadRegistry(ctx, c.client, a.opts.Prefix)
	if err != nil {
		return nil, nil, err
	}
	for _, b := range badMembers {
		fmt.Fprintf(a.errOut, "warning: skipped malformed member record at key %q: %v\n", b.Key, b.Err)
	}
	recs, badStatus, err := status.Read(ctx, c.client, a.opts.Prefix)
	if err != nil {
		return nil, nil, err
	}
	a.warnBadStatus(badStatus)
	return members, recs, nil
}

// memberInfos is members' line for each of members: its health as p
// finds it now, its share of the ring, and the nodes of recs it is home
// to. It warns about the homes of recs that are not registered.
func (a *app) memberInfos(ctx context.Context, p *prober, members []shard.Member, recs []status.NodeStatus) []memberInfo {
	homes := map[string]int{}
	for _, ns := range recs {
		homes[ns.Home]++
	}
	shares := shard.ReadyRing(members, shard.DefaultVNodes).Shares()
	health := p.checkHealth(ctx, members)
	out := make([]memberInfo, 0, len(members))
	for i, m := range members {
		mi := memberInfo{
			Name: m.Name, XDSAddr: m.XDSAddr, HTTPAddr: m.HTTPAddr, Started: m.Started, Ready: m.Ready,
			Health: health[i], RingShare: percent(shares[m.Name]), Nodes: homes[m.Name], Version: m.Version,
		}
		if len(recs) > 0 {
			mi.NodeShare = percent(float64(mi.Nodes) / float64(len(recs)))
		}
		delete(homes, m.Name)
		out = append(out, mi)
	}
	unregistered := make([]string, 0, len(homes))
	for h := range homes {
		unregistered = append(unregistered, h)
	}
	slices.Sort(unregistered)
	for _, h := range unregistered {
		fmt.Fprintf(a.errOut, "warning: %d nodes have home %q, which is not registered (it crashed? its status records expire with its lease)\n", homes[h], h)
	}
	return out
}

// printMembers prints members' lines in the output format.
func (a *app) printMembers(out []memberInfo) error {
	if a.opts.Output != outputTable {
		return a.printStructured(out)
	}
	if len(out) == 0 {
		_, err := fmt.Fprintf(a.out, "no replicas are registered under %s (is xds-node running with this --etcd-prefix?)\n", shard.RegistryKey(a.opts.Prefix, ""))
		return err
	}
	now := time.Now()
	w := newTable(a.out)
	row(w, "NAME", "XDS_ADDR", "HTTP_ADDR", "STARTED", "HEALTH", "RING_SHARE", "NODES", "NODE_SHARE", "VERSION")
	for _, m := range out {
		row(w, m.Name, orDash(m.XDSAddr), orDash(m.HTTPAddr), formatAge(now.Sub(m.Started)), m.Health,
			fmt.Sprintf("%.1f%%", m.RingShare), m.Nodes, fmt.Sprintf("%.1f%%", m.NodeShare), orDash(m.Version))
	}
	return w.Flush()
}

// percent shows a fraction as a percent with two decimals.
func percent(f float64) float64 { return math.Round(f*10000) / 100 }

// prober asks replicas' /readyz over HTTP or, with --tls-ca-file, HTTPS.
type prober struct {
	client *http.Client
	scheme string // "http" or "https"
	// clientCert is whether a client certificate is presented, for the
	// reasons of refused handshakes.
	clientCert bool
}

// newProber reads the --tls-* files: its errors name the flag and the file.
func newProber(r ReplicaTLS, timeout time.Duration) (*prober, error) {
	tc, err := r.TLSConfig()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return &prober{
		client:     &http.Client{Transport: tr, Timeout: timeout},
		scheme:     r.Scheme(),
		clientCert: r.CertFile != "",
	}, nil
}

// checkHealth asks every member's /readyz at once, each within the
// client's timeout, and returns their answers in the order of members.
func (p *prober) checkHealth(ctx context.Context, members []shard.Member) []string {
	defer p.client.CloseIdleConnections()
	out := make([]string, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { out[i] = p.readyz(ctx, m.HTTPAddr) })
	}
	wg.Wait()
	return out
}

// httpToHTTPS is what Go's HTTPS servers, xds-node's among them, answer a
// plain HTTP request with (a 400).
const httpToHTTPS = "Client sent an HTTP request to an HTTPS server."

// Health reasons when TLS is in the way.
const (
	healthServesTLS  = "unknown: the replica serves TLS: set --" + flagTLSCA
	healthServesHTTP = "unknown: the replica serves plain HTTP, not HTTPS (--" + flagTLSCA + " is set)"
)

// readyz returns "ready", "not ready: <the first line of the answer>",
// "unreachable", or "unknown: <why>" when it could connect but not ask
// (TLS on one side only, a certificate refused by either side).
func (p *prober) readyz(ctx context.Context, addr string) string {
	if addr == "" {
		return "unknown (no http_addr)"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.scheme+"://"+addr+"/readyz", nil)
	if err != nil {
		return "unknown (bad http_addr)"
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return p.probeError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return "ready"
	}
	line, _ := bufio.NewReader(io.LimitReader(resp.Body, 1024)).ReadString('\n')
	line = strings.TrimSpace(line)
	if p.scheme == "http" && resp.StatusCode == http.StatusBadRequest && line == httpToHTTPS {
		return healthServesTLS
	}
	// xds-node answers "not ready: <why>": say it once.
	if len(line) >= len("not ready:") && strings.EqualFold(line[:len("not ready:")], "not ready:") {
		line = strings.TrimSpace(line[len("not ready:"):])
	}
	if line == "" {
		line = resp.Status
	}
	return "not ready: " + shorten(line)
}

// probeError is the health of a replica whose /readyz could not be asked.
func (p *prober) probeError(err error) string {
	var opErr *net.OpError
	var untrusted *untrustedReplicaError
	switch {
	case errors.Is(err, http.ErrSchemeMismatch):
		return healthServesHTTP
	case errors.As(err, &untrusted):
		return "unknown: " + untrusted.Error()
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		// The replica refused the handshake with a TLS alert: with
		// TLS 1.3 at the first read, after the client's side is done.
		// The alerts about certificates ("bad certificate", "certificate
		// required", "unknown certificate authority", ...) are about the
		// client's: the client checks the server's itself.
		alert := opErr.Err.Error()
		switch {
		case !strings.Contains(alert, "certificate"):
			return "unknown: the replica refused the TLS handshake (" + alert + ")"
		case !p.clientCert:
			return "unknown: the replica requires a client certificate (" + alert + "): set --" + flagTLSCert + " and --" + flagTLSKey
		}
		return "unknown: the replica refused the client certificate of --" + flagTLSCert + " (" + alert + ")"
	}
	return "unreachable"
}

// shorten cuts a replica's reason for the table.
func shorten(s string) string {
	if r := []rune(s); len(r) > 80 {
		return string(r[:77]) + "..."
	}
	return s
}
