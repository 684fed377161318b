package sotw

import (
	"strings"
	"testing"
)

// TestRESTCacheCountsKeys: the cache's byte budget counts its keys, which
// name every name a poll asked for and may dwarf the bodies: past the
// budget a poll is encoded and not kept, however small its body.
func TestRESTCacheCountsKeys(t *testing.T) {
	encodes := 0
	var size float64
	c := restCache{maxBytes: 1000, size: func(n float64) { size = n }}
	get := func(key string) {
		t.Helper()
		body, err := c.get(1, key, func() ([]byte, error) { encodes++; return []byte("{}"), nil })
		if err != nil || string(body) != "{}" {
			t.Fatalf("get: %q, %v", body, err)
		}
	}
	a, b := strings.Repeat("a", 600), strings.Repeat("b", 600)
	get(a)
	get(a)
	if encodes != 1 || size != 602 {
		t.Fatalf("a key of 600 bytes: %d encodes, %v bytes held; want 1 and 602 (key and body)", encodes, size)
	}
	get(b)
	get(b)
	if encodes != 3 || size != 602 {
		t.Errorf("a second key of 600 bytes past a budget of 1000: %d encodes, %v bytes held; want 3 (not kept) and 602", encodes, size)
	}
	get(a)
	if encodes != 3 {
		t.Errorf("the first key: encoded again (%d encodes)", encodes)
	}
}
