package shard

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Member is one xds-node replica.
type Member struct {
	Name       string    `json:"name"`
	XDSAddr    string    `json:"xds_addr"` // host:port other replicas relay to
	HTTPAddr   string    `json:"http_addr"`
	GossipAddr string    `json:"gossip_addr"` // host:port of memberlist
	Started    time.Time `json:"started"`
	Ready      bool      `json:"ready"` // its view is current (etcd reachable)
	// Version is the Legation version the replica runs (its
	// `xds-node --version`), so that `xdsadmin members` and `xdsadmin
	// version --replicas` show a rolling upgrade's progress. Empty from a
	// replica that does not say.
	Version string `json:"version,omitempty"`
	// Authorities are the xdstp:// authorities the replica serves
	// (`xds-node --authority`), so that `xdsadmin apply` can refuse a
	// name no replica serves. In the registry record only: the gossip
	// meta, bounded to 512 bytes, leaves them out.
	Authorities []string `json:"authorities,omitempty"`
}

// equal reports whether a and b are the same record.
func (a Member) equal(b Member) bool {
	return a.Name == b.Name && a.XDSAddr == b.XDSAddr && a.HTTPAddr == b.HTTPAddr &&
		a.GossipAddr == b.GossipAddr && a.Started.Equal(b.Started) && a.Ready == b.Ready && a.Version == b.Version &&
		slices.Equal(a.Authorities, b.Authorities)
}

// metaVersion is the version of the gossip meta encoding. A replica that
// reads a newer version it does not know still reads the fields it knows.
const metaVersion = 1

// meta is a Member as it travels in memberlist's node meta, which is limited
// to 512 bytes (memberlist.MetaMaxSize): short keys, and no name or gossip
// address, which memberlist already carries with every node.
type meta struct {
	V int    `json:"v"`
	X string `json:"x"`           // XDSAddr
	H string `json:"h,omitempty"` // HTTPAddr
	S int64  `json:"s"`           // Started, Unix milliseconds
	R bool   `json:"r,omitempty"` // Ready
	L string `json:"l,omitempty"` // Version (Legation's)
}

func encodeMeta(m Member) []byte {
	b, err := json.Marshal(meta{V: metaVersion, X: m.XDSAddr, H: m.HTTPAddr, S: m.Started.UnixMilli(), R: m.Ready, L: m.Version})
	if err != nil {
		// meta holds strings, an int and a bool: Marshal cannot fail.
		panic(fmt.Sprintf("shard: encode meta: %v", err))
	}
	return b
}

var errNoMeta = errors.New("shard: member has no meta")

// decodeMeta reads the record of the member called name, at gossipAddr,
// from its gossip meta. It never panics on any input.
func decodeMeta(name, gossipAddr string, b []byte) (Member, error) {
	if len(b) == 0 {
		return Member{}, errNoMeta
	}
	var mt meta
	if err := json.Unmarshal(b, &mt); err != nil {
		return Member{}, fmt.Errorf("shard: meta of %s: %w", name, err)
	}
	if mt.V < 1 {
		return Member{}, fmt.Errorf("shard: meta of %s: bad version %d", name, mt.V)
	}
	if mt.X == "" {
		return Member{}, fmt.Errorf("shard: meta of %s: no xDS address", name)
	}
	return Member{
		Name:       name,
		XDSAddr:    mt.X,
		HTTPAddr:   mt.H,
		GossipAddr: gossipAddr,
		Started:    time.UnixMilli(mt.S).UTC(),
		Ready:      mt.R,
		Version:    mt.L,
	}, nil
}
