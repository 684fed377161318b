package ads

import (
	"sync"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	protobuf "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// wireResponse is a DiscoveryResponse already encoded: a body shared by
// every stream that sends the same thing, and the stream's own nonce.
// Protobuf fields may come in any order, so body+nonce is a valid message.
type wireResponse struct {
	body []byte // version_info, resources, type_url: shared, never modified
	tail []byte // field 5 (nonce): this stream's
}

func newWireResponse(body []byte, nonce string) *wireResponse {
	tail := protowire.AppendTag(make([]byte, 0, len(nonce)+2), 5, protowire.BytesType)
	tail = protowire.AppendString(tail, nonce)
	return &wireResponse{body: body, tail: tail}
}

// Codec is the gRPC codec xds-node's server must use
// (grpc.ForceServerCodecV2(ads.Codec{})): it sends a wireResponse's bytes
// as they are and hands every other message to the standard proto codec.
type Codec struct{}

var protoCodec = encoding.GetCodecV2(proto.Name)

// Marshal implements encoding.CodecV2.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(*wireResponse); ok {
		return mem.BufferSlice{mem.SliceBuffer(w.body), mem.SliceBuffer(w.tail)}, nil
	}
	return protoCodec.Marshal(v)
}

// Unmarshal implements encoding.CodecV2.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error { return protoCodec.Unmarshal(data, v) }

// Name implements encoding.CodecV2.
func (Codec) Name() string { return proto.Name }

// bodyCache shares encoded response bodies among streams. It holds the
// bodies of one view revision; a newer revision replaces them.
type bodyCache struct {
	mu  sync.Mutex // guards rev, m
	rev int64
	m   map[string]*cachedBody

	encodes func() // called once per body encoded (a metric)
}

type cachedBody struct {
	once sync.Once
	body []byte
	err  error
}

// get returns the body for key at rev, encoding it with build the first
// time. Bodies of other revisions are encoded without caching.
func (c *bodyCache) get(rev int64, key string, build func() *discoveryv3.DiscoveryResponse) ([]byte, error) {
	c.mu.Lock()
	if rev > c.rev {
		c.rev, c.m = rev, map[string]*cachedBody{}
	}
	var cb *cachedBody
	if rev == c.rev {
		cb = c.m[key]
		if cb == nil {
			cb = &cachedBody{}
			c.m[key] = cb
		}
	} else {
		cb = &cachedBody{}
	}
	c.mu.Unlock()
	cb.once.Do(func() {
		cb.body, cb.err = protobuf.Marshal(build())
		c.encodes()
	})
	return cb.body, cb.err
}

// encodeUncached encodes a body that no other stream shares.
func (c *bodyCache) encodeUncached(r *discoveryv3.DiscoveryResponse) ([]byte, error) {
	c.encodes()
	return protobuf.Marshal(r)
}

func anys(n int) []*anypb.Any { return make([]*anypb.Any, 0, n) }
