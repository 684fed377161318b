package replica

import (
	"context"
	"fmt"
	"net"
)

// listen binds the xDS, HTTP and probe listeners. On error none is left
// open.
func (n *Node) listen() error {
	cfg := n.cfg
	// Dead peers are found by the kernel (Config.KeepaliveTime): probes
	// after KeepaliveTime of silence, the connection closed when none is
	// answered within KeepaliveTimeout. The xDS port's connections, by
	// the thousand, get theirs from the tracker (connKeepalive), jittered.
	ka := connKeepalive{Idle: cfg.KeepaliveTime, Timeout: cfg.KeepaliveTimeout}
	kc, _ := ka.config(0.5) // no jitter
	lc := net.ListenConfig{KeepAliveConfig: kc}
	var err error
	if n.xdsLis, err = lc.Listen(context.Background(), "tcp", cfg.XDSAddr); err != nil {
		return fmt.Errorf("node: --xds-addr: %w", err)
	}
	n.xdsConns = newConnTracker(n.xdsLis, ka, cfg.MaxConnections, n.log)
	n.xdsLis = n.xdsConns
	if n.httpLis, err = lc.Listen(context.Background(), "tcp", cfg.HTTPAddr); err != nil {
		n.xdsLis.Close()
		return fmt.Errorf("node: --http-addr: %w", err)
	}
	if err := n.listenProbe(lc); err != nil {
		n.xdsLis.Close()
		n.httpLis.Close()
		return err
	}
	return nil
}
