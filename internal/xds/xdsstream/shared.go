package xdsstream

import (
	"strconv"
	"sync"

	"github.com/legation-io/legation/internal/state/view"
)

// SharedSets shares what streams hold among the streams in the same
// state: streams holding the same set S that send the same response
// (named by its body's cache key, which names its content exactly) hold
// the same set after it, built once. Entries are kept for one view
// revision, as the body cache's are: a newer revision replaces them (the
// sets live on in the streams that hold them). The zero value is ready to
// use; its methods may be called concurrently.
type SharedSets[S any] struct {
	mu  sync.Mutex // guards rev, m
	rev int64
	m   map[sharedKey[S]]*sharedNext[S]
}

type sharedKey[S any] struct {
	from *S     // nil: the empty set
	key  string // the response's body key
}

// sharedNext is the set after a response; once builds it.
type sharedNext[S any] struct {
	once sync.Once
	set  *S
}

// Next returns the set that from (nil: the empty set, as for a response
// that replaces the set) becomes after the response whose body key is
// key, sent at revision rev: the one other streams in the same
// state share, or, for a revision older than the table's, one of the
// stream's own. build makes it when no stream has yet.
func (c *SharedSets[S]) Next(rev int64, from *S, key string, build func() *S) *S {
	c.mu.Lock()
	if rev > c.rev || c.m == nil {
		c.rev, c.m = rev, map[sharedKey[S]]*sharedNext[S]{}
	}
	var n *sharedNext[S]
	if rev == c.rev {
		k := sharedKey[S]{from: from, key: key}
		if n = c.m[k]; n == nil {
			n = &sharedNext[S]{}
			c.m[k] = n
		}
	}
	c.mu.Unlock()
	if n == nil {
		return build()
	}
	n.once.Do(func() { n.set = build() })
	return n.set
}

// AppendEntryKey appends e's part of a body key to b:
// "\x00<scope>/<name>@<mod revision>". A push builds one key per stream;
// appending the parts to one buffer costs one allocation for the key, not
// one per part.
func AppendEntryKey(b []byte, e *view.Entry) []byte {
	b = append(b, 0)
	b = append(b, e.Scope...)
	b = append(b, '/')
	b = append(b, e.Name...)
	b = append(b, '@')
	return strconv.AppendInt(b, e.ModRevision, 10)
}
