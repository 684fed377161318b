package relay

// PooledConns returns how many connections to home replicas r holds.
func PooledConns(r *Relay) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}
