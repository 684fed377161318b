package replica

import (
	"fmt"
	"io"
	"strings"
)

// etcdInsecurity says what leaves the connection to etcd open, outside
// dev mode: no TLS (an eavesdropper reads and a man in the middle
// rewrites the resources and the authorization rules), or no
// authentication (neither a client certificate nor a username: etcd lets
// in whoever reaches it, if its auth is off, which is the only way such a
// client works). Empty when TLS and authentication are both on, and in dev
// mode, whose embedded etcd is plain text on purpose.
func (c *Config) etcdInsecurity() string {
	if c.DevMode() {
		return ""
	}
	eo := c.etcdOptions()
	var why []string
	if !eo.UseTLS() {
		why = append(why, "no TLS (http:// endpoints, no --etcd-cacert or --etcd-cert): anyone on the path reads and rewrites resources and authorization rules")
	}
	if c.EtcdSecurity.Cert == "" && c.EtcdSecurity.Username == "" {
		why = append(why, "no authentication (no --etcd-cert, no --etcd-username): an etcd that lets this replica in without credentials lets in anyone who reaches it")
	}
	if len(why) == 0 {
		return ""
	}
	return "etcd: " + strings.Join(why, "; ") + " (docs/operations/etcd.md)"
}

// warnEtcdInsecure logs etcdInsecurity at error level, once at start: the
// risk is the configuration's, and /readyz repeats it for whoever looks.
func (n *Node) warnEtcdInsecure() {
	if why := n.cfg.etcdInsecurity(); why != "" {
		n.log.Error("INSECURE " + why)
	}
}

// writeEtcdWarning adds etcdInsecurity to a /readyz answer, on a line of
// its own after the status line, which it does not change.
func (n *Node) writeEtcdWarning(w io.Writer) {
	if why := n.cfg.etcdInsecurity(); why != "" {
		fmt.Fprintf(w, "warning: INSECURE %s\n", why)
	}
}
