// Package access decides, for one replica, who a client is and what it may
// claim and see (docs/concepts/design.md, "Security"): the identity of a stream or
// request (its verified client certificate, or the identity a replica
// relaying it forwards), whether it may claim a node id and group under the
// authorization rules, whether it may be sent secrets, and whether it is an
// admin (CSDS, /debug/).
//
// A Guard is the xdsstream.Authorizer of the SotW and delta servers, the
// relay's judge of which relay markers to trust and what to forward, and
// the gRPC interceptors and HTTP middleware that attach identities and
// guard the admin endpoints. It owns no rules: they come from the caller
// (authz.Watcher), and identities from certificates are read by tlsfiles.
package access

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/legation-io/legation/internal/security/tlsfiles"
)

// Metadata keys a replica relaying a stream sends with it, trusted only
// from a peer the Guard says is a replica (TrustRelay).
const (
	// IdentityKey carries the identity of the relayed stream's client ("" if
	// it presented none).
	IdentityKey = "x-legation-client-identity"
	// LoopbackKey is "1" when the relayed stream's client is on the
	// relaying replica's machine.
	LoopbackKey = "x-legation-client-loopback"
)

// Table is the authorization rules at one moment (*authz.Table is one).
type Table interface {
	// Allows returns nil if identity may claim node nodeID of group, else
	// why not.
	Allows(identity, nodeID, group string) error
	// Admin reports whether identity may read CSDS and /debug/.
	Admin(identity string) bool
}

// Config configures a Guard.
type Config struct {
	// MTLS: clients present certificates, verified at the handshake, and
	// their identities decide what they may claim (Rules). False: clients
	// are not authenticated: every claim is allowed, secrets go to no
	// one (to loopback clients with InsecureLoopbackSecrets), CSDS is
	// open, and relay markers are trusted only from the addresses of
	// registered replicas (ReplicaAddr).
	MTLS bool
	// InsecureLoopbackSecrets (xds-node --insecure-loopback-secrets):
	// without MTLS, secrets go to clients on loopback. Being on loopback
	// proves nothing about a client: behind a proxy on the same host (a
	// sidecar, HAProxy, kubectl port-forward) everyone is. False: without
	// MTLS secrets go to no one. Ignored with MTLS.
	InsecureLoopbackSecrets bool
	// Rules returns the current rules and a channel closed once newer
	// ones replace them. Required with MTLS.
	Rules func() (Table, <-chan struct{})
	// RulesReady is closed once the rules are loaded; until then claims
	// wait, up to ReadyTimeout, and then fail with UNAVAILABLE. Nil:
	// loaded.
	RulesReady <-chan struct{}
	// ReadyTimeout bounds that wait. Zero: 5s.
	ReadyTimeout time.Duration
	// Fresh returns nil while the rules may be trusted, else why not
	// (etcd not heard from for longer than --authz-stale-after): claims
	// and admin checks then fail with UNAVAILABLE, so that clients go to
	// a replica that sees etcd, and a stream re-checking after Rules'
	// channel closed ends. Nil: always fresh.
	Fresh func() error
	// Replica reports whether a peer's identity is a replica's: only such
	// a peer's relay marker and forwarded identity are trusted (with
	// MTLS). Required with MTLS.
	Replica func(identity string) bool
	// ReplicaAddr reports whether ip is the address of a replica
	// registered in etcd under a live lease: without MTLS, only a peer at
	// such an address may send the relay marker (and what goes with it);
	// from any other, the marker is ignored. It is called once per marked
	// stream and must not block. Nil: no marker is trusted without MTLS.
	ReplicaAddr func(ip netip.Addr) bool
	// Logger gets the refusals worth an operator's attention (once each);
	// nil discards.
	Logger *slog.Logger
}

// Guard judges the clients of one replica. Its methods may be called
// concurrently.
type Guard struct {
	cfg Config
	log *slog.Logger
	// warnedSecrets: the refusal of secrets over plaintext was logged.
	warnedSecrets atomic.Bool
}

// New checks cfg and returns a Guard.
func New(cfg Config) (*Guard, error) {
	if cfg.MTLS && (cfg.Rules == nil || cfg.Replica == nil) {
		return nil, errors.New("access: with MTLS, Rules and Replica are required")
	}
	if cfg.ReadyTimeout < 0 {
		return nil, fmt.Errorf("access: ReadyTimeout %s is negative", cfg.ReadyTimeout)
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 5 * time.Second
	}
	g := &Guard{cfg: cfg, log: cfg.Logger}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	return g, nil
}

// Identity is who a client is, as far as this replica can tell.
type Identity struct {
	// Name is the identity of its verified certificate (tlsfiles.Identity),
	// or the one a trusted replica forwarded; "" when it presented none.
	Name string
	// Loopback: the client is on this machine (for a relayed stream, on
	// the relaying replica's, and that replica on this one's).
	Loopback bool
	// RelayedBy is the identity of the replica that relayed the stream
	// ("" if it was not, or in plaintext), whose marker is trusted.
	RelayedBy string
}

type identityKey struct{}

// WithIdentity returns ctx carrying id: what Of returns for it.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// Of returns the identity of the client of ctx: the one attached by
// WithIdentity (the HTTP middleware does), else the gRPC peer's, or the
// identity forwarded by the replica that relayed the stream when the Guard
// trusts that peer.
func (g *Guard) Of(ctx context.Context) Identity {
	if id, ok := ctx.Value(identityKey{}).(Identity); ok {
		return id
	}
	p, _ := peer.FromContext(ctx)
	var own Identity
	if p != nil {
		own.Loopback = isLoopback(p.Addr)
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			own.Name, _ = tlsfiles.PeerIdentity(ti.State)
		}
	}
	if !g.relayedFrom(ctx, own) {
		return own
	}
	fwd := Identity{RelayedBy: own.Name}
	if v := metadata.ValueFromIncomingContext(ctx, IdentityKey); len(v) > 0 {
		fwd.Name = v[0]
	}
	v := metadata.ValueFromIncomingContext(ctx, LoopbackKey)
	fwd.Loopback = own.Loopback && len(v) > 0 && v[0] == "1"
	return fwd
}

// relayedFrom reports whether the stream of ctx, whose own peer is own,
// carries a relay marker the Guard trusts.
func (g *Guard) relayedFrom(ctx context.Context, own Identity) bool {
	if len(metadata.ValueFromIncomingContext(ctx, markerKey)) == 0 {
		return false
	}
	if !g.cfg.MTLS {
		return g.fromReplicaAddr(ctx)
	}
	return own.Name != "" && g.cfg.Replica(own.Name)
}

// fromReplicaAddr reports whether the peer of ctx is at a registered
// replica's address (Config.ReplicaAddr): in plaintext, the only sign
// that a relay marker comes from a replica.
func (g *Guard) fromReplicaAddr(ctx context.Context) bool {
	if g.cfg.ReplicaAddr == nil {
		return false
	}
	p, _ := peer.FromContext(ctx)
	if p == nil || p.Addr == nil {
		return false
	}
	ap, err := netip.ParseAddrPort(p.Addr.String())
	if err != nil {
		return false
	}
	return g.cfg.ReplicaAddr(ap.Addr().Unmap())
}

// markerKey is relay.MarkerKey (relay imports this package, not the
// reverse).
const markerKey = "x-legation-relayed"

// TrustRelay reports whether the relay marker on the stream of ctx may be
// trusted: with MTLS only from a peer presenting a replica's identity;
// without, only from a peer at a registered replica's address
// (Config.ReplicaAddr).
func (g *Guard) TrustRelay(ctx context.Context) bool {
	if !g.cfg.MTLS {
		return g.fromReplicaAddr(ctx)
	}
	var name string
	if p, _ := peer.FromContext(ctx); p != nil {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			name, _ = tlsfiles.PeerIdentity(ti.State)
		}
	}
	return name != "" && g.cfg.Replica(name)
}

// Forward returns the metadata a replica relaying the stream of ctx sends
// the home: the client's identity and whether it is on loopback.
func (g *Guard) Forward(ctx context.Context) metadata.MD {
	id := g.Of(ctx)
	md := metadata.Pairs(IdentityKey, id.Name)
	if id.Loopback {
		md.Set(LoopbackKey, "1")
	}
	return md
}

// Authorize implements xdsstream.Authorizer: with MTLS, the client's
// identity must be allowed node n and group by the rules; recheck is
// closed when the rules change. Without MTLS every claim is allowed.
func (g *Guard) Authorize(ctx context.Context, n *corev3.Node, group string) (<-chan struct{}, error) {
	if !g.cfg.MTLS {
		return nil, nil
	}
	id := g.Of(ctx)
	if id.Name == "" {
		return nil, status.Error(codes.Unauthenticated, "no verified client certificate: this server requires mTLS")
	}
	t, recheck, err := g.rules(ctx)
	if err != nil {
		return nil, err
	}
	if err := t.Allows(id.Name, n.GetId(), group); err != nil {
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	return recheck, nil
}

// rules returns the current rules once loaded, waiting up to
// ReadyTimeout, and only while they are fresh (Config.Fresh).
func (g *Guard) rules(ctx context.Context) (Table, <-chan struct{}, error) {
	if r := g.cfg.RulesReady; r != nil {
		select {
		case <-r:
		default:
			t := time.NewTimer(g.cfg.ReadyTimeout)
			defer t.Stop()
			select {
			case <-r:
			case <-t.C:
				return nil, nil, status.Error(codes.Unavailable, "not ready: the authorization rules are not loaded from etcd yet")
			case <-ctx.Done():
				return nil, nil, status.FromContextError(ctx.Err()).Err()
			}
		}
	}
	// Read before Fresh: a table turning stale after this check closes
	// recheck, and its holder checks again.
	t, recheck := g.cfg.Rules()
	if f := g.cfg.Fresh; f != nil {
		if err := f(); err != nil {
			return nil, nil, status.Errorf(codes.Unavailable,
				"this replica cannot confirm its authorization rules with etcd (%v; --authz-stale-after): retry on another replica", err)
		}
	}
	return t, recheck, nil
}

// Secrets implements xdsstream.Authorizer. With MTLS a client that may
// claim its node (Authorize) may be sent its scope's secrets: they are
// checked together. Without MTLS secrets go to no one, or, with
// InsecureLoopbackSecrets, to loopback clients only.
func (g *Guard) Secrets(ctx context.Context, _ string) error {
	id := g.Of(ctx)
	switch {
	case g.cfg.MTLS && id.Name != "":
		return nil
	case g.cfg.MTLS:
		// A client without a name has no verified certificate: the
		// claim itself fails UNAUTHENTICATED, this is belt and braces.
	case g.cfg.InsecureLoopbackSecrets && id.Loopback:
		return nil
	case g.cfg.InsecureLoopbackSecrets:
		g.warnSecretsOnce("refused secrets to a client that is not on loopback over a connection without client certificates " +
			"(--insecure-loopback-secrets serves loopback clients only); serve mTLS to send secrets over the network")
		return status.Error(codes.PermissionDenied,
			"secrets are sent only to clients authenticated by a client certificate, or to loopback clients with --insecure-loopback-secrets")
	default:
		g.warnSecretsOnce("refused secrets over a connection without client certificates: serve mTLS (--tls-cert-file, " +
			"--tls-key-file, --client-ca-file), or, on a host where every loopback client may have them, --insecure-loopback-secrets")
		return status.Error(codes.PermissionDenied,
			"secrets are sent only to clients authenticated by a client certificate: this server runs without mTLS (see --insecure-loopback-secrets)")
	}
	return status.Error(codes.PermissionDenied, "secrets are sent only to clients authenticated by a client certificate")
}

// warnSecretsOnce logs msg at Warn the first time secrets are refused.
func (g *Guard) warnSecretsOnce(msg string) {
	if g.warnedSecrets.CompareAndSwap(false, true) {
		g.log.Warn(msg + " (logged once)")
	}
}

// Admin returns nil if the client of ctx may read CSDS and /debug/: with
// MTLS, an identity granted admin; without, anyone (the debug endpoints
// have their own loopback rule).
func (g *Guard) Admin(ctx context.Context) error {
	_, err := g.AdminRecheck(ctx)
	return err
}

// AdminRecheck is Admin for a stream that must follow revocations (CSDS):
// on success recheck, when not nil, is closed once the rules changed or
// turned stale, and the stream asks again.
func (g *Guard) AdminRecheck(ctx context.Context) (recheck <-chan struct{}, err error) {
	if !g.cfg.MTLS {
		return nil, nil
	}
	id := g.Of(ctx)
	if id.Name == "" {
		return nil, status.Error(codes.Unauthenticated, "no verified client certificate: admin endpoints require mTLS")
	}
	t, recheck, err := g.rules(ctx)
	if err != nil {
		return nil, err
	}
	if !t.Admin(id.Name) {
		return nil, status.Errorf(codes.PermissionDenied, "identity %q is not granted admin (xdsadmin authz grant '%s' --admin)", id.Name, id.Name)
	}
	return recheck, nil
}

// AdminUnaryInterceptor refuses the calls of the methods named in admin
// (full method names) to clients that are not admins (Admin).
func (g *Guard) AdminUnaryInterceptor(admin ...string) grpc.UnaryServerInterceptor {
	set := toSet(admin)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if set[info.FullMethod] {
			if err := g.Admin(ctx); err != nil {
				return nil, err
			}
		}
		return handler(ctx, req)
	}
}

func toSet(l []string) map[string]bool {
	m := make(map[string]bool, len(l))
	for _, s := range l {
		m[s] = true
	}
	return m
}

// HTTP attaches the identity of each request's client (its verified
// certificate, and whether it is on loopback) to the request's context
// for the handlers under h.
func (g *Guard) HTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := Identity{Loopback: isLoopbackAddr(r.RemoteAddr)}
		if r.TLS != nil {
			id.Name, _ = tlsfiles.PeerIdentity(*r.TLS)
		}
		h.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// AdminHTTP lets only admins reach h (Admin), answering 401 or 403
// otherwise. The request must have passed through HTTP.
func (g *Guard) AdminHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := g.Admin(r.Context()); err != nil {
			code := http.StatusForbidden
			if status.Code(err) == codes.Unauthenticated {
				code = http.StatusUnauthorized
			} else if status.Code(err) == codes.Unavailable {
				code = http.StatusServiceUnavailable
			}
			http.Error(w, status.Convert(err).Message(), code)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// MTLS reports whether clients are authenticated by certificates.
func (g *Guard) MTLS() bool { return g.cfg.MTLS }

func isLoopback(a net.Addr) bool {
	if a == nil {
		return false
	}
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.IsLoopback()
	}
	return isLoopbackAddr(a.String())
}

func isLoopbackAddr(hostport string) bool {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil {
		return false
	}
	return ap.Addr().Unmap().IsLoopback()
}
