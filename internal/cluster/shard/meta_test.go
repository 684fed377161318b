package shard

import (
	"testing"
	"time"
)

func TestMetaRoundTrip(t *testing.T) {
	want := Member{Name: "xds-0", XDSAddr: "10.0.0.1:18000", HTTPAddr: "10.0.0.1:18001", GossipAddr: "10.0.0.1:7946",
		Started: time.Date(2026, 1, 2, 3, 4, 5, 6_000_000, time.UTC), Ready: true, Version: "0.1.0"}
	b := encodeMeta(want)
	got, err := decodeMeta(want.Name, want.GossipAddr, b)
	if err != nil {
		t.Fatalf("decodeMeta(%s): %v", b, err)
	}
	if !got.equal(want) {
		t.Errorf("round trip: got %+v, want %+v", got, want)
	}
	if len(b) > 100 {
		t.Errorf("meta %s is %d bytes; keep it compact", b, len(b))
	}
	for _, bad := range []string{"", "{", `{"v":0,"x":"a:1"}`, `{"v":1}`, `[]`, `{"v":1,"x":"a:1","s":"soon"}`} {
		if m, err := decodeMeta("n", "a:1", []byte(bad)); err == nil {
			t.Errorf("decodeMeta(%q) = %+v, want an error", bad, m)
		}
	}
	// A newer version with fields we do not know still reads.
	if _, err := decodeMeta("n", "a:1", []byte(`{"v":2,"x":"a:1","zone":"eu"}`)); err != nil {
		t.Errorf("decodeMeta of a newer version: %v", err)
	}
}

// FuzzDecodeMeta: gossip meta comes from other processes.
func FuzzDecodeMeta(f *testing.F) {
	f.Add([]byte(`{"v":1,"x":"10.0.0.1:18000","h":"10.0.0.1:18001","s":1767322800000,"r":true}`))
	f.Add([]byte(`{"v":1,"x":"a","s":-9223372036854775808}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta("n", "a:1", b)
		if err == nil && (m.XDSAddr == "" || m.Name != "n") {
			t.Fatalf("decodeMeta(%q) = %+v with no error", b, m)
		}
	})
}

// FuzzDecodeRecord: registry values may be written by any tool.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(`{"name":"n","xds_addr":"10.0.0.1:18000","started":"2026-05-06T07:08:09Z","ready":true}`))
	f.Add([]byte(`{"started":"not a time"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeRecord("/p/members/n", "n", b)
		if err == nil && m.Name != "n" {
			t.Fatalf("decodeRecord(%q) = %+v: name not the key's", b, m)
		}
	})
}
