package localcluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/legation-io/legation/internal/security/authz"
	"github.com/legation-io/legation/internal/security/etcdauth"
	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/testkit/testcerts"
)

// The identities of a secure cluster's certificates (Config.Secure):
// SPIFFE ids in the trust domain legation.test.
const (
	// ReplicaIdentity is every replica's: relay markers are trusted from
	// it (xds-node's --replica-identity default, its own certificate's).
	ReplicaIdentity = "spiffe://legation.test/replica"
	// AdminIdentity is granted admin (xdsadmin authz grant --admin):
	// CSDS and /debug/. The cluster's own HTTP probes present it.
	AdminIdentity = "spiffe://legation.test/admin"
	// ClientIdentity may claim any node of any group (--nodes '*'
	// --groups '*'): the certificate of the tests' xDS clients.
	ClientIdentity = "spiffe://legation.test/client"
)

// The etcd roles of docs/operations/etcd.md's least privilege, and the etcd
// users of a secure cluster: each the CN of a client certificate (etcd's
// --client-cert-auth), with the role of the same name.
const (
	RoleReplica  = etcdauth.RoleReplica
	RoleAdmin    = etcdauth.RoleAdmin
	RoleRollouts = etcdauth.RoleRollouts
	// etcdRoot is the root user, which sets up the others.
	etcdRoot = "root"
)

// AddRoles adds RoleReplica, RoleAdmin and RoleRollouts on prefix with
// root, a client of an etcd whose auth is not enabled yet (or of its root
// user), with the grants of etcdauth.Grants: RoleReplica reads all of
// prefix and writes the status records, the membership registry, the
// elections and the load windows (LRS); RoleRollouts writes what the
// rollout controller writes; RoleAdmin reads and writes all of prefix.
// It fails if a role exists already (etcdauth.Setup is the idempotent
// way).
func AddRoles(ctx context.Context, root *clientv3.Client, prefix string) error {
	for _, role := range []string{RoleReplica, RoleAdmin, RoleRollouts} {
		if _, err := root.RoleAdd(ctx, role); err != nil {
			return fmt.Errorf("localcluster: etcd role %s: %w", role, err)
		}
	}
	for _, g := range etcdauth.Grants(prefix) {
		if _, err := root.RoleGrantPermission(ctx, g.Role, g.Key, clientv3.GetPrefixRangeEnd(g.Key), g.Perm); err != nil {
			return fmt.Errorf("localcluster: etcd role %s on %s: %w", g.Role, g.Key, err)
		}
	}
	return nil
}

// CertFiles are a certificate and its key, PEM files.
type CertFiles struct {
	CertFile, KeyFile string
}

// Security is the PKI of a secure cluster (Config.Secure), made in
// Dir/pki when the cluster first starts anything, anew for each Cluster:
// one CA signs every certificate, servers' and clients'. Its files stay
// in place while the cluster runs.
type Security struct {
	// Dir is where the files are: Dir/pki.
	Dir string
	// CAFile is the CA's certificate: every server (etcd, replicas) and
	// client trusts it.
	CAFile string
	// Admin is AdminIdentity's certificate, for xDS (CSDS) and HTTP
	// (/debug/).
	Admin CertFiles
	// Client is ClientIdentity's certificate, for xDS clients.
	Client CertFiles
	// EtcdAdmin (CN legation-admin) and EtcdReplica (CN
	// legation-replica) are the etcd client certificates of xdsadmin and
	// of the replicas.
	EtcdAdmin, EtcdReplica CertFiles
	// GossipKeyFile is the replicas' gossip keyring (--gossip-key-file).
	GossipKeyFile string

	ca        *testcerts.CA
	etcdRoot  CertFiles
	adminPair tls.Certificate
	pool      *x509.CertPool

	mu       sync.Mutex           // guards replicas
	replicas map[string]CertFiles // by replica name: issued as they start
}

// newSecurity makes the CA, the clients' certificates, the etcd members'
// server certificates and the gossip key in dir.
func newSecurity(dir, prefix string, members int) (*Security, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	ca, err := testcerts.NewCA(dir, "legation")
	if err != nil {
		return nil, fmt.Errorf("localcluster: CA: %w", err)
	}
	s := &Security{Dir: dir, CAFile: ca.CertFile, ca: ca, replicas: map[string]CertFiles{}}
	s.pool = x509.NewCertPool()
	s.pool.AddCert(ca.Cert)
	issue := func(name string, o testcerts.Options) (CertFiles, *testcerts.Cert, error) {
		c, err := ca.Issue(dir, name, o)
		if err != nil {
			return CertFiles{}, nil, fmt.Errorf("localcluster: certificate %s: %w", name, err)
		}
		return CertFiles{c.CertFile, c.KeyFile}, c, nil
	}
	var admin *testcerts.Cert
	if s.Admin, admin, err = issue("admin", testcerts.Options{URIs: []string{AdminIdentity}}); err != nil {
		return nil, err
	}
	if s.adminPair, err = admin.TLS(); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	if s.Client, _, err = issue("client", testcerts.Options{URIs: []string{ClientIdentity}}); err != nil {
		return nil, err
	}
	if s.EtcdAdmin, _, err = issue("etcd-admin", testcerts.Options{CommonName: RoleAdmin}); err != nil {
		return nil, err
	}
	if s.EtcdReplica, _, err = issue("etcd-replica", testcerts.Options{CommonName: RoleReplica}); err != nil {
		return nil, err
	}
	if s.etcdRoot, _, err = issue("etcd-root", testcerts.Options{CommonName: etcdRoot}); err != nil {
		return nil, err
	}
	for i := 1; i <= members; i++ {
		// etcd also dials its own client URL (its gRPC gateway): its
		// certificate serves clients and is a client's.
		if _, _, err = issue("etcd-"+strconv.Itoa(i)+"-server", testcerts.Options{
			CommonName: "etcd-" + strconv.Itoa(i), IPs: []net.IP{net.ParseIP(etcdIP(prefix, i))},
		}); err != nil {
			return nil, err
		}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("localcluster: gossip key: %w", err)
	}
	s.GossipKeyFile = filepath.Join(dir, "gossip.keys")
	if err := os.WriteFile(s.GossipKeyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	return s, nil
}

// etcdServerFiles are the server certificate files of etcd member i in
// dir, newSecurity's.
func etcdServerFiles(dir string, i int) CertFiles {
	name := filepath.Join(dir, "etcd-"+strconv.Itoa(i)+"-server")
	return CertFiles{name + ".pem", name + "-key.pem"}
}

// replica returns the certificate of the replica called name on ip,
// issuing it the first time: ReplicaIdentity, with ip and HAProxy's
// address lbIP as IP SANs (clients dial a replica through HAProxy, other
// replicas dial it directly).
func (s *Security) replica(name, ip, lbIP string) (CertFiles, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.replicas[name]; ok {
		return f, nil
	}
	c, err := s.ca.Issue(s.Dir, name, testcerts.Options{
		URIs: []string{ReplicaIdentity},
		IPs:  []net.IP{net.ParseIP(ip), net.ParseIP(lbIP)},
	})
	if err != nil {
		return CertFiles{}, fmt.Errorf("localcluster: certificate of %s: %w", name, err)
	}
	f := CertFiles{c.CertFile, c.KeyFile}
	s.replicas[name] = f
	return f, nil
}

// Issue issues one more certificate, to dir/name.pem and dir/name-key.pem
// (for a client of another identity, say).
func (s *Security) Issue(name string, o testcerts.Options) (CertFiles, error) {
	c, err := s.ca.Issue(s.Dir, name, o)
	if err != nil {
		return CertFiles{}, fmt.Errorf("localcluster: certificate %s: %w", name, err)
	}
	return CertFiles{c.CertFile, c.KeyFile}, nil
}

// TLS returns the config of a client presenting f (none if zero) and
// trusting the CA. Its ServerName is left empty: the address dialled is
// checked against the server's IP SANs.
func (s *Security) TLS(f CertFiles) (*tls.Config, error) {
	cfg := &tls.Config{RootCAs: s.pool, MinVersion: tls.VersionTLS12}
	if f != (CertFiles{}) {
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("localcluster: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// AdminTLS is the config of a client presenting the admin certificate:
// for /debug/ and CSDS.
func (s *Security) AdminTLS() *tls.Config {
	return &tls.Config{RootCAs: s.pool, MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{s.adminPair}}
}

// ClientTLS is the config of an xDS client presenting the Client
// certificate.
func (s *Security) ClientTLS() (*tls.Config, error) { return s.TLS(s.Client) }

// XDSAdminArgs are xdsadmin's etcd flags for the cluster's etcd as
// legation-admin (after --etcd-endpoints).
func (s *Security) XDSAdminArgs() []string {
	return []string{"--etcd-cacert", s.CAFile, "--etcd-cert", s.EtcdAdmin.CertFile, "--etcd-key", s.EtcdAdmin.KeyFile}
}

// replicaArgs are the security flags of the replica whose certificate is
// f.
func (s *Security) replicaArgs(f CertFiles) []string {
	return []string{
		"--tls-cert-file", f.CertFile, "--tls-key-file", f.KeyFile, "--client-ca-file", s.CAFile,
		"--gossip-key-file", s.GossipKeyFile,
		"--etcd-cacert", s.CAFile, "--etcd-cert", s.EtcdReplica.CertFile, "--etcd-key", s.EtcdReplica.KeyFile,
	}
}

// etcdClient is a client of endpoints presenting f.
func (s *Security) etcdClient(endpoints []string, f CertFiles) (*clientv3.Client, error) {
	tc, err := s.TLS(f)
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tc, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("localcluster: etcd client: %w", err)
	}
	return cli, nil
}

// setUpEtcd makes the cluster's etcd least privilege, once: the roles
// (AddRoles), a user per client certificate CN with its role, root, and
// auth enabled. Then, as legation-admin, it writes the authorization
// rules: AdminIdentity an admin, ClientIdentity any node of any group.
// On an etcd whose auth is enabled already (a restart) it only writes
// the rules.
func (s *Security) setUpEtcd(ctx context.Context, endpoints []string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	root, err := s.etcdClient(endpoints, s.etcdRoot)
	if err != nil {
		return err
	}
	defer root.Close()
	st, err := root.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("localcluster: etcd auth status: %w", err)
	}
	if !st.Enabled {
		if err := AddRoles(ctx, root, keyspace.DefaultPrefix); err != nil {
			return err
		}
		// The replicas run the rollout controller (on by default).
		for _, u := range []struct{ name, role string }{{RoleReplica, RoleReplica}, {RoleReplica, RoleRollouts}, {RoleAdmin, RoleAdmin}, {etcdRoot, "root"}} {
			if _, err := root.UserAddWithOptions(ctx, u.name, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
				return fmt.Errorf("localcluster: etcd user %s: %w", u.name, err)
			}
			if _, err := root.UserGrantRole(ctx, u.name, u.role); err != nil {
				return fmt.Errorf("localcluster: etcd user %s, role %s: %w", u.name, u.role, err)
			}
		}
		if _, err := root.AuthEnable(ctx); err != nil {
			return fmt.Errorf("localcluster: etcd auth enable: %w", err)
		}
	}
	admin, err := s.etcdClient(endpoints, s.EtcdAdmin)
	if err != nil {
		return err
	}
	defer admin.Close()
	var errs []error
	for _, r := range []authz.Rule{
		{Identity: AdminIdentity, Admin: true},
		{Identity: ClientIdentity, Nodes: []string{"*"}, Groups: []string{"*"}},
	} {
		if err := authz.Grant(ctx, admin, keyspace.DefaultPrefix, r); err != nil {
			errs = append(errs, fmt.Errorf("localcluster: authz grant %s: %w", r.Identity, err))
		}
	}
	return errors.Join(errs...)
}
