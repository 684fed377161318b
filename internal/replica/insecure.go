package replica

// warnInsecure says once, at start, what is not authenticated and which
// risks the operator took by flag (docs/concepts/design.md, "Security": never
// silently insecure).
func (n *Node) warnInsecure() {
	const plainRisk = "clients are not authenticated: any client may claim any node id and group and read CSDS"
	switch {
	case n.tls == nil:
		n.log.Warn("INSECURE: xDS and HTTP are served over plaintext (no --tls-cert-file): " + plainRisk)
	case !n.cfg.MTLS():
		n.log.Warn("INSECURE: TLS without client certificates (no --client-ca-file): " + plainRisk)
	}
	if n.cfg.MTLS() && (n.cfg.InsecureLoopbackSecrets || n.cfg.InsecureLoopbackDebug) {
		n.log.Warn("--insecure-loopback-secrets and --insecure-loopback-debug have no effect with mTLS: " +
			"secrets go to the clients the rules allow, /debug/ to admins")
	}
	// Being on loopback proves nothing about a client: a sidecar, HAProxy
	// or kubectl port-forward on the host makes every client loopback.
	if !n.cfg.MTLS() && n.cfg.InsecureLoopbackSecrets {
		n.log.Warn("INSECURE: --insecure-loopback-secrets: SDS secrets (private keys) are sent to every client on loopback, " +
			"unauthenticated; anyone reaching this replica through a proxy on this host gets them")
	}
	if !n.cfg.MTLS() && n.cfg.InsecureLoopbackDebug {
		n.log.Warn("INSECURE: --insecure-loopback-debug: /debug/ (every node, stream and the cluster's membership) answers every " +
			"client on loopback, unauthenticated; anyone reaching this replica through a proxy on this host reads it")
	}
	if n.cfg.Pprof {
		n.log.Warn("--pprof: Go's profiles are served at /debug/pprof/ (the process's memory, goroutines and command line); "+
			"a CPU profile or trace costs CPU while it runs", "to", n.pprofAudience())
	}
}

// pprofAudience says who /debug/pprof/ answers.
func (n *Node) pprofAudience() string {
	switch {
	case n.cfg.MTLS():
		return "admins"
	case n.cfg.InsecureLoopbackDebug:
		return "loopback clients"
	}
	return "no one (without mTLS it needs --insecure-loopback-debug too)"
}
