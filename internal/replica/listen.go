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
	// Dead peers are found by the kernel (Config.KeepaliveTime): a probe
	// after KeepaliveTime of silence, the connection closed when none is
	// answered within KeepaliveTimeout. One probe, answered or not, is
	// the verdict, as one HTTP/2 ping would be.
	lc := net.ListenConfig{KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: cfg.KeepaliveTime, Interval: cfg.KeepaliveTimeout, Count: 1,
	}}
	var err error
	if n.xdsLis, err = lc.Listen(context.Background(), "tcp", cfg.XDSAddr); err != nil {
		return fmt.Errorf("node: --xds-addr: %w", err)
	}
	n.xdsConns = newConnTracker(n.xdsLis, cfg.KeepaliveTime+cfg.KeepaliveTimeout, cfg.MaxConnections, n.log)
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
