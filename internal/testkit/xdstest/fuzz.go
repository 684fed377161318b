package xdstest

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/resource"
)

// AddSeqSeeds adds each sequence of up to three requests to f's corpus,
// encoded, as the (a, b, c []byte) inputs of a fuzz target over request
// sequences (ads's FuzzStreamRequests, delta's FuzzDeltaRequests).
func AddSeqSeeds[M proto.Message](f *testing.F, seqs ...[]M) {
	f.Helper()
	for _, seq := range seqs {
		var enc [3][]byte
		for i, m := range seq {
			b, err := proto.Marshal(m)
			if err != nil {
				f.Fatal(err)
			}
			enc[i] = b
		}
		f.Add(enc[0], enc[1], enc[2])
	}
}

// DecodeSeq decodes the fuzz inputs raws as requests made by newM,
// leaving out those that are empty or do not decode.
func DecodeSeq[M proto.Message](newM func() M, raws ...[]byte) []M {
	var seq []M
	for _, raw := range raws {
		m := newM()
		if len(raw) == 0 || proto.Unmarshal(raw, m) != nil {
			continue
		}
		seq = append(seq, m)
	}
	return seq
}

// ProbeType returns the first type, in push order, whose URL none of the
// requests asks for: a sequence's probe, whose answer says the server has
// taken what came before (nil if every type is asked), and the URLs
// asked, the probe's included. Only the types both protocols serve are
// probes (resource.SotW).
func ProbeType[M interface{ GetTypeUrl() string }](seq []M) (*resource.Type, map[string]bool) {
	asked := map[string]bool{}
	for _, m := range seq {
		asked[m.GetTypeUrl()] = true
	}
	for _, typ := range resource.SotW() {
		if !asked[typ.URL] {
			asked[typ.URL] = true
			return typ, asked
		}
	}
	return nil, asked
}
