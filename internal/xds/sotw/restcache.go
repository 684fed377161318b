package sotw

import (
	"cmp"
	"slices"
	"strings"
	"sync"

	"github.com/legation-io/legation/internal/state/resource"
)

// REST-JSON bodies are cached: a poll at an unchanged revision, by any
// client of the same group asking for the same names, is answered with the
// bytes encoded for the first, after its own authorization (Fetch checks
// every poll before it reaches the cache).

const (
	// restCacheEntries bounds the bodies cached: distinct (type, group,
	// names) polls at the latest revision. Beyond it a poll is encoded
	// uncached.
	restCacheEntries = 256
	// restCacheBytes bounds the bytes of the keys and bodies cached: a
	// body is cached while the bytes held are below it.
	restCacheBytes = 64 << 20
)

// restCache holds the protojson bodies of the latest revision polled; a
// newer revision drops them all, so a body of an older one is never
// served. Its methods may be called concurrently.
type restCache struct {
	// maxEntries and maxBytes bound the cache; zero: restCacheEntries and
	// restCacheBytes.
	maxEntries, maxBytes int

	mu  sync.Mutex // guards rev, m, bytes
	rev int64
	m   map[string]*restBody // restKey -> body at rev
	// bytes counts the keys and bodies in m: a key names every name a
	// poll asked for, and may be larger than its body.
	bytes int

	encoded func()        // if set, called once per body encoded (a metric)
	size    func(float64) // if set, told bytes whenever it changes (a metric)
}

type restBody struct {
	once sync.Once
	body []byte
	err  error
}

// restKey names what a poll's body depends on beside the revision: its
// type, the node's scope chain (its group, and the canary overlays it
// sees), the set of names asked for ("" for a wildcard poll;
// order and repeats do not matter, as scope.Entries sorts and dedupes),
// and whether resources carrying an inline private key are left out.
func restKey(t *resource.Type, chain string, names []string, wildcard, keysOK bool) string {
	var b strings.Builder
	b.WriteString(t.Name)
	b.WriteByte(0)
	b.WriteString(chain)
	b.WriteByte(0)
	if !keysOK {
		b.WriteByte('K')
	}
	if !wildcard {
		b.WriteByte('N')
		sorted := slices.Clone(names)
		slices.Sort(sorted)
		for i, n := range sorted {
			if i > 0 && n == sorted[i-1] {
				continue
			}
			b.WriteByte(0)
			b.WriteString(n)
		}
	}
	return b.String()
}

// get returns the body of key at rev, encoding it with encode the first
// time; concurrent callers for one key wait for one encoding. A body of
// an older revision than the latest asked for, or one over the bounds, is
// encoded and not kept.
func (c *restCache) get(rev int64, key string, encode func() ([]byte, error)) ([]byte, error) {
	maxEntries, maxBytes := cmp.Or(c.maxEntries, restCacheEntries), cmp.Or(c.maxBytes, restCacheBytes)
	c.mu.Lock()
	if rev > c.rev {
		c.rev, c.m = rev, map[string]*restBody{}
		c.setBytes(0)
	}
	var b *restBody
	cached := false
	if rev == c.rev {
		if b = c.m[key]; b != nil {
			cached = true
		} else if len(c.m) < maxEntries && c.bytes+len(key) <= maxBytes {
			b = &restBody{}
			c.m[key] = b
			c.setBytes(c.bytes + len(key))
			cached = true
		}
	}
	if b == nil {
		b = &restBody{}
	}
	c.mu.Unlock()
	built := false
	b.once.Do(func() {
		built = true
		b.body, b.err = encode()
		if c.encoded != nil {
			c.encoded()
		}
	})
	if built && cached {
		c.mu.Lock()
		if c.m[key] == b { // not dropped by a newer revision meanwhile
			if b.err != nil {
				delete(c.m, key) // an error is not kept: the next poll tries again
				c.setBytes(c.bytes - len(key))
			} else {
				c.setBytes(c.bytes + len(b.body))
			}
		}
		c.mu.Unlock()
	}
	return b.body, b.err
}

// setBytes sets bytes to n and tells size. c.mu is held.
func (c *restCache) setBytes(n int) {
	c.bytes = n
	if c.size != nil {
		c.size(float64(n))
	}
}
