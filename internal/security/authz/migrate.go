package authz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/security/tlsfiles"
)

// The kinds Migrate gives an untyped identity.
const (
	KindDNS = "dns" // the identity was a certificate's DNS SAN
	KindCN  = "cn"  // the identity was a certificate's CommonName
)

// Migration is the rewrite of one rule stored with an identity that does
// not say its kind (ErrUntyped).
type Migration struct {
	// Key is the rule's key and From its identity, as stored.
	Key  string `json:"key"`
	From string `json:"from"`
	// To is the typed identity and NewKey its key (Key(prefix, To)).
	To     string `json:"to"`
	NewKey string `json:"new_key"`
	// Done: the rule was rewritten (false in a dry run).
	Done bool `json:"done"`
	// Err says why the rule was not rewritten; nil when it was (or, in
	// a dry run, would be).
	Err error `json:"-"`
}

// MigrateOptions says which rules Migrate rewrites, and how.
type MigrateOptions struct {
	// Kind is the kind the untyped identities are given: KindDNS or
	// KindCN. Required.
	Kind string
	// Identities, if not empty, limits the rewrite to the rules of these
	// untyped identities (as stored); others are left as they are.
	Identities []string
	// DryRun reports what would be rewritten and writes nothing.
	DryRun bool
}

// Migrate rewrites each rule stored under prefix whose identity does not
// say its kind (a rule written before identities were typed) to the
// identity of kind opts.Kind: "dns:" and the name in lower case, or "cn:"
// and the name as it is, under that identity's key. Each rule is
// rewritten in one etcd transaction that deletes the old key and puts the
// new one, on condition that the old key is unchanged since it was read
// and that the new key holds nothing: a rule changed meanwhile, or an
// identity that already has a typed rule, is left as it is, with Err
// saying why. A rule whose name is not valid for the kind (a CommonName
// with spaces given the DNS kind) is left too. Migrate returns an error
// only when etcd fails or the options are wrong; the migrations are in key
// order.
func Migrate(ctx context.Context, c *clientv3.Client, prefix string, opts MigrateOptions) ([]Migration, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	if opts.Kind != KindDNS && opts.Kind != KindCN {
		return nil, fmt.Errorf("authz: migrate: kind %q: want %q or %q", opts.Kind, KindDNS, KindCN)
	}
	_, bad, _, err := Read(ctx, c, prefix)
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, b := range bad {
		if !errors.Is(b.Err, ErrUntyped) {
			continue
		}
		m, r, ok := planMigration(ctx, c, prefix, b, opts)
		if !ok {
			continue
		}
		if m.Err == nil && !opts.DryRun {
			if m.Err = commitMigration(ctx, c, b, m, r); m.Err != nil && ctx.Err() != nil {
				return out, m.Err
			}
			m.Done = m.Err == nil
		}
		out = append(out, m)
	}
	return out, nil
}

// planMigration reads the untyped rule at b.Key again and returns its
// migration and the rewritten rule; false when opts leaves it out.
func planMigration(ctx context.Context, c *clientv3.Client, prefix string, b BadRule, opts MigrateOptions) (Migration, Rule, bool) {
	m := Migration{Key: b.Key}
	resp, err := c.Get(ctx, b.Key)
	if err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != b.ModRevision {
		m.Err = errors.New("the rule changed while migrating: run the migration again")
		return m, Rule{}, len(opts.Identities) == 0
	}
	var r Rule
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		m.Err = fmt.Errorf("not a rule: %w", err)
		return m, Rule{}, len(opts.Identities) == 0
	}
	m.From = r.Identity
	if len(opts.Identities) > 0 && !slices.Contains(opts.Identities, r.Identity) {
		return m, Rule{}, false
	}
	if k := Key(prefix, r.Identity); k != b.Key {
		m.Err = fmt.Errorf("the key holds the rule of identity %q, whose key is %q: fix or delete it by hand", r.Identity, k)
		return m, Rule{}, true
	}
	if opts.Kind == KindDNS {
		r.Identity = tlsfiles.DNSPrefix + strings.ToLower(r.Identity)
	} else {
		r.Identity = tlsfiles.CNPrefix + r.Identity
	}
	m.To, m.NewKey = r.Identity, Key(prefix, r.Identity)
	if err := r.Validate(); err != nil {
		m.Err = fmt.Errorf("not valid as a %s identity: %w", opts.Kind, err)
	}
	return m, r, true
}

// commitMigration deletes b's key and puts r at m.NewKey in one
// transaction, if b's key is as read and m.NewKey holds nothing.
func commitMigration(ctx context.Context, c *clientv3.Client, b BadRule, m Migration, r Rule) error {
	v, err := encode(r)
	if err != nil {
		return err
	}
	resp, err := c.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(b.Key), "=", b.ModRevision),
			clientv3.Compare(clientv3.CreateRevision(m.NewKey), "=", 0)).
		Then(clientv3.OpDelete(b.Key), clientv3.OpPut(m.NewKey, v)).
		Else(clientv3.OpGet(m.NewKey, clientv3.WithCountOnly())).
		Commit()
	if err != nil {
		return fmt.Errorf("authz: migrate %s: %w", b.Key, err)
	}
	if resp.Succeeded {
		return nil
	}
	if rr := resp.Responses[0].GetResponseRange(); rr != nil && rr.Count > 0 {
		return fmt.Errorf("identity %q already has a rule at %s: merge the two by hand (xdsadmin authz grant), "+
			"then delete the old one (xdsadmin authz revoke --untyped %q)", m.To, m.NewKey, m.From)
	}
	return errors.New("the rule changed while migrating: run the migration again")
}
