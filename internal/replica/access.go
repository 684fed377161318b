package replica

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/netip"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/legation-io/legation/internal/cluster/relay"
	"github.com/legation-io/legation/internal/security/access"
	"github.com/legation-io/legation/internal/security/authz"
	"github.com/legation-io/legation/internal/security/tlsfiles"
)

// buildAccess loads the TLS files, makes the authorization rules' watcher
// (mTLS) and the guard that judges clients.
func (n *Node) buildAccess() error {
	cfg := n.cfg
	var err error
	if cfg.TLSCertFile != "" {
		if n.tls, err = tlsfiles.New(tlsfiles.Config{
			CertFile: cfg.TLSCertFile,
			KeyFile:  cfg.TLSKeyFile,
			CAFile:   cfg.ClientCAFile,
			Logger:   n.log,
			Flag:     "--tls",
			CAFlag:   "--client-ca-file",
		}); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	gcfg := access.Config{MTLS: cfg.MTLS(), InsecureLoopbackSecrets: cfg.InsecureLoopbackSecrets, Logger: n.log}
	// In plaintext, relay markers are trusted from the addresses of the
	// replicas registered in etcd only (the cluster agent is built after
	// the guard, and streams come after both).
	gcfg.ReplicaAddr = func(ip netip.Addr) bool { return n.cluster != nil && n.cluster.IsReplicaAddr(ip) }
	if cfg.MTLS() {
		if err := n.loadReplicaIdentities(); err != nil {
			return err
		}
		if n.rules, err = authz.NewWatcher(authz.WatcherConfig{
			Client:             n.client,
			Prefix:             cfg.EtcdPrefix,
			Logger:             n.log,
			Registerer:         n.reg,
			DefaultTrustDomain: cfg.AuthzDefaultTrustDomain,
			StaleAfter:         cfg.AuthzStaleAfter,
			Clock:              n.clock,
		}); err != nil {
			return fmt.Errorf("node: %w", err)
		}
		gcfg.Rules = func() (access.Table, <-chan struct{}) {
			t, changed := n.rules.Current()
			return t, changed
		}
		gcfg.RulesReady = n.rules.Ready()
		gcfg.Fresh = n.rules.Fresh
		gcfg.ReadyTimeout = cfg.CatchupTimeout
		gcfg.Replica = n.isReplica
	}
	if n.guard, err = access.New(gcfg); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	return nil
}

// loadReplicaIdentities compiles --replica-identity. Without it, the
// replicas are recognised by this replica's own identity, which must then
// be a SPIFFE ID in a cluster: a DNS SAN or a CommonName never names a
// replica (a CA that signs any name a service asks for would make it one).
func (n *Node) loadReplicaIdentities() error {
	for _, p := range n.cfg.ReplicaIdentities {
		pat, err := authz.ParsePattern(p)
		if err != nil {
			return fmt.Errorf("node: --replica-identity: %w", err)
		}
		n.replicaIDs = append(n.replicaIDs, pat)
	}
	if len(n.replicaIDs) > 0 || n.cfg.DevMode() || n.cfg.Standalone {
		return nil
	}
	own, err := tlsfiles.Identity(n.tls.Certificate())
	if err != nil {
		return fmt.Errorf("node: --tls-cert-file %s: %w", n.cfg.TLSCertFile, err)
	}
	if !tlsfiles.IsSPIFFE(own) {
		return fmt.Errorf("node: --tls-cert-file %s: its identity %q is not a SPIFFE ID: replicas of a cluster recognise each other "+
			"by a SPIFFE URI SAN (spiffe://TRUST_DOMAIN/PATH); issue the certificate one, or name the replicas' SPIFFE IDs with --replica-identity",
			n.cfg.TLSCertFile, own)
	}
	return nil
}

// isReplica reports whether identity is a replica's: a SPIFFE ID (from a
// URI SAN; no other kind of identity ever is) that matches
// --replica-identity or, without that flag, is this replica's own
// certificate's identity.
func (n *Node) isReplica(identity string) bool {
	if !tlsfiles.IsSPIFFE(identity) {
		return false
	}
	if len(n.replicaIDs) > 0 {
		for _, p := range n.replicaIDs {
			if p.Match(identity) {
				return true
			}
		}
		return false
	}
	own, err := tlsfiles.Identity(n.tls.Certificate())
	return err == nil && tlsfiles.IsSPIFFE(own) && own == identity
}

// verifyReplica checks that a replica relayed to presents a replica's
// identity.
func (n *Node) verifyReplica(leaf *x509.Certificate) error {
	id, err := tlsfiles.Identity(leaf)
	if err != nil {
		return err
	}
	if !n.isReplica(id) {
		return fmt.Errorf("peer identity %q is not a replica's (--replica-identity)", id)
	}
	return nil
}

// relayedByReplica reports whether the stream of ctx was relayed here by
// another replica: it carries the relay marker and its peer may set it
// (access.Guard.TrustRelay: with mTLS a replica's identity; in plain
// text a registered replica's address, as for the relay itself).
func (n *Node) relayedByReplica(ctx context.Context) bool {
	return len(metadata.ValueFromIncomingContext(ctx, relay.MarkerKey)) > 0 && n.guard.TrustRelay(ctx)
}

// admissionKey is the client a stream or call is admitted as, for fair
// turns under --stream-rate and --relay-stream-rate (limits.Config's
// ClientKey): its certificate's identity (for a relayed stream, the one
// its relaying replica forwards), else its source address (plain text,
// or no certificate presented). Behind a load balancer that rewrites
// source addresses, the plain-text clients it carries share one turn.
func (n *Node) admissionKey(ctx context.Context) any {
	if id := n.guard.Of(ctx); id.Name != "" {
		return "identity:" + id.Name
	}
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return nil
	}
	if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
		return ap.Addr()
	}
	return p.Addr.String()
}
