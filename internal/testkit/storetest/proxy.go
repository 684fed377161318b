package storetest

import (
	"testing"

	"github.com/legation-io/legation/internal/tools/faultnet"
)

// Proxy forwards TCP connections from a loopback port to a target, and can
// cut them: a way to make a client lose etcd without stopping etcd. It is
// a faultnet.Proxy (Proxy.Fault has the other modes: delay, blackhole).
type Proxy struct {
	Addr string
	// Fault is the proxy itself, for modes other than Cut's.
	Fault *faultnet.Proxy
}

// NewProxy listens on 127.0.0.1 and forwards to target until the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := faultnet.Listen("127.0.0.1:0", target)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return &Proxy{Addr: p.Addr(), Fault: p}
}

// Cut closes every forwarded connection and refuses new ones until Restore.
func (p *Proxy) Cut() { p.Fault.Set(faultnet.Fault{Mode: faultnet.Drop}) }

// Restore accepts connections again.
func (p *Proxy) Restore() { p.Fault.Set(faultnet.Fault{Mode: faultnet.Pass}) }
