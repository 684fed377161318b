package node

import "net/http"

// HTTPHandlerForTest returns the node's HTTP handler, so that tests can
// call it with requests that no client on loopback could make (another
// RemoteAddr) without sending traffic anywhere but to the handler.
func (n *Node) HTTPHandlerForTest() http.Handler { return n.httpSrv.Handler }

// SetPanicOnNodeForTest makes the streams of node id panic in their
// handler (xdsstream.Config.PanicOnNode).
func SetPanicOnNodeForTest(cfg *Config, id string) { cfg.panicOnNode = id }
