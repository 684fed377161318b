// Package tlsfiles owns the TLS material a process reads from PEM files: a
// certificate and its key, and a CA bundle. New loads and checks them; Run
// polls the files and swaps in new material when their content changes,
// keeping the last good material while the files hold something broken
// (a half-written rotation, a typo). ServerConfig and ClientConfig return
// *tls.Config values that read the current material at each new handshake,
// so a rotation never touches a connection already open.
//
// The package also defines a certificate's identity (Identity,
// PeerIdentity), typed by where it comes from: its SPIFFE URI SAN
// ("spiffe://TD/PATH"), else "dns:" and its first DNS SAN, else "cn:" and
// its Subject CommonName, so that only a URI SAN ever yields a SPIFFE ID;
// and checks SPIFFE IDs (ValidateSPIFFE) against the SPIFFE ID and
// X509-SVID specifications.
//
// It does not decide what an identity may do (that is authorization, the
// caller's), it does not listen or dial, and it does not fetch
// certificates from anywhere but files (no SPIFFE Workload API, no ACME).
// It has no dependency beyond the standard library.
package tlsfiles
