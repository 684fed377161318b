package xdstest

import (
	"time"

	"github.com/legation-io/legation/internal/state/lease"
)

// DebugStreams is the body of a replica's /debug/streams (served by
// internal/replica) as a test reads it: every open stream, SotW and delta.
// The types mirror the JSON, not the servers' own types, so that a test
// reading it needs neither internal/xds/sotw nor internal/xds/delta.
type DebugStreams struct {
	Streams      []SotWStatus  `json:"streams"`
	DeltaStreams []DeltaStatus `json:"delta_streams"`
}

// SotWStatus is one SotW stream of /debug/streams.
type SotWStatus struct {
	ID          uint64                     `json:"id"`
	NodeID      string                     `json:"node_id"`
	Group       string                     `json:"group"`
	Protocol    string                     `json:"protocol"`
	ConnectedAt time.Time                  `json:"connected_at"`
	Types       map[string]*SotWTypeStatus `json:"types"`
	// TTLResources are the resources the client holds with a TTL.
	TTLResources []lease.TTLStatus `json:"ttl_resources"`
}

// SotWTypeStatus is one type of a SotW stream: versions sent and ACKed,
// the last NACK.
type SotWTypeStatus struct {
	VersionSent  string `json:"version_sent"`
	VersionAcked string `json:"version_acked"`
	Nonce        string `json:"nonce"`
	NackVersion  string `json:"nack_version"`
	LastNack     string `json:"last_nack"`
	Wildcard     bool   `json:"wildcard"`
	Subscribed   int    `json:"subscribed_names"`
	Resources    int    `json:"resources"`
}

// DeltaStatus is one delta stream of /debug/streams.
type DeltaStatus struct {
	ID           uint64                      `json:"id"`
	NodeID       string                      `json:"node_id"`
	Group        string                      `json:"group"`
	Protocol     string                      `json:"protocol"`
	ConnectedAt  time.Time                   `json:"connected_at"`
	Types        map[string]*DeltaTypeStatus `json:"types"`
	TTLResources []lease.TTLStatus           `json:"ttl_resources"`
}

// DeltaTypeStatus is one type of a delta stream.
type DeltaTypeStatus struct {
	SystemVersionSent  string `json:"system_version_sent"`
	SystemVersionAcked string `json:"system_version_acked"`
	// Outstanding is the nonce of a response not ACKed yet.
	Outstanding string `json:"outstanding_nonce"`
	NackVersion string `json:"nack_version"`
	LastNack    string `json:"last_nack"`
	Wildcard    bool   `json:"wildcard"`
	Subscribed  int    `json:"subscribed_names"`
	// Held counts the resources the client holds.
	Held int `json:"resources"`
	// Resources are the versions sent and ACKed per resource name.
	Resources map[string]ResourceStatus `json:"resource_versions"`
}

// ResourceStatus is one resource of a delta stream's type.
type ResourceStatus struct {
	VersionSent  string `json:"sent"`
	VersionAcked string `json:"acked"`
}
