//go:build !linux

package localcluster

import "net"

// socketOwner is 0 off Linux: there is no /proc to name a socket's owner,
// so a gossip partition drops UDP only.
func socketOwner(*net.TCPAddr, []int) int { return 0 }
