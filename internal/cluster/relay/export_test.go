package relay

import "google.golang.org/grpc/connectivity"

// PooledConns returns how many connections to home replicas r holds.
func PooledConns(r *Relay) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// PooledConnState returns the state of r's pooled connection to addr, and
// whether there is one.
func PooledConnState(r *Relay, addr string) (connectivity.State, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pc := r.conns[addr]
	if pc == nil {
		return 0, false
	}
	return pc.cc.GetState(), true
}
